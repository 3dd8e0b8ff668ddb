#include "tests/torture/cluster_under_test.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace sundial::torture {
namespace {

namespace fs = std::filesystem;
namespace p = sundial::protocol;
using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The number after "\"key\":" in `json`, or -1.
long NumberAfter(const std::string& json, const std::string& key) {
  const auto at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return -1;
  return std::strtol(json.c_str() + at + key.size() + 3, nullptr, 10);
}

const char* RoleName(p::NodeRole role) {
  switch (role) {
    case p::NodeRole::primary:
      return "primary";
    case p::NodeRole::standby:
      return "standby";
    case p::NodeRole::standalone:
      return "standalone";
    default:
      return "unknown";
  }
}

}  // namespace

NodeProcess::NodeProcess(std::string binary, std::string name, std::string data_dir,
                         std::string log, std::vector<std::string> flags, std::string bug)
    : binary_(std::move(binary)),
      name_(std::move(name)),
      data_dir_(std::move(data_dir)),
      log_(std::move(log)),
      flags_(std::move(flags)),
      bug_(std::move(bug)),
      ready_(data_dir_ + ".ready") {}

NodeProcess::~NodeProcess() { Kill(); }

void NodeProcess::Mark(const std::string& what) const {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  char line[256];
  std::snprintf(line, sizeof line, "=== failover torture %lld.%03ld: %s\n",
                static_cast<long long>(ts.tv_sec), ts.tv_nsec / 1'000'000, what.c_str());
  std::ofstream(log_, std::ios::app) << line;
}

void NodeProcess::DumpStacks(const std::string& path) const {
  if (pid_ <= 0 || ::access("/usr/bin/gdb", X_OK) != 0) return;
  const std::string command = "timeout 60 /usr/bin/gdb -p " + std::to_string(pid_) +
                              " -batch -ex 'thread apply all bt' > " + path + " 2>&1";
  (void)!std::system(command.c_str());
}

