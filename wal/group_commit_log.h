// GroupCommitLog: the write-ahead log's writer. It is the engine's EffectSink: every effect is
// encoded and appended, in the order the engine reports it (so a queue's records never
// reorder), and gets the next LSN. Appending never does I/O; Commit does.
//
// Group commit without a log thread in the request path (LevelDB's DBImpl::Write is the
// model): a write takes every record appended so far — its own and other threads' — so
// records appended while a write is in progress form the next group. Who writes, who syncs
// under kAlways, and who waits:
// - a committer whose thread has nothing else to do (a single client's io thread, a blocking
//   caller) writes, syncs itself and returns durable: no hand-off at all;
// - a committer whose thread has other connections to serve registers and returns at once,
//   leaving its records' write to the sync thread, which writes whatever is pending and
//   fdatasyncs it, back to back while a registered committer waits, and after each sync wakes,
//   once, every registered committer it made durable: one write per group, and no io thread
//   waits for another's write. Its sync overlaps the requests that form the next group. Under
//   a replica bound such a committer writes before it registers: a standby is sent what is
//   written, and gets a group while the sync before it runs.
// Under kInterval and kNever every committer writes (its reply waits for the write alone).
// A sync in flight that already covers a committer's records is never repeated: a blocking
// committer waits for it.
//
// Policies (`--fsync`, docs/protocol.md "Durability and lsn"): kAlways — DurableEnd() passes a
// record only after an fdatasync that covers it; kInterval — after the write (handed to the
// OS), and the sync thread fdatasyncs at least every interval_ms without holding up writers;
// kNever — after the write, never synced (the OS decides).
//
// Segments: the log is a directory of segment files (docs/wal-format.md). When the active
// segment exceeds segment_bytes the writer starts a new one (the old one synced and closed,
// header with first LSN, fsync of the directory). Rotate() does so on demand, for checkpoints.
//
// Failure (a failed fsync poisons the log: docs/operations.md, "Disk faults"): the first failed
// write or sync puts the log into a failed state for good: every committer is woken, and every
// later append and commit gets UNAVAILABLE; nothing is retried. Reads of the engine go on;
// writes are refused. failure() is that error, naming the operation, the file and the errno; it
// is logged once, as one line.
//
// Thread safety: every method may be called from any thread. OnEffect is called under engine
// shard locks: it only encodes into a buffer under the log's mutex and never does I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/effect.h"
#include "engine/mutex.h"
#include "engine/status.h"
#include "wal/file.h"

namespace sundial::wal {

enum class FsyncPolicy : uint8_t { kAlways, kInterval, kNever };

struct LogOptions {
  FsyncPolicy policy = FsyncPolicy::kAlways;
  int64_t interval_ms = 1000;            // kInterval
  uint64_t segment_bytes = 64ull << 20;  // rotate the active segment past this size
  size_t max_group_bytes = 4u << 20;     // cap of one write
  // Zeroes kept written ahead of each segment's end (WritableFile::SetPreallocation), so an
  // fdatasync writes data only; cut off when the segment is closed. 0: off. Under kAlways and
  // kInterval the sync thread writes the next chunk when half of one is left (PreallocateAhead),
  // so a writer on an io thread does not stop for it.
  uint64_t preallocate_bytes = 1u << 20;
  // Called after each fdatasync, on the thread that made it, with its duration (metrics); must
  // be quick.
  std::function<void(uint64_t nanos)> on_sync;
};

// Counters for metrics and benchmarks.
struct LogStats {
  uint64_t records = 0;          // effects appended
  uint64_t bytes = 0;            // bytes written to segments
  uint64_t writes = 0;           // writes (one per group, more when a group exceeds the cap)
  uint64_t syncs = 0;            // fdatasync calls
  uint64_t sync_nanos = 0;       // total time spent in fdatasync
  uint64_t durable_end_lsn = 0;  // every LSN below this is durable under the policy
  uint64_t next_lsn = 0;
  uint64_t segment_number = 0;  // of the active segment
  // Bytes written to the active segment (header included). Its file is longer by the
  // preallocated zeroes, so its size on disk says nothing about how much is logged.
  uint64_t segment_bytes = 0;
  uint64_t inline_syncs = 0;         // fdatasyncs made by a committer on its own thread
  uint64_t wakes = 0;                // Wake() calls: registered committers made durable
  uint64_t sync_thread_signals = 0;  // writes that woke the sync thread (kInterval)
  // Writes that asked the sync thread for the next chunk of zeroes ahead of the segment's end
  // (LogOptions::preallocate_bytes), under kInterval and kAlways.
  uint64_t preallocations_asked = 0;
};

class GroupCommitLog final : public EffectSink {
 public:
  // A thread that commits without blocking on a sync (an io thread). The log calls Wake() —
  // from any thread, with the log's mutex held — when DurableEnd() reached what the committer
  // asked for, or when the log failed or closed. Wake is called once per registration; it must
  // be quick (post to the committer's thread) and must not call into the log. A committer is
  // registered from a Commit that returned before its records were durable until it is woken;
  // it calls Unregister before it is destroyed.
  class Committer {
   public:
    virtual void Wake() = 0;

   protected:
    ~Committer() = default;

   private:
    friend class GroupCommitLog;
    // Under the log's mutex (private to group_commit_log.cc: no annotation here can name it).
    uint64_t want_ = 0;  // the end LSN it waits for
    bool registered_ = false;
    Committer* next_ = nullptr;  // registered committers, oldest first
  };

