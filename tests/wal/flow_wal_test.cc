// Flows in the log (docs/wal-format.md, "Flows"): an enqueue_flow is one kFlowEnqueued record
// whose members are its queue creations and enqueues. It round-trips through the codec, replays
// to the same state, survives a restart, and a torn tail inside it drops the whole flow.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/clock.h"
#include "engine/engine.h"
#include "tests/wal/recovery_test_util.h"
#include "tests/wal/wal_test_util.h"
#include "wal/effect_codec.h"
#include "wal/log_format.h"

namespace sundial::wal::test {
namespace {

const std::string kDir = "data";

// The encodings of the effects the log would write (derived ones are not logged).
class EncodingSink final : public EffectSink {
 public:
  void OnEffect(const Effect& effect) override {
    if (effect.derived) return;
    EncodeEffect(effect, &encoded.emplace_back());
  }
  std::vector<std::string> encoded;
};

FlowNode Node(std::string queue, std::string id, std::vector<FlowNode> children = {}) {
  FlowNode n;
  n.queue = std::move(queue);
  n.item.id = std::move(id);
  n.item.payload = "payload of " + n.item.id;
  n.item.metadata = {{"k", "v"}};
  n.children = std::move(children);
  return n;
}

// root (reports) <- {a (images) <- {a1 (thumbs), a2 (thumbs)}, b (texts)}
std::vector<FlowNode> SampleFlow() {
  return {Node(
      "reports", "root",
      {Node("images", "a", {Node("thumbs", "a1"), Node("thumbs", "a2")}), Node("texts", "b")})};
}

TEST(FlowRecord, AFlowIsOneRecordOfItsQueueCreationsAndEnqueues) {
  ManualClock clock(kStartTime);
  EncodingSink sink;
  Engine engine(TestEngineOptions(), &clock, &sink);
  ASSERT_TRUE(engine.CreateQueue("images", {}).ok());
  sink.encoded.clear();
  ASSERT_TRUE(engine.EnqueueFlow(SampleFlow()).ok());
  ASSERT_EQ(sink.encoded.size(), 1u);
  DecodedEffect decoded;
  ASSERT_TRUE(DecodeEffect(sink.encoded[0], &decoded).ok());
  const Effect& group = decoded.effect();
  EXPECT_EQ(group.type, EffectType::kFlowEnqueued);
  EXPECT_TRUE(group.queue.empty());
  ASSERT_NE(group.members, nullptr);
  // Three queues created on demand, five enqueues, children before parents.
  std::vector<std::string> seen;
  for (const Effect& m : *group.members) {
    seen.push_back(std::string(EffectTypeName(m.type)) + " " + std::string(m.queue) + "/" +
                   std::string(m.id));
  }
  EXPECT_EQ(seen,
            (std::vector<std::string>{"queue_created thumbs/", "message_enqueued thumbs/a1",
                                      "message_enqueued thumbs/a2", "message_enqueued images/a",
                                      "queue_created texts/", "message_enqueued texts/b",
                                      "queue_created reports/", "message_enqueued reports/root"}));
  const Effect& root = group.members->back();
  EXPECT_EQ(root.to, MessageState::kWaiting);
  ASSERT_NE(root.depends_on, nullptr);
  EXPECT_EQ(*root.depends_on, (std::vector<std::string>{"images/a", "texts/b"}));
  EXPECT_EQ(root.payload, "payload of root");
  // Re-encoding gives the same bytes.
  EXPECT_EQ(Encode(group), sink.encoded[0]);
}

// docs/wal-format.md, "Flows": flow := count:u32le (length:u32le effect)*count, after the
// header (type 40, time, an empty queue).
TEST(FlowRecord, TheRecordHasTheDocumentedLayout) {
  QueueSettings settings;
  Effect created;
  created.type = EffectType::kQueueCreated;
  created.time = kStartTime;
  created.queue = "q";
  created.settings = &settings;
  Effect enqueued;
  enqueued.type = EffectType::kMessageEnqueued;
  enqueued.time = kStartTime;
  enqueued.queue = "q";
  enqueued.id = "m";
  enqueued.version = 1;
  enqueued.payload = "p";
  std::vector<Effect> members = {created, enqueued};
  Effect group;
  group.type = EffectType::kFlowEnqueued;
  group.time = kStartTime;
  group.members = &members;

  std::string expected;
  expected.push_back(40);
  PutFixed64(&expected, static_cast<uint64_t>(kStartTime));
  PutFixed32(&expected, 0);  // queue: empty
  PutFixed32(&expected, 2);  // count
  for (const Effect& m : members) {
    const std::string bytes = Encode(m);
    PutFixed32(&expected, static_cast<uint32_t>(bytes.size()));
    expected += bytes;
  }
  EXPECT_EQ(Encode(group), expected);
}

TEST(FlowRecord, ReplayingTheRecordGivesTheSameState) {
  ManualClock clock(kStartTime);
  EncodingSink sink;
  Engine engine(TestEngineOptions(), &clock, &sink);
  ASSERT_TRUE(engine.EnqueueFlow(SampleFlow()).ok());
  Engine replica(TestEngineOptions(), &clock, nullptr);
  for (const std::string& bytes : sink.encoded) {
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(bytes, &decoded).ok());
    ASSERT_TRUE(replica.Apply(decoded.effect()).ok());
  }
  EXPECT_EQ(replica.Digest(), engine.Digest());
  // Applying it again does not fit the state (the messages exist): INTERNAL.
  DecodedEffect decoded;
  ASSERT_TRUE(DecodeEffect(sink.encoded.back(), &decoded).ok());
  EXPECT_EQ(replica.Apply(decoded.effect()).code(), Code::kInternal);
}

TEST(FlowRecord, EveryProperPrefixIsRejectedAndByteFlipsNeverCrash) {
  ManualClock clock(kStartTime);
  EncodingSink sink;
  Engine engine(TestEngineOptions(), &clock, &sink);
  ASSERT_TRUE(engine.EnqueueFlow(SampleFlow()).ok());
  ASSERT_EQ(sink.encoded.size(), 1u);
  const std::string bytes = sink.encoded[0];
  for (size_t n = 0; n < bytes.size(); ++n) {
    DecodedEffect decoded;
    EXPECT_FALSE(DecodeEffect(std::string_view(bytes).substr(0, n), &decoded).ok()) << n;
  }
  DecodedEffect trailing;
  EXPECT_EQ(DecodeEffect(bytes + '\0', &trailing).detail(), "wal: effect: trailing bytes");
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    FlipByte(&damaged, i);
    DecodedEffect decoded;
    (void)DecodeEffect(damaged, &decoded);  // no crash, no sanitizer report
  }
}

