// IndexedHeap and packed metadata: the building blocks under the engine's queues.
#include "engine/indexed_heap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "engine/metadata.h"

namespace sundial {
namespace {

struct Item {
  int64_t priority;
  uint64_t seq;
  uint32_t slot = kNoSlot;
};
struct Entry {
  Item* item;
};
struct EntryTraits {
  bool Less(const Entry& a, const Entry& b) const {
    return a.item->priority != b.item->priority ? a.item->priority < b.item->priority
                                                : a.item->seq < b.item->seq;
  }
  uint32_t& Slot(const Entry& e) const { return e.item->slot; }
};
using Heap = IndexedHeap<Entry, EntryTraits>;

TEST(IndexedHeapTest, EqualPrioritiesComeOutInSequenceOrder) {
  std::vector<Item> items;
  for (uint64_t i = 0; i < 100; ++i) items.push_back({static_cast<int64_t>(i % 3), i});
  Heap heap;
  for (auto& it : items) heap.Push({&it});
  std::vector<uint64_t> out;
  while (!heap.empty()) {
    Item* top = heap.top().item;
    out.push_back(top->seq);
    heap.Remove(top->slot);
  }
  for (size_t i = 1; i < out.size(); ++i) {
    const Item& a = items[out[i - 1]];
    const Item& b = items[out[i]];
    ASSERT_TRUE(a.priority < b.priority || (a.priority == b.priority && a.seq < b.seq)) << i;
  }
}

TEST(IndexedHeapTest, EveryElementKnowsItsSlotAfterRandomRemovalsAndUpdates) {
  std::mt19937_64 rng(42);
  std::vector<Item> items(2000);
  for (uint64_t i = 0; i < items.size(); ++i) items[i] = {static_cast<int64_t>(rng() % 50), i};
  Heap heap;
  for (auto& it : items) heap.Push({&it});
  std::vector<bool> present(items.size(), true);
  for (int round = 0; round < 3000; ++round) {
    size_t k = rng() % items.size();
    if (present[k] && rng() % 2 == 0) {
      heap.Remove(items[k].slot);
      present[k] = false;
      EXPECT_EQ(items[k].slot, kNoSlot);
    } else if (present[k]) {
      items[k].priority = static_cast<int64_t>(rng() % 50);
      heap.Update(items[k].slot, {&items[k]});
    }
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (!present[i]) continue;
    ASSERT_LT(items[i].slot, heap.size());
    ASSERT_EQ(heap.at(items[i].slot).item, &items[i]);
  }
  Item* prev = nullptr;
  while (!heap.empty()) {
    Item* top = heap.top().item;
    if (prev) {
      ASSERT_FALSE(EntryTraits().Less({top}, {prev}));
    }
    prev = top;
    heap.Remove(top->slot);
  }
}

// Drains `heap`, checking the order and that every element knew its slot.
void ExpectDrainsInOrder(Heap& heap, std::vector<Item>& items, const std::vector<bool>& present) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (!present[i]) continue;
    ASSERT_LT(items[i].slot, heap.size());
    ASSERT_EQ(heap.at(items[i].slot).item, &items[i]);
  }
  Item* prev = nullptr;
  while (!heap.empty()) {
    Item* top = heap.top().item;
    if (prev) {
      ASSERT_FALSE(EntryTraits().Less({top}, {prev}));
    }
    prev = top;
    heap.Remove(top->slot);
  }
}

TEST(IndexedHeapTest, UnorderedChangesThenHeapifyGiveTheSameOrderAsSifting) {
  std::mt19937_64 rng(7);
  std::vector<Item> items(5000);
  for (uint64_t i = 0; i < items.size(); ++i) items[i] = {static_cast<int64_t>(rng() % 100), i};
  Heap heap;
  heap.BeginUnordered();
  for (auto& it : items) heap.Push({&it});
  std::vector<bool> present(items.size(), true);
  for (int round = 0; round < 4000; ++round) {
    size_t k = rng() % items.size();
    if (present[k] && rng() % 2 == 0) {
      heap.Remove(items[k].slot);
      present[k] = false;
      EXPECT_EQ(items[k].slot, kNoSlot);
    } else if (present[k]) {
      items[k].priority = static_cast<int64_t>(rng() % 100);
      heap.Update(items[k].slot, {&items[k]});
    }
  }
  heap.Heapify();
  EXPECT_FALSE(heap.unordered());
  // Ordered operations go on working after the bulk phase.
  for (size_t k = 0; k < 200; ++k) {
    if (!present[k]) continue;
    items[k].priority = -static_cast<int64_t>(k);
    heap.Update(items[k].slot, {&items[k]});
  }
  ExpectDrainsInOrder(heap, items, present);
}

TEST(IndexedHeapTest, StorageShrinksWhenDrained) {
  std::vector<Item> items(100000);
  for (uint64_t i = 0; i < items.size(); ++i) items[i] = {static_cast<int64_t>(i), i};
  Heap heap;
  for (auto& it : items) heap.Push({&it});
  const size_t full = heap.capacity_bytes();
  EXPECT_GE(full, items.size() * sizeof(Entry));
  while (heap.size() > 10) heap.Remove(heap.top().item->slot);
  EXPECT_LT(heap.capacity_bytes(), full / 100);
}

TEST(PackedMetadataTest, RoundTripsPairsInOrder) {
  Metadata md = {{"tenant", "acme"}, {"k", ""}, {std::string(64, 'x'), std::string(256, 'y')}};
  std::string packed = PackMetadata(md);
  EXPECT_EQ(packed.size(), PackedMetadataSize(md));
  auto back = UnpackMetadata(packed);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, md);
  EXPECT_EQ(FindMetadataValue(packed, "tenant"), "acme");
  EXPECT_FALSE(FindMetadataValue(packed, "nope").has_value());
}

TEST(PackedMetadataTest, TruncatedOrPaddedBytesAreRejected) {
  std::string packed = PackMetadata({{"a", "bc"}, {"d", "e"}});
  for (size_t cut = 0; cut < packed.size(); ++cut) {
    EXPECT_FALSE(UnpackMetadata(packed.substr(0, cut)).has_value()) << cut;
  }
  EXPECT_FALSE(UnpackMetadata(packed + "x").has_value());
  EXPECT_TRUE(UnpackMetadata(packed).has_value());
}

}  // namespace
}  // namespace sundial
