#include "wal/effect_codec.h"

#include <cstring>
#include <deque>
#include <vector>

#include "wal/log_format.h"

namespace sundial::wal {
namespace {

constexpr uint8_t kMaxEffectType = static_cast<uint8_t>(EffectType::kScheduleFired);
constexpr uint8_t kMaxCause = static_cast<uint8_t>(ChangeCause::kLeaseExpired);
// Causes logged since expiry and debounce (docs/wal-format.md, "Expiry and debounce"); 10 and
// 11 are derived, never logged.
constexpr uint8_t kExpiredCause = static_cast<uint8_t>(ChangeCause::kExpired);
constexpr uint8_t kDebouncedCause = static_cast<uint8_t>(ChangeCause::kDebounced);
constexpr uint8_t kMaxState = static_cast<uint8_t>(MessageState::kWaiting);
constexpr uint8_t kMaxPolicy = static_cast<uint8_t>(DependencyFailurePolicy::kError);
constexpr uint8_t kMaxQueueType = static_cast<uint8_t>(QueueType::kExclusive);
constexpr uint8_t kEnqueuePausedFlag = 1;
// Extension tags of message effects (docs/wal-format.md, "Extensions"): version 2 added
// `result`, version 3 `depends_on` and `dependency_entry`.
constexpr uint8_t kResultTag = 1;
constexpr uint8_t kDependsOnTag = 2;        // kMessageEnqueued of a waiting message
constexpr uint8_t kDependencyEntryTag = 3;  // kMessageChanged restating a dependent (snapshots)
constexpr uint8_t kDequeuePausedFlag = 2;
// Flow control (docs/wal-format.md, "Flow settings"), added to version 3: the settings' flow
// block follows their flags, only when a flow setting is not its default.
constexpr uint8_t kFlowSettingsFlag = 4;
constexpr uint8_t kSchedulePausedFlag = 1;
constexpr uint8_t kMaxMisfire = static_cast<uint8_t>(MisfirePolicy::kAll);
constexpr uint8_t kMaxOverlap = static_cast<uint8_t>(OverlapPolicy::kSkipIfActive);
// Batches (docs/wal-format.md, "Batches"), added to version 3: the batch a message joins (its
// enqueue), or is an active member of (a snapshot's restated kMessageChanged). A tag of its own
// range, away from the ones above.
constexpr uint8_t kBatchTag = 16;
constexpr uint8_t kFirstBatchEffect = static_cast<uint8_t>(EffectType::kBatchCreated);
constexpr uint8_t kLastBatchEffect = static_cast<uint8_t>(EffectType::kBatchRemoved);
constexpr uint8_t kBatchHasCallback = 1;
constexpr uint8_t kBatchSealed = 2;
constexpr uint8_t kBatchDone = 4;
// History (docs/wal-format.md, "History"), added to version 3: a lease's worker_id
// (kMessageChanged, cause leased), a snapshot's restated history (kMessageEnqueued), a queue's
// history_max when it is not the default (after the settings' flags), and kMessageNoted.
constexpr uint8_t kWorkerIdTag = 4;
constexpr uint8_t kHistoryTag = 5;
constexpr uint8_t kHistoryMaxTag = 17;
// kMessageDeadLettered: the moved message's last_error (kept by the move: docs/semantics.md),
// which the record did not carry before, so a recovery lost it.
constexpr uint8_t kDeadLetterErrorTag = 6;
constexpr uint8_t kNotedEffect = static_cast<uint8_t>(EffectType::kMessageNoted);
// Expiry and debounce (docs/wal-format.md, "Expiry and debounce"), added to version 3: a
// message's expires_at (kMessageEnqueued, snapshots too), the new payload and metadata of a
// kMessageChanged with cause debounced, and a queue's ttl_ms and dedupe when not the defaults
// (after the settings' flags and history_max).
constexpr uint8_t kExpiresAtTag = 24;
constexpr uint8_t kReplacedTag = 25;
constexpr uint8_t kExpirySettingsTag = 27;
constexpr uint8_t kMaxDedupe = static_cast<uint8_t>(Dedupe::kWhileActive);

constexpr uint8_t kFlowEffect = static_cast<uint8_t>(EffectType::kFlowEnqueued);
constexpr uint8_t kKeyStateEffect = static_cast<uint8_t>(EffectType::kKeyStateRestated);
constexpr uint8_t kKeyLimitsEffect = static_cast<uint8_t>(EffectType::kKeyLimitsSet);
// kKeyStateRestated's flags: bit 1, the gate's record (value empty, collected_at follows).
constexpr uint8_t kGateRecordFlag = 2;
// Settings tag after the flags (and history_max): the key bucket, when not the default.
constexpr uint8_t kKeyRateTag = 28;
constexpr uint8_t kQueueRateTag = 29;  // the queue bucket: rate_milli:u64le burst:u32le
constexpr uint8_t kFairnessTag = 30;   // fairness:u8 overdue_first_ms:i64le
constexpr uint8_t kMaxFairness = static_cast<uint8_t>(Fairness::kWeighted);

Status Malformed(const char* detail) { return Status(Code::kInternal, detail); }

void PutU8(std::string* out, uint8_t v) { out->push_back(static_cast<char>(v)); }
void PutI64(std::string* out, int64_t v) { PutFixed64(out, static_cast<uint64_t>(v)); }
void PutString(std::string* out, std::string_view s) {
  PutFixed32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

void PutSettings(std::string* out, const QueueSettings& s) {
  PutU8(out, static_cast<uint8_t>(s.type));
  PutString(out, s.exclusivity_key);
  PutI64(out, s.lease_ms);
  PutI64(out, s.invisibility_ms);
  PutFixed32(out, s.max_attempts);
  PutI64(out, s.retry_backoff_ms);
  PutI64(out, s.retry_backoff_max_ms);
  PutString(out, s.dead_letter_queue);
  PutI64(out, s.retention_ms);
  PutFixed64(out, s.max_depth);
  const bool flow = !s.flow_key.empty() || s.key_concurrency != 0;
  PutU8(out, (s.enqueue_paused ? kEnqueuePausedFlag : 0) |
                 (s.dequeue_paused ? kDequeuePausedFlag : 0) | (flow ? kFlowSettingsFlag : 0));
  if (flow) {  // else encoded exactly as before flow control
    PutString(out, s.flow_key);
    PutFixed32(out, s.key_concurrency);
  }
  if (s.history_max != kDefaultHistoryMax) {  // else encoded exactly as before history
    PutU8(out, kHistoryMaxTag);
    PutFixed32(out, s.history_max);
  }
  if (s.ttl_ms != 0 || s.dedupe != Dedupe::kKeep) {  // else encoded exactly as before expiry
    PutU8(out, kExpirySettingsTag);
    PutI64(out, s.ttl_ms);
    PutU8(out, static_cast<uint8_t>(s.dedupe));
  }
  if (s.key_rate_milli != 0 || s.key_burst != 1) {  // else encoded exactly as before rates
    PutU8(out, kKeyRateTag);
    PutFixed64(out, s.key_rate_milli);
    PutFixed32(out, s.key_burst);
  }
  if (s.rate_milli != 0 || s.burst != 1) {
    PutU8(out, kQueueRateTag);
    PutFixed64(out, s.rate_milli);
    PutFixed32(out, s.burst);
  }
  if (s.fairness != Fairness::kNone || s.overdue_first_ms != 0) {
    PutU8(out, kFairnessTag);
    PutU8(out, static_cast<uint8_t>(s.fairness));
    PutI64(out, s.overdue_first_ms);
  }
}

// Little-endian stores into a stack buffer: a message effect's fixed-width fields go to the
// output in one append rather than one per field (BM_EncodeEffect).
char* Store8(char* p, uint8_t v) {
  *p = static_cast<char>(v);
  return p + 1;
}
char* Store32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return p + 4;
}
char* Store64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return p + 8;
}

void PutMessage(std::string* out, const Effect& e) {
  PutString(out, e.id);
  char buf[3 + 8 * 3 + 4 * 2 + 8 * 3];
  char* p = buf;
  p = Store8(p, static_cast<uint8_t>(e.cause));
  p = Store8(p, static_cast<uint8_t>(e.from));
  p = Store8(p, static_cast<uint8_t>(e.to));
  p = Store64(p, e.seq);
  p = Store64(p, e.version);
  p = Store64(p, static_cast<uint64_t>(e.priority));
  p = Store32(p, e.attempts);
  p = Store32(p, e.max_attempts);
  p = Store64(p, static_cast<uint64_t>(e.due_at));
  p = Store64(p, e.lease_token);
  p = Store64(p, static_cast<uint64_t>(e.enqueued_at));
  out->append(buf, static_cast<size_t>(p - buf));
}

void PutScheduleSpec(std::string* out, const ScheduleSpec& s) {
  PutString(out, s.cron);
  PutString(out, s.tz);
  PutI64(out, s.every_ms);
  PutString(out, s.payload);
  PutString(out, s.packed_metadata);
  PutI64(out, s.priority_offset_ms);
  PutFixed32(out, s.max_attempts);
  PutU8(out, static_cast<uint8_t>(s.misfire));
  PutU8(out, static_cast<uint8_t>(s.overlap));
}

void PutScheduleProgress(std::string* out, const ScheduleProgress& p) {
  PutI64(out, p.created_at);
  PutI64(out, p.updated_at);
  PutI64(out, p.anchor_at);
  PutI64(out, p.after);
  PutI64(out, p.last_fire_at);
  PutI64(out, p.last_enqueued_at);
  PutFixed64(out, p.fires);
  PutFixed64(out, p.overlap_skips);
  PutFixed64(out, p.missed);
  PutFixed64(out, p.failed);
  PutU8(out, p.paused ? kSchedulePausedFlag : 0);
}

// Reads fixed-width fields off the front of `rest_`; the first shortage makes ok() false and
// every later read a no-op, so a decode function checks once at the end.
class FieldReader {
 public:
  explicit FieldReader(std::string_view bytes) : rest_(bytes) {}

