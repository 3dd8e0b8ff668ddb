// DrainedReadBuffer: the buffer a plain connection reads into. A read into it asks the kernel
// how many bytes it left behind (TCP_INQ), and when that is none it tells Asio's reactor the
// socket is drained, so the connection's next read waits for epoll instead of first trying a
// recv that finds nothing. Included by server/framed_session.h only (Asio).
//
// Why: a client sends its next request only once it has this one's reply, so the read a
// session starts after replying (FramedSession::Read) finds the socket empty nearly every time.
// Boost 1.81's epoll reactor tries every read at once unless the last one returned
// `done_and_exhausted`, which its recv returns only at end of stream; its non-speculative waits
// (async_wait, null_buffers) re-arm the descriptor with an epoll_ctl each time instead.
//
// Why no byte waits unseen: the reactor registers sockets edge-triggered, and every arrival of
// data, a FIN or an error after the read raises a new edge, which wakes the queued read. What
// arrived *before* the read raised its edge already, so the read must say drained only if
// nothing of it is left: not "fewer bytes than the buffer" (a FIN queued behind the bytes read
// stays unread and raises no new edge: the connection would never see its end), but the
// kernel's own count after the read, TCP_CM_INQ, which is 0 only when no byte is left and no
// FIN came (tcp_inq_hint: "after receiving a FIN, tell the user-space to continue reading").
// A reset queued behind the bytes read is not in the count: a reply's write finds it, and
// FramedSession::CheckPeer peeks for it where no reply is coming soon.
// A socket without TCP_INQ (the setsockopt failed) sends no count and is never said drained:
// Asio's behaviour. Measured in docs/BENCHMARKS.md ("The empty read").
//
// The specialisation below is Asio's reactive_socket_recv_op_base for this one buffer type,
// its recv a recvmsg that reads the count; it names Asio's detail namespace, so it is pinned to
// the Boost that Debian 12 ships.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

// Asio's detail header uses socket_base without including it.
#include <boost/asio/socket_base.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/detail/reactive_socket_recv_op.hpp>
#include <boost/asio/error.hpp>
#include <boost/version.hpp>
#include <cerrno>
#include <cstring>

static_assert(BOOST_VERSION == 108100,
              "server/drained_read.h specialises Boost 1.81's reactive_socket_recv_op_base; "
              "check it against this Boost's before changing the version");

namespace sundial::server {

// A mutable buffer sequence of one buffer, read as above.
struct DrainedReadBuffer {
  boost::asio::mutable_buffer buffer;
  const boost::asio::mutable_buffer* begin() const { return &buffer; }
  const boost::asio::mutable_buffer* end() const { return &buffer + 1; }
};

// Asks the kernel to report, with each read of `fd`, the bytes left behind it. False when it
// cannot (the reads then behave as Asio's own).
inline bool EnableDrainedReads(int fd) {
  const int on = 1;
  return ::setsockopt(fd, IPPROTO_TCP, TCP_INQ, &on, sizeof on) == 0;
}

}  // namespace sundial::server

namespace boost::asio::detail {

template <>
class reactive_socket_recv_op_base<sundial::server::DrainedReadBuffer> : public reactor_op {
 public:
  reactive_socket_recv_op_base(const boost::system::error_code& success_ec, socket_type socket,
                               socket_ops::state_type /*state: a stream socket*/,
                               const sundial::server::DrainedReadBuffer& buffers,
                               socket_base::message_flags flags, func_type complete_func)
      : reactor_op(success_ec, &reactive_socket_recv_op_base::do_perform, complete_func),
        socket_(socket),
        buffer_(buffers.buffer),
        flags_(flags) {}

  // Asio's non_blocking_recv1 for a stream socket, through recvmsg to read TCP_CM_INQ.
  static status do_perform(reactor_op* base) {
    auto* o = static_cast<reactive_socket_recv_op_base*>(base);
    iovec iov{o->buffer_.data(), o->buffer_.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    for (;;) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      const ssize_t n = ::recvmsg(o->socket_, &msg, o->flags_);
      if (n > 0) {
        o->bytes_transferred_ = static_cast<size_t>(n);
        o->ec_ = boost::system::error_code();
        return LeftNothing(msg) ? done_and_exhausted : done;
      }
      if (n == 0) {
        o->ec_ = boost::asio::error::eof;
        return done_and_exhausted;  // as Asio's own
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return not_done;
      o->ec_ = boost::system::error_code(errno, boost::asio::error::get_system_category());
      return done_and_exhausted;  // as Asio's own (0 bytes)
    }
  }

 private:
  // True when the read's count says no byte and no FIN is left.
  static bool LeftNothing(const msghdr& msg) {
    for (const cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
         c = CMSG_NXTHDR(const_cast<msghdr*>(&msg), const_cast<cmsghdr*>(c))) {
      if (c->cmsg_level == IPPROTO_TCP && c->cmsg_type == TCP_CM_INQ &&
          c->cmsg_len >= CMSG_LEN(sizeof(int))) {
        int left = 0;
        std::memcpy(&left, CMSG_DATA(c), sizeof left);
        return left == 0;
      }
    }
    return false;  // no count: TCP_INQ is off
  }

  socket_type socket_;
  boost::asio::mutable_buffer buffer_;
  socket_base::message_flags flags_;
};

}  // namespace boost::asio::detail
