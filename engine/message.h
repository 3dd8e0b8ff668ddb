// Message: the layout of one message's record in a queue's MessageStore. Internal to engine/.
//
// A record is one variable-length block (docs/engine.md, "Per message"):
//
//   header (48 bytes, this struct)
//   expiry:{expires_at:i64 expiry_slot:u32}  messages with a ttl only (has_expiry)
//   key_slot:u32                   gated queues only: slot in its flow-key value's heap (KeyGate)
//   filter_slot:u32[pair_count]    slot in the filter heap of each metadata pair (while pending)
//   id[id_len]
//   packed_metadata[metadata_len]  metadata.h format; omitted (length 0) when there is none
//   payload[payload_len]           inline when at most kInlinePayloadBytes; else
//   large:{pointer:u64 length:u32} the payload in a block of its own (pages.h)
//
// What is *not* here: the time of the message's timer (visible_at, lease expiry, removal) and
// its lease token. Only a message that is not pending has them, and such a message is always in
// its queue's timer heap, whose entry holds both (queue.h). A pending message, the bulk of a
// deep queue, so does not pay 16 bytes for two zeros.
//
// `slot` is the message's position in the ready heap (pending and ready) or in the timer heap
// (not pending): a message is never in both.
//
// version and updated_at are stored narrow: the version in 32 bits and updated_at as the
// milliseconds since enqueued_at in 32 bits (49 days). A message whose values do not fit (4
// billion changes, a message updated 50 days after its enqueue or before it by a clock that
// went back) is marked `wide` and its queue keeps both in a side table (Queue::Stamp).
//
// Not thread-safe: guarded by the shard lock of its queue.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "engine/types.h"

namespace sundial {

// Payloads up to this size are stored inside the record; larger ones apart (docs/engine.md).
inline constexpr size_t kInlinePayloadBytes = size_t{16} << 10;
// Attempts and max_attempts are stored in 20 bits (max_attempts is at most 1,000,000:
// docs/semantics.md, "Limits").
inline constexpr uint32_t kMaxStoredAttempts = (1u << 20) - 1;

struct Message {
  int64_t priority;
  uint64_t seq;
  TimeMs enqueued_at;
  uint32_t version32;      // the version, unless wide
  uint32_t updated_delta;  // updated_at - enqueued_at, unless wide
  uint32_t slot;
  // attempts:20 | state:3 | has_error:1 | large_payload:1 | key_slot:1 | wide:1 | has_result:1
  // | in_graph:1 | has_history:1 | has_expiry:1
  uint32_t counts;
  uint32_t limits;   // max_attempts:20 | pair_count:5 | id_len-1:7
  uint32_t lengths;  // payload_len:19 (inline) | metadata_len:13

  // State value marking a free record in the store (MessageStore::ForEach skips it).
  static constexpr uint32_t kFreeState = 7;

