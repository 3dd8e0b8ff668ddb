// Recovery (issue "Write-ahead log", items 3 and 5; docs/wal-format.md "Recovery"): the newest
// snapshot plus later segments give back exactly the logged state; a torn tail of the last
// segment is cut and reported; damage anywhere else refuses the start with file and offset,
// unless repair cuts the log at the first bad record and reports what was dropped.
#include <gtest/gtest.h>

#include "tests/wal/recovery_test_util.h"
#include "tests/wal/wal_test_util.h"
#include "wal/checkpointer.h"
#include "wal/effect_codec.h"
#include "wal/effect_pipeline.h"
#include "wal/fault_injection_file_system.h"
#include "wal/log_reader.h"
#include "wal/snapshot.h"

namespace sundial::wal::test {
namespace {

const std::string kDir = "data";
const QueueSettings kDefaultSettings;

class RecoveryTest : public ::testing::Test {
 protected:
  // Runs `ops` random operations on a log in kDir (rotating every `segment_bytes`), closes the
  // log and returns the engine's digest.
  uint64_t Populate(int ops, uint64_t seed = 1, uint64_t segment_bytes = 64ull << 20,
                    bool with_dependencies = false) {
    LoggedEngine e;
    LogOptions options;
    options.segment_bytes = segment_bytes;
    EXPECT_TRUE(e.Open(fs_.get(), kDir, {}, options).ok());
    RandomOps workload(seed, with_dependencies);
    workload.Setup(*e.engine);
    workload.Run(*e.engine, e.clock, ops);
    EXPECT_TRUE(e.Sync().ok());
    next_lsn_ = e.log->stats().next_lsn;
    EXPECT_TRUE(e.log->Close().ok());
    waiting_ = Waiting(*e.engine);
    return e.engine->Digest();
  }
  static uint64_t Waiting(const Engine& engine) {
    uint64_t n = 0;
    for (const QueueInfo& q : engine.ListQueues()) n += q.counts[MessageState::kWaiting];
    return n;
  }

  std::string SegmentPath(size_t index) {
    return JoinPath(kDir, SegmentNames(fs_.get(), kDir).at(index));
  }
  std::string Contents(const std::string& path) { return *ReadFileToString(fs_.get(), path); }
  void Overwrite(const std::string& path, const std::string& bytes) {
    ASSERT_TRUE(WriteStringToFile(fs_.get(), path, bytes).ok());
  }
  // Offsets of the records of the file at `path`.
  std::vector<uint64_t> RecordOffsets(const std::string& path, bool snapshot = false) {
    LogReader::Options options;
    options.magic = snapshot ? kSnapshotMagic : kSegmentMagic;
    LogReader reader(std::move(fs_->NewSequentialFile(path)).value(), path, nullptr, options);
    std::vector<uint64_t> offsets;
    LogReader::Record record;
    while (reader.ReadRecord(&record)) offsets.push_back(record.offset);
    return offsets;
  }

  Status TryRecover(RecoveryReport* report, RecoveryOptions options = {}) {
    ManualClock clock(kStartTime);
    Recovered recovered;
    Status s = Recover(
        fs_.get(), kDir,
        [&] { return std::make_unique<Engine>(TestEngineOptions(), &clock, nullptr); }, options,
        &recovered);
    *report = recovered.report;
    return s;
  }

  std::unique_ptr<FileSystem> fs_ = NewMemoryFileSystem();
  uint64_t next_lsn_ = 0;
  uint64_t waiting_ = 0;  // waiting messages at the end of Populate
};

TEST_F(RecoveryTest, AnEmptyDirectoryRecoversToAnEmptyEngineAtLsnZero) {
  RecoveryReport report;
  uint64_t empty = Engine(TestEngineOptions(), nullptr, nullptr).Digest();
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), empty);
  EXPECT_EQ(report.next_lsn, 0u);
  EXPECT_EQ(report.next_segment_number, 1u);
  EXPECT_TRUE(report.snapshot.empty());
}

TEST_F(RecoveryTest, ReplayingSegmentsGivesTheLoggedStateAndTheNextLsn) {
  const uint64_t digest = Populate(3'000, 1, 16 << 10);
  ASSERT_GT(SegmentNames(fs_.get(), kDir).size(), 3u);
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), digest);
  EXPECT_EQ(report.next_lsn, next_lsn_);
  EXPECT_EQ(report.records_replayed, next_lsn_);
  EXPECT_EQ(report.next_segment_number, SegmentNames(fs_.get(), kDir).size() + 1);
  EXPECT_FALSE(report.torn_tail);
  EXPECT_FALSE(report.damage);
}

TEST_F(RecoveryTest, TheLogGoesOnWhereRecoveryLeftItAcrossManyRestarts) {
  uint64_t digest = 0;
  for (int restart = 0; restart < 4; ++restart) {
    LoggedEngine e(kStartTime + restart * 100'000);
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    if (restart > 0) {
      EXPECT_EQ(e.engine->Digest(), digest) << "restart " << restart;
    }
    RandomOps workload(10 + restart);
    workload.Setup(*e.engine);
    workload.Run(*e.engine, e.clock, 500);
    ASSERT_TRUE(e.Sync().ok());
    digest = e.engine->Digest();
  }
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir), digest);
}

TEST_F(RecoveryTest, TimersDueDuringTheDowntimeFireFromTheLoggedAbsoluteTimes) {
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    ASSERT_TRUE(e.engine->Enqueue("jobs", {Item("a")})[0].ok());
    EnqueueItem later = Item("b");
    later.delay_ms = 10'000;
    ASSERT_TRUE(e.engine->Enqueue("jobs", {later})[0].ok());
    DequeueRequest request;
    request.lease_ms = 5'000;
    auto leased = e.engine->Dequeue("jobs", request);
    ASSERT_TRUE(leased.ok());
    ASSERT_EQ(leased->size(), 1u);
    ASSERT_TRUE(e.Sync().ok());
  }
  // Restart 60 s later: the lease has expired and "b" became visible while the server was down.
  LoggedEngine e(kStartTime + 60'000);
  ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
  EXPECT_EQ(e.engine->Get("jobs", "a")->state, MessageState::kRunning);
  EXPECT_EQ(e.engine->Advance(e.clock.NowMs()), 2u);
  EXPECT_EQ(e.engine->Get("jobs", "a")->state, MessageState::kPending);
  EXPECT_EQ(e.engine->Get("jobs", "a")->attempts, 1u);
  EXPECT_EQ(e.engine->Get("jobs", "b")->state, MessageState::kPending);
  // The same transitions as if the server had never stopped.
  ASSERT_TRUE(e.Sync().ok());
  const uint64_t digest = e.engine->Digest();
  e.log.reset();
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir), digest);
}

