// Watch over Boost.Beast: one WebSocket session, in the style of Beast's client examples
// (run → on_resolve → on_connect → on_handshake → on_write → do_read → on_read), each step
// starting with `if (ec) return ...`. The session runs on a private io_context on the caller's
// thread; Finish records the outcome, closes the connection and stops the run.
#include "client/watch.h"

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <optional>
#include <random>
#include <thread>
#include <type_traits>

#include "client/tls_client.h"
#include "protocol/json.h"

namespace sundial::client {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

constexpr uint64_t kSubscribeRequestId = 1;
constexpr size_t kMaxEventFrameBytes = 16u << 20;

template <class Stream>  // beast::tcp_stream, or TlsStream (wss)
class WatchSession {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  // `tls_context`: for TlsStream only.
  WatchSession(const WatchOptions& options, const EventHandler& on_event,
               boost::asio::ssl::context* tls_context = nullptr)
      : options_(options),
        on_event_(on_event),
        resolver_(io_),
        ws_(MakeStream(io_, tls_context)),
        answer_timer_(io_),
        codec_("ServerMessage") {}

  Result<void> Run() {
    resolver_.async_resolve(options_.http.host, std::to_string(options_.http.port),
                            [this](const error_code& ec, tcp::resolver::results_type results) {
                              OnResolve(ec, std::move(results));
                            });
    io_.run();
    if (!outcome_) return Unreachable("the connection ended");
    return std::move(*outcome_);
  }

  // Whether the server accepted the Subscribe (events may have followed).
  bool subscribed() const { return subscribed_; }

 private:
  static websocket::stream<Stream> MakeStream(asio::io_context& io,
                                              boost::asio::ssl::context* tls_context) {
    if constexpr (kTls) {
      return websocket::stream<Stream>(io, *tls_context);
    } else {
      return websocket::stream<Stream>(io);
    }
  }

  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(options_.timeout_ms);
  }

