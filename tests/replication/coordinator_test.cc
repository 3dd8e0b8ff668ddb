// The HA control loop (replication/coordinator.h) against a real etcd, with fake nodes: who
// leads, who follows, when a standby takes over, how the synchronous standby is published and
// replaced, how a primary that cannot renew its lease stops, and a switchover. The tests drive
// each coordinator's rounds (RunOnce) by hand, so every step is deterministic; only lease
// expiry is waited for (with a generous deadline, never a fixed sleep).
#include "replication/coordinator.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>

#include "tests/replication/etcd_process.h"

namespace sundial::replication {
namespace {

using testing::Eventually;

// A node as the coordinator sees it, recording what it was told.
class FakeNode final : public ClusterNode {
 public:
  uint64_t EndLsn() const override { return end_lsn; }
  uint64_t FlushedLsn() const override { return end_lsn; }
  void Follow(const LeaderInfo& leader) override {
    std::lock_guard lock(mu);
    following = leader;
    ++follows;
    // A real standby streams its leader's log, which starts with the epoch's first record.
    end_lsn = std::max<uint64_t>(end_lsn, 1);
  }
  void StopFollowing() override {
    std::lock_guard lock(mu);
    following.reset();
    ++stops;
  }
  Status Promote(uint64_t epoch, SteadyClock::time_point until) override {
    std::lock_guard lock(mu);
    promoted_epoch = epoch;
    writable_until = until;
    primary = true;
    end_lsn = std::max<uint64_t>(end_lsn, 1);  // the epoch's first record
    return promote_result;
  }
  void ExtendLeadership(SteadyClock::time_point until) override {
    std::lock_guard lock(mu);
    writable_until = until;
  }
  void Demote(const std::string& why) override {
    {
      std::lock_guard lock(mu);
      primary = false;
      demoted_because = why;
      ++demotions;
    }
    if (on_demote) on_demote();
  }
  std::vector<StandbyProgress> Standbys() const override {
    std::lock_guard lock(mu);
    return standbys;
  }
  uint64_t RequireAcks(const std::vector<std::string>& s) override {
    std::lock_guard lock(mu);
    required = s;
    return durable_end;
  }
  void Publish(const CoordinatorView& v) override {
    std::lock_guard lock(mu);
    view = v;
  }

  mutable std::mutex mu;
  uint64_t end_lsn = 0;
  uint64_t durable_end = 0;
  std::optional<LeaderInfo> following;
  int follows = 0;
  int stops = 0;
  uint64_t promoted_epoch = 0;
  bool primary = false;
  Status promote_result;
  SteadyClock::time_point writable_until{};
  std::string demoted_because;
  int demotions = 0;
  std::vector<StandbyProgress> standbys;
  std::vector<std::string> required;
  CoordinatorView view;
  // Called in Demote, outside the lock: a real node's demotion waits for every io loop.
  std::function<void()> on_demote;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(etcd_.Start()) << etcd_.log(); }

  std::unique_ptr<Coordinator> Make(const std::string& name, FakeNode* node, bool sync = true) {
    CoordinatorOptions o;
    o.cluster = "jobs";
    o.node = name;
    o.addresses = {name + ":7400", name + ":7401", name + ":7402"};
    o.etcd = {etcd_.endpoint()};
    o.sync_replication = sync;
    o.ttl_seconds = 1;  // etcd's minimum with the test's election timeout
    o.renew_margin = std::chrono::milliseconds(300);
    o.etcd_timeout = std::chrono::milliseconds(500);
    o.switchover_timeout = std::chrono::milliseconds(2000);
    return std::make_unique<Coordinator>(o, node);
  }

  static StandbyProgress Connected(const std::string& name, uint64_t acked) {
    return {name, acked, true, SteadyClock::now()};
  }

