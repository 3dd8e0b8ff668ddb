// GroupCommitLog (contract in group_commit_log.h).
//
// Layout of the work: OnEffect encodes an effect into a thread-local scratch buffer behind a
// 13-byte record header whose length and type are filled and whose checksum is left zero (the
// checksum covers the segment number, which only the log thread knows when it writes), then
// appends it to `pending` under `mu` and takes the next LSN. The log thread swaps `pending` out,
// fills the checksums for the active segment, writes the records in chunks of at most
// max_group_bytes (one Append each, whole records only), rotates when a segment is full, syncs
// per policy and completes every waiter the group made durable.
//
// State split: fields marked GUARDED_BY(mu) are shared; fields marked "log thread" are touched
// only by the log thread (and by Open before the thread starts).
//
// An effect that cannot be logged (the log failed or was closed, or the record is too large)
// sets this thread's end LSN to kNotLogged, which no waiter ever reaches: waiting on it reports
// UNAVAILABLE, so nothing unlogged is acknowledged.
#include "wal/group_commit_log.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "wal/effect_codec.h"
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

constexpr const char* kWriteFailed = "wal: write failed; the log is read-only until restart";
constexpr const char* kSyncFailed = "wal: fdatasync failed; the log is read-only until restart";
constexpr const char* kSegmentFailed =
    "wal: could not start a new segment; the log is read-only until restart";
constexpr const char* kRecordTooLarge =
    "wal: an effect exceeds the 16 MiB record limit; the log is read-only until restart";
constexpr const char* kClosed = "wal: the log is closed";
constexpr const char* kNeverAppended = "wal: waited for an effect that was not logged";

}  // namespace

struct GroupCommitLog::Impl {
  const uint64_t id = g_next_log_id.fetch_add(1);  // for EndLsnOfThisThread
  FileSystem* fs = nullptr;
  std::string dir;
  LogOptions options;

  std::mutex file_mu;  // the leader's state below: the log thread, or a WriteNow (before mu)
  std::mutex mu;
  std::atomic<bool> failed{false};        // failure is not OK
  std::atomic<uint64_t> appended_end{0};  // next_lsn, readable without mu
  std::condition_variable work_cv;        // wakes the log thread
  std::condition_variable state_cv;       // wakes Flush / Rotate callers after each group

  // GUARDED_BY(mu)
  std::string pending;  // framed records with zero checksums, LSNs [written_end, next_lsn)
  uint64_t next_lsn = 0;
  uint64_t written_end = 0;               // records below this were handed to the file
  uint64_t synced_end = 0;                // records below this were fdatasynced
  uint64_t durable_end = 0;               // records below this are durable under the policy
  std::multimap<uint64_t, Done> waiters;  // by end_lsn
  Status failure;
  bool closing = false;
  bool stopped = false;             // the log thread has finished
  uint64_t sync_requested_end = 0;  // Flush: sync at least up to here
  uint64_t rotations_requested = 0;
  uint64_t rotations_done = 0;
  uint64_t rotated_at_lsn = 0;   // first LSN of the segment the last rotation opened
  uint64_t rotated_segment = 0;  // and its number
  LogStats stats;

  // GUARDED_BY(file_mu): the log thread, or an appender in WriteNow.
  std::unique_ptr<WritableFile> file;
  uint64_t segment_number = 0;
  uint64_t segment_bytes = 0;         // bytes appended to the active segment
  uint64_t segment_synced_bytes = 0;  // of which fdatasynced
  uint64_t leader_written_end = 0;
  uint64_t leader_synced_end = 0;
  // Written by a leader holding file_mu, under mu as well: the log thread's wait (HasWork, under
  // mu only) reads it while an inline writer may be syncing a full segment.
  Clock::time_point last_sync = Clock::now();
  std::string batch;  // the swapped-out pending buffer (its capacity is reused)

  std::mutex close_mu;  // serialises Close
  std::thread thread;

