// The HTTP + WebSocket transport (docs/protocol.md, "WebSocket"), Boost.Beast on the second port:
//   GET /healthz  200 while the process runs
//   GET /readyz   200 once recovery is done; 503 with the reason while draining or after the
//                 WAL failed
//   GET /metrics  Prometheus text (server/metrics.h)
//   GET /         the dashboard (server/dashboard.h): the page, its assets, sign-in/out
//   /v1/...       the HTTP JSON API (server/http_api.h, docs/http-api.md): bodies up to
//                 --max-frame-bytes, answered through the operation table by an HttpApiCall
//   /ws           WebSocket: binary frames carry the TCP protocol's FlatBuffers, text frames
//                 their JSON form (protocol/json.h); `subscribe` works here only.
// The request line and headers must arrive within --handshake-timeout-ms (slow loris), bodies
// are limited to 64 KiB, WebSocket messages to --max-frame-bytes. With --auth-token-file an
// upgrade needs `Authorization: Bearer TOKEN` or a dashboard session cookie; `Origin` must be
// one of --allowed-origins, or (without that flag) absent or the server's own host. Under
// --dashboard read-only a browser page's connection is read-only (Access::kReadOnly: the
// operation table refuses its mutations).
//
// TLS (--tls-cert/--tls-key, server/tls.h): HTTPS and wss on the same port, the sessions being
// templates on their stream (beast::tcp_stream or an ssl_stream over one), as in Beast's
// advanced_server_flex. The TLS handshake must finish within --handshake-timeout-ms.
#include <sys/socket.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>

#include <cerrno>
#include <cstdio>
#include <deque>
#include <functional>
#include <type_traits>
#include <utility>

#include "protocol/json.h"
#include "protocol/sundial_generated.h"
#include "protocol/verify.h"
#include "server/acceptor.h"
#include "server/connection.h"
#include "server/dashboard.h"
#include "server/http_api.h"
#include "server/internal.h"

namespace sundial::server {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace fb = flatbuffers;
namespace p = protocol;
using tcp = asio::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

constexpr size_t kMaxEventBacklog = 10'000;  // events queued for one subscriber before it is cut

template <class Stream>  // beast::tcp_stream or TlsStream
class WsSession final : public Connection {
 public:
  // `stream`: the HTTP connection being upgraded (TLS already established).
  // `tls_context`: what a TLS stream was made with, kept alive for the connection (else null).
  // `tick_json`: the JSON of the shared stats ticks, printed once for every session.
  WsSession(Stream stream, std::shared_ptr<asio::ssl::context> tls_context, Loop* loop, Core* core,
            Access access, SharedTickJson* tick_json)
      : Connection(loop, core, Transport::kWebSocket, access, "WebSocket", OnBadInput::kKeepOpen),
        ws_(std::move(stream)),
        tls_context_(std::move(tls_context)),
        tick_json_(tick_json) {}

  // On the loop. Counted from here: the HTTP connection it was is no longer counted.
  void Accept(http::request<http::string_body> request) {
    Open();
    websocket::stream_base::timeout timeouts;
    timeouts.handshake_timeout = std::chrono::milliseconds(options_.handshake_timeout_ms);
    timeouts.idle_timeout = std::chrono::milliseconds(options_.idle_timeout_ms);
    timeouts.keep_alive_pings = true;
    ws_.set_option(timeouts);
    ws_.read_message_max(options_.max_frame_bytes);
    ws_.binary(true);
    ws_.async_accept(request, [self = Self()](beast::error_code ec) {
      if (ec) return self->DoClose();
      self->Read();
    });
  }

  void QueueReply(std::string_view message) override {
    Queue(std::make_shared<const std::string>(message), false);
  }

  void QueueEvent(std::shared_ptr<const std::string> message) override {
    if (events_cut_ || closed()) return;
    if (queued_events_ >= kMaxEventBacklog) {
      // It cannot keep up: end its subscriptions with the reason, never slow the engine.
      events_cut_ = true;
      core_->subscriptions().Forget(this);
      fb::FlatBufferBuilder b(128);
      auto closed = p::CreateSubscriptionClosedDirect(
          b, "subscriber fell behind: 10000 events unsent; subscribe again");
      auto body = p::CreateEventMessage(b, p::Event::SubscriptionClosed, closed.Union());
      b.Finish(p::CreateServerMessage(b, p::ServerBody::EventMessage, body.Union()));
      Queue(std::make_shared<const std::string>(reinterpret_cast<const char*>(b.GetBufferPointer()),
                                                b.GetSize()),
            false);
      return;
    }
    Queue(std::move(message), true);
  }

