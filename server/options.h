// sundiald's settings (docs/operations.md): every setting is a flag, a
// SUNDIAL_* environment variable and a key of an optional config file (TOML or INI, CLI11's
// format, given with --config). Flags win over the environment, the environment over the file.
// docs/operations.md lists every setting.
//
// Thread safety: ParseOptions is a pure function of its arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wal/checkpointer.h"
#include "wal/group_commit_log.h"

namespace sundial::server {

// --dashboard: what GET / serves (docs/dashboard.md). kReadOnly hides the page's actions and
// refuses mutations on the WebSocket connections of browser pages.
enum class DashboardMode : uint8_t { kOn, kReadOnly, kOff };

struct Options {
  std::string data_dir = "./data";
  std::string bind = "127.0.0.1";
  bool bind_given =
      false;  // --bind was set explicitly (docs/operations.md, "Security": loopback only otherwise)
  uint16_t port = 7400;
  uint16_t http_port = 7401;
  unsigned io_threads = 0;  // 0: one per core

  std::string fsync = "always";  // always | interval:MS | never
  wal::LogOptions log;           // parsed from `fsync`, plus segment_bytes
  bool wal_repair = false;
  wal::CheckpointOptions checkpoint;

  uint32_t max_frame_bytes = 16u << 20;
  uint32_t max_connections = 10'000;
  uint32_t max_inflight = 1'024;  // requests in flight per connection (reading pauses)
  // Per connection: reading pauses at half of it until replies are read; above it (replies of
  // requests already in flight, events) the connection is dropped.
  uint64_t max_output_bytes = 64ull << 20;
  // A write that takes no byte for this long: a client that does not read is dropped.
  uint32_t write_timeout_ms = 30'000;
  uint32_t handshake_timeout_ms = 10'000;
  uint32_t idle_timeout_ms = 300'000;
  // --max-memory: bytes (with an optional K, M, G or T suffix: powers of 1024) or a percent of
  // the machine's memory (or of the cgroup's limit when lower); "" or 0: unlimited. Parsed into
  // memory_budget_bytes, the engine's budget (--memory-budget-bytes sets it in bytes: the older
  // name, kept).
  std::string max_memory;
  uint64_t memory_budget_bytes = 0;  // 0: unlimited
  // --max-result-bytes: the largest result a complete may store (docs/semantics.md).
  size_t max_result_bytes = 64 << 10;
  size_t shards = 16;

  std::string auth_token_file;
  std::vector<std::string> allowed_origins;
  bool insecure_bind = false;
  DashboardMode dashboard = DashboardMode::kOn;
  // TLS on both ports (server/tls.h): both files or neither. SIGHUP reads them again.
  std::string tls_cert;
  std::string tls_key;

  // Written (atomically) once both ports listen: {"pid":N,"port":P,"http_port":H}. For tests
  // and supervisors that start sundiald on ephemeral ports (--port 0).
  std::string ready_file;

  // High availability (docs/replication.md; docs/operations.md, "High availability"). With
  // --cluster the node joins a cluster coordinated through etcd; without it, it stands alone.
  std::string cluster;
  std::string node_name;
  std::string etcd;                        // URL[,URL...]
  uint16_t replication_port = 7402;        // the primary's port standbys dial
  std::string advertise_host;              // what other nodes and clients dial; default --bind
  std::string replication = "sync";        // sync (strict) | async
  int64_t leader_ttl_s = 5;                // the etcd lease of a node (and its leadership)
  int64_t ha_loop_ms = 250;                // the control loop's period
  int64_t replication_timeout_ms = 5'000;  // a silent replication connection is closed
  // A durable mutation that no synchronous standby acknowledged within this time is answered
  // UNAVAILABLE (its outcome unknown).
  int64_t sync_timeout_ms = 10'000;
  // Segments a connected standby still needs are kept up to this many bytes; past it, a
  // standby that falls that far behind is re-seeded from a snapshot.
  uint64_t replication_retain_bytes = 1ull << 30;
  // Whole addresses (host:port) to advertise instead of --advertise-host with the bound port:
  // what clients dial (the binary TCP port) and what standbys dial (the replication port), for
  // a node behind a proxy or a port mapping. Empty: --advertise-host (or --bind) and the port.
  std::string advertise_addr;
  std::string advertise_replication;
  // Verifies the primary's certificate when the replication port speaks TLS (--tls-cert); empty:
  // the system's CAs.
  std::string tls_ca_file;
};

struct ParseResult {
  Options options;
  int exit_code = -1;   // >= 0: stop with this code (after --help: 0; a usage error: 2)
  std::string message;  // help text or the usage error
};

// Parses flags, then SUNDIAL_<FLAG_NAME> variables from `getenv` for flags not given, then the
// --config file for what is still unset.
ParseResult ParseOptions(int argc, const char* const* argv);

// A --max-memory value in bytes: "1073741824", "512M", "4G", "4GiB", "4GB" (powers of 1024),
// "75%" of `total_bytes`. nullopt when malformed or out of range.
std::optional<uint64_t> ParseMemorySize(std::string_view text, uint64_t total_bytes);
// Loopback addresses: 127.0.0.0/8, ::1, "localhost". Beyond them, ParseOptions refuses to listen
// without --auth-token-file (or --insecure-bind).
bool IsLoopback(const std::string& address);
// The machine's physical memory, or the memory limit of the process's cgroup when lower.
uint64_t TotalMemoryBytes();

}  // namespace sundial::server
