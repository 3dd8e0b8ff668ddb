// Crash test (issue "Write-ahead log", item 7): a child process runs engine + GroupCommitLog
// (fsync=always, POSIX files, small segments) with a background Checkpointer under a random
// workload and reports every acknowledged mutation to the parent over a pipe; the parent SIGKILLs
// it at a random moment, recovers the directory into a fresh engine with wal::Recover and checks
// that
//  - every acknowledged enqueue is present, every acknowledged complete is completed and every
//    acknowledged cancel is canceled;
//  - the engine issue's reference model (tests/engine/model.h), driven with the same operations
//    across all rounds, holds the same queues, counts and messages as the recovered engine;
//  - the recovered state is exactly the state after the acknowledged operations, or after one
//    more (the operation in flight may have reached the disk before its acknowledgement): the
//    workload is deterministic (fixed seeds, a manual clock moving 1 ms per operation, at most one
//    effect per operation), so the parent re-executes it in memory and compares digests.
// The next round restarts the child on the same directory. SUNDIAL_CRASH_ROUNDS sets the number
// of rounds (default 20; the long mode is e.g. SUNDIAL_CRASH_ROUNDS=2000).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/engine/model.h"
#include "wal/checkpointer.h"
#include "wal/group_commit_log.h"
#include "wal/recovery.h"

namespace sundial::wal {
namespace {

using sundial::model::Model;

constexpr int kQueues = 3;
constexpr TimeMs kRoundTimeStep = 1'000'000'000;  // each round starts this much later

std::string QueueName(int q) { return "q" + std::to_string(q); }

Engine::Options EngineOptions() {
  Engine::Options o;
  o.shards = 4;
  o.seed = 12345;
  return o;
}

// One acknowledged mutation, as the child reports it: "E id", "C id" or "X id".
struct Ack {
  char kind = 0;
  std::string queue;
  std::string id;
};

// The deterministic workload of one round. Every Step makes at most one effect.
class Workload {
 public:
  explicit Workload(int round) : round_(round), rng_(1000 + round) {}

  // Runs step `i` on `engine` at clock time; fills *ack when a tracked mutation succeeded. With
  // a `model` (the engine issue's reference model, tests/engine/model.h), runs the same step on
  // it, with the engine's lease tokens and backoff, and expects the same answer.
  void Step(Engine& engine, uint64_t i, Ack* ack, Model* model = nullptr) {
    ack->kind = 0;
    int q = static_cast<int>(rng_() % kQueues);
    std::string queue = QueueName(q);
    uint32_t op = rng_() % 100;
    if (op < 45) {
      EnqueueItem item;
      item.id = "r" + std::to_string(round_) + "-" + std::to_string(i);
      item.priority = static_cast<int64_t>(rng_() % 1000);
      item.payload = std::string(rng_() % 64, 'p');
      item.metadata = {{"tenant", "t" + std::to_string(rng_() % 4)}};
      auto r = engine.Enqueue(queue, {item});
      if (r[0].ok()) *ack = {'E', queue, item.id};
      if (model) {
        EXPECT_EQ(model->Enqueue(queue, {item})[0].ok(), r[0].ok()) << item.id;
      }
    } else if (op < 75) {
      auto r = engine.Dequeue(queue, {});
      if (r.ok() && !r->empty()) leases_.push_back({queue, (*r)[0].id, (*r)[0].lease_token});
      if (model) {
        std::vector<uint64_t> tokens;
        if (r.ok()) {
          for (const auto& m : *r) tokens.push_back(m.lease_token);
        }
        auto m = model->Dequeue(queue, {}, tokens);
        EXPECT_EQ(m.ok() ? m->size() : 99, r.ok() ? r->size() : 99) << "dequeue step " << i;
      }
    } else if (op < 90) {
      if (leases_.empty()) return;
      size_t k = rng_() % leases_.size();
      Lease lease = leases_[k];
      leases_.erase(leases_.begin() + static_cast<long>(k));
      auto r = engine.Complete(lease.queue, {{lease.id, lease.token}});
      if (r[0].ok()) *ack = {'C', lease.queue, lease.id};
      if (model) {
        EXPECT_EQ(model->Complete(lease.queue, {{lease.id, lease.token}})[0].code(), r[0].code());
      }
    } else if (op < 95) {
      if (leases_.empty()) return;
      size_t k = rng_() % leases_.size();
      Lease lease = leases_[k];
      leases_.erase(leases_.begin() + static_cast<long>(k));
      const FailRequest request{
          .id = lease.id, .lease_token = lease.token, .error = "x", .retry_delay_ms = {}};
      const TimeMs now = engine.clock().NowMs();
      auto r = engine.Fail(lease.queue, request);
      if (model) {
        auto m = model->Fail(lease.queue, request, [&](int64_t lo, int64_t) {
          return r.ok() && r->state == MessageState::kInvisible ? r->visible_at - now : lo;
        });
        EXPECT_EQ(m.status().code(), r.status().code());
      }
    } else {
      std::string id = "r" + std::to_string(round_) + "-" + std::to_string(rng_() % (i + 1));
      auto r = engine.Cancel(queue, {id});
      if (r[0].ok()) *ack = {'X', queue, id};
      if (model) {
        EXPECT_EQ(model->Cancel(queue, {id})[0].code(), r[0].code());
      }
    }
  }

