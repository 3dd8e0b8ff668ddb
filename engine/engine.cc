#include "engine/engine.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <string>

#include <boost/unordered/unordered_flat_map.hpp>

#include "engine/engine_shards.h"
#include "engine/metadata.h"
#include "engine/queue.h"
#include "engine/validation.h"

namespace sundial {

// The queues' DependencyHooks: reached from Queue code under AllShardsLock (engine.h).
class Engine::DependencyBridge : public DependencyHooks {
 public:
  explicit DependencyBridge(Engine* engine) : engine_(engine) {}
  void OnTerminal(Queue& queue, std::string_view id, MessageState from, MessageState to,
                  TimeMs now) override {
    engine_->deps_mu_.AssertHeld();  // queues call it only under AllShardsLock (engine.h)
    engine_->batches_mu_.AssertHeld();
    engine_->ProcessTerminal(DependencyKey(queue.name(), id), from, to, now, /*emit=*/true);
  }
  bool KeepOnRemoval(Queue& queue, std::string_view id) override {
    engine_->deps_mu_.AssertHeld();
    const std::string key = DependencyKey(queue.name(), id);
    if (engine_->deps_.IsHeld(key)) return true;
    engine_->deps_.Forget(key);
    return false;
  }
  void OnDeadLettered(Queue& queue, std::string_view id, MessageState from, TimeMs now) override {
    engine_->deps_mu_.AssertHeld();
    engine_->batches_mu_.AssertHeld();
    engine_->ProcessRemoved(queue.name(), {{std::string(id), from}}, /*dead_lettered=*/true, now,
                            /*emit=*/true);
  }

 private:
  Engine* engine_;
};

struct Engine::Accounting {
  explicit Accounting(Engine* engine) : bridge(engine) {}
  DependencyBridge bridge;
  QueueEnvironment env;
};

// Holds the locks of two shards (one when they are the same), taken in index order so that
// two threads locking the same pair never deadlock.
class SCOPED_CAPABILITY Engine::PairLock {
 public:
  // Not analysed inside: the order, and whether there is a second lock, is decided at run time.
  PairLock(Shard& a, Shard& b) ACQUIRE(a.mu, b.mu) NO_THREAD_SAFETY_ANALYSIS {
    Shard* first = a.index <= b.index ? &a : &b;
    Shard* second = a.index <= b.index ? &b : &a;
    first_ = std::unique_lock<Mutex>(first->mu);
    if (second != first) second_ = std::unique_lock<Mutex>(second->mu);
  }
  ~PairLock() RELEASE() = default;

 private:
  std::unique_lock<Mutex> first_;
  std::unique_lock<Mutex> second_;
};

namespace {

const Status kQueueNotFound = NotFound("queue: no such queue");

// "queue/id" -> queue, id.
std::pair<std::string_view, std::string_view> SplitKey(std::string_view key) {
  const size_t slash = key.find('/');
  return {key.substr(0, slash), key.substr(slash + 1)};
}
const Status kBadQueueName = InvalidArgument("queue: name must be 1-128 bytes of [A-Za-z0-9._:-]");
const Status kResultTooLarge =
    InvalidArgument("result: larger than the server's max_result_bytes (--max-result-bytes)");

template <typename T>
std::vector<T> Repeat(size_t n, const T& value) {
  return std::vector<T>(n, value);
}

// The enqueue refusal for `budget`, built once per engine: every refusal returns a copy, which
// shares the text (status.h).
Status BudgetExhausted(uint64_t budget) {
  return Status(Code::kResourceExhausted,
                "memory: the memory budget of " + std::to_string(budget) +
                    " bytes (--max-memory) is reached; enqueue is refused until dequeue, complete "
                    "or delete frees room");
}

}  // namespace

Engine::Engine(Options options, const Clock* clock, EffectSink* sink)
    : options_(options),
      budget_exhausted_(BudgetExhausted(options.memory_budget_bytes)),
      clock_(clock),
      sink_(sink),
      accounting_(new Accounting(this)) {
  if (options_.shards == 0) options_.shards = 1;
  uint64_t seed = options_.seed;
  if (seed == 0) seed = static_cast<uint64_t>(clock_->NowMs()) ^ reinterpret_cast<uintptr_t>(this);
  for (size_t i = 0; i < options_.shards; ++i) {
    shards_.push_back(std::make_unique<Shard>(seed + 0x9E3779B97F4A7C15ULL * (i + 1), i));
  }
  if (sink_ != nullptr) {
    flow_sink_ = std::make_unique<FlowCaptureSink>(sink_);
    sink_ = flow_sink_.get();
  }
  accounting_->env.sink = sink_;
  accounting_->env.dependencies = &accounting_->bridge;
}

Engine::~Engine() = default;

template <typename R, typename Missing, typename Fn>
R Engine::WithQueue(std::string_view name, Missing missing, Fn fn) const {
  Shard& shard = ShardFor(name);
  MutexLock lock(&shard.mu);
  Queue* q = shard.Find(name);
  if (q == nullptr) return missing();
  return fn(*q, clock_->NowMs(), shard);
}

Queue* Engine::AddQueue(Shard& shard, std::string_view name, const QueueSettings& settings,
                        TimeMs now) {
  shard.mu.AssertHeld();
  auto created =
      std::make_unique<Queue>(std::string(name), settings, &accounting_->env, &shard.bytes);
  Queue* q = created.get();
  shard.queues.emplace(std::string(name), std::move(created));
  if (sink_ != nullptr) {
    Effect e;
    e.type = EffectType::kQueueCreated;
    e.time = now;
    e.queue = q->name();
    e.settings = &q->settings();
    sink_->OnEffect(e);
  }
  return q;
}

Engine::Shard& Engine::ShardFor(std::string_view name) const {
  return *shards_[XXH3_64bits(name.data(), name.size()) % shards_.size()];
}

size_t Engine::ShardOf(std::string_view name) const { return ShardFor(name).index; }

uint64_t Engine::memory_bytes() const {
  uint64_t total = 0;
  for (const auto& shard : shards_) total += shard->bytes.load(std::memory_order_relaxed);
  return total;
}

uint64_t Engine::allocated_bytes() const {
  uint64_t total = 0;
  for (const auto& shard : shards_) {
    MutexLock lock(&shard->mu);
    for (const auto& [name, q] : shard->queues) total += q->allocated_bytes() + sizeof(Queue);
  }
  return total;
}

void Engine::BeginBulkLoad() {
  bulk_ = true;
  for (const auto& shard : shards_) {
    MutexLock lock(&shard->mu);
    for (const auto& [name, q] : shard->queues) q->BeginBulk();
  }
}

void Engine::EndBulkLoad() {
  bulk_ = false;
  for (const auto& shard : shards_) {
    MutexLock lock(&shard->mu);
    for (const auto& [name, q] : shard->queues) q->EndBulk();
  }
}

// ---- Queues -----------------------------------------------------------------------------------

Result<QueueInfo> Engine::CreateQueue(std::string_view name, const QueueSettings& settings) {
  if (!IsValidQueueName(name)) return kBadQueueName;
  if (Status s = ValidateSettings(settings, name); !s.ok()) return s;
  Shard& shard = ShardFor(name);
  const std::string& dlq = settings.dead_letter_queue;
  Shard& dlq_shard = dlq.empty() ? shard : ShardFor(dlq);
  PairLock lock(shard, dlq_shard);
  TimeMs now = clock_->NowMs();
  if (Queue* existing = shard.Find(name)) {
    if (existing->settings() == settings) return existing->Info(now);
    return AlreadyExists("queue: exists with different settings");
  }
  if (!dlq.empty() && dlq_shard.Find(dlq) == nullptr) {
    return NotFound("dead_letter_queue: no such queue");
  }
  return AddQueue(shard, name, settings, now)->Info(now);
}

Result<QueueInfo> Engine::UpdateQueue(std::string_view name, const QueueSettingsUpdate& update) {
  if (!IsValidQueueName(name)) return kBadQueueName;
  Shard& shard = ShardFor(name);
  std::string dlq = update.dead_letter_queue.value_or("");
  Shard& dlq_shard = dlq.empty() ? shard : ShardFor(dlq);
  PairLock lock(shard, dlq_shard);
  TimeMs now = clock_->NowMs();
  Queue* q = shard.Find(name);
  if (q == nullptr) return kQueueNotFound;
  QueueSettings s = q->settings();
  if (update.lease_ms) s.lease_ms = *update.lease_ms;
  if (update.invisibility_ms) s.invisibility_ms = *update.invisibility_ms;
  if (update.max_attempts) s.max_attempts = *update.max_attempts;
  if (update.retry_backoff_ms) s.retry_backoff_ms = *update.retry_backoff_ms;
  if (update.retry_backoff_max_ms) s.retry_backoff_max_ms = *update.retry_backoff_max_ms;
  if (update.dead_letter_queue) s.dead_letter_queue = *update.dead_letter_queue;
  if (update.retention_ms) s.retention_ms = *update.retention_ms;
  if (update.max_depth) s.max_depth = *update.max_depth;
  if (update.enqueue_paused) s.enqueue_paused = *update.enqueue_paused;
  if (update.dequeue_paused) s.dequeue_paused = *update.dequeue_paused;
  if (update.history_max) s.history_max = *update.history_max;
  if (update.key_concurrency) s.key_concurrency = *update.key_concurrency;
  if (update.key_rate_milli) s.key_rate_milli = *update.key_rate_milli;
  if (update.key_burst) s.key_burst = *update.key_burst;
  if (update.rate_milli) s.rate_milli = *update.rate_milli;
  if (update.burst) s.burst = *update.burst;
  if (update.ttl_ms) s.ttl_ms = *update.ttl_ms;
  if (update.dedupe) s.dedupe = *update.dedupe;
  if (update.fairness) s.fairness = *update.fairness;
  if (update.overdue_first_ms) s.overdue_first_ms = *update.overdue_first_ms;
  if (Status st = ValidateSettings(s, name); !st.ok()) return st;
  if (s == q->settings()) return q->Info(now);
  if (!dlq.empty() && dlq != q->settings().dead_letter_queue && dlq_shard.Find(dlq) == nullptr) {
    return NotFound("dead_letter_queue: no such queue");
  }
  q->set_settings(s);
  if (sink_ != nullptr) {
    Effect e;
    e.type = EffectType::kQueueUpdated;
    e.time = now;
    e.queue = q->name();
    e.settings = &q->settings();
    sink_->OnEffect(e);
  }
  return q->Info(now);
}

namespace {
const Status kNotGated =
    Status(Code::kFailedPrecondition, "queue: has no flow_key (key limits need one)");
}  // namespace

Result<KeyInfo> Engine::SetKeyLimits(std::string_view queue, std::string_view value,
                                     const KeyLimits& limits) {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  Shard& shard = ShardFor(queue);
  MutexLock lock(&shard.mu);
  const TimeMs now = clock_->NowMs();
  Queue* q = shard.Find(queue);
  if (q == nullptr) return kQueueNotFound;
  if (!q->gated()) return kNotGated;
  if (Status s = q->CheckKeyLimits(value, limits); !s.ok()) return s;
  const KeyInfo before = q->DescribeKey(value, now);
  if (before.overrides == limits) return before;
  q->SetKeyLimits(value, limits);
  if (sink_ != nullptr) sink_->OnEffect(q->KeyLimitsEffect(value, limits, now));
  return q->DescribeKey(value, now);
}

Result<KeyInfo> Engine::GetKeyLimits(std::string_view queue, std::string_view value) const {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (Status s = ValidateKeyValue(value); !s.ok()) return s;
  return WithQueue<Result<KeyInfo>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs now, Shard&) -> Result<KeyInfo> {
        if (!q.gated()) return kNotGated;
        return q.DescribeKey(value, now);
      });
}

