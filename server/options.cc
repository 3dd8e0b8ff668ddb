#include "server/options.h"

#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <map>

namespace sundial::server {
namespace {

// SUNDIAL_ + the long flag name in upper case with '-' as '_': --http-port -> SUNDIAL_HTTP_PORT.
std::string EnvName(const std::string& flag) {
  std::string out = "SUNDIAL_";
  for (char c : flag) out += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return out;
}

bool GivenOnCommandLine(const std::vector<std::string>& args, const std::string& flag) {
  const std::string dashed = "--" + flag;
  return std::any_of(args.begin(), args.end(), [&](const std::string& a) {
    return a == dashed || a.rfind(dashed + "=", 0) == 0;
  });
}

}  // namespace

std::optional<uint64_t> ParseMemorySize(std::string_view text, uint64_t total_bytes) {
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  std::string unit(end, text.data() + text.size());
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit == "%") {
    if (n > 100) return std::nullopt;
    return static_cast<uint64_t>(static_cast<unsigned __int128>(total_bytes) * n / 100);
  }
  int shift = -1;
  for (const auto& [name, bits] : {std::pair<const char*, int>{"", 0},
                                   {"B", 0},
                                   {"K", 10},
                                   {"KB", 10},
                                   {"KIB", 10},
                                   {"M", 20},
                                   {"MB", 20},
                                   {"MIB", 20},
                                   {"G", 30},
                                   {"GB", 30},
                                   {"GIB", 30},
                                   {"T", 40},
                                   {"TB", 40},
                                   {"TIB", 40}}) {
    if (unit == name) shift = bits;
  }
  if (shift < 0 || (shift > 0 && n > (UINT64_MAX >> shift))) return std::nullopt;
  return n << shift;
}

