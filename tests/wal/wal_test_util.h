// Shared helpers of the WAL tests: one sample effect of every EffectType, an effect comparison
// that checks the fields the format logs for each type, a reporter that records damage, a
// SequentialFile that counts the reads asked of it, byte-editing helpers (flip a byte, truncate,
// rewrite a record's checksum) and an allocation tracker (defined in log_damage_test.cc) that
// proves a damaged length allocates nothing.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/effect.h"
#include "engine/metadata.h"
#include "engine/status.h"
#include "engine/types.h"
#include "wal/effect_codec.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"
#include "wal/log_format.h"
#include "wal/log_reader.h"
#include "wal/log_writer.h"

namespace sundial {
inline void PrintTo(const Status& status, std::ostream* os) {
  *os << CodeName(status.code()) << " " << status.detail();
}
inline void PrintTo(EffectType type, std::ostream* os) { *os << EffectTypeName(type); }
}  // namespace sundial

namespace sundial::wal::test {

// Largest single operator-new request seen while tracking is on (log_damage_test.cc).
struct AllocationTracker {
  AllocationTracker();
  ~AllocationTracker();
  size_t largest() const;
};

// One effect of every EffectType, with distinctive non-default values in every logged field.
// The strings live in static storage.
inline std::vector<Effect> SampleEffects() {
  static const QueueSettings settings = [] {
    QueueSettings s;
    s.type = QueueType::kExclusive;
    s.exclusivity_key = "tenant";
    s.lease_ms = 12'345;
    s.invisibility_ms = 67;
    s.max_attempts = 9;
    s.retry_backoff_ms = 2'000;
    s.retry_backoff_max_ms = 90'000;
    s.dead_letter_queue = "jobs-dlq";
    s.retention_ms = -1;  // any value round-trips, even ones the engine would refuse
    s.max_depth = 1'000'000;
    s.enqueue_paused = false;
    s.dequeue_paused = true;
    return s;
  }();
  static const std::string payload("binary\0payload\xff\x01", 17);
  static const std::string metadata = PackMetadata({{"tenant", "acme"}, {"kind", "email"}});

  Effect base;
  base.time = 1'700'000'000'123;
  base.queue = "jobs";

  std::vector<Effect> out;
  Effect created = base;
  created.type = EffectType::kQueueCreated;
  created.settings = &settings;
  out.push_back(created);

  Effect updated = created;
  updated.type = EffectType::kQueueUpdated;
  out.push_back(updated);

  Effect deleted = base;
  deleted.type = EffectType::kQueueDeleted;
  out.push_back(deleted);

  Effect purged = base;
  purged.type = EffectType::kQueuePurged;
  purged.purge_states = (1 << 3) | (1 << 5);
  out.push_back(purged);

  Effect message = base;
  message.id = "msg-0001";
  message.from = MessageState::kPending;
  message.to = MessageState::kRunning;
  message.seq = 42;
  message.version = 7;
  message.priority = -3;
  message.attempts = 2;
  message.max_attempts = 5;
  message.due_at = 1'700'000'030'000;
  message.lease_token = (uint64_t{1} << 53) - 1;
  message.enqueued_at = 1'699'999'999'000;

  Effect enqueued = message;
  enqueued.type = EffectType::kMessageEnqueued;
  enqueued.from = enqueued.to = MessageState::kInvisible;
  enqueued.payload = payload;
  enqueued.packed_metadata = metadata;
  enqueued.error = "previous error";
  out.push_back(enqueued);

  Effect changed = message;
  changed.type = EffectType::kMessageChanged;
  changed.cause = ChangeCause::kLeased;
  changed.error = "timeout talking to smtp";
  out.push_back(changed);

  Effect removed = message;
  removed.type = EffectType::kMessageRemoved;
  removed.from = removed.to = MessageState::kCompleted;
  out.push_back(removed);

  Effect dead = message;
  dead.type = EffectType::kMessageDeadLettered;
  dead.from = MessageState::kRunning;
  dead.to = MessageState::kPending;
  dead.dead_letter_queue = "jobs-dlq";
  out.push_back(dead);
  return out;
}

// Effects with the fields format version 2 added (docs/wal-format.md, "Extensions"): a
// completion carrying a result, and the export of a completed message with its result.
inline std::vector<Effect> SampleEffectsV2() {
  static const std::string result("result\0bytes\xfe", 13);
  std::vector<Effect> samples = SampleEffects();
  std::vector<Effect> out;
  Effect completed = samples[5];  // kMessageChanged
  completed.cause = ChangeCause::kCompleted;
  completed.from = MessageState::kRunning;
  completed.to = MessageState::kCompleted;
  completed.error = "";
  completed.result = result;
  out.push_back(completed);
  Effect exported = samples[4];  // kMessageEnqueued
  exported.from = exported.to = MessageState::kCompleted;
  exported.result = result;
  out.push_back(exported);
  return out;
}

// The effect type version 2 added: the epoch record a new primary writes first
// (docs/replication.md, "Epochs"; docs/wal-format.md).
inline Effect SampleEpochEffect() {
  Effect epoch;
  epoch.type = EffectType::kEpochStarted;
  epoch.time = 1'700'000'000'456;
  epoch.epoch = 157;
  epoch.start_lsn = 22;
  return epoch;
}

// The schedule effects format version 3 added (docs/wal-format.md, "Schedule effects"): an
// upsert of a cron schedule and of an every_ms one, delete, pause, resume and a fire.
inline std::vector<Effect> SampleScheduleEffects() {
  static const ScheduleSpec cron = [] {
    ScheduleSpec s;
    s.cron = "30 2 * * MON-FRI";
    s.tz = "Europe/Paris";
    s.payload = std::string("nightly\0report", 14);
    s.packed_metadata = PackMetadata({{"kind", "report"}});
    s.priority_offset_ms = -60'000;
    s.max_attempts = 4;
    s.misfire = MisfirePolicy::kOne;
    s.overlap = OverlapPolicy::kSkipIfActive;
    return s;
  }();
  static const ScheduleSpec every = [] {
    ScheduleSpec s;
    s.every_ms = 90'000;
    s.misfire = MisfirePolicy::kAll;
    return s;
  }();
  ScheduleProgress progress;
  progress.created_at = 1'700'000'000'001;
  progress.updated_at = 1'700'000'000'002;
  progress.anchor_at = 1'700'000'000'003;
  progress.after = 1'700'000'000'004;
  progress.last_fire_at = 1'700'000'000'005;
  progress.last_enqueued_at = 1'700'000'000'006;
  progress.fires = 7;
  progress.overlap_skips = 8;
  progress.missed = 9;
  progress.failed = 10;
  progress.paused = true;
  Effect base;
  base.time = 1'700'000'000'789;
  base.queue = "jobs";
  base.id = "nightly";
  std::vector<Effect> out;
  Effect upsert = base;
  upsert.type = EffectType::kScheduleUpserted;
  upsert.schedule = &cron;
  upsert.schedule_progress = progress;
  upsert.error = "fire at 1700000000005: queue: enqueue is paused";
  out.push_back(upsert);
  Effect upsert_every = base;
  upsert_every.type = EffectType::kScheduleUpserted;
  upsert_every.id = "every-90s";
  upsert_every.schedule = &every;
  out.push_back(upsert_every);
  for (EffectType type : {EffectType::kSchedulePaused, EffectType::kScheduleResumed,
                          EffectType::kScheduleFired, EffectType::kScheduleDeleted}) {
    Effect e = base;
    e.type = type;
    if (type != EffectType::kScheduleDeleted) e.schedule_progress = progress;
    progress.paused = !progress.paused;
    ++progress.fires;
    out.push_back(e);
  }
  return out;
}

// Effects with the fields format version 3 added (docs/wal-format.md, "Extensions"): the
// enqueue of a waiting message with its dependencies and policy, and a snapshot's restatement
// of a dependent with its graph entry (which one it still waits on, which one is gone).
inline std::vector<Effect> SampleEffectsV3() {
  static const std::vector<std::string> depends_on = {"jobs/parent-1", "other.queue:x/a/b",
                                                      "jobs/parent-1"};
  static const std::string edges("\x01\x00\x02", 3);
  std::vector<Effect> samples = SampleEffects();
  std::vector<Effect> out;
  Effect waiting = samples[4];  // kMessageEnqueued
  waiting.from = waiting.to = MessageState::kWaiting;
  waiting.due_at = INT64_MAX;
  waiting.lease_token = 1'700'000'009'000;  // the visible_at it takes once released
  waiting.depends_on = &depends_on;
  waiting.on_dependency_failure = DependencyFailurePolicy::kError;
  out.push_back(waiting);
  Effect entry = samples[5];  // kMessageChanged
  entry.cause = ChangeCause::kNone;
  entry.from = entry.to = MessageState::kWaiting;
  entry.due_at = INT64_MAX;
  entry.lease_token = 0;
  entry.depends_on = &depends_on;
  entry.on_dependency_failure = DependencyFailurePolicy::kRelease;
  entry.dependency_edges = edges;
  out.push_back(entry);
  return out;
}

// Batches, added to format 3 (docs/wal-format.md, "Batches"): a new batch with a callback, a
// snapshot's done batch without one, a seal, a removal, a member's enqueue, a snapshot's
// restated member.
inline std::vector<Effect> SampleEffectsBatches() {
  static const std::string packed = PackMetadata({{"tenant", "acme"}, {"empty", ""}});
  std::vector<Effect> samples = SampleEffects();
  std::vector<Effect> out;
  Effect created;
  created.type = EffectType::kBatchCreated;
  created.time = 1'700'000'000'100;
  created.queue = "callbacks";
  created.batch = "import-2026-11-28";
  created.id = "batch:import-2026-11-28";
  created.priority = -5;
  created.payload = std::string_view("\0done\xff", 6);
  created.packed_metadata = packed;
  created.max_attempts = 3;
  created.batch_fields.has_callback = true;
  created.batch_fields.retention_ms = 3'600'000;
  created.batch_fields.created_at = created.time;
  out.push_back(created);
  Effect done;
  done.type = EffectType::kBatchCreated;
  done.time = 1'700'000'000'200;
  done.batch = "b";
  done.batch_fields.retention_ms = 0;
  done.batch_fields.created_at = 1'600'000'000'000;
  done.batch_fields.sealed = true;
  done.batch_fields.done = true;
  done.batch_fields.done_at = 1'650'000'000'000;
  done.batch_fields.counts = {100'000, 99'000, 600, 400};
  out.push_back(done);
  Effect sealed;
  sealed.type = EffectType::kBatchSealed;
  sealed.time = 1'700'000'000'300;
  sealed.batch = created.batch;
  out.push_back(sealed);
  Effect removed = sealed;
  removed.type = EffectType::kBatchRemoved;
  removed.time = 1'700'000'000'400;
  out.push_back(removed);
  Effect member = samples[4];  // kMessageEnqueued
  member.batch = created.batch;
  out.push_back(member);
  Effect restated = samples[5];  // kMessageChanged
  restated.cause = ChangeCause::kNone;
  restated.from = restated.to;
  restated.batch = "b";
  out.push_back(restated);
  return out;
}

// Expiry and debounce, added to format 3 (docs/wal-format.md, "Expiry and debounce"): a queue
// created with ttl_ms and dedupe, an enqueue with expires_at (also a snapshot's restatement), a
// debounce's change with its replaced payload and metadata, an expiry's change.
inline std::vector<Effect> SampleEffectsExpiry() {
  static const std::string packed = PackMetadata({{"tenant", "acme"}, {"v", "2"}});
  static const QueueSettings settings = [] {
    QueueSettings s;
    s.ttl_ms = 86'400'000;
    s.dedupe = Dedupe::kWhileActive;
    return s;
  }();
  std::vector<Effect> samples = SampleEffects();
  std::vector<Effect> out;
  Effect created;
  created.type = EffectType::kQueueCreated;
  created.time = 1'700'000'000'500;
  created.queue = "expiring";
  created.settings = &settings;
  out.push_back(created);
  Effect enqueued = samples[4];  // kMessageEnqueued
  enqueued.expires_at = 1'700'086'400'000;
  out.push_back(enqueued);
  Effect restated = enqueued;
  restated.restated = true;
  out.push_back(restated);
  Effect debounced = samples[5];  // kMessageChanged
  debounced.cause = ChangeCause::kDebounced;
  debounced.from = MessageState::kPending;
  debounced.to = MessageState::kInvisible;
  debounced.payload = std::string_view("new\0payload", 11);
  debounced.packed_metadata = packed;
  out.push_back(debounced);
  Effect expired = samples[5];
  expired.cause = ChangeCause::kExpired;
  expired.from = MessageState::kInvisible;
  expired.to = MessageState::kCanceled;
  expired.error = "expired";
  out.push_back(expired);
  return out;
}

// Flow control, added to format 3 (docs/wal-format.md, "Flow settings", "Per-key limits",
// "Token buckets"): a queue created with every flow setting (the flags-bit-2 block and the
// tags 17, 27, 28, 29, 30 together, in order), an update changing them and one setting the
// rates and fairness back to their defaults (tags left out, the block kept); a snapshot's
// bucket records (effect 49: a key's, the empty value's, which is a key's too, and the queue's
// own, flags bit 1); set_key_limits' overrides (effect 51: every field, some, none). Expiry's
// change effects (causes 12, 13) are in SampleEffectsExpiry.
inline std::vector<Effect> SampleEffectsFlowControl() {
  static const QueueSettings created_settings = [] {
    QueueSettings s;
    s.flow_key = "tenant";
    s.key_concurrency = 3;
    s.history_max = 7;
    s.ttl_ms = 600'000;
    s.dedupe = Dedupe::kWhileActive;
    s.key_rate_milli = 2'500;  // key_rate_per_s 2.5
    s.key_burst = 4;
    s.rate_milli = 100'125;  // rate_per_s 100.125
    s.burst = 50;
    s.fairness = Fairness::kWeighted;
    s.overdue_first_ms = 30'000;
    return s;
  }();
  static const QueueSettings changed_settings = [] {
    QueueSettings s = created_settings;
    s.key_concurrency = 1;
    s.ttl_ms = 0;          // dedupe alone keeps tag 27
    s.key_rate_milli = 1;  // the smallest rate, 0.001/s
    s.key_burst = 1'000'000;
    s.rate_milli = 1'000'000'000;  // the largest, 1,000,000/s
    s.burst = 1;
    s.overdue_first_ms = 0;  // weighted alone keeps tag 30
    return s;
  }();
  static const QueueSettings cleared_settings = [] {
    QueueSettings s = changed_settings;
    s.key_concurrency = 0;  // flow_key alone keeps the block
    s.dedupe = Dedupe::kKeep;
    s.key_rate_milli = 0;
    s.key_burst = 1;
    s.rate_milli = 0;
    s.burst = 1;
    s.fairness = Fairness::kNone;
    return s;
  }();
  std::vector<Effect> out;
  Effect created;
  created.type = EffectType::kQueueCreated;
  created.time = 1'700'000'000'600;
  created.queue = "gated";
  created.settings = &created_settings;
  out.push_back(created);
  Effect changed = created;
  changed.type = EffectType::kQueueUpdated;
  changed.time = 1'700'000'000'700;
  changed.settings = &changed_settings;
  out.push_back(changed);
  Effect cleared = changed;
  cleared.time = 1'700'000'000'800;
  cleared.settings = &cleared_settings;
  out.push_back(cleared);
  Effect key_bucket;
  key_bucket.type = EffectType::kKeyStateRestated;
  key_bucket.time = 1'700'000'000'900;
  key_bucket.queue = "gated";
  key_bucket.id = "acme";
  key_bucket.tat_us = 1'700'000'001'234'567;
  out.push_back(key_bucket);
  Effect empty_value_bucket = key_bucket;
  empty_value_bucket.id = "";
  empty_value_bucket.tat_us = 1'700'000'000'900'001;
  out.push_back(empty_value_bucket);
  Effect queue_bucket = key_bucket;
  queue_bucket.id = "";
  queue_bucket.gate_record = true;
  queue_bucket.time = 1'700'000'000'950;  // its collected_at
  queue_bucket.tat_us = 1'700'000'000'960'500;
  out.push_back(queue_bucket);
  Effect idle_queue_bucket = queue_bucket;  // a queue without a flow key: collected_at 0
  idle_queue_bucket.queue = "rated";
  idle_queue_bucket.time = 0;
  idle_queue_bucket.tat_us = 0;
  out.push_back(idle_queue_bucket);
  Effect limits;
  limits.type = EffectType::kKeyLimitsSet;
  limits.time = 1'700'000'001'000;
  limits.queue = "gated";
  limits.id = "acme";
  limits.key_limits.set = KeyLimits::kAll;
  limits.key_limits.concurrency = 9;
  limits.key_limits.rate_milli = 7'250;
  limits.key_limits.burst = 12;
  limits.key_limits.weight = 1'000;
  out.push_back(limits);
  Effect some = limits;  // the fields of the bits set, in bit order, the others skipped
  some.id = "";
  some.key_limits = KeyLimits();
  some.key_limits.set = KeyLimits::kConcurrency | KeyLimits::kWeight;
  some.key_limits.concurrency = 0;
  some.key_limits.weight = 5;
  out.push_back(some);
  Effect removed = limits;  // no field: the override is removed
  removed.time = 1'700'000'001'100;
  removed.key_limits = KeyLimits();
  out.push_back(removed);
  return out;
}

// Checks the fields docs/wal-format.md logs for a.type.
inline void ExpectSameLoggedFields(const Effect& a, const Effect& b) {
  ASSERT_EQ(a.type, b.type);
  EXPECT_EQ(a.time, b.time);
  EXPECT_EQ(a.queue, b.queue);
  switch (a.type) {
    case EffectType::kQueueCreated:
    case EffectType::kQueueUpdated:
      ASSERT_NE(b.settings, nullptr);
      EXPECT_TRUE(*a.settings == *b.settings);
      return;
    case EffectType::kQueueDeleted:
      return;
    case EffectType::kQueuePurged:
      EXPECT_EQ(a.purge_states, b.purge_states);
      return;
    case EffectType::kEpochStarted:
      EXPECT_EQ(a.epoch, b.epoch);
      EXPECT_EQ(a.start_lsn, b.start_lsn);
      return;
    case EffectType::kScheduleUpserted:
    case EffectType::kScheduleDeleted:
    case EffectType::kSchedulePaused:
    case EffectType::kScheduleResumed:
    case EffectType::kScheduleFired:
      EXPECT_EQ(a.id, b.id);
      ASSERT_EQ(a.schedule != nullptr, b.schedule != nullptr);
      if (a.schedule != nullptr) {
        EXPECT_TRUE(*a.schedule == *b.schedule);
      }
      if (a.type != EffectType::kScheduleDeleted) {
        EXPECT_TRUE(a.schedule_progress == b.schedule_progress);
        EXPECT_EQ(a.error, b.error);
      }
      return;
    case EffectType::kBatchCreated: {
      EXPECT_EQ(a.batch, b.batch);
      const BatchFields& f = a.batch_fields;
      const BatchFields& g = b.batch_fields;
      EXPECT_EQ(f.has_callback, g.has_callback);
      EXPECT_EQ(f.retention_ms, g.retention_ms);
      EXPECT_EQ(f.created_at, g.created_at);
      EXPECT_EQ(f.sealed, g.sealed);
      EXPECT_EQ(f.done, g.done);
      EXPECT_EQ(f.done_at, g.done_at);
      EXPECT_EQ(f.counts, g.counts);
      EXPECT_EQ(a.id, b.id);
      EXPECT_EQ(a.priority, b.priority);
      EXPECT_EQ(a.payload, b.payload);
      EXPECT_EQ(a.packed_metadata, b.packed_metadata);
      EXPECT_EQ(a.max_attempts, b.max_attempts);
      return;
    }
    case EffectType::kBatchSealed:
    case EffectType::kBatchRemoved:
      EXPECT_EQ(a.batch, b.batch);
      return;
    case EffectType::kMessageNoted:
      EXPECT_EQ(a.id, b.id);
      EXPECT_EQ(a.lease_token, b.lease_token);
      EXPECT_EQ(a.note, b.note);
      return;
    case EffectType::kKeyStateRestated:
      EXPECT_EQ(a.id, b.id);
      EXPECT_EQ(a.gate_record, b.gate_record);
      EXPECT_EQ(a.tat_us, b.tat_us);
      return;
    case EffectType::kKeyLimitsSet:
      EXPECT_EQ(a.id, b.id);
      EXPECT_EQ(a.key_limits, b.key_limits);
      return;
    default:
      break;
  }
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.cause, b.cause);
  EXPECT_EQ(a.from, b.from);
  EXPECT_EQ(a.to, b.to);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.attempts, b.attempts);
  EXPECT_EQ(a.max_attempts, b.max_attempts);
  EXPECT_EQ(a.due_at, b.due_at);
  EXPECT_EQ(a.lease_token, b.lease_token);
  EXPECT_EQ(a.enqueued_at, b.enqueued_at);
  if (a.type == EffectType::kMessageEnqueued) {
    EXPECT_EQ(a.payload, b.payload);
    EXPECT_EQ(a.packed_metadata, b.packed_metadata);
  }
  if (a.type == EffectType::kMessageEnqueued || a.type == EffectType::kMessageChanged) {
    EXPECT_EQ(a.error, b.error);
    EXPECT_EQ(a.result, b.result);
    const bool has_dependencies = a.depends_on != nullptr && !a.depends_on->empty();
    ASSERT_EQ(has_dependencies, b.depends_on != nullptr);
    if (has_dependencies) {
      EXPECT_EQ(*a.depends_on, *b.depends_on);
      EXPECT_EQ(a.on_dependency_failure, b.on_dependency_failure);
    }
    EXPECT_EQ(a.dependency_edges, b.dependency_edges);
    EXPECT_EQ(a.batch, b.batch);
  }
  if (a.type == EffectType::kMessageChanged) {
    EXPECT_EQ(a.worker_id, b.worker_id);
  }
  if (a.type == EffectType::kMessageEnqueued) {
    EXPECT_EQ(a.history, b.history);
    EXPECT_EQ(a.expires_at, b.expires_at);
  }
  if (a.type == EffectType::kMessageChanged && a.cause == ChangeCause::kDebounced) {
    EXPECT_EQ(a.payload, b.payload);
    EXPECT_EQ(a.packed_metadata, b.packed_metadata);
  }
  if (a.type == EffectType::kMessageDeadLettered) {
    EXPECT_EQ(a.dead_letter_queue, b.dead_letter_queue);
  }
}