Result<std::vector<KeyInfo>> Engine::ListKeys(std::string_view queue, KeyOrder order,
                                              uint32_t limit) const {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (limit < 1 || limit > 1000) return InvalidArgument("limit: must be 1-1000");
  if (order > KeyOrder::kThrottled)
    return InvalidArgument("order: must be pending, running or throttled");
  return WithQueue<Result<std::vector<KeyInfo>>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs now, Shard&) -> Result<std::vector<KeyInfo>> {
        if (!q.gated()) return kNotGated;
        return q.ListKeys(order, limit, now);
      });
}

Result<QueueInfo> Engine::GetQueue(std::string_view name) const {
  if (!IsValidQueueName(name)) return kBadQueueName;
  Shard& shard = ShardFor(name);
  MutexLock lock(&shard.mu);
  TimeMs now = clock_->NowMs();
  const Queue* q = shard.Find(name);
  if (q == nullptr) return kQueueNotFound;
  return q->Info(now);
}

std::vector<QueueInfo> Engine::ListQueues() const {
  std::vector<QueueInfo> out;
  for (const auto& shard : shards_) {
    MutexLock lock(&shard->mu);
    TimeMs now = clock_->NowMs();
    for (const auto& [name, q] : shard->queues) out.push_back(q->Info(now));
  }
  std::sort(out.begin(), out.end(),
            [](const QueueInfo& a, const QueueInfo& b) { return a.name < b.name; });
  return out;
}

Status Engine::DeleteQueue(std::string_view name) {
  if (!IsValidQueueName(name)) return kBadQueueName;
  Shard& shard = ShardFor(name);
  auto remove = [&](TimeMs now) REQUIRES(shard.mu) {
    auto it = shard.queues.find(name);
    if (sink_ != nullptr) {
      Effect e;
      e.type = EffectType::kQueueDeleted;
      e.time = now;
      e.queue = it->second->name();
      sink_->OnEffect(e);
    }
    shard.queues.erase(it);
  };
  {
    MutexLock lock(&shard.mu);
    Queue* q = shard.Find(name);
    if (q == nullptr) return kQueueNotFound;
    if (!q->HasGraphMessages()) {
      remove(clock_->NowMs());
      return Status::Ok();
    }
  }
  // Messages of the dependency graph go with it: every shard, so their dependents follow.
  AllShardsLock lock(this);
  shard.mu.AssertHeld();
  Queue* q = shard.Find(name);
  if (q == nullptr) return kQueueNotFound;
  const TimeMs now = clock_->NowMs();
  const std::vector<RemovedFromQueue> removed = q->GraphMessages();
  const std::string queue(name);
  remove(now);
  ProcessRemoved(queue, removed, /*dead_lettered=*/false, now, /*emit=*/true);
  return Status::Ok();
}

Result<uint64_t> Engine::PurgeQueue(std::string_view name,
                                    const std::vector<MessageState>& states) {
  if (!IsValidQueueName(name)) return kBadQueueName;
  if (states.empty()) return InvalidArgument("states: give at least one state to purge");
  uint8_t mask = 0;
  for (MessageState s : states) {
    if (static_cast<size_t>(s) >= kStateCount) return InvalidArgument("states: unknown state");
    mask |= static_cast<uint8_t>(1u << static_cast<int>(s));
  }
  Shard& shard = ShardFor(name);
  {
    MutexLock lock(&shard.mu);
    Queue* q = shard.Find(name);
    if (q == nullptr) return kQueueNotFound;
    if (!q->HasGraphMessages()) return q->Purge(mask, clock_->NowMs(), /*emit=*/true);
  }
  // Messages of the dependency graph may go: every shard, so their dependents follow.
  AllShardsLock lock(this);
  shard.mu.AssertHeld();
  Queue* q = shard.Find(name);
  if (q == nullptr) return kQueueNotFound;
  const TimeMs now = clock_->NowMs();
  std::vector<RemovedFromQueue> removed;
  const uint64_t n = q->Purge(mask, now, /*emit=*/true, &removed);
  ProcessRemoved(q->name(), removed, /*dead_lettered=*/false, now, /*emit=*/true);
  return n;
}

// ---- Batches (engine.h; engine/batches.h) ----------------------------------------------------

namespace {

// kBatchCreated of `b` as it is (effect.h); its views point into `b` and *packed.
Effect BatchCreatedEffect(const BatchInfo& b, TimeMs now, std::string* packed) {
  Effect e;
  e.type = EffectType::kBatchCreated;
  e.time = now;
  e.batch = b.id;
  e.batch_fields.has_callback = b.callback.has_value();
  e.batch_fields.retention_ms = b.retention_ms;
  e.batch_fields.created_at = b.created_at;
  e.batch_fields.sealed = b.sealed;
  e.batch_fields.done = b.done;
  e.batch_fields.done_at = b.done_at;
  e.batch_fields.counts = b.counts;
  if (b.callback) {
    const BatchCallback& c = *b.callback;
    *packed = PackMetadata(c.metadata);
    e.queue = c.queue;
    e.id = c.id;
    e.priority = c.priority;
    e.payload = c.payload;
    e.packed_metadata = *packed;
    e.max_attempts = c.max_attempts.value_or(0);
  }
  return e;
}

// The BatchInfo a kBatchCreated describes; nullopt when its fields do not fit together.
std::optional<BatchInfo> BatchFromEffect(const Effect& e) {
  const BatchFields& f = e.batch_fields;
  BatchInfo b;
  b.id = std::string(e.batch);
  b.retention_ms = f.retention_ms;
  b.created_at = f.created_at;
  b.sealed = f.sealed;
  b.done = f.done;
  b.done_at = f.done_at;
  b.counts = f.counts;
  const BatchCounts& c = f.counts;
  if (c.completed > c.members || c.canceled > c.members - c.completed ||
      c.errored > c.members - c.completed - c.canceled || (f.done && !f.sealed) ||
      (f.done && c.active() != 0) || !IsValidDuration(f.retention_ms)) {
    return std::nullopt;
  }
  CreateBatchRequest request;
  request.id = b.id;
  request.retention_ms = f.retention_ms;
  if (f.has_callback) {
    BatchCallback cb;
    cb.queue = std::string(e.queue);
    cb.id = std::string(e.id);
    cb.priority = e.priority;
    cb.payload = std::string(e.payload);
    std::optional<Metadata> metadata = UnpackMetadata(e.packed_metadata);
    if (!metadata) return std::nullopt;
    cb.metadata = std::move(*metadata);
    if (e.max_attempts != 0) cb.max_attempts = e.max_attempts;
    request.callback = cb;
    b.callback = std::move(cb);
  } else if (!e.queue.empty() || !e.id.empty()) {
    return std::nullopt;
  }
  if (!ValidateCreateBatch(request).ok()) return std::nullopt;
  return b;
}

// The callback's metadata: the template's, then the batch's id and outcome counts.
Metadata CallbackMetadata(const BatchInfo& b) {
  Metadata m = b.callback->metadata;
  m.push_back({std::string(kBatchIdKey), b.id});
  m.push_back({std::string(kBatchTotalKey), std::to_string(b.counts.members)});
  m.push_back({std::string(kBatchCompletedKey), std::to_string(b.counts.completed)});
  m.push_back({std::string(kBatchCanceledKey), std::to_string(b.counts.canceled)});
  m.push_back({std::string(kBatchErroredKey), std::to_string(b.counts.errored)});
  return m;
}

}  // namespace

