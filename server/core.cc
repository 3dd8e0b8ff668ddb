#include <algorithm>
#include <boost/asio/post.hpp>
#include <functional>
#include <utility>

#include "engine/metadata.h"
#include "protocol/sundial_generated.h"
#include "server/internal.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

uint64_t NanosSince(SteadyClock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start).count());
}

std::string Finished(fb::FlatBufferBuilder& b) {
  return {reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()};
}

std::string OkResponse(uint64_t request_id, p::Result type,
                       const std::function<fb::Offset<void>(fb::FlatBufferBuilder&)>& build) {
  fb::FlatBufferBuilder b(256);
  auto result = build(b);
  auto response = p::CreateResponse(b, request_id, 0, 0, type, result);
  b.Finish(p::CreateServerMessage(b, p::ServerBody::Response, response.Union()));
  return Finished(b);
}

// Could this effect make a message of its queue dequeueable (a long-poll waiter's chance)?
bool MayWake(const Effect& e) {
  switch (e.type) {
    case EffectType::kMessageEnqueued:
      return e.to == MessageState::kPending;
    case EffectType::kMessageChanged:
      // A message became pending, or a lease ended (an exclusivity value is free again).
      return e.to == MessageState::kPending || e.from == MessageState::kRunning;
    case EffectType::kQueueUpdated:  // e.g. dequeue unpaused
    case EffectType::kMessageDeadLettered:
      return true;
    default:
      return false;
  }
}

bool IsMessageEffect(const Effect& e) {
  return e.type == EffectType::kMessageEnqueued || e.type == EffectType::kMessageChanged ||
         e.type == EffectType::kMessageRemoved || e.type == EffectType::kMessageDeadLettered;
}

std::string_view EventCause(const Effect& e) {
  switch (e.type) {
    case EffectType::kMessageEnqueued:
      return "enqueued";
    case EffectType::kMessageRemoved:
      return "removed";
    case EffectType::kMessageDeadLettered:
      return "dead_lettered";
    default:
      return ChangeCauseName(e.cause);
  }
}

bool MatchesFilter(std::string_view packed, const Metadata& filter) {
  for (const MetadataPair& want : filter) {
    auto have = FindMetadataValue(packed, want.key);
    if (!have || *have != want.value) return false;
  }
  return true;
}

Metadata PairsOf(const fb::Vector<fb::Offset<p::MetadataPair>>* v) {
  Metadata out;
  if (v == nullptr) return out;
  for (const p::MetadataPair* pair : *v) out.push_back({pair->key()->str(), pair->value()->str()});
  return out;
}

}  // namespace

struct Core::Waiter {
  Waiter(asio::io_context& io, const std::shared_ptr<Connection>& c, std::string_view frame)
      : conn(c), key(c.get()), request(frame), timer(io) {}
  std::weak_ptr<Connection> conn;
  const Connection* key;
  std::string request;  // the Dequeue's frame, re-dispatched on wakeups
  std::string queue;
  uint64_t request_id = 0;
  bool filtered = false;
  SteadyClock::time_point start;
  SteadyClock::time_point deadline;
  // 0: waiting; 1: being served by the drain; 2: answered (or dropped).
  std::atomic<int> state{0};
  asio::steady_timer timer;
};

void ConnectionRegistry::Add(const std::shared_ptr<Connection>& c) {
  std::lock_guard lock(mu_);
  all_[c.get()] = c;
}

void ConnectionRegistry::Remove(const Connection* c) {
  std::lock_guard lock(mu_);
  all_.erase(c);
}

std::vector<std::shared_ptr<Connection>> ConnectionRegistry::All() const {
  std::vector<std::shared_ptr<Connection>> out;
  std::lock_guard lock(mu_);
  for (const auto& [key, weak] : all_) {
    if (auto c = weak.lock()) out.push_back(std::move(c));
  }
  return out;
}

Core::Core(const Options& options, Engine* engine, wal::GroupCommitLog* log, asio::io_context* io,
           Metrics* metrics)
    : options_(options),
      engine_(engine),
      log_(log),
      io_(io),
      metrics_(metrics),
      dispatcher_(engine, log),
      drain_strand_(asio::make_strand(*io)) {}

Core::~Core() { StopTicker(); }

