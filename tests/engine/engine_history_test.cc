// History (docs/semantics.md, "History"; engine/history.h): each message's transitions with
// time, states, attempt, lease token, actor and text; worker notes; bounded per message by the
// queue's history_max (0: off); counted in memory; replayed, exported and hashed; gone at GC.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/history.h"
#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

class HistoryTest : public EngineTest {
 protected:
  MessageHistory HistoryOf(std::string_view queue, std::string_view id) {
    Result<MessageHistory> h = engine().History(queue, id);
    EXPECT_TRUE(h.ok()) << CodeName(h.status().code()) << " " << h.status().detail();
    return h.ok() ? *h : MessageHistory{};
  }
  static std::vector<HistoryEvent> EventsOf(const MessageHistory& h) {
    std::vector<HistoryEvent> out;
    for (const HistoryEntry& e : h.entries) out.push_back(e.event);
    return out;
  }
  MessageRecord TakeAs(std::string_view queue, std::string worker_id, int64_t lease_ms = 30'000) {
    DequeueRequest request;
    request.worker_id = std::move(worker_id);
    request.lease_ms = lease_ms;
    Result<std::vector<MessageRecord>> r = engine().Dequeue(queue, request);
    EXPECT_TRUE(r.ok() && r->size() == 1);
    return r.ok() && r->size() == 1 ? (*r)[0] : MessageRecord{};
  }
  Status Fail(std::string_view queue, const MessageRecord& m, std::string error) {
    FailRequest request;
    request.id = m.id;
    request.lease_token = m.lease_token;
    request.error = std::move(error);
    request.retry_delay_ms = 0;
    return engine().Fail(queue, request).status();
  }
  // Replays every recorded effect (not the derived ones: the log holds their causes) into a
  // new engine, and loads an export into another; both must have the same digest and history.
  void ExpectReplayAndExportAgree(std::string_view queue, std::string_view id) {
    Engine replayed(DefaultOptions(), &clock_, nullptr);
    for (const RecordedEffect& e : sink_.All()) {
      if (e.derived) continue;
      ASSERT_TRUE(replayed.Apply(e.View()).ok()) << EffectTypeName(e.type);
    }
    EXPECT_EQ(replayed.Digest(), engine().Digest());
    EXPECT_EQ(*replayed.History(queue, id), HistoryOf(queue, id));
    EXPECT_EQ(replayed.memory_bytes(), engine().memory_bytes());

    RecordingSink exported;
    engine().ExportState(&exported);
    Engine loaded(DefaultOptions(), &clock_, nullptr);
    for (const RecordedEffect& e : exported.All()) ASSERT_TRUE(loaded.Apply(e.View()).ok());
    EXPECT_EQ(loaded.Digest(), engine().Digest());
    EXPECT_EQ(*loaded.History(queue, id), HistoryOf(queue, id));
    EXPECT_EQ(loaded.memory_bytes(), engine().memory_bytes());
  }
};

TEST_F(HistoryTest, EveryTransitionIsRecordedWithItsTimeStatesAttemptTokenAndText) {
  Put("q", "a");
  AdvanceClockOnly(10);
  MessageRecord first = TakeAs("q", "worker-1");
  AdvanceClockOnly(10);
  ASSERT_TRUE(Fail("q", first, "boom").ok());
  AdvanceClockOnly(10);
  MessageRecord second = TakeAs("q", "worker-2");
  ASSERT_TRUE(engine().Complete("q", {{"a", second.lease_token}})[0].ok());

  MessageHistory h = HistoryOf("q", "a");
  EXPECT_EQ(h.dropped, 0u);
  ASSERT_EQ(EventsOf(h), (std::vector<HistoryEvent>{HistoryEvent::kEnqueued, HistoryEvent::kLeased,
                                                    HistoryEvent::kFailed, HistoryEvent::kLeased,
                                                    HistoryEvent::kCompleted}));
  const auto& e = h.entries;
  EXPECT_EQ(e[0].time, kStartTime);
  EXPECT_EQ(e[0].to, MessageState::kPending);
  EXPECT_EQ(e[0].lease_token, 0u);
  EXPECT_EQ(e[1].time, kStartTime + 10);
  EXPECT_EQ(e[1].from, MessageState::kPending);
  EXPECT_EQ(e[1].to, MessageState::kRunning);
  EXPECT_EQ(e[1].attempt, 1u);
  EXPECT_EQ(e[1].lease_token, first.lease_token);
  EXPECT_EQ(e[1].text, "worker-1");
  // The fail names the lease it ended and its worker, with the error as text.
  EXPECT_EQ(e[2].from, MessageState::kRunning);
  EXPECT_EQ(e[2].to, MessageState::kPending);
  EXPECT_EQ(e[2].lease_token, first.lease_token);
  EXPECT_EQ(e[2].worker_id, "worker-1");
  EXPECT_EQ(e[2].text, "boom");
  EXPECT_EQ(e[3].attempt, 2u);
  EXPECT_EQ(e[3].worker_id, "worker-2");
  EXPECT_EQ(e[4].to, MessageState::kCompleted);
  EXPECT_EQ(e[4].lease_token, second.lease_token);
  EXPECT_EQ(e[4].worker_id, "worker-2");
  EXPECT_EQ(HistoryActorOf(e[0].event), HistoryActor::kRequest);
  EXPECT_EQ(HistoryActorOf(e[4].event), HistoryActor::kWorker);
  ExpectReplayAndExportAgree("q", "a");
}

