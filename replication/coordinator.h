// Coordinator: the high-availability control loop of one node (docs/replication.md,
// "Leadership, epochs and fencing"). One thread keeps the node's etcd lease alive, keeps its member
// key current, follows the leader or takes the leadership when the rules allow
// (replication/election.h), publishes the synchronous standby, and tells the node what to be
// through ClusterNode.
//
// Timing (Patroni's rule: loop + 2 × call timeout ≤ TTL): every `loop_interval` (it polls: no
// etcd watch wakes it sooner yet) it renews the lease once; a primary is writable
// until the renewal's send time + TTL − margin (ClusterNode::ExtendLeadership), so an isolated
// primary stops taking writes before its lease can expire in etcd and a standby take over.
// Safety does not rest on that timing: a promoted standby stops acknowledging the old primary
// before it takes the leader key (ClusterNode::StopFollowing), and the old primary can
// acknowledge nothing durable without it.
//
// Thread safety: Start/Stop from one thread; RequestSwitchover and view() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/mutex.h"
#include "engine/status.h"
#include "replication/election.h"
#include "replication/etcd_client.h"

namespace sundial::replication {

using SteadyClock = std::chrono::steady_clock;

// Where a node is reached.
struct NodeAddresses {
  std::string addr;              // binary TCP (host:port), what clients dial
  std::string http_addr;         // HTTP (host:port)
  std::string replication_addr;  // the replication port (host:port), what standbys dial
};

// The leader as a standby follows it.
struct LeaderInfo {
  std::string node;
  uint64_t epoch = 0;
  NodeAddresses addresses;
};

// A standby connected to this primary (ClusterNode::Standbys).
struct StandbyProgress {
  std::string node;
  uint64_t acked_end = 0;  // one past the last record it acknowledged in this epoch
  bool connected = false;
  SteadyClock::time_point last_ack;
};

// One member as its key says.
struct MemberView {
  std::string node;
  std::string role;  // "primary", "standby", "unknown"
  NodeAddresses addresses;
  uint64_t epoch = 0;
  uint64_t end_lsn = 0;
  uint64_t flushed_lsn = 0;
};

// What the coordinator last read (for the Cluster request, the metrics and the dashboard).
struct CoordinatorView {
  std::string cluster;
  std::string node;
  std::optional<LeaderInfo> leader;
  std::optional<SyncKey> sync;
  std::vector<MemberView> members;
  bool etcd_reachable = false;
};

// What the coordinator asks of the node (the server implements it). Called on the
// coordinator's thread.
class ClusterNode {
 public:
  virtual ~ClusterNode() = default;
  virtual uint64_t EndLsn() const = 0;      // one past the last record in the node's log
  virtual uint64_t FlushedLsn() const = 0;  // a standby: what it acknowledged; a primary: durable
  // Become or stay a standby of `leader` (promising its epoch first, durably).
  virtual void Follow(const LeaderInfo& leader) = 0;
  // Stop following: once it returns, this node acknowledges nothing more to any primary.
  virtual void StopFollowing() = 0;
  // Take over as the primary of `epoch`: promise it, log the epoch's first record durably,
  // serve writes (until the deadline ExtendLeadership sets). On failure the caller gives the
  // leadership back and the node restarts.
  virtual Status Promote(uint64_t epoch, SteadyClock::time_point writable_until) = 0;
  virtual void ExtendLeadership(SteadyClock::time_point writable_until) = 0;
  // Leadership lost: stop taking writes now (`why` is logged). The node then follows the next
  // leader the coordinator sees, like any standby (it restarts its process only if the new
  // primary finds its log diverged: docs/replication.md, "Catching up").
  virtual void Demote(const std::string& why) = 0;
  // A primary: its standbys and how far they acknowledged.
  virtual std::vector<StandbyProgress> Standbys() const = 0;
  // A primary under --replication sync: a durable reply needs every one of `standbys` to have
  // acknowledged its records (none: nothing more becomes durable). Returns the durable end at
  // the moment the rule took effect: what a newly required standby must catch up to before it
  // may be published.
  virtual uint64_t RequireAcks(const std::vector<std::string>& standbys) = 0;
  // The view changed (for the Cluster request).
  virtual void Publish(const CoordinatorView& view) = 0;
};

struct CoordinatorOptions {
  std::string cluster;
  std::string node;
  NodeAddresses addresses;
  std::vector<EtcdEndpoint> etcd;
  bool sync_replication = true;  // --replication sync (strict) or async
  std::chrono::milliseconds loop_interval{250};
  int64_t ttl_seconds = 2;                      // the node's lease (and so the leader key's)
  std::chrono::milliseconds renew_margin{500};  // writes stop at renewal sent + TTL − margin
  std::chrono::milliseconds etcd_timeout{500};  // each etcd call
  // After a switchover, the old primary does not try to lead again for this long.
  std::chrono::milliseconds switchover_hold{10'000};
  // How long a switchover waits for the standby to hold every record before it gives up.
  std::chrono::milliseconds switchover_timeout{5'000};
};

class Coordinator {
 public:
  Coordinator(CoordinatorOptions options, ClusterNode* node);
  ~Coordinator();  // Stop()

  void Start();
  // Stops the loop; a primary's lease is revoked (its leader key goes with it, so a standby
  // can take over at once instead of after the TTL).
  void Stop();

  // From any thread (a Switchover request on the primary): hands the leadership to `to` (empty:
  // the synchronous standby); `done` gets the outcome once it has given it up, or failed.
  // FAILED_PRECONDITION when this node is not the primary, `to` is not a connected standby, or
  // another switchover is under way; UNAVAILABLE when the standby did not catch up in time
  // (writes then resume here), when etcd does not answer, when the leadership ends another
  // way first, or when the coordinator stops. `done` runs once, on the coordinator's thread
  // (or the caller's, for an immediate refusal, or Stop's): it must not block. It is called
  // before the node is demoted. Returns at once: the caller may be a sundiald io loop, which
  // must go on serving (the standby's replication session may be on it, and
  // ClusterNode::Demote waits for every loop).
  void RequestSwitchover(const std::string& to, std::function<void(Status)> done);
  // The same, waiting for the outcome (tests; never from an io loop).
  Status RequestSwitchover(const std::string& to);

  CoordinatorView view() const;
  // The etcd prefix of this cluster's keys: "/sundial/<cluster>/".
  const std::string& prefix() const { return prefix_; }

  // One round of the loop (tests drive it directly).
  void RunOnce();

 private:
  enum class Role : uint8_t { kNone, kStandby, kPrimary };
  struct PendingSync {
    std::string target;
    uint64_t must_reach = 0;
  };
  // A switchover under way: writes stopped, waiting for `to` to hold every record below `end`.
  struct Handover {
    std::string to;
    uint64_t end = 0;
    SteadyClock::time_point give_up;
  };

  void Run();
  bool RenewLease();
  bool ReadKeys(CoordinatorView* view, int64_t* sync_mod_revision, int64_t* leader_lease);
  void TryLead(const CoordinatorView& view, int64_t sync_mod_revision);
  void ManageSync(const CoordinatorView& view);
  bool PublishSync(const std::string& standby);
  void PutMember();
  void BecomeNone(const std::string& why);
  std::string MemberValue() const;
  std::string LeaderValue() const;
  // A new request (validates it and stops writes), then each round until it ends.
  void StartSwitchover(std::string to);
  void ContinueSwitchover();
  void FinishSwitchover(Status result);
  // Hands `result` to the request waiting for it, if one does. Not under mu_.
  void AnswerSwitchover(Status result);
  // Whether request number `request` still waits for its answer.
  bool SwitchoverAsked(uint64_t request) const;
  SteadyClock::time_point WritableUntil() const;

  const CoordinatorOptions options_;
  ClusterNode* const node_;
  const std::string prefix_;
  EtcdClient etcd_;

  // The loop's own state (its thread only).
  int64_t lease_id_ = 0;
  SteadyClock::time_point renewed_sent_{};
  Role role_ = Role::kNone;
  uint64_t epoch_ = 0;
  std::optional<LeaderInfo> following_;
  int64_t sync_mod_revision_ = 0;  // a primary: its last write of `sync`
  std::string sync_standby_;       // a primary: the published synchronous standby
  std::optional<PendingSync> pending_sync_;
  SteadyClock::time_point hold_until_{};
  std::optional<Handover> handover_;
  bool said_log_empty_ = false;  // logged once that an empty log keeps it from leading

  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  CoordinatorView view_ GUARDED_BY(mu_);
  std::optional<std::string> switchover_ GUARDED_BY(mu_);        // requested, not yet started
  bool switchover_busy_ GUARDED_BY(mu_) = false;                 // a request waits for its result
  std::function<void(Status)> switchover_done_ GUARDED_BY(mu_);  // where its result goes
  uint64_t switchover_request_ GUARDED_BY(mu_) = 0;              // requests so far
  std::thread thread_;
};

}  // namespace sundial::replication
