// GroupCommitLog (contract in group_commit_log.h).
//
// Layout of the work: OnEffect frames an effect as a record in a thread-local scratch buffer
// (the record encoder of log_format.h: BeginRecord, EncodeEffect, FrameRecord; the checksum is
// left zero, as it covers the segment number, which only the writer knows when it writes), then
// appends it to `pending` under `mu` and takes the next LSN. A writer (one thread at a time:
// `writing`) swaps `pending` out, seals each record for the active segment (SealRecord), writes the
// records in chunks of at most max_group_bytes (one Append each, whole records only), rotates
// when a segment is full, hands the bytes to the OS and publishes written_end. A sync (SyncNow:
// an inline committer, a blocking caller or the sync thread) captures written_end, fdatasyncs
// what was handed to the OS, publishes synced_end (and under kAlways durable_end), and wakes
// the registered committers that are now durable (WakeDurable).
//
// State split: fields marked GUARDED_BY(mu) are shared; fields marked "writer" are touched only
// by the thread that set `writing` (and by Open before anyone else can). `file` is also read by
// syncs, under `sync_mu`, which the writer takes to replace or close it; a sync runs
// concurrently with the writer's appends (WritableFile::SyncFlushed).
//
// An effect that cannot be logged (the log failed or was closed, or the record is too large)
// sets this thread's end LSN to kNotLogged, which no commit ever reaches: committing it reports
// UNAVAILABLE, so nothing unlogged is acknowledged.
//
// Errors: the first failure is kept as one Status (Fail), the file system's error under the code
// UNAVAILABLE: its detail names the operation and the file, its errno is kept.
#include "wal/group_commit_log.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "engine/mutex.h"
#include "wal/effect_codec.h"
#include "wal/failpoint.h"
#include "wal/log_format.h"

namespace sundial::wal {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kNotLogged = std::numeric_limits<uint64_t>::max();

// The end LSN of the last append of this thread, and the log it went to (logs are numbered, so
// a log opened later never sees an earlier log's value, even at the same address).
struct ThreadEnd {
  uint64_t log_id = 0;
  uint64_t end_lsn = 0;
};
thread_local ThreadEnd t_end;
std::atomic<uint64_t> g_next_log_id{1};

constexpr const char* kRecordTooLarge = "wal: an effect exceeds the 16 MiB record limit";
constexpr const char* kClosed = "wal: the log is closed";
constexpr const char* kNeverAppended = "wal: waited for an effect that was not logged";

uint64_t NanosBetween(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

}  // namespace

struct GroupCommitLog::Impl {
  const uint64_t id = g_next_log_id.fetch_add(1);  // for EndLsnOfThisThread
  FileSystem* fs = nullptr;
  std::string dir;
  LogOptions options;

  Mutex mu;
  std::atomic<bool> failed{false};        // failure is not OK
  std::atomic<uint64_t> appended_end{0};  // next_lsn, readable without mu
  mutable Mutex apply_append_mu;          // GroupCommitLog::apply_append_mu
  std::atomic<uint64_t> durable_end_atomic{0};
  std::atomic<uint64_t> written_end_atomic{0};
  std::atomic<bool> bounded{false};  // replica_bound is set
  CondVar writer_cv;                 // the writer role was given back
  CondVar synced_cv;                 // a sync finished (blocking committers wait for one)
  CondVar sync_cv;                   // wakes the sync thread
  // The sync thread waits with no deadline (nothing unsynced, or nothing asked for): only then
  // does a write under kInterval need to wake it, to schedule the next sync. Waking it at every
  // write would cost each relaxed request two context switches for nothing.
  bool sync_idle GUARDED_BY(mu) = false;
  // The active segment's preallocated zeroes run low (WritableFile::PreallocationLow): the sync
  // thread writes the next chunk, so that the writer — an io thread, under kInterval — does not
  // stop for that chunk's fdatasync (a 1–3 ms stall every MiB logged, measured).
  bool extend_wanted GUARDED_BY(mu) = false;