TEST_F(HistoryTest, TimersAndOperatorsAreActorsToo) {
  Put("q", "a");
  MessageRecord m = TakeAs("q", "w", /*lease_ms=*/100);
  AdvanceTime(100);  // the lease expires
  ReprioritizeRequest r;
  r.priority = 5;
  ASSERT_TRUE(engine().Reprioritize("q", "a", r).ok());
  ASSERT_TRUE(engine().Cancel("q", {"a"})[0].ok());
  MessageHistory h = HistoryOf("q", "a");
  ASSERT_EQ(EventsOf(h),
            (std::vector<HistoryEvent>{HistoryEvent::kEnqueued, HistoryEvent::kLeased,
                                       HistoryEvent::kLeaseExpired, HistoryEvent::kReprioritized,
                                       HistoryEvent::kCanceled}));
  EXPECT_EQ(HistoryActorOf(h.entries[2].event), HistoryActor::kTimer);
  EXPECT_EQ(h.entries[2].lease_token, m.lease_token);  // the lease that expired
  EXPECT_EQ(HistoryActorOf(h.entries[4].event), HistoryActor::kRequest);
  ExpectReplayAndExportAgree("q", "a");
}

TEST_F(HistoryTest, NotesNeedTheLeaseAndAreReplayed) {
  Put("q", "a");
  MessageRecord m = TakeAs("q", "w");
  ASSERT_TRUE(engine().Note("q", "a", m.lease_token, "half way").ok());
  EXPECT_EQ(engine().Note("q", "a", m.lease_token + 1, "x").code(), Code::kFailedPrecondition);
  EXPECT_EQ(engine().Note("q", "b", m.lease_token, "x").code(), Code::kNotFound);
  EXPECT_EQ(engine().Note("q", "a", m.lease_token, "").code(), Code::kInvalidArgument);
  EXPECT_EQ(engine().Note("q", "a", m.lease_token, std::string(kMaxNoteBytes + 1, 'n')).code(),
            Code::kInvalidArgument);
  MessageHistory h = HistoryOf("q", "a");
  ASSERT_EQ(h.entries.size(), 3u);
  EXPECT_EQ(h.entries[2].event, HistoryEvent::kNoted);
  EXPECT_EQ(h.entries[2].text, "half way");
  EXPECT_EQ(h.entries[2].worker_id, "w");
  // The note is logged as an effect of its own.
  const std::vector<RecordedEffect> all = sink_.All();
  ASSERT_EQ(all.back().type, EffectType::kMessageNoted);
  EXPECT_EQ(all.back().note, "half way");
  EXPECT_EQ(all.back().lease_token, m.lease_token);
  ExpectReplayAndExportAgree("q", "a");
}

