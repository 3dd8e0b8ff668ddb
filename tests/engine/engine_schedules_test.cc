// Schedules (docs/semantics.md, "Schedules"): fires named name@T, misfire and overlap
// policies, pause, resume, trigger, delete, upsert, replay and export. Time moves only through
// the fixture's ManualClock.
#include <random>
#include <string>
#include <vector>

#include "engine/metadata.h"
#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

std::string FireId(std::string_view name, TimeMs t) {
  return std::string(name) + "@" + std::to_string(t);
}

ScheduleSpec Every(int64_t ms) {
  ScheduleSpec spec;
  spec.every_ms = ms;
  spec.payload = "tick";
  return spec;
}

ScheduleSpec Cron(std::string expression, std::string tz = {}) {
  ScheduleSpec spec;
  spec.cron = std::move(expression);
  spec.tz = std::move(tz);
  spec.payload = "tock";
  return spec;
}

class ScheduleTest : public EngineTest {
 protected:
  ScheduleInfo Upsert(std::string_view queue, std::string_view name, const ScheduleSpec& spec) {
    Result<ScheduleUpsertResult> r = engine().UpsertSchedule(queue, name, spec);
    EXPECT_TRUE(r.ok()) << CodeName(r.status().code()) << " " << r.status().detail();
    return r.ok() ? r->schedule : ScheduleInfo{};
  }
  ScheduleInfo Info(std::string_view queue, std::string_view name) {
    Result<ScheduleInfo> r = engine().GetSchedule(queue, name);
    EXPECT_TRUE(r.ok()) << r.status().detail();
    return r.ok() ? *r : ScheduleInfo{};
  }
  // Every message id of `queue` in pending state, in dequeue (priority) order.
  std::vector<std::string> PendingIds(std::string_view queue) {
    BrowseRequest request;
    request.state = MessageState::kPending;
    request.limit = 1000;
    Result<BrowsePage> page = engine().Browse(queue, request);
    if (page.status().code() == Code::kNotFound) return {};  // no fire made the queue yet
    EXPECT_TRUE(page.ok());
    return page.ok() ? IdsOf(page->messages) : std::vector<std::string>{};
  }
  // An engine fed every non-derived effect recorded so far, in order.
  std::unique_ptr<Engine> Replayed(const std::vector<RecordedEffect>& effects) {
    auto copy = std::make_unique<Engine>(DefaultOptions(), &clock(), nullptr);
    for (const RecordedEffect& r : effects) {
      if (r.derived) continue;
      Status s = copy->Apply(r.View());
      EXPECT_TRUE(s.ok()) << EffectTypeName(r.type) << ": " << s.detail();
    }
    return copy;
  }
  ManualClock& clock() { return clock_; }
};

TEST_F(ScheduleTest, EveryMsFiresMessagesNamedByTheirFireTime) {
  ScheduleSpec spec = Every(1000);
  spec.priority_offset_ms = 500;
  spec.packed_metadata = PackMetadata({{"kind", "report"}});
  const TimeMs t0 = Now();
  const ScheduleInfo created = Upsert("jobs", "report", spec);
  EXPECT_EQ(created.next_fire_at, t0 + 1000);
  EXPECT_EQ(engine().NextDueTime(), t0 + 1000);

  AdvanceTime(999);
  EXPECT_TRUE(PendingIds("jobs").empty());
  AdvanceTime(1);
  const MessageRecord m = GetMessage("jobs", FireId("report", t0 + 1000));
  EXPECT_EQ(m.payload, "tick");
  EXPECT_EQ(m.priority, t0 + 1000 + 500);  // the fire's deadline
  EXPECT_TRUE(HasPair(m.metadata, "kind", "report"));
  AdvanceTime(2000);
  EXPECT_EQ(PendingIds("jobs"),
            (std::vector<std::string>{FireId("report", t0 + 1000), FireId("report", t0 + 2000),
                                      FireId("report", t0 + 3000)}));
  const ScheduleInfo info = Info("jobs", "report");
  EXPECT_EQ(info.progress.fires, 3u);
  EXPECT_EQ(info.progress.last_fire_at, t0 + 3000);
  EXPECT_EQ(info.next_fire_at, t0 + 4000);
  EXPECT_EQ(engine().NextDueTime(), t0 + 4000);
}