Result<BatchInfo> Engine::CreateBatch(const CreateBatchRequest& request) {
  if (Status s = ValidateCreateBatch(request); !s.ok()) return s;
  BatchInfo b;
  b.id = request.id;
  if (request.callback) {
    b.callback = *request.callback;
    b.callback->id = BatchCallbackId(request);
  }
  b.retention_ms = request.retention_ms.value_or(kDefaultBatchRetentionMs);
  MutexLock lock(&batches_mu_);
  if (const BatchInfo* existing = batches_.Find(b.id)) {
    if (existing->callback == b.callback && existing->retention_ms == b.retention_ms) {
      return *existing;
    }
    return AlreadyExists("id: a batch with this id and another callback or retention exists");
  }
  b.created_at = clock_->NowMs();
  batches_.Add(b);
  if (sink_ != nullptr) {
    std::string packed;
    sink_->OnEffect(BatchCreatedEffect(b, b.created_at, &packed));
  }
  return b;
}

Result<BatchInfo> Engine::SealBatch(std::string_view id) {
  {
    MutexLock lock(&batches_mu_);
    const BatchInfo* b = batches_.Find(id);
    if (b == nullptr) return NotFound("batch: no such batch");
    if (b->sealed) return *b;
  }
  // The seal may make it done: its callback enters a queue, under every shard's lock.
  AllShardsLock lock(this);
  if (batches_.Find(id) == nullptr) return NotFound("batch: no such batch");
  if (batches_.Find(id)->sealed) return *batches_.Find(id);
  const TimeMs now = clock_->NowMs();
  const bool done = batches_.Seal(id);
  if (sink_ != nullptr) {
    Effect e;
    e.type = EffectType::kBatchSealed;
    e.time = now;
    e.batch = id;
    sink_->OnEffect(e);
  }
  if (done) FinishBatch(std::string(id), now, /*emit=*/true);
  return *batches_.Find(id);
}

Result<BatchInfo> Engine::GetBatch(std::string_view id) const {
  MutexLock lock(&batches_mu_);
  const BatchInfo* b = batches_.Find(id);
  if (b == nullptr) return NotFound("batch: no such batch");
  return *b;
}

void Engine::FinishMember(const std::string& key, BatchOutcome outcome, TimeMs now, bool emit) {
  if (std::optional<std::string> done = batches_.Finish(key, outcome)) {
    FinishBatch(*done, now, emit);
  }
}

void Engine::FinishBatch(const std::string& id, TimeMs now, bool emit) {
  batches_.MarkDone(id, now);
  const BatchInfo& b = *batches_.Find(id);
  if (!b.callback) return;
  const BatchCallback& c = *b.callback;
  Shard& shard = ShardFor(c.queue);
  shard.mu.AssertHeld();  // AllShardsLock (deps_mu_ held)
  Queue* q = shard.Find(c.queue);
  if (q == nullptr) {
    // Created as auto-create would, whatever auto_create_queues says: the callback is never
    // lost. Derived as the callback itself (replay creates it again).
    auto created =
        std::make_unique<Queue>(c.queue, QueueSettings{}, &accounting_->env, &shard.bytes);
    q = created.get();
    shard.queues.emplace(c.queue, std::move(created));
    if (emit && sink_ != nullptr) {
      Effect e;
      e.type = EffectType::kQueueCreated;
      e.time = now;
      e.queue = q->name();
      e.settings = &q->settings();
      e.derived = true;
      sink_->OnEffect(e);
    }
  }
  EnqueueItem item;
  item.id = c.id;
  item.priority = c.priority;
  item.payload = c.payload;
  item.metadata = CallbackMetadata(b);
  item.max_attempts = c.max_attempts;
  // Refused only by the queue's own rules (a gated queue without its key in the
  // template, the id taken by another message): documented, and the same on replay.
  (void)q->EnqueueCallback(item, now, &shard.rng, emit);
}

Status Engine::ApplyBatchEffect(const Effect& e) {
  switch (e.type) {
    case EffectType::kBatchCreated: {
      std::optional<BatchInfo> b = BatchFromEffect(e);
      if (!b) return Status(Code::kInternal, "effect: batch fields do not fit");
      MutexLock lock(&batches_mu_);
      if (const BatchInfo* existing = batches_.Find(b->id)) {
        return *existing == *b ? Status::Ok() : Status(Code::kInternal, "effect: batch exists");
      }
      batches_.Add(std::move(*b));
      return Status::Ok();
    }
    case EffectType::kBatchSealed: {
      AllShardsLock lock(this);
      graph_used_.store(true, std::memory_order_relaxed);
      const BatchInfo* b = batches_.Find(e.batch);
      if (b == nullptr) return Status(Code::kInternal, "effect: no such batch");
      if (b->sealed) return Status(Code::kInternal, "effect: batch already sealed");
      if (batches_.Seal(e.batch)) FinishBatch(std::string(e.batch), e.time, /*emit=*/false);
      return Status::Ok();
    }
    case EffectType::kBatchRemoved: {
      MutexLock lock(&batches_mu_);
      const BatchInfo* b = batches_.Find(e.batch);
      if (b == nullptr || !b->done) return Status(Code::kInternal, "effect: no done batch");
      batches_.Remove(e.batch);
      return Status::Ok();
    }
    default:
      return Status(Code::kInternal, "effect: not a batch effect");
  }
}

Status Engine::RestoreMember(Queue& q, const Effect& e) {
  const Status bad(Code::kInternal, "effect: batch member entry does not apply");
  if (e.type != EffectType::kMessageChanged || e.from != e.to || IsTerminal(e.to)) return bad;
  const BatchInfo* b = batches_.Find(e.batch);
  if (b == nullptr || b->done) return bad;
  const std::string key = DependencyKey(e.queue, e.id);
  if (batches_.BatchOf(key) != nullptr) return bad;
  Result<MessageOutcome> outcome = q.Outcome(e.id);
  if (!outcome.ok() || outcome->state != e.to) return bad;
  if (Status s = q.ApplyChanged(e); !s.ok()) return s;
  q.JoinGraph(e.id);
  batches_.AddMember(e.batch, key, /*count=*/false);
  return Status::Ok();
}

uint64_t Engine::RemoveDueBatches(TimeMs now) {
  MutexLock lock(&batches_mu_);
  const std::vector<std::string> due = batches_.DueForRemoval(now);
  for (const std::string& id : due) {
    batches_.Remove(id);
    if (sink_ != nullptr) {
      Effect e;
      e.type = EffectType::kBatchRemoved;
      e.time = now;
      e.batch = id;
      sink_->OnEffect(e);
    }
  }
  return due.size();
}

// ---- Messages ---------------------------------------------------------------------------------

std::vector<Result<EnqueueResult>> Engine::Enqueue(std::string_view queue,
                                                   std::vector<EnqueueItem> items) {
  using R = Result<EnqueueResult>;
  if (items.size() > kMaxBatchItems) {
    return Repeat<R>(items.size(), InvalidArgument("messages: at most 1000 per batch"));
  }
  if (!IsValidQueueName(queue)) return Repeat<R>(items.size(), kBadQueueName);
  std::vector<R> out;
  out.reserve(items.size());
  if (items.empty()) return out;
  for (const auto& item : items) {
    if (!item.depends_on.empty() || !item.batch.empty()) {
      return EnqueueWithDependencies(queue, std::move(items));
    }
  }
  std::vector<Status> checks;
  checks.reserve(items.size());
  for (const auto& item : items) checks.push_back(ValidateItem(item, options_.max_payload_bytes));

  Shard& shard = ShardFor(queue);
  MutexLock lock(&shard.mu);
  TimeMs now = clock_->NowMs();
  Queue* q = shard.Find(queue);
  if (q == nullptr) {
    if (!options_.auto_create_queues) return Repeat<R>(items.size(), kQueueNotFound);
    q = AddQueue(shard, queue, QueueSettings{}, now);
  }
  // The id-table lookups of a batch miss cache one after another: start the next ones early.
  constexpr size_t kAhead = 4;
  for (size_t i = 0; i < kAhead && i < items.size(); ++i) q->PrefetchId(items[i].id);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i + kAhead < items.size()) q->PrefetchId(items[i + kAhead].id);
    if (!checks[i].ok()) {
      out.push_back(checks[i]);
      continue;
    }
    out.push_back(q->Enqueue(items[i], now, &shard.rng, options_.memory_budget_bytes,
                             memory_bytes(), budget_exhausted_));
  }
  return out;
}

namespace {

Status ValidateDequeue(const DequeueRequest& request) {
  if (request.max < 1 || request.max > kMaxDequeueCount) {
    return InvalidArgument("max: must be 1-1000");
  }
  if (request.lease_ms && !IsValidLease(*request.lease_ms)) {
    return InvalidArgument("lease_ms: must be 1-43200000");
  }
  if (request.worker_id.size() > kMaxWorkerIdBytes || !IsValidUtf8(request.worker_id)) {
    return InvalidArgument("worker_id: must be 0-128 bytes of valid UTF-8");
  }
  return ValidateFilter(request.filter);
}

}  // namespace

