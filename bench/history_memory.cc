// History's memory per message (docs/BENCHMARKS.md, "History"): N messages through the engine's
// public API on a ManualClock, no effect sink, in a queue with history (history_max 32) and in
// one without (history_max 0), in two shapes: pending (one entry: enqueued) and completed by a
// worker that gave a worker_id (three entries: enqueued, leased with the 9-byte worker id,
// completed). Reports per message: the accounted bytes (Engine::memory_bytes, what the memory
// budget counts), the engine's own allocated_bytes(), and the heap (glibc mallinfo2: uordblks +
// hblkhd) grown while filling. Usage: history_memory [N] (default 1,000,000).
#include <malloc.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

struct Figures {
  double accounted = 0, allocated = 0, heap = 0, seconds = 0;
};

Figures Run(uint64_t n, uint32_t history_max, bool complete) {
  ManualClock clock(1'700'000'000'000);
  Engine::Options options;
  options.seed = 1;
  const uint64_t heap_before = HeapBytes();
  const auto start = std::chrono::steady_clock::now();
  auto engine = std::make_unique<Engine>(options, &clock, nullptr);
  QueueSettings s;
  s.history_max = history_max;
  (void)engine->CreateQueue("q", s);
  std::vector<EnqueueItem> items(1000);
  char id[24];
  for (uint64_t i = 0; i < n; i += items.size()) {
    for (size_t k = 0; k < items.size(); ++k) {
      std::snprintf(id, sizeof id, "m%011llu", static_cast<unsigned long long>(i + k));
      items[k].id = id;
      items[k].payload = "0123456789abcdef";  // 16 bytes
    }
    (void)engine->Enqueue("q", items);
    clock.Advance(1);
    if (complete) {
      DequeueRequest d;
      d.max = static_cast<uint32_t>(items.size());
      d.worker_id = "worker-01";
      auto leased = engine->Dequeue("q", d);
      std::vector<CompleteItem> done;
      for (const MessageRecord& m : *leased) done.push_back({m.id, m.lease_token});
      (void)engine->Complete("q", done);
    }
  }
  Figures f;
  f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  f.accounted = static_cast<double>(engine->memory_bytes()) / static_cast<double>(n);
  f.allocated = static_cast<double>(engine->allocated_bytes()) / static_cast<double>(n);
  f.heap = static_cast<double>(HeapBytes() - heap_before) / static_cast<double>(n);
  return f;
}

}  // namespace
}  // namespace sundial

int main(int argc, char** argv) {
  const uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000;
  std::printf("%llu messages (id 12 B, payload 16 B), bytes per message\n",
              static_cast<unsigned long long>(n));
  std::printf("%-10s %-8s %10s %10s %10s %8s\n", "shape", "history", "accounted", "allocated",
              "heap", "seconds");
  for (bool complete : {false, true}) {
    for (uint32_t history_max : {0u, 32u}) {
      const sundial::Figures f = sundial::Run(n, history_max, complete);
      std::printf("%-10s %-8s %10.1f %10.1f %10.1f %8.2f\n", complete ? "completed" : "pending",
                  history_max ? "on" : "off", f.accounted, f.allocated, f.heap, f.seconds);
    }
  }
  return 0;
}
