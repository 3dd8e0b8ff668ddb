#include "server/dispatch.h"

#include <string_view>
#include <utility>
#include <vector>

#include "protocol/sundial_generated.h"

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

// Builds one ServerMessage{Response} for one request.
class Reply {
 public:
  explicit Reply(uint64_t request_id) : request_id_(request_id) {}

  fb::FlatBufferBuilder& b() { return b_; }

  std::string Error(Status status) {
    code_ = status.code();
    return Finish(p::CreateResponse(b_, request_id_, ItemError(status), lsn_));
  }
  Code code() const { return code_; }
  template <typename T>
  std::string Ok(p::Result type, fb::Offset<T> result) {
    return Finish(p::CreateResponse(b_, request_id_, 0, lsn_, type, result.Union()));
  }
  void set_lsn(uint64_t lsn) { lsn_ = lsn; }

  fb::Offset<p::Error> ItemError(Status status) {
    return p::CreateErrorDirect(b_, static_cast<p::Code>(status.code()),
                                std::string(status.detail()).c_str());
  }
  fb::Offset<PairVector> Pairs(const Metadata& metadata) {
    std::vector<fb::Offset<p::MetadataPair>> pairs;
    for (const auto& [k, v] : metadata)
      pairs.push_back(p::CreateMetadataPairDirect(b_, k.c_str(), v.c_str()));
    return b_.CreateVector(pairs);
  }
  fb::Offset<p::StateCounts> Counts(const StateCounts& c) {
    return p::CreateStateCounts(b_, c[MessageState::kInvisible], c[MessageState::kPending],
                                c[MessageState::kRunning], c[MessageState::kCompleted],
                                c[MessageState::kCanceled], c[MessageState::kErrored], c.blocked);
  }
  fb::Offset<p::QueueInfo> Queue(const QueueInfo& q) {
    const QueueSettings& s = q.settings;
    auto settings = p::CreateQueueSettingsDirect(
        b_, static_cast<p::QueueType>(s.type), s.exclusivity_key.c_str(), s.lease_ms,
        s.invisibility_ms, s.max_attempts, s.retry_backoff_ms, s.retry_backoff_max_ms,
        s.dead_letter_queue.c_str(), s.retention_ms, s.max_depth, s.enqueue_paused,
        s.dequeue_paused);
    auto counts = Counts(q.counts);
    return p::CreateQueueInfoDirect(b_, q.name.c_str(), settings, counts, q.oldest_pending_age_ms,
                                    q.memory_bytes);
  }
  fb::Offset<p::Message> MessageOf(const MessageRecord& m) {
    auto metadata = Pairs(m.metadata);
    auto payload =
        b_.CreateVector(reinterpret_cast<const uint8_t*>(m.payload.data()), m.payload.size());
    return p::CreateMessage(b_, b_.CreateString(m.queue), b_.CreateString(m.id), m.priority,
                            payload, metadata, static_cast<p::MessageState>(m.state), m.attempts,
                            m.max_attempts, m.visible_at, m.lease_token, m.lease_expires_at,
                            m.version, m.enqueued_at, m.updated_at, b_.CreateString(m.last_error));
  }
  std::string ItemResults(const std::vector<Status>& statuses) {
    std::vector<fb::Offset<p::ItemStatus>> items;
    for (const Status& s : statuses) {
      items.push_back(p::CreateItemStatusDirect(b_, static_cast<p::Code>(s.code()),
                                                std::string(s.detail()).c_str()));
    }
    return Ok(p::Result::ItemResults, p::CreateItemResultsDirect(b_, &items));
  }
  std::string Counted(uint64_t n) { return Ok(p::Result::Counted, p::CreateCounted(b_, n)); }

 private:
  std::string Finish(fb::Offset<p::Response> response) {
    b_.Finish(p::CreateServerMessage(b_, p::ServerBody::Response, response.Union()));
    return {reinterpret_cast<const char*>(b_.GetBufferPointer()), b_.GetSize()};
  }

  fb::FlatBufferBuilder b_;
  uint64_t request_id_;
  uint64_t lsn_ = 0;
  Code code_ = Code::kOk;
};

}  // namespace

