// Flows (docs/semantics.md, "Flows"): a forest of messages across queues, each node's message
// waiting on all its children (and on whatever it lists in its own depends_on), enqueued by one
// request, atomically, and logged as one record.
//
// Engine::EnqueueFlow (flows.cc) runs under AllShardsLock: it checks every node first (limits
// below, names, ids, payloads, depends_on, the queues' pause, max_depth and the memory budget,
// duplicates), and only then enqueues the nodes, children before parents (post-order), so that
// either every new node is enqueued or none is. The effects it makes on its thread are caught by
// FlowCaptureSink (each copied: their views point into engine memory or the request) and reported
// as one kFlowEnqueued whose members are the non-derived ones, then each caught effect again as a
// derived one (subscribers see the messages; the log holds the group alone: effect.h).
//
// Thread safety: FlowCaptureSink::OnEffect may be called from any thread; a capture belongs to
// the thread that opened it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "engine/effect.h"
#include "engine/types.h"

namespace sundial {

// At most this many nodes in one flow, this deep (a root alone: depth 1), and this many bytes
// of queue names, ids, payloads, metadata and dependency keys in all: the flow's one log record
// stays far below the record limit (16 MiB; a record too large would poison the log).
inline constexpr size_t kMaxFlowNodes = 1000;
inline constexpr size_t kMaxFlowDepth = 32;
inline constexpr size_t kMaxFlowBytes = size_t{8} << 20;

// One node: its message (item.id empty: generated), in `queue`, waiting on its children.
struct FlowNode {
  std::string queue;
  EnqueueItem item;
  std::vector<FlowNode> children = {};
};

// A node's answer, in pre-order of the request's forest (a root, then its children's subtrees
// in order, then the next root).
struct FlowNodeResult {
  std::string queue;
  std::string id;
  uint64_t version = 0;  // 1 for a new message; a duplicate's current one (0: already removed)
  bool duplicate = false;
};

// A copy of an effect that owns what its views point to. Neither copyable nor movable (the
// effect points into the object).
class OwnedEffect {
 public:
  explicit OwnedEffect(const Effect& e);
  OwnedEffect(const OwnedEffect&) = delete;
  OwnedEffect& operator=(const OwnedEffect&) = delete;
  const Effect& effect() const { return effect_; }

 private:
  Effect effect_;
  std::string queue_, id_, payload_, packed_metadata_, error_, result_, dead_letter_queue_;
  std::string dependency_edges_, batch_;
  std::optional<QueueSettings> settings_;
  std::vector<std::string> depends_on_;
  std::optional<ScheduleSpec> schedule_;
};

// The engine's sink in front of the caller's: effects go on to `target`, except those made on
// a thread while a Capture of this sink is open there, which the Capture keeps.
class FlowCaptureSink final : public EffectSink {
 public:
  explicit FlowCaptureSink(EffectSink* target) : target_(target) {}
  void OnEffect(const Effect& effect) override;
  EffectSink* target() const { return target_; }

  // Open on this thread from construction to destruction (captures do not nest).
  class Capture {
   public:
    explicit Capture(FlowCaptureSink* sink);
    ~Capture();
    Capture(const Capture&) = delete;
    Capture& operator=(const Capture&) = delete;
    const std::deque<OwnedEffect>& effects() const { return effects_; }
    // Closes the capture, then reports to the target one kFlowEnqueued at `now` with the
    // non-derived effects caught as members, then every effect caught, in order, as derived.
    // Nothing when none was caught.
    void Report(TimeMs now);

   private:
    friend class FlowCaptureSink;
    FlowCaptureSink* sink_;
    Capture* previous_;
    bool open_ = true;
    std::deque<OwnedEffect> effects_;
  };

 private:
  EffectSink* const target_;
};

}  // namespace sundial
