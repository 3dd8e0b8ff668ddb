// KeyGate: per flow-key value of one gated queue (an exclusive queue, or a simple queue with a
// flow_key), the pending messages in (priority, seq) order, the number running against the
// key's concurrency N, and where the key is:
//   ready: it has a pending message and running < N (or N = 0: no limit); its head, and only
//          its head, is in the queue's ready index;
//   held:  running >= N; none of its messages is in the ready index;
//   throttled: out of tokens (key_rate_per_s); in refill_ until its next token, none of its
//          messages in the ready index;
//   idle:  no pending message (kept while some are running, released at zero);
//   cooling: no message at all but its bucket is not yet full (tat_us > last_collect_): kept so
//          that a key that comes back gets no fresh burst (and, throttled, stays so until its
//          refill: a message that comes back early is blocked); dropped by Collect.
// Messages of held keys are in no structure a dequeue visits: an unfiltered dequeue costs
// O(log keys) whatever the number held back. An exclusive queue is the case N = 1.
//
// Storage (docs/engine.md, "Key gate"): KeyState {KeyHeap 16 B, running and two flags, value
// offset, tat} (32 B) in one PodVector indexed by KeyRef; the values in an append-only arena (u16
// length, bytes), compacted when more than half of it is garbage; a flat hash set of KeyRefs
// whose hash and equality read the arena (lookup by string_view). A key costs ~32 + 5 + 2 +
// |value| bytes plus a heap block only while it holds two or more pending messages; a throttled
// key its refill time in refill_at_, and with fair share a ready key its place in the ring.
//
// The queue tells the gate each time a message enters or leaves pending or running (Attach,
// Detach): every path that leaves running (complete, fail, cancel, lease expiry) frees a slot
// there. Bulk mode (recovery): heaps unordered and the ready index untouched; EndBulk orders
// every key's heap and rebuilds the ready heads and the blocked count in O(n).
// The gate keeps the queue's StateCounts::blocked (pending messages of held or throttled keys)
// and its split: blocked_concurrency (held keys) and blocked_rate (throttled keys not held).
//
// Token buckets (docs/engine.md, "Key gate"): GCRA per key, `tat_us` its theoretical arrival
// time in µs, interval T = round(1e9 / rate_milli) µs, tolerance τ = (burst − 1)·T; a grant at t
// is allowed iff t ≥ tat − τ and sets tat = max(tat, t) + T. Determinism (digest, replay):
// `tat_us` changes only in Granted, called by the live dequeue and by the replay of a change
// with cause kLeased at the effect's time; the set of keys changes only at stamped changes
// (Collect from Queue::Stamp) and removals; a snapshot restates every key with tat_us >
// last_collect_ (HasBucket) and last_collect_ (Export/Restate). Throttled, refill_ and the ready
// heads are soft: derived from that state and the time, never hashed.
//
// Per-value overrides (set_key_limits): by value in overrides_ (a node map: few, set by
// operators, kept while the value has no key), and live_ maps each present key that has one to
// it. The limits in effect for a key are its override's fields, else the queue's; a queue
// without overrides pays one empty() check. Overrides are state: hashed, logged, snapshotted.
//
// Fair share (fairness weighted): deficit round robin over the ready keys. ring_ holds ready
// keys in turn order, lazily: a key enters at the back when its head enters the ready index (if
// not already in it), and one found not ready at the front is dropped then. The front key's
// turn serves up to its weight (override, else 1) messages (front_turn_), then it goes to the
// back.
// Within a key: its heap's (priority, seq) order. Soft state (never hashed nor logged: only the
// primary dequeues), rebuilt by EndBulk and SetFair; a queue without fairness pays one branch.
// Thread safety: none; REQUIRES the queue's shard lock. Internal to engine/.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>
#include <boost/unordered/unordered_flat_set.hpp>

#include "engine/indexed_heap.h"
#include "engine/message.h"
#include "engine/message_store.h"
#include "engine/pages.h"
#include "engine/queue.h"