std::atomic<uint64_t>& Core::Generation(std::string_view queue) {
  return generations_[std::hash<std::string_view>{}(queue) % generations_.size()];
}

void Core::Submit(const std::shared_ptr<Connection>& conn, std::string_view frame) {
  const auto start = SteadyClock::now();
  const auto* request = fb::GetRoot<p::Request>(frame.data());
  const p::Operation op = request->op_type();
  const auto op_index = static_cast<uint8_t>(op);
  const uint64_t request_id = request->request_id();

  auto answer = [&](std::string message, Code code) {
    metrics_->CountRequest(op_index, code, NanosSince(start));
    conn->Deliver(std::move(message));
  };
  if (op != p::Operation::NONE && request->op() == nullptr) {
    return answer(
        ErrorResponse(request_id, Code::kInvalidArgument, "op: the operation's table is missing"),
        Code::kInvalidArgument);
  }
  switch (op) {
    case p::Operation::Stats:
      return answer(StatsMessage(request_id, false), Code::kOk);
    case p::Operation::Health:
      return answer(HealthMessage(request_id), Code::kOk);
    case p::Operation::Auth: {
      // The session checked the first one; a repeated Auth must carry the same token.
      const p::Auth* auth = request->op_as_Auth();
      if (!auth_token_.empty() &&
          (auth->token() == nullptr || auth->token()->string_view() != auth_token_)) {
        return answer(ErrorResponse(request_id, Code::kUnauthenticated, "auth: wrong token"),
                      Code::kUnauthenticated);
      }
      return answer(OkResponse(request_id, p::Result::AuthResult,
                               [](auto& b) { return p::CreateAuthResult(b).Union(); }),
                    Code::kOk);
    }
    case p::Operation::Subscribe:
      return Subscribe(conn, *request, start);
    case p::Operation::Unsubscribe:
      return Unsubscribe(conn, *request, start);
    default:
      break;
  }
  if (log_ != nullptr && log_->failed() && IsMutation(op)) {
    return answer(ErrorResponse(request_id, Code::kUnavailable,
                                "wal: the write-ahead log has failed; writes are refused"),
                  Code::kUnavailable);
  }

  const p::Dequeue* dequeue = op == p::Operation::Dequeue ? request->op_as_Dequeue() : nullptr;
  const bool may_wait = dequeue != nullptr && dequeue->wait_ms() > 0 && !draining();
  uint64_t generation = 0;
  if (may_wait) {
    generation = Generation(dequeue->queue() ? dequeue->queue()->string_view() : "").load();
  }
  Dispatcher::Outcome outcome = dispatcher_.Handle(*request);
  // A queue that does not exist yet is waited on like an empty one: the first enqueue creates it
  // (auto-create), and a worker may well start before any producer.
  if (may_wait && (outcome.empty_dequeue || outcome.code == Code::kNotFound)) {
    return Wait(conn, frame, generation, start);
  }
  Finish(conn, std::move(outcome), op_index, request_id, start);
}

void Core::Finish(const std::shared_ptr<Connection>& conn, Dispatcher::Outcome outcome, uint8_t op,
                  uint64_t request_id, SteadyClock::time_point start) {
  if (outcome.wait_lsn == 0 || outcome.relaxed || log_ == nullptr) {
    metrics_->CountRequest(op, outcome.code, NanosSince(start));
    conn->Deliver(std::move(outcome.response));
    return;
  }
  // With inline writes (--fsync=interval/never) this thread writes the records now, so the
  // WhenDurable below completes here; else the callback runs on the log thread after the sync.
  (void)log_->WriteNow();  // a failure is what WhenDurable reports
  // Runs on the log thread (or here, if already known): only a post to the connection.
  log_->WhenDurable(
      outcome.wait_lsn, [conn, response = std::move(outcome.response), code = outcome.code, op,
                         request_id, start, metrics = metrics_](Status s) mutable {
        if (!s.ok()) {
          response = ErrorResponse(request_id, s.code(),
                                   "wal: the write-ahead log failed; the change is not durable");
          code = s.code();
        }
        metrics->CountRequest(op, code, NanosSince(start));
        conn->Deliver(std::move(response));
      });
}

// ---- Long poll ------------------------------------------------------------------------------