  void Flush() override { Write(); }

 protected:
  void RequestEnded() override { Read(); }

  void DoClose() override {
    if (!Shut()) return;
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(ws_).socket().close(ignored);
  }

  // A drained WebSocket says goodbye with a close frame.
  void Finish() override {
    if (closing_) return;
    closing_ = true;
    ws_.async_close(websocket::close_code::going_away,
                    [self = Self()](beast::error_code) { self->DoClose(); });
  }

 private:
  std::shared_ptr<WsSession> Self() {
    return std::static_pointer_cast<WsSession>(shared_from_this());
  }

  void Read() {
    if (reading_ || closing_ || !MayRead()) return;  // paused, draining or closed
    reading_ = true;
    ws_.async_read(buffer_, [self = Self()](beast::error_code ec, size_t) {
      self->reading_ = false;
      if (ec) return self->DoClose();
      if (self->draining()) return self->MaybeFinish();
      self->OnMessage();
      self->Read();
    });
  }

  void OnMessage() {
    const auto data = buffer_.cdata();
    std::string_view bytes(static_cast<const char*>(data.data()), data.size());
    if (ws_.got_text()) {
      json_ = true;
      if (!json_in_) json_in_ = std::make_unique<p::JsonCodec>("Request");
      std::string error;
      if (!json_in_->FromJson(bytes, &scratch_, &error)) {
        buffer_.consume(buffer_.size());
        return RefuseInput(Code::kInvalidArgument, "json: " + error);
      }
    } else {
      scratch_.assign(bytes);  // an aligned copy FlatBuffers can read in place
    }
    buffer_.consume(buffer_.size());
    if (!p::VerifyRequest(scratch_)) {
      return RefuseInput(Code::kInvalidArgument, "frame: not a valid Request FlatBuffer");
    }
    // Subscribing again after falling behind starts the events anew.
    if (fb::GetRoot<p::Request>(scratch_.data())->op_type() == p::Operation::Subscribe) {
      events_cut_ = false;
    }
    core_->Submit(shared_from_this(), scratch_);
  }

  void Queue(std::shared_ptr<const std::string> message, bool is_event) {
    if (!AdmitOutput()) return;
    output_.Queued(message->size());
    if (is_event) ++queued_events_;
    out_.push_back({std::move(message), is_event});
  }

  void Write() {
    if (output_.writing() || out_.empty() || closed()) return MaybeFinish();
    output_.WriteStarted(out_.front().message->size());
    ArmStallGuard();
    auto on_write = [self = Self()](beast::error_code ec, size_t) { self->OnWritten(ec); };
    const Outgoing& next = out_.front();
    if (json_ && next.is_event && (shared_text_ = tick_json_->Get(next.message))) {
      // A stats tick (with every queue: ~170 KB of JSON for 1,000 queues) is printed once for
      // all the JSON connections it goes to, not once each.
      ws_.text(true);
      ws_.async_write(asio::buffer(*shared_text_), std::move(on_write));
    } else if (json_) {
      if (!json_out_) json_out_ = std::make_unique<p::JsonCodec>("ServerMessage");
      std::string error;
      if (!json_out_->ToJson(*next.message, &text_, &error)) text_ = R"({"error":"encoding"})";
      ws_.text(true);
      ws_.async_write(asio::buffer(text_), std::move(on_write));
    } else {
      ws_.binary(true);
      ws_.async_write(asio::buffer(*next.message), std::move(on_write));
    }
  }

  // A message is written whole: its bytes count as taken when the write ends.
  void OnWritten(beast::error_code ec) {
    if (ec) {
      output_.WriteEnded();
      return DoClose();
    }
    const Outgoing& done = out_.front();
    Wrote(done.message->size());
    output_.WriteEnded();
    if (done.is_event) --queued_events_;
    out_.pop_front();
    Write();
    Read();  // resumes a read paused by backpressure
  }

  struct Outgoing {
    std::shared_ptr<const std::string> message;
    bool is_event;
  };

