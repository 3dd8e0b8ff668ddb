// Dependencies at scale (docs/BENCHMARKS.md, "Dependencies"): fan-in of 100,000 children to one
// parent and fan-out of one parent to 100,000 dependents, through the engine's public API on a
// ManualClock, no effect sink (the engine's own cost, without the WAL). Heap bytes are glibc's
// mallinfo2 (uordblks + hblkhd) around building the graph.
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

std::unique_ptr<Engine> NewEngine(ManualClock* clock) {
  Engine::Options options;
  options.seed = 1;
  auto engine = std::make_unique<Engine>(options, clock, nullptr);
  QueueSettings s;
  s.retention_ms = 3'600'000;
  (void)engine->CreateQueue("children", s);
  (void)engine->CreateQueue("parents", s);
  return engine;
}

void EnqueuePlain(Engine& engine, const std::string& queue, const std::vector<std::string>& ids) {
  for (size_t i = 0; i < ids.size(); i += kMaxBatchItems) {
    std::vector<EnqueueItem> items;
    for (size_t j = i; j < ids.size() && j < i + kMaxBatchItems; ++j) {
      EnqueueItem item;
      item.id = ids[j];
      items.push_back(std::move(item));
    }
    (void)engine.Enqueue(queue, std::move(items));
  }
}

// Dequeues and completes every pending message of `queue`, 1000 at a time.
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

// 100,000 children in one queue, one parent in another that depends on all of them. Timed:
// the parent's enqueue, then dequeuing and completing every child (each completion decrements
// the parent's counter; the last releases it).
void BM_FanIn(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    ManualClock clock(1'700'000'000'000);
    auto engine = NewEngine(&clock);
    std::vector<std::string> ids;
    for (size_t i = 0; i < n; ++i) ids.push_back("c" + std::to_string(i));
    EnqueuePlain(*engine, "children", ids);
    EnqueueItem parent;
    parent.id = "parent";
    for (const auto& id : ids) parent.depends_on.push_back("children/" + id);
    const uint64_t heap_before = HeapBytes();
    auto start = std::chrono::steady_clock::now();
    std::vector<EnqueueItem> items;
    items.push_back(std::move(parent));
    (void)engine->Enqueue("parents", std::move(items));
    const double enqueue_s = Seconds(start);
    const uint64_t heap_after = HeapBytes();
    start = std::chrono::steady_clock::now();
    DrainAndComplete(*engine, "children");
    const double complete_s = Seconds(start);
    if (engine->Get("parents", "parent")->state != MessageState::kPending) {
      state.SkipWithError("the parent was not released");
    }
    state.counters["parent_enqueue_ms"] = enqueue_s * 1e3;
    state.counters["children_complete_ms"] = complete_s * 1e3;
    state.counters["ns_per_child_complete"] = complete_s * 1e9 / static_cast<double>(n);
    state.counters["graph_bytes_per_edge"] =
        static_cast<double>(heap_after - heap_before) / static_cast<double>(n);
  }
}
BENCHMARK(BM_FanIn)->Arg(100'000)->Iterations(1)->Unit(benchmark::kMillisecond);

// One parent, 100,000 dependents in another queue. Timed: enqueuing the dependents, then the
// parent's completion, which releases all of them in that one operation.
void BM_FanOut(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    ManualClock clock(1'700'000'000'000);
    auto engine = NewEngine(&clock);
    EnqueuePlain(*engine, "parents", {"parent"});
    const uint64_t heap_before = HeapBytes();
    auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < n; i += kMaxBatchItems) {
      std::vector<EnqueueItem> items;
      for (size_t j = i; j < n && j < i + kMaxBatchItems; ++j) {
        EnqueueItem item;
        item.id = "d" + std::to_string(j);
        item.depends_on = {"parents/parent"};
        items.push_back(std::move(item));
      }
      (void)engine->Enqueue("children", std::move(items));
    }
    const double enqueue_s = Seconds(start);
    const uint64_t heap_after = HeapBytes();
    DequeueRequest r;
    auto leased = engine->Dequeue("parents", r);
    start = std::chrono::steady_clock::now();
    (void)engine->Complete("parents", {{(*leased)[0].id, (*leased)[0].lease_token}});
    const double release_s = Seconds(start);
    if (engine->GetQueue("children")->counts[MessageState::kPending] != n) {
      state.SkipWithError("not every dependent was released");
    }
    state.counters["dependents_enqueue_ms"] = enqueue_s * 1e3;
    state.counters["ns_per_dependent_enqueue"] = enqueue_s * 1e9 / static_cast<double>(n);
    state.counters["parent_complete_ms"] = release_s * 1e3;
    state.counters["bytes_per_dependent"] =
        static_cast<double>(heap_after - heap_before) / static_cast<double>(n);
  }
}
BENCHMARK(BM_FanOut)->Arg(100'000)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sundial
