// Batches at scale (docs/BENCHMARKS.md, "Batches"): a batch of 100,000 members in one queue,
// through the engine's public API on a ManualClock, no effect sink (the engine's own cost,
// without the WAL). Timed: joining the members (enqueue with batch), then dequeuing and
// completing every member, the last of which makes the sealed batch done and enqueues its
// callback. Compared with the same messages outside any batch (BM_PlainMessages), which is
// what a batch adds. Heap bytes are glibc's mallinfo2 (uordblks + hblkhd) around the joins.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/types.h"

namespace sundial {
namespace {

uint64_t HeapBytes() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Enqueues n messages "m<i>" into "members", 1000 per call, each in `batch` (empty: none).
void EnqueueMembers(Engine& engine, size_t n, const std::string& batch) {
  for (size_t i = 0; i < n; i += kMaxBatchItems) {
    std::vector<EnqueueItem> items;
    for (size_t j = i; j < n && j < i + kMaxBatchItems; ++j) {
      EnqueueItem item;
      item.id = "m" + std::to_string(j);
      item.batch = batch;
      items.push_back(std::move(item));
    }
    (void)engine.Enqueue("members", std::move(items));
  }
}

void DrainAndComplete(Engine& engine, const std::string& queue) {
  DequeueRequest r;
  r.max = kMaxDequeueCount;
  while (true) {
    auto leased = engine.Dequeue(queue, r);
    if (!leased.ok() || leased->empty()) break;
    std::vector<CompleteItem> items;
    for (const auto& m : *leased) items.push_back({m.id, m.lease_token});
    (void)engine.Complete(queue, items);
  }
}

void Run(benchmark::State& state, bool in_batch) {
  const auto n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    ManualClock clock(1'700'000'000'000);
    Engine::Options options;
    options.seed = 1;
    Engine engine(options, &clock, nullptr);
    (void)engine.CreateQueue("members", {});
    if (in_batch) {
      CreateBatchRequest request;
      request.id = "b";
      request.callback = BatchCallback{"callbacks", "", 0, "done", {}, std::nullopt};
      (void)engine.CreateBatch(request);
    }
    const uint64_t heap_before = HeapBytes();
    auto start = std::chrono::steady_clock::now();
    EnqueueMembers(engine, n, in_batch ? "b" : "");
    const double enqueue_s = Seconds(start);
    const uint64_t heap_after = HeapBytes();
    if (in_batch) (void)engine.SealBatch("b");
    start = std::chrono::steady_clock::now();
    DrainAndComplete(engine, "members");
    const double complete_s = Seconds(start);
    if (in_batch) {
      auto b = engine.GetBatch("b");
      if (!b.ok() || !b->done || b->counts.completed != n ||
          !engine.Get("callbacks", "batch:b").ok()) {
        state.SkipWithError("the batch is not done with every member completed");
      }
    }
    state.counters["enqueue_ms"] = enqueue_s * 1e3;
    state.counters["ns_per_enqueue"] = enqueue_s * 1e9 / static_cast<double>(n);
    state.counters["complete_ms"] = complete_s * 1e3;
    state.counters["ns_per_complete"] = complete_s * 1e9 / static_cast<double>(n);
    state.counters["heap_bytes_per_message"] =
        static_cast<double>(heap_after - heap_before) / static_cast<double>(n);
  }
}

void BM_BatchOfMembers(benchmark::State& state) { Run(state, /*in_batch=*/true); }
void BM_PlainMessages(benchmark::State& state) { Run(state, /*in_batch=*/false); }
BENCHMARK(BM_BatchOfMembers)->Arg(100'000)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlainMessages)->Arg(100'000)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sundial
