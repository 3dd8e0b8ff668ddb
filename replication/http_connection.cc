#include "replication/http_connection.h"

#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <utility>

namespace sundial::replication {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr size_t kHeaderLimitBytes = 64 * 1024;
constexpr size_t kStreamChunkBytes = 16 * 1024;

long long MillisLeft(EtcdClock::time_point from, EtcdClock::time_point deadline) {
  if (deadline <= from) return 0;
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - from).count();
}

// The peer closed or reset the connection: on a reused keep-alive connection before any byte
// of the reply, the server had dropped the idle connection and never read the request.
bool ClosedByPeer(const error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == http::error::end_of_stream;
}

}  // namespace

struct HttpConnection::Impl {
  EtcdEndpoint endpoint;
  std::string url;
  size_t max_body_bytes;
  asio::io_context io;
  tcp::socket socket{io};
  beast::flat_buffer buffer;
  bool open = false;
  bool reused = false;  // a reply was read on this socket: the next request reuses it
  std::atomic<bool> interrupted{false};
  std::optional<http::response_parser<http::buffer_body>> stream;
  std::string stream_target;  // the streamed request's target, for messages
  std::array<char, kStreamChunkBytes> chunk{};

  Impl(EtcdEndpoint e, size_t limit)
      : endpoint(std::move(e)), url(endpoint.url()), max_body_bytes(limit) {}

  // Closes the socket: what is pending on it completes with operation_aborted. Safe while an
  // operation is pending (it leaves the buffer and the parser the operation uses alone).
  void Abort() {
    error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
    open = false;
  }

  // Abort and forget the connection's state. REQUIRES: no operation pending.
  void CloseSocket() {
    Abort();
    reused = false;
    buffer.clear();
    stream.reset();
  }

  // Runs handlers until `done()` or the deadline. Past the deadline `cancel()` aborts what is
  // outstanding, and the aborted handlers run before this returns (they refer to the caller's
  // locals). True when done in time.
  template <typename Done, typename Cancel>
  bool RunUntil(const Done& done, EtcdClock::time_point deadline, const Cancel& cancel) {
    io.restart();
    while (!done()) {
      if (io.run_one_until(deadline) == 0) break;
    }
    if (done()) return true;
    cancel();
    while (!done()) {
      io.restart();
      io.run_one();
    }
    return false;
  }

  EtcdError Error(std::string_view target, Code code, std::string what, bool in_doubt) const {
    std::string message = "etcd " + url;
    message.append(target);
    message += ": ";
    message += what;
    return {code, std::move(message), in_doubt};
  }

  EtcdError Interrupted(std::string_view target) const {
    return Error(target, Code::kUnavailable, "interrupted", false);
  }

  // Connects by `deadline`. nullopt when connected.
  std::optional<EtcdError> Connect(std::string_view target, EtcdClock::time_point deadline) {
    const auto start = EtcdClock::now();
    auto timed_out = [&](const char* what) {
      return Error(target, Code::kUnavailable,
                   std::string(what) + ": timed out after " +
                       std::to_string(MillisLeft(start, deadline)) + " ms",
                   false);
    };
    std::vector<tcp::endpoint> addresses;
    error_code ec;
    const asio::ip::address address = asio::ip::make_address(endpoint.host, ec);
    if (!ec) {
      addresses.emplace_back(address, endpoint.port);
    } else {
      // A name: resolved on every connect (the address behind it may move).
      tcp::resolver resolver(io);
      bool resolved = false;
      resolver.async_resolve(endpoint.host, std::to_string(endpoint.port),
                             [&](const error_code& e, const tcp::resolver::results_type& r) {
                               resolved = true;
                               ec = e;
                               for (const auto& entry : r) addresses.push_back(entry.endpoint());
                             });
      if (!RunUntil([&] { return resolved; }, deadline, [&] { resolver.cancel(); })) {
        return timed_out("resolve");
      }
      if (interrupted) return Interrupted(target);
      if (ec) return Error(target, Code::kUnavailable, "resolve: " + ec.message(), false);
    }
    bool connected = false;
    asio::async_connect(socket, addresses, [&](const error_code& e, const tcp::endpoint&) {
      connected = true;
      ec = e;
    });
    if (!RunUntil([&] { return connected; }, deadline, [&] { Abort(); })) {
      CloseSocket();
      return timed_out("connect");
    }
    if (interrupted) {
      CloseSocket();
      return Interrupted(target);
    }
    if (ec) {
      CloseSocket();
      return Error(target, Code::kUnavailable, "connect: " + ec.message(), false);
    }
    socket.set_option(tcp::no_delay(true), ec);
    open = true;
    reused = false;
    return std::nullopt;
  }

