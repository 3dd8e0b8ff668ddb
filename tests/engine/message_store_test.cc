// MessageStore's chunk hysteresis: a record that alternates into and out of an otherwise empty
// size class reuses one chunk instead of mapping and unmapping one per record (the engine_bench
// cycle cliff, docs/BENCHMARKS.md), and a drained store keeps at most kIdleBytesKept.
#include "engine/message_store.h"

#include <gtest/gtest.h>

#include <vector>

#include "engine/message.h"

namespace sundial {
namespace {

constexpr size_t kSmall = sizeof(Message) + 24;
constexpr size_t kOther = sizeof(Message) + 32;  // the next size class

TEST(MessageStoreTest, RecordAlternatingIntoAnEmptyClassDoesNotMapAChunkEachTime) {
  MessageStore store;
  // Another class holds records, as the old ids' class does in the benchmark.
  std::vector<MessageRef> others;
  for (int i = 0; i < 1000; ++i) others.push_back(store.Allocate(kOther));
  const uint64_t mapped = store.chunks_mapped();
  for (int i = 0; i < 100'000; ++i) store.Free(store.Allocate(kSmall));
  EXPECT_LE(store.chunks_mapped() - mapped, 1u);
  EXPECT_EQ(store.size(), others.size());
}

TEST(MessageStoreTest, ClassThatDrainedFromLargeChunksStartsSmallAgain) {
  MessageStore store;
  // Fill a class to its 2 MiB chunks, drain it: the 2 MiB chunks go back at once.
  std::vector<MessageRef> refs;
  for (int i = 0; i < 200'000; ++i) refs.push_back(store.Allocate(kSmall));
  const uint64_t empty_bookkeeping = store.allocated_bytes();
  for (MessageRef r : refs) store.Free(r);
  EXPECT_LT(store.allocated_bytes(), empty_bookkeeping);
  EXPECT_LE(store.idle_bytes(), MessageStore::kIdleBytesKept);
  // One record at a time in that class now costs at most one small chunk, mapped once.
  const uint64_t before = store.allocated_bytes();
  const uint64_t mapped = store.chunks_mapped();
  for (int i = 0; i < 10'000; ++i) store.Free(store.Allocate(kSmall));
  EXPECT_LE(store.chunks_mapped() - mapped, 1u);
  EXPECT_LE(store.allocated_bytes(), before + 4096);
}

TEST(MessageStoreTest, IdleChunksOfDrainedClassesAreBoundedStoreWide) {
  MessageStore store;
  // One record in each of many classes, then all freed: at most kIdleBytesKept stays mapped.
  std::vector<MessageRef> refs;
  for (size_t bytes = sizeof(Message); bytes <= 16 * 1024; bytes += 64) {
    refs.push_back(store.Allocate(bytes));
  }
  for (MessageRef r : refs) store.Free(r);
  EXPECT_EQ(store.size(), 0u);
  EXPECT_GT(store.idle_bytes(), 0u);
  EXPECT_LE(store.idle_bytes(), MessageStore::kIdleBytesKept);
  // The idle chunks are reusable: a record of the last class maps nothing new.
  const uint64_t mapped = store.chunks_mapped();
  store.Free(store.Allocate(refs.size() * 64 + sizeof(Message) - 64));
  EXPECT_EQ(store.chunks_mapped(), mapped);
}

}  // namespace
}  // namespace sundial