  bool ok() const { return ok_; }
  bool at_end() const { return rest_.empty(); }
  size_t left() const { return rest_.size(); }

  uint8_t U8() {
    if (!Have(1)) return 0;
    uint8_t v = static_cast<uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return v;
  }
  uint32_t U32() {
    if (!Have(4)) return 0;
    uint32_t v = DecodeFixed32(rest_.data());
    rest_.remove_prefix(4);
    return v;
  }
  uint64_t U64() {
    if (!Have(8)) return 0;
    uint64_t v = DecodeFixed64(rest_.data());
    rest_.remove_prefix(8);
    return v;
  }
  int64_t I64() { return static_cast<int64_t>(U64()); }
  // The length is checked against the bytes left before anything is copied.
  void String(std::string* out) {
    std::string_view view;
    String(&view);
    out->assign(view);
  }
  // A view into the input (no copy).
  void String(std::string_view* out) { Bytes(U32(), out); }
  // `n` bytes as a view into the input.
  void Bytes(size_t n, std::string_view* out) {
    if (!Have(n)) {
      *out = {};
      return;
    }
    *out = rest_.substr(0, n);
    rest_.remove_prefix(n);
  }

 private:
  bool Have(size_t n) {
    if (ok_ && rest_.size() >= n) return true;
    ok_ = false;
    return false;
  }

