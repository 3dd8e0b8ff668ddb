// TLS on both ports (--tls-cert, --tls-key; docs/operations.md "TLS") against a real sundiald,
// with certificates made at test time (tests/e2e/tls_certs.h): the client library, the CLI,
// HTTPS and wss with the right CA; refusals of a wrong CA, a wrong host, an expired
// certificate, a TLS 1.1 client and a plain client (the server stays up); start errors; SIGHUP
// reloads that keep open connections, a broken reload that keeps the old certificate, and a
// SIGHUP without TLS that changes nothing.
#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/watch.h"
#include "tests/client/cli_runner.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/tls_certs.h"
#include "tests/e2e/tls_client.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;

class Tls : public ::testing::Test {
 protected:
  void SetUp() override {
    pki_dir_ = dir_.path() + "/pki";
    std::filesystem::create_directories(pki_dir_);
    ASSERT_TRUE(pki_.MakeCa("ca")) << "openssl CLI: cannot make a CA";
    ASSERT_TRUE(pki_.MakeCa("other-ca"));
    ASSERT_TRUE(pki_.MakeServer("server-a", "ca"));
    // The files the server is started with (a reload reads them again).
    CopyCert("server-a");
  }

  // Makes the server's --tls-cert/--tls-key files hold `name`'s certificate and key.
  void CopyCert(const std::string& name) {
    std::filesystem::copy_file(pki_.Cert(name), cert_file(),
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::copy_file(pki_.Key(name), key_file(),
                               std::filesystem::copy_options::overwrite_existing);
  }
  std::string cert_file() const { return dir_.path() + "/tls.pem"; }
  std::string key_file() const { return dir_.path() + "/tls.key"; }

  void StartServer(std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = {"--tls-cert", cert_file(), "--tls-key", key_file()};
    flags.insert(flags.end(), extra.begin(), extra.end());
    server_ = std::make_unique<ServerProcess>(dir_.path() + "/data", flags);
    ASSERT_TRUE(server_->Start()) << server_->log();
  }

  client::Result<std::unique_ptr<client::Client>> Connect(const std::string& ca) {
    client::ConnectOptions o;
    o.tls = true;
    o.ca_file = pki_.Cert(ca);
    o.timeout_ms = 5'000;
    return client::Client::Connect({"127.0.0.1", server_->port()}, o);
  }

  // A durable enqueue through `c` succeeds.
  static void ExpectEnqueue(client::Client& c, const std::string& id) {
    client::EnqueueItem item;
    item.id = id;
    item.payload = "p";
    auto r = c.Enqueue("jobs", {item});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    EXPECT_EQ(r->result<p::EnqueueResults>()->items()->Get(0)->error(), nullptr);
  }

  // SIGHUP, then waits for the server's log line about the reload (`expect`).
  void Reload(const std::string& expect) {
    const size_t before = Count(server_->log(), expect);
    ASSERT_EQ(::kill(server_->pid(), SIGHUP), 0);
    ASSERT_TRUE(Eventually([&] { return Count(server_->log(), expect) > before; }))
        << server_->log();
  }
  static size_t Count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }

  TempDir dir_;
  std::string pki_dir_;
  TestPki pki_{dir_.path() + "/pki"};
  std::unique_ptr<ServerProcess> server_;
  std::atomic<bool> watched_{false};
};

TEST_F(Tls, ClientWithCaFileEnqueuesDequeuesAndCompletes) {
  StartServer();
  auto c = Connect("ca");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  ASSERT_TRUE((*c)->CreateQueue("jobs", {}).ok());
  ExpectEnqueue(**c, "m1");
  auto leased = (*c)->Dequeue("jobs", {});
  ASSERT_TRUE(leased.ok()) << leased.error().ToString();
  const auto* messages = leased->result<p::DequeueResult>()->messages();
  ASSERT_EQ(messages->size(), 1u);
  EXPECT_EQ(messages->Get(0)->id()->str(), "m1");
  auto done = (*c)->Complete("jobs", {{"m1", messages->Get(0)->lease_token()}});
  ASSERT_TRUE(done.ok()) << done.error().ToString();
  EXPECT_EQ(done->result<p::ItemResults>()->items()->Get(0)->code(), p::Code::OK);

  // The pipelined client too.
  client::ConnectOptions o;
  o.tls = true;
  o.ca_file = pki_.Cert("ca");
  auto async = client::AsyncClient::Connect({"127.0.0.1", server_->port()}, o);
  ASSERT_TRUE(async.ok()) << async.error().ToString();
  std::atomic<int> answered{0};
  for (int i = 0; i < 50; ++i) {
    client::EnqueueItem item;
    item.payload = "x";
    (*async)->Send(client::BuildEnqueue(Hdr((*async)->NextRequestId()), "jobs", {item}),
                   [&](client::Result<client::Reply> r) {
                     EXPECT_TRUE(r.ok()) << r.error().ToString();
                     ++answered;
                   });
  }
  EXPECT_TRUE(Eventually([&] { return answered.load() == 50; }));
  (*async)->Close();
}

