// The binary TCP transport (SPEC §5): frames of u32le length + FlatBuffer. A session lives on one
// loop. It reads every complete frame in its buffer at once and runs each verified Request to
// completion on the loop (internal.h); replies gather in one buffer and go out in one write per
// round. Replies go out in completion order (a long poll never holds back the requests behind
// it).
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
#include "server/internal.h"
#include "server/server.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;
using tcp = asio::ip::tcp;

using TlsStream = asio::ssl::stream<tcp::socket>;

template <class Stream>  // tcp::socket or TlsStream
class TcpSession final : public Session {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  // `tls_context`: the context the TLS stream was made with (kept alive for the connection's
  // life across reloads); null for a plain socket.
  TcpSession(Stream stream, std::shared_ptr<asio::ssl::context> tls_context, Loop* loop, Core* core)
      : Session(loop, core, Transport::kTcp),
        socket_(std::move(stream)),
        tls_context_(std::move(tls_context)),
        timer_(loop->io()),
        stall_(loop->io(), core->options().write_timeout_ms),
        options_(core->options()),
        authed_(core->auth_token().empty()) {}

  // On the loop.
  void Start() {
    core_->registry().Add(shared_from_this());
    core_->metrics()->AddConnection(Transport::kTcp, 1);
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
    if (closed()) return;
    // The limit is on replies left unread behind the write in progress, counted before this
    // one: a single reply larger than --max-output-bytes still goes to a client that reads.
    if (pending_.size() > options_.max_output_bytes) {
      std::fprintf(stderr, "sundiald: dropping a TCP client: %zu reply bytes unread\n",
                   pending_.size());
      return DoClose();
    }
    p::AppendFrame(message, &pending_);
  }

  void Flush() override {
    if (writing_ || closed()) return;
    if (pending_.empty()) {
      if (close_after_write_) DoClose();
      return MaybeFinish();
    }
    writing_ = true;
    std::swap(pending_, writing_buffer_);
    written_ = 0;
    WriteSome();
  }

 protected:
  void DoCloseWhenDone() override {
    stop_reading_ = true;
    close_when_done_ = true;
    MaybeResume();
  }

  void RequestEnded() override {
    if (inflight() < static_cast<int64_t>(options_.max_inflight)) MaybeResume();
  }

  void DoClose() override {
    if (closed_.exchange(true)) return;
    // TLS: no close_notify; the client reads the end of the TCP stream (its replies were
    // written before a drain closes it).
    boost::system::error_code ignored;
    socket_.lowest_layer().shutdown(tcp::socket::shutdown_both, ignored);
    socket_.lowest_layer().close(ignored);
    timer_.cancel();
    stall_.Cancel();
    core_->Forget(this);
    core_->registry().Remove(this);
    core_->metrics()->AddConnection(Transport::kTcp, -1);
  }

 private:
  std::shared_ptr<TcpSession> Self() {
    return std::static_pointer_cast<TcpSession>(shared_from_this());
  }