 private:
  struct Lease {
    std::string queue, id;
    uint64_t token;
  };
  int round_;
  std::mt19937_64 rng_;
  std::vector<Lease> leases_;
};

TimeMs RoundStart(int round) { return 1'700'000'000'000 + round * kRoundTimeStep; }

// Creates the queues (no effect when they exist) so that every workload step makes at most one.
template <typename EngineOrModel>
void CreateQueues(EngineOrModel& engine) {
  for (int q = 0; q < kQueues; ++q) (void)engine.CreateQueue(QueueName(q), {});
}

// The reference model and the recovered engine hold the same queues and messages. Adds the
// number of messages compared to *compared.
void ExpectSameAsModel(const Model& model, const Engine& engine, int round, uint64_t* compared) {
  for (const Model::Queue& q : model.queues()) {
    auto info = engine.GetQueue(q.name);
    ASSERT_TRUE(info.ok()) << "round " << round << ": queue " << q.name;
    EXPECT_TRUE(info->counts == model.GetQueue(q.name)->counts) << "round " << round;
    for (const Model::Message& m : q.messages) {
      const MessageRecord& e = m.record;
      auto got = engine.Get(q.name, e.id);
      ASSERT_TRUE(got.ok()) << "round " << round << ": " << e.id << " missing";
      EXPECT_EQ(got->state, e.state) << e.id;
      EXPECT_EQ(got->attempts, e.attempts) << e.id;
      EXPECT_EQ(got->priority, e.priority) << e.id;
      EXPECT_EQ(got->version, e.version) << e.id;
      EXPECT_EQ(got->lease_token, e.lease_token) << e.id;
      EXPECT_EQ(got->visible_at, e.visible_at) << e.id;
      EXPECT_EQ(got->lease_expires_at, e.lease_expires_at) << e.id;
      EXPECT_EQ(got->payload, e.payload) << e.id;
      EXPECT_EQ(got->last_error, e.last_error) << e.id;
      ++*compared;
    }
  }
  EXPECT_EQ(engine.ListQueues().size(), model.queues().size()) << "round " << round;
}

void WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n <= 0) _exit(3);
    done += static_cast<size_t>(n);
  }
}

// Small segments and frequent checkpoints, so that kills land in the middle of rotations,
// snapshot writes and deletions too.
LogOptions ChildLogOptions() {
  LogOptions o;
  o.segment_bytes = 4 << 10;
  return o;
}

