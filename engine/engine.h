// Engine: Sundial's state machine. Named queues of messages, dequeued earliest-deadline-first
// under leases, with retries, dead-letter queues, exclusive keys and metadata filters
// (the rules: docs/semantics.md). No I/O: time comes from an injected Clock, every change of
// state is reported to an EffectSink (effect.h), and Apply replays those effects.
//
// Structure (docs/engine.md): queues live on `shards` shards chosen by xxHash of the name; each
// shard has its own mutex, so operations on queues of different shards never contend. Per queue:
// an id index, an indexed heap of ready messages ordered by (priority, enqueue sequence), a timer
// heap (visibility, lease expiry, retention), exclusive-value groups and metadata filter indexes.
//
// Complexity (n = messages in the queue): enqueue, dequeue, complete, fail, extend, cancel,
// reprioritize O(log n); exclusive dequeue independent of the number of blocked messages;
// one-pair filter dequeue O(log n); Advance O(k log n) for k due timers.
//
// Timers: invisible -> pending, lease expiry and retention GC happen when Advance(now) runs with
// now >= their due time (the server calls it every few ms). An operation never sees a lease as
// valid once its expiry time has passed, even before Advance processes it.
//
// Memory: each message is accounted as kMessageOverheadBytes + id + payload + packed metadata
// bytes (kMessageOverheadBytes is the measured cost of its record header and index entries,
// docs/engine.md "Memory"). When the total would exceed Options::memory_budget_bytes, enqueue
// is refused with RESOURCE_EXHAUSTED (the detail names the budget); dequeue, complete and every
// other operation keep working, and what they free makes room again. allocated_bytes() is what
// the structures really hold (records in their chunks, large payloads, indexes).
//
// Dependencies (docs/engine.md, "Dependencies"): one DependencyGraph for all queues, guarded by
// deps_mu_. Lock order: every shard's mutex in index order, then deps_mu_; deps_mu_ is only
// ever taken that way (AllShardsLock), so holding it means holding every shard. An operation
// that may reach a message in the graph (a message flagged in_graph: a waiting dependent or a
// dependency) finds out under its own shard's lock, lets it go and starts again under
// AllShardsLock: the release, cancel or error of its dependents happens in that same operation,
// under the same locks. Operations on messages outside the graph never take deps_mu_.
//
// Schedules (docs/semantics.md, "Schedules"): one ScheduleBook for all queues, guarded by
// schedules_mu_, which comes first in the lock order (before any shard): a fire enqueues its
// message and records the schedule's progress under it, so the two are one step.
// Batches (docs/engine.md, "Batches"; engine/batches.h): one BatchTable for all queues, guarded
// by batches_mu_, last in the lock order: AllShardsLock takes it after deps_mu_, and
// create_batch, get_batch and the GC of done batches take it alone (they touch no queue). A
// batch's members are flagged in_graph as dependencies are, so their terminal changes run
// under AllShardsLock and count into their batch in that same operation; the change that makes
// a batch done (the seal, the last member's) enqueues its callback as a derived effect.
//
// Thread safety: every public method may be called concurrently from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/batches.h"
#include "engine/clock.h"
#include "engine/dependencies.h"
#include "engine/effect.h"
#include "engine/flows.h"
#include "engine/mutex.h"
#include "engine/schedules.h"
#include "engine/status.h"
#include "engine/types.h"

namespace sundial {

class Queue;              // engine/queue.h
struct RemovedFromQueue;  // engine/queue.h

inline constexpr uint64_t kMessageOverheadBytes = 80;

class Engine {
 public:
  struct Options {
    size_t shards = 16;
    uint64_t memory_budget_bytes = 0;  // 0: unlimited
    size_t max_payload_bytes = 1 << 20;
    size_t max_result_bytes = kDefaultMaxResultBytes;  // a complete's result (--max-result-bytes)
    bool auto_create_queues = true;
    uint64_t seed = 0;  // lease tokens and generated ids; 0: seeded from the clock
  };

