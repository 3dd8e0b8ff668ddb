// Core: a request's way through the server (internal.h), the session operations, stats.
#include "protocol/sundial_generated.h"
#include "server/internal.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

// The ids an unfinished Wait (its request's) or Enqueue with wait_ms (its first answer's
// accepted items) waits for.
std::vector<std::string> WaitedIds(const p::Request& request, std::string_view first) {
  std::vector<std::string> ids;
  if (const p::Wait* wait = request.op_as_Wait()) {
    if (wait->ids() != nullptr) {
      for (const fb::String* id : *wait->ids()) ids.push_back(id->str());
    }
    return ids;
  }
  const auto* response = fb::GetRoot<p::ServerMessage>(first.data())->body_as_Response();
  const auto* results = response ? response->result_as_EnqueueResults() : nullptr;
  if (results != nullptr && results->items() != nullptr) {
    for (const p::EnqueueResult* item : *results->items()) {
      if (item->error() == nullptr && item->id() != nullptr) ids.push_back(item->id()->str());
    }
  }
  return ids;
}

}  // namespace

Core::Core(const Options& options, Engine* engine, wal::GroupCommitLog* log, Metrics* metrics)
    : options_(options),
      engine_(engine),
      log_(log),
      metrics_(metrics),
      dispatcher_(engine, log, this, &role_) {}

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

  // A Dequeue, or a Complete or Fail with a `next` (complete-and-next), may wait for a message.
  const p::Dequeue* dequeue = DequeueOf(*request);
  const bool may_wait = dequeue != nullptr && dequeue->wait_ms() > 0 &&
                        dequeue->wait_ms() <= kMaxWaitMs && !draining();
  const bool next = op != p::Operation::Dequeue;
  uint64_t generation = 0;
  if (may_wait) generation = long_polls_.Generation(WaitQueueOf(*request));
  // `wait`, and `enqueue` with wait_ms: held until their messages are terminal.
  uint32_t result_wait_ms = 0;
  const flatbuffers::String* wait_queue = nullptr;
  // (A union type without its table passes the verifier: the dispatcher refuses it.)
  if (const p::Wait* w = request->op_as_Wait()) {
    result_wait_ms = w->wait_ms();
    wait_queue = w->queue();
  } else if (const p::Enqueue* e = request->op_as_Enqueue()) {
    result_wait_ms = e->wait_ms();
    wait_queue = e->queue();
  }
  const std::string_view wait_queue_name = wait_queue ? wait_queue->string_view() : "";
  const bool may_wait_result = result_wait_ms > 0 && result_wait_ms <= kMaxWaitMs && !draining();
  if (may_wait_result) generation = result_waits_.Generation(wait_queue_name);

  const Dispatcher::Outcome outcome = dispatcher_.Handle(
      *request, session->transport(), session.get(), &loop->builder(), session->access());
  if (outcome.row != nullptr && outcome.row->kind == OpKind::kMutation) loop->ScheduleRound();
  CountMessages(op, outcome);
  if (outcome.deferred) {
    // A handover under way: answered from the coordinator's outcome, on this loop, later.
    return StartSwitchover(*request->op_as_Switchover(), std::move(completion), loop);
  }
  // A queue that does not exist yet is waited on like an empty one: the first enqueue creates
  // it (auto-create), and a worker may well start before any producer.
  if (may_wait && next && outcome.empty_dequeue && outcome.code == Code::kOk) {
    // The completion is applied and logged: its reply is kept, sent as it is if nothing comes.
    return long_polls_.Wait(std::move(completion), frame, generation, start, outcome.response,
                            outcome.wait_lsn);
  }
  if (may_wait && !next && (outcome.empty_dequeue || outcome.code == Code::kNotFound)) {
    return long_polls_.Wait(std::move(completion), frame, generation, start);
  }
  if (may_wait_result && outcome.unfinished) {
    return result_waits_.Wait(std::move(completion), frame, outcome.response,
                              std::string(wait_queue_name), WaitedIds(*request, outcome.response),
                              result_wait_ms, generation, start);
  }
  loop->Answer(std::move(completion), outcome.response, outcome.code, outcome.wait_lsn);
}

