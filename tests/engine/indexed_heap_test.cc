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

// KeyHeap (the per-key heaps of engine/key_gate.h): 12-byte entries, traits passed in.
#pragma pack(push, 4)
struct WideEntry {
  Item* item;
  uint32_t unused;
};
#pragma pack(pop)
struct WideTraits {
  bool Less(const WideEntry& a, const WideEntry& b) const {
    return EntryTraits{}.Less({a.item}, {b.item});
  }
  uint32_t& Slot(const WideEntry& e) const { return e.item->slot; }
};
using SmallHeap = KeyHeap<WideEntry>;
static_assert(sizeof(SmallHeap) == 16);

TEST(KeyHeapTest, OneEntryIsInlineAndTwoMoveToABlockReleasedWhenEmpty) {
  SmallHeap heap;
  heap.Init();
  const WideTraits t;
  Item a{5, 1}, b{3, 2};
  heap.Push({&a, 0}, t);
  EXPECT_EQ(heap.capacity_bytes(), 0u);
  EXPECT_EQ(a.slot, 0u);
  heap.Push({&b, 0}, t);
  EXPECT_GT(heap.capacity_bytes(), 0u);
  EXPECT_EQ(heap.top().item, &b);
  EXPECT_EQ(b.slot, 0u);
  EXPECT_EQ(a.slot, 1u);
  heap.Remove(b.slot, t);
  EXPECT_EQ(b.slot, kNoSlot);
  EXPECT_EQ(heap.top().item, &a);
  heap.Remove(a.slot, t);
  EXPECT_TRUE(heap.empty());
  EXPECT_EQ(heap.capacity_bytes(), 0u);
}

TEST(KeyHeapTest, MatchesIndexedHeapUnderRandomPushesAndRemovalsAndBulkHeapify) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<Item> items(300);
    for (uint64_t i = 0; i < items.size(); ++i) items[i] = {static_cast<int64_t>(rng() % 20), i};
    SmallHeap heap;
    heap.Init();
    const WideTraits t;
    const bool bulk = trial % 2 == 1;
    std::vector<bool> present(items.size(), false);
    for (int round = 0; round < 1500; ++round) {
      size_t k = rng() % items.size();
      if (present[k]) {
        heap.Remove(items[k].slot, t, bulk);
        present[k] = false;
        ASSERT_EQ(items[k].slot, kNoSlot);
      } else {
        heap.Push({&items[k], 0}, t, bulk);
        present[k] = true;
      }
      for (size_t s = 0; s < heap.size(); ++s) ASSERT_EQ(heap.at(s).item->slot, s);
    }
    if (bulk) heap.Heapify(t);
    std::vector<uint64_t> out;
    while (!heap.empty()) {
      out.push_back(heap.top().item->seq);
      heap.Remove(0, t);
    }
    std::vector<uint64_t> want;
    for (size_t k = 0; k < items.size(); ++k)
      if (present[k]) want.push_back(k);
    std::sort(want.begin(), want.end(),
              [&](uint64_t x, uint64_t y) { return EntryTraits{}.Less({&items[x]}, {&items[y]}); });
    EXPECT_EQ(out, want) << trial;
  }
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