  // `clock` must outlive the engine. `sink` may be null (no effects reported).
  Engine(Options options, const Clock* clock, EffectSink* sink);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- Queues -------------------------------------------------------------------------------
  Result<QueueInfo> CreateQueue(std::string_view name, const QueueSettings& settings);
  Result<QueueInfo> UpdateQueue(std::string_view name, const QueueSettingsUpdate& update);
  Result<QueueInfo> GetQueue(std::string_view name) const;
  std::vector<QueueInfo> ListQueues() const;  // sorted by name
  // Per-key limits of a gated queue (docs/semantics.md, "Per-key limits"): set_key_limits
  // replaces the value's override whole (no field set: removes it) and returns the value as
  // get_key_limits then describes it. FAILED_PRECONDITION on a queue without a flow key.
  Result<KeyInfo> SetKeyLimits(std::string_view queue, std::string_view value,
                               const KeyLimits& limits);
  Result<KeyInfo> GetKeyLimits(std::string_view queue, std::string_view value) const;
  // The first `limit` (1-1000) keys by `order`: present keys and overridden values.
  Result<std::vector<KeyInfo>> ListKeys(std::string_view queue, KeyOrder order,
                                        uint32_t limit) const;
  Status DeleteQueue(std::string_view name);
  // Removes the messages in `states`; returns how many.
  Result<uint64_t> PurgeQueue(std::string_view name, const std::vector<MessageState>& states);

  // ---- Messages -----------------------------------------------------------------------------
  // Per item: the id, version and whether it was a duplicate of an existing identical message.
  // A queue-level error (bad name, not found) is returned for every item.
  std::vector<Result<EnqueueResult>> Enqueue(std::string_view queue,
                                             std::vector<EnqueueItem> items);
  // Up to request.max messages, now leased; empty when none is dequeueable or dequeue is paused.
  Result<std::vector<MessageRecord>> Dequeue(std::string_view queue, const DequeueRequest& request);
  // Each item's result (at most max_result_bytes, else INVALID_ARGUMENT) is stored with the
  // message until GC and counted in the memory budget; a complete is never refused for memory.
  std::vector<Status> Complete(std::string_view queue, const std::vector<CompleteItem>& items);
  // Complete-and-next (docs/semantics.md, "Complete-and-next"): completes `items` as Complete
  // does, then, under the same shard lock, dequeues `next` from the same queue as Dequeue does:
  // no other consumer runs between the two, so a completed exclusive value's next message can
  // go to this caller. The dequeue runs whatever the items' outcomes (a stale token does not
  // cost the worker its next job); a queue-level error (bad name, not found, bad `next`) is
  // returned for both and changes nothing.
  struct CompleteAndNextResult {
    std::vector<Status> completed;  // per item, as Complete
    Result<std::vector<MessageRecord>> next = std::vector<MessageRecord>{};  // as Dequeue
  };
  CompleteAndNextResult CompleteAndDequeue(std::string_view queue,
                                           const std::vector<CompleteItem>& items,
                                           const DequeueRequest& next);
  Result<FailResult> Fail(std::string_view queue, const FailRequest& request);
  // Returns the new lease_expires_at.
  Result<TimeMs> Extend(std::string_view queue, std::string_view id, uint64_t lease_token,
                        int64_t lease_ms);
  std::vector<Status> Cancel(std::string_view queue, const std::vector<std::string>& ids);
  // Cancels every invisible, pending or running message matching `filter` (1..4 pairs).
  Result<uint64_t> CancelByFilter(std::string_view queue, const Filter& filter);
  // Returns the new version.
  Result<uint64_t> Reprioritize(std::string_view queue, std::string_view id,
                                const ReprioritizeRequest& request);
  // Every invisible or pending message matching `filter` (1..4 pairs); returns how many.
  Result<uint64_t> ReprioritizeByFilter(std::string_view queue, const Filter& filter,
                                        const ReprioritizeRequest& request);
  // Errored -> pending with attempts 0. Per id: OK, NOT_FOUND or FAILED_PRECONDITION (not errored).
  std::vector<Status> Redrive(std::string_view queue, const std::vector<std::string>& ids);
  // Every errored message matching `filter` (empty: all); returns how many moved.
  Result<uint64_t> RedriveByFilter(std::string_view queue, const Filter& filter);