#ifdef SUNDIAL_CLI
TEST_F(Tls, CliWithTlsAndCaFileWorks) {
  StartServer();
  const std::vector<std::string> tls = {"--addr", server_->addr(), "--tls", "--ca-file",
                                        pki_.Cert("ca")};
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.end(), tls.begin(), tls.end());
    return client::testing::RunProgram(SUNDIAL_CLI, args);
  };
  auto created = run({"create-queue", "jobs"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  auto enqueued = run({"enqueue", "jobs", "--id", "m1", "--payload", "hello"});
  ASSERT_EQ(enqueued.exit_code, 0) << enqueued.err;
  auto got = run({"get", "jobs", "m1"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_NE(got.out.find("\"m1\""), std::string::npos) << got.out;

  // Without --tls the CLI cannot talk to a TLS port: a clear failure, not a hang.
  auto plain = client::testing::RunProgram(
      SUNDIAL_CLI, {"get-queue", "jobs", "--addr", server_->addr(), "--timeout-ms", "3000"});
  EXPECT_NE(plain.exit_code, 0);
}
#endif  // SUNDIAL_CLI

TEST_F(Tls, WrongCaIsRefusedWithAClearError) {
  StartServer();
  auto c = Connect("other-ca");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Code::kUnavailable);
  EXPECT_NE(c.error().message.find("certificate was refused"), std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find("local issuer"), std::string::npos) << c.error().message;
  // The server is unharmed.
  auto good = Connect("ca");
  ASSERT_TRUE(good.ok()) << good.error().ToString();
  EXPECT_TRUE((*good)->Health().ok());
}

TEST_F(Tls, CertificateForAnotherHostIsRefused) {
  ASSERT_TRUE(pki_.MakeServer("elsewhere", "ca", "DNS:elsewhere.example"));
  CopyCert("elsewhere");
  StartServer();
  auto c = Connect("ca");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("mismatch"), std::string::npos) << c.error().message;
}

TEST_F(Tls, ExpiredCertificateIsRefusedAndTheServerSaysSo) {
  ASSERT_TRUE(pki_.MakeServer("expired", "ca", "IP:127.0.0.1", -1));
  CopyCert("expired");
  StartServer();
  EXPECT_NE(server_->log().find("EXPIRED"), std::string::npos) << server_->log();
  auto c = Connect("ca");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("expired"), std::string::npos) << c.error().message;
}

TEST_F(Tls, Tls11ClientIsRefused) {
  StartServer();
  const TlsProbe old = TlsHandshake(server_->port(), pki_.Cert("ca"), TLS1_1_VERSION);
  EXPECT_FALSE(old.ok) << "negotiated " << old.version;
  const TlsProbe old_http = TlsHandshake(server_->http_port(), pki_.Cert("ca"), TLS1_1_VERSION);
  EXPECT_FALSE(old_http.ok) << "negotiated " << old_http.version;
  const TlsProbe tls12 = TlsHandshake(server_->port(), pki_.Cert("ca"), TLS1_2_VERSION);
  EXPECT_TRUE(tls12.ok) << tls12.error;
  EXPECT_EQ(tls12.version, "TLSv1.2");
  const TlsProbe best = TlsHandshake(server_->port(), pki_.Cert("ca"));
  EXPECT_TRUE(best.ok) << best.error;
  EXPECT_EQ(best.version, "TLSv1.3");
}

