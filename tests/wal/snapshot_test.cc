// Snapshots (docs/wal-format.md "Snapshots"): a written snapshot loads to the same digest; a
// snapshot is accepted only whole — every record checks, the trailer is last, its count and
// digest match the loaded state, and its name matches its header.
#include <gtest/gtest.h>

#include "tests/wal/recovery_test_util.h"
#include "tests/wal/wal_test_util.h"
#include "wal/snapshot.h"

namespace sundial::wal::test {
namespace {

const std::string kDir = "data";

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RandomOps workload(21);
    workload.Setup(engine_);
    workload.Run(engine_, clock_, 1'500);
    auto info = WriteSnapshot(fs_.get(), kDir, engine_, 777);
    ASSERT_TRUE(info.ok());
    info_ = *info;
    path_ = JoinPath(kDir, info_.file);
    bytes_ = *ReadFileToString(fs_.get(), path_);
  }

  // Loads `file` into a fresh engine; returns its status and sets damage_ (the one report).
  Status Load(const std::string& file) {
    Engine engine(TestEngineOptions(), &clock_, nullptr);
    RecordingReporter reporter;
    auto r = LoadSnapshot(fs_.get(), kDir, file, &engine, &reporter);
    if (r.ok()) loaded_digest_ = engine.Digest();
    EXPECT_LE(reporter.reports.size(), 1u) << "damage is reported once";
    damage_.reset();
    if (!reporter.reports.empty()) {
      damage_ = reporter.reports.front();
      // The error says what the report says.
      EXPECT_EQ(r.status().detail(), "wal: damaged snapshot: " + ToString(*damage_));
    }
    return r.status();
  }
  // Rewrites the file with `bytes`.
  void Put(const std::string& bytes) {
    ASSERT_TRUE(WriteStringToFile(fs_.get(), path_, bytes).ok());
  }
  // Offset of the trailer record (the last one).
  uint64_t TrailerOffset() const { return bytes_.size() - kRecordHeaderBytes - 16; }

  std::unique_ptr<FileSystem> fs_ = NewMemoryFileSystem();
  ManualClock clock_{kStartTime};
  Engine engine_{TestEngineOptions(), &clock_, nullptr};
  SnapshotInfo info_;
  std::string path_, bytes_;
  std::optional<Corruption> damage_;
  uint64_t loaded_digest_ = 0;
};

TEST_F(SnapshotTest, AWrittenSnapshotLoadsToTheSameDigest) {
  EXPECT_EQ(info_.file, SnapshotFileName(777));
  EXPECT_EQ(info_.bytes, bytes_.size());
  EXPECT_EQ(info_.digest, engine_.Digest());
  EXPECT_GT(info_.effects, 100u);
  ASSERT_TRUE(Load(info_.file).ok());
  EXPECT_EQ(loaded_digest_, engine_.Digest());
  EXPECT_FALSE(damage_);
  EXPECT_FALSE(fs_->FileExists(path_ + ".tmp"));
}

TEST_F(SnapshotTest, TheTrailerCountMustMatch) {
  std::string bytes = bytes_;
  std::string count;
  PutFixed64(&count, info_.effects + 1);
  bytes.replace(TrailerOffset() + kRecordHeaderBytes, 8, count);
  FixRecordChecksum(&bytes, TrailerOffset(), 777);
  Put(bytes);
  EXPECT_EQ(Load(info_.file).code(), Code::kInternal);
  ASSERT_TRUE(damage_);
  EXPECT_EQ(damage_->offset, TrailerOffset());
  EXPECT_NE(damage_->reason.find("count"), std::string::npos);
}

TEST_F(SnapshotTest, TheTrailerDigestMustMatch) {
  std::string bytes = bytes_;
  FlipByte(&bytes, TrailerOffset() + kRecordHeaderBytes + 8);
  FixRecordChecksum(&bytes, TrailerOffset(), 777);
  Put(bytes);
  EXPECT_EQ(Load(info_.file).code(), Code::kInternal);
  ASSERT_TRUE(damage_);
  EXPECT_NE(damage_->reason.find("digest"), std::string::npos);
}

TEST_F(SnapshotTest, ASnapshotWithoutItsTrailerIsRefused) {
  Put(bytes_.substr(0, TrailerOffset()));
  EXPECT_EQ(Load(info_.file).code(), Code::kInternal);
  ASSERT_TRUE(damage_);
  EXPECT_NE(damage_->reason.find("trailer"), std::string::npos);
}

TEST_F(SnapshotTest, ATruncatedSnapshotIsCorruptionNotATornTail) {
  for (size_t cut : {bytes_.size() - 1, bytes_.size() / 2, size_t{40}, size_t{10}}) {
    Put(bytes_.substr(0, cut));
    EXPECT_EQ(Load(info_.file).code(), Code::kInternal) << cut;
    ASSERT_TRUE(damage_) << cut;
    EXPECT_EQ(damage_->kind, DamageKind::kCorruption) << cut;
  }
}

TEST_F(SnapshotTest, ARecordAfterTheTrailerIsRefused) {
  std::string bytes = bytes_;
  std::string payload = Encode(SampleEffects()[0]);
  PutFixed32(&bytes, static_cast<uint32_t>(payload.size()));
  bytes.push_back(static_cast<char>(RecordType::kEffect));
  PutFixed64(&bytes, RecordChecksum(static_cast<uint8_t>(RecordType::kEffect), 777, payload));
  bytes += payload;
  Put(bytes);
  EXPECT_EQ(Load(info_.file).code(), Code::kInternal);
  ASSERT_TRUE(damage_);
  EXPECT_EQ(damage_->offset, bytes_.size());
}

TEST_F(SnapshotTest, AFlippedByteInAnyRecordIsFoundAtThatRecord) {
  LogReader::Options options;
  options.magic = kSnapshotMagic;
  LogReader reader(std::make_unique<StringSequentialFile>(bytes_), "s", nullptr, options);
  std::vector<uint64_t> offsets;
  LogReader::Record record;
  while (reader.ReadRecord(&record)) offsets.push_back(record.offset);
  ASSERT_EQ(offsets.size(), info_.effects + 1);
  for (size_t i = 0; i < offsets.size(); i += std::max<size_t>(1, offsets.size() / 40)) {
    std::string bytes = bytes_;
    FlipByte(&bytes, offsets[i] + kRecordHeaderBytes);
    Put(bytes);
    EXPECT_EQ(Load(info_.file).code(), Code::kInternal) << i;
    ASSERT_TRUE(damage_);
    EXPECT_EQ(damage_->offset, offsets[i]);
  }
}

TEST_F(SnapshotTest, ARenamedSnapshotFailsItsHeaderCheck) {
  const std::string other = SnapshotFileName(778);
  ASSERT_TRUE(fs_->RenameFile(path_, JoinPath(kDir, other)).ok());
  EXPECT_EQ(Load(other).code(), Code::kInternal);
  ASSERT_TRUE(damage_);
  EXPECT_EQ(damage_->offset, 0u);
}

TEST_F(SnapshotTest, AnEmptyEngineMakesAValidSnapshot) {
  Engine empty(TestEngineOptions(), &clock_, nullptr);
  auto info = WriteSnapshot(fs_.get(), kDir, empty, 5);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->effects, 0u);
  ASSERT_TRUE(Load(SnapshotFileName(5)).ok());
  EXPECT_EQ(loaded_digest_, empty.Digest());
}

}  // namespace
}  // namespace sundial::wal::test
