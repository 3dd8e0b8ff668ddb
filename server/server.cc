#include "server/server.h"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "server/internal.h"

namespace sundial::server {

struct Server::Impl {
  Impl(Options o, Engine* e, wal::GroupCommitLog* l, Metrics* m)
      : options(std::move(o)), engine(e), log(l), metrics(m), core(options, e, l, m) {}

  Options options;
  Engine* engine;
  wal::GroupCommitLog* log;
  Metrics* metrics;
  Core core;
  std::vector<std::unique_ptr<Loop>> loops;
  std::unique_ptr<Listener> tcp;
  std::unique_ptr<Listener> http;
  std::unique_ptr<asio::signal_set> signals;
  std::unique_ptr<TlsContexts> tls;
  std::unique_ptr<asio::signal_set> reload_signals;  // SIGHUP

  // SIGHUP: read the certificate and key again. New handshakes use them; open connections keep
  // theirs; a failure keeps the old ones and says why. Without TLS there is nothing to reload,
  // but the signal is still caught: `systemctl reload` sends it to whatever the unit runs
  // (docs/packaging.md), and it must not end a server that has no certificate.
  void WaitForReload() {
    reload_signals->async_wait([this](boost::system::error_code ec, int) {
      if (ec) return;
      std::string error;
      if (!tls) {
        std::fprintf(stderr, "sundiald: SIGHUP: nothing to reload (TLS is off)\n");
      } else if (tls->Reload(&error)) {
        std::fprintf(stderr, "sundiald: SIGHUP: TLS certificate reloaded: %s\n",
                     tls->Describe().c_str());
      } else {
        std::fprintf(stderr,
                     "sundiald: SIGHUP: TLS reload failed, still serving the previous "
                     "certificate: %s\n",
                     error.c_str());
      }
      WaitForReload();
    });
  }

  std::mutex mu;
  std::condition_variable cv;
  bool stop_requested = false;  // GUARDED_BY(mu)

  void Stop() {
    {
      std::lock_guard lock(mu);
      stop_requested = true;
    }
    cv.notify_all();
  }
  void StopLoops() {
    for (auto& loop : loops) loop->Stop();
    core.long_polls().Clear();
    core.result_waits().Clear();
  }
};

Server::Server(Options options, Engine* engine, wal::GroupCommitLog* log, Metrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), engine, log, metrics)) {}

Server::~Server() {
  Impl& d = *impl_;
  d.core.StopTimers();
  d.StopLoops();
}

EffectSink* Server::effect_observer() { return &impl_->core; }
uint16_t Server::port() const { return impl_->tcp ? impl_->tcp->port() : 0; }
uint16_t Server::http_port() const { return impl_->http ? impl_->http->port() : 0; }

Status Server::Start(std::string* error) {
  Impl& d = *impl_;
  const Options& o = d.options;
  if (!o.auth_token_file.empty()) {
    std::ifstream in(o.auth_token_file);
    std::stringstream text;
    text << in.rdbuf();
    std::string token = text.str();
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
      token.pop_back();
    if (!in || token.empty()) {
      *error = "--auth-token-file " + o.auth_token_file + ": cannot read a token from it";
      return InvalidArgument("--auth-token-file");
    }
    d.core.set_auth_token(std::move(token));
  }
  if (!o.tls_cert.empty()) {
    d.tls = std::make_unique<TlsContexts>(o.tls_cert, o.tls_key);
    if (!d.tls->Reload(error)) return InvalidArgument("--tls-cert");
    d.core.set_tls(d.tls.get());
    std::fprintf(stderr, "sundiald: TLS on both ports (1.2 and 1.3): %s\n",
                 d.tls->Describe().c_str());
  }
  const unsigned n =
      o.io_threads ? o.io_threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<Loop*> loops;
  for (unsigned i = 0; i < n; ++i) {
    d.loops.push_back(std::make_unique<Loop>(&d.core, i));
    loops.push_back(d.loops.back().get());
  }
  d.core.SetLoops(loops);
  const std::string address = o.bind == "localhost" ? "127.0.0.1" : o.bind;
  // The listeners accept on the first loop and hand each connection to a loop for life.
  d.tcp = NewTcpListener(loops[0], &d.core);
  if (Status s = d.tcp->Start(address, o.port); !s.ok()) {
    *error = "--port " + std::to_string(o.port) + ": cannot listen on " + address;
    return s;
  }
  d.http = NewHttpListener(loops[0], &d.core);
  if (Status s = d.http->Start(address, o.http_port); !s.ok()) {
    *error = "--http-port " + std::to_string(o.http_port) + ": cannot listen on " + address;
    return s;
  }
  {
    // Outside a cluster the node is its own primary: a Cluster request names it alone.
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    ClusterInfo info;
    info.node = host;
    MemberInfo self;
    self.node = host;
    self.role = RoleKind::kStandalone;
    self.addr = address + ":" + std::to_string(d.tcp->port());
    self.http_addr = address + ":" + std::to_string(d.http->port());
    info.members.push_back(std::move(self));
    d.core.role()->Set(RoleKind::kStandalone, 0, std::move(info));
  }
  d.signals = std::make_unique<asio::signal_set>(loops[0]->io(), SIGINT, SIGTERM);
  d.signals->async_wait([&d](boost::system::error_code ec, int signal) {
    if (ec) return;
    std::fprintf(stderr, "sundiald: signal %d: draining\n", signal);
    d.Stop();
  });
  d.reload_signals = std::make_unique<asio::signal_set>(loops[0]->io(), SIGHUP);
  d.WaitForReload();
  for (auto& loop : d.loops) loop->Start();
  d.core.StartTimers();
  d.core.set_ready(true);
  return Status::Ok();
}

void Server::RequestStop() { impl_->Stop(); }

void Server::Run(int drain_timeout_ms) {
  Impl& d = *impl_;
  {
    std::unique_lock lock(d.mu);
    d.cv.wait(lock, [&] { return d.stop_requested; });
  }
  // Drain: refuse new work, answer the long polls, let in-flight requests finish.
  d.core.set_draining();
  if (d.tcp) d.tcp->Stop();
  if (d.http) d.http->Stop();
  d.core.ExpireAllWaiters();
  for (const auto& c : d.core.registry().All()) c->CloseWhenDone();
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(drain_timeout_ms);
  while (SteadyClock::now() < deadline && !d.core.registry().All().empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a shutdown, not a test
  }
  for (const auto& c : d.core.registry().All()) c->Close();
  d.core.StopTimers();
  if (d.signals) {
    asio::post(d.loops[0]->io(), [&d] {
      d.signals->cancel();
      if (d.reload_signals) d.reload_signals->cancel();
    });
  }
  d.StopLoops();
}

}  // namespace sundial::server
