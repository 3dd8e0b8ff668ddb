// sundiald's threads at once, for the ThreadSanitizer build (label "concurrency"; the release
// and ASan builds run it too): blocking workers enqueue, dequeue and complete on one queue,
// pipelined long polls wait on another while a producer feeds it, a WebSocket subscriber
// receives every event, /metrics is scraped throughout, and a SIGTERM with long polls still
// waiting ends it. Three io threads, so connections sit on different loops: commits hand off
// between them (leader and followers), a long poll is served by the producer's loop and
// answered on its own, events cross to the subscriber's loop. Under --fsync=always and
// interval (the syncer thread). The server inherits TSAN_OPTIONS (halt_on_error=1), so a data
// race in sundiald makes it exit non-zero with the report in its log.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_process.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;
using client::AsyncClient;
using client::Client;

client::EnqueueItem Item(std::string id) {
  client::EnqueueItem item;
  item.id = std::move(id);
  item.payload = std::string(100, 'p');
  return item;
}

void WorkersLongPollsSubscriberAndScrapesThenDrain(std::vector<std::string> flags) {
  constexpr int kWorkers = 3;
  constexpr int kPerWorker = 60;
  constexpr int kPolled = 60;
  TempDir dir;
  ServerProcess server(dir.path() + "/data", flags);
  ASSERT_TRUE(server.Start()) << server.log();

  // The subscriber: every event of every queue.
  WsClient ws;
  ASSERT_FALSE(ws.Connect(server.http_port())) << server.log();
  ASSERT_FALSE(ws.SendBinary(client::BuildSubscribe(Hdr(1), "*", {})));
  bool subscribed = false;
  while (!subscribed) {
    auto m = ws.Read(10'000);
    ASSERT_TRUE(m.has_value()) << server.log();
    const p::ServerMessage* sm = AsServerMessage(m->data);
    ASSERT_NE(sm, nullptr);
    subscribed = sm->body_as_Response() != nullptr;
  }

  // Long polls: each answered poll is followed by the next until kPolled messages arrive.
  auto poller = AsyncClient::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(poller.ok()) << poller.error().ToString();
  std::mutex mu;
  std::set<std::string> polled;
  std::vector<client::CompleteItem> to_complete;
  std::atomic<int> polls_failed{0};
  std::function<void()> poll = [&] {
    client::DequeueOptions o;
    o.max = 4;
    o.wait_ms = 10'000;
    (*poller)->Send(client::BuildDequeue(Hdr((*poller)->NextRequestId()), "lp", o),
                    [&](client::Result<client::Reply> r) {
                      if (!r.ok()) return void(polls_failed.fetch_add(1));
                      bool again = false;
                      {
                        std::lock_guard lock(mu);
                        const auto* got = r->result<p::DequeueResult>()->messages();
                        for (const auto* msg : *got) {
                          polled.insert(msg->id()->str());
                          to_complete.push_back({msg->id()->str(), msg->lease_token()});
                        }
                        again = polled.size() < static_cast<size_t>(kPolled);
                      }
                      if (again) poll();
                    });
  };
  for (int i = 0; i < 3; ++i) poll();  // three waiting at once

  std::atomic<bool> done{false};
  std::atomic<int> scrapes{0};
  std::thread scraper([&] {
    while (!done.load()) {
      if (HttpGet(server.http_port(), "/metrics").status == 200) scrapes.fetch_add(1);
    }
  });
  std::thread producer([&] {
    auto c = Client::Connect({"127.0.0.1", server.port()});
    ASSERT_TRUE(c.ok());
    for (int i = 0; i < kPolled; ++i) {
      ASSERT_TRUE((*c)->Enqueue("lp", {Item("lp-" + std::to_string(i))}).ok());
    }
  });
  std::vector<std::thread> workers;
  std::atomic<int> completed{0};
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      auto c = Client::Connect({"127.0.0.1", server.port()});
      ASSERT_TRUE(c.ok());
      for (int i = 0; i < kPerWorker; ++i) {
        ASSERT_TRUE(
            (*c)->Enqueue("work", {Item(std::to_string(w) + "-" + std::to_string(i))}).ok());
        client::DequeueOptions o;
        o.lease_ms = 60'000;
        auto got = (*c)->Dequeue("work", o);
        ASSERT_TRUE(got.ok()) << got.error().ToString();
        const auto* messages = got->result<p::DequeueResult>()->messages();
        ASSERT_EQ(messages->size(), 1u);  // each worker enqueued one before
        auto ok = (*c)->Complete(
            "work", {{messages->Get(0)->id()->str(), messages->Get(0)->lease_token()}});
        ASSERT_TRUE(ok.ok()) << ok.error().ToString();
        ASSERT_EQ(ok->result<p::ItemResults>()->items()->Get(0)->code(), p::Code::OK);
        completed.fetch_add(1);
      }
    });
  }
  for (auto& t : workers) t.join();
  producer.join();
  ASSERT_TRUE(Eventually(
      [&] {
        std::lock_guard lock(mu);
        return polled.size() == static_cast<size_t>(kPolled);
      },
      30'000))
      << server.log();
  done = true;
  scraper.join();
  EXPECT_EQ(completed.load(), kWorkers * kPerWorker);
  EXPECT_EQ(polls_failed.load(), 0);
  EXPECT_GT(scrapes.load(), 0);

  auto c = Client::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(c.ok());
  {
    std::lock_guard lock(mu);
    auto ok = (*c)->Complete("lp", to_complete);
    ASSERT_TRUE(ok.ok()) << ok.error().ToString();
  }
  auto counts = (*c)->Count("work");
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->result<p::CountResult>()->counts()->completed(),
            static_cast<uint64_t>(kWorkers * kPerWorker));

  // Every change reached the subscriber: enqueued, leased and completed for each message.
  const int expected = 3 * (kWorkers * kPerWorker + kPolled);
  int events = 0;
  while (events < expected) {
    auto m = ws.Read(10'000);
    ASSERT_TRUE(m.has_value()) << events << " of " << expected << " events\n" << server.log();
    const p::ServerMessage* sm = AsServerMessage(m->data);
    ASSERT_NE(sm, nullptr);
    const auto* event = sm->body_as_EventMessage();
    if (event != nullptr && event->event_as_MessageEvent() != nullptr) ++events;
  }
  EXPECT_EQ(events, expected);

  // Drain with long polls waiting: they are answered (empty) and the server exits cleanly.
  std::atomic<int> drained{0};
  for (int i = 0; i < 2; ++i) {
    client::DequeueOptions o;
    o.wait_ms = 30'000;
    (*poller)->Send(client::BuildDequeue(Hdr((*poller)->NextRequestId()), "empty", o),
                    [&](client::Result<client::Reply>) { drained.fetch_add(1); });
  }
  // A Health behind them on the same connection is answered at once, so they have been read.
  std::atomic<bool> healthy{false};
  (*poller)->Send(client::BuildHealth(Hdr((*poller)->NextRequestId())),
                  [&](client::Result<client::Reply> r) { healthy = r.ok(); });
  ASSERT_TRUE(Eventually([&] { return healthy.load(); }));
  // The subscriber reads on, answering the server's close (going away).
  std::thread subscriber([&] {
    while (ws.Read(30'000).has_value()) {
    }
  });
  EXPECT_EQ(server.Terminate(), 0) << server.log();
  subscriber.join();
  EXPECT_EQ(server.log().find("ThreadSanitizer"), std::string::npos) << server.log();
  (*poller)->Close();
  EXPECT_EQ(drained.load(), 2);
}

TEST(ServerConcurrency, WorkersLongPollsSubscriberAndScrapesThenDrain) {
  WorkersLongPollsSubscriberAndScrapesThenDrain({"--io-threads", "3"});
}

TEST(ServerConcurrency, TheSameUnderIntervalFsync) {
  WorkersLongPollsSubscriberAndScrapesThenDrain({"--io-threads", "3", "--fsync", "interval:5"});
}

// Dashboards while workers run (docs/dashboard.md): JSON WebSocket pages with the per-queue
// tick (totals counted on every shard's thread, the tick's JSON printed once and shared across
// io threads), sampled and id subscriptions, until every page's tick shows the work done.
TEST(ServerConcurrency, DashboardsSeeEveryQueueWhileWorkersRun) {
  constexpr int kWorkers = 3;
  constexpr int kPerWorker = 40;
  TempDir dir;
  // Three loops: the pages, the workers and the timer thread's ticks on different threads.
  ServerProcess server(dir.path() + "/data", {"--io-threads", "3"});
  ASSERT_TRUE(server.Start()) << server.log();
  std::vector<std::unique_ptr<WsClient>> pages;
  for (int i = 0; i < 3; ++i) {
    auto ws = std::make_unique<WsClient>();
    ASSERT_FALSE(ws->Connect(server.http_port())) << server.log();
    ASSERT_FALSE(ws->SendText(
        R"({"request_id":1,"op_type":"Subscribe","op":{"queue":"*","queue_stats":true,)"
        R"("max_events_per_sec":0}})"));
    ASSERT_FALSE(ws->SendText(
        R"({"request_id":2,"op_type":"Subscribe","op":{"queue":"w0","max_events_per_sec":5}})"));
    ASSERT_FALSE(ws->SendText(
        R"({"request_id":3,"op_type":"Subscribe","op":{"queue":"w1","ids":["1-3"]}})"));
    pages.push_back(std::move(ws));
  }
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      auto c = Client::Connect({"127.0.0.1", server.port()});
      ASSERT_TRUE(c.ok());
      const std::string queue = "w" + std::to_string(w);
      for (int i = 0; i < kPerWorker; ++i) {
        ASSERT_TRUE((*c)->Enqueue(queue, {Item(std::to_string(w) + "-" + std::to_string(i))}).ok());
        auto got = (*c)->Dequeue(queue, {});
        ASSERT_TRUE(got.ok());
        const auto* m = got->result<p::DequeueResult>()->messages()->Get(0);
        ASSERT_TRUE((*c)->Complete(queue, {{m->id()->str(), m->lease_token()}}).ok());
      }
    });
  }
  for (auto& t : workers) t.join();
  // Each page reads until a tick says every worker's queue completed all its messages: in each
  // queue's figures, its count of completed messages and its total of completes.
  const std::string done = "\"completed\": " + std::to_string(kPerWorker);
  for (auto& ws : pages) {
    const auto deadline = Clock::now() + Millis(30'000);
    size_t n = 0;
    while (n != 2 * kWorkers) {
      ASSERT_LT(Clock::now(), deadline) << "no tick showed the work done\n" << server.log();
      auto m = ws->Read(10'000);
      ASSERT_TRUE(m.has_value()) << server.log();
      if (m->data.find("\"StatsTick\"") == std::string::npos) continue;
      n = 0;
      for (size_t at = m->data.find(done); at != std::string::npos;
           at = m->data.find(done, at + 1)) {
        n += !std::isdigit(static_cast<unsigned char>(m->data[at + done.size()]));
      }
    }
  }
  EXPECT_EQ(server.Terminate(), 0) << server.log();
  EXPECT_EQ(server.log().find("ThreadSanitizer"), std::string::npos) << server.log();
}

}  // namespace
}  // namespace sundial::e2e
