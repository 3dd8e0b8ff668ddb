#include "engine/key_gate.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include <xxhash.h>
#include "engine/metadata.h"

namespace sundial {

size_t KeyGate::ValueHash::operator()(std::string_view v) const {
  return std::hash<std::string_view>{}(v);
}

KeyGate::KeyGate(const MessageStore* store, ReadyIndex* ready, std::string flow_key, uint32_t limit,
                 StateCounts* counts)
    : store_(store),
      ready_(ready),
      flow_key_(std::move(flow_key)),
      limit_(limit),
      counts_(counts),
      by_value_(0, ValueHash{this}, ValueEqual{this}) {}

KeyGate::~KeyGate() { Clear(); }

void KeyGate::Clear() {
  for (KeyRef k : by_value_) keys_[k].pending.Release();
  by_value_.clear();
  keys_.clear();
  values_.clear();
  free_ = kNoKey;
  garbage_ = 0;
  refill_.clear();
  cooling_.clear();
  live_.clear();
  ring_.clear();
  front_turn_ = 0;
  refill_at_.clear();
}

uint64_t KeyGate::allocated_bytes() const {
  uint64_t total = keys_.capacity_bytes() + values_.capacity_bytes() +
                   by_value_.bucket_count() * (sizeof(KeyRef) + 1) + sizeof(*this);
  for (KeyRef k : by_value_) total += keys_[k].pending.capacity_bytes();
  // Throttled keys' refill times; fair share's ring (a deque: blocks of 512 bytes, and a map).
  total += refill_at_.bucket_count() * (sizeof(std::pair<KeyRef, TimeMs>) + 1);
  total += (ring_.size() / 128 + 1) * (512 + sizeof(void*));
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
  if (auto it = by_value_.find(value); it != by_value_.end()) {
    const KeyState& s = keys_[*it];
    if (s.pending.empty() && s.running == 0) cooling_.erase({s.tat_us, *it});  // back from cooling
    return *it;
  }
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
  s.tat_us = 0;
  s.throttled = 0;
  s.value_at = static_cast<uint32_t>(values_.size());
  // A new key on a reused KeyRef starts no turn (a stale ring entry, if any, is now its own).
  if (!ring_.empty() && ring_.front() == k) front_turn_ = 0;
  if (!overrides_.empty()) {
    if (auto it = overrides_.find(value); it != overrides_.end()) live_[k] = &it->second;
  }
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
  // Its bucket is not full yet: it cools (Collect), and stays throttled until its refill, so
  // that a message that comes back before its token is blocked (as after a restart: EndBulk).
  if (s.tat_us > last_collect_ * 1000) {
    cooling_.insert({s.tat_us, k});
    return;
  }
  Release(k);
}

void KeyGate::Release(KeyRef k) {
  DropRefill(k);  // a full bucket: its refill is due (lazily) already
  KeyState& s = keys_[k];
  by_value_.erase(k);
  if (!live_.empty()) live_.erase(k);
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

void KeyGate::CountOut(BlockReason why, uint64_t n) {
  if (why == BlockReason::kNone) return;
  counts_->blocked += n;
  (why == BlockReason::kConcurrency ? counts_->blocked_concurrency : counts_->blocked_rate) += n;
}

void KeyGate::Reclassify(KeyRef k, BlockReason was) {
  KeyState& s = keys_[k];
  const BlockReason now = Why(k, s);
  if (now == was || bulk_ || s.pending.empty()) return;
  const uint64_t n = s.pending.size();
  CountOut(was, -n);
  CountOut(now, n);
  if (was == BlockReason::kNone) {
    const Message* head = store_->At(s.pending.top().ref);
    if (head->slot != kNoSlot) ready_->Remove(head->slot);
  } else if (now == BlockReason::kNone) {
    PushReady(k, s.pending.top());
  }
}

void KeyGate::SetLimit(uint32_t limit) {
  const uint32_t old = limit_;
  if (limit == old) return;
  for (KeyRef k : by_value_) {
    limit_ = old;
    const BlockReason was = Why(k, keys_[k]);
    limit_ = limit;
    Reclassify(k, was);
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
  if (Out(k, s)) {
    CountOut(Why(k, s), 1);
  } else if (s.pending.top().ref == ref) {
    if (old_head != kNoRef) ready_->Remove(store_->At(old_head)->slot);
    PushReady(k, entry);
  }
}

void KeyGate::DetachPending(MessageRef ref, Message* m) {
  (void)ref;
  const KeyRef k = Find(ValueOf(m));
  KeyState& s = keys_[k];
  if (bulk_) {
    s.pending.Remove(m->key_slot(), traits(), /*unordered=*/true);
  } else {
    const bool was_ready = m->slot != kNoSlot;
    s.pending.Remove(m->key_slot(), traits());
    if (Out(k, s)) {
      CountOut(Why(k, s), -uint64_t{1});
    } else if (was_ready) {
      ready_->Remove(m->slot);
      if (!s.pending.empty()) PushReady(k, s.pending.top());
    }
  }
  MaybeRelease(k);
}

void KeyGate::AttachRunning(const Message* m) {
  const KeyRef k = Acquire(ValueOf(m));
  const BlockReason was = Why(k, keys_[k]);
  ++keys_[k].running;
  Reclassify(k, was);
}

void KeyGate::DetachRunning(const Message* m) {
  const KeyRef k = Find(ValueOf(m));
  const BlockReason was = Why(k, keys_[k]);
  --keys_[k].running;
  Reclassify(k, was);
  MaybeRelease(k);
}

KeyGate::BlockReason KeyGate::ReasonOf(const Message* m) const {
  const KeyRef k = Find(ValueOf(m));
  return k == kNoKey ? BlockReason::kNone : Why(k, keys_[k]);
}

bool KeyGate::Dispatchable(const Message* m) const {
  const KeyRef k = Find(ValueOf(m));
  return k == kNoKey || !Out(k, keys_[k]);
}

uint32_t KeyGate::RunningOf(const Message* m) const {
  const KeyRef k = Find(ValueOf(m));
  return k == kNoKey ? 0 : keys_[k].running;
}

void KeyGate::BeginBulk() { bulk_ = true; }

void KeyGate::EndBulk() {
  bulk_ = false;
  Collect(last_collect_);
  // Throttled: keys whose next token is after the last stamped change (the time of the state
  // loaded); a dequeue or Advance at a later time refills those due by then.
  refill_.clear();
  refill_at_.clear();
  for (KeyRef k : by_value_) {
    KeyState& s = keys_[k];
    s.throttled = 0;
    if (!rated()) continue;
    const int64_t token_us = TokenFromUs(k, s);
    if (token_us > last_collect_ * 1000) MarkThrottled(k, CeilMs(token_us));
  }
  // The ready index holds the head of every key that is not held (and the ring those keys).
  ClearRing();
  ready_->Clear();
  ready_->BeginUnordered();
  counts_->blocked = counts_->blocked_concurrency = counts_->blocked_rate = 0;
  for (KeyRef k : by_value_) {
    KeyState& s = keys_[k];
    s.pending.Heapify(traits());
    if (s.pending.empty()) continue;
    if (Out(k, s)) {
      CountOut(Why(k, s), s.pending.size());
    } else {
      PushReady(k, s.pending.top());
    }
  }
  ready_->Heapify();
}

// ---- Token buckets ----------------------------------------------------------------------------

void KeyGate::SetRate(uint64_t rate_milli, uint32_t burst) {
  // T = round(1e9 / rate_milli) µs: integers, so that every node computes the same interval.
  interval_us_ = IntervalUsOf(rate_milli);
  tolerance_us_ = interval_us_ * (std::max<uint32_t>(burst, 1) - 1);
  rate_milli_ = rate_milli;
  burst_ = burst;
  rated_overrides_ = 0;
  for (auto& [value, o] : overrides_) {
    Derive(&o);
    if (o.interval_us != 0) ++rated_overrides_;
  }
  // Throttled keys come back; the next dequeue checks them against the new bucket.
  const auto throttled = std::move(refill_);
  refill_.clear();
  refill_at_.clear();
  for (const auto& [at, k] : throttled) {
    const BlockReason was = Why(k, keys_[k]);
    keys_[k].throttled = 0;
    Reclassify(k, was);
  }
}

TimeMs KeyGate::RefillOf(const Message* m) const {
  const KeyRef k = Find(ValueOf(m));
  return k == kNoKey ? 0 : RefillMsOf(k);
}

bool KeyGate::HasToken(const Message* m, TimeMs now) const {
  if (!rated()) return true;
  const KeyRef k = Find(ValueOf(m));
  return k == kNoKey || TokenFromUs(k, keys_[k]) <= now * 1000;
}

TimeMs KeyGate::NextTokenOf(KeyRef k, TimeMs now) const {
  if (IntervalOf(k) == 0) return 0;
  const int64_t from = TokenFromUs(k, keys_[k]);
  return from <= now * 1000 ? 0 : CeilMs(from);
}

void KeyGate::SetThrottled(KeyRef k, TimeMs refill_ms) {
  const BlockReason was = Why(k, keys_[k]);
  DropRefill(k);
  MarkThrottled(k, refill_ms);
  Reclassify(k, was);
}

void KeyGate::Throttle(const Message* m, TimeMs now) {
  const KeyRef k = Find(ValueOf(m));
  SetThrottled(k, std::max(CeilMs(TokenFromUs(k, keys_[k])), now + 1));
}

void KeyGate::Granted(const Message* m, TimeMs now) {
  if (!rated()) return;
  const KeyRef k = Find(ValueOf(m));
  if (k == kNoKey) return;
  KeyState& s = keys_[k];
  s.tat_us = std::max(s.tat_us, now * 1000) + IntervalOf(k);
  if (bulk_) return;  // EndBulk classifies
  if (TokenFromUs(k, s) > now * 1000) SetThrottled(k, CeilMs(TokenFromUs(k, s)));
}

size_t KeyGate::Refill(TimeMs now) {
  if (bulk_) return 0;  // EndBulk classifies
  size_t readied = 0;
  while (!refill_.empty() && refill_.begin()->first <= now) {
    const KeyRef k = refill_.begin()->second;
    refill_.erase(refill_.begin());
    refill_at_.erase(k);
    KeyState& s = keys_[k];
    const BlockReason was = Why(k, s);
    s.throttled = 0;
    Reclassify(k, was);
    if (Ready(k)) ++readied;
  }
  return readied;
}

void KeyGate::Collect(TimeMs t) {
  last_collect_ = std::max(last_collect_, t);
  if (bulk_) return;  // EndBulk collects once
  while (!cooling_.empty() && cooling_.begin()->first <= last_collect_ * 1000) {
    const KeyRef k = cooling_.begin()->second;
    cooling_.erase(cooling_.begin());
    Release(k);
  }
}

void KeyGate::ForEachBucket(const std::function<void(std::string_view, int64_t)>& visit) const {
  for (KeyRef k : by_value_) {
    if (HasBucket(keys_[k])) visit(Value(k), keys_[k].tat_us);
  }
}

bool KeyGate::HasBuckets() const {
  for (KeyRef k : by_value_) {
    if (HasBucket(keys_[k])) return true;
  }
  return false;
}

void KeyGate::Restate(std::string_view value, int64_t tat_us) {
  const KeyRef k = Acquire(value);
  keys_[k].tat_us = tat_us;
  MaybeRelease(k);  // without messages: cooling (or gone if its bucket is full)
}

bool KeyGate::HashInto(void* xxh3_state, bool always) const {
  uint64_t sum = 0, n = 0;
  for (KeyRef k : by_value_) {
    const KeyState& s = keys_[k];
    if (!HasBucket(s)) continue;
    const std::string_view v = Value(k);
    sum += XXH3_64bits_withSeed(v.data(), v.size(), static_cast<uint64_t>(s.tat_us));
    ++n;
  }
  if (n == 0 && !always) return false;
  auto* st = static_cast<XXH3_state_t*>(xxh3_state);
  const uint64_t fields[3] = {n, sum, static_cast<uint64_t>(last_collect_)};
  XXH3_64bits_update(st, fields, sizeof(fields));
  return true;
}

// ---- Per-value overrides ------------------------------------------------------------------------

void KeyGate::Derive(Override* o) const {
  const KeyLimits& l = o->limits;
  const uint64_t rate = l.has(KeyLimits::kRate) ? l.rate_milli : rate_milli_;
  const uint32_t burst = l.has(KeyLimits::kBurst) ? l.burst : burst_;
  o->interval_us = IntervalUsOf(rate);
  o->tolerance_us = o->interval_us * (std::max<uint32_t>(burst, 1) - 1);
}

void KeyGate::SetOverride(std::string_view value, const KeyLimits& limits) {
  const KeyRef k = Find(value);
  const BlockReason was = k != kNoKey ? Why(k, keys_[k]) : BlockReason::kNone;
  auto it = overrides_.find(value);
  if (it != overrides_.end() && it->second.interval_us != 0) --rated_overrides_;
  if (limits.empty()) {
    if (it == overrides_.end()) return;
    overrides_.erase(it);
    if (k != kNoKey) live_.erase(k);
  } else {
    if (it == overrides_.end()) it = overrides_.emplace(std::string(value), Override{}).first;
    it->second.limits = limits;
    Derive(&it->second);
    if (it->second.interval_us != 0) ++rated_overrides_;
    if (k != kNoKey) live_[k] = &it->second;
  }
  if (k == kNoKey) return;
  DropRefill(k);  // checked against its new bucket at the next dequeue
  Reclassify(k, was);
}

const KeyLimits* KeyGate::OverrideOf(std::string_view value) const {
  auto it = overrides_.find(value);
  return it == overrides_.end() ? nullptr : &it->second.limits;
}

void KeyGate::ForEachOverride(
    const std::function<void(std::string_view, const KeyLimits&)>& visit) const {
  for (const auto& [value, o] : overrides_) visit(value, o.limits);
}

uint32_t KeyGate::LimitOf(const Message* m) const {
  const KeyRef k = Find(ValueOf(m));
  return k == kNoKey ? limit_ : LimitOf(k);
}

KeyInfo KeyGate::Describe(std::string_view value, TimeMs now) const {
  KeyInfo info;
  info.value = std::string(value);
  if (const KeyLimits* o = OverrideOf(value)) info.overrides = *o;
  const KeyLimits& o = info.overrides;
  info.concurrency = o.has(KeyLimits::kConcurrency) ? o.concurrency : limit_;
  info.rate_milli = o.has(KeyLimits::kRate) ? o.rate_milli : rate_milli_;
  info.burst = o.has(KeyLimits::kBurst) ? o.burst : burst_;
  info.weight = o.has(KeyLimits::kWeight) ? o.weight : 1;
  const KeyRef k = Find(value);
  if (k == kNoKey) return info;
  const KeyState& s = keys_[k];
  info.pending = s.pending.size();
  info.running = s.running;
  info.held = Held(k, s);
  info.next_token = NextTokenOf(k, now);
  return info;
}

void KeyGate::ForEachValue(const std::function<void(std::string_view)>& visit) const {
  for (KeyRef k : by_value_) visit(Value(k));
  for (const auto& [value, o] : overrides_) {
    if (Find(value) == kNoKey) visit(value);
  }
}

// ---- Fair share
// -----------------------------------------------------------------------------------

void KeyGate::EnterRing(KeyRef k) {
  KeyState& s = keys_[k];
  if (s.in_ring) return;
  s.in_ring = 1;
  ring_.push_back(k);
}

void KeyGate::ClearRing() {
  ring_.clear();
  front_turn_ = 0;
  for (size_t k = 0; k < keys_.size(); ++k) keys_[k].in_ring = 0;  // free KeyRefs too
}

void KeyGate::SetFair(bool fair) {
  if (fair == fair_) return;
  fair_ = fair;
  ClearRing();
  if (!fair_) return;
  for (KeyRef k : by_value_) {
    if (Ready(k)) EnterRing(k);
  }
}

MessageRef KeyGate::FairHead() {
  while (!ring_.empty()) {
    const KeyRef k = ring_.front();
    if (!Ready(k)) {  // also a released key: its heap is empty
      ring_.pop_front();
      keys_[k].in_ring = 0;
      front_turn_ = 0;
      continue;
    }
    // A fresh turn is the key's weight; one begun under a larger weight ends at the new one.
    front_turn_ = front_turn_ == 0 ? WeightOf(k) : std::min(front_turn_, WeightOf(k));
    return keys_[k].pending.top().ref;
  }
  return kNoRef;
}

MessageRef KeyGate::PeekFairHead() const {
  for (KeyRef k : ring_) {
    if (Ready(k)) return keys_[k].pending.top().ref;
  }
  return kNoRef;
}

void KeyGate::Served(const Message* m) {
  if (ring_.empty()) return;
  const KeyRef k = Find(ValueOf(m));
  // The caller serves turns only (a filter or overdue pick spends none); the front is the key.
  if (k != ring_.front() || front_turn_ == 0) return;
  if (--front_turn_ != 0) return;
  ring_.pop_front();
  ring_.push_back(k);  // dropped at the front later if it is no longer ready
}

}  // namespace sundial
