// Queue operations (create, update, get, list, delete, purge), the queue settings that refuse or
// pause work (max_depth, enqueue_paused, dequeue_paused, the memory budget), the order of the
// enqueue checks, and dead-letter moves (docs/semantics.md "Queues", "Enqueue", "Dead-letter
// move", "Memory budget").
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

class QueuesTest : public EngineTest {
 protected:
  // Accounted bytes of one message (engine.h "Memory").
  static uint64_t AccountedBytes(const EnqueueItem& item) {
    return kMessageOverheadBytes + item.id.size() + item.payload.size() +
           PackedMetadataSize(item.metadata);
  }

  void Update(std::string_view queue, const QueueSettingsUpdate& update) {
    Result<QueueInfo> r = engine().UpdateQueue(queue, update);
    EXPECT_TRUE(r.ok()) << "UpdateQueue: " << CodeName(r.status().code()) << " "
                        << r.status().detail();
  }
};

// ---- Create, get, list ----------------------------------------------------------------------

TEST_F(QueuesTest, CreateQueueReturnsItsSettingsAndEmptyCounts) {
  QueueSettings s;
  s.lease_ms = 1'234;
  s.max_attempts = 9;
  s.max_depth = 50;
  Result<QueueInfo> r = engine().CreateQueue("jobs", s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->name, "jobs");
  EXPECT_EQ(r->settings, s);
  EXPECT_EQ(r->counts, StateCounts{});
  EXPECT_EQ(r->oldest_pending_age_ms, 0);
  EXPECT_EQ(r->memory_bytes, 0u);
  QueueInfo info = GetQueueInfo("jobs");
  EXPECT_EQ(info.settings, s);
}

TEST_F(QueuesTest, CreateQueueRepeatIdenticalSucceedsDifferentFails) {
  QueueSettings s;
  s.lease_ms = 5'000;
  ASSERT_TRUE(engine().CreateQueue("q", s).ok());
  Put("q", "a");
  Result<QueueInfo> again = engine().CreateQueue("q", s);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->settings, s);
  EXPECT_EQ(again->counts[MessageState::kPending], 1u);  // nothing changed
  QueueSettings different = s;
  different.lease_ms = 6'000;
  EXPECT_EQ(engine().CreateQueue("q", different).status().code(), Code::kAlreadyExists);
  EXPECT_EQ(engine().CreateQueue("q", ExclusiveSettings()).status().code(), Code::kAlreadyExists);
  EXPECT_EQ(GetQueueInfo("q").settings, s);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
}

TEST_F(QueuesTest, CreateQueueWithDeadLetterQueueThatDoesNotExistFails) {
  QueueSettings s;
  s.dead_letter_queue = "missing";
  EXPECT_FALSE(engine().CreateQueue("q", s).ok());
  EXPECT_EQ(engine().GetQueue("q").status().code(), Code::kNotFound);
}

TEST_F(QueuesTest, QueueCannotBeItsOwnDeadLetterQueue) {
  QueueSettings s;
  s.dead_letter_queue = "q";
  EXPECT_FALSE(engine().CreateQueue("q", s).ok());
  MakeQueue("q");
  QueueSettingsUpdate update;
  update.dead_letter_queue = "q";
  EXPECT_FALSE(engine().UpdateQueue("q", update).ok());
  EXPECT_EQ(GetQueueInfo("q").settings.dead_letter_queue, "");
}

TEST_F(QueuesTest, GetQueueOfMissingQueueIsNotFound) {
  EXPECT_EQ(engine().GetQueue("nope").status().code(), Code::kNotFound);
  EXPECT_EQ(engine().GetQueue("bad name").status().code(), Code::kInvalidArgument);
}

TEST_F(QueuesTest, ListQueuesIsSortedByNameWithCounts) {
  MakeQueue("b");
  MakeQueue("a");
  MakeQueue("c", ExclusiveSettings("k"));
  Put("b", "m1");
  Put("b", "m2");
  std::vector<QueueInfo> queues = engine().ListQueues();
  ASSERT_EQ(queues.size(), 3u);
  EXPECT_EQ(queues[0].name, "a");
  EXPECT_EQ(queues[1].name, "b");
  EXPECT_EQ(queues[2].name, "c");
  EXPECT_EQ(queues[1].counts[MessageState::kPending], 2u);
  EXPECT_EQ(queues[0].counts[MessageState::kPending], 0u);
  EXPECT_EQ(queues[2].settings.type, QueueType::kExclusive);
  EXPECT_EQ(queues[2].settings.exclusivity_key, "k");
}

