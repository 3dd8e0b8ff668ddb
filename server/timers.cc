// Timers (internal.h): the thread that runs Engine::Advance when a timer is due, and the stats
// tick. It sleeps until the earliest due time (Engine::NextDueTime) or, while someone
// subscribes, the next tick, whichever comes first, and is woken sooner only by an effect whose
// due time (or a pending or invisible message's expires_at) is earlier than its sleep (beanstalkd's
// prottick returns the next due time the same way), by a message leaving the waiting state (it may
// re-arm a held dependency's GC timer, already due) or by a first subscription: no fixed-period
// polling, and no wake-up at all when nothing is due.
#include "server/internal.h"

namespace sundial::server {

void Timers::Start() {
  {
    MutexLock lock(&mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Run(); });
}

void Timers::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void Timers::Notify() {
  MutexLock lock(&mu_);
  earlier_ = true;
  cv_.Signal();
}

void Timers::OnEffect(const Effect& e) {
  // A message that stops waiting (or a purge or delete that may remove waiting ones) may hold a
  // dependency whose GC timer the engine disarmed and now arms again, already due
  // (docs/engine.md, "Dependencies"): that timer is due at once.
  const bool may_rearm = (e.type == EffectType::kMessageChanged &&
                          e.from == MessageState::kWaiting && e.to != MessageState::kWaiting) ||
                         e.type == EffectType::kQueuePurged || e.type == EffectType::kQueueDeleted;
  TimeMs due = may_rearm ? e.time : e.due_at;
  // A pending or invisible message with a ttl is due at its expiry too (docs/semantics.md,
  // "Expiry"): NextDueTime includes it.
  if (e.expires_at > 0 && (e.to == MessageState::kPending || e.to == MessageState::kInvisible) &&
      (due <= 0 || e.expires_at < due)) {
    due = e.expires_at;
  }
  if (due <= 0 || due >= sleeping_until_.load(std::memory_order_relaxed)) return;
  MutexLock lock(&mu_);
  earlier_ = true;
  sleeping_until_.store(due, std::memory_order_relaxed);
  cv_.Signal();
}

void Timers::Run() {
  Engine* engine = core_->engine();
  wal::GroupCommitLog* log = core_->log();
  auto next_tick = SteadyClock::now() + std::chrono::seconds(1);
  MutexLock lock(&mu_);
  while (!stop_) {
    earlier_ = false;
    // Published before NextDueTime is read: an effect from now on that is due sooner than
    // what NextDueTime returns wakes the wait below.
    sleeping_until_.store(INT64_MAX, std::memory_order_relaxed);
    mu_.Unlock();
    const TimeMs due = engine->NextDueTime();
    const TimeMs now = engine->clock().NowMs();
    // Only where writes are taken: a standby's state changes by its primary's records alone
    // (its timers' transitions come in them), and a primary that stopped writing stops.
    const bool writable = core_->role()->MayWrite(SteadyClock::now());
    if (due <= now && writable) {
      // Never early: Advance takes only what is due at `now`. Durable here is enough: no reply
      // waits for these records (a standby's acknowledgement comes as for any other).
      engine->Advance(now);
      if (log != nullptr) (void)log->WaitDurable(log->EndLsnOfThisThread(), /*local_only=*/true);
      mu_.Lock();
      continue;
    }
    // The stats tick: only while someone subscribes (Notify wakes this thread for the first).
    const bool ticking = core_->subscriptions().any();
    if (ticking && SteadyClock::now() >= next_tick) {
      next_tick = std::max(next_tick + std::chrono::seconds(1),
                           SteadyClock::now() + std::chrono::milliseconds(500));
      // Built once for every subscriber: the per-queue figures only if someone asked.
      Subscriptions& subs = core_->subscriptions();
      const Core::StatsTicks ticks = core_->BuildStatsTicks(subs.any_queue_stats());
      subs.PublishTick(ticks.plain, ticks.with_queues);
    }
    mu_.Lock();
    if (stop_) break;
    auto wake = ticking ? next_tick : SteadyClock::time_point::max();
    if (due != INT64_MAX && writable) {
      wake = std::min(wake, SteadyClock::now() + std::chrono::milliseconds(due - now));
      TimeMs current = sleeping_until_.load(std::memory_order_relaxed);
      while (due < current &&
             !sleeping_until_.compare_exchange_weak(current, due, std::memory_order_relaxed)) {
      }
    }
    while (!stop_ && !earlier_) {
      if (wake == SteadyClock::time_point::max()) {
        cv_.Wait(&mu_);
      } else if (!cv_.WaitUntil(&mu_, wake)) {
        break;  // the wake-up time came
      }
    }
  }
}

}  // namespace sundial::server
