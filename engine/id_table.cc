#include "engine/id_table.h"

#include <emmintrin.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace sundial {
namespace {

// Bit i set when tags[i] == tag, for the 12 slots.
uint32_t MatchTags(const uint8_t* tags, uint8_t tag) {
  const __m128i group = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tags));
  const __m128i want = _mm_set1_epi8(static_cast<char>(tag));
  return static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(group, want))) & 0xfff;
}

}  // namespace

IdTable::~IdTable() { Clear(); }

uint64_t IdTable::Hash(std::string_view id) { return XXH3_64bits(id.data(), id.size()); }

MessageRef IdTable::Find(std::string_view id, uint64_t hash) const {
  if (size_ == 0) return kNoRef;
  const uint8_t tag = TagOf(hash);
  const uint8_t bit = OverflowBit(hash);
  size_t g = HomeGroup(hash);
  for (size_t probes = 0; probes < groups_count_; ++probes) {
    const Group& group = groups_[g];
    for (uint32_t m = MatchTags(group.tags, tag); m != 0; m &= m - 1) {
      const MessageRef ref = group.refs[std::countr_zero(m)];
      if (store_->At(ref)->id() == id) return ref;
    }
    if ((group.overflow & bit) == 0) return kNoRef;
    if (++g == groups_count_) g = 0;
  }
  return kNoRef;
}

void IdTable::Insert(MessageRef ref, uint64_t hash) {
  if (budget_ == 0) {
    // Out of budget: the table is full, or churn has left overflow bits behind. A rebuild at
    // the same size clears those; a table more than 70% full grows instead.
    const size_t same = groups_count_;
    const size_t grown =
        std::max(GroupsFor(size_ + 1), groups_count_ + (bulk_ ? groups_count_ : groups_count_ / 2));
    Rebuild(same > 0 && size_ + 1 <= MaxSize() * 7 / 10 ? same : grown, ref);
  }
  Place(ref, hash);
  ++size_;
  --budget_;
}

void IdTable::Place(MessageRef ref, uint64_t hash) {
  size_t g = HomeGroup(hash);
  while (true) {
    Group& group = groups_[g];
    const uint32_t empty = MatchTags(group.tags, 0);
    if (empty != 0) {
      const int i = std::countr_zero(empty);
      group.tags[i] = TagOf(hash);
      group.refs[i] = ref;
      return;
    }
    group.overflow |= OverflowBit(hash);
    if (++g == groups_count_) g = 0;
  }
}

void IdTable::Erase(MessageRef ref, std::string_view id) {
  const uint64_t hash = Hash(id);
  const uint8_t tag = TagOf(hash);
  size_t g = HomeGroup(hash);
  for (size_t probes = 0; probes < groups_count_; ++probes) {
    Group& group = groups_[g];
    for (uint32_t m = MatchTags(group.tags, tag); m != 0; m &= m - 1) {
      const int i = std::countr_zero(m);
      if (group.refs[i] != ref) continue;
      group.tags[i] = 0;
      --size_;
      if (group.overflow == 0) ++budget_;
      if (groups_count_ > 1 && size_ < MaxSize() / 4) {
        Rebuild(GroupsFor(size_), ref);  // still in the store
      }
      return;
    }
    if (++g == groups_count_) g = 0;
  }
}

void IdTable::Reserve(size_t n) {
  if (n > MaxSize()) Rebuild(GroupsFor(n), kNoRef);
}

size_t IdTable::GroupsFor(size_t n) {
  // n at 2/3 load, so that the next growth is 1.5x away; at least one group.
  return std::max<size_t>(1, (n * 3 / 2 + kSlots - 1) / kSlots);
}

void IdTable::Rebuild(size_t groups, MessageRef skip) {
  pages::Free(groups_, groups_count_ * sizeof(Group));
  groups_count_ = groups;
  groups_ = static_cast<Group*>(pages::Allocate(groups * sizeof(Group)));
  std::memset(groups_, 0, groups * sizeof(Group));
  size_t placed = 0;
  // Records in address order: a sequential read of the store, not one miss per element.
  store_->ForEach([&](MessageRef ref, const Message* m) {
    if (ref == skip) return;
    Place(ref, Hash(m->id()));
    ++placed;
  });
  size_ = placed;
  budget_ = MaxSize() - size_;
}

void IdTable::Clear() {
  pages::Free(groups_, groups_count_ * sizeof(Group));
  groups_ = nullptr;
  groups_count_ = 0;
  size_ = 0;
  budget_ = 0;
}

}  // namespace sundial
