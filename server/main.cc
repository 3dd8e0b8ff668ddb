// sundiald: recover the data directory, open the WAL, start the checkpointer and the server,
// serve until SIGTERM/SIGINT, drain, flush the WAL, exit 0. docs/operations.md.
#include <fcntl.h>
#include <malloc.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/mutex.h"
#include "replication/reload.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/server.h"
#include "server/tls.h"
#include "wal/checkpointer.h"
#include "wal/file.h"
#include "wal/recovery.h"

namespace {

using namespace sundial;  // NOLINT(google-build-using-namespace): a main file

// One sundiald per data directory: an exclusive flock on DIR/LOCK for the process's life.
bool LockDataDir(const std::string& dir) {
  const std::string path = dir + "/LOCK";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "sundiald: cannot open %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    std::fprintf(stderr, "sundiald: %s is in use by another sundiald (%s)\n", dir.c_str(),
                 path.c_str());
    ::close(fd);
    return false;
  }
  return true;  // the descriptor stays open (and locked) until the process exits
}

// `arg` as one shell word: as is when it is plain, else in single quotes.
std::string ShellWord(const std::string& arg) {
  const bool plain = !arg.empty() && arg.find_first_not_of(
                                         "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                         "0123456789_-./:=,@%+") == std::string::npos;
  if (plain) return arg;
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// This process's own command line with --wal-repair added: the executable and the data
// directory as absolute paths, so the operator can paste it from anywhere.
std::string RepairCommand(int argc, char** argv, const std::string& data_dir) {
  std::error_code ec;
  std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec || exe.empty()) exe = argv[0];
  const std::string abs_dir = std::filesystem::absolute(data_dir, ec).lexically_normal().string();
  std::string cmd = ShellWord(exe);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--wal-repair") continue;
    if (arg.starts_with("--data-dir=")) arg = "--data-dir=" + abs_dir;
    const bool dir_value = i > 1 && std::string_view(argv[i - 1]) == "--data-dir";
    cmd += " " + ShellWord(dir_value && !ec ? abs_dir : arg);
  }
  return cmd + " --wal-repair";
}

// What to do about a start refused by an I/O error, by errno.
const char* AdviceFor(int error) {
  switch (error) {
    case EROFS:
      return "the file system is read-only: find out why it was remounted (dmesg), fix it, "
             "remount it read-write and start again";
    case ENOSPC:
    case EDQUOT:
      return "the disk is full: free space (or grow the volume) and start again; recovery needs "
             "room for a new segment";
    case EIO:
      return "the disk reported an I/O error: check the device (dmesg, smartctl); if it "
             "persists, move the data directory to a healthy disk or restore a backup";
    case EACCES:
    case EPERM:
      return "permission denied: give the server's user access to the data directory";
    default:
      return nullptr;
  }
}

// A start refused by damage in the log: what was found, where, what a repair would drop, and
// the commands to inspect and to repair.
void PrintDamageAdvice(const wal::RecoveryReport& report, const std::string& data_dir, int argc,
                       char** argv) {
  const wal::Corruption& damage = *report.damage;
  std::fprintf(stderr, "sundiald: cannot start: damage in the write-ahead log in %s: %s\n",
               data_dir.c_str(), wal::ToString(damage).c_str());
  std::string dropped = std::to_string(report.dropped_bytes) + " bytes";
  for (const std::string& f : report.dropped_files) dropped += ", " + f;
  std::fprintf(stderr,
               "sundiald: nothing was changed. Everything before offset %llu of %s is intact; a "
               "repair cuts the log there and drops what follows (%s), which may include "
               "acknowledged writes\n",
               static_cast<unsigned long long>(damage.offset), damage.file.c_str(),
               dropped.c_str());
  std::fprintf(stderr, "sundiald: to inspect (changes nothing): sundial-wal verify %s\n",
               ShellWord(data_dir).c_str());
  std::fprintf(stderr,
               "sundiald: to repair (copy the directory first to keep the damaged part): %s\n",
               RepairCommand(argc, argv, data_dir).c_str());
}

bool WriteReadyFile(const std::string& path, uint16_t port, uint16_t http_port,
                    uint16_t replication_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "{\"pid\":" << ::getpid() << ",\"port\":" << port << ",\"http_port\":" << http_port
        << ",\"replication_port\":" << replication_port << "}\n";
    if (!out) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return !ec;
}

