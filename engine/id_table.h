// IdTable: a queue's messages by id. An open-addressing array of MessageRefs hashing the id
// stored inline in each record (the table holds no strings and no pointers).
//
// Layout: groups of 12 slots, each group one 64-byte cache line: 12 one-byte tags (7 bits of
// the hash, 0 = empty), one byte of overflow bits, 3 bytes of padding, 12 refs. A lookup hashes
// the id (XXH3), goes to the group the hash picks (any group count: the hash is scaled, not
// masked, so the table grows by half its size rather than doubling), and compares the id of
// each record whose tag matches; it goes on to the next group only if the group's overflow bit
// for this hash says an element passed it (boost::unordered_flat_map's scheme), so deletions
// need no tombstones. One cache miss for the group, one for the record it finds.
//
// Capacity: at most 7/8 of the slots are used; the table grows by 1.5x (rehash: the records are
// read in address order from the store, not in table order) and shrinks to fit when a quarter
// of its slots or fewer are used. 5.33 bytes per slot.
//
// Not thread-safe: guarded by the queue's shard lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/message_store.h"
#include "engine/pages.h"

namespace sundial {

class IdTable {
 public:
  explicit IdTable(const MessageStore* store) : store_(store) {}
  ~IdTable();
  IdTable(const IdTable&) = delete;
  IdTable& operator=(const IdTable&) = delete;

  static uint64_t Hash(std::string_view id);

  // The record with this id, or kNoRef.
  MessageRef Find(std::string_view id) const { return Find(id, Hash(id)); }
  MessageRef Find(std::string_view id, uint64_t hash) const;
  void Prefetch(uint64_t hash) const {
    if (groups_count_ > 0) __builtin_prefetch(&groups_[HomeGroup(hash)]);
  }
  // Adds `ref`, whose record holds `id` (not already present).
  void Insert(MessageRef ref, std::string_view id) { Insert(ref, Hash(id)); }
  void Insert(MessageRef ref, uint64_t hash);
  // Removes `ref`, whose record holds `id`.
  void Erase(MessageRef ref, std::string_view id);

  size_t size() const { return size_; }
  uint64_t allocated_bytes() const { return groups_count_ * sizeof(Group); }
  // Sizes the table for `n` elements.
  void Reserve(size_t n);
  // During a bulk load the table doubles when it grows (half the rebuilds of 1.5x growth).
  void set_bulk(bool on) { bulk_ = on; }
  void Clear();

 private:
  static constexpr uint32_t kSlots = 12;
  struct Group {
    uint8_t tags[kSlots];
    uint8_t overflow;
    uint8_t pad[3];
    MessageRef refs[kSlots];
  };
  static_assert(sizeof(Group) == 64);

  static uint8_t TagOf(uint64_t hash) { return static_cast<uint8_t>((hash & 0x7f) | 0x80); }
  static uint8_t OverflowBit(uint64_t hash) {
    return static_cast<uint8_t>(1u << ((hash >> 7) & 7));
  }
  size_t HomeGroup(uint64_t hash) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(hash >> 32) * groups_count_) >> 32);
  }
  static size_t GroupsFor(size_t n);
  // Rebuilds the table with `groups` groups from the store's records, leaving out `skip` (a
  // record being inserted or erased). Clears every overflow bit.
  void Rebuild(size_t groups, MessageRef skip);
  void Place(MessageRef ref, uint64_t hash);  // REQUIRES: a free slot exists
  size_t MaxSize() const { return groups_count_ * kSlots * 7 / 8; }

  const MessageStore* store_;
  Group* groups_ = nullptr;
  size_t groups_count_ = 0;
  size_t size_ = 0;
  // Insertions left before a rebuild: MaxSize() - size_, less the erasures that left overflow
  // bits behind (boost's rule: a table that keeps churning is rebuilt before its overflow bits
  // make every miss probe far).
  size_t budget_ = 0;
  bool bulk_ = false;
};

}  // namespace sundial
