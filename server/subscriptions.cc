// Subscriptions (internal.h): kept sorted by connection, so that "one event per connection" is a
// skip of neighbours; events go to each subscriber's loop in batches (Loop::PostEvent).
#include <algorithm>

#include "engine/metadata.h"
#include "protocol/sundial_generated.h"
#include "server/internal.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

constexpr size_t kMaxSubscriptions = 100'000;

bool IsMessageEffect(const Effect& e) {
  return e.type == EffectType::kMessageEnqueued || e.type == EffectType::kMessageChanged ||
         e.type == EffectType::kMessageRemoved || e.type == EffectType::kMessageDeadLettered;
}

std::string_view EventCause(const Effect& e) {
  switch (e.type) {
    case EffectType::kMessageEnqueued:
      return "enqueued";
    case EffectType::kMessageRemoved:
      return "removed";
    case EffectType::kMessageDeadLettered:
      return "dead_lettered";
    default:
      return ChangeCauseName(e.cause);
  }
}

bool MatchesFilter(std::string_view packed, const Metadata& filter) {
  for (const MetadataPair& want : filter) {
    auto have = FindMetadataValue(packed, want.key);
    if (!have || *have != want.value) return false;
  }
  return true;
}

Metadata PairsOf(const fb::Vector<fb::Offset<p::MetadataPair>>* v) {
  Metadata out;
  if (v == nullptr) return out;
  for (const p::MetadataPair* pair : *v) out.push_back({pair->key()->str(), pair->value()->str()});
  return out;
}

std::shared_ptr<const std::string> EventMessage(const Effect& e) {
  fb::FlatBufferBuilder b(256);
  auto event = p::CreateMessageEvent(
      b, b.CreateString(e.queue), b.CreateString(e.id), static_cast<p::MessageState>(e.from),
      static_cast<p::MessageState>(e.type == EffectType::kMessageRemoved ? e.from : e.to),
      e.version, e.time, b.CreateString(EventCause(e)));
  auto body = p::CreateEventMessage(b, p::Event::MessageEvent, event.Union());
  b.Finish(p::CreateServerMessage(b, p::ServerBody::EventMessage, body.Union()));
  return std::make_shared<const std::string>(reinterpret_cast<const char*>(b.GetBufferPointer()),
                                             b.GetSize());
}

}  // namespace

template <typename Pred>
size_t Subscriptions::EraseLocked(Pred remove) {
  int64_t queue_stats = 0;
  const size_t removed = std::erase_if(subs_, [&](const Subscription& s) {
    if (!remove(s)) return false;
    queue_stats += s.options.queue_stats();
    return true;
  });
  count_.fetch_sub(static_cast<int64_t>(removed));
  queue_stats_count_.fetch_sub(queue_stats);
  return removed;
}

void Subscriptions::Subscribe(const p::Request& request, Session* session, Reply& reply) {
  const p::Subscribe* sub = request.op_as_Subscribe();
  std::string queue = sub->queue() ? sub->queue()->str() : "";
  if (queue.empty()) {
    return reply.Error(InvalidArgument("queue: required (a queue name, or \"*\" for every queue)"));
  }
  Metadata filter = PairsOf(sub->filter());
  if (filter.size() > 4) return reply.Error(InvalidArgument("filter: at most 4 pairs"));
  Result<SubscriptionOptions> options = SubscriptionOptions::Of(*sub);
  if (!options.ok()) return reply.Error(options.status());
  bool first = false;
  {
    MutexLock lock(&mu_);
    if (subs_.size() >= kMaxSubscriptions) {
      return reply.Error(ResourceExhausted("subscribe: 100000 subscriptions on this server"));
    }
    // Kept sorted by connection, so that a connection's subscriptions are neighbours.
    const auto at = std::upper_bound(
        subs_.begin(), subs_.end(), session,
        [](const Session* key, const Subscription& s) { return std::less<>{}(key, s.key); });
    if (options->queue_stats()) queue_stats_count_.fetch_add(1);
    subs_.insert(at, {session->weak_from_this(), session, std::move(queue), std::move(filter),
                      std::move(*options)});
    first = count_.fetch_add(1) == 0;
  }
  if (first) core_->timers().Notify();  // the stats tick starts
  reply.Ok(p::Result::SubscribeResult, p::CreateSubscribeResult(reply.b()));
}

void Subscriptions::Unsubscribe(const p::Request& request, Session* session, Reply& reply) {
  const p::Unsubscribe* unsub = request.op_as_Unsubscribe();
  const std::string queue = unsub->queue() ? unsub->queue()->str() : "";
  size_t removed = 0;
  {
    MutexLock lock(&mu_);
    removed = EraseLocked([&](const Subscription& s) {
      return s.key == session && (queue.empty() || s.queue == queue);
    });
  }
  if (removed == 0) {
    return reply.Error(NotFound("queue: no subscription to it on this connection"));
  }
  reply.Ok(p::Result::Done, p::CreateDone(reply.b()));
}

void Subscriptions::Publish(const Effect& e) {
  if (!IsMessageEffect(e)) return;
  std::shared_ptr<const std::string> message;
  const Session* delivered = nullptr;  // one event per connection: subs_ is grouped by it
  MutexLock lock(&mu_);
  for (Subscription& s : subs_) {
    if (s.key == delivered) continue;
    if (s.queue != "*" && s.queue != e.queue && s.queue != e.dead_letter_queue) continue;
    if (!s.filter.empty() && !MatchesFilter(e.packed_metadata, s.filter)) continue;
    // Its ids and its per-second sample (counted here, under mu_); another subscription of the
    // same connection may still admit the event.
    if (!s.options.Admit(e.id, e.time)) continue;
    delivered = s.key;
    auto session = s.session.lock();
    if (!session) continue;
    if (!message) message = EventMessage(e);
    session->loop()->PostEvent(s.session, message);
  }
}

void Subscriptions::PublishTick(const std::shared_ptr<const std::string>& plain,
                                const std::shared_ptr<const std::string>& with_queues) {
  MutexLock lock(&mu_);
  // subs_ is grouped by connection: one tick each, with the queues if any of its
  // subscriptions asked for them.
  for (size_t i = 0; i < subs_.size();) {
    bool wants_queues = false;
    size_t end = i;
    for (; end < subs_.size() && subs_[end].key == subs_[i].key; ++end) {
      wants_queues |= subs_[end].options.queue_stats();
    }
    if (auto session = subs_[i].session.lock()) {
      session->loop()->PostEvent(subs_[i].session,
                                 wants_queues && with_queues ? with_queues : plain);
    }
    i = end;
  }
}

void Subscriptions::Forget(const Session* session) {
  MutexLock lock(&mu_);
  EraseLocked([&](const Subscription& s) { return s.key == session; });
}

}  // namespace sundial::server
