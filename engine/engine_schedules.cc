// Engine's schedule operations (engine.h, "Schedules"; the rules: docs/semantics.md,
// "Schedules"). The book (engine/schedules.h) says what is due; this file makes the fires
// through Enqueue and reports every change as an effect.
#include <string>

#include "engine/engine.h"
#include "engine/metadata.h"
#include "engine/validation.h"

namespace sundial {
namespace {

const Status kScheduleNotFound = NotFound("schedule: no such schedule");
const Status kBadScheduleQueue =
    InvalidArgument("queue: name must be 1-128 bytes of [A-Za-z0-9._:-]");
const Status kBadScheduleName =
    InvalidArgument("name: a schedule's name must be 1-100 bytes of [A-Za-z0-9._:-]");

Status ValidateKey(std::string_view queue, std::string_view name) {
  if (!IsValidQueueName(queue)) return kBadScheduleQueue;
  if (name.size() > kMaxScheduleNameBytes || !IsValidQueueName(name)) return kBadScheduleName;
  return Status::Ok();
}

// The fire at `t`'s id: name@T, T in ms since the epoch.
std::string FireId(std::string_view name, TimeMs t) {
  std::string id(name);
  id += '@';
  id += std::to_string(t);
  return id;
}

EnqueueItem FireItem(const ScheduleSpec& spec, std::string_view name, TimeMs t) {
  EnqueueItem item;
  item.id = FireId(name, t);
  item.priority = t + spec.priority_offset_ms;
  item.payload = spec.payload;
  if (spec.max_attempts != 0) item.max_attempts = spec.max_attempts;
  if (spec.packed_metadata.empty()) return item;
  if (std::optional<Metadata> metadata = UnpackMetadata(spec.packed_metadata)) {
    item.metadata = std::move(*metadata);
  }
  return item;
}

}  // namespace

ScheduleInfo Engine::ScheduleInfoOf(const ScheduleBook::Entry& entry) const {
  ScheduleInfo info;
  info.queue = entry.queue;
  info.name = entry.name;
  info.spec = entry.spec;
  info.progress = entry.progress;
  info.next_fire_at = entry.next_fire_at;
  info.last_error = entry.last_error;
  return info;
}

void Engine::EmitSchedule(EffectType type, const ScheduleBook::Entry& entry, TimeMs now) const {
  if (sink_ == nullptr) return;
  Effect e;
  e.type = type;
  e.time = now;
  e.queue = entry.queue;
  e.id = entry.name;
  if (type == EffectType::kScheduleUpserted) e.schedule = &entry.spec;
  e.schedule_progress = entry.progress;
  e.error = entry.last_error;
  e.due_at = entry.next_fire_at;
  sink_->OnEffect(e);
}

Result<ScheduleUpsertResult> Engine::UpsertSchedule(std::string_view queue, std::string_view name,
                                                    const ScheduleSpec& spec) {
  if (Status s = ValidateKey(queue, name); !s.ok()) return s;
  Result<std::optional<CronSchedule>> cron = ScheduleBook::ParseTiming(spec);
  if (!cron.ok()) return cron.status();
  if (!IsValidDuration(spec.priority_offset_ms < 0 ? -spec.priority_offset_ms
                                                   : spec.priority_offset_ms)) {
    return InvalidArgument("priority_offset_ms: must be within 100 years either way");
  }
  if (!spec.packed_metadata.empty() && !UnpackMetadata(spec.packed_metadata).has_value()) {
    return InvalidArgument("metadata: malformed");
  }
  // The template must make a valid message (payload, metadata, max_attempts).
  if (Status s = ValidateItem(FireItem(spec, name, 0), options_.max_payload_bytes); !s.ok()) {
    return s;
  }
  if (!options_.auto_create_queues && !GetQueue(queue).ok()) {
    return NotFound("queue: no such queue");
  }
  MutexLock lock(&schedules_mu_);
  const TimeMs now = clock_->NowMs();
  const ScheduleBook::Entry* old = schedules_.Find(queue, name);
  if (old == nullptr && schedules_.size() >= kMaxSchedules) {
    return Status(Code::kResourceExhausted, "schedule: at most 100000 schedules");
  }
  ScheduleProgress progress;
  std::string last_error;
  if (old != nullptr) {
    progress = old->progress;
    last_error = old->last_error;
  } else {
    progress.created_at = now;
  }
  const bool same_timing = old != nullptr && old->spec.cron == spec.cron &&
                           old->spec.tz == spec.tz && old->spec.every_ms == spec.every_ms;
  if (!same_timing) {
    progress.anchor_at = now;
    progress.after = now;
  }
  progress.updated_at = now;
  const ScheduleBook::Entry& entry =
      schedules_.Put(queue, name, spec, std::move(*cron), progress, std::move(last_error));
  EmitSchedule(EffectType::kScheduleUpserted, entry, now);
  return ScheduleUpsertResult{ScheduleInfoOf(entry), old == nullptr};
}

Result<ScheduleUpsertResult> Engine::UpsertSchedule(std::string_view queue, std::string_view name,
                                                    ScheduleSpec spec, const Metadata& metadata) {
  EnqueueItem check;
  check.id = "x";
  check.metadata = metadata;
  if (Status s = ValidateItem(check, options_.max_payload_bytes); !s.ok()) return s;
  spec.packed_metadata = metadata.empty() ? std::string() : PackMetadata(metadata);
  return UpsertSchedule(queue, name, spec);
}

Result<ScheduleInfo> Engine::GetSchedule(std::string_view queue, std::string_view name) const {
  // The names first, as every operation checks them (docs/semantics.md, "Order of checks").
  if (Status s = ValidateKey(queue, name); !s.ok()) return s;
  MutexLock lock(&schedules_mu_);
  const ScheduleBook::Entry* entry = schedules_.Find(queue, name);
  if (entry == nullptr) return kScheduleNotFound;
  return ScheduleInfoOf(*entry);
}

std::vector<ScheduleInfo> Engine::ListSchedules(std::string_view queue) const {
  MutexLock lock(&schedules_mu_);
  std::vector<ScheduleInfo> out;
  for (const ScheduleBook::Entry* entry : schedules_.List(queue)) {
    out.push_back(ScheduleInfoOf(*entry));
  }
  return out;
}

Status Engine::DeleteSchedule(std::string_view queue, std::string_view name) {
  // The names first, as every operation checks them (docs/semantics.md, "Order of checks").
  if (Status s = ValidateKey(queue, name); !s.ok()) return s;
  MutexLock lock(&schedules_mu_);
  const ScheduleBook::Entry* entry = schedules_.Find(queue, name);
  if (entry == nullptr) return kScheduleNotFound;
  const TimeMs now = clock_->NowMs();
  if (sink_ != nullptr) {
    Effect e;
    e.type = EffectType::kScheduleDeleted;
    e.time = now;
    e.queue = entry->queue;
    e.id = entry->name;
    sink_->OnEffect(e);
  }
  (void)schedules_.Erase(queue, name);
  return Status::Ok();
}

Result<ScheduleInfo> Engine::PauseSchedule(std::string_view queue, std::string_view name) {
  // The names first, as every operation checks them (docs/semantics.md, "Order of checks").
  if (Status s = ValidateKey(queue, name); !s.ok()) return s;
  MutexLock lock(&schedules_mu_);
  const ScheduleBook::Entry* entry = schedules_.Find(queue, name);
  if (entry == nullptr) return kScheduleNotFound;
  if (entry->progress.paused) return ScheduleInfoOf(*entry);
  const TimeMs now = clock_->NowMs();
  ScheduleProgress progress = entry->progress;
  progress.paused = true;
  progress.updated_at = now;
  schedules_.SetProgress(*entry, progress, entry->last_error);
  EmitSchedule(EffectType::kSchedulePaused, *entry, now);
  return ScheduleInfoOf(*entry);
}

Result<ScheduleInfo> Engine::ResumeSchedule(std::string_view queue, std::string_view name) {
  // The names first, as every operation checks them (docs/semantics.md, "Order of checks").
  if (Status s = ValidateKey(queue, name); !s.ok()) return s;
  MutexLock lock(&schedules_mu_);
  const ScheduleBook::Entry* entry = schedules_.Find(queue, name);
  if (entry == nullptr) return kScheduleNotFound;
  if (!entry->progress.paused) return ScheduleInfoOf(*entry);
  const TimeMs now = clock_->NowMs();
  ScheduleProgress progress = entry->progress;
  progress.paused = false;
  progress.after = std::max(progress.after, now);
  progress.updated_at = now;
  schedules_.SetProgress(*entry, progress, entry->last_error);
  EmitSchedule(EffectType::kScheduleResumed, *entry, now);
  return ScheduleInfoOf(*entry);
}

Result<ScheduleTriggerResult> Engine::TriggerSchedule(std::string_view queue,
                                                      std::string_view name) {
  // The names first, as every operation checks them (docs/semantics.md, "Order of checks").
  if (Status s = ValidateKey(queue, name); !s.ok()) return s;
  MutexLock lock(&schedules_mu_);
  const ScheduleBook::Entry* entry = schedules_.Find(queue, name);
  if (entry == nullptr) return kScheduleNotFound;
  const TimeMs now = clock_->NowMs();
  uint64_t enqueued = 0;
  bool duplicate = false;
  MakeFires(*entry, {now}, entry->progress.after, 0, /*check_overlap=*/false, now, &enqueued,
            &duplicate);
  if (enqueued == 0) return Status(Code::kFailedPrecondition, "schedule: " + entry->last_error);
  return ScheduleTriggerResult{FireId(entry->name, now), now, duplicate};
}

void Engine::MakeFires(const ScheduleBook::Entry& entry, const std::vector<TimeMs>& fires,
                       TimeMs after, uint64_t dropped, bool check_overlap, TimeMs now,
                       uint64_t* enqueued, bool* duplicate) {
  ScheduleProgress progress = entry.progress;
  std::string last_error = entry.last_error;
  for (TimeMs t : fires) {
    progress.last_fire_at = t;
    if (check_overlap && entry.spec.overlap == OverlapPolicy::kSkipIfActive &&
        progress.last_enqueued_at != 0) {
      const auto previous =
          Outcomes(entry.queue, {FireId(entry.name, progress.last_enqueued_at)}).front();
      if (previous.ok() && !IsTerminal(previous->state)) {
        ++progress.overlap_skips;
        continue;
      }
    }
    std::vector<EnqueueItem> items;
    items.push_back(FireItem(entry.spec, entry.name, t));
    Result<EnqueueResult> r = std::move(Enqueue(entry.queue, std::move(items)).front());
    if (r.ok() || r.status().code() == Code::kAlreadyExists) {
      // A message with this id exists already (a fire repeated after a crash): fired once.
      ++progress.fires;
      ++*enqueued;
      progress.last_enqueued_at = t;
      *duplicate = !r.ok() || r->duplicate;
    } else {
      ++progress.failed;
      last_error = "fire at " + std::to_string(t) + ": " + std::string(r.status().detail());
    }
  }
  progress.after = after;
  progress.missed += dropped;
  schedules_.SetProgress(entry, progress, std::move(last_error));
  EmitSchedule(EffectType::kScheduleFired, entry, now);
}

uint64_t Engine::FireSchedules(TimeMs now) {
  MutexLock lock(&schedules_mu_);
  uint64_t enqueued = 0;
  for (const ScheduleBook::Entry* entry : schedules_.Due(now)) {
    const ScheduleBook::FirePlan plan = ScheduleBook::PlanFires(*entry, now);
    bool duplicate = false;
    MakeFires(*entry, plan.fires, now, plan.dropped, /*check_overlap=*/true, now, &enqueued,
              &duplicate);
  }
  return enqueued;
}

Status Engine::ApplySchedule(const Effect& e) {
  MutexLock lock(&schedules_mu_);
  if (e.type == EffectType::kScheduleUpserted) {
    if (e.schedule == nullptr) return Status(Code::kInternal, "effect: no schedule");
    Result<std::optional<CronSchedule>> cron = ScheduleBook::ParseTiming(*e.schedule);
    if (!cron.ok()) return Status(Code::kInternal, "effect: a schedule's timing does not parse");
    (void)schedules_.Put(e.queue, e.id, *e.schedule, std::move(*cron), e.schedule_progress,
                         std::string(e.error));
    return Status::Ok();
  }
  const ScheduleBook::Entry* entry = schedules_.Find(e.queue, e.id);
  if (entry == nullptr) return Status(Code::kInternal, "effect: no such schedule");
  if (e.type == EffectType::kScheduleDeleted) {
    (void)schedules_.Erase(e.queue, e.id);
  } else {
    schedules_.SetProgress(*entry, e.schedule_progress, std::string(e.error));
  }
  return Status::Ok();
}

void Engine::ExportSchedules(EffectSink* visit) const {
  MutexLock lock(&schedules_mu_);
  for (const ScheduleBook::Entry* entry : schedules_.List({})) {
    Effect e;
    e.type = EffectType::kScheduleUpserted;
    e.time = clock_->NowMs();
    e.queue = entry->queue;
    e.id = entry->name;
    e.schedule = &entry->spec;
    e.schedule_progress = entry->progress;
    e.error = entry->last_error;
    e.due_at = entry->next_fire_at;
    visit->OnEffect(e);
  }
}

}  // namespace sundial
