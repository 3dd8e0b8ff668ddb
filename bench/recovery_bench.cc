// Recovery and checkpoint benchmarks on the real (POSIX) file system, in a fresh directory under
// /tmp per run. Each is one long measured pass (Iterations(1)); run with repetitions for a median.
//
// BM_Recover/<messages>: a log of `messages` enqueues (100-byte payload, two metadata pairs, one
//   queue; written at --fsync=never, then closed) is
//   - recovered from the segments alone: log_s, log_records_per_s;
//   - checkpointed (Checkpointer::RunOnce): checkpoint_s, snapshot bytes;
//   - recovered from the snapshot: time of the benchmark (and snapshot_s, snapshot_effects_per_s);
//   both recoveries run in a fresh process (this binary with --recover-only DIR), as a restart
//   does: a new heap, and the time until the engine is ready;
//   disk_bytes_per_message: bytes in the directory after the checkpoint / messages.
// BM_EnqueueP99DuringCheckpoint/<messages>: 4 writer threads enqueue and wait for durability
//   (--fsync=always) on an engine holding `messages` pending messages; p50/p99 of that latency
//   without a checkpoint and while one runs, and their ratio (target: p99 ratio < 5).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/clock.h"
#include "engine/engine.h"
#include "wal/checkpointer.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"
#include "wal/recovery.h"

namespace sundial::wal {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/sundial-recovery-bench-XXXXXX";
    const char* made = ::mkdtemp(pattern);
    if (made == nullptr) std::abort();
    path = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  uint64_t Bytes() const {
    uint64_t total = 0;
    for (const auto& entry : std::filesystem::directory_iterator(path)) total += entry.file_size();
    return total;
  }
};

Engine::Options BenchEngineOptions() {
  Engine::Options o;
  o.shards = 16;
  o.seed = 1;
  return o;
}

EnqueueItem MakeItem(uint64_t i) {
  EnqueueItem item;
  item.id = "m-" + std::to_string(i);
  item.priority = static_cast<int64_t>(i % 1000);
  item.payload.assign(100, static_cast<char>('a' + i % 26));
  item.metadata = {{"tenant", "t" + std::to_string(i % 100)}, {"kind", "email"}};
  return item;
}

// Opens an engine logging to `dir` (recovering what is there).
struct LiveServer {
  ManualClock clock{1'700'000'000'000};
  DeferredSink sink;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<GroupCommitLog> log;

  LiveServer(FileSystem* fs, const std::string& dir, FsyncPolicy policy) {
    LogOptions options;
    options.policy = policy;
    OpenedLog opened;
    if (!RecoverAndOpenLog(
             fs, dir, [&] { return std::make_unique<Engine>(BenchEngineOptions(), &clock, &sink); },
             {}, options, &sink, &opened)
             .ok()) {
      std::abort();
    }
    engine = std::move(opened.engine);
    log = std::move(opened.log);
  }
  ~LiveServer() {
    if (log) (void)log->Close();
  }

  void Fill(uint64_t messages) {
    constexpr uint64_t kBatch = 100;
    for (uint64_t i = 0; i < messages; i += kBatch) {
      std::vector<EnqueueItem> items;
      for (uint64_t j = i; j < std::min(messages, i + kBatch); ++j) items.push_back(MakeItem(j));
      for (const auto& r : engine->Enqueue("bench", std::move(items))) {
        if (!r.ok()) std::abort();
      }
    }
    if (!log->Flush().ok()) std::abort();
  }
};

// Recovery as a restart does it: in a fresh process (this binary with --recover-only DIR), so
// the heap is new, as it is when sundiald starts. Returns the child's figures.
struct RestartFigures {
  double seconds = 0;
  uint64_t records = 0;  // replayed from segments
  uint64_t effects = 0;  // loaded from the snapshot
};

RestartFigures RecoverInFreshProcess(const std::string& dir) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) std::abort();
  self[n] = '\0';
  const std::string command = std::string(self) + " --recover-only " + dir;
  FILE* child = ::popen(command.c_str(), "r");
  if (child == nullptr) std::abort();
  RestartFigures f;
  unsigned long long records = 0, effects = 0;
  if (std::fscanf(child, "%lf %llu %llu", &f.seconds, &records, &effects) != 3) std::abort();
  if (::pclose(child) != 0) std::abort();
  f.records = records;
  f.effects = effects;
  return f;
}

int RecoverOnly(const char* dir) {
  auto fs = NewPosixFileSystem();
  ManualClock clock(1'700'000'000'000);
  const auto start = Clock::now();
  Recovered recovered;
  Status s = Recover(
      fs.get(), dir,
      [&] { return std::make_unique<Engine>(BenchEngineOptions(), &clock, nullptr); }, {},
      &recovered);
  const double seconds = Seconds(start);
  if (!s.ok()) return 1;
  std::printf("%.6f %llu %llu\n", seconds,
              static_cast<unsigned long long>(recovered.report.records_replayed),
              static_cast<unsigned long long>(recovered.report.snapshot_effects));
  std::fflush(stdout);
  std::_Exit(0);  // the OS frees the engine, as it would when a server stops
}

int Prepare(const char* dir, uint64_t messages, bool checkpoint) {
  auto fs = NewPosixFileSystem();
  if (!fs->CreateDir(dir).ok()) return 1;
  {
    LiveServer server(fs.get(), dir, FsyncPolicy::kNever);
    server.Fill(messages);
  }
  if (checkpoint) {
    LiveServer server(fs.get(), dir, FsyncPolicy::kNever);
    CheckpointOptions options;
    options.engine_options = BenchEngineOptions();
    options.lower_priority = false;
    Checkpointer checkpointer(fs.get(), dir, server.log.get(), options);
    if (!checkpointer.RunOnce().ok()) return 1;
  }
  return 0;
}