TEST_F(QueuesTest, QueueMemoryBytesAccountsEachMessage) {
  QueueSettings no_history;  // the records' bytes alone (history: HistoryTest)
  no_history.history_max = 0;
  MakeQueue("q", no_history);
  EnqueueItem a = Item("a", 0, {{"key", "value"}}, "payload-a");
  EnqueueItem b = Item("bb", 0, {}, "");
  Put("q", a);
  Put("q", b);
  EXPECT_EQ(GetQueueInfo("q").memory_bytes, AccountedBytes(a) + AccountedBytes(b));
  EXPECT_EQ(engine().memory_bytes(), AccountedBytes(a) + AccountedBytes(b));
}

// ---- Update ---------------------------------------------------------------------------------

TEST_F(QueuesTest, UpdateQueueChangesOnlyTheGivenFields) {
  QueueSettings s;
  s.lease_ms = 1'000;
  s.max_attempts = 3;
  s.retention_ms = 60'000;
  MakeQueue("q", s);
  QueueSettingsUpdate update;
  update.max_attempts = 7;
  update.dequeue_paused = true;
  Result<QueueInfo> r = engine().UpdateQueue("q", update);
  ASSERT_TRUE(r.ok());
  QueueSettings want = s;
  want.max_attempts = 7;
  want.dequeue_paused = true;
  EXPECT_EQ(r->settings, want);
  EXPECT_EQ(GetQueueInfo("q").settings, want);
}

TEST_F(QueuesTest, UpdateQueueIsValidatedLikeCreate) {
  QueueSettings s;
  s.retry_backoff_ms = 10;
  MakeQueue("q", s);
  QueueSettingsUpdate zero_lease;
  zero_lease.lease_ms = 0;
  EXPECT_EQ(engine().UpdateQueue("q", zero_lease).status().code(), Code::kInvalidArgument);
  QueueSettingsUpdate zero_attempts;
  zero_attempts.max_attempts = 0;
  EXPECT_EQ(engine().UpdateQueue("q", zero_attempts).status().code(), Code::kInvalidArgument);
  QueueSettingsUpdate negative_retention;
  negative_retention.retention_ms = -1;
  EXPECT_EQ(engine().UpdateQueue("q", negative_retention).status().code(), Code::kInvalidArgument);
  QueueSettingsUpdate bad_dlq;
  bad_dlq.dead_letter_queue = "bad name";
  EXPECT_EQ(engine().UpdateQueue("q", bad_dlq).status().code(), Code::kInvalidArgument);
  QueueSettingsUpdate missing_dlq;
  missing_dlq.dead_letter_queue = "missing";
  EXPECT_FALSE(engine().UpdateQueue("q", missing_dlq).ok());
  EXPECT_EQ(GetQueueInfo("q").settings, s);
}

TEST_F(QueuesTest, UpdateOfMissingQueueIsNotFound) {
  QueueSettingsUpdate update;
  update.lease_ms = 10;
  EXPECT_EQ(engine().UpdateQueue("nope", update).status().code(), Code::kNotFound);
  EXPECT_EQ(engine().GetQueue("nope").status().code(), Code::kNotFound);
}