  std::string_view rest_;
  bool ok_ = true;
};

Status ReadSettings(FieldReader* r, QueueSettings* s) {
  uint8_t type = r->U8();
  r->String(&s->exclusivity_key);
  s->lease_ms = r->I64();
  s->invisibility_ms = r->I64();
  s->max_attempts = r->U32();
  s->retry_backoff_ms = r->I64();
  s->retry_backoff_max_ms = r->I64();
  r->String(&s->dead_letter_queue);
  s->retention_ms = r->I64();
  s->max_depth = r->U64();
  uint8_t flags = r->U8();
  if (!r->ok()) return Malformed("wal: effect: truncated queue settings");
  if (type > kMaxQueueType) return Malformed("wal: effect: unknown queue type");
  if ((flags & ~(kEnqueuePausedFlag | kDequeuePausedFlag | kFlowSettingsFlag)) != 0) {
    return Malformed("wal: effect: unknown queue settings flags");
  }
  s->type = static_cast<QueueType>(type);
  s->enqueue_paused = (flags & kEnqueuePausedFlag) != 0;
  s->dequeue_paused = (flags & kDequeuePausedFlag) != 0;
  if ((flags & kFlowSettingsFlag) != 0) {
    r->String(&s->flow_key);
    s->key_concurrency = r->U32();
    if (!r->ok()) return Malformed("wal: effect: truncated queue settings");
    if (s->flow_key.empty() && s->key_concurrency == 0) {
      return Malformed("wal: effect: flow settings restated at their defaults");
    }
  }
  // Tagged settings, each at most once and in increasing tag order.
  uint8_t last_tag = 0;
  while (!r->at_end()) {
    const uint8_t tag = r->U8();
    if (tag <= last_tag) return Malformed("wal: effect: trailing bytes");
    last_tag = tag;
    if (tag == kHistoryMaxTag) {
      s->history_max = r->U32();
      if (!r->ok()) return Malformed("wal: effect: truncated queue settings");
      if (s->history_max == kDefaultHistoryMax) {
        return Malformed("wal: effect: history_max restated at its default");
      }
    } else if (tag == kExpirySettingsTag) {
      s->ttl_ms = r->I64();
      const uint8_t dedupe = r->U8();
      if (!r->ok()) return Malformed("wal: effect: truncated queue settings");
      if (dedupe > kMaxDedupe) return Malformed("wal: effect: unknown dedupe");
      if (s->ttl_ms < 0) return Malformed("wal: effect: negative ttl_ms");
      s->dedupe = static_cast<Dedupe>(dedupe);
      if (s->ttl_ms == 0 && s->dedupe == Dedupe::kKeep) {
        return Malformed("wal: effect: expiry settings restated at their defaults");
      }
    } else if (tag == kKeyRateTag) {
      s->key_rate_milli = r->U64();
      s->key_burst = r->U32();
      if (!r->ok()) return Malformed("wal: effect: truncated queue settings");
      if (s->key_rate_milli == 0 && s->key_burst == 1) {
        return Malformed("wal: effect: key rate restated at its defaults");
      }
    } else if (tag == kQueueRateTag) {
      s->rate_milli = r->U64();
      s->burst = r->U32();
      if (!r->ok()) return Malformed("wal: effect: truncated queue settings");
      if (s->rate_milli == 0 && s->burst == 1) {
        return Malformed("wal: effect: queue rate restated at its defaults");
      }
    } else if (tag == kFairnessTag) {
      const uint8_t fairness = r->U8();
      s->overdue_first_ms = r->I64();
      if (!r->ok()) return Malformed("wal: effect: truncated queue settings");
      if (fairness > kMaxFairness) return Malformed("wal: effect: unknown fairness");
      if (s->overdue_first_ms < 0) return Malformed("wal: effect: negative overdue_first_ms");
      s->fairness = static_cast<Fairness>(fairness);
      if (s->fairness == Fairness::kNone && s->overdue_first_ms == 0) {
        return Malformed("wal: effect: fairness restated at its defaults");
      }
    } else {
      return Malformed("wal: effect: trailing bytes");
    }
  }
  return Status::Ok();
}

Status ReadMessage(FieldReader* r, Effect* e) {
  r->String(&e->id);
  uint8_t cause = r->U8();
  uint8_t from = r->U8();
  uint8_t to = r->U8();
  e->seq = r->U64();
  e->version = r->U64();
  e->priority = r->I64();
  e->attempts = r->U32();
  e->max_attempts = r->U32();
  e->due_at = r->I64();
  e->lease_token = r->U64();
  e->enqueued_at = r->I64();
  if (!r->ok()) return Malformed("wal: effect: truncated message fields");
  if (cause > kMaxCause && cause != kExpiredCause && cause != kDebouncedCause) {
    return Malformed("wal: effect: unknown change cause");
  }
  if (from > kMaxState || to > kMaxState) return Malformed("wal: effect: unknown message state");
  e->cause = static_cast<ChangeCause>(cause);
  e->from = static_cast<MessageState>(from);
  e->to = static_cast<MessageState>(to);
  return Status::Ok();
}

Status ReadScheduleSpec(FieldReader* r, ScheduleSpec* s) {
  r->String(&s->cron);
  r->String(&s->tz);
  s->every_ms = r->I64();
  r->String(&s->payload);
  r->String(&s->packed_metadata);
  s->priority_offset_ms = r->I64();
  s->max_attempts = r->U32();
  const uint8_t misfire = r->U8();
  const uint8_t overlap = r->U8();
  if (!r->ok()) return Malformed("wal: effect: truncated schedule");
  if (misfire > kMaxMisfire) return Malformed("wal: effect: unknown misfire policy");
  if (overlap > kMaxOverlap) return Malformed("wal: effect: unknown overlap policy");
  s->misfire = static_cast<MisfirePolicy>(misfire);
  s->overlap = static_cast<OverlapPolicy>(overlap);
  return Status::Ok();
}

Status ReadScheduleProgress(FieldReader* r, ScheduleProgress* p) {
  p->created_at = r->I64();
  p->updated_at = r->I64();
  p->anchor_at = r->I64();
  p->after = r->I64();
  p->last_fire_at = r->I64();
  p->last_enqueued_at = r->I64();
  p->fires = r->U64();
  p->overlap_skips = r->U64();
  p->missed = r->U64();
  p->failed = r->U64();
  const uint8_t flags = r->U8();
  if (!r->ok()) return Malformed("wal: effect: truncated schedule progress");
  if ((flags & ~kSchedulePausedFlag) != 0) return Malformed("wal: effect: unknown schedule flags");
  p->paused = (flags & kSchedulePausedFlag) != 0;
  return Status::Ok();
}

// The value of a `depends_on` extension, and of a `dependency_entry` (`with_edges`):
//   policy:u8 count:u32le key:str{count} edge_flags:byte{count}?
void PutDependencies(std::string* out, const Effect& e, bool with_edges) {
  const size_t length_at = out->size();
  PutFixed32(out, 0);  // the value's length, filled in below
  PutU8(out, static_cast<uint8_t>(e.on_dependency_failure));
  PutFixed32(out, static_cast<uint32_t>(e.depends_on->size()));
  for (const std::string& key : *e.depends_on) PutString(out, key);
  if (with_edges) out->append(e.dependency_edges);
  const auto length = static_cast<uint32_t>(out->size() - length_at - 4);
  for (int i = 0; i < 4; ++i) (*out)[length_at + i] = static_cast<char>(length >> (8 * i));
}

Status ReadDependencies(std::string_view value, bool with_edges, Effect* e,
                        std::deque<std::vector<std::string>>* keys_storage) {
  if (keys_storage == nullptr) return Malformed("wal: effect: dependencies without storage");
  FieldReader r(value);
  const uint8_t policy = r.U8();
  const uint32_t count = r.U32();
  if (!r.ok()) return Malformed("wal: effect: truncated dependencies");
  if (policy > kMaxPolicy) return Malformed("wal: effect: unknown dependency failure policy");
  // Each entry takes 5 bytes at least: a larger count is damage, found before allocating.
  if (count == 0 || count > value.size() / 5) {
    return Malformed("wal: effect: bad dependency count");
  }
  std::vector<std::string>& keys = keys_storage->emplace_back();
  keys.reserve(count);
  std::string_view key;
  for (uint32_t i = 0; i < count && r.ok(); ++i) {
    r.String(&key);
    if (r.ok() && key.empty()) return Malformed("wal: effect: empty dependency key");
    keys.emplace_back(key);
  }
  if (with_edges) r.Bytes(count, &e->dependency_edges);
  if (!r.ok()) return Malformed("wal: effect: truncated dependencies");
  if (!r.at_end()) return Malformed("wal: effect: trailing bytes in dependencies");
  e->on_dependency_failure = static_cast<DependencyFailurePolicy>(policy);
  e->depends_on = &keys;
  return Status::Ok();
}

// Optional fields after a message effect's body: written only when set, so an effect that has
// none is encoded exactly as in version 1.
void PutExtensions(std::string* out, const Effect& e) {
  if (!e.result.empty()) {
    PutU8(out, kResultTag);
    PutString(out, e.result);
  }
  if (e.depends_on != nullptr && !e.depends_on->empty()) {
    const bool entry = !e.dependency_edges.empty();
    PutU8(out, entry ? kDependencyEntryTag : kDependsOnTag);
    PutDependencies(out, e, entry);
  }
  if (!e.batch.empty()) {
    PutU8(out, kBatchTag);
    PutString(out, e.batch);
  }
  if (!e.worker_id.empty() && e.type == EffectType::kMessageChanged) {
    PutU8(out, kWorkerIdTag);
    PutString(out, e.worker_id);
  }
  if (!e.history.empty() && e.type == EffectType::kMessageEnqueued) {
    PutU8(out, kHistoryTag);
    PutString(out, e.history);
  }
  if (e.expires_at != 0 && e.type == EffectType::kMessageEnqueued) {
    PutU8(out, kExpiresAtTag);
    PutFixed32(out, 8);
    PutI64(out, e.expires_at);
  }
  if (e.cause == ChangeCause::kDebounced && e.type == EffectType::kMessageChanged) {
    PutU8(out, kReplacedTag);
    PutFixed32(out, static_cast<uint32_t>(8 + e.payload.size() + e.packed_metadata.size()));
    PutString(out, e.payload);
    PutString(out, e.packed_metadata);
  }
}

// kBatchCreated after the header (whose queue is the callback's):
//   batch:str flags:u8 retention_ms:i64 created_at:i64 done_at:i64 members:u64 completed:u64
//   canceled:u64 errored:u64 [id:str priority:i64 payload:str metadata:str max_attempts:u32]
void PutBatchCreated(std::string* out, const Effect& e) {
  const BatchFields& f = e.batch_fields;
  PutString(out, e.batch);
  PutU8(out, (f.has_callback ? kBatchHasCallback : 0) | (f.sealed ? kBatchSealed : 0) |
                 (f.done ? kBatchDone : 0));
  PutI64(out, f.retention_ms);
  PutI64(out, f.created_at);
  PutI64(out, f.done_at);
  PutFixed64(out, f.counts.members);
  PutFixed64(out, f.counts.completed);
  PutFixed64(out, f.counts.canceled);
  PutFixed64(out, f.counts.errored);
  if (f.has_callback) {
    PutString(out, e.id);
    PutI64(out, e.priority);
    PutString(out, e.payload);
    PutString(out, e.packed_metadata);
    PutFixed32(out, e.max_attempts);
  }
}

Status ReadBatchCreated(FieldReader* r, Effect* e) {
  BatchFields& f = e->batch_fields;
  r->String(&e->batch);
  const uint8_t flags = r->U8();
  f.retention_ms = r->I64();
  f.created_at = r->I64();
  f.done_at = r->I64();
  f.counts.members = r->U64();
  f.counts.completed = r->U64();
  f.counts.canceled = r->U64();
  f.counts.errored = r->U64();
  if (!r->ok()) return Malformed("wal: effect: truncated batch");
  if ((flags & ~(kBatchHasCallback | kBatchSealed | kBatchDone)) != 0) {
    return Malformed("wal: effect: unknown batch flags");
  }
  f.has_callback = (flags & kBatchHasCallback) != 0;
  f.sealed = (flags & kBatchSealed) != 0;
  f.done = (flags & kBatchDone) != 0;
  if (f.has_callback) {
    r->String(&e->id);
    e->priority = r->I64();
    r->String(&e->payload);
    r->String(&e->packed_metadata);
    e->max_attempts = r->U32();
  } else if (!e->queue.empty()) {
    return Malformed("wal: effect: a batch without callback names a queue");
  }
  if (e->batch.empty()) return Malformed("wal: effect: empty batch id");
  return Status::Ok();
}

Status ReadExtensions(FieldReader* r, Effect* e, std::deque<std::vector<std::string>>* keys) {
  uint32_t seen = 0;
  while (r->ok() && !r->at_end()) {
    // Bytes after the body that do not start a known extension are trailing bytes.
    const uint8_t tag = r->U8();
    const bool dead_lettered = e->type == EffectType::kMessageDeadLettered;
    const bool known = (!dead_lettered && (tag == kResultTag || tag == kBatchTag)) ||
                       (tag == kWorkerIdTag && e->type == EffectType::kMessageChanged) ||
                       (tag == kHistoryTag && e->type == EffectType::kMessageEnqueued) ||
                       (tag == kExpiresAtTag && e->type == EffectType::kMessageEnqueued) ||
                       (tag == kReplacedTag && e->type == EffectType::kMessageChanged &&
                        e->cause == ChangeCause::kDebounced) ||
                       (tag == kDeadLetterErrorTag && dead_lettered) ||
                       (tag == kDependsOnTag && e->type == EffectType::kMessageEnqueued) ||
                       (tag == kDependencyEntryTag && e->type == EffectType::kMessageChanged);
    if (!known) return Malformed("wal: effect: trailing bytes");
    if ((seen & (1u << tag)) != 0) return Malformed("wal: effect: repeated extension");
    seen |= 1u << tag;
    std::string_view value;
    r->String(&value);
    if (!r->ok()) return Malformed("wal: effect: truncated extension");
    if (value.empty()) return Malformed("wal: effect: empty extension");
    if (tag == kResultTag) {
      e->result = value;
      continue;
    }
    if (tag == kBatchTag) {
      e->batch = value;
      continue;
    }
    if (tag == kWorkerIdTag) {
      e->worker_id = value;
      continue;
    }
    if (tag == kHistoryTag) {
      e->history = value;
      continue;
    }
    if (tag == kDeadLetterErrorTag) {
      e->error = value;
      continue;
    }
    if (tag == kExpiresAtTag) {
      if (value.size() != 8) return Malformed("wal: effect: bad expires_at");
      e->expires_at = static_cast<TimeMs>(DecodeFixed64(value.data()));
      if (e->expires_at <= 0) return Malformed("wal: effect: bad expires_at");
      continue;
    }
    if (tag == kReplacedTag) {
      FieldReader v(value);
      v.String(&e->payload);
      v.String(&e->packed_metadata);
      if (!v.ok() || !v.at_end()) return Malformed("wal: effect: bad replaced payload");
      continue;
    }
    if ((seen & (1u << kDependsOnTag)) && (seen & (1u << kDependencyEntryTag))) {
      return Malformed("wal: effect: repeated extension");
    }
    if (Status s = ReadDependencies(value, tag == kDependencyEntryTag, e, keys); !s.ok()) {
      return s;
    }
  }
  if (r->ok() && e->type == EffectType::kMessageChanged && e->cause == ChangeCause::kDebounced &&
      (seen & (1u << kReplacedTag)) == 0) {
    return Malformed("wal: effect: a debounce without its replaced payload");
  }
  return Status::Ok();
}

}  // namespace

