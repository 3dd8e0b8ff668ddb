// Checkpoints (issue "Write-ahead log", item 4): a checkpoint writes a snapshot of a log prefix
// and deletes what it covers; a crash at each of its steps recovers the same state; disk use
// stays within a small multiple of the live data however long the log runs; Due follows the
// size, growth and segment-count rules.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "tests/wal/recovery_test_util.h"
#include "tests/wal/wal_test_util.h"
#include "wal/checkpointer.h"
#include "wal/fault_injection_file_system.h"

namespace sundial::wal::test {
namespace {

const std::string kDir = "data";

uint64_t DiskBytes(FileSystem* fs, const std::string& dir) {
  uint64_t total = 0;
  auto names = fs->ListDir(dir);
  for (const auto& name : *names) total += *fs->FileSize(JoinPath(dir, name));
  return total;
}

CheckpointOptions SmallCheckpoints() {
  CheckpointOptions o;
  o.min_log_bytes = 32 << 10;
  o.growth_percent = 100;
  o.max_segments = 64;
  o.engine_options = TestEngineOptions();
  return o;
}

LogOptions SmallSegments() {
  LogOptions o;
  o.segment_bytes = 8 << 10;
  return o;
}

TEST(CheckpointTest, ACheckpointSnapshotsThePrefixAndDeletesWhatItCovers) {
  auto fs = NewMemoryFileSystem();
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs.get(), kDir, {}, SmallSegments()).ok());
  RandomOps workload(1);
  workload.Setup(*e.engine);
  workload.Run(*e.engine, e.clock, 2'000);
  ASSERT_TRUE(e.Sync().ok());
  const size_t segments_before = SegmentNames(fs.get(), kDir).size();
  ASSERT_GT(segments_before, 4u);
  const uint64_t digest = e.engine->Digest();
  const uint64_t end = e.log->stats().next_lsn;

  Checkpointer checkpointer(fs.get(), kDir, e.log.get(), SmallCheckpoints());
  auto result = checkpointer.RunOnce();
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->covered_lsn, end);
  EXPECT_EQ(result->segments_removed, segments_before);
  EXPECT_GT(result->effects, 0u);
  EXPECT_EQ(SegmentNames(fs.get(), kDir).size(), 1u);  // the new active segment
  EXPECT_EQ(SnapshotNames(fs.get(), kDir), std::vector<std::string>{SnapshotFileName(end)});
  EXPECT_EQ(checkpointer.stats().checkpoints, 1u);

  // A second one replaces the first snapshot.
  workload.Run(*e.engine, e.clock, 500);
  ASSERT_TRUE(e.Sync().ok());
  auto second = checkpointer.RunOnce();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->snapshots_removed, 1u);
  EXPECT_EQ(SnapshotNames(fs.get(), kDir).size(), 1u);
  const uint64_t final_digest = e.engine->Digest();
  EXPECT_NE(final_digest, digest);
  e.log.reset();
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs.get(), kDir, &report), final_digest);
  EXPECT_EQ(report.snapshot, SnapshotFileName(second->covered_lsn));
  EXPECT_EQ(report.records_replayed, 0u);
}

// ---- A crash at each step ------------------------------------------------------------------

struct CrashPoint {
  CheckpointStep step;
  int occurrence;  // the n-th time the hook sees `step` (kFileRemoved happens several times)
  const char* name;
};

class CheckpointCrashTest : public ::testing::TestWithParam<CrashPoint> {};