  testing::EtcdProcess etcd_;
};

TEST_F(CoordinatorTest, TheFirstNodeLeadsAndTheOthersFollowIt) {
  FakeNode a_node, b_node;
  auto a = Make("a", &a_node);
  auto b = Make("b", &b_node);
  a->RunOnce();
  ASSERT_TRUE(a_node.primary) << "no leader and no sync key yet: anyone may lead";
  EXPECT_GT(a_node.promoted_epoch, 0u);
  EXPECT_GT(a_node.writable_until, SteadyClock::now());
  EXPECT_EQ(a_node.stops, 1) << "it stopped following before taking the key";
  b->RunOnce();
  EXPECT_FALSE(b_node.primary);
  ASSERT_TRUE(b_node.following);
  EXPECT_EQ(b_node.following->node, "a");
  EXPECT_EQ(b_node.following->epoch, a_node.promoted_epoch);
  EXPECT_EQ(b_node.following->addresses.replication_addr, "a:7402");
  b->RunOnce();
  EXPECT_EQ(b_node.follows, 1) << "the same leader is followed once, not once per round";
  ASSERT_EQ(b_node.view.members.size(), 2u) << "both members' keys are read back";
  EXPECT_EQ(b_node.view.leader->node, "a");
}

TEST_F(CoordinatorTest, OnlyTheSyncStandbyTakesOverAndOnlyOnceTheLeaderKeyIsGone) {
  FakeNode a_node, b_node, c_node;
  auto a = Make("a", &a_node);
  auto b = Make("b", &b_node);
  auto c = Make("c", &c_node);
  a->RunOnce();
  ASSERT_TRUE(a_node.primary);
  b->RunOnce();
  c->RunOnce();
  // b connects and catches up: the primary requires its acks, then publishes it.
  a_node.durable_end = 10;
  a_node.standbys = {Connected("b", 5), Connected("c", 3)};
  a->RunOnce();
  EXPECT_EQ(a_node.required, (std::vector<std::string>{"b"})) << "the best standby first";
  a->RunOnce();
  EXPECT_EQ(a_node.view.sync ? a_node.view.sync->standby : "", "")
      << "not published while it lacks acknowledged records";
  a_node.standbys = {Connected("b", 10), Connected("c", 3)};
  a->RunOnce();
  a->RunOnce();
  ASSERT_TRUE(a_node.view.sync);
  EXPECT_EQ(a_node.view.sync->standby, "b");
  EXPECT_EQ(a_node.required, (std::vector<std::string>{"b"}));

  // The primary stops renewing (killed): its key stays until its lease expires.
  c->RunOnce();
  EXPECT_FALSE(c_node.primary);
  b->RunOnce();
  EXPECT_FALSE(b_node.primary) << "the leader key still stands";
  ASSERT_TRUE(Eventually([&] {
    c->RunOnce();
    b->RunOnce();
    return b_node.primary;
  })) << "the synchronous standby takes over once the key expired";
  EXPECT_GT(b_node.promoted_epoch, a_node.promoted_epoch) << "a new epoch fences the old";
  EXPECT_FALSE(c_node.primary) << "c may lack acknowledged writes: it never leads";
  c->RunOnce();
  ASSERT_TRUE(c_node.following);
  EXPECT_EQ(c_node.following->node, "b");
}

TEST_F(CoordinatorTest, APrimaryThatCannotRenewStopsAndLetsGo) {
  FakeNode a_node;
  auto a = Make("a", &a_node);
  a->RunOnce();
  ASSERT_TRUE(a_node.primary);
  const auto deadline = a_node.writable_until;
  etcd_.Pause();
  a->RunOnce();  // the renewal fails: the deadline stays where the last renewal put it
  EXPECT_EQ(a_node.writable_until, deadline);
  EXPECT_LE(deadline, SteadyClock::now() + std::chrono::seconds(1))
      << "within TTL − margin of the last renewal";
  ASSERT_TRUE(Eventually([&] { return SteadyClock::now() > deadline + std::chrono::seconds(1); }));
  etcd_.Resume();
  ASSERT_TRUE(Eventually([&] {
    a->RunOnce();
    return a_node.demotions > 0;
  })) << "the lease expired while etcd was away: no longer the primary";
  EXPECT_FALSE(a_node.primary);
  EXPECT_NE(a_node.demoted_because.find("lease"), std::string::npos) << a_node.demoted_because;
}

TEST_F(CoordinatorTest, ALeaderKeyOfAPreviousRunOfThisNodeIsDroppedAndTheElectionRuns) {
  FakeNode first_node;
  {
    auto first = Make("a", &first_node);
    first->RunOnce();
    ASSERT_TRUE(first_node.primary);
    // Killed: no Stop(), its lease (and key) outlive it until the TTL.
  }
  FakeNode again_node;
  again_node.end_lsn = first_node.end_lsn;  // the same data directory
  auto again = Make("a", &again_node);
  again->RunOnce();  // sees its old key on another lease: drops it
  again->RunOnce();  // and, as the last leader, takes the lead again
  EXPECT_TRUE(again_node.primary);
  EXPECT_GT(again_node.promoted_epoch, first_node.promoted_epoch);
}

TEST_F(CoordinatorTest, ALeaderBackWithAnEmptyDataDirectoryDoesNotLeadAgain) {
  FakeNode first_node;
  {
    auto first = Make("a", &first_node);
    first->RunOnce();
    ASSERT_TRUE(first_node.primary);
    ASSERT_GT(first_node.end_lsn, 0u);
  }
  FakeNode again_node;  // killed, its disk lost: back with an empty log
  auto again = Make("a", &again_node);
  again->RunOnce();
  again->RunOnce();
  again->RunOnce();
  EXPECT_FALSE(again_node.primary) << "it holds none of the writes it acknowledged";
  // Its old key is gone all the same, so the node that holds them can take over at once.
  FakeNode b_node;
  b_node.end_lsn = 5;
  auto b = Make("b", &b_node);
  b->RunOnce();
  EXPECT_FALSE(b_node.primary) << "b is not the synchronous standby: it may lack writes";
  ASSERT_TRUE(again_node.view.sync.has_value());
  EXPECT_EQ(again_node.view.sync->leader, "a");
}

TEST_F(CoordinatorTest, StopRevokesTheLeaseSoAStandbyTakesOverAtOnce) {
  FakeNode a_node, b_node;
  auto a = Make("a", &a_node);
  auto b = Make("b", &b_node);
  a->RunOnce();
  b->RunOnce();
  a_node.durable_end = 0;
  a_node.standbys = {Connected("b", 0)};
  a->RunOnce();
  a->RunOnce();
  ASSERT_EQ(a_node.view.sync->standby, "b");
  a->Stop();
  b->RunOnce();
  EXPECT_TRUE(b_node.primary) << "no TTL to wait for after a clean stop";
}

TEST_F(CoordinatorTest, ASwitchoverHandsTheLeadershipToTheSyncStandby) {
  FakeNode a_node, b_node;
  auto a = Make("a", &a_node);
  auto b = Make("b", &b_node);
  a->RunOnce();
  b->RunOnce();
  a_node.end_lsn = a_node.durable_end = 20;
  a_node.standbys = {Connected("b", 20)};
  a->RunOnce();
  a->RunOnce();
  ASSERT_EQ(a_node.view.sync->standby, "b");
  auto done = std::async(std::launch::async, [&] { return a->RequestSwitchover(""); });
  ASSERT_TRUE(Eventually([&] {
    a->RunOnce();
    return done.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready;
  }));
  const Status s = done.get();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(a_node.primary);
  b->RunOnce();
  EXPECT_TRUE(b_node.primary);
  a->RunOnce();
  EXPECT_FALSE(a_node.primary) << "the old primary holds off and follows";
  ASSERT_TRUE(a_node.following);
  EXPECT_EQ(a_node.following->node, "b");
}

// The requester of a switchover waits on an io loop (Core::Switchover) and a real node's
// demotion waits for every io loop (ReplicaNode::Demote): the requester must be answered before
// the demotion, or the two wait for each other for ever (found by hand on a cluster: the old
// primary hung, its HA loop and one io loop stuck, no connection accepted).
TEST_F(CoordinatorTest, ASwitchoverAnswersItsRequesterBeforeTheDemotionWaitsForTheLoops) {
  FakeNode a_node, b_node;
  auto a = Make("a", &a_node);
  auto b = Make("b", &b_node);
  a->RunOnce();
  b->RunOnce();
  a_node.end_lsn = a_node.durable_end = 20;
  a_node.standbys = {Connected("b", 20)};
  a->RunOnce();
  a->RunOnce();
  ASSERT_EQ(a_node.view.sync->standby, "b");
  std::promise<void> answered;
  std::shared_future<void> answered_future = answered.get_future().share();
  bool waited_in_vain = false;
  a_node.on_demote = [&] {
    waited_in_vain = answered_future.wait_for(std::chrono::seconds(5)) != std::future_status::ready;
  };
  auto done = std::async(std::launch::async, [&] {
    Status s = a->RequestSwitchover("");
    answered.set_value();
    return s;
  });
  ASSERT_TRUE(Eventually([&] {
    a->RunOnce();
    return done.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready;
  }));
  EXPECT_TRUE(done.get().ok());
  EXPECT_EQ(a_node.demotions, 1);
  EXPECT_FALSE(waited_in_vain) << "the demotion ran before the requester was answered";
}

// Regression: a round that could not reach etcd dropped the switchover it had taken, and the
// request (holding one of sundiald's io loops) waited for an answer that never came.
TEST_F(CoordinatorTest, ASwitchoverAskedWhileEtcdDoesNotAnswerIsAnswered) {
  FakeNode a_node;
  auto a = Make("a", &a_node);
  a->RunOnce();
  ASSERT_TRUE(a_node.primary);
  etcd_.Pause();
  auto done = std::async(std::launch::async, [&] { return a->RequestSwitchover(""); });
  const bool answered = Eventually([&] {
    a->RunOnce();
    return done.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready;
  });
  etcd_.Resume();
  if (!answered) a->Stop();  // wakes the request, so the test ends
  ASSERT_TRUE(answered);
  EXPECT_EQ(done.get().code(), Code::kUnavailable);
}

// The asynchronous form (what sundiald's io loops use): it returns at once, `done` runs once; a
// second request while one waits is refused at once; Stop answers the one still waiting.
TEST_F(CoordinatorTest, ASwitchoverRequestReturnsAtOnceAndIsAnsweredExactlyOnce) {
  FakeNode a_node;
  auto a = Make("a", &a_node);
  a->RunOnce();
  ASSERT_TRUE(a_node.primary);
  std::mutex mu;
  std::vector<Status> answers;
  auto record = [&](Status s) {
    std::lock_guard lock(mu);
    answers.push_back(std::move(s));
  };
  a->RequestSwitchover("", record);
  a->RequestSwitchover("", record);
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(answers.size(), 1u) << "the first waits for a round; the second is refused";
    EXPECT_EQ(answers[0].code(), Code::kFailedPrecondition) << answers[0].ToString();
  }
  a->Stop();
  std::lock_guard lock(mu);
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].code(), Code::kUnavailable) << "stopping: " << answers[1].ToString();
}