TEST_F(QueuesTest, UpdatedLeaseMsAppliesToLaterDequeuesOnly) {
  QueueSettings s;
  s.lease_ms = 1'000;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "b");
  MessageRecord a = TakeOne("q");
  QueueSettingsUpdate update;
  update.lease_ms = 5'000;
  Update("q", update);
  EXPECT_EQ(GetMessage("q", "a").lease_expires_at, a.lease_expires_at);
  EXPECT_EQ(TakeOne("q").lease_expires_at, Now() + 5'000);
}

TEST_F(QueuesTest, UpdatedMaxAttemptsAndInvisibilityApplyToLaterEnqueuesOnly) {
  QueueSettings s;
  s.max_attempts = 2;
  MakeQueue("q", s);
  Put("q", "before");
  QueueSettingsUpdate update;
  update.max_attempts = 8;
  update.invisibility_ms = 250;
  Update("q", update);
  Put("q", "after");
  EXPECT_EQ(GetMessage("q", "before").max_attempts, 2u);
  EXPECT_EQ(StateOf("q", "before"), MessageState::kPending);
  MessageRecord after = GetMessage("q", "after");
  EXPECT_EQ(after.max_attempts, 8u);
  EXPECT_EQ(after.state, MessageState::kInvisible);
  EXPECT_EQ(after.visible_at, Now() + 250);
}

TEST_F(QueuesTest, UpdatedBackoffAppliesToLaterFails) {
  QueueSettings s;
  s.retry_backoff_ms = 1'000;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  QueueSettingsUpdate update;
  update.retry_backoff_ms = 100'000;
  update.retry_backoff_max_ms = 1'000'000;
  Update("q", update);
  Result<FailResult> r = FailOne("q", "a", m.lease_token);
  ASSERT_TRUE(r.ok());
  EXPECT_GE(r->visible_at - Now(), 90'000);
  EXPECT_LE(r->visible_at - Now(), 110'000);
}

TEST_F(QueuesTest, UpdateClearsDeadLetterQueueWithEmptyName) {
  MakeQueue("dlq");
  QueueSettings s;
  s.dead_letter_queue = "dlq";
  s.max_attempts = 1;
  MakeQueue("q", s);
  QueueSettingsUpdate update;
  update.dead_letter_queue = "";
  Update("q", update);
  EXPECT_EQ(GetQueueInfo("q").settings.dead_letter_queue, "");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Result<FailResult> r = FailOne("q", "a", m.lease_token);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->state, MessageState::kErrored);
  EXPECT_EQ(r->dead_letter_queue, "");
  EXPECT_EQ(StateOf("q", "a"), MessageState::kErrored);
  EXPECT_EQ(GetCode("dlq", "a"), Code::kNotFound);
}

TEST_F(QueuesTest, DequeuePauseAppliesAtOnce) {
  MakeQueue("q");
  Put("q", "a");
  QueueSettingsUpdate pause;
  pause.dequeue_paused = true;
  Update("q", pause);
  EXPECT_TRUE(Take("q").empty());
  QueueSettingsUpdate resume;
  resume.dequeue_paused = false;
  Update("q", resume);
  EXPECT_EQ(TakeOne("q").id, "a");
}

// ---- Pauses and depth -----------------------------------------------------------------------

TEST_F(QueuesTest, DequeuePausedReturnsNothing) {
  QueueSettings s;
  s.dequeue_paused = true;
  MakeQueue("q", s);
  Put("q", "a");
  Result<std::vector<MessageRecord>> r = engine().Dequeue("q", DequeueRequest{});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
  EXPECT_EQ(GetMessage("q", "a").attempts, 0u);
}

TEST_F(QueuesTest, DequeuePausedStillLetsLeaseHoldersFinish) {
  QueueSettings s;
  s.max_attempts = 5;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "b");
  Put("q", "c");
  std::vector<MessageRecord> got = Take("q", 3);
  ASSERT_EQ(got.size(), 3u);
  QueueSettingsUpdate pause;
  pause.dequeue_paused = true;
  Update("q", pause);
  EXPECT_TRUE(CompleteOne("q", "a", got[0].lease_token).ok());
  EXPECT_TRUE(FailOne("q", "b", got[1].lease_token, 0).ok());
  EXPECT_TRUE(engine().Extend("q", "c", got[2].lease_token, 100).ok());
  EXPECT_TRUE(Take("q").empty());
}

TEST_F(QueuesTest, EnqueuePausedRefuses) {
  QueueSettings s;
  s.enqueue_paused = true;
  MakeQueue("q", s);
  EXPECT_EQ(EnqueueOne("q", Item("a")).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  QueueSettingsUpdate resume;
  resume.enqueue_paused = false;
  Update("q", resume);
  EXPECT_TRUE(EnqueueOne("q", Item("a")).ok());
}

TEST_F(QueuesTest, EnqueuePausedStillAnswersDuplicates) {
  MakeQueue("q");
  Put("q", "a");
  QueueSettingsUpdate pause;
  pause.enqueue_paused = true;
  Update("q", pause);
  Result<EnqueueResult> r = EnqueueOne("q", Item("a"));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->duplicate);
  EXPECT_EQ(EnqueueOne("q", Item("a", 9)).status().code(), Code::kAlreadyExists);
}

TEST_F(QueuesTest, EnqueuePausedChecksInputFirst) {
  QueueSettings s;
  s.enqueue_paused = true;
  MakeQueue("q", s);
  EXPECT_EQ(EnqueueOne("q", Item(std::string(kMaxIdBytes + 1, 'x'))).status().code(),
            Code::kInvalidArgument);
}

TEST_F(QueuesTest, MaxDepthRefusesEnqueue) {
  QueueSettings s;
  s.max_depth = 2;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "b");
  EXPECT_EQ(EnqueueOne("q", Item("c")).status().code(), Code::kResourceExhausted);
  EXPECT_EQ(GetCode("q", "c"), Code::kNotFound);
  // Terminal messages do not count towards the depth.
  MessageRecord a = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "a", a.lease_token).ok());
  EXPECT_TRUE(EnqueueOne("q", Item("c")).ok());
  EXPECT_EQ(EnqueueOne("q", Item("d")).status().code(), Code::kResourceExhausted);
}