TEST(FlowRecord, AMemberThatIsNotAQueueOrAnEnqueueIsMalformed) {
  Effect removed;
  removed.type = EffectType::kQueueDeleted;
  removed.time = kStartTime;
  removed.queue = "q";
  std::vector<Effect> members = {removed};
  Effect group;
  group.type = EffectType::kFlowEnqueued;
  group.time = kStartTime;
  group.members = &members;
  DecodedEffect decoded;
  EXPECT_EQ(DecodeEffect(Encode(group), &decoded).detail(),
            "wal: effect: a flow member that is not a queue or an enqueue");
  // Nor a flow inside a flow.
  Effect inner = group;
  std::vector<Effect> nested = {inner};
  group.members = &nested;
  EXPECT_EQ(DecodeEffect(Encode(group), &decoded).detail(),
            "wal: effect: a flow member that is not a queue or an enqueue");
  // No members at all.
  std::vector<Effect> none;
  group.members = &none;
  EXPECT_EQ(DecodeEffect(Encode(group), &decoded).detail(), "wal: effect: bad flow member count");
}

TEST(FlowRecovery, AFlowSurvivesARestartAndItsRootIsReleasedOnce) {
  std::unique_ptr<FileSystem> fs = NewMemoryFileSystem();
  uint64_t digest;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs.get(), kDir).ok());
    const uint64_t before = e.log->stats().next_lsn;
    ASSERT_TRUE(e.engine->EnqueueFlow(SampleFlow()).ok());
    EXPECT_EQ(e.log->stats().next_lsn, before + 1);  // one record
    ASSERT_TRUE(e.Sync().ok());
    digest = e.engine->Digest();
  }
  EXPECT_EQ(RecoveredDigest(fs.get(), kDir), digest);
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs.get(), kDir).ok());
  EXPECT_EQ(e.engine->Digest(), digest);
  EXPECT_EQ(e.engine->Get("reports", "root")->state, MessageState::kWaiting);
  EXPECT_EQ(e.engine->Get("images", "a")->state, MessageState::kWaiting);
  // Complete the leaves, then a and b: the root is released after the last one.
  auto finish = [&](const std::string& queue) {
    DequeueRequest request;
    request.max = 10;
    auto leased = e.engine->Dequeue(queue, request);
    ASSERT_TRUE(leased.ok());
    for (const MessageRecord& m : *leased) {
      ASSERT_TRUE(e.engine->Complete(queue, {{m.id, m.lease_token, ""}})[0].ok());
    }
  };
  finish("thumbs");
  EXPECT_EQ(e.engine->Get("images", "a")->state, MessageState::kPending);
  finish("images");
  EXPECT_EQ(e.engine->Get("reports", "root")->state, MessageState::kWaiting);
  finish("texts");
  EXPECT_EQ(e.engine->Get("reports", "root")->state, MessageState::kPending);
  EXPECT_EQ(e.engine->Get("reports", "root")->version, 2u);  // released once
  ASSERT_TRUE(e.Sync().ok());
  EXPECT_EQ(RecoveredDigest(fs.get(), kDir), e.engine->Digest());
}

// Crash atomicity: a flow is one record, so a crash that tears it drops every message of it.
TEST(FlowRecovery, ATornFlowRecordDropsTheWholeFlow) {
  std::unique_ptr<FileSystem> fs = NewMemoryFileSystem();
  uint64_t digest_before;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs.get(), kDir).ok());
    ASSERT_TRUE(e.engine->Enqueue("other", {Item("x")})[0].ok());
    ASSERT_TRUE(e.Sync().ok());
    digest_before = e.engine->Digest();
    ASSERT_TRUE(e.engine->EnqueueFlow(SampleFlow()).ok());
    ASSERT_TRUE(e.Sync().ok());
  }
  const std::string path = JoinPath(kDir, SegmentNames(fs.get(), kDir).back());
  const std::string whole = *ReadFileToString(fs.get(), path);
  // Cut the last record (the flow) short by a few bytes, as a crash mid-write would.
  ASSERT_TRUE(WriteStringToFile(fs.get(), path, whole.substr(0, whole.size() - 7)).ok());
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs.get(), kDir, &report), digest_before);
  EXPECT_TRUE(report.torn_tail);
}

}  // namespace
}  // namespace sundial::wal::test
