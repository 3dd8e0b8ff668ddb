// A sundiald (or sundiald-failpoints) process for the torture and the failpoint tests: started
// on ephemeral loopback ports in a data directory kept across restarts, with small segments
// and frequent checkpoints (so rotations and checkpoints happen within a round), a failpoint
// and a planted bug in its environment; SIGKILLed, or reaped when it killed itself.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"

namespace sundial::torture {

class Server {
 public:
  Server(std::string binary, std::string data_dir, std::string log)
      : binary_(std::move(binary)), data_dir_(std::move(data_dir)), log_(std::move(log)) {}
  ~Server() { Kill(); }

  // Starts it with `failpoint` (empty: none) and `bug` in its environment; false if it did not
  // become ready (exited or timed out).
  bool Start(const std::string& failpoint, const std::string& bug) {
    const std::string ready = data_dir_ + ".ready";
    std::filesystem::remove(ready);
    std::vector<std::string> args = {
        binary_, "--data-dir",         data_dir_, "--port",
        "0",     "--http-port",        "0",       "--ready-file",
        ready,   "--io-threads",       "2",       "--segment-bytes",
        "65536", "--checkpoint-bytes", "16384",   "--checkpoint-growth",
        "10"};
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) ::dup2(fd, 2);
      if (!failpoint.empty()) ::setenv("SUNDIAL_FAILPOINT", failpoint.c_str(), 1);
      if (!bug.empty()) ::setenv("SUNDIAL_BUG", bug.c_str(), 1);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(ready);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto at = text.find("\"port\":");
      if (at != std::string::npos && text.find("\"http_port\":") != std::string::npos) {
        port_ = static_cast<uint16_t>(std::atoi(text.c_str() + at + 7));
        if (port_ > 0) return true;
      }
      if (Exited(0)) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // bounded poll for a file
    }
    return false;
  }

  // True once the process has exited (waiting up to `ms`).
  bool Exited(int ms) {
    if (pid_ <= 0) return true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        killed_by_signal_ = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        return true;
      }
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  client::Address address() const { return {"127.0.0.1", port_}; }
  int killed_by_signal() const { return killed_by_signal_; }

 private:
  std::string binary_, data_dir_, log_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
  int killed_by_signal_ = 0;
};

}  // namespace sundial::torture
