// Golden files: a segment of each format version checked in under tests/data/wal/ must keep
// reading back as the same effects, whatever the current format version is
// (docs/wal-format.md, "Changing a format"). While a version is current, writing its samples
// again gives identical bytes, through both writers of the one record encoder (log_format.h):
// the group-commit log, which writes every production segment, and LogWriter, which writes
// snapshots. A version-1 data directory (a snapshot and the segment after it,
// tests/data/wal/v1-dir) must always recover to the same known digest.
//
// To create a golden file for a new version: SUNDIAL_WRITE_GOLDEN=1 ./wal_tests
// --gtest_filter='Golden.*', then add a reader test for it here. Never regenerate an old one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/wal/recovery_test_util.h"
#include "tests/wal/wal_test_util.h"
#include "wal/checkpointer.h"

namespace sundial::wal::test {
namespace {

const std::string kV1Segment =
    std::string(SUNDIAL_TEST_DATA_DIR) + "/wal/v1-wal-0000000000000001.log";
const std::string kV2Segment =
    std::string(SUNDIAL_TEST_DATA_DIR) + "/wal/v2-wal-0000000000000001.log";
const std::string kV3Segment =
    std::string(SUNDIAL_TEST_DATA_DIR) + "/wal/v3-wal-0000000000000001.log";

// Version 2: every version-1 sample, then the effects with the fields version 2 added, then
// the effect type it added (a new primary's epoch record).
std::vector<Effect> SamplesV2() {
  std::vector<Effect> all = SampleEffects();
  for (const Effect& e : SampleEffectsV2()) all.push_back(e);
  all.push_back(SampleEpochEffect());
  return all;
}

std::string WriteSamplesV2() {
  std::vector<std::string> encodings;
  for (const Effect& e : SamplesV2()) encodings.push_back(Encode(e));
  return WriteLog(encodings, /*segment=*/1, /*lsn=*/0).bytes;
}

// Version 3: every version-2 sample, then the effects with the fields version 3 added (the
// dependencies of a waiting message, a snapshot's dependency entry, the schedule effects).
std::vector<Effect> SamplesV3() {
  std::vector<Effect> all = SamplesV2();
  for (const Effect& e : SampleEffectsV3()) all.push_back(e);
  for (const Effect& e : SampleScheduleEffects()) all.push_back(e);
  return all;
}

std::string WriteSamplesV3() {
  std::vector<std::string> encodings;
  for (const Effect& e : SamplesV3()) encodings.push_back(Encode(e));
  return WriteLog(encodings, /*segment=*/1, /*lsn=*/0).bytes;
}

std::string WriteSamplesV1() { return WriteLog(SampleEncodings(), /*segment=*/1, /*lsn=*/0).bytes; }

TEST(Golden, VersionOneSegmentReadsBackAsTheSampleEffects) {
  auto fs = NewPosixFileSystem();
  if (std::getenv("SUNDIAL_WRITE_GOLDEN") != nullptr && !fs->FileExists(kV1Segment)) {
    ASSERT_TRUE(WriteStringToFile(fs.get(), kV1Segment, WriteSamplesV1()).ok());
  }
  auto bytes = ReadFileToString(fs.get(), kV1Segment);
  ASSERT_TRUE(bytes.ok()) << kV1Segment;
  ReadResult r = ReadLog(*bytes, /*last_file=*/true, /*expected_number=*/1);
  EXPECT_TRUE(r.reports.empty());
  const std::vector<Effect> samples = SampleEffects();
  ASSERT_EQ(r.payloads.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(r.payloads[i], &decoded).ok()) << i;
    ExpectSameLoggedFields(samples[i], decoded.effect());
    EXPECT_EQ(r.lsns[i], i);
  }
}

// Version 2 only adds: an effect without the new fields is encoded exactly as version 1 did.
TEST(Golden, EffectsWithoutNewFieldsEncodeAsInVersionOne) {
  auto fs = NewPosixFileSystem();
  auto bytes = ReadFileToString(fs.get(), kV1Segment);
  ASSERT_TRUE(bytes.ok());
  ReadResult r = ReadLog(*bytes, /*last_file=*/true, /*expected_number=*/1);
  EXPECT_EQ(r.payloads, SampleEncodings());
}

TEST(Golden, VersionTwoSegmentReadsBackAsTheSampleEffects) {
  auto fs = NewPosixFileSystem();
  if (std::getenv("SUNDIAL_WRITE_GOLDEN") != nullptr && !fs->FileExists(kV2Segment)) {
    ASSERT_TRUE(WriteStringToFile(fs.get(), kV2Segment, WriteSamplesV2()).ok());
  }
  auto bytes = ReadFileToString(fs.get(), kV2Segment);
  ASSERT_TRUE(bytes.ok()) << kV2Segment;
  ReadResult r = ReadLog(*bytes, /*last_file=*/true, /*expected_number=*/1);
  EXPECT_TRUE(r.reports.empty());
  const std::vector<Effect> samples = SamplesV2();
  ASSERT_EQ(r.payloads.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(r.payloads[i], &decoded).ok()) << i;
    ExpectSameLoggedFields(samples[i], decoded.effect());
  }
}

