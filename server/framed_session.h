// FramedSession: a Connection (server/connection.h) that speaks frames — a u32le length and one
// FlatBuffer (protocol/framing.h) — over a plain or a TLS stream. The client port's TcpSession
// (server/tcp.cc) and the replication port's sessions (server/replication_port.cc) are both one:
// this class owns the reading (a buffer that grows only as a frame's bytes arrive), the TLS
// handshake, the writing (one write at a time; framed replies gathered in one buffer) and a
// deadline timer, and a subclass says what a frame means (OnFrame) and what a passed deadline
// does (OnDeadline). Included by server/*.cc only (Asio).
//
// The stream is a template parameter (tcp::socket or ssl::stream<tcp::socket>), so the plain
// path calls the socket directly, with no virtual call or branch per read or write.
#pragma once

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "protocol/framing.h"
#include "server/connection.h"
#include "server/drained_read.h"
#include "server/internal.h"

namespace sundial::server {

using TlsSocket = asio::ssl::stream<asio::ip::tcp::socket>;

template <class Stream>  // tcp::socket or TlsSocket
class FramedSession : public Connection {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsSocket>;

  // On the loop: counts the connection, shakes hands (TLS, within --handshake-timeout-ms),
  // then OnStarted().
  void Start() {
    Open();
    if constexpr (!kTls) {
      // WriteNow's write must return rather than wait when the send buffer is full (Asio's
      // own operations do not depend on this flag).
      boost::system::error_code ignored;
      socket_.non_blocking(true, ignored);
      EnableDrainedReads(socket_.native_handle());  // without it, reads behave as Asio's own
    }
    if constexpr (kTls) {
      // Nothing is in flight during the handshake: the deadline closes.
      SetDeadline(SteadyClock::now() + std::chrono::milliseconds(options_.handshake_timeout_ms));
      socket_.async_handshake(asio::ssl::stream_base::server,
                              [self = Self()](boost::system::error_code ec) {
                                if (ec || self->closed()) return self->DoClose();
                                self->OnStarted();
                              });
    } else {
      OnStarted();
    }
  }

