// Checkpoints (issue "Write-ahead log", item 4): a checkpoint writes a snapshot of a log prefix
// and deletes what it covers; a crash at each of its steps recovers the same state; disk use
// stays within a small multiple of the live data however long the log runs; Due follows the
// size, growth and segment-count rules.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "engine/pages.h"
#include "tests/wal/forwarding_file_system.h"
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

// The replay builds a second engine from the log; when the checkpoint ends every block of it is
// given back to the kernel (the server's RSS should not keep a copy of the queue).
TEST(CheckpointTest, AReplayCheckpointGivesBackThePrivateEnginesMemory) {
  auto fs = NewMemoryFileSystem();
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs.get(), kDir).ok());
  for (int batch = 0; batch < 400; ++batch) {
    std::vector<EnqueueItem> items;
    for (int i = 0; i < 100; ++i) {
      items.push_back(Item("m" + std::to_string(batch * 100 + i)));
      items.back().payload = std::string(100, 'x');
    }
    for (const auto& r : e.engine->Enqueue("jobs", std::move(items))) {
      ASSERT_TRUE(r.ok()) << r.status().ToString();
    }
  }
  ASSERT_TRUE(e.Sync().ok());
  const uint64_t mapped = pages::MappedBytes();
  ASSERT_GT(mapped, 4u << 20);  // the live queue's blocks: what a copy would add again

  Checkpointer checkpointer(fs.get(), kDir, e.log.get(), SmallCheckpoints());
  ASSERT_TRUE(checkpointer.RunOnce().ok());
  ASSERT_TRUE(checkpointer.RunOnce().ok());  // from the first one's snapshot
  EXPECT_EQ(pages::MappedBytes(), mapped);
}

// ---- A crash at each step ------------------------------------------------------------------

struct CrashPoint {
  CheckpointStep step;
  int occurrence;  // the n-th time the hook sees `step` (kFileRemoved happens several times)
  const char* name;
};

class CheckpointCrashTest : public ::testing::TestWithParam<CrashPoint> {};

CheckpointOptions Mode(CheckpointMode mode) {
  CheckpointOptions o = SmallCheckpoints();
  o.mode = mode;
  return o;
}

// The workload with dependencies (RandomOps): the snapshot then carries waiting messages and
// the graph, and the log after it the enqueues and causes that recovery replays on top. A fork
// checkpoint writes from the live engine, on a real directory (the replay one on memory).
void CrashAtStep(const CrashPoint& point, bool with_dependencies, CheckpointMode mode) {
  const bool fork = mode == CheckpointMode::kFork;
  TempDir temp;
  const std::string dir = fork ? temp.path() : kDir;
  ASSERT_FALSE(dir.empty());
  auto base = fork ? NewPosixFileSystem() : NewMemoryFileSystem();
  FaultInjectionFileSystem faulty(base.get());
  uint64_t digest = 0;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(&faulty, dir, {}, SmallSegments()).ok());
    RandomOps workload(2, with_dependencies);
    workload.Setup(*e.engine);
    workload.Run(*e.engine, e.clock, 1'500);
    ASSERT_TRUE(e.Sync().ok());
    Checkpointer checkpointer(&faulty, dir, e.log.get(), Mode(mode), e.engine.get());
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
    EXPECT_EQ(checkpointer.stats().fork_fallbacks, 0u);
    ASSERT_TRUE(faulty.SimulateCrash().ok());  // unsynced bytes are lost
  }
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(base.get(), dir, &report), digest) << report.Summary();
  // Recovery finished what the checkpoint left: one snapshot, no temp files, no covered
  // segments.
  auto names = *base->ListDir(dir);
  for (const auto& n : names) EXPECT_EQ(n.find(".tmp"), std::string::npos) << n;
  EXPECT_EQ(SnapshotNames(base.get(), dir).size(), 1u);
  // And the directory goes on: log more, checkpoint, recover.
  LoggedEngine again;
  ASSERT_TRUE(again.Open(base.get(), dir, {}, SmallSegments()).ok());
  EXPECT_EQ(again.engine->Digest(), digest);
  RandomOps more(3, with_dependencies);
  more.Run(*again.engine, again.clock, 300);
  ASSERT_TRUE(again.Sync().ok());
  Checkpointer checkpointer(base.get(), dir, again.log.get(), Mode(mode), again.engine.get());
  auto last = checkpointer.RunOnce();
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->forked, fork);
  const uint64_t final_digest = again.engine->Digest();
  again.log.reset();
  EXPECT_EQ(RecoveredDigest(base.get(), dir), final_digest);
}

