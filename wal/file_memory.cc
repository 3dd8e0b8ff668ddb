// In-memory implementation of wal/file.h (tests). Files are shared buffers, so a reader opened
// while a writer appends sees the bytes appended before each Read.
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "engine/mutex.h"
#include "wal/file.h"

namespace sundial::wal {
namespace {

struct MemoryFile {
  Mutex mu;
  std::string contents GUARDED_BY(mu);
};

class MemoryWritableFile final : public WritableFile {
 public:
  explicit MemoryWritableFile(std::shared_ptr<MemoryFile> file) : file_(std::move(file)) {}

  Status Append(std::string_view data) override {
    if (!file_) return FailedPrecondition("wal: append to a closed file");
    MutexLock lock(&file_->mu);
    file_->contents.append(data);
    return Status::Ok();
  }
  Status Flush() override {
    return file_ ? Status::Ok() : FailedPrecondition("wal: flush of a closed file");
  }
  Status Sync() override {
    return file_ ? Status::Ok() : FailedPrecondition("wal: sync of a closed file");
  }
  Status SyncFlushed() override { return Sync(); }
  Status Close() override {
    if (!file_) return FailedPrecondition("wal: file already closed");
    file_.reset();
    return Status::Ok();
  }

 private:
  std::shared_ptr<MemoryFile> file_;
};

class MemorySequentialFile final : public SequentialFile {
 public:
  explicit MemorySequentialFile(std::shared_ptr<MemoryFile> file) : file_(std::move(file)) {}

  Status Read(size_t n, char* scratch, std::string_view* result) override {
    MutexLock lock(&file_->mu);
    const size_t size = std::min<uint64_t>(file_->contents.size(), limit_);
    size_t start = std::min<uint64_t>(pos_, size);
    size_t got = std::min(n, size - start);
    std::copy_n(file_->contents.data() + start, got, scratch);
    pos_ = start + got;
    *result = std::string_view(scratch, got);
    return Status::Ok();
  }
  Status Skip(uint64_t n) override {
    pos_ += n;
    return Status::Ok();
  }
  void SetReadLimit(uint64_t offset) override { limit_ = offset; }

 private:
  std::shared_ptr<MemoryFile> file_;
  uint64_t pos_ = 0;
  uint64_t limit_ = std::numeric_limits<uint64_t>::max();
};

class MemoryFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    MutexLock lock(&mu_);
    auto& file = files_[path];
    if (file) {
      MutexLock file_lock(&file->mu);
      file->contents.clear();
    } else {
      file = std::make_shared<MemoryFile>();
    }
    return std::unique_ptr<WritableFile>(std::make_unique<MemoryWritableFile>(file));
  }

  Result<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override {
    MutexLock lock(&mu_);
    auto& file = files_[path];
    if (!file) file = std::make_shared<MemoryFile>();
    return std::unique_ptr<WritableFile>(std::make_unique<MemoryWritableFile>(file));
  }

  Result<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) override {
    auto file = Find(path);
    if (!file) return NotFound("wal: open for reading failed");
    return std::unique_ptr<SequentialFile>(std::make_unique<MemorySequentialFile>(file));
  }

  Result<uint64_t> FileSize(const std::string& path) override {
    auto file = Find(path);
    if (!file) return NotFound("wal: stat failed");
    MutexLock lock(&file->mu);
    return static_cast<uint64_t>(file->contents.size());
  }

  bool FileExists(const std::string& path) override { return Find(path) != nullptr; }

  Status RenameFile(const std::string& from, const std::string& to) override {
    MutexLock lock(&mu_);
    auto it = files_.find(from);
    if (it == files_.end()) return NotFound("wal: rename failed");
    auto file = it->second;
    files_.erase(it);
    files_[to] = std::move(file);
    return Status::Ok();
  }

  Status RemoveFile(const std::string& path) override {
    MutexLock lock(&mu_);
    return files_.erase(path) ? Status::Ok() : NotFound("wal: unlink failed");
  }

  Status TruncateFile(const std::string& path, uint64_t size) override {
    auto file = Find(path);
    if (!file) return NotFound("wal: truncate failed");
    MutexLock lock(&file->mu);
    file->contents.resize(size, '\0');
    return Status::Ok();
  }

  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    MutexLock lock(&mu_);
    std::set<std::string> names;
    std::string prefix = JoinPath(dir, "");
    for (const auto& [path, file] : files_) {
      if (!path.starts_with(prefix)) continue;
      std::string rest = path.substr(prefix.size());
      names.insert(rest.substr(0, rest.find('/')));
    }
    for (const auto& d : dirs_) {
      if (d.size() > prefix.size() && d.starts_with(prefix)) {
        std::string rest = d.substr(prefix.size());
        names.insert(rest.substr(0, rest.find('/')));
      }
    }
    if (names.empty() && !dirs_.contains(dir)) return NotFound("wal: opendir failed");
    return std::vector<std::string>(names.begin(), names.end());
  }

  Status CreateDir(const std::string& dir) override {
    MutexLock lock(&mu_);
    dirs_.insert(dir);
    return Status::Ok();
  }

  Status SyncDir(const std::string&) override { return Status::Ok(); }

 private:
  std::shared_ptr<MemoryFile> Find(const std::string& path) {
    MutexLock lock(&mu_);
    auto it = files_.find(path);
    return it == files_.end() ? nullptr : it->second;
  }

  Mutex mu_;
  std::map<std::string, std::shared_ptr<MemoryFile>> files_ GUARDED_BY(mu_);
  std::set<std::string> dirs_ GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<FileSystem> NewMemoryFileSystem() { return std::make_unique<MemoryFileSystem>(); }

}  // namespace sundial::wal
