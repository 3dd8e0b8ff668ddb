// WebSocket at /ws on a real sundiald (docs/protocol.md, "WebSocket"): binary frames carry the TCP
// protocol's FlatBuffers, text frames their JSON form (protocol/json.h), malformed JSON gets a JSON
// error and leaves the connection usable; subscribe streams an event per transition (filtered by
// metadata when asked) and a stats tick every second, and is refused over plain TCP.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <set>
#include <thread>

#include "client/client.h"
#include "client/watch.h"
#include "protocol/json.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_test.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;
using client::Client;

struct Event {
  std::string queue;
  std::string id;
  p::MessageState from = p::MessageState::invisible;
  p::MessageState to = p::MessageState::invisible;
  uint64_t version = 0;
  int64_t time = 0;
  std::string cause;
};

Event ToEvent(const p::MessageEvent& e) {
  Event out;
  out.queue = e.queue() ? e.queue()->str() : "";
  out.id = e.id() ? e.id()->str() : "";
  out.from = e.from();
  out.to = e.to();
  out.version = e.version();
  out.time = e.time();
  out.cause = e.cause() ? e.cause()->str() : "";
  return out;
}

class WebSocket : public ServerTest {
 protected:
  void Connect(WsClient& ws) {
    const auto ec = ws.Connect(server_->http_port());
    ASSERT_FALSE(ec) << ec.message() << " (HTTP " << ws.status() << ")";
  }

  // Sends a binary request and reads the binary reply (skipping events).
  std::string CallBinary(WsClient& ws, const std::string& request) {
    EXPECT_FALSE(ws.SendBinary(request));
    while (true) {
      auto m = ws.Read();
      if (!m.has_value()) {
        ADD_FAILURE() << "no reply";
        return "";
      }
      EXPECT_FALSE(m->text) << "a binary request gets a binary reply";
      const p::ServerMessage* sm = AsServerMessage(m->data);
      if (sm == nullptr) {
        ADD_FAILURE() << "a reply that is not a ServerMessage";
        return "";
      }
      if (sm->body_type() == p::ServerBody::Response) return m->data;
    }
  }

  // Sends a text request and reads the text reply; *flatbuffer gets it as a ServerMessage.
  std::string CallText(WsClient& ws, const std::string& json, std::string* flatbuffer) {
    EXPECT_FALSE(ws.SendText(json));
    auto m = ws.Read();
    if (!m.has_value()) {
      ADD_FAILURE() << "no reply to " << json;
      return "";
    }
    EXPECT_TRUE(m->text) << "a text request gets a text reply";
    std::string error;
    EXPECT_TRUE(out_codec_.FromJson(m->data, flatbuffer, &error)) << error << ": " << m->data;
    EXPECT_TRUE(client::VerifyServerMessage(*flatbuffer)) << m->data;
    return m->data;
  }

