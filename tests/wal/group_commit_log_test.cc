// GroupCommitLog: records read back in order with consecutive LSNs, durability only after the
// covering sync (checked by simulating a crash), group commit (a commit writes every thread's
// pending records; a committer that may block syncs on its own thread, one that may not is
// registered and woken once by the sync thread; a sync in flight is waited for, not repeated),
// the three fsync policies, segment rotation, and the failed state after an EIO, ENOSPC or
// short write. No sleeps: tests synchronise through WaitDurable/Flush, committers' wake-ups and
// a file system whose Sync can be held at a gate.
#include "wal/group_commit_log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/wal/forwarding_file_system.h"
#include "tests/wal/test_committer.h"
#include "tests/wal/wal_test_util.h"
#include "wal/fault_injection_file_system.h"

namespace sundial::wal::test {
namespace {

constexpr auto kEventTimeout = std::chrono::seconds(30);

// A FileSystem wrapper that counts Sync calls (made, not just successful), remembers the
// largest Append, and can hold every Sync at a gate until the test opens it.
class ObservedFileSystem final : public ForwardingFileSystem {
 public:
  explicit ObservedFileSystem(FileSystem* base) : ForwardingFileSystem(base) {}

  int syncs() {
    std::lock_guard lock(mu_);
    return syncs_;
  }
  // Appends (writes) made by `thread` since the file system was made.
  int appends_on(std::thread::id thread) {
    std::lock_guard lock(mu_);
    int n = 0;
    for (std::thread::id t : append_threads_) n += t == thread;
    return n;
  }
  int appends() {
    std::lock_guard lock(mu_);
    return static_cast<int>(append_threads_.size());
  }
  // Called after every Append, on the writing thread (set before the log writes).
  void SetAfterAppend(std::function<void()> f) { after_append_ = std::move(f); }
  size_t largest_append() {
    std::lock_guard lock(mu_);
    return largest_append_;
  }
  void CloseSyncGate() {
    std::lock_guard lock(mu_);
    gate_open_ = false;
  }
  void OpenSyncGate() {
    std::lock_guard lock(mu_);
    gate_open_ = true;
    cv_.notify_all();
  }
  // With the gate closed, lets the first `n` Sync calls since the log opened through, in the
  // order they reached the gate; later ones stay held.
  void LetSyncsThrough(int n) {
    std::lock_guard lock(mu_);
    let_through_ = n;
    cv_.notify_all();
  }
  // Waits until `n` Sync calls have started (they may be held at the gate).
  bool WaitForSyncsStarted(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kEventTimeout, [&] { return syncs_ >= n; });
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    auto file = base()->NewWritableFile(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<WritableFile>(
        std::make_unique<ObservedFile>(this, std::move(file).value()));
  }
  Result<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override {
    auto file = base()->NewAppendableFile(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<WritableFile>(
        std::make_unique<ObservedFile>(this, std::move(file).value()));
  }

 private:
  class ObservedFile final : public WritableFile {
   public:
    ObservedFile(ObservedFileSystem* fs, std::unique_ptr<WritableFile> base)
        : fs_(fs), base_(std::move(base)) {}
    Status Append(std::string_view data) override {
      {
        std::lock_guard lock(fs_->mu_);
        fs_->largest_append_ = std::max(fs_->largest_append_, data.size());
        fs_->append_threads_.push_back(std::this_thread::get_id());
      }
      Status s = base_->Append(data);
      if (fs_->after_append_) fs_->after_append_();
      return s;
    }
    Status Flush() override { return base_->Flush(); }
    Status Sync() override {
      Gate();
      return base_->Sync();
    }
    Status SyncFlushed() override {
      Gate();
      return base_->SyncFlushed();
    }
    Status Close() override { return base_->Close(); }

   private:
    void Gate() {
      std::unique_lock lock(fs_->mu_);
      const int ticket = fs_->syncs_++;
      fs_->cv_.notify_all();
      fs_->cv_.wait(lock, [&] { return fs_->gate_open_ || ticket < fs_->let_through_; });
    }

    ObservedFileSystem* const fs_;
    std::unique_ptr<WritableFile> base_;
  };

  std::mutex mu_;
  std::condition_variable cv_;
  int syncs_ = 0;  // GUARDED_BY(mu_)
  size_t largest_append_ = 0;
  std::vector<std::thread::id> append_threads_;  // of every Append, in order
  std::function<void()> after_append_;
  bool gate_open_ = true;
  int let_through_ = 0;
};

// A message effect of about 100 bytes, unique per (queue, seq).
struct TestEffect {
  std::string queue;
  std::string id;
  std::string payload;
  Effect effect;
};

TestEffect MakeEffect(int queue, uint64_t seq, size_t payload_bytes = 40) {
  TestEffect t;
  t.queue = "queue-" + std::to_string(queue);
  t.id = "message-" + std::to_string(queue) + "-" + std::to_string(seq);
  t.payload.assign(payload_bytes, static_cast<char>('a' + seq % 26));
  t.effect.type = EffectType::kMessageEnqueued;
  t.effect.time = 1'700'000'000'000 + static_cast<int64_t>(seq);
  t.effect.seq = seq;
  t.effect.version = 1;
  t.effect.enqueued_at = t.effect.time;
  return t;
}

void Append(GroupCommitLog* log, TestEffect t) {
  t.effect.queue = t.queue;
  t.effect.id = t.id;
  t.effect.payload = t.payload;
  log->OnEffect(t.effect);
}

std::string Encoding(TestEffect t) {
  t.effect.queue = t.queue;
  t.effect.id = t.id;
  t.effect.payload = t.payload;
  return Encode(t.effect);
}

struct SegmentContents {
  uint64_t number = 0;
  std::string path;
  FileHeader header;
  uint64_t size = 0;
  std::vector<uint64_t> lsns;
  std::vector<std::string> payloads;
  std::vector<Corruption> reports;
};

// Every segment of `dir`, in order, read with LogReader.
std::vector<SegmentContents> ReadSegments(FileSystem* fs, const std::string& dir) {
  std::vector<SegmentContents> out;
  auto names = fs->ListDir(dir);
  EXPECT_TRUE(names.ok());
  if (!names.ok()) return out;
  std::vector<std::pair<uint64_t, std::string>> segments;
  for (const auto& name : *names) {
    if (auto number = ParseSegmentFileName(name)) segments.emplace_back(*number, name);
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    SegmentContents seg;
    seg.number = segments[i].first;
    seg.path = JoinPath(dir, segments[i].second);
    auto size = fs->FileSize(seg.path);
    EXPECT_TRUE(size.ok());
    seg.size = size.ok() ? *size : 0;
    auto file = fs->NewSequentialFile(seg.path);
    EXPECT_TRUE(file.ok());
    if (!file.ok()) return out;
    RecordingReporter reporter;
    LogReader::Options options;
    options.last_file = i + 1 == segments.size();
    options.expected_file_number = seg.number;
    LogReader reader(std::move(file).value(), segments[i].second, &reporter, options);
    LogReader::Record record;
    while (reader.ReadRecord(&record)) {
      seg.lsns.push_back(record.lsn);
      seg.payloads.emplace_back(record.payload);
    }
    EXPECT_TRUE(reader.status().ok());
    seg.header = reader.header();
    seg.reports = reporter.reports;
    out.push_back(std::move(seg));
  }
  return out;
}

// A log under kAlways on a memory file system whose syncs can be held at a gate: the tests of
// who writes, who syncs and who is woken.
class GatedLogTest : public testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(log, nullptr); }

