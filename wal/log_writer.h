// LogWriter: writes one snapshot file (docs/wal-format.md, "Snapshots"): the file header, then
// records framed by the record encoder of log_format.h, which the group-commit log uses for
// segments too. Tests and tools also use it to write segments.
//
// The writer never syncs by itself: the caller (the checkpoint) decides when to call Sync. Once
// any Append or Sync fails the writer is poisoned: that call and every later one return the
// first error, because the file may now end in a partial record or hold data the kernel dropped
// (fsyncgate); the owner must start a new file.
//
// Invariants: bytes_written() counts every byte handed to the file successfully; next_lsn() is
// header.lsn + records added. AddRecord rejects payloads above kMaxRecordBytes before writing.
//
// Thread safety: none; one owner at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "engine/effect.h"
#include "engine/status.h"
#include "wal/file.h"
#include "wal/log_format.h"

namespace sundial::wal {

class LogWriter {
 public:
  // Takes ownership of `file`, which must be empty. Call WriteHeader before AddRecord.
  LogWriter(std::unique_ptr<WritableFile> file, FileHeader header);
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  Status WriteHeader();
  // Appends one record; on OK its LSN was next_lsn() before the call.
  Status AddRecord(RecordType type, std::string_view payload);
  // EncodeEffect + AddRecord(kEffect).
  Status AddEffect(const Effect& effect);
  // Hands buffered bytes to the operating system (no durability).
  Status Flush();
  Status Sync();
  Status Close();

  const FileHeader& header() const { return header_; }
  uint64_t next_lsn() const { return next_lsn_; }
  uint64_t bytes_written() const { return bytes_written_; }
  // The first error of any call, or OK.
  Status poisoned() const { return error_; }

 private:
  Status Fail(Status s);
  // OK when a record may be added now.
  Status CanAdd() const;

  std::unique_ptr<WritableFile> file_;
  const FileHeader header_;
  uint64_t next_lsn_;
  uint64_t bytes_written_ = 0;
  bool header_written_ = false;
  Status error_;
  // Appends scratch_, one sealed record.
  Status AppendFramed();

  std::string scratch_;  // the record being written: header and payload (its capacity is reused)
};

}  // namespace sundial::wal
