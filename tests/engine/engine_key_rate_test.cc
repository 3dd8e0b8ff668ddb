// Per-key token buckets (docs/semantics.md, "Flow control"): a gated queue with key_rate_per_s
// gives each flow-key value a bucket of key_burst tokens refilled at that rate; a dequeue takes
// one; a key out of tokens waits (blocked) until its next token, which Advance and the next
// dequeue refill; a failed or expired lease gets no token back; replay and snapshots rebuild
// the buckets, so a restart never grants a fresh burst.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

// 10 tokens per second (one per 100 ms), burst 3.
QueueSettings Rated(uint64_t rate_milli = 10'000, uint32_t burst = 3, uint32_t n = 0) {
  QueueSettings s;
  s.flow_key = "tenant";
  s.key_concurrency = n;
  s.key_rate_milli = rate_milli;
  s.key_burst = burst;
  s.lease_ms = 10'000;
  s.max_attempts = 5;
  s.retry_backoff_ms = 0;
  return s;
}

class KeyRateTest : public EngineTest {
 protected:
  void SetUp() override { MakeQueue("r", Rated()); }
  std::string PutFor(std::string id, std::string tenant, int64_t priority = 0) {
    return Put("r", std::move(id), priority, {{"tenant", std::move(tenant)}});
  }
  void PutMany(const std::string& tenant, int n) {
    for (int i = 0; i < n; ++i) PutFor(tenant + std::to_string(i), tenant, i);
  }
  void ExpectReplayAndSnapshotAgree() {
    const uint64_t digest = engine().Digest();
    EXPECT_EQ(Replayed()->Digest(), digest);
    EXPECT_EQ(Exported()->Digest(), digest);
  }
  size_t QueueReadyEffects(bool armed, size_t from = 0) {
    size_t n = 0;
    const std::vector<RecordedEffect> all = sink_.All();
    for (size_t i = from; i < all.size(); ++i) {
      const RecordedEffect& e = all[i];
      if (e.type == EffectType::kQueueReady && (e.due_at != 0) == armed) ++n;
    }
    return n;
  }
};

