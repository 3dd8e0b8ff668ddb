// What a subscription may ask beyond a queue and a filter (docs/protocol.md, Subscriptions),
// for dashboards that must stay live however busy the server is:
//   queue_stats         the connection's StatsTick carries every queue's figures and transition
//                       totals (QueueActivity), built once a second for all such subscribers;
//   max_events_per_sec  a sample: the first N MessageEvents of each second, the rest skipped;
//   ids                 only the events of these messages.
// A page that shows counts and rates subscribes to '*' with queue_stats and 0 events a second:
// the server aggregates, and 50,000 transitions a second cost the page nothing.
//
// Thread safety: a SubscriptionOptions belongs to one subscription and is used under the lock
// that guards the subscriptions. EncodeQueueStats is a pure function.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/mutex.h"
#include "engine/status.h"
#include "engine/types.h"
#include "protocol/json.h"
#include "protocol/sundial_generated.h"
#include "server/queue_activity.h"

namespace sundial::server {

inline constexpr size_t kMaxSubscriptionIds = 100;
inline constexpr uint32_t kMaxEventsPerSec = 1'000'000;

class SubscriptionOptions {
 public:
  // The options of a Subscribe; INVALID_ARGUMENT naming the field when out of range.
  static Result<SubscriptionOptions> Of(const protocol::Subscribe& subscribe);

  bool queue_stats() const { return queue_stats_; }

  // Whether an event of message `id` at `time_ms` goes out through this subscription (after
  // its queue and filter matched). Counts it against the second's budget when it does.
  bool Admit(std::string_view id, int64_t time_ms);

 private:
  bool queue_stats_ = false;
  std::optional<uint32_t> per_second_;
  std::vector<std::string> ids_;
  int64_t window_ = -1;  // the second (time_ms / 1000) being counted
  uint32_t sent_ = 0;    // events admitted in it
};

// The JSON text of the stats ticks that connections speaking JSON share (with queue_stats, about
// 170 KB for 1,000 queues, 2-3 ms to print): printed once per tick instead of once per
// connection. Keeps the last few ticks' text, matched by the shared buffer's identity.
// Thread safety: Get may be called from any thread (a mutex; the printing happens under it, so
// the connections asking for one tick wait for one conversion).
class SharedTickJson {
 public:
  // The JSON of `message` if it is a StatsTick event; nullptr otherwise (the caller converts).
  std::shared_ptr<const std::string> Get(const std::shared_ptr<const std::string>& message);

 private:
  struct Entry {
    std::weak_ptr<const std::string> key;
    std::shared_ptr<const std::string> json;
  };
  Mutex mu_;
  std::array<Entry, 4> entries_ GUARDED_BY(mu_);
  size_t next_ GUARDED_BY(mu_) = 0;
  std::unique_ptr<protocol::JsonCodec> codec_ GUARDED_BY(mu_);
};

// A queue as GetQueue, ListQueues and the StatsTick describe it: every setting and its counts.
flatbuffers::Offset<protocol::QueueInfo> EncodeQueueInfo(flatbuffers::FlatBufferBuilder& b,
                                                         const QueueInfo& q);
flatbuffers::Offset<protocol::StateCounts> EncodeStateCounts(flatbuffers::FlatBufferBuilder& b,
                                                             const StateCounts& c);

// The StatsTick's `queues`: every queue's figures and totals, in the order given (by name).
flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<protocol::QueueStats>>>
EncodeQueueStats(flatbuffers::FlatBufferBuilder& b, const std::vector<QueueInfo>& queues,
                 const QueueActivity& activity);

}  // namespace sundial::server
