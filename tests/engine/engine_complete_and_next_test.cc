// Complete-and-next (docs/semantics.md, "Complete-and-next"): Engine::CompleteAndDequeue equals
// Complete then Dequeue on the same queue with nothing in between; the dequeue runs whatever the
// items' outcomes; a queue-level error refuses both.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

class CompleteAndNextTest : public EngineTest {
 protected:
  Engine::CompleteAndNextResult CompleteAndNext(std::string_view queue, const MessageRecord& done,
                                                DequeueRequest next = {}) {
    return engine().CompleteAndDequeue(queue, {CompleteItem{done.id, done.lease_token}}, next);
  }
};

TEST_F(CompleteAndNextTest, CompletesAndLeasesTheNextMessage) {
  MakeQueue("q");
  Put("q", "a", 0);
  Put("q", "b", 1);
  const MessageRecord a = TakeOne("q");
  auto res = CompleteAndNext("q", a);
  ASSERT_EQ(res.completed.size(), 1u);
  EXPECT_TRUE(res.completed[0].ok());
  ASSERT_TRUE(res.next.ok());
  EXPECT_EQ(IdsOf(*res.next), (std::vector<std::string>{"b"}));
  EXPECT_EQ(StateOf("q", "a"), MessageState::kCompleted);
  EXPECT_EQ(StateOf("q", "b"), MessageState::kRunning);
  EXPECT_NE(res.next->front().lease_token, 0u);
}

TEST_F(CompleteAndNextTest, EffectsAreTheCompletionThenTheLease) {
  MakeQueue("q");
  Put("q", "a");
  Put("q", "b");
  const MessageRecord a = TakeOne("q");
  sink_.Clear();
  auto res = CompleteAndNext("q", a);
  ASSERT_TRUE(res.next.ok());
  const auto effects = sink_.Take();
  ASSERT_EQ(effects.size(), 2u);
  EXPECT_EQ(effects[0].id, "a");
  EXPECT_EQ(effects[0].to, MessageState::kCompleted);
  EXPECT_EQ(effects[1].id, "b");
  EXPECT_EQ(effects[1].to, MessageState::kRunning);
}

TEST_F(CompleteAndNextTest, StaleTokenStillLeasesTheNextMessage) {
  MakeQueue("q");
  Put("q", "a");
  Put("q", "b");
  MessageRecord a = TakeOne("q");
  a.lease_token ^= 1;
  auto res = CompleteAndNext("q", a);
  ASSERT_EQ(res.completed.size(), 1u);
  EXPECT_EQ(res.completed[0].code(), Code::kFailedPrecondition);
  ASSERT_TRUE(res.next.ok());
  EXPECT_EQ(IdsOf(*res.next), (std::vector<std::string>{"b"}));
  EXPECT_EQ(StateOf("q", "a"), MessageState::kRunning);
}

TEST_F(CompleteAndNextTest, EmptyQueueCompletesAndLeasesNothing) {
  MakeQueue("q");
  Put("q", "a");
  const MessageRecord a = TakeOne("q");
  auto res = CompleteAndNext("q", a);
  EXPECT_TRUE(res.completed[0].ok());
  ASSERT_TRUE(res.next.ok());
  EXPECT_TRUE(res.next->empty());
  EXPECT_EQ(StateOf("q", "a"), MessageState::kCompleted);
}

TEST_F(CompleteAndNextTest, NextHonoursFilterMaxAndLease) {
  MakeQueue("q");
  Put("q", "a", 0, {{"k", "x"}});
  Put("q", "b", 1, {{"k", "y"}});
  Put("q", "c", 2, {{"k", "x"}});
  Put("q", "d", 3, {{"k", "x"}});
  const MessageRecord a = TakeOne("q");
  DequeueRequest next;
  next.max = 2;
  next.lease_ms = 5000;
  next.filter = {{"k", "x"}};
  auto res = CompleteAndNext("q", a, next);
  ASSERT_TRUE(res.next.ok());
  EXPECT_EQ(IdsOf(*res.next), (std::vector<std::string>{"c", "d"}));
  EXPECT_EQ(res.next->front().lease_expires_at, Now() + 5000);
  EXPECT_EQ(StateOf("q", "b"), MessageState::kPending);
}

TEST_F(CompleteAndNextTest, CompletingAnExclusiveValueLetsTheSameCallLeaseItsNextMessage) {
  MakeQueue("x", ExclusiveSettings("tenant"));
  Put("x", "t1", 0, {{"tenant", "t"}});
  Put("x", "t2", 1, {{"tenant", "t"}});
  const MessageRecord t1 = TakeOne("x");
  EXPECT_TRUE(Take("x").empty());  // t2 is blocked behind t1
  auto res = CompleteAndNext("x", t1);
  EXPECT_TRUE(res.completed[0].ok());
  ASSERT_TRUE(res.next.ok());
  EXPECT_EQ(IdsOf(*res.next), (std::vector<std::string>{"t2"}));
}

TEST_F(CompleteAndNextTest, BatchCompletesNAndLeasesUpToM) {
  MakeQueue("q");
  for (int i = 0; i < 6; ++i) Put("q", "m" + std::to_string(i), i);
  const std::vector<MessageRecord> taken = Take("q", 3);
  std::vector<CompleteItem> items;
  for (const MessageRecord& m : taken) items.push_back({m.id, m.lease_token});
  DequeueRequest next;
  next.max = 5;
  auto res = engine().CompleteAndDequeue("q", items, next);
  ASSERT_EQ(res.completed.size(), 3u);
  for (const Status& s : res.completed) EXPECT_TRUE(s.ok());
  ASSERT_TRUE(res.next.ok());
  EXPECT_EQ(IdsOf(*res.next), (std::vector<std::string>{"m3", "m4", "m5"}));
}

TEST_F(CompleteAndNextTest, QueueLevelErrorsRefuseBothAndChangeNothing) {
  MakeQueue("q");
  Put("q", "a");
  Put("q", "b");
  const MessageRecord a = TakeOne("q");
  sink_.Clear();
  DequeueRequest bad;
  bad.max = 0;
  auto res = CompleteAndNext("q", a, bad);
  EXPECT_EQ(res.completed[0].code(), Code::kInvalidArgument);
  EXPECT_EQ(res.next.status().code(), Code::kInvalidArgument);
  auto missing = CompleteAndNext("nope", a);
  EXPECT_EQ(missing.completed[0].code(), Code::kNotFound);
  EXPECT_EQ(missing.next.status().code(), Code::kNotFound);
  EXPECT_EQ(sink_.size(), 0u);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kRunning);
}

TEST_F(CompleteAndNextTest, EqualsCompleteThenDequeue) {
  // Two engines with the same seed: one runs the pair, the other the two calls.
  MakeQueue("q");
  for (int i = 0; i < 4; ++i) Put("q", "m" + std::to_string(i), i);
  const MessageRecord first = TakeOne("q");
  auto res = CompleteAndNext("q", first);
  ASSERT_TRUE(res.next.ok());
  const uint64_t combined = engine().Digest();

  Reset(DefaultOptions());
  MakeQueue("q");
  for (int i = 0; i < 4; ++i) Put("q", "m" + std::to_string(i), i);
  const MessageRecord again = TakeOne("q");
  EXPECT_TRUE(CompleteOne("q", again.id, again.lease_token).ok());
  EXPECT_EQ(TakeIds("q"), IdsOf(*res.next));
  EXPECT_EQ(engine().Digest(), combined);
}

}  // namespace
}  // namespace sundial::engine_test
