// Token buckets in the log (docs/wal-format.md, "Token buckets"): key_rate_milli and key_burst
// travel in the settings as tag 28 after the flags (and history_max), only when not the default;
// a snapshot restates the buckets (kKeyStateRestated, 49); a rated queue recovers to the same
// digest from the log, from a snapshot, and from a snapshot followed by the log, and the
// recovered engine grants no fresh burst.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/wal/recovery_test_util.h"
#include "tests/wal/wal_test_util.h"
#include "wal/checkpointer.h"
#include "wal/effect_codec.h"
#include "wal/log_format.h"

namespace sundial::wal::test {
namespace {

const std::string kDir = "data";

std::string EncodedSettings(const QueueSettings& settings) {
  Effect created;
  created.type = EffectType::kQueueCreated;
  created.queue = "q";
  created.settings = &settings;
  return Encode(created);
}

TEST(KeyRateCodec, KeyRateIsATagAfterTheFlagsOnlyWhenNotDefault) {
  QueueSettings settings;
  settings.flow_key = "tenant";
  const std::string plain = EncodedSettings(settings);
  settings.key_rate_milli = 2'500;
  settings.key_burst = 7;
  const std::string rated = EncodedSettings(settings);
  ASSERT_EQ(rated.substr(0, plain.size()), plain);
  EXPECT_EQ(rated.substr(plain.size()), std::string("\x1c\xc4\x09\0\0\0\0\0\0\x07\0\0\0", 13));
  DecodedEffect d;
  ASSERT_TRUE(DecodeEffect(rated, &d).ok());
  EXPECT_EQ(*d.effect().settings, settings);
  QueueSettings queue_rated = settings;
  queue_rated.rate_milli = 1;
  queue_rated.burst = 2;
  const std::string with_queue = EncodedSettings(queue_rated);
  EXPECT_EQ(with_queue.substr(rated.size()), std::string("\x1d\x01\0\0\0\0\0\0\0\x02\0\0\0", 13));
  ASSERT_TRUE(DecodeEffect(with_queue, &d).ok());
  EXPECT_EQ(*d.effect().settings, queue_rated);
  EXPECT_FALSE(DecodeEffect(plain + std::string("\x1d\0\0\0\0\0\0\0\0\x01\0\0\0", 13), &d).ok());
  settings.history_max = 0;  // tag 17 before tag 28
  const std::string both = EncodedSettings(settings);
  ASSERT_TRUE(DecodeEffect(both, &d).ok());
  EXPECT_EQ(*d.effect().settings, settings);
  // Defaults restated, out of order, repeated, truncated: refused.
  EXPECT_FALSE(DecodeEffect(plain + std::string("\x1c\0\0\0\0\0\0\0\0\x01\0\0\0", 13), &d).ok());
  EXPECT_FALSE(DecodeEffect(rated + std::string("\x11\0\0\0\0", 5), &d).ok());
  EXPECT_FALSE(DecodeEffect(rated + rated.substr(plain.size()), &d).ok());
  EXPECT_FALSE(DecodeEffect(rated.substr(0, rated.size() - 1), &d).ok());
}

TEST(KeyRateCodec, KeyStateRestatedRoundTrips) {
  Effect key;
  key.type = EffectType::kKeyStateRestated;
  key.queue = "q";
  key.time = 1'700'000'000'000;
  key.id = "acme";
  key.tat_us = 1'700'000'000'123'456;
  DecodedEffect d;
  ASSERT_TRUE(DecodeEffect(Encode(key), &d).ok());
  EXPECT_EQ(d.effect().type, EffectType::kKeyStateRestated);
  EXPECT_EQ(d.effect().id, "acme");
  EXPECT_EQ(d.effect().tat_us, key.tat_us);
  EXPECT_FALSE(d.effect().gate_record);
  // The empty value is a flow-key value like any other: its record is not the queue's.
  Effect empty_value = key;
  empty_value.id = "";
  ASSERT_TRUE(DecodeEffect(Encode(empty_value), &d).ok());
  EXPECT_EQ(d.effect().id, "");
  EXPECT_FALSE(d.effect().gate_record);
  EXPECT_EQ(d.effect().tat_us, key.tat_us);
  Effect gate = key;
  gate.id = "";
  gate.gate_record = true;
  gate.tat_us = 0;
  ASSERT_TRUE(DecodeEffect(Encode(gate), &d).ok());
  EXPECT_EQ(d.effect().id, "");
  EXPECT_TRUE(d.effect().gate_record);
  EXPECT_EQ(d.effect().time, gate.time);
  Effect named_gate = gate;
  named_gate.id = "acme";  // the queue's record names no value
  EXPECT_FALSE(DecodeEffect(Encode(named_gate), &d).ok());
  std::string bad = Encode(gate);
  bad[bad.size() - 1] ^= 1;  // collected_at differs from the time
  EXPECT_FALSE(DecodeEffect(bad, &d).ok());
  key.tat_us = -1;
  EXPECT_FALSE(DecodeEffect(Encode(key), &d).ok());
}

// A rated queue: bursts taken, a failure (no refund), a completed key that cools.
void Work(Engine& engine, ManualClock& clock, int round) {
  const std::string n = std::to_string(round);
  QueueSettings s;
  s.flow_key = "tenant";
  s.key_rate_milli = 10'000;  // one token per 100 ms
  s.key_burst = 3;
  s.lease_ms = 1'000;
  const std::string q = "rated" + n;
  ASSERT_TRUE(engine.CreateQueue(q, s).ok());
  for (int i = 0; i < 15; ++i) {
    EnqueueItem item;
    item.id = "m" + n + "-" + std::to_string(i);
    item.priority = i;
    item.metadata = {{"tenant", "t" + std::to_string(i % 3)}};
    ASSERT_TRUE(engine.Enqueue(q, {item})[0].ok());
  }
  DequeueRequest dequeue;
  dequeue.max = 20;
  auto leased = engine.Dequeue(q, dequeue);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->size(), 9u);  // the burst of 3 per tenant
  ASSERT_TRUE(engine.Complete(q, {{(*leased)[0].id, (*leased)[0].lease_token}})[0].ok());
  clock.Advance(150);
  engine.Advance(clock.NowMs());
  auto again = engine.Dequeue(q, dequeue);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 3u);  // one token each
}

