// NodeRole: this node's place in its cluster as every request sees it (docs/replication.md,
// "Roles"): whether a mutation may run here, the epoch replies carry, where the primary is, and
// the cluster's members for the Cluster request. A node outside a cluster is standalone and
// always writable.
//
// A primary is writable only until its leadership's deadline: the coordinator moves it on after
// each renewal of its etcd lease (the time the keepalive was sent + TTL − margin), so a primary
// that cannot renew stops taking writes by itself (Patroni's rule). Safety never rests on this
// deadline (the synchronous standby's epoch promise fences an old primary): it only keeps an
// isolated primary from making clients wait.
//
// Thread safety: the coordinator writes (any thread); every request reads. MayWrite and epoch()
// are lock-free (one atomic load, and one clock read for a primary); the strings and the
// members are copied under a mutex, only when a request is refused or asks for them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/mutex.h"

namespace sundial::server {

enum class RoleKind : uint8_t { kStandalone = 0, kPrimary = 1, kStandby = 2, kUnknown = 3 };

struct MemberInfo {
  std::string node;
  RoleKind role = RoleKind::kUnknown;
  std::string addr;              // binary TCP, host:port
  std::string http_addr;         // host:port
  std::string replication_addr;  // host:port
  uint64_t epoch = 0;
  uint64_t end_lsn = 0;
  uint64_t flushed_lsn = 0;
  uint64_t lag_records = 0;
  int64_t lag_ms = 0;
  bool sync = false;
};

struct ClusterInfo {
  std::string cluster;  // empty: standalone
  std::string node;
  uint64_t epoch = 0;
  std::string primary;  // node name; empty: none known
  std::string primary_addr;
  std::string sync_standby;
  std::string replication;  // "sync" | "async"
  std::vector<MemberInfo> members;
};

class NodeRole {
 public:
  using SteadyClock = std::chrono::steady_clock;

  RoleKind kind() const { return kind_.load(std::memory_order_acquire); }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

  // Whether a mutation may run now: standalone, or the primary within its deadline.
  bool MayWrite(SteadyClock::time_point now) const {
    switch (kind()) {
      case RoleKind::kStandalone:
        return true;
      case RoleKind::kPrimary:
        return now.time_since_epoch().count() < writable_until_.load(std::memory_order_acquire);
      default:
        return false;
    }
  }

  // A refused mutation's message ("not primary: node-b at 10.0.0.2:7400 is (epoch 7)") and the
  // primary's client address (empty when unknown).
  struct Refusal {
    std::string message;
    std::string primary_addr;
  };
  Refusal WhyNotWritable() const;

  ClusterInfo cluster() const {
    MutexLock lock(&mu_);
    return info_;
  }

  // The coordinator's side. `info` is the whole view (members included) as it read it.
  void Set(RoleKind kind, uint64_t epoch, ClusterInfo info) {
    {
      MutexLock lock(&mu_);
      info_ = std::move(info);
    }
    epoch_.store(epoch, std::memory_order_release);
    kind_.store(kind, std::memory_order_release);
  }
  // A primary's deadline: writable until then.
  void SetWritableUntil(SteadyClock::time_point until) {
    writable_until_.store(until.time_since_epoch().count(), std::memory_order_release);
  }

 private:
  std::atomic<RoleKind> kind_{RoleKind::kStandalone};
  std::atomic<uint64_t> epoch_{0};
  std::atomic<SteadyClock::rep> writable_until_{0};
  mutable Mutex mu_;
  ClusterInfo info_ GUARDED_BY(mu_);
};

}  // namespace sundial::server