bool NodeProcess::Start(std::chrono::milliseconds timeout) {
  Kill();
  Mark("start");
  fs::remove(ready_);
  std::vector<std::string> args = {
      binary_, "--data-dir",  data_dir_, "--ready-file",       ready_, "--port",
      "0",     "--http-port", "0",       "--replication-port", "0"};
  args.insert(args.end(), flags_.begin(), flags_.end());
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    if (!bug_.empty()) ::setenv("SUNDIAL_BUG", bug_.c_str(), 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (RefreshPorts() && port_.load() != 0) {
      Mark("ready");
      return true;
    }
    if (auto status = ExitedOnItsOwn()) {
      Mark("exited while starting, wait status " + std::to_string(*status));
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling for a file
  }
  Mark("not ready in time");
  DumpStacks(data_dir_ + ".start-stacks.txt");
  Kill();
  return false;
}

bool NodeProcess::RefreshPorts() {
  const std::string text = ReadFile(ready_);
  const long port = NumberAfter(text, "port");
  const long replication = NumberAfter(text, "replication_port");
  if (port <= 0 || replication <= 0) return false;
  const bool changed =
      port_.exchange(static_cast<uint16_t>(port)) != port ||
      replication_port_.exchange(static_cast<uint16_t>(replication)) != replication;
  return changed;
}

void NodeProcess::Kill() {
  if (pid_ <= 0) return;
  Mark("SIGKILL");
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  paused_ = false;
}

void NodeProcess::Pause() {
  if (pid_ <= 0 || paused_) return;
  Mark("SIGSTOP");
  ::kill(pid_, SIGSTOP);
  int status = 0;
  ::waitpid(pid_, &status, WUNTRACED);
  paused_ = true;
}

void NodeProcess::Resume() {
  if (pid_ <= 0 || !paused_) return;
  Mark("SIGCONT");
  ::kill(pid_, SIGCONT);
  int status = 0;
  ::waitpid(pid_, &status, WCONTINUED);
  paused_ = false;
}

bool NodeProcess::Terminate(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return false;
  Resume();
  Mark("SIGTERM");
  ::kill(pid_, SIGTERM);
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      Mark("exited, wait status " + std::to_string(status));
      return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  Mark("still running after SIGTERM: stacks in " + data_dir_ + ".stop-stacks.txt");
  DumpStacks(data_dir_ + ".stop-stacks.txt");
  Kill();
  return false;
}

std::optional<int> NodeProcess::ExitedOnItsOwn() {
  if (pid_ <= 0) return std::nullopt;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
  pid_ = -1;
  paused_ = false;
  return status;
}

ClusterUnderTest::ClusterUnderTest(ClusterOptions options) : options_(std::move(options)) {}

ClusterUnderTest::~ClusterUnderTest() { Stop(); }

bool ClusterUnderTest::Start() {
  fs::create_directories(options_.dir);
  if (!etcd_.Start()) {
    why_ = "etcd did not start: " + etcd_.log();
    return false;
  }
  for (int i = 0; i < kNodes; ++i) {
    const std::string name = "n" + std::to_string(i + 1);
    Node& n = nodes_[i];
    n.client = std::make_unique<TcpProxy>(name + "-clients");
    n.replication = std::make_unique<TcpProxy>(name + "-replication");
    n.etcd = std::make_unique<TcpProxy>(name + "-etcd");
    for (TcpProxy* proxy : {n.client.get(), n.replication.get(), n.etcd.get()}) {
      if (!proxy->Start()) {
        why_ = "proxy " + proxy->name() + ": " + proxy->error();
        return false;
      }
    }
    n.etcd->SetUpstream(etcd_.client_port());
    n.replication->SetDelay(options_.replication_delay);
    client_addresses_.push_back(n.client->address());
    std::vector<std::string> flags = {
        "--cluster",
        "torture",
        "--node-name",
        name,
        "--etcd",
        "http://" + n.etcd->address(),
        "--advertise-addr",
        n.client->address(),
        "--advertise-replication",
        n.replication->address(),
        "--replication",
        options_.replication,
        "--leader-ttl-s",
        std::to_string(options_.leader_ttl_s),
        "--ha-loop-ms",
        std::to_string(options_.ha_loop_ms),
        "--sync-timeout-ms",
        std::to_string(options_.sync_timeout_ms),
        "--replication-timeout-ms",
        std::to_string(options_.replication_timeout_ms),
        "--io-threads",
        "1",
        // Small segments and frequent checkpoints: a standby that was away catches up from a
        // snapshot now and then, not only from segments. (Above the log's 1 MiB of
        // preallocation, which the checkpointer counts as logged bytes: at or below it, every
        // write would be followed by a checkpoint.)
        "--segment-bytes",
        "262144",
        "--checkpoint-bytes",
        "2097152",
    };
    n.process = std::make_unique<NodeProcess>(options_.server, name, options_.dir + "/" + name,
                                              options_.dir + "/" + name + ".log", std::move(flags),
                                              options_.bug);
  }
  watcher_ = std::thread([this] { Watch(); });
  for (int i = 0; i < kNodes; ++i) {
    if (!nodes_[i].process->Start(std::chrono::seconds(60))) {
      why_ = "node " + nodes_[i].process->name() + " did not start (see " +
             nodes_[i].process->log() + ")";
      return false;
    }
  }
  return true;
}

void ClusterUnderTest::Stop() {
  stop_.store(true);
  if (watcher_.joinable()) watcher_.join();
  for (Node& n : nodes_) {
    if (n.process) n.process->Kill();
  }
  etcd_.Kill();
  for (Node& n : nodes_) {
    for (TcpProxy* proxy : {n.client.get(), n.replication.get(), n.etcd.get()}) {
      if (proxy != nullptr) proxy->Stop();
    }
  }
}

void ClusterUnderTest::Watch() {
  while (!stop_.load()) {
    for (Node& n : nodes_) {
      if (n.process == nullptr) continue;
      n.process->RefreshPorts();
      // Set every time: Start() reads the file itself, so a change may have been seen there.
      n.client->SetUpstream(n.process->port());
      n.replication->SetUpstream(n.process->replication_port());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling files, bounded
  }
}

int ClusterUnderTest::NodeOfAddress(const std::string& address) const {
  for (int i = 0; i < static_cast<int>(client_addresses_.size()); ++i) {
    if (client_addresses_[i] == address) return i;
  }
  return -1;
}

int ClusterUnderTest::IndexOf(const std::string& name) const {
  for (int i = 0; i < kNodes; ++i) {
    if (nodes_[i].process && nodes_[i].process->name() == name) return i;
  }
  return -1;
}

std::optional<ClusterView> ClusterUnderTest::View(int i, int timeout_ms) {
  NodeProcess& n = *nodes_[i].process;
  if (!n.running() || n.paused() || n.port() == 0) return std::nullopt;
  auto c = client::Client::Connect(DirectAddress(i), {}, timeout_ms);
  if (!c.ok()) return std::nullopt;
  auto r = c.value()->Cluster();
  if (!r.ok()) return std::nullopt;
  const auto* result = r->result<p::ClusterResult>();
  if (result == nullptr) return std::nullopt;
  ClusterView v;
  v.node = result->node() ? result->node()->str() : "";
  v.epoch = result->epoch();
  v.primary = result->primary() ? result->primary()->str() : "";
  v.sync_standby = result->sync_standby() ? result->sync_standby()->str() : "";
  v.role = "unknown";
  if (result->members() != nullptr) {
    for (const p::ClusterMember* m : *result->members()) {
      ClusterView::Member member{m->node() ? m->node()->str() : "", RoleName(m->role()), m->epoch(),
                                 m->end_lsn(), m->flushed_lsn()};
      if (member.node == v.node) v.role = member.role;
      v.members.push_back(std::move(member));
    }
  }
  return v;
}

int ClusterUnderTest::Primary() {
  // A node that names itself the primary, of the newest epoch any node names (a node restarted
  // may name itself for a moment after a leader key of its previous run).
  int best = -1;
  uint64_t best_epoch = 0, newest = 0;
  for (int i = 0; i < kNodes; ++i) {
    auto v = View(i);
    if (!v) continue;
    newest = std::max(newest, v->epoch);
    if (v->primary == v->node && !v->node.empty() && v->epoch >= best_epoch) {
      best = i;
      best_epoch = v->epoch;
    }
  }
  return best >= 0 && best_epoch == newest ? best : -1;
}

int ClusterUnderTest::SyncStandby() {
  const int primary = Primary();
  if (primary < 0) return -1;
  auto v = View(primary);
  return v ? IndexOf(v->sync_standby) : -1;
}

}  // namespace sundial::torture