  websocket::stream<Stream> ws_;
  std::shared_ptr<asio::ssl::context> tls_context_;
  SharedTickJson* const tick_json_;
  beast::flat_buffer buffer_;
  std::string scratch_;
  std::string text_;
  std::shared_ptr<const std::string> shared_text_;  // the shared tick's JSON being written
  std::deque<Outgoing> out_;
  size_t queued_events_ = 0;
  bool reading_ = false;
  bool json_ = false;  // the client spoke JSON (text frames): everything it gets is JSON text
  bool events_cut_ = false;
  bool closing_ = false;
  std::unique_ptr<p::JsonCodec> json_in_;
  std::unique_ptr<p::JsonCodec> json_out_;
};

// The HTTP JSON API's side of the core (server/http_api.h): the Connection an HTTP connection's
// /v1 requests are submitted through, one at a time (HTTP/1.1 answers in order; the next request
// is read once this one's reply is written). Counted as the HTTP connection from the first API
// request on. `on_reply` gets each finished ServerMessage, on the loop.
class HttpApiCall final : public Connection {
 public:
  HttpApiCall(Loop* loop, Core* core, std::function<void(std::string_view)> on_reply,
              std::function<void()> on_close)
      : Connection(loop, core, Transport::kHttp, Access::kFull, "HTTP", OnBadInput::kKeepOpen),
        on_reply_(std::move(on_reply)),
        on_close_(std::move(on_close)) {}

  void Start() { Open(); }
  void Submit(std::string_view request) {
    replied_ = false;
    core_->Submit(shared_from_this(), request);
  }
  void End() { DoClose(); }

  void QueueReply(std::string_view message) override {
    reply_.assign(message);
    replied_ = true;
  }
  // Hands the reply to the HTTP session, which calls Sent() once it is written: a drain closes
  // the connection only after that.
  void Flush() override {
    if (!replied_ || closed()) return MaybeFinish();
    replied_ = false;
    output_.Queued(reply_.size());
    output_.WriteStarted(reply_.size());
    on_reply_(reply_);
  }
  void Sent() {
    if (!output_.writing()) return;
    output_.Written(reply_.size());
    output_.WriteEnded();
    MaybeFinish();
  }

 protected:
  void DoClose() override {
    if (Shut()) on_close_();
  }
  void Finish() override { DoClose(); }

 private:
  std::function<void(std::string_view)> on_reply_;
  std::function<void()> on_close_;
  std::string reply_;
  bool replied_ = false;
};

// One HttpApi per loop thread (it holds FlatBuffers parsers).
HttpApi& ThreadHttpApi() {
  thread_local HttpApi api;
  return api;
}

template <class Stream>  // beast::tcp_stream or TlsStream
class HttpSession : public std::enable_shared_from_this<HttpSession<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  HttpSession(Stream stream, std::shared_ptr<asio::ssl::context> tls_context, Loop* loop,
              Core* core, Dashboard* dashboard, SharedTickJson* tick_json)
      : stream_(std::move(stream)),
        tls_context_(std::move(tls_context)),
        loop_(loop),
        core_(core),
        dashboard_(dashboard),
        tick_json_(tick_json) {}

