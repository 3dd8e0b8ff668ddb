// Core: a request's way through the server (internal.h), the session operations, stats.
#include "protocol/sundial_generated.h"
#include "server/internal.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

}  // namespace

Core::Core(const Options& options, Engine* engine, wal::GroupCommitLog* log, Metrics* metrics)
    : options_(options),
      engine_(engine),
      log_(log),
      metrics_(metrics),
      dispatcher_(engine, log, this) {}

Core::~Core() { timers_.Stop(); }

Loop* Core::NextLoop() {
  return loops_[next_loop_.fetch_add(1, std::memory_order_relaxed) % loops_.size()];
}

void Core::Submit(const std::shared_ptr<Session>& session, std::string_view frame) {
  const auto start = SteadyClock::now();
  const auto* request = fb::GetRoot<p::Request>(frame.data());
  const p::Operation op = request->op_type();
  Completion completion(session, request->request_id(), static_cast<uint8_t>(op), start);
  Loop* loop = session->loop();

  const p::Dequeue* dequeue = op == p::Operation::Dequeue ? request->op_as_Dequeue() : nullptr;
  const bool may_wait = dequeue != nullptr && dequeue->wait_ms() > 0 &&
                        dequeue->wait_ms() <= kMaxWaitMs && !draining();
  uint64_t generation = 0;
  if (may_wait)
    generation = long_polls_.Generation(dequeue->queue() ? dequeue->queue()->string_view() : "");

  const Dispatcher::Outcome outcome = dispatcher_.Handle(
      *request, session->transport(), session.get(), &loop->builder(), session->access());
  if (outcome.row != nullptr && outcome.row->kind == OpKind::kMutation) loop->ScheduleRound();
  if (outcome.messages > 0) metrics_->CountMessages(static_cast<uint8_t>(op), outcome.messages);
  // A queue that does not exist yet is waited on like an empty one: the first enqueue creates
  // it (auto-create), and a worker may well start before any producer.
  if (may_wait && (outcome.empty_dequeue || outcome.code == Code::kNotFound)) {
    return long_polls_.Wait(std::move(completion), frame, generation, start);
  }
  loop->Answer(std::move(completion), outcome.response, outcome.code, outcome.wait_lsn);
}

void Core::Forget(const Session* session) {
  long_polls_.Forget(session);
  subscriptions_.Forget(session);
}

void Core::OnEffect(const Effect& e) {
  activity_.Count(e);  // every effect, subscribed or not: the totals run from the start
  long_polls_.OnEffect(e);
  timers_.OnEffect(e);
  if (e.type == EffectType::kMessageChanged && e.cause == ChangeCause::kLeaseExpired) {
    metrics_->LeaseExpired(e.queue);
  }
  if (subscriptions_.any()) subscriptions_.Publish(e);
}

// ---- Session operations ---------------------------------------------------------------------

void Core::Auth(const p::Request& request, Session*, Reply& reply) {
  // The TCP session checked the first one; a repeated Auth must carry the same token.
  const p::Auth* auth = request.op_as_Auth();
  if (!auth_token_.empty() &&
      (auth->token() == nullptr || auth->token()->string_view() != auth_token_)) {
    return reply.Error(Code::kUnauthenticated, "auth: wrong token");
  }
  reply.Ok(p::Result::AuthResult, p::CreateAuthResult(reply.b()));
}

void Core::Subscribe(const p::Request& request, Session* session, Reply& reply) {
  subscriptions_.Subscribe(request, session, reply);
}

void Core::Unsubscribe(const p::Request& request, Session* session, Reply& reply) {
  subscriptions_.Unsubscribe(request, session, reply);
}

void Core::Stats(Reply& reply) { reply.Ok(p::Result::StatsResult, BuildStatsResult(reply.b())); }

void Core::Health(Reply& reply) {
  const bool is_ready = ready();
  auto& b = reply.b();
  reply.Ok(p::Result::HealthResult,
           p::CreateHealthResult(b, true, is_ready, b.CreateString(not_ready_reason())));
}

std::string Core::not_ready_reason() const {
  if (draining_.load()) return "draining: the server is shutting down";
  if (log_ != nullptr && log_->failed()) {
    return "wal: the write-ahead log has failed (" + log_->failure().Message() +
           "); writes are refused until restart";
  }
  if (!ready_.load()) return "starting: recovery is not finished";
  return "";
}

}  // namespace sundial::server