bool IsMutation(p::Operation op) {
  switch (op) {
    case p::Operation::CreateQueue:
    case p::Operation::UpdateQueue:
    case p::Operation::DeleteQueue:
    case p::Operation::PurgeQueue:
    case p::Operation::Enqueue:
    case p::Operation::Dequeue:
    case p::Operation::Complete:
    case p::Operation::Fail:
    case p::Operation::Extend:
    case p::Operation::Cancel:
    case p::Operation::Reprioritize:
    case p::Operation::Redrive:
      return true;
    default:
      return false;
  }
}

std::string ErrorResponse(uint64_t request_id, Code code, std::string_view message) {
  fb::FlatBufferBuilder b(128 + message.size());
  auto error = p::CreateError(b, static_cast<p::Code>(code), b.CreateString(message));
  auto response = p::CreateResponse(b, request_id, error);
  b.Finish(p::CreateServerMessage(b, p::ServerBody::Response, response.Union()));
  return {reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()};
}

std::string EmptyDequeueResponse(uint64_t request_id) {
  fb::FlatBufferBuilder b(128);
  std::vector<fb::Offset<p::Message>> none;
  auto result = p::CreateDequeueResultDirect(b, &none);
  auto response = p::CreateResponse(b, request_id, 0, 0, p::Result::DequeueResult, result.Union());
  b.Finish(p::CreateServerMessage(b, p::ServerBody::Response, response.Union()));
  return {reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()};
}