void Core::Wait(const std::shared_ptr<Connection>& conn, std::string_view frame,
                uint64_t generation, SteadyClock::time_point start) {
  auto w = std::make_shared<Waiter>(*io_, conn, frame);
  const auto* request = fb::GetRoot<p::Request>(w->request.data());
  const p::Dequeue* dequeue = request->op_as_Dequeue();
  w->queue = dequeue->queue() ? dequeue->queue()->str() : std::string();
  w->request_id = request->request_id();
  w->filtered = dequeue->filter() != nullptr && dequeue->filter()->size() > 0;
  w->start = start;
  w->deadline = start + std::chrono::milliseconds(dequeue->wait_ms());
  {
    std::lock_guard lock(waiters_mu_);
    waiting_.fetch_add(1);
    waiters_[w->queue].waiters.push_back(w);
    // An effect between the empty dequeue and now would have found no waiter: look again.
    if (Generation(w->queue).load() != generation) ScheduleDrainLocked(w->queue);
  }
  w->timer.expires_at(w->deadline);
  w->timer.async_wait([this, weak = std::weak_ptr<Waiter>(w)](boost::system::error_code ec) {
    if (ec) return;
    if (auto waiter = weak.lock()) Expire(waiter);
  });
}

void Core::ScheduleDrainLocked(const std::string& queue) {
  auto it = waiters_.find(queue);
  if (it == waiters_.end() || it->second.drain_scheduled || it->second.waiters.empty()) return;
  it->second.drain_scheduled = true;
  asio::post(drain_strand_, [this, queue] { Drain(queue); });
}

void Core::RemoveWaiter(const std::shared_ptr<Waiter>& w) {
  std::lock_guard lock(waiters_mu_);
  auto it = waiters_.find(w->queue);
  if (it == waiters_.end()) return;
  auto& list = it->second.waiters;
  for (auto pos = list.begin(); pos != list.end(); ++pos) {
    if (*pos == w) {
      list.erase(pos);
      waiting_.fetch_sub(1);
      break;
    }
  }
  if (list.empty() && !it->second.drain_scheduled) waiters_.erase(it);
}

void Core::Expire(const std::shared_ptr<Waiter>& w) {
  int expected = 0;
  if (!w->state.compare_exchange_strong(expected, 2)) return;  // answered, or being served
  RemoveWaiter(w);
  if (auto conn = w->conn.lock()) {
    metrics_->CountRequest(static_cast<uint8_t>(p::Operation::Dequeue), Code::kOk,
                           NanosSince(w->start));
    conn->Deliver(EmptyDequeueResponse(w->request_id));
  }
}

// On the drain strand: serve the queue's waiters first come, first served, until the queue has
// nothing for an unfiltered one.
void Core::Drain(const std::string& queue) {
  std::vector<std::shared_ptr<Waiter>> list;
  {
    std::lock_guard lock(waiters_mu_);
    auto it = waiters_.find(queue);
    if (it == waiters_.end()) return;
    it->second.drain_scheduled = false;
    list.assign(it->second.waiters.begin(), it->second.waiters.end());
    if (list.empty()) waiters_.erase(it);
  }
  for (const auto& w : list) {
    int expected = 0;
    if (!w->state.compare_exchange_strong(expected, 1)) continue;
    auto conn = w->conn.lock();
    if (!conn || conn->closed()) {
      w->state.store(2);
      RemoveWaiter(w);
      continue;
    }
    const auto* request = fb::GetRoot<p::Request>(w->request.data());
    const auto op = static_cast<uint8_t>(p::Operation::Dequeue);
    if (log_ != nullptr && log_->failed()) {
      w->state.store(2);
      RemoveWaiter(w);
      metrics_->CountRequest(op, Code::kUnavailable, NanosSince(w->start));
      conn->Deliver(ErrorResponse(w->request_id, Code::kUnavailable,
                                  "wal: the write-ahead log has failed; writes are refused"));
      continue;
    }
    Dispatcher::Outcome outcome = dispatcher_.Handle(*request);
    const bool empty = outcome.empty_dequeue || outcome.code == Code::kNotFound;
    if (empty && SteadyClock::now() < w->deadline && !draining()) {
      w->state.store(0);
      // The timer may have fired while this waiter was being served: it left the answer to us.
      if (SteadyClock::now() >= w->deadline) Expire(w);
      if (!w->filtered) break;  // nothing is dequeueable for anyone
      continue;
    }
    w->state.store(2);
    RemoveWaiter(w);
    if (empty) {
      outcome.response = EmptyDequeueResponse(w->request_id);
      outcome.code = Code::kOk;
    }
    Finish(conn, std::move(outcome), op, w->request_id, w->start);
  }
}

