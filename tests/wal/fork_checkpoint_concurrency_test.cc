// Fork checkpoints against writers (label "concurrency", run under TSan): the cut a fork
// checkpoint takes while threads keep changing the engine is exact. Each snapshot-L it writes
// must hold the very state that replaying the log's records below L gives, for a workload with
// dependencies, dead-letter moves, purges and timers on shared queues; and the directory
// recovers to the final state. No sleeps: the writers run until the checkpoints are done.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/wal/recovery_test_util.h"
#include "tests/wal/wal_test_util.h"
#include "wal/checkpointer.h"
#include "wal/recovery.h"
#include "wal/snapshot.h"

namespace sundial::wal::test {
namespace {

// The state after the records below `lsn`, from the segments of `dir` alone (copied into a
// directory of their own, where no snapshot can stand in for them).
uint64_t ReplayedDigest(FileSystem* fs, const std::string& dir, const std::string& scratch,
                        uint64_t lsn) {
  std::filesystem::remove_all(scratch);
  std::filesystem::create_directory(scratch);
  for (const std::string& name : SegmentNames(fs, dir)) {
    std::filesystem::copy_file(JoinPath(dir, name), JoinPath(scratch, name));
  }
  RecoveryOptions options;
  options.end_lsn = lsn;
  return RecoveredDigest(fs, scratch, nullptr, options);
}

TEST(ForkCheckpointConcurrencyTest, EverySnapshotIsTheLogReplayedToItsCut) {
  std::string pattern = (std::filesystem::temp_directory_path() / "sundial-fork-XXXXXX").string();
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  const std::string root = pattern;
  const std::string dir = JoinPath(root, "data");
  auto fs = NewPosixFileSystem();
  ASSERT_TRUE(fs->CreateDir(dir).ok());
  LogOptions log_options;
  log_options.segment_bytes = 64 << 10;
  std::vector<uint64_t> cuts;
  uint64_t final_digest = 0;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs.get(), dir, {}, log_options).ok());
    RandomOps(100, true).Setup(*e.engine);
    // The writers run until every checkpoint is done, each at most kOpsPerRound operations
    // per checkpoint (then it waits for the next one): each checkpoint forks among them, and
    // the log stays small enough to replay once per snapshot.
    constexpr int kThreads = 3;
    constexpr size_t kCheckpoints = 8;
    constexpr int kOpsPerRound = 1'500;
    std::atomic<uint64_t> round{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        RandomOps ops(200 + static_cast<uint64_t>(t), /*with_dependencies=*/true);
        while (!stop.load()) {
          const uint64_t mine = round.load();
          for (int done = 0; done < kOpsPerRound && round.load() == mine; done += 50) {
            ops.Run(*e.engine, e.clock, 50);
          }
          round.wait(mine);  // returns at once when the round moved on meanwhile
        }
      });
    }
    CheckpointOptions options;
    options.engine_options = TestEngineOptions();
    options.mode = CheckpointMode::kFork;
    Checkpointer checkpointer(fs.get(), dir, e.log.get(), options, e.engine.get());
    while (cuts.size() < kCheckpoints) {
      uint64_t rotated_at = 0;
      auto result = checkpointer.RunOnce([&](CheckpointStep step) {
        // One more record between the rotation and the fork, whatever the threads do: every
        // cut then falls inside a segment, the case recovery must skip into.
        if (step == CheckpointStep::kRotated) {
          rotated_at = e.log->NextLsn();
          EXPECT_TRUE(
              e.engine->Enqueue("simple", {Item("between-" + std::to_string(cuts.size()))})[0]
                  .ok());
        }
        // Nothing deleted: every snapshot is checked against the whole log below.
        if (step == CheckpointStep::kSnapshotRenamed) {
          return Status(Code::kInternal, "test: keep every file");
        }
        return Status::Ok();
      });
      EXPECT_EQ(result.status().detail(), "test: keep every file");
      EXPECT_EQ(checkpointer.stats().fork_fallbacks, 0u);
      uint64_t cut = 0;
      for (const std::string& name : SnapshotNames(fs.get(), dir)) {
        cut = std::max(cut, *ParseSnapshotFileName(name));
      }
      EXPECT_GT(cut, rotated_at);  // the hook's record is in it
      cuts.push_back(cut);
      round.fetch_add(1);
      round.notify_all();
    }
    stop.store(true);
    round.fetch_add(1);
    round.notify_all();
    for (auto& t : threads) t.join();
    ASSERT_TRUE(e.Sync().ok());
    final_digest = e.engine->Digest();
  }
  for (uint64_t cut : cuts) {
    SCOPED_TRACE("snapshot at LSN " + std::to_string(cut));
    ManualClock clock(kStartTime);
    Engine loaded(TestEngineOptions(), &clock, nullptr);
    auto info = LoadSnapshot(fs.get(), dir, SnapshotFileName(cut), &loaded);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->digest, ReplayedDigest(fs.get(), dir, JoinPath(root, "replay"), cut));
  }
  // And the directory recovers to the final state, from the newest snapshot and the records
  // after its cut.
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs.get(), dir, &report), final_digest);
  EXPECT_EQ(report.snapshot_lsn, cuts.back());
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace sundial::wal::test