  http::request<http::string_body> MakeRequest(std::string_view target, std::string_view body) {
    http::request<http::string_body> request{http::verb::post, target, 11};
    request.set(http::field::host, endpoint.host + ":" + std::to_string(endpoint.port));
    request.set(http::field::content_type, "application/json");
    // gRPC metadata through the gateway: a member without a leader refuses at once (and
    // cancels its watches) instead of serving stale data or holding the request.
    request.set("Grpc-Metadata-Hasleader", "true");
    request.keep_alive(true);
    request.body() = std::string(body);
    request.prepare_payload();
    return request;
  }

  // Connects if needed and writes the request. `fresh` tells whether the socket was new.
  // nullopt when written.
  std::optional<EtcdError> Send(std::string_view target, std::string_view body,
                                EtcdClock::time_point deadline, bool* fresh,
                                EtcdClock::time_point* sent, bool* retry) {
    *retry = false;
    if (interrupted) return Interrupted(target);
    *fresh = !open;
    if (!open) {
      if (auto error = Connect(target, deadline)) return error;
    }
    auto request = MakeRequest(target, body);
    error_code ec;
    bool written = false;
    size_t written_bytes = 0;
    *sent = EtcdClock::now();
    http::async_write(socket, request, [&](const error_code& e, size_t n) {
      written = true;
      written_bytes = n;
      ec = e;
    });
    const auto start = EtcdClock::now();
    if (!RunUntil([&] { return written; }, deadline, [&] { Abort(); })) {
      CloseSocket();
      return Error(target, Code::kUnavailable,
                   "write: timed out after " + std::to_string(MillisLeft(start, deadline)) + " ms",
                   written_bytes > 0);
    }
    if (interrupted) {
      CloseSocket();
      return Interrupted(target);
    }
    if (ec) {
      const bool was_reused = !*fresh;
      CloseSocket();
      *retry = was_reused && ClosedByPeer(ec);
      return Error(target, Code::kUnavailable, "write: " + ec.message(), false);
    }
    return std::nullopt;
  }

  // The error for a failed read of a reply to a request that was written.
  EtcdError ReadFailure(std::string_view target, const error_code& ec, bool timed_out,
                        EtcdClock::time_point start, EtcdClock::time_point deadline) {
    if (interrupted) return Interrupted(target);
    if (timed_out) {
      return Error(target, Code::kUnavailable,
                   "no reply within " + std::to_string(MillisLeft(start, deadline)) + " ms", true);
    }
    if (ec == http::error::body_limit) {
      return Error(target, Code::kResourceExhausted,
                   "reply larger than " + std::to_string(max_body_bytes) + " bytes", true);
    }
    if (ec == http::error::header_limit) {
      return Error(target, Code::kInternal, "reply header over 64 KiB", true);
    }
    if (ec.category() == http::make_error_code(http::error::bad_version).category() &&
        !ClosedByPeer(ec) && ec != http::error::partial_message) {
      return Error(target, Code::kInternal, "not an HTTP reply: " + ec.message(), true);
    }
    return Error(target, Code::kUnavailable, "read: " + ec.message(), true);
  }
};

HttpConnection::HttpConnection(EtcdEndpoint endpoint, size_t max_body_bytes)
    : impl_(std::make_unique<Impl>(std::move(endpoint), max_body_bytes)) {}

HttpConnection::~HttpConnection() = default;

const EtcdEndpoint& HttpConnection::endpoint() const { return impl_->endpoint; }

std::string HttpConnection::Describe(std::string_view target) const {
  std::string s = "etcd " + impl_->url;
  s.append(target);
  return s;
}

void HttpConnection::Close() { impl_->CloseSocket(); }

void HttpConnection::Interrupt() {
  impl_->interrupted = true;
  // Runs on the thread inside the operation in progress (or the next one): closing the
  // socket there aborts what it waits for.
  asio::post(impl_->io, [impl = impl_.get()] { impl->Abort(); });
}

