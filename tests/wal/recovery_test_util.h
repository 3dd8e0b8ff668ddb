// Helpers of the recovery, snapshot and checkpoint tests: an engine whose effects go to a
// GroupCommitLog, opened the way the server opens one (recover, then log from where recovery
// says), and a deterministic random workload that exercises every kind of effect, timers
// included.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/clock.h"
#include "engine/engine.h"
#include "wal/checkpointer.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"
#include "wal/log_format.h"
#include "wal/recovery.h"

namespace sundial::wal::test {

inline constexpr TimeMs kStartTime = 1'700'000'000'000;

inline Engine::Options TestEngineOptions() {
  Engine::Options o;
  o.shards = 4;
  o.seed = 7;
  return o;
}

inline EnqueueItem Item(std::string id) {
  EnqueueItem item;
  item.id = std::move(id);
  return item;
}

// An engine logging to a GroupCommitLog in `dir`, recovered from what is there.
struct LoggedEngine {
  explicit LoggedEngine(TimeMs now = kStartTime) : clock(now) {}
  ~LoggedEngine() {
    if (log) (void)log->Close();
  }

  ManualClock clock;
  DeferredSink sink;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<GroupCommitLog> log;
  RecoveryReport report;

  Status Open(FileSystem* fs, const std::string& dir, RecoveryOptions recovery = {},
              LogOptions log_options = {}) {
    OpenedLog opened;
    Status s = RecoverAndOpenLog(
        fs, dir, [&] { return std::make_unique<Engine>(TestEngineOptions(), &clock, &sink); },
        recovery, log_options, &sink, &opened);
    report = opened.report;
    engine = std::move(opened.engine);
    log = std::move(opened.log);
    return s;
  }
  // Waits until every effect so far is durable.
  Status Sync() { return log->WaitDurable(log->stats().next_lsn); }
};

// The shape of the recovery tests that bring a state back from a snapshot and then the log:
// on a fresh logged engine in `dir`, work(engine, clock, 0), a checkpoint, work(…, 1), each
// synced; `after` then reads what the recovered engines must reproduce (its digest, counts).
inline void WorkAroundACheckpoint(FileSystem* fs, const std::string& dir,
                                  const std::function<void(Engine&, ManualClock&, int)>& work,
                                  const std::function<void(Engine&, ManualClock&)>& after) {
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs, dir).ok());
  work(*e.engine, e.clock, 0);
  ASSERT_TRUE(e.Sync().ok());
  CheckpointOptions options;
  options.engine_options = TestEngineOptions();
  Checkpointer checkpointer(fs, dir, e.log.get(), options);
  ASSERT_TRUE(checkpointer.RunOnce().ok());
  work(*e.engine, e.clock, 1);
  ASSERT_TRUE(e.Sync().ok());
  after(*e.engine, e.clock);
}

// Recovers `dir` into a fresh engine; returns its digest (0 and a failure when recovery fails).
inline uint64_t RecoveredDigest(FileSystem* fs, const std::string& dir,
                                RecoveryReport* report = nullptr, RecoveryOptions options = {}) {
  ManualClock clock(kStartTime);
  Recovered recovered;
  Status s = Recover(
      fs, dir, [&] { return std::make_unique<Engine>(TestEngineOptions(), &clock, nullptr); },
      options, &recovered);
  if (report) *report = recovered.report;
  EXPECT_TRUE(s.ok()) << (recovered.report.damage ? ToString(*recovered.report.damage) : "");
  return s.ok() ? recovered.engine->Digest() : 0;
}

// A deterministic random workload over three queues (simple, exclusive, one with a dead-letter
// queue): enqueues with metadata and delays, dequeues, completes, fails, extends, cancels,
// reprioritizes, redrives, and clock advances that fire visibility, lease expiry and retention.
class RandomOps {
 public:
  // `with_dependencies`: a third of the enqueues name up to three earlier messages in
  // depends_on (any queue, any policy), and now and then the waiting or pending messages of a
  // queue are purged. Without it, the random sequence is the one it always was.
  explicit RandomOps(uint64_t seed, bool with_dependencies = false)
      : rng_(seed), seed_(seed), with_dependencies_(with_dependencies) {}

  void Setup(Engine& engine) {
    (void)engine.CreateQueue("simple", {});
    QueueSettings exclusive;
    exclusive.type = QueueType::kExclusive;
    exclusive.exclusivity_key = "tenant";
    (void)engine.CreateQueue("exclusive", exclusive);
    QueueSettings retried;
    retried.max_attempts = 2;
    retried.retry_backoff_ms = 10;
    retried.dead_letter_queue = "dlq";
    retried.retention_ms = 5'000;
    (void)engine.CreateQueue("retried", retried);
  }

