#include "tools/record_json.h"

#include <boost/json/array.hpp>
#include <cstdio>

#include "engine/dependencies.h"
#include "engine/history.h"
#include "engine/metadata.h"
#include "engine/types.h"
#include "engine/validation.h"

namespace sundial::tools {
namespace {

namespace json = boost::json;

// Writes `s` as key, or as key_base64 when it is not valid UTF-8.
void PutText(json::object* out, std::string_view key, std::string_view s) {
  if (IsValidUtf8(s)) {
    (*out)[key] = s;
  } else {
    (*out)[std::string(key) + "_base64"] = Base64Encode(s);
  }
}

void PutMetadata(json::object* out, std::string_view packed) {
  json::object pairs;
  PackedMetadataReader reader(packed);
  std::string_view key, value;
  bool text = true;
  while (reader.Next(&key, &value)) {
    if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
      text = false;
      break;
    }
    pairs[key] = value;
  }
  if (text && reader.Valid()) {
    (*out)["metadata"] = std::move(pairs);
  } else {
    (*out)["metadata_base64"] = Base64Encode(packed);
  }
}

json::object SettingsToJson(const QueueSettings& s) {
  json::object o;
  o["type"] = QueueTypeName(s.type);
  PutText(&o, "exclusivity_key", s.exclusivity_key);
  o["lease_ms"] = s.lease_ms;
  o["invisibility_ms"] = s.invisibility_ms;
  o["max_attempts"] = s.max_attempts;
  o["retry_backoff_ms"] = s.retry_backoff_ms;
  o["retry_backoff_max_ms"] = s.retry_backoff_max_ms;
  PutText(&o, "dead_letter_queue", s.dead_letter_queue);
  o["retention_ms"] = s.retention_ms;
  o["max_depth"] = s.max_depth;
  o["enqueue_paused"] = s.enqueue_paused;
  o["dequeue_paused"] = s.dequeue_paused;
  o["history_max"] = s.history_max;
  PutText(&o, "flow_key", s.flow_key);
  o["key_concurrency"] = s.key_concurrency;
  if (s.ttl_ms != 0 || s.dedupe != Dedupe::kKeep) {  // as the log writes them (tag 27)
    o["ttl_ms"] = s.ttl_ms;
    o["dedupe"] = DedupeName(s.dedupe);
  }
  if (s.key_rate_milli != 0 || s.key_burst != 1) {  // tag 28
    o["key_rate_per_s"] = RatePerSOf(s.key_rate_milli);
    o["key_burst"] = s.key_burst;
  }
  if (s.rate_milli != 0 || s.burst != 1) {  // tag 29
    o["rate_per_s"] = RatePerSOf(s.rate_milli);
    o["burst"] = s.burst;
  }
  if (s.fairness != Fairness::kNone || s.overdue_first_ms != 0) {  // tag 30
    o["fairness"] = FairnessName(s.fairness);
    o["overdue_first_ms"] = s.overdue_first_ms;
  }
  return o;
}

void PutMessageFields(const Effect& e, json::object* out) {
  PutText(out, "id", e.id);
  (*out)["cause"] = ChangeCauseName(e.cause);
  (*out)["from"] = StateName(e.from);
  (*out)["to"] = StateName(e.to);
  (*out)["seq"] = e.seq;
  (*out)["version"] = e.version;
  (*out)["priority"] = e.priority;
  (*out)["attempts"] = e.attempts;
  (*out)["max_attempts"] = e.max_attempts;
  (*out)["due_at"] = e.due_at;
  (*out)["lease_token"] = e.lease_token;
  (*out)["enqueued_at"] = e.enqueued_at;
  if (e.expires_at != 0) (*out)["expires_at"] = e.expires_at;
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// A schedule effect: its name, spec (kScheduleUpserted) and progress.
void PutScheduleFields(const Effect& e, json::object* out) {
  PutText(out, "name", e.id);
  if (e.type == EffectType::kScheduleDeleted) return;
  if (e.schedule != nullptr) {
    const ScheduleSpec& s = *e.schedule;
    if (!s.cron.empty()) PutText(out, "cron", s.cron);
    if (!s.tz.empty()) PutText(out, "tz", s.tz);
    if (s.every_ms != 0) (*out)["every_ms"] = s.every_ms;
    PutText(out, "payload", s.payload);
    PutMetadata(out, s.packed_metadata);
    (*out)["priority_offset_ms"] = s.priority_offset_ms;
    (*out)["max_attempts"] = s.max_attempts;
    (*out)["misfire"] = MisfirePolicyName(s.misfire);
    (*out)["overlap"] = OverlapPolicyName(s.overlap);
  }
  const ScheduleProgress& p = e.schedule_progress;
  (*out)["after"] = p.after;
  (*out)["last_fire_at"] = p.last_fire_at;
  (*out)["last_enqueued_at"] = p.last_enqueued_at;
  (*out)["fires"] = p.fires;
  (*out)["overlap_skips"] = p.overlap_skips;
  (*out)["missed"] = p.missed;
  (*out)["failed"] = p.failed;
  (*out)["paused"] = p.paused;
  if (!e.error.empty()) PutText(out, "last_error", e.error);
}
// A waiting message's dependencies (an enqueue's, or a snapshot's restated dependent with
// the flags of each edge: engine/dependencies.h).
void PutDependencies(const Effect& e, json::object* out) {
  if (e.depends_on == nullptr || e.depends_on->empty()) return;
  json::array deps;
  for (const std::string& key : *e.depends_on) deps.emplace_back(json::string(key));
  (*out)["depends_on"] = std::move(deps);
  (*out)["on_dependency_failure"] = DependencyFailurePolicyName(e.on_dependency_failure);
  if (e.dependency_edges.empty()) return;
  json::array edges;
  for (const char flags : e.dependency_edges) {
    const auto f = static_cast<uint8_t>(flags);
    json::object edge;
    edge["listed"] = (f & kEdgeListed) != 0;
    edge["gone"] = (f & kEdgeGone) != 0;
    edges.emplace_back(std::move(edge));
  }
  (*out)["dependency_edges"] = std::move(edges);
}
}  // namespace

void AppendEffectJson(const Effect& e, json::object* out) {
  (*out)["effect"] = EffectTypeName(e.type);
  (*out)["time"] = e.time;
  PutText(out, "queue", e.queue);
  switch (e.type) {
    case EffectType::kQueueCreated:
    case EffectType::kQueueUpdated:
      if (e.settings != nullptr) (*out)["settings"] = SettingsToJson(*e.settings);
      return;
    case EffectType::kQueueDeleted:
      return;
    case EffectType::kQueuePurged: {
      json::array states;
      for (size_t i = 0; i < kStateCount; ++i) {
        if (e.purge_states & (1u << i))
          states.emplace_back(StateName(static_cast<MessageState>(i)));
      }
      (*out)["purge_states"] = std::move(states);
      return;
    }
    case EffectType::kMessageEnqueued:
      PutMessageFields(e, out);
      if (!e.batch.empty()) PutText(out, "batch", e.batch);
      PutDependencies(e, out);
      PutText(out, "payload", e.payload);
      PutMetadata(out, e.packed_metadata);
      PutText(out, "error", e.error);
      if (!e.result.empty()) PutText(out, "result", e.result);
      if (e.history == kEnqueuedHistoryMark) {
        (*out)["history"] = "enqueued";  // the enqueue alone: docs/wal-format.md, "History"
      } else if (!e.history.empty()) {
        (*out)["history_bytes"] = e.history.size();
      }
      return;
    case EffectType::kMessageChanged:
      PutMessageFields(e, out);
      if (!e.batch.empty()) PutText(out, "batch", e.batch);
      if (!e.worker_id.empty()) PutText(out, "worker_id", e.worker_id);
      PutDependencies(e, out);
      PutText(out, "error", e.error);
      if (!e.result.empty()) PutText(out, "result", e.result);
      if (e.cause == ChangeCause::kDebounced) {  // the `replaced` extension
        PutText(out, "payload", e.payload);
        PutMetadata(out, e.packed_metadata);
      }
      return;
    case EffectType::kMessageRemoved:
      PutMessageFields(e, out);
      return;
    case EffectType::kMessageDeadLettered:
      PutMessageFields(e, out);
      PutText(out, "dead_letter_queue", e.dead_letter_queue);
      return;
    case EffectType::kEpochStarted:
      (*out)["epoch"] = e.epoch;
      (*out)["start_lsn"] = e.start_lsn;
      return;
    case EffectType::kScheduleUpserted:
    case EffectType::kScheduleDeleted:
    case EffectType::kSchedulePaused:
    case EffectType::kScheduleResumed:
    case EffectType::kScheduleFired:
      PutScheduleFields(e, out);
      return;
    case EffectType::kBatchCreated: {
      const BatchFields& f = e.batch_fields;
      PutText(out, "batch", e.batch);
      (*out)["retention_ms"] = f.retention_ms;
      (*out)["created_at"] = f.created_at;
      (*out)["sealed"] = f.sealed;
      (*out)["done"] = f.done;
      (*out)["done_at"] = f.done_at;
      (*out)["members"] = f.counts.members;
      (*out)["completed"] = f.counts.completed;
      (*out)["canceled"] = f.counts.canceled;
      (*out)["errored"] = f.counts.errored;
      if (f.has_callback) {
        PutText(out, "callback_id", e.id);
        (*out)["priority"] = e.priority;
        PutText(out, "payload", e.payload);
        PutMetadata(out, e.packed_metadata);
        (*out)["max_attempts"] = e.max_attempts;
      }
      return;
    }
    case EffectType::kBatchSealed:
    case EffectType::kBatchRemoved:
      PutText(out, "batch", e.batch);
      return;
    case EffectType::kMessageNoted:
      PutText(out, "id", e.id);
      (*out)["lease_token"] = e.lease_token;
      PutText(out, "note", e.note);
      return;
    case EffectType::kFlowEnqueued: {
      // Its members, each as an effect of its own (docs/wal-format.md, "Flows").
      json::array members;
      if (e.members != nullptr) {
        for (const Effect& member : *e.members) {
          json::object m;
          AppendEffectJson(member, &m);
          members.emplace_back(std::move(m));
        }
      }
      (*out)["members"] = std::move(members);
      return;
    }
    case EffectType::kKeyStateRestated:
      // The queue's record carries the queue bucket's tat_us.
      if (e.gate_record) {
        (*out)["collected_at"] = e.time;
      } else {
        PutText(out, "value", e.id);
      }
      (*out)["tat_us"] = e.tat_us;
      return;
    case EffectType::kQueueReady:  // never logged
      return;
    case EffectType::kKeyLimitsSet: {
      const KeyLimits& l = e.key_limits;
      PutText(out, "value", e.id);
      if (l.has(KeyLimits::kConcurrency)) (*out)["concurrency"] = l.concurrency;
      if (l.has(KeyLimits::kRate)) (*out)["rate_per_s"] = RatePerSOf(l.rate_milli);
      if (l.has(KeyLimits::kBurst)) (*out)["burst"] = l.burst;
      if (l.has(KeyLimits::kWeight)) (*out)["weight"] = l.weight;
      return;
    }
  }
}

json::object RecordToJson(const ScannedRecord& record) {
  json::object o;
  o["file"] = record.file.name;
  o["offset"] = record.offset;
  o["index"] = record.index;
  o[record.file.kind == LogFileKind::kSegment ? "lsn" : "covered_lsn"] = record.lsn;
  if (record.effect != nullptr) {
    o["record"] = "effect";
    AppendEffectJson(*record.effect, &o);
  } else if (record.trailer != nullptr) {
    o["record"] = "snapshot_trailer";
    o["count"] = record.trailer->count;
    o["digest"] = Hex64(record.trailer->digest);
  }
  return o;
}

std::string Base64Encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16 |
                       static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
    if (rest == 2) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace sundial::tools
