// IndexedHeap: a d-ary min-heap whose elements know their own slot (beanstalkd's heap.c), so an
// element can be removed or re-keyed by handle in O(log n) without a search.
//
// `Entry` is a small value (a key and a pointer). `Less(a, b)` orders entries; it must be a
// strict weak order with no ties between distinct elements (Sundial orders by (priority,
// enqueue sequence), so equal priorities come out FIFO). `SlotOf(entry)` returns a reference to
// the uint32_t in which the element records its current slot; the heap writes it on every move
// and sets it to kNoSlot on removal.
//
// Complexity: Push, Pop, Remove, Update O(d log_d n); top O(1). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace sundial {

inline constexpr uint32_t kNoSlot = UINT32_MAX;

template <typename Entry, typename Less, typename SlotOf, size_t kArity = 4>
class IndexedHeap {
 public:
  size_t size() const { return heap_.size(); }
  bool empty() const { return heap_.empty(); }
  const Entry& top() const { return heap_.front(); }
  const Entry& at(size_t slot) const { return heap_[slot]; }
  static constexpr size_t arity() { return kArity; }
  size_t capacity_bytes() const { return heap_.capacity() * sizeof(Entry); }

  void Push(const Entry& e) {
    heap_.push_back(e);
    SiftUp(heap_.size() - 1, e);
  }

  void Remove(uint32_t slot) {
    SlotOf()(heap_[slot]) = kNoSlot;
    Entry last = heap_.back();
    heap_.pop_back();
    if (slot == heap_.size()) return;
    Reposition(slot, last);
  }

  // Replaces the entry at `slot` (same element, new key) and restores the heap order.
  void Update(uint32_t slot, const Entry& e) { Reposition(slot, e); }

  // Drops every entry without touching the elements (they may already be gone).
  void Clear() {
    heap_.clear();
    heap_.shrink_to_fit();
  }

 private:
  void Place(size_t slot, const Entry& e) {
    heap_[slot] = e;
    SlotOf()(heap_[slot]) = static_cast<uint32_t>(slot);
  }

  void Reposition(size_t slot, const Entry& e) {
    if (slot > 0 && Less()(e, heap_[(slot - 1) / kArity])) {
      SiftUp(slot, e);
    } else {
      SiftDown(slot, e);
    }
  }

  void SiftUp(size_t slot, const Entry& e) {
    while (slot > 0) {
      size_t parent = (slot - 1) / kArity;
      if (!Less()(e, heap_[parent])) break;
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
        if (Less()(heap_[c], heap_[best])) best = c;
      }
      if (!Less()(heap_[best], e)) break;
      Place(slot, heap_[best]);
      slot = best;
    }
    Place(slot, e);
  }

  std::vector<Entry> heap_;
};

}  // namespace sundial
