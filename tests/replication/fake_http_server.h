// FakeHttpServer: a scripted HTTP endpoint on a free loopback port, for what a real etcd
// never does (garbage, wrong JSON types, truncated or oversized replies, silence). Each
// request (read up to its Content-Length body) is handed to the script, which returns the raw
// bytes to send back and what to do with the connection next. POSIX sockets, every wait
// bounded by poll; the accept thread stops with the object.
//
// SilentListener: a socket that listens and never accepts, so connects succeed (the kernel
// completes them) and requests are never answered: a hung endpoint.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sundial::replication::testing {

class FakeHttpServer {
 public:
  enum class After { kKeepOpen, kClose, kHang };  // kHang: hold the connection, answer nothing
  struct Answer {
    std::string bytes;
    After after = After::kClose;
  };
  // The request's whole text (head and body) → the answer.
  using Script = std::function<Answer(const std::string& request)>;

  explicit FakeHttpServer(Script script) : script_(std::move(script)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listen_fd_, 16);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeHttpServer() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }

  uint16_t port() const { return port_; }
  int requests() const { return requests_; }
  int connections() const { return connections_; }

  // A 200 reply with a JSON (or any) body and a Content-Length.
  static std::string Ok(const std::string& body, int status = 200) {
    return "HTTP/1.1 " + std::to_string(status) +
           " X\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }

 private:
  bool WaitReadable(int fd, int ms) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, ms) == 1;
  }

  // Reads one request (head + Content-Length body); false when the peer closed or we stop.
  bool ReadRequest(int fd, std::string& buffer, std::string& request) {
    while (!stop_) {
      const size_t head_end = buffer.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        size_t length = 0;
        const size_t at = buffer.find("Content-Length: ");
        if (at != std::string::npos && at < head_end)
          length = std::strtoul(&buffer[at + 16], nullptr, 10);
        if (buffer.size() >= head_end + 4 + length) {
          request = buffer.substr(0, head_end + 4 + length);
          buffer.erase(0, head_end + 4 + length);
          return true;
        }
      }
      if (!WaitReadable(fd, 20)) continue;
      char chunk[4096];
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    return false;
  }

  void Serve() {
    while (!stop_) {
      if (!WaitReadable(listen_fd_, 20)) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++connections_;
      std::string buffer;
      std::string request;
      bool hang = false;
      while (!stop_ && !hang && ReadRequest(fd, buffer, request)) {
        ++requests_;
        const Answer answer = script_(request);
        size_t sent = 0;
        while (sent < answer.bytes.size()) {
          const ssize_t n =
              ::send(fd, answer.bytes.data() + sent, answer.bytes.size() - sent, MSG_NOSIGNAL);
          if (n <= 0) break;
          sent += static_cast<size_t>(n);
        }
        if (answer.after == After::kClose) break;
        hang = answer.after == After::kHang;
      }
      while (hang && !stop_) WaitReadable(fd, 20);  // hold it open, say nothing
      ::close(fd);
    }
  }

  Script script_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 16);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace sundial::replication::testing
