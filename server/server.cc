#include "server/server.h"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/mutex.h"
#include "server/internal.h"
#include "server/replica_node.h"
#include "server/replication_port.h"

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
  std::unique_ptr<Listener> replication;
  // Cluster mode.
  wal::FileSystem* fs = nullptr;
  FloorClock* clock = nullptr;
  std::function<void(replication::ReloadRequest)> reload;
  std::unique_ptr<ReplicaNode> node;
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
      Status reloaded;
      if (!tls) {
        std::fprintf(stderr, "sundiald: SIGHUP: nothing to reload (TLS is off)\n");
      } else if ((reloaded = tls->Reload()).ok()) {
        std::fprintf(stderr, "sundiald: SIGHUP: TLS certificate reloaded: %s\n",
                     tls->Describe().c_str());
      } else {
        std::fprintf(stderr,
                     "sundiald: SIGHUP: TLS reload failed, still serving the previous "
                     "certificate: %s\n",
                     std::string(reloaded.detail()).c_str());
      }
      WaitForReload();
    });
  }

  Mutex mu;
  CondVar cv;
  bool stop_requested GUARDED_BY(mu) = false;

  void Stop() {
    {
      MutexLock lock(&mu);
      stop_requested = true;
    }
    cv.SignalAll();
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
uint16_t Server::replication_port() const {
  return impl_->replication ? impl_->replication->port() : 0;
}

uint64_t Server::RetainFrom() const { return impl_->node ? impl_->node->RetainFrom() : UINT64_MAX; }

void Server::EnableCluster(wal::FileSystem* fs, FloorClock* clock,
                           std::function<void(replication::ReloadRequest)> reload) {
  impl_->fs = fs;
  impl_->clock = clock;
  impl_->reload = std::move(reload);
}

Status Server::Start() {
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
      return Status(Code::kInvalidArgument,
                    "--auth-token-file " + o.auth_token_file + ": cannot read a token from it");
    }
    d.core.set_auth_token(std::move(token));
  }
  if (!o.tls_cert.empty()) {
    d.tls = std::make_unique<TlsContexts>(o.tls_cert, o.tls_key);
    if (Status s = d.tls->Reload(); !s.ok()) return s;
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
    return s.WithContext("--port " + std::to_string(o.port) + " on " + address);
  }
  d.http = NewHttpListener(loops[0], &d.core);
  if (Status s = d.http->Start(address, o.http_port); !s.ok()) {
    return s.WithContext("--http-port " + std::to_string(o.http_port) + " on " + address);
  }
  if (!o.cluster.empty()) {
    if (d.fs == nullptr) return Status(Code::kInternal, "--cluster: EnableCluster was not called");
    d.node = std::make_unique<ReplicaNode>(o, &d.core, d.engine, d.log, d.fs, d.clock, d.reload);
    d.replication = NewReplicationListener(loops[0], &d.core, d.node.get());
    if (Status s = d.replication->Start(address, o.replication_port); !s.ok()) {
      return s.WithContext("--replication-port " + std::to_string(o.replication_port) + " on " +
                           address);
    }
  }
  const std::string advertised = o.advertise_host.empty() ? address : o.advertise_host;
  if (d.node) {
    // In a cluster: no writes until the coordinator says this node leads.
    ClusterInfo info;
    info.cluster = o.cluster;
    info.node = o.node_name;
    info.replication = o.replication;
    d.core.role()->Set(RoleKind::kUnknown, 0, std::move(info));
  } else {
    // Outside a cluster the node is its own primary: a Cluster request names it alone.
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    ClusterInfo info;
    info.node = host;
    MemberInfo self;
    self.node = host;
    self.role = RoleKind::kStandalone;
    self.addr = o.advertise_addr.empty() ? advertised + ":" + std::to_string(d.tcp->port())
                                         : o.advertise_addr;
    self.http_addr = advertised + ":" + std::to_string(d.http->port());
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
  if (d.node) {
    replication::NodeAddresses addresses{
        o.advertise_addr.empty() ? advertised + ":" + std::to_string(d.tcp->port())
                                 : o.advertise_addr,
        advertised + ":" + std::to_string(d.http->port()),
        o.advertise_replication.empty() ? advertised + ":" + std::to_string(d.replication->port())
                                        : o.advertise_replication};
    if (Status s = d.node->Start(std::move(addresses)); !s.ok()) return s;
  }
  return Status::Ok();
}

void Server::RequestStop() { impl_->Stop(); }

void Server::Run(int drain_timeout_ms) {
  Impl& d = *impl_;
  {
    MutexLock lock(&d.mu);
    while (!d.stop_requested) d.cv.Wait(&d.mu);
  }
  // Drain: refuse new work, answer the long polls, let in-flight requests finish. A primary's
  // standbys stay connected meanwhile (the replies in flight wait for their acknowledgement);
  // then the node gives up its lease, so a standby takes over at once.
  d.core.set_draining();
  if (d.tcp) d.tcp->Stop();
  if (d.http) d.http->Stop();
  if (d.replication) d.replication->Stop();
  d.core.ExpireAllWaiters();
  const auto clients = [&d] {
    std::vector<std::shared_ptr<Session>> out;
    for (auto& c : d.core.registry().All()) {
      if (c->transport() != Transport::kReplication) out.push_back(std::move(c));
    }
    return out;
  };
  for (const auto& c : clients()) c->CloseWhenDone();
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(drain_timeout_ms);
  while (SteadyClock::now() < deadline && !clients().empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a shutdown, not a test
  }
  if (d.node) d.node->Stop();
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
