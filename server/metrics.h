// Server metrics in Prometheus' text format (the server issue's metrics item): counters and
// histograms kept with relaxed atomics on the request path, gauges read from the engine and the
// WAL when /metrics is scraped. docs/operations.md lists every series.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "engine/mutex.h"
#include "engine/status.h"
#include "server/node_role.h"
#include "server/transport.h"
#include "wal/checkpointer.h"
#include "wal/group_commit_log.h"

namespace sundial::server {

// An operation's name as metrics label it and messages name it: protocol::Operation's number
// (0: "none"; beyond the last: "unknown") in snake case, "create_queue".
std::string OpName(size_t op);

// A histogram with fixed bounds in seconds (50 µs .. 10 s, then +Inf).
class Histogram {
 public:
  static constexpr std::array<double, 17> kBounds = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,    0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0};

  void Observe(uint64_t nanos);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  // Appends `name_bucket{labels,le=..}`, `name_sum{labels}`, `name_count{labels}` lines.
  void Render(std::string_view name, std::string_view labels, std::string* out) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> sum_nanos_{0};
  std::atomic<uint64_t> count_{0};
};

// A node's place in its cluster as /metrics shows it (docs/operations.md, "Metrics"), taken
// when /metrics is scraped: the role and the epoch always; the rest only in a cluster
// (`cluster` not empty), the standbys' figures on a primary and the link's on a standby.
struct ClusterFigures {
  RoleKind role = RoleKind::kStandalone;
  uint64_t epoch = 0;
  bool ready = false;  // /readyz answers 200: mutations are taken here now
  // In a cluster.
  std::string cluster;  // empty: standalone (nothing below is exported)
  std::string node;
  std::string replication;  // "sync" | "async"
  bool etcd_reachable = false;
  uint64_t promotions = 0;  // times this process became the primary
  uint64_t demotions = 0;   // times it stopped being the primary
  // A primary: each standby that connected to it, and the published synchronous standby.
  struct Standby {
    std::string node;
    uint64_t lag_records = 0;  // this node's log end minus what the standby acknowledged
    double lag_seconds = 0;    // 0 when caught up; else since its last acknowledgement
    bool connected = false;
  };
  std::vector<Standby> standbys;
  std::string sync_standby;  // empty: none published
  bool sync_standby_connected = false;
  // A standby: its link to the primary.
  bool primary_connected = false;
  uint64_t lag_records = 0;  // the primary's log end as it last said minus what is fsynced here
};

// Appends the cluster series of `figures` (sundial_role, sundial_epoch, sundial_ready, and in a
// cluster sundial_cluster_info, sundial_replication_*, sundial_standby_*) to `out`.
void RenderClusterFigures(const ClusterFigures& figures, std::string* out);

class Metrics {
 public:
  static constexpr size_t kOps = 64;    // > the Operation union's members (dispatch.cc asserts it)
  static constexpr size_t kCodes = 10;  // every Code (NOT_PRIMARY is the last)

  // One request answered: its protocol Operation (union type), code and time to the reply.
  void CountRequest(uint8_t op, Code code, uint64_t nanos);
  // Messages a request handled (sundial_messages_total): enqueued, leased, completed.
  void CountMessages(uint8_t op, uint64_t n) {
    if (op < kOps) messages_[op].fetch_add(n, std::memory_order_relaxed);
  }
  void AddConnection(Transport t, int delta);
  void LeaseExpired(std::string_view queue);
  void Fsync(uint64_t nanos) { fsync_.Observe(nanos); }
  // Where the sundial_checkpoint* series come from (the process's Checkpointer; none: no series).
  void SetCheckpointStats(std::function<wal::CheckpointStats()> stats);

  int64_t connections(Transport t) const;
  int64_t connections() const;

  // The whole exposition: the counters above plus the engine's and the WAL's gauges and the
  // node's place in its cluster.
  std::string Render(const Engine& engine, const wal::GroupCommitLog* log,
                     const ClusterFigures& cluster) const;

 private:
  std::array<std::array<std::atomic<uint64_t>, kCodes>, kOps> operations_{};
  std::array<Histogram, kOps> durations_;
  std::array<std::atomic<uint64_t>, kOps> messages_{};
  Histogram fsync_;
  std::array<std::atomic<int64_t>, kTransports> connections_{};
  mutable Mutex checkpoint_mu_;
  std::function<wal::CheckpointStats()> checkpoint_stats_ GUARDED_BY(checkpoint_mu_);
  mutable Mutex lease_mu_;
  std::map<std::string, uint64_t, std::less<>> lease_expirations_ GUARDED_BY(lease_mu_);
};

// The resident set size of this process (from /proc/self/statm), 0 if unknown.
uint64_t ResidentBytes();

}  // namespace sundial::server
