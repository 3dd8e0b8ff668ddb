#include "server/live_feed.h"

#include <algorithm>
#include <unordered_map>

namespace sundial::server {

namespace fb = flatbuffers;
namespace p = protocol;

Result<SubscriptionOptions> SubscriptionOptions::Of(const p::Subscribe& subscribe) {
  SubscriptionOptions o;
  o.queue_stats_ = subscribe.queue_stats();
  if (const auto n = subscribe.max_events_per_sec(); n.has_value()) {
    if (*n > kMaxEventsPerSec) {
      return InvalidArgument("max_events_per_sec: at most 1000000");
    }
    o.per_second_ = *n;
  }
  if (const auto* ids = subscribe.ids(); ids != nullptr) {
    if (ids->size() > kMaxSubscriptionIds) return InvalidArgument("ids: at most 100");
    for (const fb::String* id : *ids) {
      if (id == nullptr || id->size() == 0 || id->size() > 128) {
        return InvalidArgument("ids: each id is 1-128 bytes");
      }
      o.ids_.push_back(id->str());
    }
    std::sort(o.ids_.begin(), o.ids_.end());
  }
  return o;
}

bool SubscriptionOptions::Admit(std::string_view id, int64_t time_ms) {
  if (!ids_.empty() && !std::binary_search(ids_.begin(), ids_.end(), id)) return false;
  if (!per_second_) return true;
  const int64_t second = time_ms / 1000;
  if (second != window_) {
    window_ = second;
    sent_ = 0;
  }
  if (sent_ >= *per_second_) return false;
  ++sent_;
  return true;
}

std::shared_ptr<const std::string> SharedTickJson::Get(
    const std::shared_ptr<const std::string>& message) {
  // Events are built by the server and not verified again: read the union tags only.
  const auto* m = fb::GetRoot<p::ServerMessage>(message->data());
  if (m->body_type() != p::ServerBody::EventMessage) return nullptr;
  if (m->body_as_EventMessage()->event_type() != p::Event::StatsTick) return nullptr;
  MutexLock lock(&mu_);
  for (const Entry& e : entries_) {
    // Same buffer: the weak pointer shares ownership with `message` (an expired entry cannot
    // match a live buffer at a reused address).
    if (!e.key.owner_before(message) && !message.owner_before(e.key) && e.json) return e.json;
  }
  if (!codec_) codec_ = std::make_unique<p::JsonCodec>("ServerMessage");
  auto json = std::make_shared<std::string>();
  std::string error;
  if (!codec_->ToJson(*message, json.get(), &error)) return nullptr;
  entries_[next_] = {message, json};
  next_ = (next_ + 1) % entries_.size();
  return json;
}

fb::Offset<p::StateCounts> EncodeStateCounts(fb::FlatBufferBuilder& b, const StateCounts& c) {
  return p::CreateStateCounts(b, c[MessageState::kInvisible], c[MessageState::kPending],
                              c[MessageState::kRunning], c[MessageState::kCompleted],
                              c[MessageState::kCanceled], c[MessageState::kErrored], c.blocked,
                              c[MessageState::kWaiting]);
}

fb::Offset<p::QueueInfo> EncodeQueueInfo(fb::FlatBufferBuilder& b, const QueueInfo& q) {
  const QueueSettings& s = q.settings;
  auto settings = p::CreateQueueSettingsDirect(
      b, static_cast<p::QueueType>(s.type), s.exclusivity_key.c_str(), s.lease_ms,
      s.invisibility_ms, s.max_attempts, s.retry_backoff_ms, s.retry_backoff_max_ms,
      s.dead_letter_queue.c_str(), s.retention_ms, s.max_depth, s.enqueue_paused, s.dequeue_paused,
      s.history_max, s.flow_key.c_str(), s.key_concurrency, s.ttl_ms,
      static_cast<p::Dedupe>(s.dedupe), RatePerSOf(s.rate_milli), s.burst,
      RatePerSOf(s.key_rate_milli), s.key_burst, static_cast<p::Fairness>(s.fairness),
      s.overdue_first_ms);
  auto counts = EncodeStateCounts(b, q.counts);
  return p::CreateQueueInfoDirect(b, q.name.c_str(), settings, counts, q.oldest_pending_age_ms,
                                  q.memory_bytes);
}

fb::Offset<fb::Vector<fb::Offset<p::QueueStats>>> EncodeQueueStats(
    fb::FlatBufferBuilder& b, const std::vector<QueueInfo>& queues, const QueueActivity& activity) {
  const std::unordered_map<std::string, QueueTotals> totals = activity.Snapshot();
  std::vector<fb::Offset<p::QueueStats>> out;
  out.reserve(queues.size());
  for (const QueueInfo& q : queues) {
    auto info = EncodeQueueInfo(b, q);
    auto it = totals.find(q.name);
    const QueueTotals t = it == totals.end() ? QueueTotals{} : it->second;
    out.push_back(p::CreateQueueStats(b, info, t.enqueued, t.dequeued, t.completed, t.failed,
                                      t.lease_expired, t.canceled, t.errored, t.redriven,
                                      t.dead_lettered));
  }
  return b.CreateVector(out);
}

}  // namespace sundial::server
