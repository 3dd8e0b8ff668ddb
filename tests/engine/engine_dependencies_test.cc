// Dependencies (docs/semantics.md, "Dependencies"): enqueue with depends_on, the waiting state,
// release in the operation that completes the last dependency, the on_dependency_failure
// policies, cross-queue dependencies, GC holds, counts and browse, and replay.
#include <gtest/gtest.h>

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
  // A new engine fed every effect that is not derived, as the WAL would be.
  std::unique_ptr<Engine> Replayed() {
    auto replayed = std::make_unique<Engine>(DefaultOptions(), &clock_, nullptr);
    for (const RecordedEffect& e : sink_.All()) {
      if (e.derived) continue;
      Status s = replayed->Apply(e.View());
      EXPECT_TRUE(s.ok()) << EffectTypeName(e.type) << " " << e.queue << "/" << e.id << ": "
                          << s.detail();
    }
    return replayed;
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

}  // namespace
}  // namespace sundial::engine_test