  // ---- Fixed fields ---------------------------------------------------------------------------
  uint32_t attempts() const { return counts & kAttemptsMask; }
  void set_attempts(uint32_t a) { counts = (counts & ~kAttemptsMask) | a; }
  MessageState state() const { return static_cast<MessageState>((counts >> 20) & 7); }
  void set_state(MessageState s) {
    counts = (counts & ~(7u << 20)) | (static_cast<uint32_t>(s) << 20);
  }
  bool is_free() const { return ((counts >> 20) & 7) == kFreeState; }
  void mark_free() { counts |= 7u << 20; }
  bool has_error() const { return (counts & kHasError) != 0; }
  void set_has_error(bool on) { counts = on ? (counts | kHasError) : (counts & ~kHasError); }
  bool large_payload() const { return (counts & kLarge) != 0; }
  bool has_key_slot() const { return (counts & kKeySlot) != 0; }
  bool wide() const { return (counts & kWide) != 0; }
  void set_wide(bool on) { counts = on ? (counts | kWide) : (counts & ~kWide); }
  // A completed message's `result` is in its queue's results table (MessageTexts).
  bool has_result() const { return (counts & kHasResult) != 0; }
  void set_has_result(bool on) { counts = on ? (counts | kHasResult) : (counts & ~kHasResult); }
  // The message has a node in the engine's DependencyGraph (it has dependents or dependencies):
  // its terminal transitions and its removal must be reported (engine/dependencies.h).
  bool in_graph() const { return (counts & kInGraph) != 0; }
  void set_in_graph() { counts |= kInGraph; }
  // The message has a history block in its queue's MessageHistories (engine/history.h).
  bool has_history() const { return (counts & kHasHistory) != 0; }
  void set_has_history(bool on) { counts = on ? (counts | kHasHistory) : (counts & ~kHasHistory); }
  // The message's history is its enqueue alone, as pending, at enqueued_at: kept as this bit, not
  // as a block (Queue::HistoryBlock makes the block when it is read; engine/history.h,
  // EnqueuedBlock). Never with has_history().
  bool history_implicit() const { return (counts & kHistoryImplicit) != 0; }
  void set_history_implicit(bool on) {
    counts = on ? (counts | kHistoryImplicit) : (counts & ~kHistoryImplicit);
  }
  // The message has a ttl: its expires_at and its slot in the queue's expiry heap
  // (engine/expiry.h) lead the variable part. Fixed when the record is written.
  bool has_expiry() const { return (counts & kHasExpiry) != 0; }

  uint32_t max_attempts() const { return limits & kAttemptsMask; }
  void set_max_attempts(uint32_t a) { limits = (limits & ~kAttemptsMask) | a; }
  uint32_t pair_count() const { return (limits >> 20) & 31; }
  size_t id_len() const { return ((limits >> 25) & 127) + 1; }
  size_t metadata_len() const { return lengths >> 19; }

  // ---- Variable part --------------------------------------------------------------------------
  // Bytes of the record for these contents (what MessageStore::Allocate is asked for).
  static size_t RecordBytes(size_t id_len, size_t metadata_len, size_t payload_len,
                            uint32_t pair_count, bool key_slot, bool expiry = false) {
    size_t n = sizeof(Message) + (expiry ? kExpiryBytes : 0) +
               4 * (pair_count + (key_slot ? 1 : 0)) + id_len + metadata_len;
    return n + (payload_len > kInlinePayloadBytes ? kLargeRefBytes : payload_len);
  }

  // Writes every field of a new record at `at` (RecordBytes long): lengths, flags, the byte
  // strings, unset slots; numbers zero. `packed_metadata` of "\0" (no pairs) is stored as
  // nothing. A payload above kInlinePayloadBytes must already be in `large` (pages.h block).
  // `expiry`: room for expires_at (set to 0) and the expiry slot (unset).
  static Message* Init(void* at, std::string_view id, std::string_view packed_metadata,
                       std::string_view payload, uint32_t pair_count, bool key_slot, char* large,
                       bool expiry = false);

  TimeMs expires_at() const {
    if (!has_expiry()) return 0;
    TimeMs t;
    std::memcpy(&t, bytes(), sizeof t);
    return t;
  }
  void set_expires_at(TimeMs t) { std::memcpy(bytes(), &t, sizeof t); }
  uint32_t& expiry_slot() { return *reinterpret_cast<uint32_t*>(bytes() + 8); }
  uint32_t& key_slot() { return SlotAt(0); }
  uint32_t& filter_slot(uint32_t pair) { return SlotAt(pair + (has_key_slot() ? 1 : 0)); }

  std::string_view id() const { return {bytes() + slots_bytes(), id_len()}; }
  std::string_view packed_metadata() const {
    if (metadata_len() == 0) return {kNoMetadata, 1};
    return {bytes() + slots_bytes() + id_len(), metadata_len()};
  }
  std::string_view payload() const {
    const char* at = bytes() + slots_bytes() + id_len() + metadata_len();
    if (!large_payload()) return {at, lengths & kPayloadMask};
    char* block;
    uint32_t len;
    std::memcpy(&block, at, sizeof block);
    std::memcpy(&len, at + sizeof block, sizeof len);
    return {block, len};
  }
  // The payload's own block, if it lives apart (null otherwise).
  char* large_block() const {
    if (!large_payload()) return nullptr;
    char* block;
    std::memcpy(&block, bytes() + slots_bytes() + id_len() + metadata_len(), sizeof block);
    return block;
  }

