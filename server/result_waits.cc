// Result waits (internal.h): requests held until their messages are terminal; one
// re-evaluation per waking effect, on the waiter's loop.
#include <functional>
#include <unordered_set>

#include "protocol/sundial_generated.h"
#include "server/internal.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

// Could this effect settle a waited-for message (make it terminal, or make it go)?
enum class Wakes { kNone, kMessage, kQueue };
Wakes WakesWaiters(const Effect& e) {
  switch (e.type) {
    case EffectType::kMessageChanged:
      return IsTerminal(e.to) && !IsTerminal(e.from) ? Wakes::kMessage : Wakes::kNone;
    case EffectType::kMessageRemoved:       // retention ran out: NOT_FOUND from now on
    case EffectType::kMessageDeadLettered:  // it left its queue
      return Wakes::kMessage;
    case EffectType::kQueueDeleted:
    case EffectType::kQueuePurged:
      return Wakes::kQueue;
    default:
      return Wakes::kNone;
  }
}

}  // namespace

struct ResultWaits::Waiter {
  Waiter(Completion c, std::string_view frame, std::string_view first_answer)
      : completion(std::move(c)),
        key(completion.session()),
        loop(completion.session()->loop()),
        request(frame),
        first(first_answer),
        timer(loop->io()) {}
  Completion completion;  // its session stays alive while it waits
  const Session* key;
  Loop* const loop;     // its session's: every evaluation, the timer and the answer run there
  std::string request;  // the Wait or Enqueue frame
  std::string first;    // its first (unfinished) answer: an Enqueue is answered from it again
  std::string queue;
  std::vector<std::string> ids;
  SteadyClock::time_point deadline;
  bool answered = false;               // on the loop only
  std::atomic<bool> scheduled{false};  // an evaluation is posted and has not started
  asio::steady_timer timer;
};

std::string ResultWaits::Key(std::string_view queue, std::string_view id) {
  std::string key;
  key.reserve(queue.size() + 1 + id.size());
  key.append(queue).push_back('\0');
  key.append(id);
  return key;
}

std::atomic<uint64_t>& ResultWaits::GenerationOf(std::string_view queue) const {
  return generations_[std::hash<std::string_view>{}(queue) % generations_.size()];
}

uint64_t ResultWaits::Generation(std::string_view queue) const {
  return GenerationOf(queue).load();
}

void ResultWaits::Wait(Completion c, std::string_view frame, std::string_view first,
                       std::string queue, std::vector<std::string> ids, uint32_t wait_ms,
                       uint64_t generation, SteadyClock::time_point start) {
  c.session()->CheckPeer();  // a reset peer's waiter is dropped (Session::CheckPeer)
  auto w = std::make_shared<Waiter>(std::move(c), frame, first);
  w->queue = std::move(queue);
  w->ids = std::move(ids);
  w->deadline = start + std::chrono::milliseconds(wait_ms);
  {
    MutexLock lock(&mu_);
    waiting_.fetch_add(1);
    std::unordered_set<std::string_view> seen;  // an id listed twice is filed once
    for (const std::string& id : w->ids) {
      if (seen.insert(id).second) by_message_[Key(w->queue, id)].push_back(w);
    }
  }
  // An effect between the first answer and the filing above found no waiter: look again.
  if (GenerationOf(w->queue).load() != generation) Schedule(w, false);
  w->timer.expires_at(w->deadline);
  w->timer.async_wait([this, weak = std::weak_ptr<Waiter>(w)](boost::system::error_code ec) {
    if (ec) return;
    if (auto waiter = weak.lock()) Evaluate(waiter, /*final=*/true);
  });
}

void ResultWaits::OnEffect(const Effect& e) {
  const Wakes wakes = WakesWaiters(e);
  if (wakes == Wakes::kNone) return;
  GenerationOf(e.queue).fetch_add(1);
  if (waiting_.load() == 0) return;
  std::vector<std::shared_ptr<Waiter>> woken;
  {
    MutexLock lock(&mu_);
    if (wakes == Wakes::kMessage) {
      auto it = by_message_.find(Key(e.queue, e.id));
      if (it != by_message_.end()) woken = it->second;
    } else {
      for (const auto& [key, waiters] : by_message_) {
        if (key.compare(0, key.find('\0'), e.queue) == 0) {
          woken.insert(woken.end(), waiters.begin(), waiters.end());
        }
      }
    }
  }
  for (const auto& w : woken) Schedule(w, false);
}

void ResultWaits::Schedule(const std::shared_ptr<Waiter>& w, bool final) {
  if (!final && w->scheduled.exchange(true)) return;  // one evaluation posted is enough
  w->loop->Post([this, w, final] {
    if (!final) w->scheduled.store(false);
    Evaluate(w, final);
  });
}

void ResultWaits::Evaluate(const std::shared_ptr<Waiter>& w, bool final) {
  if (w->answered) return;
  Session* session = w->completion.session();
  if (session == nullptr || session->closed()) {
    w->answered = true;
    Remove(w);
    w->timer.cancel();
    w->completion = Completion();
    return;
  }
  Loop* loop = w->loop;
  const auto* request = fb::GetRoot<p::Request>(w->request.data());
  const Dispatcher::Outcome outcome = core_->dispatcher().Reanswer(
      *request, w->first, session->transport(), session, &loop->builder(), session->access());
  const bool out_of_time = final || SteadyClock::now() >= w->deadline || core_->draining();
  if (outcome.unfinished && !out_of_time) return;  // a later effect (or the timer) comes back
  w->answered = true;
  Remove(w);
  w->timer.cancel();
  loop->Answer(std::move(w->completion), outcome.response, outcome.code, outcome.wait_lsn);
}

void ResultWaits::Remove(const std::shared_ptr<Waiter>& w) {
  MutexLock lock(&mu_);
  for (const std::string& id : w->ids) {
    auto it = by_message_.find(Key(w->queue, id));
    if (it == by_message_.end()) continue;  // an id listed twice: already gone
    auto& list = it->second;
    for (auto pos = list.begin(); pos != list.end(); ++pos) {
      if (*pos == w) {
        list.erase(pos);
        break;
      }
    }
    if (list.empty()) by_message_.erase(it);
  }
  waiting_.fetch_sub(1);
}

void ResultWaits::ExpireAll() {
  std::unordered_set<std::shared_ptr<Waiter>> all;
  {
    MutexLock lock(&mu_);
    for (const auto& [key, waiters] : by_message_) all.insert(waiters.begin(), waiters.end());
  }
  for (const auto& w : all) Schedule(w, /*final=*/true);
}

void ResultWaits::Forget(const Session* s) {
  std::unordered_set<std::shared_ptr<Waiter>> mine;
  {
    MutexLock lock(&mu_);
    for (const auto& [key, waiters] : by_message_) {
      for (const auto& w : waiters) {
        if (w->key == s) mine.insert(w);
      }
    }
  }
  for (const auto& w : mine) {
    if (w->answered) continue;
    w->answered = true;
    Remove(w);
    w->timer.cancel();
    w->completion = Completion();  // lets the session go
  }
}

void ResultWaits::Clear() {
  MutexLock lock(&mu_);
  by_message_.clear();
  waiting_.store(0);
}

}  // namespace sundial::server
