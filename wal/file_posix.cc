// POSIX implementation of wal/file.h.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "engine/mutex.h"
#include "wal/file.h"

namespace sundial::wal {

Status PosixError(std::string_view context, int error) {
  switch (error) {
    case ENOENT:
      return {Code::kNotFound, context, error};
    case EEXIST:
      return {Code::kAlreadyExists, context, error};
    case ENOSPC:
    case EDQUOT:
      return {Code::kResourceExhausted, context, error};
    default:
      return {Code::kInternal, context, error};
  }
}

namespace {

// "OPERATION on PATH" with the errno: the error names the file (as LevelDB's do) and keeps the
// errno (Status::sys_errno): EIO and EROFS need different operator actions.
Status FileError(const char* operation, std::string_view path, int error) {
  std::string context(operation);
  context += " on ";
  context += path;
  return PosixError(context, error);
}

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileError("wal: open directory for fsync failed", dir, errno);
  Status s;
  if (::fsync(fd) != 0) s = FileError("wal: fsync directory failed", dir, errno);
  ::close(fd);
  return s;
}

class PosixWritableFile final : public WritableFile {
 public:
  static constexpr size_t kBufferBytes = 64 << 10;

  PosixWritableFile(int fd, std::string path, bool appending)
      : fd_(fd), path_(std::move(path)), appending_(appending) {
    buffer_.reserve(kBufferBytes);
  }
  ~PosixWritableFile() override {
    if (fd_ >= 0) (void)Close();
  }

  Status Append(std::string_view data) override {
    if (fd_ < 0) return FailedPrecondition("wal: append to a closed file");
    if (buffer_.size() + data.size() <= kBufferBytes) {
      buffer_.append(data);
      return Status::Ok();
    }
    Status s = Flush();
    if (!s.ok()) return s;
    if (data.size() <= kBufferBytes) {
      buffer_.append(data);
      return Status::Ok();
    }
    return WriteAll(data);
  }

  Status Flush() override {
    if (fd_ < 0) return FailedPrecondition("wal: flush of a closed file");
    Status s = WriteAll(buffer_);
    buffer_.clear();
    return s;
  }

  Status Sync() override {
    Status s = Flush();
    if (!s.ok()) return s;
    if (::fdatasync(fd_) != 0) return FileError("wal: fdatasync failed", path_, errno);
    return Status::Ok();
  }

  Status SyncFlushed() override {
    if (fd_ < 0) return FailedPrecondition("wal: sync of a closed file");
    if (::fdatasync(fd_) != 0) return FileError("wal: fdatasync failed", path_, errno);
    return Status::Ok();
  }

  Status Close() override {
    if (fd_ < 0) return FailedPrecondition("wal: file already closed");
    Status s = Flush();
    if (s.ok() && allocated() > offset_) {  // cut the preallocated zeroes, durably
      if (::ftruncate(fd_, static_cast<off_t>(offset_)) != 0) {
        s = FileError("wal: truncate of preallocated space failed", path_, errno);
      } else if (::fdatasync(fd_) != 0) {
        s = FileError("wal: fdatasync failed", path_, errno);
      }
    }
    if (::close(fd_) != 0 && s.ok()) s = FileError("wal: close failed", path_, errno);
    fd_ = -1;
    return s;
  }

  void SetPreallocation(uint64_t chunk_bytes) override {
    if (!appending_) chunk_ = chunk_bytes;
  }

  bool PreallocationLow() const override {
    return chunk_ > 0 && fd_ >= 0 && offset_ + buffer_.size() + chunk_ / 2 > allocated();
  }

  Status PreallocateAhead() override {
    if (fd_ < 0) return FailedPrecondition("wal: preallocation of a closed file");
    if (chunk_ == 0) return Status::Ok();
    MutexLock lock(&preallocate_mu_);
    return Preallocate(allocated() + 1);
  }

 private:
  uint64_t allocated() const { return allocated_.load(std::memory_order_acquire); }

  Status WriteAll(std::string_view data) {
    if (chunk_ > 0 && offset_ + data.size() > allocated()) {
      MutexLock lock(&preallocate_mu_);  // a chunk in progress on the sync thread may cover it
      if (offset_ + data.size() > allocated()) {
        Status s = Preallocate(offset_ + data.size());
        if (!s.ok()) return s;
      }
    }
    while (!data.empty()) {
      // Into preallocated space: at the offset (the file's end is past it).
      ssize_t n = chunk_ > 0 ? ::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset_))
                             : ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return FileError("wal: write failed", path_, errno);
      }
      data.remove_prefix(static_cast<size_t>(n));
      offset_ += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }

  // Writes zeroes from the allocated end to past `end` (whole chunks), then fdatasync, so the
  // new size is on disk before any record is written there. Written, not fallocated: an
  // fallocated extent is "unwritten", and converting it on first write is a metadata update
  // that fdatasync would have to write, which is what preallocating avoids. Only past the
  // allocated end, which the writer does not pass: a sync thread's PreallocateAhead and the
  // writer's records never touch the same bytes.
  Status Preallocate(uint64_t end) REQUIRES(preallocate_mu_) {
    static const std::string kZeroes(256 << 10, '\0');
    const uint64_t from = allocated();
    uint64_t target = from;
    while (target < end) target += chunk_;
    for (uint64_t at = from; at < target;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kZeroes.size(), target - at));
      const ssize_t w = ::pwrite(fd_, kZeroes.data(), n, static_cast<off_t>(at));
      if (w < 0) {
        if (errno == EINTR) continue;
        return FileError("wal: preallocating write failed", path_, errno);
      }
      at += static_cast<uint64_t>(w);
    }
    if (::fdatasync(fd_) != 0) return FileError("wal: fdatasync failed", path_, errno);
    allocated_.store(target, std::memory_order_release);
    return Status::Ok();
  }

  int fd_;
  const std::string path_;  // named in errors
  bool appending_;
  std::string buffer_;
  uint64_t chunk_ = 0;   // preallocation step; 0: off
  uint64_t offset_ = 0;  // bytes written: the file's logical end
  // Bytes of the file that exist on disk (zeroes past offset_): read by the writer, moved on
  // (under preallocate_mu_) by the writer or by PreallocateAhead on the sync thread.
  std::atomic<uint64_t> allocated_{0};
  Mutex preallocate_mu_;
};

