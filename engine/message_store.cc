#include "engine/message_store.h"

#include <algorithm>
#include <bit>
#include <cstdlib>

#include "engine/pages.h"

namespace sundial {
namespace {

constexpr uint32_t kSmallClasses = 128;     // 8, 16, ..., 1024 bytes
constexpr uint32_t kStepsPerDoubling = 16;  // above 1 KiB: 1/16 steps

}  // namespace

uint32_t MessageStore::ClassOf(size_t bytes, uint32_t* stride) {
  if (bytes <= 8 * kSmallClasses) {
    const auto cls = static_cast<uint32_t>((bytes + 7) / 8);
    *stride = cls * 8;
    return cls;
  }
  const auto p = static_cast<uint32_t>(std::bit_width(bytes - 1) - 1);  // 2^p < bytes <= 2^(p+1)
  const size_t step = size_t{1} << (p - 4);
  const size_t rounded = (bytes + step - 1) & ~(step - 1);
  *stride = static_cast<uint32_t>(rounded);
  return kSmallClasses + (p - 10) * kStepsPerDoubling +
         static_cast<uint32_t>((rounded - (size_t{1} << p)) / step);
}

uint32_t MessageStore::StrideFor(size_t bytes) {
  uint32_t stride;
  ClassOf(bytes, &stride);
  return stride;
}

MessageRef MessageStore::Allocate(size_t bytes) {
  uint32_t stride;
  const uint32_t number = ClassOf(bytes, &stride);
  if (number >= classes_.size()) classes_.resize(number + 1);
  SizeClass& cls = classes_[number];
  cls.stride = stride;
  if (cls.partial.empty()) AddToPartial(NewChunk(number));
  const uint32_t ci = cls.partial.back();
  Chunk& c = chunks_[ci];
  if (cls.spare == ci) {
    if (cls.records == 0) ForgetIdle(ci);
    cls.spare = kNoChunk;
  }
  uint32_t slot;
  if (c.free_head != kNoRef) {
    slot = c.free_head;
    std::memcpy(&c.free_head, c.base + size_t{slot} * c.stride, sizeof c.free_head);
  } else {
    slot = c.bump++;
  }
  ++c.live;
  ++cls.records;
  ++live_;
  if (c.free_head == kNoRef && c.bump == c.capacity) RemoveFromPartial(ci);
  return (ci << kSlotBits) | slot;
}

void MessageStore::Free(MessageRef ref) {
  const uint32_t ci = ref >> kSlotBits;
  const uint32_t slot = ref & kSlotMask;
  Chunk& c = chunks_[ci];
  char* at = c.base + size_t{slot} * c.stride;
  reinterpret_cast<Message*>(at)->mark_free();
  std::memcpy(at, &c.free_head, sizeof c.free_head);
  c.free_head = slot;
  const bool was_full = c.partial_pos == kNoChunk;
  --c.live;
  --live_;
  SizeClass& cls = classes_[c.size_class];
  --cls.records;
  if (was_full) AddToPartial(ci);
  if (c.live > 0) return;
  // An empty chunk: keep one per class as a spare while the class has records elsewhere.
  if (cls.records == 0) {
    // Of the spare and this chunk, the smaller may stay idle (KeepIdleOrRelease decides).
    uint32_t keep = ci;
    if (cls.spare != kNoChunk && cls.spare != ci) {
      const bool spare_smaller = chunks_[cls.spare].capacity < c.capacity;
      ReleaseChunk(spare_smaller ? ci : cls.spare);
      if (spare_smaller) keep = cls.spare;
    }
    cls.spare = kNoChunk;
    KeepIdleOrRelease(keep);
  } else if (cls.spare == kNoChunk) {
    cls.spare = ci;
  } else {
    ReleaseChunk(ci);
  }
}

void MessageStore::KeepIdleOrRelease(uint32_t number) {
  Chunk& c = chunks_[number];
  SizeClass& cls = classes_[c.size_class];
  const uint32_t least = std::min<uint32_t>(
      std::min<size_t>(kMaxSlots, std::max<size_t>(1, kMaxChunkBytes / c.stride)),
      std::max<size_t>(1, kMinChunkBytes / c.stride));
  // Next time the class starts small again: a drained class must not map 2 MiB for one record.
  cls.largest_capacity = 0;
  if (c.capacity > least || c.alloc_bytes > kIdleBytesKept) {
    ReleaseChunk(number);
    return;
  }
  while (idle_bytes_ + c.alloc_bytes > kIdleBytesKept) {
    const uint32_t oldest = idle_chunks_.front();
    idle_chunks_.erase(idle_chunks_.begin());  // a few entries: each at least 2 KiB
    idle_bytes_ -= chunks_[oldest].alloc_bytes;
    classes_[chunks_[oldest].size_class].spare = kNoChunk;
    ReleaseChunk(oldest);
  }
  idle_chunks_.push_back(number);
  idle_bytes_ += c.alloc_bytes;
  cls.spare = number;
}

void MessageStore::ForgetIdle(uint32_t number) {
  const auto it = std::find(idle_chunks_.begin(), idle_chunks_.end(), number);
  idle_chunks_.erase(it);
  idle_bytes_ -= chunks_[number].alloc_bytes;
}

uint32_t MessageStore::NewChunk(uint32_t class_number) {
  SizeClass& cls = classes_[class_number];
  uint32_t number;
  if (!free_chunk_numbers_.empty()) {
    number = free_chunk_numbers_.back();
    free_chunk_numbers_.pop_back();
  } else {
    if (chunks_.size() > kSlotMask) std::abort();  // 128 GiB of records in one queue
    number = static_cast<uint32_t>(chunks_.size());
    chunks_.emplace_back();
  }
  const uint32_t stride = cls.stride;
  const auto most = static_cast<uint32_t>(
      std::min<size_t>(kMaxSlots, std::max<size_t>(1, kMaxChunkBytes / stride)));
  const auto least =
      static_cast<uint32_t>(std::min<size_t>(most, std::max<size_t>(1, kMinChunkBytes / stride)));
  const uint32_t capacity = std::clamp<uint32_t>(
      cls.largest_capacity == 0 ? least : 2 * cls.largest_capacity, least, most);
  cls.largest_capacity = std::max(cls.largest_capacity, capacity);
  Chunk& c = chunks_[number];
  c = Chunk{};
  c.stride = stride;
  c.size_class = class_number;
  c.capacity = capacity;
  // A chunk of the largest size takes exactly 2 MiB: one huge page.
  c.alloc_bytes = capacity == most && kMaxChunkBytes >= size_t{capacity} * stride
                      ? std::max(kMaxChunkBytes, size_t{capacity} * stride)
                      : size_t{capacity} * stride;
  c.base = static_cast<char*>(pages::Allocate(c.alloc_bytes));
  ++chunks_mapped_;
  return number;
}

void MessageStore::ReleaseChunk(uint32_t number) {
  Chunk& c = chunks_[number];
  if (c.partial_pos != kNoChunk) RemoveFromPartial(number);
  pages::Free(c.base, c.alloc_bytes);
  c = Chunk{};
  free_chunk_numbers_.push_back(number);
}

void MessageStore::AddToPartial(uint32_t number) {
  Chunk& c = chunks_[number];
  SizeClass& cls = classes_[c.size_class];
  c.partial_pos = static_cast<uint32_t>(cls.partial.size());
  cls.partial.push_back(number);
}

void MessageStore::RemoveFromPartial(uint32_t number) {
  Chunk& c = chunks_[number];
  SizeClass& cls = classes_[c.size_class];
  const uint32_t last = cls.partial.back();
  cls.partial[c.partial_pos] = last;
  chunks_[last].partial_pos = c.partial_pos;
  cls.partial.pop_back();
  c.partial_pos = kNoChunk;
}

uint64_t MessageStore::allocated_bytes() const {
  uint64_t total = chunks_.capacity() * sizeof(Chunk) + classes_.capacity() * sizeof(SizeClass);
  for (const Chunk& c : chunks_) total += c.alloc_bytes;
  return total;
}

void MessageStore::Clear() {
  for (Chunk& c : chunks_) {
    if (c.base != nullptr) pages::Free(c.base, c.alloc_bytes);
  }
  chunks_ = {};
  free_chunk_numbers_ = {};
  classes_ = {};
  idle_chunks_ = {};
  idle_bytes_ = 0;
  live_ = 0;
}

}  // namespace sundial