TEST_F(QueuesTest, MaxDepthCountsInvisiblePendingAndRunning) {
  QueueSettings s;
  s.max_depth = 3;
  MakeQueue("q", s);
  PutDelayed("q", "invisible", 1'000);
  Put("q", "running");
  Put("q", "pending");
  ASSERT_EQ(TakeOne("q").id, "running");
  EXPECT_EQ(EnqueueOne("q", Item("x")).status().code(), Code::kResourceExhausted);
  ASSERT_TRUE(CancelOne("q", "invisible").ok());
  EXPECT_TRUE(EnqueueOne("q", Item("x")).ok());
}

TEST_F(QueuesTest, MaxDepthStillAnswersDuplicates) {
  QueueSettings s;
  s.max_depth = 1;
  MakeQueue("q", s);
  Put("q", "a");
  Result<EnqueueResult> r = EnqueueOne("q", Item("a"));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->duplicate);
}

TEST_F(QueuesTest, EnqueuePausedIsCheckedBeforeMaxDepth) {
  QueueSettings s;
  s.max_depth = 1;
  MakeQueue("q", s);
  Put("q", "a");
  QueueSettingsUpdate pause;
  pause.enqueue_paused = true;
  Update("q", pause);
  EXPECT_EQ(EnqueueOne("q", Item("b")).status().code(), Code::kFailedPrecondition);
}

TEST_F(QueuesTest, LoweringMaxDepthKeepsExistingMessages) {
  MakeQueue("q");
  for (int i = 0; i < 5; ++i) Put("q", "m" + std::to_string(i));
  QueueSettingsUpdate update;
  update.max_depth = 2;
  Update("q", update);
  EXPECT_EQ(Counts("q")[MessageState::kPending], 5u);
  EXPECT_EQ(EnqueueOne("q", Item("x")).status().code(), Code::kResourceExhausted);
  EXPECT_EQ(DrainIds("q").size(), 5u);
}

TEST_F(QueuesTest, MaxDepthInABatchRefusesOnlyTheItemsBeyondIt) {
  QueueSettings s;
  s.max_depth = 2;
  MakeQueue("q", s);
  std::vector<Result<EnqueueResult>> r = engine().Enqueue("q", {Item("a"), Item("b"), Item("c")});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_TRUE(r[0].ok());
  EXPECT_TRUE(r[1].ok());
  EXPECT_EQ(r[2].status().code(), Code::kResourceExhausted);
}

// ---- Memory budget --------------------------------------------------------------------------

