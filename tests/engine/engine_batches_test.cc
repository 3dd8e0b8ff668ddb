// Batches (docs/semantics.md, "Batches"): create, join with enqueue, seal, get; counts through
// every way a member stops being active; the callback enqueued exactly once, in the operation
// that makes the batch done, with the outcome counts; cross-queue members; purge, delete_queue,
// dead-letter moves and dependency failures; GC after retention; replay and export.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

class BatchesTest : public EngineTest {
 protected:
  static CreateBatchRequest WithCallback(std::string id, std::string queue = "done") {
    CreateBatchRequest r;
    r.id = std::move(id);
    BatchCallback c;
    c.queue = std::move(queue);
    c.payload = "all finished";
    c.priority = 7;
    c.metadata = {{"tenant", "acme"}};
    r.callback = c;
    return r;
  }
  BatchInfo Create(const CreateBatchRequest& request) {
    Result<BatchInfo> r = engine().CreateBatch(request);
    EXPECT_TRUE(r.ok()) << r.status().detail();
    return r.ok() ? r.value() : BatchInfo{};
  }
  BatchInfo Seal(std::string_view id) {
    Result<BatchInfo> r = engine().SealBatch(id);
    EXPECT_TRUE(r.ok()) << r.status().detail();
    return r.ok() ? r.value() : BatchInfo{};
  }
  BatchInfo Info(std::string_view id) {
    Result<BatchInfo> r = engine().GetBatch(id);
    EXPECT_TRUE(r.ok()) << r.status().detail();
    return r.ok() ? r.value() : BatchInfo{};
  }
  Result<EnqueueResult> Join(std::string_view queue, std::string id, std::string batch) {
    EnqueueItem item = Item(std::move(id));
    item.batch = std::move(batch);
    return EnqueueOne(queue, std::move(item));
  }
  void PutIn(std::string_view queue, std::string id, std::string batch) {
    Result<EnqueueResult> r = Join(queue, std::move(id), std::move(batch));
    EXPECT_TRUE(r.ok()) << r.status().detail();
  }
  // Leases the next message of `queue` (it must be `id`) and completes it.
  void Finish(std::string_view queue, std::string_view id) {
    MessageRecord m = TakeOne(queue);
    ASSERT_EQ(m.id, id);
    ASSERT_TRUE(CompleteOne(queue, m.id, m.lease_token).ok());
  }
  // The callback enqueues recorded so far (derived kMessageEnqueued into `queue`).
  size_t CallbackEnqueues(std::string_view queue = "done") {
    size_t n = 0;
    for (const RecordedEffect& e : sink_.All()) {
      n += e.type == EffectType::kMessageEnqueued && e.queue == queue && e.derived;
    }
    return n;
  }
  void ExpectReplayAndExportGiveTheSameState() {
    auto replayed = Replayed();
    EXPECT_EQ(replayed->Digest(), engine().Digest()) << "replayed from the effects";
    auto exported = Exported();
    EXPECT_EQ(exported->Digest(), engine().Digest()) << "loaded from an export";
  }
};

TEST_F(BatchesTest, CreateTwiceWithTheSameCallbackIsIdempotentWithAnotherAlreadyExists) {
  BatchInfo b = Create(WithCallback("b1"));
  EXPECT_EQ(b.id, "b1");
  ASSERT_TRUE(b.callback.has_value());
  EXPECT_EQ(b.callback->id, "batch:b1");
  EXPECT_FALSE(b.sealed);
  EXPECT_EQ(Create(WithCallback("b1")), b);
  CreateBatchRequest other = WithCallback("b1");
  other.callback->payload = "different";
  EXPECT_EQ(engine().CreateBatch(other).status().code(), Code::kAlreadyExists);
  CreateBatchRequest none;
  none.id = "b1";
  EXPECT_EQ(engine().CreateBatch(none).status().code(), Code::kAlreadyExists);
  size_t created = 0;
  for (const RecordedEffect& e : sink_.All()) created += e.type == EffectType::kBatchCreated;
  EXPECT_EQ(created, 1u);
}