// kFlowEnqueued's members: each a kQueueCreated or a kMessageEnqueued (docs/wal-format.md,
// "Flows"), decoded as views into the same bytes.
static Status ReadGroup(FieldReader* r, Effect* e,
                        std::deque<std::vector<std::string>>* dependencies,
                        EffectGroupStorage* group) {
  if (group == nullptr) return Malformed("wal: effect: a flow without storage");
  if (!e->queue.empty()) return Malformed("wal: effect: a flow names a queue");
  const uint32_t count = r->U32();
  if (!r->ok()) return Malformed("wal: effect: truncated flow");
  // A member takes 4 + 13 bytes at least: a larger count is damage, found before allocating.
  if (count == 0 || count > r->left() / 17) return Malformed("wal: effect: bad flow member count");
  std::vector<Effect>& members = group->members.emplace_back();
  members.reserve(count);
  std::string_view bytes;
  for (uint32_t i = 0; i < count; ++i) {
    r->String(&bytes);
    if (!r->ok()) return Malformed("wal: effect: truncated flow member");
    const auto type = bytes.empty() ? 0 : static_cast<uint8_t>(bytes[0]);
    const bool queue = type == static_cast<uint8_t>(EffectType::kQueueCreated);
    if (!queue && type != static_cast<uint8_t>(EffectType::kMessageEnqueued)) {
      return Malformed("wal: effect: a flow member that is not a queue or an enqueue");
    }
    QueueSettings* settings = queue ? &group->settings.emplace_back() : nullptr;
    if (Status s = DecodeEffectView(bytes, &members.emplace_back(), settings, dependencies, nullptr,
                                    nullptr);
        !s.ok()) {
      return s;
    }
  }
  e->members = &members;
  return Status::Ok();
}

