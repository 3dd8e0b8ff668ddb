// IndexedHeap: a d-ary min-heap whose elements know their own slot (beanstalkd's heap.c), so an
// element can be removed or re-keyed by handle in O(log n) without a search.
//
// `Entry` is a small value (a key and a MessageRef). `Traits` is a small object (it may hold a
// pointer to the records, so that entries stay small and ties can be broken by a field of the
// record) with
//   bool Less(const Entry& a, const Entry& b) const   a strict weak order with no ties between
//                                                      distinct elements (Sundial orders by
//                                                      (key, enqueue sequence): FIFO on ties);
//   uint32_t& Slot(const Entry& e) const               where the element records its slot; the
//                                                      heap writes it on every move and sets it
//                                                      to kNoSlot on removal.
//
// Bulk mode (recovery): after BeginUnordered, Push appends, Remove swaps the last entry into
// the hole and Update overwrites, all O(1) and all keeping every slot right, but the order is
// not kept and top() means nothing; Heapify restores the order in O(n) (Floyd), writing the
// slots of the entries it moves. Loading n messages then costs O(n) instead of n sift-ups.
//
// Storage is a PodVector (pages.h): it grows by half and shrinks below a quarter.
// Complexity: Push, Pop, Remove, Update O(d log_d n); top O(1); Heapify O(n). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "engine/pages.h"

namespace sundial {

inline constexpr uint32_t kNoSlot = UINT32_MAX;

template <typename Entry, typename Traits, size_t kArity = 4>
class IndexedHeap {
 public:
  explicit IndexedHeap(Traits traits = Traits()) : traits_(traits) {}

  size_t size() const { return heap_.size(); }
  bool empty() const { return heap_.empty(); }
  const Entry& top() const { return heap_[0]; }
  const Entry& at(size_t slot) const { return heap_[slot]; }
  static constexpr size_t arity() { return kArity; }
  size_t capacity_bytes() const { return heap_.capacity_bytes(); }
  const Traits& traits() const { return traits_; }
  bool unordered() const { return unordered_; }

  void Push(const Entry& e) {
    heap_.push_back(e);
    if (unordered_) {
      traits_.Slot(e) = static_cast<uint32_t>(heap_.size() - 1);
      return;
    }
    SiftUp(heap_.size() - 1, e);
  }

  void Remove(uint32_t slot) {
    traits_.Slot(heap_[slot]) = kNoSlot;
    Entry last = heap_.back();
    heap_.pop_back();
    if (slot == heap_.size()) return;
    if (unordered_) {
      Place(slot, last);
    } else {
      Reposition(slot, last);
    }
  }

  // Replaces the entry at `slot` (same element, new key) and restores the heap order.
  void Update(uint32_t slot, const Entry& e) {
    if (unordered_) {
      Place(slot, e);
    } else {
      Reposition(slot, e);
    }
  }

  // Bulk mode (see the file comment).
  void BeginUnordered() { unordered_ = true; }
  void Heapify() {
    unordered_ = false;
    const size_t n = heap_.size();
    if (n < 2) return;
    for (size_t i = (n - 2) / kArity + 1; i-- > 0;) {
      Entry e = heap_[i];
      SiftDown(i, e);
    }
  }
  void Reserve(size_t n) { heap_.reserve(n); }

  // Moves every entry, in its position, to `to` (empty) as convert(entry): the same order
  // under `to`'s Less, so slots stay right. `to` takes this heap's mode; this heap is emptied.
  template <typename Other, typename Convert>
  void MoveInto(Other* to, Convert convert) {
    if (unordered_) to->BeginUnordered();
    to->Reserve(heap_.size());
    for (const Entry& e : heap_) to->AppendInPlace(convert(e));
    heap_.clear();
    unordered_ = false;
  }
  // Appends an entry at the end without ordering or touching its slot (MoveInto).
  void AppendInPlace(const Entry& e) { heap_.push_back(e); }

  // Drops every entry without touching the elements (they may already be gone).
  void Clear() { heap_.clear(); }

 private:
  void Place(size_t slot, const Entry& e) {
    heap_[slot] = e;
    traits_.Slot(e) = static_cast<uint32_t>(slot);
  }

  void Reposition(size_t slot, const Entry& e) {
    if (slot > 0 && traits_.Less(e, heap_[(slot - 1) / kArity])) {
      SiftUp(slot, e);
    } else {
      SiftDown(slot, e);
    }
  }

  void SiftUp(size_t slot, const Entry& e) {
    while (slot > 0) {
      size_t parent = (slot - 1) / kArity;
      if (!traits_.Less(e, heap_[parent])) break;
      Place(slot, heap_[parent]);
      slot = parent;
    }
    Place(slot, e);
  }

  void SiftDown(size_t slot, const Entry& e) {
    const size_t n = heap_.size();
    while (true) {
      size_t first = slot * kArity + 1;
      if (first >= n) break;
      size_t last = first + kArity < n ? first + kArity : n;
      size_t best = first;
      for (size_t c = first + 1; c < last; ++c) {
        if (traits_.Less(heap_[c], heap_[best])) best = c;
      }
      if (!traits_.Less(heap_[best], e)) break;
      Place(slot, heap_[best]);
      slot = best;
    }
    Place(slot, e);
  }

  Traits traits_;
  PodVector<Entry> heap_;
  bool unordered_ = false;
};

}  // namespace sundial
