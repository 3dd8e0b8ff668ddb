// GroupCommitLog: the write-ahead log's writer. It is the engine's EffectSink: every effect is
// encoded and appended, in the order the engine reports it (so a queue's records never
// reorder), and gets the next LSN. A dedicated log thread is the group-commit leader: it takes
// everything appended since its last write, writes it with one write, syncs once according to
// the policy, and completes every waiter of that group with the shared status (LevelDB's
// DBImpl::Write, with the leader on its own thread so no caller ever blocks on fdatasync).
//
// Policies (SPEC §4): kAlways — a waiter is completed only after the fdatasync that covers its
// LSN; kInterval — completed after the write, with an fdatasync at least every interval_ms;
// kNever — completed after the write, never synced (the OS decides).
//
// Segments: the log is a directory of segment files (docs/wal-format.md). When the active
// segment exceeds segment_bytes the leader starts a new one (header with first LSN, fsync of the
// directory). Rotate() does so on demand, for checkpoints.
//
// Failure (STYLE: a failed fsync poisons the log): the first failed write or sync puts the log
// into a failed state for good: the waiters of that group and every later append/waiter get
// UNAVAILABLE; nothing is retried. Reads of the engine go on; writes are refused by the server.
//
// Thread safety: every method may be called from any thread. OnEffect is called under engine
// shard locks: it only encodes into a buffer under the log's mutex and never does I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/effect.h"
#include "engine/status.h"
#include "wal/file.h"

namespace sundial::wal {

enum class FsyncPolicy : uint8_t { kAlways, kInterval, kNever };

struct LogOptions {
  FsyncPolicy policy = FsyncPolicy::kAlways;
  int64_t interval_ms = 1000;            // kInterval
  uint64_t segment_bytes = 64ull << 20;  // rotate the active segment past this size
  size_t max_group_bytes = 4u << 20;     // cap of one group's write
  // Zeroes kept written ahead of each segment's end (WritableFile::SetPreallocation), so an
  // fdatasync writes data only; cut off when the segment is closed. 0: off.
  uint64_t preallocate_bytes = 1u << 20;
  // kInterval / kNever: the threads that append write their own records (WriteNow), as Redis
  // writes its AOF in the event loop before it replies, instead of waking the log thread and
  // waiting for it; the log thread then only syncs when due, writes what no one wrote within
  // 5 ms (effects of timers), rotates and closes. Ignored under kAlways.
  bool inline_writes = false;
  // Called on the log thread after each fdatasync with its duration (metrics); must be quick.
  std::function<void(uint64_t nanos)> on_sync;
};

// Counters for metrics and benchmarks.
struct LogStats {
  uint64_t records = 0;          // effects appended
  uint64_t bytes = 0;            // bytes written to segments
  uint64_t writes = 0;           // group writes
  uint64_t syncs = 0;            // fdatasync calls
  uint64_t sync_nanos = 0;       // total time spent in fdatasync
  uint64_t durable_end_lsn = 0;  // every LSN below this is durable under the policy
  uint64_t next_lsn = 0;
  uint64_t segment_number = 0;  // of the active segment
};

class GroupCommitLog final : public EffectSink {
 public:
  using Done = std::function<void(Status)>;

  // Opens `dir` for appending: creates a new segment numbered `next_segment_number` whose first
  // LSN is `next_lsn` (recovery says both), fsyncs the directory, starts the log thread.
  static Result<std::unique_ptr<GroupCommitLog>> Open(FileSystem* fs, std::string dir,
                                                      LogOptions options, uint64_t next_lsn,
                                                      uint64_t next_segment_number);
  ~GroupCommitLog() override;  // Close()

  // EffectSink: encodes and queues the effect with the next LSN. After failure, effects are
  // dropped (the failure is reported to every waiter).
  void OnEffect(const Effect& effect) override;
  // One past the LSN of the last effect this thread appended to this log (0 if none yet): the
  // `end_lsn` to wait for. The server reads it after an engine operation.
  uint64_t EndLsnOfThisThread() const;
  // One past the LSN of the last effect any thread appended (lock-free). A reply that depends
  // on state others wrote (a duplicate enqueue, a repeated complete) waits for this: the state
  // it saw is in the log below it.
  uint64_t AppendedEndLsn() const;

  // With LogOptions::inline_writes (kInterval, kNever): writes every appended record now, on
  // this thread, and completes the waiters it covers, so a WhenDurable for anything appended
  // before the call completes at once. Returns the log's failure, if any. Elsewhere: a no-op.
  Status WriteNow();

  // Calls `done` when every record with LSN < end_lsn is durable under the policy, or with
  // UNAVAILABLE if the log failed first: on the log thread, or at once on the caller's thread
  // if that is already known. `done` must be quick (post to an io thread).
  void WhenDurable(uint64_t end_lsn, Done done);
  // Blocking form of WhenDurable, for tools and tests.
  Status WaitDurable(uint64_t end_lsn);
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

  // Flushes, syncs and stops the log thread. Further appends fail. Idempotent.
  Status Close();

  Status failure() const;  // OK, or the error that failed the log
  bool failed() const;     // failure() is not OK; lock-free, for a check per request
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