TEST_F(CoordinatorTest, ASwitchoverWaitsForTheStandbyAndGivesUpWhenItDoesNotCatchUp) {
  FakeNode a_node, b_node;
  auto a = Make("a", &a_node);
  auto b = Make("b", &b_node);
  a->RunOnce();
  b->RunOnce();
  a_node.end_lsn = 30;
  a_node.durable_end = 20;
  a_node.standbys = {Connected("b", 20)};
  a->RunOnce();
  a->RunOnce();
  ASSERT_EQ(a_node.view.sync->standby, "b");
  auto done = std::async(std::launch::async, [&] { return a->RequestSwitchover("b"); });
  ASSERT_TRUE(Eventually([&] {
    a->RunOnce();
    return done.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready;
  }));
  const Status s = done.get();
  EXPECT_EQ(s.code(), Code::kUnavailable) << "b never acknowledged record 29";
  EXPECT_TRUE(a_node.primary) << "writes resume on the primary";
  EXPECT_GT(a_node.writable_until, SteadyClock::now());
  auto refused = std::async(std::launch::async, [&] { return a->RequestSwitchover("c"); });
  ASSERT_TRUE(Eventually([&] {
    a->RunOnce();
    return refused.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready;
  }));
  const Status why = refused.get();
  EXPECT_EQ(why.code(), Code::kFailedPrecondition);
  EXPECT_EQ(why.detail(), "switchover: c is not the synchronous standby (b)");
}

}  // namespace
}  // namespace sundial::replication
