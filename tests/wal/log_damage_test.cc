// LogReader on damaged files: truncation at every byte offset, a flipped byte at every
// position, bad lengths, unknown types, zeroed tails. The reader must return a clean prefix of
// the records written, report the damage once with file and offset, and tell a torn tail from
// corruption (docs/wal-format.md, "Reading: torn tail versus damage").
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "tests/wal/wal_test_util.h"

// ---- Allocation tracker (declared in wal_test_util.h) ------------------------------------------

namespace {
std::atomic<bool> g_tracking{false};
std::atomic<size_t> g_largest_allocation{0};
}  // namespace

// A replacement pair: memory from this operator new is released by this operator delete, so
// free() is right; GCC's -Wmismatched-new-delete cannot see that once both are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  if (g_tracking.load(std::memory_order_relaxed)) {
    size_t seen = g_largest_allocation.load(std::memory_order_relaxed);
    while (n > seen && !g_largest_allocation.compare_exchange_weak(seen, n)) {
    }
  }
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace sundial::wal::test {

AllocationTracker::AllocationTracker() {
  g_largest_allocation.store(0);
  g_tracking.store(true);
}
AllocationTracker::~AllocationTracker() { g_tracking.store(false); }
size_t AllocationTracker::largest() const { return g_largest_allocation.load(); }

namespace {

std::vector<std::string> Prefix(const std::vector<std::string>& v, size_t n) {
  return std::vector<std::string>(v.begin(), v.begin() + static_cast<ptrdiff_t>(n));
}

// The index of the record containing byte `offset` (which is past the file header).
size_t RecordAt(const WrittenLog& log, uint64_t offset) {
  size_t k = 0;
  while (k + 1 < log.record_offsets.size() && log.record_offsets[k + 1] <= offset) ++k;
  return k;
}

TEST(LogDamage, TruncatedTrailingRecordIsReportedAsTornTail) {
  const WrittenLog log = WriteLog(SampleEncodings());
  for (size_t cut = 0; cut <= log.bytes.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    ReadResult r = ReadLog(log.bytes.substr(0, cut));
    EXPECT_TRUE(r.status.ok());
    if (cut < kFileHeaderBytes) {
      EXPECT_TRUE(r.payloads.empty());
      ASSERT_EQ(r.reports.size(), 1u);
      EXPECT_EQ(r.reports[0].kind, DamageKind::kTornTail);
      EXPECT_EQ(r.reports[0].offset, 0u);
      continue;
    }
    size_t complete = 0;
    bool at_boundary = cut == kFileHeaderBytes;
    for (size_t k = 0; k < log.payloads.size(); ++k) {
      uint64_t end = log.record_offsets[k] + kRecordHeaderBytes + log.payloads[k].size();
      if (end <= cut) complete = k + 1;
      if (end == cut) at_boundary = true;
    }
    EXPECT_EQ(r.payloads, Prefix(log.payloads, complete));
    if (at_boundary) {
      EXPECT_TRUE(r.reports.empty());
    } else {
      ASSERT_EQ(r.reports.size(), 1u);
      EXPECT_EQ(r.reports[0].kind, DamageKind::kTornTail);
      EXPECT_EQ(r.reports[0].offset, log.record_offsets[complete]);
      EXPECT_EQ(r.reports[0].file, "wal-0000000000000001.log");
    }
  }
}

TEST(LogDamage, TruncationInASegmentThatIsNotTheLastIsCorruption) {
  const WrittenLog log = WriteLog(SampleEncodings());
  const uint64_t cut = log.record_offsets[3] + 5;
  ReadResult r = ReadLog(log.bytes.substr(0, cut), /*last_file=*/false);
  EXPECT_EQ(r.payloads, Prefix(log.payloads, 3));
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].kind, DamageKind::kCorruption);
  EXPECT_EQ(r.reports[0].offset, log.record_offsets[3]);
}

TEST(LogDamage, FlippedByteInMiddleRecordIsCorruptionWithOffset) {
  const WrittenLog log = WriteLog(SampleEncodings());
  for (size_t i = kFileHeaderBytes; i < log.bytes.size(); ++i) {
    SCOPED_TRACE("flipped byte " + std::to_string(i));
    std::string damaged = log.bytes;
    FlipByte(&damaged, i);
    ReadResult r = ReadLog(damaged);
    const size_t k = RecordAt(log, i);
    EXPECT_EQ(r.payloads, Prefix(log.payloads, k));
    ASSERT_EQ(r.reports.size(), 1u);
    EXPECT_EQ(r.reports[0].offset, log.record_offsets[k]);
    EXPECT_EQ(r.reports[0].file, "wal-0000000000000001.log");
    const bool in_length_field = i - log.record_offsets[k] < 4;
    // A length damaged to point past the end of the last file looks exactly like a tear
    // (the documented limit); every other flip is corruption.
    if (!in_length_field) {
      EXPECT_EQ(r.reports[0].kind, DamageKind::kCorruption);
    }
  }
}