TEST_P(CheckpointCrashTest, ACrashAtThisStepRecoversTheAcknowledgedState) {
  CrashAtStep(GetParam(), /*with_dependencies=*/false, CheckpointMode::kReplay);
}

TEST_P(CheckpointCrashTest, ACrashAtThisStepRecoversTheAcknowledgedDependencies) {
  CrashAtStep(GetParam(), /*with_dependencies=*/true, CheckpointMode::kReplay);
}

TEST_P(CheckpointCrashTest, ACrashAtThisStepOfAForkCheckpointRecoversTheAcknowledgedState) {
  CrashAtStep(GetParam(), /*with_dependencies=*/true, CheckpointMode::kFork);
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

// ---- Fork mode --------------------------------------------------------------------------------

// A logged engine on a real directory with fork checkpoints of it.
struct ForkFixture {
  TempDir temp;
  std::unique_ptr<FileSystem> posix = NewPosixFileSystem();
  // A test's wrapper of `posix`: it outlives the log, whose files it may have opened.
  std::unique_ptr<FileSystem> wrapper;
  LoggedEngine e;
  RandomOps workload{21, /*with_dependencies=*/true};

  template <typename Wrapper>
  Wrapper* Wrap(std::unique_ptr<Wrapper> w) {
    Wrapper* raw = w.get();
    wrapper = std::move(w);
    return raw;
  }

  void Open(FileSystem* fs) {
    ASSERT_FALSE(temp.path().empty());
    ASSERT_TRUE(e.Open(fs, temp.path(), {}, SmallSegments()).ok());
    workload.Setup(*e.engine);
    workload.Run(*e.engine, e.clock, 1'500);
    ASSERT_TRUE(e.Sync().ok());
  }
  std::vector<std::string> TempFiles() {
    std::vector<std::string> out;
    auto names = posix->ListDir(temp.path());
    for (const auto& n : *names) {
      if (n.find(".tmp") != std::string::npos) out.push_back(n);
    }
    return out;
  }
};

TEST(ForkCheckpointTest, AForkedChildWritesTheLiveStateAndTheParentDeletesWhatItCovers) {
  ForkFixture f;
  f.Open(f.posix.get());
  const size_t segments_before = SegmentNames(f.posix.get(), f.temp.path()).size();
  ASSERT_GT(segments_before, 4u);
  const uint64_t end = f.e.log->NextLsn();
  Checkpointer checkpointer(f.posix.get(), f.temp.path(), f.e.log.get(),
                            Mode(CheckpointMode::kFork), f.e.engine.get());
  auto result = checkpointer.RunOnce();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->forked);
  EXPECT_EQ(result->covered_lsn, end);  // nothing was appended after the rotation
  EXPECT_EQ(result->segments_removed, segments_before);
  EXPECT_GT(result->effects, 0u);
  EXPECT_EQ(SnapshotNames(f.posix.get(), f.temp.path()),
            std::vector<std::string>{SnapshotFileName(end)});
  // The same file as the replay would write from the log: the state and its digest.
  f.workload.Run(*f.e.engine, f.e.clock, 500);
  ASSERT_TRUE(f.e.Sync().ok());
  const uint64_t digest = f.e.engine->Digest();
  f.e.log.reset();
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(f.posix.get(), f.temp.path(), &report), digest);
  EXPECT_EQ(report.snapshot, SnapshotFileName(end));
  EXPECT_GT(report.records_replayed, 0u);
}

