// MessageStore: one queue's message records, packed in chunks (a slab allocator), each named by
// a 32-bit MessageRef = chunk:16 | slot:16. No per-message malloc: a record is a slot of its
// size class (its byte size rounded up to 8, or to 1/16 above 1 KiB) in a chunk of that class.
//
// Chunks of a class grow from 4 KiB to 2 MiB (each new one twice the size of the class's
// largest, at most 65,535 slots), so a queue with a few messages holds a few KiB and a deep one
// holds 2 MiB chunks (huge pages, pages.h). A freed slot goes on its chunk's free list and is
// reused first; a chunk whose last record is freed goes back to the kernel (pages::Free), so
// memory follows the queue down as it drains, with hysteresis so that traffic at a boundary
// does not map and unmap a chunk on every message:
// - a class that still has records keeps its most recently emptied chunk as a spare;
// - a class whose last record goes starts again from its smallest chunk (4 KiB, or one record
//   above 4 KiB) next time, and its last chunk, if it is that small, is kept idle. The store
//   keeps at most kIdleBytesKept (32 KiB) of idle chunks over all classes, releasing the one
//   idle longest first; a bigger emptied chunk is released at once.
// So a drained queue holds at most 32 KiB of empty chunks, and a message that alternates into
// and out of an otherwise empty class reuses one small chunk instead of mapping a new one.
//
// A free slot is marked in the record header (Message::kFreeState), so ForEach walks every live
// record in address order: the fast way to visit them all (digest, export, scans).
//
// Capacity: 65,536 chunks of up to 2 MiB: 128 GiB of records per queue.
// Complexity: Allocate and Free O(1) (amortised; a chunk change is O(classes in use));
// ForEach O(slots ever used in live chunks).
// Not thread-safe: guarded by the queue's shard lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/message.h"

namespace sundial {

using MessageRef = uint32_t;
inline constexpr MessageRef kNoRef = UINT32_MAX;
// A MessageRef's fields: chunk = ref >> kRefSlotBits, slot = ref & kRefSlotMask.
inline constexpr uint32_t kRefSlotBits = 16;
inline constexpr uint32_t kRefSlotMask = (1u << kRefSlotBits) - 1;

class MessageStore {
 public:
  MessageStore() = default;
  ~MessageStore() { Clear(); }
  MessageStore(const MessageStore&) = delete;
  MessageStore& operator=(const MessageStore&) = delete;

  // A slot of at least `bytes` bytes (sizeof(Message) <= bytes <= the largest record:
  // Message::RecordBytes with kInlinePayloadBytes of payload and every other field at its
  // limit). Its contents are unspecified until the caller writes a header.
  MessageRef Allocate(size_t bytes);
  // The record must be live. Its header is overwritten.
  void Free(MessageRef ref);

  Message* At(MessageRef ref) const {
    const Chunk& c = chunks_[ref >> kSlotBits];
    return reinterpret_cast<Message*>(c.base + size_t{ref & kSlotMask} * c.stride);
  }

  // Whether `ref` names a live record (any ref may be asked: a hint that outlived its record).
  bool IsLive(MessageRef ref) const {
    const uint32_t ci = ref >> kSlotBits;
    if (ci >= chunks_.size()) return false;
    const Chunk& c = chunks_[ci];
    return c.base != nullptr && (ref & kSlotMask) < c.bump && !At(ref)->is_free();
  }

  // Calls fn(ref, message) for every live record, chunk by chunk in address order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (uint32_t ci = 0; ci < chunks_.size(); ++ci) {
      const Chunk& c = chunks_[ci];
      if (c.base == nullptr) continue;
      for (uint32_t s = 0; s < c.bump; ++s) {
        auto* m = reinterpret_cast<Message*>(c.base + size_t{s} * c.stride);
        if (!m->is_free()) fn((ci << kSlotBits) | s, m);
      }
    }
  }

  size_t size() const { return live_; }
  // Bytes held from the kernel or malloc: chunks (live and spare) and the bookkeeping.
  uint64_t allocated_bytes() const;
  // Frees every record and chunk. Records must hold no large payloads (the queue frees them).
  void Clear();

  // The slot size used for a record of `bytes` bytes.
  static uint32_t StrideFor(size_t bytes);
  // Chunks obtained from pages::Allocate since construction (a test's view of the hysteresis).
  uint64_t chunks_mapped() const { return chunks_mapped_; }
  // Bytes in idle chunks (empty chunks kept for classes without records): <= kIdleBytesKept.
  uint64_t idle_bytes() const { return idle_bytes_; }

  static constexpr size_t kIdleBytesKept = size_t{32} << 10;

 private:
  static constexpr uint32_t kSlotBits = kRefSlotBits;
  static constexpr uint32_t kSlotMask = kRefSlotMask;
  static constexpr uint32_t kMaxSlots = kSlotMask;  // slot kSlotMask is never used (kNoRef)
  static constexpr size_t kMinChunkBytes = 4096;
  static constexpr size_t kMaxChunkBytes = size_t{2} << 20;
  static constexpr uint32_t kNoChunk = UINT32_MAX;

  struct Chunk {
    char* base = nullptr;  // null: the chunk number is unused (on free_chunk_numbers_)
    size_t alloc_bytes = 0;
    uint32_t stride = 0;
    uint32_t size_class = 0;
    uint32_t capacity = 0;  // slots
    uint32_t bump = 0;      // slots [0, bump) have been handed out at least once
    uint32_t live = 0;
    uint32_t free_head = kNoRef;      // a free slot below bump; its link is in its first 4 bytes
    uint32_t partial_pos = kNoChunk;  // index in its class's `partial` list, if there
  };
  struct SizeClass {
    uint32_t stride = 0;
    std::vector<uint32_t> partial;  // chunks with a free or never-used slot; last one first
    uint64_t records = 0;           // live records of this class
    uint32_t largest_capacity = 0;  // of its chunks: the next one doubles it
    uint32_t spare = kNoChunk;      // an empty chunk kept for reuse (it is on `partial`);
                                    // when `records` is 0 it is also on idle_chunks_
  };

  // Size class number and slot size of a record of `bytes` bytes.
  static uint32_t ClassOf(size_t bytes, uint32_t* stride);
  uint32_t NewChunk(uint32_t class_number);
  void ReleaseChunk(uint32_t number);
  void AddToPartial(uint32_t number);
  void RemoveFromPartial(uint32_t number);
  // The class's last record is gone: keep chunk `number` (empty) idle if it is the class's
  // smallest and fits kIdleBytesKept (releasing older idle chunks), else release it.
  void KeepIdleOrRelease(uint32_t number);
  void ForgetIdle(uint32_t number);

  std::vector<Chunk> chunks_;
  std::vector<uint32_t> free_chunk_numbers_;
  std::vector<SizeClass> classes_;     // indexed by class number (ClassOf), grown on demand
  std::vector<uint32_t> idle_chunks_;  // empty chunks of classes without records, oldest first
  uint64_t idle_bytes_ = 0;            // their alloc_bytes, at most kIdleBytesKept
  uint64_t chunks_mapped_ = 0;
  size_t live_ = 0;
};

}  // namespace sundial