// Recovery reports the latest time of an effect it recovered, from the segments and from a
// snapshot alike: the server raises its clock's floor to it, so engine time never goes back
// behind the log across a restart (docs/replication.md, "Time and leases").
TEST_F(RecoveryTest, TheLatestEffectTimeIsReportedFromSegmentsAndSnapshots) {
  TimeMs latest = 0;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    ASSERT_TRUE(e.engine->Enqueue("jobs", {Item("a")})[0].ok());
    e.clock.Set(kStartTime + 90'000);
    ASSERT_TRUE(e.engine->Enqueue("jobs", {Item("b")})[0].ok());
    latest = e.clock.NowMs();
    e.clock.Set(kStartTime + 5'000);  // the system clock went back: no effect at this time
    ASSERT_TRUE(e.Sync().ok());
  }
  RecoveryReport report;
  ASSERT_TRUE(TryRecover(&report).ok());
  EXPECT_EQ(report.latest_effect_time, latest);

  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    Checkpointer checkpointer(fs_.get(), kDir, e.log.get(), CheckpointOptions{});
    ASSERT_TRUE(checkpointer.RunOnce().ok());  // the effects are in a snapshot now
  }
  ASSERT_TRUE(TryRecover(&report).ok());
  EXPECT_FALSE(report.snapshot.empty());
  EXPECT_EQ(report.records_replayed, 0u);
  EXPECT_GE(report.latest_effect_time, latest);
}

// ---- Dependencies (docs/semantics.md, "Dependencies"; format version 3) ---------------------

// How many dependents an export of `engine` carries graph entries for.
size_t GraphEntries(const Engine& engine) {
  struct Counter final : EffectSink {
    void OnEffect(const Effect& effect) override { n += effect.dependency_edges.empty() ? 0 : 1; }
    size_t n = 0;
  } counter;
  engine.ExportState(&counter);
  return counter.n;
}

// Leases the next message of `queue` and completes it; returns its id.
std::string CompleteNext(Engine& engine, std::string_view queue) {
  auto leased = engine.Dequeue(queue, {});
  if (!leased.ok() || leased->empty()) {
    ADD_FAILURE() << "nothing to dequeue in " << queue;
    return "";
  }
  const MessageRecord& m = (*leased)[0];
  EXPECT_TRUE(engine.Complete(queue, {CompleteItem{m.id, m.lease_token}})[0].ok());
  return m.id;
}

EnqueueItem After(std::string id, std::vector<std::string> depends_on,
                  DependencyFailurePolicy policy = DependencyFailurePolicy::kCancel) {
  EnqueueItem item = Item(std::move(id));
  item.depends_on = std::move(depends_on);
  item.on_dependency_failure = policy;
  return item;
}

// Parents p1..p3 in "jobs"; c1 (other) waits on p1 and p2, c2 (jobs) on p1 with the release
// policy, c3 (other) on p3 with the error policy, d (jobs) on c1; p1 completed (releasing c2).
void EnqueueFamily(Engine& engine) {
  ASSERT_TRUE(engine.CreateQueue("jobs", {}).ok());
  ASSERT_TRUE(engine.CreateQueue("other", {}).ok());
  for (const char* id : {"p1", "p2", "p3"}) ASSERT_TRUE(engine.Enqueue("jobs", {Item(id)})[0].ok());
  ASSERT_TRUE(engine.Enqueue("other", {After("c1", {"jobs/p1", "jobs/p2"})})[0].ok());
  ASSERT_TRUE(
      engine.Enqueue("jobs", {After("c2", {"p1"}, DependencyFailurePolicy::kRelease)})[0].ok());
  ASSERT_TRUE(
      engine.Enqueue("other", {After("c3", {"jobs/p3"}, DependencyFailurePolicy::kError)})[0].ok());
  ASSERT_TRUE(engine.Enqueue("jobs", {After("d", {"other/c1"})})[0].ok());
  ASSERT_EQ(CompleteNext(engine, "jobs"), "p1");
  ASSERT_EQ(engine.Get("jobs", "c2")->state, MessageState::kPending);
}

MessageState StateIn(const Engine& engine, std::string_view queue, std::string_view id) {
  auto m = engine.Get(queue, id);
  return m.ok() ? m->state : MessageState::kPending;
}

// What is left after EnqueueFamily, on a recovered engine: the same waiting messages, and
// the completions and failures still to come release or fail them.
void FinishFamily(Engine& engine) {
  EXPECT_EQ(StateIn(engine, "other", "c1"), MessageState::kWaiting);
  EXPECT_EQ(StateIn(engine, "other", "c3"), MessageState::kWaiting);
  EXPECT_EQ(StateIn(engine, "jobs", "d"), MessageState::kWaiting);
  EXPECT_EQ(engine.Get("jobs", "c2")->state, MessageState::kPending);
  EXPECT_EQ(CompleteNext(engine, "jobs"), "p2");
  EXPECT_EQ(StateIn(engine, "other", "c1"), MessageState::kPending);
  EXPECT_EQ(engine.Cancel("jobs", {"p3"})[0].code(), Code::kOk);
  EXPECT_EQ(StateIn(engine, "other", "c3"), MessageState::kErrored);
  EXPECT_EQ(engine.Get("other", "c3")->last_error, "dependency jobs/p3 canceled");
  EXPECT_EQ(CompleteNext(engine, "other"), "c1");
  EXPECT_EQ(StateIn(engine, "jobs", "d"), MessageState::kPending);
}