  Result<MessageRecord> Get(std::string_view queue, std::string_view id) const;
  // get with include_dependency_results: the outcome of each dependency `id` listed at enqueue,
  // in order, as "queue/id" keys (NOT_FOUND for one already removed by GC).
  Result<std::vector<std::pair<std::string, Result<MessageOutcome>>>> DependencyOutcomes(
      std::string_view queue, std::string_view id) const;
  // `wait`'s read: per id (1..1000) its state, result and last_error, or NOT_FOUND. The server
  // waits for them to be terminal (docs/semantics.md, "Results and waiting").
  std::vector<Result<MessageOutcome>> Outcomes(std::string_view queue,
                                               const std::vector<std::string>& ids) const;
  // History (docs/semantics.md, "History"): message `id`'s transitions, oldest first (empty
  // when its queue keeps none).
  Result<MessageHistory> History(std::string_view queue, std::string_view id) const;
  // A worker's note (1..kMaxNoteBytes of UTF-8) in the history of the message it holds under
  // `lease_token` (the lease checks of complete); FAILED_PRECONDITION when the queue's
  // history_max is 0. Logged as kMessageNoted.
  Status Note(std::string_view queue, std::string_view id, uint64_t lease_token,
              std::string_view text);
  Result<BrowsePage> Browse(std::string_view queue, const BrowseRequest& request) const;
  Result<StateCounts> Count(std::string_view queue, const Filter& filter) const;
  Result<Explanation> Explain(std::string_view queue, std::string_view id) const;
  Result<Explanation> ExplainFilter(std::string_view queue, const Filter& filter) const;

  // ---- Flows (docs/semantics.md, "Flows"; engine/flows.h) -----------------------------------
  // Enqueues the forest `roots` (each node's message waiting on its children) atomically: every
  // node is checked first and either every new node is enqueued or none. One answer per node,
  // in pre-order. An error names the node (`nodes[i]: ...`, i in pre-order) and changes
  // nothing. The effects are reported as one kFlowEnqueued (effect.h).
  Result<std::vector<FlowNodeResult>> EnqueueFlow(std::vector<FlowNode> roots);

  // ---- Schedules (docs/semantics.md, "Schedules") -------------------------------------------
  // Creates or replaces schedule (queue, name). A new one, or one whose timing (cron, tz,
  // every_ms) changes, starts from now: its first fire is the first after now. Otherwise its
  // progress (last fire, pause) is kept. INVALID_ARGUMENT for a bad name, timing or template;
  // NOT_FOUND when the queue does not exist and queues are not created on demand;
  // RESOURCE_EXHAUSTED past kMaxSchedules.
  Result<ScheduleUpsertResult> UpsertSchedule(std::string_view queue, std::string_view name,
                                              const ScheduleSpec& spec);
  // The same with the template's metadata given unpacked (checked against the limits of
  // docs/semantics.md, "Limits", then packed into spec.packed_metadata).
  Result<ScheduleUpsertResult> UpsertSchedule(std::string_view queue, std::string_view name,
                                              ScheduleSpec spec, const Metadata& metadata);
  Result<ScheduleInfo> GetSchedule(std::string_view queue, std::string_view name) const;
  // Every schedule of `queue` (empty: of every queue), by (queue, name).
  std::vector<ScheduleInfo> ListSchedules(std::string_view queue) const;
  Status DeleteSchedule(std::string_view queue, std::string_view name);
  // A paused schedule does not fire; resuming starts from now (fires while paused are not
  // made). Pausing a paused schedule, or resuming a running one, changes nothing.
  Result<ScheduleInfo> PauseSchedule(std::string_view queue, std::string_view name);
  Result<ScheduleInfo> ResumeSchedule(std::string_view queue, std::string_view name);
  // Fires it now (T = now), paused or not, whatever its overlap policy; its regular fires
  // go on as before.
  Result<ScheduleTriggerResult> TriggerSchedule(std::string_view queue, std::string_view name);
  // ---- Batches (docs/semantics.md, "Batches") ------------------------------------------------
  // A new open batch. Repeating it with the same callback and retention returns the batch as
  // it is now; with different ones ALREADY_EXISTS (also while a done batch is kept).
  Result<BatchInfo> CreateBatch(const CreateBatchRequest& request);
  // No more members may join (enqueue with this batch: FAILED_PRECONDITION). When no member is
  // active the batch is done at once and its callback enqueued. Repeating it is harmless.
  Result<BatchInfo> SealBatch(std::string_view id);
  Result<BatchInfo> GetBatch(std::string_view id) const;

