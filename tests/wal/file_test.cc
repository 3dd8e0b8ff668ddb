// File systems: the POSIX and in-memory implementations behave alike, and the fault-injecting
// wrapper fails on demand and, on a simulated crash, keeps exactly the synced prefix.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/wal/wal_test_util.h"
#include "wal/fault_injection_file_system.h"
#include "wal/group_commit_log.h"
#include "wal/log_format.h"

namespace sundial::wal::test {
namespace {

class FileSystemContract : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      fs_ = NewPosixFileSystem();
      dir_ = temp_.path();
    } else {
      fs_ = NewMemoryFileSystem();
      dir_ = "mem";
      ASSERT_TRUE(fs_->CreateDir(dir_).ok());
    }
  }
  std::string Path(std::string_view name) const { return JoinPath(dir_, name); }

  TempDir temp_;
  std::unique_ptr<FileSystem> fs_;
  std::string dir_;
};

TEST_P(FileSystemContract, WrittenBytesReadBackAcrossTheWriteBuffer) {
  std::string big(200'000, 'b');
  auto file = fs_->NewWritableFile(Path("a"));
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Append("hello ").ok());
  ASSERT_TRUE((*file)->Append(big).ok());
  ASSERT_TRUE((*file)->Append("end").ok());
  ASSERT_TRUE((*file)->Sync().ok());
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ((*file)->Append("x").code(), Code::kFailedPrecondition);
  auto contents = ReadFileToString(fs_.get(), Path("a"));
  ASSERT_TRUE(contents.ok());
  EXPECT_EQ(*contents, "hello " + big + "end");
  EXPECT_EQ(*fs_->FileSize(Path("a")), contents->size());
}

