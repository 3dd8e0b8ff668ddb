// A scripted stand-in for sundiald's binary TCP port: a loopback listener and one thread that
// accepts connections and runs a script on each (read request frames, send any bytes back:
// responses in any order, events, garbage). Plain blocking POSIX sockets; every wait is
// bounded by poll() so a broken test fails instead of hanging.
//
// Helpers build the ServerMessages the real server sends: a Response with a result or an error,
// an EventMessage.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "protocol/framing.h"
#include "protocol/sundial_generated.h"

namespace sundial::client::testing {

inline constexpr int kFakeWaitMs = 10'000;

// "127.0.0.1:PORT" (appended, not `"..." + std::string`: GCC 12 -O3 warns -Wrestrict there).
inline std::string LoopbackAddr(uint16_t port) {
  std::string out = "127.0.0.1:";
  out.append(std::to_string(port));
  return out;
}

// One accepted connection, seen from the server side.
class FakeConnection {
 public:
  explicit FakeConnection(int fd) : fd_(fd) {}
  ~FakeConnection() { Close(); }

  // The next request frame's payload; nullopt on EOF, error or after kFakeWaitMs.
  std::optional<std::string> ReadFrame() {
    while (true) {
      std::string_view frame;
      size_t consumed = 0;
      if (protocol::NextFrame(buffer_, protocol::kDefaultMaxFrameBytes, &frame, &consumed) ==
          protocol::FrameStatus::kComplete) {
        std::string out(frame);
        buffer_.erase(0, consumed);
        return out;
      }
      if (!ReadMore()) return std::nullopt;
    }
  }
  // The next request, verified; nullptr when none came. Valid until the next ReadRequest.
  const protocol::Request* ReadRequest() {
    std::optional<std::string> frame = ReadFrame();
    if (!frame) return nullptr;
    last_request_ = std::move(*frame);
    flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(last_request_.data()),
                                   last_request_.size());
    if (!protocol::VerifyRequestBuffer(verifier)) return nullptr;
    return protocol::GetRequest(last_request_.data());
  }
  // True when the client closed its side (EOF) within kFakeWaitMs.
  bool WaitForClose() {
    while (ReadMore()) {
    }
    return eof_;
  }

  // Sends a ServerMessage as one frame.
  void SendMessage(std::string_view server_message) {
    std::string frame;
    protocol::AppendFrame(server_message, &frame);
    SendRaw(frame);
  }
  void SendRaw(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  bool ReadMore() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, kFakeWaitMs) <= 0) return false;
    char chunk[4096];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) {
      eof_ = n == 0;
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  int fd_;
  std::string buffer_;
  std::string last_request_;
  bool eof_ = false;
};

class FakeServer {
 public:
  using Script = std::function<void(FakeConnection&)>;

  // Listens on 127.0.0.1 and an ephemeral port; runs `script` on each of the first
  // `connections` connections, one after the other.
  explicit FakeServer(Script script, int connections = 1) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listen_fd_, 8);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, script = std::move(script), connections] {
      for (int i = 0; i < connections; ++i) {
        pollfd p{listen_fd_, POLLIN, 0};
        if (::poll(&p, 1, kFakeWaitMs) <= 0) return;
        const int fd = ::accept(listen_fd_, nullptr, nullptr);
        if (fd < 0) return;
        FakeConnection connection(fd);
        script(connection);
      }
    });
  }
  ~FakeServer() {
    if (thread_.joinable()) thread_.join();
    ::close(listen_fd_);
  }

  uint16_t port() const { return port_; }
  std::string addr() const { return LoopbackAddr(port_); }
  // Waits until every script has run.
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

// A port on which nothing listens: bound, then closed.
inline uint16_t ClosedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// ---- ServerMessages ----------------------------------------------------------------------

inline std::string Bytes(const flatbuffers::FlatBufferBuilder& b) {
  return {reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()};
}

// A Response whose result is built by `result(b)` (returns the union type and offset).
inline std::string OkResponse(
    uint64_t request_id, const std::function<std::pair<protocol::Result, flatbuffers::Offset<void>>(
                             flatbuffers::FlatBufferBuilder&)>& result) {
  flatbuffers::FlatBufferBuilder b;
  auto [type, offset] = result(b);
  auto response = protocol::CreateResponse(b, request_id, 0, 0, type, offset);
  b.Finish(protocol::CreateServerMessage(b, protocol::ServerBody::Response, response.Union()));
  return Bytes(b);
}

inline std::string ErrorResponse(uint64_t request_id, protocol::Code code,
                                 const std::string& message) {
  flatbuffers::FlatBufferBuilder b;
  auto error = protocol::CreateErrorDirect(b, code, message.c_str());
  auto response = protocol::CreateResponse(b, request_id, error);
  b.Finish(protocol::CreateServerMessage(b, protocol::ServerBody::Response, response.Union()));
  return Bytes(b);
}

// A Health answer (live, ready): the simplest successful Response.
inline std::string HealthResponse(uint64_t request_id) {
  return OkResponse(request_id, [](flatbuffers::FlatBufferBuilder& b) {
    return std::pair{protocol::Result::HealthResult,
                     protocol::CreateHealthResultDirect(b, true, true, "").Union()};
  });
}

inline std::string MessageEvent(const std::string& queue, const std::string& id) {
  flatbuffers::FlatBufferBuilder b;
  auto event = protocol::CreateMessageEventDirect(b, queue.c_str(), id.c_str(),
                                                  protocol::MessageState::pending,
                                                  protocol::MessageState::running, 2, 1000);
  auto message = protocol::CreateEventMessage(b, protocol::Event::MessageEvent, event.Union());
  b.Finish(protocol::CreateServerMessage(b, protocol::ServerBody::EventMessage, message.Union()));
  return Bytes(b);
}

}  // namespace sundial::client::testing
