// FaultInjectionFileSystem: a FileSystem wrapper for tests that fails on demand and simulates a
// crash (LevelDB's fault_injection_test is the model).
//
// - Faults are one-shot and apply to the next matching call on any file opened through this
//   wrapper: an Append that fails with ENOSPC (kResourceExhausted, nothing written), a short
//   write (the first `keep_bytes` reach the file, then kInternal), a Sync that fails with EIO
//   (kInternal, nothing becomes durable).
// - The wrapper remembers, per file, how many bytes the last successful Sync made durable.
//   SimulateCrash cuts every file it knows back to that size (0 if never synced), so exactly
//   the synced prefix survives, and makes every file object opened before the crash fail.
// - Creates and renames are durable when they return (file.h's contract), so a crash never
//   undoes them; a file created and never synced survives empty.
//
// Thread safety: every method may be called from any thread (one internal mutex).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "engine/mutex.h"
#include "wal/file.h"

namespace sundial::wal {

class FaultInjectionFileSystem final : public FileSystem {
 public:
  // `base` must outlive this object.
  explicit FaultInjectionFileSystem(FileSystem* base) : base_(base) {}

  void FailNextAppendWithNoSpace();
  void ShortenNextAppend(size_t keep_bytes);
  void FailNextSyncWithIoError();

  // Drops every byte written after each file's last successful Sync. Clears pending faults.
  Status SimulateCrash();
  // Bytes of `path` made durable by its last successful Sync (0 for unknown files).
  uint64_t SyncedBytes(const std::string& path);

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Result<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override;
  Result<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) override {
    return base_->NewSequentialFile(path);
  }
  Result<uint64_t> FileSize(const std::string& path) override { return base_->FileSize(path); }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  Status TruncateFile(const std::string& path, uint64_t size) override;
  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    return base_->ListDir(dir);
  }
  Status CreateDir(const std::string& dir) override { return base_->CreateDir(dir); }
  Status SyncDir(const std::string& dir) override { return base_->SyncDir(dir); }

 private:
  friend class FaultInjectionWritableFile;
  struct FileState {
    uint64_t size = 0;    // bytes appended through the wrapper (or present when opened)
    uint64_t synced = 0;  // bytes durable as of the last successful Sync
  };

  Result<std::unique_ptr<WritableFile>> Wrap(const std::string& path,
                                             Result<std::unique_ptr<WritableFile>> base,
                                             uint64_t existing_bytes);

  FileSystem* const base_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<FileState>> files_ GUARDED_BY(mu_);
  uint64_t generation_ GUARDED_BY(mu_) = 0;  // +1 per crash
  bool append_no_space_ GUARDED_BY(mu_) = false;
  std::optional<size_t> short_append_ GUARDED_BY(mu_);
  bool sync_io_error_ GUARDED_BY(mu_) = false;
};

}  // namespace sundial::wal