  std::unique_ptr<FileSystem> memory = NewMemoryFileSystem();
  ObservedFileSystem observed{memory.get()};
  std::unique_ptr<GroupCommitLog> log = OpenLog(&observed, Policy(FsyncPolicy::kAlways));
};

TEST(GroupCommitLogTest, EndLsnOfThisThreadBelongsToOneLog) {
  auto fs = NewMemoryFileSystem();
  auto first = OpenLog(fs.get(), {}, /*next_lsn=*/500, /*segment=*/1);
  ASSERT_NE(first, nullptr);
  first->OnEffect(SampleEffects()[0]);
  EXPECT_EQ(first->EndLsnOfThisThread(), 501u);
  ASSERT_TRUE(first->Close().ok());
  // A log opened later (a restart in the same process) never sees the earlier log's LSN, which
  // it would wait for forever (or refuse as never appended).
  auto second = GroupCommitLog::Open(fs.get(), "other", {}, 0, 1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)->EndLsnOfThisThread(), 0u);
  EXPECT_TRUE((*second)->WaitDurable((*second)->EndLsnOfThisThread()).ok());
}

TEST(GroupCommitLogTest, RecordsReadBackInOrderWithConsecutiveLsns) {
  auto fs = NewMemoryFileSystem();
  auto log = OpenLog(fs.get(), {}, /*next_lsn=*/100, /*segment=*/7);
  ASSERT_NE(log, nullptr);
  const std::vector<Effect> samples = SampleEffects();
  for (int round = 0; round < 3; ++round) {
    for (const Effect& e : samples) log->OnEffect(e);
  }
  const uint64_t end = log->EndLsnOfThisThread();
  EXPECT_EQ(end, 100 + 3 * samples.size());
  ASSERT_TRUE(log->WaitDurable(end).ok());
  ASSERT_TRUE(log->Close().ok());

  auto segments = ReadSegments(fs.get(), "data");
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].number, 7u);
  EXPECT_EQ(segments[0].header.file_number, 7u);
  EXPECT_EQ(segments[0].header.lsn, 100u);
  EXPECT_TRUE(segments[0].reports.empty());
  ASSERT_EQ(segments[0].payloads.size(), 3 * samples.size());
  for (size_t i = 0; i < segments[0].payloads.size(); ++i) {
    EXPECT_EQ(segments[0].lsns[i], 100 + i);
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(segments[0].payloads[i], &decoded).ok());
    ExpectSameLoggedFields(samples[i % samples.size()], decoded.effect());
  }
  LogStats stats = log->stats();
  EXPECT_EQ(stats.records, 3 * samples.size());
  EXPECT_EQ(stats.next_lsn, end);
  EXPECT_EQ(stats.durable_end_lsn, end);
  EXPECT_EQ(stats.segment_number, 7u);
}

TEST(GroupCommitLogTest, ACommitThatMayBlockWritesAndSyncsOnTheCallersThread) {
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem faulty(memory.get());
  auto log = OpenLog(&faulty, Policy(FsyncPolicy::kAlways));
  ASSERT_NE(log, nullptr);
  const std::string path = JoinPath("data", SegmentFileName(1));
  const TestEffect effect = MakeEffect(1, 1);
  const uint64_t record_end = kFileHeaderBytes + kRecordHeaderBytes + Encoding(effect).size();

  Append(log.get(), effect);
  const uint64_t end = log->EndLsnOfThisThread();
  EXPECT_EQ(log->DurableEnd(), 0u);
  EXPECT_EQ(faulty.SyncedBytes(path), 0u);  // appending does no I/O
  TestCommitter committer(log.get());
  ASSERT_TRUE(log->Commit(&committer, end, /*may_block=*/true).ok());
  // Written and synced before Commit returned, on this thread: no hand-off, no wake-up.
  EXPECT_EQ(log->DurableEnd(), end);
  EXPECT_GE(faulty.SyncedBytes(path), record_end);
  EXPECT_EQ(committer.wakes(), 0);
  LogStats stats = log->stats();
  EXPECT_EQ(stats.syncs, 1u);
  EXPECT_EQ(stats.inline_syncs, 1u);
  EXPECT_EQ(stats.wakes, 0u);

  // A crash right after the commit keeps the record.
  ASSERT_TRUE(faulty.SimulateCrash().ok());
  auto segments = ReadSegments(memory.get(), "data");
  ASSERT_EQ(segments.size(), 1u);
  ASSERT_EQ(segments[0].payloads.size(), 1u);
  EXPECT_EQ(segments[0].payloads[0], Encoding(effect));
  EXPECT_TRUE(segments[0].reports.empty());
  (void)log->Close();  // the files died in the crash; the outcome does not matter here
}

TEST(GroupCommitLogTest, ACommitWritesEveryThreadsPendingRecords) {
  auto fs = NewMemoryFileSystem();
  auto log = OpenLog(fs.get());
  ASSERT_NE(log, nullptr);
  std::thread other([&] { Append(log.get(), MakeEffect(2, 0)); });
  other.join();
  Append(log.get(), MakeEffect(1, 0));
  TestCommitter committer(log.get());
  ASSERT_TRUE(log->Commit(&committer, log->EndLsnOfThisThread(), true).ok());
  EXPECT_EQ(log->DurableEnd(), 2u);  // the other thread's record too, in the same write and sync
  LogStats stats = log->stats();
  EXPECT_EQ(stats.syncs, 1u);
  EXPECT_EQ(stats.writes, 1u);
  // Nothing left to write or sync: committing again is free.
  ASSERT_TRUE(log->Commit(&committer, 2, true).ok());
  EXPECT_EQ(log->stats().syncs, 1u);
  EXPECT_TRUE(log->Close().ok());
}

