// Queue: one named queue's messages and indexes. Internal to engine/; Engine (engine.cc) owns
// queues, holds the shard lock around every call and validates input before calling.
//
// Structures (docs/engine.md):
//  - store_: every message's record (MessageStore: chunks of fixed-size slots; a message is
//    named by its 32-bit MessageRef everywhere else).
//  - ids_: every message, by id (IdTable: open addressing over refs, hashing the inline id).
//  - ready_: indexed heap ordered by (priority, seq). Simple queues: every pending message.
//    Gated queues (exclusive, or a flow_key): only the first pending message of each flow-key
//    value that is not held (running < its concurrency N; exclusive: N = 1).
//  - gate_ (gated queues only; engine/key_gate.h): per flow-key value, its pending messages
//    and its running count. Messages of a held value stay out of ready_, so a dequeue never
//    meets them: its cost does not depend on how many are blocked.
//  - filters_: per (key, value) present in some message, an indexed heap of the pending
//    messages carrying it and their count per state (count-by-filter without a scan).
//  - timers_: indexed heap ordered by (due_at, seq) of every non-pending message: visibility,
//    lease expiry, retention. Its entries hold the due time and lease token (message.h). A
//    waiting message's entry is {kWaitingDueAt, the visible_at it takes when released (0:
//    none)}: never due, and the visible_at costs no field of its own.
//  - expiry_: the pending and invisible messages that have a ttl, by expires_at
//    (engine/expiry.h); Advance cancels the due ones, and a dequeue never leases one.
//  - held_: the timers of terminal messages whose retention ran out while a waiting dependent
//    held them (docs/engine.md, "Dependencies"), by seq, out of timers_ (their slot is
//    kNoSlot): disarmed, their due time unchanged, until RearmHeld puts them back. Whether a
//    timer is armed is not state: it is not in the digest, effects or snapshots (a replay keeps
//    it armed, and its next Advance disarms it the same way).
// Every state change goes through Detach (leave the old state's structures) and Attach (enter
// the new one's), which also keep the per-state counters exact.
//
// Thread safety: none; REQUIRES the shard lock (and the dead-letter queue's shard lock when a
// `dead_letter` queue is passed).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "engine/effect.h"
#include "engine/expiry.h"
#include "engine/history.h"
#include "engine/id_table.h"
#include "engine/indexed_heap.h"
#include "engine/message.h"
#include "engine/message_store.h"
#include "engine/message_texts.h"
#include "engine/types.h"

namespace sundial {

// a + b, clamped to the range of TimeMs (a delay or ttl added to now: queue.cc, queue_expiry.cc).
inline TimeMs SaturatingAdd(TimeMs a, int64_t b) {
  TimeMs out;
  if (__builtin_add_overflow(a, b, &out)) return b > 0 ? INT64_MAX : INT64_MIN;
  return out;
}

// Splitmix64-seeded xoshiro256**: lease tokens, generated ids, backoff jitter. One per shard.
class Random {
 public:
  explicit Random(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, 1).
  double NextUnit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_[4];
};

// Transparent string hashing for maps keyed by std::string and looked up by string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const;
};

class Queue;
class KeyGate;

// What a queue reports to the engine about messages in its DependencyGraph (message.h
// in_graph; engine/dependencies.h). Implemented by Engine. Every call REQUIRES every shard's
// lock: an operation that may reach such a message asks Queue::NeedsEveryShard first and the
// engine takes them all (docs/engine.md, "Dependencies", lock order).
class DependencyHooks {
 public:
  virtual ~DependencyHooks() = default;
  // Message `id` of `queue` left state `from` for terminal state `to` (by a request or a timer).
  virtual void OnTerminal(Queue& queue, std::string_view id, MessageState from, MessageState to,
                          TimeMs now) = 0;
  // Retention of message `id` ran out: true keeps it (a waiting dependent still holds it),
  // false lets it go (its node is forgotten).
  virtual bool KeepOnRemoval(Queue& queue, std::string_view id) = 0;
  // Message `id` (state `from`) failed its last attempt and moved to `queue`'s dead-letter
  // queue: it is gone from `queue`, as an errored dependency.
  virtual void OnDeadLettered(Queue& queue, std::string_view id, MessageState from, TimeMs now) = 0;
};