  // On the loop.
  void Start() {
    core_->metrics()->AddConnection(Transport::kHttp, 1);
    if constexpr (kTls) {
      beast::get_lowest_layer(stream_).expires_after(
          std::chrono::milliseconds(core_->options().handshake_timeout_ms));
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (ec) return self->Close();
                                self->Read();
                              });
    } else {
      Read();
    }
  }
  ~HttpSession() {
    if (counted_) core_->metrics()->AddConnection(Transport::kHttp, -1);
    if (api_call_) api_call_->End();
  }

 private:
  void Read() {
    parser_.emplace();
    parser_->header_limit(8 * 1024);
    // The whole request (line, headers, body) within the handshake timeout: slow loris.
    beast::get_lowest_layer(stream_).expires_after(
        std::chrono::milliseconds(core_->options().handshake_timeout_ms));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->Close();
                              self->OnHeader();
                            });
  }

  // Bodies: 64 KiB, but the API's, which may be as long as a WebSocket message.
  void OnHeader() {
    const auto target = parser_->get().target();
    const bool api = HttpApi::Handles({target.data(), target.size()});
    const uint64_t limit = api ? core_->options().max_frame_bytes : 64 * 1024;
    if (const auto length = parser_->content_length(); length && *length > limit) {
      return RefuseBody(limit);
    }
    parser_->body_limit(limit);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this(), limit](beast::error_code ec, size_t) {
                       if (ec == http::error::body_limit) return self->RefuseBody(limit);
                       if (ec) return self->Close();
                       self->OnRequest(self->parser_->release());
                     });
  }

  // 413, then the connection closes (the rest of the body is not read).
  void RefuseBody(uint64_t limit) {
    http::response<http::string_body> res;
    res.version(parser_->get().version());
    res.keep_alive(false);
    res.set(http::field::server, "sundiald");
    res.set(http::field::content_type, "application/json");
    res.result(http::status::payload_too_large);
    res.body() = HttpApi::ErrorResponse(413, Code::kInvalidArgument,
                                        "body: longer than " + std::to_string(limit) +
                                            " bytes (--max-frame-bytes under /v1, else 64 KiB)")
                     .body;
    Send(std::move(res));
  }

  // /v1: routed by HttpApi; a request for the operation table is answered in OnApiReply.
  void OnApi(http::request<http::string_body> req) {
    const auto method = req.method_string();
    const std::string_view target(req.target().data(), req.target().size());
    HttpApi& api = ThreadHttpApi();
    HttpApiRoute route = api.Route({.method = {method.data(), method.size()},
                                    .target = target,
                                    .authorization = Field(req, http::field::authorization),
                                    .body = req.body()},
                                   core_->auth_token());
    api_version_ = req.version();
    api_keep_alive_ = req.keep_alive();
    api_head_ = req.method() == http::verb::head;
    if (!route.dispatch) return SendApi(std::move(route.response));
    if (!api_call_) {
      // From here the API's Connection counts this HTTP connection (drain, --max-connections).
      core_->metrics()->AddConnection(Transport::kHttp, -1);
      counted_ = false;
      std::weak_ptr<HttpSession> weak = this->shared_from_this();
      api_call_ = std::make_shared<HttpApiCall>(
          loop_, core_,
          [weak](std::string_view reply) {
            if (auto self = weak.lock()) self->OnApiReply(reply);
          },
          [weak] {
            if (auto self = weak.lock()) self->Close();
          });
      api_call_->Start();
    }
    api_shape_ = route.shape;
    // Nothing else holds this session while the core has its request (only the API's
    // Connection, weakly): it holds itself until the reply or a close.
    in_flight_self_ = this->shared_from_this();
    beast::get_lowest_layer(stream_).expires_never();  // a long poll may take --wait_ms
    api_call_->Submit(route.request);
    if (route.may_wait && in_flight_self_) WatchForHangUp();
  }

  // While a request is held, no read is pending: a readable socket that reads EOF (or an error)
  // is a client that left, and closing ends its long poll before it leases anything.
  void WatchForHangUp() {
    beast::get_lowest_layer(stream_).socket().async_wait(
        tcp::socket::wait_read, [self = this->shared_from_this()](beast::error_code ec) {
          if (ec || !self->in_flight_self_) return;
          char byte;
          const ssize_t n = ::recv(beast::get_lowest_layer(self->stream_).socket().native_handle(),
                                   &byte, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            self->Close();
          }
        });
  }

  void OnApiReply(std::string_view reply) { SendApi(ThreadHttpApi().MapReply(api_shape_, reply)); }

  void SendApi(HttpApiResponse reply) {
    http::response<http::string_body> res;
    res.version(api_version_);
    res.keep_alive(api_keep_alive_);
    res.set(http::field::server, "sundiald");
    res.set(http::field::content_type, "application/json");
    res.result(static_cast<http::status>(reply.status));
    if (!reply.allow.empty()) res.set(http::field::allow, reply.allow);
    if (reply.www_authenticate) res.set(http::field::www_authenticate, "Bearer");
    if (!api_head_) res.body() = std::move(reply.body);
    beast::get_lowest_layer(stream_).expires_after(
        std::chrono::milliseconds(core_->options().write_timeout_ms));
    Send(std::move(res));
  }

  void OnRequest(http::request<http::string_body> req) {
    if (websocket::is_upgrade(req)) return Upgrade(std::move(req));
    if (HttpApi::Handles({req.target().data(), req.target().size()})) {
      return OnApi(std::move(req));
    }
    // The dashboard's paths first: the page, its assets, sign-in and sign-out.
    if (auto reply = dashboard_->Handle(DashboardRequestOf(req))) {
      return SendDashboard(req, std::move(*reply));
    }
    http::response<http::string_body> res;
    res.version(req.version());
    res.keep_alive(req.keep_alive());
    res.set(http::field::server, "sundiald");
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      Reply(res, http::status::method_not_allowed, "text/plain", "only GET\n");
    } else if (path == "/healthz") {
      Reply(res, http::status::ok, "text/plain", "ok\n");
    } else if (path == "/readyz") {
      if (core_->ready()) {
        Reply(res, http::status::ok, "text/plain", "ready\n");
      } else {
        Reply(res, http::status::service_unavailable, "text/plain",
              core_->not_ready_reason() + "\n");
      }
    } else if (path == "/metrics") {
      Reply(res, http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
            core_->RenderMetrics());
    } else if (path == "/ws") {
      Reply(res, http::status::bad_request, "text/plain", "/ws: a WebSocket upgrade is needed\n");
    } else {
      Reply(res, http::status::not_found, "text/plain", "not found\n");
    }
    if (req.method() == http::verb::head) res.body().clear();
    Send(std::move(res));
  }

  static void Reply(http::response<http::string_body>& res, http::status status,
                    std::string_view type, std::string body) {
    res.result(status);
    res.set(http::field::content_type, type);
    res.body() = std::move(body);
  }

  void Send(http::response<http::string_body> res) {
    res.prepare_payload();
    auto shared = std::make_shared<http::response<http::string_body>>(std::move(res));
    http::async_write(stream_, *shared,
                      [self = this->shared_from_this(), shared](beast::error_code ec, size_t) {
                        if (self->api_call_) self->api_call_->Sent();
                        if (ec || !shared->keep_alive()) return self->Close();
                        self->Read();
                      });
  }

  static std::string_view Field(const http::request<http::string_body>& req, http::field f) {
    const auto v = req[f];
    return {v.data(), v.size()};
  }

  static DashboardRequest DashboardRequestOf(const http::request<http::string_body>& req) {
    const std::string_view target(req.target().data(), req.target().size());
    const auto method = req.method_string();
    return {.method = {method.data(), method.size()},
            .path = target.substr(0, target.find('?')),
            .host = Field(req, http::field::host),
            .origin = Field(req, http::field::origin),
            .cookie = Field(req, http::field::cookie),
            .accept_encoding = Field(req, http::field::accept_encoding),
            .if_none_match = Field(req, http::field::if_none_match),
            .content_type = Field(req, http::field::content_type),
            .body = req.body()};
  }

  void SendDashboard(const http::request<http::string_body>& req, DashboardReply reply) {
    http::response<http::string_body> res;
    res.version(req.version());
    res.keep_alive(req.keep_alive() && !reply.close);
    res.set(http::field::server, "sundiald");
    res.result(static_cast<http::status>(reply.status));
    for (auto& [name, value] : reply.headers) res.set(name, value);
    if (req.method() != http::verb::head) res.body() = std::move(reply.body);
    if (reply.delay.count() == 0) return Send(std::move(res));
    // A wrong sign-in token: answered after the delay (the connection waits, then closes).
    auto timer = std::make_shared<asio::steady_timer>(stream_.get_executor(), reply.delay);
    beast::get_lowest_layer(stream_).expires_after(reply.delay + std::chrono::seconds(5));
    timer->async_wait([self = this->shared_from_this(), timer, res = std::move(res)](
                          beast::error_code) mutable { self->Send(std::move(res)); });
  }

  void Upgrade(http::request<http::string_body> req) {
    http::response<http::string_body> res;
    res.version(req.version());
    res.keep_alive(false);
    const std::string_view target(req.target().data(), req.target().size());
    if (target.substr(0, target.find('?')) != "/ws") {
      Reply(res, http::status::not_found, "text/plain", "WebSocket lives at /ws\n");
      return Send(std::move(res));
    }
    if (!OriginAllowed(req)) {
      Reply(res, http::status::forbidden, "text/plain", "origin: not in --allowed-origins\n");
      return Send(std::move(res));
    }
    const std::string& token = core_->auth_token();
    // A browser page presents its session cookie instead of the header it cannot set.
    bool by_cookie = false;
    if (!token.empty()) {
      const auto auth = req[http::field::authorization];
      const bool bearer = std::string_view(auth.data(), auth.size()) == "Bearer " + token;
      by_cookie = !bearer && dashboard_->HasSession(Field(req, http::field::cookie));
      if (!bearer && !by_cookie) {
        Reply(res, http::status::unauthorized, "text/plain",
              "auth: the upgrade needs Authorization: Bearer TOKEN or a dashboard session\n");
        res.set(http::field::www_authenticate, "Bearer");
        return Send(std::move(res));
      }
    }
    const Access access =
        dashboard_->RefusesActions(!Field(req, http::field::origin).empty(), by_cookie)
            ? Access::kReadOnly
            : Access::kFull;
    beast::get_lowest_layer(stream_).expires_never();  // the WebSocket's own timeouts take over
    std::make_shared<WsSession<Stream>>(std::move(stream_), std::move(tls_context_), loop_, core_,
                                        access, tick_json_)
        ->Accept(std::move(req));
  }

  bool OriginAllowed(const http::request<http::string_body>& req) const {
    const auto origin_field = req[http::field::origin];
    const std::string origin(origin_field.data(), origin_field.size());
    const auto& allowed = core_->options().allowed_origins;
    // Browsers always send Origin; a client without one (the CLI, a worker) is not a browser
    // page, so there is no cross-site hijacking to prevent.
    if (origin.empty()) return true;
    if (!allowed.empty()) return std::find(allowed.begin(), allowed.end(), origin) != allowed.end();
    const auto host = req[http::field::host];
    const std::string h(host.data(), host.size());
    return origin == "http://" + h || origin == "https://" + h;
  }

  void Close() {
    if (api_call_) api_call_->End();  // its long poll, if any, ends with it
    in_flight_self_.reset();
    beast::error_code ignored;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(stream_).close();
  }

  Stream stream_;
  std::shared_ptr<asio::ssl::context> tls_context_;
  Loop* const loop_;
  Core* const core_;
  Dashboard* const dashboard_;
  SharedTickJson* const tick_json_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool counted_ = true;  // in the HTTP connections metric (until api_call_ counts it)
  std::shared_ptr<HttpApiCall> api_call_;
  std::shared_ptr<HttpSession> in_flight_self_;  // while the core has an API request
  HttpReplyShape api_shape_ = HttpReplyShape::kResponse;
  unsigned api_version_ = 11;
  bool api_keep_alive_ = true;
  bool api_head_ = false;
};