// An io thread with other connections to serve does not block: it is registered, the sync
// thread syncs, and the io thread is woken once, with its records durable.
TEST_F(GatedLogTest, ACommitThatMayNotBlockIsWokenOnceTheSyncThreadMadeItDurable) {
  observed.CloseSyncGate();
  Append(log.get(), MakeEffect(1, 0));
  const uint64_t end = log->EndLsnOfThisThread();
  TestCommitter committer(log.get());
  ASSERT_TRUE(log->Commit(&committer, end, /*may_block=*/false).ok());  // returns at once
  ASSERT_TRUE(observed.WaitForSyncsStarted(1));  // the sync thread's, held at the gate
  EXPECT_EQ(log->DurableEnd(), 0u);              // nothing is durable before its sync
  EXPECT_EQ(committer.wakes(), 0);
  observed.OpenSyncGate();
  ASSERT_TRUE(committer.WaitForWakes(1));
  EXPECT_EQ(log->DurableEnd(), end);
  ASSERT_TRUE(log->Commit(&committer, end, false).ok());  // durable: nothing to do
  EXPECT_EQ(committer.wakes(), 1);
  LogStats stats = log->stats();
  EXPECT_EQ(stats.syncs, 1u);
  EXPECT_EQ(stats.inline_syncs, 0u);
  EXPECT_EQ(stats.wakes, 1u);
  EXPECT_TRUE(log->Close().ok());
}

// Its records are written by the sync thread, with whatever else is pending, just before it
// syncs them: one write per group rather than one per io thread's round.
TEST_F(GatedLogTest, ACommitThatMayNotBlockLeavesTheWriteToTheSyncThread) {
  const std::thread::id me = std::this_thread::get_id();
  const int opened = observed.appends_on(me);  // the segment's header, written by Open
  observed.CloseSyncGate();
  std::thread other([&] { Append(log.get(), MakeEffect(2, 0)); });
  other.join();
  Append(log.get(), MakeEffect(1, 0));
  const uint64_t end = log->EndLsnOfThisThread();
  TestCommitter committer(log.get());
  ASSERT_TRUE(log->Commit(&committer, end, /*may_block=*/false).ok());
  EXPECT_EQ(observed.appends_on(me), opened) << "the committer wrote nothing";
  ASSERT_TRUE(observed.WaitForSyncsStarted(1));  // the sync thread's sync, after its write
  EXPECT_EQ(log->WrittenEnd(), 2u) << "both records, in one write";
  EXPECT_EQ(log->stats().writes, 1u);
  EXPECT_EQ(observed.appends(), opened + 1);
  EXPECT_EQ(log->DurableEnd(), 0u);
  observed.OpenSyncGate();
  ASSERT_TRUE(committer.WaitForWakes(1));
  EXPECT_EQ(log->DurableEnd(), end);
  EXPECT_EQ(log->stats().syncs, 1u);
  EXPECT_TRUE(log->Close().ok());
}

// A synchronous standby is sent what is written: under a replica bound the committer writes
// its records itself, at once, so that they are on their way while the sync before them runs.
TEST_F(GatedLogTest, UnderAReplicaBoundACommitThatMayNotBlockWritesAtOnce) {
  const std::thread::id me = std::this_thread::get_id();
  log->SetReplicaBound(0);
  const int opened = observed.appends_on(me);
  observed.CloseSyncGate();
  Append(log.get(), MakeEffect(1, 0));
  TestCommitter committer(log.get());
  ASSERT_TRUE(log->Commit(&committer, 1, /*may_block=*/false).ok());
  EXPECT_EQ(observed.appends_on(me), opened + 1);
  EXPECT_EQ(log->WrittenEnd(), 1u) << "written before Commit returned";
  observed.OpenSyncGate();
  log->SetReplicaBound(1);
  ASSERT_TRUE(committer.WaitForWakes(1));
  EXPECT_EQ(log->DurableEnd(), 1u);
  EXPECT_TRUE(log->Close().ok());
}

// Appends that keep coming do not hold off the sync: after a write the sync thread syncs before
// it writes again. Here every write brings a new record with it (appended from inside the
// file's Append), so a sync thread that wrote whatever was pending first would write five
// times before the committer's first sync.
TEST_F(GatedLogTest, TheSyncThreadSyncsAfterEachWriteWhileAppendsKeepComing) {
  std::atomic<int> more{5};
  observed.SetAfterAppend([&] {
    if (more.fetch_sub(1) > 0) Append(log.get(), MakeEffect(3, static_cast<uint64_t>(more.load())));
  });
  Append(log.get(), MakeEffect(1, 0));
  const uint64_t end = log->EndLsnOfThisThread();
  const uint64_t writes_before = log->stats().writes;
  TestCommitter committer(log.get());
  ASSERT_TRUE(log->Commit(&committer, end, /*may_block=*/false).ok());
  ASSERT_TRUE(committer.WaitForWakes(1));
  EXPECT_EQ(log->stats().writes, writes_before + 1) << "one write, then its sync";
  EXPECT_GE(log->DurableEnd(), end);
  EXPECT_TRUE(log->Close().ok());
  observed.SetAfterAppend(nullptr);
}

// A sync in flight that covers a committer's records is waited for, never repeated: by a
// registered committer (woken by it) and by a blocking one (it waits instead of syncing).
TEST_F(GatedLogTest, ASyncInFlightThatCoversTheRecordsIsNotRepeated) {
  // Three threads append before anyone commits: the first commit writes all three records.
  std::vector<uint64_t> ends;
  for (int i = 0; i < 3; ++i) {
    std::thread t([&] {
      Append(log.get(), MakeEffect(i, 0));
      ends.push_back(log->EndLsnOfThisThread());
    });
    t.join();
  }
  observed.CloseSyncGate();
  TestCommitter first(log.get());
  std::thread syncing([&] { EXPECT_TRUE(log->Commit(&first, ends[0], true).ok()); });
  ASSERT_TRUE(observed.WaitForSyncsStarted(1));  // its inline sync, covering all three
  TestCommitter second(log.get());
  ASSERT_TRUE(log->Commit(&second, ends[1], false).ok());  // registered
  std::thread blocking([&] { EXPECT_TRUE(log->WaitDurable(ends[2]).ok()); });
  EXPECT_EQ(second.wakes(), 0);
  observed.OpenSyncGate();
  syncing.join();
  blocking.join();
  ASSERT_TRUE(second.WaitForWakes(1));
  EXPECT_EQ(log->DurableEnd(), 3u);
  LogStats stats = log->stats();
  EXPECT_EQ(stats.syncs, 1u);  // one write and one sync for the three
  EXPECT_EQ(stats.writes, 1u);
  EXPECT_EQ(stats.wakes, 1u);
  EXPECT_EQ(first.wakes(), 0);
  EXPECT_TRUE(log->Close().ok());
  EXPECT_EQ(second.wakes(), 1);  // Close found nobody registered
}