// Records appended between the rotation and the fork are in the snapshot; recovery skips them
// in the segment that holds them and replays the rest.
TEST(ForkCheckpointTest, TheCutFallsInsideASegmentAndRecoverySkipsWhatTheSnapshotHolds) {
  ForkFixture f;
  f.Open(f.posix.get());
  Checkpointer checkpointer(f.posix.get(), f.temp.path(), f.e.log.get(),
                            Mode(CheckpointMode::kFork), f.e.engine.get());
  uint64_t rotated_at = 0;
  auto result = checkpointer.RunOnce([&](CheckpointStep step) {
    if (step == CheckpointStep::kRotated) {
      rotated_at = f.e.log->NextLsn();
      for (int i = 0; i < 5; ++i) {
        EXPECT_TRUE(f.e.engine->Enqueue("simple", {Item("cut-" + std::to_string(i))})[0].ok());
      }
    }
    return Status::Ok();
  });
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->covered_lsn, rotated_at + 5);
  // The parent waited for those five before it renamed: durable, though nobody committed them.
  EXPECT_GE(f.e.log->DurableEnd(), rotated_at + 5);
  const auto segments = SegmentNames(f.posix.get(), f.temp.path());
  ASSERT_EQ(segments.size(), 1u);  // the one the rotation started, holding the five
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(f.e.engine->Enqueue("simple", {Item("after-" + std::to_string(i))})[0].ok());
  }
  ASSERT_TRUE(f.e.Sync().ok());
  const uint64_t digest = f.e.engine->Digest();
  f.e.log.reset();
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(f.posix.get(), f.temp.path(), &report), digest) << report.Summary();
  EXPECT_EQ(report.snapshot_lsn, rotated_at + 5);
  EXPECT_EQ(report.records_replayed, 7u);
}

// A file system whose snapshot temp files kill the process that creates them, when that is not
// the test's own: the checkpoint's child dies as if the OOM killer took it.
class KillTheWriter final : public ForwardingFileSystem {
 public:
  explicit KillTheWriter(FileSystem* base) : ForwardingFileSystem(base), test_pid_(::getpid()) {}
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    if (::getpid() != test_pid_ && path.ends_with(".snap.tmp")) ::raise(SIGKILL);
    return base()->NewWritableFile(path);
  }

 private:
  const pid_t test_pid_;
};

TEST(ForkCheckpointTest, AChildThatDiesFailsThatCheckpointAndNothingElse) {
  ForkFixture f;
  KillTheWriter& killing = *f.Wrap(std::make_unique<KillTheWriter>(f.posix.get()));
  f.Open(&killing);
  const auto segments_before = SegmentNames(f.posix.get(), f.temp.path());
  Checkpointer checkpointer(&killing, f.temp.path(), f.e.log.get(), Mode(CheckpointMode::kFork),
                            f.e.engine.get());
  auto result = checkpointer.RunOnce();
  EXPECT_EQ(result.status().code(), Code::kInternal);
  EXPECT_NE(result.status().Message().find("killed by signal 9"), std::string::npos)
      << result.status().ToString();
  EXPECT_EQ(checkpointer.stats().failures, 1u);
  EXPECT_EQ(checkpointer.stats().fork_fallbacks, 0u);  // there was a child: no replay instead
  EXPECT_TRUE(SnapshotNames(f.posix.get(), f.temp.path()).empty());
  EXPECT_TRUE(f.TempFiles().empty());
  // Nothing deleted (one more segment: the rotation's), the log goes on, and the next
  // checkpoint, with a writer that lives, covers everything.
  EXPECT_EQ(SegmentNames(f.posix.get(), f.temp.path()).size(), segments_before.size() + 1);
  EXPECT_TRUE(f.e.log->failure().ok());
  f.workload.Run(*f.e.engine, f.e.clock, 200);
  ASSERT_TRUE(f.e.Sync().ok());
  Checkpointer living(f.posix.get(), f.temp.path(), f.e.log.get(), Mode(CheckpointMode::kFork),
                      f.e.engine.get());
  auto next = living.RunOnce();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  const uint64_t digest = f.e.engine->Digest();
  f.e.log.reset();
  EXPECT_EQ(RecoveredDigest(f.posix.get(), f.temp.path()), digest);
}

TEST(ForkCheckpointTest, AChildsWriteErrorComesBackTypedAndLeavesNoTempFile) {
  ForkFixture f;
  FaultInjectionFileSystem& faulty =
      *f.Wrap(std::make_unique<FaultInjectionFileSystem>(f.posix.get()));
  f.Open(&faulty);
  Checkpointer checkpointer(&faulty, f.temp.path(), f.e.log.get(), Mode(CheckpointMode::kFork),
                            f.e.engine.get());
  auto result = checkpointer.RunOnce([&](CheckpointStep step) {
    // The log is idle now: the next append is the snapshot's, in the child's copy of `faulty`.
    if (step == CheckpointStep::kRotated) faulty.FailNextAppendWithNoSpace();
    return Status::Ok();
  });
  EXPECT_EQ(result.status().code(), Code::kResourceExhausted) << result.status().ToString();
  EXPECT_TRUE(f.TempFiles().empty());
  EXPECT_TRUE(SnapshotNames(f.posix.get(), f.temp.path()).empty());
  EXPECT_TRUE(f.e.log->failure().ok());
}