  void Run(Engine& engine, ManualClock& clock, int n) {
    static const char* kQueues[] = {"simple", "exclusive", "retried", "dlq"};
    for (int i = 0; i < n; ++i) {
      const std::string queue = kQueues[rng_() % 3];
      const uint32_t op = rng_() % 100;
      if (op < 35) {
        EnqueueItem item;
        item.id = "s" + std::to_string(seed_) + "-" + std::to_string(next_id_++);
        item.priority = static_cast<int64_t>(rng_() % 50);
        item.payload = std::string(rng_() % 200, static_cast<char>('a' + rng_() % 26));
        item.metadata = {{"tenant", "t" + std::to_string(rng_() % 5)}};
        if (rng_() % 4 == 0) item.delay_ms = static_cast<int64_t>(rng_() % 3'000);
        if (with_dependencies_ && !enqueued_.empty() && rng_() % 3 == 0) {
          for (uint64_t k = 1 + rng_() % 3; k > 0; --k) {
            item.depends_on.push_back(enqueued_[rng_() % enqueued_.size()]);
          }
          item.on_dependency_failure = static_cast<DependencyFailurePolicy>(rng_() % 3);
        }
        auto r = engine.Enqueue(queue, {item});
        if (with_dependencies_ && r[0].ok()) {
          enqueued_.push_back(queue + "/" + r[0]->id);
          if (enqueued_.size() > 64) enqueued_.erase(enqueued_.begin());
        }
      } else if (with_dependencies_ && op < 37) {
        (void)engine.PurgeQueue(queue,
                                {rng_() % 2 ? MessageState::kWaiting : MessageState::kPending});
      } else if (op < 60) {
        DequeueRequest request;
        request.max = 1 + rng_() % 2;
        request.lease_ms = 500 + static_cast<int64_t>(rng_() % 2'000);
        if (rng_() % 5 == 0) request.filter = {{"tenant", "t" + std::to_string(rng_() % 5)}};
        auto r = engine.Dequeue(queue, request);
        if (r.ok()) {
          for (const auto& m : *r) leases_.push_back({m.queue, m.id, m.lease_token});
        }
      } else if (op < 75 && !leases_.empty()) {
        Lease l = TakeLease();
        // Half of them with a result (format version 2's extension); chosen by the token, so
        // that the workload's random sequence is the one it always was.
        std::string result = l.token % 2 ? "result of " + l.id : std::string();
        (void)engine.Complete(l.queue, {{l.id, l.token, std::move(result)}});
      } else if (op < 83 && !leases_.empty()) {
        Lease l = TakeLease();
        (void)engine.Fail(
            l.queue, {.id = l.id, .lease_token = l.token, .error = "boom", .retry_delay_ms = {}});
      } else if (op < 86 && !leases_.empty()) {
        const Lease& l = leases_[rng_() % leases_.size()];
        (void)engine.Extend(l.queue, l.id, l.token, 1'000);
      } else if (op < 89 && next_id_ > 0) {
        (void)engine.Cancel(queue, {RandomId()});
      } else if (op < 92 && next_id_ > 0) {
        ReprioritizeRequest request;
        request.priority = static_cast<int64_t>(rng_() % 50);
        (void)engine.Reprioritize(queue, RandomId(), request);
      } else if (op < 94) {
        (void)engine.RedriveByFilter("retried", {});
      } else {
        clock.Advance(static_cast<int64_t>(rng_() % 1'500));
        engine.Advance(clock.NowMs());
      }
    }
  }

 private:
  struct Lease {
    std::string queue, id;
    uint64_t token = 0;
  };
  Lease TakeLease() {
    size_t k = rng_() % leases_.size();
    Lease l = leases_[k];
    leases_.erase(leases_.begin() + static_cast<long>(k));
    return l;
  }
  std::string RandomId() {
    return "s" + std::to_string(seed_) + "-" + std::to_string(rng_() % next_id_);
  }

  std::mt19937_64 rng_;
  uint64_t seed_;
  bool with_dependencies_;
  std::vector<std::string> enqueued_;  // recent "queue/id" keys (with_dependencies)
  uint64_t next_id_ = 0;
  std::vector<Lease> leases_;
};

// Names in `dir` that `parse` accepts (ParseSegmentFileName, ParseSnapshotFileName), sorted.
inline std::vector<std::string> NamesIn(FileSystem* fs, const std::string& dir,
                                        std::optional<uint64_t> (*parse)(std::string_view)) {
  std::vector<std::string> out;
  auto names = fs->ListDir(dir);
  if (!names.ok()) return out;
  for (const auto& n : *names) {
    if (parse(n)) out.push_back(n);
  }
  return out;
}
inline std::vector<std::string> SegmentNames(FileSystem* fs, const std::string& dir) {
  return NamesIn(fs, dir, &ParseSegmentFileName);
}
inline std::vector<std::string> SnapshotNames(FileSystem* fs, const std::string& dir) {
  return NamesIn(fs, dir, &ParseSnapshotFileName);
}

}  // namespace sundial::wal::test
