// DependencyGraph: which messages wait on which (docs/semantics.md, "Dependencies"). Internal to
// engine/; the engine owns one for all queues, since a dependency may live in another queue.
//
// A message is named across queues by its key "queue/id" (DependencyKey): queue names have no
// '/', so the key is unambiguous. Each message that takes part has one node:
//  - as a dependent: the dependencies it listed at enqueue (`waits_on`, in order: `get` with
//    include_dependency_results reads them), how many of them are not complete yet
//    (`unfinished`), its on_dependency_failure policy, and whether it still waits;
//  - as a dependency: the dependents that listed it (`dependents`, a reverse list consumed once,
//    when it completes or fails) and how many of them still wait (`holders`: while above zero,
//    a completed dependency is kept from GC).
// Nothing is ever scanned: a completion touches exactly its own dependents, a dependent leaving
// the waiting state touches exactly its own dependencies. Fan-in of N children to one parent is
// one counter and one list of N on the parent; fan-out of one to N is a reverse list of N on
// the dependency and a counter on each dependent. Each edge costs two 4-byte node numbers.
//
// Consequences are returned, not applied: OnCompleted and OnFailed compute what must happen to
// the dependents (release, cancel, error; transitively through cancel and error policies) and
// the engine applies them to the queues, under the same locks as the change that caused them,
// so a release is part of the completing operation (docs/engine.md, "Dependencies").
//
// Cycles cannot form: a dependency must exist before its dependent is added (AddWaiting of a
// key that already has a node as a dependent is refused by the caller as ALREADY_EXISTS).
//
// Durability (docs/wal-format.md, "Extensions" and "Snapshots"): the log replays the causes
// (AddDependent at enqueue, OnCompleted ...), so it needs nothing from here. A snapshot carries
// each dependent's entry (ExportDependents: its dependencies, which of them it still waits on,
// which are gone, its policy, whether it waits), in the order the dependents joined, which is
// the order of every reverse list; RestoreDependent, called in that order, rebuilds the same
// graph: same waiting dependents and counters, same holds, same reverse lists in the same
// order. (Nodes of messages that are gone and only kept alive by a reverse list entry of a
// dependent that no longer waits are not carried: they change nothing but when memory is
// freed.)
//
// Thread safety: none; the engine guards it with its dependency lock (engine.h, lock order).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "engine/types.h"

namespace sundial {

std::string_view DependencyFailurePolicyName(DependencyFailurePolicy p);  // "cancel", ...
std::optional<DependencyFailurePolicy> ParseDependencyFailurePolicy(std::string_view name);

// "queue/id".
std::string DependencyKey(std::string_view queue, std::string_view id);
// Splits a depends_on entry: "queue/id" names a message of another queue, a bare "id" one of
// `own_queue`. The id may itself contain '/': only the first '/' separates, and only when what
// precedes it is a valid queue name.
std::string ResolveDependency(std::string_view own_queue, std::string_view entry);

// Flags of one entry of a dependent's dependencies (DependentEntry::edges, snapshots).
inline constexpr uint8_t kEdgeListed = 1;  // it still waits on it (in that one's reverse list)
inline constexpr uint8_t kEdgeGone = 2;    // that message is gone (its node has no name)

// One dependent as a snapshot carries it (ExportDependents, RestoreDependent).
struct DependentEntry {
  std::string_view key;
  DependencyFailurePolicy policy = DependencyFailurePolicy::kCancel;
  bool waiting = false;
  const std::vector<std::string>* dependencies = nullptr;  // keys, in the order listed
  std::string_view edges;  // one byte of kEdge* flags per dependency
};

// One consequence for a dependent (its key), in the order they must be applied.
struct DependencyAction {
  enum class Kind : uint8_t { kRelease, kCancel, kError };
  Kind kind = Kind::kRelease;
  std::string dependent;
  std::string reason;  // kCancel, kError: "dependency Q/ID canceled" / "... errored"
};

class DependencyGraph {
 public:
  DependencyGraph() = default;
  DependencyGraph(const DependencyGraph&) = delete;
  DependencyGraph& operator=(const DependencyGraph&) = delete;

  // A new dependent `dependent` that listed `dependencies` (existing messages, in order); those
  // in `completed` (same length, true: already completed) count as finished. Returns true when
  // it waits (some dependency is unfinished); false when it is released at once (it is then
  // still recorded, for its dependencies' results). Each listed dependency is held (kept from
  // GC) while the dependent waits.
  bool AddDependent(std::string_view dependent, DependencyFailurePolicy policy,
                    const std::vector<std::string>& dependencies,
                    const std::vector<bool>& completed);

