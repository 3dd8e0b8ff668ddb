// MessageHistories: each message's transitions (docs/semantics.md, "History"), kept apart from
// its record and keyed by its MessageRef, as MessageTexts keeps results. Internal to engine/.
//
// Derived, never remembered on the side: every entry is computed by HistoryEntryOf from an
// Effect the queue already produces (live: the effect it emits; replay: the effect it applies),
// so a log replay rebuilds exactly what the live engine built. The only new logged bytes are a
// dequeue's `worker_id` (in the lease's effect) and notes (kMessageNoted): docs/wal-format.md.
//
// Per message, one block of bytes (one allocation, however many entries), little-endian:
//
//   header:  count:u16 dropped:u32 lease_token:u64            (kHistoryHeaderBytes = 14)
//   entry*:  time:i64 token:u64 bits:u32 text_len:u16 text[text_len]
//            bits = attempt:20 | from:3 | to:3 | event:5 (HistoryEvent)
//
// `lease_token` in the header is the token of the message's latest lease: an entry whose
// effect carries no token (a fail, a lease expiry: the message is no longer running) but
// which leaves the running state takes it, so every entry of an attempt names its lease.
// At most `max` entries: past it the first and the latest max - 1 are kept and `dropped`
// counts the others. Consecutive extends of one lease are one entry (its time the latest),
// so a heartbeating worker does not push out the rest. The snapshot extension `history`
// is this block verbatim (docs/wal-format.md, "Extensions").
//
// bytes() is the sum of the blocks' sizes: what the memory budget counts for history
// (docs/semantics.md, "Memory budget"); allocated_bytes() what they really hold.
//
// Thread safety: none; guarded by the shard lock of its queue.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/effect.h"
#include "engine/message_store.h"
#include "engine/status.h"
#include "engine/types.h"

namespace sundial {

inline constexpr size_t kHistoryHeaderBytes = 14;
inline constexpr size_t kHistoryEntryFixedBytes = 22;

// The block of a history whose only entry is an enqueue as pending at `time` (count 1, nothing
// dropped, no lease, no text): exactly what Record writes for it. Most messages never get
// another entry (a queue's backlog), so Queue keeps such a history as a bit of the record
// instead of a block (Message::history_implicit) and makes the block from `enqueued_at` here
// when it is read, exported or hashed.
inline constexpr size_t kEnqueuedBlockBytes = kHistoryHeaderBytes + kHistoryEntryFixedBytes;
using EnqueuedBlockBuffer = char[kEnqueuedBlockBytes];
std::string_view EnqueuedBlock(TimeMs time, EnqueuedBlockBuffer& out);
// What an export (a snapshot's restated enqueue) carries instead of that block: one byte, never
// a block (a block's header alone is 14), which a load turns into the same implicit history
// (docs/wal-format.md, "History"). 6 bytes in a snapshot instead of 41 per such message.
inline constexpr std::string_view kEnqueuedHistoryMark{"\x01", 1};

// Reads a block. Malformed blocks (a snapshot's extension) are refused by ValidHistoryBlock.
bool ValidHistoryBlock(std::string_view block);
// The entries of a valid block, oldest first, with the dropped count; worker ids resolved
// (HistoryEntry::worker_id: the worker_id of the lease whose token the entry carries, when
// that lease's entry is kept).
MessageHistory DecodeHistoryBlock(std::string_view block);

// The entry effect `e` makes for its message, if any (false: none, e.g. a kMessageRemoved or
// a snapshot's restated kMessageChanged, cause kNone). The entry's token is left to the
// caller when the effect has none (the header's lease token, above).
bool HistoryEntryOf(const Effect& e, HistoryEntry* out);

class MessageHistories {
 public:
  MessageHistories() = default;
  ~MessageHistories() { Clear(); }
  MessageHistories(const MessageHistories&) = delete;
  MessageHistories& operator=(const MessageHistories&) = delete;

  // Appends the entry of effect `e` to message `ref`'s history, keeping at most `max` entries
  // (max >= 2). An entry that leaves the running state without a token in its effect names
  // `ended_lease` when given (the lease the change ended: its leased entry may be missing, made
  // while history was off), else the header's latest lease. Returns the change in bytes().
  int64_t Record(MessageRef ref, const Effect& e, uint32_t max, uint64_t ended_lease = 0);
  // Replaces `ref`'s history by `block` (ValidHistoryBlock; empty or count 0: none). Returns the
  // change in bytes().
  int64_t Restore(MessageRef ref, std::string_view block);
  // Moves `from`'s history into `to` of `other` (a dead-letter move). Returns the bytes moved.
  uint64_t MoveTo(MessageRef from, MessageHistories* other, MessageRef to);
  // Erases `ref`'s history, if any; returns the bytes freed.
  uint64_t Erase(MessageRef ref);
  // The block of `ref` (empty: none).
  std::string_view Block(MessageRef ref) const {
    char* const* slot = Find(ref);
    return slot == nullptr || *slot == nullptr ? std::string_view() : ViewOf(*slot);
  }
  void Clear();
  uint64_t bytes() const { return bytes_; }
  uint64_t allocated_bytes() const;

 private:
  // A block lives in one malloc'd allocation of exactly its size plus a 4-byte prefix holding
  // that size (no spare capacity: a block grows by one entry at a time, and a doubling buffer
  // would hold up to twice what is counted).
  static constexpr size_t kPrefixBytes = 4;
  static std::string_view ViewOf(const char* a);
  // The blocks of one MessageStore chunk, by slot (the ref's low bits): a transition finds its
  // block by two indexings instead of a hash probe, and consecutive messages' slots share
  // cache lines. `live` counts the non-null ones; at 0 the chunk's array is given back.
  struct Chunk {
    uint32_t live = 0;
    std::vector<char*> slots;
  };
  char* const* Find(MessageRef ref) const {
    const uint32_t ci = ref >> kRefSlotBits;
    if (ci >= chunks_.size() || chunks_[ci] == nullptr) return nullptr;
    const std::vector<char*>& slots = chunks_[ci]->slots;
    const uint32_t slot = ref & kRefSlotMask;
    return slot < slots.size() ? &slots[slot] : nullptr;
  }
  // The slot of `ref`, made if missing (null until the caller stores a block and calls Took).
  char** Make(MessageRef ref);
  void Took(MessageRef ref) { ++chunks_[ref >> kRefSlotBits]->live; }
  // Takes `ref`'s allocation (which must exist) out of its slot and out of bytes(); an
  // emptied chunk's array is given back.
  char* Detach(MessageRef ref);

  std::vector<std::unique_ptr<Chunk>> chunks_;  // by the ref's chunk
  uint64_t bytes_ = 0;
};

}  // namespace sundial