void BM_Recover(benchmark::State& state) {
  const auto messages = static_cast<uint64_t>(state.range(0));
  auto fs = NewPosixFileSystem();
  for (auto _ : state) {
    state.PauseTiming();
    TempDir dir;
    {
      LiveServer server(fs.get(), dir.path, FsyncPolicy::kNever);
      server.Fill(messages);
    }
    // From the log alone, in a fresh process.
    {
      const RestartFigures f = RecoverInFreshProcess(dir.path);
      state.counters["log_s"] = f.seconds;
      state.counters["log_records_per_s"] = static_cast<double>(f.records) / f.seconds;
    }
    // Checkpoint.
    {
      LiveServer server(fs.get(), dir.path, FsyncPolicy::kNever);
      CheckpointOptions options;
      options.engine_options = BenchEngineOptions();
      options.lower_priority = false;
      Checkpointer checkpointer(fs.get(), dir.path, server.log.get(), options);
      const auto start = Clock::now();
      auto result = checkpointer.RunOnce();
      if (!result.ok()) std::abort();
      state.counters["checkpoint_s"] = Seconds(start);
      state.counters["snapshot_mb"] = static_cast<double>(result->snapshot_bytes) / 1e6;
    }
    state.counters["disk_bytes_per_message"] =
        static_cast<double>(dir.Bytes()) / static_cast<double>(messages);
    // From the snapshot, in a fresh process (the timed part).
    state.ResumeTiming();
    const RestartFigures f = RecoverInFreshProcess(dir.path);
    state.PauseTiming();
    state.counters["snapshot_s"] = f.seconds;
    state.counters["snapshot_effects_per_s"] = static_cast<double>(f.effects) / f.seconds;
    state.ResumeTiming();
  }
}
BENCHMARK(BM_Recover)
    ->Arg(1'000'000)
    ->Arg(10'000'000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Latencies (µs) of enqueue + wait-durable by 4 threads until `stop`.
std::vector<double> EnqueueLatencies(LiveServer& server, const std::atomic<bool>& stop,
                                     uint64_t first_id) {
  std::vector<double> all;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<double> mine;
      for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        EnqueueItem item = MakeItem(first_id + i * 4 + static_cast<uint64_t>(t));
        const auto start = Clock::now();
        if (!server.engine->Enqueue("bench", {item})[0].ok()) std::abort();
        if (!server.log->WaitDurable(server.log->EndLsnOfThisThread()).ok()) std::abort();
        mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
      std::lock_guard lock(mu);
      all.insert(all.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  std::sort(all.begin(), all.end());
  return all;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1,
                         static_cast<size_t>(p * static_cast<double>(sorted.size())))];
}

void BM_EnqueueP99DuringCheckpoint(benchmark::State& state) {
  const auto messages = static_cast<uint64_t>(state.range(0));
  auto fs = NewPosixFileSystem();
  for (auto _ : state) {
    TempDir dir;
    {
      LiveServer filler(fs.get(), dir.path, FsyncPolicy::kNever);
      filler.Fill(messages);
    }
    LiveServer server(fs.get(), dir.path, FsyncPolicy::kAlways);
    CheckpointOptions options;
    options.engine_options = BenchEngineOptions();
    Checkpointer checkpointer(fs.get(), dir.path, server.log.get(), options);

    // Without a checkpoint: as long as a checkpoint takes (measured below), at least 2 s.
    std::atomic<bool> stop{false};
    std::thread timer([&] {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      stop = true;
    });
    auto quiet = EnqueueLatencies(server, stop, 100'000'000);
    timer.join();

    // During one.
    stop = false;
    double checkpoint_s = 0;
    std::thread runner([&] {
      const auto start = Clock::now();
      if (!checkpointer.RunOnce().ok()) std::abort();
      checkpoint_s = Seconds(start);
      stop = true;
    });
    auto busy = EnqueueLatencies(server, stop, 200'000'000);
    runner.join();

    state.counters["checkpoint_s"] = checkpoint_s;
    state.counters["quiet_p50_us"] = Percentile(quiet, 0.50);
    state.counters["quiet_p99_us"] = Percentile(quiet, 0.99);
    state.counters["ckpt_p50_us"] = Percentile(busy, 0.50);
    state.counters["ckpt_p99_us"] = Percentile(busy, 0.99);
    state.counters["p99_ratio"] = Percentile(busy, 0.99) / Percentile(quiet, 0.99);
    state.counters["ckpt_ops"] = static_cast<double>(busy.size());
  }
}
BENCHMARK(BM_EnqueueP99DuringCheckpoint)
    ->Arg(1'000'000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace sundial::wal

// `recovery_bench --recover-only DIR` is the child of RecoverInFreshProcess;
// `recovery_bench --prepare DIR N [checkpoint]` writes the log of N messages into DIR (and a
// checkpoint), for profiling a restart: perf record recovery_bench --recover-only DIR.
int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "--recover-only") {
    return sundial::wal::RecoverOnly(argv[2]);
  }
  if ((argc == 4 || argc == 5) && std::string_view(argv[1]) == "--prepare") {
    return sundial::wal::Prepare(argv[2], std::strtoull(argv[3], nullptr, 10), argc == 5);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
