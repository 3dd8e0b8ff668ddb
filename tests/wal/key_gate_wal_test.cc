// Flow control in the log (docs/wal-format.md, "Flow settings"): a queue's flow_key and
// key_concurrency travel in the settings after the flags (bit 2), only when not the default
// (so every other settings record is byte-for-byte unchanged), the decoder refuses malformed
// forms, and a gated queue recovers to the same digest and the same held keys from the log,
// from a snapshot, and from a snapshot followed by the log.
#include <gtest/gtest.h>

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

TEST(KeyGateCodec, FlowSettingsFollowTheFlagsOnlyWhenNotDefault) {
  QueueSettings settings;
  const std::string plain = EncodedSettings(settings);
  settings.flow_key = "tenant";
  settings.key_concurrency = 3;
  const std::string gated = EncodedSettings(settings);
  // The flags byte (last of the plain settings) gains bit 2, then the block: str "tenant"
  // (u32le length), u32le 3.
  ASSERT_EQ(gated.substr(0, plain.size() - 1), plain.substr(0, plain.size() - 1));
  EXPECT_EQ(static_cast<uint8_t>(gated[plain.size() - 1]), static_cast<uint8_t>(plain.back()) | 4);
  const std::string block("\x06\x00\x00\x00tenant\x03\x00\x00\x00", 14);
  EXPECT_EQ(gated.substr(plain.size()), block);
  DecodedEffect d;
  ASSERT_TRUE(DecodeEffect(gated, &d).ok());
  EXPECT_EQ(*d.effect().settings, settings);
  ASSERT_TRUE(DecodeEffect(plain, &d).ok());
  EXPECT_EQ(d.effect().settings->flow_key, "");
  EXPECT_EQ(d.effect().settings->key_concurrency, 0u);

  // With history_max (tag 17) after the block.
  settings.history_max = 0;
  const std::string both = EncodedSettings(settings);
  ASSERT_TRUE(DecodeEffect(both, &d).ok());
  EXPECT_EQ(*d.effect().settings, settings);
  EXPECT_EQ(both.substr(plain.size(), block.size()), block);
}

TEST(KeyGateCodec, MalformedFlowSettingsAreRefused) {
  QueueSettings settings;
  std::string flagged = EncodedSettings(settings);
  flagged.back() = static_cast<char>(flagged.back() | 4);
  DecodedEffect d;
  // Restated at its defaults, truncated, missing.
  EXPECT_FALSE(DecodeEffect(flagged + std::string("\0\0\0\0\0\0\0\0", 8), &d).ok());
  EXPECT_FALSE(DecodeEffect(flagged + std::string("\x06\0\0\0ten", 7), &d).ok());
  EXPECT_FALSE(DecodeEffect(flagged + std::string("\x01\0\0\0t\x01\0\0", 8), &d).ok());
  EXPECT_FALSE(DecodeEffect(flagged, &d).ok());
  EXPECT_TRUE(DecodeEffect(flagged + std::string("\x01\0\0\0t\x01\0\0\0", 9), &d).ok());
}

// A gated queue with held keys, lowered N, completions and a lease expiry.
void Work(Engine& engine, ManualClock& clock, int round) {
  const std::string n = std::to_string(round);
  QueueSettings s;
  s.flow_key = "tenant";
  s.key_concurrency = 2;
  s.lease_ms = 1'000;
  const std::string q = "gated" + n;
  ASSERT_TRUE(engine.CreateQueue(q, s).ok());
  for (int i = 0; i < 12; ++i) {
    EnqueueItem item;
    item.id = "m" + n + "-" + std::to_string(i);
    item.priority = i;
    item.metadata = {{"tenant", "t" + std::to_string(i % 3)}};
    ASSERT_TRUE(engine.Enqueue(q, {item})[0].ok());
  }
  DequeueRequest dequeue;
  dequeue.max = 10;
  auto leased = engine.Dequeue(q, dequeue);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->size(), 6u);  // 2 per tenant
  ASSERT_TRUE(engine.Complete(q, {{(*leased)[0].id, (*leased)[0].lease_token}})[0].ok());
  QueueSettingsUpdate lower;
  lower.key_concurrency = 1;
  ASSERT_TRUE(engine.UpdateQueue(q, lower).ok());
  clock.Advance(2'000);
  engine.Advance(clock.NowMs());  // the other leases expire
  auto again = engine.Dequeue(q, dequeue);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 3u);  // N = 1: one per tenant
}

TEST(KeyGateRecovery, AGatedQueueComesBackFromTheLogAndFromSnapshots) {
  auto fs = NewMemoryFileSystem();
  uint64_t digest;
  StateCounts counts;
  WorkAroundACheckpoint(fs.get(), kDir, Work, [&](Engine& engine, ManualClock&) {
    digest = engine.Digest();
    counts = *engine.Count("gated1", {});
  });
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_GT(counts.blocked, 0u);
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs.get(), kDir, &report), digest);
  EXPECT_FALSE(report.snapshot.empty());
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs.get(), kDir).ok());
  EXPECT_EQ(e.engine->Digest(), digest);
  EXPECT_EQ(*e.engine->Count("gated1", {}), counts);
  Result<QueueInfo> info = e.engine->GetQueue("gated0");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->settings.flow_key, "tenant");
  EXPECT_EQ(info->settings.key_concurrency, 1u);
  DequeueRequest dequeue;
  dequeue.max = 10;
  EXPECT_TRUE(e.engine->Dequeue("gated1", dequeue)->empty());  // every tenant is held
}

}  // namespace
}  // namespace sundial::wal::test