TEST_F(Tls, PlainClientOnTheTlsPortIsClosedAndTheServerStaysUp) {
  StartServer();
  for (uint16_t port : {server_->port(), server_->http_port()}) {
    RawConn raw(port);
    ASSERT_TRUE(raw.ok());
    // A whole request frame, then an HTTP request: neither is a TLS ClientHello.
    raw.Send(Frame(client::BuildHealth(Hdr(1))));
    raw.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    // The server closes the connection; whatever it sends first (a TLS alert) is no reply.
    EXPECT_TRUE(raw.WaitClosed(5'000));
    const std::string& got = raw.buffered();
    EXPECT_EQ(got.find("HTTP/1.1 200"), std::string::npos);
    EXPECT_EQ(got.find("sundial_"), std::string::npos);
  }
  // The plain client library fails cleanly (no hang, no crash on either side).
  auto plain = client::Client::Connect({"127.0.0.1", server_->port()}, {}, 3'000);
  if (plain.ok()) {
    EXPECT_FALSE((*plain)->Health().ok());
  }
  ASSERT_TRUE(server_->running());
  auto good = Connect("ca");
  ASSERT_TRUE(good.ok()) << good.error().ToString();
  EXPECT_TRUE((*good)->Health().ok());
}

TEST_F(Tls, HttpsMetricsAndWssWork) {
  StartServer();
  const TlsProbe metrics = HttpsGet(server_->http_port(), pki_.Cert("ca"), "/metrics");
  ASSERT_TRUE(metrics.ok) << metrics.error;
  EXPECT_NE(metrics.reply.find("200 OK"), std::string::npos) << metrics.reply;
  EXPECT_NE(metrics.reply.find("sundial_"), std::string::npos);
  const TlsProbe page = HttpsGet(server_->http_port(), pki_.Cert("ca"), "/");
  ASSERT_TRUE(page.ok) << page.error;
  EXPECT_NE(page.reply.find("200 OK"), std::string::npos);

  const TlsProbe ws = WssRoundTrip(server_->http_port(), pki_.Cert("ca"),
                                   R"({"request_id":7,"op_type":"Health","op":{}})");
  ASSERT_TRUE(ws.ok) << ws.error;
  EXPECT_NE(ws.reply.find("\"request_id\": 7"), std::string::npos) << ws.reply;
  EXPECT_NE(ws.reply.find("HealthResult"), std::string::npos) << ws.reply;

  // The library's Watch (the CLI's `watch`) over wss: a subscription's first event arrives.
  client::WatchOptions o;
  o.http = {"127.0.0.1", server_->http_port()};
  o.tls = true;
  o.ca_file = pki_.Cert("ca");
  o.timeout_ms = 5'000;
  std::thread producer([&] {
    auto c = Connect("ca");
    ASSERT_TRUE(c.ok()) << c.error().ToString();
    ASSERT_TRUE((*c)->CreateQueue("jobs", {}).ok());
    // Enqueue until the watcher has seen one (it may subscribe after the first enqueue).
    for (int i = 0; i < 200 && !watched_.load(); ++i) {
      ExpectEnqueue(**c, "w" + std::to_string(i));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // pacing the producer only
    }
  });
  auto result = client::Watch(o, [&](const p::EventMessage& event) {
    if (event.event_type() != p::Event::MessageEvent) return true;
    watched_ = true;
    return false;
  });
  producer.join();
  EXPECT_TRUE(result.ok()) << result.error().ToString();
  EXPECT_TRUE(watched_.load());
}

TEST_F(Tls, SighupReloadKeepsOpenConnectionsAndNewOnesSeeTheNewCertificate) {
  ASSERT_TRUE(pki_.MakeServer("server-b", "other-ca"));
  StartServer();
  auto before = Connect("ca");
  ASSERT_TRUE(before.ok()) << before.error().ToString();
  ASSERT_TRUE((*before)->CreateQueue("jobs", {}).ok());
  EXPECT_EQ(TlsHandshake(server_->port(), pki_.Cert("ca")).peer_cn, "server-a");

  CopyCert("server-b");
  Reload("TLS certificate reloaded");
  // The open connection goes on, on its old session.
  ExpectEnqueue(**before, "after-reload");
  // New connections get the new certificate, on both ports.
  EXPECT_EQ(TlsHandshake(server_->port(), pki_.Cert("other-ca")).peer_cn, "server-b");
  EXPECT_EQ(TlsHandshake(server_->http_port(), pki_.Cert("other-ca")).peer_cn, "server-b");
  EXPECT_FALSE(Connect("ca").ok()) << "the old CA no longer vouches for the server";
  auto after = Connect("other-ca");
  ASSERT_TRUE(after.ok()) << after.error().ToString();
  ExpectEnqueue(**after, "new-connection");
}

TEST_F(Tls, SighupWithABrokenCertificateKeepsTheOldOne) {
  StartServer();
  auto before = Connect("ca");
  ASSERT_TRUE(before.ok()) << before.error().ToString();
  ASSERT_TRUE((*before)->CreateQueue("jobs", {}).ok());
  {
    std::ofstream broken(cert_file(), std::ios::trunc);
    broken << "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n";
  }
  Reload("TLS reload failed, still serving the previous certificate");
  EXPECT_NE(server_->log().find("--tls-cert " + cert_file()), std::string::npos) << server_->log();
  ExpectEnqueue(**before, "still-open");
  auto after = Connect("ca");
  ASSERT_TRUE(after.ok()) << after.error().ToString();
  ExpectEnqueue(**after, "new-with-old-cert");
  EXPECT_EQ(TlsHandshake(server_->port(), pki_.Cert("ca")).peer_cn, "server-a");

  // A key that does not match the certificate is refused the same way.
  ASSERT_TRUE(pki_.MakeServer("server-c", "ca"));
  std::filesystem::copy_file(pki_.Cert("server-a"), cert_file(),
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(pki_.Key("server-c"), key_file(),
                             std::filesystem::copy_options::overwrite_existing);
  Reload("does not match the certificate");
  EXPECT_EQ(TlsHandshake(server_->port(), pki_.Cert("ca")).peer_cn, "server-a");
}

// Without TLS there is nothing to reload, but SIGHUP is caught: `systemctl reload` of the Debian
// package's unit (docs/packaging.md) must not end a plain server.
TEST_F(Tls, SighupWithoutTlsChangesNothingAndTheServerStaysUp) {
  server_ = std::make_unique<ServerProcess>(dir_.path() + "/data", std::vector<std::string>{});
  ASSERT_TRUE(server_->Start()) << server_->log();
  Reload("SIGHUP: nothing to reload (TLS is off)");
  Reload("SIGHUP: nothing to reload (TLS is off)");
  auto c = client::Client::Connect({"127.0.0.1", server_->port()}, {}, 5'000);
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  ASSERT_TRUE((*c)->CreateQueue("jobs", {}).ok());
  ExpectEnqueue(**c, "after-sighup");
}

// Start errors: exit code 2 and a line that names the file and the reason.
class TlsStart : public Tls {
 protected:
  std::string StartFails(std::vector<std::string> flags) {
    std::vector<std::string> args = {"--data-dir", dir_.path() + "/data", "--port",
                                     "0",          "--http-port",         "0"};
    args.insert(args.end(), flags.begin(), flags.end());
    // Bounded: a server that started by mistake is stopped when the object goes.
    client::testing::BackgroundProgram server(SUNDIALD_BIN, args);
    EXPECT_EQ(server.WaitExit(30'000), 2) << server.err();
    return server.err();
  }
};

TEST_F(TlsStart, CertWithoutKeyIsAUsageError) {
  EXPECT_NE(StartFails({"--tls-cert", cert_file()}).find("--tls-cert needs --tls-key"),
            std::string::npos);
  EXPECT_NE(StartFails({"--tls-key", key_file()}).find("--tls-key needs --tls-cert"),
            std::string::npos);
}

TEST_F(TlsStart, MissingInvalidOrMismatchedFilesAreRefused) {
  const std::string missing = dir_.path() + "/nope.pem";
  EXPECT_NE(StartFails({"--tls-cert", missing, "--tls-key", key_file()})
                .find("--tls-cert " + missing + ": No such file or directory"),
            std::string::npos);
  const std::string garbage = dir_.path() + "/garbage.pem";
  std::ofstream(garbage) << "hello\n";
  EXPECT_NE(StartFails({"--tls-cert", garbage, "--tls-key", key_file()})
                .find("--tls-cert " + garbage + ": not a PEM certificate chain"),
            std::string::npos);
  ASSERT_TRUE(pki_.MakeServer("server-c", "ca"));
  EXPECT_NE(StartFails({"--tls-cert", cert_file(), "--tls-key", pki_.Key("server-c")})
                .find("does not match the certificate"),
            std::string::npos);
}

}  // namespace
}  // namespace sundial::e2e
