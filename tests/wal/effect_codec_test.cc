// EncodeEffect / DecodeEffect: every EffectType round-trips, an engine's effects replayed from
// their encodings rebuild the same state, and malformed bytes are rejected without crashing or
// allocating.
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/clock.h"
#include "engine/engine.h"
#include "tests/wal/wal_test_util.h"
#include "wal/effect_codec.h"

namespace sundial::wal::test {
namespace {

class EffectCodecRoundTrip : public ::testing::TestWithParam<size_t> {};

TEST_P(EffectCodecRoundTrip, EveryEffectTypeRoundTrips) {
  const Effect original = SampleEffects()[GetParam()];
  DecodedEffect decoded;
  ASSERT_TRUE(DecodeEffect(Encode(original), &decoded).ok());
  ExpectSameLoggedFields(original, decoded.effect());
  // Re-encoding the decoded effect gives the same bytes.
  EXPECT_EQ(Encode(decoded.effect()), Encode(original));
}

TEST_P(EffectCodecRoundTrip, EveryProperPrefixOfAnEncodingIsRejected) {
  const std::string bytes = Encode(SampleEffects()[GetParam()]);
  for (size_t n = 0; n < bytes.size(); ++n) {
    DecodedEffect decoded;
    EXPECT_FALSE(DecodeEffect(std::string_view(bytes).substr(0, n), &decoded).ok()) << n;
  }
}

TEST_P(EffectCodecRoundTrip, TrailingBytesAreRejected) {
  std::string bytes = Encode(SampleEffects()[GetParam()]);
  bytes.push_back('\0');
  DecodedEffect decoded;
  Status s = DecodeEffect(bytes, &decoded);
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_EQ(s.detail(), "wal: effect: trailing bytes");
}

TEST_P(EffectCodecRoundTrip, EverySingleByteFlipDecodesOrFailsWithoutCrashing) {
  const std::string bytes = Encode(SampleEffects()[GetParam()]);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    FlipByte(&damaged, i);
    DecodedEffect decoded;
    (void)DecodeEffect(damaged, &decoded);  // no crash, no sanitizer report
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, EffectCodecRoundTrip,
                         ::testing::Range<size_t>(0, SampleEffects().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(EffectTypeName(SampleEffects()[info.param].type))
                               .append("_")
                               .append(std::to_string(info.param));
                         });

// Format version 2's extensions (docs/wal-format.md, "Extensions").
TEST(EffectCodec, ResultExtensionRoundTripsOnCompletionAndExport) {
  for (const Effect& original : SampleEffectsV2()) {
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(Encode(original), &decoded).ok());
    ExpectSameLoggedFields(original, decoded.effect());
    EXPECT_EQ(decoded.effect().result, original.result);
    EXPECT_EQ(Encode(decoded.effect()), Encode(original));
  }
}

// Schedule effects (docs/wal-format.md, "Schedule effects").
TEST(EffectCodec, ScheduleEffectsRoundTripAndRejectPrefixesTrailingBytesAndBadEnums) {
  for (const Effect& original : SampleScheduleEffects()) {
    SCOPED_TRACE(EffectTypeName(original.type));
    const std::string bytes = Encode(original);
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(bytes, &decoded).ok());
    ExpectSameLoggedFields(original, decoded.effect());
    EXPECT_EQ(Encode(decoded.effect()), bytes);
    // The view decoder needs storage for an upsert's spec.
    Effect view;
    ScheduleSpec spec;
    ASSERT_TRUE(DecodeEffectView(bytes, &view, nullptr, nullptr, &spec).ok());
    if (original.type == EffectType::kScheduleUpserted) {
      EXPECT_FALSE(DecodeEffectView(bytes, &view, nullptr, nullptr, nullptr).ok());
    }
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(DecodeEffect(std::string_view(bytes).substr(0, n), &decoded).ok()) << n;
    }
    EXPECT_EQ(DecodeEffect(bytes + '\0', &decoded).detail(), "wal: effect: trailing bytes");
    for (size_t i = 0; i < bytes.size(); ++i) {
      std::string damaged = bytes;
      FlipByte(&damaged, i);
      (void)DecodeEffect(damaged, &decoded);  // no crash, no sanitizer report
    }
  }
}