  // Records the first outcome, closes the connection and stops the run: handlers still queued
  // (the WebSocket stream keeps a timer of its own) are destroyed with io_, never invoked.
  void Finish(Result<void> outcome) {
    if (outcome_) return;
    outcome_ = std::move(outcome);
    answer_timer_.cancel();
    resolver_.cancel();
    error_code ignored;
    beast::get_lowest_layer(ws_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(ws_).close();
    io_.stop();
  }
  Error Unreachable(const std::string& what) const {
    return Error::Connection(Code::kUnavailable,
                             "websocket " + options_.http.ToString() + ": " + what);
  }

  void OnResolve(const error_code& ec, tcp::resolver::results_type results) {
    if (ec) return Finish(Unreachable("cannot resolve: " + ec.message()));
    beast::get_lowest_layer(ws_).expires_after(timeout());
    beast::get_lowest_layer(ws_).async_connect(
        results, [this](const error_code& e, const tcp::endpoint&) { OnConnect(e); });
  }

  void OnConnect(const error_code& ec) {
    if (ec == beast::error::timeout) {
      return Finish(Unreachable("cannot connect: timed out after " +
                                std::to_string(options_.timeout_ms) + " ms"));
    }
    if (ec) return Finish(Unreachable("cannot connect: " + ec.message()));
    if constexpr (kTls) {
      SSL* ssl = ws_.next_layer().native_handle();
      tls::PrepareConnection(ssl, options_.http.host);
      ws_.next_layer().async_handshake(
          asio::ssl::stream_base::client, [this, ssl](const error_code& e) {
            if (e == beast::error::timeout) return Finish(Unreachable("TLS handshake timed out"));
            if (e) {
              return Finish(Error::Connection(
                  Code::kUnavailable, tls::HandshakeFailure(ssl, e, options_.http.ToString())));
            }
            Upgrade();
          });
    } else {
      Upgrade();
    }
  }

  void Upgrade() {
    // From here the WebSocket stream's own timeouts apply.
    beast::get_lowest_layer(ws_).expires_never();
    websocket::stream_base::timeout timeouts;
    timeouts.handshake_timeout = timeout();
    timeouts.idle_timeout = timeout();
    timeouts.keep_alive_pings = true;
    ws_.set_option(timeouts);
    ws_.read_message_max(kMaxEventFrameBytes);
    const std::string token = options_.token;
    ws_.set_option(websocket::stream_base::decorator([token](websocket::request_type& request) {
      request.set(http::field::user_agent, "sundial-cli");
      if (!token.empty()) request.set(http::field::authorization, "Bearer " + token);
    }));
    ws_.async_handshake(upgrade_response_, options_.http.ToString(), "/ws",
                        [this](const error_code& e) { OnHandshake(e); });
  }

  void OnHandshake(const error_code& ec) {
    if (ec == websocket::error::upgrade_declined) {
      const unsigned status = upgrade_response_.result_int();
      const Code code =
          status == 401 || status == 403 ? Code::kUnauthenticated : Code::kUnavailable;
      return Finish(Error::Server(code, "websocket upgrade refused: HTTP " +
                                            std::to_string(status) + " " +
                                            std::string(upgrade_response_.reason())));
    }
    if (ec == beast::error::timeout) return Finish(Unreachable("upgrade timed out"));
    if (ec) return Finish(Unreachable("upgrade: " + ec.message()));

    std::string request = BuildSubscribe({kSubscribeRequestId}, options_.queue, options_.filter);
    protocol::JsonCodec request_codec("Request");
    std::string error;
    if (!request_codec.ToJson(request, &subscribe_text_, &error)) {
      return Finish(Error::Local(Code::kInvalidArgument, "subscribe: " + error));
    }
    ws_.text(true);
    ws_.async_write(asio::buffer(subscribe_text_),
                    [this](const error_code& e, size_t) { OnWrite(e); });
    answer_timer_.expires_after(timeout());
    answer_timer_.async_wait([this](const error_code& e) {
      if (e) return;  // canceled: the answer came
      Finish(Unreachable("no answer to subscribe within " + std::to_string(options_.timeout_ms) +
                         " ms"));
    });
  }

  void OnWrite(const error_code& ec) {
    if (ec) return Finish(Unreachable("write: " + ec.message()));
    DoRead();
  }

  void DoRead() {
    ws_.async_read(buffer_, [this](const error_code& ec, size_t) { OnRead(ec); });
  }

  void OnRead(const error_code& ec) {
    if (ec == websocket::error::closed) return Finish(Unreachable("closed by the server"));
    if (ec) return Finish(Unreachable("read: " + ec.message()));
    std::string frame = beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    if (ws_.got_text()) {
      std::string bytes, error;
      if (!codec_.FromJson(frame, &bytes, &error)) {
        return Finish(Error::Connection(Code::kInternal,
                                        "protocol: a text frame from the server is not a "
                                        "ServerMessage: " +
                                            error));
      }
      frame = std::move(bytes);
    }
    if (!VerifyServerMessage(frame)) {
      return Finish(Error::Connection(Code::kInternal,
                                      "protocol: a frame from the server failed verification"));
    }
    const auto* message = flatbuffers::GetRoot<protocol::ServerMessage>(frame.data());
    if (const protocol::Response* response = message->body_as_Response()) {
      if (response->request_id() == kSubscribeRequestId || response->request_id() == 0) {
        answer_timer_.cancel();
        Result<Reply> reply = Reply::FromVerified(std::move(frame));
        if (!reply.ok()) return Finish(reply.error());
        subscribed_ = true;
      }
    } else if (const protocol::EventMessage* event = message->body_as_EventMessage()) {
      if (!on_event_(*event)) return Finish(Result<void>());
      if (const auto* closed = event->event_as_SubscriptionClosed()) {
        return Finish(Error::Server(
            Code::kUnavailable,
            "subscription closed: " + (closed->reason() ? closed->reason()->str() : "")));
      }
    }
    DoRead();
  }

  const WatchOptions& options_;
  const EventHandler& on_event_;
  asio::io_context io_;
  tcp::resolver resolver_;
  websocket::stream<Stream> ws_;
  asio::steady_timer answer_timer_;
  websocket::response_type upgrade_response_;
  beast::flat_buffer buffer_;
  std::string subscribe_text_;
  protocol::JsonCodec codec_;
  std::optional<Result<void>> outcome_;
  bool subscribed_ = false;
};

// One subscription on options.http; `subscribed` says whether the server accepted it.
Result<void> WatchOnce(const WatchOptions& options, const EventHandler& on_event,
                       bool* subscribed) {
  if (!options.tls) {
    WatchSession<beast::tcp_stream> session(options, on_event);
    Result<void> out = session.Run();
    *subscribed = session.subscribed();
    return out;
  }
  auto context = tls::MakeContext(options.ca_file);
  if (!context.ok()) return context.error();
  WatchSession<TlsStream> session(options, on_event, context->get());
  Result<void> out = session.Run();
  *subscribed = session.subscribed();
  return out;
}

// The HTTP address of the cluster's primary, found through `client` (which follows it).
Result<Address> PrimaryHttpAddress(Client& client) {
  // Health goes to the primary: once it is answered, the client is connected to it.
  if (Result<Reply> health = client.Health(); !health.ok()) return health.error();
  Result<Reply> cluster = client.Cluster();
  if (!cluster.ok()) return cluster.error();
  const protocol::ClusterResult* c = cluster->result<protocol::ClusterResult>();
  if (c != nullptr && c->members() != nullptr && c->node() != nullptr) {
    for (const protocol::ClusterMember* m : *c->members()) {
      if (m->node() != nullptr && m->node()->string_view() == c->node()->string_view() &&
          m->http_addr() != nullptr) {
        return ParseAddress(m->http_addr()->string_view(), kDefaultHttpPort);
      }
    }
  }
  return Error::Connection(Code::kInternal,
                           "cluster: the primary did not list its own HTTP address");
}

}  // namespace

