// Security and resource limits against a real sundiald (docs/protocol.md "Authentication",
// docs/operations.md "Security", the server issue's security item): --auth-token-file on TCP and on
// the WebSocket upgrade, --allowed-origins, the refusal to listen beyond loopback without a token,
// slow-loris connections closed at
// --handshake-timeout-ms, --max-connections, and a client that never reads dropped at
// --max-output-bytes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "client/client.h"
#include "client/watch.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_process.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;
using client::Client;

constexpr char kToken[] = "e2e-token-5f0c1d";

class Security : public ::testing::Test {
 protected:
  void StartServer(std::vector<std::string> flags = {}) {
    server_ = std::make_unique<ServerProcess>(dir_.path() + "/data", std::move(flags));
    ASSERT_TRUE(server_->Start()) << server_->log();
  }

  std::string TokenFile() {
    const std::string path = dir_.path() + "/token";
    std::ofstream(path) << kToken << "\n";
    return path;
  }

  client::Address Addr() const { return {"127.0.0.1", server_->port()}; }

  // Enqueue, dequeue and complete one message on `c`.
  static void ExpectWorks(Client& c, const std::string& id) {
    client::EnqueueItem item;
    item.id = id;
    auto put = c.Enqueue("jobs", {item});
    ASSERT_TRUE(put.ok()) << put.error().ToString();
    ASSERT_EQ(put->result<p::EnqueueResults>()->items()->Get(0)->error(), nullptr);
    auto got = c.Dequeue("jobs", {});
    ASSERT_TRUE(got.ok()) << got.error().ToString();
    const auto* messages = got->result<p::DequeueResult>()->messages();
    ASSERT_EQ(messages->size(), 1u);
    EXPECT_EQ(messages->Get(0)->id()->str(), id);
    auto done = c.Complete("jobs", {{id, messages->Get(0)->lease_token()}});
    ASSERT_TRUE(done.ok()) << done.error().ToString();
    EXPECT_EQ(done->result<p::ItemResults>()->items()->Get(0)->code(), p::Code::OK);
  }

