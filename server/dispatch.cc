#include "server/dispatch.h"

#include <array>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/sundial_generated.h"
#include "server/metrics.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

using PairVector = fb::Vector<fb::Offset<p::MetadataPair>>;

std::string_view Str(const fb::String* s) { return s ? s->string_view() : std::string_view(); }

Metadata Pairs(const PairVector* v) {
  Metadata out;
  if (v == nullptr) return out;
  out.reserve(v->size());
  for (const p::MetadataPair* pair : *v) out.push_back({pair->key()->str(), pair->value()->str()});
  return out;
}

std::vector<std::string> Strings(const fb::Vector<fb::Offset<fb::String>>* v) {
  std::vector<std::string> out;
  if (v == nullptr) return out;
  out.reserve(v->size());
  for (const fb::String* s : *v) out.push_back(s->str());
  return out;
}

bool HasFilter(const PairVector* v) { return v != nullptr && v->size() > 0; }

QueueSettings Settings(const p::QueueSettings* s) {
  QueueSettings out;
  if (s == nullptr) return out;
  out.type = static_cast<QueueType>(s->type());
  out.exclusivity_key = std::string(Str(s->exclusivity_key()));
  out.lease_ms = s->lease_ms();
  out.invisibility_ms = s->invisibility_ms();
  out.max_attempts = s->max_attempts();
  out.retry_backoff_ms = s->retry_backoff_ms();
  out.retry_backoff_max_ms = s->retry_backoff_max_ms();
  out.dead_letter_queue = std::string(Str(s->dead_letter_queue()));
  out.retention_ms = s->retention_ms();
  out.max_depth = s->max_depth();
  out.enqueue_paused = s->enqueue_paused();
  out.dequeue_paused = s->dequeue_paused();
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
  return out;
}

// ---- Encoding helpers -----------------------------------------------------------------------

fb::Offset<p::Error> ItemError(fb::FlatBufferBuilder& b, const Status& status) {  // of one item
  return p::CreateError(b, static_cast<p::Code>(status.code()), b.CreateString(status.detail()));
}

fb::Offset<PairVector> EncodePairs(fb::FlatBufferBuilder& b, const Metadata& metadata) {
  std::vector<fb::Offset<p::MetadataPair>> pairs;
  pairs.reserve(metadata.size());
  for (const auto& [k, v] : metadata) {
    pairs.push_back(p::CreateMetadataPair(b, b.CreateString(k), b.CreateString(v)));
  }
  return b.CreateVector(pairs);
}

fb::Offset<p::StateCounts> EncodeCounts(fb::FlatBufferBuilder& b, const StateCounts& c) {
  return p::CreateStateCounts(b, c[MessageState::kInvisible], c[MessageState::kPending],
                              c[MessageState::kRunning], c[MessageState::kCompleted],
                              c[MessageState::kCanceled], c[MessageState::kErrored], c.blocked);
}

fb::Offset<p::QueueInfo> EncodeQueue(fb::FlatBufferBuilder& b, const QueueInfo& q) {
  const QueueSettings& s = q.settings;
  auto settings = p::CreateQueueSettingsDirect(
      b, static_cast<p::QueueType>(s.type), s.exclusivity_key.c_str(), s.lease_ms,
      s.invisibility_ms, s.max_attempts, s.retry_backoff_ms, s.retry_backoff_max_ms,
      s.dead_letter_queue.c_str(), s.retention_ms, s.max_depth, s.enqueue_paused, s.dequeue_paused);
  auto counts = EncodeCounts(b, q.counts);
  return p::CreateQueueInfoDirect(b, q.name.c_str(), settings, counts, q.oldest_pending_age_ms,
                                  q.memory_bytes);
}

fb::Offset<p::Message> EncodeMessage(fb::FlatBufferBuilder& b, const MessageRecord& m) {
  auto metadata = EncodePairs(b, m.metadata);
  auto payload =
      b.CreateVector(reinterpret_cast<const uint8_t*>(m.payload.data()), m.payload.size());
  return p::CreateMessage(b, b.CreateString(m.queue), b.CreateString(m.id), m.priority, payload,
                          metadata, static_cast<p::MessageState>(m.state), m.attempts,
                          m.max_attempts, m.visible_at, m.lease_token, m.lease_expires_at,
                          m.version, m.enqueued_at, m.updated_at, b.CreateString(m.last_error));
}

void ItemResults(Reply& r, const std::vector<Status>& statuses) {
  auto& b = r.b();
  std::vector<fb::Offset<p::ItemStatus>> items;
  items.reserve(statuses.size());
  for (const Status& s : statuses) {
    items.push_back(
        p::CreateItemStatus(b, static_cast<p::Code>(s.code()), b.CreateString(s.detail())));
  }
  r.Ok(p::Result::ItemResults, p::CreateItemResults(b, b.CreateVector(items)));
}

void Counted(Reply& r, const Result<uint64_t>& n) {
  if (!n.ok()) return r.Error(n.status());
  r.Ok(p::Result::Counted, p::CreateCounted(r.b(), *n));
}