TEST(EffectCodec, ScheduleEffectWithoutANameIsMalformed) {
  Effect e = SampleScheduleEffects()[2];
  e.id = {};
  DecodedEffect decoded;
  EXPECT_EQ(DecodeEffect(Encode(e), &decoded).detail(),
            "wal: effect: a schedule without queue or name");
}

TEST(EffectCodec, UnknownMisfirePolicyIsMalformed) {
  const Effect upsert = SampleScheduleEffects()[0];
  std::string bytes = Encode(upsert);
  // The misfire byte follows max_attempts (4 = 0x04 0 0 0) in the spec: find and damage it.
  const std::string tail = std::string("\x04\0\0\0\x01\x01", 6);
  const size_t at = bytes.find(tail);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 4] = 7;
  DecodedEffect decoded;
  EXPECT_EQ(DecodeEffect(bytes, &decoded).detail(), "wal: effect: unknown misfire policy");
}

TEST(EffectCodec, EpochRecordRoundTripsAndNamesNoQueue) {
  const Effect original = SampleEpochEffect();
  DecodedEffect decoded;
  ASSERT_TRUE(DecodeEffect(Encode(original), &decoded).ok());
  ExpectSameLoggedFields(original, decoded.effect());
  EXPECT_EQ(Encode(decoded.effect()), Encode(original));
  Effect named = original;
  named.queue = "jobs";
  EXPECT_EQ(DecodeEffect(Encode(named), &decoded).detail(), "wal: effect: an epoch names a queue");
  const std::string bytes = Encode(original);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeEffect(std::string_view(bytes).substr(0, n), &decoded).ok()) << n;
  }
}

TEST(EffectCodec, AnEffectWithoutExtensionsEncodesAsInVersionOne) {
  for (Effect e : SampleEffectsV2()) {
    const std::string with = Encode(e);
    e.result = {};
    const std::string without = Encode(e);
    // The extension is appended: tag, length, bytes.
    ASSERT_GT(with.size(), without.size());
    EXPECT_EQ(with.substr(0, without.size()), without);
    EXPECT_EQ(with.size() - without.size(), 1 + 4 + SampleEffectsV2()[0].result.size());
  }
}

// An extension cut anywhere is refused; cut exactly at its start, what is left is the effect
// without it (a record's checksum and length catch that cut: docs/wal-format.md).
TEST(EffectCodec, AProperPrefixInsideAnExtensionIsRejected) {
  for (const Effect& original : SampleEffectsV2()) {
    Effect bare = original;
    bare.result = {};
    const size_t body = Encode(bare).size();
    const std::string bytes = Encode(original);
    for (size_t n = body + 1; n < bytes.size(); ++n) {
      DecodedEffect decoded;
      EXPECT_FALSE(DecodeEffect(std::string_view(bytes).substr(0, n), &decoded).ok()) << n;
    }
  }
}

TEST(EffectCodec, RepeatedEmptyOrUnknownExtensionsAreRejected) {
  const Effect completed = SampleEffectsV2()[0];
  const std::string bytes = Encode(completed);
  Effect bare = completed;
  bare.result = {};
  const std::string body = Encode(bare);
  const std::string extension = bytes.substr(body.size());
  DecodedEffect decoded;
  EXPECT_EQ(DecodeEffect(bytes + extension, &decoded).detail(), "wal: effect: repeated extension");
  std::string empty = body;
  empty.push_back(1);
  PutFixed32(&empty, 0);
  EXPECT_EQ(DecodeEffect(empty, &decoded).detail(), "wal: effect: empty extension");
  std::string unknown = body;
  unknown.push_back(9);
  PutFixed32(&unknown, 1);
  unknown.push_back('x');
  EXPECT_EQ(DecodeEffect(unknown, &decoded).detail(), "wal: effect: trailing bytes");
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    FlipByte(&damaged, i);
    (void)DecodeEffect(damaged, &decoded);  // no crash, no sanitizer report
  }
}

// Format version 3: a waiting message's enqueue carries its dependencies and policy; a
// snapshot's restated dependent carries its graph entry. Both survive the round trip through
// the owning decoder and the view decoder.
TEST(EffectCodec, DependencyExtensionsRoundTrip) {
  for (const Effect& original : SampleEffectsV3()) {
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(Encode(original), &decoded).ok());
    ExpectSameLoggedFields(original, decoded.effect());
    const std::string bytes = Encode(original);
    Effect view;
    std::deque<std::vector<std::string>> storage;
    ASSERT_TRUE(DecodeEffectView(bytes, &view, nullptr, &storage).ok());
    ExpectSameLoggedFields(original, view);
    // Without storage for the keys, an effect that has some is refused, not half-decoded.
    EXPECT_FALSE(DecodeEffectView(bytes, &view, nullptr, nullptr).ok());
  }
}

