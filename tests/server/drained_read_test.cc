// DrainedReadBuffer (server/drained_read.h): after a read that emptied the socket, the next read
// waits for epoll instead of trying a recv first, and no byte that arrives meanwhile waits unseen.
// Whether a read tried its recv at once is seen from outside: a recv at the start takes the
// bytes already waiting, so the socket's `available()` right after async_read_some is 0.
#include "server/drained_read.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <random>
#include <string>
#include <thread>

namespace sundial::server {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// A connected loopback pair: `server` is read with the buffers under test, `peer` writes
// (blocking) from the test's thread or its own. Reads go into `room` and append to `got`.
struct Pair {
  asio::io_context io;
  // Keeps run_one_for waiting for the reactor when no handler is ready (without it, a loop
  // out of work is stopped until restart()).
  asio::executor_work_guard<asio::io_context::executor_type> busy = asio::make_work_guard(io);
  tcp::socket server{io};
  tcp::socket peer{io};
  char room[64];
  std::string got;
  bool done = false;                 // the last read started has completed
  boost::system::error_code result;  // its error

  Pair() {
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    peer.connect(acceptor.local_endpoint());
    acceptor.accept(server);
    EXPECT_TRUE(EnableDrainedReads(server.native_handle()));
    server.set_option(tcp::no_delay(true));
    peer.set_option(tcp::no_delay(true));
  }

  // Writes `bytes` from the peer and returns once they wait in the server's receive queue.
  void Send(const std::string& bytes) {
    const size_t before = server.available();
    asio::write(peer, asio::buffer(bytes));
    while (server.available() < before + bytes.size()) std::this_thread::yield();
  }

  // Starts one read into `room` through the buffer `make` wraps it in.
  template <class MakeBuffer>
  void StartRead(MakeBuffer make) {
    done = false;
    server.async_read_some(make(asio::buffer(room)),
                           [this](boost::system::error_code ec, size_t n) {
                             result = ec;
                             got.append(room, n);
                             done = true;
                           });
  }

  // Runs the loop until the read completes (a bound for a failing test, not a timing
  // assumption).
  void RunUntilRead() {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done && std::chrono::steady_clock::now() < give_up) {
      io.run_one_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(done) << "the read never completed";
  }

  template <class MakeBuffer>
  void Read(MakeBuffer make) {
    StartRead(make);
    RunUntilRead();
  }

