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
#include "server/internal.h"
#include "server/server.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;
using tcp = asio::ip::tcp;

using TlsStream = asio::ssl::stream<tcp::socket>;

template <class Stream>  // tcp::socket or TlsStream
class TcpSession final : public Connection {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  // `tls_context`: the context the TLS stream was made with (kept alive for the connection's
  // life across reloads); null for a plain socket.
  TcpSession(Stream stream, std::shared_ptr<asio::ssl::context> tls_context, Loop* loop, Core* core)
      : Connection(loop, core, Transport::kTcp, Access::kFull, "TCP", OnBadInput::kClose),
        socket_(std::move(stream)),
        tls_context_(std::move(tls_context)),
        timer_(loop->io()),
        authed_(core->auth_token().empty()) {}

  // On the loop.
  void Start() {
    Open();
    if constexpr (kTls) {
      // The TLS handshake within the handshake timeout (nothing is in flight: the timer closes).
      deadline_ = SteadyClock::now() + std::chrono::milliseconds(options_.handshake_timeout_ms);
      ArmTimer();
      socket_.async_handshake(asio::ssl::stream_base::server,
                              [self = Self()](boost::system::error_code ec) {
                                if (ec || self->closed()) return self->DoClose();
                                self->StartProtocol();
                              });
    } else {
      StartProtocol();
      ArmTimer();
    }
  }

  // With a token the Auth must come within the handshake timeout; else idle rules apply.
  void StartProtocol() {
    deadline_ =
        SteadyClock::now() + std::chrono::milliseconds(authed_ ? options_.idle_timeout_ms
                                                               : options_.handshake_timeout_ms);
    Read();
  }

  void QueueReply(std::string_view message) override {
    if (!AdmitOutput()) return;
    p::AppendFrame(message, &pending_);
    output_.Queued(p::kFrameHeaderBytes + message.size());
  }

  void Flush() override {
    if (output_.writing() || closed()) return;
    if (pending_.empty()) {
      if (close_after_write()) DoClose();
      return MaybeFinish();
    }
    std::swap(pending_, writing_buffer_);
    written_ = 0;
    output_.WriteStarted(writing_buffer_.size());
    WriteSome();
  }

 protected:
  void RequestEnded() override { MaybeResume(); }

  void DoClose() override {
    if (!Shut()) return;
    // TLS: no close_notify; the client reads the end of the TCP stream (its replies were
    // written before a drain closes it).
    boost::system::error_code ignored;
    socket_.lowest_layer().shutdown(tcp::socket::shutdown_both, ignored);
    socket_.lowest_layer().close(ignored);
    timer_.cancel();
  }

 private:
  std::shared_ptr<TcpSession> Self() {
    return std::static_pointer_cast<TcpSession>(shared_from_this());
  }

  void Read() {
    if (reading_ || close_after_write() || !MayRead()) return;  // paused, draining or closed
    // Room for the rest of the next frame, at least 64 KiB, but at most as much again as has
    // arrived: a declared length costs memory only as its bytes come (doubling), so a header
    // alone cannot make the server allocate --max-frame-bytes.
    size_t want = 64 << 10;
    if (next_frame_bytes_ > in_len_) {
      want = std::max(want, std::min(next_frame_bytes_ - in_len_, in_len_));
    }
    if (in_.size() < in_len_ + want) in_.resize(in_len_ + want);
    reading_ = true;
    socket_.async_read_some(asio::buffer(in_.data() + in_len_, in_.size() - in_len_),
                            [self = Self()](boost::system::error_code ec, size_t n) {
                              self->reading_ = false;
                              if (ec) return self->DoClose();
                              // Draining: no new requests.
                              if (self->draining()) return self->MaybeFinish();
                              self->in_len_ += n;
                              self->ProcessFrames();
                              self->Read();
                            });
  }

  void ProcessFrames() {
    size_t begin = 0;
    processing_ = true;
    // Frames stay in the buffer while reading is paused (replies unread, requests in flight):
    // a client that pipelines many large replies and reads them is slowed, not dropped.
    while (!close_after_write() && MayRead()) {
      std::string_view frame;
      size_t consumed = 0;
      const auto status = p::NextFrame(std::string_view(in_.data() + begin, in_len_ - begin),
                                       options_.max_frame_bytes, &frame, &consumed);
      if (status == p::FrameStatus::kIncomplete) {
        next_frame_bytes_ = 0;
        if (in_len_ - begin >= p::kFrameHeaderBytes) {
          uint32_t length = 0;
          std::memcpy(&length, in_.data() + begin, sizeof length);  // little-endian hosts
          next_frame_bytes_ = length + p::kFrameHeaderBytes;
        }
        break;
      }
      if (status == p::FrameStatus::kEmpty) {
        RefuseInput(Code::kInvalidArgument, "frame: length 0 (every frame holds one FlatBuffer)");
        break;
      }
      if (status == p::FrameStatus::kTooLarge) {
        RefuseInput(Code::kInvalidArgument, "frame: longer than --max-frame-bytes");
        break;
      }
      begin += consumed;
      HandleFrame(frame);
    }
    // Keep the partial frame at the front.
    if (begin > 0) {
      std::memmove(in_.data(), in_.data() + begin, in_len_ - begin);
      in_len_ -= begin;
    }
    if (in_.size() > (1u << 20) && in_len_ < (64u << 10)) {
      in_.resize(64u << 10);
      in_.shrink_to_fit();
    }
    processing_ = false;
    if (!pending_.empty() || close_after_write()) loop_->MarkDirty(this);
  }

