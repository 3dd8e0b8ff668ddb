// ForwardingFileSystem: a FileSystem whose every call goes to another one, for tests that
// change one or two calls (observe syncs, hang or kill a writer, list files that are gone) and
// keep the rest.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "wal/file.h"

namespace sundial::wal::test {

class ForwardingFileSystem : public FileSystem {
 public:
  // `base` must outlive this object.
  explicit ForwardingFileSystem(FileSystem* base) : base_(base) {}

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return base_->NewWritableFile(path);
  }
  Result<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override {
    return base_->NewAppendableFile(path);
  }
  Result<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) override {
    return base_->NewSequentialFile(path);
  }
  Result<uint64_t> FileSize(const std::string& path) override { return base_->FileSize(path); }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  Status RenameFile(const std::string& from, const std::string& to) override {
    return base_->RenameFile(from, to);
  }
  Status RemoveFile(const std::string& path) override { return base_->RemoveFile(path); }
  Status TruncateFile(const std::string& path, uint64_t size) override {
    return base_->TruncateFile(path, size);
  }
  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    return base_->ListDir(dir);
  }
  Status CreateDir(const std::string& dir) override { return base_->CreateDir(dir); }
  Status SyncDir(const std::string& dir) override { return base_->SyncDir(dir); }

 protected:
  FileSystem* base() const { return base_; }

 private:
  FileSystem* const base_;
};

}  // namespace sundial::wal::test
