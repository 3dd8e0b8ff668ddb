// Snapshots: the live state of an engine written as one file (docs/wal-format.md, "Snapshots"),
// so that recovery loads it instead of replaying the whole log, and checkpoints can delete the
// segments it covers.
//
// A snapshot `snapshot-<covered LSN>.snap` holds the effects Engine::ExportState produces, then
// a trailer with their count and the engine's digest. It is the state after every log record
// with LSN < covered LSN. WriteSnapshot writes it as `<name>.tmp`, fdatasyncs it, renames it
// and fsyncs the directory, so a crash leaves either no snapshot or a whole one; LoadSnapshot
// accepts a file only if every record checks, the trailer is the last record, and both the
// count and the digest of the loaded state match it.
//
// Thread safety: functions only. WriteSnapshot reads `engine` through ExportState and Digest,
// which lock one shard at a time: the caller must keep the engine quiescent (checkpoints write
// a private copy built from the log, never the live engine).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "engine/engine.h"
#include "engine/status.h"
#include "wal/file.h"
#include "wal/log_reader.h"

namespace sundial::wal {

struct SnapshotInfo {
  std::string file;          // name in the data directory
  uint64_t covered_lsn = 0;  // the state after every record with LSN < covered_lsn
  uint64_t effects = 0;      // kEffect records
  uint64_t digest = 0;       // Engine::Digest() of the state
  uint64_t bytes = 0;        // file size
  TimeMs latest_time = 0;    // LoadSnapshot: the latest time of an effect in it
};

// Points in WriteSnapshot where a test may simulate a crash (the hook returns non-OK: the
// function stops there and returns that status, leaving the files as a crash would).
enum class SnapshotStep : uint8_t {
  kTempSynced,  // the .tmp file is complete and synced, not yet renamed
  kRenamed,     // renamed and the directory synced
};
using SnapshotHook = std::function<Status(SnapshotStep)>;

// Writes the state of `engine` as dir/snapshot-<covered_lsn>.snap (replacing one of that name):
// WriteSnapshotTemp, then CommitSnapshot.
Result<SnapshotInfo> WriteSnapshot(FileSystem* fs, const std::string& dir, const Engine& engine,
                                   uint64_t covered_lsn, const SnapshotHook& hook = nullptr);
// The two halves, for a writer that is not the committer (a fork checkpoint's child writes, its
// parent commits once the log below covered_lsn is durable). WriteSnapshotTemp writes and
// fdatasyncs SnapshotTempPath and leaves nothing behind when it fails; CommitSnapshot renames it
// into place and fsyncs the directory (kTempSynced is hooked before the rename).
Result<SnapshotInfo> WriteSnapshotTemp(FileSystem* fs, const std::string& dir, const Engine& engine,
                                       uint64_t covered_lsn);
Status CommitSnapshot(FileSystem* fs, const std::string& dir, uint64_t covered_lsn,
                      const SnapshotHook& hook = nullptr);
std::string SnapshotTempPath(const std::string& dir, uint64_t covered_lsn);

// Loads dir/`file` (a name ParseSnapshotFileName accepts) into `engine`, which must be empty.
// Damage (a record that fails a check or does not apply, no trailer, a count or digest that does
// not match) is reported once to `reporter` (if set) with the file, offset and reason, and
// returned as kInternal "wal: damaged snapshot: <file> at offset N: corruption: <reason>"; the
// engine then holds a partial state and must be discarded. I/O errors are returned as they are,
// and reported to no one.
Result<SnapshotInfo> LoadSnapshot(FileSystem* fs, const std::string& dir, const std::string& file,
                                  Engine* engine, CorruptionReporter* reporter = nullptr);

}  // namespace sundial::wal