// Only an effect with dependencies pays for them: every other one is byte-identical to its
// version-2 encoding.
TEST(EffectCodec, AnEffectWithoutDependenciesEncodesAsInVersionTwo) {
  const std::vector<std::string> none;
  for (const Effect& original : SampleEffectsV2()) {
    Effect e = original;
    e.depends_on = &none;  // an empty list is no extension
    EXPECT_EQ(Encode(e), Encode(original));
  }
  Effect waiting = SampleEffectsV3()[0];
  Effect bare = waiting;
  bare.depends_on = nullptr;
  size_t keys = 0;
  for (const std::string& key : *waiting.depends_on) keys += 4 + key.size();
  // tag, value length, policy, count, the keys.
  EXPECT_EQ(Encode(waiting).size(), Encode(bare).size() + 1 + 4 + 1 + 4 + keys);
}

TEST(EffectCodec, AProperPrefixInsideADependencyExtensionIsRejected) {
  for (const Effect& original : SampleEffectsV3()) {
    Effect bare = original;
    bare.depends_on = nullptr;
    bare.dependency_edges = {};
    const size_t body = Encode(bare).size();
    const std::string bytes = Encode(original);
    for (size_t n = body + 1; n < bytes.size(); ++n) {
      DecodedEffect decoded;
      EXPECT_FALSE(DecodeEffect(std::string_view(bytes).substr(0, n), &decoded).ok()) << n;
    }
    for (size_t i = body; i < bytes.size(); ++i) {
      std::string damaged = bytes;
      FlipByte(&damaged, i);
      DecodedEffect decoded;
      (void)DecodeEffect(damaged, &decoded);  // no crash, no sanitizer report
    }
  }
}

// A dependency extension where it does not belong, or with a bad policy, count or key, is
// damage.
TEST(EffectCodec, MalformedDependencyExtensionsAreRejected) {
  const Effect waiting = SampleEffectsV3()[0];
  Effect bare = waiting;
  bare.depends_on = nullptr;
  const std::string body = Encode(bare);
  auto with_value = [&](uint8_t tag, const std::string& value) {
    std::string bytes = body;
    bytes.push_back(static_cast<char>(tag));
    PutFixed32(&bytes, static_cast<uint32_t>(value.size()));
    return bytes + value;
  };
  auto value = [](uint8_t policy, uint32_t count, const std::vector<std::string>& keys) {
    std::string v(1, static_cast<char>(policy));
    PutFixed32(&v, count);
    for (const std::string& k : keys) {
      PutFixed32(&v, static_cast<uint32_t>(k.size()));
      v += k;
    }
    return v;
  };
  DecodedEffect decoded;
  EXPECT_TRUE(DecodeEffect(with_value(2, value(0, 1, {"q/a"})), &decoded).ok());
  EXPECT_EQ(DecodeEffect(with_value(2, value(3, 1, {"q/a"})), &decoded).detail(),
            "wal: effect: unknown dependency failure policy");
  EXPECT_EQ(DecodeEffect(with_value(2, value(0, 0, {})), &decoded).detail(),
            "wal: effect: bad dependency count");
  EXPECT_EQ(DecodeEffect(with_value(2, value(0, 1'000'000, {"q/a"})), &decoded).detail(),
            "wal: effect: bad dependency count");
  EXPECT_EQ(DecodeEffect(with_value(2, value(0, 1, {""})), &decoded).detail(),
            "wal: effect: empty dependency key");
  EXPECT_EQ(DecodeEffect(with_value(2, value(0, 1, {"q/a"}) + "x"), &decoded).detail(),
            "wal: effect: trailing bytes in dependencies");
  // A graph entry (tag 3) belongs to a kMessageChanged, a depends_on (tag 2) to an enqueue.
  EXPECT_EQ(DecodeEffect(with_value(3, value(0, 1, {"q/a"}) + "\x01"), &decoded).detail(),
            "wal: effect: trailing bytes");
  Effect entry = SampleEffectsV3()[1];
  Effect entry_bare = entry;
  entry_bare.depends_on = nullptr;
  entry_bare.dependency_edges = {};
  std::string changed = Encode(entry_bare);
  changed.push_back(2);
  const std::string v = value(0, 1, {"q/a"});
  PutFixed32(&changed, static_cast<uint32_t>(v.size()));
  EXPECT_EQ(DecodeEffect(changed + v, &decoded).detail(), "wal: effect: trailing bytes");
}