EtcdResult<HttpReply> HttpConnection::Post(std::string_view target, std::string_view body,
                                           EtcdClock::time_point deadline) {
  Impl& c = *impl_;
  c.stream.reset();
  // A second try only for a reused connection the server had already closed.
  for (int attempt = 0;; ++attempt) {
    bool fresh = false;
    bool retry = false;
    HttpReply reply;
    if (auto error = c.Send(target, body, deadline, &fresh, &reply.sent, &retry)) {
      if (retry && attempt == 0) continue;
      return *error;
    }
    http::response_parser<http::string_body> parser;
    parser.header_limit(kHeaderLimitBytes);
    parser.body_limit(c.max_body_bytes);
    error_code ec;
    bool read = false;
    http::async_read(c.socket, c.buffer, parser, [&](const error_code& e, size_t) {
      read = true;
      ec = e;
    });
    const auto start = EtcdClock::now();
    const bool in_time = c.RunUntil([&] { return read; }, deadline, [&] { c.Abort(); });
    if (!in_time || ec || c.interrupted) {
      const bool stale = !fresh && !parser.got_some() && ClosedByPeer(ec) && !c.interrupted;
      c.CloseSocket();
      if (in_time && stale && attempt == 0) continue;
      return c.ReadFailure(target, ec, !in_time, start, deadline);
    }
    reply.status = static_cast<int>(parser.get().result_int());
    reply.body = std::move(parser.get().body());
    if (parser.get().keep_alive()) {
      c.reused = true;
    } else {
      c.CloseSocket();
    }
    return reply;
  }
}

EtcdResult<int> HttpConnection::StartStream(std::string_view target, std::string_view body,
                                            EtcdClock::time_point deadline) {
  Impl& c = *impl_;
  c.stream.reset();
  for (int attempt = 0;; ++attempt) {
    bool fresh = false;
    bool retry = false;
    EtcdClock::time_point sent;
    if (auto error = c.Send(target, body, deadline, &fresh, &sent, &retry)) {
      if (retry && attempt == 0) continue;
      return *error;
    }
    c.stream.emplace();
    c.stream_target = std::string(target);
    c.stream->header_limit(kHeaderLimitBytes);
    c.stream->body_limit(boost::none);  // a stream: the reader bounds each message
    error_code ec;
    bool read = false;
    http::async_read_header(c.socket, c.buffer, *c.stream, [&](const error_code& e, size_t) {
      read = true;
      ec = e;
    });
    const auto start = EtcdClock::now();
    const bool in_time = c.RunUntil([&] { return read; }, deadline, [&] { c.Abort(); });
    if (!in_time || ec || c.interrupted) {
      const bool stale =
          c.stream && !fresh && !c.stream->got_some() && ClosedByPeer(ec) && !c.interrupted;
      c.CloseSocket();
      if (in_time && stale && attempt == 0) continue;
      return c.ReadFailure(target, ec, !in_time, start, deadline);
    }
    return static_cast<int>(c.stream->get().result_int());
  }
}

EtcdResult<bool> HttpConnection::ReadStream(std::string& out, EtcdClock::time_point deadline) {
  Impl& c = *impl_;
  const std::string_view target = c.stream_target;
  if (c.interrupted) return c.Interrupted(target);
  if (!c.stream) return c.Error(target, Code::kInternal, "no stream started", false);
  const auto start = EtcdClock::now();
  while (true) {
    if (c.stream->is_done()) return false;
    auto& body = c.stream->get().body();
    body.data = c.chunk.data();
    body.size = c.chunk.size();
    body.more = true;
    error_code ec;
    bool read = false;
    http::async_read_some(c.socket, c.buffer, *c.stream, [&](const error_code& e, size_t) {
      read = true;
      ec = e;
    });
    const bool in_time = c.RunUntil([&] { return read; }, deadline, [&] { c.Abort(); });
    if (ec == http::error::need_buffer) ec = {};
    if (!in_time || ec || c.interrupted) {
      EtcdError error = c.ReadFailure(target, ec, !in_time, start, deadline);
      if (!in_time && !c.interrupted) {
        error.message = "etcd " + c.url + std::string(target) + ": nothing received for " +
                        std::to_string(MillisLeft(start, deadline)) + " ms";
      }
      error.in_doubt = false;
      c.CloseSocket();
      return error;
    }
    // The parser may be torn down by a posted Interrupt; it was not (checked above).
    const size_t n = c.chunk.size() - c.stream->get().body().size;
    out.append(c.chunk.data(), n);
    if (n > 0) return true;
  }
}

}  // namespace sundial::replication
