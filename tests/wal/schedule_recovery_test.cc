// Schedules across restarts (docs/semantics.md, "Schedules"; docs/wal-format.md, "Schedule
// effects"): schedules and their fires come back from the log and from a snapshot; no fire is
// made twice after a restart; the fires missed while the server was down follow each
// schedule's misfire policy when the restarted engine first advances.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "tests/wal/recovery_test_util.h"
#include "tests/wal/wal_test_util.h"
#include "wal/snapshot.h"

namespace sundial::wal::test {
namespace {

const std::string kDir = "data";

ScheduleSpec EveryMinute(MisfirePolicy misfire) {
  ScheduleSpec spec;
  spec.every_ms = 60'000;
  spec.misfire = misfire;
  spec.payload = "tick";
  return spec;
}

// Every id in `queue` in any state (pending here: nothing dequeues).
std::set<std::string> Ids(Engine& engine, std::string_view queue) {
  BrowseRequest request;
  request.limit = 1000;
  Result<BrowsePage> page = engine.Browse(queue, request);
  std::set<std::string> ids;
  if (!page.ok()) return ids;
  for (const MessageSummary& m : page->messages) ids.insert(m.id);
  return ids;
}

class ScheduleRecoveryTest : public ::testing::Test {
 protected:
  std::unique_ptr<FileSystem> fs_ = NewMemoryFileSystem();
};

TEST_F(ScheduleRecoveryTest, SchedulesAndTheirFiresComeBackFromTheLogAndNoFireIsMadeTwice) {
  uint64_t digest;
  std::set<std::string> fired;
  TimeMs next;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    ASSERT_TRUE(e.engine->UpsertSchedule("jobs", "s", EveryMinute(MisfirePolicy::kAll)).ok());
    ScheduleSpec cron;
    cron.cron = "*/2 * * * *";
    cron.tz = "Europe/Paris";
    ASSERT_TRUE(e.engine->UpsertSchedule("jobs", "c", cron).ok());
    ASSERT_TRUE(e.engine->UpsertSchedule("jobs", "gone", EveryMinute(MisfirePolicy::kOne)).ok());
    for (int i = 0; i < 5; ++i) {
      e.clock.Advance(60'000);
      e.engine->Advance(e.clock.NowMs());
    }
    ASSERT_TRUE(e.engine->PauseSchedule("jobs", "c").ok());
    ASSERT_TRUE(e.engine->DeleteSchedule("jobs", "gone").ok());
    ASSERT_TRUE(e.Sync().ok());
    digest = e.engine->Digest();
    fired = Ids(*e.engine, "jobs");
    next = e.engine->NextDueTime();
  }
  // s: 5; c: 3 (22:14, 22:16, 22:18 from 22:13:20); gone: 5.
  ASSERT_EQ(fired.size(), 5u + 3u + 5u);
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir), digest);
  // Restarted at the same time: the same schedules, nothing due again.
  LoggedEngine e(kStartTime + 5 * 60'000);
  ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
  EXPECT_EQ(e.engine->Digest(), digest);
  EXPECT_EQ(e.engine->NextDueTime(), next);
  EXPECT_EQ(e.engine->Advance(e.clock.NowMs()), 0u);
  EXPECT_EQ(Ids(*e.engine, "jobs"), fired);
  EXPECT_TRUE(e.engine->GetSchedule("jobs", "c")->progress.paused);
  EXPECT_EQ(e.engine->GetSchedule("jobs", "gone").status().code(), Code::kNotFound);
  EXPECT_EQ(e.engine->ListSchedules({}).size(), 2u);
}

TEST_F(ScheduleRecoveryTest, FiresMissedWhileDownFollowEachMisfirePolicy) {
  const TimeMs t0 = kStartTime;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    ASSERT_TRUE(e.engine->UpsertSchedule("skip", "s", EveryMinute(MisfirePolicy::kSkip)).ok());
    ASSERT_TRUE(e.engine->UpsertSchedule("one", "s", EveryMinute(MisfirePolicy::kOne)).ok());
    ASSERT_TRUE(e.engine->UpsertSchedule("all", "s", EveryMinute(MisfirePolicy::kAll)).ok());
    ASSERT_TRUE(e.Sync().ok());
  }
  // Down 10.5 minutes: fires at +1..+10 min are due, only +10 within the grace.
  uint64_t digest;
  {
    LoggedEngine e(t0 + 630'000);
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    EXPECT_EQ(e.engine->NextDueTime(), t0 + 60'000);
    e.engine->Advance(e.clock.NowMs());
    EXPECT_EQ(Ids(*e.engine, "skip"), (std::set<std::string>{"s@1700000600000"}));
    EXPECT_EQ(Ids(*e.engine, "one"), (std::set<std::string>{"s@1700000540000", "s@1700000600000"}));
    EXPECT_EQ(Ids(*e.engine, "all").size(), 10u);
    EXPECT_EQ(e.engine->GetSchedule("skip", "s")->progress.missed, 9u);
    ASSERT_TRUE(e.Sync().ok());
    digest = e.engine->Digest();
  }
  // Again a restart later than that: the fires made are not made again.
  LoggedEngine e(t0 + 630'000);
  ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
  EXPECT_EQ(e.engine->Digest(), digest);
  EXPECT_EQ(e.engine->Advance(e.clock.NowMs()), 0u);
  EXPECT_EQ(e.engine->NextDueTime(), t0 + 660'000);
}

TEST_F(ScheduleRecoveryTest, ASnapshotCarriesTheSchedulesWithTheirProgress) {
  ManualClock clock(kStartTime);
  Engine engine(TestEngineOptions(), &clock, nullptr);
  ScheduleSpec spec = EveryMinute(MisfirePolicy::kOne);
  spec.overlap = OverlapPolicy::kSkipIfActive;
  spec.packed_metadata = PackMetadata({{"k", "v"}});
  ASSERT_TRUE(engine.UpsertSchedule("jobs", "s", spec).ok());
  ScheduleSpec cron;
  cron.cron = "@hourly";
  ASSERT_TRUE(engine.UpsertSchedule("other", "h", cron).ok());
  clock.Advance(180'000);
  engine.Advance(clock.NowMs());
  ASSERT_TRUE(engine.PauseSchedule("other", "h").ok());
  auto info = WriteSnapshot(fs_.get(), kDir, engine, 10);
  ASSERT_TRUE(info.ok());
  Engine loaded(TestEngineOptions(), &clock, nullptr);
  RecordingReporter reporter;
  ASSERT_TRUE(LoadSnapshot(fs_.get(), kDir, info->file, &loaded, &reporter).ok());
  EXPECT_EQ(loaded.Digest(), engine.Digest());
  ASSERT_EQ(loaded.ListSchedules({}).size(), 2u);
  EXPECT_EQ(loaded.GetSchedule("jobs", "s")->progress, engine.GetSchedule("jobs", "s")->progress);
  EXPECT_EQ(loaded.GetSchedule("jobs", "s")->spec, spec);
  EXPECT_EQ(loaded.NextDueTime(), engine.NextDueTime());
}

}  // namespace
}  // namespace sundial::wal::test