TEST(EffectCodec, SampleEffectsCoverEveryEffectType) {
  std::vector<Effect> samples = SampleEffects();
  ASSERT_EQ(samples.size(), 8u);
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(samples[i].type), i + 1);
  }
}

TEST(EffectCodec, EnqueuedPayloadAndMetadataAreKeptByteForByte) {
  Effect e = SampleEffects()[4];
  ASSERT_EQ(e.type, EffectType::kMessageEnqueued);
  std::string payload(256, '\0');
  for (int i = 0; i < 256; ++i) payload[i] = static_cast<char>(i);
  e.payload = payload;
  DecodedEffect decoded;
  ASSERT_TRUE(DecodeEffect(Encode(e), &decoded).ok());
  EXPECT_EQ(decoded.effect().payload, payload);
  EXPECT_EQ(decoded.effect().packed_metadata, e.packed_metadata);
}

TEST(EffectCodec, DecodingAgainReplacesEveryField) {
  DecodedEffect decoded;
  ASSERT_TRUE(DecodeEffect(Encode(SampleEffects()[4]), &decoded).ok());
  ASSERT_TRUE(DecodeEffect(Encode(SampleEffects()[2]), &decoded).ok());
  EXPECT_EQ(decoded.effect().type, EffectType::kQueueDeleted);
  EXPECT_TRUE(decoded.effect().id.empty());
  EXPECT_TRUE(decoded.effect().payload.empty());
  EXPECT_EQ(decoded.effect().settings, nullptr);
}

TEST(EffectCodec, UnknownEffectTypeIsRejected) {
  for (uint8_t type : {0, 15, 255}) {
    std::string bytes = Encode(SampleEffects()[2]);
    bytes[0] = static_cast<char>(type);
    DecodedEffect decoded;
    Status s = DecodeEffect(bytes, &decoded);
    EXPECT_EQ(s.detail(), "wal: effect: unknown effect type") << int{type};
  }
}

TEST(EffectCodec, UnknownMessageStateIsRejected) {
  Effect e = SampleEffects()[5];
  e.to = static_cast<MessageState>(7);
  DecodedEffect decoded;
  EXPECT_EQ(DecodeEffect(Encode(e), &decoded).detail(), "wal: effect: unknown message state");
}

TEST(EffectCodec, UnknownChangeCauseIsRejected) {
  Effect e = SampleEffects()[5];
  e.cause = static_cast<ChangeCause>(10);
  DecodedEffect decoded;
  EXPECT_EQ(DecodeEffect(Encode(e), &decoded).detail(), "wal: effect: unknown change cause");
}

TEST(EffectCodec, UnknownQueueTypeAndFlagsAreRejected) {
  const std::string good = Encode(SampleEffects()[0]);
  // settings start after type:u8 time:i64 queue:str("jobs").
  const size_t settings_at = 1 + 8 + 4 + 4;
  std::string bad_type = good;
  bad_type[settings_at] = 2;
  DecodedEffect decoded;
  EXPECT_EQ(DecodeEffect(bad_type, &decoded).detail(), "wal: effect: unknown queue type");
  std::string bad_flags = good;
  bad_flags.back() = 8;
  EXPECT_EQ(DecodeEffect(bad_flags, &decoded).detail(),
            "wal: effect: unknown queue settings flags");
}