Result<std::vector<MessageRecord>> Engine::Dequeue(std::string_view queue,
                                                   const DequeueRequest& request) {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (Status s = ValidateDequeue(request); !s.ok()) return s;
  bool in_graph = false;
  Result<std::vector<MessageRecord>> out = WithQueue<Result<std::vector<MessageRecord>>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs now, Shard& shard) -> Result<std::vector<MessageRecord>> {
        in_graph = q.ExpireBeforeDequeue(now);
        if (in_graph) return std::vector<MessageRecord>{};
        return q.Dequeue(request, now, &shard.rng);
      });
  if (!in_graph) return out;
  // A message of the dependency graph whose ttl ran out is expired first (its dependents
  // follow): every shard, as for a timer (engine.h).
  AllShardsLock lock(this);
  Shard& shard = ShardFor(queue);
  shard.mu.AssertHeld();
  Queue* q = shard.Find(queue);
  if (q == nullptr) return kQueueNotFound;
  return q->Dequeue(request, clock_->NowMs(), &shard.rng, /*every_shard_locked=*/true);
}

std::vector<Status> Engine::Complete(std::string_view queue,
                                     const std::vector<CompleteItem>& items) {
  if (items.empty() || items.size() > kMaxBatchItems) {
    return Repeat(items.size(), InvalidArgument("items: 1-1000 per batch"));
  }
  if (!IsValidQueueName(queue)) return Repeat(items.size(), kBadQueueName);
  bool in_graph = false;
  std::vector<Status> out = WithQueue<std::vector<Status>>(
      queue, [&] { return Repeat(items.size(), kQueueNotFound); },
      [&](Queue& q, TimeMs now, Shard&) -> std::vector<Status> {
        in_graph = AnyInGraph(q, items);
        if (in_graph) return {};
        return CompleteLocked(q, items, now);
      });
  if (!in_graph) return out;
  // A message in the dependency graph: every shard, so its dependents follow (engine.h).
  AllShardsLock lock(this);
  Shard& shard = ShardFor(queue);
  shard.mu.AssertHeld();
  Queue* q = shard.Find(queue);
  if (q == nullptr) return Repeat(items.size(), kQueueNotFound);
  return CompleteLocked(*q, items, clock_->NowMs());
}

bool Engine::AnyInGraph(const Queue& q, const std::vector<CompleteItem>& items) {
  for (const auto& item : items) {
    if (q.NeedsEveryShard(item.id)) return true;
  }
  return false;
}

std::vector<Status> Engine::CompleteLocked(Queue& q, const std::vector<CompleteItem>& items,
                                           TimeMs now) const {
  std::vector<Status> out;
  out.reserve(items.size());
  for (const auto& item : items) {
    if (!IsValidId(item.id)) {
      out.push_back(kBadId);
    } else if (item.result.size() > options_.max_result_bytes) {
      out.push_back(kResultTooLarge);
    } else {
      out.push_back(q.Complete(item, now));
    }
  }
  return out;
}

Engine::CompleteAndNextResult Engine::CompleteAndDequeue(std::string_view queue,
                                                         const std::vector<CompleteItem>& items,
                                                         const DequeueRequest& next) {
  auto refused = [&](const Status& s) { return CompleteAndNextResult{Repeat(items.size(), s), s}; };
  if (items.empty() || items.size() > kMaxBatchItems) {
    return refused(InvalidArgument("items: 1-1000 per batch"));
  }
  if (!IsValidQueueName(queue)) return refused(kBadQueueName);
  if (Status s = ValidateDequeue(next); !s.ok()) return refused(s);
  bool in_graph = false;
  CompleteAndNextResult out = WithQueue<CompleteAndNextResult>(
      queue, [&] { return refused(kQueueNotFound); },
      [&](Queue& q, TimeMs now, Shard& shard) -> CompleteAndNextResult {
        in_graph = AnyInGraph(q, items) || q.ExpireBeforeDequeue(now);
        if (in_graph) return {};
        CompleteAndNextResult result{CompleteLocked(q, items, now)};
        result.next = q.Dequeue(next, now, &shard.rng);
        return result;
      });
  if (!in_graph) return out;
  // As Complete: a message in the dependency graph completes under every shard's lock, so its
  // dependents are released (or fail) in this operation; the dequeue follows under the same
  // locks and may lease a dependent just released in this queue.
  AllShardsLock lock(this);
  Shard& shard = ShardFor(queue);
  shard.mu.AssertHeld();
  Queue* q = shard.Find(queue);
  if (q == nullptr) return refused(kQueueNotFound);
  const TimeMs now = clock_->NowMs();
  CompleteAndNextResult result{CompleteLocked(*q, items, now)};
  result.next = q->Dequeue(next, now, &shard.rng, /*every_shard_locked=*/true);
  return result;
}

Result<FailResult> Engine::Fail(std::string_view queue, const FailRequest& request) {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (!IsValidId(request.id)) return kBadId;
  if (request.retry_delay_ms && !IsValidDuration(*request.retry_delay_ms)) {
    return InvalidArgument("retry_delay_ms: must be 0-3153600000000");
  }
  Shard& shard = ShardFor(queue);
  while (true) {
    std::string dlq;
    {
      MutexLock lock(&shard.mu);
      TimeMs now = clock_->NowMs();
      Queue* q = shard.Find(queue);
      if (q == nullptr) return kQueueNotFound;
      dlq = q->settings().dead_letter_queue;
      if (q->NeedsEveryShard(request.id)) break;
      if (dlq.empty() || &ShardFor(dlq) == &shard) {
        return q->Fail(request, now, &shard.rng, dlq.empty() ? nullptr : shard.Find(dlq));
      }
    }
    Shard& dlq_shard = ShardFor(dlq);
    PairLock lock(shard, dlq_shard);
    Queue* q = shard.Find(queue);
    if (q == nullptr) return kQueueNotFound;
    if (q->settings().dead_letter_queue != dlq) continue;  // changed meanwhile: look again
    if (q->NeedsEveryShard(request.id)) break;
    return q->Fail(request, clock_->NowMs(), &shard.rng, dlq_shard.Find(dlq));
  }
  // A message in the dependency graph: every shard (engine.h).
  AllShardsLock lock(this);
  shard.mu.AssertHeld();
  Queue* q = shard.Find(queue);
  if (q == nullptr) return kQueueNotFound;
  const std::string& dlq = q->settings().dead_letter_queue;
  Queue* dead_letter = nullptr;
  if (!dlq.empty()) {
    Shard& dlq_shard = ShardFor(dlq);
    dlq_shard.mu.AssertHeld();
    dead_letter = dlq_shard.Find(dlq);
  }
  return q->Fail(request, clock_->NowMs(), &shard.rng, dead_letter);
}

Result<TimeMs> Engine::Extend(std::string_view queue, std::string_view id, uint64_t lease_token,
                              int64_t lease_ms) {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (!IsValidId(id)) return kBadId;
  if (!IsValidLease(lease_ms)) return InvalidArgument("lease_ms: must be 1-43200000");
  return WithQueue<Result<TimeMs>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs now, Shard&) -> Result<TimeMs> {
        return q.Extend(id, lease_token, lease_ms, now);
      });
}

std::vector<Status> Engine::Cancel(std::string_view queue, const std::vector<std::string>& ids) {
  if (ids.empty() || ids.size() > kMaxBatchItems) {
    return Repeat(ids.size(), InvalidArgument("ids: 1-1000 per batch"));
  }
  if (!IsValidQueueName(queue)) return Repeat(ids.size(), kBadQueueName);
  auto cancel = [&](Queue& q, TimeMs now) {
    std::vector<Status> out;
    out.reserve(ids.size());
    for (const auto& id : ids) out.push_back(IsValidId(id) ? q.Cancel(id, now) : kBadId);
    return out;
  };
  bool in_graph = false;
  std::vector<Status> out = WithQueue<std::vector<Status>>(
      queue, [&] { return Repeat(ids.size(), kQueueNotFound); },
      [&](Queue& q, TimeMs now, Shard&) -> std::vector<Status> {
        for (const auto& id : ids) in_graph |= q.NeedsEveryShard(id);
        if (in_graph) return {};
        return cancel(q, now);
      });
  if (!in_graph) return out;
  AllShardsLock lock(this);
  Shard& shard = ShardFor(queue);
  shard.mu.AssertHeld();
  Queue* q = shard.Find(queue);
  if (q == nullptr) return Repeat(ids.size(), kQueueNotFound);
  return cancel(*q, clock_->NowMs());
}

Result<uint64_t> Engine::CancelByFilter(std::string_view queue, const Filter& filter) {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (filter.empty()) return InvalidArgument("filter: give 1-4 pairs (purge_queue cancels all)");
  if (Status s = ValidateFilter(filter); !s.ok()) return s;
  bool in_graph = false;
  Result<uint64_t> n = WithQueue<Result<uint64_t>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs now, Shard&) -> Result<uint64_t> {
        in_graph = q.HasGraphMessages();
        if (in_graph) return uint64_t{0};
        return q.CancelByFilter(filter, now);
      });
  if (!in_graph) return n;
  AllShardsLock lock(this);
  Shard& shard = ShardFor(queue);
  shard.mu.AssertHeld();
  Queue* q = shard.Find(queue);
  if (q == nullptr) return kQueueNotFound;
  return q->CancelByFilter(filter, clock_->NowMs());
}