TEST_F(GatedLogTest, AppendsDuringASyncShareTheNextSync) {
  observed.CloseSyncGate();
  std::thread leader([&] {
    Append(log.get(), MakeEffect(1, 0));
    EXPECT_TRUE(log->WaitDurable(log->EndLsnOfThisThread()).ok());
  });
  ASSERT_TRUE(observed.WaitForSyncsStarted(1));  // the first record's sync is held at the gate
  // Four io threads append and commit while it syncs: they write, register and wait.
  constexpr int kThreads = 4;
  std::vector<std::unique_ptr<TestCommitter>> committers;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    committers.push_back(std::make_unique<TestCommitter>(log.get()));
  }
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t end = 0;
      for (uint64_t i = 0; i < 4; ++i) {
        Append(log.get(), MakeEffect(10 + t, i));
        end = log->EndLsnOfThisThread();
      }
      if (!committers[t]->CommitUntilDurable(end).ok()) failures.fetch_add(1);
    });
  }
  // Every thread appended (bounded wait); nothing can be durable while the first sync is held.
  const auto deadline = std::chrono::steady_clock::now() + kEventTimeout;
  while (log->stats().records < 17 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(log->stats().records, 17u);
  EXPECT_EQ(log->DurableEnd(), 0u);
  observed.OpenSyncGate();
  leader.join();
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(log->DurableEnd(), 17u);
  LogStats stats = log->stats();
  EXPECT_EQ(stats.records, 17u);
  // The first record alone, then the sixteen appended during its sync in as few syncs as the
  // committers' timing allows: never one per record.
  EXPECT_LE(stats.syncs, 1u + kThreads);
  EXPECT_EQ(observed.syncs(), static_cast<int>(stats.syncs));
  for (auto& c : committers) EXPECT_LE(c->wakes(), 1) << "one wake-up, when durable";
  EXPECT_TRUE(log->Close().ok());
}

TEST_F(GatedLogTest, ACommitterIsWokenAtWakeAtBeforeTheRestIsDurable) {
  observed.CloseSyncGate();
  // Record 1's sync is in flight (held) when the committer appends record 2 and commits both,
  // asking to be woken at 1: the loop holding record 1's reply sends it after that sync rather
  // than after the sync that covers 2.
  std::thread first([&] {
    Append(log.get(), MakeEffect(1, 0));
    EXPECT_TRUE(log->WaitDurable(log->EndLsnOfThisThread()).ok());
  });
  ASSERT_TRUE(observed.WaitForSyncsStarted(1));
  Append(log.get(), MakeEffect(2, 0));
  ASSERT_EQ(log->EndLsnOfThisThread(), 2u);
  TestCommitter committer(log.get());
  ASSERT_TRUE(log->Commit(&committer, 2, /*may_block=*/false, /*wake_at=*/1).ok());
  // The sync thread's sync, covering record 2, waits behind it (syncs are serialized) and
  // then at the gate: only record 1's sync completes.
  observed.LetSyncsThrough(1);
  first.join();
  ASSERT_TRUE(committer.WaitForWakes(1));
  EXPECT_EQ(log->DurableEnd(), 1u) << "woken while record 2's sync is still held";
  observed.OpenSyncGate();
  EXPECT_TRUE(committer.CommitUntilDurable(2).ok());
  EXPECT_EQ(log->DurableEnd(), 2u);
  EXPECT_TRUE(log->Close().ok());
}

TEST_F(GatedLogTest, AWakeAtAlreadyDurableRegistersForTheEnd) {
  Append(log.get(), MakeEffect(1, 0));
  ASSERT_TRUE(log->WaitDurable(1).ok());
  observed.CloseSyncGate();
  Append(log.get(), MakeEffect(2, 0));
  TestCommitter committer(log.get());
  // Its first held reply became durable meanwhile: it must still be woken for the rest.
  ASSERT_TRUE(log->Commit(&committer, 2, /*may_block=*/false, /*wake_at=*/1).ok());
  EXPECT_EQ(committer.wakes(), 0);
  observed.OpenSyncGate();
  ASSERT_TRUE(committer.WaitForWakes(1));
  EXPECT_EQ(log->DurableEnd(), 2u);
  EXPECT_TRUE(log->Close().ok());
}

TEST(GroupCommitLogTest, CommitOfARecordNeverAppendedIsUnavailable) {
  auto fs = NewMemoryFileSystem();
  auto log = OpenLog(fs.get());
  ASSERT_NE(log, nullptr);
  TestCommitter committer(log.get());
  EXPECT_TRUE(log->Commit(&committer, 0, false).ok());
  EXPECT_EQ(log->Commit(&committer, 1, false).code(), Code::kUnavailable);
  EXPECT_EQ(log->WaitDurable(1).code(), Code::kUnavailable);
  EXPECT_TRUE(log->Close().ok());
}

TEST(GroupCommitLogTest, AFailedSyncWakesEveryRegisteredCommitter) {
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem faulty(memory.get());
  ObservedFileSystem observed(&faulty);
  auto log = OpenLog(&observed, Policy(FsyncPolicy::kAlways));
  ASSERT_NE(log, nullptr);
  observed.CloseSyncGate();
  faulty.FailNextSyncWithIoError();
  std::thread leader([&] {
    Append(log.get(), MakeEffect(1, 0));
    EXPECT_EQ(log->WaitDurable(log->EndLsnOfThisThread()).code(), Code::kUnavailable);
  });
  ASSERT_TRUE(observed.WaitForSyncsStarted(1));
  Append(log.get(), MakeEffect(2, 0));
  TestCommitter waiting(log.get());
  ASSERT_TRUE(log->Commit(&waiting, log->EndLsnOfThisThread(), false).ok());
  observed.OpenSyncGate();
  leader.join();
  ASSERT_TRUE(waiting.WaitForWakes(1));
  EXPECT_EQ(log->Commit(&waiting, log->EndLsnOfThisThread(), false).code(), Code::kUnavailable);
  EXPECT_EQ(log->DurableEnd(), 0u);
  EXPECT_EQ(log->Close().code(), Code::kUnavailable);
}