TEST(EffectCodec, FlowSettingsFollowTheFlagsOnlyWhenNotTheirDefaults) {
  QueueSettings settings;
  Effect created;
  created.type = EffectType::kQueueCreated;
  created.queue = "q";
  created.settings = &settings;
  const std::string plain = Encode(created);
  settings.flow_key = "tenant";
  settings.key_concurrency = 5;
  settings.history_max = 0;  // its tag comes after the flow block
  const std::string keyed = Encode(created);
  EXPECT_EQ(keyed.size(), plain.size() + 4 + 6 + 4 + 5);  // str, u32, history_max's tag and u32
  DecodedEffect d;
  ASSERT_TRUE(DecodeEffect(keyed, &d).ok());
  EXPECT_EQ(d.effect().settings->flow_key, "tenant");
  EXPECT_EQ(d.effect().settings->key_concurrency, 5u);
  EXPECT_EQ(d.effect().settings->history_max, 0u);
  EXPECT_EQ(Encode(d.effect()), keyed);
  ASSERT_TRUE(DecodeEffect(plain, &d).ok());
  EXPECT_EQ(d.effect().settings->flow_key, "");
  EXPECT_EQ(d.effect().settings->key_concurrency, 0u);
  // Every prefix that cuts the flow block or the history_max tag is refused (the one that ends
  // with the flow block is the same queue with history_max 32).
  const size_t flow_end = plain.size() + 4 + 6 + 4;
  for (size_t n = plain.size(); n < keyed.size(); ++n) {
    if (n == flow_end) continue;
    EXPECT_FALSE(DecodeEffect(keyed.substr(0, n), &d).ok()) << "a prefix of " << n << " bytes";
  }
  ASSERT_TRUE(DecodeEffect(keyed.substr(0, flow_end), &d).ok());
  EXPECT_EQ(d.effect().settings->key_concurrency, 5u);
  EXPECT_EQ(d.effect().settings->history_max, kDefaultHistoryMax);

  // The flag with both at their defaults is not how the writer says "none".
  std::string restated = plain;
  restated.back() = static_cast<char>(restated.back() | 4);
  restated.append(std::string(8, '\0'));  // flow_key "" and key_concurrency 0
  EXPECT_EQ(DecodeEffect(restated, &d).detail(),
            "wal: effect: flow settings restated at their defaults");
}

TEST(EffectCodec, HugeStringLengthIsRejectedWithoutAllocating) {
  std::string bytes = Encode(SampleEffects()[2]);  // kQueueDeleted: type time queue
  bytes.replace(9, 4, "\xff\xff\xff\xff");         // queue length 2^32 - 1
  DecodedEffect decoded;
  Status s;
  size_t largest = 0;
  {
    AllocationTracker tracker;
    s = DecodeEffect(bytes, &decoded);
    largest = tracker.largest();
  }
  EXPECT_EQ(s.detail(), "wal: effect: truncated header");
  EXPECT_LT(largest, size_t{1024});
}

// Every effect a real engine reports, encoded, decoded and applied to a second engine, rebuilds
// the same state (the WAL's whole purpose).
class EncodingSink final : public EffectSink {
 public:
  void OnEffect(const Effect& effect) override { encodings.push_back(Encode(effect)); }
  std::vector<std::string> encodings;
};

// `snapshot`: the encodings are a snapshot's, whose enqueues restate messages (as ApplyRecords
// marks them: engine/effect.h, restated).
void ReplayInto(Engine* engine, const std::vector<std::string>& encodings, bool snapshot = false) {
  for (const std::string& bytes : encodings) {
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(bytes, &decoded).ok());
    Effect e = decoded.effect();
    e.restated = snapshot && e.type == EffectType::kMessageEnqueued;
    Status s = engine->Apply(e);
    ASSERT_TRUE(s.ok()) << EffectTypeName(decoded.effect().type) << " " << s.detail();
  }
}

// The log's path (every encoded effect replayed) and the checkpoint's (ExportState's effects)
// each rebuild `engine`'s state: the same digest.
void ExpectLogAndSnapshotReproduce(const Engine& engine, const Engine::Options& options,
                                   const EncodingSink& log) {
  ManualClock replay_clock;
  Engine replayed(options, &replay_clock, nullptr);
  ReplayInto(&replayed, log.encodings);
  EXPECT_EQ(replayed.Digest(), engine.Digest());
  EncodingSink exported;
  engine.ExportState(&exported);
  Engine restored(options, &replay_clock, nullptr);
  ReplayInto(&restored, exported.encodings, /*snapshot=*/true);
  EXPECT_EQ(restored.Digest(), engine.Digest());
}

