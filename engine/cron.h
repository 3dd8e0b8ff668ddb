// CronSchedule: when a cron-scheduled job fires (docs/semantics.md, "Schedules: cron
// expressions"). Five fields — minute, hour, day of month, month, day of week — in a time zone
// from the system's tz database (Debian's tzdata, through Howard Hinnant's date library), or a
// macro (@hourly, @daily, ...). Pure computation over the zone's rules: no clock, no state.
//
// The rules are Vixie cron's, with two choices made explicit:
//  - Day of month and day of week: when both are restricted (neither starts with '*'), a day
//    matches if either does ("0 0 1 * MON": the 1st and every Monday); else both must.
//  - Daylight saving time. A local time that does not exist (the hour skipped in spring) fires
//    once, at the instant the clocks jump (the end of the gap), as cronie does; a local time
//    that exists twice (the hour repeated in autumn) fires once, at its first occurrence. So
//    "30 2 * * *" fires every day, once; "*/15 * * * *" in a zone with DST skips the repeated
//    hour (use every_ms, or the zone "UTC", for a strict interval).
//
// Thread safety: a CronSchedule is immutable after Parse; Next may be called from any thread.
#pragma once

#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/status.h"
#include "engine/types.h"

namespace date {
class time_zone;
}

namespace sundial {

class CronSchedule {
 public:
  // `expression`: five fields separated by blanks, or @yearly (@annually), @monthly, @weekly,
  // @daily (@midnight), @hourly. `zone`: an IANA name ("Europe/Paris"); empty: UTC.
  // INVALID_ARGUMENT naming the field and what is wrong, including an expression that can never
  // fire ("0 0 30 2 *": February 30th).
  static Result<CronSchedule> Parse(std::string_view expression, std::string_view zone = {});

  // The first fire strictly after `after` (ms since the epoch), or nullopt when there is none
  // before the year 9999 (Parse refuses expressions that never fire, so only at the end of time).
  std::optional<TimeMs> Next(TimeMs after) const;

  // The fires in (after, until], oldest first, at most `limit` of them (misfire catch-up).
  std::vector<TimeMs> FiresBetween(TimeMs after, TimeMs until, size_t limit) const;

  const std::string& expression() const { return expression_; }
  // The zone's name as given ("" for UTC).
  const std::string& zone() const { return zone_name_; }

 private:
  CronSchedule() = default;

  // Whether the local civil day (days since 1970-01-01) matches the day fields and the month.
  bool DayMatches(int64_t local_day) const;

  std::string expression_;
  std::string zone_name_;
  const date::time_zone* zone_ = nullptr;  // null: UTC
  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_of_month_;  // 1..31
  std::bitset<13> months_;         // 1..12
  std::bitset<7> days_of_week_;    // 0 = Sunday
  bool dom_restricted_ = false;    // the field does not start with '*'
  bool dow_restricted_ = false;
};

}  // namespace sundial
