// The HTTP JSON API (docs/http-api.md) against a real sundiald: REST and operation routes over
// one keep-alive connection, each typed error's status, auth, the body limit, a long poll that a
// later enqueue answers while other connections are served, and durability (an acknowledged
// enqueue survives kill -9).
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_process.h"

namespace sundial::e2e {
namespace {

// HTTP/1.1 over one keep-alive connection: each reply read by its Content-Length.
class KeepAlive {
 public:
  explicit KeepAlive(uint16_t port) : conn_(port) {}
  bool ok() const { return conn_.ok(); }

  bool SendRequest(std::string_view method, std::string_view target, std::string_view body = "",
                   std::string_view headers = "") {
    std::string req = std::string(method) + " " + std::string(target) +
                      " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                      std::string(headers) + "Content-Length: " + std::to_string(body.size()) +
                      "\r\n\r\n" + std::string(body);
    return conn_.Send(req);
  }

  // The next reply, or status 0 when none is complete within `timeout_ms`.
  HttpReply Read(int timeout_ms = 5'000) {
    HttpReply reply;
    const auto deadline = Clock::now() + Millis(timeout_ms);
    while (true) {
      const std::string& in = conn_.buffered();
      const auto end = in.find("\r\n\r\n", pos_);
      if (end != std::string::npos) {
        reply.head = in.substr(pos_, end - pos_);
        reply.status = std::atoi(in.c_str() + pos_ + 9);
        const size_t length = std::stoul("0" + reply.Header("Content-Length"));
        if (in.size() >= end + 4 + length) {
          reply.body = in.substr(end + 4, length);
          pos_ = end + 4 + length;
          return reply;
        }
      }
      const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
      if (left <= 0 || conn_.ReadSome(static_cast<int>(left)) == RawConn::ReadStatus::kClosed) {
        return {};
      }
    }
  }

  HttpReply Call(std::string_view method, std::string_view target, std::string_view body = "",
                 std::string_view headers = "") {
    if (!SendRequest(method, target, body, headers)) return {};
    return Read();
  }

  RawConn& conn() { return conn_; }

 private:
  RawConn conn_;
  size_t pos_ = 0;
};

// The value of a string or number member in a flat JSON text ("" when absent).
std::string Member(const std::string& json, const std::string& name) {
  const std::string key = "\"" + name + "\":";
  auto at = json.find(key);
  if (at == std::string::npos) return "";
  at += key.size();
  while (json[at] == ' ') ++at;
  if (json[at] == '"') return json.substr(at + 1, json.find('"', at + 1) - at - 1);
  return json.substr(at, json.find_first_of(",}", at) - at);
}

class HttpApiE2e : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags = {}) {
    server_ = std::make_unique<ServerProcess>(dir_.path() + "/data", std::move(flags));
    ASSERT_TRUE(server_->Start()) << server_->log();
  }
  void SetUp() override { Start(); }
  uint16_t port() const { return server_->http_port(); }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(HttpApiE2e, EnqueueDequeueCompleteOverOneKeepAliveConnection) {
  KeepAlive c(port());
  ASSERT_TRUE(c.ok());
  HttpReply r = c.Call("POST", "/v1/queues/jobs/messages",
                       R"({"id":"m1","payload":"hello","metadata":{"tenant":"a"}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Header("Content-Type"), "application/json");
  EXPECT_EQ(Member(r.body, "id"), "m1");

  r = c.Call("POST", "/v1/queues/jobs/dequeue", R"({"max":5})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find(R"("payload":"hello")"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(R"("metadata":{"tenant":"a"})"), std::string::npos) << r.body;
  const std::string token = Member(r.body, "lease_token");
  ASSERT_FALSE(token.empty());

  r = c.Call("POST", "/v1/queues/jobs/messages/m1/extend",
             R"({"lease_ms":60000,"lease_token":")" + token + "\"}");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("lease_expires_at"), std::string::npos) << r.body;

  r = c.Call("POST", "/v1/queues/jobs/messages/m1/complete",
             R"({"result":{"base64":"AP8="},"lease_token":)" + token + "}");
  EXPECT_EQ(r.status, 200) << r.body;

  r = c.Call("GET", "/v1/queues/jobs/messages/m1");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Member(r.body, "state"), "completed");
  EXPECT_NE(r.body.find(R"("result":{"base64":"AP8="})"), std::string::npos) << r.body;

