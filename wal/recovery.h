// Recovery: rebuilds an engine from a data directory (docs/wal-format.md, "Recovery") — the
// newest snapshot, then every later log record replayed through Engine::Apply (effects, never a
// re-run of selection) — and says where the log goes on: the next LSN and segment number.
//
// Rules (docs/wal-format.md, "Recovery"):
// - `*.snap.tmp` files are unfinished checkpoints: deleted.
// - The newest snapshot is loaded and checked (count and digest). A damaged snapshot refuses the
//   start; with repair, the next older one is tried (then none).
// - Segments wholly covered by the snapshot are obsolete (a checkpoint crashed before deleting
//   them): deleted. The others are replayed in order; each must continue the previous one
//   (consecutive numbers, header LSN = the previous segment's end) and the first must start at
//   or below the snapshot's LSN.
// - A torn tail of the last segment is cut off (truncated; a segment whose header is torn is
//   removed) and reported with its size. Any other damage — a bad checksum anywhere, a bad
//   header, a gap, an effect that does not decode or apply — refuses the start, naming the file
//   and offset. With `repair`, recovery instead cuts the log at the first bad record (the file is
//   truncated there and every later segment removed) and reports what was dropped.
// - Read-only mode (checkpoints): replays exactly the records below `end_lsn` from sealed
//   segments, changes nothing on disk, and treats any damage as an error.
//
// Thread safety: functions only; the directory must not be written while recovery runs (the
// server recovers before opening the log; a checkpoint reads only sealed segments).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/effect.h"
#include "engine/engine.h"
#include "engine/status.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"
#include "wal/log_reader.h"

namespace sundial::wal {

struct RecoveryOptions {
  bool repair = false;  // --wal-repair: cut at the first bad record instead of refusing
  // Read-only replay of the records with LSN < *end_lsn, all of which must be in sealed
  // segments (checkpoints). Nothing on disk is changed.
  std::optional<uint64_t> end_lsn;
};

struct RecoveryReport {
  std::string snapshot;  // file loaded, empty when none
  uint64_t snapshot_lsn = 0;
  uint64_t snapshot_effects = 0;
  uint64_t segments_replayed = 0;
  uint64_t records_replayed = 0;  // from segments (not counting the snapshot's)
  uint64_t bytes_read = 0;        // of snapshot and segments
  // A torn tail that was cut off: where, and how many bytes.
  std::optional<Corruption> torn_tail;
  uint64_t torn_bytes = 0;
  // Damage. Without repair, recovery failed because of it (`repaired` false); with repair, the
  // log was cut there (`repaired` true).
  std::optional<Corruption> damage;
  bool repaired = false;
  // Repaired: bytes cut off from the damaged file and later segments, and the files given up.
  // Not repaired: what a repair would drop (nothing was changed).
  uint64_t dropped_bytes = 0;
  std::vector<std::string> dropped_files;
  std::vector<std::string> removed_files;  // unfinished snapshots, obsolete segments
  uint64_t next_lsn = 0;
  uint64_t next_segment_number = 1;
  // The latest time of an effect recovered (snapshot and segments): a clock that starts below it
  // (a node whose system clock went back across a restart) is raised to it (docs/replication.md,
  // "Time and leases").
  TimeMs latest_effect_time = 0;

  // One line for the server log: what was loaded, replayed, cut, dropped. Says REPAIRED only
  // when something was repaired; unrepaired damage is "found damage", with what a repair would
  // drop.
  std::string Summary() const;
};

using EngineFactory = std::function<std::unique_ptr<Engine>()>;

// Called on a file's decode thread between batches (effect_pipeline.h): faults in the memory
// the engine being loaded is about to take (pages::FillPool), on the other core.
void PrefaultForTheEngine();

struct Recovered {
  std::unique_ptr<Engine> engine;  // built by the factory; empty after a failure
  RecoveryReport report;
};

// Recovers `dir` (created when missing, unless read-only) into an engine from `make_engine`
// (called again if a damaged snapshot must be given up). Returns OK, an I/O error, or kInternal
// "wal: damaged log: <file> at offset N: …" with out->report.damage naming the same damage.
Status Recover(FileSystem* fs, const std::string& dir, const EngineFactory& make_engine,
               const RecoveryOptions& options, Recovered* out);

class DeferredSink;

// What a process does on start: Recover `dir`, open the log where recovery says (next LSN and
// segment number), and point `sink` — the sink of the engines `make_engine` builds — at it.
// On failure nothing is opened; out->report says why (damage, as for Recover).
struct OpenedLog {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<GroupCommitLog> log;
  RecoveryReport report;
};
Status RecoverAndOpenLog(FileSystem* fs, const std::string& dir, const EngineFactory& make_engine,
                         const RecoveryOptions& recovery, const LogOptions& log_options,
                         DeferredSink* sink, OpenedLog* out);

// An EffectSink that forwards to a target set later: the engine is built before recovery, the
// log is opened after it (recovery says where the log goes on). Effects before a target is set
// are dropped (Apply reports none).
class DeferredSink final : public EffectSink {
 public:
  void set_target(EffectSink* target) { target_.store(target, std::memory_order_release); }
  void OnEffect(const Effect& effect) override {
    if (EffectSink* t = target_.load(std::memory_order_acquire)) t->OnEffect(effect);
  }

 private:
  std::atomic<EffectSink*> target_{nullptr};
};

}  // namespace sundial::wal
