// Helpers for the end-to-end tests that talk to sundiald below the client library: raw TCP
// sockets (POSIX, every wait bounded by poll), frames, hand-made HTTP requests, /metrics
// parsing, the WebSocket client (ws_client.h), the server's resident memory, and a bounded poll
// for conditions.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "client/client.h"
#include "protocol/framing.h"
#include "protocol/sundial_generated.h"
#include "tests/e2e/ws_client.h"

namespace sundial::e2e {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

inline int64_t MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<Millis>(Clock::now() - start).count();
}

// Polls `condition` every few ms until it holds or `timeout_ms` passes; whether it held.
inline bool Eventually(const std::function<bool()>& condition, int timeout_ms = 10'000) {
  const auto deadline = Clock::now() + Millis(timeout_ms);
  while (true) {
    if (condition()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(Millis(5));
  }
}

// A durable request's header with this id (for the client/requests.h builders).
inline client::RequestHeader Hdr(uint64_t request_id) {
  client::RequestHeader h;
  h.request_id = request_id;
  return h;
}

// u32le length + payload.
inline std::string Frame(std::string_view payload) {
  std::string out;
  protocol::AppendFrame(payload, &out);
  return out;
}

// A frame header alone, declaring `length` bytes.
inline std::string Header(uint32_t length) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return out;
}

