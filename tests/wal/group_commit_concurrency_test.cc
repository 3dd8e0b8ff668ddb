// GroupCommitLog under concurrent writers (label "concurrency", run under TSan): every effect is
// logged exactly once and in each writer's order, writers share syncs, committers that sync on
// their own thread and committers woken by the sync thread never lose a wake-up, and Flush /
// Rotate / the sync thread racing with committers see consistent answers; checkpoints run while
// engine threads keep writing, and the result recovers to the final state. No sleeps.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/wal/recovery_test_util.h"
#include "tests/wal/test_committer.h"
#include "tests/wal/wal_test_util.h"
#include "wal/checkpointer.h"
#include "wal/group_commit_log.h"

namespace sundial::wal::test {
namespace {

// Every record of every segment of `dir`, in LSN order; fails the test on any damage.
std::vector<std::string> ReadAllPayloads(FileSystem* fs, const std::string& dir,
                                         uint64_t* segment_count) {
  std::vector<std::string> out;
  auto names = fs->ListDir(dir);
  EXPECT_TRUE(names.ok());
  std::vector<std::string> segments;
  for (const auto& name : *names) {
    if (ParseSegmentFileName(name)) segments.push_back(name);
  }
  uint64_t lsn = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    auto file = fs->NewSequentialFile(JoinPath(dir, segments[i]));
    EXPECT_TRUE(file.ok());
    RecordingReporter reporter;
    LogReader::Options options;
    options.last_file = i + 1 == segments.size();
    LogReader reader(std::move(file).value(), segments[i], &reporter, options);
    LogReader::Record record;
    while (reader.ReadRecord(&record)) {
      EXPECT_EQ(record.lsn, lsn++);
      out.emplace_back(record.payload);
    }
    EXPECT_TRUE(reporter.reports.empty()) << ToString(reporter.reports.front());
  }
  *segment_count = segments.size();
  return out;
}

struct WriterEffect {
  std::string queue;
  std::string id;
  std::string payload;
  Effect effect;
  WriterEffect(int writer, uint64_t seq) {
    queue = "writer-" + std::to_string(writer);
    id = "m-" + std::to_string(seq);
    payload.assign(60, static_cast<char>('a' + writer % 26));
    effect.type = EffectType::kMessageEnqueued;
    effect.queue = queue;
    effect.id = id;
    effect.payload = payload;
    effect.seq = seq;
    effect.time = 1'700'000'000'000;
  }
};

void ExpectEveryEffectOnceInWriterOrder(const std::vector<std::string>& payloads, int writers,
                                        uint64_t per_writer) {
  std::map<std::string, uint64_t> next_seq;
  for (const auto& payload : payloads) {
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(payload, &decoded).ok());
    const Effect& e = decoded.effect();
    uint64_t& expected = next_seq[std::string(e.queue)];
    ASSERT_EQ(e.seq, expected) << e.queue;  // in order, no gap, no duplicate
    ASSERT_EQ(e.id, "m-" + std::to_string(expected));
    ++expected;
  }
  ASSERT_EQ(next_seq.size(), static_cast<size_t>(writers));
  for (const auto& [queue, count] : next_seq) EXPECT_EQ(count, per_writer) << queue;
}

