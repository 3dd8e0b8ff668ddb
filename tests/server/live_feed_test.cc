// What a subscription may add (server/live_feed.h) and the per-queue totals behind the stats
// tick (server/queue_activity.h): totals by cause, reset on create/delete, both sides of a
// dead-lettering; the per-second sample, id sets, and the options' limits.
#include <gtest/gtest.h>

#include "server/live_feed.h"
#include "server/queue_activity.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

Effect Changed(std::string_view queue, ChangeCause cause, MessageState from, MessageState to) {
  Effect e;
  e.type = EffectType::kMessageChanged;
  e.queue = queue;
  e.cause = cause;
  e.from = from;
  e.to = to;
  return e;
}

TEST(QueueActivity, CountsEachTransitionByCause) {
  QueueActivity a;
  Effect enq;
  enq.type = EffectType::kMessageEnqueued;
  enq.queue = "q";
  for (int i = 0; i < 3; ++i) a.Count(enq);
  a.Count(Changed("q", ChangeCause::kLeased, MessageState::kPending, MessageState::kRunning));
  a.Count(Changed("q", ChangeCause::kCompleted, MessageState::kRunning, MessageState::kCompleted));
  a.Count(Changed("q", ChangeCause::kFailed, MessageState::kRunning, MessageState::kErrored));
  a.Count(Changed("q", ChangeCause::kLeaseExpired, MessageState::kRunning, MessageState::kPending));
  a.Count(Changed("q", ChangeCause::kCanceled, MessageState::kPending, MessageState::kCanceled));
  a.Count(Changed("q", ChangeCause::kRedriven, MessageState::kErrored, MessageState::kPending));
  a.Count(Changed("q", ChangeCause::kExtended, MessageState::kRunning, MessageState::kRunning));
  const QueueTotals t = a.Of("q");
  EXPECT_EQ(t.enqueued, 3u);
  EXPECT_EQ(t.dequeued, 1u);
  EXPECT_EQ(t.completed, 1u);
  EXPECT_EQ(t.failed, 1u);
  EXPECT_EQ(t.errored, 1u);
  EXPECT_EQ(t.lease_expired, 1u);
  EXPECT_EQ(t.canceled, 1u);
  EXPECT_EQ(t.redriven, 1u);
  EXPECT_EQ(a.Of("other"), QueueTotals{});
}

TEST(QueueActivity, DeadLetteringCountsOnBothQueues) {
  QueueActivity a;
  Effect e;
  e.type = EffectType::kMessageDeadLettered;
  e.queue = "jobs";
  e.dead_letter_queue = "jobs.dlq";
  a.Count(e);
  EXPECT_EQ(a.Of("jobs").dead_lettered, 1u);
  EXPECT_EQ(a.Of("jobs.dlq").enqueued, 1u);
}

TEST(QueueActivity, AQueueCreatedAgainStartsFromZero) {
  QueueActivity a;
  Effect enq;
  enq.type = EffectType::kMessageEnqueued;
  enq.queue = "q";
  a.Count(enq);
  Effect deleted;
  deleted.type = EffectType::kQueueDeleted;
  deleted.queue = "q";
  a.Count(deleted);
  EXPECT_EQ(a.Of("q"), QueueTotals{});
  EXPECT_TRUE(a.Snapshot().empty());
}

SubscriptionOptions OptionsOf(std::optional<uint32_t> per_second, std::vector<std::string> ids,
                              bool queue_stats = false) {
  fb::FlatBufferBuilder b;
  std::vector<fb::Offset<fb::String>> id_offsets;
  for (const auto& id : ids) id_offsets.push_back(b.CreateString(id));
  auto ids_vector = ids.empty() ? 0 : b.CreateVector(id_offsets);
  auto queue = b.CreateString("q");
  p::SubscribeBuilder sb(b);
  sb.add_queue(queue);
  sb.add_queue_stats(queue_stats);
  if (per_second) sb.add_max_events_per_sec(*per_second);
  if (!ids.empty()) sb.add_ids(ids_vector);
  b.Finish(sb.Finish());
  auto o = SubscriptionOptions::Of(*fb::GetRoot<p::Subscribe>(b.GetBufferPointer()));
  EXPECT_TRUE(o.ok());
  return o.ok() ? *o : SubscriptionOptions{};
}

TEST(SubscriptionOptions, WithoutOptionsEveryEventGoesOut) {
  SubscriptionOptions o = OptionsOf(std::nullopt, {});
  for (int i = 0; i < 10'000; ++i) EXPECT_TRUE(o.Admit("m", 1'000));
  EXPECT_FALSE(o.queue_stats());
  EXPECT_TRUE(OptionsOf(std::nullopt, {}, true).queue_stats());
}

