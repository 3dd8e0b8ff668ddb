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
#include <cstdlib>
#include <utility>

#include "engine/pages.h"

namespace sundial {

inline constexpr uint32_t kNoSlot = UINT32_MAX;

// The heap algorithms over (entries, size, traits), shared by IndexedHeap (which stores its
// traits and a PodVector) and by small heaps that store neither (KeyHeap, key_gate.h: the
// traits are passed in, so a per-key heap costs 16 bytes).
namespace heap_ops {

template <typename Entry, typename Traits>
inline void Place(Entry* data, size_t slot, const Entry& e, const Traits& traits) {
  data[slot] = e;
  traits.Slot(e) = static_cast<uint32_t>(slot);
}

template <size_t kArity, typename Entry, typename Traits>
inline void SiftUp(Entry* data, size_t slot, const Entry& e, const Traits& traits) {
  while (slot > 0) {
    size_t parent = (slot - 1) / kArity;
    if (!traits.Less(e, data[parent])) break;
    Place(data, slot, data[parent], traits);
    slot = parent;
  }
  Place(data, slot, e, traits);
}

template <size_t kArity, typename Entry, typename Traits>
inline void SiftDown(Entry* data, size_t n, size_t slot, const Entry& e, const Traits& traits) {
  while (true) {
    size_t first = slot * kArity + 1;
    if (first >= n) break;
    size_t last = first + kArity < n ? first + kArity : n;
    size_t best = first;
    for (size_t c = first + 1; c < last; ++c) {
      if (traits.Less(data[c], data[best])) best = c;
    }
    if (!traits.Less(data[best], e)) break;
    Place(data, slot, data[best], traits);
    slot = best;
  }
  Place(data, slot, e, traits);
}

// Puts `e` at `slot` (a hole) and moves it up or down to its place.
template <size_t kArity, typename Entry, typename Traits>
inline void Reposition(Entry* data, size_t n, size_t slot, const Entry& e, const Traits& traits) {
  if (slot > 0 && traits.Less(e, data[(slot - 1) / kArity])) {
    SiftUp<kArity>(data, slot, e, traits);
  } else {
    SiftDown<kArity>(data, n, slot, e, traits);
  }
}

// Floyd's O(n) heap construction.
template <size_t kArity, typename Entry, typename Traits>
inline void Heapify(Entry* data, size_t n, const Traits& traits) {
  if (n < 2) return;
  for (size_t i = (n - 2) / kArity + 1; i-- > 0;) {
    Entry e = data[i];
    SiftDown<kArity>(data, n, i, e, traits);
  }
}

}  // namespace heap_ops

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
    heap_ops::Heapify<kArity>(heap_.data(), heap_.size(), traits_);
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
  void Place(size_t slot, const Entry& e) { heap_ops::Place(heap_.data(), slot, e, traits_); }
  void Reposition(size_t slot, const Entry& e) {
    heap_ops::Reposition<kArity>(heap_.data(), heap_.size(), slot, e, traits_);
  }
  void SiftUp(size_t slot, const Entry& e) {
    heap_ops::SiftUp<kArity>(heap_.data(), slot, e, traits_);
  }
  void SiftDown(size_t slot, const Entry& e) {
    heap_ops::SiftDown<kArity>(heap_.data(), heap_.size(), slot, e, traits_);
  }

  Traits traits_;
  PodVector<Entry> heap_;
  bool unordered_ = false;
};

// KeyHeap: the same heap for the many small heaps of a key gate (engine/key_gate.h), one per
// flow-key value: it stores no traits (each call passes them) and holds its only entry inline,
// so a heap of one entry allocates nothing; from two entries on its entries live in a block of
// at least 4 (doubling), released when the heap empties. sizeof = sizeof(Entry) + 4 for an
// Entry of 12 bytes (16 bytes). A plain value: PodVector may move it; Release frees the block.
// Bulk mode is the caller's: Push/Remove take `unordered` and Heapify restores the order.
#pragma pack(push, 4)
template <typename Entry, size_t kArity = 4>
struct KeyHeap {
  struct Block {
    Entry* data;
    uint32_t cap;
  };
  static_assert(sizeof(Entry) >= sizeof(Block), "the inline entry holds the block's fields");
  union {
    Entry one;
    Block out;
  };
  uint32_t count : 31;
  uint32_t in_block : 1;

  void Init() {
    count = 0;
    in_block = 0;
  }
  size_t size() const { return count; }
  bool empty() const { return count == 0; }
  Entry* data() { return in_block ? out.data : &one; }
  const Entry* data() const { return in_block ? out.data : &one; }
  const Entry& top() const { return data()[0]; }
  const Entry& at(size_t slot) const { return data()[slot]; }
  size_t capacity_bytes() const { return in_block ? size_t{out.cap} * sizeof(Entry) : 0; }

  template <typename Traits>
  void Push(const Entry& e, const Traits& traits, bool unordered = false) {
    if (!in_block) {
      if (count == 0) {
        count = 1;
        heap_ops::Place(&one, 0, e, traits);
        return;
      }
      const Entry first = one;
      auto* block = static_cast<Entry*>(std::malloc(4 * sizeof(Entry)));
      if (block == nullptr) std::abort();
      block[0] = first;
      out.data = block;
      out.cap = 4;
      in_block = 1;
    } else if (count == out.cap) {
      auto* block =
          static_cast<Entry*>(std::realloc(out.data, 2 * size_t{out.cap} * sizeof(Entry)));
      if (block == nullptr) std::abort();
      out.data = block;
      out.cap *= 2;
    }
    const size_t slot = count++;
    if (unordered) {
      heap_ops::Place(out.data, slot, e, traits);
    } else {
      heap_ops::SiftUp<kArity>(out.data, slot, e, traits);
    }
  }

  template <typename Traits>
  void Remove(uint32_t slot, const Traits& traits, bool unordered = false) {
    Entry* d = data();
    traits.Slot(d[slot]) = kNoSlot;
    const Entry last = d[count - 1];
    --count;
    if (slot != count) {
      if (unordered) {
        heap_ops::Place(d, slot, last, traits);
      } else {
        heap_ops::Reposition<kArity>(d, count, slot, last, traits);
      }
    }
    if (count == 0) Release();
  }

  template <typename Traits>
  void Heapify(const Traits& traits) {
    heap_ops::Heapify<kArity>(data(), count, traits);
  }

  // Frees the block (the entries are dropped without touching the elements).
  void Release() {
    if (in_block) std::free(out.data);
    count = 0;
    in_block = 0;
  }
};
#pragma pack(pop)

}  // namespace sundial