TEST(EffectCodec, DecodedEngineEffectsReplayToTheSameDigest) {
  ManualClock clock;
  EncodingSink sink;
  Engine::Options options;
  options.seed = 7;
  Engine engine(options, &clock, &sink);

  QueueSettings dlq_settings;
  ASSERT_TRUE(engine.CreateQueue("jobs-dlq", dlq_settings).ok());
  QueueSettings settings;
  settings.max_attempts = 1;
  settings.dead_letter_queue = "jobs-dlq";
  settings.retention_ms = 1'000;
  ASSERT_TRUE(engine.CreateQueue("jobs", settings).ok());
  std::vector<EnqueueItem> items;
  for (int i = 0; i < 6; ++i) {
    EnqueueItem item;
    item.id = "m" + std::to_string(i);
    item.priority = i % 3;
    item.payload = std::string("payload\0", 8) + std::to_string(i);
    item.metadata = {{"tenant", i % 2 ? "a" : "b"}};
    if (i == 5) item.delay_ms = 500;
    items.push_back(item);
  }
  for (const auto& r : engine.Enqueue("jobs", items)) ASSERT_TRUE(r.ok());
  DequeueRequest dequeue;
  dequeue.max = 3;
  auto leased = engine.Dequeue("jobs", dequeue);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->size(), 3u);
  (void)engine.Complete("jobs", {{(*leased)[0].id, (*leased)[0].lease_token}});
  FailRequest fail;
  fail.id = (*leased)[1].id;
  fail.lease_token = (*leased)[1].lease_token;
  fail.error = "boom";
  ASSERT_TRUE(engine.Fail("jobs", fail).ok());  // max_attempts 1: dead-lettered
  (void)engine.Cancel("jobs", {"m3"});
  QueueSettingsUpdate update;
  update.lease_ms = 5'000;
  ASSERT_TRUE(engine.UpdateQueue("jobs", update).ok());
  clock.Advance(60'000);
  engine.Advance(clock.NowMs());  // lease expiry, visibility, retention GC
  ASSERT_TRUE(engine.PurgeQueue("jobs-dlq", {MessageState::kPending}).ok());

  ExpectLogAndSnapshotReproduce(engine, options, sink);
}

// ---- Batches (format 3, docs/wal-format.md "Batches") ----------------------------------------

TEST(EffectCodec, BatchEffectsAndTheBatchExtensionRoundTrip) {
  for (const Effect& original : SampleEffectsBatches()) {
    const std::string bytes = Encode(original);
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(bytes, &decoded).ok()) << EffectTypeName(original.type);
    ExpectSameLoggedFields(original, decoded.effect());
    EXPECT_EQ(Encode(decoded.effect()), bytes);
    Effect view;
    QueueSettings settings;
    ASSERT_TRUE(DecodeEffectView(bytes, &view, &settings).ok());
    ExpectSameLoggedFields(original, view);
    // Every proper prefix is refused but one: a message effect without its batch extension.
    Effect without = original;
    if (original.type == EffectType::kMessageEnqueued ||
        original.type == EffectType::kMessageChanged) {
      without.batch = {};
    }
    const size_t body = Encode(without).size();
    for (size_t n = 0; n < bytes.size(); ++n) {
      if (n == body) continue;
      EXPECT_FALSE(DecodeEffect(std::string_view(bytes).substr(0, n), &decoded).ok()) << n;
    }
    std::string trailing = bytes + '\0';
    EXPECT_FALSE(DecodeEffect(trailing, &decoded).ok());
    for (size_t i = 0; i < bytes.size(); ++i) {
      std::string damaged = bytes;
      FlipByte(&damaged, i);
      (void)DecodeEffect(damaged, &decoded);  // no crash, no sanitizer report
    }
  }
}

TEST(EffectCodec, MalformedBatchEffectsAreRejected) {
  const std::vector<Effect> samples = SampleEffectsBatches();
  DecodedEffect decoded;
  // Unknown flags of a kBatchCreated: the byte after the header and the batch id.
  std::string bytes = Encode(samples[1]);
  const size_t flags_at = 1 + 8 + 4 + samples[1].queue.size() + 4 + samples[1].batch.size();
  bytes[flags_at] = static_cast<char>(bytes[flags_at] | 0x80);
  EXPECT_EQ(DecodeEffect(bytes, &decoded).detail(), "wal: effect: unknown batch flags");
  // A batch without callback that names a queue.
  Effect named = samples[1];
  named.queue = "q";
  EXPECT_FALSE(DecodeEffect(Encode(named), &decoded).ok());
  // A seal naming a queue, an empty batch id.
  Effect sealed = samples[2];
  sealed.queue = "q";
  EXPECT_FALSE(DecodeEffect(Encode(sealed), &decoded).ok());
  sealed.queue = {};
  sealed.batch = {};
  EXPECT_FALSE(DecodeEffect(Encode(sealed), &decoded).ok());
  // The batch extension on an effect type that has none.
  std::string removed = Encode(SampleEffects()[6]);  // kMessageRemoved
  removed.push_back(16);
  removed.append(std::string("\x01\x00\x00\x00b", 5));
  EXPECT_FALSE(DecodeEffect(removed, &decoded).ok());
}