TEST_F(BatchesTest, BadRequestsAreRefused) {
  CreateBatchRequest r;
  EXPECT_EQ(engine().CreateBatch(r).status().code(), Code::kInvalidArgument);  // empty id
  r.id = std::string(121, 'x');
  EXPECT_EQ(engine().CreateBatch(r).status().code(), Code::kInvalidArgument);
  CreateBatchRequest reserved = WithCallback("b");
  reserved.callback->metadata = {{"x-batch-total", "1"}};
  EXPECT_EQ(engine().CreateBatch(reserved).status().code(), Code::kInvalidArgument);
  CreateBatchRequest many = WithCallback("b");
  many.callback->metadata.clear();
  for (int i = 0; i < 12; ++i) many.callback->metadata.push_back({"k" + std::to_string(i), "v"});
  EXPECT_EQ(engine().CreateBatch(many).status().code(), Code::kInvalidArgument);
  CreateBatchRequest bad_queue = WithCallback("b", "no spaces");
  EXPECT_EQ(engine().CreateBatch(bad_queue).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine().GetBatch("nope").status().code(), Code::kNotFound);
  EXPECT_EQ(engine().SealBatch("nope").status().code(), Code::kNotFound);
}

TEST_F(BatchesTest, EnqueueIntoUnknownBatchIsNotFoundIntoSealedIsFailedPrecondition) {
  EXPECT_EQ(Join("q", "m", "nope").status().code(), Code::kNotFound);
  EXPECT_EQ(GetCode("q", "m"), Code::kNotFound);
  Create(WithCallback("b"));
  PutIn("q", "m1", "b");
  Seal("b");
  EXPECT_EQ(Join("q", "m2", "b").status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(GetCode("q", "m2"), Code::kNotFound);
  // A repeated enqueue of a member that exists answers as a duplicate and joins nothing.
  Result<EnqueueResult> again = Join("q", "m1", "b");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(Info("b").counts.members, 1u);
}

TEST_F(BatchesTest, CountsFollowCompleteCancelErrorAndLeaseExpiry) {
  MakeQueue("once", [] {
    QueueSettings s;
    s.max_attempts = 1;
    return s;
  }());
  Create(WithCallback("b"));
  PutIn("once", "a", "b");
  PutIn("once", "c", "b");
  PutIn("once", "d", "b");
  PutIn("once", "e", "b");
  EXPECT_EQ(Info("b").counts.members, 4u);
  EXPECT_EQ(Info("b").counts.active(), 4u);
  Finish("once", "a");
  EXPECT_EQ(Info("b").counts.completed, 1u);
  ASSERT_TRUE(engine().Cancel("once", {"c"})[0].ok());
  EXPECT_EQ(Info("b").counts.canceled, 1u);
  MessageRecord d = TakeOne("once");
  FailRequest fail;
  fail.id = d.id;
  fail.lease_token = d.lease_token;
  fail.error = "boom";
  ASSERT_TRUE(engine().Fail("once", fail).ok());
  EXPECT_EQ(Info("b").counts.errored, 1u);
  (void)TakeOne("once", {}, 1000);  // e, leased for 1 s: its lease expires with no attempt left
  AdvanceTime(1000);
  BatchCounts counts = Info("b").counts;
  EXPECT_EQ(counts, (BatchCounts{4, 1, 1, 2}));
  EXPECT_FALSE(Info("b").done);  // not sealed
  EXPECT_EQ(CallbackEnqueues(), 0u);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(BatchesTest, CallbackIsEnqueuedOnceByTheLastMembersCompletionWithTheCounts) {
  MakeQueue("done");
  Create(WithCallback("b"));
  PutIn("q", "m1", "b");
  PutIn("q", "m2", "b");
  PutIn("q", "m3", "b");
  Seal("b");
  Finish("q", "m1");
  ASSERT_TRUE(engine().Cancel("q", {"m2"})[0].ok());
  EXPECT_FALSE(Info("b").done);
  EXPECT_EQ(GetCode("done", "batch:b"), Code::kNotFound);
  const TimeMs at = Now();
  Finish("q", "m3");
  BatchInfo b = Info("b");
  EXPECT_TRUE(b.done);
  EXPECT_EQ(b.done_at, at);
  MessageRecord cb = GetMessage("done", "batch:b");
  EXPECT_EQ(cb.state, MessageState::kPending);
  EXPECT_EQ(cb.payload, "all finished");
  EXPECT_EQ(cb.priority, 7);
  EXPECT_TRUE(HasPair(cb.metadata, "tenant", "acme"));
  EXPECT_TRUE(HasPair(cb.metadata, "x-batch-id", "b"));
  EXPECT_TRUE(HasPair(cb.metadata, "x-batch-total", "3"));
  EXPECT_TRUE(HasPair(cb.metadata, "x-batch-completed", "2"));
  EXPECT_TRUE(HasPair(cb.metadata, "x-batch-canceled", "1"));
  EXPECT_TRUE(HasPair(cb.metadata, "x-batch-errored", "0"));
  EXPECT_EQ(CallbackEnqueues(), 1u);
  // The completing effect comes first, then its consequence, derived.
  std::vector<RecordedEffect> all = sink_.All();
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all[all.size() - 2].id, "m3");
  EXPECT_EQ(all.back().id, "batch:b");
  EXPECT_TRUE(all.back().derived);
  // Nothing after it enqueues it again: the member GC, another seal.
  Seal("b");
  AdvanceTime(3'600'000 - 1);
  EXPECT_EQ(CallbackEnqueues(), 1u);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(BatchesTest, SealAfterEveryMemberFinishedIsDoneAtOnce) {
  Create(WithCallback("b"));
  PutIn("q", "m1", "b");
  Finish("q", "m1");
  EXPECT_FALSE(Info("b").done);
  BatchInfo sealed = Seal("b");
  EXPECT_TRUE(sealed.done);
  EXPECT_EQ(CallbackEnqueues(), 1u);
  EXPECT_TRUE(HasPair(GetMessage("done", "batch:b").metadata, "x-batch-completed", "1"));
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(BatchesTest, AnEmptyBatchIsDoneWhenSealedAndOneWithoutCallbackEnqueuesNothing) {
  Create(WithCallback("empty"));
  EXPECT_TRUE(Seal("empty").done);
  EXPECT_TRUE(HasPair(GetMessage("done", "batch:empty").metadata, "x-batch-total", "0"));
  CreateBatchRequest plain;
  plain.id = "plain";
  Create(plain);
  PutIn("q", "m", "plain");
  Seal("plain");
  Finish("q", "m");
  EXPECT_TRUE(Info("plain").done);
  EXPECT_EQ(CallbackEnqueues(), 1u);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(BatchesTest, MembersMayBeInAnyQueue) {
  Create(WithCallback("b"));
  for (std::string q : {"alpha", "beta", "gamma", "delta"}) PutIn(q, "m", "b");
  Seal("b");
  for (std::string q : {"alpha", "beta", "gamma"}) Finish(q, "m");
  EXPECT_EQ(Info("b").counts.active(), 1u);
  EXPECT_EQ(CallbackEnqueues(), 0u);
  Finish("delta", "m");
  EXPECT_TRUE(Info("b").done);
  EXPECT_EQ(CallbackEnqueues(), 1u);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(BatchesTest, PurgedAndDeletedMembersCountAsCanceledDeadLetteredAsErrored) {
  QueueSettings with_dlq;
  with_dlq.max_attempts = 1;
  with_dlq.dead_letter_queue = "dlq";
  MakeQueue("dlq");
  MakeQueue("work", with_dlq);
  Create(WithCallback("b"));
  PutIn("p", "finished", "b");
  PutIn("p", "purged", "b");
  PutIn("gone", "deleted", "b");
  PutIn("work", "dead", "b");
  Finish("p", "finished");
  Seal("b");
  ASSERT_TRUE(engine().PurgeQueue("p", {MessageState::kPending, MessageState::kCompleted}).ok());
  EXPECT_EQ(Info("b").counts, (BatchCounts{4, 1, 1, 0}));
  ASSERT_TRUE(engine().DeleteQueue("gone").ok());
  EXPECT_EQ(Info("b").counts, (BatchCounts{4, 1, 2, 0}));
  MessageRecord d = TakeOne("work");
  FailRequest fail;
  fail.id = d.id;
  fail.lease_token = d.lease_token;
  ASSERT_TRUE(engine().Fail("work", fail).ok());
  EXPECT_EQ(StateOf("dlq", "dead"), MessageState::kPending);
  BatchInfo b = Info("b");
  EXPECT_EQ(b.counts, (BatchCounts{4, 1, 2, 1}));
  EXPECT_TRUE(b.done);
  EXPECT_TRUE(HasPair(GetMessage("done", "batch:b").metadata, "x-batch-errored", "1"));
  // The moved message is no member any more: finishing it in the dead-letter queue changes
  // nothing.
  Finish("dlq", "dead");
  EXPECT_EQ(Info("b").counts, (BatchCounts{4, 1, 2, 1}));
  EXPECT_EQ(CallbackEnqueues(), 1u);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(BatchesTest, AMemberCanceledByItsDependencyCountsAsCanceled) {
  Create(WithCallback("b"));
  Put("q", "parent");
  EnqueueItem child = Item("child");
  child.batch = "b";
  child.depends_on = {"parent"};
  Put("q", std::move(child));
  Seal("b");
  ASSERT_TRUE(engine().Cancel("q", {"parent"})[0].ok());
  EXPECT_EQ(StateOf("q", "child"), MessageState::kCanceled);
  EXPECT_EQ(Info("b").counts, (BatchCounts{1, 0, 1, 0}));
  EXPECT_TRUE(Info("b").done);
  EXPECT_EQ(CallbackEnqueues(), 1u);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(BatchesTest, ARedrivenMemberIsCountedOnceAtItsFirstOutcome) {
  QueueSettings once;
  once.max_attempts = 1;
  MakeQueue("once", once);
  Create(WithCallback("b"));
  PutIn("once", "m", "b");
  PutIn("once", "n", "b");
  MessageRecord m = TakeOne("once");
  FailRequest fail;
  fail.id = m.id;
  fail.lease_token = m.lease_token;
  ASSERT_TRUE(engine().Fail("once", fail).ok());
  ASSERT_TRUE(engine().Redrive("once", {m.id})[0].ok());
  Finish("once", m.id);
  Finish("once", "n");
  EXPECT_EQ(Info("b").counts, (BatchCounts{2, 1, 0, 1}));
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(BatchesTest, TheCallbackEntersAPausedFullOrMissingQueue) {
  QueueSettings closed;
  closed.enqueue_paused = true;
  closed.max_depth = 1;
  MakeQueue("closed", closed);
  Create(WithCallback("b", "closed"));
  Create(WithCallback("c", "created-later"));
  EXPECT_TRUE(Seal("b").done);
  EXPECT_EQ(StateOf("closed", "batch:b"), MessageState::kPending);
  EXPECT_TRUE(Seal("c").done);
  EXPECT_EQ(StateOf("created-later", "batch:c"), MessageState::kPending);
  ExpectReplayAndExportGiveTheSameState();
}

TEST_F(BatchesTest, ADoneBatchIsRemovedAfterItsRetention) {
  CreateBatchRequest r = WithCallback("b");
  r.retention_ms = 5000;
  Create(r);
  PutIn("q", "m", "b");
  Seal("b");
  Finish("q", "m");
  EXPECT_EQ(engine().NextDueTime(), Now() + 5000);
  AdvanceTime(4999);
  EXPECT_TRUE(engine().GetBatch("b").ok());
  AdvanceTime(1);
  EXPECT_EQ(engine().GetBatch("b").status().code(), Code::kNotFound);
  EXPECT_EQ(sink_.All().back().type, EffectType::kBatchRemoved);
  ExpectReplayAndExportGiveTheSameState();
  // The id is free again.
  EXPECT_FALSE(Create(WithCallback("b")).done);
}

TEST_F(BatchesTest, ReplayDerivesTheCallbackFromTheCauseAlone) {
  Create(WithCallback("b"));
  PutIn("q", "m1", "b");
  PutIn("other", "m2", "b");
  Finish("q", "m1");
  Seal("b");
  auto before = Replayed();
  Result<BatchInfo> open = before->GetBatch("b");
  ASSERT_TRUE(open.ok());
  EXPECT_FALSE(open->done);
  EXPECT_EQ(open->counts, (BatchCounts{2, 1, 0, 0}));
  Finish("other", "m2");
  auto replayed = Replayed();
  EXPECT_EQ(replayed->Digest(), engine().Digest());
  Result<MessageRecord> cb = replayed->Get("done", "batch:b");
  ASSERT_TRUE(cb.ok());
  EXPECT_EQ(cb->version, GetMessage("done", "batch:b").version);
  // From an export of the open batch, the last completion done again there derives it too.
  Result<BatchInfo> done = replayed->GetBatch("b");
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->done);
}

TEST_F(BatchesTest, AnExportOfAnOpenBatchFinishesTheSameWayAfterLoading) {
  Create(WithCallback("b"));
  PutIn("q", "m1", "b");
  PutIn("q", "m2", "b");
  Finish("q", "m1");
  Seal("b");
  auto loaded = Exported();
  EXPECT_EQ(loaded->Digest(), engine().Digest());
  Result<BatchInfo> b = loaded->GetBatch("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->counts, (BatchCounts{2, 1, 0, 0}));
  // Complete m2 in both: the loaded engine's member is still in its batch.
  DequeueRequest take;
  Result<std::vector<MessageRecord>> got = loaded->Dequeue("q", take);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);
  ASSERT_TRUE(loaded->Complete("q", {{"m2", (*got)[0].lease_token}})[0].ok());
  EXPECT_TRUE(loaded->GetBatch("b")->done);
  EXPECT_TRUE(loaded->Get("done", "batch:b").ok());
}

// A random workload over batches, queues with and without a dead-letter queue, dependencies,
// purges, deletes and timers: after every step each batch's counts add up, a batch is done
// exactly when it is sealed with no active member, and every done batch's callback was enqueued
// exactly once; at the end the log's effects replay, and an export loads, to the same digest.
TEST_F(BatchesTest, ARandomWorkloadKeepsTheCountsAndEnqueuesEachCallbackOnce) {
  QueueSettings retried;
  retried.max_attempts = 2;
  retried.retry_backoff_ms = 10;
  retried.dead_letter_queue = "dlq";
  retried.retention_ms = 5000;
  QueueSettings plain;
  plain.retention_ms = 5000;
  MakeQueue("dlq", plain);
  MakeQueue("retried", retried);
  MakeQueue("plain", plain);
  const std::vector<std::string> queues = {"retried", "plain", "other"};
  std::mt19937_64 rng(2026);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<std::string> batches;
  int next_batch = 0;
  int next_message = 0;
  std::vector<std::pair<std::string, std::string>> messages;  // (queue, id)
  for (int step = 0; step < 3000; ++step) {
    switch (pick(12)) {
      case 0: {
        CreateBatchRequest r = WithCallback("b" + std::to_string(next_batch++), "callbacks");
        r.retention_ms = static_cast<int64_t>(pick(3)) * 2000;
        ASSERT_TRUE(engine().CreateBatch(r).ok());
        batches.push_back(r.id);
        break;
      }
      case 1:
      case 2:
      case 3: {
        const std::string& q = queues[pick(queues.size())];
        EnqueueItem item = Item("m" + std::to_string(next_message++));
        if (!batches.empty() && pick(4) != 0) item.batch = batches[pick(batches.size())];
        if (!messages.empty() && pick(5) == 0) {
          const auto& [dq, did] = messages[pick(messages.size())];
          item.depends_on = {dq + "/" + did};
          item.on_dependency_failure = static_cast<DependencyFailurePolicy>(pick(3));
        }
        Result<EnqueueResult> r = EnqueueOne(q, item);
        if (r.ok()) messages.emplace_back(q, r->id);
        break;
      }
      case 4:
        if (!batches.empty()) (void)engine().SealBatch(batches[pick(batches.size())]);
        break;
      case 5:
      case 6: {
        const std::string& q = queues[pick(queues.size())];
        DequeueRequest d;
        d.max = 1 + static_cast<uint32_t>(pick(3));
        d.lease_ms = 100;
        Result<std::vector<MessageRecord>> got = engine().Dequeue(q, d);
        if (!got.ok()) break;
        for (const MessageRecord& m : *got) {
          if (pick(3) == 0) {
            FailRequest f;
            f.id = m.id;
            f.lease_token = m.lease_token;
            (void)engine().Fail(q, f);
          } else if (pick(4) != 0) {
            (void)engine().Complete(q, {{m.id, m.lease_token}});
          }  // else left to expire
        }
        break;
      }
      case 7:
        if (!messages.empty()) {
          const auto& [q, id] = messages[pick(messages.size())];
          (void)engine().Cancel(q, {id});
        }
        break;
      case 8:
        if (pick(10) == 0) {
          (void)engine().PurgeQueue(queues[pick(queues.size())],
                                    {MessageState::kPending, MessageState::kWaiting});
        }
        break;
      case 9:
        if (pick(40) == 0) (void)engine().DeleteQueue("other");
        break;
      default:
        AdvanceTime(static_cast<int64_t>(pick(400)));
        break;
    }
    // Invariants.
    for (const std::string& id : batches) {
      Result<BatchInfo> b = engine().GetBatch(id);
      if (!b.ok()) continue;  // removed after its retention
      const BatchCounts& c = b->counts;
      ASSERT_LE(c.completed + c.canceled + c.errored, c.members) << id;
      ASSERT_EQ(b->done, b->sealed && c.active() == 0) << id << " at step " << step;
    }
  }
  // Each done batch's callback was enqueued once: count the derived enqueues per id.
  std::map<std::string, int> callbacks;
  for (const RecordedEffect& e : sink_.All()) {
    if (e.type == EffectType::kMessageEnqueued && e.queue == "callbacks") ++callbacks[e.id];
    EXPECT_TRUE(e.type != EffectType::kMessageEnqueued || e.queue != "callbacks" || e.derived);
  }
  size_t done_batches = 0;
  for (const RecordedEffect& e : sink_.All()) {
    done_batches += e.type == EffectType::kBatchRemoved;  // removed ones were done
  }
  for (const std::string& id : batches) {
    Result<BatchInfo> b = engine().GetBatch(id);
    done_batches += b.ok() && b->done;
  }
  EXPECT_GT(done_batches, 5u) << "the workload should finish batches";
  EXPECT_EQ(callbacks.size(), done_batches);
  for (const auto& [id, n] : callbacks) EXPECT_EQ(n, 1) << id;
  ExpectReplayAndExportGiveTheSameState();
}

}  // namespace
}  // namespace sundial::engine_test