  static void ExpectRefusedAndClosed(RawConn& c, p::Code code, std::string_view message_part) {
    auto frame = c.ReadFrame(5'000);
    ASSERT_TRUE(frame.has_value()) << "no error frame before the close";
    const ResponseView v = ViewResponse(*frame);
    ASSERT_TRUE(v.valid);
    EXPECT_EQ(v.request_id, 0u);
    ASSERT_TRUE(v.has_error);
    EXPECT_EQ(v.code, code) << v.message;
    EXPECT_NE(v.message.find(message_part), std::string::npos) << v.message;
    EXPECT_TRUE(c.WaitClosed(5'000)) << "the server keeps the connection open";
  }

  // A binary Health over an upgraded WebSocket is answered.
  static void ExpectWsWorks(WsClient& ws) {
    ASSERT_FALSE(ws.SendBinary(client::BuildHealth(Hdr(77))));
    auto m = ws.Read();
    ASSERT_TRUE(m.has_value());
    EXPECT_FALSE(m->text);
    const ResponseView v = ViewResponse(m->data);
    ASSERT_TRUE(v.valid);
    EXPECT_EQ(v.request_id, 77u);
    EXPECT_FALSE(v.has_error) << v.message;
  }

  // The upgrade with these headers is refused with `status`.
  void ExpectUpgradeRefused(std::vector<std::pair<std::string, std::string>> headers, int status) {
    WsClient ws;
    const auto ec = ws.Connect(server_->http_port(), std::move(headers));
    EXPECT_TRUE(WsClient::UpgradeDeclined(ec)) << ec.message();
    EXPECT_EQ(ws.status(), status);
  }
  void ExpectUpgradeAccepted(std::vector<std::pair<std::string, std::string>> headers) {
    WsClient ws;
    const auto ec = ws.Connect(server_->http_port(), std::move(headers));
    ASSERT_FALSE(ec) << ec.message() << " (HTTP " << ws.status() << ")";
    EXPECT_EQ(ws.status(), 101);
    ExpectWsWorks(ws);
  }

  double TcpConnections() {
    return MetricValue(HttpGet(server_->http_port(), "/metrics").body,
                       R"(sundial_connections{transport="tcp"})")
        .value_or(-1);
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(Security, TcpNeedsAuthBeforeAnythingElse) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--auth-token-file", TokenFile()}));
  {
    RawConn c(server_->port());
    ASSERT_TRUE(c.Send(Frame(client::BuildHealth(Hdr(3)))));
    ASSERT_NO_FATAL_FAILURE(ExpectRefusedAndClosed(c, p::Code::UNAUTHENTICATED, "Auth"));
  }
  const std::vector<std::string> wrong_tokens = {"wrong", "", "e2e-token",
                                                 std::string(kToken) + "x"};
  for (const std::string& wrong : wrong_tokens) {
    RawConn c(server_->port());
    ASSERT_TRUE(c.Send(Frame(client::BuildAuth(Hdr(1), wrong))));
    ASSERT_NO_FATAL_FAILURE(ExpectRefusedAndClosed(c, p::Code::UNAUTHENTICATED, "token"))
        << "token '" << wrong << "'";
  }
  {
    // A mutation before the Auth is refused and not applied.
    RawConn c(server_->port());
    client::EnqueueItem item;
    item.id = "sneaky";
    ASSERT_TRUE(c.Send(Frame(client::BuildEnqueue(Hdr(1), "jobs", {item}))));
    ASSERT_NO_FATAL_FAILURE(ExpectRefusedAndClosed(c, p::Code::UNAUTHENTICATED, "Auth"));
  }
  // The client library: no token, a wrong one, the right one.
  auto anonymous = Client::Connect(Addr());
  ASSERT_TRUE(anonymous.ok());
  auto refused = (*anonymous)->Health();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Code::kUnauthenticated) << refused.error().ToString();
  auto wrong = Client::Connect(Addr(), "not-the-token");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code, Code::kUnauthenticated) << wrong.error().ToString();
  auto right = Client::Connect(Addr(), kToken);
  ASSERT_TRUE(right.ok()) << right.error().ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectWorks(**right, "authorized"));
  auto sneaky = (*right)->Get("jobs", "sneaky");
  ASSERT_FALSE(sneaky.ok());
  EXPECT_EQ(sneaky.error().code, Code::kNotFound);
  {
    // Auth then requests pipelined in one write; a repeated Auth is harmless.
    RawConn c(server_->port());
    ASSERT_TRUE(c.Send(Frame(client::BuildAuth(Hdr(1), kToken)) +
                       Frame(client::BuildHealth(Hdr(2))) +
                       Frame(client::BuildAuth(Hdr(3), kToken))));
    std::set<uint64_t> answered;
    for (int i = 0; i < 3; ++i) {
      auto f = c.ReadFrame();
      ASSERT_TRUE(f.has_value());
      const ResponseView v = ViewResponse(*f);
      EXPECT_FALSE(v.has_error) << v.message;
      answered.insert(v.request_id);
    }
    EXPECT_EQ(answered, (std::set<uint64_t>{1, 2, 3}));
  }
}

TEST_F(Security, WebSocketUpgradeNeedsTheBearerToken) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--auth-token-file", TokenFile()}));
  ExpectUpgradeRefused({}, 401);
  ExpectUpgradeRefused({{"Authorization", "Bearer wrong"}}, 401);
  ExpectUpgradeRefused({{"Authorization", kToken}}, 401);
  ExpectUpgradeRefused({{"Authorization", std::string("Basic ") + kToken}}, 401);
  ExpectUpgradeAccepted({{"Authorization", std::string("Bearer ") + kToken}});

  // client::Watch reports a refused upgrade as UNAUTHENTICATED.
  client::WatchOptions o;
  o.http = {"127.0.0.1", server_->http_port()};
  o.token = "wrong";
  o.timeout_ms = 5'000;
  auto watched = client::Watch(o, [](const p::EventMessage&) { return false; });
  ASSERT_FALSE(watched.ok());
  EXPECT_EQ(watched.error().code, Code::kUnauthenticated) << watched.error().ToString();
}

