// A primary's PrimaryStream and a standby's StandbyStream talking frame by frame, in memory
// (docs/replication.md, "Catching up", "Streaming" and "Fencing"): a standby streams the
// primary's log until both engines hold the same state; a divergent tail is truncated; a
// standby whose records the primary no longer holds takes a snapshot; a standby never accepts
// a primary of an epoch older than its promise, nor a record that is damaged, out of order or
// of garbage, and the primary refuses a standby that promised a newer epoch than its own.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/clock.h"
#include "engine/engine.h"
#include "replication/primary_stream.h"
#include "replication/reload.h"
#include "replication/standby_stream.h"
#include "replication/wire.h"
#include "tests/wal/wal_test_util.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"
#include "wal/log_format.h"
#include "wal/recovery.h"
#include "wal/snapshot.h"

namespace sundial::replication {
namespace {

using wal::FileSystem;
using wal::GroupCommitLog;

// Frames travel 8-byte aligned (the FlatBuffers verifier needs it): each is copied into words.
class Aligned {
 public:
  explicit Aligned(const std::string& bytes) : words_((bytes.size() + 7) / 8 + 1) {
    std::memcpy(words_.data(), bytes.data(), bytes.size());
    size_ = bytes.size();
  }
  std::string_view view() const { return {reinterpret_cast<const char*>(words_.data()), size_}; }

 private:
  std::vector<uint64_t> words_;
  size_t size_ = 0;
};

class MemoryPromise final : public EpochPromise {
 public:
  uint64_t promised() const override { return epoch_; }
  Status Promise(uint64_t epoch) override {
    epoch_ = epoch;
    ++writes_;
    return Status::Ok();
  }
  uint64_t epoch_ = 0;
  int writes_ = 0;
};

// One node: a log in its own memory file system and an engine logging into it.
struct Node {
  explicit Node(uint64_t next_lsn = 0, uint64_t segment = 1) {
    log = wal::test::OpenLog(fs.get(), {}, next_lsn, segment);
    engine = std::make_unique<Engine>(Engine::Options(), &clock, log.get());
  }
  void Enqueue(const std::string& queue, const std::string& id) {
    EnqueueItem item;
    item.id = id;
    item.payload = "p-" + id;
    auto results = engine->Enqueue(queue, {item});
    ASSERT_EQ(results.size(), 1u);
    ASSERT_TRUE(results[0].ok()) << results[0].status().ToString();
    ASSERT_TRUE(log->WaitDurable(log->AppendedEndLsn()).ok());
  }
  void StartEpoch(uint64_t epoch) {
    ASSERT_TRUE(engine->StartEpoch(epoch, log->AppendedEndLsn()).ok());
    ASSERT_TRUE(log->WaitDurable(log->AppendedEndLsn()).ok());
  }

