// Dependencies (docs/semantics.md, "Dependencies"): enqueue with depends_on, the waiting state,
// release in the operation that completes the last dependency, the on_dependency_failure
// policies, cross-queue dependencies, GC holds, counts and browse, and replay.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

class DependenciesTest : public EngineTest {
 protected:
  std::string PutAfter(std::string_view queue, std::string id, std::vector<std::string> deps,
                       DependencyFailurePolicy policy = DependencyFailurePolicy::kCancel) {
    EnqueueItem item = Item(std::move(id));
    item.depends_on = std::move(deps);
    item.on_dependency_failure = policy;
    return Put(queue, std::move(item));
  }
  // Leases `id` (which must be the next message of `queue`) and completes it.
  void Finish(std::string_view queue, std::string_view id) {
    MessageRecord m = TakeOne(queue);
    ASSERT_EQ(m.id, id);
    ASSERT_TRUE(CompleteOne(queue, m.id, m.lease_token).ok());
  }
  // Both engines ways: from the log's effects and from an export.
  void ExpectReplayAndExportGiveTheSameState() {
    auto replayed = Replayed();
    EXPECT_EQ(replayed->Digest(), engine().Digest()) << "replayed from the effects";
    EXPECT_EQ(Exported()->Digest(), engine().Digest()) << "loaded from an export";
    for (const QueueInfo& q : engine().ListQueues()) {
      Result<QueueInfo> r = replayed->GetQueue(q.name);
      ASSERT_TRUE(r.ok()) << q.name;
      for (size_t s = 0; s < kStateCount; ++s) {
        EXPECT_EQ(r->counts[static_cast<MessageState>(s)], q.counts[static_cast<MessageState>(s)])
            << q.name << " " << StateName(static_cast<MessageState>(s));
      }
    }
  }
};

TEST_F(DependenciesTest, DependentWaitsAndIsNotDequeueable) {
  Put("q", "parent");
  PutAfter("q", "child", {"parent"});
  EXPECT_EQ(StateOf("q", "child"), MessageState::kWaiting);
  EXPECT_EQ(TakeIds("q", 10), std::vector<std::string>{"parent"});
  EXPECT_EQ(Counts("q")[MessageState::kWaiting], 1u);
  Result<Explanation> x = engine().Explain("q", "child");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->reason, ExplainReason::kWaitingOnDependencies);
}

TEST_F(DependenciesTest, ExplainCountsTheDependenciesNotFinishedAndNamesThem) {
  for (int i = 0; i < 14; ++i) Put("other", "d" + std::to_string(i));
  std::vector<std::string> deps;
  for (int i = 0; i < 14; ++i) deps.push_back("other/d" + std::to_string(i));
  Put("q", "a");
  deps.push_back("a");
  PutAfter("q", "child", deps);
  Finish("other", "d0");
  Finish("other", "d1");
  Result<Explanation> x = engine().Explain("q", "child");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->reason, ExplainReason::kWaitingOnDependencies);
  EXPECT_EQ(x->dependencies, 15u);
  EXPECT_EQ(x->unfinished, 13u);
  ASSERT_EQ(x->waiting_on.size(), kMaxExplainWaitingOn);
  EXPECT_EQ(x->waiting_on.front(), "other/d2") << "in the order listed, finished ones left out";
  EXPECT_EQ(x->waiting_on.back(), "other/d11");
  // Not waiting: no dependency figures.
  Result<Explanation> y = engine().Explain("q", "a");
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->dependencies, 0u);
  EXPECT_TRUE(y->waiting_on.empty());
}

TEST_F(DependenciesTest, ExplainNamesTheDependentsStillWaitingOnIt) {
  Put("q", "parent");
  for (int i = 0; i < 12; ++i) PutAfter("q", "c" + std::to_string(i), {"parent"});
  PutAfter("other", "twice", {"q/parent", "q/parent"});
  ASSERT_TRUE(engine().Cancel("q", {"c0"})[0].ok());
  Result<Explanation> x = engine().Explain("q", "parent");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->reason, ExplainReason::kDequeueable);
  EXPECT_EQ(x->waiting_dependents, 12u) << "c1..c11 and other/twice (once); c0 was canceled";
  ASSERT_EQ(x->dependents.size(), kMaxExplainDependents);
  EXPECT_EQ(x->dependents.front(), "q/c1") << "in the order they were enqueued";
  EXPECT_EQ(x->dependents.back(), "q/c10");
  // A dependent has none of its own; a chain's middle link has both sides.
  Result<Explanation> c = engine().Explain("q", "c1");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->dependents.empty());
  EXPECT_EQ(c->waiting_dependents, 0u);
  // Once it completes it has released them: none are listed.
  Finish("q", "parent");
  Result<Explanation> done = engine().Explain("q", "parent");
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->reason, ExplainReason::kTerminal);
  EXPECT_TRUE(done->dependents.empty());
  EXPECT_EQ(done->waiting_dependents, 0u);
}

TEST_F(DependenciesTest, ReleasedByTheCompleteOfItsLastDependencyInThatOperation) {
  Put("q", "a");
  Put("q", "b");
  PutAfter("q", "c", {"a", "b"});
  Finish("q", "a");
  EXPECT_EQ(StateOf("q", "c"), MessageState::kWaiting);
  sink_.Clear();
  Finish("q", "b");
  EXPECT_EQ(StateOf("q", "c"), MessageState::kPending) << "no Advance needed";
  std::vector<RecordedEffect> effects = sink_.Take();
  ASSERT_EQ(effects.size(), 3u);  // leased b, completed b, released c
  EXPECT_EQ(effects[1].cause, ChangeCause::kCompleted);
  EXPECT_FALSE(effects[1].derived);
  EXPECT_EQ(effects[2].cause, ChangeCause::kReleased);
  EXPECT_EQ(effects[2].id, "c");
  EXPECT_TRUE(effects[2].derived);
  Finish("q", "c");
}

