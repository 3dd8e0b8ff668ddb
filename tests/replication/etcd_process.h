// EtcdProcess: a real single-member etcd (Debian's `etcd` 3.4, SUNDIAL_ETCD_BIN) for tests, in
// a temporary directory on two free loopback ports (client and peer), never the well-known
// 2379/2380 that a system etcd may hold (docs/replication.md "Testing with etcd").
//
// Start() waits until the member answers GET /health with "true" (it has elected itself) and
// lists itself, by its unique name, on its client port (not another test's etcd that took the
// port first), or until it exits, with a generous deadline: no test guesses how long a start
// takes. It
// runs with --heartbeat-interval 50 --election-timeout 500 (etcd's minimum lease TTL is then
// 1 s), its own environment stripped of ETCD_* variables, and dies with the test process
// (PR_SET_PDEATHSIG). Pause()/Resume() are the pause nemesis (SIGSTOP/SIGCONT, each waited
// for); Kill() is kill -9; Restart() starts it again on the same ports and data (a member
// that crashed comes back with its keys, leases and revisions).
//
// Thread safety: one test thread.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "replication/etcd_client.h"

#ifndef SUNDIAL_ETCD_BIN
#define SUNDIAL_ETCD_BIN "/usr/bin/etcd"
#endif

namespace sundial::replication::testing {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Polls `condition` every few ms until it holds or `timeout` passes; whether it held.
inline bool Eventually(const std::function<bool()>& condition, Millis timeout = Millis(15'000)) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(Millis(5));
  }
}

inline int64_t MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<Millis>(Clock::now() - start).count();
}

// A loopback port nobody listens on right now (bound, read, closed). Several at once are
// distinct: the sockets stay bound until all are read.
inline std::vector<uint16_t> FreeLoopbackPorts(int count) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  for (int i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ports.push_back(ntohs(addr.sin_port));
    fds.push_back(fd);
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

// One HTTP request on loopback (a GET when `body` is empty, else a POST), every wait bounded
// by poll: the reply's bytes ("" on failure).
inline std::string LoopbackHttp(uint16_t port, const std::string& path, const std::string& body,
                                Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  auto wait = [&](short events) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    return ::poll(&p, 1, static_cast<int>(left)) == 1;
  };
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return "";
  }
  int error = 0;
  socklen_t len = sizeof error;
  if (!wait(POLLOUT) || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
    ::close(fd);
    return "";
  }
  const std::string request =
      (body.empty() ? "GET " : "POST ") + path +
      " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return "";
  }
  char buffer[4096];
  while (wait(POLLIN)) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    reply.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return reply;
}

class EtcdProcess {
 public:
  // `extra_flags` follow the standard ones (e.g. "--experimental-watch-progress-notify-
  // interval=100ms").
  explicit EtcdProcess(std::vector<std::string> extra_flags = {})
      : extra_flags_(std::move(extra_flags)) {
    std::string pattern = (std::filesystem::temp_directory_path() / "sundial-etcd-XXXXXX").string();
    dir_ = ::mkdtemp(pattern.data());
    // Unique across the test processes running at once (the directory name is): Start()
    // checks that the member answering on its port is this one.
    name_ = "sundial-test-" + std::filesystem::path(dir_).filename().string();
  }
  ~EtcdProcess() {
    Kill();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // Starts etcd on fresh free ports and waits (up to 30 s) until it is healthy. False if it
  // exited or never became healthy; log() says why. A port taken between choosing it and
  // etcd binding it is retried with new ports.
  bool Start() {
    for (int attempt = 0; attempt < 5; ++attempt) {
      const auto ports = FreeLoopbackPorts(2);
      client_port_ = ports[0];
      peer_port_ = ports[1];
      std::error_code ec;
      std::filesystem::remove_all(dir_ + "/data", ec);  // a fresh member each attempt
      if (Launch()) return true;
      if (log().find("address already in use") == std::string::npos) return false;
    }
    return false;
  }

  // Starts it again on the same ports and data directory (after Kill() or Stop()).
  bool Restart() {
    Kill();
    return Launch();
  }

  // SIGTERM; waits for the exit (SIGKILL after 10 s).
  void Stop() {
    if (pid_ <= 0) return;
    Resume();
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(Millis(5));
    }
    Kill();
  }

  // kill -9, reaped.
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    paused_ = false;
  }

  // SIGSTOP, returning once the process is stopped.
  void Pause() {
    if (pid_ <= 0 || paused_) return;
    ::kill(pid_, SIGSTOP);
    int status = 0;
    ::waitpid(pid_, &status, WUNTRACED);
    paused_ = true;
  }

  // SIGCONT, returning once the process runs again.
  void Resume() {
    if (pid_ <= 0 || !paused_) return;
    ::kill(pid_, SIGCONT);
    int status = 0;
    ::waitpid(pid_, &status, WCONTINUED);
    paused_ = false;
  }

  bool running() const { return pid_ > 0; }
  bool paused() const { return paused_; }
  pid_t pid() const { return pid_; }
  uint16_t client_port() const { return client_port_; }
  uint16_t peer_port() const { return peer_port_; }
  std::string client_url() const { return "http://127.0.0.1:" + std::to_string(client_port_); }
  EtcdEndpoint endpoint() const { return {"127.0.0.1", client_port_}; }
  const std::string& dir() const { return dir_; }

  std::string log() const {
    std::ifstream in(dir_ + "/etcd.log");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  bool Launch() {
    const std::string client = client_url();
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    std::vector<std::string> args = {SUNDIAL_ETCD_BIN,
                                     "--name=" + name_,
                                     "--data-dir=" + dir_ + "/data",
                                     "--listen-client-urls=" + client,
                                     "--advertise-client-urls=" + client,
                                     "--listen-peer-urls=" + peer,
                                     "--initial-advertise-peer-urls=" + peer,
                                     "--initial-cluster=" + name_ + "=" + peer,
                                     "--initial-cluster-token=" + name_,
                                     "--initial-cluster-state=new",
                                     "--heartbeat-interval=50",
                                     "--election-timeout=500",
                                     "--logger=zap",
                                     "--log-outputs=stderr"};
    args.insert(args.end(), extra_flags_.begin(), extra_flags_.end());
    std::vector<std::string> env;  // ours, without ETCD_*: a stray ETCD_NAME must not leak in
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "ETCD_", 5) != 0) env.emplace_back(*e);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string log_file = dir_ + "/etcd.log";
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      const int fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      // Another test's etcd may hold the port we picked (it was free when we looked, and our
      // etcd then failed to bind it): only our member's answer counts.
      const std::string members =
          LoopbackHttp(client_port_, "/v3/cluster/member/list", "{}", Millis(1000));
      const std::string health = LoopbackHttp(client_port_, "/health", "", Millis(1000));
      if (members.find("\"name\":\"" + name_ + "\"") != std::string::npos &&
          health.find("\"health\":\"true\"") != std::string::npos) {
        return true;
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(Millis(10));  // waiting for the member to elect itself
    }
    Kill();
    return false;
  }

  std::vector<std::string> extra_flags_;
  std::string dir_;
  std::string name_;
  pid_t pid_ = -1;
  bool paused_ = false;
  uint16_t client_port_ = 0;
  uint16_t peer_port_ = 0;
};

}  // namespace sundial::replication::testing
