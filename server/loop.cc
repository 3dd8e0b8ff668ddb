// Loop: an io thread, its rounds, and the replies it holds for the log (internal.h).
//
// A round is what the io_context runs between two RunRound calls: the completions of the reads
// that one epoll_wait returned, in which requests run and append. The first request of a round
// that appends (or is answered with a wait) posts RunRound, which therefore runs after every
// read completion already queued, once per round: one commit (a write and an fdatasync when
// this thread leads, none when it follows), then one write per connection with replies.
#include <boost/asio/post.hpp>
#include <utility>

#include "server/internal.h"

namespace sundial::server {
namespace {

uint64_t NanosSince(SteadyClock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start).count());
}

}  // namespace

// ---- Completion -------------------------------------------------------------------------------

void Session::AddInflight(int64_t delta) {
  inflight_.fetch_add(delta, std::memory_order_acq_rel);
  if (delta > 0) loop_->CountRequestFrom(this);  // it began on the loop's thread
}

Completion::Completion(std::shared_ptr<Session> session, uint64_t request_id, uint8_t op,
                       SteadyClock::time_point start)
    : session_(std::move(session)), request_id_(request_id), op_(op), start_(start) {
  session_->AddInflight(1);
}

Completion& Completion::operator=(Completion&& other) noexcept {
  if (this != &other) {
    Drop();
    session_ = std::move(other.session_);
    request_id_ = other.request_id_;
    op_ = other.op_;
    start_ = other.start_;
  }
  return *this;
}

void Completion::Drop() {
  if (session_) {
    session_->AddInflight(-1);
    session_.reset();
  }
}

// ---- ConnectionRegistry ----------------------------------------------------------------------

void ConnectionRegistry::Add(const std::shared_ptr<Session>& s) {
  MutexLock lock(&mu_);
  all_[s.get()] = s;
}

void ConnectionRegistry::Remove(const Session* s) {
  MutexLock lock(&mu_);
  all_.erase(s);
}

std::vector<std::shared_ptr<Session>> ConnectionRegistry::All() const {
  std::vector<std::shared_ptr<Session>> out;
  MutexLock lock(&mu_);
  for (const auto& [key, weak] : all_) {
    if (auto s = weak.lock()) out.push_back(std::move(s));
  }
  return out;
}

// ---- Loop -------------------------------------------------------------------------------------

Loop::Loop(Core* core, size_t index) : core_(core), log_(core->log()), index_(index) {}

Loop::~Loop() { Stop(); }

void Loop::Start() {
  work_.emplace(io_.get_executor());
  thread_ = std::thread([this] { io_.run(); });
}

void Loop::Stop() {
  work_.reset();
  io_.stop();
  if (thread_.joinable()) thread_.join();
  if (log_ != nullptr) log_->Unregister(this);
}

void Loop::Answer(Completion c, std::string_view response, Code code, uint64_t wait_lsn) {
  if (wait_lsn == 0 || log_ == nullptr || wait_lsn <= log_->DurableEnd()) {
    return Send(c, response, code);
  }
  Held& h = held_.PushSlot();
  h.lsn = wait_lsn;
  h.completion = std::move(c);
  h.response.assign(response);  // the slot's string keeps its capacity: no allocation
  h.code = code;
  h.since = SteadyClock::now();
  held_max_ = std::max(held_max_, wait_lsn);
  ScheduleRound();
}

void Loop::Send(Completion& c, std::string_view response, Code code) {
  const std::shared_ptr<Session> s = std::move(c.session_);  // `c` is spent
  core_->metrics()->CountRequest(c.op_, code, NanosSince(c.start_));
  s->AddInflight(-1);
  if (s->closed()) return;
  s->QueueReply(response);
  MarkDirty(s.get());
  s->RequestEnded();
}

void Loop::MarkDirty(Session* s) {
  if (s->dirty_) return;
  s->dirty_ = true;
  dirty_.push_back(s->shared_from_this());
  // A round in progress writes it in its last FlushDirty (which walks what is added meanwhile);
  // another round would cost the loop a pass through the reactor.
  if (!in_round_) ScheduleRound();
}

void Loop::ScheduleRound() {
  if (round_scheduled_) return;
  round_scheduled_ = true;
  if (in_read_) {
    round_deferred_ = true;
    return;
  }
  asio::post(io_, [this] { RunRound(); });
}

void Loop::EndRead() {
  in_read_ = false;
  if (!round_deferred_) return;
  round_deferred_ = false;
  if (ServesOneConnection()) return RunRound();
  asio::post(io_, [this] { RunRound(); });
}

void Loop::Wake() {
  if (wake_posted_.exchange(true, std::memory_order_acq_rel)) return;
  asio::post(io_, [this] {
    wake_posted_.store(false, std::memory_order_release);
    RunRound();
  });
}

