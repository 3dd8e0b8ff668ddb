// Results (docs/semantics.md, "Results and waiting"): a complete's result is stored with the
// message, carried by its effect, read by get and by `wait`'s read (Outcomes), counted in the
// memory budget, replayed, exported, hashed, and gone at GC.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

class ResultsTest : public EngineTest {
 protected:
  Status CompleteWith(std::string_view queue, const MessageRecord& leased, std::string result) {
    std::vector<Status> r =
        engine().Complete(queue, {CompleteItem{leased.id, leased.lease_token, std::move(result)}});
    return r.size() == 1 ? r[0] : Status(Code::kInternal, "test: wrong result count");
  }
};

TEST_F(ResultsTest, CompleteStoresTheResultAndGetReturnsIt) {
  Put("q", "a");
  MessageRecord leased = TakeOne("q");
  ASSERT_TRUE(CompleteWith("q", leased, std::string("ok\0bytes", 8)).ok());
  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.state, MessageState::kCompleted);
  EXPECT_EQ(m.result, std::string("ok\0bytes", 8));
}

TEST_F(ResultsTest, TheCompletingEffectCarriesTheResult) {
  Put("q", "a");
  MessageRecord leased = TakeOne("q");
  sink_.Clear();
  ASSERT_TRUE(CompleteWith("q", leased, "42").ok());
  std::vector<RecordedEffect> effects = sink_.Take();
  ASSERT_EQ(effects.size(), 1u);
  EXPECT_EQ(effects[0].cause, ChangeCause::kCompleted);
  EXPECT_EQ(effects[0].result, "42");
}

TEST_F(ResultsTest, ARepeatedCompleteSucceedsAndKeepsTheFirstResult) {
  Put("q", "a");
  MessageRecord leased = TakeOne("q");
  ASSERT_TRUE(CompleteWith("q", leased, "first").ok());
  sink_.Clear();
  EXPECT_TRUE(CompleteWith("q", leased, "second").ok());
  EXPECT_EQ(GetMessage("q", "a").result, "first");
  EXPECT_EQ(sink_.size(), 0u);
}

TEST_F(ResultsTest, AResultAboveTheLimitIsRefusedAndTheLeaseStays) {
  Engine::Options options = DefaultOptions();
  options.max_result_bytes = 8;
  Reset(options);
  Put("q", "a");
  MessageRecord leased = TakeOne("q");
  Status s = CompleteWith("q", leased, std::string(9, 'x'));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.detail(), "result: larger than the server's max_result_bytes (--max-result-bytes)");
  EXPECT_EQ(StateOf("q", "a"), MessageState::kRunning);
  EXPECT_TRUE(CompleteWith("q", leased, std::string(8, 'x')).ok());  // exactly the limit
}

TEST_F(ResultsTest, TheResultCountsInTheMemoryBudgetUntilGc) {
  QueueSettings settings;
  settings.retention_ms = 1000;
  settings.history_max = 0;  // the result's bytes alone (history: HistoryTest)
  MakeQueue("q", settings);
  Put("q", "a");
  const uint64_t before = engine().memory_bytes();
  MessageRecord leased = TakeOne("q");
  ASSERT_TRUE(CompleteWith("q", leased, std::string(100, 'r')).ok());
  EXPECT_EQ(engine().memory_bytes(), before + 100);
  EXPECT_EQ(GetQueueInfo("q").memory_bytes, before + 100);
  AdvanceTime(1000);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  EXPECT_EQ(engine().memory_bytes(), 0u);
}

TEST_F(ResultsTest, ACompleteIsNeverRefusedForMemoryButLaterEnqueuesAre) {
  Engine::Options options = DefaultOptions();
  const uint64_t one = kMessageOverheadBytes + 1 + 7 + 1;  // id "a", payload, no metadata
  options.memory_budget_bytes = one + 50;
  Reset(options);
  Put("q", "a");
  MessageRecord leased = TakeOne("q");
  ASSERT_TRUE(CompleteWith("q", leased, std::string(100, 'r')).ok());  // past the budget
  EXPECT_EQ(EnqueueOne("q", Item("b")).status().code(), Code::kResourceExhausted);
}

