#include "engine/batches.h"

#include <xxhash.h>

#include <algorithm>

#include "engine/validation.h"

namespace sundial {

Status ValidateCreateBatch(const CreateBatchRequest& request) {
  if (request.id.empty() || request.id.size() > kMaxBatchIdBytes || !IsValidUtf8(request.id)) {
    return InvalidArgument("id: a batch id must be 1-120 bytes of valid UTF-8");
  }
  if (request.retention_ms && !IsValidDuration(*request.retention_ms)) {
    return InvalidArgument("retention_ms: must be 0-3153600000000");
  }
  if (!request.callback) return Status::Ok();
  const BatchCallback& c = *request.callback;
  if (!IsValidQueueName(c.queue)) {
    return InvalidArgument("callback.queue: name must be 1-128 bytes of [A-Za-z0-9._:-]");
  }
  if (!c.id.empty() && !IsValidId(c.id)) {
    return InvalidArgument("callback.id: must be 1-128 bytes of valid UTF-8");
  }
  if (c.metadata.size() > kMaxMetadataPairs - kBatchCallbackKeys) {
    return InvalidArgument("callback.metadata: at most 11 pairs (the batch adds 5)");
  }
  if (Status s = ValidateMetadata(c.metadata); !s.ok()) return s;
  for (const MetadataPair& p : c.metadata) {
    if (p.key.starts_with("x-batch-")) {
      return InvalidArgument("callback.metadata: keys x-batch-* are the batch's own");
    }
  }
  if (c.max_attempts && (*c.max_attempts < 1 || *c.max_attempts > kMaxAttemptsLimit)) {
    return InvalidArgument("callback.max_attempts: must be 1-1000000");
  }
  return Status::Ok();
}

std::string BatchCallbackId(const CreateBatchRequest& request) {
  if (request.callback && !request.callback->id.empty()) return request.callback->id;
  return "batch:" + request.id;
}

std::optional<uint32_t> BatchTable::Lookup(std::string_view id) const {
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

TimeMs BatchTable::RemovalTime(const BatchInfo& info) {
  const int64_t r = info.retention_ms;
  return info.done_at > INT64_MAX - r ? INT64_MAX : info.done_at + r;
}

const BatchInfo* BatchTable::Find(std::string_view id) const {
  const auto n = Lookup(id);
  return n ? &slots_[*n].info : nullptr;
}

void BatchTable::Add(BatchInfo info) {
  uint32_t n;
  if (!free_.empty()) {
    n = free_.back();
    free_.pop_back();
  } else {
    n = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[n];
  slot.info = std::move(info);
  slot.created = next_created_++;
  slot.in_use = true;
  index_.emplace(slot.info.id, n);
  if (slot.info.done) removals_.emplace(RemovalTime(slot.info), slot.info.id);
}

void BatchTable::Remove(std::string_view id) {
  const auto n = Lookup(id);
  if (!n) return;
  Slot& slot = slots_[*n];
  if (slot.info.done) removals_.erase({RemovalTime(slot.info), slot.info.id});
  index_.erase(index_.find(id));
  slot = Slot{};
  free_.push_back(*n);
}

void BatchTable::AddMember(std::string_view id, std::string_view key, bool count) {
  const uint32_t n = *Lookup(id);
  members_.emplace(std::string(key), Member{n, next_joined_++});
  if (count) ++slots_[n].info.counts.members;
}

const BatchInfo* BatchTable::BatchOf(std::string_view key) const {
  auto it = members_.find(key);
  return it == members_.end() ? nullptr : &slots_[it->second.batch].info;
}

std::optional<std::string> BatchTable::Finish(std::string_view key, BatchOutcome outcome) {
  auto it = members_.find(key);
  if (it == members_.end()) return std::nullopt;
  BatchInfo& info = slots_[it->second.batch].info;
  members_.erase(it);
  switch (outcome) {
    case BatchOutcome::kCompleted:
      ++info.counts.completed;
      break;
    case BatchOutcome::kCanceled:
      ++info.counts.canceled;
      break;
    case BatchOutcome::kErrored:
      ++info.counts.errored;
      break;
  }
  if (info.sealed && !info.done && info.counts.active() == 0) return info.id;
  return std::nullopt;
}

bool BatchTable::Seal(std::string_view id) {
  BatchInfo& info = slots_[*Lookup(id)].info;
  info.sealed = true;
  return !info.done && info.counts.active() == 0;
}

void BatchTable::MarkDone(std::string_view id, TimeMs now) {
  BatchInfo& info = slots_[*Lookup(id)].info;
  info.done = true;
  info.done_at = now;
  removals_.emplace(RemovalTime(info), info.id);
}

TimeMs BatchTable::NextDueTime() const {
  return removals_.empty() ? INT64_MAX : removals_.begin()->first;
}

std::vector<std::string> BatchTable::DueForRemoval(TimeMs now) const {
  std::vector<std::string> due;
  for (const auto& [at, id] : removals_) {
    if (at > now) break;
    due.push_back(id);
  }
  return due;
}

void BatchTable::ForEachBatch(const std::function<void(const BatchInfo&)>& visit) const {
  std::vector<std::pair<uint64_t, uint32_t>> order;
  for (const auto& [id, n] : index_) order.emplace_back(slots_[n].created, n);
  std::sort(order.begin(), order.end());
  for (const auto& [created, n] : order) visit(slots_[n].info);
}

void BatchTable::ForEachMember(
    const std::function<void(std::string_view key, std::string_view batch)>& visit) const {
  std::vector<std::pair<uint64_t, const std::pair<const std::string, Member>*>> order;
  order.reserve(members_.size());
  for (const auto& entry : members_) order.emplace_back(entry.second.joined, &entry);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [joined, entry] : order) {
    visit(entry->first, slots_[entry->second.batch].info.id);
  }
}

uint64_t BatchTable::Digest() const {
  if (index_.empty()) return 0;
  std::vector<const BatchInfo*> batches;
  for (const auto& [id, n] : index_) batches.push_back(&slots_[n].info);
  std::sort(batches.begin(), batches.end(),
            [](const BatchInfo* a, const BatchInfo* b) { return a->id < b->id; });
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  auto put_str = [&](std::string_view s) {
    const uint64_t size = s.size();
    XXH3_64bits_update(state, &size, sizeof size);
    XXH3_64bits_update(state, s.data(), s.size());
  };
  auto put_u64 = [&](uint64_t v) { XXH3_64bits_update(state, &v, sizeof v); };
  for (const BatchInfo* b : batches) {
    put_str(b->id);
    put_u64(static_cast<uint64_t>(b->retention_ms));
    put_u64(static_cast<uint64_t>(b->created_at));
    put_u64((b->sealed ? 1u : 0u) | (b->done ? 2u : 0u) | (b->callback ? 4u : 0u));
    put_u64(static_cast<uint64_t>(b->done_at));
    put_u64(b->counts.members);
    put_u64(b->counts.completed);
    put_u64(b->counts.canceled);
    put_u64(b->counts.errored);
    if (b->callback) {
      const BatchCallback& c = *b->callback;
      put_str(c.queue);
      put_str(c.id);
      put_u64(static_cast<uint64_t>(c.priority));
      put_str(c.payload);
      put_u64(c.metadata.size());
      for (const MetadataPair& p : c.metadata) {
        put_str(p.key);
        put_str(p.value);
      }
      put_u64(c.max_attempts.value_or(0));
    }
  }
  // Members: a sum of one hash per (key, batch), so no sort is needed.
  uint64_t members = 0;
  for (const auto& [key, m] : members_) {
    const std::string_view batch = slots_[m.batch].info.id;
    members +=
        XXH3_64bits_withSeed(key.data(), key.size(), XXH3_64bits(batch.data(), batch.size()));
  }
  put_u64(members);
  put_u64(members_.size());
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest;
}

}  // namespace sundial
