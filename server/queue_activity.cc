#include "server/queue_activity.h"

namespace sundial::server {

QueueTotals& QueueActivity::Totals(Stripe& stripe, std::string_view queue) {
  auto it = stripe.totals.find(queue);
  if (it == stripe.totals.end())
    it = stripe.totals.emplace(std::string(queue), QueueTotals{}).first;
  return it->second;
}

void QueueActivity::Count(const Effect& e) {
  switch (e.type) {
    case EffectType::kQueueCreated:
    case EffectType::kQueueDeleted: {
      Stripe& stripe = StripeOf(e.queue);
      MutexLock lock(&stripe.mu);
      if (auto it = stripe.totals.find(e.queue); it != stripe.totals.end()) stripe.totals.erase(it);
      return;
    }
    case EffectType::kMessageEnqueued: {
      Stripe& stripe = StripeOf(e.queue);
      MutexLock lock(&stripe.mu);
      ++Totals(stripe, e.queue).enqueued;
      return;
    }
    case EffectType::kMessageDeadLettered: {
      {
        Stripe& stripe = StripeOf(e.queue);
        MutexLock lock(&stripe.mu);
        ++Totals(stripe, e.queue).dead_lettered;
      }
      Stripe& stripe = StripeOf(e.dead_letter_queue);
      MutexLock lock(&stripe.mu);
      ++Totals(stripe, e.dead_letter_queue).enqueued;
      return;
    }
    case EffectType::kMessageChanged: {
      Stripe& stripe = StripeOf(e.queue);
      MutexLock lock(&stripe.mu);
      QueueTotals& t = Totals(stripe, e.queue);
      switch (e.cause) {
        case ChangeCause::kLeased:
          ++t.dequeued;
          break;
        case ChangeCause::kCompleted:
          ++t.completed;
          break;
        case ChangeCause::kFailed:
          ++t.failed;
          break;
        case ChangeCause::kLeaseExpired:
          ++t.lease_expired;
          break;
        case ChangeCause::kCanceled:
          ++t.canceled;
          break;
        case ChangeCause::kRedriven:
          ++t.redriven;
          break;
        default:
          break;
      }
      if (e.to == MessageState::kErrored && e.from != MessageState::kErrored) ++t.errored;
      return;
    }
    default:
      return;
  }
}

std::unordered_map<std::string, QueueTotals> QueueActivity::Snapshot() const {
  std::unordered_map<std::string, QueueTotals> out;
  for (const Stripe& stripe : stripes_) {
    MutexLock lock(&stripe.mu);
    for (const auto& [name, totals] : stripe.totals) out.emplace(name, totals);
  }
  return out;
}

QueueTotals QueueActivity::Of(std::string_view queue) const {
  const Stripe& stripe = StripeOf(queue);
  MutexLock lock(&stripe.mu);
  auto it = stripe.totals.find(queue);
  return it == stripe.totals.end() ? QueueTotals{} : it->second;
}

}  // namespace sundial::server
