#include "tests/torture/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

namespace sundial::torture {
namespace {

constexpr size_t kMaxBuffered = 4u << 20;  // per direction
constexpr size_t kReadBytes = 64u << 10;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

// One proxied connection: the client's socket and the upstream's, and for each the bytes still
// to be written to it (each chunk due at its time: the delay).
struct TcpProxy::Pair {
  struct Chunk {
    int64_t due_ns = 0;
    std::string bytes;
    bool eof = false;  // the other side closed: once this is due, the pair closes
  };
  struct Side {
    int fd = -1;
    std::deque<Chunk> out;  // to write to this side
    size_t out_bytes = 0;
    size_t offset = 0;  // written of out.front()
    bool read_eof = false;
  };
  Side client, upstream;
  bool dialed = false;      // the upstream dial was started
  bool connecting = false;  // ... and has not completed yet
  bool closed = false;

  void Close() {
    CloseFd(client.fd);
    CloseFd(upstream.fd);
    closed = true;
  }
  static bool Due(const Side& s, int64_t now) {
    return !s.out.empty() && s.out.front().due_ns <= now;
  }
};

TcpProxy::~TcpProxy() { Stop(); }

bool TcpProxy::Start() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (listen_fd_ < 0 || wake_fd_ < 0) {
    error_ = std::strerror(errno);
    return false;
  }
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 128) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    error_ = std::strerror(errno);
    return false;
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { Run(); });
  return true;
}

void TcpProxy::Stop() {
  stop_.store(true);
  Wake();
  if (thread_.joinable()) thread_.join();
  CloseFd(listen_fd_);
  CloseFd(wake_fd_);
}

void TcpProxy::Wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void TcpProxy::SetMode(Mode mode) {
  mode_.store(mode);
  Wake();
}

void TcpProxy::SetDelay(std::chrono::milliseconds delay) {
  delay_ms_.store(delay.count());
  Wake();
}

void TcpProxy::ResetAll() {
  reset_.store(true);
  Wake();
}

void TcpProxy::Run() {
  std::vector<std::unique_ptr<Pair>> pairs;
  std::vector<pollfd> fds;
  // For each pollfd past the first two: the pair and which side.
  std::vector<std::pair<Pair*, bool /*upstream*/>> owners;

  // Starts the dial of p's upstream (pass mode only); false when it cannot be made.
  const auto dial = [this](Pair& p) {
    p.dialed = true;
    const uint16_t port = upstream_.load();
    if (port == 0) return false;
    p.upstream.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p.upstream.fd < 0) return false;
    const int one = 1;
    ::setsockopt(p.upstream.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (::connect(p.upstream.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      return true;
    }
    if (errno != EINPROGRESS) return false;
    p.connecting = true;
    return true;
  };
  // Reads what `from` has into `to`'s queue; false when the pair must close at once (an error).
  const auto pump_in = [this](Pair::Side& from, Pair::Side& to) {
    char buffer[kReadBytes];
    const ssize_t n = ::read(from.fd, buffer, sizeof buffer);
    const int64_t due = NowNs() + delay_ms_.load() * 1'000'000;
    if (n > 0) {
      to.out.push_back({due, std::string(buffer, static_cast<size_t>(n)), false});
      to.out_bytes += static_cast<size_t>(n);
      return true;
    }
    if (n == 0) {
      from.read_eof = true;
      to.out.push_back({due, {}, true});
      return true;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  };
  // Writes what is due to `to`; false when the pair must close (an error, or an EOF delivered).
  const auto pump_out = [](Pair::Side& to) {
    const int64_t now = NowNs();
    while (Pair::Due(to, now)) {
      Pair::Chunk& c = to.out.front();
      if (c.eof) return false;
      const ssize_t n =
          ::send(to.fd, c.bytes.data() + to.offset, c.bytes.size() - to.offset, MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      to.offset += static_cast<size_t>(n);
      if (to.offset < c.bytes.size()) return true;
      to.out_bytes -= c.bytes.size();
      to.offset = 0;
      to.out.pop_front();
    }
    return true;
  };

  while (!stop_.load()) {
    if (reset_.exchange(false)) {
      for (auto& p : pairs) p->Close();
    }
    const bool pass = mode_.load() == Mode::kPass;
    const int64_t now = NowNs();
    int64_t next_due = -1;
    fds.clear();
    owners.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& p : pairs) {
      if (p->closed || !pass) continue;
      if (!p->dialed && !dial(*p)) {
        p->Close();
        continue;
      }
      for (bool up : {false, true}) {
        Pair::Side& side = up ? p->upstream : p->client;
        const Pair::Side& other = up ? p->client : p->upstream;
        short events = 0;
        if (up && p->connecting) {
          events = POLLOUT;
        } else {
          if (!side.read_eof && other.out_bytes < kMaxBuffered) events |= POLLIN;
          if (Pair::Due(side, now) && !(up && p->connecting)) events |= POLLOUT;
        }
        if (!side.out.empty() && !Pair::Due(side, now)) {
          const int64_t due = side.out.front().due_ns;
          if (next_due < 0 || due < next_due) next_due = due;
        }
        // A side that closed and has nothing due is not polled (its POLLHUP would spin).
        fds.push_back({events == 0 && side.read_eof ? -1 : side.fd, events, 0});
        owners.emplace_back(p.get(), up);
      }
    }
    int timeout_ms = 1000;
    if (next_due >= 0) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>((next_due - now) / 1'000'000 + 1, 0, 1000));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) {
      uint64_t count = 0;
      (void)!::read(wake_fd_, &count, sizeof count);
    }
    if (fds[1].revents & POLLIN) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        auto p = std::make_unique<Pair>();
        p->client.fd = fd;
        pairs.push_back(std::move(p));
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      auto [p, up] = owners[i - 2];
      if (p->closed || fds[i].revents == 0) continue;
      Pair::Side& side = up ? p->upstream : p->client;
      Pair::Side& other = up ? p->client : p->upstream;
      if (up && p->connecting) {
        int error = 0;
        socklen_t len = sizeof error;
        ::getsockopt(side.fd, SOL_SOCKET, SO_ERROR, &error, &len);
        if (error != 0) {
          p->Close();
        } else {
          p->connecting = false;
        }
        continue;
      }
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && !side.read_eof &&
          !pump_in(side, other)) {
        p->Close();
        continue;
      }
      if ((fds[i].revents & POLLOUT) && !pump_out(side)) p->Close();
    }
    // Chunks that came due (a delay) are written on the next round's POLLOUT; an EOF that is
    // due with nothing before it closes the pair now.
    for (auto& p : pairs) {
      if (p->closed || !pass) continue;
      for (Pair::Side* s : {&p->client, &p->upstream}) {
        if (Pair::Due(*s, NowNs()) && s->out.front().eof) p->Close();
        if (p->closed) break;
      }
    }
    std::erase_if(pairs, [](const std::unique_ptr<Pair>& p) { return p->closed; });
  }
  for (auto& p : pairs) p->Close();
}

}  // namespace sundial::torture
