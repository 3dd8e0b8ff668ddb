#include "engine/key_gate.h"

#include <cstring>
#include <functional>

#include "engine/metadata.h"

namespace sundial {

size_t KeyGate::ValueHash::operator()(std::string_view v) const {
  return std::hash<std::string_view>{}(v);
}

KeyGate::KeyGate(const MessageStore* store, ReadyIndex* ready, std::string flow_key, uint32_t limit,
                 uint64_t* blocked)
    : store_(store),
      ready_(ready),
      flow_key_(std::move(flow_key)),
      limit_(limit),
      blocked_(blocked),
      by_value_(0, ValueHash{this}, ValueEqual{this}) {}

KeyGate::~KeyGate() { Clear(); }

void KeyGate::Clear() {
  for (KeyRef k : by_value_) keys_[k].pending.Release();
  by_value_.clear();
  keys_.clear();
  values_.clear();
  free_ = kNoKey;
  garbage_ = 0;
}

uint64_t KeyGate::allocated_bytes() const {
  uint64_t total = keys_.capacity_bytes() + values_.capacity_bytes() +
                   by_value_.bucket_count() * (sizeof(KeyRef) + 1) + sizeof(*this);
  for (KeyRef k : by_value_) total += keys_[k].pending.capacity_bytes();
  return total;
}

std::string_view KeyGate::ValueOf(const Message* m) const {
  return FindMetadataValue(m->packed_metadata(), flow_key_).value_or("");
}

std::string_view KeyGate::Value(KeyRef k) const {
  const char* p = values_.data() + keys_[k].value_at;
  uint16_t len;
  std::memcpy(&len, p, sizeof(len));
  return {p + sizeof(len), len};
}

KeyRef KeyGate::Find(std::string_view value) const {
  auto it = by_value_.find(value);
  return it == by_value_.end() ? kNoKey : *it;
}

KeyRef KeyGate::Acquire(std::string_view value) {
  if (auto it = by_value_.find(value); it != by_value_.end()) return *it;
  KeyRef k;
  if (free_ != kNoKey) {
    k = free_;
    free_ = keys_[k].value_at;
  } else {
    k = static_cast<KeyRef>(keys_.size());
    keys_.push_back(KeyState{});
  }
  KeyState& s = keys_[k];
  s.pending.Init();
  s.running = 0;
  s.value_at = static_cast<uint32_t>(values_.size());
  const auto len = static_cast<uint16_t>(value.size());  // <= kMaxMetadataValueBytes
  const size_t at = values_.size();
  const size_t need = at + sizeof(len) + len;
  if (need > values_.capacity_bytes()) values_.reserve(need + need / 2);  // amortized growth
  values_.resize_uninitialized(need);
  std::memcpy(values_.data() + at, &len, sizeof(len));
  std::memcpy(values_.data() + at + sizeof(len), value.data(), len);
  by_value_.insert(k);
  return k;
}

void KeyGate::MaybeRelease(KeyRef k) {
  KeyState& s = keys_[k];
  if (!s.pending.empty() || s.running != 0) return;
  by_value_.erase(k);
  garbage_ += sizeof(uint16_t) + Value(k).size();
  s.pending.Release();
  s.value_at = free_;
  free_ = k;
  if (garbage_ > 4096 && garbage_ * 2 > values_.size()) CompactValues();
}

void KeyGate::CompactValues() {
  PodVector<char> fresh;
  fresh.reserve(values_.size() - garbage_);
  for (KeyRef k : by_value_) {
    const std::string_view v = Value(k);
    const size_t at = fresh.size();
    const size_t n = sizeof(uint16_t) + v.size();
    fresh.resize_uninitialized(at + n);
    std::memcpy(fresh.data() + at, values_.data() + keys_[k].value_at, n);
    keys_[k].value_at = static_cast<uint32_t>(at);
  }
  values_ = std::move(fresh);
  garbage_ = 0;
}

void KeyGate::Reclassify(KeyRef k, bool was_held) {
  KeyState& s = keys_[k];
  const bool held = Held(s);
  if (held == was_held || bulk_ || s.pending.empty()) return;
  if (held) {
    const Message* head = store_->At(s.pending.top().ref);
    if (head->slot != kNoSlot) ready_->Remove(head->slot);
    *blocked_ += s.pending.size();
  } else {
    *blocked_ -= s.pending.size();
    ready_->Push(s.pending.top());
  }
}

void KeyGate::SetLimit(uint32_t limit) {
  const uint32_t old = limit_;
  if (limit == old) return;
  for (KeyRef k : by_value_) {
    limit_ = old;
    const bool was_held = Held(keys_[k]);
    limit_ = limit;
    Reclassify(k, was_held);
  }
  limit_ = limit;
}

void KeyGate::AttachPending(MessageRef ref, Message* m) {
  const ReadyEntry entry{m->priority, ref};
  m->slot = kNoSlot;
  const KeyRef k = Acquire(ValueOf(m));
  KeyState& s = keys_[k];
  if (bulk_) {
    s.pending.Push(entry, traits(), /*unordered=*/true);  // heads and counts: EndBulk
    return;
  }
  const MessageRef old_head = s.pending.empty() ? kNoRef : s.pending.top().ref;
  s.pending.Push(entry, traits());
  if (Held(s)) {
    ++*blocked_;
  } else if (s.pending.top().ref == ref) {
    if (old_head != kNoRef) ready_->Remove(store_->At(old_head)->slot);
    ready_->Push(entry);
  }
}

void KeyGate::DetachPending(MessageRef ref, Message* m) {
  (void)ref;
  const KeyRef k = Find(ValueOf(m));
  KeyState& s = keys_[k];
  if (bulk_) {
    s.pending.Remove(m->group_slot(), traits(), /*unordered=*/true);
  } else {
    const bool was_ready = m->slot != kNoSlot;
    s.pending.Remove(m->group_slot(), traits());
    if (Held(s)) {
      --*blocked_;
    } else if (was_ready) {
      ready_->Remove(m->slot);
      if (!s.pending.empty()) ready_->Push(s.pending.top());
    }
  }
  MaybeRelease(k);
}

void KeyGate::AttachRunning(const Message* m) {
  const KeyRef k = Acquire(ValueOf(m));
  const bool was_held = Held(keys_[k]);
  ++keys_[k].running;
  Reclassify(k, was_held);
}

void KeyGate::DetachRunning(const Message* m) {
  const KeyRef k = Find(ValueOf(m));
  const bool was_held = Held(keys_[k]);
  --keys_[k].running;
  Reclassify(k, was_held);
  MaybeRelease(k);
}

bool KeyGate::Dispatchable(const Message* m) const {
  const KeyRef k = Find(ValueOf(m));
  return k == kNoKey || !Held(keys_[k]);
}

uint32_t KeyGate::RunningOf(const Message* m) const {
  const KeyRef k = Find(ValueOf(m));
  return k == kNoKey ? 0 : keys_[k].running;
}

void KeyGate::BeginBulk() { bulk_ = true; }

void KeyGate::EndBulk() {
  bulk_ = false;
  // The ready index holds the head of every key that is not held.
  ready_->Clear();
  ready_->BeginUnordered();
  *blocked_ = 0;
  for (KeyRef k : by_value_) {
    KeyState& s = keys_[k];
    s.pending.Heapify(traits());
    if (s.pending.empty()) continue;
    if (Held(s)) {
      *blocked_ += s.pending.size();
    } else {
      ready_->Push(s.pending.top());
    }
  }
  ready_->Heapify();
}

}  // namespace sundial