pid_t ForkThatFails() {
  errno = EAGAIN;
  return -1;
}

TEST(ForkCheckpointTest, WhenForkFailsTheReplayWritesTheCheckpointAndItIsCounted) {
  ForkFixture f;
  f.Open(f.posix.get());
  CheckpointOptions options = Mode(CheckpointMode::kFork);
  options.fork = ForkThatFails;
  Checkpointer checkpointer(f.posix.get(), f.temp.path(), f.e.log.get(), options, f.e.engine.get());
  const uint64_t end = f.e.log->NextLsn();
  auto result = checkpointer.RunOnce();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_FALSE(result->forked);
  EXPECT_EQ(result->covered_lsn, end);
  EXPECT_EQ(checkpointer.stats().fork_fallbacks, 1u);
  EXPECT_EQ(checkpointer.stats().failures, 0u);
  const uint64_t digest = f.e.engine->Digest();
  f.e.log.reset();
  EXPECT_EQ(RecoveredDigest(f.posix.get(), f.temp.path()), digest);
}

// Without the engine there is nothing to fork: the replay runs, and that is no fallback.
TEST(ForkCheckpointTest, WithoutTheLiveEngineCheckpointsReplay) {
  ForkFixture f;
  f.Open(f.posix.get());
  Checkpointer checkpointer(f.posix.get(), f.temp.path(), f.e.log.get(),
                            Mode(CheckpointMode::kFork));
  auto result = checkpointer.RunOnce();
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->forked);
  EXPECT_EQ(checkpointer.stats().fork_fallbacks, 0u);
}

// A file system on which the checkpoint's child, once it starts its snapshot, says so with a
// marker file and then waits until it is killed.
class HangTheWriter final : public ForwardingFileSystem {
 public:
  HangTheWriter(FileSystem* base, std::string marker)
      : ForwardingFileSystem(base), marker_(std::move(marker)), test_pid_(::getpid()) {}
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    if (::getpid() != test_pid_ && path.ends_with(".snap.tmp")) {
      (void)base()->NewWritableFile(path);  // the temp file exists, as a real writer's would
      (void)base()->NewWritableFile(marker_);
      for (;;) ::pause();
    }
    return base()->NewWritableFile(path);
  }

 private:
  const std::string marker_;
  const pid_t test_pid_;
};

// Stop does not wait for a snapshot that takes long: it kills the writer, whose checkpoint
// ends as "stopped" and leaves no temp file.
TEST(ForkCheckpointTest, StopKillsAWriterInProgress) {
  ForkFixture f;
  TempDir elsewhere;
  const std::string marker = JoinPath(elsewhere.path(), "writing");
  HangTheWriter& hanging = *f.Wrap(std::make_unique<HangTheWriter>(f.posix.get(), marker));
  f.Open(&hanging);
  Checkpointer checkpointer(&hanging, f.temp.path(), f.e.log.get(), Mode(CheckpointMode::kFork),
                            f.e.engine.get());
  Result<CheckpointResult> result = Status(Code::kInternal, "test: not run");
  std::thread running([&] { result = checkpointer.RunOnce(); });
  // The child is writing (and will until killed) once the marker exists.
  for (int i = 0; i < 30'000 && !f.posix->FileExists(marker); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool writing = f.posix->FileExists(marker);
  checkpointer.Stop();
  running.join();
  ASSERT_TRUE(writing);
  EXPECT_EQ(result.status().code(), Code::kUnavailable);
  EXPECT_EQ(result.status().detail(), "checkpoint: stopped with the server")
      << result.status().ToString();
  EXPECT_TRUE(f.TempFiles().empty());
  EXPECT_TRUE(SnapshotNames(f.posix.get(), f.temp.path()).empty());
}

}  // namespace
}  // namespace sundial::wal::test