inline std::string Encode(const Effect& effect) {
  std::string out;
  EncodeEffect(effect, &out);
  return out;
}

class RecordingReporter final : public CorruptionReporter {
 public:
  void Report(const Corruption& damage) override { reports.push_back(damage); }
  std::vector<Corruption> reports;
};

// Serves a string and remembers the largest read asked of it.
class StringSequentialFile final : public SequentialFile {
 public:
  explicit StringSequentialFile(std::string contents) : contents_(std::move(contents)) {}
  Status Read(size_t n, char* scratch, std::string_view* result) override {
    largest_read_ = std::max(largest_read_, n);
    size_t got = std::min(n, contents_.size() - pos_);
    contents_.copy(scratch, got, pos_);
    pos_ += got;
    *result = std::string_view(scratch, got);
    return Status::Ok();
  }
  Status Skip(uint64_t n) override {
    pos_ = std::min<uint64_t>(contents_.size(), pos_ + n);
    return Status::Ok();
  }
  size_t largest_read() const { return largest_read_; }

 private:
  std::string contents_;
  size_t pos_ = 0;
  size_t largest_read_ = 0;
};

// A written file: its bytes and the offset of each record.
struct WrittenLog {
  std::string bytes;
  std::vector<uint64_t> record_offsets;
  std::vector<std::string> payloads;
};