Result<uint64_t> Engine::Reprioritize(std::string_view queue, std::string_view id,
                                      const ReprioritizeRequest& request) {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (!IsValidId(id)) return kBadId;
  if (!request.priority && !request.visible_at) {
    return InvalidArgument("priority: give a priority, a visible_at or both");
  }
  return WithQueue<Result<uint64_t>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs now, Shard&) -> Result<uint64_t> {
        return q.Reprioritize(id, request, now);
      });
}

Result<uint64_t> Engine::ReprioritizeByFilter(std::string_view queue, const Filter& filter,
                                              const ReprioritizeRequest& request) {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (filter.empty()) return InvalidArgument("filter: give 1-4 pairs");
  if (Status s = ValidateFilter(filter); !s.ok()) return s;
  if (!request.priority && !request.visible_at) {
    return InvalidArgument("priority: give a priority, a visible_at or both");
  }
  return WithQueue<Result<uint64_t>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs now, Shard&) -> Result<uint64_t> {
        return q.ReprioritizeByFilter(filter, request, now);
      });
}

std::vector<Status> Engine::Redrive(std::string_view queue, const std::vector<std::string>& ids) {
  if (ids.empty() || ids.size() > kMaxBatchItems) {
    return Repeat(ids.size(), InvalidArgument("ids: 1-1000 per batch"));
  }
  if (!IsValidQueueName(queue)) return Repeat(ids.size(), kBadQueueName);
  return WithQueue<std::vector<Status>>(
      queue, [&] { return Repeat(ids.size(), kQueueNotFound); },
      [&](Queue& q, TimeMs now, Shard&) -> std::vector<Status> {
        std::vector<Status> out;
        out.reserve(ids.size());
        for (const auto& id : ids) out.push_back(IsValidId(id) ? q.Redrive(id, now) : kBadId);
        return out;
      });
}

Result<uint64_t> Engine::RedriveByFilter(std::string_view queue, const Filter& filter) {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (Status s = ValidateFilter(filter); !s.ok()) return s;
  return WithQueue<Result<uint64_t>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs now, Shard&) -> Result<uint64_t> {
        return q.RedriveByFilter(filter, now);
      });
}

Result<MessageRecord> Engine::Get(std::string_view queue, std::string_view id) const {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (!IsValidId(id)) return kBadId;
  return WithQueue<Result<MessageRecord>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs, Shard&) -> Result<MessageRecord> { return q.Get(id); });
}

Result<MessageHistory> Engine::History(std::string_view queue, std::string_view id) const {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (!IsValidId(id)) return kBadId;
  return WithQueue<Result<MessageHistory>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs, Shard&) -> Result<MessageHistory> { return q.History(id); });
}

Status Engine::Note(std::string_view queue, std::string_view id, uint64_t lease_token,
                    std::string_view text) {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (!IsValidId(id)) return kBadId;
  if (text.empty() || text.size() > kMaxNoteBytes || !IsValidUtf8(text)) {
    return InvalidArgument("text: must be 1-1024 bytes of valid UTF-8");
  }
  return WithQueue<Status>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs now, Shard&) { return q.Note(id, lease_token, text, now); });
}

std::vector<Result<MessageOutcome>> Engine::Outcomes(std::string_view queue,
                                                     const std::vector<std::string>& ids) const {
  using R = Result<MessageOutcome>;
  if (ids.empty() || ids.size() > kMaxBatchItems) {
    return Repeat<R>(ids.size(), InvalidArgument("ids: 1-1000 per request"));
  }
  if (!IsValidQueueName(queue)) return Repeat<R>(ids.size(), kBadQueueName);
  return WithQueue<std::vector<R>>(
      queue, [&] { return Repeat<R>(ids.size(), kQueueNotFound); },
      [&](Queue& q, TimeMs, Shard&) -> std::vector<R> {
        std::vector<R> out;
        out.reserve(ids.size());
        for (const auto& id : ids) out.push_back(IsValidId(id) ? q.Outcome(id) : R(kBadId));
        return out;
      });
}

Result<BrowsePage> Engine::Browse(std::string_view queue, const BrowseRequest& request) const {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (static_cast<size_t>(request.state) >= kStateCount) {
    return InvalidArgument("state: unknown state");
  }
  if (request.limit < 1 || request.limit > kMaxBrowseLimit) {
    return InvalidArgument("limit: must be 1-1000");
  }
  if (Status s = ValidateFilter(request.filter); !s.ok()) return s;
  return WithQueue<Result<BrowsePage>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs, Shard&) -> Result<BrowsePage> { return q.Browse(request); });
}

Result<StateCounts> Engine::Count(std::string_view queue, const Filter& filter) const {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (Status s = ValidateFilter(filter); !s.ok()) return s;
  return WithQueue<Result<StateCounts>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs, Shard&) -> Result<StateCounts> { return q.Count(filter); });
}

Result<Explanation> Engine::Explain(std::string_view queue, std::string_view id) const {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (!IsValidId(id)) return kBadId;
  Result<Explanation> x = WithQueue<Result<Explanation>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs, Shard&) -> Result<Explanation> { return q.Explain(id); });
  if (!x.ok()) return x;
  // The graph is read under every shard's lock, after the queue's: a release in between leaves
  // the figures of the moment they were read.
  AllShardsLock lock(this);
  const std::string key = DependencyKey(queue, id);
  x->dependents = deps_.WaitingDependents(key, kMaxExplainDependents, &x->waiting_dependents);
  if (x->reason != ExplainReason::kWaitingOnDependencies) return x;
  // Which dependencies it still waits on, as the graph says. Not the dependencies' states: one
  // that errored under the release policy and was redriven since is pending again, but counted
  // finished for good.
  std::vector<DependencyGraph::Listed> listed = deps_.ListedDependencies(key);
  const std::vector<bool> unfinished = deps_.UnfinishedEntries(key);
  x->dependencies = static_cast<uint32_t>(listed.size());
  for (size_t i = 0; i < listed.size() && i < unfinished.size(); ++i) {
    if (!unfinished[i]) continue;
    ++x->unfinished;
    if (x->waiting_on.size() < kMaxExplainWaitingOn) x->waiting_on.push_back(listed[i].key);
  }
  return x;
}

Result<Explanation> Engine::ExplainFilter(std::string_view queue, const Filter& filter) const {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (Status s = ValidateFilter(filter); !s.ok()) return s;
  return WithQueue<Result<Explanation>>(
      queue, [&] { return kQueueNotFound; },
      [&](Queue& q, TimeMs, Shard&) -> Result<Explanation> { return q.ExplainFilter(filter); });
}

// ---- Time, replay, inspection -----------------------------------------------------------------

uint64_t Engine::Advance(TimeMs now) {
  uint64_t count = 0;
  for (const auto& shard : shards_) {
    std::vector<std::pair<std::string, std::string>> deferred;  // (queue, dead-letter queue)
    bool needs_every_shard = false;
    {
      MutexLock lock(&shard->mu);
      for (const auto& [name, q] : shard->queues) {
        if (q->NextDueTime() > now) continue;
        const std::string& dlq = q->settings().dead_letter_queue;
        bool elsewhere = !dlq.empty() && &ShardFor(dlq) != shard.get();
        Queue* dead_letter = dlq.empty() || elsewhere ? nullptr : shard->Find(dlq);
        if (!q->Advance(now, dead_letter, elsewhere, /*every_shard_locked=*/false, &count)) {
          deferred.emplace_back(name, dlq);
          needs_every_shard |= q->HasGraphMessages();
        }
      }
    }
    if (needs_every_shard) {
      // A timer of a message in the dependency graph (engine.h): every shard.
      AllShardsLock lock(this);
      shard->mu.AssertHeld();
      for (auto& [name, unused] : deferred) {
        Queue* q = shard->Find(name);
        if (q == nullptr) continue;
        const std::string& dlq = q->settings().dead_letter_queue;
        Queue* dead_letter = nullptr;
        if (!dlq.empty()) {
          Shard& dlq_shard = ShardFor(dlq);
          dlq_shard.mu.AssertHeld();
          dead_letter = dlq_shard.Find(dlq);
        }
        (void)q->Advance(now, dead_letter, false, /*every_shard_locked=*/true, &count);
      }
      deferred.clear();
    }
    // Queues that must move a message to a dead-letter queue on another shard.
    for (auto& [name, dlq] : deferred) {
      while (true) {
        Shard& dlq_shard = ShardFor(dlq);
        PairLock lock(*shard, dlq_shard);
        Queue* q = shard->Find(name);
        if (q == nullptr) break;
        const std::string& current = q->settings().dead_letter_queue;
        Shard* current_shard = current.empty() ? nullptr : &ShardFor(current);
        if (current_shard != nullptr && current_shard != shard.get() &&
            current_shard != &dlq_shard) {
          dlq = current;  // changed meanwhile, to a queue on a third shard: lock that one
          continue;
        }
        Queue* dead_letter = nullptr;
        if (current_shard != nullptr) {
          current_shard->mu.AssertHeld();  // `shard` or `dlq_shard` (above): both locked
          dead_letter = current_shard->Find(current);
        }
        // A message of the graph that became due meanwhile waits for the next Advance, which
        // NextDueTime asks for at once.
        (void)q->Advance(now, dead_letter, false, /*every_shard_locked=*/false, &count);
        break;
      }
    }
  }
  count += FireSchedules(now);
  return count + RemoveDueBatches(now);
}