void EncodeEffect(const Effect& e, std::string* out) {
  PutU8(out, static_cast<uint8_t>(e.type));
  PutI64(out, e.time);
  PutString(out, e.queue);
  switch (e.type) {
    case EffectType::kQueueCreated:
    case EffectType::kQueueUpdated:
      PutSettings(out, *e.settings);
      break;
    case EffectType::kQueueDeleted:
      break;
    case EffectType::kQueuePurged:
      PutU8(out, e.purge_states);
      break;
    case EffectType::kMessageEnqueued:
      PutMessage(out, e);
      PutString(out, e.payload);
      PutString(out, e.packed_metadata);
      PutString(out, e.error);
      PutExtensions(out, e);
      break;
    case EffectType::kMessageChanged:
      PutMessage(out, e);
      PutString(out, e.error);
      PutExtensions(out, e);
      break;
    case EffectType::kMessageRemoved:
      PutMessage(out, e);
      break;
    case EffectType::kMessageDeadLettered:
      PutMessage(out, e);
      PutString(out, e.dead_letter_queue);
      if (!e.error.empty()) {
        PutU8(out, kDeadLetterErrorTag);
        PutString(out, e.error);
      }
      break;
    case EffectType::kEpochStarted:
      PutFixed64(out, e.epoch);
      PutFixed64(out, e.start_lsn);
      break;
    case EffectType::kScheduleUpserted:
      PutString(out, e.id);
      PutScheduleSpec(out, *e.schedule);
      PutScheduleProgress(out, e.schedule_progress);
      PutString(out, e.error);
      break;
    case EffectType::kScheduleDeleted:
      PutString(out, e.id);
      break;
    case EffectType::kSchedulePaused:
    case EffectType::kScheduleResumed:
    case EffectType::kScheduleFired:
      PutString(out, e.id);
      PutScheduleProgress(out, e.schedule_progress);
      PutString(out, e.error);
      break;
    case EffectType::kBatchCreated:
      PutBatchCreated(out, e);
      break;
    case EffectType::kBatchSealed:
    case EffectType::kBatchRemoved:
      PutString(out, e.batch);
      break;
    case EffectType::kMessageNoted:
      PutString(out, e.id);
      PutFixed64(out, e.lease_token);
      PutString(out, e.note);
      break;
    case EffectType::kKeyStateRestated:
      PutString(out, e.id);
      PutU8(out, e.gate_record ? kGateRecordFlag : 0);
      PutI64(out, e.tat_us);  // the gate's record: the queue bucket's
      if (e.gate_record) PutI64(out, e.time);
      break;
    case EffectType::kQueueReady:  // derived: never logged
      break;
    case EffectType::kKeyLimitsSet: {
      // value:str set:u8, then each field whose bit is set (docs/wal-format.md, "Per-key limits").
      const KeyLimits& l = e.key_limits;
      PutString(out, e.id);
      PutU8(out, l.set);
      if (l.has(KeyLimits::kConcurrency)) PutFixed32(out, l.concurrency);
      if (l.has(KeyLimits::kRate)) PutFixed64(out, l.rate_milli);
      if (l.has(KeyLimits::kBurst)) PutFixed32(out, l.burst);
      if (l.has(KeyLimits::kWeight)) PutFixed32(out, l.weight);
      break;
    }
    case EffectType::kFlowEnqueued:
      // count:u32 (length:u32 effect)*count (docs/wal-format.md, "Flows").
      PutFixed32(out, static_cast<uint32_t>(e.members->size()));
      for (const Effect& member : *e.members) {
        const size_t length_at = out->size();
        PutFixed32(out, 0);  // filled in below
        EncodeEffect(member, out);
        const auto length = static_cast<uint32_t>(out->size() - length_at - 4);
        for (int i = 0; i < 4; ++i) (*out)[length_at + i] = static_cast<char>(length >> (8 * i));
      }
      break;
  }
}

