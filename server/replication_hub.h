// ReplicationHub: a primary's standbys as the rest of the server sees them (docs/replication.md,
// "Synchronous commit"): who is connected, what each acknowledged in this epoch, and the rule
// that decides what is durable. Under --replication sync, a record is durable once this node
// has fdatasynced it and every required standby (the published synchronous one; both while it
// is being replaced) has acknowledged it: the hub gives the log that bound (GroupCommitLog::
// SetReplicaBound), so the held replies wait for it on the one path they always took.
//
// Thread safety: every method may be called from any thread (a mutex; acks come from the
// replication sessions' loops, the rules from the coordinator's thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/mutex.h"
#include "replication/coordinator.h"
#include "wal/group_commit_log.h"

namespace sundial::server {

class ReplicationHub {
 public:
  // `sync`: --replication sync (a bound on durability) or async (none).
  ReplicationHub(wal::GroupCommitLog* log, bool sync) : log_(log), sync_(sync) {}

  // A standby's session began or ended (the same node may reconnect: the newest session wins).
  // `wake` is called (any thread, quick) when the log has written more for it to ship.
  uint64_t Connected(const std::string& node, std::function<void()> wake);
  void Disconnected(const std::string& node, uint64_t session);
  // Every record below `flushed_end` is fsynced on `node`, under this epoch.
  void Acked(const std::string& node, uint64_t session, uint64_t flushed_end);

  // The log wrote up to `end`: every session ships it.
  void Written();

  std::vector<replication::StandbyProgress> Standbys() const;
  // The standbys a durable reply needs from now on; returns the durable end at that moment.
  // Outside sync mode: no bound, returns the log's durable end.
  uint64_t RequireAcks(std::vector<std::string> standbys);
  // The node starts or stops being the primary: a new epoch begins with nobody's
  // acknowledgement (a record of this epoch is durable only once acknowledged), or the bound
  // goes away.
  void BeginEpoch();
  void EndEpoch();

  // The oldest LSN a standby still needs (its acknowledged end: connected ones, and those that
  // left after acknowledging in this epoch), or UINT64_MAX: segments from there on are kept by
  // checkpoints (up to the retention bound).
  uint64_t RetainFrom() const;

 private:
  struct Standby {
    std::string node;
    uint64_t session = 0;
    uint64_t acked_end = 0;
    bool connected = false;
    std::chrono::steady_clock::time_point last_ack;
  };
  // Recomputes the bound and hands it to the log.
  void UpdateBoundLocked() REQUIRES(mu_);

  wal::GroupCommitLog* const log_;
  const bool sync_;
  // Lock order: mu_, then the log's lock (SetReplicaBound). The log calls Written under its
  // lock, so the sessions' wake-ups sit under a lock of their own that holds nothing else.
  mutable Mutex mu_;
  std::vector<Standby> standbys_ GUARDED_BY(mu_);
  Mutex wake_mu_;
  std::vector<std::pair<uint64_t, std::function<void()>>> wakes_ GUARDED_BY(wake_mu_);
  std::vector<std::string> required_ GUARDED_BY(mu_);
  bool primary_ GUARDED_BY(mu_) = false;
  uint64_t next_session_ GUARDED_BY(mu_) = 1;
};

}  // namespace sundial::server
