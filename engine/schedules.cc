#include "engine/schedules.h"

#include <xxhash.h>

#include <algorithm>
#include <deque>

#include "engine/validation.h"

namespace sundial {

Result<std::optional<CronSchedule>> ScheduleBook::ParseTiming(const ScheduleSpec& spec) {
  const bool has_cron = !spec.cron.empty();
  if (has_cron == (spec.every_ms != 0)) {
    return InvalidArgument("schedule: give exactly one of cron and every_ms");
  }
  if (!has_cron) {
    if (!spec.tz.empty()) return InvalidArgument("tz: only with cron");
    if (spec.every_ms < kMinScheduleEveryMs || spec.every_ms > kMaxDurationMs) {
      return InvalidArgument("every_ms: must be 10-3153600000000");
    }
    return std::optional<CronSchedule>();
  }
  Result<CronSchedule> cron = CronSchedule::Parse(spec.cron, spec.tz);
  if (!cron.ok()) return cron.status();
  return std::optional<CronSchedule>(std::move(*cron));
}

const ScheduleBook::Entry* ScheduleBook::Find(std::string_view queue, std::string_view name) const {
  auto it = entries_.find(Key(queue, name));
  return it == entries_.end() ? nullptr : &it->second;
}

const ScheduleBook::Entry& ScheduleBook::Put(std::string_view queue, std::string_view name,
                                             ScheduleSpec spec, std::optional<CronSchedule> cron,
                                             const ScheduleProgress& progress,
                                             std::string last_error) {
  auto [it, inserted] = entries_.try_emplace(Key(queue, name));
  Entry& entry = it->second;
  if (inserted) {
    entry.queue = queue;
    entry.name = name;
  } else {
    Unindex(entry);
  }
  entry.spec = std::move(spec);
  entry.cron = std::move(cron);
  entry.progress = progress;
  entry.last_error = std::move(last_error);
  Index(entry);
  return entry;
}

void ScheduleBook::SetProgress(const Entry& entry, const ScheduleProgress& progress,
                               std::string last_error) {
  Entry& e = entries_.find(Key(entry.queue, entry.name))->second;
  Unindex(e);
  e.progress = progress;
  e.last_error = std::move(last_error);
  Index(e);
}

bool ScheduleBook::Erase(std::string_view queue, std::string_view name) {
  auto it = entries_.find(Key(queue, name));
  if (it == entries_.end()) return false;
  Unindex(it->second);
  entries_.erase(it);
  return true;
}

void ScheduleBook::Unindex(const Entry& entry) {
  if (entry.next_fire_at != 0) due_.erase(&entry);
}

void ScheduleBook::Index(Entry& entry) {
  entry.next_fire_at = entry.progress.paused ? 0 : NextFire(entry, entry.progress.after);
  if (entry.next_fire_at != 0) due_.insert(&entry);
}

std::vector<const ScheduleBook::Entry*> ScheduleBook::List(std::string_view queue) const {
  std::vector<const Entry*> out;
  auto it = queue.empty() ? entries_.begin() : entries_.lower_bound(Key(queue, ""));
  for (; it != entries_.end(); ++it) {
    if (!queue.empty() && it->second.queue != queue) break;
    out.push_back(&it->second);
  }
  return out;
}

TimeMs ScheduleBook::NextDueTime() const {
  return due_.empty() ? INT64_MAX : (*due_.begin())->next_fire_at;
}

std::vector<const ScheduleBook::Entry*> ScheduleBook::Due(TimeMs now) const {
  std::vector<const Entry*> out;
  for (const Entry* e : due_) {
    if (e->next_fire_at > now) break;
    out.push_back(e);
  }
  return out;
}

TimeMs ScheduleBook::NextFire(const Entry& entry, TimeMs after) {
  if (entry.cron.has_value()) return entry.cron->Next(after).value_or(0);
  const int64_t every = entry.spec.every_ms;
  const TimeMs anchor = entry.progress.anchor_at;
  if (every <= 0) return 0;
  if (after < anchor) return anchor + every;
  const int64_t k = (after - anchor) / every + 1;
  if (k > (INT64_MAX - anchor) / every) return 0;
  return anchor + k * every;
}

ScheduleBook::FirePlan ScheduleBook::PlanFires(const Entry& entry, TimeMs now) {
  FirePlan plan;
  const TimeMs after = std::max(entry.progress.after, now - kScheduleCatchUpHorizonMs);
  if (now <= after) return plan;
  // The latest kMaxCatchUpFires due fires, oldest first, and how many are due in all.
  std::deque<TimeMs> latest;
  uint64_t due = 0;
  if (entry.cron.has_value()) {
    constexpr size_t kChunk = 1000;
    TimeMs cursor = after;
    while (true) {
      const std::vector<TimeMs> fires = entry.cron->FiresBetween(cursor, now, kChunk);
      due += fires.size();
      for (TimeMs t : fires) {
        latest.push_back(t);
        if (latest.size() > kMaxCatchUpFires) latest.pop_front();
      }
      if (fires.size() < kChunk) break;
      cursor = fires.back();
    }
  } else {
    const TimeMs first = NextFire(entry, after);
    if (first == 0 || first > now) return plan;
    const int64_t every = entry.spec.every_ms;
    const int64_t count = (now - first) / every + 1;
    due = static_cast<uint64_t>(count);
    const int64_t keep = std::min<int64_t>(count, kMaxCatchUpFires);
    for (int64_t i = count - keep; i < count; ++i) latest.push_back(first + i * every);
  }
  // Walk back from the latest: every fire on time, then the missed ones by policy.
  for (auto it = latest.rbegin(); it != latest.rend(); ++it) {
    if (plan.fires.size() == kMaxCatchUpFires) break;
    const bool on_time = now - *it <= kScheduleMisfireGraceMs;
    if (on_time || entry.spec.misfire == MisfirePolicy::kAll) {
      plan.fires.push_back(*it);
      continue;
    }
    if (entry.spec.misfire == MisfirePolicy::kOne) plan.fires.push_back(*it);
    break;
  }
  std::reverse(plan.fires.begin(), plan.fires.end());
  plan.dropped = due - plan.fires.size();
  return plan;
}

uint64_t ScheduleBook::Digest() const {
  if (entries_.empty()) return 0;
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  auto str = [&](std::string_view s) {
    const uint64_t n = s.size();
    XXH3_64bits_update(state, &n, sizeof n);
    XXH3_64bits_update(state, s.data(), s.size());
  };
  for (const auto& [key, e] : entries_) {
    str(e.queue);
    str(e.name);
    str(e.spec.cron);
    str(e.spec.tz);
    str(e.spec.payload);
    str(e.spec.packed_metadata);
    str(e.last_error);
    const ScheduleProgress& p = e.progress;
    const int64_t fields[] = {e.spec.every_ms,
                              e.spec.priority_offset_ms,
                              e.spec.max_attempts,
                              static_cast<int64_t>(e.spec.misfire),
                              static_cast<int64_t>(e.spec.overlap),
                              p.created_at,
                              p.updated_at,
                              p.anchor_at,
                              p.after,
                              p.last_fire_at,
                              p.last_enqueued_at,
                              static_cast<int64_t>(p.fires),
                              static_cast<int64_t>(p.overlap_skips),
                              static_cast<int64_t>(p.missed),
                              static_cast<int64_t>(p.failed),
                              p.paused ? 1 : 0};
    XXH3_64bits_update(state, fields, sizeof fields);
  }
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest == 0 ? 1 : digest;
}

}  // namespace sundial
