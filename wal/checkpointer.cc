#include "wal/checkpointer.h"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <new>
#include <string_view>

#include "wal/failpoint.h"
#include "wal/log_format.h"
#include "wal/recovery.h"
#include "wal/snapshot.h"

namespace sundial::wal {

namespace {

constexpr std::string_view kForkFailed = "checkpoint: fork failed";

// No child was made (the call says which failed, errno why): the caller replays instead.
Status ForkFailed(std::string_view call, int err) {
  return Status(Code::kUnavailable, std::string(kForkFailed))
      .WithContext(std::string(call) + ": " + std::strerror(err));
}
constexpr std::string_view kStopped = "checkpoint: stopped with the server";

// What a fork checkpoint's child reports to its parent, in a shared anonymous mapping.
struct ChildOutcome {
  bool reported = false;
  uint8_t code = 0;  // Code
  uint64_t effects = 0;
  uint64_t digest = 0;
  uint64_t bytes = 0;
  char message[400] = {};
};

// The child of a fork checkpoint: only the forking thread lives here, with the engine as it was
// at the cut. It writes the snapshot's temp file and exits without running a destructor: every
// object here is the parent's.
[[noreturn]] void WriteInChild(FileSystem* fs, const std::string& dir, const Engine& engine,
                               uint64_t covered_lsn, pid_t parent, bool lower_priority,
                               ChildOutcome* out) {
  // Request threads go first: the writer is the one that can wait.
  if (lower_priority) (void)setpriority(PRIO_PROCESS, 0, 10);
  // Dies with the thread that forked it (kill -9 of the server): no writer outlives its server.
  (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(3);  // it died before the prctl
  // An interrupt or a termination sent to the whole group (Ctrl-C, systemd's stop) is for the
  // server: it drains and then kills this child itself (Stop), or its death does (above).
  (void)signal(SIGINT, SIG_IGN);
  (void)signal(SIGTERM, SIG_IGN);
  // The server's sockets are the parent's to close: a peer must see their FIN when it does.
  (void)close_range(3, ~0U, 0);
  auto info = WriteSnapshotTemp(fs, dir, engine, covered_lsn);
  if (info.ok()) {
    out->effects = info->effects;
    out->digest = info->digest;
    out->bytes = info->bytes;
  } else {
    out->code = static_cast<uint8_t>(info.status().code());
    std::snprintf(out->message, sizeof out->message, "%s", info.status().Message().c_str());
  }
  out->reported = true;
  _exit(info.ok() ? 0 : 1);
}

}  // namespace

Checkpointer::Checkpointer(FileSystem* fs, std::string dir, GroupCommitLog* log,
                           CheckpointOptions options, const Engine* live)
    : fs_(fs), dir_(std::move(dir)), log_(log), options_(std::move(options)), live_(live) {}

Checkpointer::~Checkpointer() { Stop(); }

Result<bool> Checkpointer::Due() const {
  auto names = fs_->ListDir(dir_);
  if (!names.ok()) return names.status();
  uint64_t segments = 0, segment_bytes = 0, newest_snapshot_lsn = 0, snapshot_bytes = 0;
  bool have_snapshot = false;
  const uint64_t covered_below = covered_below_.load(std::memory_order_acquire);
  // The active segment's file carries preallocated zeroes: count what is written in it, or a
  // --checkpoint-bytes below the preallocation would call for a checkpoint after every write.
  const LogStats log = log_->stats();
  for (const std::string& name : *names) {
    if (auto number = ParseSegmentFileName(name)) {
      if (*number < covered_below) continue;  // kept for a standby: a checkpoint would not help
      auto size = fs_->FileSize(JoinPath(dir_, name));
      if (!size.ok()) continue;  // deleted meanwhile
      ++segments;
      segment_bytes += *number == log.segment_number ? std::min(*size, log.segment_bytes) : *size;
    } else if (auto lsn = ParseSnapshotFileName(name)) {
      if (have_snapshot && *lsn < newest_snapshot_lsn) continue;
      auto size = fs_->FileSize(JoinPath(dir_, name));
      if (!size.ok()) continue;
      have_snapshot = true;
      newest_snapshot_lsn = *lsn;
      snapshot_bytes = *size;
    }
  }
  if (segments < 2 && segment_bytes <= kFileHeaderBytes) return false;  // nothing logged
  if (segments >= std::max<uint32_t>(2, options_.max_segments)) return true;
  return segment_bytes >= options_.min_log_bytes &&
         segment_bytes * 100 >= snapshot_bytes * options_.growth_percent;
}

Result<CheckpointResult> Checkpointer::RunOnce(const CheckpointHook& hook) {
  MutexLock run_lock(&run_mu_);
  Result<CheckpointResult> result = Run(hook);
  MutexLock lock(&mu_);
  if (result.ok()) {
    ++stats_.checkpoints;
    stats_.last = *result;
  } else {
    ++stats_.failures;
    stats_.last_error = result.status();
  }
  return result;
}

void Checkpointer::SetRetention(std::function<uint64_t()> retain_from, uint64_t max_bytes) {
  MutexLock lock(&mu_);
  retain_from_ = std::move(retain_from);
  retain_max_bytes_ = max_bytes;
}

std::vector<uint64_t> Checkpointer::RetainedSegments(const std::vector<std::string>& names,
                                                     uint64_t below, uint64_t covered_lsn) {
  std::function<uint64_t()> retain_from;
  uint64_t max_bytes = 0;
  {
    MutexLock lock(&mu_);
    retain_from = retain_from_;
    max_bytes = retain_max_bytes_;
  }
  std::vector<uint64_t> kept;
  if (!retain_from) return kept;
  const uint64_t from = retain_from();
  if (from >= covered_lsn) return kept;  // every standby has what the snapshot covers
  std::vector<uint64_t> covered;
  for (const std::string& name : names) {
    if (auto n = ParseSegmentFileName(name); n && *n < below) covered.push_back(*n);
  }
  std::sort(covered.rbegin(), covered.rend());
  // Newest first: a segment is needed while the one after it starts above `from`.
  uint64_t next_first = covered_lsn;
  uint64_t bytes = 0;
  for (uint64_t n : covered) {
    if (next_first <= from) break;
    const std::string path = JoinPath(dir_, SegmentFileName(n));
    auto size = fs_->FileSize(path);
    auto file = fs_->NewSequentialFile(path);
    if (!size.ok() || !file.ok()) break;
    std::string scratch(kFileHeaderBytes, '\0');
    std::string_view header;
    FileHeader parsed;
    if (!(*file)->Read(kFileHeaderBytes, scratch.data(), &header).ok() ||
        header.size() < kFileHeaderBytes ||
        ParseFileHeader(header, kSegmentMagic, &parsed) != HeaderError::kNone) {
      break;
    }
    if (bytes + *size > max_bytes) break;
    bytes += *size;
    kept.push_back(n);
    next_first = parsed.lsn;
  }
  return kept;
}

Result<SnapshotInfo> Checkpointer::WriteReplayed(uint64_t covered_lsn) {
  RecoveryOptions recovery_options;
  recovery_options.end_lsn = covered_lsn;
  Recovered recovered;
  auto make_engine = [&] {
    return std::make_unique<Engine>(options_.engine_options, &clock_, nullptr);
  };
  if (Status s = Recover(fs_, dir_, make_engine, recovery_options, &recovered); !s.ok()) return s;
  auto written = WriteSnapshotTemp(fs_, dir_, *recovered.engine, covered_lsn);
  // The private engine's blocks go back to the kernel as it is destroyed, but the export's
  // buffers stay in this thread's malloc arena: 64 MiB of RSS kept at 2M messages until the
  // next checkpoint (docs/operations.md, "Memory").
  recovered.engine.reset();
  malloc_trim(0);
  return written;
}

Result<SnapshotInfo> Checkpointer::WriteForked(uint64_t* covered_lsn, CheckpointResult* result) {
  void* shared = mmap(nullptr, sizeof(ChildOutcome), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    return ForkFailed("mmap", errno);
  }
  auto* outcome = new (shared) ChildOutcome;
  const pid_t parent = getpid();
  const auto before = std::chrono::steady_clock::now();
  pid_t pid = -1;
  int fork_errno = 0;
  {
    MutexLock apply_append(log_->apply_append_mu());
    Engine::Freeze freeze(live_);
    *covered_lsn = log_->NextLsn();
    pid = options_.fork();
    if (pid == 0) {
      freeze.Release();  // nobody else lives in the child: the engine is quiescent
      WriteInChild(fs_, dir_, *live_, *covered_lsn, parent, options_.lower_priority, outcome);
    }
    fork_errno = errno;
  }
  result->pause_us = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::steady_clock::now() - before)
                         .count();
  if (pid < 0) {
    (void)munmap(shared, sizeof(ChildOutcome));
    return ForkFailed("fork", fork_errno);
  }
  result->forked = true;
  bool stopped = false;
  {
    MutexLock lock(&mu_);
    if (stop_) {
      (void)kill(pid, SIGKILL);  // Stop came between the fork and here
      stopped = true;
    }
    child_ = pid;  // Stop kills it: a server that stops does not wait for a snapshot
  }
  // Waited for without reaping it, so that the pid Stop may kill is still this child's.
  siginfo_t info{};
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  {
    MutexLock lock(&mu_);
    child_ = 0;
    stopped = stopped || stop_;
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  const ChildOutcome got = *outcome;
  (void)munmap(shared, sizeof(ChildOutcome));
  if (got.reported && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) {
    SnapshotInfo info;
    info.file = SnapshotFileName(*covered_lsn);
    info.covered_lsn = *covered_lsn;
    info.effects = got.effects;
    info.digest = got.digest;
    info.bytes = got.bytes;
    return info;
  }
  (void)fs_->RemoveFile(SnapshotTempPath(dir_, *covered_lsn));  // whatever it left
  if (got.reported) return Status(static_cast<Code>(got.code), got.message);
  if (stopped) return Status(Code::kUnavailable, std::string(kStopped));
  const std::string how = WIFSIGNALED(wstatus)
                              ? "was killed by signal " + std::to_string(WTERMSIG(wstatus))
                              : "exited with status " + std::to_string(WEXITSTATUS(wstatus));
  return Status(Code::kInternal,
                "checkpoint: the snapshot writer (pid " + std::to_string(pid) + ") " + how);
}

Result<CheckpointResult> Checkpointer::Run(const CheckpointHook& hook) {
  const auto start = std::chrono::steady_clock::now();
  CheckpointResult result;

  // 1. Everything below X is sealed and durable.
  auto rotated = log_->Rotate();
  if (!rotated.ok()) return rotated.status();
  result.covered_lsn = rotated->lsn;
  if (hook) {
    if (Status s = hook(CheckpointStep::kRotated); !s.ok()) return s;
  }

  // 2. The snapshot's temp file, of the state at L (>= X).
  Result<SnapshotInfo> snapshot = Status(Code::kInternal, "checkpoint: no mode");
  if (options_.mode == CheckpointMode::kFork && live_ != nullptr) {
    snapshot = WriteForked(&result.covered_lsn, &result);
    if (!snapshot.ok() && !result.forked) {
      // No child: fork (or the mapping) failed, the rest of the server is fine. Say so once.
      bool first = false;
      {
        MutexLock lock(&mu_);
        first = stats_.fork_fallbacks++ == 0;
      }
      if (first) {
        std::fprintf(stderr,
                     "sundiald: %s; a checkpoint whose fork fails replays the log instead "
                     "(said once; sundial_checkpoint_fork_fallbacks_total counts them)\n",
                     snapshot.status().ToString().c_str());
      }
      result.covered_lsn = rotated->lsn;
    }
  }
  if (!result.forked) snapshot = WriteReplayed(result.covered_lsn);
  if (!snapshot.ok()) return snapshot.status();
  result.effects = snapshot->effects;
  result.snapshot_bytes = snapshot->bytes;

  // 3. In place, once the log below L is durable: a crash must not leave a snapshot ahead of
  // the log it was cut from.
  if (result.covered_lsn > rotated->lsn) {
    if (Status s = log_->WaitDurable(result.covered_lsn, /*local_only=*/true); !s.ok()) {
      (void)fs_->RemoveFile(SnapshotTempPath(dir_, result.covered_lsn));
      return s;
    }
  }
  auto commit_hook = [&](SnapshotStep step) -> Status {
    if (step == SnapshotStep::kTempSynced) SUNDIAL_FAILPOINT("checkpoint.before_rename");
    if (step == SnapshotStep::kRenamed) SUNDIAL_FAILPOINT("checkpoint.after_rename");
    if (!hook) return Status::Ok();
    return hook(step == SnapshotStep::kTempSynced ? CheckpointStep::kSnapshotTempSynced
                                                  : CheckpointStep::kSnapshotRenamed);
  };
  if (Status s = CommitSnapshot(fs_, dir_, result.covered_lsn, commit_hook); !s.ok()) return s;

  // 4. What it made obsolete (but for the segments a standby still needs).
  auto names = fs_->ListDir(dir_);
  if (!names.ok()) return names.status();
  covered_below_.store(rotated->segment_number, std::memory_order_release);
  // The segment at X is the oldest kept whatever a standby needs: retention starts there.
  std::vector<uint64_t> kept = RetainedSegments(*names, rotated->segment_number, rotated->lsn);
  for (const std::string& name : *names) {
    auto segment = ParseSegmentFileName(name);
    auto snapshot_lsn = ParseSnapshotFileName(name);
    const bool obsolete = (segment && *segment < rotated->segment_number &&
                           std::find(kept.begin(), kept.end(), *segment) == kept.end()) ||
                          (snapshot_lsn && *snapshot_lsn < result.covered_lsn);
    if (!obsolete) continue;
    const std::string path = JoinPath(dir_, name);
    auto size = fs_->FileSize(path);
    if (Status s = fs_->RemoveFile(path); !s.ok()) return s;
    result.bytes_removed += size.ok() ? *size : 0;
    ++(segment ? result.segments_removed : result.snapshots_removed);
    if (hook) {
      if (Status s = hook(CheckpointStep::kFileRemoved); !s.ok()) return s;
    }
  }
  if (Status s = fs_->SyncDir(dir_); !s.ok()) return s;
  result.duration_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count();
  return result;
}

void Checkpointer::Start() {
  MutexLock lock(&mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void Checkpointer::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    if (child_ != 0) (void)kill(child_, SIGKILL);
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void Checkpointer::Loop() {
  // A fork checkpoint's thread runs at the requests' priority: it holds every engine lock while
  // it forks, and at nice +10 it waited for the CPU between taking one lock and the next while
  // the request threads waited for it (a 4 ms freeze in a 8 ms pause, measured); its child is
  // the one reniced. A replay runs on this thread, reniced.
  if (options_.lower_priority && !(options_.mode == CheckpointMode::kFork && live_ != nullptr)) {
    // Linux applies a nice value per thread: request threads go first.
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  }
  MutexLock lock(&mu_);
  // After a failure, wait twice as long before the next attempt (up to a minute): a checkpoint
  // that keeps failing (ENOSPC, a damaged segment) must not rotate and rebuild 10 times a second.
  constexpr int64_t kMaxBackoffMs = 60'000;
  int64_t wait_ms = options_.poll_ms;
  bool failing = false;  // the last attempt failed and said so
  while (!stop_) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    while (!stop_) {
      if (!cv_.WaitUntil(&mu_, deadline)) break;  // the period passed
    }
    if (stop_) break;
    mu_.Unlock();
    auto due = Due();
    Status error = due.status();
    bool ran = false;
    if (due.ok() && *due) {
      error = RunOnce().status();  // counted in stats_
      ran = true;
    }
    const bool failed = !error.ok();
    // One line when checkpoints start failing and one when they work again, not one per retry.
    // A failed log has said why in its own line (and every checkpoint fails after it).
    // A fork checkpoint that Stop abandoned is no failure worth a line.
    mu_.Lock();
    if (failed && !failing && !log_->failed() && !stop_) {
      std::fprintf(stderr,
                   "sundiald: checkpoint of %s failed: %s; the log keeps growing until one "
                   "succeeds (retried with backoff up to a minute)\n",
                   dir_.c_str(), error.ToString().c_str());
      failing = true;
    } else if (!failed && ran && failing) {
      std::fprintf(stderr, "sundiald: checkpoint of %s succeeded again\n", dir_.c_str());
      failing = false;
    }
    if (!due.ok()) {
      ++stats_.failures;
      stats_.last_error = due.status();
    }
    wait_ms = failed ? std::min(kMaxBackoffMs, 2 * wait_ms) : options_.poll_ms;
  }
}

CheckpointStats Checkpointer::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace sundial::wal