TEST(GroupCommitConcurrencyTest, ConcurrentWritersAreLoggedOnceInOrderAndShareSyncs) {
  constexpr int kWriters = 16;
  constexpr uint64_t kPerWriter = 500;
  auto fs = NewMemoryFileSystem();
  LogOptions options;
  options.policy = FsyncPolicy::kAlways;
  options.segment_bytes = 64 << 10;  // several rotations while writers run
  auto log = OpenLog(fs.get(), options);
  ASSERT_NE(log, nullptr);

  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      uint64_t last_end = 0;
      for (uint64_t i = 0; i < kPerWriter; ++i) {
        WriterEffect e(w, i);
        log->OnEffect(e.effect);
        const uint64_t end = log->EndLsnOfThisThread();
        if (end <= last_end) failures.fetch_add(1);  // LSNs grow within a thread
        last_end = end;
        if (!log->WaitDurable(end).ok()) failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  LogStats stats = log->stats();
  ASSERT_TRUE(log->Close().ok());

  EXPECT_EQ(stats.records, kWriters * kPerWriter);
  EXPECT_EQ(stats.durable_end_lsn, kWriters * kPerWriter);
  // Whether writers shared syncs here depends on timing (a memory file syncs at once, so each
  // may sync alone); the gated tests in group_commit_log_test.cc show sharing deterministically.
  uint64_t segment_count = 0;
  auto payloads = ReadAllPayloads(fs.get(), "data", &segment_count);
  EXPECT_GT(segment_count, 2u);
  ASSERT_EQ(payloads.size(), kWriters * kPerWriter);
  ExpectEveryEffectOnceInWriterOrder(payloads, kWriters, kPerWriter);
}

// io threads as the server runs them: each appends a few records, then commits them, syncing
// on its own thread or registered and woken by the sync thread, while a checkpointer-like
// thread rotates and flushes.
TEST(GroupCommitConcurrencyTest, CommittersSyncOrAreWokenWhileRotateAndFlushRace) {
  for (FsyncPolicy policy : {FsyncPolicy::kAlways, FsyncPolicy::kNever}) {
    SCOPED_TRACE(static_cast<int>(policy));
    constexpr int kWriters = 4;
    constexpr uint64_t kPerWriter = 300;
    auto fs = NewMemoryFileSystem();
    LogOptions options;
    options.policy = policy;
    options.segment_bytes = 32 << 10;
    auto log = OpenLog(fs.get(), options);
    ASSERT_NE(log, nullptr);

    std::atomic<bool> writing{true};
    std::atomic<int> failures{0};
    std::thread maintenance([&] {
      uint64_t last_rotation = 0;
      while (writing.load()) {
        const uint64_t appended = log->stats().next_lsn;
        if (!log->Flush().ok()) failures.fetch_add(1);
        if (log->stats().durable_end_lsn < appended) failures.fetch_add(1);
        auto rotated = log->Rotate();
        if (!rotated.ok() || rotated->lsn < last_rotation || rotated->lsn < appended) {
          failures.fetch_add(1);
        }
        if (rotated.ok()) last_rotation = rotated->lsn;
      }
    });
    std::vector<std::unique_ptr<TestCommitter>> committers;
    for (int w = 0; w < kWriters; ++w) {
      committers.push_back(std::make_unique<TestCommitter>(log.get()));
    }
    std::vector<std::thread> threads;
    for (int w = 0; w < kWriters; ++w) {
      threads.emplace_back([&, w] {
        for (uint64_t i = 0; i < kPerWriter; i += 3) {
          for (uint64_t j = i; j < std::min(i + 3, kPerWriter); ++j) {
            WriterEffect e(w, j);
            log->OnEffect(e.effect);
          }
          const uint64_t end = log->EndLsnOfThisThread();
          // Half the writers may block (sync on their own thread), half may not.
          if (!committers[w]->CommitUntilDurable(end, w % 2 == 0).ok()) failures.fetch_add(1);
          if (log->DurableEnd() < end) failures.fetch_add(1);
        }
      });
    }
    for (auto& t : threads) t.join();
    writing.store(false);
    maintenance.join();
    const LogStats stats = log->stats();
    ASSERT_TRUE(log->Close().ok());
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(stats.durable_end_lsn, kWriters * kPerWriter);
    // A committer is woken at most once per registration, and registers at most once per
    // Commit call.
    for (auto& c : committers) EXPECT_LE(c->wakes(), c->commits());

    uint64_t segment_count = 0;
    auto payloads = ReadAllPayloads(fs.get(), "data", &segment_count);
    ASSERT_EQ(payloads.size(), kWriters * kPerWriter);
    ExpectEveryEffectOnceInWriterOrder(payloads, kWriters, kPerWriter);
  }
}

// --fsync=interval on `fs` in `dir` (1 ms, 32 KiB segments, the rest of `options`): writers
// write their own records on Commit while the sync thread syncs every millisecond and another
// thread rotates and flushes; a writer's record is durable under the policy as soon as its
// Commit returns (no registration, no wake-up), and every effect is read back once, in each
// writer's order.
void IntervalWritersRaceWithRotationAndTheSyncer(FileSystem* fs, const std::string& dir,
                                                 LogOptions options) {
  constexpr int kWriters = 6;
  constexpr uint64_t kPerWriter = 400;
  options.policy = FsyncPolicy::kInterval;
  options.interval_ms = 1;
  options.segment_bytes = 32 << 10;
  auto opened = GroupCommitLog::Open(fs, dir, options, 0, 1);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto log = std::move(opened).value();
  ASSERT_NE(log, nullptr);

  std::atomic<bool> writing{true};
  std::atomic<int> failures{0};
  std::thread maintenance([&] {
    while (writing.load()) {
      if (!log->Rotate().ok()) failures.fetch_add(1);
      if (!log->Flush().ok()) failures.fetch_add(1);
    }
  });
  std::vector<std::unique_ptr<TestCommitter>> committers;
  for (int w = 0; w < kWriters; ++w) {
    committers.push_back(std::make_unique<TestCommitter>(log.get()));
  }
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (uint64_t i = 0; i < kPerWriter; ++i) {
        WriterEffect e(w, i);
        log->OnEffect(e.effect);
        const uint64_t end = log->EndLsnOfThisThread();
        if (!log->Commit(committers[w].get(), end, false).ok()) failures.fetch_add(1);
        if (log->DurableEnd() < end) failures.fetch_add(1);  // written already
      }
    });
  }
  for (auto& t : threads) t.join();
  writing.store(false);
  maintenance.join();
  ASSERT_TRUE(log->Close().ok());
  EXPECT_EQ(failures.load(), 0);
  for (auto& c : committers) EXPECT_EQ(c->wakes(), 0);

  uint64_t segment_count = 0;
  auto payloads = ReadAllPayloads(fs, dir, &segment_count);
  EXPECT_GT(segment_count, 2u);
  ASSERT_EQ(payloads.size(), kWriters * kPerWriter);
  ExpectEveryEffectOnceInWriterOrder(payloads, kWriters, kPerWriter);
}