  // Reads binary frames until `is_last` holds for a MessageEvent (or 5 s without one); the
  // MessageEvents read, StatsTicks skipped.
  std::vector<Event> ReadEventsUntil(WsClient& ws,
                                     const std::function<bool(const Event&)>& is_last) {
    std::vector<Event> events;
    const auto deadline = Clock::now() + Millis(10'000);
    while (Clock::now() < deadline) {
      auto m = ws.Read(5'000);
      if (!m.has_value()) {
        ADD_FAILURE() << "the event stream ended or stalled";
        break;
      }
      const p::ServerMessage* sm = AsServerMessage(m->data);
      if (sm == nullptr) {
        ADD_FAILURE() << "not a ServerMessage";
        break;
      }
      const p::EventMessage* em = sm->body_as_EventMessage();
      if (em == nullptr || em->event_type() != p::Event::MessageEvent) continue;
      events.push_back(ToEvent(*em->event_as_MessageEvent()));
      if (is_last(events.back())) break;
    }
    return events;
  }

  void Subscribe(WsClient& ws, const std::string& queue, const client::Pairs& filter = {}) {
    const std::string reply = CallBinary(ws, client::BuildSubscribe(Hdr(1), queue, filter));
    const ResponseView v = ViewResponse(reply);
    ASSERT_TRUE(v.valid);
    ASSERT_FALSE(v.has_error) << v.message;
    EXPECT_EQ(v.request_id, 1u);
    EXPECT_EQ(v.result_type, p::Result::SubscribeResult);
  }

  void Put(const std::string& queue, const std::string& id, client::Pairs metadata = {}) {
    client::EnqueueItem item;
    item.id = id;
    item.metadata = std::move(metadata);
    auto r = client_->Enqueue(queue, {item});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    ASSERT_EQ(r->result<p::EnqueueResults>()->items()->Get(0)->error(), nullptr);
  }

  // Dequeues `id` (the only pending message of `queue`) and completes it.
  void TakeAndComplete(const std::string& queue, const std::string& id) {
    auto got = client_->Dequeue(queue, {});
    ASSERT_TRUE(got.ok()) << got.error().ToString();
    const auto* messages = got->result<p::DequeueResult>()->messages();
    ASSERT_EQ(messages->size(), 1u);
    ASSERT_EQ(messages->Get(0)->id()->str(), id);
    auto done = client_->Complete(queue, {{id, messages->Get(0)->lease_token()}});
    ASSERT_TRUE(done.ok()) << done.error().ToString();
    ASSERT_EQ(done->result<p::ItemResults>()->items()->Get(0)->code(), p::Code::OK);
  }

  p::JsonCodec out_codec_{"ServerMessage"};
};

TEST_F(WebSocket, BinaryFramesCarryFlatBuffers) {
  WsClient ws;
  ASSERT_NO_FATAL_FAILURE(Connect(ws));
  client::EnqueueItem item;
  item.id = "m1";
  item.priority = 3;
  item.payload = "hi";
  const std::string enq = CallBinary(ws, client::BuildEnqueue(Hdr(11), "q", {item}));
  auto enqueued = client::Reply::FromServerMessage(enq);
  ASSERT_TRUE(enqueued.ok()) << enqueued.error().ToString();
  EXPECT_EQ(enqueued->request_id(), 11u);
  ASSERT_EQ(enqueued->result<p::EnqueueResults>()->items()->size(), 1u);
  EXPECT_EQ(enqueued->result<p::EnqueueResults>()->items()->Get(0)->id()->str(), "m1");
  EXPECT_GT(enqueued->lsn(), 0u) << "a durable mutation carries its synced LSN";

  auto dequeued = client::Reply::FromServerMessage(
      CallBinary(ws, client::BuildDequeue(Hdr(12), "q", client::DequeueOptions{})));
  ASSERT_TRUE(dequeued.ok()) << dequeued.error().ToString();
  EXPECT_EQ(dequeued->request_id(), 12u);
  const auto* messages = dequeued->result<p::DequeueResult>()->messages();
  ASSERT_EQ(messages->size(), 1u);
  const p::Message* m = messages->Get(0);
  EXPECT_EQ(m->id()->str(), "m1");
  EXPECT_EQ(std::string(m->payload()->begin(), m->payload()->end()), "hi");
  EXPECT_EQ(m->state(), p::MessageState::running);

  auto completed = client::Reply::FromServerMessage(
      CallBinary(ws, client::BuildComplete(Hdr(13), "q", {{"m1", m->lease_token()}})));
  ASSERT_TRUE(completed.ok()) << completed.error().ToString();
  EXPECT_EQ(completed->result<p::ItemResults>()->items()->Get(0)->code(), p::Code::OK);

  // The same state is seen over TCP.
  auto got = client_->Get("q", "m1");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->result<p::GetResult>()->message()->state(), p::MessageState::completed);

  // Pipelined requests are all answered, matched by request_id.
  for (uint64_t id : {21, 22, 23}) ASSERT_FALSE(ws.SendBinary(client::BuildHealth(Hdr(id))));
  std::set<uint64_t> answered;
  for (int i = 0; i < 3; ++i) {
    auto reply = ws.Read();
    ASSERT_TRUE(reply.has_value());
    answered.insert(ViewResponse(reply->data).request_id);
  }
  EXPECT_EQ(answered, (std::set<uint64_t>{21, 22, 23}));

  // A binary frame that is not a Request: a typed error, and the connection stays usable.
  const ResponseView garbage = ViewResponse(CallBinary(ws, "this is not a flatbuffer"));
  ASSERT_TRUE(garbage.valid);
  EXPECT_EQ(garbage.request_id, 0u);
  EXPECT_EQ(garbage.code, p::Code::INVALID_ARGUMENT) << garbage.message;
  const ResponseView health = ViewResponse(CallBinary(ws, client::BuildHealth(Hdr(30))));
  EXPECT_EQ(health.request_id, 30u);
  EXPECT_FALSE(health.has_error);
}

TEST_F(WebSocket, TextFramesCarryJson) {
  WsClient ws;
  ASSERT_NO_FATAL_FAILURE(Connect(ws));
  std::string fb;
  const std::string enq = CallText(
      ws,
      R"({"request_id":7,"op_type":"Enqueue","op":{"queue":"q","items":[{"id":"m1","payload":[104,105],"metadata":[{"key":"tenant","value":"acme"}]}]}})",
      &fb);
  EXPECT_NE(enq.find("\"request_id\""), std::string::npos) << enq;
  EXPECT_NE(enq.find("\"EnqueueResults\""), std::string::npos) << enq;
  auto enqueued = client::Reply::FromServerMessage(fb);
  ASSERT_TRUE(enqueued.ok()) << enqueued.error().ToString() << ": " << enq;
  EXPECT_EQ(enqueued->request_id(), 7u);
  ASSERT_EQ(enqueued->result<p::EnqueueResults>()->items()->size(), 1u);
  EXPECT_EQ(enqueued->result<p::EnqueueResults>()->items()->Get(0)->id()->str(), "m1");
  EXPECT_EQ(enqueued->result<p::EnqueueResults>()->items()->Get(0)->error(), nullptr);

  // What JSON wrote, TCP reads: the payload bytes and the metadata.
  auto over_tcp = client_->Get("q", "m1");
  ASSERT_TRUE(over_tcp.ok()) << over_tcp.error().ToString();
  const p::Message* m = over_tcp->result<p::GetResult>()->message();
  EXPECT_EQ(std::string(m->payload()->begin(), m->payload()->end()), "hi");
  ASSERT_EQ(m->metadata()->size(), 1u);
  EXPECT_EQ(m->metadata()->Get(0)->value()->str(), "acme");

  // And JSON reads it back.
  const std::string get =
      CallText(ws, R"({"request_id":8,"op_type":"Get","op":{"queue":"q","id":"m1"}})", &fb);
  EXPECT_NE(get.find("104"), std::string::npos) << get;
  EXPECT_NE(get.find("\"pending\""), std::string::npos) << get;
  auto got = client::Reply::FromServerMessage(fb);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->request_id(), 8u);
  EXPECT_EQ(got->result<p::GetResult>()->message()->id()->str(), "m1");

