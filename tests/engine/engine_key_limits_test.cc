// Per-key limits (docs/semantics.md, "Per-key limits"): set_key_limits overrides one flow-key
// value's concurrency, rate and burst (and stores its weight); the value is classified again at
// once; removing the override falls back to the queue's settings; get_key_limits and list_keys
// describe values; overrides are logged, replayed, snapshotted and hashed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

KeyLimits Concurrency(uint32_t n) {
  KeyLimits l;
  l.set = KeyLimits::kConcurrency;
  l.concurrency = n;
  return l;
}

KeyLimits Rate(uint64_t rate_milli, uint32_t burst) {
  KeyLimits l;
  l.set = KeyLimits::kRate | KeyLimits::kBurst;
  l.rate_milli = rate_milli;
  l.burst = burst;
  return l;
}

class KeyLimitsTest : public EngineTest {
 protected:
  void SetUp() override {
    QueueSettings s;
    s.flow_key = "tenant";
    s.key_concurrency = 1;
    s.lease_ms = 10'000;
    MakeQueue("k", s);
  }
  void PutMany(const std::string& tenant, int n) {
    for (int i = 0; i < n; ++i) Put("k", tenant + std::to_string(i), i, {{"tenant", tenant}});
  }
  KeyInfo Set(std::string_view value, const KeyLimits& l) {
    Result<KeyInfo> r = engine().SetKeyLimits("k", value, l);
    EXPECT_TRUE(r.ok()) << r.status().detail();
    return r.ok() ? *r : KeyInfo{};
  }
  void ExpectReplayAndSnapshotAgree() {
    const uint64_t digest = engine().Digest();
    EXPECT_EQ(Replayed()->Digest(), digest);
    EXPECT_EQ(Exported()->Digest(), digest);
  }
};

