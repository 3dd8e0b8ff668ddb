// DependencyGraph on its own: counters, reverse lists, policies, transitive failure, holds and
// node reclamation (engine/dependencies.h).
#include "engine/dependencies.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sundial {
namespace {

using Kind = DependencyAction::Kind;

std::vector<std::string> Keys(const std::vector<DependencyAction>& actions, Kind kind) {
  std::vector<std::string> keys;
  for (const auto& a : actions)
    if (a.kind == kind) keys.push_back(a.dependent);
  return keys;
}

TEST(DependencyKeyTest, BareIdIsInOwnQueueAndQualifiedIdNamesAnotherQueue) {
  EXPECT_EQ(ResolveDependency("jobs", "a"), "jobs/a");
  EXPECT_EQ(ResolveDependency("jobs", "other/a"), "other/a");
  EXPECT_EQ(ResolveDependency("jobs", "other/a/b"), "other/a/b");
  EXPECT_EQ(ResolveDependency("jobs", "bad name/a"), "jobs/bad name/a");
  EXPECT_EQ(ResolveDependency("jobs", "x/"), "jobs/x/");
}

TEST(DependencyFailurePolicyTest, NamesRoundTrip) {
  for (auto p : {DependencyFailurePolicy::kCancel, DependencyFailurePolicy::kRelease,
                 DependencyFailurePolicy::kError}) {
    EXPECT_EQ(ParseDependencyFailurePolicy(DependencyFailurePolicyName(p)), p);
  }
  EXPECT_FALSE(ParseDependencyFailurePolicy("ignore"));
}

TEST(DependencyGraphTest, ReleasedOnlyWhenLastDependencyCompletes) {
  DependencyGraph g;
  EXPECT_TRUE(
      g.AddDependent("q/c", DependencyFailurePolicy::kCancel, {"q/a", "r/b"}, {false, false}));
  EXPECT_EQ(g.Unfinished("q/c"), 2u);
  EXPECT_TRUE(g.IsHeld("q/a"));
  std::vector<DependencyAction> actions;
  g.OnCompleted("q/a", &actions);
  EXPECT_TRUE(actions.empty());
  EXPECT_TRUE(g.IsWaiting("q/c"));
  EXPECT_TRUE(g.IsHeld("q/a")) << "a completed dependency is kept while its dependent waits";
  g.OnCompleted("r/b", &actions);
  EXPECT_EQ(Keys(actions, Kind::kRelease), std::vector<std::string>{"q/c"});
  EXPECT_FALSE(g.IsWaiting("q/c"));
  EXPECT_FALSE(g.IsHeld("q/a"));
  EXPECT_EQ(g.DependenciesOf("q/c"), (std::vector<std::string>{"q/a", "r/b"}));
}

TEST(DependencyGraphTest, AlreadyCompletedDependencyCountsAsDone) {
  DependencyGraph g;
  EXPECT_FALSE(g.AddDependent("q/c", DependencyFailurePolicy::kCancel, {"q/a"}, {true}));
  EXPECT_FALSE(g.IsWaiting("q/c"));
  EXPECT_FALSE(g.IsHeld("q/a"));
  EXPECT_TRUE(
      g.AddDependent("q/d", DependencyFailurePolicy::kCancel, {"q/a", "q/b"}, {true, false}));
  EXPECT_EQ(g.Unfinished("q/d"), 1u);
  EXPECT_TRUE(g.IsHeld("q/a"));
}

TEST(DependencyGraphTest, CancelPolicyCancelsTransitivelyWithReason) {
  DependencyGraph g;
  ASSERT_TRUE(g.AddDependent("q/b", DependencyFailurePolicy::kCancel, {"q/a"}, {false}));
  ASSERT_TRUE(g.AddDependent("q/c", DependencyFailurePolicy::kCancel, {"q/b"}, {false}));
  ASSERT_TRUE(g.AddDependent("q/d", DependencyFailurePolicy::kError, {"q/c"}, {false}));
  std::vector<DependencyAction> actions;
  g.OnFailed("q/a", /*errored=*/false, &actions);
  ASSERT_EQ(actions.size(), 3u);
  EXPECT_EQ(actions[0].kind, Kind::kCancel);
  EXPECT_EQ(actions[0].dependent, "q/b");
  EXPECT_EQ(actions[0].reason, "dependency q/a canceled");
  EXPECT_EQ(actions[1].kind, Kind::kCancel);
  EXPECT_EQ(actions[1].reason, "dependency q/b canceled");
  EXPECT_EQ(actions[2].kind, Kind::kError);
  EXPECT_EQ(actions[2].dependent, "q/d");
  EXPECT_FALSE(g.IsWaiting("q/d"));
}

TEST(DependencyGraphTest, ErrorPolicyErrorsAndItsDependentsSeeAnErroredDependency) {
  DependencyGraph g;
  ASSERT_TRUE(g.AddDependent("q/b", DependencyFailurePolicy::kError, {"q/a"}, {false}));
  ASSERT_TRUE(g.AddDependent("q/c", DependencyFailurePolicy::kCancel, {"q/b"}, {false}));
  std::vector<DependencyAction> actions;
  g.OnFailed("q/a", /*errored=*/true, &actions);
  ASSERT_EQ(actions.size(), 2u);
  EXPECT_EQ(actions[0].kind, Kind::kError);
  EXPECT_EQ(actions[0].reason, "dependency q/a errored");
  EXPECT_EQ(actions[1].kind, Kind::kCancel);
  EXPECT_EQ(actions[1].reason, "dependency q/b errored");
}

TEST(DependencyGraphTest, ReleasePolicyRunsAnywayOnceEveryDependencyFinished) {
  DependencyGraph g;
  ASSERT_TRUE(
      g.AddDependent("q/c", DependencyFailurePolicy::kRelease, {"q/a", "q/b"}, {false, false}));
  ASSERT_TRUE(g.AddDependent("q/d", DependencyFailurePolicy::kCancel, {"q/c"}, {false}));
  std::vector<DependencyAction> actions;
  g.OnFailed("q/a", /*errored=*/true, &actions);
  EXPECT_TRUE(actions.empty());
  EXPECT_TRUE(g.IsWaiting("q/c"));
  g.OnCompleted("q/b", &actions);
  EXPECT_EQ(Keys(actions, Kind::kRelease), std::vector<std::string>{"q/c"});
  EXPECT_TRUE(g.IsWaiting("q/d")) << "a released dependent does not touch its own dependents";
}

TEST(DependencyGraphTest, StoppedDependentIsNotReleasedAndFreesItsHolds) {
  DependencyGraph g;
  ASSERT_TRUE(g.AddDependent("q/c", DependencyFailurePolicy::kCancel, {"q/a"}, {false}));
  g.StopWaiting("q/c");
  EXPECT_FALSE(g.IsHeld("q/a"));
  std::vector<DependencyAction> actions;
  g.OnCompleted("q/a", &actions);
  EXPECT_TRUE(actions.empty());
}

TEST(DependencyGraphTest, NodesAreFreedWhenNothingRefersToThem) {
  DependencyGraph g;
  ASSERT_TRUE(g.AddDependent("q/c", DependencyFailurePolicy::kCancel, {"q/a"}, {false}));
  EXPECT_EQ(g.node_count(), 2u);
  std::vector<DependencyAction> actions;
  g.OnCompleted("q/a", &actions);
  EXPECT_EQ(g.node_count(), 2u) << "c keeps its list for include_dependency_results";
  g.Forget("q/a");
  g.Forget("q/c");
  EXPECT_EQ(g.node_count(), 0u);
  EXPECT_EQ(g.edge_count(), 0u);
}

TEST(DependencyGraphTest, ForgottenWaitingDependentDoesNotCountForANewMessageOfTheSameKey) {
  DependencyGraph g;
  ASSERT_TRUE(g.AddDependent("q/c", DependencyFailurePolicy::kCancel, {"q/a"}, {false}));
  g.Forget("q/c");  // purged while waiting
  ASSERT_TRUE(g.AddDependent("q/c", DependencyFailurePolicy::kCancel, {"q/b"}, {false}));
  std::vector<DependencyAction> actions;
  g.OnCompleted("q/a", &actions);
  EXPECT_TRUE(actions.empty());
  EXPECT_TRUE(g.IsWaiting("q/c"));
  g.OnCompleted("q/b", &actions);
  EXPECT_EQ(Keys(actions, Kind::kRelease), std::vector<std::string>{"q/c"});
}

TEST(DependencyGraphTest, FanInOfManyChildrenReleasesParentOnceAtTheLast) {
  DependencyGraph g;
  constexpr int kChildren = 100'000;
  std::vector<std::string> children;
  for (int i = 0; i < kChildren; ++i) children.push_back("c/" + std::to_string(i));
  ASSERT_TRUE(g.AddDependent("p/root", DependencyFailurePolicy::kCancel, children,
                             std::vector<bool>(kChildren, false)));
  std::vector<DependencyAction> actions;
  for (int i = 0; i < kChildren; ++i) {
    g.OnCompleted(children[i], &actions);
    ASSERT_EQ(actions.empty(), i + 1 < kChildren) << i;
  }
  EXPECT_EQ(Keys(actions, Kind::kRelease), std::vector<std::string>{"p/root"});
}

TEST(DependencyGraphTest, FanOutReleasesEveryDependentOnce) {
  DependencyGraph g;
  constexpr int kDependents = 100'000;
  for (int i = 0; i < kDependents; ++i) {
    ASSERT_TRUE(g.AddDependent("c/" + std::to_string(i), DependencyFailurePolicy::kCancel,
                               {"p/root"}, {false}));
  }
  std::vector<DependencyAction> actions;
  g.OnCompleted("p/root", &actions);
  EXPECT_EQ(actions.size(), static_cast<size_t>(kDependents));
  EXPECT_FALSE(g.IsHeld("p/root"));
}

}  // namespace
}  // namespace sundial
