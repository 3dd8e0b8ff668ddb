// The failover torture's cluster (docs/testing.md, "Failover torture"): a real etcd and three
// sundiald nodes on loopback, every link the nemesis cuts running through a TcpProxy of the
// test's own (tests/torture/tcp_proxy.h):
//
//   clients ──► client proxy i ──► node i's binary TCP port    (--advertise-addr: the proxy)
//   standbys ─► replication proxy i ──► node i's replication port  (--advertise-replication)
//   node i ──► etcd proxy i ──► etcd                            (--etcd: the proxy)
//
// Nodes bind ephemeral ports and say which in their --ready-file; a watcher thread reads the
// files again every few ms (a node restarted, or re-executed to reload its state, binds new
// ones) and points the proxies at them. The harness itself talks to nodes on their own ports
// (ClusterView, Stats), never through a proxy.
//
// Every process dies with the test (PR_SET_PDEATHSIG); each node logs to DIR/nI.log.
//
// Thread safety: the watcher thread only touches the proxies' upstreams and the ports; every
// other method is for one thread (the torture's orchestrator), except DirectAddress and
// ClientAddress, which any thread may call.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/replication/etcd_process.h"
#include "tests/torture/tcp_proxy.h"

namespace sundial::torture {

// One sundiald process, started again on the same data directory as often as asked.
class NodeProcess {
 public:
  NodeProcess(std::string binary, std::string name, std::string data_dir, std::string log,
              std::vector<std::string> flags, std::string bug);
  ~NodeProcess();  // Kill()

  // Starts it and waits (up to `timeout`) for its ready file; false if it exited or timed out.
  bool Start(std::chrono::milliseconds timeout);
  void Kill();    // SIGKILL, reaped
  void Pause();   // SIGSTOP, returns once stopped
  void Resume();  // SIGCONT
  // SIGTERM, then waits up to `timeout` for the exit (SIGKILL after it). Whether it exited by
  // itself, and with status 0.
  bool Terminate(std::chrono::milliseconds timeout);
  // Reaps the process if it exited by itself: its wait status (a finding: nobody killed it).
  std::optional<int> ExitedOnItsOwn();
  // Reads the ready file again; true when the ports changed (a restart, a reload).
  bool RefreshPorts();
  // Appends "=== failover torture T: WHAT" to the node's log (T: CLOCK_MONOTONIC seconds, the
  // history's clock), so the log shows when the harness acted on it. Start, Kill, Pause,
  // Resume and Terminate mark themselves.
  void Mark(const std::string& what) const;
  // The stack of every thread of the running process (gdb, when installed) into `path`.
  void DumpStacks(const std::string& path) const;

  bool running() const { return pid_ > 0; }
  bool paused() const { return paused_; }
  pid_t pid() const { return pid_; }
  uint16_t port() const { return port_.load(); }
  uint16_t replication_port() const { return replication_port_.load(); }
  const std::string& name() const { return name_; }
  const std::string& data_dir() const { return data_dir_; }
  const std::string& log() const { return log_; }

 private:
  const std::string binary_, name_, data_dir_, log_;
  const std::vector<std::string> flags_;
  const std::string bug_;
  const std::string ready_;
  pid_t pid_ = -1;
  bool paused_ = false;
  std::atomic<uint16_t> port_{0}, replication_port_{0};
};

struct ClusterOptions {
  std::string server;  // the sundiald binary
  std::string dir;     // data directories and logs
  std::string replication = "sync";
  int leader_ttl_s = 2;
  int ha_loop_ms = 250;
  int sync_timeout_ms = 2000;
  int replication_timeout_ms = 2000;
  std::string bug;  // SUNDIAL_BUG of every node (the failpoints build)
  // Delay of every byte through the replication proxies (a slow standby link).
  std::chrono::milliseconds replication_delay{0};
};

// What one node answers to a Cluster request.
struct ClusterView {
  std::string node;  // the one that answered
  std::string role;  // its own role as its member key in etcd says: primary, standby, unknown
  uint64_t epoch = 0;
  std::string primary;  // name; empty: none known
  std::string sync_standby;
  struct Member {
    std::string node, role;
    uint64_t epoch = 0, end_lsn = 0, flushed_lsn = 0;
  };
  std::vector<Member> members;
};

class ClusterUnderTest {
 public:
  static constexpr int kNodes = 3;

  explicit ClusterUnderTest(ClusterOptions options);
  ~ClusterUnderTest();  // Stop()

  // etcd, the proxies, the nodes (waiting for each one's ready file). False and why() on failure.
  bool Start();
  // Kills every node and etcd, stops the proxies.
  void Stop();

  NodeProcess& node(int i) { return *nodes_[i].process; }
  TcpProxy& client_proxy(int i) { return *nodes_[i].client; }
  TcpProxy& replication_proxy(int i) { return *nodes_[i].replication; }
  TcpProxy& etcd_proxy(int i) { return *nodes_[i].etcd; }
  replication::testing::EtcdProcess& etcd() { return etcd_; }
  const std::string& why() const { return why_; }
  const ClusterOptions& options() const { return options_; }

  // What clients dial for node i (its client proxy), and the node whose proxy `address` is (-1:
  // none). Any thread.
  std::string ClientAddress(int i) const { return client_addresses_[i]; }
  int NodeOfAddress(const std::string& address) const;
  std::vector<std::string> ClientAddresses() const { return client_addresses_; }
  // Node i's own binary TCP port (no proxy).
  client::Address DirectAddress(int i) const { return {"127.0.0.1", nodes_[i].process->port()}; }
  int IndexOf(const std::string& name) const;

  // Node i's answer to a Cluster request on its own port (nothing when it is down, paused or
  // does not answer within `timeout_ms`).
  std::optional<ClusterView> View(int i, int timeout_ms = 1000);
  // The node that says it is the primary (and is not paused), or -1.
  int Primary();
  // The synchronous standby the primary publishes, or -1.
  int SyncStandby();

 private:
  struct Node {
    std::unique_ptr<NodeProcess> process;
    std::unique_ptr<TcpProxy> client, replication, etcd;
  };
  void Watch();

  const ClusterOptions options_;
  replication::testing::EtcdProcess etcd_;
  std::array<Node, kNodes> nodes_;
  std::vector<std::string> client_addresses_;
  std::string why_;
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

}  // namespace sundial::torture