TEST_F(Security, AllowedOriginsAreEnforced) {
  ASSERT_NO_FATAL_FAILURE(
      StartServer({"--allowed-origins", "http://good.example,https://also.example"}));
  ExpectUpgradeRefused({{"Origin", "http://evil.example"}}, 403);
  ExpectUpgradeRefused({{"Origin", "http://good.example.evil.example"}}, 403);
  ExpectUpgradeRefused({{"Origin", "https://good.example"}}, 403);  // the scheme counts
  ExpectUpgradeAccepted({{"Origin", "http://good.example"}});
  ExpectUpgradeAccepted({{"Origin", "https://also.example"}});
  ExpectUpgradeAccepted({});  // no Origin: not a browser page
}

TEST_F(Security, WithoutAllowedOriginsOnlyTheServersOwnOriginIsAccepted) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  ExpectUpgradeRefused({{"Origin", "http://evil.example"}}, 403);
  ExpectUpgradeRefused({{"Origin", "null"}}, 403);
  ExpectUpgradeAccepted({});
  // The Host the client sends is 127.0.0.1:PORT: a page served by the server itself.
  ExpectUpgradeAccepted({{"Origin", "http://127.0.0.1:" + std::to_string(server_->http_port())}});
}

TEST_F(Security, TokenAndOriginsTogether) {
  ASSERT_NO_FATAL_FAILURE(
      StartServer({"--auth-token-file", TokenFile(), "--allowed-origins", "http://good.example"}));
  const std::pair<std::string, std::string> bearer{"Authorization",
                                                   std::string("Bearer ") + kToken};
  ExpectUpgradeRefused({{"Origin", "http://evil.example"}, bearer}, 403);
  ExpectUpgradeRefused({{"Origin", "http://good.example"}}, 401);
  ExpectUpgradeAccepted({{"Origin", "http://good.example"}, bearer});
  // A non-browser client (the CLI's watch) sends no Origin and the token.
  ExpectUpgradeAccepted({bearer});
}

// Runs sundiald with `args` to its exit (killed after `timeout_ms`); its exit code (-1 when it
// did not exit by itself) and its stderr.
int RunSundiald(const std::vector<std::string>& args, const std::string& stderr_path,
                int timeout_ms, std::string* stderr_text) {
  std::vector<std::string> all = {SUNDIALD_BIN};
  all.insert(all.end(), args.begin(), args.end());
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) ::dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  int code = -1;
  const auto deadline = Clock::now() + Millis(timeout_ms);
  while (true) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      break;
    }
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(Millis(5));
  }
  std::ifstream in(stderr_path);
  std::stringstream s;
  s << in.rdbuf();
  *stderr_text = s.str();
  return code;
}