TEST_F(RecoveryTest, AcceptedDependenciesSurviveARestartFromTheLogAlone) {
  uint64_t digest;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    EnqueueFamily(*e.engine);
    ASSERT_TRUE(e.Sync().ok());
    digest = e.engine->Digest();
  }
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir), digest);
  uint64_t after;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    EXPECT_EQ(e.engine->Digest(), digest);
    FinishFamily(*e.engine);
    ASSERT_TRUE(e.Sync().ok());
    after = e.engine->Digest();
  }
  // The releases and failures were derived, not logged: replaying their causes derives them.
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir), after);
}

TEST_F(RecoveryTest, DependenciesOfARandomWorkloadRecoverFromTheLog) {
  const uint64_t digest = Populate(3'000, /*seed=*/11, 64ull << 20, /*with_dependencies=*/true);
  EXPECT_GT(waiting_, 0u) << "the workload should leave messages waiting";
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir), digest);
}

// A snapshot carries a dependent's graph entry; a segment never does (it logs the enqueue).
TEST_F(RecoveryTest, ADependencyEntryInALogSegmentIsDamage) {
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    ASSERT_TRUE(e.engine->CreateQueue("jobs", {}).ok());
    ASSERT_TRUE(e.engine->Enqueue("jobs", {Item("p")})[0].ok());
    ASSERT_TRUE(e.engine->Enqueue("jobs", {After("c", {"p"})})[0].ok());
    // The export's graph entries, encoded, then logged as if they were effects.
    struct EntrySink final : EffectSink {
      void OnEffect(const Effect& effect) override {
        if (!effect.dependency_edges.empty()) EncodeEffect(effect, &entries.emplace_back());
      }
      std::vector<std::string> entries;
    } exported;
    e.engine->ExportState(&exported);
    ASSERT_EQ(exported.entries.size(), 1u);
    DecodedEffect entry;
    ASSERT_TRUE(DecodeEffect(exported.entries[0], &entry).ok());
    e.log->OnEffect(entry.effect());
    ASSERT_TRUE(e.Sync().ok());
  }
  RecoveryReport report;
  EXPECT_FALSE(TryRecover(&report).ok());
  ASSERT_TRUE(report.damage);
  EXPECT_EQ(report.damage->reason, "dependency entry in a log segment");
}

TEST_F(RecoveryTest, ATornTailIsCutOffAndReportedWithItsSize) {
  const uint64_t digest = Populate(400);
  const std::string last = SegmentPath(SegmentNames(fs_.get(), kDir).size() - 1);
  const std::string good = Contents(last);
  // A record whose header promises more bytes than were written (a crash mid-write).
  std::string torn;
  PutFixed32(&torn, 1000);
  torn.push_back(static_cast<char>(RecordType::kEffect));
  torn.append(8 + 100, 'x');
  Overwrite(last, good + torn);

  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), digest);
  ASSERT_TRUE(report.torn_tail);
  EXPECT_EQ(report.torn_tail->offset, good.size());
  EXPECT_EQ(report.torn_bytes, torn.size());
  EXPECT_EQ(report.next_lsn, next_lsn_);
  EXPECT_NE(report.Summary().find("torn tail of " + std::to_string(torn.size()) + " bytes"),
            std::string::npos);
  EXPECT_EQ(Contents(last), good);  // cut on disk
  RecoveryReport again;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &again), digest);
  EXPECT_FALSE(again.torn_tail);
}

TEST_F(RecoveryTest, ZeroedSpaceAtTheEndIsATornTail) {
  const uint64_t digest = Populate(200);
  const std::string last = SegmentPath(0);
  const std::string good = Contents(last);
  Overwrite(last, good + std::string(4096, '\0'));
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), digest);
  ASSERT_TRUE(report.torn_tail);
  EXPECT_EQ(report.torn_bytes, 4096u);
}

TEST_F(RecoveryTest, ALastSegmentWithATornHeaderIsRemovedAndItsNumberReused) {
  const uint64_t digest = Populate(200);
  const size_t segments = SegmentNames(fs_.get(), kDir).size();
  // The crash came right after the log created its next segment.
  const std::string empty = JoinPath(kDir, SegmentFileName(segments + 1));
  Overwrite(empty, std::string(10, 'S'));
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), digest);
  ASSERT_TRUE(report.torn_tail);
  EXPECT_EQ(report.torn_bytes, 10u);
  EXPECT_FALSE(fs_->FileExists(empty));
  EXPECT_EQ(report.next_segment_number, segments + 1);
  // The log goes on with consecutive numbers: the next start has no gap.
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    ASSERT_TRUE(e.engine->Enqueue("more", {Item("x")})[0].ok());
    ASSERT_TRUE(e.Sync().ok());
  }
  RecoveryReport after;
  RecoveredDigest(fs_.get(), kDir, &after);
  EXPECT_FALSE(after.damage);
}

TEST_F(RecoveryTest, AFlippedByteInTheLastRecordRefusesTheStartNamingFileAndOffset) {
  Populate(200);
  const std::string last = SegmentPath(0);
  std::string bytes = Contents(last);
  const uint64_t offset = RecordOffsets(last).back();
  FlipByte(&bytes, bytes.size() - 1);  // in the last record's payload
  Overwrite(last, bytes);
  RecoveryReport report;
  Status s = TryRecover(&report);
  EXPECT_EQ(s.code(), Code::kInternal);
  ASSERT_TRUE(report.damage);
  EXPECT_EQ(report.damage->file, SegmentFileName(1));
  EXPECT_EQ(report.damage->offset, offset);
  EXPECT_EQ(report.damage->kind, DamageKind::kCorruption);
  EXPECT_EQ(Contents(last), bytes);  // nothing changed on disk
}