TEST_F(GatedLogTest, AnUnregisteredCommitterIsNeverWoken) {
  observed.CloseSyncGate();
  Append(log.get(), MakeEffect(1, 0));
  const uint64_t end = log->EndLsnOfThisThread();
  TestCommitter gone(log.get());
  ASSERT_TRUE(log->Commit(&gone, end, false).ok());
  ASSERT_TRUE(observed.WaitForSyncsStarted(1));
  log->Unregister(&gone);
  observed.OpenSyncGate();
  ASSERT_TRUE(log->WaitDurable(end).ok());
  ASSERT_TRUE(log->Close().ok());
  EXPECT_EQ(gone.wakes(), 0);
}

TEST(GroupCommitLogTest, GroupWritesAreCappedAtMaxGroupBytes) {
  auto memory = NewMemoryFileSystem();
  ObservedFileSystem observed(memory.get());
  LogOptions options;
  options.max_group_bytes = 512;
  auto log = OpenLog(&observed, options);
  ASSERT_NE(log, nullptr);
  observed.CloseSyncGate();
  std::thread leader([&] {
    Append(log.get(), MakeEffect(1, 0));
    EXPECT_TRUE(log->WaitDurable(log->EndLsnOfThisThread()).ok());
  });
  ASSERT_TRUE(observed.WaitForSyncsStarted(1));
  const size_t record_bytes = kRecordHeaderBytes + Encoding(MakeEffect(1, 1)).size();
  for (uint64_t i = 1; i <= 50; ++i) Append(log.get(), MakeEffect(1, i));
  // One record larger than the cap is written alone, never split.
  Append(log.get(), MakeEffect(1, 51, 2000));
  observed.OpenSyncGate();
  leader.join();
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_LE(observed.largest_append(),
            kRecordHeaderBytes + Encoding(MakeEffect(1, 51, 2000)).size());
  LogStats stats = log->stats();
  EXPECT_GE(stats.writes, 1 + 50 * record_bytes / 512);
  EXPECT_EQ(stats.syncs, 2u);
  EXPECT_TRUE(log->Close().ok());
  auto segments = ReadSegments(memory.get(), "data");
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].payloads.size(), 52u);
}

TEST(GroupCommitLogTest, NeverPolicyCompletesWithoutSyncing) {
  auto memory = NewMemoryFileSystem();
  ObservedFileSystem observed(memory.get());
  auto log = OpenLog(&observed, Policy(FsyncPolicy::kNever));
  ASSERT_NE(log, nullptr);
  for (uint64_t i = 0; i < 100; ++i) Append(log.get(), MakeEffect(1, i));
  ASSERT_TRUE(log->WaitDurable(100).ok());
  EXPECT_EQ(log->stats().syncs, 0u);
  EXPECT_EQ(observed.syncs(), 0);
  EXPECT_EQ(ReadSegments(memory.get(), "data")[0].payloads.size(), 100u);
  // Flush syncs whatever the policy.
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_EQ(observed.syncs(), 1);
  EXPECT_TRUE(log->Close().ok());
}

TEST(GroupCommitLogTest, IntervalPolicyCompletesAfterTheWriteBeforeAnySync) {
  auto memory = NewMemoryFileSystem();
  ObservedFileSystem observed(memory.get());
  LogOptions options = Policy(FsyncPolicy::kInterval);
  options.interval_ms = 60'000;
  auto log = OpenLog(&observed, options);
  ASSERT_NE(log, nullptr);
  for (uint64_t i = 0; i < 10; ++i) Append(log.get(), MakeEffect(1, i));
  ASSERT_TRUE(log->WaitDurable(10).ok());
  EXPECT_EQ(observed.syncs(), 0);
  EXPECT_EQ(ReadSegments(memory.get(), "data")[0].payloads.size(), 10u);
  EXPECT_TRUE(log->Close().ok());
  EXPECT_EQ(observed.syncs(), 1);  // Close syncs
}

TEST(GroupCommitLogTest, IntervalPolicySyncsOnceTheIntervalHasPassed) {
  auto memory = NewMemoryFileSystem();
  ObservedFileSystem observed(memory.get());
  LogOptions options = Policy(FsyncPolicy::kInterval);
  options.interval_ms = 1;
  auto log = OpenLog(&observed, options);
  ASSERT_NE(log, nullptr);
  Append(log.get(), MakeEffect(1, 0));
  ASSERT_TRUE(log->WaitDurable(1).ok());
  // The syncer thread syncs by itself once the interval has passed after the write.
  ASSERT_TRUE(observed.WaitForSyncsStarted(1));
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_TRUE(log->Close().ok());
}

TEST(GroupCommitLogTest, SegmentsRotateAtSegmentBytesAndTheirHeaderLsnsChain) {
  auto fs = NewMemoryFileSystem();
  LogOptions options = Policy(FsyncPolicy::kNever);
  options.segment_bytes = 1024;
  auto log = OpenLog(fs.get(), options, /*next_lsn=*/5, /*segment=*/3);
  ASSERT_NE(log, nullptr);
  const size_t record_bytes = kRecordHeaderBytes + Encoding(MakeEffect(1, 0)).size();
  for (uint64_t i = 0; i < 100; ++i) {
    Append(log.get(), MakeEffect(1, i));
    if (i % 7 == 0) {
      ASSERT_TRUE(log->WaitDurable(log->EndLsnOfThisThread()).ok());
    }
  }
  ASSERT_TRUE(log->Close().ok());

  auto segments = ReadSegments(fs.get(), "data");
  ASSERT_GE(segments.size(), 5u);
  uint64_t lsn = 5;
  uint64_t seq = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    SCOPED_TRACE(segments[i].path);
    EXPECT_EQ(segments[i].number, 3 + i);
    EXPECT_EQ(segments[i].header.lsn, lsn);
    EXPECT_TRUE(segments[i].reports.empty());
    EXPECT_LT(segments[i].size, options.segment_bytes + record_bytes);
    for (size_t r = 0; r < segments[i].payloads.size(); ++r) {
      EXPECT_EQ(segments[i].lsns[r], lsn + r);
      EXPECT_EQ(segments[i].payloads[r], Encoding(MakeEffect(1, seq++)));
    }
    lsn += segments[i].payloads.size();
  }
  EXPECT_EQ(lsn, 105u);
  EXPECT_EQ(log->stats().segment_number, segments.back().number);
}

