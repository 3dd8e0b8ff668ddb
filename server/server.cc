#include "server/server.h"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "server/internal.h"

namespace sundial::server {

bool IsLoopback(const std::string& address) {
  if (address == "localhost") return true;
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  return !ec && ip.is_loopback();
}

struct Server::Impl {
  Impl(Options o, Engine* e, wal::GroupCommitLog* l, Metrics* m)
      : options(std::move(o)), engine(e), log(l), metrics(m), core(options, e, l, &io, m) {}

  Options options;
  Engine* engine;
  wal::GroupCommitLog* log;
  Metrics* metrics;
  asio::io_context io;
  Core core;
  std::unique_ptr<Listener> tcp;
  std::unique_ptr<Listener> http;
  std::unique_ptr<asio::signal_set> signals;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;

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
};

Server::Server(Options options, Engine* engine, wal::GroupCommitLog* log, Metrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), engine, log, metrics)) {}

Server::~Server() {
  Impl& d = *impl_;
  if (d.work) d.work.reset();
  d.io.stop();
  for (auto& t : d.threads) t.join();
  d.core.StopTicker();
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
  if (!IsLoopback(o.bind) && d.core.auth_token().empty() && !o.insecure_bind) {
    *error = "--bind " + o.bind +
             ": listening beyond loopback needs --auth-token-file (or --insecure-bind)";
    return InvalidArgument("--bind");
  }
  const std::string address = o.bind == "localhost" ? "127.0.0.1" : o.bind;
  d.tcp = NewTcpListener(&d.io, &d.core);
  if (Status s = d.tcp->Start(address, o.port); !s.ok()) {
    *error = "--port " + std::to_string(o.port) + ": cannot listen on " + address;
    return s;
  }
  d.http = NewHttpListener(&d.io, &d.core);
  if (Status s = d.http->Start(address, o.http_port); !s.ok()) {
    *error = "--http-port " + std::to_string(o.http_port) + ": cannot listen on " + address;
    d.tcp->Stop();
    return s;
  }
  d.signals = std::make_unique<asio::signal_set>(d.io, SIGINT, SIGTERM);
  d.signals->async_wait([&d](boost::system::error_code ec, int signal) {
    if (ec) return;
    std::fprintf(stderr, "sundiald: signal %d: draining\n", signal);
    d.Stop();
  });
  d.work.emplace(d.io.get_executor());
  unsigned n = o.io_threads ? o.io_threads : std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < n; ++i) d.threads.emplace_back([&d] { d.io.run(); });
  d.core.StartTicker();
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
  d.core.StopTicker();
  if (d.signals) {
    asio::post(d.io, [&d] { d.signals->cancel(); });
  }
  d.work.reset();
  d.io.stop();
  for (auto& t : d.threads) t.join();
  d.threads.clear();
}

}  // namespace sundial::server