// A reader of a file still being written reads up to the limit and no further, then on from
// there once the limit moves (a primary's WalTail over the active segment).
TEST_P(FileSystemContract, ReadsStopAtTheReadLimitUntilItMoves) {
  std::string contents;
  for (int i = 0; i < 400'000; ++i) contents.push_back(static_cast<char>('a' + i % 26));
  ASSERT_TRUE(WriteStringToFile(fs_.get(), Path("a"), contents).ok());
  auto file = fs_->NewSequentialFile(Path("a"));
  ASSERT_TRUE(file.ok());
  std::string scratch(contents.size(), '\0');
  std::string_view got;
  (*file)->SetReadLimit(100);
  ASSERT_TRUE((*file)->Read(10, scratch.data(), &got).ok());
  EXPECT_EQ(got, contents.substr(0, 10));
  ASSERT_TRUE((*file)->Read(4096, scratch.data(), &got).ok());
  EXPECT_EQ(got, contents.substr(10, 90));  // as if the file ended at 100
  ASSERT_TRUE((*file)->Read(4096, scratch.data(), &got).ok());
  EXPECT_TRUE(got.empty());
  (*file)->SetReadLimit(300'000);
  ASSERT_TRUE((*file)->Skip(50).ok());
  ASSERT_TRUE((*file)->Read(contents.size(), scratch.data(), &got).ok());
  EXPECT_EQ(got, contents.substr(150, 300'000 - 150));
  (*file)->SetReadLimit(contents.size());
  ASSERT_TRUE((*file)->Read(contents.size(), scratch.data(), &got).ok());
  EXPECT_EQ(got, contents.substr(300'000));
}

TEST_P(FileSystemContract, AppendableFileContinuesAtTheEnd) {
  ASSERT_TRUE(WriteStringToFile(fs_.get(), Path("a"), "one").ok());
  auto file = fs_->NewAppendableFile(Path("a"));
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Append("two").ok());
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ(*ReadFileToString(fs_.get(), Path("a")), "onetwo");
}

TEST_P(FileSystemContract, RenameListTruncateAndRemove) {
  ASSERT_TRUE(WriteStringToFile(fs_.get(), Path("b.tmp"), "snapshot").ok());
  ASSERT_TRUE(WriteStringToFile(fs_.get(), Path("a"), "segment").ok());
  ASSERT_TRUE(fs_->RenameFile(Path("b.tmp"), Path("b")).ok());
  EXPECT_FALSE(fs_->FileExists(Path("b.tmp")));
  EXPECT_EQ(*fs_->ListDir(dir_), (std::vector<std::string>{"a", "b"}));
  ASSERT_TRUE(fs_->TruncateFile(Path("a"), 3).ok());
  EXPECT_EQ(*ReadFileToString(fs_.get(), Path("a")), "seg");
  ASSERT_TRUE(fs_->RemoveFile(Path("a")).ok());
  ASSERT_TRUE(fs_->SyncDir(dir_).ok());
  EXPECT_EQ(*fs_->ListDir(dir_), (std::vector<std::string>{"b"}));
  EXPECT_EQ(fs_->RemoveFile(Path("a")).code(), Code::kNotFound);
  EXPECT_EQ(fs_->NewSequentialFile(Path("a")).status().code(), Code::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(PosixAndMemory, FileSystemContract, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Posix" : "Memory";
                         });

// ---- Fault injection --------------------------------------------------------------------------

class FaultInjection : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      base_ = NewPosixFileSystem();
      dir_ = temp_.path();
    } else {
      base_ = NewMemoryFileSystem();
      dir_ = "mem";
    }
    fs_ = std::make_unique<FaultInjectionFileSystem>(base_.get());
    path_ = JoinPath(dir_, SegmentFileName(1));
  }

  std::unique_ptr<LogWriter> NewWriter() {
    auto file = fs_->NewWritableFile(path_);
    EXPECT_TRUE(file.ok());
    auto writer = std::make_unique<LogWriter>(std::move(file).value(),
                                              FileHeader{.file_number = 1, .lsn = 0});
    EXPECT_TRUE(writer->WriteHeader().ok());
    return writer;
  }

  ReadResult ReadBack() {
    auto contents = ReadFileToString(fs_.get(), path_);
    EXPECT_TRUE(contents.ok());
    return ReadLog(contents.ok() ? *contents : "");
  }

  TempDir temp_;
  std::unique_ptr<FileSystem> base_;
  std::unique_ptr<FaultInjectionFileSystem> fs_;
  std::string dir_;
  std::string path_;
};

TEST_P(FaultInjection, CrashKeepsExactlyTheSyncedPrefix) {
  auto writer = NewWriter();
  const std::vector<std::string> encodings = SampleEncodings();
  for (size_t i = 0; i < 5; ++i)
    ASSERT_TRUE(writer->AddRecord(RecordType::kEffect, encodings[i]).ok());
  ASSERT_TRUE(writer->Sync().ok());
  const uint64_t synced = writer->bytes_written();
  for (size_t i = 5; i < encodings.size(); ++i) {
    ASSERT_TRUE(writer->AddRecord(RecordType::kEffect, encodings[i]).ok());
  }
  ASSERT_TRUE(writer->Flush().ok());
  EXPECT_GT(*fs_->FileSize(path_), synced);
  EXPECT_EQ(fs_->SyncedBytes(path_), synced);

  ASSERT_TRUE(fs_->SimulateCrash().ok());
  EXPECT_EQ(*fs_->FileSize(path_), synced);
  ReadResult r = ReadBack();
  EXPECT_EQ(r.payloads, std::vector<std::string>(encodings.begin(), encodings.begin() + 5));
  EXPECT_TRUE(r.reports.empty());  // synced up to a record boundary: a clean end
  // The writer's file is gone with the crash.
  EXPECT_EQ(writer->AddRecord(RecordType::kEffect, "late").code(), Code::kUnavailable);
}

TEST_P(FaultInjection, FileNeverSyncedSurvivesACrashEmptyAsATornTail) {
  auto writer = NewWriter();
  ASSERT_TRUE(writer->AddRecord(RecordType::kEffect, "lost").ok());
  ASSERT_TRUE(writer->Flush().ok());
  ASSERT_TRUE(fs_->SimulateCrash().ok());
  EXPECT_TRUE(fs_->FileExists(path_));
  ReadResult r = ReadBack();
  EXPECT_TRUE(r.payloads.empty());
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].kind, DamageKind::kTornTail);
  EXPECT_EQ(r.reports[0].reason, "empty file");
}

TEST_P(FaultInjection, ShortWriteLeavesATornTailAfterTheGoodRecords) {
  auto writer = NewWriter();
  ASSERT_TRUE(writer->AddRecord(RecordType::kEffect, "first").ok());
  const uint64_t second_at = writer->bytes_written();
  fs_->ShortenNextAppend(7);  // 7 of the 13 record header bytes reach the file
  EXPECT_EQ(writer->AddRecord(RecordType::kEffect, "second").code(), Code::kInternal);
  EXPECT_EQ(writer->AddRecord(RecordType::kEffect, "third").code(), Code::kInternal);
  ReadResult r = ReadBack();
  EXPECT_EQ(r.payloads, std::vector<std::string>{"first"});
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].kind, DamageKind::kTornTail);
  EXPECT_EQ(r.reports[0].offset, second_at);
}