// A message of the dependency graph that left its queue without a terminal state there
// (purge, delete_queue): its id and the state it had.
struct RemovedFromQueue {
  std::string id;
  MessageState state = MessageState::kPending;
};

// What a queue needs from the engine. Owned by Engine; shared by all queues.
struct QueueEnvironment {
  EffectSink* sink = nullptr;
  DependencyHooks* dependencies = nullptr;
};

// The timer of a waiting message: never due (it leaves the state only by its dependencies).
inline constexpr TimeMs kWaitingDueAt = INT64_MAX;

// Heap entries: small values naming a record by its 32-bit MessageRef. Ties on the key are
// broken by the records' enqueue sequence (a read of the record, needed only on a tie).
#pragma pack(push, 4)
struct ReadyEntry {  // ready heap and the key gate's per-value heaps: 12 bytes
  int64_t priority;
  MessageRef ref;
};
struct TimerEntry {  // timer heap: 20 bytes; the due time and the lease token live only here
  TimeMs due_at;
  uint64_t token;
  MessageRef ref;
};
#pragma pack(pop)
#pragma pack(push, 2)
struct FilterEntry {  // filter heaps: the record and which of its metadata pairs (6 bytes)
  MessageRef ref;
  uint16_t pair;
};
#pragma pack(pop)

struct ReadyTraits {
  const MessageStore* store;
  bool Less(const ReadyEntry& a, const ReadyEntry& b) const {
    if (a.priority != b.priority) return a.priority < b.priority;
    return store->At(a.ref)->seq < store->At(b.ref)->seq;
  }
  uint32_t& Slot(const ReadyEntry& e) const { return store->At(e.ref)->slot; }
};
struct KeyHeapTraits : ReadyTraits {  // KeyGate's KeyHeaps: the record's key_slot
  uint32_t& Slot(const ReadyEntry& e) const { return store->At(e.ref)->key_slot(); }
};
struct TimerTraits {
  const MessageStore* store;
  bool Less(const TimerEntry& a, const TimerEntry& b) const {
    if (a.due_at != b.due_at) return a.due_at < b.due_at;
    return store->At(a.ref)->seq < store->At(b.ref)->seq;
  }
  uint32_t& Slot(const TimerEntry& e) const { return store->At(e.ref)->slot; }
};
struct FilterTraits {
  const MessageStore* store;
  bool Less(const FilterEntry& a, const FilterEntry& b) const {
    const Message* x = store->At(a.ref);
    const Message* y = store->At(b.ref);
    return x->priority != y->priority ? x->priority < y->priority : x->seq < y->seq;
  }
  uint32_t& Slot(const FilterEntry& e) const { return store->At(e.ref)->filter_slot(e.pair); }
};
using ReadyHeap = IndexedHeap<ReadyEntry, ReadyTraits>;

// The ready heap of a queue, on 8-byte entries {priority - base, ref} while every priority it
// holds is within 2^31 of a base (deadlines in ms within 24 days of each other, small
// integers: a deep queue's usual case), else on the 12-byte entries of ReadyHeap. The first
// priority that does not fit converts the heap in O(n) (positions and slots unchanged: the
// order is the same); an empty heap starts narrow again with a new base.
class ReadyIndex {
 public:
  explicit ReadyIndex(const MessageStore* store) : narrow_(NarrowTraits{store}), wide_({store}) {}

  bool empty() const { return wide_keys_ ? wide_.empty() : narrow_.empty(); }
  size_t size() const { return wide_keys_ ? wide_.size() : narrow_.size(); }
  MessageRef top_ref() const { return wide_keys_ ? wide_.top().ref : narrow_.top().ref; }
  size_t capacity_bytes() const { return narrow_.capacity_bytes() + wide_.capacity_bytes(); }
  bool wide_keys() const { return wide_keys_; }

