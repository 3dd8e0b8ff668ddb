// LogWriter -> LogReader round trips: every EffectType, LSNs, empty and large records, file
// names, and the writer's limits and poisoning.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/wal/wal_test_util.h"
#include "wal/fault_injection_file_system.h"

namespace sundial::wal::test {
namespace {

TEST(Log, EveryEffectTypeRoundTripsThroughWriterAndReader) {
  auto fs = NewMemoryFileSystem();
  const std::string path = "data/" + SegmentFileName(3);
  FileHeader header;
  header.file_number = 3;
  header.lsn = 100;
  {
    auto file = fs->NewWritableFile(path);
    ASSERT_TRUE(file.ok());
    LogWriter writer(std::move(file).value(), header);
    ASSERT_TRUE(writer.WriteHeader().ok());
    for (const Effect& e : SampleEffects()) ASSERT_TRUE(writer.AddEffect(e).ok());
    EXPECT_EQ(writer.next_lsn(), 108u);
    ASSERT_TRUE(writer.Sync().ok());
    ASSERT_TRUE(writer.Close().ok());
    EXPECT_EQ(writer.bytes_written(), *fs->FileSize(path));
  }
  auto file = fs->NewSequentialFile(path);
  ASSERT_TRUE(file.ok());
  RecordingReporter reporter;
  LogReader::Options options;
  options.expected_file_number = 3;
  LogReader reader(std::move(file).value(), path, &reporter, options);
  const std::vector<Effect> samples = SampleEffects();
  LogReader::Record record;
  size_t n = 0;
  while (reader.ReadRecord(&record)) {
    ASSERT_LT(n, samples.size());
    EXPECT_EQ(record.type, RecordType::kEffect);
    EXPECT_EQ(record.lsn, 100 + n);
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(record.payload, &decoded).ok());
    ExpectSameLoggedFields(samples[n], decoded.effect());
    ++n;
  }
  EXPECT_EQ(n, samples.size());
  EXPECT_TRUE(reporter.reports.empty());
  EXPECT_TRUE(reader.status().ok());
  EXPECT_EQ(reader.header().file_number, 3u);
  EXPECT_EQ(reader.header().lsn, 100u);
}

TEST(Log, EmptyAndLargeRecordsRoundTrip) {
  std::string large(3 * (1 << 20) + 17, '\0');
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 131);
  const std::vector<std::string> payloads = {"", large, "x", ""};
  ReadResult r = ReadLog(WriteLog(payloads).bytes);
  EXPECT_TRUE(r.reports.empty());
  EXPECT_EQ(r.payloads, payloads);
  EXPECT_EQ(r.lsns, (std::vector<uint64_t>{0, 1, 2, 3}));
}

TEST(Log, HeaderOnlySegmentReadsAsEmptyWithoutDamage) {
  ReadResult r = ReadLog(WriteLog({}).bytes);
  EXPECT_TRUE(r.payloads.empty());
  EXPECT_TRUE(r.reports.empty());
}

TEST(Log, RecordAboveTheMaximumIsRefusedByTheWriterWithoutPoisoningIt) {
  std::string bytes;
  LogWriter writer(std::make_unique<StringWritableFile>(&bytes), FileHeader{});
  ASSERT_TRUE(writer.WriteHeader().ok());
  const size_t before = bytes.size();
  Status s = writer.AddRecord(RecordType::kEffect, std::string(kMaxRecordBytes + 1, 'x'));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(bytes.size(), before);
  EXPECT_TRUE(writer.poisoned().ok());
  EXPECT_TRUE(writer.AddRecord(RecordType::kEffect, std::string(kMaxRecordBytes, 'x')).ok());
  ReadResult r = ReadLog(bytes);
  ASSERT_EQ(r.payloads.size(), 1u);
  EXPECT_EQ(r.payloads[0].size(), kMaxRecordBytes);
}

TEST(Log, RecordBeforeTheHeaderIsRefused) {
  std::string bytes;
  LogWriter writer(std::make_unique<StringWritableFile>(&bytes), FileHeader{});
  EXPECT_EQ(writer.AddRecord(RecordType::kEffect, "x").code(), Code::kFailedPrecondition);
  EXPECT_TRUE(bytes.empty());
}

TEST(Log, FailedAppendPoisonsTheWriter) {
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem fs(memory.get());
  auto file = fs.NewWritableFile("wal-0000000000000001.log");
  ASSERT_TRUE(file.ok());
  FileHeader header;
  header.file_number = 1;
  LogWriter writer(std::move(file).value(), header);
  ASSERT_TRUE(writer.WriteHeader().ok());
  ASSERT_TRUE(writer.AddRecord(RecordType::kEffect, "first").ok());
  fs.FailNextAppendWithNoSpace();
  EXPECT_EQ(writer.AddRecord(RecordType::kEffect, "second").code(), Code::kResourceExhausted);
  // The fault was one-shot, but the writer stays poisoned.
  EXPECT_EQ(writer.AddRecord(RecordType::kEffect, "third").code(), Code::kResourceExhausted);
  EXPECT_EQ(writer.Sync().code(), Code::kResourceExhausted);
  EXPECT_EQ(writer.next_lsn(), 1u);
}

