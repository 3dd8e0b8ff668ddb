// Queue: one named queue's messages and indexes. Internal to engine/; Engine (engine.cc) owns
// queues, holds the shard lock around every call and validates input before calling.
//
// Structures (docs/engine.md):
//  - by_id_: every message, by id (open addressing, 8 bytes per slot).
//  - ready_: indexed heap ordered by (priority, seq). Simple queues: every pending message.
//    Exclusive queues: only the first pending message of each value that is not leased.
//  - groups_ (exclusive only): per exclusivity value, an indexed heap of its pending messages
//    and the message holding its lease, if any. Messages of a leased value stay out of ready_,
//    so a dequeue never meets them: its cost does not depend on how many are blocked.
//  - filters_: per (key, value) present in some message, an indexed heap of the pending
//    messages carrying it and their count per state (count-by-filter without a scan).
//  - timers_: indexed heap ordered by (due_at, seq) of every non-pending message: visibility,
//    lease expiry, retention.
// Every state change goes through Detach (leave the old state's structures) and Attach (enter
// the new one's), which also keep the per-state counters exact.
//
// Thread safety: none; REQUIRES the shard lock (and the dead-letter queue's shard lock when a
// `dead_letter` queue is passed).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>
#include <boost/unordered/unordered_flat_set.hpp>

#include "engine/effect.h"
#include "engine/indexed_heap.h"
#include "engine/message.h"
#include "engine/types.h"

namespace sundial {

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

// What a queue needs from the engine. Owned by Engine; shared by all queues.
// Transparent string hashing for maps keyed by std::string and looked up by string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const;
};

struct QueueEnvironment {
  EffectSink* sink = nullptr;
};

struct HeapEntry {
  int64_t key;  // priority (ready/group heaps) or due time (timer heap)
  uint64_t seq;
  Message* message;
};
struct HeapEntryLess {
  bool operator()(const HeapEntry& a, const HeapEntry& b) const {
    return a.key != b.key ? a.key < b.key : a.seq < b.seq;
  }
};
struct ReadySlot {
  uint32_t& operator()(const HeapEntry& e) const { return e.message->ready_slot; }
};
struct GroupSlot {
  uint32_t& operator()(const HeapEntry& e) const { return e.message->group_slot; }
};
struct TimerSlot {
  uint32_t& operator()(const HeapEntry& e) const { return e.message->timer_slot; }
};
using ReadyHeap = IndexedHeap<HeapEntry, HeapEntryLess, ReadySlot>;
using GroupHeap = IndexedHeap<HeapEntry, HeapEntryLess, GroupSlot>;
using TimerHeap = IndexedHeap<HeapEntry, HeapEntryLess, TimerSlot>;

// A filter heap entry: the message and the index of the metadata pair the heap is for, packed
// in one word (x86-64 and AArch64 user-space addresses leave the top 16 bits zero), so that a
// heap of 8-byte entries can update filter_slots()[pair].
class FilterEntry {
 public:
  FilterEntry(Message* m, uint32_t pair);
  Message* message() const { return reinterpret_cast<Message*>(bits_ & kPointerMask); }
  uint32_t pair() const { return static_cast<uint32_t>(bits_ >> 48); }

