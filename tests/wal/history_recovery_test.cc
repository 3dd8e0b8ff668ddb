// History across restarts (docs/semantics.md, "History"; docs/wal-format.md, "History"):
// each message's history comes back equal from the log (derived again from the effects, with
// the logged worker_id and notes), from a snapshot (restated whole), and from a snapshot
// followed by the log; the new encodings round-trip and leave effects without them unchanged.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/history.h"
#include "tests/wal/recovery_test_util.h"
#include "tests/wal/wal_test_util.h"
#include "wal/checkpointer.h"
#include "wal/effect_codec.h"
#include "wal/snapshot.h"

namespace sundial::wal::test {
namespace {

const std::string kDir = "data";

MessageHistory HistoryOf(Engine& engine, std::string_view queue, std::string_view id) {
  Result<MessageHistory> h = engine.History(queue, id);
  EXPECT_TRUE(h.ok()) << queue << "/" << id;
  return h.ok() ? *h : MessageHistory{};
}

// A workload touching every source of history: worker ids, fails, notes, extends, a lease
// expiry, a cancel, a dead-letter move and a bounded queue.
void Work(Engine& engine, ManualClock& clock, int round) {
  const std::string n = std::to_string(round);
  QueueSettings dlq_settings;
  (void)engine.CreateQueue("dlq", dlq_settings);
  QueueSettings jobs;
  jobs.max_attempts = 2;
  jobs.dead_letter_queue = "dlq";
  jobs.lease_ms = 1'000;
  jobs.retry_backoff_ms = 0;
  jobs.retry_backoff_max_ms = 0;
  jobs.history_max = 4;
  (void)engine.CreateQueue("jobs", jobs);
  for (const char* id : {"a", "b", "c", "d"}) {
    EnqueueItem item;
    item.id = std::string(id) + n;
    item.payload = "p";
    ASSERT_TRUE(engine.Enqueue("jobs", {item})[0].ok());
  }
  DequeueRequest dequeue;
  dequeue.max = 4;
  dequeue.worker_id = "worker-" + n;
  auto leased = engine.Dequeue("jobs", dequeue);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->size(), 4u);
  clock.Advance(5);
  for (const MessageRecord& m : *leased) {
    ASSERT_TRUE(engine.Note("jobs", m.id, m.lease_token, "note on " + m.id).ok());
    ASSERT_TRUE(engine.Extend("jobs", m.id, m.lease_token, 1'000).ok());
  }
  clock.Advance(5);
  ASSERT_TRUE(engine.Complete("jobs", {{(*leased)[0].id, (*leased)[0].lease_token}})[0].ok());
  FailRequest fail;
  fail.id = (*leased)[1].id;
  fail.lease_token = (*leased)[1].lease_token;
  fail.error = "boom";
  ASSERT_TRUE(engine.Fail("jobs", fail).ok());  // retried at once
  ASSERT_TRUE(engine.Cancel("jobs", {(*leased)[2].id})[0].ok());
  clock.Advance(2'000);
  engine.Advance(clock.NowMs());  // d's lease expires
  dequeue.worker_id = "second-" + n;
  auto again = engine.Dequeue("jobs", dequeue);
  ASSERT_TRUE(again.ok());
  for (const MessageRecord& m : *again) {
    FailRequest last;
    last.id = m.id;
    last.lease_token = m.lease_token;
    last.error = "fatal " + m.id;
    ASSERT_TRUE(engine.Fail("jobs", last).ok());  // second attempt: dead-lettered
  }
}

std::vector<std::pair<std::string, std::string>> Messages(int rounds) {
  std::vector<std::pair<std::string, std::string>> out;
  for (int r = 0; r < rounds; ++r) {
    const std::string n = std::to_string(r);
    out.push_back({"jobs", "a" + n});
    out.push_back({"jobs", "c" + n});
    out.push_back({"dlq", "b" + n});
    out.push_back({"dlq", "d" + n});
  }
  return out;
}

TEST(HistoryRecovery, HistoryComesBackEqualFromTheLog) {
  auto fs = NewMemoryFileSystem();
  uint64_t digest;
  std::vector<MessageHistory> before;
  {
    LoggedEngine e;
    ASSERT_TRUE(e.Open(fs.get(), kDir).ok());
    Work(*e.engine, e.clock, 0);
    ASSERT_TRUE(e.Sync().ok());
    digest = e.engine->Digest();
    for (const auto& [q, id] : Messages(1)) before.push_back(HistoryOf(*e.engine, q, id));
  }
  ASSERT_EQ(before[2].entries.back().event, HistoryEvent::kDeadLettered);
  ASSERT_GT(before[2].dropped, 0u);  // history_max 4
  EXPECT_EQ(RecoveredDigest(fs.get(), kDir), digest);
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs.get(), kDir).ok());
  EXPECT_EQ(e.engine->Digest(), digest);
  size_t i = 0;
  for (const auto& [q, id] : Messages(1)) EXPECT_EQ(HistoryOf(*e.engine, q, id), before[i++]);
}

TEST(HistoryRecovery, HistoryComesBackEqualFromASnapshotAndFromASnapshotThenTheLog) {
  auto fs = NewMemoryFileSystem();
  uint64_t digest;
  std::vector<MessageHistory> before;
  WorkAroundACheckpoint(fs.get(), kDir, Work, [&](Engine& engine, ManualClock&) {
    digest = engine.Digest();
    for (const auto& [q, id] : Messages(2)) before.push_back(HistoryOf(engine, q, id));
  });
  ASSERT_FALSE(HasFatalFailure());
  RecoveryReport report;
  EXPECT_EQ(RecoveredDigest(fs.get(), kDir, &report), digest);
  EXPECT_FALSE(report.snapshot.empty());
  LoggedEngine e;
  ASSERT_TRUE(e.Open(fs.get(), kDir).ok());
  size_t i = 0;
  for (const auto& [q, id] : Messages(2)) EXPECT_EQ(HistoryOf(*e.engine, q, id), before[i++]);

  // A snapshot of the recovered engine loads to the same histories.
  auto info = WriteSnapshot(fs.get(), "snap", *e.engine, 10);
  ASSERT_TRUE(info.ok());
  Engine loaded(TestEngineOptions(), &e.clock, nullptr);
  RecordingReporter reporter;
  ASSERT_TRUE(LoadSnapshot(fs.get(), "snap", info->file, &loaded, &reporter).ok());
  EXPECT_EQ(loaded.Digest(), digest);
  i = 0;
  for (const auto& [q, id] : Messages(2)) EXPECT_EQ(HistoryOf(loaded, q, id), before[i++]);
}

TEST(HistoryCodec, WorkerIdNoteHistoryAndHistoryMaxRoundTrip) {
  Effect leased;
  leased.type = EffectType::kMessageChanged;
  leased.cause = ChangeCause::kLeased;
  leased.queue = "q";
  leased.id = "a";
  leased.to = MessageState::kRunning;
  leased.lease_token = 9;
  const std::string plain = Encode(leased);
  leased.worker_id = "w-1";
  const std::string with_worker = Encode(leased);
  // The extension follows the version-1 body, which is unchanged.
  EXPECT_EQ(with_worker.substr(0, plain.size()), plain);
  DecodedEffect d;
  ASSERT_TRUE(DecodeEffect(with_worker, &d).ok());
  EXPECT_EQ(d.effect().worker_id, "w-1");
  ASSERT_TRUE(DecodeEffect(plain, &d).ok());
  EXPECT_EQ(d.effect().worker_id, "");

  Effect noted;
  noted.type = EffectType::kMessageNoted;
  noted.time = 77;
  noted.queue = "q";
  noted.id = "a";
  noted.lease_token = 9;
  noted.note = "half way";
  ASSERT_TRUE(DecodeEffect(Encode(noted), &d).ok());
  ExpectSameLoggedFields(noted, d.effect());
  noted.note = "";
  EXPECT_FALSE(DecodeEffect(Encode(noted), &d).ok());

  QueueSettings settings;
  Effect created;
  created.type = EffectType::kQueueCreated;
  created.queue = "q";
  created.settings = &settings;
  const std::string default_settings = Encode(created);
  settings.history_max = 0;
  const std::string off = Encode(created);
  EXPECT_EQ(off.size(), default_settings.size() + 5);  // tag and u32 after the flags
  ASSERT_TRUE(DecodeEffect(off, &d).ok());
  EXPECT_EQ(d.effect().settings->history_max, 0u);
  ASSERT_TRUE(DecodeEffect(default_settings, &d).ok());
  EXPECT_EQ(d.effect().settings->history_max, kDefaultHistoryMax);

  // A snapshot's enqueue with its history block.
  ManualClock clock(kStartTime);
  Engine engine(TestEngineOptions(), &clock, nullptr);
  EnqueueItem item;
  item.id = "a";
  item.payload = "p";
  ASSERT_TRUE(engine.Enqueue("q", {item})[0].ok());
  struct Capture : EffectSink {
    std::vector<std::string> encodings;
    void OnEffect(const Effect& e) override { encodings.push_back(Encode(e)); }
  } capture;
  engine.ExportState(&capture);
  ASSERT_EQ(capture.encodings.size(), 2u);
  ASSERT_TRUE(DecodeEffect(capture.encodings[1], &d).ok());
  // The enqueue alone: the one-byte mark, which a load turns back into that entry.
  EXPECT_EQ(d.effect().history, kEnqueuedHistoryMark);
  Engine loaded(TestEngineOptions(), &clock, nullptr);
  for (const std::string& encoding : capture.encodings) {
    ASSERT_TRUE(DecodeEffect(encoding, &d).ok());
    ASSERT_TRUE(loaded.Apply(d.effect()).ok());
  }
  EXPECT_EQ(loaded.Digest(), engine.Digest());
  EXPECT_EQ(*loaded.History("q", "a"), *engine.History("q", "a"));
  EXPECT_EQ(loaded.memory_bytes(), engine.memory_bytes());

  // With a second entry, the block: a header and two entries, the lease's with its worker id.
  DequeueRequest take;
  take.worker_id = "w";
  ASSERT_TRUE(engine.Dequeue("q", take).ok());
  capture.encodings.clear();
  engine.ExportState(&capture);
  ASSERT_TRUE(DecodeEffect(capture.encodings[1], &d).ok());
  EXPECT_EQ(d.effect().history.size(), 14u + 22u + 22u + 1u);
}

TEST(HistoryCodec, AMalformedHistoryBlockDoesNotApply) {
  ManualClock clock(kStartTime);
  Engine engine(TestEngineOptions(), &clock, nullptr);
  QueueSettings settings;
  Effect created;
  created.type = EffectType::kQueueCreated;
  created.queue = "q";
  created.settings = &settings;
  ASSERT_TRUE(engine.Apply(created).ok());
  Effect bad;
  bad.type = EffectType::kMessageEnqueued;
  bad.queue = "q";
  bad.id = "b";
  bad.restated = true;
  bad.history = "not a history block";
  EXPECT_EQ(engine.Apply(bad).code(), Code::kInternal);
  EXPECT_EQ(engine.Get("q", "b").status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace sundial::wal::test
namespace sundial {
inline void PrintTo(const MessageHistory& h, std::ostream* os) {
  *os << "dropped " << h.dropped << ":";
  for (const HistoryEntry& e : h.entries) {
    *os << " [" << e.time << " " << HistoryEventName(e.event) << " " << StateName(e.from) << "->"
        << StateName(e.to) << " a" << e.attempt << " t" << e.lease_token << " '" << e.text << "' w'"
        << e.worker_id << "']";
  }
}
}  // namespace sundial