TEST_F(QueuesTest, MemoryBudgetRefusesEnqueueButCompleteStillWorks) {
  EnqueueItem a = Item("a", 0, {}, "x");
  EnqueueItem b = Item("b", 1, {}, "x");
  EnqueueItem c = Item("c", 2, {}, "x");
  const uint64_t one = AccountedBytes(a);
  Engine::Options options = DefaultOptions();
  options.memory_budget_bytes = 2 * one;
  Reset(options);
  QueueSettings s;
  s.retention_ms = 1'000;
  s.max_attempts = 5;
  s.history_max = 0;  // the records' bytes alone (history: HistoryTest)
  MakeQueue("q", s);
  Put("q", a);
  Put("q", b);
  EXPECT_EQ(engine().memory_bytes(), 2 * one);
  EXPECT_EQ(engine().memory_budget_bytes(), 2 * one);
  EXPECT_EQ(EnqueueOne("q", c).status().code(), Code::kResourceExhausted);
  EXPECT_EQ(EnqueueOne("other", Item("c", 0, {}, "x")).status().code(), Code::kResourceExhausted);

  // Every other operation keeps working.
  Result<EnqueueResult> dup = EnqueueOne("q", a);
  ASSERT_TRUE(dup.ok());
  EXPECT_TRUE(dup->duplicate);
  std::vector<MessageRecord> got = Take("q", 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(engine().Extend("q", "a", got[0].lease_token, 1'000).ok());
  EXPECT_TRUE(CompleteOne("q", "a", got[0].lease_token).ok());
  Result<FailResult> failed = FailOne("q", "b", got[1].lease_token, 0);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->state, MessageState::kPending);
  EXPECT_TRUE(SetPriority("q", "b", 7).ok());
  EXPECT_TRUE(CancelOne("q", "b").ok());
  EXPECT_EQ(EnqueueOne("q", c).status().code(), Code::kResourceExhausted);

  // GC frees the memory of terminal messages.
  AdvanceTime(1'000);
  EXPECT_EQ(engine().memory_bytes(), 0u);
  EXPECT_TRUE(EnqueueOne("q", c).ok());
  EXPECT_EQ(engine().memory_bytes(), one);
}

TEST_F(QueuesTest, MemoryBudgetAllowsFillingItExactly) {
  EnqueueItem a = Item("a", 0, {{"k", "v"}}, "payload");
  Engine::Options options = DefaultOptions();
  options.memory_budget_bytes = AccountedBytes(a);
  Reset(options);
  MakeQueue("q");
  EXPECT_TRUE(EnqueueOne("q", a).ok());
  EXPECT_EQ(EnqueueOne("q", Item("b", 0, {}, "")).status().code(), Code::kResourceExhausted);
}

TEST_F(QueuesTest, EnqueuePausedIsReportedBeforeDepthAndMemoryBudget) {
  EnqueueItem a = Item("a", 0, {}, "x");
  Engine::Options options = DefaultOptions();
  options.memory_budget_bytes = AccountedBytes(a);
  Reset(options);
  QueueSettings s;
  s.max_depth = 1;
  MakeQueue("q", s);
  Put("q", a);
  QueueSettingsUpdate pause;
  pause.enqueue_paused = true;
  Update("q", pause);
  // Paused, full and over budget: the pause is reported.
  EXPECT_EQ(EnqueueOne("q", Item("b", 0, {}, "x")).status().code(), Code::kFailedPrecondition);
}

TEST_F(QueuesTest, MemoryIsReleasedWhenMessagesAreRemoved) {
  MakeQueue("q");
  Put("q", Item("a", 0, {{"k", "v"}}, std::string(100, 'p')));
  Put("q", Item("b", 0, {}, std::string(50, 'p')));
  ASSERT_GT(engine().memory_bytes(), 0u);
  Result<uint64_t> purged = engine().PurgeQueue("q", {MessageState::kPending});
  ASSERT_TRUE(purged.ok());
  EXPECT_EQ(engine().memory_bytes(), 0u);
  Put("q", Item("c", 0, {}, std::string(10, 'p')));
  ASSERT_TRUE(engine().DeleteQueue("q").ok());
  EXPECT_EQ(engine().memory_bytes(), 0u);
}

// ---- Delete and purge -----------------------------------------------------------------------

TEST_F(QueuesTest, DeleteQueueRemovesMessages) {
  MakeQueue("q");
  Put("q", "a");
  Put("q", "b");
  TakeOne("q");
  ASSERT_TRUE(engine().DeleteQueue("q").ok());
  EXPECT_EQ(engine().GetQueue("q").status().code(), Code::kNotFound);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  EXPECT_EQ(engine().Dequeue("q", DequeueRequest{}).status().code(), Code::kNotFound);
  EXPECT_TRUE(engine().ListQueues().empty());

  // A queue created again under the name is empty and its ids are free.
  MakeQueue("q");
  EXPECT_EQ(Counts("q"), StateCounts{});
  Result<EnqueueResult> r = EnqueueOne("q", Item("a", 5));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->duplicate);
  EXPECT_EQ(r->version, 1u);
}

TEST_F(QueuesTest, DeletedQueueTimersDoNotFire) {
  QueueSettings s;
  s.lease_ms = 100;
  MakeQueue("q", s);
  PutDelayed("q", "a", 100);
  Put("q", "b");
  TakeOne("q");
  ASSERT_TRUE(engine().DeleteQueue("q").ok());
  MakeQueue("q");
  AdvanceTime(1'000);
  EXPECT_EQ(Counts("q"), StateCounts{});
  EXPECT_EQ(engine().NextDueTime(), std::numeric_limits<int64_t>::max());
}

TEST_F(QueuesTest, DeleteMissingQueueIsNotFound) {
  EXPECT_EQ(engine().DeleteQueue("nope").code(), Code::kNotFound);
}

TEST_F(QueuesTest, PurgeRemovesOnlyGivenStates) {
  QueueSettings s;
  s.max_attempts = 1;
  MakeQueue("q", s);
  PutDelayed("q", "invisible", 1'000);
  Put("q", "errored", 0);
  Put("q", "completed", 1);
  Put("q", "running", 2);
  Put("q", "canceled", 3);
  Put("q", "pending", 4);
  ExhaustAttempts("q", "errored");
  MessageRecord c = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "completed", c.lease_token).ok());
  MessageRecord running = TakeOne("q");
  ASSERT_TRUE(CancelOne("q", "canceled").ok());

  Result<uint64_t> r = engine().PurgeQueue("q", {MessageState::kPending, MessageState::kCompleted});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2u);
  EXPECT_EQ(GetCode("q", "pending"), Code::kNotFound);
  EXPECT_EQ(GetCode("q", "completed"), Code::kNotFound);
  EXPECT_EQ(StateOf("q", "invisible"), MessageState::kInvisible);
  EXPECT_EQ(StateOf("q", "running"), MessageState::kRunning);
  EXPECT_EQ(StateOf("q", "canceled"), MessageState::kCanceled);
  EXPECT_EQ(StateOf("q", "errored"), MessageState::kErrored);

  Result<uint64_t> r2 = engine().PurgeQueue(
      "q", {MessageState::kRunning, MessageState::kErrored, MessageState::kInvisible});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(*r2, 3u);
  EXPECT_EQ(CompleteOne("q", "running", running.lease_token).code(), Code::kNotFound);
  StateCounts counts = Counts("q");
  EXPECT_EQ(counts[MessageState::kCanceled], 1u);
  EXPECT_EQ(counts[MessageState::kRunning], 0u);
  EXPECT_EQ(counts[MessageState::kInvisible], 0u);
  // The purged invisible message does not come back.
  AdvanceTime(1'000);
  EXPECT_EQ(Counts("q")[MessageState::kPending], 0u);
}

TEST_F(QueuesTest, PurgeFreesIds) {
  MakeQueue("q");
  Put("q", "a", 1);
  ASSERT_TRUE(engine().PurgeQueue("q", {MessageState::kPending}).ok());
  Result<EnqueueResult> r = EnqueueOne("q", Item("a", 2));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->duplicate);
}

TEST_F(QueuesTest, PurgeWithoutStatesIsInvalidArgument) {
  MakeQueue("q");
  Put("q", "a");
  EXPECT_EQ(engine().PurgeQueue("q", {}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
  EXPECT_EQ(engine().PurgeQueue("nope", {MessageState::kPending}).status().code(), Code::kNotFound);
}

TEST_F(QueuesTest, PurgeOfAllSixStatesEmptiesTheQueue) {
  MakeQueue("q");
  for (int i = 0; i < 10; ++i) Put("q", "m" + std::to_string(i));
  Take("q", 3);
  Result<uint64_t> r = engine().PurgeQueue(
      "q", {MessageState::kInvisible, MessageState::kPending, MessageState::kRunning,
            MessageState::kCompleted, MessageState::kCanceled, MessageState::kErrored});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 10u);
  EXPECT_EQ(Counts("q"), StateCounts{});
  EXPECT_EQ(GetQueueInfo("q").memory_bytes, 0u);
}

// ---- Dead-letter queues ---------------------------------------------------------------------

class DeadLetterTest : public QueuesTest {
 protected:
  // History off: the tests count the records' bytes alone (history: HistoryTest).
  void SetUpPair(uint32_t max_attempts = 1, QueueSettings dlq = {}) {
    dlq.max_attempts = 4;
    dlq.history_max = 0;
    MakeQueue("dlq", dlq);
    QueueSettings s;
    s.history_max = 0;
    s.max_attempts = max_attempts;
    s.dead_letter_queue = "dlq";
    s.lease_ms = 100;
    MakeQueue("q", s);
  }
};

TEST_F(DeadLetterTest, ErroredMessageMovesToDeadLetterQueueWithOriginMetadata) {
  SetUpPair(2);
  Put("q", Item("a", 17, {{"k", "v"}}, "body"));
  const TimeMs enqueued_at = Now();
  MessageRecord first = TakeOne("q");
  ASSERT_TRUE(FailOne("q", "a", first.lease_token, 0, "first").ok());
  AdvanceTime(10);
  MessageRecord second = TakeOne("q");
  Result<FailResult> r = FailOne("q", "a", second.lease_token, 0, "last error");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->state, MessageState::kErrored);
  EXPECT_EQ(r->dead_letter_queue, "dlq");

  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  EXPECT_EQ(Counts("q"), StateCounts{});
  MessageRecord moved = GetMessage("dlq", "a");
  EXPECT_EQ(moved.queue, "dlq");
  EXPECT_EQ(moved.state, MessageState::kPending);
  EXPECT_EQ(moved.attempts, 0u);
  EXPECT_EQ(moved.max_attempts, 4u);  // the dead-letter queue's default
  EXPECT_EQ(moved.version, second.version + 1);
  EXPECT_EQ(moved.enqueued_at, enqueued_at);
  EXPECT_EQ(moved.updated_at, Now());
  EXPECT_EQ(moved.last_error, "last error");
  EXPECT_EQ(moved.priority, 17);
  EXPECT_EQ(moved.payload, "body");
  EXPECT_EQ(moved.lease_token, 0u);
  EXPECT_TRUE(HasPair(moved.metadata, "k", "v"));
  EXPECT_TRUE(HasPair(moved.metadata, kOriginQueueKey, "q"));
  EXPECT_EQ(moved.metadata.size(), 2u);
  EXPECT_EQ(Counts("dlq")[MessageState::kPending], 1u);
  EXPECT_EQ(TakeOne("dlq").id, "a");
}

TEST_F(DeadLetterTest, LeaseExpiryAtMaxAttemptsMovesToDeadLetterQueue) {
  SetUpPair(1);
  Put("q", "a");
  TakeOne("q");
  AdvanceTime(100);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  MessageRecord moved = GetMessage("dlq", "a");
  EXPECT_EQ(moved.state, MessageState::kPending);
  EXPECT_EQ(moved.attempts, 0u);
  EXPECT_EQ(moved.updated_at, Now());
  EXPECT_TRUE(HasPair(moved.metadata, kOriginQueueKey, "q"));
}

TEST_F(DeadLetterTest, DeadLetterReplacesAnExistingOriginPair) {
  SetUpPair(1);
  Put("q", Item("a", 0, {{std::string(kOriginQueueKey), "elsewhere"}, {"k", "v"}}));
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(FailOne("q", "a", m.lease_token).ok());
  MessageRecord moved = GetMessage("dlq", "a");
  EXPECT_TRUE(HasPair(moved.metadata, kOriginQueueKey, "q"));
  EXPECT_FALSE(HasPair(moved.metadata, kOriginQueueKey, "elsewhere"));
  EXPECT_TRUE(HasPair(moved.metadata, "k", "v"));
  EXPECT_EQ(moved.metadata.size(), 2u);
}

TEST_F(DeadLetterTest, OriginMayBeTheSeventeenthPair) {
  SetUpPair(1);
  Metadata sixteen;
  for (int i = 0; i < 16; ++i) sixteen.push_back({"k" + std::to_string(i), "v"});
  Put("q", Item("a", 0, sixteen));
  MessageRecord m = TakeOne("q");
  Result<FailResult> r = FailOne("q", "a", m.lease_token);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->dead_letter_queue, "dlq");
  MessageRecord moved = GetMessage("dlq", "a");
  EXPECT_EQ(moved.metadata.size(), 17u);
  EXPECT_TRUE(HasPair(moved.metadata, kOriginQueueKey, "q"));
  EXPECT_TRUE(HasPair(moved.metadata, "k15", "v"));
}