TimeMs Engine::NextDueTime() const {
  TimeMs next = INT64_MAX;
  {
    MutexLock lock(&batches_mu_);
    next = batches_.NextDueTime();
  }
  for (const auto& shard : shards_) {
    MutexLock lock(&shard->mu);
    for (const auto& [name, q] : shard->queues) next = std::min(next, q->NextDueTime());
  }
  MutexLock lock(&schedules_mu_);
  return std::min(next, schedules_.NextDueTime());
}

Status Engine::ApplyBatch(const Effect* effects, size_t count, size_t* applied) {
  constexpr size_t kAhead = 8;
  // Bulk load only: one thread, no other caller (BeginBulkLoad's contract), so the queue map
  // may be read without the shard lock.
  auto prefetch = [&](const Effect& e) NO_THREAD_SAFETY_ANALYSIS {
    if (e.id.empty()) return;
    const Shard& shard = ShardFor(e.queue);
    if (const Queue* q = shard.Find(e.queue)) q->PrefetchId(e.id);
  };
  if (bulk_) {
    for (size_t i = 0; i < kAhead && i < count; ++i) prefetch(effects[i]);
  }
  for (size_t i = 0; i < count; ++i) {
    if (bulk_ && i + kAhead < count) prefetch(effects[i + kAhead]);
    if (Status s = Apply(effects[i]); !s.ok()) {
      *applied = i;
      return s;
    }
  }
  *applied = count;
  return Status::Ok();
}

Status Engine::StartEpoch(uint64_t epoch, uint64_t lsn) {
  MutexLock lock(&epochs_mu_);
  if (!epochs_.empty() && epoch <= epochs_.back().epoch) {
    return Status(Code::kFailedPrecondition, "epoch: not above the last epoch of this log");
  }
  epochs_.push_back({epoch, lsn});
  Effect e;
  e.type = EffectType::kEpochStarted;
  e.time = clock_->NowMs();
  e.epoch = epoch;
  e.start_lsn = lsn;
  if (sink_ != nullptr) sink_->OnEffect(e);
  return Status::Ok();
}

std::vector<EpochStart> Engine::Epochs() const {
  MutexLock lock(&epochs_mu_);
  return epochs_;
}

Status Engine::Apply(const Effect& e) {
  if (e.type == EffectType::kFlowEnqueued) {
    // Its members in order (effect.h). A member that does not apply stops it there.
    if (e.members == nullptr || e.members->empty()) {
      return Status(Code::kInternal, "effect: a flow without members");
    }
    for (const Effect& member : *e.members) {
      if (member.type == EffectType::kFlowEnqueued) {
        return Status(Code::kInternal, "effect: a flow inside a flow");
      }
      if (Status s = Apply(member); !s.ok()) return s;
    }
    return Status::Ok();
  }
  if (IsScheduleEffect(e.type)) return ApplySchedule(e);
  if (e.type == EffectType::kBatchCreated || e.type == EffectType::kBatchSealed ||
      e.type == EffectType::kBatchRemoved) {
    return ApplyBatchEffect(e);
  }
  if ((e.depends_on != nullptr && !e.depends_on->empty()) || !e.batch.empty()) {
    return ApplyWithDependencies(e);
  }
  if (graph_used_.load(std::memory_order_relaxed)) {
    const bool of_message = e.type == EffectType::kMessageChanged ||
                            e.type == EffectType::kMessageRemoved ||
                            e.type == EffectType::kMessageDeadLettered;
    const bool of_queue = e.type == EffectType::kQueueDeleted || e.type == EffectType::kQueuePurged;
    bool in_graph = false;
    if (of_message || of_queue) {
      Shard& shard = ShardFor(e.queue);
      MutexLock lock(&shard.mu);
      Queue* q = shard.Find(e.queue);
      in_graph = q != nullptr && (of_message ? q->NeedsEveryShard(e.id) : q->HasGraphMessages());
    }
    if (in_graph) return ApplyWithDependencies(e);
  }
  if (e.type == EffectType::kEpochStarted) {
    MutexLock lock(&epochs_mu_);
    if (!epochs_.empty() && e.epoch <= epochs_.back().epoch) {
      return Status(Code::kInternal, "effect: an epoch not above the last one");
    }
    epochs_.push_back({e.epoch, e.start_lsn});
    return Status::Ok();
  }
  Shard& shard = ShardFor(e.queue);
  if (e.type == EffectType::kMessageDeadLettered) {
    Shard& dlq_shard = ShardFor(e.dead_letter_queue);
    PairLock lock(shard, dlq_shard);
    Queue* q = shard.Find(e.queue);
    if (q == nullptr) return Status(Code::kInternal, "effect: no such queue");
    return q->ApplyDeadLettered(e, dlq_shard.Find(e.dead_letter_queue));
  }
  MutexLock lock(&shard.mu);
  Queue* q = shard.Find(e.queue);
  switch (e.type) {
    case EffectType::kQueueCreated:
      if (e.settings == nullptr) return Status(Code::kInternal, "effect: no settings");
      if (q != nullptr) {
        return q->settings() == *e.settings ? Status::Ok()
                                            : Status(Code::kInternal, "effect: queue exists");
      }
      q = shard.queues
              .emplace(std::string(e.queue),
                       std::make_unique<Queue>(std::string(e.queue), *e.settings, &accounting_->env,
                                               &shard.bytes))
              .first->second.get();
      if (bulk_) q->BeginBulk();
      return Status::Ok();
    default:
      break;
  }
  if (q == nullptr) return Status(Code::kInternal, "effect: no such queue");
  switch (e.type) {
    case EffectType::kQueueUpdated:
      if (e.settings == nullptr) return Status(Code::kInternal, "effect: no settings");
      if (e.settings->type != q->settings().type ||
          e.settings->exclusivity_key != q->settings().exclusivity_key ||
          e.settings->flow_key != q->settings().flow_key) {
        return Status(Code::kInternal, "effect: a queue's type and keys are fixed at creation");
      }
      q->set_settings(*e.settings);
      return Status::Ok();
    case EffectType::kQueueDeleted:
      shard.queues.erase(e.queue);
      return Status::Ok();
    case EffectType::kQueuePurged:
      (void)q->Purge(e.purge_states, e.time, /*emit=*/false);
      return Status::Ok();
    case EffectType::kMessageEnqueued:
      return q->ApplyEnqueued(e);
    case EffectType::kMessageChanged:
      return q->ApplyChanged(e);
    case EffectType::kMessageRemoved:
      return q->ApplyRemoved(e);
    case EffectType::kMessageNoted:
      return q->ApplyNoted(e);
    case EffectType::kKeyStateRestated:
      return q->ApplyKeyState(e);
    case EffectType::kKeyLimitsSet:
      return q->ApplyKeyLimits(e);
    default:
      return Status(Code::kInternal, "effect: unknown type");
  }
}

uint64_t Engine::Digest() const {
  // The schedules first (the lock order), when there are some (none: the digest of a state
  // without schedules, as before they existed).
  uint64_t schedules = 0;
  {
    MutexLock lock(&schedules_mu_);
    schedules = schedules_.Digest();
  }
  std::vector<std::unique_lock<Mutex>> locks;
  for (const auto& shard : shards_) locks.emplace_back(shard->mu);
  std::vector<const Queue*> queues;
  for (const auto& shard : shards_) {
    shard->mu.AssertHeld();  // in `locks`
    for (const auto& [name, q] : shard->queues) queues.push_back(q.get());
  }
  std::sort(queues.begin(), queues.end(),
            [](const Queue* a, const Queue* b) { return a->name() < b->name(); });
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (const Queue* q : queues) q->HashInto(state);
  {
    // A log that had leaderships hashes them too (none: the digest of a standalone log, as
    // before epochs existed).
    MutexLock lock(&epochs_mu_);
    for (const EpochStart& e : epochs_) {
      const uint64_t fields[2] = {e.epoch, e.lsn};
      XXH3_64bits_update(state, fields, sizeof fields);
    }
  }
  {
    // The dependency graph, when it has a dependent (none: the digest of a state without
    // dependencies, as before they existed). Every shard is locked (`locks`): the lock order.
    MutexLock lock(&deps_mu_);
    if (const uint64_t graph = deps_.Digest(); graph != 0) {
      XXH3_64bits_update(state, &graph, sizeof graph);
    }
  }
  if (schedules != 0) XXH3_64bits_update(state, &schedules, sizeof schedules);
  {
    // The batches, when there is one (none: the digest of a state without batches, as before
    // they existed).
    MutexLock lock(&batches_mu_);
    if (const uint64_t batches = batches_.Digest(); batches != 0) {
      XXH3_64bits_update(state, &batches, sizeof batches);
    }
  }
  uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest;
}

Engine::Freeze::Freeze(const Engine* engine) NO_THREAD_SAFETY_ANALYSIS : engine_(engine) {
  engine_->schedules_mu_.Lock();
  AllShardsLock::Lock(engine_);
  engine_->epochs_mu_.Lock();  // taken alone everywhere else, or after the shards (Digest)
}

void Engine::Freeze::Release() NO_THREAD_SAFETY_ANALYSIS {
  if (engine_ == nullptr) return;
  engine_->epochs_mu_.Unlock();
  AllShardsLock::Unlock(engine_);
  engine_->schedules_mu_.Unlock();
  engine_ = nullptr;
}