TEST(LogDamage, FlippedByteInFileHeaderIsCorruptionAtOffsetZero) {
  const WrittenLog log = WriteLog(SampleEncodings());
  for (size_t i = 0; i < kFileHeaderBytes; ++i) {
    std::string damaged = log.bytes;
    FlipByte(&damaged, i);
    ReadResult r = ReadLog(damaged);
    EXPECT_TRUE(r.payloads.empty()) << i;
    ASSERT_EQ(r.reports.size(), 1u) << i;
    EXPECT_EQ(r.reports[0].kind, DamageKind::kCorruption) << i;
    EXPECT_EQ(r.reports[0].offset, 0u) << i;
  }
}

TEST(LogDamage, ChecksumMismatchInTheLastRecordIsCorruptionNotATornTail) {
  const WrittenLog log = WriteLog(SampleEncodings());
  std::string damaged = log.bytes;
  FlipByte(&damaged, damaged.size() - 1);
  ReadResult r = ReadLog(damaged);
  EXPECT_EQ(r.payloads, Prefix(log.payloads, log.payloads.size() - 1));
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].kind, DamageKind::kCorruption);
  EXPECT_EQ(r.reports[0].reason, "record checksum mismatch");
  EXPECT_EQ(r.reports[0].offset, log.record_offsets.back());
}

TEST(LogDamage, RecordLengthOfTwoToTheThirtyTwoMinusOneIsRejectedBeforeAllocating) {
  WrittenLog log = WriteLog({"first", "second"});
  log.bytes.replace(log.record_offsets[1], 4, "\xff\xff\xff\xff");
  auto file = std::make_unique<StringSequentialFile>(log.bytes);
  StringSequentialFile* file_view = file.get();
  RecordingReporter reporter;
  LogReader reader(std::move(file), "wal-0000000000000001.log", &reporter, {});
  LogReader::Record record;
  size_t largest = 0;
  bool first = false, second = false;
  {
    AllocationTracker tracker;
    first = reader.ReadRecord(&record);
    second = reader.ReadRecord(&record);
    largest = tracker.largest();
  }
  EXPECT_TRUE(first);
  EXPECT_FALSE(second);
  ASSERT_EQ(reporter.reports.size(), 1u);
  EXPECT_EQ(reporter.reports[0].kind, DamageKind::kCorruption);
  EXPECT_EQ(reporter.reports[0].reason, "record length exceeds the maximum");
  EXPECT_EQ(reporter.reports[0].offset, log.record_offsets[1]);
  EXPECT_LT(largest, size_t{1} << 20);
  EXPECT_LE(file_view->largest_read(), size_t{64} << 10);
}

TEST(LogDamage, LengthJustAboveTheMaximumIsCorruption) {
  WrittenLog log = WriteLog({"only"});
  std::string length;
  PutFixed32(&length, kMaxRecordBytes + 1);
  log.bytes.replace(log.record_offsets[0], 4, length);
  ReadResult r = ReadLog(log.bytes);
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].kind, DamageKind::kCorruption);
  EXPECT_EQ(r.reports[0].reason, "record length exceeds the maximum");
}

TEST(LogDamage, MaximumLengthWithFewBytesPresentIsTornTailWithoutLargeAllocation) {
  WrittenLog log = WriteLog({"first", "second"});
  std::string length;
  PutFixed32(&length, kMaxRecordBytes);
  log.bytes.replace(log.record_offsets[1], 4, length);
  size_t largest = 0;
  ReadResult r;
  {
    AllocationTracker tracker;
    r = ReadLog(log.bytes);
    largest = tracker.largest();
  }
  EXPECT_EQ(r.payloads, std::vector<std::string>{"first"});
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].kind, DamageKind::kTornTail);
  EXPECT_LT(largest, size_t{1} << 20);
}

TEST(LogDamage, UnknownRecordTypeIsCorruption) {
  for (uint8_t type : {0, 3, 200}) {
    WrittenLog log = WriteLog({"first", "second", "third"});
    log.bytes[log.record_offsets[1] + 4] = static_cast<char>(type);
    FixRecordChecksum(&log.bytes, log.record_offsets[1], 1);
    ReadResult r = ReadLog(log.bytes);
    EXPECT_EQ(r.payloads, std::vector<std::string>{"first"});
    ASSERT_EQ(r.reports.size(), 1u);
    EXPECT_EQ(r.reports[0].kind, DamageKind::kCorruption);
    EXPECT_EQ(r.reports[0].reason, "unknown record type");
    EXPECT_EQ(r.reports[0].offset, log.record_offsets[1]);
  }
}