// As the log: the effects that are not derived (replay derives those from their causes).
class LoggingSink final : public EffectSink {
 public:
  void OnEffect(const Effect& effect) override {
    if (!effect.derived) logged.push_back(Encode(effect));
  }
  std::vector<std::string> logged;
};

TEST(EffectCodec, DecodedBatchEffectsReplayToTheSameDigestAndDeriveTheCallback) {
  ManualClock clock;
  LoggingSink sink;
  Engine::Options options;
  options.seed = 9;
  Engine engine(options, &clock, &sink);
  CreateBatchRequest request;
  request.id = "b";
  request.callback = BatchCallback{"done", "", 3, "finished", {{"k", "v"}}, 2};
  ASSERT_TRUE(engine.CreateBatch(request).ok());
  for (const char* q : {"a", "b"}) {
    EnqueueItem item;
    item.id = "m";
    item.batch = "b";
    ASSERT_TRUE(engine.Enqueue(q, {item})[0].ok());
  }
  ASSERT_TRUE(engine.SealBatch("b").ok());
  DequeueRequest one;
  for (const char* q : {"a", "b"}) {
    auto leased = engine.Dequeue(q, one);
    ASSERT_TRUE(leased.ok());
    ASSERT_EQ(leased->size(), 1u);
    ASSERT_TRUE(engine.Complete(q, {{"m", (*leased)[0].lease_token}})[0].ok());
  }
  ASSERT_TRUE(engine.Get("done", "batch:b").ok());
  clock.Advance(3'600'000);
  engine.Advance(clock.NowMs());  // the batch's retention and the members' GC

  ManualClock replay_clock;
  Engine replayed(options, &replay_clock, nullptr);
  ReplayInto(&replayed, sink.logged);
  EXPECT_EQ(replayed.Digest(), engine.Digest());
  EXPECT_EQ(replayed.GetBatch("b").status().code(), Code::kNotFound);
  EXPECT_TRUE(replayed.Get("done", "batch:b").ok());
}

}  // namespace
}  // namespace sundial::wal::test

// ---- Expiry and debounce (format 3, docs/wal-format.md "Expiry and debounce") ----------------