Result<void> Watch(const WatchOptions& options, const EventHandler& on_event) {
  bool subscribed = false;
  if (options.cluster.size() < 2) return WatchOnce(options, on_event, &subscribed);

  ConnectOptions connect;
  connect.token = options.token;
  connect.timeout_ms = options.timeout_ms;
  connect.tls = options.tls;
  connect.ca_file = options.ca_file;
  connect.retry = options.retry;
  using Clock = std::chrono::steady_clock;
  std::mt19937 rng{std::random_device{}()};
  auto since = Clock::now();  // the last time a subscription stood (or the start)
  int backoff_ms = std::max(1, options.retry.initial_backoff_ms);
  std::unique_ptr<Client> client;
  while (true) {
    Error last;
    if (client == nullptr) {
      Result<std::unique_ptr<Client>> connected = Client::Connect(options.cluster, connect);
      if (connected.ok()) {
        client = std::move(*connected);
      } else {
        last = connected.error();
      }
    }
    if (client != nullptr) {
      Result<Address> http = PrimaryHttpAddress(*client);
      if (http.ok()) {
        WatchOptions one = options;
        one.cluster.clear();
        one.http = *http;
        Result<void> watched = WatchOnce(one, on_event, &subscribed);
        // Ok: the handler stopped. A refusal (a bad queue or filter, the token) is final.
        if (watched.ok() || watched.error().code != Code::kUnavailable) return watched;
        last = watched.error();
        if (subscribed) {
          since = Clock::now();
          backoff_ms = std::max(1, options.retry.initial_backoff_ms);
        }
      } else {
        last = http.error();
        if (last.code == Code::kUnauthenticated) return last;
      }
    }
    const auto now = Clock::now();
    const auto give_up = since + std::chrono::milliseconds(options.retry.budget_ms);
    if (now >= give_up) return last;
    std::uniform_int_distribution<int> jitter(backoff_ms / 2, backoff_ms);
    std::this_thread::sleep_for(
        std::min<Clock::duration>(std::chrono::milliseconds(jitter(rng)), give_up - now));
    backoff_ms = std::min(backoff_ms * 2, std::max(1, options.retry.max_backoff_ms));
  }
}

}  // namespace sundial::client
