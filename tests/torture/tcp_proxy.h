// TcpProxy: a loopback TCP proxy the failover torture owns (docs/testing.md, "Failover
// torture"), one per link it wants to cut: a node's client port, its replication port, its way to
// etcd. It listens on 127.0.0.1 (an ephemeral port, fixed for its life) and forwards every
// connection to 127.0.0.1:upstream, which may change at any time (a node restarted on new
// ephemeral ports): new connections go to the new port, old ones keep theirs.
//
// Modes (SetMode):
//   kPass       bytes flow both ways, each delayed by SetDelay (0: at once);
//   kBlackhole  a partition: nothing is read or written on any connection, new connections are
//               accepted and left unanswered (no upstream dial); nothing is closed, so what the
//               ends do is their own timeouts'. Back to kPass, the bytes waiting in the kernel
//               flow again (a short partition TCP survives) and pending connections are dialed.
// ResetAll() closes every connection (both sides) at once.
//
// A side that closes or fails closes the pair once what it sent before is delivered; an upstream
// that refuses the dial (the node is down) closes the client's side. Each direction buffers at
// most 4 MiB; beyond it reading that side pauses.
//
// Thread safety: one thread of its own runs poll(); every public method may be called from any
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace sundial::torture {

class TcpProxy {
 public:
  enum class Mode : uint8_t { kPass, kBlackhole };

  explicit TcpProxy(std::string name) : name_(std::move(name)) {}
  ~TcpProxy();  // Stop()
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  // Binds 127.0.0.1:0 and starts the thread; false (with errno's text in error()) on failure.
  bool Start();
  void Stop();

  void SetUpstream(uint16_t port) { upstream_.store(port); }
  void SetMode(Mode mode);
  void SetDelay(std::chrono::milliseconds delay);
  void ResetAll();

  uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& name() const { return name_; }
  Mode mode() const { return mode_.load(); }
  const std::string& error() const { return error_; }

 private:
  struct Pair;
  void Run();
  void Wake();

  const std::string name_;
  std::string error_;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: a setting changed, or Stop
  std::atomic<uint16_t> upstream_{0};
  std::atomic<Mode> mode_{Mode::kPass};
  std::atomic<int64_t> delay_ms_{0};
  std::atomic<bool> reset_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace sundial::torture