  // `dependency` completed: each waiting dependent counts it finished; those for which it was
  // the last are released (appended to *actions).
  void OnCompleted(std::string_view dependency, std::vector<DependencyAction>* actions);
  // `dependency` was canceled (errored: `errored`): each waiting dependent follows its policy;
  // a dependent canceled or errored in turn is processed the same way (transitively).
  void OnFailed(std::string_view dependency, bool errored, std::vector<DependencyAction>* actions);
  // `dependency` left its queue without finishing (purged, its queue deleted): as OnFailed,
  // with the reason "dependency Q/ID removed". Forget it afterwards.
  void OnRemoved(std::string_view dependency, std::vector<DependencyAction>* actions);
  // `dependent` stopped waiting by other means (canceled by a request, its queue deleted or
  // purged): its dependencies are no longer held by it. No-op when it does not wait.
  void StopWaiting(std::string_view dependent);
  // The message `key` is gone (GC, purge, queue deleted): its node is dropped once nothing
  // refers to it. REQUIRES: it does not wait (StopWaiting first).
  void Forget(std::string_view key);

  // Dependencies that lost their last holder since the last call (a dependent that listed them
  // stopped waiting: released, canceled, errored, removed), by key, in that order; messages
  // already gone are left out. The engine re-arms their GC timers (Queue::RearmHeld).
  std::vector<std::string> TakeUnheld() { return std::exchange(unheld_, {}); }

  bool IsWaiting(std::string_view dependent) const;
  // Dependencies not yet complete of a waiting dependent (0 otherwise).
  uint32_t Unfinished(std::string_view dependent) const;
  // True while some waiting dependent listed `dependency`: a completed message is then kept.
  bool IsHeld(std::string_view dependency) const;
  // The dependencies `dependent` listed at enqueue, in order (empty: none).
  std::vector<std::string> DependenciesOf(std::string_view dependent) const;
  // The same, each with whether that message is gone (removed since: GC, purge, its queue
  // deleted, a dead-letter move), so that a later message with the same key is not taken for it.
  struct Listed {
    std::string key;
    bool gone = false;
  };
  std::vector<Listed> ListedDependencies(std::string_view dependent) const;
  // Per entry of ListedDependencies: whether `dependent` still waits on it (it waits, and that
  // dependency has neither completed nor failed since it was listed). All false when it does
  // not wait.
  std::vector<bool> UnfinishedEntries(std::string_view dependent) const;
  // The dependents ("queue/id") that still wait on `dependency`, each once, in the order they
  // joined: the first `limit` of them, and how many there are in all (`*waiting`). Empty once
  // `dependency` is terminal (its reverse list is consumed then). O(its reverse list).
  std::vector<std::string> WaitingDependents(std::string_view dependency, size_t limit,
                                             uint32_t* waiting) const;

  // Snapshots: calls `visit` for every dependent whose message exists, in the order they
  // joined (see the top of this file). The entry's views are valid during the call.
  void ExportDependents(const std::function<void(const DependentEntry&)>& visit) const;
  // Adds a dependent as ExportDependents described it. False (nothing changed) when the entry
  // does not fit: the key is already a dependent, a count or flag is inconsistent (a waiting
  // dependent must still wait on one at least; a gone dependency cannot be waited on).
  bool RestoreDependent(const DependentEntry& entry);
  // XXH3 of everything ExportDependents reports, in its order (0 for an empty graph): two
  // graphs that behave the same have the same digest.
  uint64_t Digest() const;

  size_t node_count() const { return nodes_.size() - free_.size(); }
  uint64_t edge_count() const { return edges_; }
  // Bytes held by the nodes, lists and index.
  uint64_t allocated_bytes() const;

 private:
  struct Node {
    std::string key;
    std::vector<uint32_t> waits_on;    // dependencies listed at enqueue (node numbers)
    std::vector<uint32_t> dependents;  // reverse list; cleared once this one is terminal
    uint32_t unfinished = 0;
    uint32_t holders = 0;     // waiting dependents that listed this node
    uint32_t listed = 0;      // entries of other nodes' `dependents` naming this node
    uint32_t referenced = 0;  // entries of other nodes' `waits_on` naming this node
    uint64_t joined = 0;      // when it was added as a dependent (order of the reverse lists)
    DependencyFailurePolicy policy = DependencyFailurePolicy::kCancel;
    bool waiting = false;
    bool forgotten = false;  // the message is gone (Forget)
    bool in_use = false;
  };

  uint32_t NodeFor(std::string_view key);  // finds or creates
  uint32_t NewNode();                      // a node with no name yet
  // Fails `first` and, through their policies, its dependents (OnFailed, OnRemoved); the
  // reason names `first` and `verb`.
  void FailFrom(uint32_t first, std::string_view verb, std::vector<DependencyAction>* actions);
  std::optional<uint32_t> Lookup(std::string_view key) const;
  // Leaves the waiting state: every dependency it listed loses one holder.
  void LeaveWaiting(uint32_t n);
  // Frees `n` when nothing refers to it any more.
  void MaybeFree(uint32_t n);
  // Consumes `n`'s reverse list (it just became terminal).
  std::vector<uint32_t> TakeDependents(uint32_t n);

  std::vector<Node> nodes_;
  std::vector<uint32_t> free_;
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  boost::unordered_flat_map<std::string, uint32_t, KeyHash, std::equal_to<>> index_;
  uint64_t edges_ = 0;
  uint64_t next_joined_ = 1;
  std::vector<std::string> unheld_;  // TakeUnheld
};

}  // namespace sundial
