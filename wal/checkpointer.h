// Checkpointer: bounds disk use and recovery time (docs/wal-format.md, "Checkpoints"). In the
// background it writes a snapshot of the state covering a prefix of the log, then deletes the
// segments and older snapshots that prefix made obsolete. Requests go on meanwhile: the live engine
// is never locked for a checkpoint.
//
// One checkpoint (RunOnce):
//   1. Rotate the log: every record with LSN < X is now in sealed, synced segments.
//   2. The state at some L >= X, written as snapshot-L.snap.tmp and fdatasynced, one of two ways
//      (CheckpointOptions::mode):
//      - replay: build a private engine from the newest snapshot and the sealed segments
//        (read-only recovery up to L = X) and write it. This costs a second copy of the state
//        while it runs, and CPU like a recovery: every logged byte is decoded and applied again.
//      - fork (Redis's BGSAVE; docs/design/checkpoint-from-live-state.md): freeze the live
//        engine (Engine::Freeze, with the log's apply_append_mu) for the instant of a fork():
//        L = the log's next LSN then, an exact cut. The child process, which shares the frozen
//        image copy-on-write, writes it and exits; the parent goes on at once and waits for it.
//        Work in proportion to the live state, not to the log; the memory is what requests
//        write meanwhile (copy-on-write). When fork fails, the replay runs instead (counted).
//      A replay runs at a lower priority (nice +10). In fork mode the thread keeps the
//      requests' priority (it holds every engine lock while it forks) and the child is reniced.
//   3. Once every record below L is durable: rename the .tmp into place, fsync the directory.
//   4. Delete every segment numbered below the one that starts at X (all its records are below
//      L), and every older snapshot, then fsync the directory. Recovery skips the records of
//      the segment at X that the snapshot covers (those below L).
// A crash at any step leaves a directory that recovers to the same state: before the rename
// only a .tmp exists (deleted on start); after it, recovery uses the new snapshot and removes
// the segments and snapshots it covers itself. A crash of the parent kills the child
// (PR_SET_PDEATHSIG); a child that dies fails that checkpoint and nothing else.
//
// When (Due): the segments on disk hold at least `min_log_bytes` and at least `growth_percent`
// percent of the newest snapshot's size (Redis's auto-aof-rewrite rule: rewriting costs a pass
// over the live data, so do it when the log has grown in proportion), or there are
// `max_segments` segment files or more. Disk use so stays within about (2 + growth/100) times
// the live data, plus min_log_bytes, however long the server runs.
//
// Thread safety: RunOnce, Due and stats may be called from any thread; RunOnce calls are
// serialised. Start/Stop from one owner thread.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/mutex.h"
#include "engine/status.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"
#include "wal/snapshot.h"