TEST_F(KeyLimitsTest, AnOverrideRaisesOneValuesConcurrencyAtOnceAndLoweringItLetsRunningFinish) {
  PutMany("a", 5);
  PutMany("b", 3);
  EXPECT_EQ(TakeIds("k", 10), (std::vector<std::string>{"a0", "b0"}));
  EXPECT_EQ(Counts("k").blocked, 6u);
  const KeyInfo a = Set("a", Concurrency(3));
  EXPECT_EQ(a.concurrency, 3u);
  EXPECT_EQ(a.running, 1u);
  EXPECT_FALSE(a.held);
  EXPECT_EQ(Counts("k").blocked, 2u) << "a's pending messages are dequeueable again";
  EXPECT_EQ(TakeIds("k", 10), (std::vector<std::string>{"a1", "a2"}));
  EXPECT_TRUE(engine().GetKeyLimits("k", "a")->held);
  // Lowered below its running count: the three finish, none starts.
  Set("a", Concurrency(1));
  EXPECT_TRUE(TakeIds("k", 10).empty());
  EXPECT_EQ(Counts("k")[MessageState::kRunning], 4u);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyLimitsTest, RemovingTheOverrideFallsBackToTheQueue) {
  PutMany("a", 3);
  Set("a", Concurrency(0));  // no limit for a
  EXPECT_EQ(TakeIds("k", 10), (std::vector<std::string>{"a0", "a1", "a2"}));
  const KeyInfo a = Set("a", KeyLimits{});
  EXPECT_TRUE(a.overrides.empty());
  EXPECT_EQ(a.concurrency, 1u);
  EXPECT_TRUE(a.held);
  Put("k", "a9", 0, {{"tenant", "a"}});
  EXPECT_TRUE(TakeIds("k", 10).empty());
  EXPECT_EQ(Counts("k").blocked, 1u);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyLimitsTest, AnOverrideGivesOneValueItsOwnBucket) {
  QueueSettingsUpdate u;
  u.key_rate_milli = 10'000;  // the queue: 10 a second, burst 1
  u.key_concurrency = 0;
  ASSERT_TRUE(engine().UpdateQueue("k", u).ok());
  PutMany("a", 5);
  PutMany("b", 5);
  Set("a", Rate(0, 1));  // a: no rate
  KeyLimits b;
  b.set = KeyLimits::kBurst;  // b: the queue's rate with a burst of 3
  b.burst = 3;
  Set("b", b);
  EXPECT_EQ(TakeIds("k", 20),
            (std::vector<std::string>{"a0", "b0", "a1", "b1", "a2", "b2", "a3", "a4"}));
  const KeyInfo info = *engine().GetKeyLimits("k", "b");
  EXPECT_EQ(info.rate_milli, 10'000u);
  EXPECT_EQ(info.burst, 3u);
  EXPECT_EQ(info.next_token, Now() + 100);
  AdvanceTime(100);
  EXPECT_EQ(TakeIds("k", 20), (std::vector<std::string>{"b3"}));
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyLimitsTest, ChecksAndErrors) {
  EXPECT_EQ(engine().SetKeyLimits("k", "a", Concurrency(kMaxKeyConcurrency + 1)).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(engine().SetKeyLimits("k", "a", Rate(kMaxRateMilli + 1, 1)).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(engine().SetKeyLimits("k", "a", Rate(1000, 0)).status().code(), Code::kInvalidArgument);
  KeyLimits w;
  w.set = KeyLimits::kWeight;
  w.weight = kMaxKeyWeight + 1;
  EXPECT_EQ(engine().SetKeyLimits("k", "a", w).status().code(), Code::kInvalidArgument);
  w.weight = 0;
  EXPECT_EQ(engine().SetKeyLimits("k", "a", w).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(
      engine().SetKeyLimits("k", std::string(kMaxMetadataValueBytes + 1, 'v'), w).status().code(),
      Code::kInvalidArgument);
  EXPECT_EQ(engine().SetKeyLimits("nope", "a", Concurrency(1)).status().code(), Code::kNotFound);
  MakeQueue("plain");
  EXPECT_EQ(engine().SetKeyLimits("plain", "a", Concurrency(1)).status().code(),
            Code::kFailedPrecondition);
  EXPECT_EQ(engine().ListKeys("plain", KeyOrder::kPending, 10).status().code(),
            Code::kFailedPrecondition);
  EXPECT_EQ(engine().ListKeys("k", KeyOrder::kPending, 0).status().code(), Code::kInvalidArgument);
  MakeQueue("x", ExclusiveSettings("tenant"));
  EXPECT_EQ(engine().SetKeyLimits("x", "a", Concurrency(2)).status().code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(engine().SetKeyLimits("x", "a", Rate(1000, 2)).ok()) << "a rate on an exclusive one";
  // At most kMaxKeyOverrides values per queue; changing or removing one is always allowed.
  w.weight = 2;
  for (size_t i = 0; i < kMaxKeyOverrides; ++i) {
    ASSERT_TRUE(engine().SetKeyLimits("k", "v" + std::to_string(i), w).ok()) << i;
  }
  EXPECT_EQ(engine().SetKeyLimits("k", "one-more", w).status().code(), Code::kResourceExhausted);
  EXPECT_TRUE(engine().SetKeyLimits("k", "v0", Concurrency(2)).ok());
  EXPECT_TRUE(engine().SetKeyLimits("k", "v1", KeyLimits{}).ok());
  EXPECT_TRUE(engine().SetKeyLimits("k", "one-more", w).ok());
}

TEST_F(KeyLimitsTest, TheSameLimitsAgainChangeNothingAndLogNothing) {
  Set("a", Concurrency(4));
  const size_t effects = sink_.All().size();
  Set("a", Concurrency(4));
  EXPECT_EQ(sink_.All().size(), effects);
  Set("never-seen", KeyLimits{});  // no override to remove
  EXPECT_EQ(sink_.All().size(), effects);
}

TEST_F(KeyLimitsTest, ListKeysOrdersPresentAndOverriddenValues) {
  PutMany("a", 2);
  PutMany("b", 4);
  PutMany("c", 1);
  Set("idle", Concurrency(7));  // no message: listed with zero counts
  EXPECT_EQ(TakeIds("k", 10), (std::vector<std::string>{"a0", "b0", "c0"}));
  auto by = [&](KeyOrder order, uint32_t limit) {
    std::vector<std::string> values;
    const Result<std::vector<KeyInfo>> keys = engine().ListKeys("k", order, limit);
    EXPECT_TRUE(keys.ok());
    if (!keys.ok()) return values;
    for (const KeyInfo& k : *keys) values.push_back(k.value);
    return values;
  };
  EXPECT_EQ(by(KeyOrder::kPending, 10), (std::vector<std::string>{"b", "a", "c", "idle"}));
  EXPECT_EQ(by(KeyOrder::kPending, 2), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(by(KeyOrder::kRunning, 3), (std::vector<std::string>{"a", "b", "c"}));
  const KeyInfo idle = *engine().GetKeyLimits("k", "idle");
  EXPECT_EQ(idle.concurrency, 7u);
  EXPECT_EQ(idle.pending + idle.running, 0u);
  const KeyInfo none = *engine().GetKeyLimits("k", "nobody");
  EXPECT_TRUE(none.overrides.empty());
  EXPECT_EQ(none.concurrency, 1u);
}

TEST_F(KeyLimitsTest, OverridesAreHashedAndRestoredWithOrWithoutMessages) {
  const uint64_t before = engine().Digest();
  Set("idle", Concurrency(7));
  EXPECT_NE(engine().Digest(), before);
  PutMany("a", 3);
  Set("a", Concurrency(2));
  EXPECT_EQ(TakeIds("k", 10), (std::vector<std::string>{"a0", "a1"}));
  ExpectReplayAndSnapshotAgree();
  std::unique_ptr<Engine> loaded = Exported();
  EXPECT_EQ(loaded->GetKeyLimits("k", "idle")->concurrency, 7u);
  EXPECT_TRUE(loaded->GetKeyLimits("k", "a")->held);
  Set("idle", KeyLimits{});
  Set("a", KeyLimits{});
  EXPECT_NE(engine().Digest(), before) << "a's messages differ from the start";
  ExpectReplayAndSnapshotAgree();
}

}  // namespace
}  // namespace sundial::engine_test
