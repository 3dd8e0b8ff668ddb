// WalTail reads a live log on a real disk (replication/wal_tail.h): records appear as the log
// writes them, even though the file's read-ahead saw the segment's preallocated zeroes or a
// record half written first; the tail follows rotations; it refuses an LSN a checkpoint removed.
#include "replication/wal_tail.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/wal/forwarding_file_system.h"
#include "tests/wal/wal_test_util.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"

namespace sundial::replication {
namespace {

// A directory listing taken just before a checkpoint removed some segments: ListDir still
// names `removed`, which no longer exist. Counts the files opened for reading.
class StaleListing : public wal::test::ForwardingFileSystem {
 public:
  explicit StaleListing(wal::FileSystem* base) : ForwardingFileSystem(base) {}
  std::vector<std::string> removed;
  int opened = 0;  // NewSequentialFile calls

  Result<std::unique_ptr<wal::SequentialFile>> NewSequentialFile(const std::string& p) override {
    ++opened;
    return base()->NewSequentialFile(p);
  }
  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    auto names = base()->ListDir(dir);
    if (!names.ok()) return names;
    std::vector<std::string> all = *names;
    all.insert(all.end(), removed.begin(), removed.end());
    std::sort(all.begin(), all.end());
    return all;
  }
};

class WalTailTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("sundial-wal-tail-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    wal::LogOptions options;
    options.preallocate_bytes = 1u << 20;  // zeroes ahead of the records, as in production
    auto log = wal::GroupCommitLog::Open(fs_.get(), dir_, options, 0, 1);
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    log_ = std::move(log).value();
  }
  void TearDown() override {
    if (log_) (void)log_->Close();
    std::filesystem::remove_all(dir_);
  }
  void Append(int n) {
    for (int i = 0; i < n; ++i) {
      const std::string queue = "q" + std::to_string(log_->AppendedEndLsn());
      Effect e;
      e.type = EffectType::kQueueDeleted;
      e.time = 1;
      e.queue = queue;  // a view: the string outlives OnEffect
      log_->OnEffect(e);
    }
    ASSERT_TRUE(log_->WaitDurable(log_->AppendedEndLsn()).ok());
  }
  // Reads every record the log wrote; returns how many.
  uint64_t ReadAll(WalTail* tail) {
    uint64_t records = 0;
    WalTail::Chunk chunk;
    for (;;) {
      Status s = tail->Read(log_->Written(), 1u << 20, &chunk);
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (!s.ok() || chunk.count == 0) return records;
      records += chunk.count;
    }
  }

  std::unique_ptr<wal::FileSystem> fs_ = wal::NewPosixFileSystem();
  std::string dir_;
  std::unique_ptr<wal::GroupCommitLog> log_;
};

TEST_F(WalTailTest, RecordsWrittenAfterTheReadAheadSawZeroesAreRead) {
  Append(1);
  WalTail tail(fs_.get(), dir_);
  ASSERT_TRUE(tail.Seek(0).ok());
  EXPECT_EQ(ReadAll(&tail), 1u);  // its read-ahead now holds the zeroes after record 0
  for (int round = 0; round < 20; ++round) {
    Append(round + 1);
    EXPECT_EQ(ReadAll(&tail), static_cast<uint64_t>(round + 1)) << round;
    EXPECT_EQ(tail.position(), log_->AppendedEndLsn());
  }
}

// Following the active segment costs the bytes written since the last read: the tail reads
// up to the log's written position, never into the preallocated zeroes, so it has no stale
// read-ahead to drop and opens the segment once, not once per read.
TEST_F(WalTailTest, FollowingTheActiveSegmentOpensItOnce) {
  Append(1);
  StaleListing counting(fs_.get());
  WalTail tail(&counting, dir_);
  ASSERT_TRUE(tail.Seek(0).ok());
  EXPECT_EQ(ReadAll(&tail), 1u);
  // Seek read ahead before the written position was known: the zeroes it saw are dropped once.
  Append(1);
  EXPECT_EQ(ReadAll(&tail), 1u);
  const int opened = counting.opened;
  for (int round = 0; round < 20; ++round) {
    Append(round + 1);
    EXPECT_EQ(ReadAll(&tail), static_cast<uint64_t>(round + 1)) << round;
  }
  EXPECT_EQ(counting.opened, opened);
  ASSERT_TRUE(log_->Rotate().ok());
  Append(3);
  EXPECT_EQ(ReadAll(&tail), 3u);
  EXPECT_LE(counting.opened, opened + 3);  // the next segment (and the sealed one's end)
}

TEST_F(WalTailTest, TheTailFollowsRotationsAndSeeksIntoAnySegment) {
  Append(3);
  ASSERT_TRUE(log_->Rotate().ok());
  Append(4);
  WalTail tail(fs_.get(), dir_);
  ASSERT_TRUE(tail.Seek(0).ok());
  EXPECT_EQ(ReadAll(&tail), 7u);
  ASSERT_TRUE(log_->Rotate().ok());
  Append(2);
  EXPECT_EQ(ReadAll(&tail), 2u);
  WalTail middle(fs_.get(), dir_);
  ASSERT_TRUE(middle.Seek(5).ok());
  EXPECT_EQ(ReadAll(&middle), 4u);
  auto oldest = middle.OldestLsn();
  ASSERT_TRUE(oldest.ok());
  EXPECT_EQ(*oldest, 0u);
}

TEST_F(WalTailTest, AnLsnNoSegmentHoldsIsNotFound) {
  ASSERT_TRUE(log_->Close().ok());
  log_.reset();
  std::filesystem::remove_all(dir_);
  auto log = wal::GroupCommitLog::Open(fs_.get(), dir_, {}, 40, 5);  // a checkpoint took 0..39
  ASSERT_TRUE(log.ok());
  log_ = std::move(log).value();
  Append(2);
  WalTail tail(fs_.get(), dir_);
  EXPECT_EQ(tail.Seek(10).code(), Code::kNotFound);
  ASSERT_TRUE(tail.Seek(40).ok());
  EXPECT_EQ(ReadAll(&tail), 2u);
}

// A checkpoint removes covered segments while a primary answers a standby's hello: the tail
// sees the removal as "that LSN is gone" (the standby is re-seeded), never as a failure.
TEST_F(WalTailTest, SegmentsRemovedAfterTheListingAreSkipped) {
  Append(3);
  ASSERT_TRUE(log_->Rotate().ok());
  Append(2);
  const std::string first = wal::SegmentFileName(1);
  ASSERT_TRUE(fs_->RemoveFile(wal::JoinPath(dir_, first)).ok());
  StaleListing stale(fs_.get());
  stale.removed.push_back(first);
  WalTail tail(&stale, dir_);
  auto oldest = tail.OldestLsn();
  ASSERT_TRUE(oldest.ok()) << oldest.status().ToString();
  EXPECT_EQ(*oldest, 3u);
  EXPECT_EQ(tail.Seek(1).code(), Code::kNotFound);
  ASSERT_TRUE(tail.Seek(4).ok());
  EXPECT_EQ(ReadAll(&tail), 1u);
}

}  // namespace
}  // namespace sundial::replication