TEST(GroupCommitConcurrencyTest, IntervalWritersRacingWithRotationAndTheSyncer) {
  auto fs = NewMemoryFileSystem();
  LogOptions options;
  options.preallocate_bytes = 0;
  IntervalWritersRaceWithRotationAndTheSyncer(fs.get(), "data", options);
}

// The same on real files preallocated 4 KiB at a time: the sync thread writes the zeroes ahead
// while the writers write records below them and rotation closes (and cuts) the files.
TEST(GroupCommitConcurrencyTest, IntervalWritersRacingWithTheSyncThreadsPreallocation) {
  TempDir temp;
  auto fs = NewPosixFileSystem();
  LogOptions options;
  options.preallocate_bytes = 4096;
  IntervalWritersRaceWithRotationAndTheSyncer(fs.get(), JoinPath(temp.path(), "data"), options);
}

TEST(CheckpointConcurrency, CheckpointsRunWhileEngineThreadsKeepWriting) {
  auto fs = NewMemoryFileSystem();
  LoggedEngine e;
  LogOptions log_options;
  log_options.segment_bytes = 16 << 10;
  ASSERT_TRUE(e.Open(fs.get(), "data", {}, log_options).ok());
  constexpr int kThreads = 4;
  constexpr int kPerThread = 1'500;
  std::atomic<int> running{kThreads};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string queue = "q" + std::to_string(t);
      for (int i = 0; i < kPerThread; ++i) {
        EnqueueItem item = Item("m" + std::to_string(i));
        item.payload.assign(40, 'p');
        if (!e.engine->Enqueue(queue, {item})[0].ok()) failures.fetch_add(1);
        if (i % 3 == 0) {
          auto leased = e.engine->Dequeue(queue, {});
          if (leased.ok() && !leased->empty()) {
            (void)e.engine->Complete(queue, {{(*leased)[0].id, (*leased)[0].lease_token}});
          }
        }
        if (!e.log->WaitDurable(e.log->EndLsnOfThisThread()).ok()) failures.fetch_add(1);
      }
      running.fetch_sub(1);
    });
  }
  CheckpointOptions options;
  options.engine_options = TestEngineOptions();
  Checkpointer checkpointer(fs.get(), "data", e.log.get(), options);
  int checkpoints = 0;
  while (running.load() > 0 || checkpoints < 2) {
    auto result = checkpointer.RunOnce();
    ASSERT_TRUE(result.ok());
    ++checkpoints;
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GE(checkpoints, 2);
  const uint64_t digest = e.engine->Digest();
  e.log.reset();
  EXPECT_EQ(RecoveredDigest(fs.get(), "data"), digest);
}

}  // namespace
}  // namespace sundial::wal::test
