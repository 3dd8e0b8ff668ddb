#include "server/dispatch.h"

#include <array>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/sundial_generated.h"
#include "server/flow_ops.h"
#include "server/live_feed.h"
#include "server/metrics.h"
#include "server/schedule_ops.h"

namespace sundial::server {

namespace fb = flatbuffers;
namespace p = protocol;

// The schema's enums equal the engine's (protocol/sundial.fbs): conversion is a cast.
static_assert(static_cast<int>(p::DependencyFailurePolicy::cancel) ==
                  static_cast<int>(DependencyFailurePolicy::kCancel) &&
              static_cast<int>(p::DependencyFailurePolicy::release) ==
                  static_cast<int>(DependencyFailurePolicy::kRelease) &&
              static_cast<int>(p::DependencyFailurePolicy::error) ==
                  static_cast<int>(DependencyFailurePolicy::kError));
static_assert(static_cast<int>(p::MessageState::waiting) ==
              static_cast<int>(MessageState::kWaiting));
static_assert(static_cast<int>(p::MisfirePolicy::MAX) == static_cast<int>(MisfirePolicy::kAll) &&
              static_cast<int>(p::OverlapPolicy::MAX) ==
                  static_cast<int>(OverlapPolicy::kSkipIfActive));

std::string_view Str(const fb::String* s) { return s ? s->string_view() : std::string_view(); }

Metadata Pairs(const PairVector* v) {
  Metadata out;
  if (v == nullptr) return out;
  out.reserve(v->size());
  for (const p::MetadataPair* pair : *v) out.push_back({pair->key()->str(), pair->value()->str()});
  return out;
}

fb::Offset<PairVector> EncodePairs(fb::FlatBufferBuilder& b, const Metadata& metadata) {
  std::vector<fb::Offset<p::MetadataPair>> pairs;
  pairs.reserve(metadata.size());
  for (const auto& [k, v] : metadata) {
    pairs.push_back(p::CreateMetadataPair(b, b.CreateString(k), b.CreateString(v)));
  }
  return b.CreateVector(pairs);
}

Status ItemFromWire(const p::EnqueueItem* in, EnqueueItem* item) {
  // A binary client may send any byte: only the schema's values have a meaning.
  if (in->on_dependency_failure() > p::DependencyFailurePolicy::MAX) {
    return InvalidArgument("on_dependency_failure: one of cancel (0), release (1), error (2)");
  }
  item->id = std::string(Str(in->id()));
  item->priority = in->priority();
  if (in->payload()) item->payload.assign(in->payload()->begin(), in->payload()->end());
  item->metadata = Pairs(in->metadata());
  item->delay_ms = in->delay_ms();
  item->visible_at = in->visible_at();
  item->max_attempts = in->max_attempts();
  item->depends_on.clear();
  if (const auto* deps = in->depends_on()) {
    item->depends_on.reserve(deps->size());
    for (const fb::String* d : *deps) item->depends_on.push_back(d->str());
  }
  item->on_dependency_failure = static_cast<DependencyFailurePolicy>(in->on_dependency_failure());
  item->batch = std::string(Str(in->batch()));
  item->ttl_ms = in->ttl_ms();
  item->debounce_ms = in->debounce_ms();
  return Status::Ok();
}

namespace {

std::vector<std::string> Strings(const fb::Vector<fb::Offset<fb::String>>* v) {
  std::vector<std::string> out;
  if (v == nullptr) return out;
  out.reserve(v->size());
  for (const fb::String* s : *v) out.push_back(s->str());
  return out;
}

bool HasFilter(const PairVector* v) { return v != nullptr && v->size() > 0; }

QueueSettings Settings(const p::QueueSettings* s) {
  // What the request leaves out keeps the engine's default: the one table of them.
  QueueSettings out;
  if (s == nullptr) return out;
  if (s->type()) out.type = static_cast<QueueType>(*s->type());
  out.exclusivity_key = std::string(Str(s->exclusivity_key()));
  out.lease_ms = s->lease_ms().value_or(out.lease_ms);
  out.invisibility_ms = s->invisibility_ms().value_or(out.invisibility_ms);
  out.max_attempts = s->max_attempts().value_or(out.max_attempts);
  out.retry_backoff_ms = s->retry_backoff_ms().value_or(out.retry_backoff_ms);
  out.retry_backoff_max_ms = s->retry_backoff_max_ms().value_or(out.retry_backoff_max_ms);
  out.dead_letter_queue = std::string(Str(s->dead_letter_queue()));
  out.retention_ms = s->retention_ms().value_or(out.retention_ms);
  out.max_depth = s->max_depth().value_or(out.max_depth);
  out.enqueue_paused = s->enqueue_paused().value_or(out.enqueue_paused);
  out.dequeue_paused = s->dequeue_paused().value_or(out.dequeue_paused);
  out.history_max = s->history_max().value_or(out.history_max);
  out.flow_key = std::string(Str(s->flow_key()));
  out.key_concurrency = s->key_concurrency().value_or(out.key_concurrency);
  out.ttl_ms = s->ttl_ms().value_or(out.ttl_ms);
  if (s->dedupe()) out.dedupe = static_cast<Dedupe>(*s->dedupe());
  if (s->rate_per_s()) out.rate_milli = RateMilliOf(*s->rate_per_s());
  out.burst = s->burst().value_or(out.burst);
  if (s->key_rate_per_s()) out.key_rate_milli = RateMilliOf(*s->key_rate_per_s());
  out.key_burst = s->key_burst().value_or(out.key_burst);
  if (s->fairness()) out.fairness = static_cast<Fairness>(*s->fairness());
  out.overdue_first_ms = s->overdue_first_ms().value_or(out.overdue_first_ms);
  return out;
}

QueueSettingsUpdate Update(const p::QueueSettingsUpdate* u) {
  QueueSettingsUpdate out;
  if (u == nullptr) return out;
  out.lease_ms = u->lease_ms();
  out.invisibility_ms = u->invisibility_ms();
  out.max_attempts = u->max_attempts();
  out.retry_backoff_ms = u->retry_backoff_ms();
  out.retry_backoff_max_ms = u->retry_backoff_max_ms();
  if (u->dead_letter_queue()) out.dead_letter_queue = u->dead_letter_queue()->str();
  out.retention_ms = u->retention_ms();
  out.max_depth = u->max_depth();
  out.enqueue_paused = u->enqueue_paused();
  out.dequeue_paused = u->dequeue_paused();
  out.history_max = u->history_max();
  out.key_concurrency = u->key_concurrency();
  out.ttl_ms = u->ttl_ms();
  if (u->dedupe()) out.dedupe = static_cast<Dedupe>(*u->dedupe());
  if (u->rate_per_s()) out.rate_milli = RateMilliOf(*u->rate_per_s());
  out.burst = u->burst();
  if (u->key_rate_per_s()) out.key_rate_milli = RateMilliOf(*u->key_rate_per_s());
  out.key_burst = u->key_burst();
  if (u->fairness()) out.fairness = static_cast<Fairness>(*u->fairness());
  out.overdue_first_ms = u->overdue_first_ms();
  return out;
}

// ---- Encoding helpers -----------------------------------------------------------------------

fb::Offset<p::Error> ItemError(fb::FlatBufferBuilder& b, const Status& status) {  // of one item
  return p::CreateError(b, static_cast<p::Code>(status.code()), b.CreateString(status.detail()));
}

fb::Offset<fb::Vector<uint8_t>> EncodeBytes(fb::FlatBufferBuilder& b, std::string_view bytes) {
  return b.CreateVector(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// `wait` (docs/semantics.md, "Results and waiting"): an item is settled when its message is
// terminal or it has an error (no such message: nothing to wait for).
bool Settled(const Result<MessageOutcome>& o) { return !o.ok() || IsTerminal(o->state); }

fb::Offset<p::WaitItem> EncodeWaitItem(fb::FlatBufferBuilder& b, std::string_view id,
                                       const Result<MessageOutcome>& o) {
  if (!o.ok()) return p::CreateWaitItem(b, b.CreateString(id), {}, 0, 0, ItemError(b, o.status()));
  auto result = o->result.empty() ? 0 : EncodeBytes(b, o->result);
  auto last_error = o->last_error.empty() ? 0 : b.CreateString(o->last_error);
  return p::CreateWaitItem(b, b.CreateString(id), static_cast<p::MessageState>(o->state), result,
                           last_error);
}

// include_dependency_results (docs/protocol.md, "Dependencies"): the engine's read of the
// outcomes of the dependencies `m` listed at enqueue; nullopt when not asked. A message without
// dependencies gets none (an absent vector); so does one whose read failed (it was removed
// between the operation and this read: the message itself is still answered). The read is a
// second engine call after the operation, under every shard's lock (Engine::DependencyOutcomes):
// a dependency may have been removed by retention in between, then its item carries NOT_FOUND.
using DependencyOutcomeList = std::vector<std::pair<std::string, Result<MessageOutcome>>>;

std::optional<DependencyOutcomeList> DependencyOutcomesOf(const Engine& engine,
                                                          const MessageRecord& m, bool asked) {
  if (!asked) return std::nullopt;
  auto outcomes = engine.DependencyOutcomes(m.queue, m.id);
  if (!outcomes.ok() || outcomes->empty()) return std::nullopt;
  return std::move(*outcomes);
}

fb::Offset<p::Message> EncodeMessage(fb::FlatBufferBuilder& b, const MessageRecord& m,
                                     const DependencyOutcomeList* dependencies = nullptr) {
  fb::Offset<fb::Vector<fb::Offset<p::WaitItem>>> dependency_results = 0;
  if (dependencies != nullptr) {
    std::vector<fb::Offset<p::WaitItem>> items;
    items.reserve(dependencies->size());
    for (const auto& [key, outcome] : *dependencies) {
      items.push_back(EncodeWaitItem(b, key, outcome));
    }
    dependency_results = b.CreateVector(items);
  }
  auto metadata = EncodePairs(b, m.metadata);
  auto payload = EncodeBytes(b, m.payload);
  auto result = m.result.empty() ? 0 : EncodeBytes(b, m.result);
  return p::CreateMessage(b, b.CreateString(m.queue), b.CreateString(m.id), m.priority, payload,
                          metadata, static_cast<p::MessageState>(m.state), m.attempts,
                          m.max_attempts, m.visible_at, m.lease_token, m.lease_expires_at,
                          m.version, m.enqueued_at, m.updated_at, b.CreateString(m.last_error),
                          result, dependency_results, m.expires_at);
}

// Leased (or read) messages, each with its dependencies' outcomes when `include_dependencies`.
fb::Offset<fb::Vector<fb::Offset<p::Message>>> EncodeMessages(
    fb::FlatBufferBuilder& b, const Engine& engine, const std::vector<MessageRecord>& messages,
    bool include_dependencies) {
  std::vector<fb::Offset<p::Message>> out;
  out.reserve(messages.size());
  for (const MessageRecord& m : messages) {
    const auto dependencies = DependencyOutcomesOf(engine, m, include_dependencies);
    out.push_back(EncodeMessage(b, m, dependencies ? &*dependencies : nullptr));
  }
  return b.CreateVector(out);
}

// Enqueue with wait_ms: each accepted item's EnqueueResult with its message's outcome now.
// `results` are (id, version, duplicate, error) per item; sets ctx.unfinished.
struct EnqueueAnswer {
  std::string id = {};
  uint64_t version = 0;
  bool duplicate = false;
  Code code = Code::kOk;  // the item's error, if any
  std::string message = {};
};
void EnqueueResultsWithOutcomes(std::string_view queue, const std::vector<EnqueueAnswer>& answers,
                                OpContext& ctx, Reply& r) {
  std::vector<std::string> ids;
  for (const EnqueueAnswer& a : answers) {
    if (a.code == Code::kOk) ids.push_back(a.id);
  }
  std::vector<Result<MessageOutcome>> outcomes;
  if (!ids.empty()) outcomes = ctx.engine->Outcomes(queue, ids);
  auto& b = r.b();
  std::vector<fb::Offset<p::EnqueueResult>> out;
  out.reserve(answers.size());
  size_t next = 0;
  for (const EnqueueAnswer& a : answers) {
    if (a.code != Code::kOk) {
      auto error = p::CreateError(b, static_cast<p::Code>(a.code), b.CreateString(a.message));
      out.push_back(p::CreateEnqueueResult(b, 0, 0, false, error));
      continue;
    }
    const Result<MessageOutcome>& o = outcomes[next++];
    ctx.unfinished |= !Settled(o);
    auto outcome = EncodeWaitItem(b, a.id, o);
    out.push_back(
        p::CreateEnqueueResult(b, b.CreateString(a.id), a.version, a.duplicate, 0, outcome));
  }
  r.Ok(p::Result::EnqueueResults, p::CreateEnqueueResults(b, b.CreateVector(out)));
}

// Per item: its code and text.
fb::Offset<fb::Vector<fb::Offset<p::ItemStatus>>> EncodeItemStatuses(
    fb::FlatBufferBuilder& b, const std::vector<Status>& statuses) {
  std::vector<fb::Offset<p::ItemStatus>> items;
  items.reserve(statuses.size());
  for (const Status& s : statuses) {
    items.push_back(
        p::CreateItemStatus(b, static_cast<p::Code>(s.code()), b.CreateString(s.detail())));
  }
  return b.CreateVector(items);
}

void ItemResults(Reply& r, const std::vector<Status>& statuses) {
  r.Ok(p::Result::ItemResults, p::CreateItemResults(r.b(), EncodeItemStatuses(r.b(), statuses)));
}

void Counted(Reply& r, const Result<uint64_t>& n) {
  if (!n.ok()) return r.Error(n.status());
  r.Ok(p::Result::Counted, p::CreateCounted(r.b(), *n));
}

void QueueReply(Reply& r, const Result<QueueInfo>& q) {
  if (!q.ok()) return r.Error(q.status());
  r.Ok(p::Result::QueueResult, p::CreateQueueResult(r.b(), EncodeQueueInfo(r.b(), *q)));
}

Status TooManyItems() { return InvalidArgument("items: at most 1000 per request"); }

// ---- Run functions: decode, one engine call, encode ------------------------------------------

void RunCreateQueue(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_CreateQueue();
  QueueReply(r, ctx.engine->CreateQueue(Str(op->name()), Settings(op->settings())));
}

void RunUpdateQueue(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_UpdateQueue();
  QueueReply(r, ctx.engine->UpdateQueue(Str(op->name()), Update(op->update())));
}

void RunGetQueue(const p::Request& request, OpContext& ctx, Reply& r) {
  QueueReply(r, ctx.engine->GetQueue(Str(request.op_as_GetQueue()->name())));
}

void RunListQueues(const p::Request&, OpContext& ctx, Reply& r) {
  auto& b = r.b();
  std::vector<fb::Offset<p::QueueInfo>> queues;
  for (const QueueInfo& q : ctx.engine->ListQueues()) queues.push_back(EncodeQueueInfo(b, q));
  r.Ok(p::Result::QueueList, p::CreateQueueList(b, b.CreateVector(queues)));
}

void RunDeleteQueue(const p::Request& request, OpContext& ctx, Reply& r) {
  Status s = ctx.engine->DeleteQueue(Str(request.op_as_DeleteQueue()->name()));
  if (!s.ok()) return r.Error(s);
  r.Ok(p::Result::Done, p::CreateDone(r.b()));
}

void RunPurgeQueue(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_PurgeQueue();
  std::vector<MessageState> states;
  if (op->states()) {
    for (auto s : *op->states()) states.push_back(static_cast<MessageState>(s));
  }
  Counted(r, ctx.engine->PurgeQueue(Str(op->name()), states));
}

void RunEnqueue(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Enqueue();
  if (op->wait_ms() > kMaxWaitMs) return r.Error(InvalidArgument("wait_ms: at most 60000"));
  std::vector<EnqueueItem> items;
  if (op->items()) {
    if (op->items()->size() > kMaxBatchItems) return r.Error(TooManyItems());
    items.reserve(op->items()->size());  // moved, not regrown: batches of up to 1000
    for (const p::EnqueueItem* in : *op->items()) {
      EnqueueItem item;
      if (Status s = ItemFromWire(in, &item); !s.ok()) return r.Error(s);
      items.push_back(std::move(item));
    }
  }
  const auto results = ctx.engine->Enqueue(Str(op->queue()), std::move(items));
  if (op->wait_ms() > 0) {
    std::vector<EnqueueAnswer> answers;
    answers.reserve(results.size());
    for (const auto& res : results) {
      if (res.ok()) {
        ++ctx.messages;
        answers.push_back({res->id, res->version, res->duplicate});
      } else {
        answers.push_back({{}, 0, false, res.status().code(), std::string(res.status().detail())});
      }
    }
    return EnqueueResultsWithOutcomes(Str(op->queue()), answers, ctx, r);
  }
  auto& b = r.b();
  std::vector<fb::Offset<p::EnqueueResult>> out;
  out.reserve(results.size());
  for (const auto& res : results) {
    if (res.ok()) {
      ++ctx.messages;
      out.push_back(
          p::CreateEnqueueResult(b, b.CreateString(res->id), res->version, res->duplicate));
    } else {
      out.push_back(p::CreateEnqueueResult(b, 0, 0, false, ItemError(b, res.status())));
    }
  }
  r.Ok(p::Result::EnqueueResults, p::CreateEnqueueResults(b, b.CreateVector(out)));
}

// A Dequeue, or a Complete's or Fail's `next` (docs/semantics.md, "Complete-and-next").
DequeueRequest DequeueRequestOf(const p::Dequeue& op) {
  DequeueRequest d;
  d.max = op.max();
  d.lease_ms = op.lease_ms();
  d.filter = Pairs(op.filter());
  d.worker_id = std::string(Str(op.worker_id()));
  return d;
}

void RunDequeue(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Dequeue();
  if (op->wait_ms() > kMaxWaitMs) return r.Error(InvalidArgument("wait_ms: at most 60000"));
  auto messages = ctx.engine->Dequeue(Str(op->queue()), DequeueRequestOf(*op));
  if (!messages.ok()) return r.Error(messages.status());
  ctx.empty_dequeue = messages->empty();
  ctx.messages = messages->size();
  auto& b = r.b();
  const auto out = EncodeMessages(b, *ctx.engine, *messages, op->include_dependency_results());
  r.Ok(p::Result::DequeueResult, p::CreateDequeueResult(b, out));
}

std::string_view NextQueue(const p::Dequeue& next, std::string_view queue) {
  return next.queue() != nullptr && next.queue()->size() > 0 ? Str(next.queue()) : queue;
}

// The leases of a `next` (ItemResults.next / FailResult.next) or its error (next_error).
struct EncodedNext {
  fb::Offset<fb::Vector<fb::Offset<p::Message>>> messages = 0;
  fb::Offset<p::ItemStatus> error = 0;
};

EncodedNext EncodeNext(fb::FlatBufferBuilder& b, const Result<std::vector<MessageRecord>>& leased,
                       bool include_dependencies, OpContext& ctx) {
  EncodedNext out;
  if (!leased.ok()) {
    out.error = p::CreateItemStatus(b, static_cast<p::Code>(leased.status().code()),
                                    b.CreateString(leased.status().detail()));
    return out;
  }
  ctx.empty_dequeue = leased->empty();
  ctx.next_leased += leased->size();
  out.messages = EncodeMessages(b, *ctx.engine, *leased, include_dependencies);
  return out;
}

void ItemResultsWithNext(Reply& r, const std::vector<Status>& statuses,
                         const Result<std::vector<MessageRecord>>& leased,
                         bool include_dependencies, OpContext& ctx) {
  auto& b = r.b();
  const auto vector = EncodeItemStatuses(b, statuses);
  const EncodedNext next = EncodeNext(b, leased, include_dependencies, ctx);
  r.Ok(p::Result::ItemResults, p::CreateItemResults(b, vector, next.messages, next.error));
}

void FailResultWithNext(Reply& r, const FailResult& failed,
                        const Result<std::vector<MessageRecord>>* leased, bool include_dependencies,
                        OpContext& ctx) {
  auto& b = r.b();
  auto dlq = b.CreateString(failed.dead_letter_queue);
  const EncodedNext next =
      leased != nullptr ? EncodeNext(b, *leased, include_dependencies, ctx) : EncodedNext{};
  r.Ok(p::Result::FailResult,
       p::CreateFailResult(b, static_cast<p::MessageState>(failed.state), failed.visible_at, dlq,
                           next.messages, next.error));
}

Status CheckNext(const p::Dequeue* next) {
  if (next != nullptr && next->wait_ms() > kMaxWaitMs) {
    return InvalidArgument("next.wait_ms: at most 60000");
  }
  return Status::Ok();
}

void RunComplete(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Complete();
  if (Status s = CheckNext(op->next()); !s.ok()) return r.Error(s);
  std::vector<CompleteItem> items;
  if (op->items()) {
    if (op->items()->size() > kMaxBatchItems) return r.Error(TooManyItems());
    items.reserve(op->items()->size());
    for (const p::CompleteItem* in : *op->items()) {
      CompleteItem item{std::string(Str(in->id())), in->lease_token(), {}};
      if (in->result()) item.result.assign(in->result()->begin(), in->result()->end());
      items.push_back(std::move(item));
    }
  }
  const std::string_view queue = Str(op->queue());
  if (op->next() == nullptr) {
    const std::vector<Status> statuses = ctx.engine->Complete(queue, items);
    for (const Status& s : statuses) ctx.messages += s.ok() ? 1 : 0;
    return ItemResults(r, statuses);
  }
  // Same queue: one engine call, one shard lock. Another queue: two calls, both appended
  // before the reply reads the log's end, so the one reply waits for both.
  const std::string_view next_queue = NextQueue(*op->next(), queue);
  const DequeueRequest d = DequeueRequestOf(*op->next());
  Engine::CompleteAndNextResult res;
  if (next_queue == queue) {
    res = ctx.engine->CompleteAndDequeue(queue, items, d);
  } else {
    res.completed = ctx.engine->Complete(queue, items);
    res.next = ctx.engine->Dequeue(next_queue, d);
  }
  for (const Status& s : res.completed) ctx.messages += s.ok() ? 1 : 0;
  ItemResultsWithNext(r, res.completed, res.next, op->next()->include_dependency_results(), ctx);
}

void RunFail(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Fail();
  if (Status s = CheckNext(op->next()); !s.ok()) return r.Error(s);
  FailRequest f{std::string(Str(op->id())), op->lease_token(), std::string(Str(op->error())),
                op->retry_delay_ms()};
  const std::string_view queue = Str(op->queue());
  auto res = ctx.engine->Fail(queue, f);
  // A fail has no per-item status: when it is refused (a stale token) the reply is that error
  // alone, so the next dequeue is not run (its leases would reach nobody).
  if (!res.ok()) return r.Error(res.status());
  if (op->next() == nullptr) return FailResultWithNext(r, *res, nullptr, false, ctx);
  // Fail takes a second shard's lock for a dead-letter queue: the dequeue is a second engine
  // call, appended before the reply reads the log's end (one reply, one wait).
  const Result<std::vector<MessageRecord>> leased =
      ctx.engine->Dequeue(NextQueue(*op->next(), queue), DequeueRequestOf(*op->next()));
  FailResultWithNext(r, *res, &leased, op->next()->include_dependency_results(), ctx);
}

// ---- History (docs/semantics.md, "History") -------------------------------------------------

void RunHistory(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_History();
  auto history = ctx.engine->History(Str(op->queue()), Str(op->id()));
  if (!history.ok()) return r.Error(history.status());
  auto& b = r.b();
  std::vector<fb::Offset<p::HistoryEntry>> entries;
  entries.reserve(history->entries.size());
  for (const HistoryEntry& e : history->entries) {
    entries.push_back(p::CreateHistoryEntryDirect(
        b, e.time, std::string(HistoryEventName(e.event)).c_str(),
        static_cast<p::MessageState>(e.from), static_cast<p::MessageState>(e.to), e.attempt,
        e.lease_token, std::string(HistoryActorName(HistoryActorOf(e.event))).c_str(),
        e.worker_id.empty() ? nullptr : e.worker_id.c_str(),
        e.text.empty() ? nullptr : e.text.c_str()));
  }
  r.Ok(p::Result::HistoryResult, p::CreateHistoryResultDirect(b, &entries, history->dropped));
}

void RunNote(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Note();
  Status s = ctx.engine->Note(Str(op->queue()), Str(op->id()), op->lease_token(), Str(op->text()));
  if (!s.ok()) return r.Error(s);
  r.Ok(p::Result::Done, p::CreateDone(r.b()));
}

// ---- Per-key limits (docs/semantics.md, "Per-key limits") ------------------------------------

KeyLimits LimitsOf(const p::KeyLimits* l) {
  KeyLimits out;
  if (l == nullptr) return out;
  if (l->concurrency()) {
    out.set |= KeyLimits::kConcurrency;
    out.concurrency = *l->concurrency();
  }
  if (l->rate_per_s()) {
    out.set |= KeyLimits::kRate;
    out.rate_milli = RateMilliOf(*l->rate_per_s());  // refused by the check when not exact
  }
  if (l->burst()) {
    out.set |= KeyLimits::kBurst;
    out.burst = *l->burst();
  }
  if (l->weight()) {
    out.set |= KeyLimits::kWeight;
    out.weight = *l->weight();
  }
  return out;
}

fb::Offset<p::KeyLimits> EncodeKeyLimits(fb::FlatBufferBuilder& b, const KeyLimits& l) {
  p::KeyLimitsBuilder kb(b);
  if (l.has(KeyLimits::kConcurrency)) kb.add_concurrency(l.concurrency);
  if (l.has(KeyLimits::kRate)) kb.add_rate_per_s(RatePerSOf(l.rate_milli));
  if (l.has(KeyLimits::kBurst)) kb.add_burst(l.burst);
  if (l.has(KeyLimits::kWeight)) kb.add_weight(l.weight);
  return kb.Finish();
}

fb::Offset<p::KeyInfo> EncodeKeyInfo(fb::FlatBufferBuilder& b, const KeyInfo& k) {
  const auto value = b.CreateString(k.value);
  const auto overrides = EncodeKeyLimits(b, k.overrides);
  return p::CreateKeyInfo(b, value, overrides, k.concurrency, RatePerSOf(k.rate_milli), k.burst,
                          k.weight, k.pending, k.running, k.held, k.next_token);
}

void KeyReply(Reply& r, const Result<KeyInfo>& k) {
  if (!k.ok()) return r.Error(k.status());
  r.Ok(p::Result::KeyResult, p::CreateKeyResult(r.b(), EncodeKeyInfo(r.b(), *k)));
}

void RunSetKeyLimits(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_SetKeyLimits();
  KeyReply(r, ctx.engine->SetKeyLimits(Str(op->queue()), Str(op->value()), LimitsOf(op->limits())));
}

void RunGetKeyLimits(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_GetKeyLimits();
  KeyReply(r, ctx.engine->GetKeyLimits(Str(op->queue()), Str(op->value())));
}

void RunListKeys(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_ListKeys();
  auto keys =
      ctx.engine->ListKeys(Str(op->queue()), static_cast<KeyOrder>(op->order()), op->limit());
  if (!keys.ok()) return r.Error(keys.status());
  auto& b = r.b();
  std::vector<fb::Offset<p::KeyInfo>> out;
  out.reserve(keys->size());
  for (const KeyInfo& k : *keys) out.push_back(EncodeKeyInfo(b, k));
  r.Ok(p::Result::KeyList, p::CreateKeyList(b, b.CreateVector(out)));
}

void RunExtend(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Extend();
  auto res = ctx.engine->Extend(Str(op->queue()), Str(op->id()), op->lease_token(), op->lease_ms());
  if (!res.ok()) return r.Error(res.status());
  r.Ok(p::Result::ExtendResult, p::CreateExtendResult(r.b(), *res));
}

void RunCancel(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Cancel();
  if (HasFilter(op->filter())) {
    return Counted(r, ctx.engine->CancelByFilter(Str(op->queue()), Pairs(op->filter())));
  }
  ItemResults(r, ctx.engine->Cancel(Str(op->queue()), Strings(op->ids())));
}

void RunReprioritize(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Reprioritize();
  ReprioritizeRequest rq{op->priority(), op->visible_at()};
  if (HasFilter(op->filter())) {
    return Counted(r, ctx.engine->ReprioritizeByFilter(Str(op->queue()), Pairs(op->filter()), rq));
  }
  auto v = ctx.engine->Reprioritize(Str(op->queue()), Str(op->id()), rq);
  if (!v.ok()) return r.Error(v.status());
  r.Ok(p::Result::VersionResult, p::CreateVersionResult(r.b(), *v));
}

void RunRedrive(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Redrive();
  if (op->all() || HasFilter(op->filter())) {
    return Counted(r, ctx.engine->RedriveByFilter(Str(op->queue()), Pairs(op->filter())));
  }
  ItemResults(r, ctx.engine->Redrive(Str(op->queue()), Strings(op->ids())));
}

void RunGet(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Get();
  auto m = ctx.engine->Get(Str(op->queue()), Str(op->id()));
  if (!m.ok()) return r.Error(m.status());
  const auto dependencies = DependencyOutcomesOf(*ctx.engine, *m, op->include_dependency_results());
  r.Ok(
      p::Result::GetResult,
      p::CreateGetResult(r.b(), EncodeMessage(r.b(), *m, dependencies ? &*dependencies : nullptr)));
}

void RunBrowse(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Browse();
  BrowseRequest br;
  br.state = static_cast<MessageState>(op->state());
  br.filter = Pairs(op->filter());
  br.cursor = std::string(Str(op->cursor()));
  br.limit = op->limit();
  auto page = ctx.engine->Browse(Str(op->queue()), br);
  if (!page.ok()) return r.Error(page.status());
  auto& b = r.b();
  std::vector<fb::Offset<p::MessageSummary>> summaries;
  summaries.reserve(page->messages.size());
  for (const MessageSummary& m : page->messages) {
    summaries.push_back(p::CreateMessageSummary(
        b, b.CreateString(m.id), m.priority, static_cast<p::MessageState>(m.state), m.attempts,
        m.version, m.visible_at, m.lease_expires_at, m.enqueued_at, m.updated_at, m.expires_at));
  }
  r.Ok(p::Result::BrowseResult,
       p::CreateBrowseResult(b, b.CreateVector(summaries), b.CreateString(page->next_cursor)));
}

void RunCount(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Count();
  auto c = ctx.engine->Count(Str(op->queue()), Pairs(op->filter()));
  if (!c.ok()) return r.Error(c.status());
  r.Ok(p::Result::CountResult, p::CreateCountResult(r.b(), EncodeStateCounts(r.b(), *c)));
}

void RunExplain(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Explain();
  auto x = HasFilter(op->filter())
               ? ctx.engine->ExplainFilter(Str(op->queue()), Pairs(op->filter()))
               : ctx.engine->Explain(Str(op->queue()), Str(op->id()));
  if (!x.ok()) return r.Error(x.status());
  auto& b = r.b();
  auto waiting_on = x->waiting_on.empty() ? 0 : b.CreateVectorOfStrings(x->waiting_on);
  auto dependents = x->dependents.empty() ? 0 : b.CreateVectorOfStrings(x->dependents);
  r.Ok(p::Result::ExplainResult,
       p::CreateExplainResult(b, static_cast<p::ExplainReason>(x->reason), b.CreateString(x->id),
                              static_cast<p::MessageState>(x->state), x->until, x->lease_token,
                              b.CreateString(x->exclusivity_value), x->attempts, x->dependencies,
                              x->unfinished, waiting_on, dependents, x->waiting_dependents,
                              x->key_running, x->key_concurrency));
}

void RunWait(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Wait();
  if (op->wait_ms() > kMaxWaitMs) return r.Error(InvalidArgument("wait_ms: at most 60000"));
  const std::vector<std::string> ids = Strings(op->ids());
  if (ids.empty() || ids.size() > kMaxBatchItems) {
    return r.Error(InvalidArgument("ids: 1-1000 per request"));
  }
  const std::vector<Result<MessageOutcome>> outcomes = ctx.engine->Outcomes(Str(op->queue()), ids);
  auto& b = r.b();
  std::vector<fb::Offset<p::WaitItem>> items;
  items.reserve(ids.size());
  bool done = true;
  for (size_t i = 0; i < ids.size(); ++i) {
    done &= Settled(outcomes[i]);
    items.push_back(EncodeWaitItem(b, ids[i], outcomes[i]));
  }
  ctx.unfinished = !done;
  r.Ok(p::Result::WaitResult, p::CreateWaitResult(b, b.CreateVector(items), done));
}

// ---- Batches (docs/semantics.md, "Batches") --------------------------------------------------

fb::Offset<p::BatchCallback> EncodeBatchCallback(fb::FlatBufferBuilder& b, const BatchCallback& c) {
  auto queue = b.CreateString(c.queue);
  auto id = b.CreateString(c.id);
  auto payload =
      b.CreateVector(reinterpret_cast<const uint8_t*>(c.payload.data()), c.payload.size());
  auto metadata = EncodePairs(b, c.metadata);
  return p::CreateBatchCallback(b, queue, id, c.priority, payload, metadata, c.max_attempts);
}

void BatchReply(Reply& r, const Result<BatchInfo>& batch) {
  if (!batch.ok()) return r.Error(batch.status());
  auto& b = r.b();
  const BatchInfo& info = *batch;
  auto id = b.CreateString(info.id);
  fb::Offset<p::BatchCallback> callback;
  if (info.callback) callback = EncodeBatchCallback(b, *info.callback);
  const BatchCounts& c = info.counts;
  auto encoded = p::CreateBatchInfo(b, id, callback, info.retention_ms, info.created_at,
                                    info.sealed, info.done, info.done_at, c.members, c.active(),
                                    c.completed, c.canceled, c.errored);
  r.Ok(p::Result::BatchResult, p::CreateBatchResult(b, encoded));
}

void RunCreateBatch(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_CreateBatch();
  CreateBatchRequest create;
  create.id = std::string(Str(op->id()));
  if (const p::BatchCallback* in = op->callback()) {
    BatchCallback c;
    c.queue = std::string(Str(in->queue()));
    c.id = std::string(Str(in->id()));
    c.priority = in->priority();
    if (in->payload()) c.payload.assign(in->payload()->begin(), in->payload()->end());
    c.metadata = Pairs(in->metadata());
    c.max_attempts = in->max_attempts();
    create.callback = std::move(c);
  }
  create.retention_ms = op->retention_ms();
  BatchReply(r, ctx.engine->CreateBatch(create));
}

void RunSealBatch(const p::Request& request, OpContext& ctx, Reply& r) {
  BatchReply(r, ctx.engine->SealBatch(Str(request.op_as_SealBatch()->id())));
}

void RunGetBatch(const p::Request& request, OpContext& ctx, Reply& r) {
  BatchReply(r, ctx.engine->GetBatch(Str(request.op_as_GetBatch()->id())));
}

// Session operations: the server answers them (SessionOperations).
constexpr Status kNoServer =
    Status(Code::kFailedPrecondition, "session operation: answered by the server only");

void RunAuth(const p::Request& request, OpContext& ctx, Reply& r) {
  if (ctx.server == nullptr) return r.Error(kNoServer);
  ctx.server->Auth(request, ctx.session, r);
}

void RunSubscribe(const p::Request& request, OpContext& ctx, Reply& r) {
  if (ctx.server == nullptr) return r.Error(kNoServer);
  ctx.server->Subscribe(request, ctx.session, r);
}

void RunUnsubscribe(const p::Request& request, OpContext& ctx, Reply& r) {
  if (ctx.server == nullptr) return r.Error(kNoServer);
  ctx.server->Unsubscribe(request, ctx.session, r);
}

void RunStats(const p::Request&, OpContext& ctx, Reply& r) {
  if (ctx.server == nullptr) return r.Error(kNoServer);
  ctx.server->Stats(r);
}

void RunHealth(const p::Request&, OpContext& ctx, Reply& r) {
  if (ctx.server == nullptr) return r.Error(kNoServer);
  ctx.server->Health(r);
}

void RunCluster(const p::Request&, OpContext& ctx, Reply& r) {
  if (ctx.server == nullptr) return r.Error(kNoServer);
  ctx.server->Cluster(r);
}

void RunSwitchover(const p::Request& request, OpContext& ctx, Reply& r) {
  if (ctx.server == nullptr) return r.Error(kNoServer);
  ctx.deferred = ctx.server->Switchover(request, r);
}

constexpr uint8_t kAny = kOverTcp | kOverWebSocket | kOverHttp;
using O = p::Operation;
constexpr OpKind kRead = OpKind::kRead;
constexpr OpKind kMutation = OpKind::kMutation;
constexpr OpKind kSession = OpKind::kSession;
constexpr OpKind kDurableRead = OpKind::kDurableRead;

// In the order of the Operation union.
constexpr std::array kTable = {
    OperationRow{O::Auth, "Auth", kSession, kAny, RunAuth},
    OperationRow{O::CreateQueue, "CreateQueue", kMutation, kAny, RunCreateQueue},
    OperationRow{O::UpdateQueue, "UpdateQueue", kMutation, kAny, RunUpdateQueue},
    OperationRow{O::GetQueue, "GetQueue", kRead, kAny, RunGetQueue},
    OperationRow{O::ListQueues, "ListQueues", kRead, kAny, RunListQueues},
    OperationRow{O::DeleteQueue, "DeleteQueue", kMutation, kAny, RunDeleteQueue},
    OperationRow{O::PurgeQueue, "PurgeQueue", kMutation, kAny, RunPurgeQueue},
    OperationRow{O::Enqueue, "Enqueue", kMutation, kAny, RunEnqueue},
    OperationRow{O::Dequeue, "Dequeue", kMutation, kAny, RunDequeue},
    OperationRow{O::Complete, "Complete", kMutation, kAny, RunComplete},
    OperationRow{O::Fail, "Fail", kMutation, kAny, RunFail},
    OperationRow{O::Extend, "Extend", kMutation, kAny, RunExtend},
    OperationRow{O::Cancel, "Cancel", kMutation, kAny, RunCancel},
    OperationRow{O::Reprioritize, "Reprioritize", kMutation, kAny, RunReprioritize},
    OperationRow{O::Redrive, "Redrive", kMutation, kAny, RunRedrive},
    OperationRow{O::Get, "Get", kRead, kAny, RunGet},
    OperationRow{O::Browse, "Browse", kRead, kAny, RunBrowse},
    OperationRow{O::Count, "Count", kRead, kAny, RunCount},
    OperationRow{O::Explain, "Explain", kRead, kAny, RunExplain},
    OperationRow{O::Subscribe, "Subscribe", kSession, kOverWebSocket, RunSubscribe},
    OperationRow{O::Unsubscribe, "Unsubscribe", kSession, kOverWebSocket, RunUnsubscribe},
    OperationRow{O::Stats, "Stats", kSession, kAny, RunStats},
    OperationRow{O::Health, "Health", kSession, kAny, RunHealth},
    OperationRow{O::Cluster, "Cluster", kSession, kAny, RunCluster},
    OperationRow{O::Switchover, "Switchover", OpKind::kControl, kAny, RunSwitchover},
    OperationRow{O::Wait, "Wait", kDurableRead, kAny, RunWait},
    OperationRow{O::UpsertSchedule, "UpsertSchedule", kMutation, kAny, RunUpsertSchedule},
    OperationRow{O::GetSchedule, "GetSchedule", kRead, kAny, RunGetSchedule},
    OperationRow{O::ListSchedules, "ListSchedules", kRead, kAny, RunListSchedules},
    OperationRow{O::DeleteSchedule, "DeleteSchedule", kMutation, kAny, RunDeleteSchedule},
    OperationRow{O::PauseSchedule, "PauseSchedule", kMutation, kAny, RunPauseSchedule},
    OperationRow{O::ResumeSchedule, "ResumeSchedule", kMutation, kAny, RunResumeSchedule},
    OperationRow{O::TriggerSchedule, "TriggerSchedule", kMutation, kAny, RunTriggerSchedule},
    OperationRow{O::CreateBatch, "CreateBatch", kMutation, kAny, RunCreateBatch},
    OperationRow{O::SealBatch, "SealBatch", kMutation, kAny, RunSealBatch},
    OperationRow{O::GetBatch, "GetBatch", kDurableRead, kAny, RunGetBatch},
    OperationRow{O::EnqueueFlow, "EnqueueFlow", kMutation, kAny, RunEnqueueFlow},
    OperationRow{O::History, "History", kDurableRead, kAny, RunHistory},
    OperationRow{O::Note, "Note", kMutation, kAny, RunNote},
    OperationRow{O::SetKeyLimits, "SetKeyLimits", kMutation, kAny, RunSetKeyLimits},
    OperationRow{O::GetKeyLimits, "GetKeyLimits", kRead, kAny, RunGetKeyLimits},
    OperationRow{O::ListKeys, "ListKeys", kRead, kAny, RunListKeys},
};
static_assert(kTable.size() == static_cast<size_t>(O::MAX), "a row for every operation");
static_assert(static_cast<size_t>(O::MAX) < Metrics::kOps, "every operation has its metrics");

std::string FinishedResponse(fb::FlatBufferBuilder& b, fb::Offset<p::Response> response) {
  b.Finish(p::CreateServerMessage(b, p::ServerBody::Response, response.Union()));
  return {reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()};
}

}  // namespace

// ---- Reply ----------------------------------------------------------------------------------

Reply::Reply(fb::FlatBufferBuilder* builder, uint64_t request_id)
    : b_(builder), request_id_(request_id) {
  b_->Clear();
}

// Both read the log's appended end after the engine call (a reply is finished after it):
// every record the operation appended is below it, and so is every record whose state the
// answer rests on (a duplicate enqueue, a repeated complete, a token made stale by another
// request's complete that is not durable yet).
void Reply::Error(Code code, std::string_view message) {
  code_ = code;
  if (lsn_from_ != nullptr) lsn_ = lsn_from_->AppendedEndLsn();
  auto error = p::CreateError(*b_, static_cast<p::Code>(code), b_->CreateString(message));
  Finish(p::CreateResponse(*b_, request_id_, error, lsn_, p::Result::NONE, 0, epoch_).o);
}

void Reply::NotPrimary(std::string_view message, std::string_view primary_addr) {
  code_ = Code::kNotPrimary;
  auto text = b_->CreateString(message);
  auto primary = primary_addr.empty() ? 0 : b_->CreateString(primary_addr);
  auto error = p::CreateError(*b_, p::Code::NOT_PRIMARY, text, primary);
  Finish(p::CreateResponse(*b_, request_id_, error, 0, p::Result::NONE, 0, epoch_).o);
}

void Reply::Ok(p::Result type, uint32_t result_offset) {
  if (lsn_from_ != nullptr) lsn_ = lsn_from_->AppendedEndLsn();
  Finish(p::CreateResponse(*b_, request_id_, 0, lsn_, type, fb::Offset<void>(result_offset), epoch_)
             .o);
}

void Reply::Finish(uint32_t response_offset) {
  b_->Finish(p::CreateServerMessage(*b_, p::ServerBody::Response,
                                    fb::Offset<p::Response>(response_offset).Union()));
  finished_ = true;
}

std::string_view Reply::bytes() const {
  return {reinterpret_cast<const char*>(b_->GetBufferPointer()), b_->GetSize()};
}

// ---- The table ------------------------------------------------------------------------------

std::span<const OperationRow> OperationTable() { return kTable; }

const OperationRow* FindOperation(p::Operation op) {
  const auto index = static_cast<size_t>(op);
  if (index == 0 || index > kTable.size()) return nullptr;
  return &kTable[index - 1];
}

Dispatcher::Outcome Dispatcher::Handle(const p::Request& request, Transport transport,
                                       Session* session, fb::FlatBufferBuilder* builder,
                                       Access access) const {
  Outcome out;
  Reply r(builder, request.request_id());
  if (role_ != nullptr) r.epoch_ = role_->epoch();
  const OperationRow* row = FindOperation(request.op_type());
  auto refuse = [&](Code code, std::string_view message) {
    r.Error(code, message);
    out.response = r.bytes();
    out.code = r.code();
    return out;
  };
  if (row == nullptr) return refuse(Code::kInvalidArgument, "op: missing or unknown operation");
  // A union type with no table passes the verifier: every run function reads the table.
  if (request.op() == nullptr) {
    return refuse(Code::kInvalidArgument, "op: the operation's table is missing");
  }
  if ((row->transports & (1u << static_cast<uint8_t>(transport))) == 0) {
    return refuse(Code::kInvalidArgument, OpName(static_cast<size_t>(row->op)) +
                                              ": WebSocket connections only (the HTTP port's /ws)");
  }
  const bool mutation = row->kind == OpKind::kMutation;
  if ((mutation || row->kind == OpKind::kControl) && access == Access::kReadOnly) {
    return refuse(Code::kFailedPrecondition,
                  "dashboard: read-only (--dashboard read-only); actions are refused");
  }
  if (mutation && role_ != nullptr && !role_->MayWrite(NodeRole::SteadyClock::now())) {
    const NodeRole::Refusal why = role_->WhyNotWritable();
    r.NotPrimary(why.message, why.primary_addr);
    out.response = r.bytes();
    out.code = r.code();
    return out;
  }
  if (mutation && log_ != nullptr && log_->failed()) {
    // Rare (the log failed for good): the cause is worth a string per refusal.
    return refuse(Code::kUnavailable, "wal: the write-ahead log has failed (" +
                                          log_->failure().Message() +
                                          "); writes are refused until restart");
  }
  // A durable read's reply, like a mutation's, carries the log's appended end: it is sent once
  // what it shows is durable.
  const bool waits_for_log = mutation || row->kind == OpKind::kDurableRead;
  if (waits_for_log) r.lsn_from_ = log_;
  OpContext ctx{engine_, server_, session};
  row->run(request, ctx, r);
  if (!r.finished()) return refuse(Code::kInternal, "dispatch: no reply was built");
  out.row = row;
  out.response = r.bytes();
  out.code = r.code();
  out.empty_dequeue = ctx.empty_dequeue;
  out.unfinished = ctx.unfinished;
  out.messages = ctx.messages;
  out.next_leased = ctx.next_leased;
  out.deferred = ctx.deferred;
  // The one place a reply learns what it waits for: the LSN its row's kind put in it.
  if (waits_for_log && request.durability() != p::Durability::relaxed) out.wait_lsn = r.lsn();
  return out;
}

Dispatcher::Outcome Dispatcher::Reanswer(const p::Request& request, std::string_view first,
                                         Transport transport, Session* session,
                                         fb::FlatBufferBuilder* builder, Access access) const {
  if (request.op_type() != p::Operation::Enqueue) {
    return Handle(request, transport, session, builder, access);
  }
  // The enqueue is done: its first answer's items, with their outcomes now.
  Outcome out;
  Reply r(builder, request.request_id());
  r.lsn_from_ = log_;
  std::vector<EnqueueAnswer> answers;
  const auto* message = fb::GetRoot<p::ServerMessage>(first.data());
  const auto* response = message->body_as_Response();
  const auto* results = response != nullptr ? response->result_as_EnqueueResults() : nullptr;
  if (results != nullptr && results->items() != nullptr) {
    for (const p::EnqueueResult* item : *results->items()) {
      if (item->error() != nullptr) {
        answers.push_back({{},
                           0,
                           false,
                           static_cast<Code>(item->error()->code()),
                           std::string(Str(item->error()->message()))});
        continue;
      }
      answers.push_back({std::string(Str(item->id())), item->version(), item->duplicate()});
    }
  }
  OpContext ctx{engine_, server_, session};
  const auto* op = request.op_as_Enqueue();
  EnqueueResultsWithOutcomes(Str(op->queue()), answers, ctx, r);
  out.row = FindOperation(request.op_type());
  out.response = r.bytes();
  out.code = r.code();
  out.unfinished = ctx.unfinished;
  if (request.durability() != p::Durability::relaxed) out.wait_lsn = r.lsn();
  return out;
}

const p::Dequeue* DequeueOf(const p::Request& request) {
  if (const p::Dequeue* d = request.op_as_Dequeue()) return d;
  if (const p::Complete* c = request.op_as_Complete()) return c->next();
  if (const p::Fail* f = request.op_as_Fail()) return f->next();
  return nullptr;
}

std::string_view WaitQueueOf(const p::Request& request) {
  if (const p::Dequeue* d = request.op_as_Dequeue()) return Str(d->queue());
  if (const p::Complete* c = request.op_as_Complete()) {
    return c->next() ? NextQueue(*c->next(), Str(c->queue())) : std::string_view();
  }
  if (const p::Fail* f = request.op_as_Fail()) {
    return f->next() ? NextQueue(*f->next(), Str(f->queue())) : std::string_view();
  }
  return {};
}

Dispatcher::Outcome Dispatcher::AnswerNext(const p::Request& request, std::string_view first,
                                           fb::FlatBufferBuilder* builder) const {
  Outcome out;
  Reply r(builder, request.request_id());
  if (role_ != nullptr) r.epoch_ = role_->epoch();
  r.lsn_from_ = log_;
  OpContext ctx{engine_, server_, nullptr};
  const p::Dequeue* next = DequeueOf(request);
  const bool may_write = (role_ == nullptr || role_->MayWrite(NodeRole::SteadyClock::now())) &&
                         (log_ == nullptr || !log_->failed());
  const Result<std::vector<MessageRecord>> leased =
      next != nullptr && may_write
          ? engine_->Dequeue(WaitQueueOf(request), DequeueRequestOf(*next))
          : Result<std::vector<MessageRecord>>(std::vector<MessageRecord>{});
  const auto* response = fb::GetRoot<p::ServerMessage>(first.data())->body_as_Response();
  if (const p::ItemResults* items =
          response != nullptr ? response->result_as_ItemResults() : nullptr) {
    std::vector<Status> statuses;
    if (items->items() != nullptr) {
      for (const p::ItemStatus* item : *items->items()) {
        statuses.emplace_back(static_cast<Code>(item->code()), Str(item->message()));
      }
    }
    ItemResultsWithNext(r, statuses, leased, next != nullptr && next->include_dependency_results(),
                        ctx);
  } else if (const p::FailResult* failed =
                 response != nullptr ? response->result_as_FailResult() : nullptr) {
    FailResult f;
    f.state = static_cast<MessageState>(failed->state());
    f.visible_at = failed->visible_at();
    f.dead_letter_queue = std::string(Str(failed->dead_letter_queue()));
    FailResultWithNext(r, f, &leased, next != nullptr && next->include_dependency_results(), ctx);
  } else {
    r.Error(Code::kInternal, "dispatch: a complete-and-next's first reply is not its result");
  }
  out.row = FindOperation(request.op_type());
  out.response = r.bytes();
  out.code = r.code();
  out.empty_dequeue = ctx.empty_dequeue;
  out.messages = ctx.messages;
  out.next_leased = ctx.next_leased;
  if (request.durability() != p::Durability::relaxed) out.wait_lsn = r.lsn();
  return out;
}

std::string ErrorResponse(uint64_t request_id, Code code, std::string_view message) {
  fb::FlatBufferBuilder b(128 + message.size());
  auto error = p::CreateError(b, static_cast<p::Code>(code), b.CreateString(message));
  return FinishedResponse(b, p::CreateResponse(b, request_id, error));
}

std::string EmptyDequeueResponse(uint64_t request_id) {
  fb::FlatBufferBuilder b(128);
  std::vector<fb::Offset<p::Message>> none;
  auto result = p::CreateDequeueResultDirect(b, &none);
  return FinishedResponse(
      b, p::CreateResponse(b, request_id, 0, 0, p::Result::DequeueResult, result.Union()));
}

}  // namespace sundial::server