TEST_P(FaultInjection, NoSpaceWritesNothing) {
  auto writer = NewWriter();
  ASSERT_TRUE(writer->Flush().ok());
  const uint64_t size = *fs_->FileSize(path_);
  fs_->FailNextAppendWithNoSpace();
  EXPECT_EQ(writer->AddRecord(RecordType::kEffect, "x").code(), Code::kResourceExhausted);
  EXPECT_EQ(*fs_->FileSize(path_), size);
}

TEST_P(FaultInjection, FailedSyncMakesNothingDurable) {
  auto writer = NewWriter();
  ASSERT_TRUE(writer->AddRecord(RecordType::kEffect, "first").ok());
  ASSERT_TRUE(writer->Sync().ok());
  const uint64_t synced = writer->bytes_written();
  ASSERT_TRUE(writer->AddRecord(RecordType::kEffect, "second").ok());
  fs_->FailNextSyncWithIoError();
  EXPECT_EQ(writer->Sync().code(), Code::kInternal);
  EXPECT_EQ(fs_->SyncedBytes(path_), synced);
  ASSERT_TRUE(fs_->SimulateCrash().ok());
  EXPECT_EQ(ReadBack().payloads, std::vector<std::string>{"first"});
}

TEST_P(FaultInjection, RenamedFileKeepsItsSyncedSize) {
  const std::string tmp = JoinPath(dir_, SnapshotFileName(9) + std::string(kTempSuffix));
  const std::string final_path = JoinPath(dir_, SnapshotFileName(9));
  auto file = fs_->NewWritableFile(tmp);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Append("durable").ok());
  ASSERT_TRUE((*file)->Sync().ok());
  ASSERT_TRUE((*file)->Append("-lost").ok());
  ASSERT_TRUE(fs_->RenameFile(tmp, final_path).ok());
  ASSERT_TRUE(fs_->SimulateCrash().ok());
  EXPECT_EQ(*ReadFileToString(fs_.get(), final_path), "durable");
}

INSTANTIATE_TEST_SUITE_P(OverPosixAndMemory, FaultInjection, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Posix" : "Memory";
                         });

// Preallocation (WritableFile::SetPreallocation): zeroes are written ahead of the end in whole
// chunks, so a Sync does not change the file's size; Close cuts them off.
// Issue 14: file errors kept no errno, so EIO and EROFS read the same ("wal: fdatasync failed").
TEST(PosixErrors, KeepTheErrnoSoEioAndErofsReadDifferently) {
  const Status eio = PosixError("wal: fdatasync failed", EIO);
  const Status erofs = PosixError("wal: fdatasync failed", EROFS);
  EXPECT_EQ(eio.sys_errno(), EIO);
  EXPECT_EQ(erofs.sys_errno(), EROFS);
  EXPECT_EQ(eio.Message(), "wal: fdatasync failed: Input/output error (EIO)");
  EXPECT_EQ(erofs.Message(), "wal: fdatasync failed: Read-only file system (EROFS)");
  EXPECT_EQ(erofs.ToString(), "INTERNAL: " + erofs.Message());
  EXPECT_EQ(PosixError("wal: write failed", ENOSPC).code(), Code::kResourceExhausted);
  EXPECT_EQ(PosixError("wal: stat failed", ENOENT).code(), Code::kNotFound);
  // Errors that are not from a system call read as before.
  EXPECT_EQ(Status(Code::kUnavailable, "wal: the log is closed").Message(),
            "wal: the log is closed");
  EXPECT_EQ(Status::Ok().ToString(), "OK");
}