// Even rounds rebuild checkpoints from the log, odd ones fork a writer of the live engine
// (which the kill takes too: it dies with its parent).
CheckpointOptions ChildCheckpointOptions(int round) {
  CheckpointOptions o;
  o.min_log_bytes = 8 << 10;
  o.poll_ms = 2;
  o.engine_options = EngineOptions();
  o.mode = round % 2 ? CheckpointMode::kFork : CheckpointMode::kReplay;
  return o;
}

// Recovers `dir` into a fresh engine that reports to no sink (the parent's check).
Status RecoverDir(FileSystem* fs, const std::string& dir, const Clock* clock, Recovered* out) {
  return Recover(
      fs, dir, [&] { return std::make_unique<Engine>(EngineOptions(), clock, nullptr); }, {}, out);
}

// The child: recover, open the log, checkpoint in the background, run the workload until
// killed.
[[noreturn]] void RunChild(const std::string& dir, int round, int fd) {
  auto posix = NewPosixFileSystem();
  FileSystem* fs = posix.get();
  ManualClock clock(RoundStart(round));
  DeferredSink sink;
  OpenedLog opened;
  if (!RecoverAndOpenLog(
           fs, dir, [&] { return std::make_unique<Engine>(EngineOptions(), &clock, &sink); }, {},
           ChildLogOptions(), &sink, &opened)
           .ok()) {
    _exit(4);
  }
  Engine& live = *opened.engine;
  GroupCommitLog* log = opened.log.get();
  Checkpointer checkpointer(fs, dir, log, ChildCheckpointOptions(round), &live);
  checkpointer.Start();
  CreateQueues(live);
  if (!log->WaitDurable(log->EndLsnOfThisThread()).ok()) _exit(7);
  WriteAll(fd, "R\n");  // ready
  Workload workload(round);
  for (uint64_t i = 0;; ++i) {
    clock.Advance(1);
    Ack ack;
    workload.Step(live, i, &ack);
    if (!log->WaitDurable(log->EndLsnOfThisThread()).ok()) _exit(8);
    std::string line = std::to_string(i) + " " + (ack.kind ? std::string(1, ack.kind) : "-") + " " +
                       ack.queue + " " + ack.id + "\n";
    WriteAll(fd, line);
  }
}

// Copies `from` into a fresh engine (through ExportState + Apply).
std::unique_ptr<Engine> Clone(const Engine& from, const Clock* clock) {
  auto to = std::make_unique<Engine>(EngineOptions(), clock, nullptr);
  struct Copy : EffectSink {
    Engine* to;
    bool ok = true;
    void OnEffect(const Effect& e) override { ok &= to->Apply(e).ok(); }
  } copy;
  copy.to = to.get();
  from.ExportState(&copy);
  EXPECT_TRUE(copy.ok);
  return to;
}

int Rounds() {
  const char* env = std::getenv("SUNDIAL_CRASH_ROUNDS");
  return env ? std::max(1, std::atoi(env)) : 20;
}