 private:
  static constexpr uintptr_t kPointerMask = (uintptr_t{1} << 48) - 1;
  uintptr_t bits_;
};
struct FilterEntryLess {
  bool operator()(const FilterEntry& a, const FilterEntry& b) const {
    const Message* x = a.message();
    const Message* y = b.message();
    return x->priority != y->priority ? x->priority < y->priority : x->seq < y->seq;
  }
};
struct FilterSlot {
  uint32_t& operator()(const FilterEntry& e) const { return e.message()->filter_slots()[e.pair()]; }
};
using FilterHeap = IndexedHeap<FilterEntry, FilterEntryLess, FilterSlot>;

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
  void set_settings(const QueueSettings& s) { settings_ = s; }
  const StateCounts& counts() const { return counts_; }
  uint64_t memory_bytes() const { return memory_bytes_; }
  bool exclusive() const { return settings_.type == QueueType::kExclusive; }
  QueueInfo Info(TimeMs now) const;
  TimeMs NextDueTime() const { return timers_.empty() ? INT64_MAX : timers_.top().key; }
  bool Contains(std::string_view id) const { return Find(id) != nullptr; }

  // Operations. Input has been validated by Engine (limits, UTF-8, queue name, batch size).
  // `dead_letter`: the dead-letter queue when it exists (its shard locked), else nullptr.
  Result<EnqueueResult> Enqueue(const EnqueueItem& item, TimeMs now, Random* rng,
                                uint64_t memory_budget, uint64_t memory_used);
  std::vector<MessageRecord> Dequeue(const DequeueRequest& request, TimeMs now, Random* rng);
  Status Complete(const CompleteItem& item, TimeMs now);
  Result<FailResult> Fail(const FailRequest& request, TimeMs now, Random* rng, Queue* dead_letter);
  Result<TimeMs> Extend(std::string_view id, uint64_t token, int64_t lease_ms, TimeMs now);
  Status Cancel(std::string_view id, TimeMs now);
  uint64_t CancelByFilter(const Filter& filter, TimeMs now);
  Result<uint64_t> Reprioritize(std::string_view id, const ReprioritizeRequest& r, TimeMs now);
  uint64_t ReprioritizeByFilter(const Filter& filter, const ReprioritizeRequest& r, TimeMs now);
  Status Redrive(std::string_view id, TimeMs now);
  uint64_t RedriveByFilter(const Filter& filter, TimeMs now);
  uint64_t Purge(uint8_t state_mask, TimeMs now, bool emit);
  // Processes timers due at or before `now`. Stops early (returning false) when a message must
  // move to `dead_letter_name` but `dead_letter` is null though that queue may exist: the caller
  // then retries with the dead-letter queue locked. Adds the transitions made to *count.
  bool Advance(TimeMs now, Queue* dead_letter, bool dead_letter_missing, uint64_t* count);

  Result<MessageRecord> Get(std::string_view id) const;
  Result<BrowsePage> Browse(const BrowseRequest& request) const;
  StateCounts Count(const Filter& filter) const;
  Result<Explanation> Explain(std::string_view id) const;
  Explanation ExplainFilter(const Filter& filter) const;

  // Removes every message (delete_queue).
  void Clear();

  // Replay (Engine::Apply) and snapshot export.
  Status ApplyEnqueued(const Effect& e);
  Status ApplyChanged(const Effect& e);
  Status ApplyRemoved(const Effect& e);
  // Moves message `id` to `dead_letter` as described by `e` (a kMessageDeadLettered).
  Status ApplyDeadLettered(const Effect& e, Queue* dead_letter);
  void Export(EffectSink* visit) const;
  void HashInto(void* xxh3_state) const;  // XXH3_state_t*

 private:
  struct IdHash {
    using is_transparent = void;
    size_t operator()(std::string_view id) const;
    size_t operator()(const Message* m) const { return (*this)(m->id()); }
  };
  struct IdEqual {
    using is_transparent = void;
    bool operator()(const Message* a, const Message* b) const { return a->id() == b->id(); }
    bool operator()(std::string_view a, const Message* b) const { return a == b->id(); }
    bool operator()(const Message* a, std::string_view b) const { return a->id() == b; }
  };
  struct Group {
    GroupHeap pending;
    Message* holder = nullptr;  // the running message of this value
  };
  struct PairIndex {
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

  Message* Find(std::string_view id) const;
  Status CheckLease(const Message* m, uint64_t token, TimeMs now) const;

  // Structure maintenance. Detach removes `m` from the structures of m->state and its counters;
  // Attach inserts it into those of m->state (using m->due_at) and counts it.
  void Detach(Message* m);
  void Attach(Message* m);
  void AttachPairs(Message* m, bool pending);
  void DetachPairs(Message* m, bool pending);
  Group* GroupOf(const Message* m);
  std::string_view ValueOf(const Message* m) const;
  void PushGroupHead(Group* g);
  void RemoveGroupHeadFromReady(Group* g);

  // A transition: BeginChange detaches the message and returns its state; the caller sets the
  // fields; FinishChange sets state, version and updated_at, re-attaches and emits the effect.
  MessageState BeginChange(Message* m);
  void FinishChange(Message* m, MessageState from, MessageState to, TimeMs now, ChangeCause cause);
  void MakeTerminal(Message* m, MessageState to, TimeMs now, ChangeCause cause);
  void MoveToDeadLetter(Message* m, Queue* dead_letter, uint64_t seq, uint64_t version,
                        uint32_t max_attempts, std::string_view error, TimeMs now, bool emit);
  bool CanEnter(const Message* m) const;
  // Errored, or moved to `dead_letter` (returns true) when the rules allow.
  bool ErrorOrDeadLetter(Message* m, TimeMs now, ChangeCause cause, Queue* dead_letter);
  Message* Insert(std::string_view id, std::string_view payload, std::string_view packed_metadata);
  void Erase(Message* m);
  void SetError(const Message* m, std::string_view error);
  std::string_view ErrorOf(const Message* m) const;
  // An effect of `type` carrying m's current fields (from = to = m->state).
  Effect MessageEffect(EffectType type, const Message* m, TimeMs time) const;
  void Emit(EffectType type, ChangeCause cause, MessageState from, const Message* m, TimeMs now,
            std::string_view dead_letter_queue = {}) const;

  // Selection.
  bool Matches(const Message* m, const Filter& filter) const;
  bool Blocked(const Message* m) const;
  const PairIndex* MostSelective(const Filter& filter) const;
  Message* SelectPending(const Filter& filter) const;
  template <typename Fn>
  void ForEachMatch(const Filter& filter, Fn fn) const;

  MessageRecord Record(const Message* m) const;

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

  boost::unordered_flat_set<Message*, IdHash, IdEqual> by_id_;
  ReadyHeap ready_;
  TimerHeap timers_;
  std::unordered_map<std::string, Group, StringHash, std::equal_to<>> groups_;
  std::unordered_map<PairKey, PairIndex, PairHash, PairEqual> filters_;
  boost::unordered_flat_map<const Message*, std::string> errors_;
};

}  // namespace sundial