void QueueReply(Reply& r, const Result<QueueInfo>& q) {
  if (!q.ok()) return r.Error(q.status());
  r.Ok(p::Result::QueueResult, p::CreateQueueResult(r.b(), EncodeQueue(r.b(), *q)));
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
  for (const QueueInfo& q : ctx.engine->ListQueues()) queues.push_back(EncodeQueue(b, q));
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
  std::vector<EnqueueItem> items;
  if (op->items()) {
    if (op->items()->size() > kMaxBatchItems) return r.Error(TooManyItems());
    items.reserve(op->items()->size());  // moved, not regrown: batches of up to 1000
    for (const p::EnqueueItem* in : *op->items()) {
      EnqueueItem item;
      item.id = std::string(Str(in->id()));
      item.priority = in->priority();
      if (in->payload()) item.payload.assign(in->payload()->begin(), in->payload()->end());
      item.metadata = Pairs(in->metadata());
      item.delay_ms = in->delay_ms();
      item.visible_at = in->visible_at();
      item.max_attempts = in->max_attempts();
      items.push_back(std::move(item));
    }
  }
  const auto results = ctx.engine->Enqueue(Str(op->queue()), std::move(items));
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

void RunDequeue(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Dequeue();
  if (op->wait_ms() > kMaxWaitMs) return r.Error(InvalidArgument("wait_ms: at most 60000"));
  DequeueRequest d;
  d.max = op->max();
  d.lease_ms = op->lease_ms();
  d.filter = Pairs(op->filter());
  auto messages = ctx.engine->Dequeue(Str(op->queue()), d);
  if (!messages.ok()) return r.Error(messages.status());
  ctx.empty_dequeue = messages->empty();
  ctx.messages = messages->size();
  auto& b = r.b();
  std::vector<fb::Offset<p::Message>> out;
  out.reserve(messages->size());
  for (const MessageRecord& m : *messages) out.push_back(EncodeMessage(b, m));
  r.Ok(p::Result::DequeueResult, p::CreateDequeueResult(b, b.CreateVector(out)));
}

void RunComplete(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Complete();
  std::vector<CompleteItem> items;
  if (op->items()) {
    if (op->items()->size() > kMaxBatchItems) return r.Error(TooManyItems());
    items.reserve(op->items()->size());
    for (const p::CompleteItem* in : *op->items()) {
      items.push_back({std::string(Str(in->id())), in->lease_token()});
    }
  }
  const std::vector<Status> statuses = ctx.engine->Complete(Str(op->queue()), items);
  for (const Status& s : statuses) ctx.messages += s.ok() ? 1 : 0;
  ItemResults(r, statuses);
}

void RunFail(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Fail();
  FailRequest f{std::string(Str(op->id())), op->lease_token(), std::string(Str(op->error())),
                op->retry_delay_ms()};
  auto res = ctx.engine->Fail(Str(op->queue()), f);
  if (!res.ok()) return r.Error(res.status());
  auto& b = r.b();
  r.Ok(p::Result::FailResult,
       p::CreateFailResult(b, static_cast<p::MessageState>(res->state), res->visible_at,
                           b.CreateString(res->dead_letter_queue)));
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
  r.Ok(p::Result::GetResult, p::CreateGetResult(r.b(), EncodeMessage(r.b(), *m)));
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
        m.version, m.visible_at, m.lease_expires_at, m.enqueued_at, m.updated_at));
  }
  r.Ok(p::Result::BrowseResult,
       p::CreateBrowseResult(b, b.CreateVector(summaries), b.CreateString(page->next_cursor)));
}

void RunCount(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Count();
  auto c = ctx.engine->Count(Str(op->queue()), Pairs(op->filter()));
  if (!c.ok()) return r.Error(c.status());
  r.Ok(p::Result::CountResult, p::CreateCountResult(r.b(), EncodeCounts(r.b(), *c)));
}

void RunExplain(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_Explain();
  auto x = HasFilter(op->filter())
               ? ctx.engine->ExplainFilter(Str(op->queue()), Pairs(op->filter()))
               : ctx.engine->Explain(Str(op->queue()), Str(op->id()));
  if (!x.ok()) return r.Error(x.status());
  auto& b = r.b();
  r.Ok(p::Result::ExplainResult,
       p::CreateExplainResult(b, static_cast<p::ExplainReason>(x->reason), b.CreateString(x->id),
                              static_cast<p::MessageState>(x->state), x->until, x->lease_token,
                              b.CreateString(x->exclusivity_value), x->attempts));
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

constexpr uint8_t kAny = kOverTcp | kOverWebSocket;
using O = p::Operation;
constexpr OpKind kRead = OpKind::kRead;
constexpr OpKind kMutation = OpKind::kMutation;
constexpr OpKind kSession = OpKind::kSession;

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
};
static_assert(kTable.size() == static_cast<size_t>(O::MAX), "a row for every operation");

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
  Finish(p::CreateResponse(*b_, request_id_, error, lsn_).o);
}

void Reply::Ok(p::Result type, uint32_t result_offset) {
  if (lsn_from_ != nullptr) lsn_ = lsn_from_->AppendedEndLsn();
  Finish(p::CreateResponse(*b_, request_id_, 0, lsn_, type, fb::Offset<void>(result_offset)).o);
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
  if (mutation && access == Access::kReadOnly) {
    return refuse(Code::kFailedPrecondition,
                  "dashboard: read-only (--dashboard read-only); actions are refused");
  }
  if (mutation && log_ != nullptr && log_->failed()) {
    // Rare (the log failed for good): the cause is worth a string per refusal.
    return refuse(Code::kUnavailable, "wal: the write-ahead log has failed (" +
                                          log_->failure().Message() +
                                          "); writes are refused until restart");
  }
  if (mutation) r.lsn_from_ = log_;
  OpContext ctx{engine_, server_, session};
  row->run(request, ctx, r);
  if (!r.finished()) return refuse(Code::kInternal, "dispatch: no reply was built");
  out.row = row;
  out.response = r.bytes();
  out.code = r.code();
  out.empty_dequeue = ctx.empty_dequeue;
  out.messages = ctx.messages;
  // The one place a reply learns what it waits for: the LSN its row's kind put in it.
  if (mutation && request.durability() != p::Durability::relaxed) out.wait_lsn = r.lsn();
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
