// The binary TCP transport (docs/protocol.md, "Binary TCP"): frames of u32le length + FlatBuffer. A
// session lives on one loop. It reads every complete frame in its buffer at once and runs each
// verified Request to completion on the loop (internal.h); replies gather in one buffer and go out
// in one write per round. Replies go out in completion order (a long poll never holds back the
// requests behind it).
//
// Limits: --max-frame-bytes (refused before buffering), --max-inflight (reading pauses),
// --max-output-bytes (reading pauses at half of it until the client reads its replies; above it
// the connection is dropped), --write-timeout-ms (a write that takes no byte for that long: a
// client that does not read is dropped), --handshake-timeout-ms (with a token, the Auth
// must arrive by then), --idle-timeout-ms (nothing in flight and no frame for that long; without
// a token, the first frame too), --max-connections.
//
// TLS (--tls-cert/--tls-key, server/tls.h): the session is a template on its stream, a plain
// socket or an ssl::stream over one, so the plain path calls the socket directly (no virtual
// call or branch per read or write). A TLS session shakes hands first, within
// --handshake-timeout-ms; a client that does not speak TLS fails the handshake and is closed.
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

#include "protocol/framing.h"
#include "protocol/sundial_generated.h"
#include "protocol/verify.h"
#include "server/acceptor.h"
#include "server/connection.h"
#include "server/framed_session.h"
#include "server/internal.h"
#include "server/server.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;
using tcp = asio::ip::tcp;

template <class Stream>  // tcp::socket or TlsSocket
class TcpSession final : public FramedSession<Stream> {
  using Base = FramedSession<Stream>;

 public:
  // `tls_context`: the context the TLS stream was made with (kept alive for the connection's
  // life across reloads); null for a plain socket.
  TcpSession(Stream stream, std::shared_ptr<asio::ssl::context> tls_context, Loop* loop, Core* core)
      : Base(std::move(stream), std::move(tls_context), loop, core, Transport::kTcp, "TCP",
             OnBadInput::kClose, core->options().max_frame_bytes),
        authed_(core->auth_token().empty()) {}

 protected:
  // With a token the Auth must come within the handshake timeout; else idle rules apply.
  void OnStarted() override {
    this->SetDeadline(SteadyClock::now() +
                      std::chrono::milliseconds(authed_ ? this->options_.idle_timeout_ms
                                                        : this->options_.handshake_timeout_ms));
    this->Read();
  }

  void OnFrame(std::string_view frame) override {
    if (!p::VerifyRequest(frame)) {
      return this->RefuseInput(Code::kInvalidArgument, "frame: not a valid Request FlatBuffer");
    }
    const auto* request = fb::GetRoot<p::Request>(frame.data());
    if (!authed_) {
      const p::Auth* auth = request->op_as_Auth();
      if (auth == nullptr || auth->token() == nullptr ||
          auth->token()->string_view() != this->core_->auth_token()) {
        return this->RefuseInput(Code::kUnauthenticated,
                                 auth == nullptr ? "auth: this server needs an Auth request first"
                                                 : "auth: wrong token");
      }
      authed_ = true;
    }
    this->SetDeadline(SteadyClock::now() +
                      std::chrono::milliseconds(this->options_.idle_timeout_ms));
    this->core_->Submit(this->shared_from_this(), frame);
  }

  // Slow or silent (no complete, authenticated frame by the deadline) closes; a connection
  // with requests in flight (a long poll) is given more time.
  bool OnDeadline() override {
    if (!authed_ || this->inflight() == 0) return true;
    this->SetDeadline(SteadyClock::now() +
                      std::chrono::milliseconds(this->options_.idle_timeout_ms));
    return false;
  }

 private:
  bool authed_;
};

// On `loop`: a plain or a TLS session, by the server's settings. A TLS session takes the
// context current now: a reload later does not touch it.
void StartSession(tcp::socket socket, Loop* loop, Core* core) {
  if (core->tls() == nullptr) {
    std::make_shared<TcpSession<tcp::socket>>(std::move(socket), nullptr, loop, core)->Start();
    return;
  }
  std::shared_ptr<asio::ssl::context> context = core->tls()->Current();
  TlsSocket stream(std::move(socket), *context);
  std::make_shared<TcpSession<TlsSocket>>(std::move(stream), std::move(context), loop, core)
      ->Start();
}

// What a plain connection past --max-connections reads before it is closed: a typed error.
std::string MaxConnectionsFrame() {
  std::string frame;
  p::AppendFrame(
      ErrorResponse(0, Code::kResourceExhausted, "connections: --max-connections reached"), &frame);
  return frame;
}

}  // namespace

std::unique_ptr<Listener> NewTcpListener(Loop* loop, Core* core) {
  return std::make_unique<Acceptor>(loop, core, "--port: cannot listen", MaxConnectionsFrame(),
                                    [core](tcp::socket socket, Loop* on) {
                                      boost::system::error_code ignored;
                                      socket.set_option(tcp::no_delay(true), ignored);
                                      StartSession(std::move(socket), on, core);
                                    });
}

}  // namespace sundial::server
