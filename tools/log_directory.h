// Log directory scan: reads every WAL segment and snapshot of a data directory
// (docs/wal-format.md) and checks it as recovery would, without changing anything on disk. The
// engine of `sundial-wal` (docs/tools.md): verify, dump and stats differ only in what they do
// with the records and the report.
//
// Files are read in name order (snapshots, then segments, each by number). Per file, the first
// problem found is recorded in FileReport::damage, with the file name, the byte offset of the
// record (or of the header: offset 0) and a reason:
// - what LogReader reports: a bad header, length, checksum or record type; a truncation (a torn
//   tail in the last segment, corruption anywhere else);
// - a kEffect payload that DecodeEffect refuses; a snapshot trailer in a segment;
// - segments: a gap in segment numbers, a header LSN that does not continue the previous
//   segment, a first segment that starts above the newest snapshot's LSN (or above 0 without
//   one) — all reported at offset 0 of the later segment;
// - snapshots: a record after the trailer, a trailer of the wrong size, no trailer, a trailer
//   count that differs from the number of kEffect records.
// A torn tail is what a crash leaves and recovery cuts: it is recorded (with the bytes recovery
// would cut) but is not counted as damage by ScanReport::first_corruption.
//
// Not checked: the snapshot digest (that needs an engine to replay into) and whether effects
// apply to the state (recovery does both).
//
// Memory: one record at a time (LogReader bounds it), plus one FileReport per file.
// Thread safety: functions only; the directory must not change during a scan.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/effect.h"
#include "engine/status.h"
#include "wal/file.h"
#include "wal/log_reader.h"

namespace sundial::tools {

enum class LogFileKind : uint8_t { kSnapshot, kSegment };
std::string_view LogFileKindName(LogFileKind kind);  // "snapshot", "segment"

struct LogFile {
  std::string name;  // in the data directory
  LogFileKind kind = LogFileKind::kSegment;
  uint64_t number = 0;  // segment number, or a snapshot's covered LSN
};

// The segments and snapshots of `dir`, in name order. Every other entry (`*.snap.tmp`,
// `*.damaged`, anything else) is skipped. Returns the file system's error when `dir` cannot be
// listed.
Result<std::vector<LogFile>> ListLogFiles(wal::FileSystem* fs, const std::string& dir);

struct SnapshotTrailer {
  uint64_t count = 0;   // kEffect records in the snapshot
  uint64_t digest = 0;  // Engine::Digest() of the state
};

// What a scan saw of one file.
struct FileReport {
  LogFile file;
  uint64_t bytes = 0;    // size on disk
  uint64_t records = 0;  // good records (effects and trailers)
  uint64_t effects = 0;  // good kEffect records that decoded
  bool header_read = false;
  uint64_t header_lsn = 0;  // valid when header_read: first LSN (segment) or covered LSN
  uint64_t next_lsn = 0;    // header_lsn + records (segments)
  std::optional<SnapshotTrailer> trailer;
  std::optional<wal::Corruption> damage;  // the first problem in this file, torn tail included
  uint64_t torn_bytes = 0;                // damage is a torn tail: the bytes recovery would cut
};

// One good record, as handed to the visitor. Views are valid during the call only.
struct ScannedRecord {
  const LogFile& file;
  uint64_t index = 0;   // position in the file, from 0
  uint64_t offset = 0;  // byte offset of the record header
  uint64_t lsn = 0;     // segments: the record's LSN; snapshots: the covered LSN
  wal::RecordType type = wal::RecordType::kEffect;
  const Effect* effect = nullptr;            // kEffect
  const SnapshotTrailer* trailer = nullptr;  // kSnapshotTrailer
};
using RecordVisitor = std::function<void(const ScannedRecord&)>;

struct ScanOptions {
  // Stop after the first file whose damage is corruption (verify); else read every file.
  bool stop_at_first_corruption = false;
};

struct ScanReport {
  std::vector<FileReport> files;  // in name order; after a stop, only those read
  // The first damage that is not a torn tail, if any.
  const wal::Corruption* first_corruption() const;
  // The torn tail of the last segment, if any.
  const FileReport* torn_tail() const;
};

// Scans `dir`. Calls `visitor` (may be null) for every good record, in file order. Returns OK
// when every file could be read (damage is in *report), or the file system's error.
Status ScanLogDirectory(wal::FileSystem* fs, const std::string& dir, const ScanOptions& options,
                        const RecordVisitor& visitor, ScanReport* report);

}  // namespace sundial::tools
