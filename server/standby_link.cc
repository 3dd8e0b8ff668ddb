#include "server/standby_link.h"

#include <openssl/ssl.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <cstring>

#include "protocol/framing.h"

namespace sundial::server {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using error_code = boost::system::error_code;

void Log(const std::string& line) {
  std::fprintf(stderr, "sundiald: replication: %s\n", line.c_str());
  std::fflush(stderr);
}

// "host:port" → host, port; false when malformed.
bool SplitAddress(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return true;
}

}  // namespace

// One connection's socket and its io_context, run on the link's thread until each step's
// deadline. Stop() posts a close to it from another thread.
struct StandbyLink::Channel {
  asio::io_context io{1};
  tcp::socket socket{io};
  std::shared_ptr<asio::ssl::context> tls_context;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls;
  std::string in;  // received bytes [0, in_len)
  size_t in_len = 0;
  std::string why;  // what failed

  template <typename F>
  void WithStream(F&& f) {
    if (tls) {
      f(*tls);
    } else {
      f(socket);
    }
  }

  // Runs handlers until `done()` or the deadline; at the deadline closes the socket.
  template <typename Done>
  bool RunUntil(const Done& done, SteadyClock::time_point deadline) {
    io.restart();
    while (!done()) {
      if (io.run_one_until(deadline) == 0) break;
    }
    if (done()) return true;
    error_code ignored;
    socket.close(ignored);
    io.restart();
    io.run();
    return false;
  }

  bool Connect(const std::string& address, const StandbyLinkOptions& options,
               SteadyClock::time_point deadline) {
    std::string host, port;
    if (!SplitAddress(address, &host, &port)) {
      why = "the primary's replication address '" + address + "' is not host:port";
      return false;
    }
    tcp::resolver resolver(io);
    error_code ec;
    auto endpoints = resolver.resolve(host, port, ec);
    if (ec) {
      why = "cannot resolve " + host + ": " + ec.message();
      return false;
    }
    bool done = false;
    asio::async_connect(socket, endpoints, [&](const error_code& e, const tcp::endpoint&) {
      done = true;
      ec = e;
    });
    if (!RunUntil([&] { return done; }, deadline) || ec) {
      why = "cannot connect to " + address + ": " + (ec ? ec.message() : "timed out");
      return false;
    }
    socket.set_option(tcp::no_delay(true), ec);
    if (!options.tls) return true;
    tls_context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    SSL_CTX_set_min_proto_version(tls_context->native_handle(), TLS1_2_VERSION);
    tls_context->set_verify_mode(asio::ssl::verify_peer, ec);
    if (options.ca_file.empty()) {
      tls_context->set_default_verify_paths(ec);
    } else {
      tls_context->load_verify_file(options.ca_file, ec);
    }
    if (ec) {
      why = "tls: cannot load the CA certificates: " + ec.message();
      return false;
    }
    tls = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket, *tls_context);
    SSL_set1_host(tls->native_handle(), host.c_str());
    done = false;
    tls->async_handshake(asio::ssl::stream_base::client, [&](const error_code& e) {
      done = true;
      ec = e;
    });
    if (!RunUntil([&] { return done; }, deadline) || ec) {
      why = "tls: handshake with " + address + " failed: " + (ec ? ec.message() : "timed out");
      return false;
    }
    return true;
  }

  bool Send(const std::string& message, SteadyClock::time_point deadline) {
    std::string frame;
    protocol::AppendFrame(message, &frame);
    bool done = false;
    error_code ec;
    WithStream([&](auto& stream) {
      asio::async_write(stream, asio::buffer(frame), [&](const error_code& e, size_t) {
        done = true;
        ec = e;
      });
    });
    if (!RunUntil([&] { return done; }, deadline) || ec) {
      why = "sending to the primary: " + (ec ? ec.message() : std::string("timed out"));
      return false;
    }
    return true;
  }

  // The next whole frame (8-byte aligned copy in *frame), reading until `deadline` if none is
  // buffered; `wait` false: only what is buffered already (false when none).
  bool Next(std::string* frame, SteadyClock::time_point deadline, uint32_t max_frame_bytes,
            bool wait) {
    for (;;) {
      std::string_view view;
      size_t consumed = 0;
      const auto status = protocol::NextFrame(std::string_view(in.data(), in_len), max_frame_bytes,
                                              &view, &consumed);
      if (status == protocol::FrameStatus::kComplete) {
        frame->assign(view);
        std::memmove(in.data(), in.data() + consumed, in_len - consumed);
        in_len -= consumed;
        return true;
      }
      if (status != protocol::FrameStatus::kIncomplete) {
        why = "the primary sent a malformed frame";
        return false;
      }
      if (!wait) return false;
      if (in.size() < in_len + (64 << 10)) in.resize(in_len + (256 << 10));
      bool done = false;
      error_code ec;
      size_t got = 0;
      WithStream([&](auto& stream) {
        stream.async_read_some(asio::buffer(in.data() + in_len, in.size() - in_len),
                               [&](const error_code& e, size_t n) {
                                 done = true;
                                 ec = e;
                                 got = n;
                               });
      });
      if (!RunUntil([&] { return done; }, deadline)) {
        why = "the primary sent nothing for the replication timeout";
        return false;
      }
      if (ec) {
        why = "reading from the primary: " + ec.message();
        return false;
      }
      in_len += got;
    }
  }
};