  // Errors are JSON too.
  const std::string missing =
      CallText(ws, R"({"request_id":9,"op_type":"Get","op":{"queue":"q","id":"nope"}})", &fb);
  EXPECT_NE(missing.find("NOT_FOUND"), std::string::npos) << missing;
  const ResponseView v = ViewResponse(fb);
  EXPECT_EQ(v.request_id, 9u);
  EXPECT_EQ(v.code, p::Code::NOT_FOUND);
}

TEST_F(WebSocket, MalformedJsonGetsAJsonErrorAndTheConnectionStaysUsable) {
  WsClient ws;
  ASSERT_NO_FATAL_FAILURE(Connect(ws));
  const std::vector<std::string> bad = {
      "{not json",
      "",
      R"({"request_id":9,"op_type":"Explode","op":{}})",                        // no such operation
      R"({"request_id":10,"bogus":1})",                                         // no such field
      R"({"request_id":"eleven"})",                                             // wrong type
      R"({"request_id":12,"op_type":"Enqueue","op":{"queue":)",                 // truncated
      R"({"request_id":13,"op_type":"Get","op":{"queue":"q","id":"\ud800"}})",  // lone surrogate
      R"({"request_id":15,"op_type":"Get","op":{"queue":"q\u00ff","id":"m"}})",  // bad name
  };
  for (const std::string& text : bad) {
    std::string fb;
    const std::string reply = CallText(ws, text, &fb);
    EXPECT_NE(reply.find("INVALID_ARGUMENT"), std::string::npos) << text << " -> " << reply;
    const ResponseView v = ViewResponse(fb);
    ASSERT_TRUE(v.valid) << reply;
    ASSERT_TRUE(v.has_error) << text;
    EXPECT_EQ(v.code, p::Code::INVALID_ARGUMENT) << v.message;
    EXPECT_FALSE(v.message.empty());
  }
  std::string fb;
  const std::string ok = CallText(ws, R"({"request_id":14,"op_type":"Health","op":{}})", &fb);
  const ResponseView v = ViewResponse(fb);
  EXPECT_EQ(v.request_id, 14u) << ok;
  EXPECT_FALSE(v.has_error) << ok;
  EXPECT_EQ(v.result_type, p::Result::HealthResult);

  // A text frame that is not UTF-8 breaks the WebSocket protocol itself (RFC 6455 8.1): that
  // connection is failed, the server goes on.
  ASSERT_FALSE(ws.SendText(std::string("{\"request_id\":16,\"q\":\"\xff\"}")));
  WsClient::error_code ec;
  EXPECT_FALSE(ws.Read(5'000, &ec).has_value());
  EXPECT_FALSE(WsClient::TimedOut(ec)) << "the connection must end, not hang";
  WsClient again;
  ASSERT_NO_FATAL_FAILURE(Connect(again));
  const ResponseView health = ViewResponse(CallBinary(again, client::BuildHealth(Hdr(17))));
  EXPECT_EQ(health.request_id, 17u);
  EXPECT_FALSE(health.has_error);
}

// A connection whose subscriptions overlap ("*", the queue, the queue with a filter) receives
// each event once; another connection subscribed to the same queue receives its own copy.
TEST_F(WebSocket, OverlappingSubscriptionsDeliverEachEventOncePerConnection) {
  WsClient ws;
  ASSERT_NO_FATAL_FAILURE(Connect(ws));
  ASSERT_NO_FATAL_FAILURE(Subscribe(ws, "*"));
  WsClient other;
  ASSERT_NO_FATAL_FAILURE(Connect(other));
  ASSERT_NO_FATAL_FAILURE(Subscribe(other, "q"));
  ASSERT_NO_FATAL_FAILURE(Subscribe(ws, "q"));
  ASSERT_NO_FATAL_FAILURE(Subscribe(ws, "q", {{"k", "v"}}));
  ASSERT_NO_FATAL_FAILURE(Put("q", "matches-all-three", {{"k", "v"}}));
  ASSERT_NO_FATAL_FAILURE(Put("q", "matches-two"));
  for (WsClient* c : {&ws, &other}) {
    const auto events = ReadEventsUntil(*c, [](const Event& e) { return e.id == "matches-two"; });
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0].id, "matches-all-three");
    EXPECT_EQ(events[1].id, "matches-two");
  }
}