// On `loop`: a plain or an HTTPS session, by the server's settings (a TLS session keeps the
// context current now across reloads).
void StartSession(tcp::socket socket, Loop* loop, Core* core, Dashboard* dashboard,
                  SharedTickJson* tick_json) {
  if (core->tls() == nullptr) {
    std::make_shared<HttpSession<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)), nullptr,
                                                     loop, core, dashboard, tick_json)
        ->Start();
    return;
  }
  std::shared_ptr<asio::ssl::context> context = core->tls()->Current();
  TlsStream stream(beast::tcp_stream(std::move(socket)), *context);
  std::make_shared<HttpSession<TlsStream>>(std::move(stream), std::move(context), loop, core,
                                           dashboard, tick_json)
      ->Start();
}

Dashboard::Config DashboardConfig(const Core& core) {
  Dashboard::Config c;
  c.mode = core.options().dashboard;
  c.token = core.auth_token();
  c.allowed_origins = core.options().allowed_origins;
  return c;
}

// What a plain connection past --max-connections reads before it is closed: the reason, as TCP
// refuses with a typed error.
constexpr std::string_view kBusy =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    "Content-Length: 39\r\nConnection: close\r\n\r\n"
    "connections: --max-connections reached\n";

// Shared by every HTTP and WebSocket session of every loop (both are thread-safe). Sessions use
// them only on their loop's thread; the acceptor's factory owns them, and the server joins the
// loops before it destroys the acceptor.
struct HttpShared {
  explicit HttpShared(const Core& core) : dashboard(DashboardConfig(core)) {}
  Dashboard dashboard;
  SharedTickJson tick_json;
};

}  // namespace

std::unique_ptr<Listener> NewHttpListener(Loop* loop, Core* core) {
  auto shared = std::make_shared<HttpShared>(*core);
  // As for TCP: the connection (and the WebSocket it may become) lives on its loop.
  return std::make_unique<Acceptor>(loop, core, "--http-port: cannot listen", std::string(kBusy),
                                    [core, shared](tcp::socket socket, Loop* on) {
                                      StartSession(std::move(socket), on, core, &shared->dashboard,
                                                   &shared->tick_json);
                                    });
}

}  // namespace sundial::server