  // ---- Leaderships (docs/replication.md, "Epochs") ------------------------------------------
  // A new primary's first record: logs kEpochStarted(epoch, lsn) — `lsn` being the LSN that
  // record takes, the log's appended end — and keeps it. FAILED_PRECONDITION unless `epoch` is
  // above every epoch kept.
  Status StartEpoch(uint64_t epoch, uint64_t lsn);
  // The epochs this state holds (its log's, snapshots included), oldest first.
  std::vector<EpochStart> Epochs() const;

  // ---- Time, replay, inspection -------------------------------------------------------------
  // Processes every timer due at or before `now`: visibility, lease expiry, retention GC, and
  // the schedules' fires (FireSchedules). Returns the number of transitions and fires made.
  uint64_t Advance(TimeMs now);
  // Makes every schedule fire due at or before `now` (misfire and overlap policies applied):
  // each fire's enqueue, then the schedule's kScheduleFired, in one call under the schedule
  // lock. Returns the number of fires that enqueued.
  uint64_t FireSchedules(TimeMs now);
  // Earliest due time of any timer or schedule fire, or INT64_MAX when none.
  TimeMs NextDueTime() const;
  // Applies one effect recorded from another engine (recovery). Reports nothing to the sink.
  // An effect that does not fit the current state gives INTERNAL and changes nothing.
  Status Apply(const Effect& effect);
  // Bulk load (recovery): between BeginBulkLoad and EndBulkLoad the caller makes only Apply
  // calls, from one thread. Indexes are filled unordered, O(1) per effect, and EndBulkLoad
  // orders them all in O(n) (heapify) instead of one sift per message.
  void BeginBulkLoad();
  void EndBulkLoad();
  // Applies `effects` in order, as Apply would one by one; stops at the first that does not
  // apply, returning its status with *applied = its index (all of them: *applied = size).
  // During a bulk load it reads ahead: the id-table slots of the next effects' messages are
  // prefetched so that their cache misses overlap instead of coming one at a time.
  Status ApplyBatch(const Effect* effects, size_t count, size_t* applied);
  // XXH3 over all state: queues by name, each with the sum of one hash per message (no sort;
  // docs/engine.md), the epochs, and the dependency graph when it has a dependent. Part of the
  // snapshot format (docs/wal-format.md, "Snapshots"). Two engines with the same queues,
  // messages and graph have the same digest.
  uint64_t Digest() const;
  // Calls `visit` with a snapshot-equivalent sequence of effects (kQueueCreated for every queue,
  // then kMessageEnqueued to rebuild each message, one shard at a time; then, under every
  // shard's lock, one restated kMessageChanged per dependent carrying its graph entry:
  // effect.h, dependency_edges). Applying them to an empty engine gives the same digest. Used
  // by checkpoints.
  void ExportState(EffectSink* visit) const;