  std::unique_ptr<FileSystem> fs = wal::NewMemoryFileSystem();
  ManualClock clock{1'700'000'000'000};
  std::unique_ptr<GroupCommitLog> log;
  std::unique_ptr<Engine> engine;
  MemoryPromise promise;
};

// Recovers a node's data directory as a restarting process would.
wal::Recovered Recover(FileSystem* fs) {
  wal::Recovered out;
  static ManualClock clock;  // outlives the engine
  Status s = wal::Recover(
      fs, "data", [&] { return std::make_unique<Engine>(Engine::Options(), &clock, nullptr); }, {},
      &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

PrimaryEnv PrimaryOf(Node* node, uint64_t epoch) {
  PrimaryEnv env;
  env.log = node->log.get();
  env.engine = node->engine.get();
  env.fs = node->fs.get();
  env.dir = "data";
  env.cluster = "c";
  env.epoch = epoch;
  return env;
}

StandbyEnv StandbyOf(Node* node, const std::string& name = "n2") {
  StandbyEnv env;
  env.log = node->log.get();
  env.engine = node->engine.get();
  env.promise = &node->promise;
  env.fs = node->fs.get();
  env.dir = "data";
  env.cluster = "c";
  env.node = name;
  return env;
}

// Runs the conversation until it settles: the standby's Hello, the primary's Welcome and
// what it produces, the standby's Acks. Returns the standby's last answer that was not
// kContinue/kAck (kContinue when it is streaming and caught up).
struct Conversation {
  PrimaryStream* primary;
  StandbyStream* standby;
  Node* standby_node;

  // The standby's Hello, then Continue().
  StandbyStream::Next Run() {
    primary->OnFrame(Aligned(standby->Hello()).view());
    return Continue();
  }
  // Delivers what the primary has for the standby, and the standby's Acks, until nothing moves.
  StandbyStream::Next Continue() {
    for (int round = 0; round < 1000; ++round) {
      primary->Produce(1u << 20);
      std::vector<std::string> out = primary->TakeOutput();
      if (out.empty()) return StandbyStream::Next::kContinue;
      bool ack = false;
      for (const std::string& frame : out) {
        const StandbyStream::Next next = standby->OnFrame(Aligned(frame).view());
        if (next == StandbyStream::Next::kAck) ack = true;
        if (next != StandbyStream::Next::kAck && next != StandbyStream::Next::kContinue) {
          return next;
        }
      }
      if (ack) {
        EXPECT_TRUE(standby_node->log->WaitDurable(standby_node->log->AppendedEndLsn()).ok());
        EXPECT_NE(primary->OnFrame(Aligned(standby->Ack()).view()), PrimaryStream::Next::kClose)
            << primary->why();
      }
    }
    ADD_FAILURE() << "the conversation did not settle";
    return StandbyStream::Next::kClose;
  }
};

TEST(Stream, AnEmptyStandbyStreamsThePrimarysLogToTheSameState) {
  Node p;
  p.StartEpoch(7);
  for (int i = 0; i < 50; ++i) p.Enqueue(i % 2 ? "a" : "b", "m" + std::to_string(i));
  Node s;
  std::vector<std::pair<std::string, uint64_t>> acks;
  PrimaryEnv env = PrimaryOf(&p, 7);
  env.on_ack = [&](const std::string& node, uint64_t end) { acks.emplace_back(node, end); };
  PrimaryStream primary(env);
  StandbyStream standby(StandbyOf(&s));
  Conversation c{&primary, &standby, &s};
  EXPECT_EQ(c.Run(), StandbyStream::Next::kContinue) << standby.why() << primary.why();

  EXPECT_EQ(s.log->AppendedEndLsn(), p.log->AppendedEndLsn());
  EXPECT_EQ(s.engine->Digest(), p.engine->Digest());
  EXPECT_EQ(s.engine->Epochs(), p.engine->Epochs());
  EXPECT_EQ(s.promise.promised(), 7u) << "the Welcome's epoch is promised before any record";
  ASSERT_FALSE(acks.empty());
  EXPECT_EQ(acks.back(), (std::pair<std::string, uint64_t>("n2", p.log->AppendedEndLsn())));
  EXPECT_EQ(primary.acked_end(), p.log->AppendedEndLsn());

  // What the primary writes next streams on the same connection.
  p.Enqueue("a", "later");
  EXPECT_EQ(c.Continue(), StandbyStream::Next::kContinue);
  EXPECT_EQ(s.engine->Digest(), p.engine->Digest());
}

TEST(Stream, AStandbyBehindStreamsFromItsEndAcrossSegments) {
  Node p;
  p.StartEpoch(3);
  for (int i = 0; i < 10; ++i) p.Enqueue("q", "a" + std::to_string(i));
  ASSERT_TRUE(p.log->Rotate().ok());  // the rest in a second segment
  for (int i = 0; i < 10; ++i) p.Enqueue("q", "b" + std::to_string(i));
  Node s;
  {
    PrimaryStream primary(PrimaryOf(&p, 3));
    StandbyStream standby(StandbyOf(&s));
    EXPECT_EQ((Conversation{&primary, &standby, &s}.Run()), StandbyStream::Next::kContinue);
  }
  ASSERT_TRUE(p.log->Rotate().ok());
  for (int i = 0; i < 10; ++i) p.Enqueue("q", "c" + std::to_string(i));
  // A new connection: the standby says where it ends and gets only the rest.
  PrimaryStream primary(PrimaryOf(&p, 3));
  StandbyStream standby(StandbyOf(&s));
  EXPECT_EQ((Conversation{&primary, &standby, &s}.Run()), StandbyStream::Next::kContinue)
      << standby.why();
  EXPECT_EQ(standby.records(), 10u);
  EXPECT_EQ(s.engine->Digest(), p.engine->Digest());
}

TEST(Stream, ADivergentTailIsTruncatedWhereTheCommonEpochEndedAndTheNodeRecoversToIt) {
  // Both share epoch 3's first records; the old primary (s) went on in epoch 3 while p took
  // over with epoch 9 at the shared end.
  Node p;
  Node s;
  p.StartEpoch(3);
  for (int i = 0; i < 5; ++i) p.Enqueue("q", "m" + std::to_string(i));
  {
    PrimaryStream primary(PrimaryOf(&p, 3));
    StandbyStream standby(StandbyOf(&s));
    ASSERT_EQ((Conversation{&primary, &standby, &s}.Run()), StandbyStream::Next::kContinue);
  }
  const uint64_t shared_end = p.log->AppendedEndLsn();
  s.Enqueue("q", "lost-on-the-old-primary");
  p.StartEpoch(9);
  p.Enqueue("q", "new");

  PrimaryStream primary(PrimaryOf(&p, 9));
  StandbyStream standby(StandbyOf(&s));
  EXPECT_EQ((Conversation{&primary, &standby, &s}.Run()), StandbyStream::Next::kTruncate);
  EXPECT_EQ(standby.truncate_to(), shared_end);
  EXPECT_EQ(s.promise.promised(), 9u) << "promised before it reloads";

  // The node truncates (replication/reload.h) and recovers to the shared prefix.
  ASSERT_TRUE(s.log->Close().ok());
  ASSERT_TRUE(TruncateLog(s.fs.get(), "data", standby.truncate_to()).ok());
  auto recovered = Recover(s.fs.get());
  ASSERT_NE(recovered.engine, nullptr);
  EXPECT_EQ(recovered.report.next_lsn, shared_end);
  EXPECT_EQ(recovered.engine->Epochs(), (std::vector<EpochStart>{{3, 0}}));
  auto counts = recovered.engine->Count("q", {});
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ((*counts)[MessageState::kPending], 5u) << "the divergent enqueue is gone";
}

// Dependencies travel in the records the primary logs (docs/wal-format.md, format version 3):
// a standby holds the same waiting messages and graph, and derives the releases and failures
// from the completions and cancels that follow, as the primary did, without their being
// shipped. A snapshot the standby takes carries the graph too.
TEST(Stream, AStandbyHoldsThePrimarysDependenciesAndDerivesTheirReleases) {
  Node p;
  p.StartEpoch(3);
  p.Enqueue("q", "a");
  p.Enqueue("q", "b");
  EnqueueItem c;
  c.id = "c";
  c.depends_on = {"a", "b"};
  EnqueueItem d;
  d.id = "d";
  d.depends_on = {"q/c"};
  d.on_dependency_failure = DependencyFailurePolicy::kError;
  ASSERT_TRUE(p.engine->Enqueue("q", {c})[0].ok());
  ASSERT_TRUE(p.engine->Enqueue("other", {d})[0].ok());
  auto complete_next = [&] {
    MessageRecord m = p.engine->Dequeue("q", {}).value().at(0);
    ASSERT_TRUE(p.engine->Complete("q", {CompleteItem{m.id, m.lease_token}})[0].ok());
    ASSERT_TRUE(p.log->WaitDurable(p.log->AppendedEndLsn()).ok());
  };
  complete_next();  // a
  // A snapshot at this point (as a checkpoint would write it for a standby far behind).
  const uint64_t covered = p.log->AppendedEndLsn();
  ASSERT_TRUE(wal::WriteSnapshot(p.fs.get(), "data", *p.engine, covered).ok());

  Node s;
  PrimaryStream primary(PrimaryOf(&p, 3));
  StandbyStream standby(StandbyOf(&s));
  Conversation conversation{&primary, &standby, &s};
  EXPECT_EQ(conversation.Run(), StandbyStream::Next::kContinue) << standby.why() << primary.why();
  EXPECT_EQ(s.engine->Digest(), p.engine->Digest());
  EXPECT_EQ(s.engine->Get("q", "c")->state, MessageState::kWaiting);
  complete_next();  // b: releases c on the primary, and on the standby by replay
  EXPECT_EQ(conversation.Continue(), StandbyStream::Next::kContinue);
  EXPECT_EQ(s.engine->Get("q", "c")->state, MessageState::kPending);
  EXPECT_EQ(s.engine->Get("other", "d")->state, MessageState::kWaiting);
  ASSERT_TRUE(p.engine->Cancel("q", {"c"})[0].ok());  // d errs by its policy
  ASSERT_TRUE(p.log->WaitDurable(p.log->AppendedEndLsn()).ok());
  EXPECT_EQ(conversation.Continue(), StandbyStream::Next::kContinue);
  EXPECT_EQ(s.engine->Get("other", "d")->state, MessageState::kErrored);
  EXPECT_EQ(s.engine->Digest(), p.engine->Digest());

  // The snapshot, installed on a node that starts from it, holds the graph of its time.
  Node late;
  ASSERT_TRUE(late.log->Close().ok());
  ASSERT_TRUE(p.fs->FileExists(wal::JoinPath("data", wal::SnapshotFileName(covered))));
  auto bytes =
      wal::ReadFileToString(p.fs.get(), wal::JoinPath("data", wal::SnapshotFileName(covered)));
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(wal::WriteStringToFile(late.fs.get(), "snap", *bytes).ok());
  ASSERT_TRUE(InstallSnapshot(late.fs.get(), "data", "snap", covered).ok());
  auto recovered = Recover(late.fs.get());
  ASSERT_NE(recovered.engine, nullptr);
  EXPECT_EQ(recovered.engine->Get("q", "c")->state, MessageState::kWaiting);
  MessageRecord b = recovered.engine->Dequeue("q", {}).value().at(0);
  ASSERT_EQ(b.id, "b");
  ASSERT_TRUE(recovered.engine->Complete("q", {CompleteItem{b.id, b.lease_token}})[0].ok());
  EXPECT_EQ(recovered.engine->Get("q", "c")->state, MessageState::kPending);
}

TEST(Stream, AStandbyTheLogNoLongerReachesTakesTheNewestSnapshot) {
  // The primary's segments start at LSN 40 (a checkpoint removed the rest); its snapshot
  // covers up to 40.
  Node p(/*next_lsn=*/40, /*segment=*/5);
  p.StartEpoch(4);
  for (int i = 0; i < 5; ++i) p.Enqueue("q", "m" + std::to_string(i));
  ASSERT_TRUE(wal::WriteSnapshot(p.fs.get(), "data", *p.engine, 40).ok());
  Node s;
  PrimaryStream primary(PrimaryOf(&p, 4));
  StandbyStream standby(StandbyOf(&s));
  EXPECT_EQ((Conversation{&primary, &standby, &s}.Run()), StandbyStream::Next::kSnapshotReady)
      << standby.why() << " / " << primary.why();
  EXPECT_EQ(standby.snapshot_lsn(), 40u);
  // The node installs it (replication/reload.h) and recovers from it as from its own: the
  // primary's state at the snapshot.
  ASSERT_TRUE(s.log->Close().ok());
  ASSERT_TRUE(InstallSnapshot(s.fs.get(), "data", standby.snapshot_path(), 40).ok());
  auto recovered = Recover(s.fs.get());
  ASSERT_NE(recovered.engine, nullptr);
  EXPECT_EQ(recovered.report.snapshot_lsn, 40u);
  EXPECT_EQ(recovered.report.next_lsn, 40u);
  EXPECT_EQ(recovered.engine->Digest(), p.engine->Digest());
}

TEST(Stream, APrimaryWithNoSnapshotForAStandbyTooFarBehindRefusesUntilOneIsReady) {
  Node p(/*next_lsn=*/40, /*segment=*/5);
  p.StartEpoch(4);
  Node s;
  PrimaryStream primary(PrimaryOf(&p, 4));
  StandbyStream standby(StandbyOf(&s));
  EXPECT_EQ(primary.OnFrame(Aligned(standby.Hello()).view()), PrimaryStream::Next::kClose);
  EXPECT_NE(primary.why().find("snapshot"), std::string::npos) << primary.why();
}

TEST(Stream, AStandbyNeverAcceptsAPrimaryOfAnEpochOlderThanItsPromise) {
  Node p;
  p.StartEpoch(5);
  p.Enqueue("q", "from-the-old-primary");
  Node s;
  s.promise.epoch_ = 6;  // it promised a newer primary
  PrimaryStream primary(PrimaryOf(&p, 5));
  StandbyStream standby(StandbyOf(&s));
  std::optional<uint64_t> newer;
  // The primary itself sees the newer promise in the Hello and steps aside.
  {
    PrimaryEnv env = PrimaryOf(&p, 5);
    env.on_newer_epoch = [&](uint64_t e) { newer = e; };
    PrimaryStream refusing(env);
    EXPECT_EQ(refusing.OnFrame(Aligned(standby.Hello()).view()), PrimaryStream::Next::kClose);
    EXPECT_EQ(newer, 6u);
  }
  // And a Welcome of the old epoch (an old primary that does not look) is refused outright.
  WelcomeMessage w;
  w.epoch = 5;
  w.primary_end_lsn = p.log->AppendedEndLsn();
  EXPECT_EQ(standby.OnFrame(Aligned(EncodeWelcome(w)).view()), StandbyStream::Next::kClose);
  EXPECT_NE(standby.why().find("older than the epoch promised"), std::string::npos)
      << standby.why();
  EXPECT_EQ(s.log->AppendedEndLsn(), 0u);
  EXPECT_EQ(s.promise.promised(), 6u);
}

// A standby caught up to the primary, then fed one more Records frame built by hand.
class StreamGarbage : public ::testing::Test {
 protected:
  void SetUp() override {
    p.StartEpoch(2);
    p.Enqueue("q", "m0");
    WelcomeMessage w;
    w.epoch = 2;
    w.from_lsn = 0;
    w.primary_end_lsn = p.log->AppendedEndLsn();
    ASSERT_EQ(standby.OnFrame(Aligned(EncodeWelcome(w)).view()), StandbyStream::Next::kContinue)
        << standby.why();
    // The primary's one segment, as its records are on disk.
    auto bytes = wal::ReadFileToString(p.fs.get(), "data/" + wal::SegmentFileName(1));
    ASSERT_TRUE(bytes.ok());
    segment = bytes->substr(wal::kFileHeaderBytes);
    // Cut at the preallocated zeroes: the records are the ones with a type.
    size_t at = 0;
    for (uint64_t i = 0; i < p.log->AppendedEndLsn(); ++i) {
      at += wal::kRecordHeaderBytes + wal::DecodeFixed32(segment.data() + at);
    }
    segment.resize(at);
    digest_before = s.engine->Digest();
  }
  StandbyStream::Next Feed(uint64_t epoch, uint64_t first_lsn, std::string records,
                           uint64_t segment_number = 1) {
    return standby.OnFrame(
        Aligned(EncodeRecords(epoch, segment_number, first_lsn,
                              static_cast<uint32_t>(p.log->AppendedEndLsn()), records, 0))
            .view());
  }
  void ExpectNothingApplied() {
    EXPECT_EQ(s.log->AppendedEndLsn(), 0u);
    EXPECT_EQ(s.engine->Digest(), digest_before);
  }

  Node p;
  Node s;
  StandbyStream standby{StandbyOf(&s)};
  std::string segment;
  uint64_t digest_before = 0;
};

TEST_F(StreamGarbage, TheRecordsAsSentAreApplied) {
  EXPECT_EQ(Feed(2, 0, segment), StandbyStream::Next::kAck) << standby.why();
  EXPECT_EQ(s.engine->Digest(), p.engine->Digest());
}

TEST_F(StreamGarbage, ADamagedRecordIsRefusedBeforeAnythingOfItApplies) {
  std::string damaged = segment;
  damaged[damaged.size() - 1] ^= 0x40;  // the last record's payload
  EXPECT_EQ(Feed(2, 0, damaged), StandbyStream::Next::kClose);
  EXPECT_EQ(s.log->AppendedEndLsn(), p.log->AppendedEndLsn() - 1)
      << "the records before the damaged one apply; it and nothing after";
}

TEST_F(StreamGarbage, ARecordUnderAnotherSegmentNumberFailsItsChecksum) {
  EXPECT_EQ(Feed(2, 0, segment, /*segment_number=*/2), StandbyStream::Next::kClose);
  ExpectNothingApplied();
}

TEST_F(StreamGarbage, RecordsThatDoNotContinueTheLogAreRefused) {
  EXPECT_EQ(Feed(2, 1, segment), StandbyStream::Next::kClose);
  EXPECT_NE(standby.why().find("LSN"), std::string::npos) << standby.why();
  ExpectNothingApplied();
}

TEST_F(StreamGarbage, RecordsOfAnotherEpochAreRefused) {
  EXPECT_EQ(Feed(1, 0, segment), StandbyStream::Next::kClose);
  ExpectNothingApplied();
}

TEST_F(StreamGarbage, ACutRecordIsRefused) {
  for (size_t cut : {size_t{1}, wal::kRecordHeaderBytes - 1, wal::kRecordHeaderBytes + 1}) {
    Node fresh;
    StandbyStream standby2(StandbyOf(&fresh));
    WelcomeMessage w;
    w.epoch = 2;
    ASSERT_EQ(standby2.OnFrame(Aligned(EncodeWelcome(w)).view()), StandbyStream::Next::kContinue);
    EXPECT_EQ(
        standby2.OnFrame(Aligned(EncodeRecords(2, 1, 0, 1, segment.substr(0, cut), 0)).view()),
        StandbyStream::Next::kClose)
        << cut;
    EXPECT_EQ(fresh.log->AppendedEndLsn(), 0u) << cut;
  }
}

TEST_F(StreamGarbage, FramesThatAreNotFramesAreRefused) {
  for (std::string junk : {std::string(), std::string(3, '\0'), std::string(64, '\xff'),
                           std::string("GET / HTTP/1.1\r\n\r\n")}) {
    Node fresh;
    StandbyStream standby2(StandbyOf(&fresh));
    EXPECT_EQ(standby2.OnFrame(Aligned(junk).view()), StandbyStream::Next::kClose);
  }
  // A message only a standby sends.
  EXPECT_EQ(standby.OnFrame(Aligned(EncodeAck(2, 0, 0)).view()), StandbyStream::Next::kClose);
  ExpectNothingApplied();
}

TEST(Stream, ThePrimaryRefusesAHelloOfAnotherClusterOrWithoutTheToken) {
  Node p;
  p.StartEpoch(1);
  Node s;
  PrimaryEnv env = PrimaryOf(&p, 1);
  env.token = "secret";
  {
    PrimaryStream primary(env);
    StandbyStream standby(StandbyOf(&s));
    EXPECT_EQ(primary.OnFrame(Aligned(standby.Hello()).view()), PrimaryStream::Next::kClose);
    EXPECT_NE(primary.why().find("token"), std::string::npos) << primary.why();
  }
  {
    StandbyEnv other = StandbyOf(&s);
    other.token = "secret";
    other.cluster = "another";
    PrimaryStream primary(env);
    StandbyStream standby(other);
    EXPECT_EQ(primary.OnFrame(Aligned(standby.Hello()).view()), PrimaryStream::Next::kClose);
  }
  {
    StandbyEnv good = StandbyOf(&s);
    good.token = "secret";
    PrimaryStream primary(env);
    StandbyStream standby(good);
    EXPECT_EQ((Conversation{&primary, &standby, &s}.Run()), StandbyStream::Next::kContinue);
    EXPECT_EQ(s.engine->Digest(), p.engine->Digest());
  }
}

TEST(Stream, AnAckOfAnotherEpochIsRefused) {
  Node p;
  p.StartEpoch(3);
  Node s;
  PrimaryStream primary(PrimaryOf(&p, 3));
  StandbyStream standby(StandbyOf(&s));
  ASSERT_EQ((Conversation{&primary, &standby, &s}.Run()), StandbyStream::Next::kContinue);
  EXPECT_EQ(primary.OnFrame(Aligned(EncodeAck(2, 1, 1)).view()), PrimaryStream::Next::kClose);
}

}  // namespace
}  // namespace sundial::replication