 private:
  static constexpr uint32_t kAttemptsMask = (1u << 20) - 1;
  static constexpr uint32_t kHasError = 1u << 23;
  static constexpr uint32_t kLarge = 1u << 24;
  static constexpr uint32_t kKeySlot = 1u << 25;
  static constexpr uint32_t kWide = 1u << 26;
  static constexpr uint32_t kHasResult = 1u << 27;
  static constexpr uint32_t kInGraph = 1u << 28;
  static constexpr uint32_t kHasHistory = 1u << 29;
  static constexpr uint32_t kHasExpiry = 1u << 30;
  static constexpr uint32_t kHistoryImplicit = 1u << 31;
  static constexpr size_t kExpiryBytes = 12;
  static constexpr uint32_t kPayloadMask = (1u << 19) - 1;
  static constexpr size_t kLargeRefBytes = 12;
  static constexpr char kNoMetadata[1] = {0};

  // The expiry and the slots: what precedes the id.
  size_t slots_bytes() const {
    return (has_expiry() ? kExpiryBytes : 0) + 4 * (pair_count() + (has_key_slot() ? 1 : 0));
  }
  char* bytes() { return reinterpret_cast<char*>(this + 1); }
  const char* bytes() const { return reinterpret_cast<const char*>(this + 1); }
  uint32_t& SlotAt(uint32_t i) {
    return reinterpret_cast<uint32_t*>(bytes() + (has_expiry() ? kExpiryBytes : 0))[i];
  }
};
static_assert(sizeof(Message) == 48, "keep the record header small (docs/engine.md)");
static_assert(kInlinePayloadBytes < (1u << 19), "inline payload length fits 19 bits");

inline Message* Message::Init(void* at, std::string_view id, std::string_view packed_metadata,
                              std::string_view payload, uint32_t pair_count, bool key_slot,
                              char* large, bool expiry) {
  auto* m = static_cast<Message*>(at);
  const size_t metadata_len = pair_count == 0 ? 0 : packed_metadata.size();
  m->priority = 0;
  m->seq = 0;
  m->enqueued_at = 0;
  m->version32 = 0;
  m->updated_delta = 0;
  m->slot = UINT32_MAX;
  const bool is_large = payload.size() > kInlinePayloadBytes;
  m->counts = (is_large ? kLarge : 0) | (key_slot ? kKeySlot : 0) | (expiry ? kHasExpiry : 0);
  m->limits = (pair_count << 20) | (static_cast<uint32_t>(id.size() - 1) << 25);
  m->lengths = (static_cast<uint32_t>(metadata_len) << 19) |
               (is_large ? 0 : static_cast<uint32_t>(payload.size()));
  if (expiry) {
    m->set_expires_at(0);
    m->expiry_slot() = UINT32_MAX;
  }
  const uint32_t slots = pair_count + (key_slot ? 1 : 0);
  for (uint32_t i = 0; i < slots; ++i) m->SlotAt(i) = UINT32_MAX;
  char* p = m->bytes() + (expiry ? kExpiryBytes : 0) + 4 * slots;
  std::memcpy(p, id.data(), id.size());
  p += id.size();
  if (metadata_len > 0) std::memcpy(p, packed_metadata.data(), metadata_len);
  p += metadata_len;
  if (!is_large) {
    if (!payload.empty()) std::memcpy(p, payload.data(), payload.size());
  } else {
    const auto len = static_cast<uint32_t>(payload.size());
    std::memcpy(p, &large, sizeof large);
    std::memcpy(p + sizeof large, &len, sizeof len);
  }
  return m;
}

}  // namespace sundial
