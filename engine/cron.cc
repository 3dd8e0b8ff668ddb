#include "engine/cron.h"

#include <date/date.h>
#include <date/tz.h>

#include <array>
#include <chrono>
#include <stdexcept>

namespace sundial {
namespace {

using std::chrono::days;
using std::chrono::milliseconds;
using std::chrono::minutes;

// The bounds and names of one field.
struct FieldSpec {
  const char* name;
  int low, high;
  const char* const* names = nullptr;  // three-letter names of low..high, or null
};

constexpr const char* kMonthNames[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                       "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
constexpr const char* kDayNames[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

constexpr FieldSpec kMinute{"minute", 0, 59};
constexpr FieldSpec kHour{"hour", 0, 23};
constexpr FieldSpec kDayOfMonth{"day of month", 1, 31};
constexpr FieldSpec kMonth{"month", 1, 12, kMonthNames};
// 7 is Sunday too (Vixie cron); folded onto 0 after parsing.
constexpr FieldSpec kDayOfWeek{"day of week", 0, 7, kDayNames};

// Days searched for the next fire: every valid expression fires within 8 years (February 29th
// with the day of week unrestricted skips at most 2100's missing leap day).
constexpr int64_t kSearchDays = 9 * 366;

Status Bad(const FieldSpec& f, std::string_view field, std::string_view why) {
  std::string text = "cron: ";
  text += f.name;
  text += " \"";
  text += field;
  text += "\": ";
  text += why;
  return Status(Code::kInvalidArgument, text);
}

// A number or (when the field has names) a three-letter name, case-insensitive.
bool ParseValue(const FieldSpec& f, std::string_view s, int* out) {
  if (s.empty()) return false;
  if (s[0] >= '0' && s[0] <= '9') {
    if (s.size() > 2) return false;
    int v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    *out = v;
    return true;
  }
  if (f.names == nullptr || s.size() != 3) return false;
  const int count = f.names == kDayNames ? 7 : 12;
  for (int i = 0; i < count; ++i) {
    bool same = true;
    for (int k = 0; k < 3; ++k) {
      char c = s[k];
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
      if (c != f.names[i][k]) same = false;
    }
    if (same) {
      *out = f.low + i;
      return true;
    }
  }
  return false;
}

// One field: comma-separated elements, each `*`, `N`, `N-M`, with an optional `/STEP` (after
// `N` alone: from N to the field's end). Sets the values' bits in *bits.
Status ParseField(const FieldSpec& f, std::string_view field, uint64_t* bits) {
  *bits = 0;
  if (field.empty()) return Bad(f, field, "empty");
  size_t pos = 0;
  while (pos <= field.size()) {
    size_t comma = field.find(',', pos);
    std::string_view element =
        field.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (element.empty()) return Bad(f, field, "an empty element in the list");
    std::string_view range = element;
    int step = 1;
    if (size_t slash = element.find('/'); slash != std::string_view::npos) {
      range = element.substr(0, slash);
      std::string_view step_text = element.substr(slash + 1);
      int s = 0;
      if (step_text.empty() || step_text.size() > 2 || !ParseValue(kMinute, step_text, &s) ||
          s == 0) {
        return Bad(f, field, "a step must be a number from 1 to 99");
      }
      step = s;
    }
    int low, high;
    if (range == "*") {
      low = f.low;
      high = f.high == 7 ? 6 : f.high;  // "*" in day of week: 0-6
    } else if (size_t dash = range.find('-'); dash != std::string_view::npos) {
      if (!ParseValue(f, range.substr(0, dash), &low) ||
          !ParseValue(f, range.substr(dash + 1), &high)) {
        return Bad(f, field, "a range must be two values: N-M");
      }
      if (low > high) return Bad(f, field, "a range must not run backwards");
    } else {
      if (!ParseValue(f, range, &low)) return Bad(f, field, "not a number or a name");
      // N/STEP: from N to the field's end (day of week: Saturday).
      high = element.size() != range.size() ? (f.high == 7 ? 6 : f.high) : low;
    }
    if (low < f.low || high > f.high) {
      std::string why = "values must be in ";
      why += std::to_string(f.low);
      why += "..";
      why += std::to_string(f.high);
      return Bad(f, field, why);
    }
    for (int v = low; v <= high; v += step) *bits |= uint64_t{1} << v;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return Status::Ok();
}

std::string_view Macro(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kMacros{{
      {"@yearly", "0 0 1 1 *"},
      {"@annually", "0 0 1 1 *"},
      {"@monthly", "0 0 1 * *"},
      {"@weekly", "0 0 * * 0"},
      {"@daily", "0 0 * * *"},
      {"@midnight", "0 0 * * *"},
      {"@hourly", "0 * * * *"},
  }};
  for (const auto& [macro, fields] : kMacros) {
    if (name == macro) return fields;
  }
  return {};
}

bool Blank(char c) { return c == ' ' || c == '\t'; }

}  // namespace

Result<CronSchedule> CronSchedule::Parse(std::string_view expression, std::string_view zone) {
  CronSchedule s;
  s.expression_ = std::string(expression);
  s.zone_name_ = std::string(zone);
  std::string_view text = expression;
  while (!text.empty() && Blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && Blank(text.back())) text.remove_suffix(1);
  if (!text.empty() && text.front() == '@') {
    std::string_view fields = Macro(text);
    if (fields.empty()) {
      return Status(Code::kInvalidArgument,
                    "cron: \"" + std::string(text) +
                        "\" is not one of @yearly, @annually, @monthly, @weekly, @daily, "
                        "@midnight, @hourly");
    }
    text = fields;
  }
  std::array<std::string_view, 5> fields;
  size_t n = 0;
  for (size_t i = 0; i < text.size();) {
    if (Blank(text[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !Blank(text[end])) ++end;
    if (n == fields.size()) return InvalidArgument("cron: more than 5 fields");
    fields[n++] = text.substr(i, end - i);
    i = end;
  }
  if (n != fields.size()) {
    return InvalidArgument(
        "cron: 5 fields are needed: minute hour day-of-month month day-of-week (or @daily, ...)");
  }
  uint64_t bits = 0;
  if (Status st = ParseField(kMinute, fields[0], &bits); !st.ok()) return st;
  s.minutes_ = std::bitset<60>(bits);
  if (Status st = ParseField(kHour, fields[1], &bits); !st.ok()) return st;
  s.hours_ = std::bitset<24>(bits);
  if (Status st = ParseField(kDayOfMonth, fields[2], &bits); !st.ok()) return st;
  s.days_of_month_ = std::bitset<32>(bits);
  if (Status st = ParseField(kMonth, fields[3], &bits); !st.ok()) return st;
  s.months_ = std::bitset<13>(bits);
  if (Status st = ParseField(kDayOfWeek, fields[4], &bits); !st.ok()) return st;
  if (bits & (uint64_t{1} << 7)) bits = (bits | 1) & 0x7f;  // 7: Sunday
  s.days_of_week_ = std::bitset<7>(bits);
  s.dom_restricted_ = fields[2].front() != '*';
  s.dow_restricted_ = fields[4].front() != '*';

  if (!zone.empty()) {
    try {
      s.zone_ = date::locate_zone(std::string(zone));
    } catch (const std::exception&) {
      return Status(Code::kInvalidArgument, "tz: \"" + std::string(zone) +
                                                "\" is not a time zone of the tz database "
                                                "(an IANA name such as Europe/Paris)");
    }
  }
  // Refuse what can never fire (February 30th, April 31st): one search from 2000-01-01.
  if (!s.Next(946684800000).has_value()) {
    return Status(Code::kInvalidArgument,
                  "cron: \"" + std::string(expression) + "\" never fires (no such day)");
  }
  return s;
}

bool CronSchedule::DayMatches(int64_t local_day) const {
  date::local_days ld{days{local_day}};
  date::year_month_day ymd{ld};
  if (!months_.test(static_cast<unsigned>(ymd.month()))) return false;
  bool dom = days_of_month_.test(static_cast<unsigned>(ymd.day()));
  bool dow = days_of_week_.test(date::weekday{ld}.c_encoding());
  // Vixie cron: both restricted, either matches; otherwise the restricted one decides (both
  // unrestricted: every day).
  if (dom_restricted_ && dow_restricted_) return dom || dow;
  return dom && dow;
}

std::optional<TimeMs> CronSchedule::Next(TimeMs after) const {
  const date::sys_time<milliseconds> t{milliseconds{after}};
  // The first candidate: the minute after `after`'s local minute. Any local time up to
  // `after`'s maps (at its first occurrence) to an instant at or before `after`.
  date::local_time<minutes> start;
  if (zone_ != nullptr) {
    start = date::floor<minutes>(zone_->to_local(t)) + minutes{1};
  } else {
    start = date::local_time<minutes>{date::floor<minutes>(t).time_since_epoch() + minutes{1}};
  }
  const date::local_days first_day = date::floor<days>(start);
  const int64_t first = first_day.time_since_epoch().count();
  const int start_minute = static_cast<int>((start - first_day).count());
  for (int64_t day = first; day <= first + kSearchDays; ++day) {
    if (!DayMatches(day)) continue;
    const date::local_days ld{days{day}};
    for (int h = 0; h < 24; ++h) {
      if (!hours_.test(h)) continue;
      if (day == first && h * 60 + 59 < start_minute) continue;
      for (int m = 0; m < 60; ++m) {
        if (!minutes_.test(m)) continue;
        if (day == first && h * 60 + m < start_minute) continue;
        const date::local_time<minutes> local = ld + minutes{h * 60 + m};
        date::sys_time<minutes> at;
        if (zone_ == nullptr) {
          at = date::sys_time<minutes>{local.time_since_epoch()};
        } else {
          const date::local_info info = zone_->get_info(local);
          if (info.result == date::local_info::nonexistent) {
            // Skipped by a jump forward: at the jump.
            at = date::floor<minutes>(info.second.begin);
          } else {
            // Unique, or repeated by a jump back: its first occurrence.
            at = date::floor<minutes>(date::sys_seconds{local.time_since_epoch()} -
                                      info.first.offset);
          }
        }
        const TimeMs ms = std::chrono::duration_cast<milliseconds>(at.time_since_epoch()).count();
        if (ms > after) return ms;
      }
    }
  }
  return std::nullopt;
}

std::vector<TimeMs> CronSchedule::FiresBetween(TimeMs after, TimeMs until, size_t limit) const {
  std::vector<TimeMs> fires;
  while (fires.size() < limit) {
    std::optional<TimeMs> next = Next(after);
    if (!next.has_value() || *next > until) break;
    fires.push_back(*next);
    after = *next;
  }
  return fires;
}

}  // namespace sundial