  void QueueReply(std::string_view message) override {
    if (!AdmitOutput()) return;
    protocol::AppendFrame(message, &pending_);
    output_.Queued(protocol::kFrameHeaderBytes + message.size());
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
  // `tls_context`: the context a TLS stream was made with (kept alive for the connection's
  // life across reloads); null for a plain socket. `max_frame_bytes`: longer frames are
  // refused from their header alone.
  FramedSession(Stream stream, std::shared_ptr<asio::ssl::context> tls_context, Loop* loop,
                Core* core, Transport transport, const char* name, OnBadInput on_bad_input,
                uint32_t max_frame_bytes)
      : Connection(loop, core, transport, Access::kFull, name, on_bad_input),
        socket_(std::move(stream)),
        tls_context_(std::move(tls_context)),
        timer_(loop->io()),
        max_frame_bytes_(max_frame_bytes) {}

  // The session may read now (after the handshake): typically SetDeadline, then Read().
  virtual void OnStarted() = 0;
  // One whole frame, 8-byte aligned (FlatBuffers reads its longs in place); valid during the call.
  virtual void OnFrame(std::string_view frame) = 0;
  // The deadline passed: true closes the connection, false keeps it (after a new SetDeadline).
  virtual bool OnDeadline() { return true; }
  // A write finished and reading may go on: a session that produces output by itself (a
  // replication stream) produces more.
  virtual void OnWritten() {}

  void RequestEnded() override { MaybeResume(); }

  void DoClose() override {
    if (!Shut()) return;
    // TLS: no close_notify; the peer reads the end of the TCP stream (its replies were written
    // before a drain closes it).
    boost::system::error_code ignored;
    socket_.lowest_layer().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    socket_.lowest_layer().close(ignored);
    timer_.cancel();
  }

  // The deadline the timer enforces (OnDeadline). The timer waits once per deadline period,
  // not per call.
  void SetDeadline(SteadyClock::time_point at) {
    deadline_ = at;
    if (!timer_armed_) ArmTimer();
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
    const auto room = asio::buffer(in_.data() + in_len_, in_.size() - in_len_);
    auto done = [self = Self()](boost::system::error_code ec, size_t n) {
      self->reading_ = false;
      if (ec) return self->DoClose();
      // Draining: no new requests.
      if (self->draining()) return self->MaybeFinish();
      self->in_len_ += n;
      self->loop_->BeginRead();
      self->ProcessFrames();
      if (self->in_len_ > 0) self->CheckPeer();
      self->loop_->EndRead();
      // EndRead's round may have written replies, so frames that
      // waited for room may go now: MaybeResume, not Read.
      self->MaybeResume();
    };
    if constexpr (kTls) {
      socket_.async_read_some(room, std::move(done));
    } else {
      socket_.async_read_some(DrainedReadBuffer{room}, std::move(done));
    }
  }

  // A read that left nothing in the socket (server/drained_read.h) cannot have seen a reset
  // that came with its bytes; a peek can. A plain connection peeks when one of its requests is
  // held to wait and when a read left half a frame (no reply will find the reset by failing).
  void CheckPeer() override {
    if constexpr (!kTls) {
      char byte;
      const ssize_t n = ::recv(socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        Close();  // posted: a waiter being filed is dropped after, not before, it is filed
      }
    }
  }

  // Reading and frames held back by backpressure go on once the output drained.
  void MaybeResume() {
    // Never while ProcessFrames walks in_, nor while a read fills it.
    if (!processing_ && !reading_ && MayRead()) {
      if (in_len_ > 0) ProcessFrames();
      Read();
    }
    MaybeFinish();
  }

  std::shared_ptr<FramedSession> Self() {
    return std::static_pointer_cast<FramedSession>(shared_from_this());
  }

  Stream socket_;

 private:
  void ProcessFrames() {
    size_t begin = 0;
    processing_ = true;
    // Frames stay in the buffer while reading is paused (replies unread, requests in flight):
    // a client that pipelines many large replies and reads them is slowed, not dropped.
    while (!close_after_write() && MayRead()) {
      std::string_view frame;
      size_t consumed = 0;
      const auto status = protocol::NextFrame(std::string_view(in_.data() + begin, in_len_ - begin),
                                              max_frame_bytes_, &frame, &consumed);
      if (status == protocol::FrameStatus::kIncomplete) {
        next_frame_bytes_ = 0;
        if (in_len_ - begin >= protocol::kFrameHeaderBytes) {
          uint32_t length = 0;
          std::memcpy(&length, in_.data() + begin, sizeof length);  // little-endian hosts
          next_frame_bytes_ = length + protocol::kFrameHeaderBytes;
        }
        break;
      }
      if (status == protocol::FrameStatus::kEmpty) {
        RefuseInput(Code::kInvalidArgument, "frame: length 0 (every frame holds one FlatBuffer)");
        break;
      }
      if (status == protocol::FrameStatus::kTooLarge) {
        RefuseInput(Code::kInvalidArgument, "frame: longer than --max-frame-bytes");
        break;
      }
      begin += consumed;
      // FlatBuffers reads the buffer in place; its longs need 8-byte alignment.
      if (reinterpret_cast<uintptr_t>(frame.data()) % 8 != 0) {
        scratch_.assign(frame);
        frame = scratch_;
      }
      OnFrame(frame);
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

  // Writes the rest of writing_buffer_; each piece the kernel takes counts as progress for
  // --write-timeout-ms.
  void WriteSome() {
    if constexpr (!kTls) {
      if (WriteNow()) return;
    }
    ArmStallGuard();
    socket_.async_write_some(
        asio::buffer(writing_buffer_.data() + written_, writing_buffer_.size() - written_),
        [self = Self()](boost::system::error_code ec, size_t n) { self->WriteDone(ec, n); });
  }

  // A plain socket whose send buffer has room takes the write here: one send, and no completion
  // handler for the loop to run (with Asio's write, the handler queued makes the loop's next
  // pass through the reactor an extra epoll_wait). False when the buffer is full: the write
  // goes through the reactor. Not nested: a write completed here may start another (a
  // replication stream writes its next batch from OnWritten), which goes through the reactor,
  // so the stack stays one write deep.
  bool WriteNow() {
    if (writing_now_) return false;
    boost::system::error_code ec;
    const size_t n = socket_.write_some(
        asio::buffer(writing_buffer_.data() + written_, writing_buffer_.size() - written_), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) return false;
    writing_now_ = true;
    WriteDone(ec, n);
    writing_now_ = false;
    return true;
  }

  // A write of `n` bytes ended (its error, if any): the next piece, or what follows a write.
  void WriteDone(boost::system::error_code ec, size_t n) {
    if (ec) {
      output_.WriteEnded();
      return DoClose();
    }
    Wrote(n);
    written_ += n;
    if (written_ < writing_buffer_.size()) return WriteSome();
    output_.WriteEnded();
    writing_buffer_.clear();
    written_ = 0;
    Flush();
    MaybeResume();
    if (!closed()) OnWritten();
  }

  void ArmTimer() {
    timer_armed_ = true;
    timer_.expires_at(deadline_);
    timer_.async_wait([self = Self()](boost::system::error_code ec) {
      self->timer_armed_ = false;
      if (ec || self->closed()) return;
      if (SteadyClock::now() < self->deadline_) return self->ArmTimer();
      if (self->OnDeadline()) return self->DoClose();
      if (!self->timer_armed_) self->ArmTimer();
    });
  }

  std::shared_ptr<asio::ssl::context> tls_context_;
  asio::steady_timer timer_;
  const uint32_t max_frame_bytes_;
  SteadyClock::time_point deadline_;
  bool timer_armed_ = false;

  std::string in_;  // received bytes [0, in_len_)
  size_t in_len_ = 0;
  size_t next_frame_bytes_ = 0;  // size of the partial frame at the front, once its header is in
  std::string scratch_;          // an aligned copy of a misaligned frame
  std::string pending_;          // framed replies not yet handed to a write
  std::string writing_buffer_;   // the write in progress
  size_t written_ = 0;           // of writing_buffer_
  bool reading_ = false;
  bool processing_ = false;
  bool writing_now_ = false;  // in WriteNow
};

}  // namespace sundial::server