// Version 3 only adds: the version-2 samples encode as version 2 did (the file header's
// version aside, which only a new file carries).
TEST(Golden, EffectsWithoutVersionThreeFieldsEncodeAsInVersionTwo) {
  auto bytes = ReadFileToString(NewPosixFileSystem().get(), kV2Segment);
  ASSERT_TRUE(bytes.ok());
  ReadResult r = ReadLog(*bytes, /*last_file=*/true, /*expected_number=*/1);
  std::vector<std::string> encodings;
  for (const Effect& e : SamplesV2()) encodings.push_back(Encode(e));
  EXPECT_EQ(r.payloads, encodings);
}

TEST(Golden, VersionThreeSegmentReadsBackAsTheSampleEffects) {
  auto fs = NewPosixFileSystem();
  if (std::getenv("SUNDIAL_WRITE_GOLDEN") != nullptr && !fs->FileExists(kV3Segment)) {
    ASSERT_TRUE(WriteStringToFile(fs.get(), kV3Segment, WriteSamplesV3()).ok());
  }
  auto bytes = ReadFileToString(fs.get(), kV3Segment);
  ASSERT_TRUE(bytes.ok()) << kV3Segment;
  ReadResult r = ReadLog(*bytes, /*last_file=*/true, /*expected_number=*/1);
  EXPECT_TRUE(r.reports.empty());
  const std::vector<Effect> samples = SamplesV3();
  ASSERT_EQ(r.payloads.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(r.payloads[i], &decoded).ok()) << i;
    ExpectSameLoggedFields(samples[i], decoded.effect());
  }
}

TEST(Golden, CurrentWriterStillProducesTheVersionThreeBytes) {
  ASSERT_EQ(kFormatVersion, 3u) << "version bumped: keep the v3 reader test, drop this one";
  auto fs = NewPosixFileSystem();
  auto bytes = ReadFileToString(fs.get(), kV3Segment);
  ASSERT_TRUE(bytes.ok());
  EXPECT_TRUE(*bytes == WriteSamplesV3());
}

// The bytes production segments are made of: GroupCommitLog frames records with the same encoder
// as LogWriter (the checksum sealed when the group is written), so the sample effects logged
// through it give the golden file exactly.
TEST(Golden, TheGroupCommitLogWritesTheCurrentVersionsBytes) {
  ASSERT_EQ(kFormatVersion, 3u) << "version bumped: point this at the new version's golden file";
  auto golden = ReadFileToString(NewPosixFileSystem().get(), kV3Segment);
  ASSERT_TRUE(golden.ok());
  auto memory = NewMemoryFileSystem();
  LogOptions options = Policy(FsyncPolicy::kNever);
  options.preallocate_bytes = 0;
  auto log = OpenLog(memory.get(), options, /*next_lsn=*/0, /*segment=*/1);
  ASSERT_NE(log, nullptr);
  for (const Effect& e : SamplesV3()) log->OnEffect(e);
  ASSERT_TRUE(log->Close().ok());
  auto written = ReadFileToString(memory.get(), JoinPath("data", SegmentFileName(1)));
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(written->size(), golden->size());
  EXPECT_TRUE(*written == *golden);
}

// Batches, added to format 3 while it was not yet shipped: their samples in a golden file of
// their own (the v3 file above keeps its bytes).
const std::string kV3BatchesSegment =
    std::string(SUNDIAL_TEST_DATA_DIR) + "/wal/v3-batches-wal-0000000000000001.log";