class StringWritableFile final : public WritableFile {
 public:
  explicit StringWritableFile(std::string* out) : out_(out) {}
  Status Append(std::string_view data) override {
    out_->append(data);
    return Status::Ok();
  }
  Status Flush() override { return Status::Ok(); }
  Status Sync() override { return Status::Ok(); }
  Status SyncFlushed() override { return Status::Ok(); }
  Status Close() override { return Status::Ok(); }

 private:
  std::string* out_;
};

// A segment (number `segment`, first LSN `lsn`) holding `payloads` as kEffect records.
inline WrittenLog WriteLog(const std::vector<std::string>& payloads, uint64_t segment = 1,
                           uint64_t lsn = 0) {
  WrittenLog log;
  FileHeader header;
  header.file_number = segment;
  header.lsn = lsn;
  LogWriter writer(std::make_unique<StringWritableFile>(&log.bytes), header);
  EXPECT_TRUE(writer.WriteHeader().ok());
  for (const auto& p : payloads) {
    log.record_offsets.push_back(log.bytes.size());
    EXPECT_TRUE(writer.AddRecord(RecordType::kEffect, p).ok());
  }
  log.payloads = payloads;
  return log;
}

// The encodings of SampleEffects(): every EffectType, in type order.
inline std::vector<std::string> SampleEncodings() {
  std::vector<std::string> out;
  for (const Effect& e : SampleEffects()) out.push_back(Encode(e));
  return out;
}

