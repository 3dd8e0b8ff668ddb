#include "engine/history.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include <boost/unordered/unordered_flat_map.hpp>

namespace sundial {
namespace {

constexpr uint32_t kAttemptBits = 20;
constexpr uint32_t kAttemptMask = (1u << kAttemptBits) - 1;
constexpr size_t kMaxTextBytes = UINT16_MAX;

void Store16(char* p, uint16_t v) {
  p[0] = static_cast<char>(v & 0xff);
  p[1] = static_cast<char>(v >> 8);
}
void Store32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void Store64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t Load(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

// Header fields (history.h).
uint16_t CountOf(std::string_view b) { return static_cast<uint16_t>(Load(b.data(), 2)); }
uint32_t DroppedOf(std::string_view b) { return static_cast<uint32_t>(Load(b.data() + 2, 4)); }
uint64_t LeaseTokenOf(std::string_view b) { return Load(b.data() + 6, 8); }

// Entry fields at `p` (history.h).
TimeMs TimeAt(const char* p) { return static_cast<TimeMs>(Load(p, 8)); }
uint64_t TokenAt(const char* p) { return Load(p + 8, 8); }
uint32_t BitsAt(const char* p) { return static_cast<uint32_t>(Load(p + 16, 4)); }
size_t EntrySize(const char* p) { return kHistoryEntryFixedBytes + Load(p + 20, 2); }
HistoryEvent EventOf(uint32_t bits) { return static_cast<HistoryEvent>((bits >> 26) & 31); }

uint32_t PackBits(uint32_t attempt, MessageState from, MessageState to, HistoryEvent event) {
  return std::min(attempt, kAttemptMask) | (static_cast<uint32_t>(from) << 20) |
         (static_cast<uint32_t>(to) << 23) | (static_cast<uint32_t>(event) << 26);
}

// Writes one entry at `p`: kHistoryEntryFixedBytes + text.size() bytes (history.h).
void PutEntry(char* p, TimeMs time, uint64_t token, uint32_t bits, std::string_view text) {
  Store64(p, static_cast<uint64_t>(time));
  Store64(p + 8, token);
  Store32(p + 16, bits);
  Store16(p + 20, static_cast<uint16_t>(text.size()));
  std::memcpy(p + kHistoryEntryFixedBytes, text.data(), text.size());
}

bool KnownEvent(uint32_t v) {
  return v <= static_cast<uint32_t>(HistoryEvent::kDebounced) ||
         v == static_cast<uint32_t>(HistoryEvent::kDeadLettered) ||
         v == static_cast<uint32_t>(HistoryEvent::kNoted);
}

// The text an entry keeps of its effect.
std::string_view TextOf(const Effect& e, HistoryEvent event) {
  switch (event) {
    case HistoryEvent::kLeased:
      return e.worker_id;
    case HistoryEvent::kFailed:
    case HistoryEvent::kDependencyFailed:
    case HistoryEvent::kDeadLettered:
      return e.error;
    case HistoryEvent::kNoted:
      return e.note;
    default:
      return {};
  }
}

}  // namespace

bool HistoryEntryOf(const Effect& e, HistoryEntry* out) {
  switch (e.type) {
    case EffectType::kMessageEnqueued:
      if (e.restated) return false;
      out->event = HistoryEvent::kEnqueued;
      break;
    case EffectType::kMessageChanged:
      if (e.cause == ChangeCause::kNone) return false;  // a snapshot's restatement
      out->event = static_cast<HistoryEvent>(e.cause);
      break;
    case EffectType::kMessageDeadLettered:
      out->event = HistoryEvent::kDeadLettered;
      break;
    case EffectType::kMessageNoted:
      out->event = HistoryEvent::kNoted;
      break;
    default:
      return false;
  }
  out->time = e.time;
  out->from = e.type == EffectType::kMessageEnqueued ? e.to : e.from;
  out->to = e.to;
  out->attempt = e.attempts;
  // An enqueue concerns no lease (a waiting message's effect carries its future visible_at in
  // the token: queue.h).
  out->lease_token = e.type == EffectType::kMessageEnqueued ? 0 : e.lease_token;
  out->text.assign(TextOf(e, out->event));
  return true;
}

std::string_view EnqueuedBlock(TimeMs time, EnqueuedBlockBuffer& out) {
  std::memset(out, 0, kHistoryHeaderBytes);
  Store16(out, 1);
  PutEntry(out + kHistoryHeaderBytes, time, 0,
           PackBits(0, MessageState::kPending, MessageState::kPending, HistoryEvent::kEnqueued),
           "");  // not {}: memcpy's source must not be null, even for no bytes
  return {out, kEnqueuedBlockBytes};
}

bool ValidHistoryBlock(std::string_view block) {
  if (block.size() < kHistoryHeaderBytes) return false;
  const uint16_t count = CountOf(block);
  size_t at = kHistoryHeaderBytes;
  for (uint16_t i = 0; i < count; ++i) {
    if (block.size() - at < kHistoryEntryFixedBytes) return false;
    const char* p = block.data() + at;
    const uint32_t bits = BitsAt(p);
    if (((bits >> 20) & 7) >= kStateCount || ((bits >> 23) & 7) >= kStateCount ||
        !KnownEvent((bits >> 26) & 31) || (bits >> 31) != 0) {
      return false;
    }
    const size_t size = EntrySize(p);
    if (block.size() - at < size) return false;
    at += size;
  }
  return at == block.size();
}

MessageHistory DecodeHistoryBlock(std::string_view block) {
  MessageHistory h;
  if (block.size() < kHistoryHeaderBytes) return h;
  h.dropped = DroppedOf(block);
  const uint16_t count = CountOf(block);
  h.entries.reserve(count);
  boost::unordered_flat_map<uint64_t, size_t> lease_of;  // token -> the lease's entry
  size_t at = kHistoryHeaderBytes;
  for (uint16_t i = 0; i < count; ++i) {
    const char* p = block.data() + at;
    const uint32_t bits = BitsAt(p);
    HistoryEntry& x = h.entries.emplace_back();
    x.time = TimeAt(p);
    x.lease_token = TokenAt(p);
    x.attempt = bits & kAttemptMask;
    x.from = static_cast<MessageState>((bits >> 20) & 7);
    x.to = static_cast<MessageState>((bits >> 23) & 7);
    x.event = EventOf(bits);
    x.text.assign(p + kHistoryEntryFixedBytes, EntrySize(p) - kHistoryEntryFixedBytes);
    if (x.event == HistoryEvent::kLeased) lease_of[x.lease_token] = h.entries.size() - 1;
    at += EntrySize(p);
  }
  for (HistoryEntry& x : h.entries) {
    if (x.lease_token == 0) continue;
    if (auto it = lease_of.find(x.lease_token); it != lease_of.end()) {
      x.worker_id = h.entries[it->second].text;
    }
  }
  return h;
}

std::string_view MessageHistories::ViewOf(const char* a) {
  return {a + kPrefixBytes, static_cast<size_t>(Load(a, kPrefixBytes))};
}

namespace {

// (Re)allocates `a` (null: a new one) to hold a `size`-byte block and records that size.
char* Resize(char* a, size_t size) {
  void* p = std::realloc(a, size + 4);
  if (p == nullptr) throw std::bad_alloc();
  char* r = static_cast<char*>(p);
  Store32(r, static_cast<uint32_t>(size));
  return r;
}

}  // namespace

char** MessageHistories::Make(MessageRef ref) {
  const uint32_t ci = ref >> kRefSlotBits;
  if (ci >= chunks_.size()) chunks_.resize(ci + 1);
  if (chunks_[ci] == nullptr) chunks_[ci] = std::make_unique<Chunk>();
  std::vector<char*>& slots = chunks_[ci]->slots;
  const uint32_t slot = ref & kRefSlotMask;
  if (slot >= slots.size()) slots.resize(slot + 1, nullptr);
  return &slots[slot];
}

char* MessageHistories::Detach(MessageRef ref) {
  const uint32_t ci = ref >> kRefSlotBits;
  Chunk& c = *chunks_[ci];
  char*& slot = c.slots[ref & kRefSlotMask];
  char* const a = slot;
  slot = nullptr;
  bytes_ -= ViewOf(a).size();
  if (--c.live == 0) {
    // An emptied chunk gives its array back, and a drained queue all of them.
    chunks_[ci].reset();
    while (!chunks_.empty() && chunks_.back() == nullptr) chunks_.pop_back();
    if (chunks_.empty()) decltype(chunks_)().swap(chunks_);
  }
  return a;
}

int64_t MessageHistories::Record(MessageRef ref, const Effect& e, uint32_t max,
                                 uint64_t ended_lease) {
  thread_local HistoryEntry entry;
  if (!HistoryEntryOf(e, &entry)) return 0;
  max = std::max<uint32_t>(max, 2);
  char** slot = Make(ref);
  size_t before = 0;  // the block's bytes before this entry (none: a new block)
  if (*slot == nullptr) {
    *slot = Resize(nullptr, kHistoryHeaderBytes);
    std::memset(*slot + kPrefixBytes, 0, kHistoryHeaderBytes);
    Took(ref);
  } else {
    before = ViewOf(*slot).size();
  }
  // Edited in place: the block only moves when realloc moves it, once per entry at most.
  char* b = *slot + kPrefixBytes;
  size_t size = ViewOf(*slot).size();
  uint64_t token = entry.lease_token;
  if (entry.event == HistoryEvent::kLeased) Store64(b + 6, token);
  if (token == 0 && entry.from == MessageState::kRunning) {
    token = ended_lease != 0 ? ended_lease : LeaseTokenOf({b, size});
  }
  uint16_t count = CountOf({b, size});
  const uint32_t bits = PackBits(entry.attempt, entry.from, entry.to, entry.event);
  // Consecutive extends of one lease: one entry, at the latest.
  if (entry.event == HistoryEvent::kExtended && count > 0) {
    size_t last = kHistoryHeaderBytes;
    for (uint16_t i = 1; i < count; ++i) last += EntrySize(b + last);
    const char* p = b + last;
    if (EventOf(BitsAt(p)) == HistoryEvent::kExtended && TokenAt(p) == token) {
      Store64(b + last, static_cast<uint64_t>(entry.time));
      Store32(b + last + 16, bits);
      return 0;
    }
  }
  // Past max: keep the first and the latest max - 1.
  uint32_t dropped = DroppedOf({b, size});
  while (count >= max) {
    const size_t second = kHistoryHeaderBytes + EntrySize(b + kHistoryHeaderBytes);
    const size_t n = EntrySize(b + second);
    std::memmove(b + second, b + second + n, size - second - n);
    size -= n;
    --count;
    ++dropped;
  }
  Store32(b + 2, dropped);
  const std::string_view text =
      std::string_view(entry.text).substr(0, std::min(entry.text.size(), kMaxTextBytes));
  const size_t at = size;
  size += kHistoryEntryFixedBytes + text.size();
  *slot = Resize(*slot, size);
  b = *slot + kPrefixBytes;
  PutEntry(b + at, entry.time, token, bits, text);
  Store16(b, static_cast<uint16_t>(count + 1));
  const int64_t delta = static_cast<int64_t>(size) - static_cast<int64_t>(before);
  bytes_ = static_cast<uint64_t>(static_cast<int64_t>(bytes_) + delta);
  return delta;
}

int64_t MessageHistories::Restore(MessageRef ref, std::string_view block) {
  const int64_t freed = static_cast<int64_t>(Erase(ref));
  if (block.size() < kHistoryHeaderBytes || (CountOf(block) == 0 && DroppedOf(block) == 0)) {
    return -freed;
  }
  char** slot = Make(ref);
  *slot = Resize(nullptr, block.size());
  std::memcpy(*slot + kPrefixBytes, block.data(), block.size());
  Took(ref);
  bytes_ += block.size();
  return static_cast<int64_t>(block.size()) - freed;
}

uint64_t MessageHistories::MoveTo(MessageRef from, MessageHistories* other, MessageRef to) {
  char* const* found = Find(from);
  if (found == nullptr || *found == nullptr) return 0;
  char* const a = Detach(from);  // the allocation now belongs to `other`
  const uint64_t n = ViewOf(a).size();
  (void)other->Erase(to);
  *other->Make(to) = a;
  other->Took(to);
  other->bytes_ += n;
  return n;
}

uint64_t MessageHistories::Erase(MessageRef ref) {
  char* const* found = Find(ref);
  if (found == nullptr || *found == nullptr) return 0;
  char* const a = Detach(ref);
  const uint64_t n = ViewOf(a).size();
  std::free(a);
  return n;
}

void MessageHistories::Clear() {
  for (const std::unique_ptr<Chunk>& c : chunks_) {
    if (c == nullptr) continue;
    for (char* a : c->slots) std::free(a);
  }
  decltype(chunks_)().swap(chunks_);
  bytes_ = 0;
}

uint64_t MessageHistories::allocated_bytes() const {
  // The per-chunk arrays (with their spare capacity) and each block with its size prefix as
  // malloc rounds it (16-byte chunks with an 8-byte header).
  uint64_t total = chunks_.capacity() * sizeof(std::unique_ptr<Chunk>);
  for (const std::unique_ptr<Chunk>& c : chunks_) {
    if (c == nullptr) continue;
    total += sizeof(Chunk) + c->slots.capacity() * sizeof(char*);
    for (const char* a : c->slots) {
      if (a != nullptr) total += (ViewOf(a).size() + kPrefixBytes + 8 + 15) / 16 * 16;
    }
  }
  return total;
}

}  // namespace sundial