  void Run();
  // Writes `batch` (records from LSN leader_written_end on), rotating full segments, and
  // empties it. On error returns the detail the log fails with and sets *cause.
  const char* WriteBatch(Status* cause);
  const char* AppendBatch(Status* cause);  // WriteBatch without emptying `batch`
  // Hands the file's buffered bytes to the OS (no sync); on error as WriteBatch.
  const char* FlushFile(Status* cause);
  const char* Sync(Status* cause);
  // Seals the active segment (synced) and opens the next one at leader_written_end.
  const char* StartNextSegment(Status* cause);
  const char* OpenSegment(uint64_t number, uint64_t first_lsn, Status* cause);
  // Puts the log into the failed state and fails every waiter. REQUIRES: lock holds mu.
  void Fail(std::unique_lock<std::mutex>& lock, const char* detail, Status cause);
  // Completes every waiter with end_lsn <= durable_end. REQUIRES: lock holds mu; releases it
  // while running callbacks.
  void CompleteDurable(std::unique_lock<std::mutex>& lock);
  bool HasWork(Clock::time_point now) const;  // REQUIRES: mu held
};

const char* GroupCommitLog::Impl::OpenSegment(uint64_t number, uint64_t first_lsn, Status* cause) {
  const std::string path = JoinPath(dir, SegmentFileName(number));
  if (fs->FileExists(path)) {
    *cause = AlreadyExists("wal: segment file already exists");
    return kSegmentFailed;
  }
  auto created = fs->NewWritableFile(path);
  if (!created.ok()) {
    *cause = created.status();
    return kSegmentFailed;
  }
  (*created)->SetPreallocation(options.preallocate_bytes);
  FileHeader header;
  header.file_number = number;
  header.lsn = first_lsn;
  std::string bytes;
  AppendFileHeader(header, &bytes);
  Status s = (*created)->Append(bytes);
  if (!s.ok()) {
    *cause = s;
    return kSegmentFailed;
  }
  s = fs->SyncDir(dir);
  if (!s.ok()) {
    *cause = s;
    return kSegmentFailed;
  }
  file = std::move(created).value();
  segment_number = number;
  segment_bytes = bytes.size();
  segment_synced_bytes = 0;
  return nullptr;
}

const char* GroupCommitLog::Impl::Sync(Status* cause) {
  const auto start = Clock::now();
  Status s = file->Sync();
  const auto end = Clock::now();
  {
    std::lock_guard lock(mu);
    ++stats.syncs;
    stats.sync_nanos += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
    if (s.ok()) last_sync = end;
  }
  if (options.on_sync) {
    options.on_sync(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count()));
  }
  if (!s.ok()) {
    *cause = s;
    return kSyncFailed;
  }
  segment_synced_bytes = segment_bytes;
  leader_synced_end = leader_written_end;
  return nullptr;
}

const char* GroupCommitLog::Impl::StartNextSegment(Status* cause) {
  if (segment_synced_bytes < segment_bytes) {
    if (const char* failed = Sync(cause)) return failed;
  }
  Status s = file->Close();
  file.reset();
  if (!s.ok()) {
    *cause = s;
    return kSegmentFailed;
  }
  if (const char* failed = OpenSegment(segment_number + 1, leader_written_end, cause)) {
    return failed;
  }
  std::lock_guard lock(mu);
  stats.segment_number = segment_number;
  return nullptr;
}

const char* GroupCommitLog::Impl::WriteBatch(Status* cause) {
  const char* failed = AppendBatch(cause);
  batch.clear();  // its capacity is reused by the next swap with `pending`, unless it grew huge
  if (batch.capacity() > 2 * options.max_group_bytes + kMaxRecordBytes) std::string().swap(batch);
  return failed;
}

const char* GroupCommitLog::Impl::FlushFile(Status* cause) {
  Status s = file->Flush();
  if (s.ok()) return nullptr;
  *cause = s;
  return kWriteFailed;
}

