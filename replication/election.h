// Who may lead: the rules a node applies to what it read from etcd (docs/replication.md,
// "Leadership"), Patroni's synchronous_mode rules. Pure functions over a snapshot of the keys,
// so every case is tested without etcd; replication/coordinator.cc does the I/O, and every
// decision taken here is made safe by an etcd transaction that compares what was read (a
// decision on stale data fails its compare and is taken again on the next loop).
//
// Keys under /sundial/<cluster>/ (values JSON):
//   leader          {"node"}                       on the leader's lease; created only when absent;
//                                                  its create_revision is the epoch
//   sync            {"leader","standby"}           written by the leader, by compare-and-swap;
//                                                  absent until the cluster's first leader
//   members/<node>  {"addr","repl_addr","http_addr","role","end_lsn","flushed_lsn","epoch"}
//                                                  on the member's lease
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace sundial::replication {

struct LeaderKey {
  std::string node;
  uint64_t epoch = 0;  // the key's create_revision
};

struct SyncKey {
  std::string leader;   // the leader that wrote it
  std::string standby;  // its published synchronous standby; empty: none
  uint64_t mod_revision = 0;
};

struct ElectionView {
  std::optional<LeaderKey> leader;
  std::optional<SyncKey> sync;  // absent: the cluster never had a leader
  // The candidate's own log holds no record: a node that never held anything, or one that lost
  // its data directory (a new disk, a wiped directory) and kept its name.
  bool log_empty = false;
};

enum class Eligibility : uint8_t {
  kLeaderExists,    // follow it
  kMayLead,         // take the leader key (compare: leader absent, sync unchanged)
  kNotSyncStandby,  // another node holds every acknowledged write: wait for it
  kLogEmpty,        // named in `sync`, but its log is empty: it lost what it acknowledged
};

// Whether `node` may take the leader key now. It may when there is no leader and either
//  - `sync` is absent (the cluster's first leadership: no node holds an acknowledged write), or
//  - `sync` names it as the synchronous standby (it holds every acknowledged write), or
//  - `sync` names it as the leader that wrote it (no standby was promoted since: a promotion
//    rewrites `sync` in the same transaction that takes the key, so the last leader holds every
//    acknowledged write),
// and, once the cluster had a leader, only with a log that holds something: a node named in
// `sync` that comes back with an empty data directory holds none of what it acknowledged
// (every leadership's log starts with its epoch record, so a log that holds a leadership's
// writes is never empty). It waits for another node to lead and then follows it, catching up
// from a snapshot. A log restored from an old backup is not caught by this rule: never start a
// node of a cluster on one (docs/operations.md, "High availability").
Eligibility MayLead(const ElectionView& view, const std::string& node);

}  // namespace sundial::replication