  void Push(const ReadyEntry& e) {
    if (!wide_keys_) {
      if (narrow_.empty()) base_ = e.priority;
      int64_t delta;
      if (!__builtin_sub_overflow(e.priority, base_, &delta) && delta >= INT32_MIN &&
          delta <= INT32_MAX) {
        narrow_.Push({static_cast<int32_t>(delta), e.ref});
        return;
      }
      Widen();
    }
    wide_.Push(e);
  }
  void Remove(uint32_t slot) {
    if (!wide_keys_) {
      narrow_.Remove(slot);
      return;
    }
    wide_.Remove(slot);
    if (wide_.empty()) wide_keys_ = false;  // the next push picks a new base
  }
  void BeginUnordered() {
    narrow_.BeginUnordered();
    wide_.BeginUnordered();
  }
  void Heapify() {
    narrow_.Heapify();
    wide_.Heapify();
  }
  void Clear() {
    narrow_.Clear();
    wide_.Clear();
    wide_keys_ = false;
  }

 private:
#pragma pack(push, 4)
  struct NarrowEntry {
    int32_t key;  // priority - base_
    MessageRef ref;
  };
#pragma pack(pop)
  struct NarrowTraits {
    const MessageStore* store;
    bool Less(const NarrowEntry& a, const NarrowEntry& b) const {
      if (a.key != b.key) return a.key < b.key;
      return store->At(a.ref)->seq < store->At(b.ref)->seq;
    }
    uint32_t& Slot(const NarrowEntry& e) const { return store->At(e.ref)->slot; }
  };
  void Widen();

  IndexedHeap<NarrowEntry, NarrowTraits> narrow_;
  ReadyHeap wide_;
  int64_t base_ = 0;
  bool wide_keys_ = false;
};
using TimerHeap = IndexedHeap<TimerEntry, TimerTraits>;
using FilterHeap = IndexedHeap<FilterEntry, FilterTraits>;

class Queue {
 public:
  // `shard_bytes`: the accounted bytes of the queue's shard, written only under the shard lock
  // (a plain load and store: no locked instruction on the hot path), read by anyone.
  Queue(std::string name, QueueSettings settings, const QueueEnvironment* env,
        std::atomic<uint64_t>* shard_bytes);
  ~Queue();
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  const std::string& name() const { return name_; }
  const QueueSettings& settings() const { return settings_; }
  // A new key_concurrency applies at once (held keys below it come back; keys at or above it
  // are held while their running ones finish). flow_key and type are fixed at creation.
  void set_settings(const QueueSettings& s);
  const StateCounts& counts() const { return counts_; }
  uint64_t memory_bytes() const { return memory_bytes_; }
  // Bytes the queue's structures hold (records, large payloads, indexes), whatever they carry.
  uint64_t allocated_bytes() const;
  bool exclusive() const { return settings_.type == QueueType::kExclusive; }
  // Exclusive, or a simple queue with a flow_key: its pending messages go through the key gate.
  bool gated() const { return exclusive() || !settings_.flow_key.empty(); }
  // The metadata key of the gate (exclusive: the exclusivity_key) and its concurrency N.
  const std::string& gate_key() const {
    return exclusive() ? settings_.exclusivity_key : settings_.flow_key;
  }
  uint32_t gate_limit() const { return exclusive() ? 1 : settings_.key_concurrency; }
  QueueInfo Info(TimeMs now) const;
  // The earliest timer, expiry, or a throttled key's token refill (key_rate_per_s).
  TimeMs NextDueTime() const;
  // A dequeue's first step (unless dequeue is paused): expires the messages whose ttl ran out
  // by `now`, up to one in the dependency graph; true when such a one is left, whose expiry
  // needs every shard's lock (the caller then dequeues with every_shard_locked).
  bool ExpireBeforeDequeue(TimeMs now) {
    return !settings_.dequeue_paused && !ExpireDue(now, /*every_shard_locked=*/false);
  }
  bool Contains(std::string_view id) const { return Find(id) != kNoRef; }
  // The enqueue of `item` would release the terminal message of its id (dedupe while_active:
  // docs/semantics.md, "Releasing ids: dedupe while_active"): not one in the dependency graph,
  // nor one the item depends on (its depends_on resolved to "queue/id").
  bool Releases(const EnqueueItem& item) const;
  // The same, with the message of the item's id already looked up (kNoRef: none).
  bool Releases(const EnqueueItem& item, MessageRef existing) const;
  // Brings the id table's group for `id` into cache (a lookup of it is coming).
  void PrefetchId(std::string_view id) const { ids_.Prefetch(IdTable::Hash(id)); }