void Core::ExpireAllWaiters() {
  std::vector<std::shared_ptr<Waiter>> all;
  {
    std::lock_guard lock(waiters_mu_);
    for (auto& [queue, qw] : waiters_) all.insert(all.end(), qw.waiters.begin(), qw.waiters.end());
  }
  for (const auto& w : all) Expire(w);
}

void Core::Forget(const Connection* conn) {
  std::vector<std::shared_ptr<Waiter>> mine;
  {
    std::lock_guard lock(waiters_mu_);
    for (auto& [queue, qw] : waiters_) {
      for (const auto& w : qw.waiters) {
        if (w->key == conn) mine.push_back(w);
      }
    }
  }
  for (const auto& w : mine) {
    int expected = 0;
    if (w->state.compare_exchange_strong(expected, 2)) RemoveWaiter(w);
  }
  DropSubscriptions(conn);
}

void Core::DropSubscriptions(const Connection* conn) {
  std::lock_guard lock(subs_mu_);
  const size_t before = subs_.size();
  std::erase_if(subs_, [&](const Subscription& s) { return s.key == conn; });
  subscriber_count_.fetch_sub(static_cast<int64_t>(before - subs_.size()));
}

// ---- Effects and subscriptions ----------------------------------------------------------------

void Core::OnEffect(const Effect& e) {
  activity_.Count(e);  // DASHBOARD HOOK (issue 13): the ticks' per-queue totals
  Generation(e.queue).fetch_add(1);
  if (e.type == EffectType::kMessageDeadLettered) Generation(e.dead_letter_queue).fetch_add(1);
  if (e.type == EffectType::kMessageChanged && e.cause == ChangeCause::kLeaseExpired) {
    metrics_->LeaseExpired(e.queue);
  }
  if (waiting_.load() > 0 && MayWake(e)) {
    std::lock_guard lock(waiters_mu_);
    ScheduleDrainLocked(std::string(e.queue));
    if (!e.dead_letter_queue.empty()) ScheduleDrainLocked(std::string(e.dead_letter_queue));
  }
  if (subscriber_count_.load(std::memory_order_relaxed) > 0 && IsMessageEffect(e)) {
    PublishEvent(e);
  }
}

void Core::PublishEvent(const Effect& e) {
  std::shared_ptr<const std::string> message;
  const Connection* delivered = nullptr;  // one event per connection: subs_ is grouped by it
  std::lock_guard lock(subs_mu_);
  for (Subscription& s : subs_) {
    if (s.key == delivered) continue;
    if (s.queue != "*" && s.queue != e.queue && s.queue != e.dead_letter_queue) continue;
    if (!s.filter.empty() && !MatchesFilter(e.packed_metadata, s.filter)) continue;
    // DASHBOARD HOOK (issue 13): ids and the per-second sample; another subscription of the
    // same connection may still admit the event.
    if (!s.options.Admit(e.id, e.time)) continue;
    delivered = s.key;
    auto conn = s.conn.lock();
    if (!conn) continue;
    if (!message) {
      fb::FlatBufferBuilder b(256);
      auto event = p::CreateMessageEvent(
          b, b.CreateString(e.queue), b.CreateString(e.id), static_cast<p::MessageState>(e.from),
          static_cast<p::MessageState>(e.type == EffectType::kMessageRemoved ? e.from : e.to),
          e.version, e.time, b.CreateString(EventCause(e)));
      auto body = p::CreateEventMessage(b, p::Event::MessageEvent, event.Union());
      b.Finish(p::CreateServerMessage(b, p::ServerBody::EventMessage, body.Union()));
      message = std::make_shared<const std::string>(Finished(b));
    }
    conn->DeliverEvent(message);
  }
}