void Engine::ExportState(EffectSink* visit) const {
  ExportSchedules(visit);
  {
    MutexLock lock(&epochs_mu_);
    for (const EpochStart& epoch : epochs_) {
      Effect e;
      e.type = EffectType::kEpochStarted;
      e.time = clock_->NowMs();
      e.epoch = epoch.epoch;
      e.start_lsn = epoch.lsn;
      visit->OnEffect(e);
    }
  }
  for (const auto& shard : shards_) {
    MutexLock lock(&shard->mu);
    std::vector<const Queue*> queues;
    for (const auto& [name, q] : shard->queues) queues.push_back(q.get());
    std::sort(queues.begin(), queues.end(),
              [](const Queue* a, const Queue* b) { return a->name() < b->name(); });
    for (const Queue* q : queues) {
      Effect e;
      e.type = EffectType::kQueueCreated;
      e.time = clock_->NowMs();
      e.queue = q->name();
      e.settings = &q->settings();
      visit->OnEffect(e);
      q->Export(visit);
    }
  }
  // The dependency graph, after every message: each dependent restated with its entry, in
  // the order the dependents joined (engine/dependencies.h), which Apply follows.
  AllShardsLock lock(this);
  deps_.ExportDependents([&](const DependentEntry& d) NO_THREAD_SAFETY_ANALYSIS {
    auto [q_name, id] = SplitKey(d.key);
    const Queue* q = ShardFor(q_name).Find(q_name);  // every shard locked (AllShardsLock)
    Effect e;
    if (q == nullptr || !q->Restate(id, &e)) return;  // cannot be: the node would be gone
    e.depends_on = d.dependencies;
    e.on_dependency_failure = d.policy;
    e.dependency_edges = d.edges;
    visit->OnEffect(e);
  });
  // The batches, in creation order, each with its whole state; then every active member
  // restated with its batch (effect.h, batch).
  batches_.ForEachBatch([&](const BatchInfo& b) {
    std::string packed;
    Effect e = BatchCreatedEffect(b, clock_->NowMs(), &packed);
    visit->OnEffect(e);
  });
  batches_.ForEachMember([&](std::string_view key, std::string_view batch)
                             NO_THREAD_SAFETY_ANALYSIS {
                               auto [q_name, id] = SplitKey(key);
                               const Queue* q = ShardFor(q_name).Find(q_name);  // AllShardsLock
                               Effect e;
                               if (q == nullptr || !q->Restate(id, &e)) return;  // cannot be
                               e.batch = batch;
                               visit->OnEffect(e);
                             });
}

// ---- Dependencies (engine.h; engine/dependencies.h) -------------------------------------------

std::vector<Result<EnqueueResult>> Engine::EnqueueWithDependencies(std::string_view queue,
                                                                   std::vector<EnqueueItem> items) {
  using R = Result<EnqueueResult>;
  std::vector<Status> checks;
  checks.reserve(items.size());
  for (auto& item : items) {
    Status s = ValidateItem(item, options_.max_payload_bytes);
    if (s.ok() && item.depends_on.size() > kMaxDependencies) {
      s = InvalidArgument("depends_on: at most 100000 dependencies per message");
    }
    size_t key_bytes = 0;
    for (auto& entry : item.depends_on) {
      if (!s.ok()) break;
      entry = ResolveDependency(queue, entry);
      auto [q, id] = SplitKey(entry);
      if (!IsValidQueueName(q) || !IsValidId(id)) {
        s = InvalidArgument("depends_on: each entry is an id or queue/id");
      }
      key_bytes += entry.size();
    }
    if (s.ok() && key_bytes > kMaxDependencyKeyBytes) {
      s = InvalidArgument("depends_on: the entries, as queue/id, total at most 12 MiB");
    }
    checks.push_back(std::move(s));
  }
  AllShardsLock lock(this);
  graph_used_.store(true, std::memory_order_relaxed);
  Shard& shard = ShardFor(queue);
  shard.mu.AssertHeld();
  const TimeMs now = clock_->NowMs();
  Queue* q = shard.Find(queue);
  if (q == nullptr) {
    if (!options_.auto_create_queues) return Repeat<R>(items.size(), kQueueNotFound);
    q = AddQueue(shard, queue, QueueSettings{}, now);
  }
  std::vector<R> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    EnqueueItem& item = items[i];
    if (!checks[i].ok()) {
      out.push_back(checks[i]);
      continue;
    }
    // Every dependency must exist now: earlier in this batch at the latest.
    std::vector<MessageState> states;
    Status missing;
    for (const std::string& key : item.depends_on) {
      auto [dq_name, did] = SplitKey(key);
      Shard& dshard = ShardFor(dq_name);
      dshard.mu.AssertHeld();
      Queue* dq = dshard.Find(dq_name);
      Result<MessageOutcome> outcome =
          dq == nullptr ? Result<MessageOutcome>(NotFound("depends_on: no such queue"))
                        : dq->Outcome(did);
      if (!outcome.ok()) {
        missing = Status(Code::kNotFound, "depends_on: no such message " + key);
        break;
      }
      states.push_back(outcome->state);
    }
    if (!missing.ok()) {
      out.push_back(missing);
      continue;
    }
    // The batch must be open; a repeated enqueue of a message that exists answers as before
    // (duplicate, or ALREADY_EXISTS) and joins nothing.
    const bool exists = !item.id.empty() && q->Contains(item.id) && !q->Releases(item);
    if (!item.batch.empty() && !exists) {
      const BatchInfo* batch = batches_.Find(item.batch);
      if (batch == nullptr) {
        out.push_back(NotFound("batch: no such batch"));
        continue;
      }
      if (batch->sealed) {
        out.push_back(FailedPrecondition("batch: sealed, no member may join"));
        continue;
      }
    }
    R r = q->Enqueue(item, now, &shard.rng, options_.memory_budget_bytes, memory_bytes(),
                     budget_exhausted_);
    if (r.ok() && !r->duplicate) {
      const std::string key = DependencyKey(queue, r->id);
      if (!item.batch.empty()) {
        q->JoinGraph(r->id);
        batches_.AddMember(item.batch, key);
      }
      if (!item.depends_on.empty()) AddDependent(key, item, states, now, /*emit=*/true);
    }
    out.push_back(std::move(r));
  }
  return out;
}

void Engine::AddDependent(const std::string& key, const EnqueueItem& item,
                          const std::vector<MessageState>& states, TimeMs now, bool emit) {
  std::vector<bool> finished(states.size());
  std::vector<std::pair<std::string, bool>> failed;  // (dependency, errored)
  for (size_t i = 0; i < states.size(); ++i) {
    const std::string& dep = item.depends_on[i];
    auto [dq_name, did] = SplitKey(dep);
    Shard& dshard = ShardFor(dq_name);
    dshard.mu.AssertHeld();  // AllShardsLock (deps_mu_ held)
    dshard.Find(dq_name)->JoinGraph(did);
    const MessageState s = states[i];
    const bool failure = s == MessageState::kCanceled || s == MessageState::kErrored;
    finished[i] = s == MessageState::kCompleted ||
                  (failure && item.on_dependency_failure == DependencyFailurePolicy::kRelease);
    if (failure && !finished[i]) failed.emplace_back(dep, s == MessageState::kErrored);
  }
  std::vector<DependencyAction> actions;
  if (!deps_.AddDependent(key, item.on_dependency_failure, item.depends_on, finished)) {
    actions.push_back({DependencyAction::Kind::kRelease, key, {}});
  }
  // A dependency that had already failed: its reverse list holds only this new dependent.
  for (const auto& [dep, errored] : failed) deps_.OnFailed(dep, errored, &actions);
  ApplyDependencyActions(actions, now, emit);
  RearmUnheld();
}

void Engine::ProcessTerminal(const std::string& key, MessageState from, MessageState to, TimeMs now,
                             bool emit) {
  if (from == MessageState::kWaiting) deps_.StopWaiting(key);
  std::vector<DependencyAction> actions;
  if (to == MessageState::kCompleted) {
    deps_.OnCompleted(key, &actions);
  } else {
    deps_.OnFailed(key, to == MessageState::kErrored, &actions);
  }
  ApplyDependencyActions(actions, now, emit);
  FinishMember(key,
               to == MessageState::kCompleted  ? BatchOutcome::kCompleted
               : to == MessageState::kCanceled ? BatchOutcome::kCanceled
                                               : BatchOutcome::kErrored,
               now, emit);
  RearmUnheld();
}

void Engine::RearmUnheld() {
  for (const std::string& key : deps_.TakeUnheld()) {
    auto [q_name, id] = SplitKey(key);
    Shard& shard = ShardFor(q_name);
    shard.mu.AssertHeld();  // AllShardsLock (deps_mu_ held)
    if (Queue* q = shard.Find(q_name)) q->RearmHeld(id);
  }
}

void Engine::ApplyDependencyActions(const std::vector<DependencyAction>& actions, TimeMs now,
                                    bool emit) {
  for (const DependencyAction& a : actions) {
    auto [q_name, id] = SplitKey(a.dependent);
    Shard& shard = ShardFor(q_name);
    shard.mu.AssertHeld();  // AllShardsLock (deps_mu_ held)
    Queue* q = shard.Find(q_name);
    if (q == nullptr) continue;
    Status s;
    switch (a.kind) {
      case DependencyAction::Kind::kRelease:
        s = q->ReleaseWaiting(id, now, emit);
        break;
      case DependencyAction::Kind::kCancel:
        s = q->FailWaiting(id, MessageState::kCanceled, a.reason, now, emit);
        break;
      case DependencyAction::Kind::kError:
        s = q->FailWaiting(id, MessageState::kErrored, a.reason, now, emit);
        break;
    }
    // A dependent no longer waiting (its queue purged) has nothing to follow.
    if (s.ok() && a.kind != DependencyAction::Kind::kRelease) {
      FinishMember(a.dependent,
                   a.kind == DependencyAction::Kind::kCancel ? BatchOutcome::kCanceled
                                                             : BatchOutcome::kErrored,
                   now, emit);
    }
  }
}