  void Read() {
    if (reading_ || closed() || stop_reading_ || close_after_write_) return;
    if (inflight() >= static_cast<int64_t>(options_.max_inflight)) return;  // paused
    if (OutputHigh()) return;  // paused until the client reads its replies
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
                              if (self->stop_reading_) return self->MaybeResume();
                              self->in_len_ += n;
                              self->ProcessFrames();
                              self->Read();
                            });
  }

  void ProcessFrames() {
    size_t begin = 0;
    processing_ = true;
    // Frames stay in the buffer while the replies waiting to be written exceed half of
    // --max-output-bytes (backpressure): a client that pipelines many large replies and reads
    // them is slowed, not dropped.
    while (!closed() && !close_after_write_ && !stop_reading_ && !OutputHigh() &&
           inflight() < static_cast<int64_t>(options_.max_inflight)) {
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
        Refuse(Code::kInvalidArgument, "frame: length 0 (every frame holds one FlatBuffer)");
        break;
      }
      if (status == p::FrameStatus::kTooLarge) {
        Refuse(Code::kInvalidArgument, "frame: longer than --max-frame-bytes");
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
    if (!pending_.empty() || close_after_write_) loop_->MarkDirty(this);
  }

  void HandleFrame(std::string_view frame) {
    // FlatBuffers reads the buffer in place; a Request needs 8-byte alignment for its longs.
    std::string_view aligned = frame;
    if (reinterpret_cast<uintptr_t>(frame.data()) % 8 != 0) {
      scratch_.assign(frame);
      aligned = scratch_;
    }
    fb::Verifier::Options vo;
    vo.max_depth = 32;
    vo.max_tables = 1'000'000;
    fb::Verifier verifier(reinterpret_cast<const uint8_t*>(aligned.data()), aligned.size(), vo);
    if (!p::VerifyRequestBuffer(verifier)) {
      return Refuse(Code::kInvalidArgument, "frame: not a valid Request FlatBuffer");
    }
    const auto* request = fb::GetRoot<p::Request>(aligned.data());
    if (!authed_) {
      const p::Auth* auth = request->op_as_Auth();
      if (auth == nullptr || auth->token() == nullptr ||
          auth->token()->string_view() != core_->auth_token()) {
        return Refuse(Code::kUnauthenticated, auth == nullptr
                                                  ? "auth: this server needs an Auth request first"
                                                  : "auth: wrong token");
      }
      authed_ = true;
    }
    deadline_ = SteadyClock::now() + std::chrono::milliseconds(options_.idle_timeout_ms);
    core_->Submit(shared_from_this(), aligned);
  }

  // A typed error (request_id 0), then the connection closes once it is written.
  void Refuse(Code code, const char* message) {
    QueueReply(ErrorResponse(0, code, message));
    close_after_write_ = true;
    loop_->MarkDirty(this);
  }

  // Writes the rest of writing_buffer_; each piece the kernel takes counts as progress for
  // --write-timeout-ms.
  void WriteSome() {
    ArmStallGuard();
    socket_.async_write_some(
        asio::buffer(writing_buffer_.data() + written_, writing_buffer_.size() - written_),
        [self = Self()](boost::system::error_code ec, size_t n) {
          if (ec) {
            self->writing_ = false;
            return self->DoClose();
          }
          self->stall_.Progress();
          self->written_ += n;
          if (self->written_ < self->writing_buffer_.size()) return self->WriteSome();
          self->writing_ = false;
          self->writing_buffer_.clear();
          self->written_ = 0;
          self->Flush();
          self->MaybeResume();
        });
  }

  void ArmStallGuard() {
    stall_.Arm([self = Self()] { return !self->closed() && self->writing_; },
               [self = Self()] {
                 std::fprintf(stderr,
                              "sundiald: dropping a TCP client: %zu reply bytes unread, none "
                              "taken for %u ms\n",
                              self->pending_.size() + self->writing_buffer_.size() - self->written_,
                              self->options_.write_timeout_ms);
                 self->DoClose();
               });
  }

  bool OutputHigh() const {
    return pending_.size() + writing_buffer_.size() - written_ >= options_.max_output_bytes / 2;
  }

  void MaybeResume() {
    // Never while ProcessFrames walks in_, nor while a read fills it.
    if (!processing_ && !reading_ && !OutputHigh() && !closed()) {
      if (in_len_ > 0 && !stop_reading_) ProcessFrames();  // frames held back by backpressure
      Read();
    }
    MaybeFinish();
  }

  void MaybeFinish() {
    if (close_when_done_ && inflight() == 0 && pending_.empty() && !writing_) DoClose();
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
  StallGuard stall_;
  const Options& options_;

  std::string in_;  // received bytes [0, in_len_)
  size_t in_len_ = 0;
  size_t next_frame_bytes_ = 0;  // size of the partial frame at the front, once its header is in
  std::string scratch_;          // an aligned copy of a misaligned frame
  std::string pending_;          // framed replies not yet handed to a write
  std::string writing_buffer_;   // the write in progress
  size_t written_ = 0;           // of writing_buffer_
  bool reading_ = false;
  bool writing_ = false;
  bool processing_ = false;
  bool stop_reading_ = false;
  bool close_after_write_ = false;
  bool close_when_done_ = false;  // draining: close once every reply is written
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

class TcpListener final : public Listener {
 public:
  TcpListener(Loop* loop, Core* core) : core_(core), acceptor_(loop->io()) {}

  Status Start(const std::string& address, uint16_t port) override {
    boost::system::error_code ec;
    const auto ip = asio::ip::make_address(address, ec);
    if (ec) return InvalidArgument("--bind: not an IP address");
    const tcp::endpoint endpoint(ip, port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Unavailable("--port: cannot listen");
    port_ = acceptor_.local_endpoint().port();
    Accept();
    return Status::Ok();
  }

  uint16_t port() const override { return port_; }

  void Stop() override {
    asio::post(acceptor_.get_executor(), [this] {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
    });
  }

 private:
  void Accept() {
    // The connection belongs to the next loop for life: its socket is made on that loop's
    // io_context, and it starts there.
    Loop* loop = core_->NextLoop();
    acceptor_.async_accept(
        loop->io(), [this, loop](boost::system::error_code ec, tcp::socket socket) {
          if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
          if (!ec) {
            if (core_->metrics()->connections() >=
                    static_cast<int64_t>(core_->options().max_connections) &&
                core_->tls() != nullptr) {
              // Under TLS a plain error frame would read as garbage: closed before the
              // handshake, as the client sees a full server that does not answer.
              boost::system::error_code ignored;
              socket.close(ignored);
            } else if (core_->metrics()->connections() >=
                       static_cast<int64_t>(core_->options().max_connections)) {
              // Refused with a typed error, then closed.
              std::string frame;
              p::AppendFrame(ErrorResponse(0, Code::kResourceExhausted,
                                           "connections: --max-connections reached"),
                             &frame);
              boost::system::error_code ignored;
              asio::write(socket, asio::buffer(frame), ignored);
              socket.close(ignored);
            } else {
              socket.set_option(tcp::no_delay(true), ec);
              // Made and started on its loop: nothing of it is touched from this thread again.
              loop->Post([loop, core = core_, socket = std::move(socket)]() mutable {
                StartSession(std::move(socket), loop, core);
              });
            }
          }
          Accept();
        });
  }

  Core* core_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
};

}  // namespace

std::unique_ptr<Listener> NewTcpListener(Loop* loop, Core* core) {
  return std::make_unique<TcpListener>(loop, core);
}

}  // namespace sundial::server