TEST_F(HistoryTest, PastHistoryMaxTheFirstAndTheLatestAreKeptAndTheRestCounted) {
  QueueSettings s;
  s.history_max = 3;
  MakeQueue("q", s);
  Put("q", "a");
  for (int i = 0; i < 4; ++i) {
    MessageRecord m = TakeAs("q", "w" + std::to_string(i));
    ASSERT_TRUE(Fail("q", m, "e" + std::to_string(i)).ok());
  }
  MessageHistory h = HistoryOf("q", "a");
  ASSERT_EQ(h.entries.size(), 3u);
  EXPECT_EQ(h.dropped, 6u);  // 9 entries made, 3 kept
  EXPECT_EQ(h.entries[0].event, HistoryEvent::kEnqueued);
  EXPECT_EQ(h.entries[1].event, HistoryEvent::kLeased);
  EXPECT_EQ(h.entries[1].text, "w3");
  EXPECT_EQ(h.entries[2].text, "e3");
  EXPECT_EQ(h.entries[2].worker_id, "w3");
  ExpectReplayAndExportAgree("q", "a");
}

TEST_F(HistoryTest, ConsecutiveExtendsOfOneLeaseAreOneEntry) {
  Put("q", "a");
  MessageRecord m = TakeAs("q", "w");
  for (int i = 0; i < 50; ++i) {
    AdvanceClockOnly(10);
    ASSERT_TRUE(engine().Extend("q", "a", m.lease_token, 30'000).ok());
  }
  MessageHistory h = HistoryOf("q", "a");
  ASSERT_EQ(EventsOf(h), (std::vector<HistoryEvent>{HistoryEvent::kEnqueued, HistoryEvent::kLeased,
                                                    HistoryEvent::kExtended}));
  EXPECT_EQ(h.entries[2].time, kStartTime + 500);
  ExpectReplayAndExportAgree("q", "a");
}

// A message only enqueued (most of a backlog) keeps its history as a bit of its record, not a
// block: it reads, replays, exports and is counted as the block would be, and costs no memory.
TEST_F(HistoryTest, AnEnqueueAloneReadsAsItsEntryWithoutABlock) {
  QueueSettings off;
  off.history_max = 0;
  MakeQueue("off", off);
  MakeQueue("on");
  const uint64_t empty = engine().allocated_bytes();
  for (int i = 0; i < 1'000; ++i) Put("off", "m" + std::to_string(i));
  const uint64_t without = engine().allocated_bytes() - empty;
  for (int i = 0; i < 1'000; ++i) Put("on", "m" + std::to_string(i));
  EXPECT_EQ(engine().allocated_bytes() - empty, 2 * without);  // nothing for the histories
  EXPECT_EQ(
      GetQueueInfo("on").memory_bytes,
      GetQueueInfo("off").memory_bytes + 1'000 * (kHistoryHeaderBytes + kHistoryEntryFixedBytes));

  MessageHistory h = HistoryOf("on", "m7");
  ASSERT_EQ(EventsOf(h), std::vector<HistoryEvent>{HistoryEvent::kEnqueued});
  EXPECT_EQ(h.dropped, 0u);
  EXPECT_EQ(h.entries[0].time, kStartTime);
  EXPECT_EQ(h.entries[0].from, MessageState::kPending);
  EXPECT_EQ(h.entries[0].to, MessageState::kPending);
  EXPECT_EQ(h.entries[0].attempt, 0u);
  EXPECT_EQ(h.entries[0].lease_token, 0u);
  EXPECT_TRUE(h.entries[0].text.empty());
  ExpectReplayAndExportAgree("on", "m7");

  // The next entry is appended after it, as to a block.
  AdvanceClockOnly(5);
  MessageRecord m = TakeAs("on", "w");
  h = HistoryOf("on", m.id);
  ASSERT_EQ(EventsOf(h),
            (std::vector<HistoryEvent>{HistoryEvent::kEnqueued, HistoryEvent::kLeased}));
  EXPECT_EQ(h.entries[0].time, kStartTime);
  EXPECT_EQ(h.entries[1].time, kStartTime + 5);
  EXPECT_EQ(h.entries[1].worker_id, "w");
  ExpectReplayAndExportAgree("on", m.id);
}

// Transitions while history is off leave the enqueue as it was; a dead-letter move carries it.
TEST_F(HistoryTest, AnEnqueueAloneOutlivesHistoryOffAndADeadLetterMove) {
  MakeQueueDeadLetteringAtFirstFailure("q", "dlq");
  Put("q", "a");
  const uint64_t accounted = GetQueueInfo("q").memory_bytes;
  QueueSettingsUpdate off;
  off.history_max = 0;
  ASSERT_TRUE(engine().UpdateQueue("q", off).ok());
  AdvanceClockOnly(10);
  MessageRecord m = TakeAs("q", "w");
  EXPECT_EQ(GetQueueInfo("q").memory_bytes, accounted);
  ASSERT_EQ(EventsOf(HistoryOf("q", "a")), std::vector<HistoryEvent>{HistoryEvent::kEnqueued});
  EXPECT_EQ(HistoryOf("q", "a").entries[0].to, MessageState::kPending);  // not its state now
  ASSERT_TRUE(Fail("q", m, "fatal").ok());
  EXPECT_EQ(GetQueueInfo("q").memory_bytes, 0u);

  MessageHistory h = HistoryOf("dlq", "a");
  ASSERT_EQ(EventsOf(h),
            (std::vector<HistoryEvent>{HistoryEvent::kEnqueued, HistoryEvent::kDeadLettered}));
  EXPECT_EQ(h.entries[0].time, kStartTime);
  EXPECT_EQ(h.entries[1].time, kStartTime + 10);
  EXPECT_EQ(h.entries[1].text, "fatal");
  ExpectReplayAndExportAgree("dlq", "a");
}

TEST_F(HistoryTest, HistoryMaxZeroKeepsNoneAndRefusesNotes) {
  QueueSettings s;
  s.history_max = 0;
  MakeQueue("q", s);
  Put("q", "a");
  const uint64_t bytes = engine().memory_bytes();
  MessageRecord m = TakeAs("q", "w");
  EXPECT_TRUE(HistoryOf("q", "a").entries.empty());
  EXPECT_EQ(engine().memory_bytes(), bytes);
  EXPECT_EQ(engine().Note("q", "a", m.lease_token, "x").code(), Code::kFailedPrecondition);
  QueueSettings bad;
  bad.history_max = 1;
  EXPECT_EQ(engine().CreateQueue("r", bad).status().code(), Code::kInvalidArgument);
  bad.history_max = kMaxHistoryEntries + 1;
  EXPECT_EQ(engine().CreateQueue("r", bad).status().code(), Code::kInvalidArgument);
}

TEST_F(HistoryTest, HistoryCountsInMemoryAndIsGoneAtGc) {
  QueueSettings s;
  s.retention_ms = 1'000;
  MakeQueue("q", s);
  QueueSettings off = s;
  off.history_max = 0;
  MakeQueue("off", off);
  Put("q", "a");
  Put("off", "a");
  // One entry of 22 bytes after a 14-byte header.
  EXPECT_EQ(GetQueueInfo("q").memory_bytes,
            GetQueueInfo("off").memory_bytes + kHistoryHeaderBytes + kHistoryEntryFixedBytes);
  MessageRecord m = TakeAs("q", "worker");
  ASSERT_TRUE(engine().Complete("q", {{"a", m.lease_token}})[0].ok());
  EXPECT_EQ(GetQueueInfo("q").memory_bytes, GetQueueInfo("off").memory_bytes + kHistoryHeaderBytes +
                                                3 * kHistoryEntryFixedBytes +
                                                std::string("worker").size());
  AdvanceTime(1'000);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  EXPECT_EQ(GetQueueInfo("q").memory_bytes, 0u);
}

TEST_F(HistoryTest, ADeadLetteredMessageTakesItsHistoryAlong) {
  MakeQueueDeadLetteringAtFirstFailure("q", "dlq");
  Put("q", "a");
  MessageRecord m = TakeAs("q", "w");
  ASSERT_TRUE(Fail("q", m, "fatal").ok());
  EXPECT_EQ(GetQueueInfo("q").memory_bytes, 0u);
  MessageHistory h = HistoryOf("dlq", "a");
  ASSERT_EQ(EventsOf(h), (std::vector<HistoryEvent>{HistoryEvent::kEnqueued, HistoryEvent::kLeased,
                                                    HistoryEvent::kDeadLettered}));
  EXPECT_EQ(h.entries[2].text, "fatal");
  EXPECT_EQ(h.entries[2].lease_token, m.lease_token);
  EXPECT_EQ(h.entries[2].to, MessageState::kPending);
  ExpectReplayAndExportAgree("dlq", "a");
}

TEST_F(HistoryTest, ADependentsReleaseIsRecordedLiveAndOnReplay) {
  Put("q", "parent");
  EnqueueItem child = Item("child");
  child.depends_on = {"parent"};
  Put("q", std::move(child));
  MessageRecord m = TakeAs("q", "w");
  ASSERT_EQ(m.id, "parent");
  ASSERT_TRUE(engine().Complete("q", {{"parent", m.lease_token}})[0].ok());
  MessageHistory h = HistoryOf("q", "child");
  ASSERT_EQ(EventsOf(h),
            (std::vector<HistoryEvent>{HistoryEvent::kEnqueued, HistoryEvent::kReleased}));
  EXPECT_EQ(h.entries[0].to, MessageState::kWaiting);
  EXPECT_EQ(HistoryActorOf(h.entries[1].event), HistoryActor::kDependency);
  ExpectReplayAndExportAgree("q", "child");
}

// Found by the model test: a waiting message keeps the visible_at it will have in its timer's
// token slot (queue.h), and its enqueued entry took that as its lease token. An entry names a
// lease only when it concerns one (docs/semantics.md, "History").
TEST_F(HistoryTest, TheEnqueuedEntryOfADelayedDependentNamesNoLease) {
  Put("q", "parent");
  EnqueueItem child = Item("child");
  child.depends_on = {"parent"};
  child.delay_ms = 5000;
  Put("q", std::move(child));
  MessageHistory h = HistoryOf("q", "child");
  ASSERT_EQ(EventsOf(h), (std::vector<HistoryEvent>{HistoryEvent::kEnqueued}));
  EXPECT_EQ(h.entries[0].to, MessageState::kWaiting);
  EXPECT_EQ(h.entries[0].lease_token, 0u);
  ExpectReplayAndExportAgree("q", "child");
}

// Found by the model test: history turned on while a message is running. The fail of that
// lease must name it (docs/semantics.md, "History": the lease it concerns), though its leased
// entry was not recorded; it named no lease, or an earlier lease (and that lease's worker).
TEST_F(HistoryTest, AnEntryEndingALeaseRecordedBeforeHistoryWasOnNamesThatLease) {
  MakeQueue("q", QueueSettings{});
  Put("q", "a");
  MessageRecord first = TakeAs("q", "w1");
  ASSERT_TRUE(Fail("q", first, "one").ok());
  QueueSettingsUpdate off;
  off.history_max = 0;
  ASSERT_TRUE(engine().UpdateQueue("q", off).ok());
  MessageRecord second = TakeAs("q", "w2");
  QueueSettingsUpdate on;
  on.history_max = 5;
  ASSERT_TRUE(engine().UpdateQueue("q", on).ok());
  ASSERT_TRUE(Fail("q", second, "two").ok());
  QueueSettings none;
  none.history_max = 0;
  MakeQueue("r", none);
  Put("r", "b");
  MessageRecord third = TakeAs("r", "w3");
  ASSERT_TRUE(engine().UpdateQueue("r", on).ok());
  ASSERT_TRUE(engine().Cancel("r", {"b"})[0].ok());

  MessageHistory a = HistoryOf("q", "a");
  ASSERT_EQ(EventsOf(a), (std::vector<HistoryEvent>{HistoryEvent::kEnqueued, HistoryEvent::kLeased,
                                                    HistoryEvent::kFailed, HistoryEvent::kFailed}));
  EXPECT_EQ(a.entries[3].lease_token, second.lease_token);
  EXPECT_EQ(a.entries[3].worker_id, "");  // the lease's entry is not kept
  MessageHistory b = HistoryOf("r", "b");
  ASSERT_EQ(EventsOf(b), (std::vector<HistoryEvent>{HistoryEvent::kCanceled}));
  EXPECT_EQ(b.entries[0].lease_token, third.lease_token);
  ExpectReplayAndExportAgree("q", "a");
  ExpectReplayAndExportAgree("r", "b");
}

TEST_F(HistoryTest, TheDigestSeesHistory) {
  Put("q", "a");
  MessageRecord m = TakeAs("q", "w");
  const uint64_t before = engine().Digest();
  ASSERT_TRUE(engine().Note("q", "a", m.lease_token, "n").ok());
  EXPECT_NE(engine().Digest(), before);
}

TEST_F(HistoryTest, WorkerIdIsValidated) {
  Put("q", "a");
  DequeueRequest request;
  request.worker_id = std::string(kMaxWorkerIdBytes + 1, 'w');
  EXPECT_EQ(engine().Dequeue("q", request).status().code(), Code::kInvalidArgument);
  request.worker_id = "\xff";
  EXPECT_EQ(engine().Dequeue("q", request).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine().History("q", "nope").status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace sundial::engine_test