TEST_F(DependenciesTest, ReleasedMessageKeepsItsDelay) {
  Put("q", "a");
  EnqueueItem item = Item("c");
  item.depends_on = {"a"};
  item.delay_ms = 10'000;
  Put("q", std::move(item));
  EXPECT_EQ(GetMessage("q", "c").visible_at, Now() + 10'000);
  Finish("q", "a");
  EXPECT_EQ(StateOf("q", "c"), MessageState::kInvisible);
  AdvanceTime(10'000);
  EXPECT_EQ(StateOf("q", "c"), MessageState::kPending);
}

TEST_F(DependenciesTest, AlreadyCompletedDependencyCountsAsDone) {
  Put("q", "a");
  Finish("q", "a");
  PutAfter("q", "c", {"a"});
  EXPECT_EQ(StateOf("q", "c"), MessageState::kPending);
}

// Found by the model test: max_depth counts the non-terminal messages (SPEC §1), and a waiting
// message is not terminal; the engine counted only invisible, pending and running ones.
TEST_F(DependenciesTest, WaitingMessagesCountTowardsMaxDepth) {
  QueueSettings settings;
  settings.max_depth = 2;
  MakeQueue("q", settings);
  Put("q", "a");
  PutAfter("q", "b", {"a"});
  EnqueueItem item = Item("c");
  EXPECT_EQ(EnqueueOne("q", std::move(item)).status().code(), Code::kResourceExhausted);
}

// Found by the model test: a dependency removed by GC is NOT_FOUND in DependencyOutcomes even
// when a new message has taken its id since (the engine read the new one's outcome).
TEST_F(DependenciesTest, DependencyOutcomesDoNotMistakeANewMessageForARemovedDependency) {
  QueueSettings settings;
  settings.retention_ms = 1000;
  MakeQueue("q", settings);
  Put("q", "a");
  PutAfter("q", "c", {"a"});
  Finish("q", "a");   // c is released (pending)
  AdvanceTime(1000);  // a's retention: c no longer waits, a goes
  ASSERT_EQ(GetCode("q", "a"), Code::kNotFound);
  Put("q", "a");  // another message with a's id
  auto outcomes = engine().DependencyOutcomes("q", "c");
  ASSERT_TRUE(outcomes.ok());
  ASSERT_EQ(outcomes->size(), 1u);
  EXPECT_EQ((*outcomes)[0].first, "q/a");
  EXPECT_EQ((*outcomes)[0].second.status().code(), Code::kNotFound);
}

// Found by the model test: when one purge removes several dependencies of a dependent, its
// reason names the first by id, whatever the order of the queue's store (which a replay or a
// standby may not share).
TEST_F(DependenciesTest, APurgeOfSeveralDependenciesNamesTheFirstByIdInTheReason) {
  Put("q", "b");
  Put("q", "a");
  Put("other", "x");
  PutAfter("other", "d", {"q/b", "q/a"});
  ASSERT_TRUE(engine().PurgeQueue("q", {MessageState::kPending}).ok());
  EXPECT_EQ(StateOf("other", "d"), MessageState::kCanceled);
  EXPECT_EQ(GetMessage("other", "d").last_error, "dependency q/a removed");
  ExpectReplayAndExportGiveTheSameState();
}

// Found by the model test: explain counts the dependencies a message still waits on; one that
// errored under the release policy counted as finished and stays so when it is redriven (the
// engine read its state, pending again, and listed it).
TEST_F(DependenciesTest, ExplainDoesNotCountARedrivenDependencyAsUnfinished) {
  QueueSettings once;
  once.max_attempts = 1;
  MakeQueue("q", once);
  Put("q", "x");
  Put("q", "y");
  PutAfter("q", "d", {"x", "y"}, DependencyFailurePolicy::kRelease);
  MessageRecord m = TakeOne("q");
  ASSERT_EQ(m.id, "x");
  ASSERT_TRUE(engine()
                  .Fail("q", FailRequest{.id = "x",
                                         .lease_token = m.lease_token,
                                         .error = "e",
                                         .retry_delay_ms = std::nullopt})
                  .ok());
  ASSERT_TRUE(engine().Redrive("q", {"x"})[0].ok());
  Result<Explanation> x = engine().Explain("q", "d");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->reason, ExplainReason::kWaitingOnDependencies);
  EXPECT_EQ(x->dependencies, 2u);
  EXPECT_EQ(x->unfinished, 1u);
  EXPECT_EQ(x->waiting_on, std::vector<std::string>{"q/y"});
}

TEST_F(DependenciesTest, MissingDependencyIsNotFound) {
  Put("q", "a");
  EnqueueItem item = Item("c");
  item.depends_on = {"a", "nope"};
  Result<EnqueueResult> r = EnqueueOne("q", std::move(item));
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_EQ(GetCode("q", "c"), Code::kNotFound);
  item = Item("d");
  item.depends_on = {"other/a"};
  EXPECT_EQ(EnqueueOne("q", std::move(item)).status().code(), Code::kNotFound);
}

TEST_F(DependenciesTest, DependencyMayArriveEarlierInTheSameRequest) {
  EnqueueItem a = Item("a");
  EnqueueItem b = Item("b");
  b.depends_on = {"a"};
  std::vector<EnqueueItem> items;
  items.push_back(std::move(a));
  items.push_back(std::move(b));
  for (const auto& r : engine().Enqueue("q", std::move(items))) EXPECT_TRUE(r.ok());
  EXPECT_EQ(StateOf("q", "b"), MessageState::kWaiting);
}

TEST_F(DependenciesTest, CrossQueueDependencyReleasesInTheOtherQueue) {
  MakeQueue("parents");
  MakeQueue("children");
  for (int i = 0; i < 8; ++i) Put("children", "c" + std::to_string(i));
  std::vector<std::string> deps;
  for (int i = 0; i < 8; ++i) deps.push_back("children/c" + std::to_string(i));
  PutAfter("parents", "p", deps);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(StateOf("parents", "p"), MessageState::kWaiting);
    Finish("children", "c" + std::to_string(i));
  }
  EXPECT_EQ(StateOf("parents", "p"), MessageState::kPending);
}