namespace sundial::wal {

enum class CheckpointMode : uint8_t {
  kReplay,  // a private engine rebuilt from the log
  kFork,    // the live engine, written by a forked child (needs the engine and a POSIX fs)
};

struct CheckpointOptions {
  CheckpointMode mode = CheckpointMode::kReplay;  // --checkpoint-mode
  uint64_t min_log_bytes = 64ull << 20;           // --checkpoint-bytes
  uint32_t growth_percent = 100;                  // --checkpoint-growth
  uint32_t max_segments = 64;                     // --checkpoint-segments (at least 2)
  int64_t poll_ms = 100;                          // how often the background thread checks Due
  bool lower_priority = true;                     // nice +10 for the background thread
  Engine::Options engine_options;                 // of the private engine built in step 2
  // Fork mode's fork(); tests make it fail (-1 with errno set) to see the fallback.
  pid_t (*fork)() = ::fork;
};

// Points where a test may simulate a crash: the hook returns non-OK and RunOnce stops there,
// returning that status, with the files as a crash at that point would leave them.
enum class CheckpointStep : uint8_t {
  kRotated,             // after step 1
  kSnapshotTempSynced,  // snapshot .tmp complete and synced, not renamed
  kSnapshotRenamed,     // snapshot in place, nothing deleted yet
  kFileRemoved,         // after each deletion in step 4
};
using CheckpointHook = std::function<Status(CheckpointStep)>;

struct CheckpointResult {
  uint64_t covered_lsn = 0;
  uint64_t effects = 0;  // in the snapshot
  uint64_t snapshot_bytes = 0;
  uint64_t segments_removed = 0;
  uint64_t snapshots_removed = 0;
  uint64_t bytes_removed = 0;
  int64_t duration_ms = 0;  // wall time of the whole checkpoint
  bool forked = false;      // written by a forked child (else by a replay)
  int64_t pause_us = 0;     // forked: how long the engine was frozen (the fork included)
};

struct CheckpointStats {
  uint64_t checkpoints = 0;
  uint64_t failures = 0;
  uint64_t fork_fallbacks = 0;  // fork mode, fork() failed: the replay ran instead
  Status last_error;
  CheckpointResult last;
};

class Checkpointer {
 public:
  // `fs` and `log` must outlive the checkpointer; `log` writes to `dir`. Fork mode needs `live`,
  // the engine whose effects `log` records (it must outlive the checkpointer too); without it
  // checkpoints replay.
  Checkpointer(FileSystem* fs, std::string dir, GroupCommitLog* log, CheckpointOptions options,
               const Engine* live = nullptr);
  ~Checkpointer();  // Stop()
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Whether the directory's segments call for a checkpoint now.
  Result<bool> Due() const;
  // Runs one checkpoint now (whether Due or not).
  Result<CheckpointResult> RunOnce(const CheckpointHook& hook = nullptr);

  // Starts the background thread: every poll_ms, RunOnce when Due. A failed checkpoint is
  // counted and retried after a backoff that doubles per failure (up to 60 s); its temp file
  // is removed.
  void Start();
  // Stops the background thread; a fork checkpoint in progress is abandoned (its child killed,
  // its temp file removed: "checkpoint: stopped with the server"), a replay one finishes first.
  void Stop();

  CheckpointStats stats() const;

  // A primary keeps the segments its standbys still need (docs/replication.md, "Retention"):
  // step 4 keeps a covered segment that holds records at or after retain_from(), newest first,
  // while the kept segments total at most `max_bytes`; past that a standby that far behind is
  // re-seeded from a snapshot. Kept segments do not count toward Due. Any thread, any time.
  void SetRetention(std::function<uint64_t()> retain_from, uint64_t max_bytes);

 private:
  Result<CheckpointResult> Run(const CheckpointHook& hook) REQUIRES(run_mu_);
  // Step 2 of each mode: the snapshot's temp file of the state at *covered_lsn (in: X; out: L).
  Result<SnapshotInfo> WriteReplayed(uint64_t covered_lsn) REQUIRES(run_mu_);
  // Fork mode. UNAVAILABLE with a detail starting kForkFailed when there was no child.
  Result<SnapshotInfo> WriteForked(uint64_t* covered_lsn, CheckpointResult* result)
      REQUIRES(run_mu_);
  // The covered segments (numbered below `below`) that SetRetention keeps.
  std::vector<uint64_t> RetainedSegments(const std::vector<std::string>& names, uint64_t below,
                                         uint64_t covered_lsn);
  void Loop();

  FileSystem* const fs_;
  const std::string dir_;
  GroupCommitLog* const log_;
  const CheckpointOptions options_;
  const Engine* const live_;
  ManualClock clock_;  // the private engine's clock: Apply takes times from the effects

  Mutex run_mu_;  // serialises RunOnce
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  pid_t child_ GUARDED_BY(mu_) = 0;  // a fork checkpoint's writer, while it runs
  CheckpointStats stats_ GUARDED_BY(mu_);
  std::function<uint64_t()> retain_from_ GUARDED_BY(mu_);
  uint64_t retain_max_bytes_ GUARDED_BY(mu_) = 0;
  // Segments numbered below this were covered by the last checkpoint (kept for a standby, or
  // about to go): Due does not count them.
  std::atomic<uint64_t> covered_below_{0};
  std::thread thread_;
};

}  // namespace sundial::wal
