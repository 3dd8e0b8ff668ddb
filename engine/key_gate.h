// KeyGate: per flow-key value of one gated queue (an exclusive queue, or a simple queue with a
// flow_key), the pending messages in (priority, seq) order, the number running against the
// key's concurrency N, and where the key is:
//   ready: it has a pending message and running < N (or N = 0: no limit); its head, and only
//          its head, is in the queue's ready index;
//   held:  running >= N; none of its messages is in the ready index;
//   idle:  no pending message (kept while some are running, released at zero).
// Messages of held keys are in no structure a dequeue visits: an unfiltered dequeue costs
// O(log keys) whatever the number held back. An exclusive queue is the case N = 1.
//
// Storage (docs/engine.md, "Key gate"): KeyState {KeyHeap 16 B, running, value offset} in one
// PodVector indexed by KeyRef; the values in an append-only arena (u16 length, bytes),
// compacted when more than half of it is garbage; a flat hash set of KeyRefs whose hash and
// equality read the arena (lookup by string_view). A key costs ~24 + 5 + 2 + |value| bytes
// plus a heap block only while it holds two or more pending messages.
//
// The queue tells the gate each time a message enters or leaves pending or running (Attach,
// Detach): every path that leaves running (complete, fail, cancel, lease expiry) frees a slot
// there. Bulk mode (recovery): heaps unordered and the ready index untouched; EndBulk orders
// every key's heap and rebuilds the ready heads and the blocked count in O(n).
// The gate keeps the queue's StateCounts::blocked (pending messages of held keys).
// Thread safety: none; REQUIRES the queue's shard lock. Internal to engine/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/unordered/unordered_flat_set.hpp>

#include "engine/indexed_heap.h"
#include "engine/message.h"
#include "engine/message_store.h"
#include "engine/pages.h"
#include "engine/queue.h"

namespace sundial {

using KeyRef = uint32_t;
inline constexpr KeyRef kNoKey = UINT32_MAX;

class KeyGate {
 public:
  // `flow_key`: the metadata key; `limit`: N (0: no limit); `blocked`: the queue's count of
  // pending messages of held keys, kept by the gate.
  KeyGate(const MessageStore* store, ReadyIndex* ready, std::string flow_key, uint32_t limit,
          uint64_t* blocked);
  ~KeyGate();
  KeyGate(const KeyGate&) = delete;
  KeyGate& operator=(const KeyGate&) = delete;

  uint32_t limit() const { return limit_; }
  // A new N: held keys whose running count is now below it come back at once (their heads
  // enter the ready index); keys at or above it are held (running ones finish). O(keys).
  void SetLimit(uint32_t limit);

  // The message's flow-key value ("" when it has none: the queue refuses such messages).
  std::string_view ValueOf(const Message* m) const;

  // Message `ref` (with its record's state already set) entered or left pending / running.
  void AttachPending(MessageRef ref, Message* m);
  void DetachPending(MessageRef ref, Message* m);
  void AttachRunning(const Message* m);
  void DetachRunning(const Message* m);

  // False when the message's key is held (running >= N): a filter dequeue passes it by.
  bool Dispatchable(const Message* m) const;
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
    Heap pending;       // 16: this value's pending messages, (priority, seq) order
    uint32_t running;   //  4: its messages running now
    uint32_t value_at;  //  4: offset of the value in values_; free slots: the next free KeyRef
  };
#pragma pack(pop)
  static_assert(sizeof(KeyState) == 24);
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
  bool Held(const KeyState& s) const { return limit_ != 0 && s.running >= limit_; }
  // The key's held state changed from `was_held` (its head leaves or enters the ready index).
  void Reclassify(KeyRef k, bool was_held);
  void CompactValues();
  GroupTraits traits() const { return GroupTraits{{store_}}; }

  const MessageStore* store_;
  ReadyIndex* ready_;
  std::string flow_key_;
  uint32_t limit_;
  uint64_t* blocked_;
  bool bulk_ = false;
  PodVector<KeyState> keys_;
  KeyRef free_ = kNoKey;  // free list threaded through value_at
  PodVector<char> values_;
  size_t garbage_ = 0;  // bytes of values_ no key names
  boost::unordered_flat_set<KeyRef, ValueHash, ValueEqual> by_value_;
};

}  // namespace sundial
