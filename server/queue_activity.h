// Per-queue totals of message transitions, counted from the engine's effects: what the
// StatsTick's per-queue figures carry (Subscribe.queue_stats, server/live_feed.h), so that a
// dashboard shows every queue's rates without receiving a single message event. The server
// aggregates; the page subtracts two ticks.
//
// Thread safety: Count may run on any thread (it is called under the effect's shard lock);
// Snapshot from any other. The totals sit in 16 stripes by queue name, each under its own
// mutex, so effects of different shards rarely meet.
// Cost: Count is one hash lookup under a stripe mutex (no allocation once a queue is known);
// Snapshot is O(queues).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/effect.h"
#include "engine/mutex.h"
#include "engine/types.h"

namespace sundial::server {

struct QueueTotals {
  uint64_t enqueued = 0;
  uint64_t dequeued = 0;
  uint64_t completed = 0;
  uint64_t failed = 0;
  uint64_t lease_expired = 0;
  uint64_t canceled = 0;
  uint64_t errored = 0;
  uint64_t redriven = 0;
  uint64_t dead_lettered = 0;
  bool operator==(const QueueTotals&) const = default;
};

class QueueActivity {
 public:
  // One effect of the engine. Creating or deleting a queue starts its totals at zero.
  void Count(const Effect& e);
  // The totals of every queue seen, by name.
  std::unordered_map<std::string, QueueTotals> Snapshot() const;
  QueueTotals Of(std::string_view queue) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Stripe {
    mutable Mutex mu;
    std::unordered_map<std::string, QueueTotals, Hash, std::equal_to<>> totals GUARDED_BY(mu);
  };
  Stripe& StripeOf(std::string_view queue) { return stripes_[Hash{}(queue) % stripes_.size()]; }
  const Stripe& StripeOf(std::string_view queue) const {
    return stripes_[Hash{}(queue) % stripes_.size()];
  }
  static QueueTotals& Totals(Stripe& stripe, std::string_view queue) REQUIRES(stripe.mu);

  std::array<Stripe, 16> stripes_;
};

}  // namespace sundial::server
