// Exclusive queues (docs/semantics.md "Enqueue", "Dequeue"): at most one running
// message per exclusivity value, values released on complete, fail, cancel, lease expiry and
// purge, blocked messages waiting in priority order, and the blocked count.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

class ExclusiveTest : public EngineTest {
 protected:
  void SetUp() override {
    QueueSettings s = ExclusiveSettings("tenant");
    s.lease_ms = 100;
    s.max_attempts = 3;
    MakeQueue("x", s);
  }
  std::string PutFor(std::string id, std::string tenant, int64_t priority = 0) {
    return Put("x", std::move(id), priority, {{"tenant", std::move(tenant)}});
  }
};

TEST_F(ExclusiveTest, MissingExclusivityKeyIsInvalidArgument) {
  EXPECT_EQ(EnqueueOne("x", Item("a")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EnqueueOne("x", Item("b", 0, {{"other", "v"}})).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(EnqueueOne("x", Item("c", 0, {{"Tenant", "v"}})).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(Counts("x"), StateCounts{});
  EXPECT_TRUE(EnqueueOne("x", Item("d", 0, {{"other", "v"}, {"tenant", "t"}})).ok());
}

TEST_F(ExclusiveTest, EmptyValueIsAValueLikeAnyOther) {
  PutFor("a", "", 0);
  PutFor("b", "", 1);
  PutFor("c", "t", 2);
  EXPECT_EQ(TakeIds("x", 3), (std::vector<std::string>{"a", "c"}));
}

TEST_F(ExclusiveTest, AtMostOneRunningMessagePerValue) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  PutFor("b1", "b", 2);
  EXPECT_EQ(TakeIds("x", 3), (std::vector<std::string>{"a1", "b1"}));
  EXPECT_TRUE(Take("x", 3).empty());
  StateCounts counts = Counts("x");
  EXPECT_EQ(counts[MessageState::kRunning], 2u);
  EXPECT_EQ(counts[MessageState::kPending], 1u);
  EXPECT_EQ(counts.blocked, 1u);
}

TEST_F(ExclusiveTest, DequeueSkipsBlockedValuesAndReturnsTheNextValuesEarliestMessage) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  PutFor("a3", "a", 2);
  PutFor("b2", "b", 5);
  PutFor("b1", "b", 4);
  PutFor("c1", "c", 3);
  ASSERT_EQ(TakeOne("x").id, "a1");
  EXPECT_EQ(TakeOne("x").id, "c1");
  EXPECT_EQ(TakeOne("x").id, "b1");
  EXPECT_TRUE(Take("x").empty());
}

TEST_F(ExclusiveTest, MessagesOfALeasedValueWaitInPriorityOrder) {
  PutFor("third", "a", 30);
  PutFor("first", "a", 10);
  PutFor("second", "a", 20);
  PutFor("also-second", "a", 20);
  std::vector<std::string> order;
  for (int i = 0; i < 4; ++i) {
    MessageRecord m = TakeOne("x");
    order.push_back(m.id);
    EXPECT_TRUE(Take("x").empty()) << "a second message of the value was dequeued";
    ASSERT_TRUE(CompleteOne("x", m.id, m.lease_token).ok());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"first", "second", "also-second", "third"}));
}

TEST_F(ExclusiveTest, ExclusiveValueIsReleasedOnComplete) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  MessageRecord m = TakeOne("x");
  ASSERT_TRUE(Take("x").empty());
  ASSERT_TRUE(CompleteOne("x", "a1", m.lease_token).ok());
  EXPECT_EQ(Counts("x").blocked, 0u);
  EXPECT_EQ(TakeOne("x").id, "a2");
}

TEST_F(ExclusiveTest, ExclusiveValueIsReleasedOnFail) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  MessageRecord m = TakeOne("x");
  ASSERT_TRUE(Take("x").empty());
  Result<FailResult> r = FailOne("x", "a1", m.lease_token, 1'000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->state, MessageState::kInvisible);
  EXPECT_EQ(Counts("x").blocked, 0u);
  EXPECT_EQ(TakeOne("x").id, "a2");
}

TEST_F(ExclusiveTest, FailWithoutDelayReleasesValueAndMessageCompetesByPriority) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  MessageRecord m = TakeOne("x");
  ASSERT_TRUE(FailOne("x", "a1", m.lease_token, 0).ok());
  EXPECT_EQ(TakeOne("x").id, "a1");
  EXPECT_TRUE(Take("x").empty());
}

