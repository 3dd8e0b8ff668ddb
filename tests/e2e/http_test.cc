// The HTTP side of a real sundiald (docs/operations.md, the server issue's metrics item): /healthz,
// /readyz, the index page, 404 and 405, and /metrics reflecting what the server did
// (operations by op and code, messages per queue and state, request and fsync histograms,
// connections by transport, lease expirations).
#include <gtest/gtest.h>

#include "client/client.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_test.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;
using client::Client;

class Http : public ServerTest {
 protected:
  std::string Metrics() {
    const HttpReply r = HttpGet(server_->http_port(), "/metrics");
    EXPECT_EQ(r.status, 200);
    return r.body;
  }

  // The series' value, failing the test when it is absent.
  double Metric(const std::string& text, const std::string& series) {
    const auto v = MetricValue(text, series);
    EXPECT_TRUE(v.has_value()) << series << " is missing from /metrics:\n" << text;
    return v.value_or(-1);
  }

  uint64_t Pending(const std::string& queue) {
    auto c = client_->Count(queue);
    EXPECT_TRUE(c.ok()) << c.error().ToString();
    return c.ok() ? c->result<p::CountResult>()->counts()->pending() : 0;
  }
};

TEST_F(Http, HealthReadinessAndPages) {
  const uint16_t port = server_->http_port();
  const HttpReply health = HttpGet(port, "/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "ok\n");
  const HttpReply ready = HttpGet(port, "/readyz");
  EXPECT_EQ(ready.status, 200) << ready.body;
  const HttpReply index = HttpGet(port, "/");
  EXPECT_EQ(index.status, 200);
  EXPECT_NE(index.Header("Content-Type").find("text/html"), std::string::npos) << index.head;
  EXPECT_NE(index.body.find("<html"), std::string::npos);
  EXPECT_EQ(HttpGet(port, "/healthz?verbose=1").status, 200) << "a query string is ignored";

  EXPECT_EQ(HttpGet(port, "/no-such-page").status, 404);
  EXPECT_EQ(HttpGet(port, "/metricsx").status, 404);
  EXPECT_EQ(HttpRequest(port, "POST", "/healthz", "Content-Length: 2\r\n", "{}").status, 405);
  EXPECT_EQ(HttpRequest(port, "DELETE", "/metrics").status, 405);
  EXPECT_EQ(HttpRequest(port, "PUT", "/").status, 405);
  EXPECT_EQ(HttpGet(port, "/ws").status, 400) << "/ws without an upgrade";
  const HttpReply head = HttpRequest(port, "HEAD", "/healthz");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());

  // Garbage instead of HTTP: the connection is closed, the server answers the next one.
  RawConn garbage(port);
  ASSERT_TRUE(garbage.Send("\x16\x03\x01\x02\x00 not http at all\r\n\r\n"));
  EXPECT_TRUE(garbage.WaitClosed(5'000));
  EXPECT_EQ(HttpGet(port, "/healthz").status, 200);
}

TEST_F(Http, MetricsReflectOperations) {
  ASSERT_TRUE(client_->Health().ok());  // the server has accepted the client's connection
  const std::string before = Metrics();
  EXPECT_NE(before.find("# TYPE sundial_build_info gauge"), std::string::npos);
  EXPECT_NE(before.find("sundial_build_info{version=\""), std::string::npos) << before;
  EXPECT_GE(Metric(before, R"(sundial_connections{transport="tcp"})"), 1)
      << "the test's client is connected";

  constexpr int kEnqueues = 7;
  for (int i = 0; i < kEnqueues; ++i) {
    client::EnqueueItem item;
    item.id = "m" + std::to_string(i);
    auto r = client_->Enqueue("q", {item});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
  }
  client::DequeueOptions two;
  two.max = 2;
  auto leased = client_->Dequeue("q", two);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->result<p::DequeueResult>()->messages()->size(), 2u);
  auto missing = client_->Get("q", "nope");
  ASSERT_FALSE(missing.ok());

  const std::string text = Metrics();
  EXPECT_GE(Metric(text, R"(sundial_operations_total{op="enqueue",code="OK"})"), kEnqueues);
  EXPECT_GE(Metric(text, R"(sundial_operations_total{op="dequeue",code="OK"})"), 1);
  EXPECT_GE(Metric(text, R"(sundial_operations_total{op="get",code="NOT_FOUND"})"), 1);
  // Messages per state equal what the engine counts.
  auto counts = client_->Count("q");
  ASSERT_TRUE(counts.ok());
  const auto* c = counts->result<p::CountResult>()->counts();
  EXPECT_EQ(c->pending(), 5u);
  EXPECT_EQ(Metric(text, R"(sundial_messages{queue="q",state="pending"})"), c->pending());
  EXPECT_EQ(Metric(text, R"(sundial_messages{queue="q",state="running"})"), c->running());
  EXPECT_EQ(Metric(text, R"(sundial_messages{queue="q",state="completed"})"), 0);
  // The request histogram has the enqueues in its +Inf bucket and count.
  EXPECT_GE(Metric(text, R"(sundial_request_duration_seconds_bucket{op="enqueue",le="+Inf"})"),
            kEnqueues);
  EXPECT_GE(Metric(text, R"(sundial_request_duration_seconds_count{op="enqueue"})"), kEnqueues);
  EXPECT_NE(text.find(R"(sundial_request_duration_seconds_bucket{op="enqueue",le="0.)"),
            std::string::npos)
      << "finite buckets in seconds";
  // Every durable enqueue waited for an fsync.
  EXPECT_GT(Metric(text, "sundial_wal_fsync_duration_seconds_count"), 0);
  EXPECT_GT(Metric(text, "sundial_wal_bytes_total"), 0);
  EXPECT_GE(Metric(text, R"(sundial_oldest_pending_age_seconds{queue="q"})"), 0);
  EXPECT_GT(Metric(text, "sundial_memory_bytes"), 0);
  EXPECT_GE(Metric(text, R"(sundial_connections{transport="tcp"})"), 1);

  // The connection gauge follows clients coming and going.
  const double tcp_before = Metric(text, R"(sundial_connections{transport="tcp"})");
  auto second = Client::Connect({"127.0.0.1", server_->port()});
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE((*second)->Health().ok());
  EXPECT_EQ(Metric(Metrics(), R"(sundial_connections{transport="tcp"})"), tcp_before + 1);
  second->reset();
  EXPECT_TRUE(Eventually([&] {
    return MetricValue(Metrics(), R"(sundial_connections{transport="tcp"})") == tcp_before;
  }));
  WsClient ws;
  ASSERT_FALSE(ws.Connect(server_->http_port()));
  EXPECT_TRUE(Eventually([&] {
    return MetricValue(Metrics(), R"(sundial_connections{transport="websocket"})") == 1;
  }));
}

TEST_F(Http, LeaseExpirationsAreCounted) {
  client::QueueSettings s;
  s.lease_ms = 50;
  ASSERT_TRUE(client_->CreateQueue("q", s).ok());
  client::EnqueueItem item;
  item.id = "slow-worker";
  ASSERT_TRUE(client_->Enqueue("q", {item}).ok());
  auto leased = client_->Dequeue("q", {});
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->result<p::DequeueResult>()->messages()->size(), 1u);
  EXPECT_EQ(Pending("q"), 0u);
  // Never completed: the lease runs out and the message is pending again.
  ASSERT_TRUE(Eventually([&] { return Pending("q") == 1; }, 5'000));
  const std::string text = Metrics();
  EXPECT_GE(Metric(text, R"(sundial_lease_expirations_total{queue="q"})"), 1);
  EXPECT_EQ(Metric(text, R"(sundial_messages{queue="q",state="pending"})"), 1);
  EXPECT_EQ(Metric(text, R"(sundial_messages{queue="q",state="running"})"), 0);
}

}  // namespace
}  // namespace sundial::e2e
