// What a real etcd never sends, from a scripted endpoint (tests/replication/fake_http_server.h):
// garbage, JSON of the wrong shape, bad base64, truncated, oversized or missing replies, a
// watch stream that turns to garbage. Each is a typed error naming the endpoint, never a
// crash or a hang.
#include <gtest/gtest.h>

#include "replication/etcd_client.h"
#include "replication/etcd_watch.h"
#include "tests/replication/etcd_process.h"
#include "tests/replication/fake_http_server.h"

namespace sundial::replication {
namespace {

using testing::Clock;
using testing::FakeHttpServer;
using testing::Millis;
using testing::MsSince;
using After = FakeHttpServer::After;

constexpr const char* kHeader =
    R"("header":{"cluster_id":"1","member_id":"2","revision":"9","raft_term":"3"})";

// An endpoint answering every request with `answer`.
struct Scripted {
  explicit Scripted(FakeHttpServer::Answer answer, size_t max_response_bytes = 1 << 20)
      : server([answer](const std::string&) { return answer; }) {
    EtcdClientOptions options;
    options.endpoints = {{"127.0.0.1", server.port()}};
    options.call_timeout = Millis(5'000);
    options.max_response_bytes = max_response_bytes;
    client = std::make_unique<EtcdClient>(options);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server.port()); }
  FakeHttpServer server;
  std::unique_ptr<EtcdClient> client;
};

void ExpectError(const EtcdResult<RangeResult>& r, Code code, const std::string& url,
                 const std::string& says) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, code) << r.error().ToString();
  EXPECT_NE(r.error().message.find(url), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find(says), std::string::npos) << r.error().message;
}

TEST(EtcdGarbage, NonJsonBodyIsInternal) {
  Scripted s({FakeHttpServer::Ok("<html>hello</html>")});
  ExpectError(s.client->Get("/k"), Code::kInternal, s.url() + "/v3/kv/range", "malformed reply");
}

TEST(EtcdGarbage, JsonOfTheWrongShapeIsInternalNamingTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {"[1,2,3]", "not a JSON object"},
      {R"({"header":"x"})", "header: not an object"},
      {R"({"header":{"revision":"abc"}})", "header.revision: not an int64"},
      {R"({"header":{"revision":1.5}})", "header.revision"},
      {std::string("{") + kHeader + R"(,"kvs":5})", "kvs: not an array"},
      {std::string("{") + kHeader + R"(,"kvs":[7]})", "kv: not an object"},
      {std::string("{") + kHeader + R"(,"kvs":[{"key":"***"}]})", "kv.key: not base64"},
      {std::string("{") + kHeader + R"(,"kvs":[{"key":"YQ==","mod_revision":{}}]})",
       "kv.mod_revision"},
      {std::string("{") + kHeader + R"(,"more":"yes"})", "more: not a boolean"},
  };
  for (const auto& [body, says] : cases) {
    Scripted s({FakeHttpServer::Ok(body)});
    SCOPED_TRACE(body);
    ExpectError(s.client->Get("/k"), Code::kInternal, s.url(), says);
  }
}

TEST(EtcdGarbage, NotHttpAtAllIsInternal) {
  Scripted s({"\x16\x03\x01 this is no HTTP\r\n\r\n", After::kClose});
  ExpectError(s.client->Get("/k"), Code::kInternal, s.url(), "not an HTTP reply");
}

TEST(EtcdGarbage, ReplyOverTheLimitIsResourceExhausted) {
  Scripted s({"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n{", After::kClose}, 4096);
  ExpectError(s.client->Get("/k"), Code::kResourceExhausted, s.url(), "larger than 4096");
}

TEST(EtcdGarbage, ConnectionClosedWithoutAReplyIsUnavailableInDoubt) {
  Scripted s({"", After::kClose});
  auto txn = s.client->Txn(TxnRequest{});
  ASSERT_FALSE(txn.ok());
  EXPECT_EQ(txn.error().code, Code::kUnavailable);
  EXPECT_TRUE(txn.error().in_doubt);
  EXPECT_NE(txn.error().message.find(s.url() + "/v3/kv/txn: read"), std::string::npos)
      << txn.error().message;
}

TEST(EtcdGarbage, TruncatedReplyIsUnavailable) {
  Scripted s({"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"header\":", After::kClose});
  ExpectError(s.client->Get("/k"), Code::kUnavailable, s.url(), "read");
}