TEST(CrashTest, EveryAcknowledgedMutationSurvivesKillNine) {
  std::string dir =
      (std::filesystem::temp_directory_path() / ("sundial-crash-" + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::mt19937_64 rng(99);
  ManualClock parent_clock;
  // The state every round starts from, as the parent has verified it.
  auto expected = std::make_unique<Engine>(EngineOptions(), &parent_clock, nullptr);
  std::set<std::pair<std::string, std::string>> enqueued, completed, canceled;
  int rounds_with_snapshot = 0;
  // The reference model follows the recovered history across rounds, on the replay's clock.
  ManualClock replay_clock;
  Model model({}, &replay_clock);
  uint64_t compared_with_model = 0;
  const int rounds = Rounds();
  for (int round = 0; round < rounds; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      RunChild(dir, round, fds[1]);
    }
    close(fds[1]);
    FILE* in = fdopen(fds[0], "r");
    ASSERT_NE(in, nullptr);
    uint64_t kill_after = 20 + rng() % 1500;
    std::vector<Ack> acks;
    uint64_t acked_steps = 0;
    bool ready = false;
    char buf[512];
    auto read_line = [&](bool* eof) {
      if (!fgets(buf, sizeof buf, in)) {
        *eof = true;
        return;
      }
      std::string line(buf);
      if (line == "R\n") {
        ready = true;
        return;
      }
      char kind = 0;
      unsigned long long step = 0;
      char queue[64] = {0}, id[128] = {0};
      int n = sscanf(buf, "%llu %c %63s %127s", &step, &kind, queue, id);
      ASSERT_GE(n, 2) << line;
      acked_steps = step + 1;
      if (kind != '-') acks.push_back({kind, queue, id});
    };
    bool eof = false;
    while (!eof && acked_steps < kill_after) read_line(&eof);
    ASSERT_FALSE(eof) << "child exited early in round " << round;
    ASSERT_TRUE(ready);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child status " << status;
    while (!eof) read_line(&eof);  // acknowledgements already in the pipe count too
    fclose(in);
    for (const Ack& a : acks) {
      auto key = std::make_pair(a.queue, a.id);
      if (a.kind == 'E') enqueued.insert(key);
      if (a.kind == 'C') completed.insert(key);
      if (a.kind == 'X') canceled.insert(key);
    }

    // Recover what the child left.
    ManualClock clock(RoundStart(round + 1));
    auto posix = NewPosixFileSystem();
    Recovered result;
    Status s = RecoverDir(posix.get(), dir, &clock, &result);
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.detail() << " "
                        << (result.report.damage ? ToString(*result.report.damage) : "");
    if (!result.report.snapshot.empty()) ++rounds_with_snapshot;
    auto& recovered = result.engine;

    for (const auto& [queue, id] : enqueued) {
      auto m = recovered->Get(queue, id);
      ASSERT_TRUE(m.ok()) << "round " << round << ": acknowledged enqueue lost: " << id;
    }
    for (const auto& [queue, id] : completed) {
      auto m = recovered->Get(queue, id);
      ASSERT_TRUE(m.ok() && m->state == MessageState::kCompleted)
          << "round " << round << ": " << id;
    }
    for (const auto& [queue, id] : canceled) {
      auto m = recovered->Get(queue, id);
      ASSERT_TRUE(m.ok() && m->state == MessageState::kCanceled) << "round " << round << ": " << id;
    }

    // Re-execute the round in memory, on the engine and on the reference model: the recovered
    // state is the one after acked_steps steps, or after one more.
    replay_clock.Set(RoundStart(round));
    auto replay = Clone(*expected, &replay_clock);
    CreateQueues(*replay);
    CreateQueues(model);
    Workload workload(round);
    Ack ignored;
    for (uint64_t i = 0; i < acked_steps; ++i) {
      replay_clock.Advance(1);
      workload.Step(*replay, i, &ignored, &model);
    }
    uint64_t digest_acked = replay->Digest();
    Model model_in_flight = model;
    replay_clock.Advance(1);
    workload.Step(*replay, acked_steps, &ignored, &model_in_flight);
    uint64_t digest_in_flight = replay->Digest();
    uint64_t got = recovered->Digest();
    ASSERT_TRUE(got == digest_acked || got == digest_in_flight)
        << "round " << round << ": recovered state is neither the acknowledged state nor the "
        << "one with the operation in flight (acked steps " << acked_steps << ")";
    if (got != digest_acked) model = model_in_flight;
    ExpectSameAsModel(model, *recovered, round, &compared_with_model);
    if (HasFatalFailure()) return;
    expected = Clone(*recovered, &parent_clock);
  }
  std::filesystem::remove_all(dir);
  EXPECT_GT(enqueued.size(), 0u);
  EXPECT_GT(completed.size(), 0u);
  EXPECT_GT(rounds_with_snapshot, 0);  // checkpoints ran in the child and were recovered from
  EXPECT_GT(compared_with_model, 100u);
}

}  // namespace
}  // namespace sundial::wal