TEST(KeyRateRecovery, ARatedQueueComesBackWithItsBucketsFromTheLogAndSnapshots) {
  auto fs = NewMemoryFileSystem();
  uint64_t digest;
  TimeMs now;
  WorkAroundACheckpoint(fs.get(), kDir, Work, [&](Engine& engine, ManualClock& clock) {
    digest = engine.Digest();
    now = clock.NowMs();
  });
  ASSERT_FALSE(HasFatalFailure());
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs.get(), kDir, &report), digest);
  EXPECT_FALSE(report.snapshot.empty());
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs.get(), kDir).ok());
  EXPECT_EQ(e.engine->Digest(), digest);
  e.clock.Set(now);
  DequeueRequest dequeue;
  dequeue.max = 20;
  // No fresh burst after the restart: rated1's tenants are out of tokens until 50 ms from now,
  // then one each; rated0's took their last token 150 ms ago (one each left for its last ones).
  EXPECT_TRUE(e.engine->Dequeue("rated1", dequeue)->empty());
  EXPECT_EQ(e.engine->Dequeue("rated0", dequeue)->size(), 3u);
  e.clock.Advance(50);
  EXPECT_EQ(e.engine->Dequeue("rated1", dequeue)->size(), 3u);
}

// A snapshot restates the buckets; a segment never does (it logs the leases): an effect 49 in a
// log segment is damage at its offset, and recovery refuses the directory.
TEST(KeyRateRecovery, AKeyStateInALogSegmentIsDamage) {
  auto fs = NewMemoryFileSystem();
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs.get(), kDir).ok());
    Work(*e.engine, e.clock, 0);
    // The export's key states, encoded, then logged as if they were effects.
    struct KeySink final : EffectSink {
      void OnEffect(const Effect& effect) override {
        if (effect.type == EffectType::kKeyStateRestated) {
          EncodeEffect(effect, &entries.emplace_back());
        }
      }
      std::vector<std::string> entries;
    } exported;
    e.engine->ExportState(&exported);
    ASSERT_FALSE(exported.entries.empty());
    DecodedEffect key;
    ASSERT_TRUE(DecodeEffect(exported.entries[0], &key).ok());
    e.log->OnEffect(key.effect());
    ASSERT_TRUE(e.Sync().ok());
  }
  ManualClock clock(kStartTime);
  Recovered recovered;
  EXPECT_FALSE(Recover(
                   fs.get(), kDir,
                   [&] { return std::make_unique<Engine>(TestEngineOptions(), &clock, nullptr); },
                   {}, &recovered)
                   .ok());
  ASSERT_TRUE(recovered.report.damage);
  EXPECT_EQ(recovered.report.damage->kind, DamageKind::kCorruption);
  EXPECT_EQ(recovered.report.damage->reason, "key state in a log segment");
}

}  // namespace
}  // namespace sundial::wal::test
