// GroupCommitLog under concurrent writers (label "concurrency", run under TSan): every effect is
// logged exactly once and in each writer's order, writers share syncs, and Flush / Rotate /
// WhenDurable callers racing with appends see consistent answers; checkpoints run while engine
// threads keep writing, and the result recovers to the final state. No sleeps.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/wal/recovery_test_util.h"
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
  auto opened = GroupCommitLog::Open(fs.get(), "data", options, 0, 1);
  ASSERT_TRUE(opened.ok());
  auto log = std::move(opened).value();

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
  EXPECT_LT(stats.syncs, stats.records);  // writers shared syncs (group commit)
  uint64_t segment_count = 0;
  auto payloads = ReadAllPayloads(fs.get(), "data", &segment_count);
  EXPECT_GT(segment_count, 2u);
  ASSERT_EQ(payloads.size(), kWriters * kPerWriter);
  ExpectEveryEffectOnceInWriterOrder(payloads, kWriters, kPerWriter);
}

TEST(GroupCommitConcurrencyTest, FlushAndRotateRacingWithWritersKeepTheLogConsistent) {
  constexpr int kWriters = 4;
  constexpr uint64_t kPerWriter = 300;
  auto fs = NewMemoryFileSystem();
  LogOptions options;
  options.policy = FsyncPolicy::kNever;
  auto opened = GroupCommitLog::Open(fs.get(), "data", options, 0, 1);
  ASSERT_TRUE(opened.ok());
  auto log = std::move(opened).value();

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
  std::vector<std::thread> threads;
  std::atomic<int> callbacks{0};
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (uint64_t i = 0; i < kPerWriter; ++i) {
        WriterEffect e(w, i);
        log->OnEffect(e.effect);
        log->WhenDurable(log->EndLsnOfThisThread(), [&](Status s) {
          if (!s.ok()) failures.fetch_add(1);
          callbacks.fetch_add(1);
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  writing.store(false);
  maintenance.join();
  ASSERT_TRUE(log->Close().ok());
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(callbacks.load(), kWriters * static_cast<int>(kPerWriter));

  uint64_t segment_count = 0;
  auto payloads = ReadAllPayloads(fs.get(), "data", &segment_count);
  ASSERT_EQ(payloads.size(), kWriters * kPerWriter);
  ExpectEveryEffectOnceInWriterOrder(payloads, kWriters, kPerWriter);
}

// Inline writes (--fsync=interval / never): writers write their own records with WriteNow while
// the log thread rotates, flushes and syncs on the interval; after WriteNow a writer's record is
// durable under the policy at once (its WhenDurable completes on its own thread).
TEST(GroupCommitConcurrencyTest, InlineWritersRacingWithRotationAndIntervalSyncs) {
  constexpr int kWriters = 6;
  constexpr uint64_t kPerWriter = 400;
  auto fs = NewMemoryFileSystem();
  LogOptions options;
  options.policy = FsyncPolicy::kInterval;
  options.interval_ms = 1;
  options.inline_writes = true;
  options.segment_bytes = 32 << 10;
  auto opened = GroupCommitLog::Open(fs.get(), "data", options, 0, 1);
  ASSERT_TRUE(opened.ok());
  auto log = std::move(opened).value();

  std::atomic<bool> writing{true};
  std::atomic<int> failures{0};
  std::thread maintenance([&] {
    while (writing.load()) {
      if (!log->Rotate().ok()) failures.fetch_add(1);
      if (!log->Flush().ok()) failures.fetch_add(1);
    }
  });
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (uint64_t i = 0; i < kPerWriter; ++i) {
        WriterEffect e(w, i);
        log->OnEffect(e.effect);
        if (!log->WriteNow().ok()) failures.fetch_add(1);
        bool done_here = false;
        log->WhenDurable(log->EndLsnOfThisThread(), [&](Status s) {
          if (!s.ok()) failures.fetch_add(1);
          done_here = true;
        });
        if (!done_here) failures.fetch_add(1);  // written already: completes inline
      }
    });
  }
  for (auto& t : threads) t.join();
  writing.store(false);
  maintenance.join();
  ASSERT_TRUE(log->Close().ok());
  EXPECT_EQ(failures.load(), 0);

  uint64_t segment_count = 0;
  auto payloads = ReadAllPayloads(fs.get(), "data", &segment_count);
  EXPECT_GT(segment_count, 2u);
  ASSERT_EQ(payloads.size(), kWriters * kPerWriter);
  ExpectEveryEffectOnceInWriterOrder(payloads, kWriters, kPerWriter);
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
