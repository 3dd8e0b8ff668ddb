// Key concurrency (docs/semantics.md, "Flow control"): a simple queue with a flow_key runs at
// most key_concurrency messages per flow-key value; the others wait (blocked) in priority
// order; a completion, failure, cancel or lease expiry frees a slot; lowering N lets the
// running ones finish, raising it brings held keys back at once; replay and snapshots agree.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

QueueSettings Gated(uint32_t n) {
  QueueSettings s;
  s.flow_key = "tenant";
  s.key_concurrency = n;
  s.lease_ms = 100;
  s.max_attempts = 3;
  s.retry_backoff_ms = 0;
  return s;
}

class KeyConcurrencyTest : public EngineTest {
 protected:
  void SetUp() override { MakeQueue("g", Gated(2)); }
  std::string PutFor(std::string id, std::string tenant, int64_t priority = 0) {
    return Put("g", std::move(id), priority, {{"tenant", std::move(tenant)}});
  }
  void SetN(uint32_t n) {
    QueueSettingsUpdate u;
    u.key_concurrency = n;
    ASSERT_TRUE(engine().UpdateQueue("g", u).ok());
  }
  void ExpectReplayAndSnapshotAgree() {
    const uint64_t digest = engine().Digest();
    EXPECT_EQ(Replayed()->Digest(), digest);
    EXPECT_EQ(Exported()->Digest(), digest);
  }
};

TEST_F(KeyConcurrencyTest, SettingsAreValidated) {
  QueueSettings s = Gated(2);
  s.flow_key = "";
  EXPECT_EQ(engine().CreateQueue("bad1", s).status().code(), Code::kInvalidArgument);
  s = Gated(2000000);
  EXPECT_EQ(engine().CreateQueue("bad2", s).status().code(), Code::kInvalidArgument);
  s = ExclusiveSettings("tenant");
  s.key_concurrency = 2;
  EXPECT_EQ(engine().CreateQueue("bad3", s).status().code(), Code::kInvalidArgument);
  s.key_concurrency = 1;
  EXPECT_TRUE(engine().CreateQueue("x1", s).ok());
  QueueSettingsUpdate u;
  u.key_concurrency = 5;
  EXPECT_EQ(engine().UpdateQueue("x1", u).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(engine().CreateQueue("unlimited", Gated(0)).ok());
}

TEST_F(KeyConcurrencyTest, MissingFlowKeyIsInvalidArgument) {
  EXPECT_EQ(EnqueueOne("g", Item("a")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EnqueueOne("g", Item("b", 0, {{"other", "v"}})).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(Counts("g"), StateCounts{});
}

TEST_F(KeyConcurrencyTest, AtMostNRunningPerValueTheRestBlockedInPriorityOrder) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  PutFor("a3", "a", 2);
  PutFor("a4", "a", 3);
  PutFor("b1", "b", 4);
  EXPECT_EQ(TakeIds("g", 10), (std::vector<std::string>{"a1", "a2", "b1"}));
  StateCounts c = Counts("g");
  EXPECT_EQ(c[MessageState::kRunning], 3u);
  EXPECT_EQ(c[MessageState::kPending], 2u);
  EXPECT_EQ(c.blocked, 2u);
  EXPECT_TRUE(Take("g", 10).empty());
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyConcurrencyTest, EveryWayOutOfRunningFreesASlot) {
  for (int i = 0; i < 6; ++i) PutFor("a" + std::to_string(i), "a", i);
  std::vector<MessageRecord> got = Take("g", 10);
  ASSERT_EQ(got.size(), 2u);
  ASSERT_TRUE(CompleteOne("g", got[0].id, got[0].lease_token).ok());  // complete
  EXPECT_EQ(TakeIds("g", 10), (std::vector<std::string>{"a2"}));
  ASSERT_TRUE(FailOne("g", got[1].id, got[1].lease_token).ok());  // fail (retry: pending)
  EXPECT_EQ(TakeIds("g", 10), (std::vector<std::string>{"a1"}));
  ASSERT_TRUE(CancelOne("g", "a2").ok());  // cancel of a running message
  EXPECT_EQ(TakeIds("g", 10), (std::vector<std::string>{"a3"}));
  EXPECT_EQ(Counts("g").blocked, 2u);
  AdvanceTime(101);  // both leases expire: two slots
  EXPECT_EQ(Counts("g")[MessageState::kRunning], 0u);
  EXPECT_EQ(TakeIds("g", 10).size(), 2u);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyConcurrencyTest, FilterDequeuePassesHeldValuesBy) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  PutFor("a3", "a", 2);
  Put("g", "b1", 3, {{"tenant", "b"}, {"kind", "x"}});
  Put("g", "a4", 4, {{"tenant", "a"}, {"kind", "x"}});
  EXPECT_EQ(TakeIds("g", 2), (std::vector<std::string>{"a1", "a2"}));
  EXPECT_EQ(TakeIds("g", 5, {{"tenant", "a"}}), std::vector<std::string>{});
  EXPECT_EQ(TakeIds("g", 5, {{"kind", "x"}}), (std::vector<std::string>{"b1"}));
  EXPECT_EQ(Counts("g", {{"tenant", "a"}}).blocked, 2u);
}

TEST_F(KeyConcurrencyTest, ExplainSaysWhichValueIsAtItsLimit) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  PutFor("a3", "a", 2);
  std::vector<MessageRecord> got = Take("g", 3);
  ASSERT_EQ(got.size(), 2u);
  Result<Explanation> e = engine().Explain("g", "a3");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->reason, ExplainReason::kKeyConcurrency);
  EXPECT_EQ(e->exclusivity_value, "a");
  EXPECT_EQ(e->lease_token, got[0].lease_token);  // both end at once: the first found
  EXPECT_EQ(e->until, got[0].lease_expires_at);
  EXPECT_EQ(e->key_running, 2u);  // "key a 2/2 running"
  EXPECT_EQ(e->key_concurrency, 2u);
  Explanation f = engine().ExplainFilter("g", {{"tenant", "a"}}).value();
  EXPECT_EQ(f.reason, ExplainReason::kKeyConcurrency);
  EXPECT_EQ(f.id, "a3");
  EXPECT_EQ(f.key_running, 2u);
}