namespace sundial::wal::test {
namespace {

// Every proper prefix is refused, except one cut exactly where the new extension starts (what
// is left is the effect without it: a record's checksum and length catch that cut). A debounce
// cut before its `replaced` payload is refused too.
TEST(EffectCodec, ExpiryEffectsRoundTripAndRejectEveryPrefix) {
  for (const Effect& original : SampleEffectsExpiry()) {
    const std::string bytes = Encode(original);
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(bytes, &decoded).ok());
    ExpectSameLoggedFields(original, decoded.effect());
    EXPECT_EQ(Encode(decoded.effect()), bytes);
    Effect bare = original;
    bare.expires_at = 0;
    QueueSettings plain;
    if (original.settings != nullptr) {
      plain = *original.settings;
      plain.ttl_ms = 0;
      plain.dedupe = Dedupe::kKeep;
      bare.settings = &plain;
    }
    const size_t cut = original.cause == ChangeCause::kDebounced ? 0 : Encode(bare).size();
    for (size_t n = 0; n < bytes.size(); ++n) {
      if (n == cut && n != bytes.size()) continue;
      EXPECT_FALSE(DecodeEffect(std::string_view(bytes).substr(0, n), &decoded).ok()) << n;
    }
  }
}

TEST(EffectCodec, DefaultExpirySettingsAndNoTtlEncodeAsBefore) {
  QueueSettings s;
  Effect created = SampleEffectsExpiry()[0];
  created.settings = &s;
  const std::string plain = Encode(created);
  s.ttl_ms = 5;
  const std::string with = Encode(created);
  // tag, ttl_ms:i64le, dedupe:u8 after the settings.
  EXPECT_EQ(with.size(), plain.size() + 1 + 8 + 1);
  EXPECT_EQ(with.substr(0, plain.size()), plain);
  Effect enqueued = SampleEffectsExpiry()[1];
  const std::string with_expiry = Encode(enqueued);
  enqueued.expires_at = 0;
  EXPECT_EQ(with_expiry.size(), Encode(enqueued).size() + 1 + 4 + 8);
}

TEST(EffectCodec, BadExpiryValuesAreRejected) {
  DecodedEffect decoded;
  // Settings: an unknown dedupe, a negative ttl, the defaults restated.
  {
    QueueSettings s;
    s.ttl_ms = 5;
    Effect created = SampleEffectsExpiry()[0];
    created.settings = &s;
    std::string bytes = Encode(created);
    bytes.back() = 2;  // dedupe
    EXPECT_EQ(DecodeEffect(bytes, &decoded).detail(), "wal: effect: unknown dedupe");
    s.ttl_ms = -1;
    EXPECT_EQ(DecodeEffect(Encode(created), &decoded).detail(), "wal: effect: negative ttl_ms");
    s.ttl_ms = 0;
    s.dedupe = Dedupe::kWhileActive;
    bytes = Encode(created);
    bytes.back() = 0;
    EXPECT_EQ(DecodeEffect(bytes, &decoded).detail(),
              "wal: effect: expiry settings restated at their defaults");
  }
  // expires_at: not positive, or not 8 bytes.
  {
    Effect enqueued = SampleEffectsExpiry()[1];
    enqueued.expires_at = -3;
    EXPECT_EQ(DecodeEffect(Encode(enqueued), &decoded).detail(), "wal: effect: bad expires_at");
    enqueued.expires_at = 7;
    std::string bytes = Encode(enqueued);
    bytes.pop_back();
    bytes[bytes.size() - 7 - 4] = 7;  // length 7 instead of 8
    EXPECT_FALSE(DecodeEffect(bytes, &decoded).ok());
  }
  // A debounce without its replaced payload; a replaced payload on another cause.
  {
    Effect debounced = SampleEffectsExpiry()[3];
    std::string bytes = Encode(debounced);
    Effect other = debounced;
    other.cause = ChangeCause::kReprioritized;
    const std::string bare = Encode(other);  // no extension
    std::string without = bare;
    without[1 + 8 + 4 + other.queue.size() + 4 + other.id.size()] =
        static_cast<char>(ChangeCause::kDebounced);
    EXPECT_EQ(DecodeEffect(without, &decoded).detail(),
              "wal: effect: a debounce without its replaced payload");
    std::string with_on_other = bytes;
    with_on_other[1 + 8 + 4 + other.queue.size() + 4 + other.id.size()] =
        static_cast<char>(ChangeCause::kReprioritized);
    EXPECT_EQ(DecodeEffect(with_on_other, &decoded).detail(), "wal: effect: trailing bytes");
  }
}

TEST(EffectCodec, DecodedExpiryAndDebounceEffectsReplayToTheSameDigest) {
  ManualClock clock;
  EncodingSink sink;
  Engine::Options options;
  options.seed = 9;
  Engine engine(options, &clock, &sink);
  QueueSettings settings;
  settings.ttl_ms = 1'000;
  settings.dedupe = Dedupe::kWhileActive;
  settings.history_max = 5;
  ASSERT_TRUE(engine.CreateQueue("jobs", settings).ok());
  std::vector<EnqueueItem> items(4);
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].id = "m" + std::to_string(i);
    items[i].payload = "p" + std::to_string(i);
  }
  items[1].ttl_ms = 60'000;
  for (const auto& r : engine.Enqueue("jobs", items)) ASSERT_TRUE(r.ok());
  EnqueueItem again;
  again.id = "m1";
  again.payload = std::string(20'000, 'x');  // a large payload replaces a small one
  again.metadata = {{"k", "v"}};
  again.debounce_ms = 500;
  ASSERT_TRUE(engine.Enqueue("jobs", {again})[0].ok());
  clock.Advance(2'000);
  engine.Advance(clock.NowMs());  // m0, m2, m3 expire; m1 waits out its debounce
  EnqueueItem anew;
  anew.id = "m0";
  anew.payload = "second life";
  ASSERT_TRUE(engine.Enqueue("jobs", {anew})[0].ok());  // m0 released

  ExpectLogAndSnapshotReproduce(engine, options, sink);
}

}  // namespace
}  // namespace sundial::wal::test