TEST_F(RecoveryTest, DamageInAnEarlierSegmentRefusesTheStartNamingFileAndOffset) {
  Populate(2'000, 3, 8 << 10);
  ASSERT_GE(SegmentNames(fs_.get(), kDir).size(), 3u);
  const std::string second = SegmentPath(1);
  const uint64_t offset = RecordOffsets(second)[3];
  std::string bytes = Contents(second);
  FlipByte(&bytes, offset + kRecordHeaderBytes + 2);
  Overwrite(second, bytes);
  RecoveryReport report;
  EXPECT_EQ(TryRecover(&report).code(), Code::kInternal);
  ASSERT_TRUE(report.damage);
  EXPECT_EQ(report.damage->file, SegmentNames(fs_.get(), kDir)[1]);
  EXPECT_EQ(report.damage->offset, offset);
  EXPECT_NE(ToString(*report.damage).find("checksum"), std::string::npos);
}

TEST_F(RecoveryTest, TruncationOfASegmentThatIsNotTheLastIsDamage) {
  Populate(2'000, 3, 8 << 10);
  const std::string first = SegmentPath(0);
  std::string bytes = Contents(first);
  Overwrite(first, bytes.substr(0, bytes.size() - 5));
  RecoveryReport report;
  EXPECT_EQ(TryRecover(&report).code(), Code::kInternal);
  ASSERT_TRUE(report.damage);
  EXPECT_EQ(report.damage->file, SegmentFileName(1));
}

TEST_F(RecoveryTest, AMissingSegmentIsDamage) {
  Populate(2'000, 3, 8 << 10);
  ASSERT_GE(SegmentNames(fs_.get(), kDir).size(), 3u);
  ASSERT_TRUE(fs_->RemoveFile(SegmentPath(1)).ok());
  RecoveryReport report;
  EXPECT_EQ(TryRecover(&report).code(), Code::kInternal);
  ASSERT_TRUE(report.damage);
  EXPECT_EQ(report.damage->file, SegmentFileName(3));
  EXPECT_NE(report.damage->reason.find(SegmentFileName(2)), std::string::npos);
}

TEST_F(RecoveryTest, AnEffectThatDoesNotApplyIsDamageAtItsOffset) {
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
  ASSERT_TRUE(e.engine->Enqueue("jobs", {Item("a")})[0].ok());
  ASSERT_TRUE(e.Sync().ok());
  ASSERT_TRUE(e.log->Close().ok());
  // Append a well-formed record that completes a message that does not exist.
  Effect bogus;
  bogus.type = EffectType::kMessageRemoved;
  bogus.queue = "jobs";
  bogus.id = "nope";
  std::string path = SegmentPath(0);
  std::string bytes = Contents(path);
  const uint64_t offset = bytes.size();
  std::string payload = Encode(bogus);
  PutFixed32(&bytes, static_cast<uint32_t>(payload.size()));
  bytes.push_back(static_cast<char>(RecordType::kEffect));
  PutFixed64(&bytes, RecordChecksum(static_cast<uint8_t>(RecordType::kEffect), 1, payload));
  bytes += payload;
  Overwrite(path, bytes);
  RecoveryReport report;
  EXPECT_EQ(TryRecover(&report).code(), Code::kInternal);
  ASSERT_TRUE(report.damage);
  EXPECT_EQ(report.damage->offset, offset);
}

TEST_F(RecoveryTest, RepairCutsAtTheFirstBadRecordAndReportsWhatWasDropped) {
  Populate(2'000, 3, 8 << 10);
  const auto names = SegmentNames(fs_.get(), kDir);
  ASSERT_GE(names.size(), 3u);
  const std::string second = SegmentPath(1);
  const auto offsets = RecordOffsets(second);
  const uint64_t offset = offsets[5];
  std::string bytes = Contents(second);
  FlipByte(&bytes, offset + kRecordHeaderBytes);
  Overwrite(second, bytes);

  // The expected state: everything before the bad record.
  auto expected = [&] {
    auto copy = NewMemoryFileSystem();
    for (size_t i = 0; i < 2; ++i) {
      std::string b = Contents(JoinPath(kDir, names[i]));
      if (i == 1) b.resize(offset);
      EXPECT_TRUE(WriteStringToFile(copy.get(), JoinPath(kDir, names[i]), b).ok());
    }
    return RecoveredDigest(copy.get(), kDir);
  }();

  uint64_t dropped = bytes.size() - offset;
  for (size_t i = 2; i < names.size(); ++i) dropped += Contents(JoinPath(kDir, names[i])).size();

  // Without repair nothing is changed, nothing is called REPAIRED, and the report says what a
  // repair would drop (issue 14: the log said "REPAIRED ... dropped 0 bytes", then "cannot
  // start").
  {
    RecoveryReport refused;
    EXPECT_EQ(TryRecover(&refused).code(), Code::kInternal);
    EXPECT_FALSE(refused.repaired);
    EXPECT_EQ(refused.Summary().find("REPAIRED"), std::string::npos) << refused.Summary();
    EXPECT_NE(refused.Summary().find("found damage, not repaired"), std::string::npos);
    EXPECT_EQ(refused.dropped_bytes, dropped);
    EXPECT_EQ(refused.dropped_files.size(), names.size() - 2);
    EXPECT_EQ(Contents(second), bytes);
  }

  RecoveryReport report;
  RecoveryOptions repair;
  repair.repair = true;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report, repair), expected);
  EXPECT_TRUE(report.repaired);
  ASSERT_TRUE(report.damage);
  EXPECT_EQ(report.damage->offset, offset);
  EXPECT_EQ(report.dropped_files.size(), names.size() - 2);
  EXPECT_EQ(report.dropped_bytes, dropped);
  EXPECT_NE(report.Summary().find("REPAIRED"), std::string::npos);
  EXPECT_EQ(SegmentNames(fs_.get(), kDir).size(), 2u);
  EXPECT_EQ(Contents(second).size(), offset);
  EXPECT_EQ(report.next_segment_number, 3u);
  // The repaired log now starts without repair, and goes on.
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    EXPECT_EQ(e.engine->Digest(), expected);
    ASSERT_TRUE(e.engine->Enqueue("more", {Item("x")})[0].ok());
    ASSERT_TRUE(e.Sync().ok());
  }
  RecoveryReport after;
  RecoveredDigest(fs_.get(), kDir, &after);
  EXPECT_FALSE(after.damage);
}

TEST_F(RecoveryTest, RepairOfADamagedFirstHeaderDropsTheWholeLog) {
  Populate(300);
  std::string path = SegmentPath(0);
  std::string bytes = Contents(path);
  FlipByte(&bytes, 2);  // magic
  Overwrite(path, bytes);
  RecoveryReport report;
  EXPECT_EQ(TryRecover(&report).code(), Code::kInternal);
  EXPECT_EQ(report.damage->offset, 0u);
  RecoveryOptions repair;
  repair.repair = true;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report, repair),
            Engine(TestEngineOptions(), nullptr, nullptr).Digest());
  EXPECT_EQ(report.dropped_files.size(), 1u);
  EXPECT_EQ(report.dropped_bytes, bytes.size());
}