Status DecodeEffectView(std::string_view bytes, Effect* out, QueueSettings* settings,
                        std::deque<std::vector<std::string>>* dependencies, ScheduleSpec* schedule,
                        EffectGroupStorage* group) {
  *out = Effect();
  Effect& e = *out;
  FieldReader r(bytes);
  uint8_t type = r.U8();
  e.time = r.I64();
  r.String(&e.queue);
  if (!r.ok()) return Malformed("wal: effect: truncated header");
  if ((type < 1 || type > kMaxEffectType) &&
      (type < kFirstBatchEffect || type > kLastBatchEffect) && type != kNotedEffect &&
      type != kFlowEffect && type != kKeyStateEffect && type != kKeyLimitsEffect) {
    return Malformed("wal: effect: unknown effect type");
  }
  e.type = static_cast<EffectType>(type);

  Status s;
  switch (e.type) {
    case EffectType::kQueueCreated:
    case EffectType::kQueueUpdated:
      if (settings == nullptr) return Malformed("wal: effect: settings without storage");
      *settings = QueueSettings();
      s = ReadSettings(&r, settings);
      e.settings = settings;
      break;
    case EffectType::kQueueDeleted:
      break;
    case EffectType::kQueuePurged:
      e.purge_states = r.U8();
      if (!r.ok()) s = Malformed("wal: effect: truncated purge states");
      break;
    case EffectType::kMessageEnqueued:
      s = ReadMessage(&r, &e);
      r.String(&e.payload);
      r.String(&e.packed_metadata);
      r.String(&e.error);
      if (s.ok()) s = ReadExtensions(&r, &e, dependencies);
      break;
    case EffectType::kMessageChanged:
      s = ReadMessage(&r, &e);
      r.String(&e.error);
      if (s.ok()) s = ReadExtensions(&r, &e, dependencies);
      break;
    case EffectType::kMessageRemoved:
      s = ReadMessage(&r, &e);
      break;
    case EffectType::kMessageDeadLettered:
      s = ReadMessage(&r, &e);
      r.String(&e.dead_letter_queue);
      if (s.ok()) s = ReadExtensions(&r, &e, dependencies);
      break;
    case EffectType::kEpochStarted:
      if (!e.queue.empty()) return Malformed("wal: effect: an epoch names a queue");
      e.epoch = r.U64();
      e.start_lsn = r.U64();
      if (!r.ok()) s = Malformed("wal: effect: truncated epoch");
      break;
    case EffectType::kBatchCreated:
      s = ReadBatchCreated(&r, &e);
      break;
    case EffectType::kBatchSealed:
    case EffectType::kBatchRemoved:
      if (!e.queue.empty()) return Malformed("wal: effect: a batch seal or removal names a queue");
      r.String(&e.batch);
      if (r.ok() && e.batch.empty()) s = Malformed("wal: effect: empty batch id");
      break;
    case EffectType::kScheduleUpserted:
      if (schedule == nullptr) return Malformed("wal: effect: schedule without storage");
      *schedule = ScheduleSpec();
      r.String(&e.id);
      s = ReadScheduleSpec(&r, schedule);
      if (s.ok()) s = ReadScheduleProgress(&r, &e.schedule_progress);
      r.String(&e.error);
      e.schedule = schedule;
      break;
    case EffectType::kScheduleDeleted:
      r.String(&e.id);
      break;
    case EffectType::kMessageNoted:
      r.String(&e.id);
      e.lease_token = r.U64();
      r.String(&e.note);
      if (r.ok() && (e.id.empty() || e.note.empty() || e.queue.empty())) {
        s = Malformed("wal: effect: a note without queue, id or text");
      }
      break;
    case EffectType::kFlowEnqueued:
      s = ReadGroup(&r, &e, dependencies, group);
      break;
    case EffectType::kKeyStateRestated: {
      r.String(&e.id);
      const uint8_t flags = r.U8();
      e.tat_us = r.I64();
      if (!r.ok()) return Malformed("wal: effect: truncated key state");
      e.gate_record = (flags & kGateRecordFlag) != 0;
      // A key record's value may be empty (a flow-key value like any other); the queue's
      // record has none.
      if ((flags & ~kGateRecordFlag) != 0 || (e.gate_record && !e.id.empty()) || e.queue.empty() ||
          e.tat_us < 0) {
        return Malformed("wal: effect: malformed key state");
      }
      if (e.gate_record && e.time != r.I64()) {
        return Malformed("wal: effect: key state collected_at differs from its time");
      }
      break;
    }
    case EffectType::kQueueReady:
      return Malformed("wal: effect: unknown effect type");
    case EffectType::kKeyLimitsSet: {
      KeyLimits& l = e.key_limits;
      r.String(&e.id);
      l.set = r.U8();
      if (l.has(KeyLimits::kConcurrency)) l.concurrency = r.U32();
      if (l.has(KeyLimits::kRate)) l.rate_milli = r.U64();
      if (l.has(KeyLimits::kBurst)) l.burst = r.U32();
      if (l.has(KeyLimits::kWeight)) l.weight = r.U32();
      if (!r.ok()) return Malformed("wal: effect: truncated key limits");
      if ((l.set & ~KeyLimits::kAll) != 0 || e.queue.empty()) {
        return Malformed("wal: effect: malformed key limits");
      }
      break;
    }
    case EffectType::kSchedulePaused:
    case EffectType::kScheduleResumed:
    case EffectType::kScheduleFired:
      r.String(&e.id);
      s = ReadScheduleProgress(&r, &e.schedule_progress);
      r.String(&e.error);
      break;
  }
  if (s.ok() && IsScheduleEffect(e.type) && (e.queue.empty() || e.id.empty())) {
    return Malformed("wal: effect: a schedule without queue or name");
  }
  if (!s.ok()) return s;
  if (!r.ok()) return Malformed("wal: effect: truncated string field");
  if (!r.at_end()) return Malformed("wal: effect: trailing bytes");
  return Status::Ok();
}