TEST_F(KeyRateTest, SettingsAreValidated) {
  QueueSettings s = Rated();
  s.flow_key = "";
  EXPECT_EQ(engine().CreateQueue("bad1", s).status().code(), Code::kInvalidArgument);
  s = Rated(kMaxRateMilli + 1);
  EXPECT_EQ(engine().CreateQueue("bad2", s).status().code(), Code::kInvalidArgument);
  s = Rated(1000, 0);
  EXPECT_EQ(engine().CreateQueue("bad3", s).status().code(), Code::kInvalidArgument);
  s = Rated(1000, kMaxBurst + 1);
  EXPECT_EQ(engine().CreateQueue("bad4", s).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(engine().CreateQueue("max", Rated(kMaxRateMilli, kMaxBurst)).ok());
  EXPECT_TRUE(engine().CreateQueue("min", Rated(1, 1)).ok());
  QueueSettings x = ExclusiveSettings("tenant");
  x.key_rate_milli = 500;
  EXPECT_TRUE(engine().CreateQueue("x", x).ok());
  QueueSettingsUpdate u;
  u.key_burst = 0;
  EXPECT_EQ(engine().UpdateQueue("r", u).status().code(), Code::kInvalidArgument);
}

TEST_F(KeyRateTest, BurstThenOneTokenPerIntervalPerKey) {
  PutMany("a", 6);
  PutMany("b", 2);
  // a: its burst of 3; b: both (it has tokens left); EDF across keys.
  EXPECT_EQ(TakeIds("r", 10), (std::vector<std::string>{"a0", "b0", "a1", "b1", "a2"}));
  EXPECT_EQ(Counts("r").blocked, 3u);  // a's held back by its bucket
  EXPECT_EQ(engine().NextDueTime(), Now() + 100);
  AdvanceClockOnly(99);
  EXPECT_TRUE(Take("r", 10).empty());
  AdvanceClockOnly(1);  // the dequeue refills lazily, without Advance
  EXPECT_EQ(TakeIds("r", 10), (std::vector<std::string>{"a3"}));
  AdvanceClockOnly(250);  // two more tokens (the bucket was empty at +100)
  EXPECT_EQ(TakeIds("r", 10), (std::vector<std::string>{"a4", "a5"}));
  EXPECT_EQ(Counts("r").blocked, 0u);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyRateTest, AnyWindowHoldsAtMostBurstPlusRateTimesItsLength) {
  PutMany("a", 40);
  std::vector<TimeMs> grants;
  for (int step = 0; step < 200; ++step) {
    grants.insert(grants.end(), Take("r", 5).size(), Now());
    AdvanceTime(7);
  }
  ASSERT_EQ(grants.size(), 16u);  // the burst of 3, then one per 100 ms until 1393 ms
  for (size_t i = 0; i < grants.size(); ++i) {
    for (size_t j = i; j < grants.size(); ++j) {
      EXPECT_LE(j - i + 1, 3 + static_cast<size_t>((grants[j] - grants[i]) / 100));
    }
  }
}

TEST_F(KeyRateTest, AFailedOrExpiredLeaseGetsNoTokenBack) {
  QueueSettingsUpdate u;
  u.key_burst = 1;
  ASSERT_TRUE(engine().UpdateQueue("r", u).ok());
  PutFor("a1", "a");
  MessageRecord m = TakeOne("r");
  ASSERT_TRUE(FailOne("r", m.id, m.lease_token, 0).ok());
  EXPECT_TRUE(Take("r").empty());  // pending again, but its key's token is spent
  AdvanceTime(100);
  m = TakeOne("r");
  EXPECT_EQ(m.id, "a1");
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyRateTest, AKeyThatGoesAndComesBackGetsNoFreshBurst) {
  PutMany("a", 3);
  for (const MessageRecord& m : Take("r", 3))
    ASSERT_TRUE(CompleteOne("r", m.id, m.lease_token).ok());
  // a has no message now, but its bucket is kept (cooling) until it is full again.
  PutFor("again", "a");
  EXPECT_TRUE(Take("r").empty());
  ExpectReplayAndSnapshotAgree();
  AdvanceTime(100);
  EXPECT_EQ(TakeIds("r"), (std::vector<std::string>{"again"}));
}

TEST_F(KeyRateTest, ReplayAfterSnapshotGrantsNoFreshBurst) {
  PutMany("a", 6);
  EXPECT_EQ(Take("r", 10).size(), 3u);
  std::unique_ptr<Engine> reloaded = Exported();
  std::unique_ptr<Engine> replayed = Replayed();
  for (Engine* e : {reloaded.get(), replayed.get()}) {
    DequeueRequest request;
    request.max = 10;
    EXPECT_TRUE(e->Dequeue("r", request).value().empty());
    EXPECT_EQ(e->NextDueTime(), Now() + 100);
  }
  AdvanceClockOnly(100);
  for (Engine* e : {reloaded.get(), replayed.get()}) {
    DequeueRequest request;
    request.max = 10;
    EXPECT_EQ(IdsOf(e->Dequeue("r", request).value()), (std::vector<std::string>{"a3"}));
  }
}

TEST_F(KeyRateTest, SnapshotRestatesCoolingKeysAndTheirDigest) {
  PutMany("a", 2);
  for (const MessageRecord& m : Take("r", 2))
    ASSERT_TRUE(CompleteOne("r", m.id, m.lease_token).ok());
  // No message of a is pending or running: its key cools with one token left.
  ExpectReplayAndSnapshotAgree();
  std::unique_ptr<Engine> reloaded = Exported();
  EnqueueItem item = Item("a9", 0, {{"tenant", "a"}});
  std::vector<EnqueueItem> items;
  items.push_back(item);
  ASSERT_TRUE(reloaded->Enqueue("r", std::move(items))[0].ok());
  DequeueRequest request;
  request.max = 10;
  // One token left of the burst of 3.
  EXPECT_EQ(reloaded->Dequeue("r", request).value().size(), 1u);
}

TEST_F(KeyRateTest, AdvanceRefillsAndWakesLongPollsAndADequeueArmsTheTimer) {
  PutMany("a", 4);
  const size_t from = sink_.size();
  EXPECT_EQ(Take("r", 10).size(), 3u);
  EXPECT_EQ(QueueReadyEffects(/*armed=*/true, from), 1u);  // the timer thread learns the refill
  AdvanceTime(100);
  EXPECT_EQ(QueueReadyEffects(/*armed=*/false, from), 1u);  // long polls try again
  EXPECT_EQ(Counts("r").blocked, 0u);
  EXPECT_EQ(TakeIds("r"), (std::vector<std::string>{"a3"}));
  for (const RecordedEffect& e : sink_.All()) {
    if (e.type == EffectType::kQueueReady) {
      EXPECT_TRUE(e.derived);
    }
  }
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyRateTest, ARateChangeAppliesAtOnceWithoutABurst) {
  PutMany("a", 8);
  EXPECT_EQ(Take("r", 10).size(), 3u);
  QueueSettingsUpdate u;
  // 1/s: the bucket keeps its debt (tat − t = 300 ms, 0.3 of a token now): 2 tokens of 3, not
  // a fresh burst.
  u.key_rate_milli = 1'000;
  ASSERT_TRUE(engine().UpdateQueue("r", u).ok());
  AdvanceTime(100);
  EXPECT_EQ(Take("r", 10).size(), 2u);
  EXPECT_TRUE(Take("r", 10).empty());
  ExpectReplayAndSnapshotAgree();
  u.key_rate_milli = 0;  // no key rate: every held-back key comes back at once
  ASSERT_TRUE(engine().UpdateQueue("r", u).ok());
  EXPECT_EQ(Take("r", 10).size(), 3u);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyRateTest, ConcurrencyAndRateTogether) {
  MakeQueue("both", Rated(10'000, 3, 1));
  for (int i = 0; i < 4; ++i) Put("both", "m" + std::to_string(i), i, {{"tenant", "a"}});
  MessageRecord m = TakeOne("both");
  EXPECT_TRUE(Take("both").empty());  // held (N = 1)
  ASSERT_TRUE(CompleteOne("both", m.id, m.lease_token).ok());
  m = TakeOne("both");
  ASSERT_TRUE(CompleteOne("both", m.id, m.lease_token).ok());
  m = TakeOne("both");
  ASSERT_TRUE(CompleteOne("both", m.id, m.lease_token).ok());
  EXPECT_TRUE(Take("both").empty());  // free, but out of tokens
  EXPECT_EQ(Counts("both").blocked, 1u);
  AdvanceTime(100);
  EXPECT_EQ(TakeIds("both"), (std::vector<std::string>{"m3"}));
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyRateTest, FilterDequeuePassesThrottledKeysBy) {
  for (int i = 0; i < 4; ++i) {
    Put("r", "a" + std::to_string(i), i, {{"tenant", "a"}, {"kind", "x"}});
  }
  Put("r", "b0", 9, {{"tenant", "b"}, {"kind", "x"}});
  EXPECT_EQ(IdsOf(Take("r", 10, {{"kind", "x"}})),
            (std::vector<std::string>{"a0", "a1", "a2", "b0"}));
  EXPECT_TRUE(Take("r", 10, {{"kind", "x"}}).empty());
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyRateTest, DigestOfAQueueWithoutRatesIsUnchanged) {
  Reset(DefaultOptions());
  QueueSettings plain = Rated(0, 1);
  MakeQueue("p", plain);
  Put("p", "a0", 0, {{"tenant", "a"}});
  (void)Take("p");
  const uint64_t without = engine().Digest();
  Reset(DefaultOptions());
  MakeQueue("p", Rated(10'000, 3));
  Put("p", "a0", 0, {{"tenant", "a"}});
  (void)Take("p");
  EXPECT_NE(engine().Digest(), without);
  ExpectReplayAndSnapshotAgree();
}

}  // namespace
}  // namespace sundial::engine_test

namespace sundial::engine_test {
namespace {

// The queue-wide bucket (rate_per_s, burst) on any queue, checked before the key's.
class QueueRateTest : public EngineTest {
 protected:
  void SetUp() override {
    QueueSettings s;
    s.rate_milli = 20'000;  // one token per 50 ms
    s.burst = 2;
    MakeQueue("q", s);
  }
  void ExpectReplayAndSnapshotAgree() {
    const uint64_t digest = engine().Digest();
    EXPECT_EQ(Replayed()->Digest(), digest);
    EXPECT_EQ(Exported()->Digest(), digest);
  }
};

TEST_F(QueueRateTest, SettingsAreValidated) {
  QueueSettings s;
  s.rate_milli = kMaxRateMilli + 1;
  EXPECT_EQ(engine().CreateQueue("bad1", s).status().code(), Code::kInvalidArgument);
  s.rate_milli = 1;
  s.burst = 0;
  EXPECT_EQ(engine().CreateQueue("bad2", s).status().code(), Code::kInvalidArgument);
  s.burst = kMaxBurst + 1;
  EXPECT_EQ(engine().CreateQueue("bad3", s).status().code(), Code::kInvalidArgument);
  s.burst = kMaxBurst;
  EXPECT_TRUE(engine().CreateQueue("ok", s).ok());
}

TEST_F(QueueRateTest, BurstThenOneTokenPerIntervalAndTheTimerWakes) {
  for (int i = 0; i < 5; ++i) Put("q", "m" + std::to_string(i), i);
  EXPECT_EQ(Take("q", 10).size(), 2u);
  EXPECT_EQ(engine().NextDueTime(), Now() + 50);
  AdvanceClockOnly(49);
  EXPECT_TRUE(Take("q", 10).empty());
  AdvanceTime(1);
  EXPECT_EQ(TakeIds("q", 10), (std::vector<std::string>{"m2"}));
  EXPECT_EQ(engine().NextDueTime(), Now() + 50);
  ExpectReplayAndSnapshotAgree();
  std::unique_ptr<Engine> reloaded = Exported();
  DequeueRequest request;
  request.max = 10;
  EXPECT_TRUE(reloaded->Dequeue("q", request)->empty());  // no fresh burst after a reload
  AdvanceTime(100);
  EXPECT_EQ(TakeIds("q", 10), (std::vector<std::string>{"m3", "m4"}));
}

TEST_F(QueueRateTest, TheQueueBucketIsCheckedBeforeTheKeysAndTakesNoTokenForNothing) {
  QueueSettings s = Rated(10'000, 3);
  s.rate_milli = 20'000;
  s.burst = 2;
  MakeQueue("both", s);
  for (int i = 0; i < 3; ++i) Put("both", "a" + std::to_string(i), i, {{"tenant", "a"}});
  EXPECT_EQ(Take("both", 10).size(), 2u);  // the queue's burst of 2, though a has 3
  AdvanceTime(50);
  EXPECT_EQ(TakeIds("both", 10), (std::vector<std::string>{"a2"}));  // a's third token
  EXPECT_TRUE(Take("both", 10).empty());
  AdvanceTime(1'000);
  EXPECT_TRUE(Take("both", 10).empty());  // nothing to take: no token spent
  for (int i = 3; i < 6; ++i) Put("both", "a" + std::to_string(i), i, {{"tenant", "a"}});
  EXPECT_EQ(Take("both", 10).size(), 2u);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(QueueRateTest, DigestOfAQueueWithoutARateIsUnchangedAndARateChangesIt) {
  Reset(DefaultOptions());
  MakeQueue("p");
  Put("p", "m");
  const uint64_t without = engine().Digest();
  QueueSettingsUpdate u;
  u.rate_milli = 5'000;
  ASSERT_TRUE(engine().UpdateQueue("p", u).ok());
  EXPECT_NE(engine().Digest(), without);
  u.rate_milli = 0;
  ASSERT_TRUE(engine().UpdateQueue("p", u).ok());
  EXPECT_EQ(engine().Digest(), without);
}

}  // namespace
}  // namespace sundial::engine_test

namespace sundial::engine_test {
namespace {

// Regression (found by the model test): a key out of tokens whose messages all left (cooling)
// lost its throttled state, so a message that came back before its token was counted
// dequeueable (blocked 0, explain `dequeueable`) though no dequeue would return it, and a
// recovered engine (which throttles cooling keys in EndBulk) said otherwise.
TEST_F(KeyRateTest, AKeyThatComesBackBeforeItsTokenIsStillThrottled) {
  MakeQueue("slow", Rated(250, 1));  // one token per 4 s
  Put("slow", "first", 0, {{"tenant", "a"}});
  const std::vector<MessageRecord> leased = Take("slow");
  ASSERT_EQ(leased.size(), 1u);
  ASSERT_TRUE(CompleteOne("slow", leased[0].id, leased[0].lease_token).ok());
  AdvanceTime(10);
  Put("slow", "again", 0, {{"tenant", "a"}});
  Result<QueueInfo> info = engine().GetQueue("slow");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->counts.blocked, 1u);
  Result<Explanation> x = engine().Explain("slow", "again");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->reason, ExplainReason::kKeyRate);
  EXPECT_EQ(x->until, Now() + 3990);
  EXPECT_TRUE(Take("slow").empty());
  ExpectReplayAndSnapshotAgree();
  AdvanceTime(3990);
  EXPECT_EQ(TakeIds("slow"), (std::vector<std::string>{"again"}));
}

// Regression (found by the model's replay run): an extend of a key whose bucket is full again
// by the last stamped change keeps the key live, while its replay detaches and attaches the
// message, which released the key and acquired it again without its (full) tat: the digests
// differed. A full bucket is now the same as none for the digest and the snapshot.
TEST_F(KeyRateTest, AnExtendOfAKeyWithAFullBucketReplaysToTheSameDigest) {
  PutFor("a0", "a");
  const std::vector<MessageRecord> leased = Take("r");
  ASSERT_EQ(leased.size(), 1u);
  AdvanceTime(300);
  PutFor("b0", "b");  // a stamped change: a's bucket is full by it
  ASSERT_TRUE(engine().Extend("r", "a0", leased[0].lease_token, 5'000).ok());
  ExpectReplayAndSnapshotAgree();
}

TEST_F(KeyRateTest, ExplainSaysWhenTheKeysNextTokenComes) {
  PutMany("a", 4);
  EXPECT_EQ(Take("r", 10).size(), 3u);
  Result<Explanation> x = engine().Explain("r", "a3");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->reason, ExplainReason::kKeyRate);
  EXPECT_EQ(x->exclusivity_value, "a");
  EXPECT_EQ(x->until, Now() + 100);
  EXPECT_EQ(ExplainReasonName(ExplainReason::kKeyRate), "key_rate");
}

}  // namespace
}  // namespace sundial::engine_test