// ---- Large files: read and decoded on a second thread (effect_pipeline.h) --------------------

class LargeLogRecoveryTest : public RecoveryTest {
 protected:
  // One segment well over EffectPipeline's threshold for a second thread.
  uint64_t PopulateLarge() {
    const uint64_t digest = Populate(30'000, 11);
    EXPECT_EQ(SegmentNames(fs_.get(), kDir).size(), 1u);
    EXPECT_TRUE(EffectPipeline::WorthAThread(Contents(SegmentPath(0)).size()));
    return digest;
  }
};

TEST_F(LargeLogRecoveryTest, ALargeSegmentReplaysToTheLoggedState) {
  const uint64_t digest = PopulateLarge();
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), digest);
  EXPECT_EQ(report.next_lsn, next_lsn_);
  EXPECT_EQ(report.records_replayed, next_lsn_);
}

TEST_F(LargeLogRecoveryTest, ATornTailOfALargeSegmentIsCutOff) {
  const uint64_t digest = PopulateLarge();
  const std::string path = SegmentPath(0);
  const std::string good = Contents(path);
  std::string torn;
  PutFixed32(&torn, 1000);
  torn.push_back(static_cast<char>(RecordType::kEffect));
  torn.append(8 + 100, 'x');
  Overwrite(path, good + torn);
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), digest);
  ASSERT_TRUE(report.torn_tail);
  EXPECT_EQ(report.torn_tail->offset, good.size());
  EXPECT_EQ(Contents(path), good);
}

TEST_F(LargeLogRecoveryTest, DamageInTheMiddleRefusesOrIsCutAtItsOffset) {
  PopulateLarge();
  const std::string path = SegmentPath(0);
  const auto offsets = RecordOffsets(path);
  const uint64_t offset = offsets[offsets.size() / 2];
  std::string bytes = Contents(path);
  FlipByte(&bytes, offset + kRecordHeaderBytes + 3);
  Overwrite(path, bytes);

  RecoveryReport refused;
  EXPECT_EQ(TryRecover(&refused).code(), Code::kInternal);
  ASSERT_TRUE(refused.damage);
  EXPECT_EQ(refused.damage->offset, offset);
  EXPECT_EQ(Contents(path), bytes);  // nothing changed on disk

  auto cut = NewMemoryFileSystem();
  ASSERT_TRUE(WriteStringToFile(cut.get(), path, bytes.substr(0, offset)).ok());
  const uint64_t expected = RecoveredDigest(cut.get(), kDir);
  RecoveryReport repaired;
  RecoveryOptions repair;
  repair.repair = true;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &repaired, repair), expected);
  ASSERT_TRUE(repaired.damage);
  EXPECT_EQ(repaired.damage->offset, offset);
  EXPECT_EQ(Contents(path).size(), offset);
}

TEST_F(LargeLogRecoveryTest, AnEffectThatDoesNotApplyInALargeSegmentIsDamageAtItsOffset) {
  PopulateLarge();
  const std::string path = SegmentPath(0);
  const auto offsets = RecordOffsets(path);
  // Replace a late record by a (well-formed, checksummed) removal of a message that never was.
  const uint64_t offset = offsets[offsets.size() - 10];
  std::string bytes = Contents(path);
  Effect removed;
  removed.type = EffectType::kMessageRemoved;
  removed.queue = "simple";
  removed.id = "never-enqueued";
  const std::string payload = Encode(removed);
  std::string rebuilt = bytes.substr(0, offset);
  std::string header;
  PutFixed32(&header, static_cast<uint32_t>(payload.size()));
  header.push_back(static_cast<char>(RecordType::kEffect));
  header.append(8, '\0');
  rebuilt += header + payload;
  FixRecordChecksum(&rebuilt, offset, 1);
  Overwrite(path, rebuilt);
  RecoveryReport report;
  EXPECT_EQ(TryRecover(&report).code(), Code::kInternal);
  ASSERT_TRUE(report.damage);
  EXPECT_EQ(report.damage->offset, offset);
  EXPECT_NE(report.damage->reason.find("does not apply"), std::string::npos);
}

// ---- With snapshots ------------------------------------------------------------------------

class SnapshotRecoveryTest : public RecoveryTest {
 protected:
  // Ops, a checkpoint, more ops; returns the final digest.
  uint64_t PopulateWithCheckpoint(int before, int after) {
    LoggedEngine e;
    LogOptions options;
    options.segment_bytes = 16 << 10;
    EXPECT_TRUE(e.Open(fs_.get(), kDir, {}, options).ok());
    RandomOps workload(5);
    workload.Setup(*e.engine);
    workload.Run(*e.engine, e.clock, before);
    EXPECT_TRUE(e.Sync().ok());
    CheckpointOptions checkpoint;
    checkpoint.engine_options = TestEngineOptions();
    Checkpointer checkpointer(fs_.get(), kDir, e.log.get(), checkpoint);
    auto result = checkpointer.RunOnce();
    EXPECT_TRUE(result.ok());
    covered_ = result.ok() ? result->covered_lsn : 0;
    workload.Run(*e.engine, e.clock, after);
    EXPECT_TRUE(e.Sync().ok());
    next_lsn_ = e.log->stats().next_lsn;
    return e.engine->Digest();
  }
  uint64_t covered_ = 0;
};

TEST_F(SnapshotRecoveryTest, LoadsTheSnapshotAndReplaysOnlyTheRecordsAfterIt) {
  const uint64_t digest = PopulateWithCheckpoint(2'000, 700);
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), digest);
  EXPECT_EQ(report.snapshot, SnapshotFileName(covered_));
  EXPECT_EQ(report.snapshot_lsn, covered_);
  EXPECT_GT(report.snapshot_effects, 0u);
  EXPECT_EQ(report.records_replayed, next_lsn_ - covered_);
  EXPECT_EQ(report.next_lsn, next_lsn_);
}