TEST_F(ScheduleTest, CronFiresAtTheExpressionsTimesInItsZone) {
  // kStartTime is 2023-11-14T22:13:20Z: in Paris (UTC+1) the next "0 * * * *" is 23:00Z.
  Upsert("jobs", "hourly", Cron("0 * * * *", "Europe/Paris"));
  const TimeMs first = 1'700'002'800'000;  // 2023-11-14T23:00:00Z
  EXPECT_EQ(Info("jobs", "hourly").next_fire_at, first);
  AdvanceTime(first - Now());
  EXPECT_EQ(PendingIds("jobs"), (std::vector<std::string>{FireId("hourly", first)}));
  EXPECT_EQ(Info("jobs", "hourly").next_fire_at, first + 3'600'000);
}

TEST_F(ScheduleTest, MisfireSkipDropsMissedFiresAndMakesTheOnTimeOne) {
  ScheduleSpec spec = Every(60'000);
  const TimeMs t0 = Now();
  Upsert("jobs", "s", spec);
  AdvanceTime(630'000);  // fires due at t0+60s .. t0+600s; only the last within the grace
  EXPECT_EQ(PendingIds("jobs"), (std::vector<std::string>{FireId("s", t0 + 600'000)}));
  const ScheduleInfo info = Info("jobs", "s");
  EXPECT_EQ(info.progress.missed, 9u);
  EXPECT_EQ(info.progress.fires, 1u);
  EXPECT_EQ(info.next_fire_at, t0 + 660'000);
}

TEST_F(ScheduleTest, MisfireOneMakesTheLatestMissedFire) {
  ScheduleSpec spec = Every(60'000);
  spec.misfire = MisfirePolicy::kOne;
  const TimeMs t0 = Now();
  Upsert("jobs", "s", spec);
  AdvanceTime(630'000);
  EXPECT_EQ(PendingIds("jobs"),
            (std::vector<std::string>{FireId("s", t0 + 540'000), FireId("s", t0 + 600'000)}));
  EXPECT_EQ(Info("jobs", "s").progress.missed, 8u);
}

TEST_F(ScheduleTest, MisfireOneWithNoOnTimeFireMakesExactlyOne) {
  ScheduleSpec spec = Cron("@daily");
  spec.misfire = MisfirePolicy::kOne;
  Upsert("jobs", "daily", spec);
  AdvanceClockOnly(int64_t{10} * 86'400'000 + 3'600'000);  // down 10 days, back at 01:00Z
  engine().Advance(Now());
  const std::vector<std::string> ids = PendingIds("jobs");
  ASSERT_EQ(ids.size(), 1u);
  // The latest missed midnight.
  const TimeMs midnight = Now() - 3'600'000 - (Now() - 3'600'000) % 86'400'000;
  EXPECT_EQ(ids[0], FireId("daily", midnight));
  EXPECT_EQ(Info("jobs", "daily").progress.missed, 9u);
}

TEST_F(ScheduleTest, MisfireAllCatchesUpEveryMissedFireInOrder) {
  ScheduleSpec spec = Every(60'000);
  spec.misfire = MisfirePolicy::kAll;
  const TimeMs t0 = Now();
  Upsert("jobs", "s", spec);
  AdvanceTime(630'000);
  std::vector<std::string> expected;
  for (int i = 1; i <= 10; ++i) expected.push_back(FireId("s", t0 + i * 60'000));
  EXPECT_EQ(PendingIds("jobs"), expected);  // priority T: oldest first
  EXPECT_EQ(Info("jobs", "s").progress.missed, 0u);
}

TEST_F(ScheduleTest, MisfireAllIsBoundedToTheLatestHundred) {
  ScheduleSpec spec = Every(1000);
  spec.misfire = MisfirePolicy::kAll;
  const TimeMs t0 = Now();
  Upsert("jobs", "s", spec);
  AdvanceTime(1'000'000);  // 1000 fires due
  const std::vector<std::string> ids = PendingIds("jobs");
  ASSERT_EQ(ids.size(), kMaxCatchUpFires);
  EXPECT_EQ(ids.front(), FireId("s", t0 + 901'000));
  EXPECT_EQ(ids.back(), FireId("s", t0 + 1'000'000));
  EXPECT_EQ(Info("jobs", "s").progress.missed, 900u);
}

TEST_F(ScheduleTest, SkipIfActiveSkipsFiresWhileThePreviousMessageIsNotTerminal) {
  ScheduleSpec spec = Every(1000);
  spec.overlap = OverlapPolicy::kSkipIfActive;
  const TimeMs t0 = Now();
  Upsert("jobs", "s", spec);
  AdvanceTime(1000);
  const MessageRecord first = TakeOne("jobs");
  EXPECT_EQ(first.id, FireId("s", t0 + 1000));
  AdvanceTime(1000);  // the first is running: skipped
  EXPECT_TRUE(PendingIds("jobs").empty());
  EXPECT_EQ(Info("jobs", "s").progress.overlap_skips, 1u);
  ASSERT_TRUE(CompleteOne("jobs", first.id, first.lease_token).ok());
  AdvanceTime(1000);
  EXPECT_EQ(PendingIds("jobs"), (std::vector<std::string>{FireId("s", t0 + 3000)}));
  EXPECT_EQ(Info("jobs", "s").progress.fires, 2u);
}

TEST_F(ScheduleTest, AllowEnqueuesEveryFireWhateverThePreviousState) {
  const TimeMs t0 = Now();
  Upsert("jobs", "s", Every(1000));
  AdvanceTime(1000);
  (void)TakeOne("jobs");
  AdvanceTime(1000);
  EXPECT_EQ(PendingIds("jobs"), (std::vector<std::string>{FireId("s", t0 + 2000)}));
}

TEST_F(ScheduleTest, PausedScheduleDoesNotFireAndResumesFromNow) {
  const TimeMs t0 = Now();
  Upsert("jobs", "s", Every(1000));
  Result<ScheduleInfo> paused = engine().PauseSchedule("jobs", "s");
  ASSERT_TRUE(paused.ok());
  EXPECT_TRUE(paused->progress.paused);
  EXPECT_EQ(paused->next_fire_at, 0);
  EXPECT_EQ(engine().NextDueTime(), INT64_MAX);
  AdvanceTime(5500);
  EXPECT_TRUE(PendingIds("jobs").empty());
  Result<ScheduleInfo> resumed = engine().ResumeSchedule("jobs", "s");
  ASSERT_TRUE(resumed.ok());
  EXPECT_FALSE(resumed->progress.paused);
  EXPECT_EQ(resumed->next_fire_at, t0 + 6000);  // fires while paused are not made
  AdvanceTime(500);
  EXPECT_EQ(PendingIds("jobs"), (std::vector<std::string>{FireId("s", t0 + 6000)}));
  EXPECT_EQ(Info("jobs", "s").progress.missed, 0u);
}

TEST_F(ScheduleTest, TriggerFiresNowEvenWhenPausedAndKeepsTheCadence) {
  const TimeMs t0 = Now();
  Upsert("jobs", "s", Every(1000));
  ASSERT_TRUE(engine().PauseSchedule("jobs", "s").ok());
  AdvanceClockOnly(250);
  Result<ScheduleTriggerResult> fired = engine().TriggerSchedule("jobs", "s");
  ASSERT_TRUE(fired.ok()) << fired.status().detail();
  EXPECT_EQ(fired->id, FireId("s", t0 + 250));
  EXPECT_FALSE(fired->duplicate);
  EXPECT_EQ(PendingIds("jobs"), (std::vector<std::string>{FireId("s", t0 + 250)}));
  ASSERT_TRUE(engine().ResumeSchedule("jobs", "s").ok());
  EXPECT_EQ(Info("jobs", "s").next_fire_at, t0 + 1000);
  // A second trigger in the same millisecond names the same fire: a duplicate.
  Result<ScheduleTriggerResult> again = engine().TriggerSchedule("jobs", "s");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(PendingIds("jobs").size(), 1u);
}

// Found by the model test: an operation on a schedule checks the queue's and the schedule's
// names before looking the schedule up (docs/semantics.md, "Order of checks"), as upsert does.
TEST_F(ScheduleTest, MalformedNamesAreInvalidArgumentForEveryScheduleOperation) {
  const std::string long_name(kMaxScheduleNameBytes + 1, 'n');
  for (auto [queue, name] : {std::pair<std::string, std::string>{"bad queue", "s"},
                             {"jobs", "bad name"},
                             {"jobs", long_name},
                             {"jobs", ""}}) {
    SCOPED_TRACE(queue + " " + name);
    EXPECT_EQ(engine().GetSchedule(queue, name).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(engine().DeleteSchedule(queue, name).code(), Code::kInvalidArgument);
    EXPECT_EQ(engine().PauseSchedule(queue, name).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(engine().ResumeSchedule(queue, name).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(engine().TriggerSchedule(queue, name).status().code(), Code::kInvalidArgument);
  }
  EXPECT_EQ(engine().GetSchedule("jobs", "s").status().code(), Code::kNotFound);
}

TEST_F(ScheduleTest, DeletedScheduleStopsFiring) {
  Upsert("jobs", "s", Every(1000));
  ASSERT_TRUE(engine().DeleteSchedule("jobs", "s").ok());
  EXPECT_EQ(engine().GetSchedule("jobs", "s").status().code(), Code::kNotFound);
  EXPECT_EQ(engine().DeleteSchedule("jobs", "s").code(), Code::kNotFound);
  AdvanceTime(5000);
  EXPECT_EQ(engine().GetQueue("jobs").status().code(), Code::kNotFound);  // never fired
  EXPECT_EQ(engine().NextDueTime(), INT64_MAX);
}

TEST_F(ScheduleTest, UpsertChangingTheTimingStartsFromNowAndKeepingItKeepsProgress) {
  const TimeMs t0 = Now();
  ASSERT_TRUE(engine().UpsertSchedule("jobs", "s", Every(1000)).value().created);
  AdvanceTime(1500);
  ScheduleSpec new_payload = Every(1000);
  new_payload.payload = "new";
  Result<ScheduleUpsertResult> same = engine().UpsertSchedule("jobs", "s", new_payload);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->created);
  EXPECT_EQ(same->schedule.progress.fires, 1u);
  EXPECT_EQ(same->schedule.next_fire_at, t0 + 2000);
  AdvanceTime(500);
  EXPECT_EQ(GetMessage("jobs", FireId("s", t0 + 2000)).payload, "new");

  AdvanceClockOnly(300);  // t0 + 2300
  Result<ScheduleUpsertResult> changed = engine().UpsertSchedule("jobs", "s", Every(5000));
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(changed->schedule.next_fire_at, t0 + 7300);
  EXPECT_EQ(changed->schedule.progress.fires, 2u);
  ASSERT_TRUE(engine().UpsertSchedule("jobs", "s", Cron("*/5 * * * *")).ok());
  EXPECT_EQ(Info("jobs", "s").next_fire_at, 1'700'000'100'000);  // 22:15:00Z
}

TEST_F(ScheduleTest, BadSpecsAreRefusedNamingTheField) {
  ScheduleSpec both = Every(1000);
  both.cron = "* * * * *";
  EXPECT_EQ(engine().UpsertSchedule("jobs", "s", both).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine().UpsertSchedule("jobs", "s", ScheduleSpec{}).status().code(),
            Code::kInvalidArgument);
  ScheduleSpec zoned = Every(1000);
  zoned.tz = "Europe/Paris";
  EXPECT_EQ(engine().UpsertSchedule("jobs", "s", zoned).status().detail(), "tz: only with cron");
  EXPECT_EQ(engine().UpsertSchedule("jobs", "s", Every(5)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine().UpsertSchedule("jobs", "s", Cron("61 * * * *")).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(engine().UpsertSchedule("jobs", "s", Cron("* * * * *", "Mars/Base")).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(engine().UpsertSchedule("jobs", "bad name", Every(1000)).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(engine().UpsertSchedule("jobs", std::string(101, 'n'), Every(1000)).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(engine().ListSchedules({}).size(), 0u);
}

TEST_F(ScheduleTest, ListIsByQueueThenName) {
  Upsert("b", "x", Every(1000));
  Upsert("a", "z", Every(1000));
  Upsert("a", "y", Every(1000));
  std::vector<std::string> all;
  for (const ScheduleInfo& s : engine().ListSchedules({})) all.push_back(s.queue + "/" + s.name);
  EXPECT_EQ(all, (std::vector<std::string>{"a/y", "a/z", "b/x"}));
  EXPECT_EQ(engine().ListSchedules("a").size(), 2u);
  EXPECT_EQ(engine().ListSchedules("c").size(), 0u);
}

TEST_F(ScheduleTest, ReplayedEffectsGiveTheSameStateAndTheSameNextFires) {
  ScheduleSpec spec = Every(1000);
  spec.overlap = OverlapPolicy::kSkipIfActive;
  Upsert("jobs", "a", spec);
  Upsert("jobs", "b", Cron("* * * * *", "America/New_York"));
  AdvanceTime(1000);
  (void)TakeOne("jobs");
  AdvanceTime(2000);
  ASSERT_TRUE(engine().PauseSchedule("jobs", "b").ok());
  ASSERT_TRUE(engine().TriggerSchedule("jobs", "b").ok());
  AdvanceTime(120'000);
  std::unique_ptr<Engine> copy = Replayed(sink_.All());
  EXPECT_EQ(copy->Digest(), engine().Digest());
  EXPECT_EQ(copy->NextDueTime(), engine().NextDueTime());
  EXPECT_EQ(copy->GetSchedule("jobs", "a")->progress, Info("jobs", "a").progress);
  ASSERT_TRUE(engine().DeleteSchedule("jobs", "a").ok());
  copy = Replayed(sink_.All());
  EXPECT_EQ(copy->Digest(), engine().Digest());
}

TEST_F(ScheduleTest, AFireReplayedWithoutItsRecordIsADuplicateNotASecondMessage) {
  const TimeMs t0 = Now();
  Upsert("jobs", "s", Every(1000));
  AdvanceTime(1000);
  // A crash after the fire's enqueue reached the log but before its kScheduleFired did.
  std::vector<RecordedEffect> effects = sink_.All();
  ASSERT_EQ(effects.back().type, EffectType::kScheduleFired);
  effects.pop_back();
  RecordingSink sink;
  Engine restarted(DefaultOptions(), &clock_, &sink);
  for (const RecordedEffect& r : effects) ASSERT_TRUE(restarted.Apply(r.View()).ok());
  EXPECT_EQ(restarted.NextDueTime(), t0 + 1000);  // the fire looks not made
  EXPECT_EQ(restarted.Advance(Now()), 1u);
  Result<StateCounts> counts = restarted.Count("jobs", {});
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ((*counts)[MessageState::kPending], 1u);  // the same message name@T, not a second one
  EXPECT_EQ(restarted.GetSchedule("jobs", "s")->progress.last_enqueued_at, t0 + 1000);
  EXPECT_EQ(restarted.NextDueTime(), t0 + 2000);
}

TEST_F(ScheduleTest, ExportedSchedulesLoadToTheSameDigestAndGoOnTheSame) {
  ScheduleSpec spec = Every(1000);
  spec.misfire = MisfirePolicy::kAll;
  spec.max_attempts = 3;
  spec.priority_offset_ms = -20;
  Upsert("jobs", "a", spec);
  Upsert("other", "b", Cron("@hourly", "Australia/Lord_Howe"));
  AdvanceTime(3000);
  ASSERT_TRUE(engine().PauseSchedule("other", "b").ok());
  RecordingSink exported;
  engine().ExportState(&exported);
  std::unique_ptr<Engine> loaded = Replayed(exported.All());
  EXPECT_EQ(loaded->Digest(), engine().Digest());
  EXPECT_EQ(loaded->ListSchedules({}).size(), 2u);
  AdvanceTime(5000);
  (void)loaded->Advance(Now());
  EXPECT_EQ(loaded->Digest(), engine().Digest());
}

TEST_F(ScheduleTest, DigestWithoutSchedulesIsUnchangedByTheirExistence) {
  const uint64_t before = engine().Digest();
  Upsert("jobs", "s", Every(1000));
  EXPECT_NE(engine().Digest(), before);
  ASSERT_TRUE(engine().DeleteSchedule("jobs", "s").ok());
  EXPECT_EQ(engine().Digest(), before);
}

// Random operations on a few schedules (upserts of every kind, pause, resume, trigger, delete,
// small and large steps of time, workers completing fires): after every Advance nothing is
// due any more, no fire is in the future, and the effects replay — and the state exports — to
// the same digest.
TEST_F(ScheduleTest, RandomOperationsReplayAndExportToTheSameState) {
  const std::vector<std::string> crons = {"* * * * *", "*/5 * * * *", "@hourly", "30 2 * * *"};
  const std::vector<std::string> zones = {"", "Europe/Paris", "America/New_York"};
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(seed);
    Reset(DefaultOptions());
    std::mt19937 rng(seed);
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    for (int step = 0; step < 300; ++step) {
      const std::string queue = "q" + std::to_string(pick(2));
      const std::string name = "s" + std::to_string(pick(4));
      switch (pick(9)) {
        case 0:
        case 1: {
          ScheduleSpec spec;
          if (pick(2) == 0) {
            spec.every_ms = std::vector<int64_t>{500, 1000, 7000, 60'000}[pick(4)];
          } else {
            spec.cron = crons[pick(crons.size())];
            spec.tz = zones[pick(zones.size())];
          }
          spec.payload = "p" + std::to_string(pick(3));
          spec.misfire = static_cast<MisfirePolicy>(pick(3));
          spec.overlap = static_cast<OverlapPolicy>(pick(2));
          spec.priority_offset_ms = static_cast<int64_t>(pick(1000));
          ASSERT_TRUE(engine().UpsertSchedule(queue, name, spec).ok());
          break;
        }
        case 2:
          (void)engine().PauseSchedule(queue, name);
          break;
        case 3:
          (void)engine().ResumeSchedule(queue, name);
          break;
        case 4:
          (void)engine().TriggerSchedule(queue, name);
          break;
        case 5:
          if (pick(4) == 0) (void)engine().DeleteSchedule(queue, name);
          break;
        case 6: {
          DequeueRequest request;
          request.max = 3;
          Result<std::vector<MessageRecord>> got = engine().Dequeue(queue, request);
          if (got.ok()) {
            for (const MessageRecord& m : *got) {
              if (pick(2) == 0) (void)CompleteOne(queue, m.id, m.lease_token);
            }
          }
          break;
        }
        default: {
          // Mostly small steps; now and then a long downtime (misfires).
          const int64_t ms = pick(10) == 0
                                 ? int64_t{3} * 3'600'000 + static_cast<int64_t>(pick(600'000))
                                 : static_cast<int64_t>(pick(90'000));
          AdvanceClockOnly(ms);
          engine().Advance(Now());
          EXPECT_GT(engine().NextDueTime(), Now());
          break;
        }
      }
    }
    for (const ScheduleInfo& s : engine().ListSchedules({})) {
      EXPECT_LE(s.progress.after, Now());
      EXPECT_LE(s.progress.last_fire_at, Now());
      EXPECT_TRUE(s.progress.paused ? s.next_fire_at == 0 : s.next_fire_at > s.progress.after);
    }
    std::unique_ptr<Engine> replayed = Replayed(sink_.All());
    EXPECT_EQ(replayed->Digest(), engine().Digest());
    RecordingSink exported;
    engine().ExportState(&exported);
    EXPECT_EQ(Replayed(exported.All())->Digest(), engine().Digest());
  }
}

}  // namespace
}  // namespace sundial::engine_test