TEST_F(Security, ListeningBeyondLoopbackNeedsAToken) {
  std::string err;
  const int code = RunSundiald({"--data-dir", dir_.path() + "/public", "--bind", "0.0.0.0",
                                "--port", "0", "--http-port", "0"},
                               dir_.path() + "/public.err", 10'000, &err);
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("--auth-token-file"), std::string::npos) << err;
  EXPECT_NE(err.find("0.0.0.0"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/public/LOCK"))
      << "refused before touching the data directory";

  // With a token it starts, and the token is required.
  ASSERT_NO_FATAL_FAILURE(StartServer({"--bind", "0.0.0.0", "--auth-token-file", TokenFile()}));
  auto anonymous = Client::Connect(Addr());
  ASSERT_TRUE(anonymous.ok());
  EXPECT_FALSE((*anonymous)->Health().ok());
  auto right = Client::Connect(Addr(), kToken);
  ASSERT_TRUE(right.ok()) << right.error().ToString();
  EXPECT_TRUE((*right)->Health().ok());
}

// Sends `prefix`, then one byte of `trickle` every 100 ms, until the server closes the
// connection or 5 s pass; the time from connecting to the close, or -1 if it stayed open.
int64_t MsUntilClosedWhileTrickling(uint16_t port, const std::string& prefix,
                                    const std::string& trickle) {
  const auto start = Clock::now();
  RawConn c(port);
  if (!c.ok()) return -1;
  if (!c.Send(prefix)) return MsSince(start);
  size_t next = 0;
  while (MsSince(start) < 5'000) {
    if (c.ReadSome(100) == RawConn::ReadStatus::kClosed) return MsSince(start);
    if (c.TrySend(trickle.substr(next++ % trickle.size(), 1), 100) < 0) return MsSince(start);
  }
  return -1;
}

TEST_F(Security, HttpSlowLorisIsClosedAtTheHandshakeTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--handshake-timeout-ms", "300"}));
  const int64_t trickled = MsUntilClosedWhileTrickling(
      server_->http_port(), "GET / HTTP/1.1\r\nHost: x\r\n", "X-Slow: aaaaaaaaaaaaaaaaaaaa");
  EXPECT_GE(trickled, 290) << "closed before the handshake timeout";
  EXPECT_LT(trickled, 5'000) << "a slow-loris request was never closed";
  EXPECT_NE(trickled, -1);
  // A connection that sends nothing at all.
  {
    const auto start = Clock::now();
    RawConn silent(server_->http_port());
    EXPECT_TRUE(silent.WaitClosed(5'000));
    EXPECT_GE(MsSince(start), 290);
    EXPECT_EQ(silent.bytes_read(), 0u);
  }
  // A WebSocket upgrade trickled the same way.
  const int64_t upgrade = MsUntilClosedWhileTrickling(
      server_->http_port(),
      "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n",
      "Sec-WebSocket-Version: 13\r\n");
  EXPECT_GE(upgrade, 290);
  EXPECT_LT(upgrade, 5'000);
  EXPECT_NE(upgrade, -1);
  // A prompt request is served.
  EXPECT_EQ(HttpGet(server_->http_port(), "/healthz").status, 200);
}

TEST_F(Security, TcpSlowLorisIsClosedAtTheHandshakeTimeout) {
  ASSERT_NO_FATAL_FAILURE(
      StartServer({"--auth-token-file", TokenFile(), "--handshake-timeout-ms", "300"}));
  // Half of an Auth frame, then one byte every 100 ms (never completing it in time).
  const std::string auth = Frame(client::BuildAuth(Hdr(1), kToken));
  const int64_t trickled = MsUntilClosedWhileTrickling(
      server_->port(), auth.substr(0, auth.size() / 2), std::string(1000, '\0'));
  EXPECT_GE(trickled, 290);
  EXPECT_LT(trickled, 5'000);
  EXPECT_NE(trickled, -1);
  {
    const auto start = Clock::now();
    RawConn silent(server_->port());
    EXPECT_TRUE(silent.WaitClosed(5'000));
    EXPECT_GE(MsSince(start), 290);
  }
  // Once authenticated, the connection outlives the handshake timeout (the idle timeout now
  // applies): nothing arrives and nothing closes for 600 ms, and it still answers.
  RawConn c(server_->port());
  ASSERT_TRUE(c.Send(auth));
  auto authed = c.ReadFrame();
  ASSERT_TRUE(authed.has_value());
  EXPECT_FALSE(ViewResponse(*authed).has_error);
  EXPECT_EQ(c.ReadSome(600), RawConn::ReadStatus::kTimeout);
  ASSERT_TRUE(c.Send(Frame(client::BuildHealth(Hdr(2)))));
  auto health = c.ReadFrame();
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(ViewResponse(*health).request_id, 2u);
}

TEST_F(Security, MaxConnectionsRefusesTheSixth) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--max-connections", "5"}));
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 5; ++i) {
    auto c = Client::Connect(Addr());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->Health().ok()) << "connection " << i + 1 << " of 5";
    clients.push_back(std::move(c).value());
  }
  {
    RawConn sixth(server_->port());
    ASSERT_TRUE(sixth.ok());
    ASSERT_NO_FATAL_FAILURE(
        ExpectRefusedAndClosed(sixth, p::Code::RESOURCE_EXHAUSTED, "max-connections"));
  }
  auto seventh = Client::Connect(Addr());
  ASSERT_TRUE(seventh.ok());
  auto refused = (*seventh)->Health();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Code::kResourceExhausted) << refused.error().ToString();
  // HTTP counts too, and is refused with the reason (503), as TCP is with a typed error.
  const auto http = HttpGet(server_->http_port(), "/healthz");
  EXPECT_EQ(http.status, 503);
  EXPECT_NE(http.body.find("max-connections"), std::string::npos) << http.body;
  // The five still work.
  ASSERT_NO_FATAL_FAILURE(ExpectWorks(*clients[0], "while-full"));
  // One leaves; a newcomer gets its place (once the server has seen the close).
  clients.pop_back();
  bool admitted = Eventually(
      [&] {
        auto c = Client::Connect(Addr());
        if (!c.ok() || !(*c)->Health().ok()) return false;
        clients.push_back(std::move(c).value());
        return true;
      },
      5'000);
  EXPECT_TRUE(admitted);
}

// Reading pauses at half of --max-output-bytes; a write that then takes nothing for
// --write-timeout-ms means the client does not read, and it is dropped.
TEST_F(Security, AClientThatNeverReadsIsDropped) {
  ASSERT_NO_FATAL_FAILURE(
      StartServer({"--max-output-bytes", "1048576", "--write-timeout-ms", "500"}));
  auto bystander = Client::Connect(Addr());
  ASSERT_TRUE(bystander.ok());
  client::EnqueueItem big;
  big.id = "big";
  big.payload = std::string(16 << 10, 'b');
  ASSERT_TRUE((*bystander)->Enqueue("blobs", {big}).ok());

  // Up to 3000 Gets of a 16 KiB message (48 MB of replies), one per send, never reading.
  RawConn sink(server_->port());
  ASSERT_TRUE(sink.ok());
  const int kGets = 3000;
  int sent = 0;
  for (; sent < kGets; ++sent) {
    if (sink.TrySend(Frame(client::BuildGet(Hdr(sent + 1), "blobs", "big")), 1'000) <= 0) break;
  }
  EXPECT_GT(sent, 100);
  // The other client works meanwhile.
  ASSERT_NO_FATAL_FAILURE(ExpectWorks(**bystander, "meanwhile"));
  // The server drops the sink: only the bystander stays connected.
  EXPECT_TRUE(Eventually([&] { return TcpConnections() == 1; }))
      << "tcp connections: " << TcpConnections();
  EXPECT_NE(server_->log().find("dropping a TCP client"), std::string::npos) << server_->log();
  // What reaches the sink is what the kernel buffers held, then the end of the stream.
  EXPECT_TRUE(sink.WaitClosed(10'000));
  EXPECT_LT(sink.bytes_read(), static_cast<size_t>(kGets) * (16u << 10) / 2)
      << "the server kept writing to a client that does not read";
  ASSERT_NO_FATAL_FAILURE(ExpectWorks(**bystander, "afterwards"));
}

// --max-output-bytes limits what a client leaves unread, not the size of one reply: a dequeue
// whose answer alone exceeds it reaches a client that reads, over TCP and WebSocket (else the
// messages would stay leased to a connection that was cut before it could see them).
TEST_F(Security, OneReplyLargerThanMaxOutputBytesReachesAClientThatReads) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--max-output-bytes", "1048576"}));
  auto c = Client::Connect(Addr());
  ASSERT_TRUE(c.ok());
  std::vector<client::EnqueueItem> items(40);
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].id = std::to_string(i);
    items[i].payload = std::string(64 << 10, 'x');  // 40 x 64 KiB: 2.5 MiB
  }
  ASSERT_TRUE((*c)->Enqueue("q", items).ok());
  client::DequeueOptions twenty;
  twenty.max = 20;  // a 1.3 MB reply
  auto over_tcp = (*c)->Dequeue("q", twenty);
  ASSERT_TRUE(over_tcp.ok()) << over_tcp.error().ToString() << "\n" << server_->log();
  EXPECT_EQ(over_tcp->result<p::DequeueResult>()->messages()->size(), 20u);
  EXPECT_TRUE((*c)->Health().ok());

  WsClient ws;
  ASSERT_FALSE(ws.Connect(server_->http_port()));
  ASSERT_FALSE(ws.SendBinary(client::BuildDequeue(Hdr(5), "q", twenty)));
  auto reply = ws.Read();
  ASSERT_TRUE(reply.has_value()) << server_->log();
  auto over_ws = client::Reply::FromServerMessage(reply->data);
  ASSERT_TRUE(over_ws.ok()) << over_ws.error().ToString();
  EXPECT_EQ(over_ws->result<p::DequeueResult>()->messages()->size(), 20u);
  ExpectWsWorks(ws);
  EXPECT_EQ(server_->log().find("dropping"), std::string::npos) << server_->log();
}

}  // namespace
}  // namespace sundial::e2e