Dispatcher::Outcome Dispatcher::Handle(const protocol::Request& request) const {
  Outcome out;
  out.relaxed = request.durability() == p::Durability::relaxed;
  Reply r(request.request_id());
  auto& b = r.b();
  auto finish = [&](std::string response) {
    out.response = std::move(response);
    out.code = r.code();
    return out;
  };
  // The LSN a mutation must wait for is known after the engine call: a reply carries it.
  auto after_mutation = [&] {
    if (log_ != nullptr && IsMutation(request.op_type())) {
      // Not only this thread's records: an answer may rest on another request's effect that is
      // appended and not yet synced (a duplicate enqueue, a complete repeated): wait for all.
      out.wait_lsn = log_->AppendedEndLsn();
      r.set_lsn(out.wait_lsn);
    }
  };
  Engine& e = *engine_;
  // A union type with no table passes the verifier: every case below reads the table.
  if (request.op_type() != p::Operation::NONE && request.op() == nullptr) {
    return finish(r.Error(InvalidArgument("op: the operation's table is missing")));
  }

  switch (request.op_type()) {
    case p::Operation::CreateQueue: {
      const auto* op = request.op_as_CreateQueue();
      auto q = e.CreateQueue(Str(op->name()), Settings(op->settings()));
      after_mutation();
      if (!q.ok()) return finish(r.Error(q.status()));
      return finish(r.Ok(p::Result::QueueResult, p::CreateQueueResult(b, r.Queue(*q))));
    }
    case p::Operation::UpdateQueue: {
      const auto* op = request.op_as_UpdateQueue();
      auto q = e.UpdateQueue(Str(op->name()), Update(op->update()));
      after_mutation();
      if (!q.ok()) return finish(r.Error(q.status()));
      return finish(r.Ok(p::Result::QueueResult, p::CreateQueueResult(b, r.Queue(*q))));
    }
    case p::Operation::GetQueue: {
      auto q = e.GetQueue(Str(request.op_as_GetQueue()->name()));
      if (!q.ok()) return finish(r.Error(q.status()));
      return finish(r.Ok(p::Result::QueueResult, p::CreateQueueResult(b, r.Queue(*q))));
    }
    case p::Operation::ListQueues: {
      std::vector<fb::Offset<p::QueueInfo>> queues;
      for (const QueueInfo& q : e.ListQueues()) queues.push_back(r.Queue(q));
      return finish(r.Ok(p::Result::QueueList, p::CreateQueueListDirect(b, &queues)));
    }
    case p::Operation::DeleteQueue: {
      Status s = e.DeleteQueue(Str(request.op_as_DeleteQueue()->name()));
      after_mutation();
      if (!s.ok()) return finish(r.Error(s));
      return finish(r.Ok(p::Result::Done, p::CreateDone(b)));
    }
    case p::Operation::PurgeQueue: {
      const auto* op = request.op_as_PurgeQueue();
      std::vector<MessageState> states;
      if (op->states()) {
        for (auto s : *op->states()) states.push_back(static_cast<MessageState>(s));
      }
      auto n = e.PurgeQueue(Str(op->name()), states);
      after_mutation();
      if (!n.ok()) return finish(r.Error(n.status()));
      return finish(r.Counted(*n));
    }
    case p::Operation::Enqueue: {
      const auto* op = request.op_as_Enqueue();
      std::vector<EnqueueItem> items;
      if (op->items()) {
        if (op->items()->size() > kMaxBatchItems) {
          return finish(r.Error(InvalidArgument("items: at most 1000 per request")));
        }
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
      auto results = e.Enqueue(Str(op->queue()), std::move(items));
      after_mutation();
      std::vector<fb::Offset<p::EnqueueResult>> out_items;
      out_items.reserve(results.size());
      for (const auto& res : results) {
        if (res.ok()) {
          out_items.push_back(
              p::CreateEnqueueResultDirect(b, res->id.c_str(), res->version, res->duplicate));
        } else {
          out_items.push_back(
              p::CreateEnqueueResultDirect(b, nullptr, 0, false, r.ItemError(res.status())));
        }
      }
      return finish(r.Ok(p::Result::EnqueueResults, p::CreateEnqueueResultsDirect(b, &out_items)));
    }
    case p::Operation::Dequeue: {
      const auto* op = request.op_as_Dequeue();
      if (op->wait_ms() > kMaxWaitMs)
        return finish(r.Error(InvalidArgument("wait_ms: at most 60000")));
      DequeueRequest d;
      d.max = op->max();
      d.lease_ms = op->lease_ms();
      d.filter = Pairs(op->filter());
      auto messages = e.Dequeue(Str(op->queue()), d);
      after_mutation();
      if (!messages.ok()) return finish(r.Error(messages.status()));
      out.empty_dequeue = messages->empty();
      std::vector<fb::Offset<p::Message>> out_messages;
      for (const MessageRecord& m : *messages) out_messages.push_back(r.MessageOf(m));
      return finish(r.Ok(p::Result::DequeueResult, p::CreateDequeueResultDirect(b, &out_messages)));
    }
    case p::Operation::Complete: {
      const auto* op = request.op_as_Complete();
      std::vector<CompleteItem> items;
      if (op->items()) {
        if (op->items()->size() > kMaxBatchItems) {
          return finish(r.Error(InvalidArgument("items: at most 1000 per request")));
        }
        for (const p::CompleteItem* in : *op->items()) {
          items.push_back({std::string(Str(in->id())), in->lease_token()});
        }
      }
      auto statuses = e.Complete(Str(op->queue()), items);
      after_mutation();
      return finish(r.ItemResults(statuses));
    }
    case p::Operation::Fail: {
      const auto* op = request.op_as_Fail();
      FailRequest f{std::string(Str(op->id())), op->lease_token(), std::string(Str(op->error())),
                    op->retry_delay_ms()};
      auto res = e.Fail(Str(op->queue()), f);
      after_mutation();
      if (!res.ok()) return finish(r.Error(res.status()));
      return finish(
          r.Ok(p::Result::FailResult,
               p::CreateFailResultDirect(b, static_cast<p::MessageState>(res->state),
                                         res->visible_at, res->dead_letter_queue.c_str())));
    }
    case p::Operation::Extend: {
      const auto* op = request.op_as_Extend();
      auto res = e.Extend(Str(op->queue()), Str(op->id()), op->lease_token(), op->lease_ms());
      after_mutation();
      if (!res.ok()) return finish(r.Error(res.status()));
      return finish(r.Ok(p::Result::ExtendResult, p::CreateExtendResult(b, *res)));
    }
    case p::Operation::Cancel: {
      const auto* op = request.op_as_Cancel();
      if (op->filter() && op->filter()->size() > 0) {
        auto n = e.CancelByFilter(Str(op->queue()), Pairs(op->filter()));
        after_mutation();
        if (!n.ok()) return finish(r.Error(n.status()));
        return finish(r.Counted(*n));
      }
      auto statuses = e.Cancel(Str(op->queue()), Strings(op->ids()));
      after_mutation();
      return finish(r.ItemResults(statuses));
    }
    case p::Operation::Reprioritize: {
      const auto* op = request.op_as_Reprioritize();
      ReprioritizeRequest rq{op->priority(), op->visible_at()};
      if (op->filter() && op->filter()->size() > 0) {
        auto n = e.ReprioritizeByFilter(Str(op->queue()), Pairs(op->filter()), rq);
        after_mutation();
        if (!n.ok()) return finish(r.Error(n.status()));
        return finish(r.Counted(*n));
      }
      auto v = e.Reprioritize(Str(op->queue()), Str(op->id()), rq);
      after_mutation();
      if (!v.ok()) return finish(r.Error(v.status()));
      return finish(r.Ok(p::Result::VersionResult, p::CreateVersionResult(b, *v)));
    }
    case p::Operation::Redrive: {
      const auto* op = request.op_as_Redrive();
      if (op->all() || (op->filter() && op->filter()->size() > 0)) {
        auto n = e.RedriveByFilter(Str(op->queue()), Pairs(op->filter()));
        after_mutation();
        if (!n.ok()) return finish(r.Error(n.status()));
        return finish(r.Counted(*n));
      }
      auto statuses = e.Redrive(Str(op->queue()), Strings(op->ids()));
      after_mutation();
      return finish(r.ItemResults(statuses));
    }
    case p::Operation::Get: {
      const auto* op = request.op_as_Get();
      auto m = e.Get(Str(op->queue()), Str(op->id()));
      if (!m.ok()) return finish(r.Error(m.status()));
      return finish(r.Ok(p::Result::GetResult, p::CreateGetResult(b, r.MessageOf(*m))));
    }
    case p::Operation::Browse: {
      const auto* op = request.op_as_Browse();
      BrowseRequest br;
      br.state = static_cast<MessageState>(op->state());
      br.filter = Pairs(op->filter());
      br.cursor = std::string(Str(op->cursor()));
      br.limit = op->limit();
      auto page = e.Browse(Str(op->queue()), br);
      if (!page.ok()) return finish(r.Error(page.status()));
      std::vector<fb::Offset<p::MessageSummary>> summaries;
      for (const MessageSummary& m : page->messages) {
        summaries.push_back(p::CreateMessageSummaryDirect(
            b, m.id.c_str(), m.priority, static_cast<p::MessageState>(m.state), m.attempts,
            m.version, m.visible_at, m.lease_expires_at, m.enqueued_at, m.updated_at));
      }
      return finish(r.Ok(p::Result::BrowseResult,
                         p::CreateBrowseResultDirect(b, &summaries, page->next_cursor.c_str())));
    }
    case p::Operation::Count: {
      const auto* op = request.op_as_Count();
      auto c = e.Count(Str(op->queue()), Pairs(op->filter()));
      if (!c.ok()) return finish(r.Error(c.status()));
      return finish(r.Ok(p::Result::CountResult, p::CreateCountResult(b, r.Counts(*c))));
    }
    case p::Operation::Explain: {
      const auto* op = request.op_as_Explain();
      auto x = op->filter() && op->filter()->size() > 0
                   ? e.ExplainFilter(Str(op->queue()), Pairs(op->filter()))
                   : e.Explain(Str(op->queue()), Str(op->id()));
      if (!x.ok()) return finish(r.Error(x.status()));
      return finish(r.Ok(
          p::Result::ExplainResult,
          p::CreateExplainResultDirect(b, static_cast<p::ExplainReason>(x->reason), x->id.c_str(),
                                       static_cast<p::MessageState>(x->state), x->until,
                                       x->lease_token, x->exclusivity_value.c_str(), x->attempts)));
    }
    case p::Operation::Health:
      return finish(r.Ok(p::Result::HealthResult, p::CreateHealthResultDirect(b, true, true, "")));
    case p::Operation::Auth:
      return finish(r.Error(InvalidArgument("auth: only as the first request of a connection")));
    case p::Operation::Subscribe:
    case p::Operation::Unsubscribe:
      return finish(r.Error(InvalidArgument("subscribe: WebSocket connections only")));
    case p::Operation::Stats:
      return finish(r.Error(FailedPrecondition("stats: answered by the server, not dispatch")));
    case p::Operation::NONE:
    default:
      return finish(r.Error(InvalidArgument("op: missing or unknown operation")));
  }
}

}  // namespace sundial::server