Status DecodeEffect(std::string_view bytes, DecodedEffect* out) {
  Effect& e = out->effect_;
  out->dependencies_.clear();
  out->group_.clear();
  if (!bytes.empty() && static_cast<uint8_t>(bytes[0]) == kFlowEffect) {
    // A group: every view (the members' too) into one copy of the bytes.
    out->group_bytes_.assign(bytes);
    return DecodeEffectView(out->group_bytes_, &e, &out->settings_, &out->dependencies_,
                            &out->schedule_, &out->group_);
  }
  Status s = DecodeEffectView(bytes, &e, &out->settings_, &out->dependencies_, &out->schedule_);
  // Own copies of the strings, then point the effect at them.
  auto own = [](std::string_view* view, std::string* storage) {
    storage->assign(*view);
    *view = *storage;
  };
  own(&e.queue, &out->queue_);
  own(&e.id, &out->id_);
  own(&e.payload, &out->payload_);
  own(&e.packed_metadata, &out->packed_metadata_);
  own(&e.error, &out->error_);
  own(&e.dead_letter_queue, &out->dead_letter_queue_);
  own(&e.result, &out->result_);
  own(&e.dependency_edges, &out->dependency_edges_);
  own(&e.batch, &out->batch_);
  own(&e.worker_id, &out->worker_id_);
  own(&e.note, &out->note_);
  own(&e.history, &out->history_);
  return s;
}

}  // namespace sundial::wal
