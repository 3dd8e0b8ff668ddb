// Files: the small interface through which the WAL touches storage, so tests can substitute an
// in-memory file system or one that fails on demand (fault_injection_file_system.h). Modelled
// on LevelDB's Env / WritableFile / SequentialFile.
//
// Contract:
// - WritableFile::Append may buffer; Sync makes every byte appended so far durable (fdatasync)
//   and returns OK only if it is. After any failed Append or Sync the caller must treat the file
//   as lost (the WAL poisons itself: it never retries a sync and calls the data safe).
// - NewWritableFile and RenameFile are durable when they return OK: the POSIX implementation
//   fsyncs the parent directory after creating or renaming. RemoveFile is made durable by a
//   later SyncDir.
// - Errors: kNotFound (no such file), kAlreadyExists, kResourceExhausted (ENOSPC, EDQUOT),
//   kInternal (any other I/O error). Errors of the POSIX file system name the operation and the
//   file ("wal: fdatasync failed on DIR/wal-….log", as LevelDB's PosixError names the file) and
//   keep the errno (Status::sys_errno), so Message() tells an EIO from an EROFS. The memory and
//   fault-injection file systems (tests) give literals naming the operation only.
//
// Thread safety: a FileSystem may be used from any thread; one file object must be used by one
// thread at a time, except SyncFlushed (see there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/status.h"

namespace sundial::wal {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(std::string_view data) = 0;
  // Hands buffered bytes to the operating system (no durability).
  virtual Status Flush() = 0;
  // Flush, then fdatasync.
  virtual Status Sync() = 0;
  // fdatasync of the bytes already handed to the OS (by Flush, or by an Append that did not
  // fit the buffer), without touching the buffer: the one call that may run on another thread
  // concurrently with Append and Flush (the kInterval syncer), never with Close.
  virtual Status SyncFlushed() = 0;
  // Flush and close; further calls fail. The destructor closes without reporting.
  virtual Status Close() = 0;
  // Asks the file to keep `chunk_bytes` of zeroes written and synced ahead of its end, so that
  // a Sync writes data only: on ext4 (with or without a journal) an fdatasync that extends the
  // file must also write the inode, a second dependent I/O. Close cuts the zeroes off again
  // (and syncs that). A crash leaves them: readers see a zeroed tail (docs/wal-format.md).
  // Only for files made by NewWritableFile; 0 (the default) turns it off. Files that cannot
  // preallocate ignore it.
  virtual void SetPreallocation(uint64_t chunk_bytes) { (void)chunk_bytes; }
  // The writer's question, after a Flush: less than half a chunk of zeroes is left ahead of
  // what was written, so PreallocateAhead should run before the writer reaches the end (which
  // would make the writer write a chunk and fdatasync it itself, as Append does then).
  virtual bool PreallocationLow() const { return false; }
  // Writes the next chunk of zeroes past the allocated end and fdatasyncs it. Like SyncFlushed,
  // it may run on another thread concurrently with Append and Flush (never with Close): the
  // writer writes below the allocated end, this only past it, and the two take turns on the
  // zeroes (an Append that reaches the end waits for a chunk in progress). A failure means as
  // much as a failed SyncFlushed (the fdatasync covers the written records too).
  virtual Status PreallocateAhead() { return Status::Ok(); }
};

class SequentialFile {
 public:
  virtual ~SequentialFile() = default;
  // Reads up to n bytes into scratch[0..n) and sets *result to the bytes read, which may point
  // into scratch or elsewhere and are valid until the next call. Fewer than n bytes (possibly
  // zero) means the end of the file was reached.
  virtual Status Read(size_t n, char* scratch, std::string_view* result) = 0;
  virtual Status Skip(uint64_t n) = 0;
  // Reads stop at byte `offset` of the file (as if it ended there) until a later call moves the
  // limit: a reader of a file still being written (a primary's WalTail) reads what the writer
  // has written, and its read-ahead neither copies the preallocated zeroes past it nor keeps
  // bytes from before they were written. Default: no limit.
  virtual void SetReadLimit(uint64_t offset) { (void)offset; }
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // Creates `path` (truncating an existing file) for writing.
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  // Opens `path` for appending at its end, creating it if needed.
  virtual Result<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) = 0;
  virtual Result<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) = 0;
  virtual Result<uint64_t> FileSize(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  // Replaces `to` if it exists.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;
  // Cuts `path` to `size` bytes (used to cut off a torn tail).
  virtual Status TruncateFile(const std::string& path, uint64_t size) = 0;
  // Names (not paths) of the entries of `dir`, sorted.
  virtual Result<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  // Creates `dir` if it does not exist.
  virtual Status CreateDir(const std::string& dir) = 0;
  // fsync of the directory itself (durability of creates, renames and removes in it).
  virtual Status SyncDir(const std::string& dir) = 0;
};

// The Status for a failed system call (LevelDB's PosixError(context, errno)): code by what the
// caller should do (ENOENT kNotFound, EEXIST kAlreadyExists, ENOSPC and EDQUOT
// kResourceExhausted, else kInternal), `context` as the detail (the operation and the file:
// "wal: fdatasync failed on DIR/wal-….log") and the errno.
Status PosixError(std::string_view context, int error);

// The real file system (open/write/fdatasync/rename). Stateless; one instance may be shared.
std::unique_ptr<FileSystem> NewPosixFileSystem();
// Files in memory: every write is immediately "durable"; paths are plain strings and a
// directory is any prefix ending before a '/'. For tests.
std::unique_ptr<FileSystem> NewMemoryFileSystem();

// "dir/name", or just name when dir is empty.
std::string JoinPath(std::string_view dir, std::string_view name);
// Everything before the last '/', or "." when there is none.
std::string DirName(std::string_view path);

// Reads the whole file (tests and tools).
Result<std::string> ReadFileToString(FileSystem* fs, const std::string& path);
// Creates `path` with `contents`, synced.
Status WriteStringToFile(FileSystem* fs, const std::string& path, std::string_view contents);

}  // namespace sundial::wal