  // Reads "a" (the read starts first, so the reactor performs it), then "b", which is sent
  // before the second read starts; returns what the socket still held right after that read
  // started: 0 when it tried its recv at once.
  template <class MakeBuffer>
  size_t ReadAThenB(MakeBuffer make) {
    StartRead(make);
    Send("a");
    RunUntilRead();
    Send("b");
    StartRead(make);
    const size_t left = server.available();
    RunUntilRead();
    return left;
  }
};

auto Drained = [](asio::mutable_buffer b) { return DrainedReadBuffer{b}; };
auto Plain = [](asio::mutable_buffer b) { return b; };

TEST(DrainedRead, AfterAShortReadTheNextReadWaitsForEpollAndStillGetsTheBytes) {
  Pair p;
  EXPECT_EQ(p.ReadAThenB(Drained), 1u) << "the read after a short one tried its recv at once";
  EXPECT_EQ(p.got, "ab") << "the edge of a byte that came between the reads woke the read";
}

// Why the buffer exists: Asio's own tries every read's recv at once (and finds the socket of a
// client waiting for its reply empty).
TEST(DrainedRead, AsiosOwnBufferTriesTheRecvAtOnceAfterAShortRead) {
  Pair p;
  EXPECT_EQ(p.ReadAThenB(Plain), 0u);
  EXPECT_EQ(p.got, "ab");
}

// A socket that reports no count (TCP_INQ off) is never said drained: Asio's behaviour.
TEST(DrainedRead, WithoutTheCountEveryReadTriesAtOnce) {
  Pair p;
  const int off = 0;
  ASSERT_EQ(::setsockopt(p.server.native_handle(), IPPROTO_TCP, TCP_INQ, &off, sizeof off), 0);
  EXPECT_EQ(p.ReadAThenB(Drained), 0u);
  EXPECT_EQ(p.got, "ab");
}

TEST(DrainedRead, AReadThatFilledItsBufferLeavesTheNextOneToTryAtOnce) {
  Pair p;
  const std::string hundred(100, 'x');
  p.StartRead(Drained);
  p.Send(hundred);
  p.RunUntilRead();
  ASSERT_EQ(p.got.size(), 64u);
  ASSERT_EQ(p.server.available(), 36u);
  p.StartRead(Drained);
  EXPECT_EQ(p.server.available(), 0u)
      << "a full read may have left bytes and raises no new edge: the next one tries at once";
  p.RunUntilRead();
  EXPECT_EQ(p.got, hundred);
}

TEST(DrainedRead, EndOfStreamAfterAShortReadIsSeen) {
  Pair p;
  p.StartRead(Drained);
  p.Send("a");
  p.RunUntilRead();
  p.peer.shutdown(tcp::socket::shutdown_send);
  p.Read(Drained);
  EXPECT_EQ(p.result, asio::error::eof);
}

// A FIN that came with the last bytes raised its edge before the read that took the bytes: that
// read must not say drained, or the end is never seen (the connection would stay open forever).
TEST(DrainedRead, EndOfStreamQueuedBehindTheBytesReadIsSeen) {
  Pair p;
  p.StartRead(Drained);
  p.Send("half a frame");
  p.peer.shutdown(tcp::socket::shutdown_send);  // both wait in the queue before the read runs
  p.RunUntilRead();
  ASSERT_EQ(p.got, "half a frame");
  p.Read(Drained);
  EXPECT_EQ(p.result, asio::error::eof);
}

// A reset that came with the last bytes is not a FIN: the count after the read is 0, the read
// says drained, and no edge follows, so the next read would wait (until a write fails or the
// idle timeout). What FramedSession::CheckPeer does when that matters — a peek — sees it.
TEST(DrainedRead, AResetQueuedBehindTheBytesReadIsSeenByAPeek) {
  Pair p;
  p.StartRead(Drained);
  p.Send("bytes");
  p.peer.set_option(asio::socket_base::linger(true, 0));  // its close sends a reset
  p.peer.close();
  p.RunUntilRead();
  EXPECT_EQ(p.got, "bytes");
  char byte;
  errno = 0;
  EXPECT_EQ(::recv(p.server.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, ECONNRESET);
}

// The edge-triggered registration the buffer relies on, raced: a writer thread sends pieces at
// random moments (between a read's completion and the next read's start, while a read waits,
// several at once) and the reader gets every byte in order.
TEST(DrainedRead, BytesSentAtAnyMomentAreAllRead) {
  Pair p;
  constexpr int kPieces = 3000;
  std::string sent;
  std::mt19937 rng(7);
  for (int i = 0; i < kPieces; ++i) sent += std::string(1 + rng() % 40, char('a' + i % 26));
  std::thread writer([&p, &sent] {
    std::mt19937 rng(11);
    size_t at = 0;
    while (at < sent.size()) {
      const size_t n = std::min<size_t>(sent.size() - at, 1 + rng() % 40);
      asio::write(p.peer, asio::buffer(sent.data() + at, n));
      at += n;
      if (rng() % 4 == 0) std::this_thread::yield();
    }
  });
  while (p.got.size() < sent.size() && !p.result) {
    p.Read(Drained);
    if (!p.done) break;
  }
  writer.join();
  EXPECT_FALSE(p.result) << p.result.message();
  ASSERT_EQ(p.got.size(), sent.size());
  EXPECT_TRUE(p.got == sent) << "the bytes came out of order";
}

}  // namespace
}  // namespace sundial::server