TEST(EtcdGarbage, SilentEndpointTimesOutByTheDeadline) {
  Scripted s({"", After::kHang});
  const auto start = Clock::now();
  auto got = s.client->Get("/k", Deadline::In(Millis(200)));
  EXPECT_LT(MsSince(start), 3'000);
  ExpectError(got, Code::kUnavailable, s.url(), "no reply within");
}

TEST(EtcdGarbage, GatewayErrorsMapToCodes) {
  const std::tuple<int, int, Code> cases[] = {
      {400, 3, Code::kInvalidArgument},     {404, 5, Code::kNotFound},
      {400, 11, Code::kFailedPrecondition}, {429, 8, Code::kResourceExhausted},
      {401, 16, Code::kUnauthenticated},    {500, 13, Code::kInternal},
      {503, 14, Code::kUnavailable},
  };
  for (const auto& [http, grpc, code] : cases) {
    const std::string body = R"({"error":"etcdserver: boom","message":"etcdserver: boom","code":)" +
                             std::to_string(grpc) + "}";
    Scripted s({FakeHttpServer::Ok(body, http), After::kKeepOpen});
    SCOPED_TRACE(grpc);
    ExpectError(s.client->Get("/k"), code, s.url(), "etcdserver: boom");
  }
}

TEST(EtcdGarbage, ServerErrorPageIsUnavailable) {
  Scripted s({"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 3\r\n\r\nbad", After::kClose});
  ExpectError(s.client->Get("/k"), Code::kUnavailable, s.url(), "HTTP 502");
}

TEST(EtcdGarbage, TxnWhoseResponsesDoNotMatchItsOpsIsInternal) {
  Scripted s({FakeHttpServer::Ok(std::string("{") + kHeader +
                                 R"(,"succeeded":true,"responses":[{"response_put":{}}]})"),
              After::kKeepOpen});
  TxnRequest txn;
  txn.success = {TxnOp::Get("/a"), TxnOp::Get("/b")};
  auto r = s.client->Txn(txn);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kInternal);
  EXPECT_NE(r.error().message.find("do not match"), std::string::npos) << r.error().message;
}

TEST(EtcdGarbage, KeepAliveOfAGoneLeaseIsNotFoundAndAMissingResultIsInternal) {
  Scripted gone({FakeHttpServer::Ok(std::string(R"({"result":{)") + kHeader + R"(,"ID":"5"}})"),
                 After::kKeepOpen});
  auto r = gone.client->KeepAliveOnce(5);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kNotFound);
  Scripted odd({FakeHttpServer::Ok(R"({"TTL":"5"})"), After::kKeepOpen});
  auto s = odd.client->KeepAliveOnce(5);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Code::kInternal);
}