// The workload with dependencies (RandomOps): the snapshot then carries waiting messages and
// the graph, and the log after it the enqueues and causes that recovery replays on top.
void CrashAtStep(const CrashPoint& point, bool with_dependencies) {
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem faulty(memory.get());
  uint64_t digest = 0;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(&faulty, kDir, {}, SmallSegments()).ok());
    RandomOps workload(2, with_dependencies);
    workload.Setup(*e.engine);
    workload.Run(*e.engine, e.clock, 1'500);
    ASSERT_TRUE(e.Sync().ok());
    Checkpointer checkpointer(&faulty, kDir, e.log.get(), SmallCheckpoints());
    ASSERT_TRUE(checkpointer.RunOnce().ok());  // an older snapshot for the next one to delete
    workload.Run(*e.engine, e.clock, 1'500);
    ASSERT_TRUE(e.Sync().ok());
    digest = e.engine->Digest();

    int seen = 0;
    auto crashed = checkpointer.RunOnce([&](CheckpointStep step) {
      if (step == point.step && ++seen == point.occurrence) {
        return Status(Code::kInternal, "test: crash here");
      }
      return Status::Ok();
    });
    ASSERT_FALSE(crashed.ok());
    EXPECT_EQ(crashed.status().detail(), "test: crash here");
    ASSERT_TRUE(faulty.SimulateCrash().ok());  // unsynced bytes are lost
  }
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(memory.get(), kDir, &report), digest) << report.Summary();
  // Recovery finished what the checkpoint left: one snapshot, no temp files, no covered
  // segments.
  auto names = *memory->ListDir(kDir);
  for (const auto& n : names) EXPECT_EQ(n.find(".tmp"), std::string::npos) << n;
  EXPECT_EQ(SnapshotNames(memory.get(), kDir).size(), 1u);
  // And the directory goes on: log more, checkpoint, recover.
  LoggedEngine again;
  ASSERT_TRUE(again.Open(memory.get(), kDir, {}, SmallSegments()).ok());
  EXPECT_EQ(again.engine->Digest(), digest);
  RandomOps more(3, with_dependencies);
  more.Run(*again.engine, again.clock, 300);
  ASSERT_TRUE(again.Sync().ok());
  Checkpointer checkpointer(memory.get(), kDir, again.log.get(), SmallCheckpoints());
  ASSERT_TRUE(checkpointer.RunOnce().ok());
  const uint64_t final_digest = again.engine->Digest();
  again.log.reset();
  EXPECT_EQ(RecoveredDigest(memory.get(), kDir), final_digest);
}

TEST_P(CheckpointCrashTest, ACrashAtThisStepRecoversTheAcknowledgedState) {
  CrashAtStep(GetParam(), /*with_dependencies=*/false);
}