TEST(PosixErrors, TheRealFileSystemReportsTheErrnoOfTheFailedCall) {
  TempDir dir;
  auto fs = NewPosixFileSystem();
  auto missing = fs->NewSequentialFile(dir.path() + "/missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().sys_errno(), ENOENT);
  EXPECT_NE(missing.status().Message().find("No such file or directory"), std::string::npos);
  // A directory cannot be opened for writing, even by root.
  auto directory = fs->NewWritableFile(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().sys_errno(), EISDIR);
  EXPECT_NE(directory.status().Message().find("Is a directory (EISDIR)"), std::string::npos)
      << directory.status().Message();
}

// Preallocation on real files: a file `f` in a fresh directory, preallocated 4 KiB at a time.
class PosixPreallocation : public testing::Test {
 protected:
  std::unique_ptr<WritableFile> Open() {
    auto file = fs->NewWritableFile(path);
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    if (!file.ok()) return nullptr;
    (*file)->SetPreallocation(4096);
    return std::move(file).value();
  }

  TempDir temp;
  std::unique_ptr<FileSystem> fs = NewPosixFileSystem();
  const std::string path = JoinPath(temp.path(), "f");
};

TEST_F(PosixPreallocation, ZeroesAheadInWholeChunksAreCutOffOnClose) {
  auto file = Open();
  ASSERT_NE(file, nullptr);
  ASSERT_TRUE(file->Append(std::string(100, 'a')).ok());
  ASSERT_TRUE(file->Sync().ok());
  EXPECT_EQ(*fs->FileSize(path), 4096u);  // one chunk, the size already on disk
  ASSERT_TRUE(file->Append(std::string(5000, 'b')).ok());
  ASSERT_TRUE(file->Sync().ok());
  EXPECT_EQ(*fs->FileSize(path), 8192u);  // 5100 bytes: two chunks
  ASSERT_TRUE(file->Close().ok());
  EXPECT_EQ(*fs->FileSize(path), 5100u);
  auto in = fs->NewSequentialFile(path);
  ASSERT_TRUE(in.ok());
  std::string scratch(6000, '\0');
  std::string_view got;
  ASSERT_TRUE((*in)->Read(scratch.size(), scratch.data(), &got).ok());
  EXPECT_EQ(std::string(got), std::string(100, 'a') + std::string(5000, 'b'));
}

TEST_F(PosixPreallocation, AppendableFilesIgnoreIt) {
  auto file = fs->NewAppendableFile(path);
  ASSERT_TRUE(file.ok());
  (*file)->SetPreallocation(4096);
  ASSERT_TRUE((*file)->Append("xyz").ok());
  ASSERT_TRUE((*file)->Sync().ok());
  EXPECT_EQ(*fs->FileSize(path), 3u);
  ASSERT_TRUE((*file)->Close().ok());
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// PreallocateAhead (the log's sync thread) moves the allocated end by a chunk; the writer then
// writes into it without preallocating; PreallocationLow says when less than half a chunk is
// left ahead of what was written.
TEST_F(PosixPreallocation, AheadAddsAChunkTheWriterThenWritesInto) {
  auto file = fs->NewWritableFile(path);
  ASSERT_TRUE(file.ok());
  EXPECT_FALSE((*file)->PreallocationLow());  // no preallocation asked for
  (*file)->SetPreallocation(4096);
  ASSERT_TRUE((*file)->Append(std::string(1000, 'a')).ok());
  ASSERT_TRUE((*file)->Flush().ok());
  EXPECT_EQ(*fs->FileSize(path), 4096u);
  EXPECT_FALSE((*file)->PreallocationLow());  // 3096 ahead
  ASSERT_TRUE((*file)->Append(std::string(1500, 'b')).ok());
  ASSERT_TRUE((*file)->Flush().ok());
  EXPECT_TRUE((*file)->PreallocationLow());  // 1596 ahead: under half a chunk
  ASSERT_TRUE((*file)->PreallocateAhead().ok());
  EXPECT_EQ(*fs->FileSize(path), 8192u);
  EXPECT_FALSE((*file)->PreallocationLow());
  ASSERT_TRUE((*file)->Append(std::string(3000, 'c')).ok());
  ASSERT_TRUE((*file)->Flush().ok());
  EXPECT_EQ(*fs->FileSize(path), 8192u);  // written into the chunk ahead: no new one
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ(Slurp(path), std::string(1000, 'a') + std::string(1500, 'b') + std::string(3000, 'c'));
}

// The writer appends while another thread preallocates ahead as fast as it can: the zeroes are
// only ever written past the allocated end, so none lands on a record.
TEST_F(PosixPreallocation, AheadOnAnotherThreadNeverOverwritesRecords) {
  auto file = Open();
  ASSERT_NE(file, nullptr);
  std::atomic<bool> done{false};
  std::atomic<int> aheads{0};
  std::thread ahead([&] {
    while (!done.load() && aheads.load() < 500) {  // at most 2 MB of zeroes
      if (file->PreallocateAhead().ok()) aheads.fetch_add(1);
    }
  });
  std::string expected;
  for (int i = 0; i < 2000; ++i) {
    const std::string record(97 + i % 13, static_cast<char>('a' + i % 26));
    expected += record;
    ASSERT_TRUE(file->Append(record).ok());
    ASSERT_TRUE(file->Flush().ok());
  }
  done.store(true);
  ahead.join();
  EXPECT_GT(aheads.load(), 0);
  ASSERT_TRUE(file->Close().ok());
  EXPECT_EQ(Slurp(path), expected);
}

// The log with preallocated segments: a crash image of the open log (zeroes after the last
// record) reads back every record, with the zeroes reported as a torn tail of the last segment;
// a rotated (sealed) segment and a closed one end exactly at their last record.
TEST_F(PosixPreallocation, TheLogReadsBackFromACrashImageAndSealsSegmentsToSize) {
  LogOptions options;
  options.preallocate_bytes = 64 << 10;
  auto log = GroupCommitLog::Open(fs.get(), temp.path(), options, 0, 1);
  ASSERT_TRUE(log.ok());
  const std::vector<Effect> samples = SampleEffects();
  for (const Effect& e : samples) (*log)->OnEffect(e);
  ASSERT_TRUE((*log)->WaitDurable((*log)->EndLsnOfThisThread()).ok());
  const std::string first = JoinPath(temp.path(), SegmentFileName(1));
  EXPECT_EQ(*fs->FileSize(first), 64u << 10);
  const ReadResult crash = ReadLog(Slurp(first), /*last_file=*/true);
  EXPECT_EQ(crash.payloads.size(), samples.size());
  ASSERT_EQ(crash.reports.size(), 1u);
  EXPECT_EQ(crash.reports[0].kind, DamageKind::kTornTail);

  ASSERT_TRUE((*log)->Rotate().ok());
  for (const Effect& e : samples) (*log)->OnEffect(e);
  ASSERT_TRUE((*log)->Close().ok());
  for (uint64_t number : {uint64_t{1}, uint64_t{2}}) {
    const std::string path = JoinPath(temp.path(), SegmentFileName(number));
    const ReadResult sealed = ReadLog(Slurp(path), /*last_file=*/false, number);
    EXPECT_EQ(sealed.payloads.size(), samples.size()) << path;
    EXPECT_TRUE(sealed.reports.empty()) << path;
    EXPECT_LT(*fs->FileSize(path), 64u << 10) << path;
  }
}

// A primary streams its segments to standbys as the files hold them (replication/wal_tail.h):
// a segment the log just opened (at start, or by a checkpoint's rotation) must show its header
// before its first record is written. It did not (the header waited in the file's buffer), and a
// quiet primary refused every standby with "a segment's header is damaged" until its next write.
TEST_F(PosixPreallocation, ANewSegmentsHeaderIsOnDiskBeforeItsFirstRecord) {
  LogOptions options;
  options.preallocate_bytes = 64 << 10;
  auto log = GroupCommitLog::Open(fs.get(), temp.path(), options, 7, 1);
  ASSERT_TRUE(log.ok());
  const auto header_of = [&](uint64_t number) {
    const std::string bytes = Slurp(JoinPath(temp.path(), SegmentFileName(number)));
    FileHeader parsed;
    EXPECT_GE(bytes.size(), kFileHeaderBytes) << "segment " << number;
    if (bytes.size() < kFileHeaderBytes) return parsed;
    EXPECT_EQ(ParseFileHeader(std::string_view(bytes).substr(0, kFileHeaderBytes), kSegmentMagic,
                              &parsed),
              HeaderError::kNone);
    return parsed;
  };
  EXPECT_EQ(header_of(1).lsn, 7u);
  for (const Effect& e : SampleEffects()) (*log)->OnEffect(e);
  auto rotated = (*log)->Rotate();
  ASSERT_TRUE(rotated.ok());
  EXPECT_EQ(header_of(2).lsn, rotated->lsn) << "a rotation's new segment, before any record";
  ASSERT_TRUE((*log)->Close().ok());
}

}  // namespace
}  // namespace sundial::wal::test
