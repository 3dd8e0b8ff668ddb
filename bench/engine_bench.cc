// Engine microbenchmarks (docs/BENCHMARKS.md, "Engine microbenchmarks").
//
// Every cycle benchmark times one enqueue + one dequeue (max 1) + one complete of the leased
// message against a queue holding a constant number of messages, with retention_ms = 0 and an
// Engine::Advance every kAdvanceEvery iterations (inside the timed loop: removing the completed
// messages is part of the cost). Time comes from a ManualClock; no EffectSink is attached, so
// the numbers are the engine's own cost without the WAL.
//
// A filled engine is expensive to build (10M messages), so the cycle benchmarks keep it in a
// cache keyed by (benchmark, argument): the calls google-benchmark makes for one benchmark and
// argument (iteration-count probing, repetitions) share it; any other benchmark or argument
// frees it and builds its own. The cycle keeps the queue's message count constant, so a reused
// engine holds as many messages as a fresh one.
//
// BM_MemoryPerMessage measures heap bytes in use (glibc mallinfo2: uordblks + hblkhd, the
// latter being the large blocks malloc serves with mmap) around filling a fresh engine.

#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/pages.h"
#include "engine/status.h"
#include "engine/types.h"
#include "server/metrics.h"  // ResidentBytes: what /metrics reports as the process RSS

