// ApplyRecords (wal/apply_records.h): the step recovery and snapshot loading share. Records are
// applied in order until the first bad one, which is reported at its own offset; records the
// state holds are skipped; a trailer is accepted only in a snapshot, once, and last.
#include "wal/apply_records.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/wal/recovery_test_util.h"
#include "tests/wal/wal_test_util.h"

namespace sundial::wal::test {
namespace {

// Encodes every effect the engine reports.
class EncodingSink final : public EffectSink {
 public:
  void OnEffect(const Effect& effect) override { payloads.push_back(Encode(effect)); }
  std::vector<std::string> payloads;
};

class ApplyRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Engine source(TestEngineOptions(), &clock_, &sink_);
    RandomOps workload(5);
    workload.Setup(source);
    workload.Run(source, clock_, 300);
    digest_ = source.Digest();
    ASSERT_GT(sink_.payloads.size(), 100u);
  }

  // Applies a file of `bytes` (a segment numbered 1, or a snapshot of file number 1) to a fresh
  // engine.
  AppliedRecords Apply(const std::string& bytes, ApplyOptions options, uint64_t* digest = nullptr) {
    Engine target(TestEngineOptions(), &clock_, nullptr);
    LogReader::Options reader_options;
    if (options.kind == FileKind::kSnapshot) reader_options.magic = kSnapshotMagic;
    LogReader reader(std::make_unique<StringSequentialFile>(bytes), std::string(options.file),
                     nullptr, reader_options);
    EXPECT_TRUE(reader.ReadHeader());
    EffectPipeline pipeline(&reader, /*threaded=*/false);
    AppliedRecords applied = ApplyRecords(&pipeline, &target, options);
    if (digest) *digest = target.Digest();
    return applied;
  }

  static ApplyOptions Options(std::string_view file, FileKind kind) {
    ApplyOptions options;
    options.file = file;
    options.kind = kind;
    return options;
  }
  static ApplyOptions Segment() { return Options("wal-0000000000000001.log", FileKind::kSegment); }

  ManualClock clock_{kStartTime};
  EncodingSink sink_;
  uint64_t digest_ = 0;
};

TEST_F(ApplyRecordsTest, EveryEffectIsAppliedInOrder) {
  const WrittenLog log = WriteLog(sink_.payloads);
  uint64_t digest = 0;
  const AppliedRecords applied = Apply(log.bytes, Segment(), &digest);
  EXPECT_FALSE(applied.damage);
  EXPECT_FALSE(applied.trailer);
  EXPECT_EQ(applied.effects, sink_.payloads.size());
  EXPECT_EQ(digest, digest_);
}

TEST_F(ApplyRecordsTest, RecordsBelowTheFirstLsnAreSkippedAndEndLsnStops) {
  // A segment starting at LSN 100 whose records 100..109 the state holds already (here: copies
  // of the first effect, which would not apply again), then the workload from its start.
  std::vector<std::string> payloads(10, sink_.payloads[0]);
  payloads.insert(payloads.end(), sink_.payloads.begin(), sink_.payloads.end());
  const WrittenLog log = WriteLog(payloads, /*segment=*/1, /*lsn=*/100);
  ApplyOptions options = Segment();
  options.first_lsn = 110;
  const AppliedRecords all = Apply(log.bytes, options);
  EXPECT_FALSE(all.damage) << ToString(*all.damage);
  EXPECT_EQ(all.effects, sink_.payloads.size());
  options.end_lsn = 150;
  const AppliedRecords some = Apply(log.bytes, options);
  EXPECT_FALSE(some.damage) << ToString(*some.damage);
  EXPECT_EQ(some.effects, 40u);
}

TEST_F(ApplyRecordsTest, AnUndecodableEffectIsDamageAtItsOffsetAfterTheEffectsBeforeIt) {
  std::vector<std::string> payloads(sink_.payloads.begin(), sink_.payloads.begin() + 50);
  payloads[30] = "\x63 not an effect";
  const WrittenLog log = WriteLog(payloads);
  const AppliedRecords applied = Apply(log.bytes, Segment());
  ASSERT_TRUE(applied.damage);
  EXPECT_EQ(applied.damage->file, "wal-0000000000000001.log");
  EXPECT_EQ(applied.damage->offset, log.record_offsets[30]);
  EXPECT_EQ(applied.damage->kind, DamageKind::kCorruption);
  EXPECT_EQ(applied.damage->reason, "undecodable effect");
  EXPECT_EQ(applied.effects, 30u);
}

