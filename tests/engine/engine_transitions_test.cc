// Message transitions as docs/semantics.md states them: enqueue, dequeue, complete, fail,
// extend, lease expiry, cancel, reprioritize, redrive, retention, the timers that drive them, the
// reads (get, browse, count, explain) and every limit of the Limits table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

class TransitionsTest : public EngineTest {};

// ---- Enqueue --------------------------------------------------------------------------------

TEST_F(TransitionsTest, EnqueueWithoutDelayIsPendingWithVersionOneAndNoAttempts) {
  MakeQueue("q");
  Result<EnqueueResult> r = EnqueueOne("q", Item("a", 7, {{"k", "v"}}, "body"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->id, "a");
  EXPECT_EQ(r->version, 1u);
  EXPECT_FALSE(r->duplicate);

  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.queue, "q");
  EXPECT_EQ(m.id, "a");
  EXPECT_EQ(m.priority, 7);
  EXPECT_EQ(m.payload, "body");
  EXPECT_EQ(m.metadata, (Metadata{{"k", "v"}}));
  EXPECT_EQ(m.state, MessageState::kPending);
  EXPECT_EQ(m.attempts, 0u);
  EXPECT_EQ(m.max_attempts, 5u);
  EXPECT_EQ(m.version, 1u);
  EXPECT_EQ(m.visible_at, 0);
  EXPECT_EQ(m.lease_token, 0u);
  EXPECT_EQ(m.lease_expires_at, 0);
  EXPECT_EQ(m.enqueued_at, Now());
  EXPECT_EQ(m.updated_at, Now());
  EXPECT_EQ(m.last_error, "");
}

TEST_F(TransitionsTest, EnqueueWithDelayIsInvisibleUntilVisibleAt) {
  MakeQueue("q");
  PutDelayed("q", "a", 500);
  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.state, MessageState::kInvisible);
  EXPECT_EQ(m.visible_at, Now() + 500);
  EXPECT_TRUE(Take("q").empty());
}

TEST_F(TransitionsTest, EnqueueWithFutureVisibleAtIsInvisibleAndPastVisibleAtIsPending) {
  MakeQueue("q");
  EnqueueItem later = Item("later");
  later.visible_at = Now() + 250;
  Put("q", later);
  EnqueueItem past = Item("past");
  past.visible_at = Now() - 250;
  Put("q", past);
  EnqueueItem now = Item("now");
  now.visible_at = Now();
  Put("q", now);

  EXPECT_EQ(StateOf("q", "later"), MessageState::kInvisible);
  EXPECT_EQ(GetMessage("q", "later").visible_at, Now() + 250);
  EXPECT_EQ(StateOf("q", "past"), MessageState::kPending);
  EXPECT_EQ(StateOf("q", "now"), MessageState::kPending);
}

TEST_F(TransitionsTest, QueueInvisibilityMsDelaysEnqueuesWithoutDelay) {
  QueueSettings s;
  s.invisibility_ms = 300;
  MakeQueue("q", s);
  Put("q", "a");
  EXPECT_EQ(StateOf("q", "a"), MessageState::kInvisible);
  EXPECT_EQ(GetMessage("q", "a").visible_at, Now() + 300);
}

TEST_F(TransitionsTest, ExplicitZeroDelayOverridesQueueInvisibility) {
  QueueSettings s;
  s.invisibility_ms = 300;
  MakeQueue("q", s);
  PutDelayed("q", "a", 0);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
}

TEST_F(TransitionsTest, ItemMaxAttemptsOverridesQueueDefault) {
  QueueSettings s;
  s.max_attempts = 3;
  MakeQueue("q", s);
  EnqueueItem item = Item("a");
  item.max_attempts = 9;
  Put("q", item);
  Put("q", "b");
  EXPECT_EQ(GetMessage("q", "a").max_attempts, 9u);
  EXPECT_EQ(GetMessage("q", "b").max_attempts, 3u);
}

TEST_F(TransitionsTest, DelayAndVisibleAtTogetherIsInvalidArgument) {
  MakeQueue("q");
  EnqueueItem item = Item("a");
  item.delay_ms = 10;
  item.visible_at = Now() + 10;
  EXPECT_EQ(EnqueueOne("q", item).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
}

TEST_F(TransitionsTest, NegativeDelayIsInvalidArgument) {
  MakeQueue("q");
  EnqueueItem item = Item("a");
  item.delay_ms = -1;
  EXPECT_EQ(EnqueueOne("q", item).status().code(), Code::kInvalidArgument);
}

TEST_F(TransitionsTest, DuplicateEnqueueWithIdenticalContentIsIdempotent) {
  MakeQueue("q");
  Put("q", Item("a", 3, {{"k", "v"}}, "body"));
  MessageRecord leased = TakeOne("q");
  ASSERT_EQ(leased.version, 2u);

  Result<EnqueueResult> again = EnqueueOne("q", Item("a", 3, {{"k", "v"}}, "body"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(again->id, "a");
  EXPECT_EQ(again->version, 2u);  // the message's current version

  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.state, MessageState::kRunning);
  EXPECT_EQ(m.version, 2u);
  EXPECT_EQ(m.lease_token, leased.lease_token);
  EXPECT_EQ(Counts("q")[MessageState::kRunning], 1u);
  EXPECT_EQ(Counts("q")[MessageState::kPending], 0u);
}

TEST_F(TransitionsTest, DuplicateComparesMetadataAsASetOfPairs) {
  MakeQueue("q");
  Put("q", Item("a", 1, {{"x", "1"}, {"y", "2"}}));
  Result<EnqueueResult> again = EnqueueOne("q", Item("a", 1, {{"y", "2"}, {"x", "1"}}));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
}

TEST_F(TransitionsTest, SameIdDifferentContentIsAlreadyExists) {
  MakeQueue("q");
  Put("q", Item("a", 1, {{"k", "v"}}, "body"));
  EXPECT_EQ(EnqueueOne("q", Item("a", 2, {{"k", "v"}}, "body")).status().code(),
            Code::kAlreadyExists);
  EXPECT_EQ(EnqueueOne("q", Item("a", 1, {{"k", "v"}}, "other")).status().code(),
            Code::kAlreadyExists);
  EXPECT_EQ(EnqueueOne("q", Item("a", 1, {{"k", "w"}}, "body")).status().code(),
            Code::kAlreadyExists);
  EXPECT_EQ(EnqueueOne("q", Item("a", 1, {}, "body")).status().code(), Code::kAlreadyExists);
  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.priority, 1);
  EXPECT_EQ(m.payload, "body");
  EXPECT_EQ(m.version, 1u);
}

TEST_F(TransitionsTest, DuplicateWithDifferentGivenMaxAttemptsIsAlreadyExists) {
  MakeQueue("q");
  EnqueueItem item = Item("a");
  item.max_attempts = 3;
  Put("q", item);

  EnqueueItem same = item;
  Result<EnqueueResult> r1 = EnqueueOne("q", same);
  ASSERT_TRUE(r1.ok());
  EXPECT_TRUE(r1->duplicate);

  EnqueueItem without = Item("a");  // no max_attempts given: not compared
  Result<EnqueueResult> r2 = EnqueueOne("q", without);
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(r2->duplicate);

  EnqueueItem different = Item("a");
  different.max_attempts = 4;
  EXPECT_EQ(EnqueueOne("q", different).status().code(), Code::kAlreadyExists);
}

TEST_F(TransitionsTest, DuplicateOfTerminalMessageBeforeGcIsStillDuplicate) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "a", m.lease_token).ok());
  Result<EnqueueResult> again = EnqueueOne("q", Item("a"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(again->version, 3u);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kCompleted);
  EXPECT_EQ(EnqueueOne("q", Item("a", 99)).status().code(), Code::kAlreadyExists);
}

TEST_F(TransitionsTest, EnqueueBatchAnswersPerItem) {
  MakeQueue("q");
  std::vector<EnqueueItem> items;
  items.push_back(Item("a"));
  items.push_back(Item(std::string(kMaxIdBytes + 1, 'x')));  // invalid id
  items.push_back(Item("b"));
  items.push_back(Item("a"));     // duplicate of the first, identical
  items.push_back(Item("b", 5));  // same id, different content
  std::vector<Result<EnqueueResult>> r = engine().Enqueue("q", items);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_TRUE(r[0].ok());
  EXPECT_EQ(r[1].status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(r[2].ok());
  ASSERT_TRUE(r[3].ok());
  EXPECT_TRUE(r[3]->duplicate);
  EXPECT_EQ(r[4].status().code(), Code::kAlreadyExists);
  EXPECT_EQ(Counts("q")[MessageState::kPending], 2u);
}

TEST_F(TransitionsTest, GeneratedIdsAreUlids) {
  MakeQueue("q");
  constexpr std::string_view kCrockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  std::set<std::string> seen;
  std::string previous;
  for (int i = 0; i < 50; ++i) {
    std::string id = Put("q", Item(""));
    ASSERT_EQ(id.size(), 26u) << id;
    uint64_t timestamp = 0;
    for (size_t c = 0; c < id.size(); ++c) {
      size_t digit = kCrockford.find(id[c]);
      ASSERT_NE(digit, std::string_view::npos) << "not Crockford base32: " << id;
      if (c < 10) timestamp = timestamp * 32 + digit;
    }
    EXPECT_LE(kCrockford.find(id[0]), 7u) << "timestamp must fit 48 bits: " << id;
    EXPECT_EQ(timestamp, static_cast<uint64_t>(Now())) << id;
    EXPECT_TRUE(seen.insert(id).second) << "repeated id " << id;
    if (!previous.empty()) {
      EXPECT_LT(previous, id) << "ids must sort by creation time";
    }
    previous = id;
    EXPECT_EQ(GetMessage("q", id).id, id);
    AdvanceTime(1);
  }
}

TEST_F(TransitionsTest, AutoCreateMakesSimpleQueue) {
  Put("fresh", "a");
  QueueInfo info = GetQueueInfo("fresh");
  EXPECT_EQ(info.name, "fresh");
  EXPECT_EQ(info.settings, QueueSettings{});
  EXPECT_EQ(info.settings.type, QueueType::kSimple);
  EXPECT_EQ(info.counts[MessageState::kPending], 1u);
}

TEST_F(TransitionsTest, AutoCreateAppliesToEnqueueOnly) {
  EXPECT_EQ(engine().Dequeue("missing", DequeueRequest{}).status().code(), Code::kNotFound);
  EXPECT_EQ(engine().Get("missing", "a").status().code(), Code::kNotFound);
  EXPECT_EQ(engine().Count("missing", {}).status().code(), Code::kNotFound);
  EXPECT_EQ(engine().Browse("missing", BrowseRequest{}).status().code(), Code::kNotFound);
  EXPECT_EQ(engine().Explain("missing", "a").status().code(), Code::kNotFound);
  EXPECT_EQ(CompleteOne("missing", "a", 1).code(), Code::kNotFound);
  EXPECT_EQ(FailOne("missing", "a", 1).status().code(), Code::kNotFound);
  EXPECT_EQ(engine().Extend("missing", "a", 1, 1000).status().code(), Code::kNotFound);
  EXPECT_EQ(CancelOne("missing", "a").code(), Code::kNotFound);
  EXPECT_EQ(SetPriority("missing", "a", 1).status().code(), Code::kNotFound);
  EXPECT_EQ(RedriveOne("missing", "a").code(), Code::kNotFound);
  EXPECT_EQ(engine().GetQueue("missing").status().code(), Code::kNotFound);
  EXPECT_TRUE(engine().ListQueues().empty());
}

TEST_F(TransitionsTest, WithoutAutoCreateEnqueueToMissingQueueIsNotFound) {
  Engine::Options options = DefaultOptions();
  options.auto_create_queues = false;
  Reset(options);
  std::vector<Result<EnqueueResult>> r = engine().Enqueue("missing", {Item("a"), Item("b")});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].status().code(), Code::kNotFound);
  EXPECT_EQ(r[1].status().code(), Code::kNotFound);
  EXPECT_TRUE(engine().ListQueues().empty());
}