TEST_F(DependenciesTest, CanceledDependencyCancelsTransitivelyWithAReason) {
  Put("q", "a");
  PutAfter("q", "b", {"a"});
  PutAfter("q", "c", {"b"});
  ASSERT_TRUE(CancelOne("q", "a").ok());
  EXPECT_EQ(StateOf("q", "b"), MessageState::kCanceled);
  EXPECT_EQ(StateOf("q", "c"), MessageState::kCanceled);
  EXPECT_EQ(GetMessage("q", "b").last_error, "dependency q/a canceled");
  EXPECT_EQ(GetMessage("q", "c").last_error, "dependency q/b canceled");
}

TEST_F(DependenciesTest, ErroredDependencyWithErrorPolicyErrorsTheDependent) {
  QueueSettings s;
  s.max_attempts = 1;
  MakeQueue("q", s);
  Put("q", "a");
  PutAfter("q", "b", {"a"}, DependencyFailurePolicy::kError);
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(FailOne("q", m.id, m.lease_token).ok());
  EXPECT_EQ(StateOf("q", "a"), MessageState::kErrored);
  EXPECT_EQ(StateOf("q", "b"), MessageState::kErrored);
  EXPECT_EQ(GetMessage("q", "b").last_error, "dependency q/a errored");
}

TEST_F(DependenciesTest, ReleasePolicyRunsAnyway) {
  Put("q", "a");
  Put("q", "b");
  PutAfter("q", "c", {"a", "b"}, DependencyFailurePolicy::kRelease);
  ASSERT_TRUE(CancelOne("q", "a").ok());
  EXPECT_EQ(StateOf("q", "c"), MessageState::kWaiting);
  Finish("q", "b");
  EXPECT_EQ(StateOf("q", "c"), MessageState::kPending);
}

TEST_F(DependenciesTest, AlreadyCanceledDependencyCancelsAtEnqueue) {
  Put("q", "a");
  ASSERT_TRUE(CancelOne("q", "a").ok());
  PutAfter("q", "c", {"a"});
  EXPECT_EQ(StateOf("q", "c"), MessageState::kCanceled);
  PutAfter("q", "d", {"a"}, DependencyFailurePolicy::kRelease);
  EXPECT_EQ(StateOf("q", "d"), MessageState::kPending);
}

TEST_F(DependenciesTest, CanceledDependentIsNotReleasedLater) {
  Put("q", "a");
  PutAfter("q", "c", {"a"});
  ASSERT_TRUE(CancelOne("q", "c").ok());
  Finish("q", "a");
  EXPECT_EQ(StateOf("q", "c"), MessageState::kCanceled);
}

TEST_F(DependenciesTest, CompletedDependencyIsKeptFromGcWhileADependentWaits) {
  QueueSettings s;
  s.retention_ms = 1'000;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "b");
  PutAfter("q", "c", {"a", "b"});
  Finish("q", "a");
  AdvanceTime(5'000);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kCompleted) << "c still waits on it";
  Finish("q", "b");
  AdvanceTime(5'000);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
}

TEST_F(DependenciesTest, RetentionZeroKeepsAHeldDependencyWithoutSpinning) {
  // Retention 0: a completed message of the graph is removed at the next Advance, unless a
  // dependent still waits on it; then its timer is disarmed (not due again at the same instant,
  // which never ended), and armed again, still due, when the dependent stops waiting.
  QueueSettings s;
  s.retention_ms = 0;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "b");
  PutAfter("q", "c", {"a", "b"});
  Finish("q", "a");
  AdvanceTime(1);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kCompleted) << "c still waits on it";
  EXPECT_EQ(engine().NextDueTime(), INT64_MAX) << "a's timer is disarmed, nothing else is due";
  Finish("q", "b");
  EXPECT_LE(engine().NextDueTime(), Now()) << "c released: a's timer armed again, due";
  AdvanceTime(1);
  EXPECT_EQ(GetCode("q", "b"), Code::kNotFound) << "nothing holds b";
  EXPECT_EQ(StateOf("q", "c"), MessageState::kPending);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound) << "collected by the first Advance after";
}

