// LocalCluster: a real Sundial cluster for tests (docs/testing.md, "Cluster tests"): one etcd
// (tests/replication/etcd_process.h: Debian's etcd on free loopback ports) and N sundiald nodes
// (tests/e2e/server_process.h), each in its own data directory under one TempDir, on free
// loopback ports chosen up front (a node that reloads its state re-executes itself with the
// same command line, so its ports must not be ephemeral) and confirmed by its ready file.
//
// Nodes are named n1..nN, run `--cluster test --etcd URL --leader-ttl-s 2` (a failover takes
// about two seconds) plus the caller's flags. Nothing here sleeps for a guessed time: Start()
// waits for each ready file and WaitForPrimary() polls the nodes' Cluster answers until one
// leads with a synchronous standby, both with deadlines.
//
// Also a gtest fixture, ClusterTest, that starts a three-node cluster in SetUp and prints the
// nodes' logs when a test fails.
//
// Thread safety: one test thread (the processes are the concurrency).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/e2e/server_process.h"
#include "tests/replication/etcd_process.h"

namespace sundial::e2e {

using replication::testing::Eventually;
using replication::testing::FreeLoopbackPorts;
using Millis = std::chrono::milliseconds;

class LocalCluster {
 public:
  struct Node {
    std::string name;  // n1, n2, ...
    uint16_t port = 0;
    uint16_t http_port = 0;
    uint16_t replication_port = 0;
    std::unique_ptr<ServerProcess> process;

    std::string addr() const { return "127.0.0.1:" + std::to_string(port); }
    client::Address address() const { return {"127.0.0.1", port}; }
  };

  // `flags`: extra sundiald flags for every node (after the cluster's own).
  explicit LocalCluster(int nodes = 3, std::vector<std::string> flags = {})
      : flags_(std::move(flags)) {
    for (int i = 1; i <= nodes; ++i) {
      Node n;
      n.name = "n" + std::to_string(i);
      nodes_.push_back(std::move(n));
    }
  }
  ~LocalCluster() {
    for (Node& n : nodes_) {
      if (n.process) n.process->Kill();
    }
    etcd_.Kill();
  }
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // Starts etcd, then every node; true once each has written its ready file. A port taken by
  // someone else between choosing it and binding it is retried with new ports.
  bool Start() {
    if (!etcd_.Start()) {
      failure_ = "etcd did not start: " + etcd_.log();
      return false;
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!StartNode(i)) return false;
    }
    return true;
  }

  // Polls every running node's Cluster answer until one answers as the primary with a published
  // synchronous standby (so durable writes are acknowledged at once); its index, or -1 when
  // none did within `timeout`.
  int WaitForPrimary(Millis timeout = Millis(30'000), bool with_sync_standby = true) {
    int found = -1;
    Eventually(
        [&] {
          found = PrimaryNow(with_sync_standby);
          return found >= 0;
        },
        timeout);
    return found;
  }

  // The index of the node that answers as primary now (-1: none).
  int PrimaryNow(bool with_sync_standby = true) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!nodes_[i].process || !nodes_[i].process->running()) continue;
      auto c = client::Client::Connect(nodes_[i].address(), std::string(), 1000);
      if (!c.ok()) continue;
      auto reply = (*c)->Cluster();
      if (!reply.ok()) continue;
      const protocol::ClusterResult* r = reply->result<protocol::ClusterResult>();
      if (r == nullptr || r->node() == nullptr || r->primary() == nullptr) continue;
      if (r->node()->string_view() != r->primary()->string_view()) continue;
      if (with_sync_standby && (r->sync_standby() == nullptr || r->sync_standby()->size() == 0)) {
        continue;
      }
      return static_cast<int>(i);
    }
    return -1;
  }

  // kill -9 of node i, reaped.
  void Kill(size_t i) { nodes_[i].process->Kill(); }
  // Starts node i again on its ports and data (after Kill).
  bool Restart(size_t i) { return nodes_[i].process->Start(); }

  Node& node(size_t i) { return nodes_[i]; }
  size_t size() const { return nodes_.size(); }
  int IndexOf(std::string_view name) const {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].name == name) return static_cast<int>(i);
    }
    return -1;
  }
  // Every node's client address, in order.
  std::vector<client::Address> addresses() const {
    std::vector<client::Address> out;
    for (const Node& n : nodes_) out.push_back(n.address());
    return out;
  }
  // The same as `sundial --addr` takes it: "127.0.0.1:P1,127.0.0.1:P2,...".
  std::string addr_list() const {
    std::string out;
    for (const Node& n : nodes_) out += (out.empty() ? "" : ",") + n.addr();
    return out;
  }
  const std::string& etcd_url() const { return etcd_url_; }
  replication::testing::EtcdProcess& etcd() { return etcd_; }

  // Why Start failed, and every node's log: for a failing test's output.
  std::string Logs() const {
    std::string out = failure_;
    for (const Node& n : nodes_) {
      if (!n.process) continue;
      out += "\n---- " + n.name + " (" + n.addr() + ") ----\n" + n.process->log();
    }
    return out;
  }

 private:
  bool StartNode(size_t i) {
    Node& n = nodes_[i];
    etcd_url_ = etcd_.client_url();
    for (int attempt = 0; attempt < 5; ++attempt) {
      const std::vector<uint16_t> ports = FreeLoopbackPorts(3);
      n.port = ports[0];
      n.http_port = ports[1];
      n.replication_port = ports[2];
      std::vector<std::string> flags = {
          "--cluster",      "test",    "--node-name",        n.name,
          "--etcd",         etcd_url_, "--replication-port", std::to_string(n.replication_port),
          "--leader-ttl-s", "2"};
      flags.insert(flags.end(), flags_.begin(), flags_.end());
      n.process = std::make_unique<ServerProcess>(dir_.path() + "/" + n.name, flags);
      n.process->set_ports(n.port, n.http_port);
      if (n.process->Start()) return true;
      const std::string log = n.process->log();
      if (log.find("in use") == std::string::npos) {
        failure_ = n.name + " did not start:\n" + log;
        return false;
      }
      std::error_code ec;
      std::filesystem::remove_all(dir_.path() + "/" + n.name, ec);
      std::filesystem::remove(dir_.path() + "/" + n.name + ".log", ec);
    }
    failure_ = n.name + ": no free ports after 5 attempts";
    return false;
  }

  std::vector<std::string> flags_;
  TempDir dir_;
  replication::testing::EtcdProcess etcd_;
  std::string etcd_url_;
  std::vector<Node> nodes_;
  std::string failure_;
};

// A three-node cluster with a primary and a synchronous standby, started for each test.
class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.Start()) << cluster_.Logs();
    primary_ = cluster_.WaitForPrimary();
    ASSERT_GE(primary_, 0) << "no primary with a synchronous standby within 30 s\n"
                           << cluster_.Logs();
  }
  void TearDown() override {
    if (HasFailure()) std::fprintf(stderr, "%s\n", cluster_.Logs().c_str());
  }

  // A client given every node's address (it follows the primary).
  std::unique_ptr<client::Client> Follower(int timeout_ms = 5000) {
    client::ConnectOptions options;
    options.timeout_ms = timeout_ms;
    auto c = client::Client::Connect(cluster_.addresses(), options);
    EXPECT_TRUE(c.ok()) << c.error().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  LocalCluster cluster_;
  int primary_ = -1;  // the node that led when the test began
};

}  // namespace sundial::e2e