TEST(Log, FailedSyncPoisonsTheWriter) {
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem fs(memory.get());
  auto file = fs.NewWritableFile("wal-0000000000000001.log");
  ASSERT_TRUE(file.ok());
  LogWriter writer(std::move(file).value(), FileHeader{.file_number = 1});
  ASSERT_TRUE(writer.WriteHeader().ok());
  ASSERT_TRUE(writer.AddRecord(RecordType::kEffect, "first").ok());
  fs.FailNextSyncWithIoError();
  EXPECT_EQ(writer.Sync().code(), Code::kInternal);
  // Never retry an fsync and call the data safe.
  EXPECT_EQ(writer.Sync().code(), Code::kInternal);
  EXPECT_EQ(writer.AddRecord(RecordType::kEffect, "second").code(), Code::kInternal);
  EXPECT_EQ(fs.SyncedBytes("wal-0000000000000001.log"), 0u);
}

// CheckRecord: what the encoder wrote checks as that record; each damage a reader must refuse
// is named (the replication tail and stream rely on it).
TEST(Log, CheckRecordAcceptsWhatTheEncoderWroteAndNamesEachDamage) {
  std::string bytes;
  ASSERT_TRUE(AppendRecord(RecordType::kEffect, 7, "payload", &bytes));
  ASSERT_TRUE(AppendRecord(RecordType::kSnapshotTrailer, 7, "second", &bytes));
  CheckedRecord record;
  ASSERT_EQ(CheckRecord(bytes, 7, &record), RecordCheck::kOk);
  EXPECT_EQ(record.type, RecordType::kEffect);
  EXPECT_EQ(record.payload, "payload");
  EXPECT_EQ(record.size, kRecordHeaderBytes + 7);
  ASSERT_EQ(CheckRecord(std::string_view(bytes).substr(record.size), 7, &record), RecordCheck::kOk);
  EXPECT_EQ(record.payload, "second");

  EXPECT_EQ(CheckRecord(bytes, 8, &record), RecordCheck::kBadChecksum) << "another file";
  EXPECT_EQ(CheckRecord(std::string_view(bytes).substr(0, kRecordHeaderBytes - 1), 7, &record),
            RecordCheck::kCut);
  EXPECT_EQ(CheckRecord(std::string_view(bytes).substr(0, kRecordHeaderBytes + 6), 7, &record),
            RecordCheck::kCut);
  std::string flipped = bytes;
  flipped[kRecordHeaderBytes] ^= 1;
  EXPECT_EQ(CheckRecord(flipped, 7, &record), RecordCheck::kBadChecksum);
  std::string huge = bytes;
  huge[3] = '\x7f';  // a length far above the maximum
  EXPECT_EQ(CheckRecord(huge, 7, &record), RecordCheck::kTooLong);
  std::string typed = bytes.substr(0, kRecordHeaderBytes + 7);
  typed[4] = static_cast<char>(kMaxRecordType + 1);
  SealRecord(7, typed.data());  // a valid checksum over an unknown type
  EXPECT_EQ(CheckRecord(typed, 7, &record), RecordCheck::kUnknownType);
}

TEST(Log, SegmentAndSnapshotNamesSortByNumberAndParseBack) {
  EXPECT_EQ(SegmentFileName(42), "wal-000000000000002a.log");
  EXPECT_EQ(SnapshotFileName(1'000'000), "snapshot-00000000000f4240.snap");
  EXPECT_LT(SegmentFileName(9), SegmentFileName(10));
  EXPECT_LT(SegmentFileName(0xff), SegmentFileName(0x100));
  EXPECT_EQ(ParseSegmentFileName(SegmentFileName(UINT64_MAX)), UINT64_MAX);
  EXPECT_EQ(ParseSnapshotFileName(SnapshotFileName(7)), 7u);
  EXPECT_EQ(ParseSegmentFileName("wal-000000000000002A.log"), std::nullopt);
  EXPECT_EQ(ParseSegmentFileName("wal-2a.log"), std::nullopt);
  EXPECT_EQ(ParseSnapshotFileName(SnapshotFileName(7) + ".tmp"), std::nullopt);
  EXPECT_EQ(ParseSegmentFileName(SnapshotFileName(7)), std::nullopt);
}

TEST(Log, FileHeaderIsThirtySixBytesWithMagicFirst) {
  std::string bytes;
  AppendFileHeader(FileHeader{.file_number = 1, .lsn = 2}, &bytes);
  ASSERT_EQ(bytes.size(), kFileHeaderBytes);
  EXPECT_EQ(bytes.substr(0, 8), std::string("SUNDWAL\0", 8));
  FileHeader parsed;
  ASSERT_EQ(ParseFileHeader(bytes, kSegmentMagic, &parsed), HeaderError::kNone);
  EXPECT_EQ(parsed.file_number, 1u);
  EXPECT_EQ(parsed.lsn, 2u);
  EXPECT_EQ(parsed.version, kFormatVersion);
}

}  // namespace
}  // namespace sundial::wal::test