void Engine::ProcessRemoved(std::string_view queue, std::vector<RemovedFromQueue> removed,
                            bool dead_lettered, TimeMs now, bool emit) {
  // In the order of their ids, not the store's: a dependent of two removed messages names the
  // first in its reason, and a replay or a standby (whose store may be laid out otherwise) must
  // name the same one (docs/semantics.md, "Dependencies").
  std::sort(removed.begin(), removed.end(),
            [](const RemovedFromQueue& a, const RemovedFromQueue& b) { return a.id < b.id; });
  std::vector<std::string> keys;
  keys.reserve(removed.size());
  // First every removed dependent stops waiting, so that none of them is released, canceled
  // or errored by the removal of another.
  for (const RemovedFromQueue& r : removed) {
    keys.push_back(DependencyKey(queue, r.id));
    if (r.state == MessageState::kWaiting) deps_.StopWaiting(keys.back());
  }
  // A dependency that had not finished acts as a failed one: its dependents' policies apply.
  std::vector<DependencyAction> actions;
  for (size_t i = 0; i < removed.size(); ++i) {
    if (IsTerminal(removed[i].state)) continue;
    if (dead_lettered) {
      deps_.OnFailed(keys[i], /*errored=*/true, &actions);
    } else {
      deps_.OnRemoved(keys[i], &actions);
    }
  }
  for (const std::string& key : keys) deps_.Forget(key);
  ApplyDependencyActions(actions, now, emit);
  // A batch member that left unfinished counts as errored (dead-letter move) or canceled.
  for (size_t i = 0; i < removed.size(); ++i) {
    if (IsTerminal(removed[i].state)) continue;
    FinishMember(keys[i], dead_lettered ? BatchOutcome::kErrored : BatchOutcome::kCanceled, now,
                 emit);
  }
  RearmUnheld();
}

Status Engine::RestoreDependent(Queue& q, const Effect& e) {
  const Status bad(Code::kInternal, "effect: dependency entry does not apply");
  if (e.depends_on == nullptr || e.depends_on->size() != e.dependency_edges.size() ||
      e.type != EffectType::kMessageChanged || e.from != e.to) {
    return bad;
  }
  Result<MessageOutcome> outcome = q.Outcome(e.id);
  if (!outcome.ok() || outcome->state != e.to) return bad;
  // The restated fields are the message's own (ExportState): applying them changes nothing,
  // and a record that would change something is refused by the digest check after loading.
  if (Status s = q.ApplyChanged(e); !s.ok()) return s;
  for (size_t i = 0; i < e.depends_on->size(); ++i) {
    if (static_cast<uint8_t>(e.dependency_edges[i]) & kEdgeGone) continue;
    auto [dq_name, did] = SplitKey((*e.depends_on)[i]);
    Shard& dshard = ShardFor(dq_name);
    dshard.mu.AssertHeld();  // AllShardsLock (deps_mu_ held)
    Queue* dq = dshard.Find(dq_name);
    if (dq == nullptr || !dq->Contains(did)) return bad;
  }
  const std::string key = DependencyKey(e.queue, e.id);
  const DependentEntry entry{key, e.on_dependency_failure, e.to == MessageState::kWaiting,
                             e.depends_on, e.dependency_edges};
  if (!deps_.RestoreDependent(entry)) return bad;
  q.JoinGraph(e.id);
  for (size_t i = 0; i < e.depends_on->size(); ++i) {
    if (static_cast<uint8_t>(e.dependency_edges[i]) & kEdgeGone) continue;
    auto [dq_name, did] = SplitKey((*e.depends_on)[i]);
    Shard& dshard = ShardFor(dq_name);
    dshard.mu.AssertHeld();
    dshard.Find(dq_name)->JoinGraph(did);
  }
  return Status::Ok();
}

Status Engine::ApplyWithDependencies(const Effect& e) {
  AllShardsLock lock(this);
  graph_used_.store(true, std::memory_order_relaxed);
  Shard& shard = ShardFor(e.queue);
  shard.mu.AssertHeld();
  Queue* q = shard.Find(e.queue);
  if (q == nullptr) return Status(Code::kInternal, "effect: no such queue");
  const std::string key = DependencyKey(e.queue, e.id);
  switch (e.type) {
    case EffectType::kMessageEnqueued: {
      EnqueueItem item;
      if (e.depends_on != nullptr) item.depends_on = *e.depends_on;
      item.on_dependency_failure = e.on_dependency_failure;
      std::vector<MessageState> states;
      for (const std::string& dep : item.depends_on) {
        auto [dq_name, did] = SplitKey(dep);
        Shard& dshard = ShardFor(dq_name);
        dshard.mu.AssertHeld();
        Queue* dq = dshard.Find(dq_name);
        Result<MessageOutcome> outcome =
            dq == nullptr ? Result<MessageOutcome>(NotFound("")) : dq->Outcome(did);
        if (!outcome.ok()) return Status(Code::kInternal, "effect: no such dependency");
        states.push_back(outcome->state);
      }
      if (!e.batch.empty()) {
        const BatchInfo* batch = batches_.Find(e.batch);
        if (batch == nullptr || batch->sealed) {
          return Status(Code::kInternal, "effect: no open batch to join");
        }
      }
      if (Status s = q->ApplyEnqueued(e); !s.ok()) return s;
      q->JoinGraph(e.id);
      if (!e.batch.empty()) batches_.AddMember(e.batch, key);
      if (e.to == MessageState::kWaiting) AddDependent(key, item, states, e.time, /*emit=*/false);
      return Status::Ok();
    }
    case EffectType::kMessageChanged: {
      if (!e.dependency_edges.empty()) return RestoreDependent(*q, e);
      if (!e.batch.empty()) return RestoreMember(*q, e);
      Result<MessageOutcome> before = q->Outcome(e.id);
      if (Status s = q->ApplyChanged(e); !s.ok()) return s;
      if (before.ok() && before->state != e.to && IsTerminal(e.to)) {
        ProcessTerminal(key, before->state, e.to, e.time, /*emit=*/false);
      }
      return Status::Ok();
    }
    case EffectType::kMessageRemoved: {
      if (Status s = q->ApplyRemoved(e); !s.ok()) return s;
      deps_.Forget(key);
      return Status::Ok();
    }
    case EffectType::kMessageDeadLettered: {
      Shard& dlq_shard = ShardFor(e.dead_letter_queue);
      dlq_shard.mu.AssertHeld();
      Result<MessageOutcome> before = q->Outcome(e.id);
      if (!before.ok()) return Status(Code::kInternal, "effect: no such message");
      if (Status s = q->ApplyDeadLettered(e, dlq_shard.Find(e.dead_letter_queue)); !s.ok()) {
        return s;
      }
      ProcessRemoved(e.queue, {{std::string(e.id), before->state}}, /*dead_lettered=*/true, e.time,
                     /*emit=*/false);
      return Status::Ok();
    }
    case EffectType::kQueuePurged: {
      std::vector<RemovedFromQueue> removed;
      (void)q->Purge(e.purge_states, e.time, /*emit=*/false, &removed);
      ProcessRemoved(e.queue, removed, /*dead_lettered=*/false, e.time, /*emit=*/false);
      return Status::Ok();
    }
    case EffectType::kQueueDeleted: {
      const std::vector<RemovedFromQueue> removed = q->GraphMessages();
      const std::string queue(e.queue);
      shard.queues.erase(queue);
      ProcessRemoved(queue, removed, /*dead_lettered=*/false, e.time, /*emit=*/false);
      return Status::Ok();
    }
    default:
      return Status(Code::kInternal, "effect: unknown type");
  }
}

Result<std::vector<std::pair<std::string, Result<MessageOutcome>>>> Engine::DependencyOutcomes(
    std::string_view queue, std::string_view id) const {
  if (!IsValidQueueName(queue)) return kBadQueueName;
  if (!IsValidId(id)) return kBadId;
  std::vector<std::pair<std::string, Result<MessageOutcome>>> out;
  AllShardsLock lock(this);
  Shard& shard = ShardFor(queue);
  shard.mu.AssertHeld();
  const Queue* q = shard.Find(queue);
  if (q == nullptr) return kQueueNotFound;
  if (!q->Contains(id)) return NotFound("id: no such message");
  for (DependencyGraph::Listed& listed : deps_.ListedDependencies(DependencyKey(queue, id))) {
    auto [dq_name, did] = SplitKey(listed.key);
    Shard& dshard = ShardFor(dq_name);
    dshard.mu.AssertHeld();
    const Queue* dq = dshard.Find(dq_name);
    // A dependency that is gone stays gone: a later message with its key is another one.
    Result<MessageOutcome> outcome = dq == nullptr || listed.gone
                                         ? Result<MessageOutcome>(NotFound("id: no such message"))
                                         : dq->Outcome(did);
    out.emplace_back(std::move(listed.key), std::move(outcome));
  }
  return out;
}

}  // namespace sundial