TEST(GroupCommitLogTest, RotateReturnsTheFirstLsnOfTheNewSegmentAndSealsTheOldOne) {
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem faulty(memory.get());
  auto log = OpenLog(&faulty, Policy(FsyncPolicy::kNever));
  ASSERT_NE(log, nullptr);
  for (uint64_t i = 0; i < 5; ++i) Append(log.get(), MakeEffect(1, i));
  auto first = log->Rotate();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->lsn, 5u);
  EXPECT_EQ(first->segment_number, 2u);
  const std::string sealed = JoinPath("data", SegmentFileName(1));
  EXPECT_EQ(faulty.SyncedBytes(sealed), *memory->FileSize(sealed));
  for (uint64_t i = 5; i < 8; ++i) Append(log.get(), MakeEffect(1, i));
  auto second = log->Rotate();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->lsn, 8u);
  EXPECT_EQ(second->segment_number, 3u);
  EXPECT_EQ(log->stats().segment_number, 3u);
  ASSERT_TRUE(log->Close().ok());

  auto segments = ReadSegments(memory.get(), "data");
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_EQ(segments[0].payloads.size(), 5u);
  EXPECT_EQ(segments[1].header.lsn, 5u);
  EXPECT_EQ(segments[1].payloads.size(), 3u);
  EXPECT_EQ(segments[1].lsns.front(), 5u);
  EXPECT_EQ(segments[2].header.lsn, 8u);
  EXPECT_TRUE(segments[2].payloads.empty());
}

// Synchronous replication (docs/replication.md, "Synchronous commit"): with a replica bound, a
// record is durable once it is durable here and below the bound; the committers registered for
// it wake when the bound reaches it, as after a sync; DurableEnd never goes back.
TEST(GroupCommitLogTest, AReplicaBoundHoldsDurabilityUntilTheStandbyAcknowledges) {
  auto fs = NewMemoryFileSystem();
  auto log = OpenLog(fs.get(), Policy(FsyncPolicy::kAlways));
  ASSERT_NE(log, nullptr);
  log->SetReplicaBound(0);
  EXPECT_TRUE(log->has_replica_bound());
  for (int i = 0; i < 3; ++i) Append(log.get(), MakeEffect(1, i));
  const uint64_t end = log->EndLsnOfThisThread();
  ASSERT_EQ(end, 3u);

  TestCommitter committer(log.get());
  ASSERT_TRUE(log->Commit(&committer, end, /*may_block=*/true).ok());
  EXPECT_EQ(log->DurableEnd(), 0u) << "synced here, not acknowledged by the standby";
  EXPECT_EQ(log->WrittenEnd(), end) << "written, so it may be shipped";
  EXPECT_EQ(committer.wakes(), 0);
  // Local durability is enough for a record no reply rests on.
  EXPECT_TRUE(log->WaitDurable(end, /*local_only=*/true).ok());

  log->SetReplicaBound(2);  // the standby acknowledged two records
  EXPECT_EQ(log->DurableEnd(), 2u);
  EXPECT_EQ(committer.wakes(), 0) << "it waits for 3";
  log->SetReplicaBound(5);  // beyond what is local: still only what is synced here
  EXPECT_EQ(log->DurableEnd(), end);
  EXPECT_TRUE(committer.WaitForWakes(1));

  log->SetReplicaBound(1);  // a new, slower standby: what is durable stays durable
  EXPECT_EQ(log->DurableEnd(), end);
  Append(log.get(), MakeEffect(1, 9));
  ASSERT_TRUE(log->Commit(&committer, end + 1, /*may_block=*/false).ok());
  EXPECT_EQ(log->DurableEnd(), end);
  log->SetReplicaBound(std::nullopt);  // no bound (async, or a single node): local rules
  EXPECT_FALSE(log->has_replica_bound());
  EXPECT_TRUE(committer.WaitForWakes(2));  // once the sync thread synced it, if it had not yet
  EXPECT_EQ(log->DurableEnd(), end + 1);
}

TEST(GroupCommitLogTest, ABlockingWaitUnderAReplicaBoundReturnsWhenTheBoundMoves) {
  auto fs = NewMemoryFileSystem();
  auto log = OpenLog(fs.get(), Policy(FsyncPolicy::kAlways));
  ASSERT_NE(log, nullptr);
  log->SetReplicaBound(0);
  Append(log.get(), MakeEffect(1, 0));
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    EXPECT_TRUE(log->WaitDurable(1).ok());
    done = true;
  });
  // It cannot return before the bound moves: the bound is what it waits for.
  ASSERT_TRUE(log->WaitDurable(1, /*local_only=*/true).ok());
  EXPECT_FALSE(done.load());
  log->SetReplicaBound(1);
  waiter.join();
  EXPECT_TRUE(done.load());
}

TEST(GroupCommitLogTest, OpenRefusesToOverwriteAnExistingSegment) {
  auto fs = NewMemoryFileSystem();
  ASSERT_TRUE(WriteStringToFile(fs.get(), JoinPath("data", SegmentFileName(1)), "keep").ok());
  auto log = GroupCommitLog::Open(fs.get(), "data", {}, 0, 1);
  EXPECT_FALSE(log.ok());
  EXPECT_EQ(*ReadFileToString(fs.get(), JoinPath("data", SegmentFileName(1))), "keep");
}

// After the log failed: the waiters of the failed group, every later append and waiter, Flush,
// Rotate and Close report UNAVAILABLE, and nothing is synced again.
void ExpectFailedForGood(GroupCommitLog* log, ObservedFileSystem* observed, uint64_t failed_end) {
  const int syncs = observed->syncs();
  EXPECT_EQ(log->WaitDurable(failed_end).code(), Code::kUnavailable);
  EXPECT_EQ(log->failure().code(), Code::kUnavailable);
  Append(log, MakeEffect(2, 1));
  EXPECT_EQ(log->WaitDurable(log->EndLsnOfThisThread()).code(), Code::kUnavailable);
  EXPECT_EQ(log->WaitDurable(1).code(), Code::kUnavailable);  // even an LSN synced before
  EXPECT_EQ(log->Flush().code(), Code::kUnavailable);
  EXPECT_EQ(log->Rotate().status().code(), Code::kUnavailable);
  EXPECT_EQ(log->Close().code(), Code::kUnavailable);
  EXPECT_EQ(observed->syncs(), syncs);
}