TEST_F(WebSocket, SubscribeStreamsEveryTransition) {
  WsClient ws;
  ASSERT_NO_FATAL_FAILURE(Connect(ws));
  ASSERT_NO_FATAL_FAILURE(Subscribe(ws, "q"));
  ASSERT_NO_FATAL_FAILURE(Put("q", "m1"));
  ASSERT_NO_FATAL_FAILURE(TakeAndComplete("q", "m1"));
  ASSERT_NO_FATAL_FAILURE(Put("q", "m2"));
  ASSERT_TRUE(client_->Cancel("q", {"m2"}).ok());

  const auto events =
      ReadEventsUntil(ws, [](const Event& e) { return e.id == "m2" && e.cause == "canceled"; });
  ASSERT_EQ(events.size(), 5u);
  struct Want {
    const char* id;
    p::MessageState from;
    p::MessageState to;
    const char* cause;
  };
  const Want want[] = {
      {"m1", p::MessageState::pending, p::MessageState::pending, "enqueued"},
      {"m1", p::MessageState::pending, p::MessageState::running, "leased"},
      {"m1", p::MessageState::running, p::MessageState::completed, "completed"},
      {"m2", p::MessageState::pending, p::MessageState::pending, "enqueued"},
      {"m2", p::MessageState::pending, p::MessageState::canceled, "canceled"},
  };
  for (size_t i = 0; i < events.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i));
    EXPECT_EQ(events[i].queue, "q");
    EXPECT_EQ(events[i].id, want[i].id);
    EXPECT_EQ(events[i].from, want[i].from);
    EXPECT_EQ(events[i].to, want[i].to);
    EXPECT_EQ(events[i].cause, want[i].cause);
    EXPECT_GT(events[i].time, 0);
  }
  EXPECT_EQ(events[0].version, 1u);
  EXPECT_LT(events[0].version, events[1].version);
  EXPECT_LT(events[1].version, events[2].version);
  auto got = client_->Get("q", "m1");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(events[2].version, got->result<p::GetResult>()->message()->version())
      << "the last event carries the message's current version";
}

