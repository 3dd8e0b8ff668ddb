#include "server/metrics.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "protocol/sundial_generated.h"

namespace sundial::server {
namespace {

// "CreateQueue" -> "create_queue".
std::string SnakeCase(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c >= 'A' && c <= 'Z') {
      if (!out.empty()) out += '_';
      out += static_cast<char>(c - 'A' + 'a');
    } else {
      out += c;
    }
  }
  return out;
}

// Prometheus label values escape backslash, double quote and newline.
std::string Escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void Header(std::string* out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(*out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

std::string OpName(size_t op) {
  if (op > static_cast<size_t>(protocol::Operation::MAX)) return "unknown";
  if (op == 0) return "none";
  return SnakeCase(protocol::EnumNameOperation(static_cast<protocol::Operation>(op)));
}

void Histogram::Observe(uint64_t nanos) {
  const double seconds = static_cast<double>(nanos) / 1e9;
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_nanos_.fetch_add(nanos, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void Histogram::Render(std::string_view name, std::string_view labels, std::string* out) const {
  auto it = std::back_inserter(*out);
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    const std::string le = i < kBounds.size() ? fmt::format("{}", kBounds[i]) : "+Inf";
    fmt::format_to(it, "{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, le, cumulative);
  }
  const std::string braces = labels.empty() ? "" : fmt::format("{{{}}}", labels);
  fmt::format_to(it, "{}_sum{} {}\n", name, braces,
                 static_cast<double>(sum_nanos_.load(std::memory_order_relaxed)) / 1e9);
  fmt::format_to(it, "{}_count{} {}\n", name, braces, cumulative);
}

std::string_view TransportName(Transport t) {
  switch (t) {
    case Transport::kTcp:
      return "tcp";
    case Transport::kWebSocket:
      return "websocket";
    case Transport::kHttp:
      return "http";
    case Transport::kReplication:
      return "replication";
  }
  return "unknown";
}

void Metrics::CountRequest(uint8_t op, Code code, uint64_t nanos) {
  const size_t o = op < kOps ? op : 0;
  const size_t c = static_cast<size_t>(code) < kCodes ? static_cast<size_t>(code) : kCodes - 1;
  operations_[o][c].fetch_add(1, std::memory_order_relaxed);
  durations_[o].Observe(nanos);
}

void Metrics::AddConnection(Transport t, int delta) {
  connections_[static_cast<size_t>(t)].fetch_add(delta, std::memory_order_relaxed);
}

void Metrics::SetCheckpointStats(std::function<wal::CheckpointStats()> stats) {
  MutexLock lock(&checkpoint_mu_);
  checkpoint_stats_ = std::move(stats);
}

int64_t Metrics::connections(Transport t) const {
  return connections_[static_cast<size_t>(t)].load(std::memory_order_relaxed);
}

int64_t Metrics::connections() const {
  int64_t n = 0;
  for (const auto& c : connections_) n += c.load(std::memory_order_relaxed);
  return n;
}

void Metrics::LeaseExpired(std::string_view queue) {
  MutexLock lock(&lease_mu_);
  auto it = lease_expirations_.find(queue);
  if (it == lease_expirations_.end()) it = lease_expirations_.emplace(queue, 0).first;
  ++it->second;
}

void RenderClusterFigures(const ClusterFigures& f, std::string* out) {
  auto it = std::back_inserter(*out);
  // An enum as Prometheus has them: one series per value, 1 for the current one, so that
  // `sundial_role{role="primary"} == 1` selects primaries and a change shows in every series.
  Header(out, "sundial_role", "gauge",
         "This node's role (1 for the current one): standalone, primary, standby, or unknown "
         "(in a cluster, no primary known).");
  static constexpr std::pair<RoleKind, std::string_view> kRoles[] = {
      {RoleKind::kStandalone, "standalone"},
      {RoleKind::kPrimary, "primary"},
      {RoleKind::kStandby, "standby"},
      {RoleKind::kUnknown, "unknown"}};
  for (const auto& [kind, name] : kRoles) {
    fmt::format_to(it, "sundial_role{{role=\"{}\"}} {}\n", name, f.role == kind ? 1 : 0);
  }
  Header(out, "sundial_epoch", "gauge",
         "The epoch this node leads (a primary) or follows (a standby); 0 outside a cluster.");
  fmt::format_to(it, "sundial_epoch {}\n", f.epoch);
  Header(out, "sundial_ready", "gauge",
         "1 when /readyz answers 200: this node takes mutations now.");
  fmt::format_to(it, "sundial_ready {}\n", f.ready ? 1 : 0);
  if (f.cluster.empty()) return;

  Header(out, "sundial_cluster_info", "gauge", "This node's cluster, name and --replication (1).");
  fmt::format_to(it, "sundial_cluster_info{{cluster=\"{}\",node=\"{}\",replication=\"{}\"}} 1\n",
                 Escape(f.cluster), Escape(f.node), Escape(f.replication));
  Header(out, "sundial_etcd_reachable", "gauge",
         "1 when the last round of the HA loop renewed this node's etcd lease and read the "
         "cluster's keys.");
  fmt::format_to(it, "sundial_etcd_reachable {}\n", f.etcd_reachable ? 1 : 0);
  Header(out, "sundial_promotions_total", "counter", "Times this process became the primary.");
  fmt::format_to(it, "sundial_promotions_total {}\n", f.promotions);
  Header(out, "sundial_demotions_total", "counter",
         "Times this process stopped being the primary.");
  fmt::format_to(it, "sundial_demotions_total {}\n", f.demotions);

  if (f.role == RoleKind::kPrimary) {
    // One family per figure, a series per standby.
    const auto per_standby = [&](std::string_view name, std::string_view help, auto value) {
      Header(out, name, "gauge", help);
      for (const ClusterFigures::Standby& s : f.standbys) {
        fmt::format_to(it, "{}{{standby=\"{}\"}} {}\n", name, Escape(s.node), value(s));
      }
    };
    per_standby("sundial_replication_lag_records",
                "A primary: records in its log its standby has not acknowledged (fsynced) in this "
                "epoch, per standby.",
                [](const ClusterFigures::Standby& s) { return s.lag_records; });
    per_standby("sundial_replication_lag_seconds",
                "A primary: 0 when the standby holds every record; else the time since its last "
                "acknowledgement, per standby.",
                [](const ClusterFigures::Standby& s) { return s.lag_seconds; });
    per_standby("sundial_replication_standby_connected",
                "A primary: 1 while the standby's replication connection is open, per standby.",
                [](const ClusterFigures::Standby& s) { return s.connected ? 1 : 0; });
    Header(out, "sundial_replication_sync_standby", "gauge",
           "A primary: its published synchronous standby (1), the only node a failover may "
           "promote.");
    if (!f.sync_standby.empty()) {
      fmt::format_to(it, "sundial_replication_sync_standby{{standby=\"{}\"}} 1\n",
                     Escape(f.sync_standby));
    }
    Header(out, "sundial_replication_sync_standby_connected", "gauge",
           "A primary: 1 when a synchronous standby is published and connected (under "
           "--replication sync, durable mutations are acknowledged only then).");
    fmt::format_to(it, "sundial_replication_sync_standby_connected {}\n",
                   f.sync_standby_connected ? 1 : 0);
  } else if (f.role == RoleKind::kStandby) {
    Header(out, "sundial_standby_connected", "gauge",
           "A standby: 1 while its connection to the primary's replication port is open.");
    fmt::format_to(it, "sundial_standby_connected {}\n", f.primary_connected ? 1 : 0);
    Header(out, "sundial_standby_lag_records", "gauge",
           "A standby: the primary's log end as the primary last said, minus what this node "
           "has fsynced.");
    fmt::format_to(it, "sundial_standby_lag_records {}\n", f.lag_records);
  }
}

std::string Metrics::Render(const Engine& engine, const wal::GroupCommitLog* log,
                            const ClusterFigures& cluster) const {
  std::string out;
  auto it = std::back_inserter(out);

  Header(&out, "sundial_build_info", "gauge", "Build information (value 1).");
  fmt::format_to(it, "sundial_build_info{{version=\"{}\",wal_format=\"1\"}} 1\n", SUNDIAL_VERSION);

  const std::vector<QueueInfo> queues = engine.ListQueues();
  Header(&out, "sundial_messages", "gauge", "Messages per queue and state.");
  static constexpr MessageState kStates[] = {MessageState::kInvisible, MessageState::kPending,
                                             MessageState::kRunning,   MessageState::kCompleted,
                                             MessageState::kCanceled,  MessageState::kErrored};
  for (const QueueInfo& q : queues) {
    const std::string name = Escape(q.name);
    for (MessageState s : kStates) {
      fmt::format_to(it, "sundial_messages{{queue=\"{}\",state=\"{}\"}} {}\n", name, StateName(s),
                     q.counts[s]);
    }
  }
  // Blocked messages are pending ones too (docs/semantics.md, count), so they get a series of
  // their own: a state label would make sum(sundial_messages) count them twice.
  Header(&out, "sundial_messages_blocked", "gauge",
         "Pending messages held back by the key gate, per queue.");
  for (const QueueInfo& q : queues) {
    fmt::format_to(it, "sundial_messages_blocked{{queue=\"{}\"}} {}\n", Escape(q.name),
                   q.counts.blocked);
  }
  // The same messages by reason: the two series of a queue sum to sundial_messages_blocked.
  Header(&out, "sundial_messages_blocked_by_reason", "gauge",
         "Pending messages held back by the key gate, per queue and reason (concurrency: the "
         "value is at its key_concurrency; rate: it is out of tokens).");
  for (const QueueInfo& q : queues) {
    const std::string name = Escape(q.name);
    fmt::format_to(it,
                   "sundial_messages_blocked_by_reason{{queue=\"{}\",reason=\"concurrency\"}} {}\n",
                   name, q.counts.blocked_concurrency);
    fmt::format_to(it, "sundial_messages_blocked_by_reason{{queue=\"{}\",reason=\"rate\"}} {}\n",
                   name, q.counts.blocked_rate);
  }
  Header(&out, "sundial_throttled_dequeues_total", "counter",
         "Dequeues held back by a token bucket (the queue's or a flow-key value's), per queue.");
  for (const QueueInfo& q : queues) {
    fmt::format_to(it, "sundial_throttled_dequeues_total{{queue=\"{}\"}} {}\n", Escape(q.name),
                   q.throttled_dequeues);
  }
  Header(&out, "sundial_oldest_pending_age_seconds", "gauge",
         "Age of the queue's head pending message.");
  for (const QueueInfo& q : queues) {
    fmt::format_to(it, "sundial_oldest_pending_age_seconds{{queue=\"{}\"}} {}\n", Escape(q.name),
                   static_cast<double>(q.oldest_pending_age_ms) / 1000.0);
  }

  Header(&out, "sundial_operations_total", "counter", "Requests answered, by operation and code.");
  for (size_t o = 0; o < kOps; ++o) {
    for (size_t c = 0; c < kCodes; ++c) {
      const uint64_t n = operations_[o][c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      fmt::format_to(it, "sundial_operations_total{{op=\"{}\",code=\"{}\"}} {}\n", OpName(o),
                     CodeName(static_cast<Code>(c)), n);
    }
  }
  Header(&out, "sundial_messages_total", "counter",
         "Messages handled, by operation: enqueue items accepted (duplicates too), messages "
         "leased by dequeue, complete items that succeeded.");
  for (size_t o = 0; o < kOps; ++o) {
    const uint64_t n = messages_[o].load(std::memory_order_relaxed);
    if (n == 0) continue;
    fmt::format_to(it, "sundial_messages_total{{op=\"{}\"}} {}\n", OpName(o), n);
  }
  Header(&out, "sundial_request_duration_seconds", "histogram",
         "Time from a request's decoding to its reply being queued, by operation.");
  for (size_t o = 0; o < kOps; ++o) {
    if (durations_[o].count() == 0) continue;
    durations_[o].Render("sundial_request_duration_seconds", fmt::format("op=\"{}\"", OpName(o)),
                         &out);
  }

  Header(&out, "sundial_wal_fsync_duration_seconds", "histogram", "fdatasync calls of the WAL.");
  fsync_.Render("sundial_wal_fsync_duration_seconds", "", &out);
  const wal::LogStats stats = log ? log->stats() : wal::LogStats{};
  Header(&out, "sundial_wal_bytes_total", "counter", "Bytes written to WAL segments.");
  fmt::format_to(it, "sundial_wal_bytes_total {}\n", stats.bytes);
  Header(&out, "sundial_wal_records_total", "counter", "Effects appended to the WAL.");
  fmt::format_to(it, "sundial_wal_records_total {}\n", stats.records);
  Header(&out, "sundial_wal_failed", "gauge", "1 when the WAL has failed (writes refused).");
  fmt::format_to(it, "sundial_wal_failed {}\n", log && log->failed() ? 1 : 0);

  std::function<wal::CheckpointStats()> checkpoint_stats;
  {
    MutexLock lock(&checkpoint_mu_);
    checkpoint_stats = checkpoint_stats_;
  }
  if (checkpoint_stats) {
    const wal::CheckpointStats c = checkpoint_stats();
    Header(&out, "sundial_checkpoints_total", "counter", "Checkpoints, by result.");
    fmt::format_to(it, "sundial_checkpoints_total{{result=\"ok\"}} {}\n", c.checkpoints);
    fmt::format_to(it, "sundial_checkpoints_total{{result=\"failed\"}} {}\n", c.failures);
    Header(&out, "sundial_checkpoint_fork_fallbacks_total", "counter",
           "Checkpoints of --checkpoint-mode fork that replayed the log because fork failed.");
    fmt::format_to(it, "sundial_checkpoint_fork_fallbacks_total {}\n", c.fork_fallbacks);
    Header(&out, "sundial_checkpoint_last_duration_seconds", "gauge",
           "Wall time of the last successful checkpoint.");
    fmt::format_to(it, "sundial_checkpoint_last_duration_seconds {}\n",
                   static_cast<double>(c.last.duration_ms) / 1e3);
    Header(&out, "sundial_checkpoint_last_pause_seconds", "gauge",
           "How long the last successful checkpoint held the engine (its fork); 0 for a replay.");
    fmt::format_to(it, "sundial_checkpoint_last_pause_seconds {}\n",
                   static_cast<double>(c.last.pause_us) / 1e6);
    Header(&out, "sundial_checkpoint_last_snapshot_bytes", "gauge",
           "Size of the snapshot the last successful checkpoint wrote.");
    fmt::format_to(it, "sundial_checkpoint_last_snapshot_bytes {}\n", c.last.snapshot_bytes);
  }

  Header(&out, "sundial_lease_expirations_total", "counter", "Leases that ran out, per queue.");
  {
    MutexLock lock(&lease_mu_);
    for (const auto& [queue, n] : lease_expirations_) {
      fmt::format_to(it, "sundial_lease_expirations_total{{queue=\"{}\"}} {}\n", Escape(queue), n);
    }
  }

  Header(&out, "sundial_connections", "gauge", "Open client connections, by transport.");
  for (size_t t = 0; t < kTransports; ++t) {
    fmt::format_to(it, "sundial_connections{{transport=\"{}\"}} {}\n",
                   TransportName(static_cast<Transport>(t)),
                   connections_[t].load(std::memory_order_relaxed));
  }

  Header(&out, "sundial_memory_bytes", "gauge",
         "Memory the engine accounts for (messages, indexes).");
  fmt::format_to(it, "sundial_memory_bytes {}\n", engine.memory_bytes());
  Header(&out, "sundial_memory_budget_bytes", "gauge",
         "The engine's memory budget (--max-memory); 0: unlimited.");
  fmt::format_to(it, "sundial_memory_budget_bytes {}\n", engine.memory_budget_bytes());
  Header(&out, "sundial_memory_allocated_bytes", "gauge",
         "Bytes the engine's records and indexes hold (chunks, large payloads, tables).");
  fmt::format_to(it, "sundial_memory_allocated_bytes {}\n", engine.allocated_bytes());
  Header(&out, "process_resident_memory_bytes", "gauge", "Resident set size of the process.");
  fmt::format_to(it, "process_resident_memory_bytes {}\n", ResidentBytes());
  RenderClusterFigures(cluster, &out);
  return out;
}

uint64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace sundial::server
