// The dashboard's server side on a real sundiald (docs/dashboard.md): the page and its assets
// over HTTP (CSP, ETag, gzip), --dashboard off, the browser sign-in (a wrong token waits and
// says nothing more; the session cookie opens /ws; sign-out closes it), read-only pages refused
// actions, and what a page subscribes to: per-queue figures in the stats tick with no message
// events, a sample of at most N events a second, and the events of chosen ids.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_process.h"

namespace sundial::e2e {
namespace {

namespace json = boost::json;

class Dashboard : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags = {}) {
    server_ = std::make_unique<ServerProcess>(dir_.path() + "/data", std::move(flags));
    ASSERT_TRUE(server_->Start()) << server_->log();
  }

  std::string WriteToken(const std::string& token) {
    const std::string path = dir_.path() + "/token";
    std::ofstream(path) << token << "\n";
    return path;
  }

  uint16_t http() const { return server_->http_port(); }

  void Connect(WsClient& ws, std::vector<std::pair<std::string, std::string>> headers = {}) {
    const auto ec = ws.Connect(http(), std::move(headers));
    ASSERT_FALSE(ec) << ec.message() << " (HTTP " << ws.status() << ")";
  }

  // Sends a JSON request and returns its Response's body, keeping the events read meanwhile.
  json::object Call(WsClient& ws, const std::string& op_type, const std::string& op_json) {
    const uint64_t id = ++next_id_;
    EXPECT_FALSE(ws.SendText("{\"request_id\":" + std::to_string(id) + ",\"op_type\":\"" + op_type +
                             "\",\"op\":" + op_json + "}"));
    while (true) {
      auto m = ws.Read(10'000);
      if (!m.has_value()) {
        ADD_FAILURE() << "no reply to " << op_type;
        return {};
      }
      json::object msg = json::parse(m->data).as_object();
      json::object& body = msg["body"].as_object();
      if (msg["body_type"] == "EventMessage") {
        events_.push_back(body);
        continue;
      }
      if (body.contains("request_id") && body["request_id"].to_number<uint64_t>() == id) {
        return body;
      }
    }
  }

  // Reads messages until `done` holds for the events read so far (or 10 s pass).
  bool ReadUntil(WsClient& ws, const std::function<bool()>& done) {
    const auto deadline = Clock::now() + Millis(10'000);
    while (!done()) {
      const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      // One read for the time left: a read that times out closes the connection (WsClient),
      // so a shorter one would lose every later message, such as a tick due a moment after.
      auto m = ws.Read(static_cast<int>(left));
      if (!m.has_value()) return false;
      json::object msg = json::parse(m->data).as_object();
      if (msg["body_type"] == "EventMessage") events_.push_back(msg["body"].as_object());
    }
    return true;
  }

  size_t Count(const std::string& event_type) const {
    size_t n = 0;
    for (const auto& e : events_) n += e.at("event_type") == event_type.c_str();
    return n;
  }

  std::vector<json::object> MessageEvents() const {
    std::vector<json::object> out;
    for (const auto& e : events_) {
      if (e.at("event_type") == "MessageEvent") out.push_back(e.at("event").as_object());
    }
    return out;
  }

  // The `queues` of the last tick that had them, by name.
  std::map<std::string, json::object> LastQueueStats() const {
    std::map<std::string, json::object> out;
    for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
      if (it->at("event_type") != "StatsTick") continue;
      const json::object& tick = it->at("event").as_object();
      if (!tick.contains("queues")) continue;
      for (const auto& q : tick.at("queues").as_array()) {
        const json::object& qs = q.as_object();
        out[std::string(qs.at("queue").at("name").as_string())] = qs;
      }
      return out;
    }
    return out;
  }

  static uint64_t Field(const json::object& o, const char* name) {
    return o.contains(name) ? o.at(name).to_number<uint64_t>() : 0;  // defaults are left out
  }

  std::string Enqueue(WsClient& ws, const std::string& queue, int n, const std::string& prefix,
                      const std::string& meta = "") {
    std::string items;
    for (int i = 0; i < n; ++i) {
      if (i) items += ",";
      items += "{\"id\":\"" + prefix + std::to_string(i) + "\",\"priority\":" + std::to_string(i);
      if (!meta.empty()) items += ",\"metadata\":[" + meta + "]";
      items += "}";
    }
    json::object r = Call(ws, "Enqueue", "{\"queue\":\"" + queue + "\",\"items\":[" + items + "]}");
    return r.contains("error") ? json::serialize(r["error"]) : "";
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  uint64_t next_id_ = 0;
  std::vector<json::object> events_;
};

TEST_F(Dashboard, ThePageAndItsAssetsAreServedWithCspEtagAndGzip) {
  Start();
  const HttpReply page = HttpGet(http(), "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("data-mode=\"full\""), std::string::npos);
  const std::string csp = page.Header("Content-Security-Policy");
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << page.head;
  EXPECT_NE(csp.find("connect-src 'self'"), std::string::npos);

  const HttpReply js = HttpGet(http(), "/app.js");
  ASSERT_EQ(js.status, 200);
  EXPECT_NE(js.Header("Content-Type").find("text/javascript"), std::string::npos);
  const std::string etag = js.Header("ETag");
  ASSERT_FALSE(etag.empty());
  EXPECT_EQ(HttpRequest(http(), "GET", "/app.js", "If-None-Match: " + etag + "\r\n").status, 304);
  const HttpReply gz = HttpRequest(http(), "GET", "/app.js", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(gz.Header("Content-Encoding"), "gzip");
  EXPECT_LT(gz.body.size(), js.body.size());
  EXPECT_EQ(HttpGet(http(), "/js/queue.js").status, 200);
  EXPECT_EQ(HttpGet(http(), "/nothing.js").status, 404);
  EXPECT_EQ(HttpGet(http(), "/metrics").status, 200) << "the server's own routes are untouched";
}

TEST_F(Dashboard, OffServesNoPage) {
  Start({"--dashboard", "off"});
  EXPECT_EQ(HttpGet(http(), "/").status, 404);
  EXPECT_EQ(HttpGet(http(), "/app.js").status, 404);
  WsClient ws;
  Connect(ws);  // the protocol over /ws is not the dashboard's
  EXPECT_FALSE(Call(ws, "Stats", "{}").contains("error"));
}

TEST_F(Dashboard, SignInGivesACookieThatOpensTheWebSocketUntilSignOut) {
  Start({"--auth-token-file", WriteToken("correct-horse-battery")});
  const HttpReply signin = HttpGet(http(), "/");
  EXPECT_EQ(signin.status, 200);
  EXPECT_NE(signin.body.find("signin-form"), std::string::npos) << "no session: the sign-in page";

  const auto started = Clock::now();
  const HttpReply wrong =
      HttpRequest(http(), "POST", "/signin",
                  "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 17\r\n",
                  "token=correct-hor", 10'000);
  EXPECT_EQ(wrong.status, 401);
  EXPECT_GE(MsSince(started), 1000) << "a wrong token is answered after the delay";
  EXPECT_TRUE(wrong.Header("Set-Cookie").empty());
  EXPECT_NE(wrong.body.find("Sign-in failed"), std::string::npos);
  EXPECT_EQ(wrong.body.find("correct"), std::string::npos) << "no hint about the token";

  const std::string body = "token=correct-horse-battery";
  const HttpReply right =
      HttpRequest(http(), "POST", "/signin",
                  "Content-Type: application/x-www-form-urlencoded\r\nOrigin: http://127.0.0.1\r\n"
                  "Content-Length: " +
                      std::to_string(body.size()) + "\r\n",
                  body);
  ASSERT_EQ(right.status, 303) << right.head;
  const std::string set_cookie = right.Header("Set-Cookie");
  EXPECT_NE(set_cookie.find("HttpOnly"), std::string::npos);
  EXPECT_NE(set_cookie.find("SameSite=Strict"), std::string::npos);
  const std::string cookie = set_cookie.substr(0, set_cookie.find(';'));

  WsClient none;
  EXPECT_TRUE(WsClient::UpgradeDeclined(none.Connect(http())));
  EXPECT_EQ(none.status(), 401) << "no cookie, no token: refused";
  WsClient forged;
  EXPECT_TRUE(WsClient::UpgradeDeclined(
      forged.Connect(http(), {{"Cookie", "sundial_session=" + std::string(64, 'f')}})));
  EXPECT_EQ(forged.status(), 401);

  WsClient page;
  Connect(page, {{"Cookie", cookie}, {"Origin", "http://127.0.0.1:" + std::to_string(http())}});
  EXPECT_FALSE(Call(page, "Stats", "{}").contains("error"));
  WsClient evil;
  EXPECT_TRUE(WsClient::UpgradeDeclined(
      evil.Connect(http(), {{"Cookie", cookie}, {"Origin", "https://evil.example"}})));
  EXPECT_EQ(evil.status(), 403) << "the cookie does not lift the Origin check";

  const HttpReply app = HttpRequest(http(), "GET", "/", "Cookie: " + cookie + "\r\n");
  EXPECT_NE(app.body.find("data-auth=\"session\""), std::string::npos);

  const HttpReply out =
      HttpRequest(http(), "POST", "/signout", "Cookie: " + cookie + "\r\nContent-Length: 0\r\n");
  EXPECT_EQ(out.status, 303);
  WsClient after;
  EXPECT_TRUE(WsClient::UpgradeDeclined(after.Connect(http(), {{"Cookie", cookie}})));
  EXPECT_EQ(after.status(), 401) << "signed out: the cookie opens nothing";
}

TEST_F(Dashboard, ReadOnlyRefusesABrowserPagesActionsAndNothingElse) {
  Start({"--dashboard", "read-only"});
  EXPECT_NE(HttpGet(http(), "/").body.find("data-mode=\"read-only\""), std::string::npos);
  WsClient page;
  Connect(page, {{"Origin", "http://127.0.0.1:" + std::to_string(http())}});
  json::object refused = Call(page, "CreateQueue", R"({"name":"q"})");
  ASSERT_TRUE(refused.contains("error"));
  EXPECT_EQ(refused["error"].at("code"), "FAILED_PRECONDITION");
  EXPECT_NE(std::string(refused["error"].at("message").as_string()).find("read-only"),
            std::string::npos);

  WsClient worker;  // no Origin: not a page
  Connect(worker);
  EXPECT_FALSE(Call(worker, "CreateQueue", R"({"name":"q"})").contains("error"));
  EXPECT_EQ(Enqueue(worker, "q", 3, "m"), "");

  const std::map<std::string, std::string> actions = {
      {"Enqueue", R"({"queue":"q","items":[{"priority":1}]})"},
      {"Dequeue", R"({"queue":"q"})"},
      {"Cancel", R"({"queue":"q","ids":["m0"]})"},
      {"Redrive", R"({"queue":"q","all":true})"},
      {"PurgeQueue", R"({"name":"q","states":["pending"]})"},
      {"DeleteQueue", R"({"name":"q"})"},
      {"UpdateQueue", R"({"name":"q","update":{"dequeue_paused":true}})"},
  };
  for (const auto& [op, body] : actions) {
    json::object r = Call(page, op, body);
    ASSERT_TRUE(r.contains("error")) << op;
    EXPECT_EQ(r["error"].at("code"), "FAILED_PRECONDITION") << op << ": " << json::serialize(r);
  }
  // Reads and subscriptions work.
  json::object got = Call(page, "Get", R"({"queue":"q","id":"m0"})");
  EXPECT_FALSE(got.contains("error"));
  EXPECT_FALSE(Call(page, "Browse", R"({"queue":"q"})").contains("error"));
  EXPECT_FALSE(Call(page, "Subscribe", R"({"queue":"*","queue_stats":true})").contains("error"));
  json::object count = Call(worker, "Count", R"({"queue":"q"})");
  EXPECT_EQ(Field(count["result"].at("counts").as_object(), "pending"), 3u) << "nothing changed";
}

TEST_F(Dashboard, QueueStatsTicksCarryEveryQueueAndNoMessageEvents) {
  Start();
  WsClient producer;
  Connect(producer);
  ASSERT_EQ(Enqueue(producer, "alpha", 7, "a"), "");
  WsClient page;
  Connect(page);
  EXPECT_FALSE(Call(page, "Subscribe", R"({"queue":"*","queue_stats":true,"max_events_per_sec":0})")
                   .contains("error"));
  ASSERT_EQ(Enqueue(producer, "alpha", 5, "b"), "");
  ASSERT_EQ(Enqueue(producer, "beta", 2, "c"), "");
  json::object leased = Call(producer, "Dequeue", R"({"queue":"alpha","max":4})");
  ASSERT_FALSE(leased.contains("error"));
  // Until a tick shows all of it (totals count from the server's start).
  ASSERT_TRUE(ReadUntil(page, [&] {
    auto qs = LastQueueStats();
    return qs.count("alpha") && qs.count("beta") && Field(qs["alpha"], "dequeued") == 4;
  })) << "no tick with both queues";
  auto qs = LastQueueStats();
  const json::object& alpha = qs["alpha"];
  EXPECT_EQ(Field(alpha, "enqueued"), 12u);
  EXPECT_EQ(Field(alpha.at("queue").at("counts").as_object(), "pending"), 8u);
  EXPECT_EQ(Field(alpha.at("queue").at("counts").as_object(), "running"), 4u);
  EXPECT_EQ(Field(qs["beta"], "enqueued"), 2u);
  EXPECT_EQ(MessageEvents().size(), 0u) << "max_events_per_sec 0: ticks only";
  for (const auto& e : events_) {
    if (e.at("event_type") == "StatsTick") {
      EXPECT_GT(Field(e.at("event").as_object(), "time"), 0u);
    }
  }

  // A second connection without queue_stats gets the plain tick.
  WsClient plain;
  Connect(plain);
  events_.clear();
  EXPECT_FALSE(Call(plain, "Subscribe", R"({"queue":"beta"})").contains("error"));
  ASSERT_TRUE(ReadUntil(plain, [&] { return Count("StatsTick") > 0; }));
  for (const auto& e : events_) {
    if (e.at("event_type") == "StatsTick") {
      EXPECT_FALSE(e.at("event").as_object().contains("queues"));
    }
  }
}

TEST_F(Dashboard, ASampledSubscriptionGetsAtMostItsEventsEachSecond) {
  Start();
  WsClient producer;
  Connect(producer);
  WsClient page;
  Connect(page);
  EXPECT_FALSE(
      Call(page, "Subscribe", R"({"queue":"busy","max_events_per_sec":5})").contains("error"));
  for (int round = 0; round < 4; ++round) {
    ASSERT_EQ(Enqueue(producer, "busy", 50, "r" + std::to_string(round) + "-"), "");
  }
  // The stats tick comes every second: two of them mean the enqueues' seconds are over.
  ASSERT_TRUE(ReadUntil(page, [&] { return Count("StatsTick") >= 2; }));
  std::map<int64_t, int> per_second;
  for (const auto& e : MessageEvents()) ++per_second[e.at("time").to_number<int64_t>() / 1000];
  ASSERT_FALSE(per_second.empty());
  for (const auto& [second, n] : per_second) EXPECT_LE(n, 5) << "second " << second;
  EXPECT_GE(MessageEvents().size(), 5u);
  EXPECT_LT(MessageEvents().size(), 200u);
}

TEST_F(Dashboard, AnIdSubscriptionGetsEveryEventOfItsMessagesOnly) {
  Start();
  WsClient producer;
  Connect(producer);
  ASSERT_EQ(Enqueue(producer, "q", 20, "m"), "");
  WsClient page;
  Connect(page);
  // A sample of 0 on the queue and exact ids: the ids' events still come.
  EXPECT_FALSE(
      Call(page, "Subscribe", R"({"queue":"q","max_events_per_sec":0})").contains("error"));
  EXPECT_FALSE(Call(page, "Subscribe", R"({"queue":"q","ids":["m0","m3"]})").contains("error"));
  EXPECT_FALSE(Call(producer, "Dequeue", R"({"queue":"q","max":20})").contains("error"));
  EXPECT_FALSE(
      Call(producer, "Cancel", R"({"queue":"q","ids":["m0","m1","m3"]})").contains("error"));
  ASSERT_TRUE(ReadUntil(page, [&] { return MessageEvents().size() >= 4; }));
  ASSERT_TRUE(ReadUntil(page, [&] { return Count("StatsTick") >= 1; }));
  std::multiset<std::string> seen;
  for (const auto& e : MessageEvents()) seen.insert(std::string(e.at("id").as_string()));
  EXPECT_EQ(seen, (std::multiset<std::string>{"m0", "m0", "m3", "m3"}));
}

TEST_F(Dashboard, SubscriptionOptionsOutOfRangeAreRefused) {
  Start();
  WsClient ws;
  Connect(ws);
  std::string many = "[";
  for (int i = 0; i < 101; ++i) many += (i ? ",\"i" : "\"i") + std::to_string(i) + "\"";
  many += "]";
  for (const std::string& op :
       {R"({"queue":"q","ids":)" + many + "}", std::string(R"({"queue":"q","ids":[""]})"),
        std::string(R"({"queue":"q","max_events_per_sec":1000001})")}) {
    json::object r = Call(ws, "Subscribe", op);
    ASSERT_TRUE(r.contains("error")) << op;
    EXPECT_EQ(r["error"].at("code"), "INVALID_ARGUMENT") << op;
  }
}

}  // namespace
}  // namespace sundial::e2e
