// ApplyRecords: the one step that turns the records of a log file into engine state — recovery
// replaying a segment, LoadSnapshot loading a snapshot. Records a primary ships to a standby can
// go through it too: framed bytes behind a segment header, read by a LogReader over an
// in-memory SequentialFile. It takes the records in file order from an EffectPipeline (read,
// checksummed and decoded there), checks that each may stand where it is, applies runs of
// effects with Engine::ApplyBatch and stops at the first bad record, reporting it with its file
// and offset (docs/wal-format.md, "Reading: torn tail versus damage" and "Recovery").
//
// Where a record may stand (docs/wal-format.md, "Records" and "Snapshots"): a kEffect record
// anywhere, if it decodes (one with a `dependency_entry`, a batch member's
// or a history restatement, or a kKeyStateRestated, only in a snapshot); a
// kSnapshotTrailer record only in a snapshot, once, with a 16-byte payload, and nothing after it.
// Whether a snapshot's trailer is present and matches what was loaded is the caller's to check
// (LoadSnapshot): only it knows the file has ended.
//
// An effect that does not apply is damage at its own offset: the effects before a bad record
// are applied first, so an earlier one that does not apply is the one reported.
//
// Thread safety: runs on the caller's thread (the pipeline's consumer); the engine is the
// caller's.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "engine/engine.h"
#include "wal/effect_pipeline.h"
#include "wal/log_reader.h"

namespace sundial::wal {

enum class FileKind : uint8_t { kSegment, kSnapshot };

struct ApplyOptions {
  std::string_view file;  // the file's name, for the report
  FileKind kind = FileKind::kSegment;
  // Segments only. Records with an LSN below first_lsn are in the state already (the snapshot
  // holds them): skipped. At the first record with an LSN at or above end_lsn (if set), the
  // step stops: a read-only replay up to an LSN.
  uint64_t first_lsn = 0;
  std::optional<uint64_t> end_lsn;
};

// A snapshot's trailer: where it is and what it says.
struct SnapshotTrailer {
  uint64_t offset = 0;
  uint64_t count = 0;   // kEffect records before it
  uint64_t digest = 0;  // Engine::Digest() of the state they make
};

struct AppliedRecords {
  uint64_t effects = 0;                    // applied to the engine
  TimeMs latest_time = 0;                  // the latest time of an effect applied
  std::optional<Corruption> damage;        // the first bad record (kind kCorruption)
  std::optional<SnapshotTrailer> trailer;  // snapshots: the trailer, when one was read
};

// Applies the records `pipeline` returns to `engine`, until the pipeline ends (its reader
// stopped: the end of the file, damage the reader found, or an I/O error — ask the reader), a
// bad record (AppliedRecords::damage), or options.end_lsn.
AppliedRecords ApplyRecords(EffectPipeline* pipeline, Engine* engine, const ApplyOptions& options);

}  // namespace sundial::wal