TEST(Golden, VersionThreeBatchesSegmentReadsBackAndIsWhatTheWriterProduces) {
  std::vector<std::string> encodings;
  for (const Effect& e : SampleEffectsBatches()) encodings.push_back(Encode(e));
  const std::string expected = WriteLog(encodings, /*segment=*/1, /*lsn=*/0).bytes;
  auto fs = NewPosixFileSystem();
  if (std::getenv("SUNDIAL_WRITE_GOLDEN") != nullptr && !fs->FileExists(kV3BatchesSegment)) {
    ASSERT_TRUE(WriteStringToFile(fs.get(), kV3BatchesSegment, expected).ok());
  }
  auto bytes = ReadFileToString(fs.get(), kV3BatchesSegment);
  ASSERT_TRUE(bytes.ok()) << kV3BatchesSegment;
  ReadResult r = ReadLog(*bytes, /*last_file=*/true, /*expected_number=*/1);
  EXPECT_TRUE(r.reports.empty());
  const std::vector<Effect> samples = SampleEffectsBatches();
  ASSERT_EQ(r.payloads.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(r.payloads[i], &decoded).ok()) << i;
    ExpectSameLoggedFields(samples[i], decoded.effect());
  }
  ASSERT_EQ(kFormatVersion, 3u) << "version bumped: keep the reader part, drop this comparison";
  EXPECT_TRUE(*bytes == expected);
}

// Expiry and debounce, added to format 3 while it was not yet shipped (docs/wal-format.md,
// "Expiry and debounce"): their samples in a golden file of their own.
const std::string kV3ExpirySegment =
    std::string(SUNDIAL_TEST_DATA_DIR) + "/wal/v3-expiry-wal-0000000000000001.log";

TEST(Golden, VersionThreeExpirySegmentReadsBackAndIsWhatTheWriterProduces) {
  std::vector<std::string> encodings;
  for (const Effect& e : SampleEffectsExpiry()) encodings.push_back(Encode(e));
  const std::string expected = WriteLog(encodings, /*segment=*/1, /*lsn=*/0).bytes;
  auto fs = NewPosixFileSystem();
  if (std::getenv("SUNDIAL_WRITE_GOLDEN") != nullptr && !fs->FileExists(kV3ExpirySegment)) {
    ASSERT_TRUE(WriteStringToFile(fs.get(), kV3ExpirySegment, expected).ok());
  }
  auto bytes = ReadFileToString(fs.get(), kV3ExpirySegment);
  ASSERT_TRUE(bytes.ok()) << kV3ExpirySegment;
  ReadResult r = ReadLog(*bytes, /*last_file=*/true, /*expected_number=*/1);
  EXPECT_TRUE(r.reports.empty());
  const std::vector<Effect> samples = SampleEffectsExpiry();
  ASSERT_EQ(r.payloads.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(r.payloads[i], &decoded).ok()) << i;
    ExpectSameLoggedFields(samples[i], decoded.effect());
  }
  ASSERT_EQ(kFormatVersion, 3u) << "version bumped: keep the reader part, drop this comparison";
  EXPECT_TRUE(*bytes == expected);
}

// Flow control, added to format 3 while it was not yet shipped (docs/wal-format.md, "Flow
// settings", "Per-key limits", "Token buckets"): its samples in a golden file of their own.
// Effect 49 is a snapshot's record (a segment holding one is damage at replay, not at
// decoding): here, as the batches' and expiry's restatements are, it pins the codec's bytes.
const std::string kV3FlowControlSegment =
    std::string(SUNDIAL_TEST_DATA_DIR) + "/wal/v3-flow-control-wal-0000000000000001.log";

