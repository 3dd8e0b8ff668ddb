// Per-key limits in the log (docs/wal-format.md, "Per-key limits"): kKeyLimitsSet (51) carries
// a value and only the fields it overrides; malformed forms are refused; overrides recover from
// the log, from a snapshot (which restates each before the queue's messages), and from a
// snapshot followed by the log, to the same digest and the same classification.
#include <gtest/gtest.h>

#include <string>

#include "tests/wal/recovery_test_util.h"
#include "tests/wal/wal_test_util.h"
#include "wal/checkpointer.h"
#include "wal/effect_codec.h"

namespace sundial::wal::test {
namespace {

const std::string kDir = "data";

Effect LimitsEffect(const KeyLimits& limits) {
  Effect e;
  e.type = EffectType::kKeyLimitsSet;
  e.time = 1234;
  e.queue = "q";
  e.id = "acme";
  e.key_limits = limits;
  return e;
}

TEST(KeyLimitsCodec, OnlyTheOverriddenFieldsAreWrittenAndEachFormRoundTrips) {
  KeyLimits l;
  l.set = KeyLimits::kConcurrency | KeyLimits::kWeight;
  l.concurrency = 3;
  l.weight = 5;
  const std::string two = Encode(LimitsEffect(l));
  const std::string none = Encode(LimitsEffect(KeyLimits{}));
  // set:u8, then concurrency:u32le and weight:u32le.
  ASSERT_EQ(two.substr(0, none.size() - 1), none.substr(0, none.size() - 1));
  EXPECT_EQ(two.substr(none.size() - 1), std::string("\x09\x03\0\0\0\x05\0\0\0", 9));
  DecodedEffect d;
  ASSERT_TRUE(DecodeEffect(two, &d).ok());
  EXPECT_EQ(d.effect().type, EffectType::kKeyLimitsSet);
  EXPECT_EQ(d.effect().id, "acme");
  EXPECT_EQ(d.effect().key_limits, l);
  KeyLimits all;
  all.set = KeyLimits::kConcurrency | KeyLimits::kRate | KeyLimits::kBurst | KeyLimits::kWeight;
  all.concurrency = 0;
  all.rate_milli = 2'500;
  all.burst = 9;
  all.weight = 1000;
  ASSERT_TRUE(DecodeEffect(Encode(LimitsEffect(all)), &d).ok());
  EXPECT_EQ(d.effect().key_limits, all);
  ASSERT_TRUE(DecodeEffect(none, &d).ok());
  EXPECT_TRUE(d.effect().key_limits.empty());
  // Unknown field bits, a truncated field, trailing bytes, no queue: refused.
  std::string unknown = none;
  unknown.back() = '\x10';
  EXPECT_FALSE(DecodeEffect(unknown, &d).ok());
  EXPECT_FALSE(DecodeEffect(two.substr(0, two.size() - 1), &d).ok());
  EXPECT_FALSE(DecodeEffect(two + "x", &d).ok());
  Effect no_queue = LimitsEffect(l);
  no_queue.queue = "";
  EXPECT_FALSE(DecodeEffect(Encode(no_queue), &d).ok());
}

// Overrides set before and after a checkpoint, one removed, one for a value with no message.
void Work(Engine& engine, ManualClock& clock, int phase) {
  if (phase == 0) {
    QueueSettings s;
    s.flow_key = "tenant";
    s.key_concurrency = 1;
    s.key_rate_milli = 10'000;
    ASSERT_TRUE(engine.CreateQueue("k", s).ok());
  }
  for (int i = 0; i < 4; ++i) {
    EnqueueItem item;
    item.id = "m" + std::to_string(phase) + "-" + std::to_string(i);
    item.metadata = {{"tenant", i % 2 == 0 ? "acme" : "bolt"}};
    ASSERT_TRUE(engine.Enqueue("k", {item})[0].ok());
  }
  KeyLimits l;
  l.set = KeyLimits::kConcurrency | KeyLimits::kBurst;
  l.concurrency = 2 + phase;
  l.burst = 4;
  ASSERT_TRUE(engine.SetKeyLimits("k", "acme", l).ok());
  KeyLimits idle;
  idle.set = KeyLimits::kWeight;
  idle.weight = 3 + phase;
  ASSERT_TRUE(engine.SetKeyLimits("k", "idle" + std::to_string(phase), idle).ok());
  if (phase == 1) {
    ASSERT_TRUE(engine.SetKeyLimits("k", "idle0", KeyLimits{}).ok());
  }
  DequeueRequest dequeue;
  dequeue.max = 10;
  ASSERT_TRUE(engine.Dequeue("k", dequeue).ok());
  clock.Advance(10);
}

TEST(KeyLimitsRecovery, OverridesComeBackFromTheLogAndSnapshots) {
  auto fs = NewMemoryFileSystem();
  uint64_t digest;
  WorkAroundACheckpoint(fs.get(), kDir, Work,
                        [&](Engine& engine, ManualClock&) { digest = engine.Digest(); });
  ASSERT_FALSE(HasFatalFailure());
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs.get(), kDir, &report), digest);
  EXPECT_FALSE(report.snapshot.empty());
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs.get(), kDir).ok());
  EXPECT_EQ(e.engine->Digest(), digest);
  const Result<KeyInfo> acme = e.engine->GetKeyLimits("k", "acme");
  ASSERT_TRUE(acme.ok());
  EXPECT_EQ(acme->concurrency, 3u);
  EXPECT_EQ(acme->burst, 4u);
  EXPECT_EQ(acme->rate_milli, 10'000u) << "not overridden: the queue's";
  EXPECT_TRUE(e.engine->GetKeyLimits("k", "idle0")->overrides.empty()) << "removed after it";
  EXPECT_EQ(e.engine->GetKeyLimits("k", "idle1")->weight, 4u);
}

}  // namespace
}  // namespace sundial::wal::test