// A kept-alive connection the server closes while idle: the next call goes again on a fresh
// connection (the server never read it) instead of failing.
TEST(EtcdGarbage, IdleConnectionClosedByTheServerIsReopenedTransparently) {
  int served = 0;
  FakeHttpServer server([&](const std::string&) {
    ++served;
    return FakeHttpServer::Answer{
        FakeHttpServer::Ok(std::string("{") + kHeader + "}"),
        After::kClose};  // says keep-alive (HTTP/1.1 default), closes anyway
  });
  EtcdClientOptions options;
  options.endpoints = {{"127.0.0.1", server.port()}};
  options.call_timeout = Millis(5'000);
  EtcdClient client(options);
  for (int i = 0; i < 3; ++i) {
    auto r = client.Get("/k");
    ASSERT_TRUE(r.ok()) << i << ": " << r.error().ToString();
    EXPECT_EQ(r->header.revision, 9);
  }
  EXPECT_EQ(server.connections(), 3);
}

std::string Chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

const std::string kStreamHead =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
const std::string kCreated =
    std::string(R"({"result":{)") + kHeader + R"(,"created":true}})" + "\n";

EtcdResult<std::unique_ptr<Watch>> WatchOn(const FakeHttpServer& server, WatchQueue& queue) {
  WatchOptions options;
  options.key = "/k";
  return Watch::Start({{"127.0.0.1", server.port()}}, options, queue.callbacks(),
                      Deadline::In(Millis(5'000)));
}

TEST(EtcdGarbage, WatchStreamTurningToGarbageBreaksAsInternal) {
  // A message split across chunks, then garbage.
  const std::string event =
      std::string(R"({"result":{)") + kHeader +
      R"(,"events":[{"kv":{"key":"L2s=","value":"dg==","mod_revision":"10"}}]}})"
      "\n";
  FakeHttpServer server([&](const std::string&) {
    return FakeHttpServer::Answer{kStreamHead + Chunk(kCreated) + Chunk(event.substr(0, 20)) +
                                      Chunk(event.substr(20)) + Chunk("}}not json at all"),
                                  After::kHang};
  });
  WatchQueue queue;
  auto watch = WatchOn(server, queue);
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();
  auto first = queue.Pop(Clock::now() + Millis(10'000));
  ASSERT_TRUE(first && !first->broken);
  ASSERT_EQ(first->events.size(), 1u);
  EXPECT_EQ(first->events[0].kv.key, "/k");
  EXPECT_EQ(first->events[0].kv.value, "v");
  auto second = queue.Pop(Clock::now() + Millis(10'000));
  ASSERT_TRUE(second && second->broken);
  EXPECT_EQ(second->broken->error.code, Code::kInternal);
  EXPECT_NE(second->broken->error.message.find("malformed watch message"), std::string::npos);
  EXPECT_EQ(second->broken->resume_revision, 11);
}

TEST(EtcdGarbage, WatchEventsOfTheWrongShapeBreakAsInternal) {
  const std::string bad_events[] = {
      R"({"result":{"events":[{"type":"RENAME","kv":{"key":"YQ=="}}]}})",
      R"({"result":{"events":[{"kv":{"key":"!!"}}]}})",
      R"({"result":{"events":[{"type":"PUT"}]}})",
      R"({"result":{"events":{}}})",
      R"({"result":{"events":[{"kv":{"key":"YQ==","mod_revision":"1"}}]}})",  // goes back
      R"({"result":{"created":true}})",                                       // twice
      R"("just a string")",
  };
  for (const std::string& bad : bad_events) {
    SCOPED_TRACE(bad);
    FakeHttpServer server([&](const std::string&) {
      return FakeHttpServer::Answer{kStreamHead + Chunk(kCreated) + Chunk(bad + "\n"),
                                    After::kHang};
    });
    WatchQueue queue;
    WatchOptions options;
    options.key = "/k";
    options.start_revision = 5;
    auto watch = Watch::Start({{"127.0.0.1", server.port()}}, options, queue.callbacks(),
                              Deadline::In(Millis(5'000)));
    ASSERT_TRUE(watch.ok()) << watch.error().ToString();
    auto item = queue.Pop(Clock::now() + Millis(10'000));
    ASSERT_TRUE(item && item->broken);
    EXPECT_EQ(item->broken->error.code, Code::kInternal) << item->broken->error.message;
  }
}

TEST(EtcdGarbage, WatchWhoseFirstMessageIsNotCreatedFailsToStart) {
  FakeHttpServer server([&](const std::string&) {
    return FakeHttpServer::Answer{kStreamHead + Chunk(R"({"result":{"events":[]}})"
                                                      "\n"),
                                  After::kHang};
  });
  WatchQueue queue;
  auto watch = WatchOn(server, queue);
  ASSERT_FALSE(watch.ok());
  EXPECT_EQ(watch.error().code, Code::kInternal);
}

TEST(EtcdGarbage, WatchStreamErrorMessageBreaksWithItsCode) {
  FakeHttpServer server([&](const std::string&) {
    return FakeHttpServer::Answer{
        kStreamHead + Chunk(kCreated) +
            Chunk(R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader"}})"
                  "\n"),
        After::kHang};
  });
  WatchQueue queue;
  auto watch = WatchOn(server, queue);
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();
  auto item = queue.Pop(Clock::now() + Millis(10'000));
  ASSERT_TRUE(item && item->broken);
  EXPECT_EQ(item->broken->error.code, Code::kUnavailable);
  EXPECT_NE(item->broken->error.message.find("no leader"), std::string::npos);
}

TEST(EtcdGarbage, WatchMessageOverTheLimitBreaks) {
  const std::string huge = std::string(R"({"result":{"x":")") + std::string(10000, 'a');
  FakeHttpServer server([&](const std::string&) {
    return FakeHttpServer::Answer{kStreamHead + Chunk(kCreated) + Chunk(huge), After::kHang};
  });
  WatchQueue queue;
  WatchOptions options;
  options.key = "/k";
  options.max_message_bytes = 4096;
  auto watch = Watch::Start({{"127.0.0.1", server.port()}}, options, queue.callbacks(),
                            Deadline::In(Millis(5'000)));
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();
  auto item = queue.Pop(Clock::now() + Millis(10'000));
  ASSERT_TRUE(item && item->broken);
  EXPECT_EQ(item->broken->error.code, Code::kInternal);
  EXPECT_NE(item->broken->error.message.find("over 4096"), std::string::npos);
}

}  // namespace
}  // namespace sundial::replication