  r = c.Call("GET", "/v1/queues/jobs");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Member(r.body, "name"), "jobs");

  // The operation form: the body of a WebSocket text frame.
  r = c.Call("POST", "/v1/Enqueue", R"({"queue":"jobs","items":[{"id":"m2"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find(R"("result_type": "EnqueueResults")"), std::string::npos) << r.body;
  r = c.Call("POST", "/v1/Count", R"({"request_id":5,"op_type":"Count","op":{"queue":"jobs"}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find(R"("request_id": 5)"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(R"("pending": 1)"), std::string::npos) << r.body;

  // A failed message goes back with its error.
  r = c.Call("POST", "/v1/queues/jobs/dequeue", "");
  ASSERT_EQ(r.status, 200) << r.body;
  r = c.Call("POST", "/v1/queues/jobs/messages/m2/fail",
             R"({"error":"boom","lease_token":)" + Member(r.body, "lease_token") + "}");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find(R"("visible_at":)"), std::string::npos) << r.body;
}

TEST_F(HttpApiE2e, FlowKeyAndKeyConcurrencyAreSettingsInTheJson) {
  KeepAlive c(port());
  HttpReply r = c.Call("POST", "/v1/CreateQueue",
                       R"({"name":"keyed","settings":{"flow_key":"tenant","key_concurrency":4}})");
  ASSERT_EQ(r.status, 200) << r.body;
  r = c.Call("GET", "/v1/queues/keyed");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Member(r.body, "flow_key"), "tenant") << r.body;
  EXPECT_EQ(Member(r.body, "key_concurrency"), "4") << r.body;
  r = c.Call("POST", "/v1/UpdateQueue", R"({"name":"keyed","update":{"key_concurrency":1}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Member(r.body, "key_concurrency"), "1") << r.body;
  r = c.Call("POST", "/v1/CreateQueue", R"({"name":"bad","settings":{"key_concurrency":1}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Member(r.body, "message"), "key_concurrency: needs a flow_key") << r.body;
  // Rates, fair share and one value's limits are JSON like the rest.
  r = c.Call("POST", "/v1/UpdateQueue",
             R"({"name":"keyed","update":{"key_rate_per_s":2.5,"fairness":"weighted"}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Member(r.body, "fairness"), "weighted") << r.body;
  r = c.Call("POST", "/v1/SetKeyLimits",
             R"({"queue":"keyed","value":"acme","limits":{"weight":3}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Member(r.body, "weight"), "3") << r.body;
  // A bad enum in the op's table is reported as such, not as the first field of a Request.
  r = c.Call("POST", "/v1/ListKeys", R"({"queue":"keyed","order":"loudest"})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body.find("unknown field: queue"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("loudest"), std::string::npos) << r.body;
}

TEST_F(HttpApiE2e, TypedErrorsAndRoutingErrorsHaveTheirStatuses) {
  KeepAlive c(port());
  HttpReply r = c.Call("GET", "/v1/queues/nope/messages/x");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(Member(r.body, "code"), "NOT_FOUND") << r.body;

  ASSERT_EQ(c.Call("POST", "/v1/CreateQueue", R"({"name":"once"})").status, 200);
  r = c.Call("POST", "/v1/CreateQueue", R"({"name":"once","settings":{"max_attempts":2}})");
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(Member(r.body, "code"), "ALREADY_EXISTS");

  ASSERT_EQ(c.Call("POST", "/v1/queues/once/messages", R"({"id":"a"})").status, 200);
  ASSERT_EQ(c.Call("POST", "/v1/queues/once/dequeue").status, 200);
  r = c.Call("POST", "/v1/queues/once/messages/a/complete", R"({"lease_token":1})");
  EXPECT_EQ(r.status, 412) << r.body;
  EXPECT_EQ(Member(r.body, "code"), "FAILED_PRECONDITION");

  ASSERT_EQ(
      c.Call("POST", "/v1/CreateQueue", R"({"name":"tiny","settings":{"max_depth":1}})").status,
      200);
  ASSERT_EQ(c.Call("POST", "/v1/queues/tiny/messages", "{}").status, 200);
  r = c.Call("POST", "/v1/queues/tiny/messages", "{}");
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(Member(r.body, "code"), "RESOURCE_EXHAUSTED");

  r = c.Call("POST", "/v1/queues/q/messages", R"({"payload":)");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Member(r.body, "code"), "INVALID_ARGUMENT");
  r = c.Call("PUT", "/v1/queues/q");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.Header("Allow"), "GET");
  r = c.Call("POST", "/v1/NoSuchOperation");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Member(r.body, "code"), "NOT_FOUND");
  // The connection survived every error.
  EXPECT_EQ(c.Call("POST", "/v1/Health").status, 200);
}

TEST_F(HttpApiE2e, TheDocumentIsServed) {
  const HttpReply r = HttpGet(port(), "/v1/openapi.json");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body.rfind(R"({"openapi":"3.1.)", 0), 0u) << r.body.substr(0, 100);
  EXPECT_NE(r.body.find(R"("/v1/Enqueue")"), std::string::npos);
}

TEST_F(HttpApiE2e, ALongPollIsAnsweredByALaterEnqueueWhileOthersAreServed) {
  KeepAlive waiter(port());
  ASSERT_TRUE(waiter.SendRequest("POST", "/v1/queues/later/dequeue", R"({"wait_ms":30000})"));
  // The waiter has no reply yet, and another connection is served meanwhile.
  EXPECT_EQ(waiter.Read(200).status, 0);
  KeepAlive other(port());
  EXPECT_EQ(other.Call("GET", "/v1/queues/later/messages/none").status, 404);
  ASSERT_EQ(other.Call("POST", "/v1/queues/later/messages", R"({"id":"w1","payload":"x"})").status,
            200);
  const HttpReply r = waiter.Read(10'000);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(Member(r.body, "id"), "w1") << r.body;
  // And a poll that runs out answers an empty list.
  const HttpReply empty = waiter.Call("POST", "/v1/queues/later/dequeue", R"({"wait_ms":50})");
  EXPECT_EQ(empty.status, 200);
  EXPECT_EQ(empty.body, R"({"messages":[]})");
}

// Regression: a long poll whose client hung up stayed registered and leased the next message
// for nobody (it came back only when its lease ran out).
TEST_F(HttpApiE2e, AClientThatHangsUpDuringALongPollLeasesNothing) {
  {
    KeepAlive gone(port());
    ASSERT_TRUE(gone.SendRequest("POST", "/v1/queues/hangup/dequeue", R"({"wait_ms":30000})"));
    EXPECT_EQ(gone.Read(100).status, 0) << "waiting";
  }  // closed
  // The server noticed: only the connection asking for /metrics is left.
  EXPECT_TRUE(Eventually([&] {
    const HttpReply m = HttpGet(port(), "/metrics");
    return MetricValue(m.body, R"(sundial_connections{transport="http"})") == 1;
  }));
  KeepAlive c(port());
  ASSERT_EQ(c.Call("POST", "/v1/queues/hangup/messages", R"({"id":"kept"})").status, 200);
  const HttpReply r = c.Call("POST", "/v1/queues/hangup/dequeue");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(Member(r.body, "id"), "kept") << r.body;
}

TEST_F(HttpApiE2e, BodiesOverMaxFrameBytesAre413) {
  server_->Kill();
  Start({"--max-frame-bytes", "1024"});
  const std::string big(2000, 'x');
  KeepAlive c(port());
  const HttpReply r = c.Call("POST", "/v1/queues/q/messages", R"({"payload":")" + big + "\"}");
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_EQ(Member(r.body, "code"), "INVALID_ARGUMENT");
  EXPECT_TRUE(c.conn().WaitClosed(5'000)) << "the rest of the body is not read: closed";
  EXPECT_EQ(HttpRequest(port(), "POST", "/v1/queues/q/messages", "Content-Length: 15\r\n",
                        R"({"payload":"x"})")
                .status,
            200);
}

TEST_F(HttpApiE2e, WithATokenRequestsNeedTheBearerHeader) {
  server_->Kill();
  const std::string token_file = dir_.path() + "/token";
  std::ofstream(token_file) << "s3cret\n";
  Start({"--auth-token-file", token_file});
  KeepAlive c(port());
  HttpReply r = c.Call("POST", "/v1/Health");
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_EQ(r.Header("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(Member(r.body, "code"), "UNAUTHENTICATED");
  EXPECT_EQ(c.Call("GET", "/v1/queues/q", "", "Authorization: Bearer wrong\r\n").status, 401);
  r = c.Call("POST", "/v1/Health", "", "Authorization: Bearer s3cret\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(HttpApiE2e, AnAcknowledgedEnqueueSurvivesKill9) {
  KeepAlive c(port());
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(c.Call("POST", "/v1/queues/d/messages",
                     R"({"id":"k)" + std::to_string(i) + R"(","payload":"p"})")
                  .status,
              200);
  }
  server_->Kill();  // SIGKILL: only what was synced survives
  ASSERT_TRUE(server_->Start()) << server_->log();
  KeepAlive after(port());
  for (int i = 0; i < 20; ++i) {
    const HttpReply r = after.Call("GET", "/v1/queues/d/messages/k" + std::to_string(i));
    EXPECT_EQ(r.status, 200) << i << " " << r.body;
  }
}

}  // namespace
}  // namespace sundial::e2e