TEST_F(WebSocket, SubscribeWithAFilterGetsOnlyMatchingMessages) {
  WsClient filtered;
  ASSERT_NO_FATAL_FAILURE(Connect(filtered));
  ASSERT_NO_FATAL_FAILURE(Subscribe(filtered, "q", {{"tenant", "a"}}));
  WsClient everything;
  ASSERT_NO_FATAL_FAILURE(Connect(everything));
  ASSERT_NO_FATAL_FAILURE(Subscribe(everything, "*"));

  ASSERT_NO_FATAL_FAILURE(Put("q", "a1", {{"tenant", "a"}}));
  ASSERT_NO_FATAL_FAILURE(Put("q", "b1", {{"tenant", "b"}}));
  ASSERT_NO_FATAL_FAILURE(Put("q", "none"));
  ASSERT_NO_FATAL_FAILURE(Put("other", "x1", {{"tenant", "a"}}));  // another queue
  ASSERT_NO_FATAL_FAILURE(Put("q", "a2", {{"tenant", "a"}, {"extra", "1"}}));

  // Events reach each subscriber in the order they happened, so once a2's arrives, any event
  // of b1, none or x1 would have arrived before it.
  const auto only_a = ReadEventsUntil(filtered, [](const Event& e) { return e.id == "a2"; });
  std::vector<std::string> ids;
  for (const auto& e : only_a) ids.push_back(e.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a1", "a2"}));

  const auto all = ReadEventsUntil(everything, [](const Event& e) { return e.id == "a2"; });
  ids.clear();
  for (const auto& e : all) ids.push_back(e.queue + "/" + e.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"q/a1", "q/b1", "q/none", "other/x1", "q/a2"}));
}