// A blocking loopback TCP connection whose reads wait at most a given time.
class RawConn {
 public:
  // `receive_buffer` > 0 sets SO_RCVBUF before connecting (a client that reads slowly).
  explicit RawConn(uint16_t port, int receive_buffer = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (receive_buffer > 0) {
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
    if (fd_ >= 0) {
      const int one = 1;
      ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
  }
  ~RawConn() { Close(); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;
  RawConn(RawConn&& o) noexcept : fd_(std::exchange(o.fd_, -1)), in_(std::move(o.in_)) {}

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // Writes everything; false once the peer has closed or reset the connection. A full send
  // buffer blocks (callers that must not block use TrySend).
  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Writes what fits within `timeout_ms`; the bytes written, or -1 once the peer is gone.
  ssize_t TrySend(std::string_view bytes, int timeout_ms) {
    const auto deadline = Clock::now() + Millis(timeout_ms);
    size_t done = 0;
    while (done < bytes.size()) {
      const int left =
          static_cast<int>(std::chrono::duration_cast<Millis>(deadline - Clock::now()).count());
      if (left <= 0) break;
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, left) <= 0) break;
      const ssize_t n =
          ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return -1;
      done += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(done);
  }

  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  enum class ReadStatus { kData, kClosed, kTimeout };
  // Appends what arrives within `timeout_ms` to the buffer; kClosed on EOF or a reset.
  ReadStatus ReadSome(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, timeout_ms);
    if (r == 0) return ReadStatus::kTimeout;
    if (r < 0) return errno == EINTR ? ReadStatus::kTimeout : ReadStatus::kClosed;
    char buf[64 << 10];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return ReadStatus::kTimeout;
    if (n <= 0) return ReadStatus::kClosed;
    in_.append(buf, static_cast<size_t>(n));
    bytes_read_ += static_cast<size_t>(n);
    return ReadStatus::kData;
  }

  // The next frame's payload, or nullopt when the connection ends or nothing complete arrives
  // within `timeout_ms`.
  std::optional<std::string> ReadFrame(int timeout_ms = 5'000) {
    const auto deadline = Clock::now() + Millis(timeout_ms);
    while (true) {
      std::string_view frame;
      size_t consumed = 0;
      if (protocol::NextFrame(in_, 1u << 30, &frame, &consumed) ==
          protocol::FrameStatus::kComplete) {
        std::string out(frame);
        in_.erase(0, consumed);
        return out;
      }
      const int left =
          static_cast<int>(std::chrono::duration_cast<Millis>(deadline - Clock::now()).count());
      if (left <= 0) return std::nullopt;
      if (ReadSome(left) == ReadStatus::kClosed) {
        closed_ = true;
        return std::nullopt;
      }
    }
  }

  // Reads (keeping what arrives) until the peer closes: true, or `timeout_ms` passes: false.
  bool WaitClosed(int timeout_ms = 5'000) {
    if (closed_) return true;
    const auto deadline = Clock::now() + Millis(timeout_ms);
    while (true) {
      const int left =
          static_cast<int>(std::chrono::duration_cast<Millis>(deadline - Clock::now()).count());
      if (left <= 0) return false;
      if (ReadSome(left) == ReadStatus::kClosed) {
        closed_ = true;
        return true;
      }
    }
  }

  // Every complete frame received so far (consumed from the buffer).
  std::vector<std::string> TakeFrames() {
    std::vector<std::string> out;
    while (true) {
      std::string_view frame;
      size_t consumed = 0;
      if (protocol::NextFrame(in_, 1u << 30, &frame, &consumed) !=
          protocol::FrameStatus::kComplete) {
        return out;
      }
      out.emplace_back(frame);
      in_.erase(0, consumed);
    }
  }

  const std::string& buffered() const { return in_; }
  size_t bytes_read() const { return bytes_read_; }

 private:
  int fd_ = -1;
  std::string in_;
  size_t bytes_read_ = 0;
  bool closed_ = false;
};

// What a frame from the server says, when it is a Response.
struct ResponseView {
  bool valid = false;  // a verified ServerMessage holding a Response
  uint64_t request_id = 0;
  bool has_error = false;
  protocol::Code code = protocol::Code::OK;
  std::string message;
  protocol::Result result_type = protocol::Result::NONE;
};

inline ResponseView ViewResponse(const std::string& server_message) {
  ResponseView v;
  if (!client::VerifyServerMessage(server_message)) return v;
  const auto* m = flatbuffers::GetRoot<protocol::ServerMessage>(server_message.data());
  const protocol::Response* r = m->body_as_Response();
  if (r == nullptr) return v;
  v.valid = true;
  v.request_id = r->request_id();
  v.result_type = r->result_type();
  if (r->error() != nullptr) {
    v.has_error = true;
    v.code = r->error()->code();
    v.message = r->error()->message() ? r->error()->message()->str() : "";
  }
  return v;
}

// ---- HTTP by hand ----------------------------------------------------------------------------

struct HttpReply {
  int status = 0;  // 0: no (complete) reply
  std::string head;
  std::string body;
  std::string Header(std::string_view name) const {
    // Case-insensitive search for "\r\nName: value".
    std::string lower_head;
    for (char c : head)
      lower_head += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string key = "\r\n";
    for (char c : name) key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    key += ":";
    const auto at = lower_head.find(key);
    if (at == std::string::npos) return "";
    auto start = at + key.size();
    while (start < head.size() && head[start] == ' ') ++start;
    return head.substr(start, head.find("\r\n", start) - start);
  }
};

// One request on a fresh connection ("Connection: close"), read to EOF within `timeout_ms`.
// `extra_headers`: whole lines with their CRLF; `body` follows the blank line.
inline HttpReply HttpRequest(uint16_t port, std::string_view method, std::string_view target,
                             std::string_view extra_headers = "", std::string_view body = "",
                             int timeout_ms = 5'000) {
  HttpReply reply;
  RawConn c(port);
  if (!c.ok()) return reply;
  std::string req = std::string(method) + " " + std::string(target) +
                    " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                    std::string(extra_headers) + "\r\n" + std::string(body);
  if (!c.Send(req) || !c.WaitClosed(timeout_ms)) return reply;
  const std::string& all = c.buffered();
  const auto end_of_head = all.find("\r\n\r\n");
  if (all.rfind("HTTP/1.1 ", 0) != 0 || end_of_head == std::string::npos) return reply;
  reply.status = std::atoi(all.c_str() + 9);
  reply.head = all.substr(0, end_of_head);
  reply.body = all.substr(end_of_head + 4);
  return reply;
}

inline HttpReply HttpGet(uint16_t port, std::string_view target) {
  return HttpRequest(port, "GET", target);
}

// The value of one Prometheus series, e.g. `sundial_messages{queue="q",state="pending"}`
// (labels exactly as the server prints them), or nullopt when it is absent.
inline std::optional<double> MetricValue(const std::string& text, std::string_view series) {
  std::istringstream in(text);
  std::string line;
  const std::string prefix = std::string(series) + " ";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::strtod(line.c_str() + prefix.size(), nullptr);
  }
  return std::nullopt;
}

// ---- The server process ----------------------------------------------------------------------

// VmRSS of a process in bytes (0 if unreadable).
inline uint64_t RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

// True while the child `pid` has not exited (it is not reaped here: waitid with WNOWAIT).
inline bool StillRunning(pid_t pid) {
  if (pid <= 0) return false;
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    return false;
  }
  return info.si_pid == 0;  // no state change: still running
}

// A verified ServerMessage received over WebSocket (binary frames only).
inline const protocol::ServerMessage* AsServerMessage(const std::string& bytes) {
  if (!client::VerifyServerMessage(bytes)) return nullptr;
  return flatbuffers::GetRoot<protocol::ServerMessage>(bytes.data());
}

}  // namespace sundial::e2e