// Reads through a 256 KiB buffer: the log reader asks for a 13-byte record header, then the
// payload, and one read(2) per ask costs more than decoding the record.
class PosixSequentialFile final : public SequentialFile {
 public:
  static constexpr size_t kBufferBytes = 256 << 10;

  PosixSequentialFile(int fd, std::string path)
      : fd_(fd), path_(std::move(path)), buffer_(new char[kBufferBytes]) {}
  ~PosixSequentialFile() override { ::close(fd_); }

  Status Read(size_t n, char* scratch, std::string_view* result) override {
    if (n <= end_ - pos_) {  // served from the buffer without copying
      *result = std::string_view(buffer_.get() + pos_, n);
      pos_ += n;
      return Status::Ok();
    }
    size_t got = end_ - pos_;
    std::copy(buffer_.get() + pos_, buffer_.get() + end_, scratch);
    pos_ = end_ = 0;
    while (got < n) {
      if (n - got >= kBufferBytes) {  // large: straight into the caller's scratch
        ssize_t r = ReadSome(scratch + got, n - got);
        if (r < 0) return FileError("wal: read failed", path_, errno);
        if (r == 0) break;
        got += static_cast<size_t>(r);
        continue;
      }
      ssize_t r = ReadSome(buffer_.get(), kBufferBytes);
      if (r < 0) return FileError("wal: read failed", path_, errno);
      if (r == 0) break;
      end_ = static_cast<size_t>(r);
      const size_t take = std::min(end_, n - got);
      std::copy(buffer_.get(), buffer_.get() + take, scratch + got);
      pos_ = take;
      got += take;
    }
    *result = std::string_view(scratch, got);
    return Status::Ok();
  }

  Status Skip(uint64_t n) override {
    const uint64_t buffered = end_ - pos_;
    if (n <= buffered) {
      pos_ += n;
      return Status::Ok();
    }
    pos_ = end_ = 0;
    if (::lseek(fd_, static_cast<off_t>(n - buffered), SEEK_CUR) < 0) {
      return FileError("wal: seek failed", path_, errno);
    }
    offset_ += n - buffered;
    return Status::Ok();
  }

  void SetReadLimit(uint64_t offset) override { limit_ = offset; }

 private:
  ssize_t ReadSome(char* into, size_t n) {
    if (offset_ >= limit_) return 0;
    n = static_cast<size_t>(std::min<uint64_t>(n, limit_ - offset_));
    for (;;) {
      ssize_t r = ::read(fd_, into, n);
      if (r > 0) offset_ += static_cast<uint64_t>(r);
      if (r >= 0 || errno != EINTR) return r;
    }
  }

  int fd_;
  const std::string path_;  // named in errors
  std::unique_ptr<char[]> buffer_;
  size_t pos_ = 0;                                         // next unread byte of buffer_
  size_t end_ = 0;                                         // bytes valid in buffer_
  uint64_t offset_ = 0;                                    // the descriptor's file offset
  uint64_t limit_ = std::numeric_limits<uint64_t>::max();  // SetReadLimit
};

class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return Open(path, O_TRUNC);
  }

  Result<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override {
    return Open(path, O_APPEND);
  }

  Result<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return FileError("wal: open for reading failed", path, errno);
    return std::unique_ptr<SequentialFile>(std::make_unique<PosixSequentialFile>(fd, path));
  }

  Result<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return FileError("wal: stat failed", path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return FileError("wal: rename failed", from, errno);
    return SyncDirectory(DirName(to));
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return FileError("wal: unlink failed", path, errno);
    return Status::Ok();
  }

  Status TruncateFile(const std::string& path, uint64_t size) override {
    if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) {
      return FileError("wal: truncate failed", path, errno);
    }
    return Status::Ok();
  }

  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return FileError("wal: opendir failed", dir, errno);
    std::vector<std::string> names;
    while (struct dirent* entry = ::readdir(d)) {
      std::string_view name = entry->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }

  Status CreateDir(const std::string& dir) override {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return FileError("wal: mkdir failed", dir, errno);
    }
    return Status::Ok();
  }

  Status SyncDir(const std::string& dir) override { return SyncDirectory(dir); }

 private:
  Result<std::unique_ptr<WritableFile>> Open(const std::string& path, int mode) {
    bool existed = FileExists(path);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | mode, 0644);
    if (fd < 0) return FileError("wal: open for writing failed", path, errno);
    if (!existed) {
      Status s = SyncDirectory(DirName(path));
      if (!s.ok()) {
        ::close(fd);
        return s;
      }
    }
    return std::unique_ptr<WritableFile>(
        std::make_unique<PosixWritableFile>(fd, path, mode == O_APPEND));
  }
};

}  // namespace

std::unique_ptr<FileSystem> NewPosixFileSystem() { return std::make_unique<PosixFileSystem>(); }

}  // namespace sundial::wal
