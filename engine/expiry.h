// ExpiryHeap: the messages of one queue that have a ttl (docs/semantics.md, "Expiry") and are
// pending or invisible, ordered by (expires_at, seq). Internal to engine/; owned by Queue, which
// pushes a message in Attach and removes it in Detach for those two states only, so a waiting,
// running or terminal message is never in it (it re-enters, already due if its time passed,
// when it becomes pending or invisible again).
//
// The expiry time and the slot live in the record's variable part (message.h, has_expiry), so a
// message without a ttl pays nothing; an entry is 12 bytes.
//
// Complexity: Push, Remove O(log n); top O(1). Bulk mode as IndexedHeap. Not thread-safe:
// guarded by the queue's shard lock.
#pragma once

#include <cstdint>

#include "engine/clock.h"
#include "engine/indexed_heap.h"
#include "engine/message.h"
#include "engine/message_store.h"

namespace sundial {

#pragma pack(push, 4)
struct ExpiryEntry {
  TimeMs expires_at;
  MessageRef ref;
};
#pragma pack(pop)

struct ExpiryTraits {
  const MessageStore* store;
  bool Less(const ExpiryEntry& a, const ExpiryEntry& b) const {
    if (a.expires_at != b.expires_at) return a.expires_at < b.expires_at;
    return store->At(a.ref)->seq < store->At(b.ref)->seq;
  }
  uint32_t& Slot(const ExpiryEntry& e) const { return store->At(e.ref)->expiry_slot(); }
};

class ExpiryHeap {
 public:
  explicit ExpiryHeap(const MessageStore* store) : heap_(ExpiryTraits{store}) {}

  bool empty() const { return heap_.empty(); }
  // The earliest expiry (INT64_MAX: none).
  TimeMs next() const { return heap_.empty() ? INT64_MAX : heap_.top().expires_at; }
  MessageRef top_ref() const { return heap_.top().ref; }
  size_t capacity_bytes() const { return heap_.capacity_bytes(); }

  // REQUIRES: m (record `ref`) has_expiry and is not in the heap.
  void Push(MessageRef ref, Message* m) { heap_.Push({m->expires_at(), ref}); }
  // No-op for a message not in the heap.
  void Remove(Message* m) {
    if (m->expiry_slot() != kNoSlot) heap_.Remove(m->expiry_slot());
  }
  void Clear() { heap_.Clear(); }
  void BeginUnordered() { heap_.BeginUnordered(); }
  void Heapify() { heap_.Heapify(); }

 private:
  IndexedHeap<ExpiryEntry, ExpiryTraits> heap_;
};

}  // namespace sundial