TEST_F(ResultsTest, OutcomesReportStateResultAndLastErrorPerId) {
  QueueSettings settings;
  settings.max_attempts = 1;
  MakeQueue("q", settings);
  Put("q", "done");
  Put("q", "broken");
  Put("q", "waiting");
  MessageRecord first = TakeOne("q");
  ASSERT_EQ(first.id, "done");
  ASSERT_TRUE(CompleteWith("q", first, "fine").ok());
  MessageRecord second = TakeOne("q");
  ASSERT_TRUE(FailOne("q", second.id, second.lease_token, 0, "no luck").ok());
  auto out = engine().Outcomes("q", {"done", "broken", "waiting", "nope", ""});
  ASSERT_EQ(out.size(), 5u);
  ASSERT_TRUE(out[0].ok());
  EXPECT_EQ(out[0]->state, MessageState::kCompleted);
  EXPECT_EQ(out[0]->result, "fine");
  ASSERT_TRUE(out[1].ok());
  EXPECT_EQ(out[1]->state, MessageState::kErrored);
  EXPECT_EQ(out[1]->last_error, "no luck");
  ASSERT_TRUE(out[2].ok());
  EXPECT_EQ(out[2]->state, MessageState::kPending);
  EXPECT_EQ(out[3].status().code(), Code::kNotFound);
  EXPECT_EQ(out[4].status().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine().Outcomes("missing", {"a"})[0].status().code(), Code::kNotFound);
  EXPECT_EQ(engine().Outcomes("q", {}).size(), 0u);
}

// Replay (recovery) and export (checkpoints) keep results, and the digest sees them.
TEST_F(ResultsTest, ReplayAndExportRebuildTheResultAndTheDigest) {
  Put("q", "a");
  Put("q", "b");
  MessageRecord a = TakeOne("q");
  ASSERT_TRUE(CompleteWith("q", a, "answer").ok());
  MessageRecord b = TakeOne("q");
  ASSERT_TRUE(CompleteWith("q", b, "").ok());

  Engine replayed(DefaultOptions(), &clock_, nullptr);
  for (const RecordedEffect& e : sink_.All()) ASSERT_TRUE(replayed.Apply(e.View()).ok());
  EXPECT_EQ(replayed.Digest(), engine().Digest());
  EXPECT_EQ(replayed.Get("q", "a")->result, "answer");
  EXPECT_EQ(replayed.memory_bytes(), engine().memory_bytes());

  RecordingSink exported;
  engine().ExportState(&exported);
  Engine loaded(DefaultOptions(), &clock_, nullptr);
  for (const RecordedEffect& e : exported.All()) ASSERT_TRUE(loaded.Apply(e.View()).ok());
  EXPECT_EQ(loaded.Digest(), engine().Digest());
  EXPECT_EQ(loaded.Get("q", "a")->result, "answer");
  EXPECT_EQ(loaded.Get("q", "b")->result, "");
}

TEST_F(ResultsTest, TheDigestChangesWithTheResult) {
  Put("q", "a");
  MessageRecord a = TakeOne("q");
  ASSERT_TRUE(CompleteWith("q", a, "x").ok());
  std::vector<RecordedEffect> effects = sink_.All();
  ASSERT_EQ(effects.back().result, "x");
  effects.back().result = "y";
  Engine other(DefaultOptions(), &clock_, nullptr);
  for (const RecordedEffect& e : effects) ASSERT_TRUE(other.Apply(e.View()).ok());
  EXPECT_NE(other.Digest(), engine().Digest());
  effects.back().result = "";
  Engine none(DefaultOptions(), &clock_, nullptr);
  for (const RecordedEffect& e : effects) ASSERT_TRUE(none.Apply(e.View()).ok());
  EXPECT_NE(none.Digest(), engine().Digest());
  EXPECT_NE(none.Digest(), other.Digest());
}

TEST_F(ResultsTest, PurgeAndDeleteFreeTheResultsBytes) {
  Put("q", "a");
  MessageRecord a = TakeOne("q");
  ASSERT_TRUE(CompleteWith("q", a, std::string(64, 'r')).ok());
  ASSERT_TRUE(engine().PurgeQueue("q", {MessageState::kCompleted}).ok());
  EXPECT_EQ(engine().memory_bytes(), 0u);
  Put("q", "b");
  MessageRecord b = TakeOne("q");
  ASSERT_TRUE(CompleteWith("q", b, std::string(64, 'r')).ok());
  ASSERT_TRUE(engine().DeleteQueue("q").ok());
  EXPECT_EQ(engine().memory_bytes(), 0u);
}

}  // namespace
}  // namespace sundial::engine_test