StandbyLink::StandbyLink(replication::StandbyEnv env, StandbyLinkOptions options,
                         std::function<void(replication::ReloadRequest)> restart)
    : env_(std::move(env)), options_(std::move(options)), restart_(std::move(restart)) {}

StandbyLink::~StandbyLink() { Stop(); }

void StandbyLink::Follow(const replication::LeaderInfo& leader) {
  Stop();
  if (reloading_.load()) return;  // the node restarts: nothing more is taken from anyone
  stop_.store(false);
  thread_ = std::thread([this, leader] { Run(leader); });
}

void StandbyLink::Stop() {
  stop_.store(true);
  {
    MutexLock lock(&mu_);
    if (channel_) {
      std::shared_ptr<Channel> c = channel_;
      asio::post(c->io, [c] {
        error_code ignored;
        c->socket.close(ignored);
      });
    }
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
  connected_.store(false);
}

SteadyClock::time_point StandbyLink::last_ack() const {
  MutexLock lock(&mu_);
  return last_ack_;
}

void StandbyLink::Reload(replication::ReloadRequest request) {
  // Before the node hears of it: no later session may dial again and, say, truncate the very
  // snapshot file it is about to install (a new Welcome of a snapshot opens the same name).
  reloading_.store(true);
  restart_(std::move(request));
}

void StandbyLink::Report(const replication::LeaderInfo& leader, const std::string& why) {
  // A primary that is down is retried every few hundred ms: say so once, not at every retry.
  if (why == last_report_) return;
  last_report_ = why;
  Log("standby of " + leader.node + ": " + why);
}

void StandbyLink::Run(replication::LeaderInfo leader) {
  auto backoff = options_.backoff;
  while (!stop_.load()) {
    const auto began = SteadyClock::now();
    Session(leader);
    connected_.store(false);
    if (stop_.load() || reloading_.load()) return;
    // A connection that lasted resets the backoff; quick failures double it up to 2 s.
    backoff = SteadyClock::now() - began > std::chrono::seconds(5)
                  ? options_.backoff
                  : std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(2));
    const auto deadline = SteadyClock::now() + backoff;
    MutexLock lock(&mu_);
    while (!stop_.load()) {
      if (!cv_.WaitUntil(&mu_, deadline)) break;  // the backoff passed
    }
  }
}

void StandbyLink::Session(const replication::LeaderInfo& leader) {
  auto channel = std::make_shared<Channel>();
  {
    MutexLock lock(&mu_);
    if (stop_.load()) return;
    channel_ = channel;
  }
  struct Forget {
    StandbyLink* link;
    ~Forget() {
      MutexLock lock(&link->mu_);
      link->channel_.reset();
    }
  } forget{this};
  const auto deadline = [this] { return SteadyClock::now() + options_.timeout; };
  const std::string& address = leader.addresses.replication_addr;
  replication::StandbyStream stream(env_);
  if (!channel->Connect(address, options_, deadline()) ||
      !channel->Send(stream.Hello(), deadline())) {
    Report(leader, channel->why);
    return;
  }
  connected_.store(true);
  last_report_.clear();
  const uint32_t max_frame = 64u << 20;
  std::string frame;
  while (!stop_.load()) {
    if (!channel->Next(&frame, deadline(), max_frame, /*wait=*/true)) {
      Report(leader, channel->why);
      return;
    }
    // Everything that arrived together, then one fsync and one acknowledgement for it all.
    bool ack = false;
    for (;;) {
      using Next = replication::StandbyStream::Next;
      const Next next = stream.OnFrame(frame);
      if (next == Next::kAck) ack = true;
      if (next == Next::kClose) {
        Report(leader, stream.why());
        if (stream.must_reseed()) {
          Reload({replication::ReloadRequest::Kind::kReseed, 0, {}, stream.why()});
        }
        return;
      }
      if (next == Next::kTruncate) {
        Reload({replication::ReloadRequest::Kind::kTruncate,
                stream.truncate_to(),
                {},
                "the log diverges from the primary's at " + std::to_string(stream.truncate_to())});
        return;
      }
      if (next == Next::kSnapshotReady) {
        Reload({replication::ReloadRequest::Kind::kSnapshot, stream.snapshot_lsn(),
                stream.snapshot_path(), "a snapshot from the primary"});
        return;
      }
      if (!channel->Next(&frame, deadline(), max_frame, /*wait=*/false)) break;
    }
    primary_durable_end_.store(stream.primary_durable_end());
    primary_end_.store(stream.primary_end());
    if (!ack) continue;
    // Acknowledged only once fsynced here (and only under the epoch promised).
    if (Status s = env_.log->WaitDurable(env_.log->AppendedEndLsn()); !s.ok()) {
      Log("standby of " + leader.node + ": this node's log failed: " + s.ToString());
      return;
    }
    if (!channel->Send(stream.Ack(), deadline())) {
      Report(leader, channel->why);
      return;
    }
    MutexLock lock(&mu_);
    last_ack_ = SteadyClock::now();
  }
}

}  // namespace sundial::server