TEST_F(ApplyRecordsTest, AnEffectThatDoesNotApplyIsReportedBeforeALaterBadRecord) {
  // Record 20 changes a message of a queue that does not exist; record 40 does not decode. The
  // earlier one is the first bad record, in the same batch.
  std::vector<std::string> payloads(sink_.payloads.begin(), sink_.payloads.begin() + 50);
  Effect orphan = SampleEffects()[1];
  ASSERT_NE(orphan.type, EffectType::kQueueCreated);
  orphan.queue = "no-such-queue";
  payloads[20] = Encode(orphan);
  payloads[40] = "\x63 not an effect";
  const WrittenLog log = WriteLog(payloads);
  const AppliedRecords applied = Apply(log.bytes, Segment());
  ASSERT_TRUE(applied.damage);
  EXPECT_EQ(applied.damage->offset, log.record_offsets[20]);
  EXPECT_EQ(applied.damage->reason, "effect does not apply to the recovered state");
  EXPECT_EQ(applied.effects, 20u);
}

// A snapshot-like file: effects, then trailer records of the given payloads.
std::string FileWithTrailers(const std::vector<std::string>& effects,
                             const std::vector<std::string>& trailers, FileHeader header) {
  std::string bytes;
  LogWriter writer(std::make_unique<StringWritableFile>(&bytes), header);
  EXPECT_TRUE(writer.WriteHeader().ok());
  for (const std::string& e : effects) EXPECT_TRUE(writer.AddRecord(RecordType::kEffect, e).ok());
  for (const std::string& t : trailers) {
    EXPECT_TRUE(writer.AddRecord(RecordType::kSnapshotTrailer, t).ok());
  }
  return bytes;
}

std::string Trailer(uint64_t count, uint64_t digest) {
  std::string t;
  PutFixed64(&t, count);
  PutFixed64(&t, digest);
  return t;
}

TEST_F(ApplyRecordsTest, ATrailerIsAcceptedInASnapshotOnlyOnceAndLast) {
  const std::vector<std::string> effects(sink_.payloads.begin(), sink_.payloads.begin() + 5);
  const FileHeader snapshot{.magic = kSnapshotMagic, .file_number = 1, .lsn = 1};
  const ApplyOptions options = Options("snapshot-0000000000000001.snap", FileKind::kSnapshot);

  const AppliedRecords whole =
      Apply(FileWithTrailers(effects, {Trailer(5, 77)}, snapshot), options);
  EXPECT_FALSE(whole.damage);
  ASSERT_TRUE(whole.trailer);
  EXPECT_EQ(whole.trailer->count, 5u);
  EXPECT_EQ(whole.trailer->digest, 77u);
  EXPECT_EQ(whole.effects, 5u);

  const AppliedRecords twice =
      Apply(FileWithTrailers(effects, {Trailer(5, 77), Trailer(5, 77)}, snapshot), options);
  ASSERT_TRUE(twice.damage);
  EXPECT_EQ(twice.damage->reason, "record after the snapshot trailer");

  const AppliedRecords short_trailer =
      Apply(FileWithTrailers(effects, {"12345678"}, snapshot), options);
  ASSERT_TRUE(short_trailer.damage);
  EXPECT_EQ(short_trailer.damage->reason, "snapshot trailer of the wrong size");
  EXPECT_FALSE(short_trailer.trailer);

  const AppliedRecords in_segment =
      Apply(FileWithTrailers(effects, {Trailer(5, 77)}, FileHeader{.file_number = 1}), Segment());
  ASSERT_TRUE(in_segment.damage);
  EXPECT_EQ(in_segment.damage->reason, "snapshot trailer in a log segment");
  EXPECT_FALSE(in_segment.trailer);
  EXPECT_EQ(in_segment.effects, 5u);
}

}  // namespace
}  // namespace sundial::wal::test
