// Long polls (internal.h): waiters FIFO per queue; a drain per wake-up.
#include <functional>

#include "protocol/sundial_generated.h"
#include "server/internal.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

// Could this effect make a message of its queue dequeueable (a long-poll waiter's chance)?
bool MayWake(const Effect& e) {
  switch (e.type) {
    case EffectType::kMessageEnqueued:
      return e.to == MessageState::kPending;
    case EffectType::kMessageChanged:
      // A message became pending, or a lease ended (an exclusivity value is free again).
      return e.to == MessageState::kPending || e.from == MessageState::kRunning;
    case EffectType::kQueueUpdated:  // e.g. dequeue unpaused, key_concurrency raised
    case EffectType::kKeyLimitsSet:  // a value's limit raised or removed
    case EffectType::kMessageDeadLettered:
      return true;
    case EffectType::kQueueReady:
      // A key's token refilled (due_at 0); the armed form (due_at: a refill to come) is the
      // timer thread's, whose Advance then refills and reports the due_at 0 form.
      return e.due_at == 0;
    default:
      return false;
  }
}

}  // namespace

struct LongPolls::Waiter {
  Waiter(Completion c, std::string_view frame)
      : completion(std::move(c)),
        key(completion.session()),
        loop(completion.session()->loop()),
        request(frame),
        timer(loop->io()) {}
  Completion completion;  // its session stays alive while it waits
  const Session* key;
  Loop* const loop;     // its session's: the reply, the timer and Expire run there
  std::string request;  // the Dequeue's frame, dispatched again on wake-ups
  // Complete-and-next: the first reply (the completion's outcome, no leases) and its LSN; on a
  // wake-up only the `next` dequeue runs again (Dispatcher::AnswerNext). Empty: a Dequeue.
  std::string first;
  uint64_t first_lsn = 0;
  std::string queue;
  bool filtered = false;
  SteadyClock::time_point start;
  SteadyClock::time_point deadline;
  // 0: waiting; 1: being served by a drain; 2: answered (or dropped).
  std::atomic<int> state{0};
  asio::steady_timer timer;
};

std::atomic<uint64_t>& LongPolls::GenerationOf(std::string_view queue) const {
  return generations_[std::hash<std::string_view>{}(queue) % generations_.size()];
}

uint64_t LongPolls::Generation(std::string_view queue) const { return GenerationOf(queue).load(); }

void LongPolls::Wait(Completion c, std::string_view frame, uint64_t generation,
                     SteadyClock::time_point start, std::string_view first, uint64_t first_lsn) {
  // Its close, if the peer is gone, is posted before any drain this filing schedules: nothing
  // is leased to a connection reset with its last request (Session::CheckPeer).
  c.session()->CheckPeer();
  auto w = std::make_shared<Waiter>(std::move(c), frame);
  w->first = std::string(first);
  w->first_lsn = first_lsn;
  const auto* request = fb::GetRoot<p::Request>(w->request.data());
  const p::Dequeue* dequeue = DequeueOf(*request);
  w->queue = std::string(WaitQueueOf(*request));
  w->filtered = dequeue->filter() != nullptr && dequeue->filter()->size() > 0;
  w->start = start;
  w->deadline = start + std::chrono::milliseconds(dequeue->wait_ms());
  {
    MutexLock lock(&mu_);
    waiting_.fetch_add(1);
    by_queue_[w->queue].waiters.push_back(w);
    // An effect between the empty dequeue and now would have found no waiter: look again.
    if (GenerationOf(w->queue).load() != generation) ScheduleDrainLocked(w->queue);
  }
  w->timer.expires_at(w->deadline);
  w->timer.async_wait([this, weak = std::weak_ptr<Waiter>(w)](boost::system::error_code ec) {
    if (ec) return;
    if (auto waiter = weak.lock()) Expire(waiter);
  });
}

void LongPolls::OnEffect(const Effect& e) {
  GenerationOf(e.queue).fetch_add(1);
  if (e.type == EffectType::kMessageDeadLettered) GenerationOf(e.dead_letter_queue).fetch_add(1);
  if (waiting_.load() == 0 || !MayWake(e)) return;
  MutexLock lock(&mu_);
  ScheduleDrainLocked(std::string(e.queue));
  if (!e.dead_letter_queue.empty()) ScheduleDrainLocked(std::string(e.dead_letter_queue));
}

void LongPolls::ScheduleDrainLocked(const std::string& queue) {
  auto it = by_queue_.find(queue);
  if (it == by_queue_.end() || it->second.drain_scheduled || it->second.waiters.empty()) return;
  it->second.drain_scheduled = true;
  // On the first waiter's loop: its answer, at least, does not cross threads.
  Loop* loop = it->second.waiters.front()->loop;
  loop->Post([this, loop, queue] { Drain(loop, queue); });
}

