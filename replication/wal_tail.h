// WalTail: reads a data directory's log from an LSN on, record by record as the segments hold
// them (docs/wal-format.md: header, payload, checksum over the segment number), for a primary
// to ship to a standby (docs/replication.md, "Streaming"). It follows the log as it grows and
// rotates: the caller says how far the log has been written (GroupCommitLog::Written: the end
// LSN and its byte offset in the active segment), and the tail reads no further, so it never
// sees a record still being written, and its read-ahead never copies the active segment's
// preallocated zeroes (SequentialFile::SetReadLimit).
//
// Every record read is checked (length bound, type, checksum) before it is shipped: a damaged
// record on the primary's disk is an error here, never a record a standby would refuse later.
// The file's read-ahead may still hold bytes from before the log wrote them (read by Seek,
// before the written position was known): a record below the written end that looks absent or
// damaged is read again from the disk once before it counts as the segment's end or as damage.
//
// Thread safety: none; one thread (the replication session's loop). Cost: sequential reads of
// the page cache, of the bytes written since the last read; one segment open at a time, opened
// once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/status.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"

namespace sundial::replication {

class WalTail {
 public:
  WalTail(wal::FileSystem* fs, std::string dir) : fs_(fs), dir_(std::move(dir)) {}

  // Positions the tail at `lsn`. NOT_FOUND when no segment holds it any more (a checkpoint
  // removed it: the standby needs a snapshot); INTERNAL for a damaged segment.
  Status Seek(uint64_t lsn);

  // Consecutive records of one segment, as they are on disk.
  struct Chunk {
    uint64_t segment_number = 0;
    uint64_t first_lsn = 0;
    uint32_t count = 0;  // 0: nothing to read below end_lsn yet
    std::string bytes;
  };
  // Reads whole records from the position on, below `written.end_lsn` (what the log has
  // written), and stops after about `max_bytes` (at least one record) or at the end of a
  // segment. The chunk's bytes are replaced; its capacity is kept.
  Status Read(const wal::GroupCommitLog::WrittenPosition& written, size_t max_bytes, Chunk* chunk);

  uint64_t position() const { return lsn_; }
  // The first LSN the segments still hold (a checkpoint removed what was before); the log's
  // end when there is no segment.
  Result<uint64_t> OldestLsn();

 private:
  // In the segment being written, reads stop where the log's writing stopped.
  void LimitReads(wal::SequentialFile* file, uint64_t number) const;
  // Opens segment `number`; checks its header; *first_lsn its first record's LSN.
  Status Open(uint64_t number, uint64_t* first_lsn);
  // Reopens the current segment at offset_, dropping the read-ahead.
  Status Reread();
  // The number of the segment whose first record is `lsn` exactly, if one exists.
  Status FindSegmentStartingAt(uint64_t lsn, uint64_t* number, bool* found);

  wal::FileSystem* const fs_;
  const std::string dir_;
  std::unique_ptr<wal::SequentialFile> file_;
  uint64_t segment_ = 0;  // number of the open segment
  uint64_t lsn_ = 0;      // the next record's LSN
  uint64_t offset_ = 0;   // its byte offset in the open segment
  std::optional<wal::GroupCommitLog::WrittenPosition> written_;  // of the last Read
  std::string scratch_;
};

}  // namespace sundial::replication