void Core::Subscribe(const std::shared_ptr<Connection>& conn, const p::Request& request,
                     SteadyClock::time_point start) {
  const auto op = static_cast<uint8_t>(p::Operation::Subscribe);
  auto fail = [&](const char* message) {
    metrics_->CountRequest(op, Code::kInvalidArgument, NanosSince(start));
    conn->Deliver(ErrorResponse(request.request_id(), Code::kInvalidArgument, message));
  };
  if (conn->transport() != Transport::kWebSocket) {
    return fail("subscribe: WebSocket connections only (the HTTP port's /ws)");
  }
  const p::Subscribe* sub = request.op_as_Subscribe();
  std::string queue = sub->queue() ? sub->queue()->str() : "";
  if (queue.empty()) return fail("queue: required (a queue name, or \"*\" for every queue)");
  Metadata filter = PairsOf(sub->filter());
  if (filter.size() > 4) return fail("filter: at most 4 pairs");
  // DASHBOARD HOOK (issue 13): queue_stats, max_events_per_sec, ids.
  Result<SubscriptionOptions> options = SubscriptionOptions::Of(*sub);
  if (!options.ok()) return fail(options.status().detail().data());
  {
    std::lock_guard lock(subs_mu_);
    if (subs_.size() >= 100'000) {
      metrics_->CountRequest(op, Code::kResourceExhausted, NanosSince(start));
      return conn->Deliver(ErrorResponse(request.request_id(), Code::kResourceExhausted,
                                         "subscribe: 100000 subscriptions on this server"));
    }
    // Kept sorted by connection, so that a connection's subscriptions are neighbours.
    const auto at = std::upper_bound(
        subs_.begin(), subs_.end(), conn.get(),
        [](const Connection* key, const Subscription& s) { return std::less<>{}(key, s.key); });
    subs_.insert(at, {conn, conn.get(), std::move(queue), std::move(filter), *options});
    subscriber_count_.fetch_add(1);
  }
  metrics_->CountRequest(op, Code::kOk, NanosSince(start));
  conn->Deliver(OkResponse(request.request_id(), p::Result::SubscribeResult,
                           [](auto& b) { return p::CreateSubscribeResult(b).Union(); }));
}

void Core::Unsubscribe(const std::shared_ptr<Connection>& conn, const p::Request& request,
                       SteadyClock::time_point start) {
  if (conn->transport() != Transport::kWebSocket) {
    metrics_->CountRequest(static_cast<uint8_t>(p::Operation::Unsubscribe), Code::kInvalidArgument,
                           NanosSince(start));
    return conn->Deliver(ErrorResponse(request.request_id(), Code::kInvalidArgument,
                                       "unsubscribe: WebSocket connections only"));
  }
  const p::Unsubscribe* unsub = request.op_as_Unsubscribe();
  const std::string queue = unsub->queue() ? unsub->queue()->str() : "";
  size_t removed = 0;
  {
    std::lock_guard lock(subs_mu_);
    const size_t before = subs_.size();
    std::erase_if(subs_, [&](const Subscription& s) {
      return s.key == conn.get() && (queue.empty() || s.queue == queue);
    });
    removed = before - subs_.size();
    subscriber_count_.fetch_sub(static_cast<int64_t>(removed));
  }
  const auto op = static_cast<uint8_t>(p::Operation::Unsubscribe);
  if (removed == 0) {
    metrics_->CountRequest(op, Code::kNotFound, NanosSince(start));
    return conn->Deliver(ErrorResponse(request.request_id(), Code::kNotFound,
                                       "queue: no subscription to it on this connection"));
  }
  metrics_->CountRequest(op, Code::kOk, NanosSince(start));
  conn->Deliver(OkResponse(request.request_id(), p::Result::Done,
                           [](auto& b) { return p::CreateDone(b).Union(); }));
}

// ---- Stats, health, ticker ------------------------------------------------------------------