  // Shared: under mu.
  std::string pending GUARDED_BY(mu);  // framed records, zero checksums, [written_end, next_lsn)
  uint64_t next_lsn GUARDED_BY(mu) = 0;
  // The records below each of these were:
  uint64_t written_end GUARDED_BY(mu) = 0;    // handed to the file (and the OS)
  uint64_t synced_end GUARDED_BY(mu) = 0;     // fdatasynced
  uint64_t durable_end GUARDED_BY(mu) = 0;    // made durable (the policy, and the bound)
  uint64_t local_durable GUARDED_BY(mu) = 0;  // made durable under the policy, here
  // A primary under --replication sync: what its required standbys acknowledged. A record is
  // durable once it is durable here and below the bound (SetReplicaBound).
  std::optional<uint64_t> replica_bound GUARDED_BY(mu);
  std::function<void()> written_observer GUARDED_BY(mu);  // SetWrittenObserver
  WrittenPosition written_position GUARDED_BY(mu);
  uint64_t syncing_end GUARDED_BY(mu) = 0;  // the largest target of a sync in flight (0: none)
  int syncs_in_flight GUARDED_BY(mu) = 0;
  Status failure GUARDED_BY(mu);  // what failed, on which file, with the errno (Fail)
  // A thread holds the writer role and owns the writer state below.
  bool writing GUARDED_BY(mu) = false;
  bool closing GUARDED_BY(mu) = false;  // Close was called: appends are refused
  // The last records were written and synced and the file closed.
  bool closed GUARDED_BY(mu) = false;
  Committer* head GUARDED_BY(mu) = nullptr;  // registered committers, oldest first
  Committer* tail GUARDED_BY(mu) = nullptr;
  Clock::time_point last_sync GUARDED_BY(mu) = Clock::now();
  bool sync_stop GUARDED_BY(mu) = false;
  LogStats stats GUARDED_BY(mu);

  // Writer state (see the file comment). `file` is replaced and closed under sync_mu too.
  std::unique_ptr<WritableFile> file;
  uint64_t segment_number = 0;
  uint64_t segment_bytes = 0;  // bytes appended to the active segment
  uint64_t writer_written_end = 0;
  std::string batch;  // the swapped-out pending buffer (its capacity is reused)

  Mutex sync_mu;  // a sync's fdatasync vs the writer replacing or closing `file`
  Status sync_failure GUARDED_BY(sync_mu);  // the first failed sync
  Mutex close_mu;                           // serialises Close
  std::thread sync_thread;                  // kAlways and kInterval