TEST_P(CheckpointCrashTest, ACrashAtThisStepRecoversTheAcknowledgedDependencies) {
  CrashAtStep(GetParam(), /*with_dependencies=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Steps, CheckpointCrashTest,
    ::testing::Values(CrashPoint{CheckpointStep::kRotated, 1, "AfterRotate"},
                      CrashPoint{CheckpointStep::kSnapshotTempSynced, 1, "BeforeRename"},
                      CrashPoint{CheckpointStep::kSnapshotRenamed, 1, "AfterRename"},
                      CrashPoint{CheckpointStep::kFileRemoved, 1, "AfterFirstDelete"},
                      CrashPoint{CheckpointStep::kFileRemoved, 3, "MidDelete"}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- Bounds and triggers -------------------------------------------------------------------

TEST(CheckpointTest, DiskUseStaysWithinASmallMultipleOfTheLiveDataHoweverLongItRuns) {
  auto fs = NewMemoryFileSystem();
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs.get(), kDir, {}, SmallSegments()).ok());
  RandomOps workload(4);
  workload.Setup(*e.engine);
  const CheckpointOptions options = SmallCheckpoints();
  Checkpointer checkpointer(fs.get(), kDir, e.log.get(), options);
  uint64_t checkpoints = 0, worst = 0;
  for (int round = 0; round < 60; ++round) {
    workload.Run(*e.engine, e.clock, 300);
    // Keep the live set steady: everything older than a few rounds is purged.
    if (round % 5 == 4) {
      for (const char* q : {"simple", "exclusive", "retried", "dlq"}) {
        (void)e.engine->PurgeQueue(q, {MessageState::kCompleted, MessageState::kCanceled,
                                       MessageState::kErrored, MessageState::kPending});
      }
    }
    ASSERT_TRUE(e.Sync().ok());
    auto due = checkpointer.Due();
    ASSERT_TRUE(due.ok());
    if (*due) {
      ASSERT_TRUE(checkpointer.RunOnce().ok());
      ++checkpoints;
    }
    // Live data: the newest snapshot's size (the state as of the last checkpoint).
    uint64_t snapshot = 0;
    for (const auto& s : SnapshotNames(fs.get(), kDir)) {
      snapshot = *fs->FileSize(JoinPath(kDir, s));
    }
    const uint64_t disk = DiskBytes(fs.get(), kDir);
    worst = std::max(worst, disk);
    EXPECT_LE(disk, 3 * snapshot + options.min_log_bytes + 2 * SmallSegments().segment_bytes)
        << "round " << round;
  }
  EXPECT_GE(checkpoints, 5u);
  // The bound is not trivial: far more was logged than is kept.
  EXPECT_GT(e.log->stats().bytes, 5 * worst);
}

TEST(CheckpointTest, DueFollowsLogSizeGrowthAndSegmentCount) {
  auto fs = NewMemoryFileSystem();
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs.get(), kDir, {}, SmallSegments()).ok());
  CheckpointOptions options = SmallCheckpoints();
  options.min_log_bytes = 40 << 10;
  options.max_segments = 1'000;
  Checkpointer checkpointer(fs.get(), kDir, e.log.get(), options);
  EXPECT_FALSE(*checkpointer.Due());  // nothing logged
  RandomOps workload(6);
  workload.Setup(*e.engine);
  while (DiskBytes(fs.get(), kDir) < options.min_log_bytes - (4 << 10)) {
    workload.Run(*e.engine, e.clock, 20);
    ASSERT_TRUE(e.Sync().ok());
  }
  EXPECT_FALSE(*checkpointer.Due());  // below min_log_bytes
  while (DiskBytes(fs.get(), kDir) < options.min_log_bytes) {
    workload.Run(*e.engine, e.clock, 20);
    ASSERT_TRUE(e.Sync().ok());
  }
  EXPECT_TRUE(*checkpointer.Due());  // no snapshot yet: size alone decides
  ASSERT_TRUE(checkpointer.RunOnce().ok());
  EXPECT_FALSE(*checkpointer.Due());
  const uint64_t snapshot = *fs->FileSize(JoinPath(kDir, SnapshotNames(fs.get(), kDir)[0]));
  auto segment_bytes = [&] { return DiskBytes(fs.get(), kDir) - snapshot; };
  const uint64_t threshold = std::max<uint64_t>(options.min_log_bytes, snapshot);
  while (segment_bytes() + (2 << 10) < threshold) {
    workload.Run(*e.engine, e.clock, 10);
    ASSERT_TRUE(e.Sync().ok());
    EXPECT_FALSE(*checkpointer.Due()) << segment_bytes() << " of " << threshold;
  }
  while (segment_bytes() < threshold) {
    workload.Run(*e.engine, e.clock, 10);
    ASSERT_TRUE(e.Sync().ok());
  }
  EXPECT_TRUE(*checkpointer.Due());

  // The segment count alone also triggers.
  CheckpointOptions by_count = SmallCheckpoints();
  by_count.min_log_bytes = 1ull << 40;
  by_count.max_segments = 3;
  Checkpointer counting(fs.get(), kDir, e.log.get(), by_count);
  ASSERT_TRUE(counting.RunOnce().ok());
  EXPECT_FALSE(*counting.Due());
  ASSERT_TRUE(e.log->Rotate().ok());
  EXPECT_FALSE(*counting.Due());  // 2 segments
  workload.Run(*e.engine, e.clock, 10);
  ASSERT_TRUE(e.Sync().ok());
  ASSERT_TRUE(e.log->Rotate().ok());
  EXPECT_TRUE(*counting.Due());  // 3 segments
}

// On a real disk the active segment is longer than what is logged in it (preallocated
// zeroes); a --checkpoint-bytes below the preallocation must not checkpoint after every write.
TEST(CheckpointTest, DueCountsWhatIsWrittenNotThePreallocatedFile) {
  std::string pattern = (std::filesystem::temp_directory_path() / "sundial-ckpt-XXXXXX").string();
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  const std::string dir = pattern;
  auto fs = NewPosixFileSystem();
  {
    LoggedEngine e;
    LogOptions log_options;
    log_options.preallocate_bytes = 1 << 20;
    ASSERT_TRUE(e.Open(fs.get(), dir, {}, log_options).ok());
    CheckpointOptions options = SmallCheckpoints();
    options.min_log_bytes = 64 << 10;
    Checkpointer checkpointer(fs.get(), dir, e.log.get(), options);
    RandomOps workload(7);
    workload.Setup(*e.engine);
    workload.Run(*e.engine, e.clock, 20);
    ASSERT_TRUE(e.Sync().ok());
    const std::string active = SegmentNames(fs.get(), dir).back();
    ASSERT_GE(*fs->FileSize(JoinPath(dir, active)), options.min_log_bytes);  // the zeroes
    EXPECT_FALSE(*checkpointer.Due());
    while (e.log->stats().segment_bytes < options.min_log_bytes) {
      workload.Run(*e.engine, e.clock, 50);
      ASSERT_TRUE(e.Sync().ok());
    }
    EXPECT_TRUE(*checkpointer.Due());
    ASSERT_TRUE(checkpointer.RunOnce().ok());
    EXPECT_FALSE(*checkpointer.Due());
  }
  std::filesystem::remove_all(dir);
}

TEST(CheckpointTest, TheBackgroundThreadCheckpointsWhenDue) {
  auto fs = NewMemoryFileSystem();
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs.get(), kDir, {}, SmallSegments()).ok());
  CheckpointOptions options = SmallCheckpoints();
  options.poll_ms = 1;
  Checkpointer checkpointer(fs.get(), kDir, e.log.get(), options);
  checkpointer.Start();
  RandomOps workload(8);
  workload.Setup(*e.engine);
  // Log until the thread has checkpointed twice (bounded: 20,000 batches).
  for (int i = 0; i < 20'000 && checkpointer.stats().checkpoints < 2; ++i) {
    workload.Run(*e.engine, e.clock, 50);
    ASSERT_TRUE(e.Sync().ok());
    if (i % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  checkpointer.Stop();
  EXPECT_GE(checkpointer.stats().checkpoints, 2u);
  EXPECT_EQ(checkpointer.stats().failures, 0u);
  const uint64_t digest = e.engine->Digest();
  e.log.reset();
  EXPECT_EQ(RecoveredDigest(fs.get(), kDir), digest);
}

TEST(CheckpointTest, AFailedLogRefusesToCheckpoint) {
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem faulty(memory.get());
  LoggedEngine e;
  ASSERT_TRUE(e.Open(&faulty, kDir).ok());
  faulty.FailNextSyncWithIoError();  // before the append: its group's sync is the next one
  ASSERT_TRUE(e.engine->Enqueue("jobs", {Item("a")})[0].ok());
  EXPECT_FALSE(e.Sync().ok());
  Checkpointer checkpointer(&faulty, kDir, e.log.get(), SmallCheckpoints());
  auto result = checkpointer.RunOnce();
  EXPECT_EQ(result.status().code(), Code::kUnavailable);
  EXPECT_EQ(checkpointer.stats().failures, 1u);
  EXPECT_TRUE(SnapshotNames(memory.get(), kDir).empty());
}

TEST(CheckpointTest, AFailedSnapshotWriteLeavesNoTempFile) {
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem faulty(memory.get());
  LoggedEngine e;
  ASSERT_TRUE(e.Open(&faulty, kDir).ok());
  RandomOps workload(12);
  workload.Setup(*e.engine);
  workload.Run(*e.engine, e.clock, 200);
  ASSERT_TRUE(e.Sync().ok());
  Checkpointer checkpointer(&faulty, kDir, e.log.get(), SmallCheckpoints());
  auto result = checkpointer.RunOnce([&](CheckpointStep step) {
    // The log is idle now: the next append is the snapshot's.
    if (step == CheckpointStep::kRotated) faulty.FailNextAppendWithNoSpace();
    return Status::Ok();
  });
  EXPECT_EQ(result.status().code(), Code::kResourceExhausted);
  auto names = memory->ListDir(kDir);
  for (const auto& n : *names) EXPECT_EQ(n.find(".tmp"), std::string::npos) << n;
  EXPECT_TRUE(SnapshotNames(memory.get(), kDir).empty());
  EXPECT_TRUE(e.log->failure().ok());  // a failed checkpoint does not touch the log
}

}  // namespace
}  // namespace sundial::wal::test