std::string Core::StatsMessage(uint64_t request_id, bool as_event, bool with_queues) const {
  fb::FlatBufferBuilder b(512);
  StateCounts total;
  const auto queues = engine_->ListQueues();
  for (const QueueInfo& q : queues) {
    for (size_t s = 0; s < total.by_state.size(); ++s) total.by_state[s] += q.counts.by_state[s];
    total.blocked += q.counts.blocked;
  }
  auto counts = p::CreateStateCounts(
      b, total[MessageState::kInvisible], total[MessageState::kPending],
      total[MessageState::kRunning], total[MessageState::kCompleted],
      total[MessageState::kCanceled], total[MessageState::kErrored], total.blocked);
  const wal::LogStats ls = log_ ? log_->stats() : wal::LogStats{};
  const double fsync_mean_us =
      ls.syncs ? static_cast<double>(ls.sync_nanos) / static_cast<double>(ls.syncs) / 1000.0 : 0.0;
  const auto uptime =
      std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started_).count();
  auto stats = p::CreateStatsResult(
      b, uptime, queues.size(), counts, engine_->memory_bytes(), engine_->memory_budget_bytes(),
      static_cast<uint64_t>(metrics_->connections()), ls.next_lsn, ls.durable_end_lsn, ls.syncs,
      fsync_mean_us, ls.bytes, log_ != nullptr && log_->failed());
  if (as_event) {
    // DASHBOARD HOOK (issue 13): the tick's time, and every queue for queue_stats subscribers.
    const auto per_queue = with_queues ? EncodeQueueStats(b, queues, activity_) : 0;
    auto tick = p::CreateStatsTick(b, stats, engine_->clock().NowMs(), per_queue);
    auto body = p::CreateEventMessage(b, p::Event::StatsTick, tick.Union());
    b.Finish(p::CreateServerMessage(b, p::ServerBody::EventMessage, body.Union()));
  } else {
    auto response = p::CreateResponse(b, request_id, 0, 0, p::Result::StatsResult, stats.Union());
    b.Finish(p::CreateServerMessage(b, p::ServerBody::Response, response.Union()));
  }
  return Finished(b);
}

const char* Core::not_ready_reason() const {
  if (draining_.load()) return "draining: the server is shutting down";
  if (log_ != nullptr && log_->failed()) return "wal: the write-ahead log has failed";
  if (!ready_.load()) return "starting: recovery is not finished";
  return "";
}

std::string Core::HealthMessage(uint64_t request_id) const {
  const bool is_ready = ready();
  const std::string reason = not_ready_reason();
  return OkResponse(request_id, p::Result::HealthResult, [&](auto& b) {
    return p::CreateHealthResultDirect(b, true, is_ready, reason.c_str()).Union();
  });
}

void Core::StartTicker() {
  ticker_ = std::thread([this] { TickerLoop(); });
}

void Core::StopTicker() {
  {
    std::lock_guard lock(ticker_mu_);
    ticker_stop_ = true;
  }
  ticker_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

// Advance every 5 ms (transitions happen within 10 ms of due), a stats event every second.
void Core::TickerLoop() {
  auto next_stats = SteadyClock::now() + std::chrono::seconds(1);
  std::unique_lock lock(ticker_mu_);
  while (!ticker_stop_) {
    ticker_cv_.wait_for(lock, std::chrono::milliseconds(5));
    if (ticker_stop_) break;
    lock.unlock();
    engine_->Advance(engine_->clock().NowMs());
    if (SteadyClock::now() >= next_stats) {
      next_stats += std::chrono::seconds(1);
      if (subscriber_count_.load() > 0) {
        auto tick = std::make_shared<const std::string>(StatsMessage(0, true));
        // DASHBOARD HOOK (issue 13): one tick with every queue's figures, built once for all
        // queue_stats subscribers, before taking subs_mu_ (ListQueues takes the shard locks,
        // which OnEffect holds when it takes subs_mu_).
        bool any_queue_stats = false;
        {
          std::lock_guard subs_lock(subs_mu_);
          for (const Subscription& s : subs_) any_queue_stats |= s.options.queue_stats();
        }
        std::shared_ptr<const std::string> rich;
        if (any_queue_stats)
          rich = std::make_shared<const std::string>(StatsMessage(0, true, true));
        std::lock_guard subs_lock(subs_mu_);
        // subs_ is grouped by connection: one tick per connection, the rich one if any of its
        // subscriptions asked for queue_stats.
        for (size_t i = 0; i < subs_.size();) {
          size_t end = i;
          bool wants = false;
          for (; end < subs_.size() && subs_[end].key == subs_[i].key; ++end) {
            wants |= subs_[end].options.queue_stats();
          }
          if (auto c = subs_[i].conn.lock()) c->DeliverEvent(wants && rich ? rich : tick);
          i = end;
        }
      }
    }
    lock.lock();
  }
}

}  // namespace sundial::server