bool IsLoopback(const std::string& address) {
  if (address == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, address.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

uint64_t TotalMemoryBytes() {
  uint64_t total =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // cgroup v2 (a container's limit): "max" or a number of bytes.
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");
  std::string limit;
  if (cgroup >> limit) {
    uint64_t bytes = 0;
    auto [end, ec] = std::from_chars(limit.data(), limit.data() + limit.size(), bytes);
    if (ec == std::errc() && end == limit.data() + limit.size() && bytes > 0) {
      total = std::min(total, bytes);
    }
  }
  return total;
}

ParseResult ParseOptions(int argc, const char* const* argv) {
  ParseResult result;
  Options& o = result.options;
  CLI::App app{"sundiald: the Sundial priority queue server", "sundiald"};
  app.set_config("--config", "", "TOML/INI file with any of these settings (flags win)");

  app.add_option("--data-dir", o.data_dir, "directory of the WAL and snapshots")
      ->capture_default_str();
  app.add_option("--bind", o.bind, "address to listen on (beyond loopback needs a token)")
      ->capture_default_str();
  app.add_option("--port", o.port, "binary TCP port")->capture_default_str();
  app.add_option("--http-port", o.http_port, "HTTP / WebSocket port")->capture_default_str();
  app.add_option("--io-threads", o.io_threads, "I/O threads (0: one per core)")
      ->capture_default_str();
  app.add_option("--fsync", o.fsync, "always | interval:MS | never")->capture_default_str();
  app.add_option("--segment-bytes", o.log.segment_bytes, "rotate WAL segments past this size")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1} << 16, uint64_t{1} << 34));
  app.add_flag("--wal-repair", o.wal_repair,
               "start even on a damaged log: cut it at the first bad record");
  app.add_option("--checkpoint-bytes", o.checkpoint.min_log_bytes,
                 "checkpoint once segments hold this many bytes...")
      ->capture_default_str();
  app.add_option("--checkpoint-growth", o.checkpoint.growth_percent,
                 "...and this percent of the last snapshot")
      ->capture_default_str();
  app.add_option("--checkpoint-mode", o.checkpoint.mode,
                 "fork: a child writes the live state | replay: rebuild it from the log")
      ->transform(
          CLI::CheckedTransformer(
              std::map<std::string, wal::CheckpointMode>{{"fork", wal::CheckpointMode::kFork},
                                                         {"replay", wal::CheckpointMode::kReplay}},
              CLI::ignore_case)
              .description("{fork,replay}"))
      ->default_str("replay");
  app.add_option("--checkpoint-segments", o.checkpoint.max_segments,
                 "or once there are this many segments")
      ->capture_default_str()
      ->check(CLI::Range(2u, 1u << 20));
  app.add_option("--max-frame-bytes", o.max_frame_bytes, "largest request frame")
      ->capture_default_str()
      ->check(CLI::Range(1u << 10, 1u << 30));
  app.add_option("--max-connections", o.max_connections)->capture_default_str();
  app.add_option("--max-inflight", o.max_inflight, "requests in flight per connection")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--max-output-bytes", o.max_output_bytes,
                 "unsent reply bytes per connection: reading pauses at half, dropped above")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{64} << 10, uint64_t{1} << 40));
  app.add_option("--write-timeout-ms", o.write_timeout_ms,
                 "drop a connection whose unread replies make no progress for this long")
      ->capture_default_str()
      ->check(CLI::Range(1u, 86'400'000u));
  app.add_option("--handshake-timeout-ms", o.handshake_timeout_ms)->capture_default_str();
  app.add_option("--idle-timeout-ms", o.idle_timeout_ms)->capture_default_str();
  app.add_option("--max-memory", o.max_memory,
                 "engine memory budget: bytes (K/M/G/T suffix) or N% of RAM; above it enqueue "
                 "gets RESOURCE_EXHAUSTED");
  app.add_option("--memory-budget-bytes", o.memory_budget_bytes,
                 "the budget in bytes (older name of --max-memory); 0: unlimited")
      ->capture_default_str();
  app.add_option("--max-result-bytes", o.max_result_bytes,
                 "largest result a complete may store with its message")
      ->capture_default_str()
      ->check(CLI::Range(size_t{0}, size_t{16} << 20));
  app.add_option("--shards", o.shards, "engine lock shards")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1024}));
  app.add_option("--auth-token-file", o.auth_token_file, "file holding the shared token");
  app.add_option("--allowed-origins", o.allowed_origins, "WebSocket Origin values accepted")
      ->delimiter(',');
  app.add_flag("--insecure-bind", o.insecure_bind, "allow --bind beyond loopback without a token");
  app.add_option("--dashboard", o.dashboard,
                 "on | read-only (no actions) | off (GET / serves no page)")
      ->transform(CLI::CheckedTransformer(
                      std::map<std::string, DashboardMode>{{"on", DashboardMode::kOn},
                                                           {"read-only", DashboardMode::kReadOnly},
                                                           {"off", DashboardMode::kOff}},
                      CLI::ignore_case)
                      // The enum's values are bytes: printed as characters they cut --help short.
                      .description("{on,read-only,off}"))
      ->default_str("on");
  app.add_option("--tls-cert", o.tls_cert,
                 "PEM certificate chain: TLS on both ports (with --tls-key; SIGHUP reloads)");
  app.add_option("--tls-key", o.tls_key, "PEM private key of --tls-cert");
  app.add_option("--ready-file", o.ready_file,
                 "write {\"pid\",\"port\",\"http_port\"} JSON here once listening");
  // High availability (docs/operations.md, "High availability").
  app.add_option("--cluster", o.cluster, "join this cluster (with --node-name and --etcd)");
  app.add_option("--node-name", o.node_name, "this node's name in its cluster");
  app.add_option("--etcd", o.etcd, "etcd endpoints: URL[,URL...] (http://host:port)");
  app.add_option("--replication-port", o.replication_port,
                 "port standbys dial on a primary (0: ephemeral)");
  app.add_option("--advertise-host", o.advertise_host,
                 "host other nodes and clients dial (default: --bind)");
  app.add_option("--advertise-addr", o.advertise_addr,
                 "host:port clients dial for this node's binary TCP port (default: "
                 "--advertise-host and --port)");
  app.add_option("--advertise-replication", o.advertise_replication,
                 "host:port standbys dial for this node's replication port (default: "
                 "--advertise-host and --replication-port)");
  app.add_option("--replication", o.replication,
                 "sync (a durable reply needs the synchronous standby) or async")
      ->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--leader-ttl-s", o.leader_ttl_s,
                 "etcd lease of a node and its leadership (seconds)")
      ->check(CLI::Range(1, 300));
  app.add_option("--ha-loop-ms", o.ha_loop_ms, "the HA control loop's period")
      ->check(CLI::Range(10, 10'000));
  app.add_option("--replication-timeout-ms", o.replication_timeout_ms,
                 "a replication connection silent this long is closed")
      ->check(CLI::Range(100, 600'000));
  app.add_option("--sync-timeout-ms", o.sync_timeout_ms,
                 "a durable mutation no synchronous standby acknowledged in time: UNAVAILABLE")
      ->check(CLI::Range(100, 3'600'000));
  app.add_option("--replication-retain-bytes", o.replication_retain_bytes,
                 "segments kept for a connected standby, at most");
  app.add_option("--tls-ca-file", o.tls_ca_file,
                 "CA certificates a standby verifies its primary's certificate with");

  // Environment variables for the flags not given on the command line: inserted as flags
  // before the command line's, so the config file (applied to what is still unset) comes last.
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> from_env;
  for (const CLI::Option* opt : app.get_options()) {
    const std::string name = opt->get_single_name();
    if (name.empty() || name == "help" || name == "config") continue;
    const char* value = std::getenv(EnvName(name).c_str());
    if (value == nullptr || GivenOnCommandLine(args, name)) continue;
    from_env.push_back("--" + name + "=" + value);
  }
  // CLI11 takes a reversed argument vector.
  std::vector<std::string> all = from_env;
  all.insert(all.end(), args.begin(), args.end());
  std::reverse(all.begin(), all.end());
  try {
    app.parse(all);
  } catch (const CLI::ParseError& e) {
    result.exit_code = e.get_exit_code() == 0 ? 0 : 2;
    result.message = e.get_exit_code() == 0 ? app.help() : std::string(e.what());
    return result;
  }
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    result.exit_code = 2;
    result.message = o.tls_cert.empty() ? "--tls-key needs --tls-cert (give both, or neither)"
                                        : "--tls-cert needs --tls-key (give both, or neither)";
    return result;
  }
  o.bind_given = app.count("--bind") > 0 || GivenOnCommandLine(args, "bind");
  if (!o.cluster.empty() || !o.node_name.empty() || !o.etcd.empty()) {
    const auto name_ok = [](const std::string& s) {
      return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '.' || c == '_' || c == '-';
      });
    };
    std::string problem;
    if (o.cluster.empty() || o.node_name.empty() || o.etcd.empty()) {
      problem = "--cluster, --node-name and --etcd go together (give all three, or none)";
    } else if (!name_ok(o.cluster)) {
      problem = "--cluster " + o.cluster + ": 1-64 characters of [A-Za-z0-9._-]";
    } else if (!name_ok(o.node_name)) {
      problem = "--node-name " + o.node_name + ": 1-64 characters of [A-Za-z0-9._-]";
    }
    if (!problem.empty()) {
      result.exit_code = 2;
      result.message = problem;
      return result;
    }
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string*>{"--advertise-addr", &o.advertise_addr},
        {"--advertise-replication", &o.advertise_replication}}) {
    // host:port, with a port in 1..65535 (a name or an address before it, [v6] in brackets).
    const size_t colon = value->rfind(':');
    unsigned port = 0;
    bool port_ok = false;
    if (colon != std::string::npos && colon > 0) {
      const char* first = value->data() + colon + 1;
      const char* last = value->data() + value->size();
      const auto [end, ec] = std::from_chars(first, last, port);
      port_ok = ec == std::errc() && end == last && port >= 1 && port <= 65535;
    }
    if (!value->empty() && !port_ok) {
      result.exit_code = 2;
      result.message = std::string(flag) + " " + *value + ": host:port (a port in 1-65535)";
      return result;
    }
  }
  // Decided here, before recovery (which can take minutes) and before anything touches the
  // data directory: docs/operations.md, "Security".
  if (!IsLoopback(o.bind) && o.auth_token_file.empty() && !o.insecure_bind) {
    result.exit_code = 2;
    result.message = "--bind " + o.bind +
                     ": listening beyond loopback needs --auth-token-file (or --insecure-bind)";
    return result;
  }
  auto policy = wal::ParseFsyncPolicy(o.fsync, o.log);
  if (!policy.ok()) {
    result.exit_code = 2;
    result.message = "--fsync: " + std::string(policy.status().detail());
    return result;
  }
  o.log = *policy;
  if (!o.max_memory.empty()) {
    if (app.count("--memory-budget-bytes") > 0) {
      result.exit_code = 2;
      result.message = "--max-memory and --memory-budget-bytes: give one of them";
      return result;
    }
    auto bytes = ParseMemorySize(o.max_memory, TotalMemoryBytes());
    if (!bytes) {
      result.exit_code = 2;
      result.message = "--max-memory " + o.max_memory +
                       ": give bytes (optionally with K, M, G or T) or a percent such as 75%";
      return result;
    }
    o.memory_budget_bytes = *bytes;
  }
  return result;
}

}  // namespace sundial::server