TEST_F(DeadLetterTest, DeadLetteredMessageGetsANewEnqueueSequenceInTheTarget) {
  SetUpPair(1);
  Put("q", "moved", 5);
  Put("dlq", "resident", 5);  // enqueued in dlq after "moved" was enqueued in q
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(FailOne("q", "moved", m.lease_token).ok());
  EXPECT_EQ(DrainIds("dlq"), (std::vector<std::string>{"resident", "moved"}));
}

TEST_F(DeadLetterTest, IdTakenInTargetKeepsMessageErroredInItsQueue) {
  SetUpPair(1);
  Put("dlq", "a");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Result<FailResult> r = FailOne("q", "a", m.lease_token);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->state, MessageState::kErrored);
  EXPECT_EQ(r->dead_letter_queue, "");
  EXPECT_EQ(StateOf("q", "a"), MessageState::kErrored);
  EXPECT_EQ(Counts("dlq")[MessageState::kPending], 1u);
  EXPECT_EQ(GetMessage("dlq", "a").version, 1u);
}

TEST_F(DeadLetterTest, ExclusiveTargetWithoutItsKeyKeepsMessageErrored) {
  MakeQueue("xdlq", ExclusiveSettings("tenant"));
  QueueSettings s;
  s.max_attempts = 1;
  s.dead_letter_queue = "xdlq";
  MakeQueue("q", s);
  Put("q", "without", 0);
  Put("q", "with", 1, {{"tenant", "t1"}});
  MessageRecord a = TakeOne("q");
  ASSERT_EQ(a.id, "without");
  Result<FailResult> ra = FailOne("q", "without", a.lease_token);
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(ra->state, MessageState::kErrored);
  EXPECT_EQ(ra->dead_letter_queue, "");
  EXPECT_EQ(StateOf("q", "without"), MessageState::kErrored);

  MessageRecord b = TakeOne("q");
  Result<FailResult> rb = FailOne("q", "with", b.lease_token);
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->dead_letter_queue, "xdlq");
  EXPECT_EQ(StateOf("xdlq", "with"), MessageState::kPending);
}