TEST(SubscriptionOptions, ASampleAdmitsTheFirstEventsOfEachSecond) {
  SubscriptionOptions o = OptionsOf(3, {});
  int admitted = 0;
  for (int i = 0; i < 10; ++i) admitted += o.Admit("m", 5'000 + i);
  EXPECT_EQ(admitted, 3);
  EXPECT_TRUE(o.Admit("m", 6'000)) << "a new second, a new budget";
  SubscriptionOptions none = OptionsOf(0, {});
  EXPECT_FALSE(none.Admit("m", 1));
}

TEST(SubscriptionOptions, IdsAdmitOnlyTheirMessages) {
  SubscriptionOptions o = OptionsOf(std::nullopt, {"b", "a"});
  EXPECT_TRUE(o.Admit("a", 1));
  EXPECT_TRUE(o.Admit("b", 1));
  EXPECT_FALSE(o.Admit("c", 1));
  SubscriptionOptions sampled = OptionsOf(1, {"a"});
  EXPECT_FALSE(sampled.Admit("c", 1)) << "another id does not spend the budget";
  EXPECT_TRUE(sampled.Admit("a", 1));
  EXPECT_FALSE(sampled.Admit("a", 1));
}

TEST(SubscriptionOptions, QueueStatsEncodeEveryQueueWithItsTotals) {
  QueueActivity a;
  Effect enq;
  enq.type = EffectType::kMessageEnqueued;
  enq.queue = "b";
  a.Count(enq);
  std::vector<QueueInfo> queues(2);
  queues[0].name = "a";
  queues[1].name = "b";
  queues[1].counts.by_state[1] = 1;
  queues[1].settings.dequeue_paused = true;
  queues[1].settings.history_max = 7;
  queues[1].settings.flow_key = "tenant";
  queues[1].settings.key_concurrency = 3;
  fb::FlatBufferBuilder b;
  auto v = EncodeQueueStats(b, queues, a);
  auto tick = p::CreateStatsTick(b, 0, 42, v);
  b.Finish(tick);
  const auto* t = fb::GetRoot<p::StatsTick>(b.GetBufferPointer());
  ASSERT_EQ(t->queues()->size(), 2u);
  EXPECT_EQ(t->time(), 42);
  EXPECT_EQ(t->queues()->Get(0)->queue()->name()->str(), "a");
  EXPECT_EQ(t->queues()->Get(0)->enqueued(), 0u);
  EXPECT_EQ(t->queues()->Get(1)->enqueued(), 1u);
  EXPECT_EQ(t->queues()->Get(1)->queue()->counts()->pending(), 1u);
  EXPECT_TRUE(t->queues()->Get(1)->queue()->settings()->dequeue_paused());
  // Every setting, as GetQueue's QueueInfo (the TypeScript client refused a tick without it).
  EXPECT_EQ(t->queues()->Get(1)->queue()->settings()->history_max(), 7u);
  EXPECT_EQ(t->queues()->Get(1)->queue()->settings()->flow_key()->str(), "tenant");
  EXPECT_EQ(t->queues()->Get(1)->queue()->settings()->key_concurrency(), 3u);
  EXPECT_EQ(t->queues()->Get(0)->queue()->settings()->key_concurrency(), 0u) << "sent at 0 too";
}

std::shared_ptr<const std::string> Finished(fb::FlatBufferBuilder& b) {
  return std::make_shared<const std::string>(reinterpret_cast<const char*>(b.GetBufferPointer()),
                                             b.GetSize());
}

std::shared_ptr<const std::string> Tick(int64_t time) {
  fb::FlatBufferBuilder b;
  auto tick = p::CreateStatsTick(b, 0, time);
  auto body = p::CreateEventMessage(b, p::Event::StatsTick, tick.Union());
  b.Finish(p::CreateServerMessage(b, p::ServerBody::EventMessage, body.Union()));
  return Finished(b);
}

TEST(SharedTickJson, ATickIsPrintedOnceForEveryConnection) {
  SharedTickJson cache;
  auto tick = Tick(42);
  auto first = cache.Get(tick);
  ASSERT_NE(first, nullptr);
  EXPECT_NE(first->find("\"time\": 42"), std::string::npos) << *first;
  EXPECT_EQ(cache.Get(tick), first) << "the same text, not printed again";
  auto copy = std::make_shared<const std::string>(*tick);
  EXPECT_NE(cache.Get(copy), first) << "another buffer with the same bytes is another tick";
  EXPECT_EQ(*cache.Get(copy), *first);
  auto next = cache.Get(Tick(43));
  EXPECT_NE(next->find("43"), std::string::npos);
}

TEST(SharedTickJson, OtherMessagesAreLeftToTheConnection) {
  SharedTickJson cache;
  fb::FlatBufferBuilder b;
  auto event = p::CreateMessageEventDirect(b, "q", "m");
  auto body = p::CreateEventMessage(b, p::Event::MessageEvent, event.Union());
  b.Finish(p::CreateServerMessage(b, p::ServerBody::EventMessage, body.Union()));
  EXPECT_EQ(cache.Get(Finished(b)), nullptr);
  fb::FlatBufferBuilder r;
  auto response = p::CreateResponse(r, 7);
  r.Finish(p::CreateServerMessage(r, p::ServerBody::Response, response.Union()));
  EXPECT_EQ(cache.Get(Finished(r)), nullptr);
}

}  // namespace
}  // namespace sundial::server