namespace sundial {

// A token bucket's interval T in µs for a rate in milli-tokens per second (0: no rate): an
// integer, so that every node computes the same (the keys' buckets and the queue's).
inline int64_t IntervalUsOf(uint64_t rate_milli) {
  return rate_milli == 0 ? 0 : static_cast<int64_t>((1'000'000'000 + rate_milli / 2) / rate_milli);
}

using KeyRef = uint32_t;
inline constexpr KeyRef kNoKey = UINT32_MAX;

class KeyGate {
 public:
  // `flow_key`: the metadata key; `limit`: N (0: no limit); `counts`: the queue's counts, whose
  // blocked, blocked_concurrency and blocked_rate the gate keeps.
  KeyGate(const MessageStore* store, ReadyIndex* ready, std::string flow_key, uint32_t limit,
          StateCounts* counts);
  ~KeyGate();
  KeyGate(const KeyGate&) = delete;
  KeyGate& operator=(const KeyGate&) = delete;

  uint32_t limit() const { return limit_; }
  // The key bucket: milli-tokens per second (0: none) and burst (>= 1). A change applies to the
  // existing tat at once (no reset: it never grants a burst); throttled keys come back and are
  // checked again at their next dequeue.
  void SetRate(uint64_t rate_milli, uint32_t burst);
  bool rated() const { return interval_us_ != 0 || rated_overrides_ != 0; }
  // True when the key of `m` has a token at `now` (always without a key rate).
  bool HasToken(const Message* m, TimeMs now) const;
  // The key of `m` has no token at `now`: it leaves the ready index until its next token.
  void Throttle(const Message* m, TimeMs now);
  // A message of this key was leased at `now` (live dequeue, or replay of cause kLeased): it
  // takes a token; a key left without one is throttled.
  void Granted(const Message* m, TimeMs now);
  // Throttled keys whose token is back by `now` come back; returns how many ready now. Called by
  // dequeues, Advance and every stamped change (Queue::Stamp). Never changes hashed state.
  size_t Refill(TimeMs now);
  // The earliest refill of a throttled key, INT64_MAX when none.
  TimeMs NextRefill() const { return refill_.empty() ? INT64_MAX : refill_.begin()->first; }
  // Throttled (explain): when the key of `m` gets its next token; 0 when it is not throttled.
  TimeMs RefillOf(const Message* m) const;
  // A stamped change at `t` (Queue::Stamp): cooling keys whose bucket is full by then go.
  void Collect(TimeMs t);
  // Snapshot restatement: each key that HasBucket (visit(value, tat_us)), and last_collect_.
  void ForEachBucket(const std::function<void(std::string_view, int64_t)>& visit) const;
  TimeMs last_collect() const { return last_collect_; }
  bool HasBuckets() const;  // some key HasBucket
  // Applies a restated key bucket (a snapshot's kKeyStateRestated).
  void Restate(std::string_view value, int64_t tat_us);
  void RestateCollected(TimeMs t) { last_collect_ = std::max(last_collect_, t); }
  // Hashes the sum of XXH3(value, tat_us) over keys that HasBucket, their number and
  // last_collect_, when some key HasBucket or `always`; false when it hashed nothing.
  bool HashInto(void* xxh3_state, bool always) const;
  // A new N: held keys whose running count is now below it come back at once (their heads
  // enter the ready index); keys at or above it are held (running ones finish). O(keys).
  void SetLimit(uint32_t limit);

  // Per-value overrides: `limits` replaces the value's override whole (empty: removes it). The
  // key, if present, is classified again at once; a throttled one is checked at its next
  // dequeue (as SetRate).
  void SetOverride(std::string_view value, const KeyLimits& limits);
  const KeyLimits* OverrideOf(std::string_view value) const;
  size_t overrides() const { return overrides_.size(); }
  void ForEachOverride(const std::function<void(std::string_view, const KeyLimits&)>& visit) const;
  // The concurrency N in effect for the message's key (its override's, else the queue's).
  uint32_t LimitOf(const Message* m) const;
  // get_key_limits / list_keys: the value's limits in effect and its counts (a value with no
  // messages and no bucket state: zero counts).
  KeyInfo Describe(std::string_view value, TimeMs now) const;
  // Every present key and every overridden value.
  void ForEachValue(const std::function<void(std::string_view)>& visit) const;

  // Fair share: on or off (the ring is rebuilt from the ready keys).
  void SetFair(bool fair);
  bool fair() const { return fair_; }
  // The head of the key whose turn it is, kNoRef when no key is ready. Drops keys found not
  // ready at the front; starts a fresh turn (deficit = weight) when the front's is spent.
  MessageRef FairHead();
  // The same without dropping anything (explain).
  MessageRef PeekFairHead() const;
  // A message of `m`'s key was leased in turn (FairHead's choice, not a filter's nor an overdue
  // one): one of its turn is spent, and a spent turn sends it to the back.
  void Served(const Message* m);

  // The message's flow-key value ("" when it has none: the queue refuses such messages).
  std::string_view ValueOf(const Message* m) const;

  // Message `ref` (with its record's state already set) entered or left pending / running.
  void AttachPending(MessageRef ref, Message* m);
  void DetachPending(MessageRef ref, Message* m);
  void AttachRunning(const Message* m);
  void DetachRunning(const Message* m);

  // False when the message's key is held (running >= N): a filter dequeue passes it by.
  bool Dispatchable(const Message* m) const;
  // Why a pending message of this gate is held back (filtered counts); kNone when its key is
  // ready.
  enum class BlockReason : uint8_t { kNone, kConcurrency, kRate };
  BlockReason ReasonOf(const Message* m) const;
  // The running count of the message's key.
  uint32_t RunningOf(const Message* m) const;
  size_t keys() const { return by_value_.size(); }

  void BeginBulk();
  void EndBulk();
  void Clear();
  uint64_t allocated_bytes() const;

 private:
  using Heap = KeyHeap<ReadyEntry>;
#pragma pack(push, 4)
  struct KeyState {
    Heap pending;            // 16: this value's pending messages, (priority, seq) order
    uint32_t running : 30;   //  4: its messages running now (each one a message in memory)
    uint32_t throttled : 1;  //     out of tokens: its refill time in refill_at_, it in refill_
    uint32_t in_ring : 1;    //     fair share: ring_ holds it (kept by a reused KeyRef)
    uint32_t value_at;       //  4: offset of the value in values_; free slots: the next free KeyRef
    int64_t tat_us;          //  8: GCRA theoretical arrival time; <= now: bucket full
  };
#pragma pack(pop)
  static_assert(sizeof(KeyState) == 32);
  struct ValueHash {
    using is_transparent = void;
    const KeyGate* gate;
    size_t operator()(std::string_view v) const;
    size_t operator()(KeyRef k) const { return (*this)(gate->Value(k)); }
  };
  struct ValueEqual {
    using is_transparent = void;
    const KeyGate* gate;
    bool operator()(KeyRef a, KeyRef b) const { return a == b; }
    bool operator()(std::string_view a, KeyRef b) const { return a == gate->Value(b); }
    bool operator()(KeyRef a, std::string_view b) const { return gate->Value(a) == b; }
  };

  std::string_view Value(KeyRef k) const;
  KeyRef Find(std::string_view value) const;
  KeyRef Acquire(std::string_view value);
  // Frees the key when it has neither pending nor running messages.
  void MaybeRelease(KeyRef k);
  struct Override {
    KeyLimits limits;
    int64_t interval_us = 0;   // T in effect for the value
    int64_t tolerance_us = 0;  // τ in effect
  };
  const Override* LiveOverride(KeyRef k) const {
    if (live_.empty()) return nullptr;
    auto it = live_.find(k);
    return it == live_.end() ? nullptr : it->second;
  }
  uint32_t LimitOf(KeyRef k) const {
    const Override* o = LiveOverride(k);
    return o != nullptr && o->limits.has(KeyLimits::kConcurrency) ? o->limits.concurrency : limit_;
  }
  bool Held(KeyRef k, const KeyState& s) const {
    const uint32_t limit = LimitOf(k);
    return limit != 0 && uint32_t{s.running} >= limit;
  }
  // Not ready: held or throttled (its pending messages are counted blocked).
  bool Out(KeyRef k, const KeyState& s) const { return s.throttled || Held(k, s); }
  // Why the key is not ready: held (concurrency) before throttled (rate); its pending messages
  // are counted blocked under that reason.
  BlockReason Why(KeyRef k, const KeyState& s) const {
    if (Held(k, s)) return BlockReason::kConcurrency;
    return s.throttled ? BlockReason::kRate : BlockReason::kNone;
  }
  // Adds `n` pending messages (wrapping: a removal) to blocked and to the count of `why`.
  void CountOut(BlockReason why, uint64_t n);
  int64_t IntervalOf(KeyRef k) const {
    const Override* o = LiveOverride(k);
    return o != nullptr ? o->interval_us : interval_us_;
  }
  // T and τ of an override from its fields and the queue's bucket.
  void Derive(Override* o) const;
  uint32_t WeightOf(KeyRef k) const {
    const Override* o = LiveOverride(k);
    return o != nullptr && o->limits.has(KeyLimits::kWeight) ? o->limits.weight : 1;
  }
  // When the key has its next token (0: it has one at `now`, or it has no rate).
  TimeMs NextTokenOf(KeyRef k, TimeMs now) const;
  bool Ready(KeyRef k) const { return !keys_[k].pending.empty() && !Out(k, keys_[k]); }
  // The key's head enters the ready index (and, with fair share, the ring).
  void PushReady(KeyRef k, const ReadyEntry& head) {
    ready_->Push(head);
    if (fair_) EnterRing(k);
  }
  void EnterRing(KeyRef k);
  // Empties the ring (and every key's in_ring).
  void ClearRing();
  // The key's bucket is not full by the last stamped change (what the digest and a snapshot
  // state): a full one is the same as none, whether the key was kept (a live extend) or
  // released and acquired again (its replay, which detaches and attaches the message).
  bool HasBucket(const KeyState& s) const {
    return s.tat_us > 0 && s.tat_us > last_collect_ * 1000;
  }
  // The key's out state changed from `was` (its head leaves or enters the ready index, its
  // pending messages move between the blocked counts).
  void Reclassify(KeyRef k, BlockReason was);
  // The time (µs) from which the key has a token.
  int64_t TokenFromUs(KeyRef k, const KeyState& s) const {
    const Override* o = LiveOverride(k);
    return s.tat_us - (o != nullptr ? o->tolerance_us : tolerance_us_);
  }
  void SetThrottled(KeyRef k, TimeMs refill_ms);
  // The key, not throttled, is throttled until `refill_ms`; its classification is the caller's.
  void MarkThrottled(KeyRef k, TimeMs refill_ms) {
    keys_[k].throttled = 1;
    refill_at_[k] = refill_ms;
    refill_.insert({refill_ms, k});
  }
  // The key leaves refill_ (not throttled any more); its classification is the caller's.
  void DropRefill(KeyRef k) {
    KeyState& s = keys_[k];
    if (!s.throttled) return;
    auto it = refill_at_.find(k);
    refill_.erase({it->second, k});
    refill_at_.erase(it);
    s.throttled = 0;
  }
  // Throttled: when its next token comes; else 0.
  TimeMs RefillMsOf(KeyRef k) const { return keys_[k].throttled ? refill_at_.find(k)->second : 0; }
  static TimeMs CeilMs(int64_t us) { return us >= 0 ? (us + 999) / 1000 : us / 1000; }
  void Release(KeyRef k);
  void CompactValues();
  KeyHeapTraits traits() const { return KeyHeapTraits{{store_}}; }

  const MessageStore* store_;
  ReadyIndex* ready_;
  std::string flow_key_;
  uint32_t limit_;
  StateCounts* counts_;
  bool bulk_ = false;
  PodVector<KeyState> keys_;
  KeyRef free_ = kNoKey;  // free list threaded through value_at
  PodVector<char> values_;
  size_t garbage_ = 0;  // bytes of values_ no key names
  boost::unordered_flat_set<KeyRef, ValueHash, ValueEqual> by_value_;
  int64_t interval_us_ = 0;   // T; 0: no key rate
  int64_t tolerance_us_ = 0;  // τ = (burst − 1)·T
  uint64_t rate_milli_ = 0;   // the queue's key_rate_milli and key_burst
  uint32_t burst_ = 1;
  std::map<std::string, Override, std::less<>> overrides_;
  boost::unordered_flat_map<KeyRef, const Override*> live_;
  size_t rated_overrides_ = 0;  // overrides whose interval is not 0
  bool fair_ = false;
  std::deque<KeyRef> ring_;  // fair share: ready keys in turn order (lazily)
  // What is left of the turn of ring_'s front (0: none started). Only the front has a turn: a
  // spent one sends it to the back, and a key dropped from the front has none.
  uint32_t front_turn_ = 0;
  std::set<std::pair<TimeMs, KeyRef>> refill_;           // throttled keys by refill time
  boost::unordered_flat_map<KeyRef, TimeMs> refill_at_;  // the same by key
  std::set<std::pair<int64_t, KeyRef>> cooling_;         // keys without messages by tat_us
  TimeMs last_collect_ = 0;
};

}  // namespace sundial