  // Opens `dir` for appending: creates a new segment numbered `next_segment_number` whose first
  // LSN is `next_lsn` (recovery says both), fsyncs the directory; under kAlways and kInterval
  // starts the sync thread.
  static Result<std::unique_ptr<GroupCommitLog>> Open(FileSystem* fs, std::string dir,
                                                      LogOptions options, uint64_t next_lsn,
                                                      uint64_t next_segment_number);
  ~GroupCommitLog() override;  // Close()

  // EffectSink: encodes and queues the effect with the next LSN. After failure or Close,
  // effects are dropped (committing them reports UNAVAILABLE).
  void OnEffect(const Effect& effect) override;
  // One past the LSN of the last effect this thread appended to this log (0 if none yet).
  uint64_t EndLsnOfThisThread() const;
  // One past the LSN of the last effect any thread appended (lock-free). A reply that depends
  // on state others wrote (a duplicate enqueue, a repeated complete) waits for this: the state
  // it saw is in the log below it.
  uint64_t AppendedEndLsn() const;
  // Every record below this is durable under the policy (lock-free).
  uint64_t DurableEnd() const;
  // The LSN the next appended effect gets (AppendedEndLsn, never bent by a test build's planted
  // bug): with the engine that feeds this log frozen (Engine::Freeze) and the lock below held,
  // the exact end of the state a fork checkpoint writes.
  uint64_t NextLsn() const;
  // A standby applies each record it receives to its engine and then appends it here
  // (replication/standby_stream.cc): outside the engine's locks, so it holds this across the
  // pair, and a fork checkpoint holds it while it takes its cut. Before every engine lock in the
  // lock order.
  Mutex* apply_append_mu() const;

  // Makes every record below `end` durable under the policy. Writes what is appended and not
  // written yet (waiting for a write in progress, which is short). Then, under kAlways, if the
  // records still need an fdatasync: with `may_block`, this thread syncs (or waits for a sync
  // in flight that covers them) and returns with them durable; without it, `self` is
  // registered and woken once every record below `wake_at` (≤ end; 0: end) is durable (see
  // Committer), and Commit returns at once; the sync thread goes on while anyone is
  // registered. Returns OK, or the failure of the log (then nothing more becomes durable). A
  // record that was never appended (end > AppendedEndLsn) is UNAVAILABLE at once.
  Status Commit(Committer* self, uint64_t end, bool may_block, uint64_t wake_at = 0);
  // Forgets `self`'s registration, if any: after it returns, Wake is never called on `self`
  // again. A committer calls it before it is destroyed.
  void Unregister(Committer* self);

  // Commit(nullptr, end_lsn, /*may_block=*/true): for tools, tests and background threads.
  // `local_only`: durable here is enough (a replica bound is not waited for): for records no
  // client reply rests on (timers, a new primary's epoch record).
  Status WaitDurable(uint64_t end_lsn, bool local_only = false);

  // Replication (docs/replication.md, "Synchronous commit"). A primary under --replication sync
  // sets a bound: a record is durable once it is durable here and below the bound (what the
  // required standbys acknowledged); nullopt: no bound. DurableEnd never goes back: a lower bound
  // holds what is durable where it is. Wakes committers as a sync does.
  void SetReplicaBound(std::optional<uint64_t> bound);
  bool has_replica_bound() const;  // lock-free
  // Every record below this was handed to the OS (written, not necessarily synced): what a
  // primary may ship to a standby. Lock-free.
  uint64_t WrittenEnd() const;
  // The written end with where it is on disk: records below `end_lsn` are in segments up to
  // `segment_number`, whose first `segment_bytes` bytes hold them (a reader reads no further:
  // past it are preallocated zeroes or a group being written). Takes the log's lock.
  struct WrittenPosition {
    uint64_t end_lsn = 0;
    uint64_t segment_number = 0;
    uint64_t segment_bytes = 0;
  };
  WrittenPosition Written() const;
  // Called after each write of a group (under the log's lock, any thread): must be quick and
  // must not call into the log (a post to the threads that ship records).
  void SetWrittenObserver(std::function<void()> observer);
  // Writes and syncs everything appended so far (whatever the policy); returns its status.
  Status Flush();

  // Seals the active segment (written and synced) and starts a new one. Returns the first LSN
  // of the new segment and its number: every record with a smaller LSN is in sealed, durable
  // segments with smaller numbers.
  struct RotatePoint {
    uint64_t lsn = 0;
    uint64_t segment_number = 0;
  };
  Result<RotatePoint> Rotate();

  // Writes, syncs and closes; wakes every registered committer; stops the sync thread.
  // Further appends fail. Idempotent.
  Status Close();

  // OK, or the error that failed the log: UNAVAILABLE, its detail naming the operation and the
  // file, with the errno (Message(): "wal: fdatasync failed on DIR/wal-….log: Input/output
  // error (EIO)"). For /readyz, refusals and the one log line the failure writes.
  Status failure() const;
  bool failed() const;  // failure() is not OK; lock-free, for a check per request
  LogStats stats() const;
  const std::string& dir() const;

 private:
  struct Impl;
  explicit GroupCommitLog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "always", "never", "interval:MS" (MS in 1..60000) and back.
Result<LogOptions> ParseFsyncPolicy(std::string_view text, LogOptions base = {});

}  // namespace sundial::wal