void Loop::RunRound() {
  round_scheduled_ = false;
  in_round_ = true;
  // Replies that wait for nothing go out before this thread may block in an fdatasync.
  FlushDirty();
  if (log_ != nullptr) {
    // Commit everything this loop appended or holds replies for, but be woken as soon as the
    // first held reply is durable: it sends what is then, and commits again for the rest.
    // Woken only at the last one instead, the first would wait for a later group's sync.
    CompleteDurable();
    const uint64_t all = std::max(held_max_, log_->EndLsnOfThisThread());
    const uint64_t first = held_.empty() ? all : held_.front().lsn;
    if (all > log_->DurableEnd() || log_->failed()) {
      // A loop serving one connection has nothing else to do during the fdatasync: it syncs
      // itself, with no hand-off. A loop serving several goes on reading them (their next
      // requests form the next group meanwhile), and is woken once the sync thread made
      // `first` durable. "Serving one" is judged by its latest requests, not by this round:
      // with several clients in a closed loop, one is often alone in a round while the others
      // are about to send.
      Status s = log_->Commit(this, all, /*may_block=*/ServesOneConnection(), first);
      if (!s.ok()) {
        // Once per failed round (the log failed for good): the cause is worth a string.
        FailHeld("wal: the write-ahead log failed (" + s.Message() +
                 "); the change may not be durable: retry after a restart");
      }
    }
    CompleteDurable();
    if (!held_.empty() && log_->has_replica_bound()) ArmHeldTimer();
  }
  FlushDirty();
  in_round_ = false;
}

void Loop::ArmHeldTimer() {
  if (held_timer_armed_) return;
  if (!held_timer_) held_timer_.emplace(io_);
  held_timer_armed_ = true;
  held_timer_->expires_at(held_.front().since +
                          std::chrono::milliseconds(core_->options().sync_timeout_ms));
  held_timer_->async_wait([this](boost::system::error_code ec) {
    held_timer_armed_ = false;
    if (!ec) ExpireHeld();
  });
}

void Loop::ExpireHeld() {
  CompleteDurable();
  const auto limit = std::chrono::milliseconds(core_->options().sync_timeout_ms);
  const auto now = SteadyClock::now();
  bool expired = false;
  while (!held_.empty() && now - held_.front().since >= limit) {
    Held& h = held_.front();
    const std::string failed = ErrorResponse(
        h.completion.request_id(), Code::kUnavailable,
        "replication: no synchronous standby acknowledged this within --sync-timeout-ms; the "
        "change may or may not be applied: retry");
    Send(h.completion, failed, Code::kUnavailable);
    h.response.clear();
    held_.PopFront();
    expired = true;
  }
  if (held_.empty()) held_max_ = 0;
  if (expired) FlushDirty();
  if (!held_.empty() && log_->has_replica_bound()) ArmHeldTimer();
}

void Loop::CompleteDurable() {
  const uint64_t durable = log_->DurableEnd();
  while (!held_.empty() && held_.front().lsn <= durable) {
    Held& h = held_.front();
    Send(h.completion, h.response, h.code);
    h.response.clear();
    held_.PopFront();
  }
  if (held_.empty()) held_max_ = 0;
}

void Loop::CountRequestFrom(const Session* s) {
  if (s == last_session_) {
    ++same_session_requests_;
  } else {
    last_session_ = s;
    same_session_requests_ = 1;
  }
}

void Loop::FailHeld(const std::string& message) {
  while (!held_.empty()) {
    Held& h = held_.front();
    const std::string failed =
        ErrorResponse(h.completion.request_id(), Code::kUnavailable, message);
    Send(h.completion, failed, Code::kUnavailable);
    h.response.clear();
    held_.PopFront();
  }
  held_max_ = 0;
  FlushDirty();
}

void Loop::FlushDirty() {
  // Flush may run a completion handler inline (a failed write closes the session), which could
  // mark another session dirty: walk by index.
  for (size_t i = 0; i < dirty_.size(); ++i) {
    dirty_[i]->dirty_ = false;
    dirty_[i]->Flush();
  }
  dirty_.clear();
}

void Loop::PostEvent(std::weak_ptr<Session> s, std::shared_ptr<const std::string> event) {
  {
    MutexLock lock(&events_mu_);
    events_.emplace_back(std::move(s), std::move(event));
    if (events_posted_) return;
    events_posted_ = true;
  }
  asio::post(io_, [this] { DeliverEvents(); });
}

void Loop::DeliverEvents() {
  {
    MutexLock lock(&events_mu_);
    delivering_.swap(events_);
    events_posted_ = false;
  }
  for (auto& [weak, event] : delivering_) {
    if (auto s = weak.lock()) {
      if (s->closed()) continue;
      s->QueueEvent(std::move(event));
      MarkDirty(s.get());
    }
  }
  delivering_.clear();
}

}  // namespace sundial::server
