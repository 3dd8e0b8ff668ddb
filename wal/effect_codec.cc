#include "wal/effect_codec.h"

#include <cstring>

#include "wal/log_format.h"

namespace sundial::wal {
namespace {

constexpr uint8_t kMaxEffectType = static_cast<uint8_t>(EffectType::kEpochStarted);
constexpr uint8_t kMaxCause = static_cast<uint8_t>(ChangeCause::kLeaseExpired);
constexpr uint8_t kMaxState = static_cast<uint8_t>(MessageState::kErrored);
constexpr uint8_t kMaxQueueType = static_cast<uint8_t>(QueueType::kExclusive);
constexpr uint8_t kEnqueuePausedFlag = 1;
// Extension tags of message effects (format version 2; docs/wal-format.md, "Extensions").
constexpr uint8_t kResultTag = 1;
constexpr uint8_t kDequeuePausedFlag = 2;

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
  PutU8(out,
        (s.enqueue_paused ? kEnqueuePausedFlag : 0) | (s.dequeue_paused ? kDequeuePausedFlag : 0));
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

// Reads fixed-width fields off the front of `rest_`; the first shortage makes ok() false and
// every later read a no-op, so a decode function checks once at the end.
class FieldReader {
 public:
  explicit FieldReader(std::string_view bytes) : rest_(bytes) {}

  bool ok() const { return ok_; }
  bool at_end() const { return rest_.empty(); }

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
  void String(std::string_view* out) {
    uint32_t len = U32();
    if (!Have(len)) {
      *out = {};
      return;
    }
    *out = rest_.substr(0, len);
    rest_.remove_prefix(len);
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
  if ((flags & ~(kEnqueuePausedFlag | kDequeuePausedFlag)) != 0) {
    return Malformed("wal: effect: unknown queue settings flags");
  }
  s->type = static_cast<QueueType>(type);
  s->enqueue_paused = (flags & kEnqueuePausedFlag) != 0;
  s->dequeue_paused = (flags & kDequeuePausedFlag) != 0;
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
  if (cause > kMaxCause) return Malformed("wal: effect: unknown change cause");
  if (from > kMaxState || to > kMaxState) return Malformed("wal: effect: unknown message state");
  e->cause = static_cast<ChangeCause>(cause);
  e->from = static_cast<MessageState>(from);
  e->to = static_cast<MessageState>(to);
  return Status::Ok();
}

// Optional fields after a message effect's body: written only when set, so an effect that has
// none is encoded exactly as in version 1.
void PutExtensions(std::string* out, const Effect& e) {
  if (!e.result.empty()) {
    PutU8(out, kResultTag);
    PutString(out, e.result);
  }
}

Status ReadExtensions(FieldReader* r, Effect* e) {
  uint32_t seen = 0;
  while (r->ok() && !r->at_end()) {
    // Bytes after the body that do not start a known extension are trailing bytes.
    const uint8_t tag = r->U8();
    if (tag != kResultTag) return Malformed("wal: effect: trailing bytes");
    if ((seen & (1u << tag)) != 0) return Malformed("wal: effect: repeated extension");
    seen |= 1u << tag;
    std::string_view value;
    r->String(&value);
    if (!r->ok()) return Malformed("wal: effect: truncated extension");
    if (value.empty()) return Malformed("wal: effect: empty extension");
    e->result = value;
  }
  return Status::Ok();
}

}  // namespace

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
      break;
    case EffectType::kEpochStarted:
      PutFixed64(out, e.epoch);
      PutFixed64(out, e.start_lsn);
      break;
  }
}

Status DecodeEffectView(std::string_view bytes, Effect* out, QueueSettings* settings) {
  *out = Effect();
  Effect& e = *out;
  FieldReader r(bytes);
  uint8_t type = r.U8();
  e.time = r.I64();
  r.String(&e.queue);
  if (!r.ok()) return Malformed("wal: effect: truncated header");
  if (type < 1 || type > kMaxEffectType) return Malformed("wal: effect: unknown effect type");
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
      if (s.ok()) s = ReadExtensions(&r, &e);
      break;
    case EffectType::kMessageChanged:
      s = ReadMessage(&r, &e);
      r.String(&e.error);
      if (s.ok()) s = ReadExtensions(&r, &e);
      break;
    case EffectType::kMessageRemoved:
      s = ReadMessage(&r, &e);
      break;
    case EffectType::kMessageDeadLettered:
      s = ReadMessage(&r, &e);
      r.String(&e.dead_letter_queue);
      break;
    case EffectType::kEpochStarted:
      if (!e.queue.empty()) return Malformed("wal: effect: an epoch names a queue");
      e.epoch = r.U64();
      e.start_lsn = r.U64();
      if (!r.ok()) s = Malformed("wal: effect: truncated epoch");
      break;
  }
  if (!s.ok()) return s;
  if (!r.ok()) return Malformed("wal: effect: truncated string field");
  if (!r.at_end()) return Malformed("wal: effect: trailing bytes");
  return Status::Ok();
}

Status DecodeEffect(std::string_view bytes, DecodedEffect* out) {
  Effect& e = out->effect_;
  Status s = DecodeEffectView(bytes, &e, &out->settings_);
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
  return s;
}

}  // namespace sundial::wal