  // Operations. Input has been validated by Engine (limits, UTF-8, queue name, batch size).
  // `dead_letter`: the dead-letter queue when it exists (its shard locked), else nullptr.
  // `budget_exhausted`: the status to return when the memory budget refuses the message.
  Result<EnqueueResult> Enqueue(const EnqueueItem& item, TimeMs now, Random* rng,
                                uint64_t memory_budget, uint64_t memory_used,
                                const Status& budget_exhausted);
  // A batch's callback (docs/semantics.md, "Batches"): enqueued as Enqueue does, but neither
  // enqueue_paused nor max_depth nor the memory budget refuse it; its effects are derived
  // (`emit`) or not reported (replay).
  Result<EnqueueResult> EnqueueCallback(const EnqueueItem& item, TimeMs now, Random* rng,
                                        bool emit);
  // A node of a flow (docs/semantics.md, "Flows"), whose enqueue_paused, max_depth and memory
  // budget the flow has checked for all its nodes together: enqueued as Enqueue does, without
  // checking them again (a waiting node is not refused by max_depth).
  Result<EnqueueResult> EnqueueFlowNode(const EnqueueItem& item, TimeMs now, Random* rng);
  // A flow's resent root, whose id exists: answered as Enqueue answers an existing id
  // (duplicate or ALREADY_EXISTS), never released by dedupe while_active.
  Result<EnqueueResult> EnqueueResend(const EnqueueItem& item, TimeMs now, Random* rng) {
    resend_ = true;
    Result<EnqueueResult> r = Enqueue(item, now, rng, 0, 0, Status::Ok());
    resend_ = false;
    return r;
  }
  // Expires the messages whose ttl ran out first (docs/semantics.md, "Expiry"); one in the
  // dependency graph only when `every_shard_locked`, else the dequeue stops before it.
  std::vector<MessageRecord> Dequeue(const DequeueRequest& request, TimeMs now, Random* rng,
                                     bool every_shard_locked = false);
  Status Complete(const CompleteItem& item, TimeMs now);
  // What `wait` reports of message `id` (NOT_FOUND when it is not in this queue).
  Result<MessageOutcome> Outcome(std::string_view id) const;
  Result<FailResult> Fail(const FailRequest& request, TimeMs now, Random* rng, Queue* dead_letter);
  Result<TimeMs> Extend(std::string_view id, uint64_t token, int64_t lease_ms, TimeMs now);
  Status Cancel(std::string_view id, TimeMs now);
  uint64_t CancelByFilter(const Filter& filter, TimeMs now);
  Result<uint64_t> Reprioritize(std::string_view id, const ReprioritizeRequest& r, TimeMs now);
  uint64_t ReprioritizeByFilter(const Filter& filter, const ReprioritizeRequest& r, TimeMs now);
  Status Redrive(std::string_view id, TimeMs now);
  uint64_t RedriveByFilter(const Filter& filter, TimeMs now);
  // Removes the messages whose state is in `state_mask`. Those of the dependency graph are
  // appended to *removed_in_graph (if set; the engine tells the graph, engine.h).
  uint64_t Purge(uint8_t state_mask, TimeMs now, bool emit,
                 std::vector<RemovedFromQueue>* removed_in_graph = nullptr);
  // Processes timers due at or before `now`. Stops early (returning false) when a message must
  // move to `dead_letter_name` but `dead_letter` is null though that queue may exist: the caller
  // then retries with the dead-letter queue locked. Adds the transitions made to *count.
  // Likewise when a due timer concerns a message in the dependency graph and not
  // `every_shard_locked` (the caller retries with every shard locked).
  bool Advance(TimeMs now, Queue* dead_letter, bool dead_letter_missing, bool every_shard_locked,
               uint64_t* count);

  Result<MessageRecord> Get(std::string_view id) const;
  // History (docs/semantics.md, "History"; engine/history.h): message `id`'s entries, and a
  // worker's note under its lease (FAILED_PRECONDITION when the queue's history is off).
  Result<MessageHistory> History(std::string_view id) const;
  Status Note(std::string_view id, uint64_t token, std::string_view text, TimeMs now);
  Result<BrowsePage> Browse(const BrowseRequest& request) const;
  StateCounts Count(const Filter& filter) const;
  Result<Explanation> Explain(std::string_view id) const;
  Explanation ExplainFilter(const Filter& filter) const;