// client::Watch (JSON text frames): a StatsTick within ~2 s, then the events of a message.
TEST_F(WebSocket, WatchGetsStatsTicksAndEvents) {
  ASSERT_NO_FATAL_FAILURE(Put("q", "before"));
  std::atomic<bool> ticked{false};
  std::atomic<int64_t> tick_ms{-1};
  std::atomic<uint64_t> tick_pending{0};
  std::atomic<bool> finished{false};  // the watcher saw w1 completed
  std::atomic<bool> stop{false};      // give up (a failure): the next event ends the watch
  std::vector<Event> events;          // of "w1", written by the watcher until it returns
  client::WatchOptions o;
  o.http = {"127.0.0.1", server_->http_port()};
  o.queue = "q";
  o.timeout_ms = 5'000;
  const auto start = Clock::now();
  client::Result<void> outcome;
  std::thread watcher([&] {
    outcome = client::Watch(o, [&](const p::EventMessage& em) {
      if (em.event_type() == p::Event::StatsTick && !ticked.load()) {
        tick_ms = MsSince(start);
        tick_pending = em.event_as_StatsTick()->stats()->messages()->pending();
        ticked = true;
      }
      if (em.event_type() == p::Event::MessageEvent) {
        const Event e = ToEvent(*em.event_as_MessageEvent());
        if (e.id == "w1") events.push_back(e);
        if (e.id == "w1" && e.cause == "completed") {
          finished = true;
          return false;
        }
      }
      return !stop.load();
    });
  });
  // The first tick shows the subscription is in place.
  const bool got_tick = Eventually([&] { return ticked.load(); }, 5'000);
  EXPECT_TRUE(got_tick);
  if (got_tick) {
    EXPECT_LT(tick_ms.load(), 2'500) << "stats ticks come every second";
    EXPECT_EQ(tick_pending.load(), 1u) << "the tick carries the server's counts";
    EXPECT_TRUE(client_->Cancel("q", {"before"}).ok());
    EXPECT_NO_FATAL_FAILURE(Put("q", "w1"));
    EXPECT_NO_FATAL_FAILURE(TakeAndComplete("q", "w1"));
    EXPECT_TRUE(Eventually([&] { return finished.load(); }, 5'000));
  }
  stop = true;  // a tick within a second ends the watch if it is still running
  watcher.join();
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  std::vector<std::string> causes;
  for (const auto& e : events) causes.push_back(e.cause);
  EXPECT_EQ(causes, (std::vector<std::string>{"enqueued", "leased", "completed"}));
}

TEST_F(WebSocket, SubscribeIsRefusedOverTcpAndWhenMalformed) {
  auto refused = client_->Call(client::BuildSubscribe(client_->NextHeader(), "q", {}));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Code::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("WebSocket"), std::string::npos)
      << refused.error().message;
  EXPECT_TRUE(client_->Health().ok()) << "the TCP connection stays usable";

  WsClient ws;
  ASSERT_NO_FATAL_FAILURE(Connect(ws));
  const ResponseView no_queue =
      ViewResponse(CallBinary(ws, client::BuildSubscribe(Hdr(2), "", {})));
  EXPECT_EQ(no_queue.request_id, 2u);
  EXPECT_EQ(no_queue.code, p::Code::INVALID_ARGUMENT) << no_queue.message;
  const ResponseView wide_filter = ViewResponse(CallBinary(
      ws, client::BuildSubscribe(Hdr(3), "q",
                                 {{"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", "4"}, {"e", "5"}})));
  EXPECT_EQ(wide_filter.request_id, 3u);
  EXPECT_EQ(wide_filter.code, p::Code::INVALID_ARGUMENT) << wide_filter.message;
  EXPECT_NE(wide_filter.message.find("filter"), std::string::npos);
  const ResponseView not_subscribed = ViewResponse(CallBinary(ws, [] {
    flatbuffers::FlatBufferBuilder b;
    auto op = p::CreateUnsubscribeDirect(b, "q");
    p::FinishRequestBuffer(
        b, p::CreateRequest(b, 4, p::Durability::durable, p::Operation::Unsubscribe, op.Union()));
    return client::FinishedBytes(b);
  }()));
  EXPECT_EQ(not_subscribed.request_id, 4u);
  EXPECT_EQ(not_subscribed.code, p::Code::NOT_FOUND) << not_subscribed.message;
}

// A subscriber that does not read while 150,000 messages are enqueued (more events than the
// kernel's socket buffers and the 10,000-event backlog hold together) is cut: once it reads
// again it finds the events up to the cut, then SubscriptionClosed with the reason, and no
// further events; the connection stays usable and a new Subscribe starts events anew. The
// enqueuer is never slowed to the subscriber's pace (its batches are all acknowledged).
TEST_F(WebSocket, ASubscriberThatFallsBehindIsCutWithAReasonAndCanSubscribeAgain) {
  WsClient ws;
  ASSERT_NO_FATAL_FAILURE(Connect(ws));
  ASSERT_NO_FATAL_FAILURE(Subscribe(ws, "flood"));
  constexpr int kBatches = 150;
  for (int b = 0; b < kBatches; ++b) {
    std::vector<client::EnqueueItem> items(1000);
    for (size_t i = 0; i < items.size(); ++i) {
      items[i].id = std::to_string(b) + "-" + std::to_string(i);
    }
    auto r = client_->Enqueue("flood", items);
    ASSERT_TRUE(r.ok()) << r.error().ToString();
  }

  int events = 0;
  std::string reason;
  while (reason.empty()) {
    auto m = ws.Read(10'000);
    ASSERT_TRUE(m.has_value()) << "after " << events << " events, no SubscriptionClosed";
    const p::ServerMessage* sm = AsServerMessage(m->data);
    ASSERT_NE(sm, nullptr);
    const p::EventMessage* em = sm->body_as_EventMessage();
    ASSERT_NE(em, nullptr) << "no request is in flight";
    if (em->event_type() == p::Event::MessageEvent) ++events;
    if (em->event_type() == p::Event::SubscriptionClosed) {
      reason = em->event_as_SubscriptionClosed()->reason()->str();
    }
  }
  std::printf("%d of %d events reached the subscriber before it was cut\n", events,
              kBatches * 1000);
  EXPECT_NE(reason.find("fell behind"), std::string::npos) << reason;
  EXPECT_GT(events, 0);
  EXPECT_LT(events, kBatches * 1000) << "the cut came after every event had been queued";

  // No more events for the old subscription; the connection answers; subscribing again works.
  Put("flood", "after-the-cut");
  ASSERT_FALSE(ws.SendBinary(client::BuildSubscribe(Hdr(2), "flood", {})));
  auto reply = ws.Read();
  ASSERT_TRUE(reply.has_value());
  const ResponseView v = ViewResponse(reply->data);
  ASSERT_TRUE(v.valid) << "an event came after SubscriptionClosed";
  EXPECT_EQ(v.request_id, 2u);
  EXPECT_FALSE(v.has_error) << v.message;
  Put("flood", "after-subscribing-again");
  const auto again = ReadEventsUntil(ws, [](const Event&) { return true; });
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id, "after-subscribing-again");
  EXPECT_EQ(again[0].cause, "enqueued");
}

}  // namespace
}  // namespace sundial::e2e