void Core::Forget(const Session* session) {
  long_polls_.Forget(session);
  result_waits_.Forget(session);
  subscriptions_.Forget(session);
}

void Core::OnEffect(const Effect& e) {
  activity_.Count(e);  // every effect, subscribed or not: the totals run from the start
  long_polls_.OnEffect(e);
  result_waits_.OnEffect(e);
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

std::string Core::RenderMetrics() const {
  ClusterFigures figures;
  figures.role = role_.kind();
  figures.epoch = role_.epoch();
  figures.ready = ready();
  if (cluster_figures_) cluster_figures_(&figures);
  return metrics_->Render(*engine_, log_, figures);
}

void Core::Cluster(Reply& reply) {
  ClusterInfo info = role_.cluster();
  auto& b = reply.b();
  std::vector<fb::Offset<p::ClusterMember>> members;
  for (MemberInfo& m : info.members) {
    if (m.node == info.node && log_ != nullptr) {
      // Its own log position, as of now rather than as of the coordinator's last look.
      m.end_lsn = log_->AppendedEndLsn();
      if (m.role != RoleKind::kStandby) m.flushed_lsn = log_->DurableEnd();
    }
    members.push_back(p::CreateClusterMemberDirect(
        b, m.node.c_str(), static_cast<p::NodeRole>(m.role), m.addr.c_str(), m.http_addr.c_str(),
        m.replication_addr.c_str(), m.epoch, m.end_lsn, m.flushed_lsn, m.lag_records, m.lag_ms,
        m.sync));
  }
  reply.Ok(
      p::Result::ClusterResult,
      p::CreateClusterResultDirect(b, info.cluster.c_str(), info.node.c_str(), info.epoch,
                                   info.primary.c_str(), info.primary_addr.c_str(),
                                   info.sync_standby.c_str(), info.replication.c_str(), &members));
}

bool Core::Switchover(const p::Request&, Reply& reply) {
  if (!switchover_) {
    reply.Error(Code::kFailedPrecondition,
                "switchover: this node is not in a cluster (sundiald --cluster)");
    return false;
  }
  if (role_.kind() != RoleKind::kPrimary) {
    // As a mutation sent here: NOT_PRIMARY naming the primary, so that a client following the
    // cluster sends it there.
    const NodeRole::Refusal why = role_.WhyNotWritable();
    reply.NotPrimary(why.message, why.primary_addr);
    return false;
  }
  // The handover takes from milliseconds to seconds and this io loop must go on serving
  // meanwhile (the standby's replication session may be on it): StartSwitchover answers later.
  reply.Ok(p::Result::Done, p::CreateDone(reply.b()));
  return true;
}

void Core::StartSwitchover(const p::Switchover& request, Completion completion, Loop* loop) {
  const uint64_t request_id = completion.request_id();
  // std::function wants a copyable callable: the completion travels in a shared_ptr.
  auto answer = std::make_shared<Completion>(std::move(completion));
  switchover_(request.to() ? request.to()->string_view() : std::string_view(),
              [this, loop, answer, request_id](Status status) {
                loop->Post([this, loop, answer, request_id, status = std::move(status)] {
                  fb::FlatBufferBuilder b;
                  fb::Offset<p::Error> error = 0;
                  fb::Offset<void> result = 0;
                  if (status.ok()) {
                    result = p::CreateDone(b).Union();
                  } else {
                    error = p::CreateError(b, static_cast<p::Code>(status.code()),
                                           b.CreateString(status.detail()));
                  }
                  const auto response = p::CreateResponse(
                      b, request_id, error, 0, status.ok() ? p::Result::Done : p::Result::NONE,
                      result, role_.epoch());
                  b.Finish(p::CreateServerMessage(b, p::ServerBody::Response, response.Union()));
                  loop->Answer(std::move(*answer),
                               std::string_view(reinterpret_cast<const char*>(b.GetBufferPointer()),
                                                b.GetSize()),
                               status.code(), 0);
                });
              });
}

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
  if (!role_.MayWrite(SteadyClock::now())) return role_.WhyNotWritable().message;
  return "";
}

}  // namespace sundial::server