// Found by the model test (ReplayTest.ReplayingEffectsReproducesDigest/WithDependencies): when
// Advance found a completed dependency due for GC while a dependent still waited, it moved the
// message's GC timer a retention (at least 1 s) later with no effect, so an engine fed the
// effects (the log's replay, a standby) kept the old due time and its Digest differed. Now the
// timer is disarmed and its due time kept: live, replayed and restored engines agree.
TEST_F(DependenciesTest, ReplayAfterAHeldDependencyIsLookedAtAgainHasTheSameDigest) {
  QueueSettings s;
  s.retention_ms = 0;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "b");
  PutAfter("q", "c", {"a", "b"});
  Finish("q", "a");
  AdvanceTime(1);  // a is held by c: its GC timer is disarmed, its due time unchanged
  ASSERT_EQ(StateOf("q", "a"), MessageState::kCompleted);
  EXPECT_EQ(Replayed()->Digest(), engine().Digest());
  EXPECT_EQ(Exported()->Digest(), engine().Digest());
  AdvanceTime(5'000);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, HeldDependencyIsCollectedOnlyOnceItsLastHolderIsReleased) {
  QueueSettings s;
  s.retention_ms = 1'000;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "b");
  Put("q", "x");
  PutAfter("q", "c", {"a", "b"});
  PutAfter("q", "d", {"a", "x"});
  Finish("q", "a");
  AdvanceTime(5'000);
  ASSERT_EQ(StateOf("q", "a"), MessageState::kCompleted) << "held by c and d";
  ExpectReplayAndExportGiveTheSameState();
  Finish("q", "b");  // releases c; d still holds a
  AdvanceTime(5'000);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kCompleted) << "d still waits on it";
  ExpectReplayAndExportGiveTheSameState();
  Finish("q", "x");  // releases d, the last holder
  AdvanceTime(0);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound) << "its retention ran out long ago";
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, HeldDependencyIsCollectedOnceItsHolderIsCanceled) {
  QueueSettings s;
  s.retention_ms = 1'000;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "b");
  PutAfter("q", "c", {"a", "b"});
  Finish("q", "a");
  AdvanceTime(5'000);
  ASSERT_EQ(StateOf("q", "a"), MessageState::kCompleted);
  ASSERT_TRUE(CancelOne("q", "c").ok());
  AdvanceTime(0);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  EXPECT_EQ(StateOf("q", "c"), MessageState::kCanceled) << "c's own retention runs from now";
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, HeldDependencyIsCollectedOnceItsHolderIsErroredByItsPolicy) {
  QueueSettings s;
  s.retention_ms = 1'000;
  s.max_attempts = 1;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "x");
  PutAfter("q", "c", {"a", "x"}, DependencyFailurePolicy::kError);
  Finish("q", "a");
  AdvanceTime(5'000);
  ASSERT_EQ(StateOf("q", "a"), MessageState::kCompleted);
  ExhaustAttempts("q", "x");  // x errors: c errors by its policy and holds a no more
  EXPECT_EQ(StateOf("q", "c"), MessageState::kErrored);
  AdvanceTime(0);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, HeldDependencyIsCollectedOnceItsHolderIsCanceledByADeadLetterMove) {
  QueueSettings s;
  s.retention_ms = 1'000;
  s.max_attempts = 1;
  s.dead_letter_queue = "dlq";
  MakeQueue("dlq");
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "x");
  PutAfter("q", "c", {"a", "x"});
  Finish("q", "a");
  AdvanceTime(5'000);
  ASSERT_EQ(StateOf("q", "a"), MessageState::kCompleted);
  MessageRecord x = TakeOne("q");
  ASSERT_EQ(x.id, "x");
  ASSERT_TRUE(FailOne("q", "x", x.lease_token, 0).ok());  // moved to dlq: c is canceled
  EXPECT_EQ(StateOf("q", "c"), MessageState::kCanceled);
  EXPECT_EQ(StateOf("dlq", "x"), MessageState::kPending);
  AdvanceTime(0);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, HeldDependencyIsCollectedOnceItsHolderIsPurged) {
  QueueSettings s;
  s.retention_ms = 1'000;
  MakeQueue("q", s);
  MakeQueue("r");
  Put("q", "a");
  Put("q", "b");
  PutAfter("r", "c", {"q/a", "q/b"});
  Finish("q", "a");
  AdvanceTime(5'000);
  ASSERT_EQ(StateOf("q", "a"), MessageState::kCompleted);
  ASSERT_TRUE(engine().PurgeQueue("r", {MessageState::kWaiting}).ok());
  AdvanceTime(0);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, DisarmedHeldDependencyCanBePurgedOrItsQueueDeleted) {
  QueueSettings s;
  s.retention_ms = 1'000;
  MakeQueue("q", s);
  MakeQueue("p", s);
  Put("q", "a");
  Put("p", "e");
  Put("q", "b");
  PutAfter("q", "c", {"a", "p/e", "b"}, DependencyFailurePolicy::kRelease);
  Finish("q", "a");
  Finish("p", "e");
  AdvanceTime(5'000);  // a and e held by c, their timers disarmed
  ASSERT_TRUE(engine().PurgeQueue("q", {MessageState::kCompleted}).ok());
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  ASSERT_TRUE(engine().DeleteQueue("p").ok());
  EXPECT_EQ(StateOf("q", "c"), MessageState::kWaiting) << "b still unfinished";
  ExpectReplayAndExportGiveTheSameState();
  Finish("q", "b");
  AdvanceTime(5'000);
  EXPECT_EQ(GetCode("q", "b"), Code::kNotFound);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, DisarmedHeldDependencyThatIsRedrivenGetsATimerAgain) {
  QueueSettings s;
  s.retention_ms = 1'000;
  s.max_attempts = 1;
  MakeQueue("q", s);
  Put("q", "x");
  Put("q", "y");
  PutAfter("q", "d", {"x", "y"}, DependencyFailurePolicy::kRelease);
  ExhaustAttempts("q", "x");  // errored: counted finished for d, still held by it
  AdvanceTime(5'000);
  ASSERT_EQ(StateOf("q", "x"), MessageState::kErrored);
  ASSERT_TRUE(RedriveOne("q", "x").ok());
  EXPECT_EQ(StateOf("q", "x"), MessageState::kPending);
  ExpectReplayAndExportGiveTheSameState();
  ExhaustAttempts("q", "x");
  AdvanceTime(5'000);
  EXPECT_EQ(StateOf("q", "x"), MessageState::kErrored) << "held again";
  Finish("q", "y");
  AdvanceTime(0);
  EXPECT_EQ(GetCode("q", "x"), Code::kNotFound);
  ExpectReplayAndExportGiveTheSameState();
}

// A replayed or restored engine keeps a held dependency's timer armed (whether a timer is armed
// is not carried); its own Advance disarms it, and its holder's release arms it again.
TEST_F(DependenciesTest, ReplayedAndRestoredEnginesCollectAHeldDependencyAsTheOriginalDoes) {
  QueueSettings s;
  s.retention_ms = 1'000;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "b");
  PutAfter("q", "c", {"a", "b"});
  Finish("q", "a");
  AdvanceTime(5'000);
  std::vector<std::unique_ptr<Engine>> others;
  others.push_back(Replayed());
  others.push_back(Exported());
  for (std::unique_ptr<Engine>& other : others) {
    EXPECT_LE(other->NextDueTime(), Now()) << "armed, due";
    other->Advance(Now());
    EXPECT_EQ(other->NextDueTime(), INT64_MAX) << "disarmed by its own Advance";
    EXPECT_EQ(other->Get("q", "a")->state, MessageState::kCompleted);
    EXPECT_EQ(other->Digest(), engine().Digest());
    MessageRecord b = other->Dequeue("q", {}).value()[0];
    ASSERT_EQ(b.id, "b");
    ASSERT_TRUE(other->Complete("q", {CompleteItem{b.id, b.lease_token}})[0].ok());
    other->Advance(Now());
    EXPECT_EQ(other->Get("q", "a").status().code(), Code::kNotFound);
  }
}

TEST_F(DependenciesTest, BrowseListsWaitingMessages) {
  Put("q", "a");
  PutAfter("q", "b", {"a"});
  PutAfter("q", "c", {"a"});
  BrowseRequest r;
  r.state = MessageState::kWaiting;
  Result<BrowsePage> page = engine().Browse("q", r);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(IdsOf(page->messages), (std::vector<std::string>{"b", "c"}));
}

TEST_F(DependenciesTest, DependencyOutcomesGiveTheDependenciesResults) {
  MakeQueue("other");
  Put("q", "a");
  Put("other", "b");
  PutAfter("q", "c", {"a", "other/b"});
  MessageRecord a = TakeOne("q");
  ASSERT_TRUE(engine().Complete("q", {CompleteItem{"a", a.lease_token, "A!"}})[0].ok());
  MessageRecord b = TakeOne("other");
  ASSERT_TRUE(engine().Complete("other", {CompleteItem{"b", b.lease_token, "B!"}})[0].ok());
  auto outcomes = engine().DependencyOutcomes("q", "c");
  ASSERT_TRUE(outcomes.ok());
  ASSERT_EQ(outcomes->size(), 2u);
  EXPECT_EQ((*outcomes)[0].first, "q/a");
  EXPECT_EQ((*outcomes)[0].second->result, "A!");
  EXPECT_EQ((*outcomes)[1].first, "other/b");
  EXPECT_EQ((*outcomes)[1].second->result, "B!");
}

TEST_F(DependenciesTest, ReplayWithoutDerivedEffectsReproducesWaitingAndReleasedStates) {
  MakeQueue("other");
  Put("q", "a");
  Put("other", "b");
  PutAfter("q", "c", {"a", "other/b"});
  PutAfter("other", "d", {"q/c"});
  PutAfter("q", "e", {"a"});
  Put("q", "f");
  PutAfter("q", "g", {"f"});
  Finish("q", "a");                       // releases e; c still waits on b
  ASSERT_TRUE(CancelOne("q", "f").ok());  // cancels g
  auto replayed = Replayed();
  EXPECT_EQ(replayed->Digest(), engine().Digest());
  EXPECT_EQ(replayed->Get("q", "c")->state, MessageState::kWaiting);
  EXPECT_EQ(replayed->Get("q", "e")->state, MessageState::kPending);
  EXPECT_EQ(replayed->Get("q", "g")->state, MessageState::kCanceled);
  // The replayed engine goes on as the original would: b's completion releases c there too.
  MessageRecord b = replayed->Dequeue("other", {}).value()[0];
  ASSERT_TRUE(replayed->Complete("other", {CompleteItem{b.id, b.lease_token}})[0].ok());
  EXPECT_EQ(replayed->Get("q", "c")->state, MessageState::kPending);
}

TEST_F(DependenciesTest, LeaseExpiryThatErrorsADependencyCancelsItsDependents) {
  QueueSettings s;
  s.max_attempts = 1;
  s.lease_ms = 1'000;
  MakeQueue("q", s);
  MakeQueue("r");
  Put("q", "a");
  PutAfter("r", "b", {"q/a"});
  TakeOne("q");
  AdvanceTime(1'000);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kErrored);
  EXPECT_EQ(StateOf("r", "b"), MessageState::kCanceled);
}

TEST_F(DependenciesTest, CompleteAndDequeueOfTheLastDependencyReleasesAndMayLeaseTheDependent) {
  Put("q", "a");
  PutAfter("q", "c", {"a"});
  const MessageRecord a = TakeOne("q");
  ASSERT_EQ(a.id, "a");
  const size_t before = sink_.size();
  Engine::CompleteAndNextResult res =
      engine().CompleteAndDequeue("q", {CompleteItem{a.id, a.lease_token}}, DequeueRequest{});
  ASSERT_EQ(res.completed.size(), 1u);
  EXPECT_TRUE(res.completed[0].ok());
  EXPECT_EQ(StateOf("q", "a"), MessageState::kCompleted);
  // Released in the complete, then leased by the dequeue under the same locks.
  ASSERT_TRUE(res.next.ok());
  EXPECT_EQ(IdsOf(*res.next), std::vector<std::string>{"c"});
  EXPECT_EQ(StateOf("q", "c"), MessageState::kRunning);
  std::vector<RecordedEffect> effects = sink_.All();
  effects.erase(effects.begin(), effects.begin() + static_cast<ptrdiff_t>(before));
  ASSERT_EQ(effects.size(), 3u);  // completed a, released c, leased c
  EXPECT_EQ(effects[0].cause, ChangeCause::kCompleted);
  EXPECT_EQ(effects[1].cause, ChangeCause::kReleased);
  EXPECT_EQ(effects[1].id, "c");
  EXPECT_TRUE(effects[1].derived);
  EXPECT_EQ(effects[2].cause, ChangeCause::kLeased);
  EXPECT_EQ(effects[2].id, "c");
  EXPECT_FALSE(effects[2].derived);
  // Replay (every effect but the derived ones) derives the release from the completion, so
  // the lease of the dependent applies.
  std::unique_ptr<Engine> replayed = Replayed();
  EXPECT_EQ(replayed->Digest(), engine().Digest());
}

TEST_F(DependenciesTest, CompleteAndDequeueReleasesADependentOfAnotherQueue) {
  MakeQueue("children");
  MakeQueue("parents");
  Put("children", "c1");
  Put("children", "c2");
  Put("children", "other");
  PutAfter("parents", "p", {"children/c1", "children/c2"});
  Finish("children", "c1");
  const MessageRecord c2 = TakeOne("children");
  ASSERT_EQ(c2.id, "c2");
  Engine::CompleteAndNextResult res =
      engine().CompleteAndDequeue("children", {CompleteItem{c2.id, c2.lease_token}}, {});
  ASSERT_EQ(res.completed.size(), 1u);
  EXPECT_TRUE(res.completed[0].ok());
  EXPECT_EQ(StateOf("parents", "p"), MessageState::kPending);
  ASSERT_TRUE(res.next.ok());
  EXPECT_EQ(IdsOf(*res.next), std::vector<std::string>{"other"});
}

TEST_F(DependenciesTest, CompleteAndDequeueWithAStaleTokenOnAGraphMessageStillDequeues) {
  Put("q", "a");
  Put("q", "b");
  PutAfter("q", "c", {"a"});
  const MessageRecord a = TakeOne("q");
  Engine::CompleteAndNextResult res =
      engine().CompleteAndDequeue("q", {CompleteItem{a.id, a.lease_token + 1}}, {});
  ASSERT_EQ(res.completed.size(), 1u);
  EXPECT_FALSE(res.completed[0].ok());
  EXPECT_EQ(StateOf("q", "c"), MessageState::kWaiting);
  ASSERT_TRUE(res.next.ok());
  EXPECT_EQ(IdsOf(*res.next), std::vector<std::string>{"b"});
}

// ---- Snapshots: the graph in ExportState ----------------------------------------------------

// A graph with every kind of entry: cross-queue, fan-in, a chain, a release policy, a
// completed dependency held for a waiting dependent, one gone (purged) while held, a dependent
// canceled while waiting and still listed by its unfinished dependency. An export loaded into
// a new engine has the same digest (which covers the graph), and then behaves the same.
TEST_F(DependenciesTest, AnExportedGraphLoadsIntoTheSameGraphAndGoesOnTheSame) {
  MakeQueue("other");
  MakeQueue("gone");
  Put("q", "a");
  Put("q", "b");
  Put("other", "x");
  Put("gone", "g");
  PutAfter("q", "c", {"a", "other/x", "b"});                         // fan-in across queues
  PutAfter("other", "d", {"q/c"}, DependencyFailurePolicy::kError);  // a chain
  PutAfter("q", "e", {"a", "b"}, DependencyFailurePolicy::kRelease);
  PutAfter("q", "f", {"b"});
  PutAfter("q", "h", {"gone/g", "b"});
  Finish("q", "a");  // c, e still wait: a is held
  Finish("gone", "g");
  ASSERT_TRUE(engine().PurgeQueue("gone", {MessageState::kCompleted}).ok());  // h's g: gone
  ASSERT_TRUE(CancelOne("q", "f").ok());  // stops waiting; b's reverse list still names it
  auto loaded = Exported();
  EXPECT_EQ(loaded->Digest(), engine().Digest());
  for (const char* id : {"c", "e", "h"}) {
    EXPECT_EQ(loaded->Get("q", id)->state, MessageState::kWaiting) << id;
  }
  auto outcomes = loaded->DependencyOutcomes("q", "h");
  ASSERT_TRUE(outcomes.ok());
  ASSERT_EQ(outcomes->size(), 2u);
  EXPECT_EQ((*outcomes)[0].first, "gone/g");
  EXPECT_EQ((*outcomes)[0].second.status().code(), Code::kNotFound);
  // The same operations on both: b's completion releases e and h, x's then releases c.
  for (Engine* e : {&engine(), loaded.get()}) {
    MessageRecord b = e->Dequeue("q", {}).value()[0];
    ASSERT_EQ(b.id, "b");
    ASSERT_TRUE(e->Complete("q", {CompleteItem{b.id, b.lease_token}})[0].ok());
    EXPECT_EQ(e->Get("q", "e")->state, MessageState::kPending);
    EXPECT_EQ(e->Get("q", "h")->state, MessageState::kPending);
    EXPECT_EQ(e->Get("q", "c")->state, MessageState::kWaiting);
    MessageRecord x = e->Dequeue("other", {}).value()[0];
    ASSERT_TRUE(e->Complete("other", {CompleteItem{x.id, x.lease_token}})[0].ok());
    EXPECT_EQ(e->Get("q", "c")->state, MessageState::kPending);
    EXPECT_EQ(e->Get("other", "d")->state, MessageState::kWaiting);
  }
  // (The digests now differ by the lease tokens each engine drew.) A completed dependency held
  // only for dependents that no longer wait goes at its retention in both.
  clock_.Advance(QueueSettings{}.retention_ms + 1);
  for (Engine* e : {&engine(), loaded.get()}) {
    e->Advance(Now());
    EXPECT_EQ(e->Get("q", "a").status().code(), Code::kNotFound);
    EXPECT_EQ(e->Get("q", "b").status().code(), Code::kNotFound);
    EXPECT_EQ(e->Get("q", "c")->state, MessageState::kPending);
  }
}

// The reverse lists keep their order through an export: the first dependent to be reached
// decides the reason its own dependents read (a diamond a <- b, c <- d).
TEST_F(DependenciesTest, AnExportKeepsTheOrderInWhichDependentsFail) {
  Put("q", "a");
  PutAfter("q", "c", {"a"});
  PutAfter("q", "b", {"a"});
  PutAfter("q", "d", {"b", "c"});
  auto loaded = Exported();
  ASSERT_TRUE(CancelOne("q", "a").ok());
  ASSERT_TRUE(loaded->Cancel("q", {"a"})[0].ok());
  EXPECT_EQ(GetMessage("q", "d").last_error, "dependency q/c canceled");
  EXPECT_EQ(loaded->Get("q", "d")->last_error, "dependency q/c canceled");
  EXPECT_EQ(loaded->Digest(), engine().Digest());
}

TEST_F(DependenciesTest, TheDigestCoversTheDependencyGraph) {
  Put("q", "a");
  PutAfter("q", "c", {"a"});
  // The same messages without the graph entries of the export: another digest.
  RecordingSink exported;
  engine().ExportState(&exported);
  Engine without(DefaultOptions(), &clock_, nullptr);
  size_t entries = 0;
  for (const RecordedEffect& e : exported.All()) {
    if (!e.dependency_edges.empty()) {
      ++entries;
      continue;
    }
    ASSERT_TRUE(without.Apply(e.View()).ok());
  }
  EXPECT_EQ(entries, 1u);
  EXPECT_NE(without.Digest(), engine().Digest());
  // A state that never had dependencies keeps the digest it had before they existed.
  Engine plain(DefaultOptions(), &clock_, nullptr);
  Engine plain_too(DefaultOptions(), &clock_, nullptr);
  ASSERT_TRUE(plain.CreateQueue("q", {}).ok());
  ASSERT_TRUE(plain_too.CreateQueue("q", {}).ok());
  EXPECT_EQ(plain.Digest(), plain_too.Digest());
}

TEST_F(DependenciesTest, AGraphEntryThatDoesNotFitIsRefused) {
  Put("q", "a");
  PutAfter("q", "c", {"a"});
  RecordingSink exported;
  engine().ExportState(&exported);
  std::vector<RecordedEffect> all = exported.All();
  auto entry = std::find_if(all.begin(), all.end(),
                            [](const RecordedEffect& e) { return !e.dependency_edges.empty(); });
  ASSERT_NE(entry, all.end());
  auto load = [&](const RecordedEffect& changed) {
    Engine loaded(DefaultOptions(), &clock_, nullptr);
    for (const RecordedEffect& e : all) {
      if (&e == &*entry) return loaded.Apply(changed.View());
      EXPECT_TRUE(loaded.Apply(e.View()).ok());
    }
    return Status::Ok();
  };
  RecordedEffect not_waiting_on_any = *entry;
  not_waiting_on_any.dependency_edges = std::string(1, '\0');  // waiting, yet listed by none
  EXPECT_FALSE(load(not_waiting_on_any).ok());
  RecordedEffect missing_dependency = *entry;
  missing_dependency.depends_on = std::vector<std::string>{"q/nope"};
  EXPECT_FALSE(load(missing_dependency).ok());
  RecordedEffect listed_and_gone = *entry;
  listed_and_gone.dependency_edges = std::string(1, '\3');
  EXPECT_FALSE(load(listed_and_gone).ok());
  EXPECT_TRUE(load(*entry).ok());
}

// ---- Purge, delete_queue, dead-letter moves, redrive ----------------------------------------

TEST_F(DependenciesTest, PurgingAWaitingDependentTakesItOutOfTheGraph) {
  QueueSettings s;
  s.retention_ms = 1'000;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", "b");
  PutAfter("q", "c", {"a", "b"});
  Finish("q", "a");
  ASSERT_EQ(engine().PurgeQueue("q", {MessageState::kWaiting}).value(), 1u);
  EXPECT_EQ(GetCode("q", "c"), Code::kNotFound);
  AdvanceTime(5'000);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound) << "no dependent holds a any more";
  Finish("q", "b");
  // A new message may take the purged one's id, with dependencies of its own.
  Put("q", "x");
  PutAfter("q", "c", {"x"});
  Finish("q", "x");
  EXPECT_EQ(StateOf("q", "c"), MessageState::kPending);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, PurgingAnUnfinishedDependencyFailsItsDependentsByTheirPolicy) {
  MakeQueue("work");
  MakeQueue("next");
  Put("work", "a");
  Put("work", "b");
  PutAfter("next", "cancel", {"work/a"});
  PutAfter("next", "error", {"work/a"}, DependencyFailurePolicy::kError);
  PutAfter("next", "release", {"work/a"}, DependencyFailurePolicy::kRelease);
  PutAfter("next", "after", {"work/a", "work/b"}, DependencyFailurePolicy::kRelease);
  PutAfter("next", "chained", {"next/cancel"});
  const size_t before = sink_.All().size();
  ASSERT_EQ(engine().PurgeQueue("work", {MessageState::kPending}).value(), 2u);
  EXPECT_EQ(StateOf("next", "cancel"), MessageState::kCanceled);
  EXPECT_EQ(GetMessage("next", "cancel").last_error, "dependency work/a removed");
  EXPECT_EQ(StateOf("next", "error"), MessageState::kErrored);
  EXPECT_EQ(GetMessage("next", "error").last_error, "dependency work/a removed");
  EXPECT_EQ(StateOf("next", "release"), MessageState::kPending);
  EXPECT_EQ(StateOf("next", "after"), MessageState::kPending);
  EXPECT_EQ(StateOf("next", "chained"), MessageState::kCanceled);
  EXPECT_EQ(GetMessage("next", "chained").last_error, "dependency next/cancel canceled");
  // The purge's effect first, then its consequences, derived (the log keeps only the purge).
  std::vector<RecordedEffect> effects = sink_.All();
  effects.erase(effects.begin(), effects.begin() + static_cast<std::ptrdiff_t>(before));
  ASSERT_FALSE(effects.empty());
  EXPECT_EQ(effects[0].type, EffectType::kQueuePurged);
  for (size_t i = 1; i < effects.size(); ++i) EXPECT_TRUE(effects[i].derived) << i;
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, PurgingAWaitingDependencyFailsItsOwnDependents) {
  Put("q", "a");
  PutAfter("q", "b", {"a"});
  MakeQueue("r");
  PutAfter("r", "c", {"q/b"}, DependencyFailurePolicy::kError);
  ASSERT_EQ(engine().PurgeQueue("q", {MessageState::kWaiting}).value(), 1u);
  EXPECT_EQ(StateOf("r", "c"), MessageState::kErrored);
  EXPECT_EQ(GetMessage("r", "c").last_error, "dependency q/b removed");
  Finish("q", "a");
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, DeletingAQueueFailsTheDependentsOfItsUnfinishedMessages) {
  MakeQueue("work");
  MakeQueue("next");
  Put("work", "done");
  Put("work", "todo");
  Put("next", "other");
  PutAfter("next", "c", {"work/done", "next/other"});
  PutAfter("next", "d", {"work/todo"});
  PutAfter("work", "w", {"next/other"});  // a waiting dependent in the deleted queue
  Finish("work", "done");
  const size_t before = sink_.All().size();
  ASSERT_TRUE(engine().DeleteQueue("work").ok());
  EXPECT_EQ(StateOf("next", "c"), MessageState::kWaiting) << "done had completed";
  EXPECT_EQ(StateOf("next", "d"), MessageState::kCanceled);
  EXPECT_EQ(GetMessage("next", "d").last_error, "dependency work/todo removed");
  std::vector<RecordedEffect> effects = sink_.All();
  effects.erase(effects.begin(), effects.begin() + static_cast<std::ptrdiff_t>(before));
  ASSERT_EQ(effects.size(), 2u);
  EXPECT_EQ(effects[0].type, EffectType::kQueueDeleted);
  EXPECT_TRUE(effects[1].derived);
  auto outcomes = engine().DependencyOutcomes("next", "c");
  ASSERT_TRUE(outcomes.ok());
  EXPECT_EQ((*outcomes)[0].second.status().code(), Code::kNotFound);
  ExpectReplayAndExportGiveTheSameState();
  Finish("next", "other");
  EXPECT_EQ(StateOf("next", "c"), MessageState::kPending);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, ADependencyMovedToTheDeadLetterQueueCountsAsErrored) {
  MakeQueue("dlq");
  QueueSettings s;
  s.max_attempts = 1;
  s.dead_letter_queue = "dlq";
  MakeQueue("q", s);
  MakeQueue("r");
  Put("q", "a");
  PutAfter("r", "cancel", {"q/a"});
  PutAfter("r", "release", {"q/a"}, DependencyFailurePolicy::kRelease);
  MessageRecord a = TakeOne("q");
  ASSERT_TRUE(FailOne("q", a.id, a.lease_token).ok());
  EXPECT_EQ(StateOf("dlq", "a"), MessageState::kPending);
  EXPECT_EQ(StateOf("r", "cancel"), MessageState::kCanceled);
  EXPECT_EQ(GetMessage("r", "cancel").last_error, "dependency q/a errored");
  EXPECT_EQ(StateOf("r", "release"), MessageState::kPending);
  // The copy in the dead-letter queue is another message: its completion releases nothing.
  Finish("dlq", "a");
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, ALeaseExpiryThatDeadLettersADependencyFailsItsDependents) {
  MakeQueue("dlq");
  QueueSettings s;
  s.max_attempts = 1;
  s.lease_ms = 1'000;
  s.dead_letter_queue = "dlq";
  MakeQueue("q", s);
  Put("q", "a");
  PutAfter("q", "b", {"a"}, DependencyFailurePolicy::kError);
  TakeOne("q");
  AdvanceTime(1'000);
  EXPECT_EQ(StateOf("dlq", "a"), MessageState::kPending);
  EXPECT_EQ(StateOf("q", "b"), MessageState::kErrored);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, ARedrivenDependentRunsWithoutWaitingAgain) {
  QueueSettings s;
  s.max_attempts = 1;
  MakeQueue("q", s);
  Put("q", "a");
  PutAfter("q", "b", {"a"}, DependencyFailurePolicy::kError);
  MessageRecord a = TakeOne("q");
  ASSERT_TRUE(FailOne("q", a.id, a.lease_token).ok());
  EXPECT_EQ(StateOf("q", "b"), MessageState::kErrored);
  ASSERT_TRUE(engine().Redrive("q", {"b"})[0].ok());
  EXPECT_EQ(StateOf("q", "b"), MessageState::kPending);
  ASSERT_TRUE(engine().Redrive("q", {"a"})[0].ok());  // the dependency: nothing follows
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(DependenciesTest, DependencyKeysAreLimitedInBytes) {
  Put("q", "a");
  EnqueueItem item = Item("c");
  const std::string id(kMaxIdBytes, 'a');
  Put("q", id);
  item.depends_on.assign(kMaxDependencyKeyBytes / (id.size() + 2) + 1, id);
  Result<EnqueueResult> r = EnqueueOne("q", std::move(item));
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace sundial::engine_test