TEST(GroupCommitLogTest, SyncErrorFailsTheGroupAndEveryLaterWriteAndIsNeverRetried) {
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem faulty(memory.get());
  ObservedFileSystem observed(&faulty);
  auto log = OpenLog(&observed, Policy(FsyncPolicy::kAlways));
  ASSERT_NE(log, nullptr);
  Append(log.get(), MakeEffect(1, 0));
  ASSERT_TRUE(log->WaitDurable(1).ok());
  EXPECT_EQ(observed.syncs(), 1);

  faulty.FailNextSyncWithIoError();
  Append(log.get(), MakeEffect(1, 1));
  const Status failed = log->WaitDurable(log->EndLsnOfThisThread());
  EXPECT_EQ(failed.code(), Code::kUnavailable);
  EXPECT_EQ(observed.syncs(), 2);
  ExpectFailedForGood(log.get(), &observed, 2);
  EXPECT_EQ(observed.syncs(), 2);
}

TEST(GroupCommitLogTest, NoSpaceOnAppendFailsTheLogForGood) {
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem faulty(memory.get());
  ObservedFileSystem observed(&faulty);
  auto log = OpenLog(&observed, Policy(FsyncPolicy::kAlways));
  ASSERT_NE(log, nullptr);
  Append(log.get(), MakeEffect(1, 0));
  ASSERT_TRUE(log->WaitDurable(1).ok());

  faulty.FailNextAppendWithNoSpace();
  Append(log.get(), MakeEffect(1, 1));
  EXPECT_EQ(log->WaitDurable(2).code(), Code::kUnavailable);
  EXPECT_EQ(observed.syncs(), 1);  // the failed write is not synced
  ExpectFailedForGood(log.get(), &observed, 2);
}

TEST(GroupCommitLogTest, ShortWriteFailsTheLogForGood) {
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem faulty(memory.get());
  ObservedFileSystem observed(&faulty);
  auto log = OpenLog(&observed, Policy(FsyncPolicy::kNever));
  ASSERT_NE(log, nullptr);
  Append(log.get(), MakeEffect(1, 0));
  ASSERT_TRUE(log->WaitDurable(1).ok());

  faulty.ShortenNextAppend(5);
  Append(log.get(), MakeEffect(1, 1));
  EXPECT_EQ(log->WaitDurable(2).code(), Code::kUnavailable);
  ExpectFailedForGood(log.get(), &observed, 2);
  EXPECT_EQ(observed.syncs(), 0);
  // What reached the file ends in a torn record, which a reader reports as a torn tail.
  auto segments = ReadSegments(memory.get(), "data");
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].payloads.size(), 1u);
  ASSERT_EQ(segments[0].reports.size(), 1u);
  EXPECT_EQ(segments[0].reports[0].kind, DamageKind::kTornTail);
}

TEST(GroupCommitLogTest, EffectAboveTheRecordLimitFailsTheLog) {
  auto fs = NewMemoryFileSystem();
  auto log = OpenLog(fs.get());
  ASSERT_NE(log, nullptr);
  Append(log.get(), MakeEffect(1, 0, kMaxRecordBytes + 1));
  EXPECT_EQ(log->WaitDurable(log->EndLsnOfThisThread()).code(), Code::kUnavailable);
  EXPECT_EQ(log->failure().code(), Code::kUnavailable);
  EXPECT_EQ(log->stats().records, 0u);
}

TEST(GroupCommitLogTest, CloseSyncsEverythingAndLaterAppendsAreRefused) {
  auto memory = NewMemoryFileSystem();
  FaultInjectionFileSystem faulty(memory.get());
  auto log = OpenLog(&faulty, Policy(FsyncPolicy::kNever));
  ASSERT_NE(log, nullptr);
  for (uint64_t i = 0; i < 20; ++i) Append(log.get(), MakeEffect(1, i));
  ASSERT_TRUE(log->Close().ok());
  ASSERT_TRUE(log->Close().ok());  // idempotent
  EXPECT_TRUE(log->WaitDurable(20).ok());
  Append(log.get(), MakeEffect(1, 20));
  EXPECT_EQ(log->WaitDurable(log->EndLsnOfThisThread()).code(), Code::kUnavailable);
  EXPECT_EQ(log->Rotate().status().code(), Code::kUnavailable);
  ASSERT_TRUE(faulty.SimulateCrash().ok());
  EXPECT_EQ(ReadSegments(memory.get(), "data")[0].payloads.size(), 20u);
}

// Under kInterval and kNever a commit writes on the caller's thread and returns: the record is
// durable under the policy once handed to the OS, with no sync and no other thread involved.
TEST(GroupCommitLogTest, IntervalAndNeverCommitsWriteOnTheCallersThreadWithoutSyncing) {
  for (FsyncPolicy policy : {FsyncPolicy::kInterval, FsyncPolicy::kNever}) {
    auto memory = NewMemoryFileSystem();
    ObservedFileSystem observed(memory.get());
    LogOptions options = Policy(policy);
    options.interval_ms = 60'000;
    auto log = OpenLog(&observed, options);
    ASSERT_NE(log, nullptr);
    const std::vector<Effect> samples = SampleEffects();
    log->OnEffect(samples[0]);
    const uint64_t end = log->EndLsnOfThisThread();
    TestCommitter committer(log.get());
    ASSERT_TRUE(log->Commit(&committer, end, /*may_block=*/false).ok());
    EXPECT_EQ(log->DurableEnd(), end);
    EXPECT_EQ(observed.syncs(), 0);
    EXPECT_EQ(ReadSegments(memory.get(), "data")[0].payloads.size(), 1u);
    EXPECT_EQ(committer.wakes(), 0);
    ASSERT_TRUE(log->Close().ok());
    EXPECT_EQ(observed.syncs(), 1);  // Close syncs
  }
}

// Under kInterval the sync thread sleeps until the next sync is due: the writes meanwhile do
// not wake it (each would cost a relaxed request two context switches). It is woken once, when
// the first write leaves something unsynced while it waits with no deadline.
TEST(GroupCommitLogTest, IntervalWritesDoNotWakeTheSyncThreadBeforeItsTime) {
  auto memory = NewMemoryFileSystem();
  LogOptions options = Policy(FsyncPolicy::kInterval);
  options.interval_ms = 60'000;
  auto log = OpenLog(memory.get(), options);
  ASSERT_NE(log, nullptr);
  const std::vector<Effect> samples = SampleEffects();
  TestCommitter committer(log.get());
  for (int i = 0; i < 100; ++i) {
    log->OnEffect(samples[i % samples.size()]);
    ASSERT_TRUE(log->Commit(&committer, log->EndLsnOfThisThread(), /*may_block=*/false).ok());
  }
  EXPECT_EQ(log->stats().writes, 100u);
  EXPECT_LE(log->stats().sync_thread_signals, 1u);
  ASSERT_TRUE(log->Close().ok());
}