TEST_F(DeadLetterTest, MoveIgnoresTargetPausesDepthAndMemoryBudget) {
  EnqueueItem resident = Item("resident", 0, {}, "x");
  EnqueueItem a = Item("a", 0, {}, "x");
  Engine::Options options = DefaultOptions();
  options.memory_budget_bytes = AccountedBytes(resident) + AccountedBytes(a);
  Reset(options);
  QueueSettings dlq;
  dlq.max_depth = 1;
  dlq.history_max = 0;
  MakeQueue("dlq", dlq);
  Put("dlq", resident);
  QueueSettingsUpdate pause;
  pause.enqueue_paused = true;
  pause.dequeue_paused = true;
  ASSERT_TRUE(engine().UpdateQueue("dlq", pause).ok());
  QueueSettings s;
  s.max_attempts = 1;
  s.dead_letter_queue = "dlq";
  MakeQueue("q", s);
  Put("q", a);
  // The budget is now full, the target is paused and at its depth.
  ASSERT_EQ(EnqueueOne("q", Item("b", 0, {}, "x")).status().code(), Code::kResourceExhausted);
  MessageRecord m = TakeOne("q");
  Result<FailResult> r = FailOne("q", "a", m.lease_token);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->dead_letter_queue, "dlq");
  EXPECT_EQ(Counts("dlq")[MessageState::kPending], 2u);
}