  // Holds every engine lock, in the lock order (schedules_mu_, the shards, deps_mu_,
  // batches_mu_, then epochs_mu_), from construction until Release or destruction: while it
  // lives no operation changes the state and none emits an effect. Every effect is emitted
  // under one of these locks, so a log fed by this engine's sink has, meanwhile, an exact cut:
  // its next LSN is the first effect not in the state. A fork checkpoint (wal/checkpointer.h)
  // takes it for the instant of its fork(). The child, where only the forking thread lives,
  // Releases it and reads the engine as a quiescent one.
  class Freeze {
   public:
    explicit Freeze(const Engine* engine);
    ~Freeze() { Release(); }
    void Release();
    Freeze(const Freeze&) = delete;
    Freeze& operator=(const Freeze&) = delete;

   private:
    const Engine* engine_;  // null once released
  };

  // The shard that holds queue `name` (0 .. shard_count() - 1): queues of different shards
  // never contend.
  size_t ShardOf(std::string_view name) const;
  size_t shard_count() const { return shards_.size(); }
  uint64_t memory_bytes() const;
  uint64_t memory_budget_bytes() const { return options_.memory_budget_bytes; }
  // Bytes held by every queue's records and indexes (locks each shard in turn).
  uint64_t allocated_bytes() const;
  const Clock& clock() const { return *clock_; }

 private:
  struct Shard;
  struct Accounting;
  class DependencyBridge;
  friend class DependencyBridge;
  class AllShardsLock;

  Shard& ShardFor(std::string_view name) const;
  // A new queue `name` with `settings` (CreateQueue; an enqueue's auto-created queue with the
  // defaults), its creation announced to the sink. REQUIRES: shard.mu held, no queue of that
  // name, settings valid.
  Queue* AddQueue(Shard& shard, std::string_view name, const QueueSettings& settings, TimeMs now);
  // Locks the shard of queue `name`, then returns fn(queue, now, shard), or missing() when the
  // queue does not exist. The clock is read under the lock.
  template <typename R, typename Missing, typename Fn>
  R WithQueue(std::string_view name, Missing missing, Fn fn) const;
  // Complete's items on `q`. REQUIRES: q's shard locked.
  std::vector<Status> CompleteLocked(Queue& q, const std::vector<CompleteItem>& items,
                                     TimeMs now) const;
  // Whether some item names a message in the dependency graph (then the complete runs under
  // AllShardsLock). REQUIRES: q's shard locked.
  static bool AnyInGraph(const Queue& q, const std::vector<CompleteItem>& items);
  // Locks the shards of `a` and `b` (once when they share one) in index order.
  class PairLock;

  Options options_;
  Status budget_exhausted_;  // RESOURCE_EXHAUSTED naming the budget
  bool bulk_ = false;        // between BeginBulkLoad and EndBulkLoad
  const Clock* clock_;
  // The caller's sink behind the capture of flows' effects (flows.h); null with no sink.
  std::unique_ptr<FlowCaptureSink> flow_sink_;
  EffectSink* sink_;                        // flow_sink_ when there is one
  std::unique_ptr<Accounting> accounting_;  // outlives the shards' queues, which point into it
  // The log's epochs, oldest first. Their own lock: no queue's shard holds them.
  mutable Mutex epochs_mu_;
  std::vector<EpochStart> epochs_ GUARDED_BY(epochs_mu_);
  std::vector<std::unique_ptr<Shard>> shards_;
  // After the shards in the lock order (AllShardsLock).
  mutable Mutex deps_mu_;
  DependencyGraph deps_ GUARDED_BY(deps_mu_);
  // Schedules: their own lock, first in the lock order (a fire enqueues under it).
  mutable Mutex schedules_mu_;
  ScheduleBook schedules_ GUARDED_BY(schedules_mu_);
  // Whether any message ever joined the graph: until then Apply skips the graph's checks.
  std::atomic<bool> graph_used_{false};