  // ---- Dependencies (engine/dependencies.h; the engine holds every shard's lock) ------------
  // True when an operation on message `id` may reach the dependency graph (it is in it).
  bool NeedsEveryShard(std::string_view id) const;
  // True when some message of this queue is in the graph (delete, purge).
  bool HasGraphMessages() const { return graph_messages_ > 0; }
  // Every message of this queue in the graph (delete_queue).
  std::vector<RemovedFromQueue> GraphMessages() const;
  // Message `id` restated unchanged: a kMessageChanged with its current fields, cause kNone,
  // at its updated_at (the snapshot's carrier of a dependent's graph entry, effect.h). Views
  // into the queue: valid while the shard lock is held. False when there is no such message.
  bool Restate(std::string_view id, Effect* out) const;
  // Marks message `id` (which exists) as in the graph; returns its state.
  MessageState JoinGraph(std::string_view id);
  // waiting -> pending, or invisible until the visible_at it was enqueued with (a derived
  // effect, cause kReleased, when `emit`).
  Status ReleaseWaiting(std::string_view id, TimeMs now, bool emit);
  // The last waiting dependent holding message `id` stopped waiting: if Advance disarmed its
  // timer (retention ran out while held), it is armed again at its unchanged due time, so the
  // next Advance removes it. No-op otherwise.
  void RearmHeld(std::string_view id);
  // waiting -> `to` (canceled or errored) with last_error `reason` (derived, kDependencyFailed).
  Status FailWaiting(std::string_view id, MessageState to, std::string_view reason, TimeMs now,
                     bool emit);

  // Removes every message (delete_queue).
  void Clear();

  // Replay (Engine::Apply) and snapshot export.
  Status ApplyEnqueued(const Effect& e);
  Status ApplyChanged(const Effect& e);
  Status ApplyRemoved(const Effect& e);
  Status ApplyNoted(const Effect& e);
  Status ApplyKeyState(const Effect& e);  // kKeyStateRestated (snapshots)
  // kKeyLimitsSet: a flow-key value's overrides (set_key_limits, or a snapshot's restatement).
  Status ApplyKeyLimits(const Effect& e);
  // After a dequeue of a rated queue: a kQueueReady (derived) when keys its lazy refill readied
  // are still dequeueable (`dequeueable`), and one with due_at when the earliest refill moved
  // earlier than `next_refill_before` (the timer thread sleeps on NextDueTime).
  void NoteReady(bool dequeueable, TimeMs next_refill_before, TimeMs now);
  // Moves message `id` to `dead_letter` as described by `e` (a kMessageDeadLettered).
  Status ApplyDeadLettered(const Effect& e, Queue* dead_letter);
  void Export(EffectSink* visit) const;
  // Export's and HashInto's flow-control parts (queue_limits.cc): the per-key limits (before the
  // messages), the token buckets (after them), and their digest.
  void ExportKeyLimits(EffectSink* visit) const;
  void ExportBuckets(EffectSink* visit) const;
  void HashFlowInto(void* xxh3_state) const;

  // Per-key limits (docs/semantics.md, "Per-key limits"); the queue must be gated.
  // Checks an override against the queue's settings: INVALID_ARGUMENT or RESOURCE_EXHAUSTED.
  Status CheckKeyLimits(std::string_view value, const KeyLimits& limits) const;
  void SetKeyLimits(std::string_view value, const KeyLimits& limits);
  // The kKeyLimitsSet of a value's overrides at `time` (set_key_limits' log, a snapshot's).
  Effect KeyLimitsEffect(std::string_view value, const KeyLimits& limits, TimeMs time) const;
  KeyInfo DescribeKey(std::string_view value, TimeMs now) const;
  // The first `limit` keys in `order` (present keys and overridden values).
  std::vector<KeyInfo> ListKeys(KeyOrder order, size_t limit, TimeMs now) const;
  void HashInto(void* xxh3_state) const;  // XXH3_state_t*

