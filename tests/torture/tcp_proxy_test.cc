// The failover torture's TCP proxy (tests/torture/tcp_proxy.h): bytes pass both ways, a
// blackhole holds them (and new connections) until it is lifted, a delay delays them, a reset
// closes every connection, and a dial the upstream refuses closes the client's side.
#include "tests/torture/tcp_proxy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace sundial::torture {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// A listening loopback socket that echoes what each accepted connection sends.
class EchoServer {
 public:
  EchoServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        std::thread([c] {
          char buffer[4096];
          for (;;) {
            const ssize_t n = ::read(c, buffer, sizeof buffer);
            if (n <= 0 || ::write(c, buffer, static_cast<size_t>(n)) != n) break;
          }
          ::close(c);
        }).detach();
      }
    });
  }
  ~EchoServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

int Dial(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

// What `fd` reads within `timeout` (until `want` bytes, or the peer closes: "<eof>" appended).
std::string ReadFor(int fd, size_t want, Millis timeout) {
  std::string got;
  const auto deadline = Clock::now() + timeout;
  while (got.size() < want) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) != 1) break;
    char buffer[4096];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) return got + "<eof>";
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

TEST(TcpProxy, BytesPassBothWays) {
  EchoServer echo;
  TcpProxy proxy("test");
  ASSERT_TRUE(proxy.Start()) << proxy.error();
  proxy.SetUpstream(echo.port());
  const int fd = Dial(proxy.port());
  ASSERT_EQ(::write(fd, "hello", 5), 5);
  EXPECT_EQ(ReadFor(fd, 5, Millis(5000)), "hello");
  ::close(fd);
}

TEST(TcpProxy, ABlackholeHoldsBytesAndNewConnectionsUntilLifted) {
  EchoServer echo;
  TcpProxy proxy("test");
  ASSERT_TRUE(proxy.Start()) << proxy.error();
  proxy.SetUpstream(echo.port());
  const int before = Dial(proxy.port());
  ASSERT_EQ(::write(before, "a", 1), 1);
  ASSERT_EQ(ReadFor(before, 1, Millis(5000)), "a");
  proxy.SetMode(TcpProxy::Mode::kBlackhole);
  const int during = Dial(proxy.port());  // accepted by the kernel, not forwarded
  ASSERT_EQ(::write(before, "b", 1), 1);
  ASSERT_EQ(::write(during, "c", 1), 1);
  EXPECT_EQ(ReadFor(before, 1, Millis(300)), "");
  EXPECT_EQ(ReadFor(during, 1, Millis(100)), "");
  proxy.SetMode(TcpProxy::Mode::kPass);
  EXPECT_EQ(ReadFor(before, 1, Millis(5000)), "b");
  EXPECT_EQ(ReadFor(during, 1, Millis(5000)), "c");
  ::close(before);
  ::close(during);
}

TEST(TcpProxy, ADelayHoldsEachByteThatLong) {
  EchoServer echo;
  TcpProxy proxy("test");
  ASSERT_TRUE(proxy.Start()) << proxy.error();
  proxy.SetUpstream(echo.port());
  proxy.SetDelay(Millis(150));
  const int fd = Dial(proxy.port());
  const auto start = Clock::now();
  ASSERT_EQ(::write(fd, "x", 1), 1);
  EXPECT_EQ(ReadFor(fd, 1, Millis(5000)), "x");
  // Once on the way there, once on the way back.
  EXPECT_GE(Clock::now() - start, Millis(300));
  ::close(fd);
}

TEST(TcpProxy, AResetClosesEveryConnection) {
  EchoServer echo;
  TcpProxy proxy("test");
  ASSERT_TRUE(proxy.Start()) << proxy.error();
  proxy.SetUpstream(echo.port());
  const int fd = Dial(proxy.port());
  ASSERT_EQ(::write(fd, "a", 1), 1);
  ASSERT_EQ(ReadFor(fd, 1, Millis(5000)), "a");
  proxy.ResetAll();
  EXPECT_EQ(ReadFor(fd, 1, Millis(5000)), "<eof>");
  ::close(fd);
}

TEST(TcpProxy, AnUpstreamThatRefusesClosesTheClient) {
  TcpProxy proxy("test");
  ASSERT_TRUE(proxy.Start()) << proxy.error();
  TcpProxy closed("closed");  // a port nobody listens on once it stops
  ASSERT_TRUE(closed.Start());
  const uint16_t dead = closed.port();
  closed.Stop();
  proxy.SetUpstream(dead);
  const int fd = Dial(proxy.port());
  EXPECT_EQ(ReadFor(fd, 1, Millis(5000)), "<eof>");
  ::close(fd);
}

}  // namespace
}  // namespace sundial::torture