// ---- Dequeue --------------------------------------------------------------------------------

TEST_F(TransitionsTest, DequeueLeasesTheEarliestPriorityMessage) {
  MakeQueue("q");
  Put("q", "late", 300);
  Put("q", "early", 100);
  Put("q", "middle", 200);
  MessageRecord m = TakeOne("q");
  EXPECT_EQ(m.id, "early");
  EXPECT_EQ(m.queue, "q");
  EXPECT_EQ(m.state, MessageState::kRunning);
  EXPECT_EQ(m.attempts, 1u);
  EXPECT_EQ(m.version, 2u);
  EXPECT_GE(m.lease_token, 1u);
  EXPECT_LE(m.lease_token, kMaxLeaseToken);
  EXPECT_EQ(m.lease_expires_at, Now() + 30'000);
  EXPECT_EQ(m.updated_at, Now());
  EXPECT_EQ(m.payload, "payload");

  MessageRecord stored = GetMessage("q", "early");
  EXPECT_EQ(stored.state, MessageState::kRunning);
  EXPECT_EQ(stored.lease_token, m.lease_token);
  EXPECT_EQ(stored.lease_expires_at, m.lease_expires_at);
  EXPECT_EQ(stored.version, 2u);
  EXPECT_EQ(stored.attempts, 1u);
}

TEST_F(TransitionsTest, DequeueLeaseMsOverridesQueueDefault) {
  QueueSettings s;
  s.lease_ms = 5'000;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "b");
  EXPECT_EQ(TakeOne("q").lease_expires_at, Now() + 5'000);
  EXPECT_EQ(TakeOne("q", {}, 777).lease_expires_at, Now() + 777);
}

TEST_F(TransitionsTest, TiesAreDequeuedInEnqueueOrder) {
  MakeQueue("q");
  std::vector<std::string> expected;
  for (int i = 0; i < 20; ++i) {
    std::string id = "m" + std::to_string(i);
    Put("q", id, 42);
    expected.push_back(id);
  }
  EXPECT_EQ(DrainIds("q"), expected);
}

TEST_F(TransitionsTest, DequeueOrderIsPriorityThenEnqueueOrderAcrossTheInt64Range) {
  MakeQueue("q");
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  Put("q", "max1", kMax);
  Put("q", "zero1", 0);
  Put("q", "min1", kMin);
  Put("q", "neg", -5);
  Put("q", "max2", kMax);
  Put("q", "min2", kMin);
  Put("q", "zero2", 0);
  EXPECT_EQ(DrainIds("q"),
            (std::vector<std::string>{"min1", "min2", "neg", "zero1", "zero2", "max1", "max2"}));
}

TEST_F(TransitionsTest, RandomPrioritiesAreDequeuedInPriorityThenEnqueueOrder) {
  MakeQueue("q");
  std::mt19937 rng(7);
  std::vector<std::pair<int64_t, int>> expected;
  for (int i = 0; i < 300; ++i) {
    int64_t p = static_cast<int64_t>(rng() % 20);
    Put("q", "m" + std::to_string(i), p);
    expected.emplace_back(p, i);
  }
  std::sort(expected.begin(), expected.end());
  std::vector<std::string> want;
  for (const auto& [p, i] : expected) want.push_back("m" + std::to_string(i));
  std::vector<std::string> got;
  while (true) {
    std::vector<std::string> batch = TakeIds("q", 7);
    if (batch.empty()) break;
    got.insert(got.end(), batch.begin(), batch.end());
  }
  EXPECT_EQ(got, want);
}

TEST_F(TransitionsTest, DequeueMaxReturnsUpToMaxInOrder) {
  MakeQueue("q");
  Put("q", "c", 3);
  Put("q", "a", 1);
  Put("q", "b", 2);
  EXPECT_EQ(TakeIds("q", 2), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(TakeIds("q", 5), (std::vector<std::string>{"c"}));
  EXPECT_TRUE(TakeIds("q", 5).empty());
  EXPECT_EQ(Counts("q")[MessageState::kRunning], 3u);
}

TEST_F(TransitionsTest, DequeueFromEmptyQueueReturnsNothing) {
  MakeQueue("q");
  Result<std::vector<MessageRecord>> r = engine().Dequeue("q", DequeueRequest{});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST_F(TransitionsTest, DequeueNeverReturnsInvisibleRunningOrTerminalMessages) {
  MakeQueue("q");
  PutDelayed("q", "invisible", 1'000, 0);
  Put("q", "running", 1);
  Put("q", "completed", 2);
  Put("q", "canceled", 3);
  MessageRecord r = TakeOne("q");
  ASSERT_EQ(r.id, "running");
  MessageRecord c = TakeOne("q");
  ASSERT_EQ(c.id, "completed");
  ASSERT_TRUE(CompleteOne("q", "completed", c.lease_token).ok());
  ASSERT_TRUE(CancelOne("q", "canceled").ok());
  EXPECT_TRUE(Take("q", 10).empty());
}

TEST_F(TransitionsTest, LeaseTokensAreBelow2To53) {
  MakeQueue("q");
  QueueSettings s;
  s.lease_ms = 1;
  s.max_attempts = 1'000'000;
  MakeQueue("r", s);
  std::set<uint64_t> tokens;
  for (int i = 0; i < 200; ++i) Put("q", "m" + std::to_string(i));
  for (const MessageRecord& m : Take("q", 200)) {
    EXPECT_GE(m.lease_token, 1u);
    EXPECT_LT(m.lease_token, uint64_t{1} << 53);
    tokens.insert(m.lease_token);
  }
  // Re-leasing one message gives a new token every time.
  Put("r", "again");
  for (int i = 0; i < 100; ++i) {
    MessageRecord m = TakeOne("r");
    EXPECT_GE(m.lease_token, 1u);
    EXPECT_LT(m.lease_token, uint64_t{1} << 53);
    tokens.insert(m.lease_token);
    AdvanceTime(1);  // lease expires, back to pending
  }
  EXPECT_EQ(tokens.size(), 300u) << "lease tokens repeated";
}

// ---- Complete -------------------------------------------------------------------------------

TEST_F(TransitionsTest, CompleteMakesMessageCompletedAndKeepsItsToken) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  AdvanceTime(10);
  ASSERT_TRUE(CompleteOne("q", "a", m.lease_token).ok());
  MessageRecord done = GetMessage("q", "a");
  EXPECT_EQ(done.state, MessageState::kCompleted);
  EXPECT_EQ(done.version, 3u);
  EXPECT_EQ(done.lease_token, m.lease_token);
  EXPECT_EQ(done.lease_expires_at, 0);
  EXPECT_EQ(done.attempts, 1u);
  EXPECT_EQ(done.updated_at, Now());
  EXPECT_EQ(Counts("q")[MessageState::kCompleted], 1u);
  EXPECT_EQ(Counts("q")[MessageState::kRunning], 0u);
}

TEST_F(TransitionsTest, RepeatedCompleteWithSameTokenSucceeds) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "a", m.lease_token).ok());
  AdvanceTime(60'000);  // even after the lease would have expired
  EXPECT_TRUE(CompleteOne("q", "a", m.lease_token).ok());
  EXPECT_EQ(GetMessage("q", "a").version, 3u);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kCompleted);
}

TEST_F(TransitionsTest, CompleteOfCompletedMessageWithAnotherTokenIsFailedPrecondition) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "a", m.lease_token).ok());
  EXPECT_EQ(CompleteOne("q", "a", m.lease_token + 1).code(), Code::kFailedPrecondition);
}