  // Enqueue of items of which some name depends_on (under AllShardsLock).
  std::vector<Result<EnqueueResult>> EnqueueWithDependencies(std::string_view queue,
                                                             std::vector<EnqueueItem> items);
  // Registers the just-enqueued waiting message `key` with `item`'s dependencies (whose
  // `states` were read before) and applies what follows at once (released, canceled, errored).
  void AddDependent(const std::string& key, const EnqueueItem& item,
                    const std::vector<MessageState>& states, TimeMs now, bool emit)
      REQUIRES(deps_mu_, batches_mu_);
  // Message `key` went from `from` to the terminal state `to`: its dependents follow.
  void ProcessTerminal(const std::string& key, MessageState from, MessageState to, TimeMs now,
                       bool emit) REQUIRES(deps_mu_, batches_mu_);
  void ApplyDependencyActions(const std::vector<DependencyAction>& actions, TimeMs now, bool emit)
      REQUIRES(deps_mu_, batches_mu_);
  // Re-arms the GC timer of every dependency that lost its last holder (DependencyGraph::
  // TakeUnheld, Queue::RearmHeld): called at the end of every change of the graph that can make
  // a dependent stop waiting (AddDependent, ProcessTerminal, ProcessRemoved).
  void RearmUnheld() REQUIRES(deps_mu_);
  // Messages of the graph left `queue` without a terminal state there: purged or their queue
  // deleted (a dependency that had not finished acts as removed: its dependents' policies
  // apply), or, `dead_lettered`, moved to its dead-letter queue (as errored). Each is
  // forgotten by the graph.
  // They are taken in the order of their ids (a dependent's reason names the first).
  void ProcessRemoved(std::string_view queue, std::vector<RemovedFromQueue> removed,
                      bool dead_lettered, TimeMs now, bool emit) REQUIRES(deps_mu_, batches_mu_);
  // Replay of an effect that concerns the graph (under AllShardsLock).
  Status ApplyWithDependencies(const Effect& e);
  // Schedules (engine_schedules.cc).
  ScheduleInfo ScheduleInfoOf(const ScheduleBook::Entry& entry) const REQUIRES(schedules_mu_);
  void EmitSchedule(EffectType type, const ScheduleBook::Entry& entry, TimeMs now) const
      REQUIRES(schedules_mu_);
  // Makes the fires `fires` of `entry` and records them (kScheduleFired) with `after`
  // and `dropped` missed fires. `check_overlap`: the overlap policy applies.
  void MakeFires(const ScheduleBook::Entry& entry, const std::vector<TimeMs>& fires, TimeMs after,
                 uint64_t dropped, bool check_overlap, TimeMs now, uint64_t* enqueued,
                 bool* duplicate) REQUIRES(schedules_mu_);
  Status ApplySchedule(const Effect& e);
  void ExportSchedules(EffectSink* visit) const;

  // After the shards and deps_mu_ in the lock order (AllShardsLock), or alone.
  mutable Mutex batches_mu_ ACQUIRED_AFTER(deps_mu_);
  BatchTable batches_ GUARDED_BY(batches_mu_);
  // Message `key` stopped being active with `outcome`: when it was a batch's last active
  // member of a sealed batch, that batch is done (FinishBatch).
  void FinishMember(const std::string& key, BatchOutcome outcome, TimeMs now, bool emit)
      REQUIRES(deps_mu_, batches_mu_);
  // Batch `id` is done: marked so, and its callback enqueued (a derived effect when `emit`).
  void FinishBatch(const std::string& id, TimeMs now, bool emit) REQUIRES(deps_mu_, batches_mu_);
  // Replay of kBatchCreated, kBatchSealed, kBatchRemoved.
  Status ApplyBatchEffect(const Effect& e);
  // A snapshot's active member `e.id` of `q` (effect.h, batch).
  Status RestoreMember(Queue& q, const Effect& e) REQUIRES(deps_mu_, batches_mu_);
  // GC of done batches whose retention ran out (Advance).
  uint64_t RemoveDueBatches(TimeMs now);
  // A snapshot's entry of dependent `e.id` of `q` (effect.h, dependency_edges).
  Status RestoreDependent(Queue& q, const Effect& e) REQUIRES(deps_mu_);
};

}  // namespace sundial
