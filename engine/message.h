// Message: one message as the engine stores it. Internal to engine/.
//
// One allocation per message: this fixed header, then the variable part
//   id[id_len] payload[payload_len] packed_metadata[metadata_len] pad-to-4
//   filter_slot:u32[metadata pair count]
// where filter_slot[i] is the message's slot in the filter index heap of its i-th metadata pair
// (while pending). `due_at` is the time of the message's single timer: visible_at while
// invisible, lease_expires_at while running, the removal (GC) time while terminal; 0 while
// pending. Each message is in at most one timer heap slot, one ready/group heap slot and one
// filter heap slot per pair at a time.
//
// Not thread-safe: guarded by the shard lock of its queue.
#pragma once

#include <cstdint>
#include <cstring>
#include <new>
#include <string_view>

#include "engine/clock.h"
#include "engine/indexed_heap.h"
#include "engine/types.h"

namespace sundial {

struct Message {
  int64_t priority;
  uint64_t seq;
  uint64_t version;
  uint64_t lease_token;
  TimeMs due_at;
  TimeMs enqueued_at;
  TimeMs updated_at;
  uint32_t attempts;
  uint32_t max_attempts;
  uint32_t ready_slot;
  // A message is in a timer heap only while not pending, in a group heap only while pending.
  union {
    uint32_t timer_slot;
    uint32_t group_slot;
  };
  uint32_t payload_len;
  uint16_t metadata_len;
  uint8_t id_len;
  MessageState state;

  // Allocates a message holding copies of the three byte strings. `pair_count` must be the
  // number of pairs in `packed_metadata`.
  static Message* Create(std::string_view id, std::string_view payload,
                         std::string_view packed_metadata, uint8_t pair_count) {
    size_t vars = id.size() + payload.size() + packed_metadata.size();
    size_t slots_at = (sizeof(Message) + vars + 3) & ~size_t{3};
    size_t total = slots_at + 4 * size_t{pair_count};
    void* mem = ::operator new(total);
    auto* m = new (mem) Message();
    m->id_len = static_cast<uint8_t>(id.size());
    m->payload_len = static_cast<uint32_t>(payload.size());
    m->metadata_len = static_cast<uint16_t>(packed_metadata.size());
    char* p = m->bytes();
    std::memcpy(p, id.data(), id.size());
    std::memcpy(p + id.size(), payload.data(), payload.size());
    std::memcpy(p + id.size() + payload.size(), packed_metadata.data(), packed_metadata.size());
    for (uint8_t i = 0; i < pair_count; ++i) m->filter_slots()[i] = kNoSlot;
    return m;
  }

  static void Destroy(Message* m) {
    m->~Message();
    ::operator delete(m);
  }

  std::string_view id() const { return {bytes(), id_len}; }
  std::string_view payload() const { return {bytes() + id_len, payload_len}; }
  std::string_view packed_metadata() const {
    return {bytes() + id_len + payload_len, metadata_len};
  }
  uint8_t pair_count() const { return static_cast<uint8_t>(packed_metadata()[0]); }
  uint32_t* filter_slots() {
    size_t at = (sizeof(Message) + id_len + payload_len + metadata_len + 3) & ~size_t{3};
    return reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(this) + at);
  }

 private:
  Message()
      : priority(0),
        seq(0),
        version(0),
        lease_token(0),
        due_at(0),
        enqueued_at(0),
        updated_at(0),
        attempts(0),
        max_attempts(0),
        ready_slot(kNoSlot),
        timer_slot(kNoSlot),
        payload_len(0),
        metadata_len(0),
        id_len(0),
        state(MessageState::kPending) {}
  char* bytes() { return reinterpret_cast<char*>(this + 1); }
  const char* bytes() const { return reinterpret_cast<const char*>(this + 1); }
};
static_assert(sizeof(Message) == 80, "keep the per-message header small (docs/engine.md)");

}  // namespace sundial