TEST_F(DeadLetterTest, DeletedDeadLetterQueueLeavesMessagesErroredInTheirQueue) {
  SetUpPair(1);
  ASSERT_TRUE(engine().DeleteQueue("dlq").ok());
  EXPECT_EQ(GetQueueInfo("q").settings.dead_letter_queue, "dlq");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Result<FailResult> r = FailOne("q", "a", m.lease_token);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->state, MessageState::kErrored);
  EXPECT_EQ(r->dead_letter_queue, "");
  EXPECT_EQ(StateOf("q", "a"), MessageState::kErrored);

  // Once it exists again, later moves go there.
  MakeQueue("dlq");
  Put("q", "b");
  MessageRecord b = TakeOne("q");
  Result<FailResult> rb = FailOne("q", "b", b.lease_token);
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->dead_letter_queue, "dlq");
  EXPECT_EQ(StateOf("dlq", "b"), MessageState::kPending);
}

TEST_F(DeadLetterTest, MoveFreesTheIdInTheOriginQueue) {
  SetUpPair(1);
  Put("q", Item("a", 1, {}, "old"));
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(FailOne("q", "a", m.lease_token).ok());
  Result<EnqueueResult> again = EnqueueOne("q", Item("a", 2, {}, "new"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->duplicate);
  EXPECT_EQ(GetMessage("q", "a").payload, "new");
}

TEST_F(DeadLetterTest, MovedMessageCountsInTargetMemoryNotOrigin) {
  SetUpPair(1);
  EnqueueItem a = Item("a", 0, {}, "xyz");
  Put("q", a);
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(FailOne("q", "a", m.lease_token).ok());
  EXPECT_EQ(GetQueueInfo("q").memory_bytes, 0u);
  const uint64_t origin_pair_bytes =
      PackedMetadataSize({{std::string(kOriginQueueKey), "q"}}) - PackedMetadataSize({});
  EXPECT_EQ(GetQueueInfo("dlq").memory_bytes, AccountedBytes(a) + origin_pair_bytes);
  EXPECT_EQ(engine().memory_bytes(), AccountedBytes(a) + origin_pair_bytes);
}

TEST_F(DeadLetterTest, DeadLetterQueueMayHaveItsOwnDeadLetterQueue) {
  MakeQueue("last");
  QueueSettings middle;
  middle.max_attempts = 1;
  middle.dead_letter_queue = "last";
  MakeQueue("middle", middle);
  QueueSettings first;
  first.max_attempts = 1;
  first.dead_letter_queue = "middle";
  MakeQueue("first", first);
  Put("first", "a");
  MessageRecord m1 = TakeOne("first");
  ASSERT_TRUE(FailOne("first", "a", m1.lease_token).ok());
  MessageRecord m2 = TakeOne("middle");
  Result<FailResult> r = FailOne("middle", "a", m2.lease_token);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->dead_letter_queue, "last");
  MessageRecord moved = GetMessage("last", "a");
  EXPECT_TRUE(HasPair(moved.metadata, kOriginQueueKey, "middle"));
  EXPECT_FALSE(HasPair(moved.metadata, kOriginQueueKey, "first"));
}

}  // namespace
}  // namespace sundial::engine_test