  void HandleFrame(std::string_view frame) {
    // FlatBuffers reads the buffer in place; a Request needs 8-byte alignment for its longs.
    std::string_view aligned = frame;
    if (reinterpret_cast<uintptr_t>(frame.data()) % 8 != 0) {
      scratch_.assign(frame);
      aligned = scratch_;
    }
    if (!p::VerifyRequest(aligned)) {
      return RefuseInput(Code::kInvalidArgument, "frame: not a valid Request FlatBuffer");
    }
    const auto* request = fb::GetRoot<p::Request>(aligned.data());
    if (!authed_) {
      const p::Auth* auth = request->op_as_Auth();
      if (auth == nullptr || auth->token() == nullptr ||
          auth->token()->string_view() != core_->auth_token()) {
        return RefuseInput(Code::kUnauthenticated,
                           auth == nullptr ? "auth: this server needs an Auth request first"
                                           : "auth: wrong token");
      }
      authed_ = true;
    }
    deadline_ = SteadyClock::now() + std::chrono::milliseconds(options_.idle_timeout_ms);
    core_->Submit(shared_from_this(), aligned);
  }

  // Writes the rest of writing_buffer_; each piece the kernel takes counts as progress for
  // --write-timeout-ms.
  void WriteSome() {
    ArmStallGuard();
    socket_.async_write_some(
        asio::buffer(writing_buffer_.data() + written_, writing_buffer_.size() - written_),
        [self = Self()](boost::system::error_code ec, size_t n) {
          if (ec) {
            self->output_.WriteEnded();
            return self->DoClose();
          }
          self->Wrote(n);
          self->written_ += n;
          if (self->written_ < self->writing_buffer_.size()) return self->WriteSome();
          self->output_.WriteEnded();
          self->writing_buffer_.clear();
          self->written_ = 0;
          self->Flush();
          self->MaybeResume();
        });
  }

  void MaybeResume() {
    // Never while ProcessFrames walks in_, nor while a read fills it.
    if (!processing_ && !reading_ && MayRead()) {
      if (in_len_ > 0) ProcessFrames();  // frames held back by backpressure
      Read();
    }
    MaybeFinish();
  }

  void ArmTimer() {
    timer_.expires_at(deadline_);
    timer_.async_wait([self = Self()](boost::system::error_code ec) {
      if (ec || self->closed()) return;
      if (SteadyClock::now() < self->deadline_) return self->ArmTimer();
      if (!self->authed_ || self->inflight() == 0) {
        // Slow or silent: no complete (authenticated) frame by the deadline.
        return self->DoClose();
      }
      self->deadline_ =
          SteadyClock::now() + std::chrono::milliseconds(self->options_.idle_timeout_ms);
      self->ArmTimer();
    });
  }

  Stream socket_;
  std::shared_ptr<asio::ssl::context> tls_context_;
  asio::steady_timer timer_;

  std::string in_;  // received bytes [0, in_len_)
  size_t in_len_ = 0;
  size_t next_frame_bytes_ = 0;  // size of the partial frame at the front, once its header is in
  std::string scratch_;          // an aligned copy of a misaligned frame
  std::string pending_;          // framed replies not yet handed to a write
  std::string writing_buffer_;   // the write in progress
  size_t written_ = 0;           // of writing_buffer_
  bool reading_ = false;
  bool processing_ = false;
  bool authed_;
  SteadyClock::time_point deadline_;
};

// On `loop`: a plain or a TLS session, by the server's settings. A TLS session takes the
// context current now: a reload later does not touch it.
void StartSession(tcp::socket socket, Loop* loop, Core* core) {
  if (core->tls() == nullptr) {
    std::make_shared<TcpSession<tcp::socket>>(std::move(socket), nullptr, loop, core)->Start();
    return;
  }
  std::shared_ptr<asio::ssl::context> context = core->tls()->Current();
  TlsStream stream(std::move(socket), *context);
  std::make_shared<TcpSession<TlsStream>>(std::move(stream), std::move(context), loop, core)
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
