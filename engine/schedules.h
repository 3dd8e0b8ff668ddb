// ScheduleBook: the schedules of every queue and when each fires next (docs/semantics.md,
// "Schedules"). Internal to engine/: the engine owns one, guarded by its schedule lock, and
// makes the fires (engine/engine_schedules.cc); this class holds the data and the rules of
// time — which fires are due at `now`, which of them the misfire policy keeps — and nothing
// else: no clock, no effects, no queues.
//
// A schedule is named (queue, name). Its spec (ScheduleSpec) says when it fires and what it
// enqueues; its progress (ScheduleProgress) what it has done. Its next fire is the first fire
// time strictly after progress.after (none while paused): for every_ms, anchor_at + k·every_ms
// (k ≥ 1); for cron, CronSchedule::Next (engine/cron.h: the DST rules).
//
// Due index: an ordered set of (next fire, queue, name), so NextDueTime is O(1) and taking
// the due schedules O(k log n) for k due: an idle book of any size costs nothing until its
// earliest fire (docs/BENCHMARKS.md, "Schedules").
//
// Thread safety: none; the engine guards it (engine.h, "Schedules").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/cron.h"
#include "engine/status.h"
#include "engine/types.h"

namespace sundial {

class ScheduleBook {
 public:
  struct Entry {
    std::string queue;
    std::string name;
    ScheduleSpec spec;
    ScheduleProgress progress;
    std::string last_error;
    std::optional<CronSchedule> cron;  // spec.cron parsed; nullopt for every_ms
    TimeMs next_fire_at = 0;           // 0: none (paused)
  };

  // The fires PlanFires keeps at `now`, oldest first, and how many due fires it drops.
  struct FirePlan {
    std::vector<TimeMs> fires;
    uint64_t dropped = 0;
  };

  // Checks `spec`'s timing (exactly one of cron and every_ms, tz only with cron, the cron
  // expression and zone) and returns the parsed cron expression (nullopt for every_ms), or
  // INVALID_ARGUMENT naming the field.
  static Result<std::optional<CronSchedule>> ParseTiming(const ScheduleSpec& spec);

  ScheduleBook() = default;
  ScheduleBook(const ScheduleBook&) = delete;
  ScheduleBook& operator=(const ScheduleBook&) = delete;

  size_t size() const { return entries_.size(); }
  const Entry* Find(std::string_view queue, std::string_view name) const;

  // Inserts or replaces schedule (queue, name) with `spec` and `progress`; `cron` is
  // ParseTiming's answer for `spec`. Returns the entry.
  const Entry& Put(std::string_view queue, std::string_view name, ScheduleSpec spec,
                   std::optional<CronSchedule> cron, const ScheduleProgress& progress,
                   std::string last_error);
  // Sets an existing entry's progress (and last error) and its place in the due index.
  void SetProgress(const Entry& entry, const ScheduleProgress& progress, std::string last_error);
  // Whether it existed.
  bool Erase(std::string_view queue, std::string_view name);

  // Every schedule of `queue` (empty: of every queue), by (queue, name).
  std::vector<const Entry*> List(std::string_view queue) const;
  // The earliest next fire of any schedule, or INT64_MAX when none.
  TimeMs NextDueTime() const;
  // The schedules whose next fire is at or before `now`, earliest first.
  std::vector<const Entry*> Due(TimeMs now) const;

  // The first fire of `entry` strictly after `after` (ignoring pause), or 0 when none.
  static TimeMs NextFire(const Entry& entry, TimeMs after);
  // Which fires due in (progress.after, now] are made: those late by at most
  // kScheduleMisfireGraceMs, and of the missed ones (later than that) none (skip), the latest
  // (one) or all; the latest kMaxCatchUpFires in all, none older than kScheduleCatchUpHorizonMs.
  static FirePlan PlanFires(const Entry& entry, TimeMs now);

  // XXH3 over every schedule by (queue, name): spec, progress, last error. 0 when empty.
  uint64_t Digest() const;

 private:
  using Key = std::pair<std::string, std::string>;  // (queue, name)
  struct DueOrder {
    bool operator()(const Entry* a, const Entry* b) const {
      if (a->next_fire_at != b->next_fire_at) return a->next_fire_at < b->next_fire_at;
      if (a->queue != b->queue) return a->queue < b->queue;
      return a->name < b->name;
    }
  };

  void Unindex(const Entry& entry);
  void Index(Entry& entry);

  std::map<Key, Entry> entries_;
  std::set<const Entry*, DueOrder> due_;  // entries with a next fire
};

}  // namespace sundial