  // REQUIRES: `writing` false. Takes the writer role, writes everything pending, gives the role
  // back; mu is released while writing and held again on return.
  void WritePending() REQUIRES(mu);
  // Under kAlways a committer that does not block leaves the write of its records to the sync
  // thread, which writes what is pending and then syncs it: one write per group, where each io
  // thread's round wrote its own (docs/server.md, "Who writes the log"). Not under a replica
  // bound: a synchronous standby is sent records once they are written, and must get a group
  // while the sync before it runs, not after.
  bool SyncThreadWrites() const REQUIRES(mu) {
    return options.policy == FsyncPolicy::kAlways && !replica_bound.has_value();
  }
  // The writer role was given back: a registered committer's records, pending or written by
  // this writer, may be waiting for the sync thread, which does not wait for the role (it
  // sleeps when it finds the role taken and nothing of its own to sync).
  void NudgeSyncThread() REQUIRES(mu) {
    if (options.policy == FsyncPolicy::kAlways && head != nullptr &&
        (!pending.empty() || synced_end < written_end)) {
      sync_cv.Signal();
    }
  }
  // Makes everything written so far durable with one fdatasync on this thread; mu is released
  // during it.
  void SyncNow() REQUIRES(mu);
  // The sync thread: the next chunk of zeroes ahead of the active segment's end; mu is released
  // during it.
  void ExtendAhead() REQUIRES(mu);
  // Writes `batch` (records from LSN writer_written_end on), rotating full segments, and
  // empties it. Returns the error the log fails with, if any.
  Status WriteBatch() EXCLUDES(mu);
  Status AppendBatch() EXCLUDES(mu);  // WriteBatch without emptying `batch`
  // Seals the active segment (synced and closed) and opens the next one at
  // writer_written_end. Writer only.
  Status StartNextSegment() EXCLUDES(mu);
  Status OpenSegment(uint64_t number, uint64_t first_lsn) EXCLUDES(mu);
  // Syncs and closes the active segment file, and forgets it. Writer only. A sync after a
  // failed one reports that failure (see SyncNow).
  Status SealFile() EXCLUDES(mu);
  // REQUIRES: `writing` false. Runs `step` (StartNextSegment, SealFile) holding the writer role
  // with mu released, gives the role back, and fails the log if the step failed. Returns the
  // step's status.
  template <typename Step>
  Status AsWriter(Step step) REQUIRES(mu) {
    writing = true;
    mu.Unlock();
    const Status s = step();
    mu.Lock();
    writing = false;
    writer_cv.SignalAll();
    NudgeSyncThread();
    if (!s.ok()) Fail(s);
    return s;
  }
  void CountSync(Clock::time_point start, Clock::time_point end, bool inline_sync) EXCLUDES(mu);
  // Everything below `end` was fdatasynced: under kAlways it is durable; wakes whoever waits
  // for it.
  void MarkSynced(uint64_t end) REQUIRES(mu);
  // Puts the log into the failed state for good with `cause` (the file system's error, which
  // names the operation, the file and the errno), logs it as one line and wakes every
  // committer.
  void Fail(const Status& cause) REQUIRES(mu);
  // Wakes the registered committers now durable (everyone once the log failed or closed).
  // Under mu (Wake is called under it, so an Unregister that returns has seen its last Wake).
  void WakeDurable() REQUIRES(mu);
  void Register(Committer* c, uint64_t end) REQUIRES(mu);
  void Unlink(Committer* c, Committer* prev) REQUIRES(mu);
  void Remove(Committer* c) REQUIRES(mu);  // if registered
  void RunSyncThread() EXCLUDES(mu);
  // What the policy makes durable here is `end`; what is durable is that, within the replica
  // bound when there is one. Never goes back.
  void PublishDurable(uint64_t end) REQUIRES(mu) {
    local_durable = std::max(local_durable, end);
    const uint64_t durable =
        replica_bound ? std::min(local_durable, *replica_bound) : local_durable;
    durable_end = std::max(durable_end, durable);
    durable_end_atomic.store(durable_end, std::memory_order_release);
  }
  // The commit loop of Commit and WaitDurable (`self` null: blocking only).
  Status CommitUntil(Committer* self, uint64_t end, bool may_block, uint64_t wake_at,
                     bool local_only = false) EXCLUDES(mu);
};

Status GroupCommitLog::Impl::OpenSegment(uint64_t number, uint64_t first_lsn) {
  const std::string path = JoinPath(dir, SegmentFileName(number));
  if (fs->FileExists(path)) {
    return AlreadyExists("wal: segment file already exists").WithContext(path);
  }
  auto created = fs->NewWritableFile(path);
  if (!created.ok()) return created.status();
  (*created)->SetPreallocation(options.preallocate_bytes);
  FileHeader header;
  header.file_number = number;
  header.lsn = first_lsn;
  std::string bytes;
  AppendFileHeader(header, &bytes);
  if (Status s = (*created)->Append(bytes); !s.ok()) return s;
  // The header reaches the OS now, not with the first record: a reader of the directory (a
  // primary's WalTail streaming to a standby, sundial-wal) finds a segment that has no record
  // yet, not one whose header looks damaged, however long the log stays quiet.
  if (Status s = (*created)->Flush(); !s.ok()) return s;
  if (Status s = fs->SyncDir(dir); !s.ok()) return s;
  {
    MutexLock sync_lock(&sync_mu);
    file = std::move(created).value();
  }
  segment_number = number;
  segment_bytes = bytes.size();
  return Status::Ok();
}

void GroupCommitLog::Impl::CountSync(Clock::time_point start, Clock::time_point end,
                                     bool inline_sync) {
  {
    MutexLock lock(&mu);
    ++stats.syncs;
    if (inline_sync) ++stats.inline_syncs;
    stats.sync_nanos += NanosBetween(start, end);
    last_sync = end;
  }
  if (options.on_sync) options.on_sync(NanosBetween(start, end));
}

Status GroupCommitLog::Impl::SealFile() {
  const auto start = Clock::now();
  Status s;
  {
    MutexLock sync_lock(&sync_mu);
    s = sync_failure.ok() ? file->Sync() : sync_failure;
    if (!s.ok()) sync_failure = s;
    if (s.ok()) s = file->Close();  // Close also cuts the preallocated zeroes
    file.reset();
  }
  CountSync(start, Clock::now(), false);
  return s;
}

void GroupCommitLog::Impl::MarkSynced(uint64_t end) {
  synced_end = std::max(synced_end, end);
  if (options.policy == FsyncPolicy::kAlways) PublishDurable(synced_end);
  synced_cv.SignalAll();
  WakeDurable();
}

Status GroupCommitLog::Impl::StartNextSegment() {
  // Sealed: every record in it synced.
  if (Status s = SealFile(); !s.ok()) return s;
  {
    MutexLock lock(&mu);
    // The seal's sync may be the one a registered committer waits for.
    if (failure.ok()) MarkSynced(writer_written_end);
  }
  SUNDIAL_FAILPOINT("wal.mid_rotation");  // the old segment sealed, the next not created
  if (Status s = OpenSegment(segment_number + 1, writer_written_end); !s.ok()) return s;
  MutexLock lock(&mu);
  stats.segment_number = segment_number;
  stats.segment_bytes = segment_bytes;
  return Status::Ok();
}

Status GroupCommitLog::Impl::WriteBatch() {
  Status s = AppendBatch();
  batch.clear();  // its capacity is reused by the next swap with `pending`, unless it grew huge
  if (batch.capacity() > 2 * options.max_group_bytes + kMaxRecordBytes) std::string().swap(batch);
  return s;
}

Status GroupCommitLog::Impl::AppendBatch() {
  size_t pos = 0;
  while (pos < batch.size()) {
    const size_t start = pos;
    uint64_t records = 0;
    while (pos < batch.size()) {
      char* record = batch.data() + pos;
      const size_t record_bytes = FramedRecordBytes(record);
      const size_t chunk = pos - start;
      if (chunk > 0 && (chunk + record_bytes > options.max_group_bytes ||
                        segment_bytes + chunk >= options.segment_bytes)) {
        break;
      }
      SealRecord(segment_number, record);
      pos += record_bytes;
      ++records;
    }
    const std::string_view chunk(batch.data() + start, pos - start);
    if (Status s = file->Append(chunk); !s.ok()) return s;
    segment_bytes += chunk.size();
    writer_written_end += records;
    {
      MutexLock lock(&mu);
      ++stats.writes;
      stats.bytes += chunk.size();
      stats.segment_bytes = segment_bytes;
    }
    if (segment_bytes >= options.segment_bytes) {
      if (Status s = StartNextSegment(); !s.ok()) return s;
    }
  }
  return Status::Ok();
}

void GroupCommitLog::Impl::Fail(const Status& cause) {
  if (!failure.ok()) return;
  // Retry after a restart (UNAVAILABLE); the detail and the errno travel on, so
  // failure().Message() names the operation and the file and says "Input/output error".
  failure = cause.WithCode(Code::kUnavailable);
  failed.store(true, std::memory_order_release);
  // One line, whatever follows (later syncs and writes report this failure, not their own): the
  // operator greps for it (docs/operations.md, "Disk faults").
  std::fprintf(stderr,
               "sundiald: WRITE-AHEAD LOG FAILED: %s (%s); the log is read-only until restart: "
               "writes are refused with UNAVAILABLE, reads go on, nothing is retried "
               "(docs/operations.md, \"Disk faults\")\n",
               failure.Message().c_str(), std::string(CodeName(cause.code())).c_str());
  std::fflush(stderr);
  pending.clear();
  writer_cv.SignalAll();
  synced_cv.SignalAll();
  sync_cv.SignalAll();
  WakeDurable();
}

void GroupCommitLog::Impl::Register(Committer* c, uint64_t end) {
  if (c->registered_) {
    c->want_ = std::max(c->want_, end);
    return;
  }
  c->want_ = end;
  c->registered_ = true;
  c->next_ = nullptr;
  if (tail != nullptr) {
    tail->next_ = c;
  } else {
    head = c;
  }
  tail = c;
}

void GroupCommitLog::Impl::Unlink(Committer* c, Committer* prev) {
  if (prev != nullptr) {
    prev->next_ = c->next_;
  } else {
    head = c->next_;
  }
  if (tail == c) tail = prev;
  c->next_ = nullptr;
  c->registered_ = false;
}

void GroupCommitLog::Impl::Remove(Committer* c) {
  if (!c->registered_) return;
  Committer* prev = nullptr;
  for (Committer* it = head; it != nullptr; prev = it, it = it->next_) {
    if (it == c) return Unlink(c, prev);
  }
}

void GroupCommitLog::Impl::WakeDurable() {
  const bool everyone = !failure.ok() || closed;
  Committer* prev = nullptr;
  Committer* c = head;
  while (c != nullptr) {
    Committer* next = c->next_;
    if (everyone || c->want_ <= durable_end) {
      Unlink(c, prev);
      ++stats.wakes;
      c->Wake();
    } else {
      prev = c;
    }
    c = next;
  }
}

void GroupCommitLog::Impl::WritePending() {
  writing = true;
  batch.swap(pending);
  mu.Unlock();
  const bool records = !batch.empty();
  if (records) SUNDIAL_FAILPOINT("wal.before_write");
  Status s = WriteBatch();
  if (s.ok()) s = file->Flush();  // handed to the OS before anyone counts on it
  // Only a log with a sync thread hands the zeroes over (kNever writes them itself).
  const bool extend = s.ok() && options.policy != FsyncPolicy::kNever && file->PreallocationLow();
  if (s.ok() && records) SUNDIAL_FAILPOINT("wal.after_write_before_sync");
  if (!s.ok()) {
    MutexLock sync_lock(&sync_mu);
    file.reset();  // still the writer: nobody else touches it
  }
  mu.Lock();
  writing = false;
  writer_cv.SignalAll();
  if (!s.ok()) return Fail(s);
  if (!failure.ok()) return;  // a sync failed meanwhile
  written_end = writer_written_end;
  NudgeSyncThread();
  written_end_atomic.store(written_end, std::memory_order_release);
  // The writer role was just given back under mu: its segment fields match written_end.
  written_position = {written_end, segment_number, segment_bytes};
  if (written_observer) written_observer();
  if (extend && !extend_wanted) {
    extend_wanted = true;  // once per chunk: the flag stays up until the thread ran it
    ++stats.preallocations_asked;
    sync_cv.Signal();
  }
  if (options.policy != FsyncPolicy::kAlways) {
    PublishDurable(written_end);
    WakeDurable();
    if (options.policy == FsyncPolicy::kInterval && sync_idle) {
      sync_idle = false;  // once: it wakes, whatever is written until it runs
      ++stats.sync_thread_signals;
      sync_cv.Signal();
    }
  }
}

void GroupCommitLog::Impl::SyncNow() {
  const uint64_t target = written_end;
  const bool sync_thread = std::this_thread::get_id() == this->sync_thread.get_id();
  syncing_end = std::max(syncing_end, target);
  ++syncs_in_flight;
  mu.Unlock();
  // Everything below `target` was handed to the OS: one fdatasync makes it durable, while a
  // writer goes on appending (a sync does not hold the writer role).
  Status s;
  const auto start = Clock::now();
  {
    MutexLock sync_lock(&sync_mu);
    if (!sync_failure.ok()) {
      // An earlier sync failed: whatever this one says, what the failed one covered may be
      // gone (a later fdatasync can succeed after the kernel dropped pages: fsyncgate).
      s = sync_failure;
    } else if (file) {
      s = file->SyncFlushed();
      if (!s.ok()) sync_failure = s;  // before sync_mu is released: no later sync counts
    }                                 // no file: closed, everything was synced
  }
  if (s.ok()) SUNDIAL_FAILPOINT("wal.after_sync_before_reply");
  CountSync(start, Clock::now(), !sync_thread);
  mu.Lock();
  if (--syncs_in_flight == 0) syncing_end = 0;
  if (!s.ok()) return Fail(s);
  if (!failure.ok()) return;  // a write failed meanwhile
  MarkSynced(target);
}

void GroupCommitLog::Impl::ExtendAhead() {
  extend_wanted = false;
  mu.Unlock();
  Status s;
  {
    MutexLock sync_lock(&sync_mu);  // the writer replaces or closes `file` under it
    if (!sync_failure.ok()) {
      s = sync_failure;
    } else if (file) {
      s = file->PreallocateAhead();
      if (!s.ok()) sync_failure = s;  // its fdatasync covered records as well
    }
  }
  mu.Lock();
  if (!s.ok()) Fail(s);
}

void GroupCommitLog::Impl::RunSyncThread() {
  MutexLock lock(&mu);
  while (!sync_stop && failure.ok()) {
    if (extend_wanted) {
      ExtendAhead();
      continue;
    }
    // Under kAlways it syncs only when asked (a committer registered): a lone committer syncs
    // on its own thread, and the thread stays asleep. What a registered committer left
    // unwritten (SyncThreadWrites) is written first, with everything else pending, and then
    // synced below before this thread writes again: appends that keep coming must not hold
    // the sync off.
    if (options.policy == FsyncPolicy::kAlways && head != nullptr && !pending.empty() && !writing &&
        !closed) {
      WritePending();
      if (!failure.ok() || sync_stop) continue;
    }
    const bool unsynced = synced_end < written_end && !closed;
    const bool wanted = options.policy == FsyncPolicy::kInterval || head != nullptr;
    if (!unsynced || !wanted || syncing_end >= written_end) {
      sync_idle = true;
      sync_cv.Wait(&mu);
      sync_idle = false;
      continue;
    }
    if (options.policy == FsyncPolicy::kInterval) {
      const auto due = last_sync + std::chrono::milliseconds(options.interval_ms);
      if (Clock::now() < due) {
        (void)sync_cv.WaitUntil(&mu, due);
        continue;
      }
    }
    SyncNow();
  }
}

Status GroupCommitLog::Impl::CommitUntil(Committer* self, uint64_t end, bool may_block,
                                         uint64_t wake_at, bool local_only) {
  MutexLock lock(&mu);
  for (;;) {
    if (!failure.ok()) return failure;
    if (end <= durable_end || (local_only && end <= local_durable)) return Status::Ok();
    if (end <= local_durable) {
      // Durable here; what is missing is a standby's acknowledgement (the replica bound),
      // which wakes committers as a sync does. Nobody's thread blocks on the network.
      if (self == nullptr) {
        synced_cv.Wait(&mu);
        continue;
      }
      const bool early = wake_at != 0 && wake_at < end && wake_at > durable_end;
      Register(self, early ? wake_at : end);
      return Status::Ok();
    }
    if (end > next_lsn) return Unavailable(kNeverAppended);
    if (closed) return Unavailable(kClosed);
    if (written_end < end && (may_block || self == nullptr || !SyncThreadWrites())) {
      // Not written yet: write everything pending (ours and others'), or wait for the write in
      // progress (short), which may not cover ours.
      if (writing) {
        writer_cv.Wait(&mu);
      } else {
        WritePending();
      }
      continue;
    }
    // Written, or left for the sync thread to write (SyncThreadWrites); under kAlways it needs
    // an fdatasync.
    if (syncing_end >= end) {
      // A sync in flight covers it: wait for that one rather than start another.
      if (may_block) {
        synced_cv.Wait(&mu);
        continue;
      }
    } else if (may_block) {
      SyncNow();
      continue;
    }
    // Woken at `wake_at` if that is still to come, else at `end` (which is: see above); never
    // left unregistered with records still to be made durable.
    const bool early = wake_at != 0 && wake_at < end && wake_at > durable_end;
    Register(self, early ? wake_at : end);
    sync_cv.Signal();
    return Status::Ok();
  }
}

GroupCommitLog::GroupCommitLog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GroupCommitLog::~GroupCommitLog() { (void)Close(); }

Result<std::unique_ptr<GroupCommitLog>> GroupCommitLog::Open(FileSystem* fs, std::string dir,
                                                             LogOptions options, uint64_t next_lsn,
                                                             uint64_t next_segment_number) {
  if (options.segment_bytes == 0) return InvalidArgument("wal: segment_bytes must be positive");
  if (options.max_group_bytes == 0) {
    return InvalidArgument("wal: max_group_bytes must be positive");
  }
  if (options.policy == FsyncPolicy::kInterval && options.interval_ms <= 0) {
    return InvalidArgument("wal: interval_ms must be positive");
  }
  if (next_lsn == kNotLogged) return InvalidArgument("wal: next_lsn out of range");
  Status s = fs->CreateDir(dir);
  if (!s.ok()) return s;

  auto impl = std::make_unique<Impl>();
  impl->fs = fs;
  impl->dir = std::move(dir);
  impl->options = options;
  impl->written_end_atomic.store(next_lsn, std::memory_order_release);
  impl->appended_end.store(next_lsn, std::memory_order_release);
  impl->writer_written_end = next_lsn;
  if (Status s = impl->OpenSegment(next_segment_number, next_lsn); !s.ok()) return s;
  {
    MutexLock lock(&impl->mu);  // nobody else has the log yet: taken for the annotations
    impl->next_lsn = impl->written_end = impl->synced_end = next_lsn;
    impl->PublishDurable(next_lsn);
    impl->stats.segment_number = next_segment_number;
    impl->stats.segment_bytes = impl->segment_bytes;
    impl->written_position = {next_lsn, next_segment_number, impl->segment_bytes};
    impl->stats.next_lsn = impl->stats.durable_end_lsn = next_lsn;
  }
  if (options.policy != FsyncPolicy::kNever) {
    Impl* raw = impl.get();
    impl->sync_thread = std::thread([raw] { raw->RunSyncThread(); });
  }
  return std::unique_ptr<GroupCommitLog>(new GroupCommitLog(std::move(impl)));
}

void GroupCommitLog::OnEffect(const Effect& effect) {
  // A derived effect (a dependent released or failed by the effect before it) is not logged:
  // Apply of that cause derives it again (engine/effect.h). The request's end LSN stays the
  // cause's, which is what its durability waits for.
  if (effect.derived) return;
  thread_local std::string scratch;
  scratch.clear();
  const size_t start = BeginRecord(&scratch);
  EncodeEffect(effect, &scratch);
  const bool framed = FrameRecord(RecordType::kEffect, start, &scratch);  // sealed when written
  Impl& d = *impl_;
  ReleasableMutexLock lock(&d.mu);
  t_end.log_id = d.id;
  if (!d.failure.ok() || d.closing) {
    t_end.end_lsn = kNotLogged;
  } else if (!framed) {
    t_end.end_lsn = kNotLogged;
    d.Fail(InvalidArgument(kRecordTooLarge));
  } else {
    d.pending.append(scratch);
    t_end.end_lsn = ++d.next_lsn;
    d.appended_end.store(d.next_lsn, std::memory_order_release);
    ++d.stats.records;
  }
  lock.Release();
  if (scratch.capacity() > (1u << 20)) std::string().swap(scratch);
}

uint64_t GroupCommitLog::EndLsnOfThisThread() const {
  return t_end.log_id == impl_->id ? t_end.end_lsn : 0;
}

uint64_t GroupCommitLog::AppendedEndLsn() const {
  // The planted bug of the torture's proof (test build only, wal/failpoint.h): a reply that
  // waits for this waits for nothing, so it leaves before its record is written and synced.
  if (SUNDIAL_BUG("ack_before_sync")) return DurableEnd();
  return impl_->appended_end.load(std::memory_order_acquire);
}

uint64_t GroupCommitLog::NextLsn() const {
  return impl_->appended_end.load(std::memory_order_acquire);
}

Mutex* GroupCommitLog::apply_append_mu() const { return &impl_->apply_append_mu; }

uint64_t GroupCommitLog::DurableEnd() const {
  return impl_->durable_end_atomic.load(std::memory_order_acquire);
}

Status GroupCommitLog::Commit(Committer* self, uint64_t end, bool may_block, uint64_t wake_at) {
  return impl_->CommitUntil(self, end, may_block, wake_at);
}

void GroupCommitLog::Unregister(Committer* self) {
  Impl& d = *impl_;
  MutexLock lock(&d.mu);
  d.Remove(self);
}

Status GroupCommitLog::WaitDurable(uint64_t end_lsn, bool local_only) {
  return impl_->CommitUntil(nullptr, end_lsn, /*may_block=*/true, 0, local_only);
}

uint64_t GroupCommitLog::WrittenEnd() const {
  return impl_->written_end_atomic.load(std::memory_order_acquire);
}

GroupCommitLog::WrittenPosition GroupCommitLog::Written() const {
  MutexLock lock(&impl_->mu);
  return impl_->written_position;
}

void GroupCommitLog::SetReplicaBound(std::optional<uint64_t> bound) {
  Impl& d = *impl_;
  MutexLock lock(&d.mu);
  d.replica_bound = bound;
  d.bounded.store(bound.has_value(), std::memory_order_release);
  d.PublishDurable(d.local_durable);
  d.synced_cv.SignalAll();
  d.WakeDurable();
}

bool GroupCommitLog::has_replica_bound() const {
  return impl_->bounded.load(std::memory_order_acquire);
}

void GroupCommitLog::SetWrittenObserver(std::function<void()> observer) {
  MutexLock lock(&impl_->mu);
  impl_->written_observer = std::move(observer);
}

Status GroupCommitLog::Flush() {
  Impl& d = *impl_;
  MutexLock lock(&d.mu);
  const uint64_t target = d.next_lsn;
  for (;;) {
    if (!d.failure.ok()) return d.failure;
    if (d.synced_end >= target) return Status::Ok();
    if (d.closed) return Unavailable(kClosed);
    if (d.written_end < target) {
      if (d.writing) {
        d.writer_cv.Wait(&d.mu);
      } else {
        d.WritePending();
      }
    } else if (d.syncing_end >= target) {
      d.synced_cv.Wait(&d.mu);
    } else {
      d.SyncNow();
    }
  }
}

Result<GroupCommitLog::RotatePoint> GroupCommitLog::Rotate() {
  Impl& d = *impl_;
  MutexLock lock(&d.mu);
  for (;;) {
    if (!d.failure.ok()) return d.failure;
    if (d.closing || d.closed) return Unavailable(kClosed);
    if (!d.writing) break;
    d.writer_cv.Wait(&d.mu);
  }
  d.WritePending();  // what was appended before the call goes into the sealed segment
  if (!d.failure.ok()) return d.failure;
  // mu was held since WritePending gave the writer role back: nobody took it.
  if (!d.AsWriter([&d] { return d.StartNextSegment(); }).ok()) return d.failure;
  return RotatePoint{d.writer_written_end, d.segment_number};
}

Status GroupCommitLog::Close() {
  Impl& d = *impl_;
  MutexLock close_lock(&d.close_mu);
  {
    MutexLock lock(&d.mu);
    d.closing = true;
    while (d.writing) d.writer_cv.Wait(&d.mu);
    if (!d.closed && d.failure.ok()) {
      d.WritePending();
      if (d.failure.ok() && !d.writing && d.AsWriter([&d] { return d.SealFile(); }).ok()) {
        d.synced_end = d.written_end;
        d.PublishDurable(d.written_end);
      }
    }
    d.closed = true;
    d.sync_stop = true;
    d.sync_cv.SignalAll();
    d.synced_cv.SignalAll();
    d.WakeDurable();  // closed or failed: nobody waits for anything any more
  }
  if (d.sync_thread.joinable()) d.sync_thread.join();
  {
    MutexLock sync_lock(&d.sync_mu);
    d.file.reset();
  }
  MutexLock lock(&d.mu);
  return d.failure;
}

Status GroupCommitLog::failure() const {
  MutexLock lock(&impl_->mu);
  return impl_->failure;
}

bool GroupCommitLog::failed() const { return impl_->failed.load(std::memory_order_acquire); }

LogStats GroupCommitLog::stats() const {
  MutexLock lock(&impl_->mu);
  LogStats s = impl_->stats;
  s.durable_end_lsn = impl_->durable_end;
  s.next_lsn = impl_->next_lsn;
  return s;
}

const std::string& GroupCommitLog::dir() const { return impl_->dir; }

Result<LogOptions> ParseFsyncPolicy(std::string_view text, LogOptions base) {
  static constexpr const char* kBadPolicy =
      "wal: fsync policy must be always, never or interval:MS with MS in 1..60000";
  if (text == "always") {
    base.policy = FsyncPolicy::kAlways;
    return base;
  }
  if (text == "never") {
    base.policy = FsyncPolicy::kNever;
    return base;
  }
  constexpr std::string_view kPrefix = "interval:";
  if (!text.starts_with(kPrefix)) return InvalidArgument(kBadPolicy);
  std::string_view digits = text.substr(kPrefix.size());
  if (digits.empty() || digits.size() > 5 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return InvalidArgument(kBadPolicy);
  }
  int64_t ms = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ms);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || ms < 1 || ms > 60000) {
    return InvalidArgument(kBadPolicy);
  }
  base.policy = FsyncPolicy::kInterval;
  base.interval_ms = ms;
  return base;
}

}  // namespace sundial::wal