TEST(Golden, VersionThreeFlowControlSegmentReadsBackAndIsWhatTheWriterProduces) {
  std::vector<std::string> encodings;
  for (const Effect& e : SampleEffectsFlowControl()) encodings.push_back(Encode(e));
  const std::string expected = WriteLog(encodings, /*segment=*/1, /*lsn=*/0).bytes;
  auto fs = NewPosixFileSystem();
  if (std::getenv("SUNDIAL_WRITE_GOLDEN") != nullptr && !fs->FileExists(kV3FlowControlSegment)) {
    ASSERT_TRUE(WriteStringToFile(fs.get(), kV3FlowControlSegment, expected).ok());
  }
  auto bytes = ReadFileToString(fs.get(), kV3FlowControlSegment);
  ASSERT_TRUE(bytes.ok()) << kV3FlowControlSegment;
  ReadResult r = ReadLog(*bytes, /*last_file=*/true, /*expected_number=*/1);
  EXPECT_TRUE(r.reports.empty());
  const std::vector<Effect> samples = SampleEffectsFlowControl();
  ASSERT_EQ(r.payloads.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(r.payloads[i], &decoded).ok()) << i;
    ExpectSameLoggedFields(samples[i], decoded.effect());
  }
  ASSERT_EQ(kFormatVersion, 3u) << "version bumped: keep the reader part, drop this comparison";
  EXPECT_TRUE(*bytes == expected);
}

const std::string kV1Dir = std::string(SUNDIAL_TEST_DATA_DIR) + "/wal/v1-dir";
// Recovering kV1Dir gives this digest (the snapshot's trailer holds Engine::Digest, so the
// digest's canonical walk is part of format version 1). The snapshot still loads to its
// trailer's version-1 digest (LoadSnapshot checks it); since history (docs/wal-format.md,
// "History"), the segment's effects after it also rebuild each message's history, which the
// digest includes: 1809823695362939059 before history, this after.
constexpr uint64_t kV1DirDigest = 69238857766451828ull;
constexpr uint64_t kV1DirSnapshotLsn = 0x1c7;
constexpr uint64_t kV1DirNextLsn = 547;

// A deterministic workload, a checkpoint, more workload: one snapshot and one segment after it.
void WriteV1Dir(FileSystem* out) {
  auto memory = NewMemoryFileSystem();
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(memory.get(), "d").ok());
    RandomOps workload(42);
    workload.Setup(*e.engine);
    workload.Run(*e.engine, e.clock, 400);
    ASSERT_TRUE(e.Sync().ok());
    CheckpointOptions options;
    options.engine_options = TestEngineOptions();
    Checkpointer checkpointer(memory.get(), "d", e.log.get(), options);
    ASSERT_TRUE(checkpointer.RunOnce().ok());
    workload.Run(*e.engine, e.clock, 100);
    ASSERT_TRUE(e.Sync().ok());
    std::printf("golden dir digest %llu next lsn %llu\n",
                static_cast<unsigned long long>(e.engine->Digest()),
                static_cast<unsigned long long>(e.log->stats().next_lsn));
  }
  ASSERT_TRUE(out->CreateDir(kV1Dir).ok());
  auto names = memory->ListDir("d");
  for (const auto& name : *names) {
    auto bytes = ReadFileToString(memory.get(), JoinPath("d", name));
    ASSERT_TRUE(WriteStringToFile(out, JoinPath(kV1Dir, name), *bytes).ok());
  }
}

TEST(Golden, VersionOneDataDirectoryRecoversToTheKnownDigest) {
  auto posix = NewPosixFileSystem();
  if (std::getenv("SUNDIAL_WRITE_GOLDEN") != nullptr && !posix->FileExists(kV1Dir)) {
    WriteV1Dir(posix.get());
  }
  // Recover a copy: recovery may rewrite what it finds, the golden files must stay as they are.
  auto names = posix->ListDir(kV1Dir);
  ASSERT_TRUE(names.ok()) << kV1Dir;
  ASSERT_EQ(names->size(), 2u);
  auto memory = NewMemoryFileSystem();
  for (const auto& name : *names) {
    auto bytes = ReadFileToString(posix.get(), JoinPath(kV1Dir, name));
    ASSERT_TRUE(bytes.ok());
    ASSERT_TRUE(WriteStringToFile(memory.get(), JoinPath("d", name), *bytes).ok());
  }
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(memory.get(), "d", &report), kV1DirDigest);
  EXPECT_EQ(report.snapshot, SnapshotFileName(kV1DirSnapshotLsn));
  EXPECT_GT(report.snapshot_effects, 0u);
  EXPECT_EQ(report.records_replayed, kV1DirNextLsn - kV1DirSnapshotLsn);
  EXPECT_EQ(report.next_lsn, kV1DirNextLsn);
  EXPECT_FALSE(report.damage);
  EXPECT_FALSE(report.torn_tail);
}

}  // namespace
}  // namespace sundial::wal::test
