// The packed message store (docs/engine.md, "Per message" and "Memory"): fields stored narrow
// and their wide fallback, payloads stored apart, memory given back after a drain or a delete,
// the memory budget's refusal, and bulk loading (recovery) giving the same state as replaying
// effects one by one.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/message.h"
#include "engine/pages.h"
#include "tests/engine/engine_fixture.h"

namespace sundial {
namespace {

using engine_test::EngineTest;
using engine_test::Item;
using engine_test::RecordedEffect;
using engine_test::RecordingSink;

constexpr int64_t kDayMs = 86'400'000;

class StoreTest : public EngineTest {};

// ---- Narrow fields and their wide fallback ----------------------------------------------------

TEST_F(StoreTest, UpdateTimeFiftyDaysAfterEnqueueIsKeptExactly) {
  QueueSettings s;
  s.retention_ms = 100 * kDayMs;
  MakeQueue("q", s);
  const TimeMs enqueued = Now();
  PutDelayed("q", "late", 60 * kDayMs);  // updated_at - enqueued_at no longer fits 32 bits
  AdvanceTime(60 * kDayMs);
  MessageRecord m = GetMessage("q", "late");
  EXPECT_EQ(m.state, MessageState::kPending);
  EXPECT_EQ(m.enqueued_at, enqueued);
  EXPECT_EQ(m.updated_at, enqueued + 60 * kDayMs);
  EXPECT_EQ(m.version, 2u);
  MessageRecord leased = TakeOne("q");
  EXPECT_EQ(leased.updated_at, Now());
  EXPECT_EQ(leased.version, 3u);
  EXPECT_TRUE(CompleteOne("q", "late", leased.lease_token).ok());
  m = GetMessage("q", "late");
  EXPECT_EQ(m.state, MessageState::kCompleted);
  EXPECT_EQ(m.version, 4u);
  EXPECT_EQ(m.lease_token, leased.lease_token);
}

TEST_F(StoreTest, AClockThatWentBackIsRecordedAsIs) {
  MakeQueue("q");
  Put("q", "a");
  const TimeMs enqueued = Now();
  clock_.Set(enqueued - 5'000);  // NTP stepped the clock back
  MessageRecord leased = TakeOne("q");
  EXPECT_EQ(leased.updated_at, enqueued - 5'000);
  EXPECT_EQ(GetMessage("q", "a").updated_at, enqueued - 5'000);
  clock_.Set(enqueued + 1);
  ASSERT_TRUE(CompleteOne("q", "a", leased.lease_token).ok());
  EXPECT_EQ(GetMessage("q", "a").updated_at, enqueued + 1);
}

TEST_F(StoreTest, VersionsAbove32BitsReplayExactly) {
  MakeQueue("q");
  Put("q", "a");
  std::vector<RecordedEffect> effects = sink_.Take();
  ASSERT_EQ(effects.size(), 2u);  // created, enqueued
  RecordedEffect& enqueued = effects[1];
  enqueued.version = (uint64_t{1} << 40) + 7;
  enqueued.time = enqueued.enqueued_at + 200 * kDayMs;
  Engine replica(DefaultOptions(), &clock_, nullptr);
  for (const RecordedEffect& e : effects) ASSERT_TRUE(replica.Apply(e.View()).ok());
  Result<MessageRecord> m = replica.Get("q", "a");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->version, (uint64_t{1} << 40) + 7);
  EXPECT_EQ(m->updated_at, enqueued.time);
  DequeueRequest one;
  Result<std::vector<MessageRecord>> leased = replica.Dequeue("q", one);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->size(), 1u);
  EXPECT_EQ((*leased)[0].version, (uint64_t{1} << 40) + 8);
}

// ---- The ready heap's narrow keys ---------------------------------------------------------------

TEST_F(StoreTest, PrioritiesFarApartStillComeOutInOrder) {
  MakeQueue("q");
  // Narrow (within 2^31 of the first), then one that is not (the heap widens), then more.
  const std::vector<int64_t> priorities = {
      100, 5, 2'000'000'000,      -7, INT64_MAX, INT64_MIN, int64_t{1} << 40,
      100, 0, -(int64_t{1} << 50)};
  for (size_t i = 0; i < priorities.size(); ++i) Put("q", "m" + std::to_string(i), priorities[i]);
  // A reprioritize and a cancel while wide.
  ASSERT_TRUE(SetPriority("q", "m1", 3'000'000'000).ok());
  ASSERT_TRUE(CancelOne("q", "m3").ok());
  std::vector<std::string> want = {"m5", "m9", "m8", "m0", "m7", "m2", "m1", "m6", "m4"};
  EXPECT_EQ(DrainIds("q"), want);
  // Empty again: narrow with a new base.
  Put("q", "a", 1'000);
  Put("q", "b", 999);
  EXPECT_EQ(DrainIds("q"), (std::vector<std::string>{"b", "a"}));
}

TEST_F(StoreTest, ABulkLoadOfFarApartPrioritiesIsOrdered) {
  MakeQueue("q");
  for (int i = 0; i < 200; ++i) {
    const int64_t p = (i % 3 == 0) ? (int64_t{1} << 45) - i : i * 1'000'003;
    Put("q", "m" + std::to_string(i), p);
  }
  Engine bulk(DefaultOptions(), &clock_, nullptr);
  bulk.BeginBulkLoad();
  for (const RecordedEffect& e : sink_.All()) ASSERT_TRUE(bulk.Apply(e.View()).ok());
  bulk.EndBulkLoad();
  EXPECT_EQ(bulk.Digest(), engine().Digest());
  DequeueRequest request;
  request.max = 1000;
  Result<std::vector<MessageRecord>> got = bulk.Dequeue("q", request);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(engine_test::IdsOf(*got), TakeIds("q", 1000));
}

// ---- Lease hints ------------------------------------------------------------------------------

TEST_F(StoreTest, AStaleLeaseHintNeverReachesAnotherMessage) {
  QueueSettings s;
  s.retention_ms = 1;  // kept until the next Advance (retention 0 would remove it at once)
  MakeQueue("q", s);
  Put("q", "m1");
  MessageRecord first = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "m1", first.lease_token).ok());
  EXPECT_TRUE(CompleteOne("q", "m1", first.lease_token).ok());  // repeated: still found
  AdvanceTime(1);  // m1 removed; its slot is free for the next record
  Put("q", "m2");
  EXPECT_EQ(CompleteOne("q", "m1", first.lease_token).code(), Code::kNotFound);
  EXPECT_EQ(FailOne("q", "m1", first.lease_token).status().code(), Code::kNotFound);
  EXPECT_EQ(CompleteOne("q", "m2", first.lease_token).code(), Code::kFailedPrecondition);
  // The same id again, a new message: the old token is not its lease.
  Put("q", "m1");
  EXPECT_EQ(CompleteOne("q", "m1", first.lease_token).code(), Code::kFailedPrecondition);
  // Everything gone, its chunk unmapped: the hint points nowhere and is not followed.
  for (const char* id : {"m1", "m2"}) ASSERT_TRUE(CancelOne("q", id).ok());
  AdvanceTime(1);
  EXPECT_EQ(CompleteOne("q", "m2", first.lease_token).code(), Code::kNotFound);
  EXPECT_EQ(engine().Extend("q", "m1", first.lease_token, 1000).status().code(), Code::kNotFound);
}

// ---- Large payloads ---------------------------------------------------------------------------

TEST_F(StoreTest, PayloadsAboveTheInlineLimitRoundTripAndAreFreed) {
  QueueSettings s;
  s.retention_ms = 0;
  MakeQueue("q", s);
  const uint64_t empty = engine().allocated_bytes();
  std::string big(kInlinePayloadBytes + 1, 'x');
  big[0] = 'a';
  big.back() = 'z';
  std::string huge(1 << 20, 'y');
  Put("q", Item("big", 0, {{"k", "v"}}, big));
  Put("q", Item("huge", 1, {}, huge));
  Put("q", Item("edge", 2, {}, std::string(kInlinePayloadBytes, 'e')));
  EXPECT_EQ(GetMessage("q", "big").payload, big);
  EXPECT_EQ(GetMessage("q", "huge").payload, huge);
  EXPECT_EQ(GetMessage("q", "edge").payload, std::string(kInlinePayloadBytes, 'e'));
  EXPECT_GE(engine().allocated_bytes(), empty + big.size() + huge.size());
  // The same content again is a duplicate, a different one a conflict.
  Result<EnqueueResult> again = EnqueueOne("q", Item("huge", 1, {}, huge));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  huge[12345] = 'z';
  EXPECT_EQ(EnqueueOne("q", Item("huge", 1, {}, huge)).status().code(), Code::kAlreadyExists);
  for (int i = 0; i < 3; ++i) {
    MessageRecord m = TakeOne("q");
    ASSERT_TRUE(CompleteOne("q", m.id, m.lease_token).ok());
  }
  AdvanceTime(1);
  EXPECT_EQ(GetCode("q", "huge"), Code::kNotFound);
  EXPECT_LT(engine().allocated_bytes(), empty + 64 * 1024);
}

// ---- Memory goes back -------------------------------------------------------------------------

constexpr uint64_t kFill = 100'000;

void Fill(Engine& engine, std::string_view queue, uint64_t n) {
  std::vector<EnqueueItem> batch;
  for (uint64_t i = 0; i < n; ++i) {
    batch.push_back(
        Item("m" + std::to_string(i), static_cast<int64_t>(i), {}, std::string(100, 'p')));
    if (batch.size() == kMaxBatchItems || i + 1 == n) {
      for (const auto& r : engine.Enqueue(queue, std::move(batch))) ASSERT_TRUE(r.ok());
      batch.clear();
    }
  }
}

TEST_F(StoreTest, MemoryGoesBackToTheKernelAfterADrain) {
  QueueSettings s;
  s.retention_ms = 0;
  MakeQueue("q", s);
  const uint64_t mapped_before = pages::MappedBytes();
  const uint64_t allocated_before = engine().allocated_bytes();
  Fill(engine(), "q", kFill);
  const uint64_t full = engine().allocated_bytes();
  EXPECT_GT(full, kFill * 150);
  EXPECT_GT(pages::MappedBytes(), mapped_before + kFill * 100);
  DequeueRequest request;
  request.max = kMaxDequeueCount;
  while (true) {
    Result<std::vector<MessageRecord>> got = engine().Dequeue("q", request);
    ASSERT_TRUE(got.ok());
    if (got->empty()) break;
    std::vector<CompleteItem> done;
    for (const MessageRecord& m : *got) done.push_back({m.id, m.lease_token});
    for (const Status& st : engine().Complete("q", done)) ASSERT_TRUE(st.ok());  // and go
    sink_.Clear();
  }
  EXPECT_EQ(Counts("q")[MessageState::kPending], 0u);
  EXPECT_EQ(Counts("q")[MessageState::kCompleted], 0u);
  // Chunks unmapped and indexes shrunk: back to (about) an empty queue.
  EXPECT_LT(engine().allocated_bytes(), allocated_before + 64 * 1024);
  EXPECT_LT(pages::MappedBytes(), mapped_before + 256 * 1024);
}

TEST_F(StoreTest, MemoryGoesBackToTheKernelAfterADelete) {
  MakeQueue("q");
  MakeQueue("keep");
  Put("keep", "k");
  const uint64_t mapped_before = pages::MappedBytes();
  Fill(engine(), "q", kFill);
  EXPECT_GT(pages::MappedBytes(), mapped_before + kFill * 100);
  ASSERT_TRUE(engine().DeleteQueue("q").ok());
  EXPECT_EQ(pages::MappedBytes(), mapped_before);
  EXPECT_EQ(GetMessage("keep", "k").id, "k");
}

// ---- Memory budget ----------------------------------------------------------------------------

TEST_F(StoreTest, BudgetRefusalNamesTheBudgetAndOtherOperationsGoOn) {
  Engine::Options options = DefaultOptions();
  options.memory_budget_bytes = 3 * (kMessageOverheadBytes + 2 + 1 + 1) - 1;  // room for two
  Reset(options);
  QueueSettings s;
  s.retention_ms = 1;
  MakeQueue("q", s);
  Put("q", Item("m1", 0, {}, "x"));
  Put("q", Item("m2", 0, {}, "x"));
  Result<EnqueueResult> refused = EnqueueOne("q", Item("m3", 0, {}, "x"));
  ASSERT_EQ(refused.status().code(), Code::kResourceExhausted);
  EXPECT_NE(refused.status().detail().find(std::to_string(options.memory_budget_bytes) + " bytes"),
            std::string_view::npos)
      << refused.status().detail();
  // Workers go on: dequeue, complete, reads; what they free makes room again.
  MessageRecord m = TakeOne("q");
  EXPECT_TRUE(CompleteOne("q", m.id, m.lease_token).ok());
  EXPECT_EQ(GetMessage("q", m.id).state, MessageState::kCompleted);
  AdvanceTime(1);
  EXPECT_TRUE(EnqueueOne("q", Item("m3", 0, {}, "x")).ok());
}

// ---- Bulk load --------------------------------------------------------------------------------

class BulkLoadTest : public EngineTest {
 protected:
  // A mixed workload on the fixture's engine: simple, exclusive (values held, messages blocked)
  // and dead-letter queues, metadata, delays, leases, failures, completions, cancels.
  void RunWorkload(std::mt19937_64& rng, int steps) {
    QueueSettings dlq_settings;
    MakeQueue("dlq", dlq_settings);
    QueueSettings simple;
    simple.max_attempts = 2;
    simple.dead_letter_queue = "dlq";
    simple.retry_backoff_ms = 0;
    simple.retry_backoff_max_ms = 0;
    MakeQueue("simple", simple);
    MakeQueue("exclusive", engine_test::ExclusiveSettings("k"));
    std::vector<MessageRecord> leased;
    for (int i = 0; i < steps; ++i) {
      const std::string id = "m" + std::to_string(i);
      const auto priority = static_cast<int64_t>(rng() % 50);
      switch (rng() % 8) {
        case 0:
        case 1: {
          EnqueueItem item = Item(id, priority, {{"tenant", "t" + std::to_string(rng() % 5)}},
                                  std::string(rng() % 200, 'p'));
          if (rng() % 4 == 0) item.delay_ms = static_cast<int64_t>(rng() % 5000);
          Put("simple", std::move(item));
          break;
        }
        case 2:
          Put("exclusive", Item(id, priority, {{"k", "v" + std::to_string(rng() % 7)}}));
          break;
        case 3: {
          for (const char* q : {"simple", "exclusive"}) {
            std::vector<MessageRecord> got = Take(q, static_cast<uint32_t>(1 + rng() % 3));
            leased.insert(leased.end(), got.begin(), got.end());
          }
          break;
        }
        case 4:
          if (!leased.empty()) {
            const size_t k = rng() % leased.size();
            const MessageRecord m = leased[k];
            leased.erase(leased.begin() + static_cast<std::ptrdiff_t>(k));
            if (rng() % 2 == 0) {
              (void)CompleteOne(m.queue, m.id, m.lease_token);
            } else {
              (void)FailOne(m.queue, m.id, m.lease_token, 0);
            }
          }
          break;
        case 5:
          (void)CancelOne("simple", "m" + std::to_string(rng() % (i + 1)));
          break;
        case 6:
          (void)SetPriority("simple", "m" + std::to_string(rng() % (i + 1)), priority);
          break;
        default:
          AdvanceTime(static_cast<int64_t>(rng() % 2000));
          break;
      }
    }
  }
};

TEST_F(BulkLoadTest, BulkLoadGivesTheSameStateAsReplayingOneByOne) {
  std::mt19937_64 rng(99);
  RunWorkload(rng, 3000);
  const std::vector<RecordedEffect> effects = sink_.All();
  ASSERT_GT(effects.size(), 1000u);
  // The workload reached the states the bulk path must rebuild.
  EXPECT_GT(Counts("exclusive").blocked, 0u);
  EXPECT_GT(Counts("exclusive")[MessageState::kRunning], 0u);
  EXPECT_GT(Counts("simple")[MessageState::kInvisible], 0u);
  EXPECT_GT(Counts("dlq")[MessageState::kPending], 0u);

  Engine one_by_one(DefaultOptions(), &clock_, nullptr);
  for (const RecordedEffect& e : effects) ASSERT_TRUE(one_by_one.Apply(e.View()).ok());
  Engine bulk(DefaultOptions(), &clock_, nullptr);
  bulk.BeginBulkLoad();
  for (const RecordedEffect& e : effects) ASSERT_TRUE(bulk.Apply(e.View()).ok());
  bulk.EndBulkLoad();

  EXPECT_EQ(bulk.Digest(), engine().Digest());
  EXPECT_EQ(one_by_one.Digest(), engine().Digest());
  for (const char* q : {"simple", "exclusive", "dlq"}) {
    Result<StateCounts> want = engine().Count(q, {});
    Result<StateCounts> got = bulk.Count(q, {});
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(*got, *want) << q;
    EXPECT_EQ(bulk.GetQueue(q)->oldest_pending_age_ms, engine().GetQueue(q)->oldest_pending_age_ms)
        << q;
  }
  // The three go on identically: same dequeue order (heaps ordered, exclusive heads and
  // blocked values right), same filter selection.
  for (int round = 0; round < 50; ++round) {
    for (const char* q : {"simple", "exclusive", "dlq"}) {
      DequeueRequest request;
      request.max = 3;
      request.lease_ms = 1'000;
      if (round % 3 == 0 && std::string_view(q) == "simple") request.filter = {{"tenant", "t1"}};
      Result<std::vector<MessageRecord>> want = engine().Dequeue(q, request);
      Result<std::vector<MessageRecord>> got = bulk.Dequeue(q, request);
      Result<std::vector<MessageRecord>> also = one_by_one.Dequeue(q, request);
      ASSERT_TRUE(want.ok() && got.ok() && also.ok());
      ASSERT_EQ(engine_test::IdsOf(*got), engine_test::IdsOf(*want)) << q << " round " << round;
      ASSERT_EQ(engine_test::IdsOf(*also), engine_test::IdsOf(*want)) << q << " round " << round;
    }
    AdvanceClockOnly(500);
    engine().Advance(Now());
    bulk.Advance(Now());
    one_by_one.Advance(Now());
  }
}

}  // namespace
}  // namespace sundial