// A file system whose files keep books on preallocation as a PosixWritableFile would: the
// bytes written, the bytes allocated, and who moved the allocated end. An Append past it is what
// a real file would pay for with the writer's own chunk of zeroes and fdatasync.
class PreallocationBooksFileSystem final : public ForwardingFileSystem {
 public:
  explicit PreallocationBooksFileSystem(FileSystem* base) : ForwardingFileSystem(base) {}

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    auto file = base()->NewWritableFile(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<WritableFile>(std::make_unique<File>(this, std::move(file).value()));
  }

  int ahead_calls() {
    std::lock_guard lock(mu_);
    return ahead_calls_;
  }
  // Waits until PreallocateAhead ran `n` times.
  bool WaitForAheadCalls(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kEventTimeout, [&] { return ahead_calls_ >= n; });
  }
  int writer_overruns() {
    std::lock_guard lock(mu_);
    return writer_overruns_;
  }
  bool ahead_on(std::thread::id thread) {
    std::lock_guard lock(mu_);
    return std::find(ahead_threads_.begin(), ahead_threads_.end(), thread) != ahead_threads_.end();
  }

 private:
  class File final : public WritableFile {
   public:
    File(PreallocationBooksFileSystem* fs, std::unique_ptr<WritableFile> base)
        : fs_(fs), base_(std::move(base)) {}
    Status Append(std::string_view data) override {
      std::lock_guard lock(fs_->mu_);
      written_ += data.size();
      if (chunk_ > 0 && written_ > allocated_) {
        ++fs_->writer_overruns_;
        while (allocated_ < written_) allocated_ += chunk_;
      }
      return base_->Append(data);
    }
    Status Flush() override { return base_->Flush(); }
    Status Sync() override { return base_->Sync(); }
    Status SyncFlushed() override { return base_->SyncFlushed(); }
    Status Close() override { return base_->Close(); }
    void SetPreallocation(uint64_t chunk_bytes) override { chunk_ = chunk_bytes; }
    bool PreallocationLow() const override {
      std::lock_guard lock(fs_->mu_);
      return chunk_ > 0 && written_ + chunk_ / 2 > allocated_;
    }
    Status PreallocateAhead() override {
      std::lock_guard lock(fs_->mu_);
      allocated_ += chunk_;
      ++fs_->ahead_calls_;
      fs_->ahead_threads_.push_back(std::this_thread::get_id());
      fs_->cv_.notify_all();
      return Status::Ok();
    }

   private:
    PreallocationBooksFileSystem* const fs_;
    std::unique_ptr<WritableFile> base_;
    uint64_t chunk_ = 0;
    uint64_t written_ = 0;    // GUARDED_BY(fs_->mu_)
    uint64_t allocated_ = 0;  // GUARDED_BY(fs_->mu_)
  };

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int ahead_calls_ = 0;
  int writer_overruns_ = 0;
  std::vector<std::thread::id> ahead_threads_;
};

// The zeroes ahead of a segment's end are the sync thread's work under kInterval and kAlways:
// a writer that finds less than half a chunk ahead asks for the next chunk and goes on, and
// (given the sync thread's turn, which the test waits for) never writes past the allocated end,
// where a real file would make it write the chunk and fdatasync itself. Under kNever, with no
// sync thread, the writer keeps doing it.
TEST(GroupCommitLogTest, TheSyncThreadPreallocatesAheadOfTheWriter) {
  for (FsyncPolicy policy : {FsyncPolicy::kInterval, FsyncPolicy::kAlways, FsyncPolicy::kNever}) {
    SCOPED_TRACE(static_cast<int>(policy));
    auto memory = NewMemoryFileSystem();
    PreallocationBooksFileSystem books(memory.get());
    LogOptions options = Policy(policy);
    options.interval_ms = 60'000;  // no timed sync during the test
    options.preallocate_bytes = 4096;
    auto log = OpenLog(&books, options);
    ASSERT_NE(log, nullptr);
    const std::vector<Effect> samples = SampleEffects();
    TestCommitter committer(log.get());
    uint64_t asked = 0;
    for (int i = 0; i < 400; ++i) {
      log->OnEffect(samples[i % samples.size()]);
      ASSERT_TRUE(log->Commit(&committer, log->EndLsnOfThisThread(), /*may_block=*/true).ok());
      if (policy != FsyncPolicy::kNever && log->stats().preallocations_asked > asked) {
        ++asked;
        ASSERT_TRUE(books.WaitForAheadCalls(static_cast<int>(asked)));
      }
    }
    EXPECT_GT(log->stats().bytes, 5u * 4096);  // several chunks were written into
    if (policy == FsyncPolicy::kNever) {
      EXPECT_EQ(books.ahead_calls(), 0);
      EXPECT_GT(books.writer_overruns(), 4);
    } else {
      EXPECT_GE(books.ahead_calls(), 5);
      EXPECT_EQ(books.writer_overruns(), 1);  // the segment's first chunk, at its header
      EXPECT_FALSE(books.ahead_on(std::this_thread::get_id()));
    }
    ASSERT_TRUE(log->Close().ok());
  }
}

TEST(GroupCommitLogTest, ParseFsyncPolicyAcceptsTheThreeForms) {
  auto always = ParseFsyncPolicy("always");
  ASSERT_TRUE(always.ok());
  EXPECT_EQ(always->policy, FsyncPolicy::kAlways);
  auto never = ParseFsyncPolicy("never");
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(never->policy, FsyncPolicy::kNever);
  LogOptions base;
  base.segment_bytes = 4096;
  auto interval = ParseFsyncPolicy("interval:250", base);
  ASSERT_TRUE(interval.ok());
  EXPECT_EQ(interval->policy, FsyncPolicy::kInterval);
  EXPECT_EQ(interval->interval_ms, 250);
  EXPECT_EQ(interval->segment_bytes, 4096u);  // the rest of `base` is kept
  EXPECT_EQ(ParseFsyncPolicy("interval:1")->interval_ms, 1);
  EXPECT_EQ(ParseFsyncPolicy("interval:60000")->interval_ms, 60000);
}

TEST(GroupCommitLogTest, ParseFsyncPolicyRejectsEverythingElse) {
  for (std::string_view bad : {"", "Always", "sometimes", "interval", "interval:", "interval:0",
                               "interval:60001", "interval:-5", "interval:+5", "interval:10ms",
                               "interval: 10", "interval:99999999999", "always ", "never\n"}) {
    SCOPED_TRACE(bad);
    auto parsed = ParseFsyncPolicy(bad);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument);
  }
}

}  // namespace
}  // namespace sundial::wal::test
