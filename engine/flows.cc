// Engine::EnqueueFlow and the capture of a flow's effects (engine/flows.h; the rules:
// docs/semantics.md, "Flows").
#include "engine/flows.h"

#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/dependencies.h"
#include "engine/engine.h"
#include "engine/engine_shards.h"
#include "engine/metadata.h"
#include "engine/validation.h"

namespace sundial {

// ---- Capture ----------------------------------------------------------------------------------

OwnedEffect::OwnedEffect(const Effect& e) : effect_(e) {
  auto own = [](std::string_view* view, std::string* storage) {
    storage->assign(*view);
    *view = *storage;
  };
  own(&effect_.queue, &queue_);
  own(&effect_.id, &id_);
  own(&effect_.payload, &payload_);
  own(&effect_.packed_metadata, &packed_metadata_);
  own(&effect_.error, &error_);
  own(&effect_.result, &result_);
  own(&effect_.dead_letter_queue, &dead_letter_queue_);
  own(&effect_.dependency_edges, &dependency_edges_);
  own(&effect_.batch, &batch_);
  if (e.settings != nullptr) {
    settings_ = *e.settings;
    effect_.settings = &*settings_;
  }
  if (e.depends_on != nullptr) {
    depends_on_ = *e.depends_on;
    effect_.depends_on = &depends_on_;
  }
  if (e.schedule != nullptr) {
    schedule_ = *e.schedule;
    effect_.schedule = &*schedule_;
  }
  effect_.members = nullptr;  // a group is never caught (captures do not nest)
}

namespace {
thread_local FlowCaptureSink::Capture* t_capture = nullptr;
}  // namespace

void FlowCaptureSink::OnEffect(const Effect& effect) {
  Capture* c = t_capture;
  if (c != nullptr && c->sink_ == this && c->open_) {
    c->effects_.emplace_back(effect);
    return;
  }
  target_->OnEffect(effect);
}

FlowCaptureSink::Capture::Capture(FlowCaptureSink* sink) : sink_(sink), previous_(t_capture) {
  t_capture = this;
}

FlowCaptureSink::Capture::~Capture() { t_capture = previous_; }

void FlowCaptureSink::Capture::Report(TimeMs now) {
  open_ = false;
  if (effects_.empty()) return;
  std::vector<Effect> members;
  members.reserve(effects_.size());
  for (const OwnedEffect& caught : effects_) {
    if (!caught.effect().derived) members.push_back(caught.effect());
  }
  if (!members.empty()) {
    Effect group;
    group.type = EffectType::kFlowEnqueued;
    group.time = now;
    group.members = &members;
    sink_->target_->OnEffect(group);
  }
  for (const OwnedEffect& caught : effects_) {
    Effect again = caught.effect();
    again.derived = true;  // in the group (or derived already): the log skips it
    sink_->target_->OnEffect(again);
  }
}

// ---- EnqueueFlow ------------------------------------------------------------------------------

namespace {

// A node of the request, flattened: `pre` is its index in pre-order (the answer's order).
struct PlannedNode {
  FlowNode* node = nullptr;
  size_t parent = SIZE_MAX;  // pre-order index; SIZE_MAX: a root
  size_t tree = 0;           // pre-order index of its root
  std::vector<size_t> children;
  std::string key;  // "queue/id" when the id is given
};

Status AtNode(size_t pre, const Status& s) {
  return Status(s.code(), "nodes[" + std::to_string(pre) + "]: " + std::string(s.detail()));
}

std::pair<std::string_view, std::string_view> SplitFlowKey(std::string_view key) {
  const size_t slash = key.find('/');
  return {key.substr(0, slash), key.substr(slash + 1)};
}

// Flattens `roots` in pre-order; INVALID_ARGUMENT past the limits.
Status Flatten(std::vector<FlowNode>& roots, std::vector<PlannedNode>* out) {
  if (roots.empty()) return InvalidArgument("nodes: a flow has 1-1000 nodes");
  struct Frame {
    FlowNode* node;
    size_t parent;
    size_t depth;
  };
  std::vector<Frame> stack;
  for (auto it = roots.rbegin(); it != roots.rend(); ++it) stack.push_back({&*it, SIZE_MAX, 1});
  while (!stack.empty()) {
    const Frame f = stack.back();
    stack.pop_back();
    if (out->size() == kMaxFlowNodes) return InvalidArgument("nodes: a flow has 1-1000 nodes");
    if (f.depth > kMaxFlowDepth) return InvalidArgument("nodes: a flow is at most 32 levels deep");
    const size_t pre = out->size();
    PlannedNode& p = out->emplace_back();
    p.node = f.node;
    p.parent = f.parent;
    p.tree = f.parent == SIZE_MAX ? pre : (*out)[f.parent].tree;
    if (f.parent != SIZE_MAX) (*out)[f.parent].children.push_back(pre);
    for (auto it = f.node->children.rbegin(); it != f.node->children.rend(); ++it) {
      stack.push_back({&*it, pre, f.depth + 1});
    }
  }
  return Status::Ok();
}

// Children before parents, siblings in order.
std::vector<size_t> PostOrder(const std::vector<PlannedNode>& nodes) {
  std::vector<size_t> order;
  order.reserve(nodes.size());
  std::vector<std::pair<size_t, bool>> stack;  // (node, children pushed)
  for (size_t i = nodes.size(); i-- > 0;) {
    if (nodes[i].parent == SIZE_MAX) stack.push_back({i, false});
  }
  while (!stack.empty()) {
    auto [n, expanded] = stack.back();
    stack.pop_back();
    if (expanded) {
      order.push_back(n);
      continue;
    }
    stack.push_back({n, true});
    const auto& kids = nodes[n].children;
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.push_back({*it, false});
  }
  return order;
}

// The bytes a node adds to the flow's record, roughly (docs/semantics.md, "Flows").
size_t NodeBytes(const PlannedNode& p) {
  const EnqueueItem& item = p.node->item;
  size_t bytes = 128 + p.node->queue.size() + std::max<size_t>(item.id.size(), 26) +
                 item.payload.size() + item.batch.size();
  for (const auto& pair : item.metadata) bytes += 8 + pair.key.size() + pair.value.size();
  for (const auto& key : item.depends_on) bytes += 4 + key.size();
  // Each child's key in this node's depends_on.
  bytes += p.children.size() * (4 + kMaxQueueNameBytes + 1 + kMaxIdBytes);
  return bytes;
}

}  // namespace

Result<std::vector<FlowNodeResult>> Engine::EnqueueFlow(std::vector<FlowNode> roots) {
  std::vector<PlannedNode> nodes;
  if (Status s = Flatten(roots, &nodes); !s.ok()) return s;

  // Checks that need no lock: names, items, depends_on entries, sizes, ids named twice.
  size_t total_bytes = 0;
  std::unordered_map<std::string, size_t> named;  // key -> pre-order index
  for (size_t i = 0; i < nodes.size(); ++i) {
    PlannedNode& p = nodes[i];
    FlowNode& node = *p.node;
    if (!IsValidQueueName(node.queue)) {
      return AtNode(i, InvalidArgument("queue: name must be 1-128 bytes of [A-Za-z0-9._:-]"));
    }
    if (Status s = ValidateItem(node.item, options_.max_payload_bytes); !s.ok()) {
      return AtNode(i, s);
    }
    if (node.item.debounce_ms) {  // a flow's node is new or resent, never replaced
      return AtNode(i, InvalidArgument("debounce_ms: not in a flow"));
    }
    if (node.item.depends_on.size() + p.children.size() > kMaxDependencies) {
      return AtNode(i, InvalidArgument("depends_on: at most 100000 dependencies per message"));
    }
    for (auto& entry : node.item.depends_on) {
      entry = ResolveDependency(node.queue, entry);
      auto [q, id] = SplitFlowKey(entry);
      if (!IsValidQueueName(q) || !IsValidId(id)) {
        return AtNode(i, InvalidArgument("depends_on: each entry is an id or queue/id"));
      }
    }
    if (!node.item.id.empty()) {
      p.key = DependencyKey(node.queue, node.item.id);
      if (!named.emplace(p.key, i).second) {
        return AtNode(i, InvalidArgument("id: the flow names this message twice"));
      }
    }
    total_bytes += NodeBytes(p);
    if (total_bytes > kMaxFlowBytes) {
      return InvalidArgument("nodes: a flow's messages total at most 8 MiB");
    }
  }
  const std::vector<size_t> post = PostOrder(nodes);

  AllShardsLock lock(this);
  graph_used_.store(true, std::memory_order_relaxed);
  const TimeMs now = clock_->NowMs();
  auto find_queue = [&](std::string_view name) NO_THREAD_SAFETY_ANALYSIS -> Queue* {
    return ShardFor(name).Find(name);  // AllShardsLock
  };

  std::vector<FlowNodeResult> results(nodes.size());
  // A tree whose root exists is a resend of an earlier flow (docs/semantics.md, "Flows"): the
  // root must be the same message (else ALREADY_EXISTS) and nothing of the tree is enqueued.
  std::vector<bool> resent(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    PlannedNode& p = nodes[i];
    if (p.parent != SIZE_MAX || p.key.empty()) continue;
    Shard& shard = ShardFor(p.node->queue);
    shard.mu.AssertHeld();
    Queue* q = shard.Find(p.node->queue);
    if (q == nullptr || !q->Contains(p.node->item.id)) continue;
    // The id exists: Queue::Enqueue answers duplicate or ALREADY_EXISTS and changes nothing.
    Result<EnqueueResult> r = q->EnqueueResend(p.node->item, now, &shard.rng);
    if (!r.ok()) return AtNode(i, r.status());
    resent[i] = true;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].parent != SIZE_MAX) resent[i] = resent[nodes[i].tree];
  }

  // Checks against the state: every new node must be enqueueable, so that all are or none.
  std::unordered_map<std::string_view, uint64_t> ready_per_queue;  // new non-waiting messages
  std::unordered_set<std::string_view> new_queues;
  std::unordered_map<std::string_view, size_t> post_position;  // key -> index in `post`
  for (size_t k = 0; k < post.size(); ++k) {
    if (!nodes[post[k]].key.empty()) post_position.emplace(nodes[post[k]].key, k);
  }
  uint64_t new_bytes = 0;
  for (size_t k = 0; k < post.size(); ++k) {
    const size_t i = post[k];
    if (resent[i]) continue;
    const PlannedNode& p = nodes[i];
    const EnqueueItem& item = p.node->item;
    Queue* q = find_queue(p.node->queue);
    if (q == nullptr) {
      if (!options_.auto_create_queues) return AtNode(i, NotFound("queue: no such queue"));
      new_queues.insert(p.node->queue);
    } else {
      if (!item.id.empty() && q->Contains(item.id)) {
        return AtNode(i, AlreadyExists("id: a message with this id exists (a flow enqueues new "
                                       "messages; a resend is known by its root)"));
      }
      if (q->settings().enqueue_paused) {
        return AtNode(i, FailedPrecondition("queue: enqueue is paused"));
      }
      if (q->gated()) {
        bool has_key = false;
        for (const auto& pair : item.metadata) has_key |= pair.key == q->gate_key();
        if (!has_key) {
          return AtNode(
              i, InvalidArgument(q->exclusive() ? "metadata: missing the queue's exclusivity_key"
                                                : "metadata: missing the queue's flow_key"));
        }
      }
      const bool waits = !p.children.empty() || !item.depends_on.empty();
      if (!waits && q->settings().max_depth > 0) {
        const StateCounts& c = q->counts();
        // The queue's non-terminal messages, waiting ones too (as Queue::Enqueue counts them).
        const uint64_t live = c[MessageState::kInvisible] + c[MessageState::kPending] +
                              c[MessageState::kRunning] + c[MessageState::kWaiting] +
                              ++ready_per_queue[p.node->queue];
        if (live > q->settings().max_depth) {
          return AtNode(i, ResourceExhausted("queue: max_depth reached"));
        }
      }
    }
    for (const std::string& key : item.depends_on) {
      auto it = post_position.find(key);
      // An earlier node of the flow that this flow enqueues (a resent one must exist).
      if (it != post_position.end() && it->second < k && !resent[post[it->second]]) continue;
      auto [dq_name, did] = SplitFlowKey(key);
      Queue* dq = find_queue(dq_name);
      if (dq == nullptr || !dq->Contains(did)) {
        return AtNode(i, Status(Code::kNotFound, "depends_on: no such message " + key));
      }
    }
    if (!item.batch.empty()) {
      const BatchInfo* batch = batches_.Find(item.batch);
      if (batch == nullptr) return AtNode(i, NotFound("batch: no such batch"));
      if (batch->sealed) return AtNode(i, FailedPrecondition("batch: sealed, no member may join"));
    }
    std::string packed;
    AppendPackedMetadata(item.metadata, &packed);
    new_bytes += kMessageOverheadBytes + (item.id.empty() ? size_t{26} : item.id.size()) +
                 item.payload.size() + packed.size();
  }
  if (options_.memory_budget_bytes > 0 &&
      memory_bytes() + new_bytes > options_.memory_budget_bytes) {
    return budget_exhausted_;
  }

  // Every check passed: enqueue, children first. The effects are caught and reported as one
  // group (flows.h).
  std::optional<FlowCaptureSink::Capture> capture;
  if (flow_sink_ != nullptr) capture.emplace(flow_sink_.get());
  Status failure;
  for (const size_t i : post) {
    PlannedNode& p = nodes[i];
    FlowNode& node = *p.node;
    FlowNodeResult& out = results[i];
    out.queue = node.queue;
    if (resent[i]) continue;
    Shard& shard = ShardFor(node.queue);
    shard.mu.AssertHeld();
    Queue* q = shard.Find(node.queue);
    if (q == nullptr) q = AddQueue(shard, node.queue, QueueSettings{}, now);
    EnqueueItem& item = node.item;
    // Its children first, then what it lists itself (once each).
    std::vector<std::string> depends_on;
    depends_on.reserve(p.children.size() + item.depends_on.size());
    std::unordered_set<std::string> listed;
    for (const size_t c : p.children) {
      std::string key = DependencyKey(results[c].queue, results[c].id);
      if (listed.insert(key).second) depends_on.push_back(std::move(key));
    }
    for (std::string& key : item.depends_on) {
      if (listed.insert(key).second) depends_on.push_back(std::move(key));
    }
    item.depends_on = std::move(depends_on);
    std::vector<MessageState> states;
    states.reserve(item.depends_on.size());
    for (const std::string& key : item.depends_on) {
      auto [dq_name, did] = SplitFlowKey(key);
      Queue* dq = find_queue(dq_name);
      Result<MessageOutcome> outcome =
          dq == nullptr ? Result<MessageOutcome>(NotFound("no such queue")) : dq->Outcome(did);
      if (!outcome.ok()) break;
      states.push_back(outcome->state);
    }
    Result<EnqueueResult> r =
        states.size() != item.depends_on.size()
            ? Result<EnqueueResult>(NotFound("depends_on: a dependency vanished"))
            : q->EnqueueFlowNode(item, now, &shard.rng);  // paused, max_depth, budget: above
    if (!r.ok() || r->duplicate) {
      // Cannot be: every check above passed under the same locks. What was enqueued stays
      // (and is reported, so the log matches the state); the flow answers INTERNAL.
      failure = AtNode(i, Status(Code::kInternal,
                                 "flow: a checked node was refused: " +
                                     (r.ok() ? std::string("duplicate") : r.status().ToString())));
      break;
    }
    out.id = r->id;
    out.version = r->version;
    const std::string key = DependencyKey(node.queue, r->id);
    if (!item.batch.empty()) {
      q->JoinGraph(r->id);
      batches_.AddMember(item.batch, key);
    }
    if (!item.depends_on.empty()) AddDependent(key, item, states, now, /*emit=*/true);
  }
  if (capture) capture->Report(now);
  if (!failure.ok()) return failure;

  // The nodes of resent trees: their current versions.
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!resent[i]) continue;
    FlowNodeResult& out = results[i];
    out.queue = nodes[i].node->queue;
    out.id = nodes[i].node->item.id;
    out.duplicate = true;
    if (out.id.empty()) continue;
    if (Queue* q = find_queue(out.queue)) {
      if (Result<MessageRecord> m = q->Get(out.id); m.ok()) out.version = m->version;
    }
  }
  return results;
}

}  // namespace sundial