namespace sundial {
namespace {

constexpr size_t kPayloadBytes = 100;
constexpr size_t kBatch = 1000;  // kMaxBatchItems
constexpr uint64_t kAdvanceEvery = 1024;
constexpr int64_t kBasePriority = 1'700'000'000'000;  // timestamp-like priorities
constexpr int64_t kLongLeaseMs = 43'200'000;          // the 12 h maximum

const std::string& Payload() {
  static const std::string payload(kPayloadBytes, 'p');
  return payload;
}

Engine::Options BenchOptions() {
  Engine::Options options;
  options.shards = 16;
  options.seed = 42;  // deterministic lease tokens
  return options;
}

// A filled engine shared by the calls of one benchmark with one argument (see the file comment).
struct Fixture {
  std::string key;
  ManualClock clock;
  std::unique_ptr<Engine> engine;  // declared after `clock`: destroyed before it
  uint64_t next = 0;               // fresh ids and priorities across calls
  uint64_t cycles = 0;             // for the Advance cadence across calls
};

std::unique_ptr<Fixture>& CachedFixture() {
  static std::unique_ptr<Fixture> fixture;
  return fixture;
}

void ReleaseFixture() { CachedFixture().reset(); }

// Returns the cached fixture for `key`, building it with `setup` when the cache holds another
// one (freed first). On a setup failure returns null and sets *error (a literal).
Fixture* AcquireFixture(const std::string& key, const std::function<const char*(Fixture&)>& setup,
                        const char** error) {
  std::unique_ptr<Fixture>& cached = CachedFixture();
  if (cached && cached->key == key) return cached.get();
  cached.reset();
  auto fixture = std::make_unique<Fixture>();
  fixture->key = key;
  fixture->engine = std::make_unique<Engine>(BenchOptions(), &fixture->clock, nullptr);
  if (const char* e = setup(*fixture)) {
    *error = e;
    return nullptr;
  }
  cached = std::move(fixture);
  return cached.get();
}

std::string FixtureKey(const benchmark::State& state, std::string_view name) {
  return std::string(name) + "/" + std::to_string(state.range(0));
}

const char* CreateQueue(Engine& engine, std::string_view name, QueueSettings settings) {
  settings.retention_ms = 0;  // completed messages go at the next Advance
  if (!engine.CreateQueue(name, settings).ok()) return "CreateQueue failed";
  return nullptr;
}

// Enqueues `count` messages made by make(i), kBatch per call.
const char* Fill(Engine& engine, std::string_view queue, uint64_t count,
                 const std::function<EnqueueItem(uint64_t)>& make) {
  std::vector<EnqueueItem> batch;
  for (uint64_t start = 0; start < count; start += kBatch) {
    const uint64_t end = std::min<uint64_t>(count, start + kBatch);
    batch.clear();
    batch.reserve(end - start);
    for (uint64_t i = start; i < end; ++i) batch.push_back(make(i));
    for (const auto& r : engine.Enqueue(queue, std::move(batch))) {
      if (!r.ok() || r->duplicate) return "setup enqueue failed";
    }
    batch = {};
  }
  return nullptr;
}

EnqueueItem Item(std::string id, int64_t priority, Metadata metadata = {}) {
  EnqueueItem item;
  item.id = std::move(id);
  item.priority = priority;
  item.payload = Payload();
  item.metadata = std::move(metadata);
  return item;
}

// One enqueue of `item`, one dequeue with `request` and one complete of what it returned.
// `expect_new`: whether the dequeue must return the message just enqueued (else it must return
// another one, the head). Returns null or what went wrong.
const char* Cycle(Engine& engine, std::string_view queue, EnqueueItem item,
                  const DequeueRequest& request, bool expect_new) {
  std::string new_id = item.id;
  std::vector<EnqueueItem> items;
  items.push_back(std::move(item));
  auto enq = engine.Enqueue(queue, std::move(items));
  if (enq.size() != 1 || !enq[0].ok() || enq[0]->duplicate) return "enqueue failed";
  auto deq = engine.Dequeue(queue, request);
  if (!deq.ok() || deq->size() != 1) return "dequeue returned no message";
  MessageRecord& rec = (*deq)[0];
  if ((rec.id == new_id) != expect_new) {
    return expect_new ? "dequeue did not return the new message"
                      : "dequeue returned the new message, not the head";
  }
  benchmark::DoNotOptimize(rec.payload.data());
  std::vector<CompleteItem> done;
  done.push_back(CompleteItem{std::move(rec.id), rec.lease_token});
  auto statuses = engine.Complete(queue, done);
  if (statuses.size() != 1 || !statuses[0].ok()) return "complete failed";
  return nullptr;
}

void MaybeAdvance(Engine& engine, ManualClock& clock, uint64_t& cycles) {
  if (++cycles % kAdvanceEvery == 0) {
    clock.Advance(1);
    benchmark::DoNotOptimize(engine.Advance(clock.NowMs()));
  }
}

// Checks the counts of `queue`.
const char* ExpectCounts(Engine& engine, std::string_view queue, uint64_t pending, uint64_t running,
                         uint64_t blocked) {
  auto counts = engine.Count(queue, Filter{});
  if (!counts.ok()) return "Count failed";
  if ((*counts)[MessageState::kPending] != pending) return "setup: wrong pending count";
  if ((*counts)[MessageState::kRunning] != running) return "setup: wrong running count";
  if (counts->blocked != blocked) return "setup: wrong blocked count";
  return nullptr;
}

// ---- BM_EnqueueDequeueComplete ------------------------------------------------------------------

constexpr std::string_view kSimpleQueue = "bench-simple";

void BM_EnqueueDequeueComplete(benchmark::State& state) {
  const auto pending = static_cast<uint64_t>(state.range(0));
  const char* error = nullptr;
  Fixture* f = AcquireFixture(
      FixtureKey(state, "cycle"),
      [pending](Fixture& fx) -> const char* {
        if (const char* e = CreateQueue(*fx.engine, kSimpleQueue, {})) return e;
        if (const char* e = Fill(*fx.engine, kSimpleQueue, pending, [](uint64_t i) {
              return Item("p" + std::to_string(i), kBasePriority + static_cast<int64_t>(i));
            })) {
          return e;
        }
        return ExpectCounts(*fx.engine, kSimpleQueue, pending, 0, 0);
      },
      &error);
  if (f == nullptr) {
    state.SkipWithError(error);
    return;
  }
  const DequeueRequest request;  // max 1, the queue's lease
  for (auto _ : state) {
    const uint64_t n = f->next++;
    // Larger than every setup priority: never the head while setup messages remain, and after
    // them the queue is FIFO by these increasing priorities.
    EnqueueItem item =
        Item("n" + std::to_string(n), kBasePriority + static_cast<int64_t>(pending + n));
    if (const char* e = Cycle(*f->engine, kSimpleQueue, std::move(item), request, false)) {
      state.SkipWithError(e);
      break;
    }
    MaybeAdvance(*f->engine, f->clock, f->cycles);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_EnqueueDequeueComplete)
    ->Arg(1000)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->Arg(10'000'000)
    ->Unit(benchmark::kNanosecond);

// ---- BM_ExclusiveDequeue ------------------------------------------------------------------------

constexpr std::string_view kExclusiveQueue = "bench-exclusive";
constexpr uint64_t kHotValues = 4;      // leased values; the blocked messages wait behind them
constexpr uint64_t kFreeSupply = 1000;  // pending messages of free values, behind the new ones
constexpr int64_t kFarPriority = int64_t{1} << 60;

Metadata KeyValue(std::string value) { return Metadata{MetadataPair{"k", std::move(value)}}; }

void BM_ExclusiveDequeue(benchmark::State& state) {
  const auto blocked = static_cast<uint64_t>(state.range(0));
  const char* error = nullptr;
  Fixture* f = AcquireFixture(
      FixtureKey(state, "exclusive"),
      [blocked](Fixture& fx) -> const char* {
        Engine& engine = *fx.engine;
        QueueSettings settings;
        settings.type = QueueType::kExclusive;
        settings.exclusivity_key = "k";
        if (const char* e = CreateQueue(engine, kExclusiveQueue, settings)) return e;
        // Lease one message of each hot value, for the longest lease.
        if (const char* e = Fill(engine, kExclusiveQueue, kHotValues, [](uint64_t i) {
              return Item("hot-" + std::to_string(i), 0, KeyValue("hot" + std::to_string(i)));
            })) {
          return e;
        }
        DequeueRequest lease;
        lease.max = kHotValues;
        lease.lease_ms = kLongLeaseMs;
        auto leased = engine.Dequeue(kExclusiveQueue, lease);
        if (!leased.ok() || leased->size() != kHotValues) return "setup: leasing hot values";
        // The blocked messages: the most urgent priorities of the queue, all behind hot values.
        if (const char* e = Fill(engine, kExclusiveQueue, blocked, [](uint64_t i) {
              return Item("b" + std::to_string(i), 1 + static_cast<int64_t>(i),
                          KeyValue("hot" + std::to_string(i % kHotValues)));
            })) {
          return e;
        }
        // Free values that stay pending behind the new messages.
        if (const char* e = Fill(engine, kExclusiveQueue, kFreeSupply, [](uint64_t i) {
              return Item("f" + std::to_string(i), kFarPriority + static_cast<int64_t>(i),
                          KeyValue("f" + std::to_string(i)));
            })) {
          return e;
        }
        return ExpectCounts(engine, kExclusiveQueue, blocked + kFreeSupply, kHotValues, blocked);
      },
      &error);
  if (f == nullptr) {
    state.SkipWithError(error);
    return;
  }
  const DequeueRequest request;
  for (auto _ : state) {
    const uint64_t n = f->next++;
    std::string value = "v" + std::to_string(n);  // a fresh exclusivity value
    EnqueueItem item = Item(value, kBasePriority + static_cast<int64_t>(n), KeyValue(value));
    // Cycle checks that the dequeue returns the new message, not a blocked one.
    if (const char* e = Cycle(*f->engine, kExclusiveQueue, std::move(item), request, true)) {
      state.SkipWithError(e);
      break;
    }
    MaybeAdvance(*f->engine, f->clock, f->cycles);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_ExclusiveDequeue)
    ->Arg(0)
    ->Arg(1000)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->Unit(benchmark::kNanosecond);

// ---- BM_KeyConcurrencyDequeue -------------------------------------------------------------------
// A simple queue with flow_key "k" and key_concurrency 3 (docs/semantics.md, "Flow control"):
// the hot values run 3 messages each and hold back the `blocked` most urgent messages; each
// cycle enqueues a message of a fresh value, dequeues it (it must be the one returned) and
// completes it. Flat in `blocked`: held values' messages are in no structure a dequeue visits.

constexpr std::string_view kGatedQueue = "bench-gated";
constexpr uint32_t kKeyConcurrency = 3;

// The cycle of BM_KeyConcurrencyDequeue and BM_KeyRateDequeue on `queue` (created with
// `settings`): each hot value takes `per_hot` leases (its concurrency or its burst), then
// `blocked` messages of the hot values and kFreeSupply of free values wait behind them.
void KeyHeldBackDequeue(benchmark::State& state, const char* fixture, std::string_view queue,
                        const QueueSettings& settings, uint64_t per_hot) {
  const auto blocked = static_cast<uint64_t>(state.range(0));
  const char* error = nullptr;
  Fixture* f = AcquireFixture(
      FixtureKey(state, fixture),
      [&](Fixture& fx) -> const char* {
        Engine& engine = *fx.engine;
        if (const char* e = CreateQueue(engine, queue, settings)) return e;
        const uint64_t running = kHotValues * per_hot;
        if (const char* e = Fill(engine, queue, running, [](uint64_t i) {
              return Item("hot-" + std::to_string(i), 0,
                          KeyValue("hot" + std::to_string(i % kHotValues)));
            })) {
          return e;
        }
        DequeueRequest lease;
        lease.max = static_cast<uint32_t>(running);
        lease.lease_ms = kLongLeaseMs;
        auto leased = engine.Dequeue(queue, lease);
        if (!leased.ok() || leased->size() != running) return "setup: leasing hot values";
        if (const char* e = Fill(engine, queue, blocked, [](uint64_t i) {
              return Item("b" + std::to_string(i), 1 + static_cast<int64_t>(i),
                          KeyValue("hot" + std::to_string(i % kHotValues)));
            })) {
          return e;
        }
        if (const char* e = Fill(engine, queue, kFreeSupply, [](uint64_t i) {
              return Item("f" + std::to_string(i), kFarPriority + static_cast<int64_t>(i),
                          KeyValue("f" + std::to_string(i)));
            })) {
          return e;
        }
        return ExpectCounts(engine, queue, blocked + kFreeSupply, running, blocked);
      },
      &error);
  if (f == nullptr) {
    state.SkipWithError(error);
    return;
  }
  const DequeueRequest request;
  for (auto _ : state) {
    const uint64_t n = f->next++;
    std::string value = "v" + std::to_string(n);  // a fresh flow-key value
    EnqueueItem item = Item(value, kBasePriority + static_cast<int64_t>(n), KeyValue(value));
    if (const char* e = Cycle(*f->engine, queue, std::move(item), request, true)) {
      state.SkipWithError(e);
      break;
    }
    MaybeAdvance(*f->engine, f->clock, f->cycles);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_KeyConcurrencyDequeue(benchmark::State& state) {
  QueueSettings settings;
  settings.flow_key = "k";
  settings.key_concurrency = kKeyConcurrency;
  KeyHeldBackDequeue(state, "gated", kGatedQueue, settings, kKeyConcurrency);
}
BENCHMARK(BM_KeyConcurrencyDequeue)->Arg(0)->Arg(1'000'000)->Unit(benchmark::kNanosecond);

// ---- BM_KeyRateDequeue ------------------------------------------------------------------------
// A simple queue with flow_key "k", key_rate_per_s 0.001 (one token per 1000 s) and key_burst 3
// (docs/semantics.md, "Flow control"): the hot values took their 3 tokens and hold back the
// `blocked` most urgent messages, throttled (in the refill set, none in the ready index); each
// cycle enqueues a message of a fresh value, dequeues it (it must be the one returned: it takes
// a token of its own bucket) and completes it (the fresh value then cools: its bucket is kept
// until full, so the cooling set grows by one per cycle here). Flat in `blocked`.

constexpr std::string_view kRatedQueue = "bench-rated";
constexpr uint32_t kKeyBurst = 3;

void BM_KeyRateDequeue(benchmark::State& state) {
  QueueSettings settings;
  settings.flow_key = "k";
  settings.key_rate_milli = 1;
  settings.key_burst = kKeyBurst;
  KeyHeldBackDequeue(state, "rated", kRatedQueue, settings, kKeyBurst);
}
BENCHMARK(BM_KeyRateDequeue)->Arg(0)->Arg(1'000'000)->Unit(benchmark::kNanosecond);

// ---- BM_MemoryPerKey ----------------------------------------------------------------------------
// 100,000 pending messages (value "tenant-000123"-like in metadata key "tenant") in 100,000
// values against the same messages in one value, in a gated queue (flow_key "tenant",
// key_concurrency 3) and in its ungated twin: the gated difference per value is what a value
// costs beyond its messages; the twin's is the filter index's share of it (a (key, value) pair
// index exists for every metadata pair, gated or not), and their difference the key gate's
// (target <= 64 B).

constexpr uint64_t kKeyMessages = 100'000;

uint64_t QueueBytes(bool gated, uint64_t values, const char** error, bool fair = false) {
  ManualClock clock;
  auto engine = std::make_unique<Engine>(BenchOptions(), &clock, nullptr);
  QueueSettings settings;
  if (gated) {
    settings.flow_key = "tenant";
    settings.key_concurrency = kKeyConcurrency;
    if (fair) settings.fairness = Fairness::kWeighted;
  }
  if ((*error = CreateQueue(*engine, "bench-keys", settings)) != nullptr) return 0;
  *error = Fill(*engine, "bench-keys", kKeyMessages, [values](uint64_t i) {
    char value[32];
    std::snprintf(value, sizeof value, "tenant-%06llu",
                  static_cast<unsigned long long>(i % values));
    char id[32];
    std::snprintf(id, sizeof id, "msg-%012llu", static_cast<unsigned long long>(i));
    return Item(std::string(id, 16), kBasePriority + static_cast<int64_t>(i),
                Metadata{MetadataPair{"tenant", value}});
  });
  return engine->allocated_bytes();
}

void BM_MemoryPerKey(benchmark::State& state) {
  ReleaseFixture();
  for (auto _ : state) {
    const char* error = nullptr;
    double bytes[2][2] = {};  // [gated][many values]
    for (int gated = 0; gated < 2 && error == nullptr; ++gated) {
      for (int many = 0; many < 2 && error == nullptr; ++many) {
        bytes[gated][many] =
            static_cast<double>(QueueBytes(gated == 1, many == 1 ? kKeyMessages : 1, &error));
      }
    }
    if (error != nullptr) {
      state.SkipWithError(error);
      break;
    }
    const double n = static_cast<double>(kKeyMessages);
    const double per_value = (bytes[1][1] - bytes[1][0]) / n;
    const double filter_per_value = (bytes[0][1] - bytes[0][0]) / n;
    state.counters["bytes_per_key"] = per_value;
    state.counters["filter_index_bytes_per_value"] = filter_per_value;
    state.counters["gate_bytes_per_key"] = per_value - filter_per_value;
    // The same with fairness weighted: every value is ready, so in the ring.
    const double fair_many = static_cast<double>(QueueBytes(true, kKeyMessages, &error, true));
    const double fair_one = static_cast<double>(QueueBytes(true, 1, &error, true));
    state.counters["fair_gate_bytes_per_key"] = (fair_many - fair_one) / n - filter_per_value;
    state.counters["value_bytes"] = 13;  // "tenant-000123"
  }
}
BENCHMARK(BM_MemoryPerKey)->Iterations(1)->Unit(benchmark::kMillisecond);

// ---- BM_FairShareDrain, BM_FairShareWeights -----------------------------------------------------
// docs/semantics.md, "Fair share". Drain: one value ("big") holds 100,000 messages with the
// earliest deadlines and 999 values hold 10 each; every message is dequeued and completed one
// at a time, with fairness none (Arg 0) or weighted (Arg 1). Counters: the 99th percentile of the
// position (in dequeues) at which the small values' messages were served, the same under an
// exact round robin over the 1,000 values (their fair share: the j-th message of the r-th value
// in round j, after big's), and their ratio (target ≤ 2); time per dequeue+complete. Weights:
// two values of 100,000 messages with weights 2 and 1; the share of 30,000 dequeues (target
// 2:1 ± 5%).

constexpr uint64_t kBigMessages = 100'000;
constexpr uint64_t kSmallValues = 999;
constexpr uint64_t kSmallMessages = 10;

uint64_t Percentile99(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[(v.size() * 99 + 99) / 100 - 1];
}

void BM_FairShareDrain(benchmark::State& state) {
  ReleaseFixture();
  const bool weighted = state.range(0) == 1;
  for (auto _ : state) {
    state.PauseTiming();
    ManualClock clock(kBasePriority);
    Engine engine(BenchOptions(), &clock, nullptr);
    QueueSettings settings;
    settings.flow_key = "k";
    settings.fairness = weighted ? Fairness::kWeighted : Fairness::kNone;
    const char* error = CreateQueue(engine, "bench-fair", settings);
    if (error == nullptr) {
      error = Fill(engine, "bench-fair", kBigMessages, [](uint64_t i) {
        return Item("big-" + std::to_string(i), static_cast<int64_t>(i), KeyValue("big"));
      });
    }
    if (error == nullptr) {
      error = Fill(engine, "bench-fair", kSmallValues * kSmallMessages, [](uint64_t i) {
        const uint64_t value = i % kSmallValues;
        return Item("s" + std::to_string(value) + "-" + std::to_string(i / kSmallValues),
                    static_cast<int64_t>(kBigMessages + i), KeyValue("s" + std::to_string(value)));
      });
    }
    if (error != nullptr) {
      state.SkipWithError(error);
      break;
    }
    state.ResumeTiming();
    std::vector<uint64_t> small;
    small.reserve(kSmallValues * kSmallMessages);
    DequeueRequest request;
    uint64_t served = 0;
    while (true) {
      auto got = engine.Dequeue("bench-fair", request);
      if (!got.ok() || got->empty()) break;
      ++served;
      MessageRecord& rec = (*got)[0];
      if (rec.id[0] == 's') small.push_back(served);
      std::vector<CompleteItem> done;
      done.push_back(CompleteItem{std::move(rec.id), rec.lease_token});
      benchmark::DoNotOptimize(engine.Complete("bench-fair", done));
    }
    state.PauseTiming();
    std::vector<uint64_t> fair;
    for (uint64_t j = 0; j < kSmallMessages; ++j) {
      for (uint64_t r = 0; r < kSmallValues; ++r) fair.push_back(j * (kSmallValues + 1) + r + 2);
    }
    const double p99 = static_cast<double>(Percentile99(small));
    const double fair_p99 = static_cast<double>(Percentile99(fair));
    state.counters["small_wait_p99"] = p99;
    state.counters["fair_share_p99"] = fair_p99;
    state.counters["ratio"] = p99 / fair_p99;
    state.counters["dequeues"] = static_cast<double>(served);
    state.counters["ns_per_dequeue"] = benchmark::Counter(
        static_cast<double>(served), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    state.ResumeTiming();
  }
}
BENCHMARK(BM_FairShareDrain)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond);

void BM_FairShareWeights(benchmark::State& state) {
  ReleaseFixture();
  for (auto _ : state) {
    ManualClock clock(kBasePriority);
    Engine engine(BenchOptions(), &clock, nullptr);
    QueueSettings settings;
    settings.flow_key = "k";
    settings.fairness = Fairness::kWeighted;
    const char* error = CreateQueue(engine, "bench-weights", settings);
    for (const char* value : {"heavy", "light"}) {
      if (error != nullptr) break;
      error = Fill(engine, "bench-weights", kBigMessages, [value](uint64_t i) {
        return Item(std::string(value) + std::to_string(i), static_cast<int64_t>(i),
                    KeyValue(value));
      });
    }
    KeyLimits two;
    two.set = KeyLimits::kWeight;
    two.weight = 2;
    if (error == nullptr && !engine.SetKeyLimits("bench-weights", "heavy", two).ok()) {
      error = "SetKeyLimits failed";
    }
    if (error != nullptr) {
      state.SkipWithError(error);
      break;
    }
    uint64_t heavy = 0, light = 0;
    DequeueRequest request;
    for (int i = 0; i < 30'000; ++i) {
      auto got = engine.Dequeue("bench-weights", request);
      if (!got.ok() || got->empty()) break;
      ((*got)[0].id[0] == 'h' ? heavy : light)++;
    }
    state.counters["heavy_to_light"] = static_cast<double>(heavy) / static_cast<double>(light);
  }
}
BENCHMARK(BM_FairShareWeights)->Iterations(1)->Unit(benchmark::kMillisecond);

// ---- BM_FilterDequeue ---------------------------------------------------------------------------

constexpr std::string_view kFilterQueue = "bench-filter";
constexpr uint64_t kTenants = 100;

Metadata Tenant(uint64_t i) {
  return Metadata{MetadataPair{"tenant", "t" + std::to_string(i % kTenants)}};
}

void BM_FilterDequeue(benchmark::State& state) {
  const auto pending = static_cast<uint64_t>(state.range(0));
  const char* error = nullptr;
  Fixture* f = AcquireFixture(
      FixtureKey(state, "filter"),
      [pending](Fixture& fx) -> const char* {
        if (const char* e = CreateQueue(*fx.engine, kFilterQueue, {})) return e;
        if (const char* e = Fill(*fx.engine, kFilterQueue, pending, [](uint64_t i) {
              return Item("p" + std::to_string(i), kBasePriority + static_cast<int64_t>(i),
                          Tenant(i));
            })) {
          return e;
        }
        auto matching = fx.engine->Count(kFilterQueue, Filter{{"tenant", "t7"}});
        if (!matching.ok() || (*matching)[MessageState::kPending] != pending / kTenants) {
          return "setup: wrong count of tenant=t7";
        }
        return ExpectCounts(*fx.engine, kFilterQueue, pending, 0, 0);
      },
      &error);
  if (f == nullptr) {
    state.SkipWithError(error);
    return;
  }
  DequeueRequest request;
  request.filter = Filter{{"tenant", "t7"}};
  for (auto _ : state) {
    const uint64_t n = f->next++;
    EnqueueItem item =
        Item("n" + std::to_string(n), kBasePriority + static_cast<int64_t>(pending + n), Tenant(7));
    if (const char* e = Cycle(*f->engine, kFilterQueue, std::move(item), request, false)) {
      state.SkipWithError(e);
      break;
    }
    MaybeAdvance(*f->engine, f->clock, f->cycles);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_FilterDequeue)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kNanosecond);

// ---- BM_ShardedCycle ----------------------------------------------------------------------------

constexpr size_t kShardedQueues = 64;
constexpr uint64_t kShardedPrefill = 1000;  // pending messages per queue

struct Sharded {
  ManualClock clock;
  std::unique_ptr<Engine> engine;
  std::vector<std::string> queues;
  const char* error = nullptr;
};
// Set up by thread 0 before the loop; google-benchmark starts no thread's loop before every
// thread reaches it, and ends none before all have finished.
Sharded* g_sharded = nullptr;

const char* SetUpSharded(Sharded& s) {
  s.engine = std::make_unique<Engine>(BenchOptions(), &s.clock, nullptr);
  for (size_t q = 0; q < kShardedQueues; ++q) {
    char name[32];
    std::snprintf(name, sizeof name, "bench-sharded-%02zu", q);
    s.queues.emplace_back(name);
    if (const char* e = CreateQueue(*s.engine, s.queues.back(), {})) return e;
    if (const char* e = Fill(*s.engine, s.queues.back(), kShardedPrefill, [](uint64_t i) {
          return Item("p" + std::to_string(i), kBasePriority + static_cast<int64_t>(i));
        })) {
      return e;
    }
  }
  return nullptr;
}

void BM_ShardedCycle(benchmark::State& state) {
  if (state.thread_index() == 0) {
    ReleaseFixture();
    g_sharded = new Sharded;
    g_sharded->error = SetUpSharded(*g_sharded);
  }
  const auto thread = static_cast<size_t>(state.thread_index());
  const auto threads = static_cast<size_t>(state.threads());
  std::vector<std::string_view> own;  // this thread's queues
  uint64_t n = 0;
  uint64_t cycles = 0;
  const DequeueRequest request;
  const std::string prefix = "t" + std::to_string(thread) + "-";
  std::chrono::steady_clock::time_point start;
  for (auto _ : state) {
    Sharded& s = *g_sharded;
    if (own.empty()) {  // the first iteration: every thread has passed the start barrier
      if (s.error != nullptr) {
        state.SkipWithError(s.error);
        break;
      }
      // Each thread takes the queues of its own shards, so the threads never contend.
      for (const auto& q : s.queues) {
        if (s.engine->ShardOf(q) % threads == thread) own.push_back(q);
      }
      start = std::chrono::steady_clock::now();
    }
    const std::string_view queue = own[n % own.size()];
    EnqueueItem item =
        Item(prefix + std::to_string(n), kBasePriority + static_cast<int64_t>(kShardedPrefill + n));
    ++n;
    if (const char* e = Cycle(*s.engine, queue, std::move(item), request, false)) {
      state.SkipWithError(e);
      break;
    }
    MaybeAdvance(*s.engine, s.clock, cycles);
  }
  // items_per_second divides by the CPU time of all threads (per-core throughput);
  // wall_items_per_second sums each thread's iterations over its wall time: the engine's total.
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start;
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  if (!own.empty() && wall.count() > 0) {
    state.counters["wall_items_per_second"] =
        static_cast<double>(state.iterations()) / wall.count();
  }
  if (state.thread_index() == 0) {
    delete g_sharded;
    g_sharded = nullptr;
  }
}
BENCHMARK(BM_ShardedCycle)->Threads(1)->Threads(2)->Unit(benchmark::kNanosecond);

// ---- BM_MemoryPerMessage ------------------------------------------------------------------------

constexpr std::string_view kMemoryQueue = "bench-memory";
constexpr uint64_t kMemoryMessages = 1'000'000;
constexpr size_t kIdBytes = 16;

// Heap bytes in use: malloc's (small blocks and its own mmapped ones) plus the blocks the
// engine maps itself (pages.h: message chunks, large indexes).
uint64_t HeapBytesInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd + pages::MappedBytes();
}

void BM_MemoryPerMessage(benchmark::State& state) {
  ReleaseFixture();
  static const char* const kKinds[] = {"email", "sms", "push", "webhook", "report"};
  for (auto _ : state) {
    ManualClock clock;
    auto engine = std::make_unique<Engine>(BenchOptions(), &clock, nullptr);
    if (const char* e = CreateQueue(*engine, kMemoryQueue, {})) {
      state.SkipWithError(e);
      break;
    }
    uint64_t content_bytes = 0;  // payload + metadata keys and values
    const uint64_t before = HeapBytesInUse();
    const uint64_t rss_before = server::ResidentBytes();
    const char* e = Fill(*engine, kMemoryQueue, kMemoryMessages, [&content_bytes](uint64_t i) {
      char id[kIdBytes + 1];
      std::snprintf(id, sizeof id, "msg-%012llu", static_cast<unsigned long long>(i));
      Metadata metadata{MetadataPair{"tenant", "t" + std::to_string(i % 100)},
                        MetadataPair{"kind", kKinds[i % 5]}};
      content_bytes += kPayloadBytes;
      for (const auto& pair : metadata) content_bytes += pair.key.size() + pair.value.size();
      return Item(std::string(id, kIdBytes), kBasePriority + static_cast<int64_t>(i),
                  std::move(metadata));
    });
    const uint64_t after = HeapBytesInUse();
    const uint64_t rss_after = server::ResidentBytes();
    if (e != nullptr) {
      state.SkipWithError(e);
      break;
    }
    const double n = static_cast<double>(kMemoryMessages);
    state.counters["bytes_per_message"] =
        (static_cast<double>(after) - static_cast<double>(before) -
         static_cast<double>(content_bytes)) /
        n;
    state.counters["id_bytes_per_message"] = static_cast<double>(kIdBytes);
    state.counters["rss_bytes_per_message"] =
        (static_cast<double>(rss_after) - static_cast<double>(rss_before) -
         static_cast<double>(content_bytes)) /
        n;
    state.counters["engine_allocated_bytes_per_message"] =
        (static_cast<double>(engine->allocated_bytes()) - static_cast<double>(content_bytes)) / n;
    state.counters["accounted_bytes_per_message"] = static_cast<double>(engine->memory_bytes()) / n;
    state.counters["content_bytes_per_message"] = static_cast<double>(content_bytes) / n;
    benchmark::DoNotOptimize(engine.get());
  }
}
BENCHMARK(BM_MemoryPerMessage)->Iterations(1)->Unit(benchmark::kMillisecond);

// The shape bench/scale.sh loads (sundial-bench's enqueue): 2,000,000 messages with ids like
// "m3-1234567", 100-byte payloads, no metadata. Reports the same counters, and the parts.
void BM_MemoryPerMessageScaleShape(benchmark::State& state) {
  ReleaseFixture();
  constexpr uint64_t kMessages = 2'000'000;
  for (auto _ : state) {
    ManualClock clock;
    auto engine = std::make_unique<Engine>(BenchOptions(), &clock, nullptr);
    if (const char* e = CreateQueue(*engine, kMemoryQueue, {})) {
      state.SkipWithError(e);
      break;
    }
    uint64_t content_bytes = 0;  // id + payload
    const uint64_t before = HeapBytesInUse();
    const uint64_t rss_before = server::ResidentBytes();
    const char* e = Fill(*engine, kMemoryQueue, kMessages, [&content_bytes](uint64_t i) {
      std::string id = "m" + std::to_string(i % 8) + "-" + std::to_string(i);
      content_bytes += id.size() + kPayloadBytes;
      return Item(std::move(id), static_cast<int64_t>(i));
    });
    const uint64_t after = HeapBytesInUse();
    const uint64_t rss_after = server::ResidentBytes();
    if (e != nullptr) {
      state.SkipWithError(e);
      break;
    }
    const double n = static_cast<double>(kMessages);
    state.counters["bytes_per_message"] =
        (static_cast<double>(after) - static_cast<double>(before)) / n;
    state.counters["overhead_bytes_per_message"] =
        (static_cast<double>(after) - static_cast<double>(before) -
         static_cast<double>(content_bytes)) /
        n;
    state.counters["rss_bytes_per_message"] =
        (static_cast<double>(rss_after) - static_cast<double>(rss_before)) / n;
    state.counters["content_bytes_per_message"] = static_cast<double>(content_bytes) / n;
    benchmark::DoNotOptimize(engine.get());
  }
}
BENCHMARK(BM_MemoryPerMessageScaleShape)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sundial
