// sundiald's server: the binary TCP listener, the HTTP/WebSocket listener, the request core
// (dispatch, WAL waits, long polls, subscriptions, metrics), the engine's ticker, and the drain
// on SIGTERM/SIGINT. Asio lives in server/*.cc only; this header is free of it.
//
// Start-up order (server/main.cc): recover and open the WAL, build a Server on the engine and
// the log, point the engine's TeeSink at server.effect_observer(), Start(), Run().
//
// Thread safety: Start and Run from one thread; RequestStop from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/effect.h"
#include "engine/engine.h"
#include "engine/status.h"
#include "replication/reload.h"
#include "server/metrics.h"
#include "server/options.h"
#include "wal/group_commit_log.h"

namespace sundial::server {

// The engine's sink in the server: every effect goes to `first` (the WAL), then to an observer
// set once the server exists (long-poll wakeups, subscriptions, metrics).
class TeeSink final : public EffectSink {
 public:
  explicit TeeSink(EffectSink* first) : first_(first) {}
  void set_observer(EffectSink* observer) { observer_.store(observer, std::memory_order_release); }
  void OnEffect(const Effect& effect) override {
    first_->OnEffect(effect);
    if (EffectSink* o = observer_.load(std::memory_order_acquire)) o->OnEffect(effect);
  }

 private:
  EffectSink* const first_;
  std::atomic<EffectSink*> observer_{nullptr};
};

class Server {
 public:
  // `log` may be null (no durability waits). All must outlive the server. `metrics` is the
  // caller's so that the WAL's fsync hook (LogOptions::on_sync) can feed it before the server
  // exists.
  Server(Options options, Engine* engine, wal::GroupCommitLog* log, Metrics* metrics);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // What the engine's TeeSink forwards effects to.
  EffectSink* effect_observer();

  // A node of a cluster (--cluster; docs/replication.md): what it needs beyond the engine and
  // the log — its file system (the replication port reads segments and snapshots), the engine's
  // clock (a standby raises its floor), and what to do when its state must be reloaded from its
  // data directory (main.cc stops, prepares the directory, and re-executes the process).
  // Before Start.
  void EnableCluster(wal::FileSystem* fs, FloorClock* clock,
                     std::function<void(replication::ReloadRequest)> reload);

  // Reads the token file, binds the listeners (port 0: an ephemeral port), starts the io
  // threads and the ticker, and in a cluster the HA coordinator. On failure the Status says
  // why (INVALID_ARGUMENT: a setting; and nothing keeps running).
  Status Start();
  uint16_t port() const;
  uint16_t http_port() const;
  uint16_t replication_port() const;  // 0 outside a cluster
  // The first LSN a connected standby still needs (UINT64_MAX: none): checkpoints keep it.
  uint64_t RetainFrom() const;

  // Blocks until SIGTERM/SIGINT or RequestStop, then drains: stops accepting, answers waiting
  // long polls, lets every request in flight finish and its reply be written (up to
  // `drain_timeout_ms`), closes connections, stops the io threads. The caller then closes the
  // WAL (flush + sync).
  void Run(int drain_timeout_ms = 30'000);
  void RequestStop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sundial::server