TEST_F(SnapshotRecoveryTest, AcceptedDependenciesSurviveARestartFromASnapshotAndTheTail) {
  uint64_t digest;
  {
    LoggedEngine e;
    LogOptions options;
    options.segment_bytes = 16 << 10;
    ASSERT_TRUE(e.Open(fs_.get(), kDir, {}, options).ok());
    EnqueueFamily(*e.engine);
    ASSERT_TRUE(e.Sync().ok());
    CheckpointOptions checkpoint;
    checkpoint.engine_options = TestEngineOptions();
    Checkpointer checkpointer(fs_.get(), kDir, e.log.get(), checkpoint);
    auto result = checkpointer.RunOnce();
    ASSERT_TRUE(result.ok()) << result.status().detail();
    // After the snapshot, in the tail: another dependent, and a purge that fails one.
    ASSERT_TRUE(e.engine->CreateQueue("late", {}).ok());
    ASSERT_TRUE(e.engine->Enqueue("late", {Item("x")})[0].ok());
    ASSERT_TRUE(e.engine->Enqueue("late", {After("y", {"x", "jobs/p2"})})[0].ok());
    ASSERT_TRUE(e.engine->Enqueue("jobs", {After("z", {"late/x"})})[0].ok());
    ASSERT_EQ(e.engine->PurgeQueue("late", {MessageState::kPending}).value(), 1u);
    ASSERT_EQ(StateIn(*e.engine, "jobs", "z"), MessageState::kCanceled);
    ASSERT_TRUE(e.Sync().ok());
    digest = e.engine->Digest();
  }
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), digest);
  EXPECT_FALSE(report.snapshot.empty());
  EXPECT_GT(report.records_replayed, 0u);
  uint64_t after;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    EXPECT_EQ(e.engine->Digest(), digest);
    EXPECT_EQ(StateIn(*e.engine, "late", "y"), MessageState::kCanceled);
    EXPECT_EQ(e.engine->Get("late", "y")->last_error, "dependency late/x removed");
    FinishFamily(*e.engine);
    ASSERT_TRUE(e.Sync().ok());
    after = e.engine->Digest();
    // A second checkpoint now: its snapshot holds the graph as it is after the releases.
    CheckpointOptions checkpoint;
    checkpoint.engine_options = TestEngineOptions();
    Checkpointer checkpointer(fs_.get(), kDir, e.log.get(), checkpoint);
    ASSERT_TRUE(checkpointer.RunOnce().ok());
  }
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), after);
}

TEST_F(SnapshotRecoveryTest, DependenciesOfARandomWorkloadRecoverFromASnapshotAndTheTail) {
  LoggedEngine e;
  LogOptions options;
  options.segment_bytes = 16 << 10;
  ASSERT_TRUE(e.Open(fs_.get(), kDir, {}, options).ok());
  RandomOps workload(13, /*with_dependencies=*/true);
  workload.Setup(*e.engine);
  workload.Run(*e.engine, e.clock, 3'000);
  ASSERT_TRUE(e.Sync().ok());
  EXPECT_GT(Waiting(*e.engine), 0u) << "the snapshot should hold waiting messages";
  EXPECT_GT(GraphEntries(*e.engine), Waiting(*e.engine)) << "and released dependents";
  CheckpointOptions checkpoint;
  checkpoint.engine_options = TestEngineOptions();
  Checkpointer checkpointer(fs_.get(), kDir, e.log.get(), checkpoint);
  ASSERT_TRUE(checkpointer.RunOnce().ok());
  workload.Run(*e.engine, e.clock, 1'500);
  ASSERT_TRUE(e.Sync().ok());
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), e.engine->Digest());
  EXPECT_FALSE(report.snapshot.empty());
}

TEST_F(SnapshotRecoveryTest, ALargeSnapshotLoadsAndDamageInItIsFoundAtItsOffset) {
  const uint64_t digest = PopulateWithCheckpoint(30'000, 300);
  const std::string path = JoinPath(kDir, SnapshotFileName(covered_));
  std::string bytes = Contents(path);
  ASSERT_TRUE(EffectPipeline::WorthAThread(bytes.size()));
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), digest);
  EXPECT_EQ(report.snapshot, SnapshotFileName(covered_));

  const auto offsets = RecordOffsets(path, /*snapshot=*/true);
  const uint64_t offset = offsets[offsets.size() * 2 / 3];
  FlipByte(&bytes, offset + kRecordHeaderBytes + 1);
  Overwrite(path, bytes);
  RecoveryReport refused;
  EXPECT_EQ(TryRecover(&refused).code(), Code::kInternal);
  ASSERT_TRUE(refused.damage);
  EXPECT_EQ(refused.damage->file, SnapshotFileName(covered_));
  EXPECT_EQ(refused.damage->offset, offset);
}

TEST_F(SnapshotRecoveryTest, AnUnfinishedSnapshotIsDeletedAndIgnored) {
  const uint64_t digest = PopulateWithCheckpoint(500, 200);
  const std::string temp = JoinPath(kDir, SnapshotFileName(next_lsn_ + 99) + ".tmp");
  Overwrite(temp, "half a snapshot");
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), digest);
  EXPECT_FALSE(fs_->FileExists(temp));
  ASSERT_EQ(report.removed_files.size(), 1u);
}

TEST_F(SnapshotRecoveryTest, ADamagedSnapshotRefusesTheStartAndRepairFallsBack) {
  PopulateWithCheckpoint(500, 200);
  const std::string path = JoinPath(kDir, SnapshotFileName(covered_));
  std::string bytes = Contents(path);
  const uint64_t offset = RecordOffsets(path, /*snapshot=*/true)[2];
  FlipByte(&bytes, offset + kRecordHeaderBytes + 1);
  Overwrite(path, bytes);
  RecoveryReport report;
  EXPECT_EQ(TryRecover(&report).code(), Code::kInternal);
  ASSERT_TRUE(report.damage);
  EXPECT_EQ(report.damage->file, SnapshotFileName(covered_));
  EXPECT_EQ(report.damage->offset, offset);
  // Repair gives the snapshot up; the segments it covered are gone, so the log is cut at the
  // first segment (a gap) and the result is the empty state — reported, never silent.
  RecoveryOptions repair;
  repair.repair = true;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report, repair),
            Engine(TestEngineOptions(), nullptr, nullptr).Digest());
  EXPECT_EQ(report.dropped_files.front(), SnapshotFileName(covered_));
  EXPECT_TRUE(fs_->FileExists(path + ".damaged"));
}

