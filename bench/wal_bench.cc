// WAL benchmarks on the real (POSIX) file system, in a fresh directory under /tmp per run.
//
// BM_WalAppendNever: OnEffect throughput at --fsync=never (the log thread writes concurrently;
//   the timed loop ends by waiting until everything appended has been written).
// BM_WalAckAlways/threads:N: N writers, each OnEffect then WaitDurable on its own end LSN at
//   --fsync=always: acknowledged operations per second, with fsyncs_per_sec, ops_per_fsync and
//   the mean fdatasync time (fsync_us) from LogStats.
// Effects are kMessageEnqueued with a short payload: about 100 bytes encoded.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "wal/effect_codec.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"

namespace sundial::wal {
namespace {

struct BenchLog {
  std::unique_ptr<FileSystem> fs = NewPosixFileSystem();
  std::string dir;
  std::unique_ptr<GroupCommitLog> log;

  explicit BenchLog(FsyncPolicy policy) {
    char pattern[] = "/tmp/sundial-wal-bench-XXXXXX";
    const char* made = ::mkdtemp(pattern);
    if (made == nullptr) std::abort();
    dir = made;
    LogOptions options;
    options.policy = policy;
    auto opened = GroupCommitLog::Open(fs.get(), dir, options, 0, 1);
    if (!opened.ok()) std::abort();
    log = std::move(opened).value();
  }
  ~BenchLog() {
    (void)log->Close();
    log.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

struct SampleEffect {
  std::string queue = "bench";
  std::string id;
  std::string payload = "payload!";
  Effect effect;
  explicit SampleEffect(int thread) : id("message-" + std::to_string(thread) + "-0000") {
    effect.type = EffectType::kMessageEnqueued;
    effect.time = 1'700'000'000'000;
    effect.queue = queue;
    effect.id = id;
    effect.payload = payload;
    effect.version = 1;
    effect.enqueued_at = effect.time;
  }
};

// BM_EncodeEffect: one enqueue effect (100-byte payload, two metadata pairs) encoded as the log
// writes it, into a buffer reused as the effect pipeline reuses its own.
void BM_EncodeEffect(benchmark::State& state) {
  SampleEffect sample(0);
  const std::string payload(100, 'x');
  const std::string metadata =
      std::string("\x06\x00tenant\x04\x00acme\x04\x00kind\x05\x00email", 26);
  sample.effect.payload = payload;
  sample.effect.packed_metadata = metadata;
  std::string out;
  for (auto _ : state) {
    out.clear();
    ++sample.effect.seq;
    EncodeEffect(sample.effect, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["effect_bytes"] = static_cast<double>(out.size());
}
BENCHMARK(BM_EncodeEffect);

void BM_WalAppendNever(benchmark::State& state) {
  BenchLog bench(FsyncPolicy::kNever);
  SampleEffect sample(0);
  std::string encoded;
  EncodeEffect(sample.effect, &encoded);
  for (auto _ : state) {
    ++sample.effect.seq;
    bench.log->OnEffect(sample.effect);
  }
  if (!bench.log->WaitDurable(bench.log->EndLsnOfThisThread()).ok()) std::abort();
  const LogStats stats = bench.log->stats();
  state.SetItemsProcessed(state.iterations());
  state.counters["effect_bytes"] = static_cast<double>(encoded.size());
  state.counters["writes"] = static_cast<double>(stats.writes);
  state.counters["syncs"] = static_cast<double>(stats.syncs);
}
BENCHMARK(BM_WalAppendNever)->UseRealTime();

std::unique_ptr<BenchLog> g_log;  // shared by the threads of one BM_WalAckAlways run
std::chrono::steady_clock::time_point g_start;

void BM_WalAckAlways(benchmark::State& state) {
  if (state.thread_index() == 0) {
    g_log = std::make_unique<BenchLog>(FsyncPolicy::kAlways);
    g_start = std::chrono::steady_clock::now();
  }
  SampleEffect sample(state.thread_index());
  for (auto _ : state) {
    ++sample.effect.seq;
    g_log->log->OnEffect(sample.effect);
    if (!g_log->log->WaitDurable(g_log->log->EndLsnOfThisThread()).ok()) std::abort();
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
    const LogStats stats = g_log->log->stats();
    const double syncs = static_cast<double>(stats.syncs);
    state.counters["fsyncs_per_sec"] = syncs / seconds;
    state.counters["ops_per_fsync"] = syncs > 0 ? static_cast<double>(stats.records) / syncs : 0;
    state.counters["fsync_us"] =
        syncs > 0 ? static_cast<double>(stats.sync_nanos) / syncs / 1e3 : 0;
    g_log.reset();
  }
}
BENCHMARK(BM_WalAckAlways)->Threads(1)->Threads(16)->Threads(64)->UseRealTime();

}  // namespace
}  // namespace sundial::wal
