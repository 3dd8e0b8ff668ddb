// CronSchedule (engine/cron.h): parsing and its errors, the fields' syntax, Vixie cron's
// day-of-month / day-of-week rule, leap days, macros, time zones across daylight saving time
// (a skipped hour fires once at the jump, a repeated hour once at its first occurrence, a
// 30-minute shift), and, for UTC, every fire checked against a brute-force matcher built on
// timegm/gmtime_r over random expressions (a fixed seed).
#include "engine/cron.h"

#include <gtest/gtest.h>

#include <ctime>
#include <random>
#include <string>
#include <vector>

namespace sundial {
namespace {

// ms since the epoch of a UTC civil time.
TimeMs Utc(int y, int mo, int d, int h = 0, int mi = 0, int s = 0) {
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<TimeMs>(timegm(&tm)) * 1000;
}

CronSchedule Cron(std::string_view expr, std::string_view zone = {}) {
  Result<CronSchedule> r = CronSchedule::Parse(expr, zone);
  EXPECT_TRUE(r.ok()) << expr << ": " << r.status().ToString();
  return std::move(r).value();
}

TimeMs NextOf(const CronSchedule& c, TimeMs after) {
  std::optional<TimeMs> next = c.Next(after);
  EXPECT_TRUE(next.has_value());
  return next.value_or(-1);
}

std::string RefusalOf(std::string_view expr, std::string_view zone = {}) {
  Result<CronSchedule> r = CronSchedule::Parse(expr, zone);
  EXPECT_FALSE(r.ok()) << expr;
  if (r.ok()) return {};
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  return std::string(r.status().detail());
}

TEST(CronTest, RefusesWhatIsNotACronExpressionNamingTheField) {
  EXPECT_NE(RefusalOf("* * * *").find("5 fields are needed"), std::string::npos);
  EXPECT_NE(RefusalOf("* * * * * *").find("more than 5 fields"), std::string::npos);
  EXPECT_NE(RefusalOf("").find("5 fields"), std::string::npos);
  EXPECT_NE(RefusalOf("60 * * * *").find("minute \"60\": values must be in 0..59"),
            std::string::npos);
  EXPECT_NE(RefusalOf("* 24 * * *").find("hour \"24\""), std::string::npos);
  EXPECT_NE(RefusalOf("* * 0 * *").find("day of month \"0\": values must be in 1..31"),
            std::string::npos);
  EXPECT_NE(RefusalOf("* * * 13 *").find("month \"13\""), std::string::npos);
  EXPECT_NE(RefusalOf("* * * * 8").find("day of week \"8\": values must be in 0..7"),
            std::string::npos);
  EXPECT_NE(RefusalOf("5-1 * * * *").find("must not run backwards"), std::string::npos);
  EXPECT_NE(RefusalOf("*/0 * * * *").find("a step must be a number from 1 to 99"),
            std::string::npos);
  EXPECT_NE(RefusalOf("*/x * * * *").find("step"), std::string::npos);
  EXPECT_NE(RefusalOf("1,,2 * * * *").find("an empty element"), std::string::npos);
  EXPECT_NE(RefusalOf("1, * * * *").find("an empty element"), std::string::npos);
  EXPECT_NE(RefusalOf("x * * * *").find("not a number or a name"), std::string::npos);
  EXPECT_NE(RefusalOf("? * * * *").find("minute"), std::string::npos);
  EXPECT_NE(RefusalOf("* * * FOO *").find("month \"FOO\""), std::string::npos);
  EXPECT_NE(RefusalOf("* * * * MON-").find("a range must be two values"), std::string::npos);
  EXPECT_NE(RefusalOf("* * * * JAN").find("day of week"), std::string::npos);  // a month name
  EXPECT_NE(RefusalOf("100 * * * *").find("not a number"), std::string::npos);
  EXPECT_NE(RefusalOf("@reboot").find("is not one of @yearly"), std::string::npos);
  EXPECT_NE(RefusalOf("0 0 * * *", "Mars/Olympus").find("tz: \"Mars/Olympus\" is not a time zone"),
            std::string::npos);
  // Expressions that can never fire.
  EXPECT_NE(RefusalOf("0 0 30 2 *").find("never fires"), std::string::npos);
  EXPECT_NE(RefusalOf("0 0 31 4,6,9,11 *").find("never fires"), std::string::npos);
}

TEST(CronTest, NextIsStrictlyAfterAndOnTheMinute) {
  CronSchedule c = Cron("*/15 * * * *");
  EXPECT_EQ(NextOf(c, Utc(2026, 5, 4, 10, 7, 31)), Utc(2026, 5, 4, 10, 15));
  EXPECT_EQ(NextOf(c, Utc(2026, 5, 4, 10, 15) - 1), Utc(2026, 5, 4, 10, 15));
  EXPECT_EQ(NextOf(c, Utc(2026, 5, 4, 10, 15)), Utc(2026, 5, 4, 10, 30));
  EXPECT_EQ(NextOf(c, Utc(2026, 5, 4, 23, 45)), Utc(2026, 5, 5, 0, 0));  // over midnight
  EXPECT_EQ(NextOf(Cron("* * * * *"), Utc(2026, 12, 31, 23, 59, 59)), Utc(2027, 1, 1));
  // Blanks around and between fields, tabs too.
  EXPECT_EQ(NextOf(Cron("  0\t12  * *   *  "), Utc(2026, 5, 4)), Utc(2026, 5, 4, 12));
  EXPECT_EQ(Cron("0 12 * * *").expression(), "0 12 * * *");
  EXPECT_EQ(Cron("0 12 * * *", "Europe/Paris").zone(), "Europe/Paris");
}

TEST(CronTest, ListsRangesStepsAndNames) {
  CronSchedule c = Cron("5,10-12,50/5 3 * * *");
  std::vector<TimeMs> fires = c.FiresBetween(Utc(2026, 1, 1), Utc(2026, 1, 2), 100);
  std::vector<TimeMs> expected;
  for (int m : {5, 10, 11, 12, 50, 55}) expected.push_back(Utc(2026, 1, 1, 3, m));
  EXPECT_EQ(fires, expected);
  // 1-10/4: 1, 5, 9.
  EXPECT_EQ(
      Cron("1-10/4 0 1 1 *").FiresBetween(Utc(2026, 1, 1), Utc(2026, 1, 2), 10),
      (std::vector<TimeMs>{Utc(2026, 1, 1, 0, 1), Utc(2026, 1, 1, 0, 5), Utc(2026, 1, 1, 0, 9)}));
  // Names, in any case: weekdays of January and July at 09:00. 2026-01-01 is a Thursday.
  CronSchedule named = Cron("0 9 * jan,JUL Mon-fri");
  EXPECT_EQ(NextOf(named, Utc(2026, 1, 1)), Utc(2026, 1, 1, 9));
  EXPECT_EQ(NextOf(named, Utc(2026, 1, 2, 9)), Utc(2026, 1, 5, 9));   // Friday -> Monday
  EXPECT_EQ(NextOf(named, Utc(2026, 1, 30, 9)), Utc(2026, 7, 1, 9));  // February..June skipped
  // 7 is Sunday, as 0 is; 5-7: Friday to Sunday. 2026-05-04 is a Monday.
  CronSchedule weekend = Cron("0 0 * * 5-7");
  EXPECT_EQ(weekend.FiresBetween(Utc(2026, 5, 4), Utc(2026, 5, 11), 10),
            (std::vector<TimeMs>{Utc(2026, 5, 8), Utc(2026, 5, 9), Utc(2026, 5, 10)}));
  EXPECT_EQ(NextOf(Cron("0 0 * * 7"), Utc(2026, 5, 4)), Utc(2026, 5, 10));
  // N/STEP runs to the field's end: minutes 50, 55; days of week from Tuesday every other day.
  EXPECT_EQ(Cron("0 0 * * 2/2").FiresBetween(Utc(2026, 5, 4), Utc(2026, 5, 11), 10),
            (std::vector<TimeMs>{Utc(2026, 5, 5), Utc(2026, 5, 7), Utc(2026, 5, 9)}));
}

TEST(CronTest, DayOfMonthAndDayOfWeekFollowVixieCron) {
  // Both restricted: either matches. May 2026: Mondays are 4, 11, 18, 25.
  EXPECT_EQ(Cron("0 0 1,15 * MON").FiresBetween(Utc(2026, 5, 1) - 1, Utc(2026, 5, 31), 20),
            (std::vector<TimeMs>{Utc(2026, 5, 1), Utc(2026, 5, 4), Utc(2026, 5, 11),
                                 Utc(2026, 5, 15), Utc(2026, 5, 18), Utc(2026, 5, 25)}));
  // Day of month starting with '*' (even */2) counts as unrestricted: both must match.
  EXPECT_EQ(Cron("0 0 */2 * MON").FiresBetween(Utc(2026, 5, 1), Utc(2026, 5, 31), 20),
            (std::vector<TimeMs>{Utc(2026, 5, 11), Utc(2026, 5, 25)}));
  // Only day of week restricted.
  EXPECT_EQ(Cron("0 0 * * MON").FiresBetween(Utc(2026, 5, 1), Utc(2026, 5, 31), 20).size(), 4u);
  // Only day of month.
  EXPECT_EQ(Cron("0 0 13 * *").FiresBetween(Utc(2026, 1, 1), Utc(2026, 12, 31), 20).size(), 12u);
}

TEST(CronTest, LeapDaysAndMonthEnds) {
  CronSchedule feb29 = Cron("0 0 29 2 *");
  EXPECT_EQ(NextOf(feb29, Utc(2025, 3, 1)), Utc(2028, 2, 29));
  EXPECT_EQ(NextOf(feb29, Utc(2096, 3, 1)), Utc(2104, 2, 29));  // 2100 is not a leap year
  CronSchedule day31 = Cron("0 0 31 * *");
  EXPECT_EQ(
      day31.FiresBetween(Utc(2026, 1, 1), Utc(2026, 12, 31, 1), 20),
      (std::vector<TimeMs>{Utc(2026, 1, 31), Utc(2026, 3, 31), Utc(2026, 5, 31), Utc(2026, 7, 31),
                           Utc(2026, 8, 31), Utc(2026, 10, 31), Utc(2026, 12, 31)}));
}

TEST(CronTest, Macros) {
  const TimeMs t = Utc(2026, 5, 6, 10, 20);  // a Wednesday
  EXPECT_EQ(NextOf(Cron("@hourly"), t), Utc(2026, 5, 6, 11));
  EXPECT_EQ(NextOf(Cron("@daily"), t), Utc(2026, 5, 7));
  EXPECT_EQ(NextOf(Cron("@midnight"), t), Utc(2026, 5, 7));
  EXPECT_EQ(NextOf(Cron("@weekly"), t), Utc(2026, 5, 10));  // Sunday
  EXPECT_EQ(NextOf(Cron("@monthly"), t), Utc(2026, 6, 1));
  EXPECT_EQ(NextOf(Cron("@yearly"), t), Utc(2027, 1, 1));
  EXPECT_EQ(NextOf(Cron("@annually"), t), Utc(2027, 1, 1));
}

TEST(CronTest, ATimeZoneMovesTheFireWithItsOffset) {
  CronSchedule paris = Cron("0 9 * * *", "Europe/Paris");
  EXPECT_EQ(NextOf(paris, Utc(2026, 1, 15)), Utc(2026, 1, 15, 8));  // CET, UTC+1
  EXPECT_EQ(NextOf(paris, Utc(2026, 7, 15)), Utc(2026, 7, 15, 7));  // CEST, UTC+2
  // The local date decides the day: 00:30 in Tokyo is the previous day in UTC.
  CronSchedule tokyo = Cron("30 0 * * MON", "Asia/Tokyo");
  EXPECT_EQ(NextOf(tokyo, Utc(2026, 5, 6)), Utc(2026, 5, 10, 15, 30));  // Mon 11th 00:30 JST
  EXPECT_EQ(NextOf(Cron("0 9 * * *", "UTC"), Utc(2026, 7, 15)), Utc(2026, 7, 15, 9));
}

TEST(CronTest, AnHourSkippedInSpringFiresOnceAtTheJump) {
  // New York, 2026-03-08: 01:59:59 EST is followed by 03:00 EDT (07:00 UTC).
  CronSchedule c = Cron("30 2 * * *", "America/New_York");
  EXPECT_EQ(NextOf(c, Utc(2026, 3, 7)), Utc(2026, 3, 7, 7, 30));     // 02:30 EST
  EXPECT_EQ(NextOf(c, Utc(2026, 3, 7, 7, 30)), Utc(2026, 3, 8, 7));  // no 02:30: at the jump
  EXPECT_EQ(NextOf(c, Utc(2026, 3, 8, 7)), Utc(2026, 3, 9, 6, 30));  // 02:30 EDT
  // Every quarter hour of the skipped hour: all at the jump, once; then on after it.
  CronSchedule quarter = Cron("*/15 2,3 * * *", "America/New_York");
  EXPECT_EQ(quarter.FiresBetween(Utc(2026, 3, 8, 6), Utc(2026, 3, 8, 8), 20),
            (std::vector<TimeMs>{Utc(2026, 3, 8, 7), Utc(2026, 3, 8, 7, 15), Utc(2026, 3, 8, 7, 30),
                                 Utc(2026, 3, 8, 7, 45)}));
  // Paris jumps from 02:00 to 03:00 CEST (01:00 UTC).
  EXPECT_EQ(NextOf(Cron("0 2 * * *", "Europe/Paris"), Utc(2026, 3, 28, 12)), Utc(2026, 3, 29, 1));
}

TEST(CronTest, AnHourRepeatedInAutumnFiresOnceAtItsFirstOccurrence) {
  // New York, 2026-11-01: 01:59:59 EDT (05:59:59 UTC) is followed by 01:00 EST (06:00 UTC).
  CronSchedule c = Cron("30 1 * * *", "America/New_York");
  EXPECT_EQ(NextOf(c, Utc(2026, 11, 1)), Utc(2026, 11, 1, 5, 30));         // 01:30 EDT
  EXPECT_EQ(NextOf(c, Utc(2026, 11, 1, 5, 30)), Utc(2026, 11, 2, 6, 30));  // not 01:30 EST
  // Asked from inside the repeated hour: its local times have fired already.
  EXPECT_EQ(NextOf(c, Utc(2026, 11, 1, 6, 10)), Utc(2026, 11, 2, 6, 30));
  CronSchedule half = Cron("*/30 * * * *", "America/New_York");
  EXPECT_EQ(half.FiresBetween(Utc(2026, 11, 1, 4, 45), Utc(2026, 11, 1, 8), 20),
            (std::vector<TimeMs>{Utc(2026, 11, 1, 5), Utc(2026, 11, 1, 5, 30), Utc(2026, 11, 1, 7),
                                 Utc(2026, 11, 1, 7, 30), Utc(2026, 11, 1, 8)}));
}

TEST(CronTest, AThirtyMinuteShiftIsHandledLikeAnHour) {
  // Lord Howe Island, 2026-10-04: 01:59:59 (+10:30) is followed by 02:30 (+11) at 15:30 UTC.
  CronSchedule c = Cron("15 2 * * *", "Australia/Lord_Howe");
  EXPECT_EQ(NextOf(c, Utc(2026, 10, 3, 12)), Utc(2026, 10, 3, 15, 30));      // skipped: at the jump
  EXPECT_EQ(NextOf(c, Utc(2026, 10, 3, 15, 30)), Utc(2026, 10, 4, 15, 15));  // 02:15 +11
  // 2026-04-05: 01:59:59 (+11) is followed by 01:30 (+10:30) at 15:00 UTC; 01:45 exists twice.
  CronSchedule back = Cron("45 1 * * *", "Australia/Lord_Howe");
  EXPECT_EQ(NextOf(back, Utc(2026, 4, 4, 12)), Utc(2026, 4, 4, 14, 45));
  EXPECT_EQ(NextOf(back, Utc(2026, 4, 4, 14, 45)), Utc(2026, 4, 5, 15, 15));
}

TEST(CronTest, FiresBetweenStopsAtItsLimitAndItsEnd) {
  CronSchedule c = Cron("0 * * * *");
  EXPECT_EQ(c.FiresBetween(Utc(2026, 1, 1), Utc(2026, 1, 2), 3),
            (std::vector<TimeMs>{Utc(2026, 1, 1, 1), Utc(2026, 1, 1, 2), Utc(2026, 1, 1, 3)}));
  EXPECT_EQ(c.FiresBetween(Utc(2026, 1, 1), Utc(2026, 1, 1, 2), 100).size(), 2u);  // (after, until]
  EXPECT_TRUE(c.FiresBetween(Utc(2026, 1, 1), Utc(2026, 1, 1, 0, 59), 100).empty());
  EXPECT_TRUE(c.FiresBetween(Utc(2026, 1, 1), Utc(2026, 1, 2), 0).empty());
}

// ---- Against a brute-force matcher ---------------------------------------------------------

// One field's values, the independent way: every value of low..high, tested against a list of
// (low, high, step) elements.
struct Element {
  int low, high, step;
};
struct Field {
  std::vector<Element> elements;
  bool star = false;  // starts with '*'
  bool Has(int v) const {
    for (const Element& e : elements) {
      if (v >= e.low && v <= e.high && (v - e.low) % e.step == 0) return true;
    }
    return false;
  }
};

std::string RandomField(std::mt19937_64& rng, int low, int high, Field* out) {
  std::uniform_int_distribution<int> form(0, 5);
  std::uniform_int_distribution<int> value(low, high);
  int n = std::uniform_int_distribution<int>(1, 3)(rng);
  std::string text;
  out->elements.clear();
  out->star = false;
  for (int i = 0; i < n; ++i) {
    if (i) text += ",";
    int f = form(rng);
    if (f == 0 && i == 0) {
      text += "*";
      out->star = true;
      out->elements.push_back({low, high, 1});
      return text;  // alone
    }
    if (f == 1 && i == 0) {
      int step = std::uniform_int_distribution<int>(2, 9)(rng);
      text += "*/" + std::to_string(step);
      out->star = true;
      out->elements.push_back({low, high, step});
      return text;
    }
    int a = value(rng), b = value(rng);
    if (a > b) std::swap(a, b);
    if (f <= 3) {
      text += std::to_string(a);
      out->elements.push_back({a, a, 1});
    } else if (f == 4) {
      text += std::to_string(a) + "-" + std::to_string(b);
      out->elements.push_back({a, b, 1});
    } else {
      int step = std::uniform_int_distribution<int>(1, 7)(rng);
      text += std::to_string(a) + "-" + std::to_string(b) + "/" + std::to_string(step);
      out->elements.push_back({a, b, step});
    }
  }
  return text;
}

TEST(CronTest, EveryFireInUtcMatchesABruteForceScan) {
  std::mt19937_64 rng(20261128);
  int checked = 0;
  for (int round = 0; round < 300; ++round) {
    Field minute, hour, dom, month, dow;
    std::string expr = RandomField(rng, 0, 59, &minute) + " " + RandomField(rng, 0, 23, &hour) +
                       " " + RandomField(rng, 1, 31, &dom) + " " + RandomField(rng, 1, 12, &month) +
                       " " + RandomField(rng, 0, 6, &dow);
    Result<CronSchedule> parsed = CronSchedule::Parse(expr);
    // The matcher: a UTC minute matches when its fields do (Vixie's day rule).
    auto matches = [&](TimeMs ms) {
      std::time_t s = static_cast<std::time_t>(ms / 1000);
      std::tm tm{};
      gmtime_r(&s, &tm);
      bool dom_ok = dom.Has(tm.tm_mday), dow_ok = dow.Has(tm.tm_wday);
      bool day = (!dom.star && !dow.star) ? (dom_ok || dow_ok) : (dom_ok && dow_ok);
      return day && month.Has(tm.tm_mon + 1) && hour.Has(tm.tm_hour) && minute.Has(tm.tm_min);
    };
    if (!parsed.ok()) {
      // Only an expression that never fires is refused: no match in 8 years of days.
      ASSERT_NE(std::string(parsed.status().detail()).find("never fires"), std::string::npos)
          << expr << ": " << parsed.status().ToString();
      continue;
    }
    const CronSchedule& c = parsed.value();
    TimeMs after =
        Utc(2026, 1, 1) + std::uniform_int_distribution<TimeMs>(0, 365LL * 86'400'000)(rng);
    // The next 5 fires, each checked minute by minute against the matcher: it matches, and no
    // minute between the previous and it does. Days that cannot match are skipped whole.
    for (int k = 0; k < 5; ++k) {
      std::optional<TimeMs> next = c.Next(after);
      ASSERT_TRUE(next.has_value()) << expr;
      ASSERT_GT(*next, after) << expr;
      ASSERT_EQ(*next % 60'000, 0) << expr;
      ASSERT_TRUE(matches(*next)) << expr << " fired at " << *next;
      for (TimeMs t = (after / 60'000 + 1) * 60'000; t < *next; t += 60'000) {
        if (t % 86'400'000 == 0 && !matches(t)) {
          // A whole day can be skipped when no minute of it matches; check it minute by minute
          // only if its date passes the day fields (matches() with hour and minute ignored).
          std::time_t s = static_cast<std::time_t>(t / 1000);
          std::tm tm{};
          gmtime_r(&s, &tm);
          bool dom_ok = dom.Has(tm.tm_mday), dow_ok = dow.Has(tm.tm_wday);
          bool day = (!dom.star && !dow.star) ? (dom_ok || dow_ok) : (dom_ok && dow_ok);
          if (!day || !month.Has(tm.tm_mon + 1)) {
            t += 86'400'000 - 60'000;
            continue;
          }
        }
        ASSERT_FALSE(matches(t)) << expr << ": missed a fire at " << t << " before " << *next;
      }
      after = *next;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

}  // namespace
}  // namespace sundial