TEST_F(ExclusiveTest, ExclusiveValueIsReleasedOnCancel) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  TakeOne("x");
  ASSERT_TRUE(Take("x").empty());
  ASSERT_TRUE(CancelOne("x", "a1").ok());
  EXPECT_EQ(Counts("x").blocked, 0u);
  EXPECT_EQ(TakeOne("x").id, "a2");
}

TEST_F(ExclusiveTest, ExclusiveValueIsReleasedWhenLeaseExpires) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  TakeOne("x");
  AdvanceTime(99);
  EXPECT_TRUE(Take("x").empty());
  EXPECT_EQ(Counts("x").blocked, 1u);
  AdvanceTime(1);
  EXPECT_EQ(Counts("x").blocked, 0u);
  // a1 is back, earlier than a2; after it runs a2 still waits.
  EXPECT_EQ(TakeOne("x").id, "a1");
  EXPECT_TRUE(Take("x").empty());
}

TEST_F(ExclusiveTest, ExpiredButUnprocessedLeaseStillHoldsTheValue) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  TakeOne("x");
  AdvanceClockOnly(500);
  // a1 is still running until Advance runs, so a2 must not run beside it.
  EXPECT_TRUE(Take("x").empty());
  engine().Advance(Now());
  EXPECT_EQ(TakeOne("x").id, "a1");
}

TEST_F(ExclusiveTest, ExclusiveValueIsReleasedWhenMessageIsErrored) {
  QueueSettings s = ExclusiveSettings("tenant");
  s.max_attempts = 1;
  s.lease_ms = 100;
  MakeQueue("once", s);
  Put("once", "a1", 0, {{"tenant", "a"}});
  Put("once", "a2", 1, {{"tenant", "a"}});
  Put("once", "a3", 2, {{"tenant", "a"}});
  MessageRecord m = TakeOne("once");
  Result<FailResult> r = FailOne("once", "a1", m.lease_token);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->state, MessageState::kErrored);
  ASSERT_EQ(TakeOne("once").id, "a2");
  AdvanceTime(100);  // expiry at max attempts: errored
  EXPECT_EQ(StateOf("once", "a2"), MessageState::kErrored);
  EXPECT_EQ(TakeOne("once").id, "a3");
}

TEST_F(ExclusiveTest, ExclusiveValueIsReleasedWhenTheRunningMessageIsPurged) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  TakeOne("x");
  Result<uint64_t> r = engine().PurgeQueue("x", {MessageState::kRunning});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
  EXPECT_EQ(Counts("x").blocked, 0u);
  EXPECT_EQ(TakeOne("x").id, "a2");
}

TEST_F(ExclusiveTest, ExclusiveValueIsReleasedWhenTheRunningMessageMovesToDeadLetterQueue) {
  MakeQueue("dlq");
  QueueSettings s = ExclusiveSettings("tenant");
  s.max_attempts = 1;
  s.dead_letter_queue = "dlq";
  MakeQueue("moving", s);
  Put("moving", "a1", 0, {{"tenant", "a"}});
  Put("moving", "a2", 1, {{"tenant", "a"}});
  MessageRecord m = TakeOne("moving");
  Result<FailResult> r = FailOne("moving", "a1", m.lease_token);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->dead_letter_queue, "dlq");
  EXPECT_EQ(TakeOne("moving").id, "a2");
}

TEST_F(ExclusiveTest, ExtendKeepsTheValueHeld) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  MessageRecord m = TakeOne("x");
  AdvanceTime(90);
  ASSERT_TRUE(engine().Extend("x", "a1", m.lease_token, 100).ok());
  AdvanceTime(50);  // past the first expiry
  EXPECT_TRUE(Take("x").empty());
  EXPECT_EQ(Counts("x").blocked, 1u);
  AdvanceTime(50);  // past the extended expiry
  EXPECT_EQ(TakeOne("x").id, "a1");
}

TEST_F(ExclusiveTest, StaleTokenDoesNotReleaseTheValue) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  MessageRecord m = TakeOne("x");
  EXPECT_EQ(CompleteOne("x", "a1", m.lease_token + 1).code(), Code::kFailedPrecondition);
  EXPECT_EQ(FailOne("x", "a1", m.lease_token + 1).status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(Take("x").empty());
  EXPECT_EQ(Counts("x").blocked, 1u);
}