struct ReadResult {
  std::vector<std::string> payloads;
  std::vector<uint64_t> lsns;
  std::vector<Corruption> reports;
  Status status;
};

inline ReadResult ReadLog(std::string bytes, bool last_file = true,
                          std::optional<uint64_t> expected_number = std::nullopt) {
  ReadResult result;
  RecordingReporter reporter;
  LogReader::Options options;
  options.last_file = last_file;
  options.expected_file_number = expected_number;
  LogReader reader(std::make_unique<StringSequentialFile>(std::move(bytes)),
                   "wal-0000000000000001.log", &reporter, options);
  LogReader::Record record;
  while (reader.ReadRecord(&record)) {
    result.payloads.emplace_back(record.payload);
    result.lsns.push_back(record.lsn);
  }
  result.reports = reporter.reports;
  result.status = reader.status();
  return result;
}

inline void FlipByte(std::string* bytes, size_t offset) { (*bytes)[offset] ^= 0x5a; }

// Rewrites the checksum of the record at `offset` to match its (edited) type and payload.
inline void FixRecordChecksum(std::string* bytes, uint64_t offset, uint64_t file_number) {
  uint32_t length = DecodeFixed32(bytes->data() + offset);
  auto type = static_cast<uint8_t>((*bytes)[offset + 4]);
  std::string_view payload(bytes->data() + offset + kRecordHeaderBytes, length);
  std::string sum;
  PutFixed64(&sum, RecordChecksum(type, file_number, payload));
  bytes->replace(offset + 5, 8, sum);
}

// A fresh directory under the system's temp directory (TMPDIR), removed with everything in it
// at the end: for tests on real files (fork checkpoints need a file system the child shares).
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "sundial-wal-XXXXXX").string();
    EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Options with `policy` and every other setting at its default.
inline LogOptions Policy(FsyncPolicy policy) {
  LogOptions options;
  options.policy = policy;
  return options;
}

// A log in `fs`'s directory "data"; null (and a test failure naming why) if it cannot open.
inline std::unique_ptr<GroupCommitLog> OpenLog(FileSystem* fs, LogOptions options = {},
                                               uint64_t next_lsn = 0, uint64_t segment = 1) {
  auto log = GroupCommitLog::Open(fs, "data", options, next_lsn, segment);
  EXPECT_TRUE(log.ok()) << CodeName(log.status().code()) << " " << log.status().detail();
  return log.ok() ? std::move(log).value() : nullptr;
}

}  // namespace sundial::wal::test
