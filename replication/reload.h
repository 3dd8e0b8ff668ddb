// What a standby does to its data directory before its process starts again (docs/
// replication.md, "Catching up"): its log is never patched in place while the server runs.
// main.cc calls these after the server stopped and the log closed, then re-executes the
// process, whose ordinary recovery then loads what is there.
//   - Truncate(lsn): keep the log's records below `lsn` (a divergent tail goes): snapshots that
//     cover more are removed, the segment holding `lsn` is cut at that record, later segments
//     removed. When no snapshot at or below `lsn` remains and the segments do not reach back to
//     the log's start, nothing can rebuild that prefix: everything goes (as Reseed).
//   - InstallSnapshot(tmp, lsn): the primary's snapshot becomes the directory's only content
//     (the old segments and snapshots go): recovery loads it and the log starts after it.
//   - Reseed: the log and snapshots go; the node starts empty and asks for a snapshot.
// The node's CLUSTER file (its promise) is kept in every case. Each step is made durable
// (directory fsynced) before the next.
//
// Thread safety: none; called with the server stopped.
#pragma once

#include <cstdint>
#include <string>

#include "engine/status.h"
#include "wal/file.h"

namespace sundial::replication {

// What a standby asks of its process: reload its state from its data directory after one of
// the steps below (main.cc does it once the server stopped, then re-executes the process).
struct ReloadRequest {
  enum class Kind : uint8_t { kTruncate, kSnapshot, kReseed };
  Kind kind = Kind::kReseed;
  uint64_t lsn = 0;          // kTruncate: keep below; kSnapshot: the snapshot's LSN
  std::string snapshot_tmp;  // kSnapshot: the file received
  std::string why;           // for the log line
};
// The step `request` names.
Status PrepareReload(wal::FileSystem* fs, const std::string& dir, const ReloadRequest& request);

Status TruncateLog(wal::FileSystem* fs, const std::string& dir, uint64_t lsn);
Status InstallSnapshot(wal::FileSystem* fs, const std::string& dir, const std::string& tmp_path,
                       uint64_t lsn);
Status Reseed(wal::FileSystem* fs, const std::string& dir);

}  // namespace sundial::replication
