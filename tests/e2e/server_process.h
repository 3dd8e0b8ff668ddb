// End-to-end test harness: a real sundiald (SUNDIALD_BIN) in a temporary data directory on
// ephemeral loopback ports. Start() waits for the --ready-file the server writes once both
// ports listen (or for the process to exit), so no test guesses how long a start takes.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace sundial::e2e {

// A fresh directory under $TMPDIR, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "sundial-e2e-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class ServerProcess {
 public:
  // `data_dir`: where the WAL lives (kept across restarts by the caller); extra flags follow.
  ServerProcess(std::string data_dir, std::vector<std::string> flags = {})
      : data_dir_(std::move(data_dir)), flags_(std::move(flags)) {}
  ~ServerProcess() { Kill(); }

  // "NAME=value" entries added to the server's environment from the next Start on (e.g.
  // LD_PRELOAD of the disk fault shim, tests/faults).
  void set_env(std::vector<std::string> env) { env_ = std::move(env); }
  void set_flags(std::vector<std::string> flags) { flags_ = std::move(flags); }
  // Fixed ports instead of ephemeral ones (0, the default): a process that re-executes itself
  // (a cluster node reloading its state) must come back on the same ones.
  void set_ports(uint16_t port, uint16_t http_port) {
    fixed_port_ = port;
    fixed_http_port_ = http_port;
  }

  // Starts sundiald and waits (up to 30 s) for its ready file. False if it exited or timed out;
  // log() then says why.
  bool Start() {
    ready_file_ = data_dir_ + ".ready";
    log_file_ = data_dir_ + ".log";
    std::filesystem::remove(ready_file_);
    std::vector<std::string> args = {SUNDIALD_BIN,
                                     "--data-dir",
                                     data_dir_,
                                     "--port",
                                     std::to_string(fixed_port_),
                                     "--http-port",
                                     std::to_string(fixed_http_port_),
                                     "--ready-file",
                                     ready_file_};
    // Two io threads unless the test asks otherwise: connections then land on different loops.
    if (std::find(flags_.begin(), flags_.end(), "--io-threads") == flags_.end()) {
      args.insert(args.end(), {"--io-threads", "2"});
    }
    args.insert(args.end(), flags_.begin(), flags_.end());
    std::vector<char*> envp;                        // built before fork: the child only execs
    for (auto& e : env_) envp.push_back(e.data());  // first: getenv takes the first match
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_file_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) ::dup2(fd, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (ReadReadyFile()) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_status_ = status;
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // waiting for a file, bounded
    }
    return false;
  }

  // SIGTERM, then the exit code (or -1 if it did not exit normally within 60 s).
  int Terminate() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    return WaitExit(60'000);
  }

  // SIGKILL and reap.
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  // Waits for the process to exit; its exit code, or -1.
  int WaitExit(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = status;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;
  }

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  uint16_t port() const { return port_; }
  uint16_t http_port() const { return http_port_; }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& data_dir() const { return data_dir_; }
  std::string log() const {
    std::ifstream in(log_file_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  bool ReadReadyFile() {
    std::ifstream in(ready_file_);
    if (!in) return false;
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto number = [&](const std::string& key) -> long {
      const auto at = text.find("\"" + key + "\":");
      return at == std::string::npos ? -1 : std::atol(text.c_str() + at + key.size() + 3);
    };
    if (number("port") <= 0 || number("http_port") <= 0) return false;
    port_ = static_cast<uint16_t>(number("port"));
    http_port_ = static_cast<uint16_t>(number("http_port"));
    return true;
  }

  std::string data_dir_;
  std::vector<std::string> flags_;
  std::vector<std::string> env_;
  std::string ready_file_;
  std::string log_file_;
  pid_t pid_ = -1;
  int exit_status_ = 0;
  uint16_t port_ = 0;
  uint16_t http_port_ = 0;
  uint16_t fixed_port_ = 0;       // 0: ephemeral
  uint16_t fixed_http_port_ = 0;  // 0: ephemeral
};

}  // namespace sundial::e2e