TEST_F(ExclusiveTest, BlockedCountsPendingMessagesOfLeasedValues) {
  PutFor("a1", "a", 0);
  PutFor("a2", "a", 1);
  PutFor("a3", "a", 2);
  PutFor("b1", "b", 3);
  PutFor("b2", "b", 4);
  PutFor("c1", "c", 5);
  EnqueueItem later = Item("a-later", 6, {{"tenant", "a"}});
  later.delay_ms = 1'000;
  Put("x", later);
  EXPECT_EQ(Counts("x").blocked, 0u);
  MessageRecord a1 = TakeOne("x");
  EXPECT_EQ(Counts("x").blocked, 2u);  // a2, a3; a-later is invisible
  MessageRecord b1 = TakeOne("x");
  StateCounts counts = Counts("x");
  EXPECT_EQ(counts.blocked, 3u);                  // a2, a3, b2
  EXPECT_EQ(counts[MessageState::kPending], 4u);  // a2, a3, b2, c1
  EXPECT_EQ(GetQueueInfo("x").counts.blocked, 3u);
  ASSERT_TRUE(CancelOne("x", "a3").ok());
  EXPECT_EQ(Counts("x").blocked, 2u);
  ASSERT_TRUE(CompleteOne("x", "b1", b1.lease_token).ok());
  EXPECT_EQ(Counts("x").blocked, 1u);
  ASSERT_TRUE(CompleteOne("x", "a1", a1.lease_token).ok());
  EXPECT_EQ(Counts("x").blocked, 0u);
}

TEST_F(ExclusiveTest, BlockedCountFollowsAFilter) {
  Put("x", "a1", 0, {{"tenant", "a"}, {"kind", "red"}});
  Put("x", "a2", 1, {{"tenant", "a"}, {"kind", "red"}});
  Put("x", "a3", 2, {{"tenant", "a"}, {"kind", "blue"}});
  TakeOne("x");
  EXPECT_EQ(Counts("x").blocked, 2u);
  EXPECT_EQ(Counts("x", {{"kind", "red"}}).blocked, 1u);
  EXPECT_EQ(Counts("x", {{"kind", "blue"}}).blocked, 1u);
  EXPECT_EQ(Counts("x", {{"tenant", "b"}}).blocked, 0u);
}

TEST_F(ExclusiveTest, MessageEnqueuedForALeasedValueIsBlocked) {
  PutFor("a1", "a", 5);
  TakeOne("x");
  PutFor("a2", "a", 0);  // more urgent, but its value is leased
  PutFor("b1", "b", 9);
  EXPECT_EQ(Counts("x").blocked, 1u);
  EXPECT_EQ(TakeOne("x").id, "b1");
}