TEST_F(SnapshotRecoveryTest, ASegmentStartingAfterTheSnapshotIsAGap) {
  PopulateWithCheckpoint(500, 200);
  // Pretend the snapshot is older than it is: its segments are gone.
  const std::string path = JoinPath(kDir, SnapshotFileName(covered_));
  ASSERT_TRUE(fs_->RemoveFile(path).ok());
  RecoveryReport report;
  EXPECT_EQ(TryRecover(&report).code(), Code::kInternal);
  ASSERT_TRUE(report.damage);
  EXPECT_NE(report.damage->reason.find("LSN gap"), std::string::npos);
}

TEST_F(SnapshotRecoveryTest, RepairOfDamageBelowTheSnapshotLosesNothing) {
  // A checkpoint that crashed after the rename left its covered segments behind.
  LoggedEngine e;
  LogOptions options;
  options.segment_bytes = 8 << 10;
  ASSERT_TRUE(e.Open(fs_.get(), kDir, {}, options).ok());
  RandomOps workload(9);
  workload.Setup(*e.engine);
  workload.Run(*e.engine, e.clock, 2'000);
  ASSERT_TRUE(e.Sync().ok());
  CheckpointOptions checkpoint;
  checkpoint.engine_options = TestEngineOptions();
  Checkpointer checkpointer(fs_.get(), kDir, e.log.get(), checkpoint);
  auto crashed = checkpointer.RunOnce([](CheckpointStep step) {
    return step == CheckpointStep::kSnapshotRenamed ? Status(Code::kInternal, "test: crash")
                                                    : Status::Ok();
  });
  ASSERT_FALSE(crashed.ok());
  workload.Run(*e.engine, e.clock, 500);
  ASSERT_TRUE(e.Sync().ok());
  const uint64_t digest = e.engine->Digest();
  e.log.reset();
  const auto names = SegmentNames(fs_.get(), kDir);
  ASSERT_GE(names.size(), 4u);
  // Bit rot in the second segment, which the snapshot covers.
  const std::string second = SegmentPath(1);
  std::string bytes = Contents(second);
  FlipByte(&bytes, RecordOffsets(second)[2] + kRecordHeaderBytes);
  Overwrite(second, bytes);

  RecoveryReport report;
  EXPECT_EQ(TryRecover(&report).code(), Code::kInternal);  // still reported without repair
  RecoveryOptions repair;
  repair.repair = true;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report, repair), digest);
  ASSERT_TRUE(report.damage);
  EXPECT_NE(report.damage->reason.find("nothing lost"), std::string::npos);
  EXPECT_TRUE(report.dropped_files.empty());
  EXPECT_FALSE(fs_->FileExists(second));
  // The next start needs no repair and has everything.
  RecoveryReport after;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &after), digest);
  EXPECT_FALSE(after.damage);
}

TEST_F(SnapshotRecoveryTest, ACheckpointKilledBeforeItsNewSegmentHadAHeaderRestartsTwice) {
  // Found by the crash torture (tests/torture, failpoint checkpoint.after_rename): the
  // checkpoint rotated to an empty segment, renamed its snapshot and was killed before deleting
  // the segments the snapshot covers. The first start removed the empty (torn) segment and
  // the covered ones, then made "the last segment kept" durable by opening it for append,
  // which created it again, empty; the second start refused an empty segment that is not the
  // last as damage.
  LoggedEngine e;
  LogOptions options;
  options.segment_bytes = 8 << 10;
  ASSERT_TRUE(e.Open(fs_.get(), kDir, {}, options).ok());
  RandomOps workload(11);
  workload.Setup(*e.engine);
  workload.Run(*e.engine, e.clock, 1'000);
  ASSERT_TRUE(e.Sync().ok());
  CheckpointOptions checkpoint;
  checkpoint.engine_options = TestEngineOptions();
  Checkpointer checkpointer(fs_.get(), kDir, e.log.get(), checkpoint);
  auto crashed = checkpointer.RunOnce([](CheckpointStep step) {
    return step == CheckpointStep::kSnapshotRenamed ? Status(Code::kInternal, "test: crash")
                                                    : Status::Ok();
  });
  ASSERT_FALSE(crashed.ok());
  const uint64_t digest = e.engine->Digest();
  e.log.reset();
  const auto names = SegmentNames(fs_.get(), kDir);
  ASSERT_GE(names.size(), 2u);
  const std::string newest = JoinPath(kDir, names.back());
  const std::string covered = JoinPath(kDir, names[names.size() - 2]);
  Overwrite(newest, "");  // the kill came before its header reached the file

  {
    LoggedEngine first;
    ASSERT_TRUE(first.Open(fs_.get(), kDir).ok());
    EXPECT_EQ(first.engine->Digest(), digest);
    EXPECT_FALSE(fs_->FileExists(covered));  // deleted, not created again
  }
  RecoveryReport second;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &second), digest);
  EXPECT_FALSE(second.damage);
}

TEST(RecoverySyncTest, RecordsReplayedFromThePageCacheAreMadeDurable) {
  // A kill -9 after the write and before the fdatasync: the bytes are in the file (the page
  // cache) but not durable. Recovery replays them, so it must make them durable before the
  // log builds on them: a power loss afterwards must not take them away.
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem faulty(memory.get());
  ASSERT_TRUE(faulty.CreateDir(kDir).ok());
  {
    FileHeader header;
    header.file_number = 1;
    auto file = faulty.NewWritableFile(JoinPath(kDir, SegmentFileName(1)));
    ASSERT_TRUE(file.ok());
    LogWriter writer(std::move(*file), header);
    ASSERT_TRUE(writer.WriteHeader().ok());
    Effect created = SampleEffects()[0];
    created.queue = "jobs";
    created.settings = &kDefaultSettings;
    ASSERT_TRUE(writer.AddEffect(created).ok());
    ASSERT_TRUE(writer.Flush().ok());  // written, never synced
  }
  ASSERT_EQ(faulty.SyncedBytes(JoinPath(kDir, SegmentFileName(1))), 0u);
  RecoveryReport report;
  const uint64_t digest = RecoveredDigest(&faulty, kDir, &report);
  EXPECT_EQ(report.next_lsn, 1u);
  ASSERT_TRUE(faulty.SimulateCrash().ok());  // power loss right after recovery
  EXPECT_EQ(RecoveredDigest(memory.get(), kDir), digest);
}