TEST(LogDamage, RecordCopiedFromAnotherSegmentFailsItsChecksum) {
  const WrittenLog one = WriteLog({"from segment one"}, /*segment=*/1);
  WrittenLog two = WriteLog({"a", "b"}, /*segment=*/2, /*lsn=*/1);
  two.bytes.append(one.bytes.substr(one.record_offsets[0]));
  ReadResult r = ReadLog(two.bytes);
  EXPECT_EQ(r.payloads, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.lsns, (std::vector<uint64_t>{1, 2}));
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].reason, "record checksum mismatch");
}

TEST(LogDamage, ZeroedTailOfTheLastSegmentIsTornTail) {
  WrittenLog log = WriteLog({"first", "second"});
  const uint64_t end = log.bytes.size();
  log.bytes.append(100'000, '\0');
  ReadResult r = ReadLog(log.bytes);
  EXPECT_EQ(r.payloads, (std::vector<std::string>{"first", "second"}));
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].kind, DamageKind::kTornTail);
  EXPECT_EQ(r.reports[0].offset, end);

  ReadResult not_last = ReadLog(log.bytes, /*last_file=*/false);
  ASSERT_EQ(not_last.reports.size(), 1u);
  EXPECT_EQ(not_last.reports[0].kind, DamageKind::kCorruption);
}

TEST(LogDamage, ZeroedRegionFollowedByDataIsCorruption) {
  WrittenLog log = WriteLog({"first"});
  const uint64_t end = log.bytes.size();
  log.bytes.append(50, '\0');
  log.bytes.append("junk");
  ReadResult r = ReadLog(log.bytes);
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].kind, DamageKind::kCorruption);
  EXPECT_EQ(r.reports[0].offset, end);
}

TEST(LogDamage, EmptyOrZeroedLastSegmentIsTornTailAndEmptyEarlierSegmentIsCorruption) {
  ReadResult empty = ReadLog("");
  ASSERT_EQ(empty.reports.size(), 1u);
  EXPECT_EQ(empty.reports[0].kind, DamageKind::kTornTail);
  ReadResult zeroed = ReadLog(std::string(4096, '\0'));
  ASSERT_EQ(zeroed.reports.size(), 1u);
  EXPECT_EQ(zeroed.reports[0].kind, DamageKind::kTornTail);
  ReadResult earlier = ReadLog("", /*last_file=*/false);
  ASSERT_EQ(earlier.reports.size(), 1u);
  EXPECT_EQ(earlier.reports[0].kind, DamageKind::kCorruption);
}

TEST(LogDamage, UnsupportedVersionIsCorruption) {
  std::string bytes;
  FileHeader header;
  header.version = kFormatVersion + 1;
  AppendFileHeader(header, &bytes);
  ReadResult r = ReadLog(bytes);
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].kind, DamageKind::kCorruption);
  EXPECT_EQ(r.reports[0].reason, "unsupported format version");
}

TEST(LogDamage, HeaderFileNumberMustMatchTheFileName) {
  const WrittenLog log = WriteLog({"x"}, /*segment=*/5);
  EXPECT_TRUE(ReadLog(log.bytes, true, 5).reports.empty());
  ReadResult r = ReadLog(log.bytes, true, 6);
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].reason, "file number in header does not match file name");
}

TEST(LogDamage, SnapshotMagicIsNotASegment) {
  std::string bytes;
  FileHeader header;
  header.magic = kSnapshotMagic;
  AppendFileHeader(header, &bytes);
  ReadResult r = ReadLog(bytes);
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].reason, "bad file magic");
}

TEST(LogDamage, ValidBytesIsWhereATornTailIsCut) {
  const WrittenLog log = WriteLog({"first", "second", "third"});
  RecordingReporter reporter;
  LogReader reader(
      std::make_unique<StringSequentialFile>(log.bytes.substr(0, log.bytes.size() - 2)),
      "wal-0000000000000001.log", &reporter, {});
  LogReader::Record record;
  while (reader.ReadRecord(&record)) {
  }
  EXPECT_EQ(reader.valid_bytes(), log.record_offsets[2]);
  EXPECT_EQ(reader.next_lsn(), 2u);
  ASSERT_TRUE(reader.damage().has_value());
  EXPECT_EQ(ToString(*reader.damage()), "wal-0000000000000001.log at offset " +
                                            std::to_string(log.record_offsets[2]) +
                                            ": torn tail: truncated record payload");
  // Reading on after damage returns nothing and reports nothing more.
  EXPECT_FALSE(reader.ReadRecord(&record));
  EXPECT_EQ(reporter.reports.size(), 1u);
}

}  // namespace
}  // namespace sundial::wal::test