TEST_F(KeyConcurrencyTest, LoweringNLetsRunningOnesFinishAndHoldsTheKeyUntilBelowN) {
  for (int i = 0; i < 5; ++i) PutFor("a" + std::to_string(i), "a", i);
  std::vector<MessageRecord> got = Take("g", 10);
  ASSERT_EQ(got.size(), 2u);
  SetN(1);
  EXPECT_EQ(Counts("g")[MessageState::kRunning], 2u);
  EXPECT_EQ(Counts("g").blocked, 3u);
  const Explanation over = engine().Explain("g", "a2").value();  // "key a 2/1 running"
  EXPECT_EQ(over.key_running, 2u);
  EXPECT_EQ(over.key_concurrency, 1u);
  ASSERT_TRUE(CompleteOne("g", got[0].id, got[0].lease_token).ok());
  EXPECT_TRUE(Take("g", 10).empty());  // 1 running, N = 1: still held
  EXPECT_EQ(Counts("g").blocked, 3u);
  ExpectReplayAndSnapshotAgree();
  ASSERT_TRUE(CompleteOne("g", got[1].id, got[1].lease_token).ok());
  EXPECT_EQ(TakeIds("g", 10), (std::vector<std::string>{"a2"}));
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyConcurrencyTest, RaisingNOrZeroBringsHeldKeysBackAtOnce) {
  for (int i = 0; i < 6; ++i) PutFor("a" + std::to_string(i), "a", i);
  ASSERT_EQ(Take("g", 10).size(), 2u);
  EXPECT_EQ(Counts("g").blocked, 4u);
  SetN(3);  // its kQueueUpdated wakes long polls (server/long_poll.cc, MayWake)
  EXPECT_EQ(sink_.All().back().type, EffectType::kQueueUpdated);
  EXPECT_EQ(Counts("g").blocked, 0u);  // 2 running < 3: the key is ready
  EXPECT_EQ(TakeIds("g", 10), (std::vector<std::string>{"a2"}));
  EXPECT_EQ(Counts("g").blocked, 3u);
  SetN(0);  // no limit
  EXPECT_EQ(Counts("g").blocked, 0u);
  EXPECT_EQ(TakeIds("g", 10), (std::vector<std::string>{"a3", "a4", "a5"}));
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyConcurrencyTest, DigestOfAGatedQueueDiffersFromItsUngatedTwinAndSurvivesReload) {
  for (int i = 0; i < 20; ++i) PutFor("m" + std::to_string(i), "t" + std::to_string(i % 3), i);
  (void)Take("g", 4);
  ExpectReplayAndSnapshotAgree();
  MakeQueue("h", Gated(3));
  const uint64_t before = engine().Digest();
  SetN(1);
  EXPECT_NE(engine().Digest(), before);
  ExpectReplayAndSnapshotAgree();
}

}  // namespace
}  // namespace sundial::engine_test