TEST_F(ExclusiveTest, InvisibleMessageOfALeasedValueIsBlockedWhenItBecomesVisible) {
  PutFor("a1", "a", 0);
  EnqueueItem later = Item("a2", 0, {{"tenant", "a"}});
  later.delay_ms = 10;
  Put("x", later);
  MessageRecord m = TakeOne("x");
  ASSERT_TRUE(engine().Extend("x", "a1", m.lease_token, 1'000).ok());
  AdvanceTime(10);
  EXPECT_EQ(StateOf("x", "a2"), MessageState::kPending);
  EXPECT_EQ(Counts("x").blocked, 1u);
  EXPECT_TRUE(Take("x").empty());
}

TEST_F(ExclusiveTest, MaxAboveOneNeverReturnsTwoOfOneValue) {
  std::mt19937 rng(11);
  std::map<std::string, int> per_value;
  for (int i = 0; i < 200; ++i) {
    std::string value = "v" + std::to_string(rng() % 13);
    PutFor("m" + std::to_string(i), value, static_cast<int64_t>(rng() % 50));
    ++per_value[value];
  }
  std::vector<MessageRecord> got = Take("x", 1'000);
  std::set<std::string> values;
  for (const MessageRecord& m : got) {
    ASSERT_EQ(m.metadata.size(), 1u);
    EXPECT_TRUE(values.insert(m.metadata[0].value).second)
        << "two running messages of value " << m.metadata[0].value;
  }
  EXPECT_EQ(values.size(), per_value.size());
  EXPECT_TRUE(Take("x", 1'000).empty());
  EXPECT_EQ(Counts("x").blocked, 200u - per_value.size());
}

TEST_F(ExclusiveTest, MaxAboveOneReturnsEachValuesEarliestMessageInPriorityOrder) {
  PutFor("b1", "b", 2);
  PutFor("a1", "a", 1);
  PutFor("a2", "a", 3);
  PutFor("c1", "c", 4);
  PutFor("b2", "b", 0);
  EXPECT_EQ(TakeIds("x", 10), (std::vector<std::string>{"b2", "a1", "c1"}));
}

TEST_F(ExclusiveTest, ManyBlockedMessagesDoNotHideOtherValues) {
  for (int i = 0; i < 5'000; ++i) PutFor("a" + std::to_string(i), "a", i);
  PutFor("b", "b", 1'000'000);
  ASSERT_EQ(TakeOne("x").id, "a0");
  EXPECT_EQ(TakeOne("x").id, "b");
  EXPECT_EQ(Counts("x").blocked, 4'999u);
}

TEST_F(ExclusiveTest, RedrivenMessageOfALeasedValueIsBlocked) {
  QueueSettings s = ExclusiveSettings("tenant");
  s.max_attempts = 1;
  MakeQueue("once", s);
  Put("once", "a1", 0, {{"tenant", "a"}});
  Put("once", "a2", 1, {{"tenant", "a"}});
  ExhaustAttempts("once", "a1");
  MessageRecord a2 = TakeOne("once");
  ASSERT_EQ(a2.id, "a2");
  ASSERT_TRUE(RedriveOne("once", "a1").ok());
  EXPECT_EQ(Counts("once").blocked, 1u);
  EXPECT_TRUE(Take("once").empty());
  ASSERT_TRUE(CompleteOne("once", "a2", a2.lease_token).ok());
  EXPECT_EQ(TakeOne("once").id, "a1");
}

TEST_F(ExclusiveTest, FilterMayReturnAMessageThatIsNotTheFirstOfItsValue) {
  Put("x", "a1", 0, {{"tenant", "a"}, {"kind", "slow"}});
  Put("x", "a2", 1, {{"tenant", "a"}, {"kind", "fast"}});
  EXPECT_EQ(TakeOne("x", {{"kind", "fast"}}).id, "a2");
  // Now the value is leased: a1 must wait even for a plain dequeue.
  EXPECT_TRUE(Take("x").empty());
  EXPECT_EQ(Counts("x").blocked, 1u);
}

TEST_F(ExclusiveTest, FilterNeverReturnsAMessageOfALeasedValue) {
  Put("x", "a1", 0, {{"tenant", "a"}, {"kind", "slow"}});
  Put("x", "a2", 1, {{"tenant", "a"}, {"kind", "fast"}});
  Put("x", "b1", 2, {{"tenant", "b"}, {"kind", "fast"}});
  ASSERT_EQ(TakeOne("x").id, "a1");
  EXPECT_EQ(TakeIds("x", 10, {{"kind", "fast"}}), (std::vector<std::string>{"b1"}));
}

TEST_F(ExclusiveTest, FilterOnTheExclusivityKeyTakesOneMessageOfThatValue) {
  PutFor("a1", "a", 0);
  PutFor("b1", "b", 1);
  PutFor("a2", "a", 2);
  EXPECT_EQ(TakeIds("x", 10, {{"tenant", "a"}}), (std::vector<std::string>{"a1"}));
  EXPECT_TRUE(Take("x", 10, {{"tenant", "a"}}).empty());
  EXPECT_EQ(TakeIds("x", 10), (std::vector<std::string>{"b1"}));
}

TEST_F(ExclusiveTest, ValuesOfDifferentQueuesAreIndependent) {
  QueueSettings s = ExclusiveSettings("tenant");
  MakeQueue("y", s);
  PutFor("a1", "a");
  Put("y", "a1", 0, {{"tenant", "a"}});
  EXPECT_EQ(TakeOne("x").id, "a1");
  EXPECT_EQ(TakeOne("y").id, "a1");
}

TEST_F(ExclusiveTest, ExplainPendingMessageOfAFreeValueIsDequeueable) {
  PutFor("a1", "a", 0);
  PutFor("b1", "b", 1);
  TakeOne("x");
  Result<Explanation> e = engine().Explain("x", "b1");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->reason, ExplainReason::kDequeueable);
}

}  // namespace
}  // namespace sundial::engine_test