// ---- Batches (docs/semantics.md, "Batches") --------------------------------------------------

// Batch "b" with a callback into "done"; members m1..m3 across "jobs" and "other"; sealed; m1
// completed and m2 canceled. One member (other/m3) is still active.
void StartBatch(Engine& engine) {
  CreateBatchRequest request;
  request.id = "b";
  request.callback = BatchCallback{"done", "", 1, "report", {{"kind", "import"}}, std::nullopt};
  ASSERT_TRUE(engine.CreateBatch(request).ok());
  for (auto [queue, id] : {std::pair{"jobs", "m1"}, {"jobs", "m2"}, {"other", "m3"}}) {
    EnqueueItem item = Item(id);
    item.batch = "b";
    ASSERT_TRUE(engine.Enqueue(queue, {item})[0].ok());
  }
  ASSERT_TRUE(engine.SealBatch("b").ok());
  ASSERT_EQ(CompleteNext(engine, "jobs"), "m1");
  ASSERT_TRUE(engine.Cancel("jobs", {"m2"})[0].ok());
  ASSERT_FALSE(engine.GetBatch("b")->done);
}

// On a recovered engine: the batch as StartBatch left it; the last member's completion
// enqueues the callback once.
void EndBatch(Engine& engine) {
  Result<BatchInfo> b = engine.GetBatch("b");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->sealed);
  EXPECT_FALSE(b->done);
  EXPECT_EQ(b->counts, (BatchCounts{3, 1, 1, 0}));
  EXPECT_EQ(engine.Get("done", "batch:b").status().code(), Code::kNotFound);
  ASSERT_EQ(CompleteNext(engine, "other"), "m3");
  EXPECT_TRUE(engine.GetBatch("b")->done);
  EXPECT_EQ(engine.Get("done", "batch:b")->version, 1u);
}

// After EndBatch, on a recovered engine: the callback is there once, unchanged.
void ExpectOneCallback(const Engine& engine) {
  Result<MessageRecord> cb = engine.Get("done", "batch:b");
  ASSERT_TRUE(cb.ok());
  EXPECT_EQ(cb->state, MessageState::kPending);
  EXPECT_EQ(cb->version, 1u);
  Result<QueueInfo> done = engine.GetQueue("done");
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->counts[MessageState::kPending], 1u);
  EXPECT_TRUE(engine.GetBatch("b")->done);
}

TEST_F(RecoveryTest, ABatchCallbackIsNeitherLostNorDoubledAcrossRestartsFromTheLogAlone) {
  uint64_t digest;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    StartBatch(*e.engine);
    ASSERT_TRUE(e.Sync().ok());
    digest = e.engine->Digest();
  }
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir), digest);
  uint64_t after;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    EXPECT_EQ(e.engine->Digest(), digest);
    EndBatch(*e.engine);
    ASSERT_TRUE(e.Sync().ok());
    after = e.engine->Digest();
  }
  // The callback was derived, not logged: replaying the completion derives it, once.
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir), after);
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
  ExpectOneCallback(*e.engine);
  // The batch's retention: removed (logged), and after another restart still gone.
  e.clock.Advance(3'600'000);
  e.engine->Advance(e.clock.NowMs());
  EXPECT_EQ(e.engine->GetBatch("b").status().code(), Code::kNotFound);
  ASSERT_TRUE(e.Sync().ok());
  const uint64_t removed = e.engine->Digest();
  ASSERT_TRUE(e.log->Close().ok());
  e.log.reset();
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir), removed);
}

TEST_F(SnapshotRecoveryTest, ABatchCallbackIsNeitherLostNorDoubledFromASnapshotAndTheTail) {
  uint64_t digest;
  CheckpointOptions checkpoint;
  checkpoint.engine_options = TestEngineOptions();
  {
    LoggedEngine e;
    LogOptions options;
    options.segment_bytes = 16 << 10;
    ASSERT_TRUE(e.Open(fs_.get(), kDir, {}, options).ok());
    StartBatch(*e.engine);
    ASSERT_TRUE(e.Sync().ok());
    Checkpointer checkpointer(fs_.get(), kDir, e.log.get(), checkpoint);
    ASSERT_TRUE(checkpointer.RunOnce().ok());
    // In the tail: another open batch with one member.
    CreateBatchRequest late;
    late.id = "late";
    ASSERT_TRUE(e.engine->CreateBatch(late).ok());
    EnqueueItem item = Item("x");
    item.batch = "late";
    ASSERT_TRUE(e.engine->Enqueue("other", {item})[0].ok());
    ASSERT_TRUE(e.Sync().ok());
    digest = e.engine->Digest();
  }
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), digest);
  EXPECT_FALSE(report.snapshot.empty());
  uint64_t after;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
    EXPECT_EQ(e.engine->Digest(), digest);
    EXPECT_EQ(e.engine->GetBatch("late")->counts.members, 1u);
    EndBatch(*e.engine);
    ASSERT_TRUE(e.Sync().ok());
    after = e.engine->Digest();
    // A second snapshot, holding the done batch and its callback.
    Checkpointer checkpointer(fs_.get(), kDir, e.log.get(), checkpoint);
    ASSERT_TRUE(checkpointer.RunOnce().ok());
  }
  EXPECT_EQ(RecoveredDigest(fs_.get(), kDir, &report), after);
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs_.get(), kDir).ok());
  ExpectOneCallback(*e.engine);
}

}  // namespace
}  // namespace sundial::wal::test
