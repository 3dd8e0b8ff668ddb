#include "engine/dependencies.h"

#include <xxhash.h>

#include <algorithm>
#include <utility>

#include "engine/validation.h"

namespace sundial {

std::string_view DependencyFailurePolicyName(DependencyFailurePolicy p) {
  switch (p) {
    case DependencyFailurePolicy::kCancel:
      return "cancel";
    case DependencyFailurePolicy::kRelease:
      return "release";
    case DependencyFailurePolicy::kError:
      return "error";
  }
  return "cancel";
}

std::optional<DependencyFailurePolicy> ParseDependencyFailurePolicy(std::string_view name) {
  for (auto p : {DependencyFailurePolicy::kCancel, DependencyFailurePolicy::kRelease,
                 DependencyFailurePolicy::kError}) {
    if (DependencyFailurePolicyName(p) == name) return p;
  }
  return std::nullopt;
}

std::string DependencyKey(std::string_view queue, std::string_view id) {
  std::string key;
  key.reserve(queue.size() + 1 + id.size());
  key.append(queue).append("/").append(id);
  return key;
}

std::string ResolveDependency(std::string_view own_queue, std::string_view entry) {
  const size_t slash = entry.find('/');
  if (slash != std::string_view::npos && slash + 1 < entry.size() &&
      IsValidQueueName(entry.substr(0, slash))) {
    return std::string(entry);
  }
  return DependencyKey(own_queue, entry);
}

std::optional<uint32_t> DependencyGraph::Lookup(std::string_view key) const {
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

uint32_t DependencyGraph::NodeFor(std::string_view key) {
  if (auto n = Lookup(key)) return *n;
  const uint32_t n = NewNode();
  Node& node = nodes_[n];
  node.key = std::string(key);
  index_.emplace(node.key, n);
  return n;
}

uint32_t DependencyGraph::NewNode() {
  uint32_t n;
  if (!free_.empty()) {
    n = free_.back();
    free_.pop_back();
  } else {
    n = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[n] = Node{};
  nodes_[n].in_use = true;
  return n;
}

bool DependencyGraph::AddDependent(std::string_view dependent, DependencyFailurePolicy policy,
                                   const std::vector<std::string>& dependencies,
                                   const std::vector<bool>& completed) {
  const uint32_t d = NodeFor(dependent);
  nodes_[d].policy = policy;
  nodes_[d].joined = next_joined_++;
  nodes_[d].waits_on.reserve(dependencies.size());
  uint32_t unfinished = 0;
  for (size_t i = 0; i < dependencies.size(); ++i) {
    const uint32_t f = NodeFor(dependencies[i]);  // may move nodes_: index again below
    nodes_[d].waits_on.push_back(f);
    ++nodes_[f].referenced;
    ++edges_;
    if (!completed[i]) {
      nodes_[f].dependents.push_back(d);
      ++nodes_[d].listed;
      ++unfinished;
    }
  }
  Node& node = nodes_[d];
  node.unfinished = unfinished;
  node.waiting = unfinished > 0;
  if (node.waiting) {
    for (uint32_t f : node.waits_on) ++nodes_[f].holders;
  }
  return node.waiting;
}

std::vector<uint32_t> DependencyGraph::TakeDependents(uint32_t n) {
  std::vector<uint32_t> dependents = std::move(nodes_[n].dependents);
  nodes_[n].dependents = {};
  for (uint32_t d : dependents) --nodes_[d].listed;
  return dependents;
}

void DependencyGraph::LeaveWaiting(uint32_t n) {
  Node& node = nodes_[n];
  if (!node.waiting) return;
  node.waiting = false;
  node.unfinished = 0;
  for (uint32_t f : node.waits_on) {
    if (--nodes_[f].holders == 0 && !nodes_[f].forgotten) unheld_.push_back(nodes_[f].key);
    MaybeFree(f);
  }
}

void DependencyGraph::MaybeFree(uint32_t n) {
  Node& node = nodes_[n];
  if (!node.in_use || node.waiting || node.holders > 0 || node.listed > 0 || node.referenced > 0 ||
      !node.dependents.empty()) {
    return;
  }
  // A dependent whose message still exists keeps its node: its dependencies' results are read
  // through it. A pure dependency's node goes as soon as nothing refers to it.
  if (!node.forgotten && !node.waits_on.empty()) return;
  for (uint32_t f : node.waits_on) {
    --nodes_[f].referenced;
    --edges_;
  }
  std::vector<uint32_t> waits_on = std::move(node.waits_on);
  if (auto it = index_.find(node.key); it != index_.end() && it->second == n) index_.erase(it);
  node = Node{};
  free_.push_back(n);
  // Its dependencies may have been kept only by this node's entry in their reverse lists.
  for (uint32_t f : waits_on) MaybeFree(f);
}

void DependencyGraph::OnCompleted(std::string_view dependency,
                                  std::vector<DependencyAction>* actions) {
  const auto f = Lookup(dependency);
  if (!f) return;
  for (uint32_t d : TakeDependents(*f)) {
    Node& node = nodes_[d];
    if (!node.waiting) {
      MaybeFree(d);
      continue;
    }
    if (--node.unfinished == 0) {
      actions->push_back({DependencyAction::Kind::kRelease, node.key, {}});
      LeaveWaiting(d);
    }
  }
  MaybeFree(*f);
}

void DependencyGraph::OnFailed(std::string_view dependency, bool errored,
                               std::vector<DependencyAction>* actions) {
  if (const auto first = Lookup(dependency)) {
    FailFrom(*first, errored ? "errored" : "canceled", actions);
  }
}

void DependencyGraph::OnRemoved(std::string_view dependency,
                                std::vector<DependencyAction>* actions) {
  if (const auto first = Lookup(dependency)) FailFrom(*first, "removed", actions);
}

void DependencyGraph::FailFrom(uint32_t first, std::string_view verb,
                               std::vector<DependencyAction>* actions) {
  // Breadth-first through the dependents that fail in turn; each node fails at most once
  // (it leaves the waiting state before it is queued), so this ends.
  struct Failed {
    uint32_t node;
    std::string_view verb;
  };
  std::vector<Failed> failed{{first, verb}};
  for (size_t i = 0; i < failed.size(); ++i) {
    const Failed f = failed[i];
    std::string reason = "dependency " + nodes_[f.node].key;
    reason.append(" ").append(f.verb);
    for (uint32_t d : TakeDependents(f.node)) {
      Node& node = nodes_[d];
      if (!node.waiting) {
        MaybeFree(d);
        continue;
      }
      switch (node.policy) {
        case DependencyFailurePolicy::kRelease:
          if (--node.unfinished == 0) {
            actions->push_back({DependencyAction::Kind::kRelease, node.key, {}});
            LeaveWaiting(d);
          }
          break;
        case DependencyFailurePolicy::kCancel:
          actions->push_back({DependencyAction::Kind::kCancel, node.key, reason});
          LeaveWaiting(d);
          failed.push_back({d, "canceled"});
          break;
        case DependencyFailurePolicy::kError:
          actions->push_back({DependencyAction::Kind::kError, node.key, reason});
          LeaveWaiting(d);
          failed.push_back({d, "errored"});
          break;
      }
    }
  }
  for (const Failed& f : failed) MaybeFree(f.node);
}

void DependencyGraph::StopWaiting(std::string_view dependent) {
  if (auto d = Lookup(dependent)) {
    LeaveWaiting(*d);
    MaybeFree(*d);
  }
}

void DependencyGraph::Forget(std::string_view key) {
  const auto n = Lookup(key);
  if (!n) return;
  LeaveWaiting(*n);
  nodes_[*n].forgotten = true;
  // Dependents still listed in its reverse list can no longer be released by it; a message is
  // only forgotten once terminal, when that list has already been consumed.
  for (uint32_t d : TakeDependents(*n)) MaybeFree(d);
  MaybeFree(*n);
  // Still named in the reverse lists of unfinished dependencies (a waiting message purged or
  // its queue deleted) or in a dependent's list: the node lives on without its name until
  // those refer to it no more, so that a new message with the same key gets a node of its own.
  if (nodes_[*n].in_use) {
    if (auto it = index_.find(nodes_[*n].key); it != index_.end() && it->second == *n) {
      index_.erase(it);
    }
  }
}

bool DependencyGraph::IsWaiting(std::string_view dependent) const {
  const auto n = Lookup(dependent);
  return n && nodes_[*n].waiting;
}

uint32_t DependencyGraph::Unfinished(std::string_view dependent) const {
  const auto n = Lookup(dependent);
  return n && nodes_[*n].waiting ? nodes_[*n].unfinished : 0;
}

bool DependencyGraph::IsHeld(std::string_view dependency) const {
  const auto n = Lookup(dependency);
  return n && nodes_[*n].holders > 0;
}

std::vector<std::string> DependencyGraph::DependenciesOf(std::string_view dependent) const {
  std::vector<std::string> keys;
  if (const auto n = Lookup(dependent)) {
    for (uint32_t f : nodes_[*n].waits_on) keys.push_back(nodes_[f].key);
  }
  return keys;
}

std::vector<DependencyGraph::Listed> DependencyGraph::ListedDependencies(
    std::string_view dependent) const {
  std::vector<Listed> out;
  if (const auto n = Lookup(dependent)) {
    for (uint32_t f : nodes_[*n].waits_on) out.push_back({nodes_[f].key, nodes_[f].forgotten});
  }
  return out;
}

std::vector<bool> DependencyGraph::UnfinishedEntries(std::string_view dependent) const {
  std::vector<bool> out;
  const auto n = Lookup(dependent);
  if (!n) return out;
  const Node& node = nodes_[*n];
  out.assign(node.waits_on.size(), false);
  if (!node.waiting) return out;
  // An entry is unfinished while the dependent is in its dependency's reverse list (consumed
  // when that one completes or fails); a dependency named twice is there twice.
  boost::unordered_flat_map<uint32_t, uint32_t> listed;
  for (uint32_t f : node.waits_on) {
    if (listed.contains(f)) continue;
    const std::vector<uint32_t>& dependents = nodes_[f].dependents;
    listed[f] = static_cast<uint32_t>(std::count(dependents.begin(), dependents.end(), *n));
  }
  for (size_t i = 0; i < node.waits_on.size(); ++i) {
    uint32_t& left = listed[node.waits_on[i]];
    if (left > 0) {
      --left;
      out[i] = true;
    }
  }
  return out;
}

std::vector<std::string> DependencyGraph::WaitingDependents(std::string_view dependency,
                                                            size_t limit, uint32_t* waiting) const {
  std::vector<std::string> out;
  *waiting = 0;
  const auto n = Lookup(dependency);
  if (!n) return out;
  // A canceled dependent stays in the list until this one finishes: only the waiting count.
  boost::unordered_flat_map<uint32_t, bool> seen;
  for (uint32_t d : nodes_[*n].dependents) {
    if (!nodes_[d].waiting || !seen.emplace(d, true).second) continue;
    ++*waiting;
    if (out.size() < limit) out.push_back(nodes_[d].key);
  }
  return out;
}

void DependencyGraph::ExportDependents(
    const std::function<void(const DependentEntry&)>& visit) const {
  std::vector<std::pair<uint64_t, uint32_t>> order;  // (joined, node)
  for (const auto& [key, n] : index_) {
    if (!nodes_[n].waits_on.empty()) order.emplace_back(nodes_[n].joined, n);
  }
  std::sort(order.begin(), order.end());
  // Which entries each dependent is still listed by, counted per (dependent, dependency):
  // the same dependency named twice is in the reverse list twice.
  boost::unordered_flat_map<uint64_t, uint32_t> listed;
  for (size_t f = 0; f < nodes_.size(); ++f) {
    for (uint32_t d : nodes_[f].dependents) ++listed[(uint64_t{d} << 32) | f];
  }
  std::vector<std::string> keys;
  std::string edges;
  for (const auto& [joined, d] : order) {
    const Node& node = nodes_[d];
    keys.clear();
    edges.assign(node.waits_on.size(), '\0');
    for (size_t i = 0; i < node.waits_on.size(); ++i) {
      const uint32_t f = node.waits_on[i];
      keys.push_back(nodes_[f].key);
      uint8_t flags = nodes_[f].forgotten ? kEdgeGone : 0;
      if (auto it = listed.find((uint64_t{d} << 32) | f); it != listed.end() && it->second > 0) {
        --it->second;
        flags |= kEdgeListed;
      }
      edges[i] = static_cast<char>(flags);
    }
    visit({node.key, node.policy, node.waiting, &keys, edges});
  }
}

bool DependencyGraph::RestoreDependent(const DependentEntry& entry) {
  const std::vector<std::string>& keys = *entry.dependencies;
  if (keys.empty() || keys.size() != entry.edges.size()) return false;
  uint32_t listed = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto flags = static_cast<uint8_t>(entry.edges[i]);
    if ((flags & ~(kEdgeListed | kEdgeGone)) != 0) return false;
    if ((flags & kEdgeListed) && (flags & kEdgeGone)) return false;
    if (keys[i] == entry.key) return false;
    listed += (flags & kEdgeListed) ? 1 : 0;
  }
  if (entry.waiting && listed == 0) return false;
  if (const auto existing = Lookup(entry.key); existing && !nodes_[*existing].waits_on.empty()) {
    return false;
  }
  const uint32_t d = NodeFor(entry.key);
  nodes_[d].policy = entry.policy;
  nodes_[d].joined = next_joined_++;
  nodes_[d].waits_on.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto flags = static_cast<uint8_t>(entry.edges[i]);
    uint32_t f;
    if (flags & kEdgeGone) {
      f = NewNode();  // may move nodes_: index again below
      nodes_[f].key = keys[i];
      nodes_[f].forgotten = true;
    } else {
      f = NodeFor(keys[i]);
    }
    nodes_[d].waits_on.push_back(f);
    ++nodes_[f].referenced;
    ++edges_;
    if (flags & kEdgeListed) {
      nodes_[f].dependents.push_back(d);
      ++nodes_[d].listed;
    }
  }
  Node& node = nodes_[d];
  node.waiting = entry.waiting;
  node.unfinished = entry.waiting ? listed : 0;
  if (node.waiting) {
    for (uint32_t f : node.waits_on) ++nodes_[f].holders;
  }
  return true;
}

uint64_t DependencyGraph::Digest() const {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  bool any = false;
  auto put_str = [&](std::string_view s) {
    const uint64_t size = s.size();
    XXH3_64bits_update(state, &size, sizeof size);
    XXH3_64bits_update(state, s.data(), s.size());
  };
  ExportDependents([&](const DependentEntry& e) {
    any = true;
    put_str(e.key);
    const uint8_t fixed[2] = {static_cast<uint8_t>(e.policy), static_cast<uint8_t>(e.waiting)};
    XXH3_64bits_update(state, fixed, sizeof fixed);
    for (const std::string& key : *e.dependencies) put_str(key);
    put_str(e.edges);
  });
  const uint64_t digest = any ? XXH3_64bits_digest(state) : 0;
  XXH3_freeState(state);
  return digest;
}

uint64_t DependencyGraph::allocated_bytes() const {
  uint64_t bytes = nodes_.capacity() * sizeof(Node) + free_.capacity() * sizeof(uint32_t) +
                   index_.size() * (sizeof(std::string) + sizeof(uint32_t) + 1);
  for (const Node& n : nodes_) {
    bytes += (n.waits_on.capacity() + n.dependents.capacity()) * sizeof(uint32_t);
    if (n.key.capacity() > 15) bytes += n.key.capacity();
  }
  return bytes;
}

}  // namespace sundial