TEST_F(TransitionsTest, WrongLeaseTokenGetsFailedPrecondition) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  uint64_t wrong = m.lease_token == 1 ? 2 : m.lease_token - 1;
  EXPECT_EQ(CompleteOne("q", "a", wrong).code(), Code::kFailedPrecondition);
  EXPECT_EQ(FailOne("q", "a", wrong).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(engine().Extend("q", "a", wrong, 1'000).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(CompleteOne("q", "a", 0).code(), Code::kFailedPrecondition);
  MessageRecord stored = GetMessage("q", "a");
  EXPECT_EQ(stored.state, MessageState::kRunning);
  EXPECT_EQ(stored.version, 2u);
}

TEST_F(TransitionsTest, StaleLeaseTokenGetsFailedPrecondition) {
  QueueSettings s;
  s.lease_ms = 100;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord first = TakeOne("q");
  AdvanceTime(100);  // lease expires, back to pending
  MessageRecord second = TakeOne("q");
  ASSERT_EQ(second.id, "a");
  ASSERT_NE(second.lease_token, first.lease_token);
  EXPECT_EQ(CompleteOne("q", "a", first.lease_token).code(), Code::kFailedPrecondition);
  EXPECT_EQ(FailOne("q", "a", first.lease_token).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(engine().Extend("q", "a", first.lease_token, 100).status().code(),
            Code::kFailedPrecondition);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kRunning);
  EXPECT_TRUE(CompleteOne("q", "a", second.lease_token).ok());
}

TEST_F(TransitionsTest, ExpiredLeaseIsRefusedEvenBeforeAdvanceRuns) {
  QueueSettings s;
  s.lease_ms = 100;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  AdvanceClockOnly(100);  // now == lease_expires_at: no longer valid
  EXPECT_EQ(StateOf("q", "a"), MessageState::kRunning);
  EXPECT_EQ(CompleteOne("q", "a", m.lease_token).code(), Code::kFailedPrecondition);
  EXPECT_EQ(FailOne("q", "a", m.lease_token).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(engine().Extend("q", "a", m.lease_token, 1'000).status().code(),
            Code::kFailedPrecondition);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kRunning);
  EXPECT_EQ(GetMessage("q", "a").version, 2u);
}

TEST_F(TransitionsTest, LeaseIsValidUntilOneMillisecondBeforeExpiry) {
  QueueSettings s;
  s.lease_ms = 100;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  AdvanceTime(99);
  EXPECT_TRUE(CompleteOne("q", "a", m.lease_token).ok());
}

TEST_F(TransitionsTest, CompleteOfMessageThatIsNotRunningIsFailedPrecondition) {
  MakeQueue("q");
  Put("q", "pending");
  PutDelayed("q", "invisible", 1'000);
  EXPECT_EQ(CompleteOne("q", "pending", 1).code(), Code::kFailedPrecondition);
  EXPECT_EQ(CompleteOne("q", "invisible", 1).code(), Code::kFailedPrecondition);
  EXPECT_EQ(CompleteOne("q", "nope", 1).code(), Code::kNotFound);
}

TEST_F(TransitionsTest, CompleteBatchAnswersPerItem) {
  MakeQueue("q");
  Put("q", "a");
  Put("q", "b");
  std::vector<MessageRecord> got = Take("q", 2);
  ASSERT_EQ(got.size(), 2u);
  std::vector<Status> r = engine().Complete(
      "q", {CompleteItem{"a", got[0].lease_token}, CompleteItem{"missing", 1},
            CompleteItem{"b", got[1].lease_token + 1}, CompleteItem{"b", got[1].lease_token}});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_TRUE(r[0].ok());
  EXPECT_EQ(r[1].code(), Code::kNotFound);
  EXPECT_EQ(r[2].code(), Code::kFailedPrecondition);
  EXPECT_TRUE(r[3].ok());
  EXPECT_EQ(Counts("q")[MessageState::kCompleted], 2u);
}

// ---- Fail -----------------------------------------------------------------------------------

TEST_F(TransitionsTest, FailBeforeMaxAttemptsMakesMessageInvisibleWithBackoff) {
  MakeQueue("q");  // retry_backoff_ms 1000
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Result<FailResult> r = FailOne("q", "a", m.lease_token, std::nullopt, "it broke");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->state, MessageState::kInvisible);
  EXPECT_GE(r->visible_at, Now() + 900);
  EXPECT_LE(r->visible_at, Now() + 1'100);
  EXPECT_EQ(r->dead_letter_queue, "");

  MessageRecord stored = GetMessage("q", "a");
  EXPECT_EQ(stored.state, MessageState::kInvisible);
  EXPECT_EQ(stored.visible_at, r->visible_at);
  EXPECT_EQ(stored.last_error, "it broke");
  EXPECT_EQ(stored.lease_token, 0u);
  EXPECT_EQ(stored.lease_expires_at, 0);
  EXPECT_EQ(stored.attempts, 1u);
  EXPECT_EQ(stored.version, 3u);
  EXPECT_TRUE(Take("q").empty());
}

TEST_F(TransitionsTest, BackoffDoublesWithEachAttempt) {
  QueueSettings s;
  s.retry_backoff_ms = 1'000;
  s.retry_backoff_max_ms = 1'000'000;
  s.max_attempts = 10;
  MakeQueue("q", s);
  Put("q", "a");
  for (int attempt = 1; attempt <= 5; ++attempt) {
    MessageRecord m = TakeOne("q");
    ASSERT_EQ(m.attempts, static_cast<uint32_t>(attempt));
    Result<FailResult> r = FailOne("q", "a", m.lease_token);
    ASSERT_TRUE(r.ok());
    int64_t base = int64_t{1'000} << (attempt - 1);
    int64_t delay = r->visible_at - Now();
    EXPECT_GE(delay, base - base / 10) << "attempt " << attempt;
    EXPECT_LE(delay, base + base / 10) << "attempt " << attempt;
    AdvanceTime(delay);
    ASSERT_EQ(StateOf("q", "a"), MessageState::kPending);
  }
}

TEST_F(TransitionsTest, BackoffIsCappedAtRetryBackoffMax) {
  QueueSettings s;
  s.retry_backoff_ms = 1'000;
  s.retry_backoff_max_ms = 2'500;
  s.max_attempts = 10;
  MakeQueue("q", s);
  Put("q", "a");
  for (int attempt = 1; attempt <= 5; ++attempt) {
    MessageRecord m = TakeOne("q");
    Result<FailResult> r = FailOne("q", "a", m.lease_token);
    ASSERT_TRUE(r.ok());
    int64_t base = std::min<int64_t>(int64_t{1'000} << (attempt - 1), 2'500);
    int64_t delay = r->visible_at - Now();
    EXPECT_GE(delay, base - base / 10) << "attempt " << attempt;
    EXPECT_LE(delay, base + base / 10) << "attempt " << attempt;
    AdvanceTime(delay);
  }
}

TEST_F(TransitionsTest, BackoffHasJitterWithinTenPercent) {
  QueueSettings s;
  s.retry_backoff_ms = 10'000;
  MakeQueue("q", s);
  std::set<int64_t> delays;
  for (int i = 0; i < 40; ++i) Put("q", "m" + std::to_string(i));
  for (const MessageRecord& m : Take("q", 40)) {
    Result<FailResult> r = FailOne("q", m.id, m.lease_token);
    ASSERT_TRUE(r.ok());
    int64_t delay = r->visible_at - Now();
    EXPECT_GE(delay, 9'000);
    EXPECT_LE(delay, 11'000);
    delays.insert(delay);
  }
  EXPECT_GT(delays.size(), 1u) << "backoff has no jitter";
}

TEST_F(TransitionsTest, FailWithRetryDelayUsesItExactly) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Result<FailResult> r = FailOne("q", "a", m.lease_token, 12'345);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->state, MessageState::kInvisible);
  EXPECT_EQ(r->visible_at, Now() + 12'345);
  EXPECT_EQ(GetMessage("q", "a").visible_at, Now() + 12'345);
}

TEST_F(TransitionsTest, FailWithZeroRetryDelayMakesMessagePendingAtOnce) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Result<FailResult> r = FailOne("q", "a", m.lease_token, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->state, MessageState::kPending);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
  MessageRecord again = TakeOne("q");
  EXPECT_EQ(again.id, "a");
  EXPECT_EQ(again.attempts, 2u);
}

TEST_F(TransitionsTest, FailedMessageBecomesPendingExactlyWhenBackoffElapses) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Result<FailResult> r = FailOne("q", "a", m.lease_token, 500);
  ASSERT_TRUE(r.ok());
  AdvanceTime(499);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kInvisible);
  EXPECT_TRUE(Take("q").empty());
  AdvanceTime(1);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
  EXPECT_EQ(TakeOne("q").id, "a");
}

TEST_F(TransitionsTest, FailAtMaxAttemptsMakesMessageErrored) {
  QueueSettings s;
  s.max_attempts = 2;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord first = TakeOne("q");
  Result<FailResult> r1 = FailOne("q", "a", first.lease_token, 0);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->state, MessageState::kPending);
  MessageRecord second = TakeOne("q");
  ASSERT_EQ(second.attempts, 2u);
  Result<FailResult> r2 = FailOne("q", "a", second.lease_token, 0, "final");
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->state, MessageState::kErrored);
  EXPECT_EQ(r2->dead_letter_queue, "");
  MessageRecord stored = GetMessage("q", "a");
  EXPECT_EQ(stored.state, MessageState::kErrored);
  EXPECT_EQ(stored.attempts, 2u);
  EXPECT_EQ(stored.last_error, "final");
  EXPECT_EQ(stored.lease_token, 0u);
  EXPECT_EQ(Counts("q")[MessageState::kErrored], 1u);
  EXPECT_TRUE(Take("q").empty());
}

TEST_F(TransitionsTest, FailErrorIsTruncatedTo1024Bytes) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(FailOne("q", "a", m.lease_token, 0, std::string(3'000, 'e')).ok());
  EXPECT_EQ(GetMessage("q", "a").last_error, std::string(kMaxErrorBytes, 'e'));
}

TEST_F(TransitionsTest, FailErrorIsTruncatedAtAUtf8Boundary) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  // 1023 ASCII bytes then a 2-byte character that would straddle the limit.
  std::string error = std::string(1'023, 'e') + "\xC3\xA9" + "tail";
  ASSERT_TRUE(FailOne("q", "a", m.lease_token, 0, error).ok());
  EXPECT_EQ(GetMessage("q", "a").last_error, std::string(1'023, 'e'));
}

TEST_F(TransitionsTest, FailOfMissingMessageIsNotFound) {
  MakeQueue("q");
  EXPECT_EQ(FailOne("q", "nope", 1).status().code(), Code::kNotFound);
}

// ---- Extend ---------------------------------------------------------------------------------

TEST_F(TransitionsTest, ExtendSetsNewExpiryFromNowKeepingTheToken) {
  QueueSettings s;
  s.lease_ms = 100;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  AdvanceTime(60);
  Result<TimeMs> r = engine().Extend("q", "a", m.lease_token, 500);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Now() + 500);
  MessageRecord stored = GetMessage("q", "a");
  EXPECT_EQ(stored.lease_expires_at, Now() + 500);
  EXPECT_EQ(stored.lease_token, m.lease_token);
  EXPECT_EQ(stored.version, 3u);
  EXPECT_EQ(stored.attempts, 1u);

  AdvanceTime(100);  // past the old expiry
  EXPECT_EQ(StateOf("q", "a"), MessageState::kRunning);
  EXPECT_TRUE(CompleteOne("q", "a", m.lease_token).ok());
}

TEST_F(TransitionsTest, ExtendedLeaseExpiresAtItsNewTime) {
  QueueSettings s;
  s.lease_ms = 100;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(engine().Extend("q", "a", m.lease_token, 300).ok());
  AdvanceTime(299);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kRunning);
  AdvanceTime(1);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
}

TEST_F(TransitionsTest, ExtendOfMessageThatIsNotRunningIsFailedPrecondition) {
  MakeQueue("q");
  Put("q", "a");
  EXPECT_EQ(engine().Extend("q", "a", 1, 100).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(engine().Extend("q", "nope", 1, 100).status().code(), Code::kNotFound);
}

// ---- Lease expiry ---------------------------------------------------------------------------

TEST_F(TransitionsTest, LeaseExpiryReturnsMessageToPendingKeepingEnqueueOrder) {
  QueueSettings s;
  s.lease_ms = 100;
  MakeQueue("q", s);
  Put("q", "a", 5);
  Put("q", "b", 5);
  Put("q", "c", 5);
  MessageRecord a = TakeOne("q");
  ASSERT_EQ(a.id, "a");
  AdvanceTime(100);
  MessageRecord stored = GetMessage("q", "a");
  EXPECT_EQ(stored.state, MessageState::kPending);
  EXPECT_EQ(stored.attempts, 1u);
  EXPECT_EQ(stored.version, 3u);
  EXPECT_EQ(stored.lease_token, 0u);
  EXPECT_EQ(stored.lease_expires_at, 0);
  EXPECT_EQ(stored.updated_at, Now());
  EXPECT_EQ(DrainIds("q"), (std::vector<std::string>{"a", "b", "c"}));
}

TEST_F(TransitionsTest, LeaseDoesNotExpireEarly) {
  QueueSettings s;
  s.lease_ms = 100;
  MakeQueue("q", s);
  Put("q", "a");
  TakeOne("q");
  AdvanceTime(99);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kRunning);
  EXPECT_TRUE(Take("q").empty());
  AdvanceTime(1);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
}

TEST_F(TransitionsTest, LeaseExpiryAtMaxAttemptsMakesMessageErrored) {
  QueueSettings s;
  s.lease_ms = 100;
  s.max_attempts = 2;
  MakeQueue("q", s);
  Put("q", "a");
  TakeOne("q");
  AdvanceTime(100);
  ASSERT_EQ(StateOf("q", "a"), MessageState::kPending);
  TakeOne("q");
  AdvanceTime(100);
  MessageRecord stored = GetMessage("q", "a");
  EXPECT_EQ(stored.state, MessageState::kErrored);
  EXPECT_EQ(stored.attempts, 2u);
  EXPECT_EQ(stored.version, 5u);
  EXPECT_EQ(stored.lease_token, 0u);
}

TEST_F(TransitionsTest, LeaseExpiryKeepsLastError) {
  QueueSettings s;
  s.lease_ms = 100;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(FailOne("q", "a", m.lease_token, 0, "first failure").ok());
  TakeOne("q");
  AdvanceTime(100);
  MessageRecord stored = GetMessage("q", "a");
  EXPECT_EQ(stored.state, MessageState::kPending);
  EXPECT_EQ(stored.last_error, "first failure");
}

TEST_F(TransitionsTest, ExpiredButUnprocessedLeaseStaysRunningAndIsNotDequeued) {
  QueueSettings s;
  s.lease_ms = 100;
  MakeQueue("q", s);
  Put("q", "a");
  TakeOne("q");
  AdvanceClockOnly(500);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kRunning);
  EXPECT_TRUE(Take("q").empty());
  engine().Advance(Now());
  EXPECT_EQ(TakeOne("q").id, "a");
}

// ---- Timers ---------------------------------------------------------------------------------

TEST_F(TransitionsTest, TimersNeverFireEarly) {
  QueueSettings s;
  s.lease_ms = 1'000;
  s.retention_ms = 1'000;
  MakeQueue("q", s);
  PutDelayed("q", "delayed", 1'000);
  Put("q", "leased");
  Put("q", "done");
  MessageRecord leased = TakeOne("q");
  ASSERT_EQ(leased.id, "leased");
  MessageRecord done = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "done", done.lease_token).ok());

  // Advance one millisecond at a time up to just before the common due time.
  for (int i = 0; i < 999; ++i) {
    EXPECT_EQ(AdvanceTime(1), 0u) << "a timer fired at +" << i + 1 << " ms";
  }
  EXPECT_EQ(StateOf("q", "delayed"), MessageState::kInvisible);
  EXPECT_EQ(StateOf("q", "leased"), MessageState::kRunning);
  EXPECT_EQ(StateOf("q", "done"), MessageState::kCompleted);
  EXPECT_EQ(AdvanceTime(1), 3u);
  EXPECT_EQ(StateOf("q", "delayed"), MessageState::kPending);
  EXPECT_EQ(StateOf("q", "leased"), MessageState::kPending);
  EXPECT_EQ(GetCode("q", "done"), Code::kNotFound);
}

TEST_F(TransitionsTest, InvisibleMessagePastVisibleAtStaysInvisibleUntilAdvance) {
  MakeQueue("q");
  PutDelayed("q", "a", 100);
  AdvanceClockOnly(200);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kInvisible);
  EXPECT_TRUE(Take("q").empty());
  EXPECT_EQ(engine().Advance(Now()), 1u);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
}

TEST_F(TransitionsTest, TimerTransitionTimeIsAdvancesNow) {
  MakeQueue("q");
  PutDelayed("q", "a", 100);
  AdvanceTime(250);
  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.state, MessageState::kPending);
  EXPECT_EQ(m.updated_at, Now());
  EXPECT_EQ(m.version, 2u);
  EXPECT_EQ(m.visible_at, 0);
}

TEST_F(TransitionsTest, BecomingVisibleKeepsEnqueueOrderAmongEqualPriorities) {
  MakeQueue("q");
  PutDelayed("q", "first", 100, 1);
  Put("q", "second", 1);
  AdvanceTime(100);
  EXPECT_EQ(DrainIds("q"), (std::vector<std::string>{"first", "second"}));
}

TEST_F(TransitionsTest, NextDueTimeReportsTheEarliestTimer) {
  QueueSettings s;
  s.lease_ms = 700;
  s.retention_ms = 5'000;
  MakeQueue("q", s);
  EXPECT_EQ(engine().NextDueTime(), std::numeric_limits<int64_t>::max());
  PutDelayed("q", "a", 1'000);
  EXPECT_EQ(engine().NextDueTime(), Now() + 1'000);
  Put("q", "b");
  MessageRecord b = TakeOne("q");
  EXPECT_EQ(engine().NextDueTime(), Now() + 700);
  ASSERT_TRUE(CompleteOne("q", "b", b.lease_token).ok());
  EXPECT_EQ(engine().NextDueTime(), Now() + 1'000);
  AdvanceTime(1'000);
  EXPECT_EQ(engine().NextDueTime(), Now() - 1'000 + 5'000);  // retention of b
  AdvanceTime(4'000);
  EXPECT_EQ(engine().NextDueTime(), std::numeric_limits<int64_t>::max());
}

TEST_F(TransitionsTest, AdvanceProcessesManyDueTimersAtOnce) {
  MakeQueue("q");
  for (int i = 0; i < 50; ++i) PutDelayed("q", "m" + std::to_string(i), 10 + i);
  EXPECT_EQ(AdvanceTime(1'000), 50u);
  EXPECT_EQ(Counts("q")[MessageState::kPending], 50u);
  EXPECT_EQ(Counts("q")[MessageState::kInvisible], 0u);
}

// ---- Cancel ---------------------------------------------------------------------------------

TEST_F(TransitionsTest, CancelMovesInvisiblePendingAndRunningToCanceled) {
  MakeQueue("q");
  PutDelayed("q", "invisible", 1'000);
  Put("q", "running", 1);
  Put("q", "pending", 2);
  MessageRecord running = TakeOne("q");
  ASSERT_EQ(running.id, "running");
  std::vector<Status> r = engine().Cancel("q", {"invisible", "running", "pending"});
  ASSERT_EQ(r.size(), 3u);
  for (const Status& s : r) EXPECT_TRUE(s.ok());
  EXPECT_EQ(StateOf("q", "invisible"), MessageState::kCanceled);
  EXPECT_EQ(StateOf("q", "pending"), MessageState::kCanceled);
  MessageRecord c = GetMessage("q", "running");
  EXPECT_EQ(c.state, MessageState::kCanceled);
  EXPECT_EQ(c.version, 3u);
  EXPECT_EQ(c.lease_token, 0u);
  EXPECT_EQ(c.lease_expires_at, 0);
  EXPECT_EQ(c.visible_at, 0);
  EXPECT_EQ(GetMessage("q", "pending").version, 2u);
  EXPECT_EQ(Counts("q")[MessageState::kCanceled], 3u);
  // The canceled lease is stale.
  EXPECT_EQ(CompleteOne("q", "running", running.lease_token).code(), Code::kFailedPrecondition);
  // A canceled invisible message does not come back when its time comes.
  AdvanceTime(1'000);
  EXPECT_EQ(StateOf("q", "invisible"), MessageState::kCanceled);
  EXPECT_TRUE(Take("q").empty());
}

TEST_F(TransitionsTest, CancelOfCanceledMessageSucceedsWithoutChange) {
  MakeQueue("q");
  Put("q", "a");
  ASSERT_TRUE(CancelOne("q", "a").ok());
  ASSERT_EQ(GetMessage("q", "a").version, 2u);
  EXPECT_TRUE(CancelOne("q", "a").ok());
  EXPECT_EQ(GetMessage("q", "a").version, 2u);
}

TEST_F(TransitionsTest, CancelOfCompletedOrErroredMessageIsFailedPrecondition) {
  QueueSettings s;
  s.max_attempts = 1;
  MakeQueue("q", s);
  Put("q", "done", 1);
  Put("q", "broken", 2);
  MessageRecord done = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "done", done.lease_token).ok());
  MessageRecord broken = TakeOne("q");
  ASSERT_TRUE(FailOne("q", "broken", broken.lease_token).ok());
  ASSERT_EQ(StateOf("q", "broken"), MessageState::kErrored);
  EXPECT_EQ(CancelOne("q", "done").code(), Code::kFailedPrecondition);
  EXPECT_EQ(CancelOne("q", "broken").code(), Code::kFailedPrecondition);
  EXPECT_EQ(CancelOne("q", "nope").code(), Code::kNotFound);
  EXPECT_EQ(StateOf("q", "done"), MessageState::kCompleted);
  EXPECT_EQ(StateOf("q", "broken"), MessageState::kErrored);
}

// ---- Reprioritize ---------------------------------------------------------------------------

TEST_F(TransitionsTest, ReprioritizeChangesDequeueOrderAndReturnsNewVersion) {
  MakeQueue("q");
  Put("q", "a", 1);
  Put("q", "b", 2);
  Result<uint64_t> r = SetPriority("q", "b", 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2u);
  MessageRecord b = GetMessage("q", "b");
  EXPECT_EQ(b.priority, 0);
  EXPECT_EQ(b.version, 2u);
  EXPECT_EQ(DrainIds("q"), (std::vector<std::string>{"b", "a"}));
}

TEST_F(TransitionsTest, ReprioritizeKeepsEnqueueOrderAmongEqualPriorities) {
  MakeQueue("q");
  Put("q", "first", 9);
  Put("q", "second", 5);
  Put("q", "third", 5);
  ASSERT_TRUE(SetPriority("q", "third", 1).ok());
  ASSERT_TRUE(SetPriority("q", "third", 5).ok());
  ASSERT_TRUE(SetPriority("q", "first", 5).ok());
  EXPECT_EQ(DrainIds("q"), (std::vector<std::string>{"first", "second", "third"}));
}

TEST_F(TransitionsTest, ReprioritizeWithFutureVisibleAtMakesMessageInvisible) {
  MakeQueue("q");
  Put("q", "a");
  Result<uint64_t> r = SetVisibleAt("q", "a", Now() + 400);
  ASSERT_TRUE(r.ok());
  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.state, MessageState::kInvisible);
  EXPECT_EQ(m.visible_at, Now() + 400);
  EXPECT_TRUE(Take("q").empty());
  AdvanceTime(399);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kInvisible);
  AdvanceTime(1);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
}

TEST_F(TransitionsTest, ReprioritizeWithPastVisibleAtMakesInvisibleMessagePending) {
  MakeQueue("q");
  PutDelayed("q", "a", 10'000);
  ASSERT_TRUE(SetVisibleAt("q", "a", Now()).ok());
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
  EXPECT_EQ(TakeOne("q").id, "a");
  // The old visibility timer must not fire on the message later.
  AdvanceTime(10'000);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kRunning);
}

TEST_F(TransitionsTest, ReprioritizeInvisibleMessageMovesItsTimer) {
  MakeQueue("q");
  PutDelayed("q", "a", 100);
  ASSERT_TRUE(SetVisibleAt("q", "a", Now() + 1'000).ok());
  AdvanceTime(100);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kInvisible);
  AdvanceTime(900);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
}

TEST_F(TransitionsTest, ReprioritizeWithBothFieldsIsOneVersion) {
  MakeQueue("q");
  Put("q", "a", 5);
  ReprioritizeRequest request;
  request.priority = 1;
  request.visible_at = Now() + 100;
  Result<uint64_t> r = engine().Reprioritize("q", "a", request);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2u);
  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.priority, 1);
  EXPECT_EQ(m.state, MessageState::kInvisible);
  EXPECT_EQ(m.version, 2u);
}

TEST_F(TransitionsTest, ReprioritizeOfRunningOrTerminalMessageIsFailedPrecondition) {
  MakeQueue("q");
  Put("q", "running", 1);
  Put("q", "canceled", 2);
  TakeOne("q");
  ASSERT_TRUE(CancelOne("q", "canceled").ok());
  EXPECT_EQ(SetPriority("q", "running", 0).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(SetPriority("q", "canceled", 0).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(SetPriority("q", "nope", 0).status().code(), Code::kNotFound);
  EXPECT_EQ(GetMessage("q", "running").priority, 1);
}

TEST_F(TransitionsTest, ReprioritizeWithNeitherFieldIsInvalidArgument) {
  MakeQueue("q");
  Put("q", "a");
  EXPECT_EQ(engine().Reprioritize("q", "a", ReprioritizeRequest{}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(GetMessage("q", "a").version, 1u);
}

// ---- Redrive --------------------------------------------------------------------------------

TEST_F(TransitionsTest, RedriveResetsAttempts) {
  QueueSettings s;
  s.max_attempts = 2;
  MakeQueue("q", s);
  Put("q", "a");
  ExhaustAttempts("q", "a");
  MessageRecord errored = GetMessage("q", "a");
  ASSERT_EQ(errored.state, MessageState::kErrored);
  ASSERT_EQ(errored.attempts, 2u);

  ASSERT_TRUE(RedriveOne("q", "a").ok());
  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.state, MessageState::kPending);
  EXPECT_EQ(m.attempts, 0u);
  EXPECT_EQ(m.version, errored.version + 1);
  EXPECT_EQ(m.last_error, errored.last_error);

  // It gets max_attempts fresh attempts.
  MessageRecord first = TakeOne("q");
  EXPECT_EQ(first.attempts, 1u);
  Result<FailResult> r1 = FailOne("q", "a", first.lease_token, 0);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->state, MessageState::kPending);
  MessageRecord second = TakeOne("q");
  EXPECT_EQ(second.attempts, 2u);
  Result<FailResult> r2 = FailOne("q", "a", second.lease_token, 0);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->state, MessageState::kErrored);
}

TEST_F(TransitionsTest, RedriveKeepsEnqueueOrder) {
  QueueSettings s;
  s.max_attempts = 1;
  MakeQueue("q", s);
  Put("q", "a", 5);
  Put("q", "b", 5);
  ExhaustAttempts("q", "a");
  ASSERT_TRUE(RedriveOne("q", "a").ok());
  EXPECT_EQ(DrainIds("q"), (std::vector<std::string>{"a", "b"}));
}

TEST_F(TransitionsTest, RedriveOfMessageThatIsNotErroredIsFailedPrecondition) {
  MakeQueue("q");
  Put("q", "pending");
  std::vector<Status> r = engine().Redrive("q", {"pending", "missing"});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].code(), Code::kFailedPrecondition);
  EXPECT_EQ(r[1].code(), Code::kNotFound);
  EXPECT_EQ(GetMessage("q", "pending").version, 1u);
}

// ---- Retention ------------------------------------------------------------------------------

TEST_F(TransitionsTest, RetentionRemovesTerminalMessagesAndFreesId) {
  QueueSettings s;
  s.retention_ms = 1'000;
  MakeQueue("q", s);
  Put("q", Item("a", 1, {}, "old"));
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "a", m.lease_token).ok());
  AdvanceTime(999);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kCompleted);
  AdvanceTime(1);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  EXPECT_EQ(Counts("q")[MessageState::kCompleted], 0u);

  Result<EnqueueResult> again = EnqueueOne("q", Item("a", 2, {}, "new"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->duplicate);
  EXPECT_EQ(again->version, 1u);
  EXPECT_EQ(GetMessage("q", "a").payload, "new");
}

TEST_F(TransitionsTest, RetentionAppliesToCanceledAndErroredMessages) {
  QueueSettings s;
  s.retention_ms = 500;
  s.max_attempts = 1;
  MakeQueue("q", s);
  Put("q", "errored", 1);
  Put("q", "canceled", 2);
  ExhaustAttempts("q", "errored");
  ASSERT_TRUE(CancelOne("q", "canceled").ok());
  AdvanceTime(499);
  EXPECT_EQ(StateOf("q", "errored"), MessageState::kErrored);
  EXPECT_EQ(StateOf("q", "canceled"), MessageState::kCanceled);
  AdvanceTime(1);
  EXPECT_EQ(GetCode("q", "errored"), Code::kNotFound);
  EXPECT_EQ(GetCode("q", "canceled"), Code::kNotFound);
  EXPECT_EQ(Counts("q"), StateCounts{});
}

TEST_F(TransitionsTest, RetentionIsCountedFromWhenTheMessageBecameTerminal) {
  QueueSettings s;
  s.retention_ms = 1'000;
  s.lease_ms = 30'000;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  AdvanceTime(5'000);  // enqueued and leased long before it completes
  ASSERT_TRUE(CompleteOne("q", "a", m.lease_token).ok());
  AdvanceTime(999);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kCompleted);
  AdvanceTime(1);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
}

TEST_F(TransitionsTest, RetentionUsesTheQueueSettingWhenTheMessageBecameTerminal) {
  QueueSettings s;
  s.retention_ms = 1'000;
  MakeQueue("q", s);
  Put("q", "before");
  Put("q", "after");
  ASSERT_TRUE(CancelOne("q", "before").ok());
  QueueSettingsUpdate update;
  update.retention_ms = 5'000;
  ASSERT_TRUE(engine().UpdateQueue("q", update).ok());
  ASSERT_TRUE(CancelOne("q", "after").ok());
  AdvanceTime(1'000);
  EXPECT_EQ(GetCode("q", "before"), Code::kNotFound);
  EXPECT_EQ(StateOf("q", "after"), MessageState::kCanceled);
  AdvanceTime(3'999);
  EXPECT_EQ(StateOf("q", "after"), MessageState::kCanceled);
  AdvanceTime(1);
  EXPECT_EQ(GetCode("q", "after"), Code::kNotFound);
}

TEST_F(TransitionsTest, ZeroRetentionRemovesAtTheNextAdvance) {
  QueueSettings s;
  s.retention_ms = 0;
  MakeQueue("q", s);
  Put("q", "a");
  ASSERT_TRUE(CancelOne("q", "a").ok());
  engine().Advance(Now());
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
}

TEST_F(TransitionsTest, RetentionDoesNotRemoveLiveMessages) {
  QueueSettings s;
  s.retention_ms = 10;
  s.lease_ms = 1'000'000;
  MakeQueue("q", s);
  Put("q", "pending", 1);
  Put("q", "running", 0);
  PutDelayed("q", "invisible", 1'000'000);
  TakeOne("q");
  AdvanceTime(100'000);
  EXPECT_EQ(StateOf("q", "pending"), MessageState::kPending);
  EXPECT_EQ(StateOf("q", "running"), MessageState::kRunning);
  EXPECT_EQ(StateOf("q", "invisible"), MessageState::kInvisible);
}

// ---- Versions -------------------------------------------------------------------------------

TEST_F(TransitionsTest, VersionIncrementsOnEveryChange) {
  QueueSettings s;
  s.lease_ms = 100;
  s.max_attempts = 10;
  MakeQueue("q", s);
  Result<EnqueueResult> e = EnqueueOne("q", Item("a"));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->version, 1u);

  MessageRecord m = TakeOne("q");  // leased
  EXPECT_EQ(m.version, 2u);
  ASSERT_TRUE(engine().Extend("q", "a", m.lease_token, 100).ok());  // extended
  EXPECT_EQ(GetMessage("q", "a").version, 3u);
  ASSERT_TRUE(FailOne("q", "a", m.lease_token, 10).ok());  // failed -> invisible
  EXPECT_EQ(GetMessage("q", "a").version, 4u);
  AdvanceTime(10);  // became visible
  EXPECT_EQ(GetMessage("q", "a").version, 5u);
  Result<uint64_t> rp = SetPriority("q", "a", 3);  // reprioritized
  ASSERT_TRUE(rp.ok());
  EXPECT_EQ(*rp, 6u);
  m = TakeOne("q");
  EXPECT_EQ(m.version, 7u);
  AdvanceTime(100);  // lease expired
  EXPECT_EQ(GetMessage("q", "a").version, 8u);
  m = TakeOne("q");
  EXPECT_EQ(m.version, 9u);
  ASSERT_TRUE(CompleteOne("q", "a", m.lease_token).ok());
  EXPECT_EQ(GetMessage("q", "a").version, 10u);

  Put("q", "b");
  ASSERT_TRUE(CancelOne("q", "b").ok());
  EXPECT_EQ(GetMessage("q", "b").version, 2u);
}

// ---- Reads ----------------------------------------------------------------------------------

TEST_F(TransitionsTest, GetShowsTimesAndTokensOnlyInTheirStates) {
  MakeQueue("q");
  PutDelayed("q", "a", 100);
  MessageRecord invisible = GetMessage("q", "a");
  EXPECT_EQ(invisible.visible_at, Now() + 100);
  EXPECT_EQ(invisible.lease_token, 0u);
  EXPECT_EQ(invisible.lease_expires_at, 0);
  AdvanceTime(100);
  MessageRecord pending = GetMessage("q", "a");
  EXPECT_EQ(pending.visible_at, 0);
  EXPECT_EQ(pending.lease_token, 0u);
  EXPECT_EQ(pending.lease_expires_at, 0);
  MessageRecord leased = TakeOne("q");
  MessageRecord running = GetMessage("q", "a");
  EXPECT_EQ(running.visible_at, 0);
  EXPECT_EQ(running.lease_token, leased.lease_token);
  EXPECT_NE(running.lease_expires_at, 0);
  ASSERT_TRUE(CompleteOne("q", "a", leased.lease_token).ok());
  MessageRecord completed = GetMessage("q", "a");
  EXPECT_EQ(completed.visible_at, 0);
  EXPECT_EQ(completed.lease_token, leased.lease_token);
  EXPECT_EQ(completed.lease_expires_at, 0);
  EXPECT_EQ(completed.enqueued_at, invisible.enqueued_at);
}

TEST_F(TransitionsTest, GetOfMissingMessageIsNotFound) {
  MakeQueue("q");
  EXPECT_EQ(GetCode("q", "nope"), Code::kNotFound);
}

TEST_F(TransitionsTest, CountReportsEveryState) {
  QueueSettings s;
  s.max_attempts = 1;
  MakeQueue("q", s);
  PutDelayed("q", "invisible", 1'000);
  Put("q", "errored", 0);
  Put("q", "completed", 1);
  Put("q", "running", 2);
  Put("q", "canceled", 3);
  Put("q", "pending1", 4);
  Put("q", "pending2", 5);
  ExhaustAttempts("q", "errored");
  MessageRecord c = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", c.id, c.lease_token).ok());
  TakeOne("q");
  ASSERT_TRUE(CancelOne("q", "canceled").ok());
  StateCounts counts = Counts("q");
  EXPECT_EQ(counts[MessageState::kInvisible], 1u);
  EXPECT_EQ(counts[MessageState::kPending], 2u);
  EXPECT_EQ(counts[MessageState::kRunning], 1u);
  EXPECT_EQ(counts[MessageState::kCompleted], 1u);
  EXPECT_EQ(counts[MessageState::kCanceled], 1u);
  EXPECT_EQ(counts[MessageState::kErrored], 1u);
  EXPECT_EQ(counts.blocked, 0u);
  EXPECT_EQ(GetQueueInfo("q").counts, counts);
}

TEST_F(TransitionsTest, BrowseCursorPagesInPriorityOrderWithoutRepeats) {
  MakeQueue("q");
  std::mt19937 rng(3);
  std::vector<std::pair<int64_t, int>> order;
  for (int i = 0; i < 53; ++i) {
    int64_t p = static_cast<int64_t>(rng() % 6);
    Put("q", "m" + std::to_string(i), p);
    order.emplace_back(p, i);
  }
  std::sort(order.begin(), order.end());
  std::vector<std::string> want;
  for (const auto& [p, i] : order) want.push_back("m" + std::to_string(i));

  std::vector<std::string> got;
  BrowseRequest request;
  request.state = MessageState::kPending;
  request.limit = 10;
  int pages = 0;
  while (true) {
    Result<BrowsePage> page = engine().Browse("q", request);
    ASSERT_TRUE(page.ok());
    ++pages;
    ASSERT_LE(page->messages.size(), 10u);
    for (const MessageSummary& m : page->messages) {
      got.push_back(m.id);
      EXPECT_EQ(m.state, MessageState::kPending);
    }
    if (page->next_cursor.empty()) break;
    ASSERT_LT(pages, 20) << "browse does not terminate";
    request.cursor = page->next_cursor;
  }
  EXPECT_EQ(got, want);
  EXPECT_GE(pages, 6);
}

TEST_F(TransitionsTest, BrowsePageStartsStrictlyAfterTheCursorEvenIfThatMessageLeft) {
  MakeQueue("q");
  for (int i = 0; i < 6; ++i) Put("q", "m" + std::to_string(i), i);
  BrowseRequest request;
  request.limit = 2;
  Result<BrowsePage> first = engine().Browse("q", request);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(IdsOf(first->messages), (std::vector<std::string>{"m0", "m1"}));
  ASSERT_FALSE(first->next_cursor.empty());
  ASSERT_TRUE(CancelOne("q", "m1").ok());
  request.cursor = first->next_cursor;
  Result<BrowsePage> second = engine().Browse("q", request);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(IdsOf(second->messages), (std::vector<std::string>{"m2", "m3"}));
}

TEST_F(TransitionsTest, BrowseSummariesCarryTheMessageFields) {
  MakeQueue("q");
  Put("q", "a", 4);
  MessageRecord leased = TakeOne("q");
  BrowseRequest request;
  request.state = MessageState::kRunning;
  Result<BrowsePage> page = engine().Browse("q", request);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->messages.size(), 1u);
  const MessageSummary& m = page->messages[0];
  EXPECT_EQ(m.id, "a");
  EXPECT_EQ(m.priority, 4);
  EXPECT_EQ(m.state, MessageState::kRunning);
  EXPECT_EQ(m.attempts, 1u);
  EXPECT_EQ(m.version, 2u);
  EXPECT_EQ(m.lease_expires_at, leased.lease_expires_at);
  EXPECT_EQ(m.enqueued_at, leased.enqueued_at);
  EXPECT_EQ(m.updated_at, Now());
  EXPECT_TRUE(page->next_cursor.empty());
}

TEST_F(TransitionsTest, BrowseShowsOnlyTheRequestedState) {
  MakeQueue("q");
  Put("q", "p1", 1);
  Put("q", "r", 0);
  Put("q", "p2", 2);
  PutDelayed("q", "i", 100, 0);
  TakeOne("q");
  BrowseRequest request;
  request.state = MessageState::kPending;
  Result<BrowsePage> pending = engine().Browse("q", request);
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ(IdsOf(pending->messages), (std::vector<std::string>{"p1", "p2"}));
  request.state = MessageState::kInvisible;
  Result<BrowsePage> invisible = engine().Browse("q", request);
  ASSERT_TRUE(invisible.ok());
  EXPECT_EQ(IdsOf(invisible->messages), (std::vector<std::string>{"i"}));
  request.state = MessageState::kCompleted;
  Result<BrowsePage> completed = engine().Browse("q", request);
  ASSERT_TRUE(completed.ok());
  EXPECT_TRUE(completed->messages.empty());
  EXPECT_TRUE(completed->next_cursor.empty());
}

TEST_F(TransitionsTest, BrowseWithMalformedCursorIsInvalidArgument) {
  MakeQueue("q");
  Put("q", "a");
  BrowseRequest request;
  request.cursor = "\xff not a cursor \x01";
  EXPECT_EQ(engine().Browse("q", request).status().code(), Code::kInvalidArgument);
}

TEST_F(TransitionsTest, ExplainReportsEachReason) {
  QueueSettings s;
  s.max_attempts = 1;
  MakeQueue("q", s);
  MakeQueue("x", ExclusiveSettings("k"));
  PutDelayed("q", "invisible", 300);
  Put("q", "errored", 0);
  Put("q", "running", 1);
  Put("q", "completed", 2);
  Put("q", "canceled", 3);
  Put("q", "pending", 4);
  ExhaustAttempts("q", "errored");
  MessageRecord running = TakeOne("q");
  ASSERT_EQ(running.id, "running");
  MessageRecord completed = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "completed", completed.lease_token).ok());
  ASSERT_TRUE(CancelOne("q", "canceled").ok());

  auto explain = [&](std::string_view queue, std::string_view id) {
    Result<Explanation> r = engine().Explain(queue, id);
    EXPECT_TRUE(r.ok()) << id;
    return r.ok() ? r.value() : Explanation{};
  };

  Explanation e = explain("q", "invisible");
  EXPECT_EQ(e.reason, ExplainReason::kInvisible);
  EXPECT_EQ(e.id, "invisible");
  EXPECT_EQ(e.state, MessageState::kInvisible);
  EXPECT_EQ(e.until, Now() + 300);

  e = explain("q", "pending");
  EXPECT_EQ(e.reason, ExplainReason::kDequeueable);
  EXPECT_EQ(e.state, MessageState::kPending);

  e = explain("q", "running");
  EXPECT_EQ(e.reason, ExplainReason::kRunning);
  EXPECT_EQ(e.state, MessageState::kRunning);
  EXPECT_EQ(e.lease_token, running.lease_token);
  EXPECT_EQ(e.until, running.lease_expires_at);

  e = explain("q", "errored");
  EXPECT_EQ(e.reason, ExplainReason::kAttemptsSpent);
  EXPECT_EQ(e.state, MessageState::kErrored);
  EXPECT_EQ(e.attempts, 1u);

  e = explain("q", "completed");
  EXPECT_EQ(e.reason, ExplainReason::kTerminal);
  EXPECT_EQ(e.state, MessageState::kCompleted);
  e = explain("q", "canceled");
  EXPECT_EQ(e.reason, ExplainReason::kTerminal);
  EXPECT_EQ(e.state, MessageState::kCanceled);

  Put("x", "held", 0, {{"k", "v"}});
  Put("x", "waiting", 1, {{"k", "v"}});
  MessageRecord holder = TakeOne("x");
  ASSERT_EQ(holder.id, "held");
  e = explain("x", "waiting");
  EXPECT_EQ(e.reason, ExplainReason::kExclusivityHeld);
  EXPECT_EQ(e.state, MessageState::kPending);
  EXPECT_EQ(e.exclusivity_value, "v");
  EXPECT_EQ(e.lease_token, holder.lease_token);
  EXPECT_EQ(e.until, holder.lease_expires_at);

  QueueSettingsUpdate pause;
  pause.dequeue_paused = true;
  ASSERT_TRUE(engine().UpdateQueue("q", pause).ok());
  e = explain("q", "pending");
  EXPECT_EQ(e.reason, ExplainReason::kQueuePaused);
  EXPECT_EQ(explain("q", "invisible").reason, ExplainReason::kInvisible);
  EXPECT_EQ(explain("q", "running").reason, ExplainReason::kRunning);

  EXPECT_EQ(engine().Explain("q", "nope").status().code(), Code::kNotFound);
}

TEST_F(TransitionsTest, ExplainFilterReportsEachReason) {
  MakeQueue("q");
  MakeQueue("x", ExclusiveSettings("k"));
  auto explain = [&](std::string_view queue, const Filter& filter) {
    Result<Explanation> r = engine().ExplainFilter(queue, filter);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r.value() : Explanation{};
  };

  EXPECT_EQ(explain("q", {{"color", "red"}}).reason, ExplainReason::kNoMatch);

  EnqueueItem later = Item("later", 0, {{"color", "red"}});
  later.delay_ms = 900;
  Put("q", later);
  EnqueueItem sooner = Item("sooner", 0, {{"color", "red"}});
  sooner.delay_ms = 400;
  Put("q", sooner);
  Explanation e = explain("q", {{"color", "red"}});
  EXPECT_EQ(e.reason, ExplainReason::kInvisible);
  EXPECT_EQ(e.id, "sooner");
  EXPECT_EQ(e.until, Now() + 400);

  Put("q", "blue2", 7, {{"color", "blue"}});
  Put("q", "blue1", 3, {{"color", "blue"}});
  e = explain("q", {{"color", "blue"}});
  EXPECT_EQ(e.reason, ExplainReason::kDequeueable);
  EXPECT_EQ(e.id, "blue1");

  Put("x", "held", 0, {{"k", "v"}, {"color", "green"}});
  Put("x", "waiting", 1, {{"k", "v"}, {"color", "green"}});
  MessageRecord holder = TakeOne("x");
  ASSERT_EQ(holder.id, "held");
  e = explain("x", {{"color", "green"}});
  EXPECT_EQ(e.reason, ExplainReason::kExclusivityHeld);
  EXPECT_EQ(e.id, "waiting");
  EXPECT_EQ(e.exclusivity_value, "v");
  EXPECT_EQ(e.lease_token, holder.lease_token);

  QueueSettingsUpdate pause;
  pause.dequeue_paused = true;
  ASSERT_TRUE(engine().UpdateQueue("q", pause).ok());
  EXPECT_EQ(explain("q", {{"color", "blue"}}).reason, ExplainReason::kQueuePaused);
}

TEST_F(TransitionsTest, OldestPendingAgeIsTheAgeOfTheHeadOfTheQueue) {
  MakeQueue("q");
  EXPECT_EQ(GetQueueInfo("q").oldest_pending_age_ms, 0);
  Put("q", "old", 5);
  AdvanceTime(100);
  Put("q", "urgent", 1);
  AdvanceTime(50);
  EXPECT_EQ(GetQueueInfo("q").oldest_pending_age_ms, 50);
  TakeOne("q");
  EXPECT_EQ(GetQueueInfo("q").oldest_pending_age_ms, 150);
  TakeOne("q");
  EXPECT_EQ(GetQueueInfo("q").oldest_pending_age_ms, 0);
}

// ---- Limits ---------------------------------------------------------------------------------

constexpr int64_t kMaxLeaseMs = 43'200'000;
constexpr int64_t kMaxDelayMs = 3'153'600'000'000;
constexpr uint32_t kMaxAttemptsLimit = 1'000'000;

// One row of the Limits table that applies to queue settings.
struct SettingsCase {
  std::string name;
  std::function<void(QueueSettings&)> apply;
  bool valid;
};

class QueueSettingsLimitTest : public EngineTest,
                               public ::testing::WithParamInterface<SettingsCase> {};

TEST_P(QueueSettingsLimitTest, CreateQueueChecksTheLimit) {
  QueueSettings s;
  GetParam().apply(s);
  Result<QueueInfo> r = engine().CreateQueue("q", s);
  if (GetParam().valid) {
    ASSERT_TRUE(r.ok()) << CodeName(r.status().code()) << " " << r.status().detail();
    EXPECT_EQ(r->settings, s);
  } else {
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(engine().GetQueue("q").status().code(), Code::kNotFound);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Limits, QueueSettingsLimitTest,
    ::testing::Values(
        SettingsCase{"LeaseMsZero", [](QueueSettings& s) { s.lease_ms = 0; }, false},
        SettingsCase{"LeaseMsOne", [](QueueSettings& s) { s.lease_ms = 1; }, true},
        SettingsCase{"LeaseMsTwelveHours", [](QueueSettings& s) { s.lease_ms = kMaxLeaseMs; },
                     true},
        SettingsCase{"LeaseMsAboveTwelveHours",
                     [](QueueSettings& s) { s.lease_ms = kMaxLeaseMs + 1; }, false},
        SettingsCase{"InvisibilityMsNegative", [](QueueSettings& s) { s.invisibility_ms = -1; },
                     false},
        SettingsCase{"InvisibilityMsHundredYears",
                     [](QueueSettings& s) { s.invisibility_ms = kMaxDelayMs; }, true},
        SettingsCase{"InvisibilityMsAboveHundredYears",
                     [](QueueSettings& s) { s.invisibility_ms = kMaxDelayMs + 1; }, false},
        SettingsCase{"RetryBackoffNegative", [](QueueSettings& s) { s.retry_backoff_ms = -1; },
                     false},
        SettingsCase{"RetryBackoffAboveHundredYears",
                     [](QueueSettings& s) { s.retry_backoff_ms = kMaxDelayMs + 1; }, false},
        SettingsCase{"RetryBackoffMaxNegative",
                     [](QueueSettings& s) { s.retry_backoff_max_ms = -1; }, false},
        SettingsCase{"RetryBackoffMaxAboveHundredYears",
                     [](QueueSettings& s) { s.retry_backoff_max_ms = kMaxDelayMs + 1; }, false},
        SettingsCase{"RetentionZero", [](QueueSettings& s) { s.retention_ms = 0; }, true},
        SettingsCase{"RetentionNegative", [](QueueSettings& s) { s.retention_ms = -1; }, false},
        SettingsCase{"RetentionHundredYears",
                     [](QueueSettings& s) { s.retention_ms = kMaxDelayMs; }, true},
        SettingsCase{"RetentionAboveHundredYears",
                     [](QueueSettings& s) { s.retention_ms = kMaxDelayMs + 1; }, false},
        SettingsCase{"MaxAttemptsZero", [](QueueSettings& s) { s.max_attempts = 0; }, false},
        SettingsCase{"MaxAttemptsOne", [](QueueSettings& s) { s.max_attempts = 1; }, true},
        SettingsCase{"MaxAttemptsMillion",
                     [](QueueSettings& s) { s.max_attempts = kMaxAttemptsLimit; }, true},
        SettingsCase{"MaxAttemptsAboveMillion",
                     [](QueueSettings& s) { s.max_attempts = kMaxAttemptsLimit + 1; }, false},
        SettingsCase{"ExclusiveWithoutKey",
                     [](QueueSettings& s) { s.type = QueueType::kExclusive; }, false},
        SettingsCase{"ExclusiveKey64Bytes",
                     [](QueueSettings& s) { s = ExclusiveSettings(std::string(64, 'k')); }, true},
        SettingsCase{"ExclusiveKey65Bytes",
                     [](QueueSettings& s) { s = ExclusiveSettings(std::string(65, 'k')); }, false},
        SettingsCase{"SimpleWithKey", [](QueueSettings& s) { s.exclusivity_key = "k"; }, false},
        SettingsCase{"DeadLetterQueueBadName",
                     [](QueueSettings& s) { s.dead_letter_queue = "bad name"; }, false}),
    [](const ::testing::TestParamInfo<SettingsCase>& info) { return info.param.name; });

TEST_F(TransitionsTest, QueueNameLimits) {
  EXPECT_EQ(engine().CreateQueue("", {}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine().CreateQueue(std::string(kMaxQueueNameBytes + 1, 'q'), {}).status().code(),
            Code::kInvalidArgument);
  for (std::string_view bad : {"a b", "a/b", "a*b", "caf\xC3\xA9", "a\nb", "a,b"}) {
    EXPECT_EQ(engine().CreateQueue(bad, {}).status().code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(EnqueueOne(bad, Item("m")).status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(engine().ListQueues().empty());
  std::string longest(kMaxQueueNameBytes, 'q');
  longest.replace(0, 6, "A9._:-");
  EXPECT_TRUE(engine().CreateQueue(longest, {}).ok());
  EXPECT_TRUE(engine().CreateQueue("Az09._:-", {}).ok());
}

TEST_F(TransitionsTest, InvalidQueueNameIsInvalidArgumentForEveryItem) {
  std::vector<Result<EnqueueResult>> r = engine().Enqueue("bad name", {Item("a"), Item("b")});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r[1].status().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine().Dequeue("bad name", DequeueRequest{}).status().code(), Code::kInvalidArgument);
}

TEST_F(TransitionsTest, MessageIdLimits) {
  MakeQueue("q");
  EXPECT_EQ(EnqueueOne("q", Item(std::string(kMaxIdBytes + 1, 'i'))).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(EnqueueOne("q", Item("bad\xff")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EnqueueOne("q", Item("\xC3")).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(EnqueueOne("q", Item(std::string(kMaxIdBytes, 'i'))).ok());
  EXPECT_TRUE(EnqueueOne("q", Item("caf\xC3\xA9")).ok());
  EXPECT_EQ(Counts("q")[MessageState::kPending], 2u);
}

TEST_F(TransitionsTest, PayloadLimit) {
  Engine::Options options = DefaultOptions();
  options.max_payload_bytes = 16;
  Reset(options);
  MakeQueue("q");
  EXPECT_TRUE(EnqueueOne("q", Item("a", 0, {}, std::string(16, 'p'))).ok());
  EXPECT_EQ(EnqueueOne("q", Item("b", 0, {}, std::string(17, 'p'))).status().code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(EnqueueOne("q", Item("c", 0, {}, "")).ok());
  // Payloads are opaque bytes: NUL and invalid UTF-8 are fine.
  EXPECT_TRUE(EnqueueOne("q", Item("d", 0, {}, std::string("\0\xff", 2))).ok());
  EXPECT_EQ(GetMessage("q", "d").payload, std::string("\0\xff", 2));
}

TEST_F(TransitionsTest, MetadataLimits) {
  MakeQueue("q");
  int n = 0;
  auto code = [&](Metadata metadata) {
    return EnqueueOne("q", Item("m" + std::to_string(n++), 0, std::move(metadata))).status().code();
  };
  Metadata sixteen;
  for (int i = 0; i < 16; ++i) sixteen.push_back({"k" + std::to_string(i), "v"});
  Metadata seventeen = sixteen;
  seventeen.push_back({"k16", "v"});
  EXPECT_EQ(code(sixteen), Code::kOk);
  EXPECT_EQ(code(seventeen), Code::kInvalidArgument);
  EXPECT_EQ(code({{"", "v"}}), Code::kInvalidArgument);
  EXPECT_EQ(code({{std::string(64, 'k'), "v"}}), Code::kOk);
  EXPECT_EQ(code({{std::string(65, 'k'), "v"}}), Code::kInvalidArgument);
  EXPECT_EQ(code({{"k", ""}}), Code::kOk);
  EXPECT_EQ(code({{"k", std::string(256, 'v')}}), Code::kOk);
  EXPECT_EQ(code({{"k", std::string(257, 'v')}}), Code::kInvalidArgument);
  EXPECT_EQ(code({{"k\xff", "v"}}), Code::kInvalidArgument);
  EXPECT_EQ(code({{"k", "v\xff"}}), Code::kInvalidArgument);
  EXPECT_EQ(code({{"k", "1"}, {"k", "2"}}), Code::kInvalidArgument);
  EXPECT_EQ(code({{"k", "1"}, {"k", "1"}}), Code::kInvalidArgument);
}

TEST_F(TransitionsTest, FilterLimits) {
  MakeQueue("q");
  Put("q", "a", 0, {{"k", "v"}});
  Filter five;
  for (int i = 0; i < 5; ++i) five.push_back({"k" + std::to_string(i), "v"});
  Filter four(five.begin(), five.begin() + 4);
  Filter long_key{{std::string(65, 'k'), "v"}};
  Filter long_value{{"k", std::string(257, 'v')}};
  Filter empty_key{{"", "v"}};
  for (const Filter& bad : {five, long_key, long_value, empty_key}) {
    DequeueRequest request;
    request.filter = bad;
    EXPECT_EQ(engine().Dequeue("q", request).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(engine().Count("q", bad).status().code(), Code::kInvalidArgument);
    BrowseRequest browse;
    browse.filter = bad;
    EXPECT_EQ(engine().Browse("q", browse).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(engine().CancelByFilter("q", bad).status().code(), Code::kInvalidArgument);
    ReprioritizeRequest reprioritize;
    reprioritize.priority = 1;
    EXPECT_EQ(engine().ReprioritizeByFilter("q", bad, reprioritize).status().code(),
              Code::kInvalidArgument);
    EXPECT_EQ(engine().RedriveByFilter("q", bad).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(engine().ExplainFilter("q", bad).status().code(), Code::kInvalidArgument);
  }
  EXPECT_TRUE(engine().Count("q", four).ok());
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
}

TEST_F(TransitionsTest, BatchOfMoreThan1000ItemsIsInvalidArgumentForEveryItem) {
  MakeQueue("q");
  std::vector<EnqueueItem> items;
  for (size_t i = 0; i <= kMaxBatchItems; ++i) items.push_back(Item("m" + std::to_string(i)));
  std::vector<Result<EnqueueResult>> enqueued = engine().Enqueue("q", items);
  ASSERT_EQ(enqueued.size(), kMaxBatchItems + 1);
  for (const auto& r : enqueued) EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Counts("q")[MessageState::kPending], 0u);

  Put("q", "a");
  std::vector<CompleteItem> completes(kMaxBatchItems + 1, CompleteItem{"a", 1});
  std::vector<Status> completed = engine().Complete("q", completes);
  ASSERT_EQ(completed.size(), kMaxBatchItems + 1);
  for (const Status& s : completed) EXPECT_EQ(s.code(), Code::kInvalidArgument);

  std::vector<std::string> ids(kMaxBatchItems + 1, "a");
  std::vector<Status> canceled = engine().Cancel("q", ids);
  ASSERT_EQ(canceled.size(), kMaxBatchItems + 1);
  for (const Status& s : canceled) EXPECT_EQ(s.code(), Code::kInvalidArgument);
  std::vector<Status> redriven = engine().Redrive("q", ids);
  ASSERT_EQ(redriven.size(), kMaxBatchItems + 1);
  for (const Status& s : redriven) EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
}

TEST_F(TransitionsTest, BatchOf1000ItemsIsAccepted) {
  MakeQueue("q");
  std::vector<EnqueueItem> items;
  for (size_t i = 0; i < kMaxBatchItems; ++i) items.push_back(Item("m" + std::to_string(i)));
  std::vector<Result<EnqueueResult>> r = engine().Enqueue("q", items);
  ASSERT_EQ(r.size(), kMaxBatchItems);
  for (const auto& item : r) EXPECT_TRUE(item.ok());
  EXPECT_EQ(Counts("q")[MessageState::kPending], kMaxBatchItems);
  EXPECT_EQ(Take("q", kMaxDequeueCount).size(), kMaxBatchItems);
}

TEST_F(TransitionsTest, EmptyBatchIsNeverAccepted) {
  MakeQueue("q");
  for (const auto& r : engine().Enqueue("q", {})) {
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  for (const Status& s : engine().Complete("q", {})) EXPECT_EQ(s.code(), Code::kInvalidArgument);
  for (const Status& s : engine().Cancel("q", {})) EXPECT_EQ(s.code(), Code::kInvalidArgument);
  for (const Status& s : engine().Redrive("q", {})) EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(Counts("q"), StateCounts{});
}

TEST_F(TransitionsTest, DequeueMaxLimits) {
  MakeQueue("q");
  Put("q", "a");
  DequeueRequest request;
  request.max = 0;
  EXPECT_EQ(engine().Dequeue("q", request).status().code(), Code::kInvalidArgument);
  request.max = kMaxDequeueCount + 1;
  EXPECT_EQ(engine().Dequeue("q", request).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
  request.max = kMaxDequeueCount;
  Result<std::vector<MessageRecord>> r = engine().Dequeue("q", request);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 1u);
}

TEST_F(TransitionsTest, BrowseLimitLimits) {
  MakeQueue("q");
  BrowseRequest request;
  request.limit = 0;
  EXPECT_EQ(engine().Browse("q", request).status().code(), Code::kInvalidArgument);
  request.limit = kMaxBrowseLimit + 1;
  EXPECT_EQ(engine().Browse("q", request).status().code(), Code::kInvalidArgument);
  request.limit = kMaxBrowseLimit;
  EXPECT_TRUE(engine().Browse("q", request).ok());
}

TEST_F(TransitionsTest, DequeueAndExtendLeaseMsLimits) {
  MakeQueue("q");
  Put("q", "a");
  DequeueRequest request;
  request.lease_ms = 0;
  EXPECT_EQ(engine().Dequeue("q", request).status().code(), Code::kInvalidArgument);
  request.lease_ms = kMaxLeaseMs + 1;
  EXPECT_EQ(engine().Dequeue("q", request).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
  MessageRecord m = TakeOne("q", {}, kMaxLeaseMs);
  EXPECT_EQ(m.lease_expires_at, Now() + kMaxLeaseMs);
  EXPECT_EQ(engine().Extend("q", "a", m.lease_token, 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine().Extend("q", "a", m.lease_token, -5).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine().Extend("q", "a", m.lease_token, kMaxLeaseMs + 1).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(GetMessage("q", "a").version, 2u);
  Result<TimeMs> ok = engine().Extend("q", "a", m.lease_token, kMaxLeaseMs);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, Now() + kMaxLeaseMs);
}

TEST_F(TransitionsTest, DelayAndRetryDelayLimits) {
  MakeQueue("q");
  EnqueueItem too_long = Item("a");
  too_long.delay_ms = kMaxDelayMs + 1;
  EXPECT_EQ(EnqueueOne("q", too_long).status().code(), Code::kInvalidArgument);
  EnqueueItem longest = Item("b");
  longest.delay_ms = kMaxDelayMs;
  EXPECT_TRUE(EnqueueOne("q", longest).ok());
  EXPECT_EQ(GetMessage("q", "b").visible_at, Now() + kMaxDelayMs);

  Put("q", "c");
  MessageRecord m = TakeOne("q");
  ASSERT_EQ(m.id, "c");
  EXPECT_EQ(FailOne("q", "c", m.lease_token, -1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(FailOne("q", "c", m.lease_token, kMaxDelayMs + 1).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(StateOf("q", "c"), MessageState::kRunning);
  Result<FailResult> r = FailOne("q", "c", m.lease_token, kMaxDelayMs);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->visible_at, Now() + kMaxDelayMs);
}

TEST_F(TransitionsTest, ItemMaxAttemptsLimits) {
  MakeQueue("q");
  EnqueueItem zero = Item("a");
  zero.max_attempts = 0;
  EXPECT_EQ(EnqueueOne("q", zero).status().code(), Code::kInvalidArgument);
  EnqueueItem too_many = Item("b");
  too_many.max_attempts = kMaxAttemptsLimit + 1;
  EXPECT_EQ(EnqueueOne("q", too_many).status().code(), Code::kInvalidArgument);
  EnqueueItem most = Item("c");
  most.max_attempts = kMaxAttemptsLimit;
  EXPECT_TRUE(EnqueueOne("q", most).ok());
  EXPECT_EQ(Counts("q")[MessageState::kPending], 1u);
}

TEST_F(TransitionsTest, ValidationComesBeforeDuplicateDetection) {
  MakeQueue("q");
  Put("q", "a");
  EnqueueItem bad = Item("a");
  bad.delay_ms = -1;
  EXPECT_EQ(EnqueueOne("q", bad).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace sundial::engine_test
