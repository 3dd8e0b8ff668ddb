// StandbyLink: a standby's connection to its primary's replication port (docs/replication.md,
// "Streaming"), on a thread of its own: dial, say Hello, then take what the primary sends
// (replication/standby_stream.h says what each frame does), and acknowledge once what was
// appended is fsynced here. Frames that arrive together are appended together and acknowledged
// with one fsync. On any failure (refused, cut, silent past the timeout, a broken rule) it
// closes and dials again after a short backoff, from what its log holds.
//
// What it cannot do in place it hands to the node: a truncation or a snapshot to install means
// the node's state is reloaded from its data directory (the node restarts its process). From
// then on the link is done: it dials no primary again, whatever Follow says.
//
// Thread safety: Follow and Stop from one thread (the coordinator's); the getters from any.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "engine/mutex.h"
#include "replication/coordinator.h"
#include "replication/reload.h"
#include "replication/standby_stream.h"

namespace sundial::server {

struct StandbyLinkOptions {
  std::chrono::milliseconds timeout{5000};  // --replication-timeout-ms: silence ends a connection
  std::chrono::milliseconds backoff{100};   // before dialing again (doubling to 2 s)
  bool tls = false;                         // the primary's port speaks TLS
  std::string ca_file;                      // verifies its certificate (empty: the system's CAs)
};

class StandbyLink {
 public:
  // `reload`: what the node must do when its state must be reloaded from its data directory (a
  // truncation, a snapshot to install, a reseed): replication/reload.h.
  StandbyLink(replication::StandbyEnv env, StandbyLinkOptions options,
              std::function<void(replication::ReloadRequest)> reload);
  ~StandbyLink();  // Stop()

  // Follows `leader` from now on (a new leader: the connection to the old one is closed first).
  void Follow(const replication::LeaderInfo& leader);
  // Closes the connection and joins the thread: once it returns, nothing more is acknowledged
  // to any primary.
  void Stop();

  bool connected() const { return connected_.load(std::memory_order_acquire); }
  // The primary's durable end as it last said, and when this standby last acknowledged.
  uint64_t primary_durable_end() const { return primary_durable_end_.load(); }
  uint64_t primary_end() const { return primary_end_.load(); }
  std::chrono::steady_clock::time_point last_ack() const;

 private:
  void Run(replication::LeaderInfo leader);
  // One connection: until it fails or Stop.
  void Session(const replication::LeaderInfo& leader);
  // Hands a reload to the node; the link then stops taking anything from any primary for good
  // (the node restarts its process to reload).
  void Reload(replication::ReloadRequest request);
  // Logs why a connection ended, unless it is the same reason as the last one.
  void Report(const replication::LeaderInfo& leader, const std::string& why);

  replication::StandbyEnv env_;
  const StandbyLinkOptions options_;
  std::function<void(replication::ReloadRequest)> restart_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> reloading_{false};  // a reload was handed to the node: never dial again
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> primary_durable_end_{0};
  std::atomic<uint64_t> primary_end_{0};
  std::string last_report_;  // the link's thread only
  mutable Mutex mu_;
  CondVar cv_;
  std::chrono::steady_clock::time_point last_ack_ GUARDED_BY(mu_);
  // The connection's socket, closed by Stop from another thread to end a blocked read.
  struct Channel;
  std::shared_ptr<Channel> channel_ GUARDED_BY(mu_);
};

}  // namespace sundial::server
