// ReplicaNode: a sundiald in a cluster (docs/replication.md): what the HA coordinator
// (replication/coordinator.h) asks of the server, and what the replication port's sessions need.
// It owns the coordinator, the standby link (following the primary), the primary's hub (its
// standbys and the durability bound) and the node's promise; it moves the node's role
// (server/node_role.h) as the coordinator decides.
//
// Roles: starting (no primary known: writes refused), standby (following; writes refused with
// NOT_PRIMARY naming the primary; timers stopped: a standby's state changes only by its
// primary's records), primary (writes until the leadership's deadline; timers running).
// Promotion: stop following, promise the epoch (fsync), log its first record (kEpochStarted)
// durably, then take writes. Demotion: refuse writes at once, fail the replies still waiting
// for a standby (their outcome is unknown), then follow whoever leads.
//
// Thread safety: the ClusterNode methods run on the coordinator's thread; the ReplicationPort
// methods on io loops; the rest from the server's owner thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/mutex.h"
#include "replication/coordinator.h"
#include "replication/node_state.h"
#include "replication/primary_stream.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/replication_hub.h"
#include "server/replication_port.h"
#include "server/standby_link.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"

namespace sundial::server {

class Core;

class ReplicaNode final : public replication::ClusterNode, public ReplicationPort {
 public:
  // What the process must do to reload its state (main.cc does it after the server stopped and
  // the log closed, then re-executes itself).
  using RestartRequest = std::function<void(replication::ReloadRequest)>;

  ReplicaNode(const Options& options, Core* core, Engine* engine, wal::GroupCommitLog* log,
              wal::FileSystem* fs, FloorClock* clock, RestartRequest restart);
  ~ReplicaNode() override;

  // Loads the node's promise from its data directory and starts the coordinator. `addresses`:
  // what other nodes and clients dial (the bound ports, with --advertise-host).
  Status Start(replication::NodeAddresses addresses);
  // Stops the coordinator (a primary gives up its lease: a standby takes over at once) and the
  // link, and takes its observer off the log (which outlives it).
  void Stop();

  // ClusterNode (the coordinator's thread).
  uint64_t EndLsn() const override;
  uint64_t FlushedLsn() const override;
  void Follow(const replication::LeaderInfo& leader) override;
  void StopFollowing() override;
  Status Promote(uint64_t epoch, std::chrono::steady_clock::time_point writable_until) override;
  void ExtendLeadership(std::chrono::steady_clock::time_point writable_until) override;
  void Demote(const std::string& why) override;
  std::vector<replication::StandbyProgress> Standbys() const override;
  uint64_t RequireAcks(const std::vector<std::string>& standbys) override;
  void Publish(const replication::CoordinatorView& view) override;

  // ReplicationPort (io loops).
  std::optional<replication::PrimaryEnv> StreamEnv() override;
  ReplicationHub* hub() override { return &hub_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  // /metrics (a loop, at each scrape): the role's figures `figures` already has, completed with
  // the cluster's: etcd, the standbys (a primary), the link (a standby).
  void Figures(ClusterFigures* figures) const;

  // The checkpointer keeps segments from here on (a connected standby still needs them).
  uint64_t RetainFrom() const { return hub_.RetainFrom(); }

  replication::Coordinator* coordinator() { return coordinator_.get(); }

 private:
  // Every loop answers the replies still waiting for a standby with UNAVAILABLE (their outcome
  // is unknown); returns once each loop has.
  void FailWaitingReplies(const std::string& why);

  const Options& options_;
  Core* const core_;
  Engine* const engine_;
  wal::GroupCommitLog* const log_;
  wal::FileSystem* const fs_;
  FloorClock* const clock_;
  RestartRequest restart_;
  const std::chrono::milliseconds timeout_;
  replication::NodeState state_;
  ReplicationHub hub_;
  std::unique_ptr<StandbyLink> link_;
  std::unique_ptr<replication::Coordinator> coordinator_;
  std::atomic<bool> primary_{false};
  std::atomic<uint64_t> epoch_{0};
  mutable Mutex mu_;
  std::optional<replication::LeaderInfo> leader_ GUARDED_BY(mu_);  // whom this node follows
  std::atomic<bool> restarting_{false};
  std::atomic<bool> etcd_reachable_{false};
  std::atomic<uint64_t> promotions_{0};
  std::atomic<uint64_t> demotions_{0};
  std::string sync_standby_ GUARDED_BY(mu_);  // the published one, as the coordinator last read
  replication::NodeAddresses addresses_;      // set by Start
  // Publish (the coordinator's thread only): every member seen in etcd, as last seen and when,
  // so that one whose key expired stays listed (as `unknown`) rather than vanishing.
  struct SeenMember {
    MemberInfo info;
    std::chrono::steady_clock::time_point at;
  };
  std::map<std::string, SeenMember> last_seen_;
};

}  // namespace sundial::server