  // Bulk load (recovery): between BeginBulk and EndBulk only the Apply* calls, Purge and Clear
  // may be made. The heaps are kept unordered (O(1) per change) and exclusive queues do not
  // track which key heads are ready; EndBulk heapifies everything in O(n) and rebuilds the
  // ready keys and the blocked count.
  void BeginBulk();
  void EndBulk();

 private:
  // A message's timer: its due time and lease token (zero for a pending message).
  struct Timing {
    TimeMs due_at = 0;
    uint64_t token = 0;
  };
  struct PairIndex {
    explicit PairIndex(const MessageStore* store) : pending(FilterTraits{store}) {}
    FilterHeap pending;
    std::array<uint64_t, kStateCount> counts{};
    bool unused() const {
      for (uint64_t c : counts)
        if (c) return false;
      return true;
    }
  };
  struct PairKey {
    std::string key, value;
  };
  struct PairView {
    std::string_view key, value;
  };
  struct PairHash {
    using is_transparent = void;
    size_t operator()(const PairView& p) const;
    size_t operator()(const PairKey& p) const { return (*this)(PairView{p.key, p.value}); }
  };
  struct PairEqual {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return a.key == b.key && a.value == b.value;
    }
  };

  Message* At(MessageRef ref) const { return store_.At(ref); }
  // The message `id` whose lease is `token`: through lease_hints_ when it remembers the lease
  // (no hash lookup: Complete, Fail and Extend of a recent lease), else Find(id).
  MessageRef FindLeased(std::string_view id, uint64_t token) const;
  void RememberLease(MessageRef ref, uint64_t token);
  // version and updated_at (message.h: narrow in the record, or in wide_).
  uint64_t VersionOf(MessageRef ref, const Message* m) const {
    return m->wide() ? wide_.find(ref)->second.version : m->version32;
  }
  TimeMs UpdatedAtOf(MessageRef ref, const Message* m) const {
    return m->wide() ? wide_.find(ref)->second.updated_at
                     : m->enqueued_at + static_cast<TimeMs>(m->updated_delta);
  }
  // Sets both (REQUIRES: enqueued_at is set).
  void Stamp(MessageRef ref, uint64_t version, TimeMs updated_at);
  MessageRef Find(std::string_view id) const { return ids_.Find(id); }
  Timing TimingOf(const Message* m) const;
  Status CheckLease(const Message* m, uint64_t token, TimeMs now) const;

  // Structure maintenance. Detach removes the message from the structures of its state and its
  // counters; Attach inserts it into those of its state (timer: `timing`) and counts it.
  void Detach(MessageRef ref);
  void Attach(MessageRef ref, Timing timing);
  void AttachPairs(MessageRef ref, bool pending);
  void DetachPairs(MessageRef ref, bool pending);

  // A transition: BeginChange detaches the message and returns its state (and its timing in
  // *old); the caller sets the fields; FinishChange sets state, version and updated_at,
  // re-attaches with `timing` and emits the effect. `ended_lease`: the token of the lease a
  // change from running ends (for its history entry; RecordHistory).
  MessageState BeginChange(MessageRef ref, Timing* old = nullptr);
  void FinishChange(MessageRef ref, MessageState from, MessageState to, TimeMs now,
                    ChangeCause cause, Timing timing, std::string_view worker_id = {},
                    uint64_t ended_lease = 0);
  // A transition to terminal state `to`, its retention timer armed; with retention 0 and the
  // message outside the dependency graph it is removed at once instead (its kMessageRemoved
  // follows the change; `ref` is then invalid).
  void MakeTerminal(MessageRef ref, MessageState to, TimeMs now, ChangeCause cause);
  void MoveToDeadLetter(MessageRef ref, Queue* dead_letter, uint64_t seq, uint64_t version,
                        uint32_t max_attempts, std::string_view error, TimeMs now, bool emit);
  bool CanEnter(const Message* m) const;
  // Errored, or moved to `dead_letter` (returns true) when the rules allow.
  bool ErrorOrDeadLetter(MessageRef ref, TimeMs now, ChangeCause cause, Queue* dead_letter);
  // A new record (id not present; `hash` is IdTable::Hash(id)), counted in memory_bytes_;
  // `expires_at` 0: no ttl (no room for one in the record).
  MessageRef Insert(std::string_view id, uint64_t hash, std::string_view payload,
                    std::string_view packed_metadata, uint32_t pair_count, TimeMs expires_at = 0);
  // Debounce: a new record for detached message `ref` with this payload and metadata, every
  // other field (id, state, seq, version, times, expiry, error, history, graph) kept; `ref` is
  // freed. Returns the new ref (not attached).
  MessageRef Rewrite(MessageRef ref, std::string_view payload, std::string_view packed_metadata);
  // The enqueue of `item` met pending or invisible message `ref` with debounce_ms: replaces its
  // payload and metadata and pushes its visible_at (cause kDebounced).
  Result<EnqueueResult> Debounce(MessageRef ref, const EnqueueItem& item, TimeMs now,
                                 uint64_t memory_budget, uint64_t memory_used,
                                 const Status& budget_exhausted);
  // Pending or invisible message `ref` whose ttl ran out: canceled, last_error "expired".
  void Expire(MessageRef ref, TimeMs now);
  // Expires every message due by `now`; stops (returning false) at one in the dependency
  // graph unless `every_shard_locked`. Adds the transitions to *count when given.
  bool ExpireDue(TimeMs now, bool every_shard_locked, uint64_t* count = nullptr);
  void Erase(MessageRef ref);
  void SetError(MessageRef ref, std::string_view error);
  std::string_view ErrorOf(const Message* m, MessageRef ref) const {
    return m->has_error() ? errors_.Get(ref) : std::string_view();
  }
  // A completed message's result, counted in memory_bytes_.
  void SetResult(MessageRef ref, std::string_view result);
  std::string_view ResultOf(const Message* m, MessageRef ref) const {
    return m->has_result() ? results_.Get(ref) : std::string_view();
  }
  // Bytes the memory budget counts for the message (engine.h): its record's strings and its
  // result.
  uint64_t AccountedBytes(MessageRef ref, const Message* m) const;
  // An effect of `type` carrying the message's current fields (from = to = its state).
  Effect MessageEffect(EffectType type, MessageRef ref, TimeMs time) const;
  // Reports the change to the sink (unless silenced) and records it in the history: the one
  // way a live change reaches both.
  void Emit(EffectType type, ChangeCause cause, MessageState from, MessageRef ref, TimeMs now,
            std::string_view dead_letter_queue = {}, std::string_view worker_id = {},
            uint64_t ended_lease = 0);
  // The history entry effect `e` makes for message `ref` (none when the queue's history is
  // off), counted in memory_bytes_. An entry that ends a lease (from running, no token in the
  // effect: a fail, an expiry, a cancel, a dead-letter move) names `ended_lease`, that lease's
  // token, when given: its leased entry may not be in the history (recorded while history was
  // off), so the history's own latest lease may be another one (docs/semantics.md, "History").
  void RecordHistory(MessageRef ref, const Effect& e, uint64_t ended_lease = 0);
  // `ref`'s history block (empty: none); `buffer` holds it when it is implicit (message.h).
  std::string_view HistoryBlock(MessageRef ref, const Message* m,
                                EnqueuedBlockBuffer& buffer) const;
  // Gives a new record `ref` the history `block` (a snapshot's, a rewritten record's): implicit
  // when it is an enqueue alone at the record's enqueued_at.
  void RestoreHistory(MessageRef ref, std::string_view block);
  void AddMemoryBytes(int64_t delta) {
    memory_bytes_ = static_cast<uint64_t>(static_cast<int64_t>(memory_bytes_) + delta);
    AddShardBytes(delta);
  }

  // Selection.
  bool Matches(const Message* m, const Filter& filter) const;
  bool Blocked(const Message* m) const;
  // A pending message held back by the gate: counts it in out's blocked and its reason.
  void CountBlocked(const Message* m, StateCounts* out) const;
  // A pending message whose key is held: why (kExclusivityHeld / kKeyConcurrency, the value,
  // the running lease that ends first).
  void ExplainHeld(const Message* m, Explanation* x) const;
  const PairIndex* MostSelective(const Filter& filter) const;
  MessageRef SelectPending(const Filter& filter) const;
  // Fair share's choice for an unfiltered dequeue (an overdue message first, then the head of
  // the key whose turn it is: *in_turn); a filtered one is SelectPending's.
  MessageRef SelectFair(const Filter& filter, TimeMs now, bool* in_turn);
  // Every message matching `filter`, in (priority, seq) order when `sorted`.
  std::vector<MessageRef> Matching(const Filter& filter, bool sorted) const;
  bool PriorityOrder(MessageRef a, MessageRef b) const;

  MessageRecord Record(MessageRef ref) const;

  std::string name_;
  QueueSettings settings_;
  const QueueEnvironment* env_;
  std::atomic<uint64_t>* shard_bytes_;
  void AddShardBytes(int64_t delta) {
    shard_bytes_->store(shard_bytes_->load(std::memory_order_relaxed) + delta,
                        std::memory_order_relaxed);
  }
  uint64_t next_seq_ = 1;
  StateCounts counts_;
  uint64_t memory_bytes_ = 0;
  uint64_t large_bytes_ = 0;  // payloads stored apart
  bool bulk_ = false;
  uint64_t graph_messages_ = 0;  // records with in_graph set
  bool emit_derived_ = false;    // Emit marks its effects derived (ReleaseWaiting, FailWaiting)
  bool silenced_ = false;        // Emit reports nothing (derived changes replayed by Apply)
  bool forced_ = false;          // Enqueue ignores pause and max_depth (EnqueueCallback, flows)
  bool resend_ = false;          // Enqueue never releases an id (EnqueueResend)
  // While alive, effects are derived (`emit`) or not reported at all (replay: !emit).
  class DerivedEmission {
   public:
    DerivedEmission(Queue* q, bool emit) : q_(q) {
      q_->emit_derived_ = true;
      q_->silenced_ = !emit;
    }
    ~DerivedEmission() {
      q_->emit_derived_ = false;
      q_->silenced_ = false;
    }
    DerivedEmission(const DerivedEmission&) = delete;
    DerivedEmission& operator=(const DerivedEmission&) = delete;

   private:
    Queue* q_;
  };

  MessageStore store_;  // declared first among the structures: they point into it
  IdTable ids_{&store_};
  ReadyIndex ready_{&store_};
  TimerHeap timers_{TimerTraits{&store_}};
  ExpiryHeap expiry_{&store_};
  std::unique_ptr<KeyGate> gate_;  // gated queues only
  // The queue-wide bucket (rate_milli, burst): GCRA like a key's (engine/key_gate.h). tat is
  // state (changed only by grants: live dequeue, replay of cause leased; restated by
  // snapshots); queue_refill_ms_ (0: not throttled) is soft: set when a dequeue found no token.
  int64_t queue_tat_us_ = 0;
  TimeMs queue_refill_ms_ = 0;
  // Dequeues held back by a bucket: they found the queue's bucket empty with a message ready,
  // or a key out of tokens, or returned fewer than asked while values were out of tokens
  // (blocked_rate). A plain statistic for metrics: never hashed, logged or restated.
  uint64_t throttled_dequeues_ = 0;
  int64_t QueueIntervalUs() const;
  int64_t QueueTokenFromUs() const;
  void QueueGranted(TimeMs at);
  // The earliest refill (a throttled key's or the queue bucket's), INT64_MAX when none.
  TimeMs NextRefill() const;
  std::unordered_map<PairKey, PairIndex, PairHash, PairEqual> filters_;
  MessageTexts errors_;         // last_error (not counted in the memory budget)
  MessageTexts results_;        // completed messages' results (counted)
  MessageHistories histories_;  // per-message history blocks (counted)
  struct WideFields {
    uint64_t version;
    TimeMs updated_at;
  };
  boost::unordered_flat_map<MessageRef, WideFields> wide_;
  boost::unordered_flat_map<uint64_t, Timing> held_;  // disarmed timers, by seq (top of file)
  // Recent leases by token (a direct-mapped cache sized to the running messages): hints only.
  struct LeaseHint {
    uint64_t token = 0;
    MessageRef ref = kNoRef;
  };
  std::vector<LeaseHint> lease_hints_;
};

}  // namespace sundial