const char* GroupCommitLog::Impl::AppendBatch(Status* cause) {
  size_t pos = 0;
  while (pos < batch.size()) {
    const size_t start = pos;
    uint64_t records = 0;
    while (pos < batch.size()) {
      const uint32_t length = DecodeFixed32(batch.data() + pos);
      const size_t record_bytes = kRecordHeaderBytes + length;
      const size_t chunk = pos - start;
      if (chunk > 0 && (chunk + record_bytes > options.max_group_bytes ||
                        segment_bytes + chunk >= options.segment_bytes)) {
        break;
      }
      std::string_view payload(batch.data() + pos + kRecordHeaderBytes, length);
      const uint64_t sum =
          RecordChecksum(static_cast<uint8_t>(RecordType::kEffect), segment_number, payload);
      for (int i = 0; i < 8; ++i) batch[pos + 5 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
      pos += record_bytes;
      ++records;
    }
    const std::string_view chunk(batch.data() + start, pos - start);
    Status s = file->Append(chunk);
    if (!s.ok()) {
      *cause = s;
      return kWriteFailed;
    }
    segment_bytes += chunk.size();
    leader_written_end += records;
    {
      std::lock_guard lock(mu);
      ++stats.writes;
      stats.bytes += chunk.size();
    }
    if (segment_bytes >= options.segment_bytes) {
      if (const char* failed = StartNextSegment(cause)) return failed;
    }
  }
  return nullptr;
}

void GroupCommitLog::Impl::Fail(std::unique_lock<std::mutex>& lock, const char* detail,
                                Status cause) {
  if (!failure.ok()) return;
  failure = Unavailable(detail);
  failed.store(true, std::memory_order_release);
  std::fprintf(stderr,
               "\n*** sundial: WRITE-AHEAD LOG FAILED in %s (segment %llu): %s: %.*s\n"
               "*** %s. Writes are refused; reads go on. Nothing is retried.\n\n",
               dir.c_str(), static_cast<unsigned long long>(stats.segment_number),
               std::string(CodeName(cause.code())).c_str(), static_cast<int>(cause.detail().size()),
               cause.detail().data(), detail);
  std::fflush(stderr);
  pending.clear();
  std::multimap<uint64_t, Done> failed;
  failed.swap(waiters);
  state_cv.notify_all();
  lock.unlock();
  for (auto& [end, done] : failed) done(failure);
  lock.lock();
}

void GroupCommitLog::Impl::CompleteDurable(std::unique_lock<std::mutex>& lock) {
  std::vector<Done> ready;
  auto last = waiters.upper_bound(durable_end);
  for (auto it = waiters.begin(); it != last; ++it) ready.push_back(std::move(it->second));
  waiters.erase(waiters.begin(), last);
  state_cv.notify_all();
  if (ready.empty()) return;
  lock.unlock();
  for (auto& done : ready) done(Status::Ok());
  lock.lock();
}

bool GroupCommitLog::Impl::HasWork(Clock::time_point now) const {
  if (closing || (!options.inline_writes && !pending.empty()) ||
      rotations_requested > rotations_done || sync_requested_end > synced_end) {
    return true;
  }
  return options.policy == FsyncPolicy::kInterval && synced_end < written_end &&
         now >= last_sync + std::chrono::milliseconds(options.interval_ms);
}

void GroupCommitLog::Impl::Run() {
  std::unique_lock lock(mu);
  for (;;) {
    // Wait for work: appends, a Flush or Rotate, Close, or a due interval sync. With inline
    // writes, appends are the appenders' to write: pending records wait for a round every 5 ms.
    while (failure.ok() && !HasWork(Clock::now())) {
      auto deadline = Clock::time_point::max();
      if (options.policy == FsyncPolicy::kInterval && synced_end < written_end) {
        deadline = last_sync + std::chrono::milliseconds(options.interval_ms);
      }
      if (options.inline_writes) {
        deadline = std::min(deadline, Clock::now() + std::chrono::milliseconds(5));
        if (work_cv.wait_until(lock, deadline) == std::cv_status::timeout) break;
      } else if (deadline != Clock::time_point::max()) {
        work_cv.wait_until(lock, deadline);
      } else {
        work_cv.wait(lock);
      }
    }
    if (!failure.ok()) {
      // Nothing more is ever written or synced; wait for Close.
      work_cv.wait(lock, [this] { return closing; });
      break;
    }
    // The leader's state is shared with WriteNow: take it in the order file_mu, then mu.
    lock.unlock();
    std::unique_lock file_lock(file_mu);
    lock.lock();
    if (!failure.ok()) continue;  // a WriteNow failed meanwhile
    batch.swap(pending);
    const uint64_t batch_end = next_lsn;
    const bool rotate = rotations_requested > rotations_done;
    const uint64_t rotation_ticket = rotations_requested;
    const bool stop = closing;
    const uint64_t sync_target = std::max(sync_requested_end, stop ? batch_end : 0);
    lock.unlock();

    Status cause;
    const char* failed = WriteBatch(&cause);
    if (!failed && leader_written_end > leader_synced_end) {
      const bool due = options.policy == FsyncPolicy::kAlways || sync_target > leader_synced_end ||
                       (options.policy == FsyncPolicy::kInterval &&
                        Clock::now() >= last_sync + std::chrono::milliseconds(options.interval_ms));
      // Completed after the write without a sync: the bytes must reach the OS first.
      failed = due ? Sync(&cause) : FlushFile(&cause);
    }
    if (!failed && stop && segment_synced_bytes < segment_bytes) failed = Sync(&cause);
    uint64_t rotated_at = 0;
    if (!failed && rotate) {
      failed = StartNextSegment(&cause);
      rotated_at = leader_written_end;
    }
    if (!failed && stop) {
      Status s = file->Close();
      if (!s.ok()) {
        cause = s;
        failed = kWriteFailed;
      }
    }

    lock.lock();
    if (failed) {
      file.reset();
      file_lock.unlock();
      Fail(lock, failed, cause);
      continue;  // waits for Close above
    }
    written_end = leader_written_end;
    synced_end = leader_synced_end;
    durable_end = options.policy == FsyncPolicy::kAlways ? synced_end : written_end;
    if (rotate) {
      rotations_done = rotation_ticket;
      rotated_at_lsn = rotated_at;
      rotated_segment = segment_number;
    }
    file_lock.unlock();
    CompleteDurable(lock);
    if (stop && pending.empty()) break;
  }
  {
    lock.unlock();
    std::lock_guard file_lock(file_mu);
    file.reset();
    lock.lock();
  }
  stopped = true;
  // Anything still waiting (only possible after a failure) learns the outcome now.
  std::multimap<uint64_t, Done> rest;
  rest.swap(waiters);
  const Status final_status = failure.ok() ? Unavailable(kClosed) : failure;
  state_cv.notify_all();
  lock.unlock();
  for (auto& [end, done] : rest) done(final_status);
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
  // Under kAlways a reply waits for the group's fdatasync: the log thread writes everything.
  if (options.policy == FsyncPolicy::kAlways) impl->options.inline_writes = false;
  impl->next_lsn = impl->written_end = impl->synced_end = impl->durable_end = next_lsn;
  impl->appended_end.store(next_lsn, std::memory_order_release);
  impl->leader_written_end = impl->leader_synced_end = next_lsn;
  impl->rotated_at_lsn = next_lsn;
  impl->rotated_segment = next_segment_number;
  Status cause;
  if (impl->OpenSegment(next_segment_number, next_lsn, &cause)) return cause;
  impl->stats.segment_number = next_segment_number;
  impl->stats.next_lsn = impl->stats.durable_end_lsn = next_lsn;
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<GroupCommitLog>(new GroupCommitLog(std::move(impl)));
}

void GroupCommitLog::OnEffect(const Effect& effect) {
  thread_local std::string scratch;
  scratch.assign(kRecordHeaderBytes, '\0');
  EncodeEffect(effect, &scratch);
  const size_t length = scratch.size() - kRecordHeaderBytes;
  Impl& d = *impl_;
  std::unique_lock lock(d.mu);
  t_end.log_id = d.id;
  if (!d.failure.ok() || d.closing) {
    t_end.end_lsn = kNotLogged;
  } else if (length > kMaxRecordBytes) {
    t_end.end_lsn = kNotLogged;
    d.Fail(lock, kRecordTooLarge, InvalidArgument("wal: record exceeds 16 MiB"));
  } else {
    for (int i = 0; i < 4; ++i) scratch[i] = static_cast<char>((length >> (8 * i)) & 0xff);
    scratch[4] = static_cast<char>(RecordType::kEffect);
    // With inline writes the appender writes (WriteNow); the log thread needs no wake-up.
    const bool wake = d.pending.empty() && !d.options.inline_writes;
    d.pending.append(scratch);
    t_end.end_lsn = ++d.next_lsn;
    d.appended_end.store(d.next_lsn, std::memory_order_release);
    ++d.stats.records;
    lock.unlock();
    if (wake) d.work_cv.notify_one();
  }
  if (scratch.capacity() > (1u << 20)) std::string().swap(scratch);
}

uint64_t GroupCommitLog::EndLsnOfThisThread() const {
  return t_end.log_id == impl_->id ? t_end.end_lsn : 0;
}

uint64_t GroupCommitLog::AppendedEndLsn() const {
  return impl_->appended_end.load(std::memory_order_acquire);
}

void GroupCommitLog::WhenDurable(uint64_t end_lsn, Done done) {
  Impl& d = *impl_;
  std::unique_lock lock(d.mu);
  Status now;
  if (!d.failure.ok()) {
    now = d.failure;
  } else if (end_lsn <= d.durable_end) {
    now = Status::Ok();
  } else if (end_lsn > d.next_lsn) {
    now = Unavailable(kNeverAppended);
  } else if (d.stopped) {
    now = Unavailable(kClosed);
  } else {
    d.waiters.emplace(end_lsn, std::move(done));
    return;
  }
  lock.unlock();
  done(now);
}

Status GroupCommitLog::WriteNow() {
  Impl& d = *impl_;
  if (!d.options.inline_writes) return Status::Ok();  // kAlways, or not asked for
  std::unique_lock file_lock(d.file_mu);
  std::unique_lock lock(d.mu);
  if (!d.failure.ok()) return d.failure;
  if (d.pending.empty() || d.closing || d.stopped) return Status::Ok();  // Close writes the rest
  d.batch.swap(d.pending);
  lock.unlock();
  Status cause;
  const char* failed = d.WriteBatch(&cause);
  if (!failed) failed = d.FlushFile(&cause);  // the bytes reach the OS before anyone is answered
  lock.lock();
  if (failed) {
    d.file.reset();
    file_lock.unlock();
    d.Fail(lock, failed, cause);
    return d.failure;
  }
  const bool was_synced = d.synced_end == d.written_end;
  d.written_end = d.leader_written_end;
  d.durable_end = d.written_end;
  file_lock.unlock();
  // The log thread sleeps without a deadline when everything was synced: the interval starts.
  if (was_synced && d.options.policy == FsyncPolicy::kInterval) d.work_cv.notify_one();
  d.CompleteDurable(lock);
  return Status::Ok();
}

Status GroupCommitLog::WaitDurable(uint64_t end_lsn) {
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  Status result;
  WhenDurable(end_lsn, [&](Status s) {
    std::lock_guard lock(mu);
    result = s;
    finished = true;
    cv.notify_one();  // under the lock: the waiter cannot return (and destroy cv) before this
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return finished; });
  return result;
}

Status GroupCommitLog::Flush() {
  Impl& d = *impl_;
  std::unique_lock lock(d.mu);
  const uint64_t target = d.next_lsn;
  if (d.synced_end >= target || !d.failure.ok()) return d.failure;
  if (d.stopped) return Unavailable(kClosed);
  d.sync_requested_end = std::max(d.sync_requested_end, target);
  d.work_cv.notify_one();
  d.state_cv.wait(lock, [&] { return d.synced_end >= target || !d.failure.ok() || d.stopped; });
  if (!d.failure.ok()) return d.failure;
  return d.synced_end >= target ? Status::Ok() : Unavailable(kClosed);
}

Result<GroupCommitLog::RotatePoint> GroupCommitLog::Rotate() {
  Impl& d = *impl_;
  std::unique_lock lock(d.mu);
  if (!d.failure.ok()) return d.failure;
  if (d.closing || d.stopped) return Unavailable(kClosed);
  const uint64_t ticket = ++d.rotations_requested;
  d.work_cv.notify_one();
  d.state_cv.wait(lock, [&] { return d.rotations_done >= ticket || !d.failure.ok() || d.stopped; });
  if (!d.failure.ok()) return d.failure;
  if (d.rotations_done < ticket) return Unavailable(kClosed);
  return RotatePoint{d.rotated_at_lsn, d.rotated_segment};
}

Status GroupCommitLog::Close() {
  Impl& d = *impl_;
  std::lock_guard close_lock(d.close_mu);
  {
    std::lock_guard lock(d.mu);
    d.closing = true;
  }
  d.work_cv.notify_one();
  if (d.thread.joinable()) d.thread.join();
  std::lock_guard lock(d.mu);
  return d.failure;
}

Status GroupCommitLog::failure() const {
  std::lock_guard lock(impl_->mu);
  return impl_->failure;
}

bool GroupCommitLog::failed() const { return impl_->failed.load(std::memory_order_acquire); }

LogStats GroupCommitLog::stats() const {
  std::lock_guard lock(impl_->mu);
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