void LongPolls::Remove(const std::shared_ptr<Waiter>& w) {
  MutexLock lock(&mu_);
  auto it = by_queue_.find(w->queue);
  if (it == by_queue_.end()) return;
  auto& list = it->second.waiters;
  for (auto pos = list.begin(); pos != list.end(); ++pos) {
    if (*pos == w) {
      list.erase(pos);
      waiting_.fetch_sub(1);
      break;
    }
  }
  if (list.empty() && !it->second.drain_scheduled) by_queue_.erase(it);
}

void LongPolls::Expire(const std::shared_ptr<Waiter>& w) {
  int expected = 0;
  if (!w->state.compare_exchange_strong(expected, 2)) return;  // answered, or being served
  Remove(w);
  w->timer.cancel();
  if (!w->first.empty())
    return w->loop->Answer(std::move(w->completion), w->first, Code::kOk, w->first_lsn);
  const std::string empty = EmptyDequeueResponse(w->completion.request_id());
  w->loop->Answer(std::move(w->completion), empty, Code::kOk, 0);
}

// On `loop`: serve the queue's waiters first come, first served, until the queue has nothing
// for an unfiltered one. A waiter of another loop gets its answer posted to that loop.
void LongPolls::Drain(Loop* loop, const std::string& queue) {
  std::vector<std::shared_ptr<Waiter>> list;
  {
    MutexLock lock(&mu_);
    auto it = by_queue_.find(queue);
    if (it == by_queue_.end()) return;
    it->second.drain_scheduled = false;
    list.assign(it->second.waiters.begin(), it->second.waiters.end());
    if (list.empty()) by_queue_.erase(it);
  }
  for (const auto& w : list) {
    int expected = 0;
    if (!w->state.compare_exchange_strong(expected, 1)) continue;
    Session* session = w->completion.session();
    if (session == nullptr || session->closed()) {
      w->state.store(2);
      Remove(w);
      continue;
    }
    const auto* request = fb::GetRoot<p::Request>(w->request.data());
    const Dispatcher::Outcome outcome =
        w->first.empty() ? core_->dispatcher().Handle(*request, session->transport(), session,
                                                      &loop->builder(), session->access())
                         : core_->dispatcher().AnswerNext(*request, w->first, &loop->builder());
    if (outcome.row != nullptr && outcome.row->kind == OpKind::kMutation) loop->ScheduleRound();
    core_->CountMessages(request->op_type(), outcome);
    const bool empty = outcome.empty_dequeue || outcome.code == Code::kNotFound;
    if (empty && SteadyClock::now() < w->deadline && !core_->draining()) {
      w->state.store(0);
      // The timer may have fired while this waiter was being served: it left the answer to us.
      if (SteadyClock::now() >= w->deadline) {
        w->loop->Post([this, w] { Expire(w); });
      }
      if (!w->filtered) break;  // nothing is dequeueable for anyone
      continue;
    }
    w->state.store(2);
    Remove(w);
    const bool first = empty && !w->first.empty();  // complete-and-next: the completion alone
    std::string response = first   ? w->first
                           : empty ? EmptyDequeueResponse(w->completion.request_id())
                                   : std::string(outcome.response);
    const Code code = empty ? Code::kOk : outcome.code;
    const uint64_t wait_lsn = first ? w->first_lsn : empty ? 0 : outcome.wait_lsn;
    if (w->loop == loop) {
      w->timer.cancel();
      loop->Answer(std::move(w->completion), response, code, wait_lsn);
    } else {
      w->loop->Post([w, response = std::move(response), code, wait_lsn]() mutable {
        w->timer.cancel();
        w->loop->Answer(std::move(w->completion), response, code, wait_lsn);
      });
    }
  }
}

void LongPolls::ExpireAll() {
  std::vector<std::shared_ptr<Waiter>> all;
  {
    MutexLock lock(&mu_);
    for (auto& [queue, qw] : by_queue_) all.insert(all.end(), qw.waiters.begin(), qw.waiters.end());
  }
  for (const auto& w : all) w->loop->Post([this, w] { Expire(w); });
}

void LongPolls::Clear() {
  MutexLock lock(&mu_);
  by_queue_.clear();
  waiting_.store(0);
}

void LongPolls::Forget(const Session* s) {
  std::vector<std::shared_ptr<Waiter>> mine;
  {
    MutexLock lock(&mu_);
    for (auto& [queue, qw] : by_queue_) {
      for (const auto& w : qw.waiters) {
        if (w->key == s) mine.push_back(w);
      }
    }
  }
  for (const auto& w : mine) {
    int expected = 0;
    if (w->state.compare_exchange_strong(expected, 2)) {
      Remove(w);
      w->timer.cancel();
      w->completion = Completion();  // lets the session go
    }
  }
}

}  // namespace sundial::server