int Run(int argc, char** argv) {
  server::ParseResult parsed = server::ParseOptions(argc, argv);
  if (parsed.exit_code >= 0) {
    std::fputs(parsed.message.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    std::fputc('\n', parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  server::Options options = parsed.options;

  if (!options.tls_cert.empty()) {
    // Before recovery, which can take minutes on a large log: a wrong file fails at once.
    server::TlsContexts probe(options.tls_cert, options.tls_key);
    if (Status s = probe.Reload(); !s.ok()) {
      std::fprintf(stderr, "sundiald: cannot start: %s\n", std::string(s.detail()).c_str());
      return 2;
    }
  }

  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) {
    std::fprintf(stderr, "sundiald: --data-dir %s: %s\n", options.data_dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  if (!LockDataDir(options.data_dir)) return 1;

  server::Metrics metrics;
  options.log.on_sync = [&metrics](uint64_t nanos) { metrics.Fsync(nanos); };

  auto fs = wal::NewPosixFileSystem();
  // A standby raises the floor to each effect it applies: once it leads, its engine's time never
  // goes back behind what it holds (docs/replication.md, "Time").
  SystemClock system_clock;
  FloorClock clock(&system_clock);
  wal::DeferredSink deferred;
  server::TeeSink tee(&deferred);
  auto make_engine = [&] {
    Engine::Options eo;
    eo.shards = options.shards;
    eo.memory_budget_bytes = options.memory_budget_bytes;
    eo.max_result_bytes = options.max_result_bytes;
    return std::make_unique<Engine>(eo, &clock, &tee);
  };
  wal::RecoveryOptions recovery;
  recovery.repair = options.wal_repair;
  wal::OpenedLog opened;
  Status s = wal::RecoverAndOpenLog(fs.get(), options.data_dir, make_engine, recovery, options.log,
                                    &deferred, &opened);
  if (!s.ok()) {  // the lines below say what was found; "recovered ..." would mislead
    if (opened.report.damage && !opened.report.repaired) {
      PrintDamageAdvice(opened.report, options.data_dir, argc, argv);
    } else {
      std::fprintf(stderr, "sundiald: cannot start: recovery of %s failed: %s\n",
                   options.data_dir.c_str(), s.ToString().c_str());
      if (const char* advice = AdviceFor(s.sys_errno())) {
        std::fprintf(stderr, "sundiald: %s\n", advice);
      }
    }
    return 1;
  }
  std::fprintf(stderr, "sundiald: recovery of %s: %s\n", options.data_dir.c_str(),
               opened.report.Summary().c_str());
  // Engine time never goes back behind an effect the log holds, across a restart too.
  clock.RaiseFloor(opened.report.latest_effect_time);

  wal::Checkpointer checkpointer(fs.get(), options.data_dir, opened.log.get(), options.checkpoint,
                                 opened.engine.get());
  metrics.SetCheckpointStats([&checkpointer] { return checkpointer.stats(); });
  checkpointer.Start();

  int code = 0;
  // A standby whose state must be reloaded from its data directory (a divergent tail, a snapshot
  // from its primary): the server stops, the directory is prepared, the process starts again.
  Mutex reload_mu;
  std::optional<replication::ReloadRequest> reload;  // under reload_mu (a local: not annotated)
  {
    server::Server server(options, opened.engine.get(), opened.log.get(), &metrics);
    tee.set_observer(server.effect_observer());
    if (!options.cluster.empty()) {
      server.EnableCluster(fs.get(), &clock, [&](replication::ReloadRequest r) {
        {
          MutexLock lock(&reload_mu);
          if (!reload) reload = std::move(r);
        }
        server.RequestStop();
      });
      checkpointer.SetRetention([&server] { return server.RetainFrom(); },
                                options.replication_retain_bytes);
    }
    if (Status started = server.Start(); !started.ok()) {
      std::fprintf(stderr, "sundiald: %s\n", started.Message().c_str());
      checkpointer.Stop();
      tee.set_observer(nullptr);
      (void)opened.log->Close();
      return started.code() == Code::kInvalidArgument ? 2 : 1;
    }
    std::fprintf(stderr, "sundiald: listening on %s: tcp %u, http %u; data %s; fsync %s\n",
                 options.bind.c_str(), server.port(), server.http_port(), options.data_dir.c_str(),
                 options.fsync.c_str());
    if (!options.cluster.empty()) {
      std::fprintf(stderr, "sundiald: cluster %s, node %s: replication port %u; etcd %s; %s\n",
                   options.cluster.c_str(), options.node_name.c_str(), server.replication_port(),
                   options.etcd.c_str(), options.replication.c_str());
    }
    if (!options.ready_file.empty() &&
        !WriteReadyFile(options.ready_file, server.port(), server.http_port(),
                        server.replication_port())) {
      std::fprintf(stderr, "sundiald: cannot write --ready-file %s\n", options.ready_file.c_str());
    }
    server.Run();
    tee.set_observer(nullptr);
  }
  checkpointer.Stop();
  if (Status closed = opened.log->Close(); !closed.ok()) {
    std::fprintf(stderr, "sundiald: the WAL did not close cleanly: %s\n",
                 closed.ToString().c_str());
    code = 1;
  }
  std::optional<replication::ReloadRequest> request;
  {
    MutexLock lock(&reload_mu);
    request = reload;
  }
  if (request && code == 0) {
    // Nothing runs any more: the log is closed, the lock still held (released by exec).
    if (Status prepared = replication::PrepareReload(fs.get(), options.data_dir, *request);
        !prepared.ok()) {
      std::fprintf(stderr, "sundiald: cannot reload %s: %s\n", options.data_dir.c_str(),
                   prepared.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "sundiald: restarting to reload %s (%s)\n", options.data_dir.c_str(),
                 request->why.c_str());
    std::fflush(stderr);
    ::execv("/proc/self/exe", argv);
    std::fprintf(stderr, "sundiald: cannot restart: %s\n", std::strerror(errno));
    return 1;
  }
  std::fprintf(stderr, "sundiald: stopped\n");
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // A fixed mmap threshold: glibc otherwise raises it after the first large free and then keeps
  // freed blocks of up to 32 MiB in its per-thread arenas, so RSS stays up after a queue drains
  // (docs/engine.md, "Memory from the kernel"; docs/BENCHMARKS.md, "Scale").
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  return Run(argc, argv);
}
