// Metadata filters (docs/semantics.md "Limits", "Dequeue", "Cancel, reprioritize,
// redrive", "Reads"): dequeue returns the earliest pending match, count counts matches per state,
// and the bulk forms of cancel, reprioritize and redrive apply to every match.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

class FilterTest : public EngineTest {
 protected:
  void SetUp() override {
    QueueSettings s;
    s.max_attempts = 1;
    s.lease_ms = 1'000;
    MakeQueue("q", s);
  }
};

TEST_F(FilterTest, OnePairFilterDequeueReturnsEarliestMatching) {
  Put("q", "red-late", 9, {{"color", "red"}});
  Put("q", "blue", 0, {{"color", "blue"}});
  Put("q", "red-early", 5, {{"color", "red"}});
  Put("q", "plain", 1);
  EXPECT_EQ(TakeOne("q", {{"color", "red"}}).id, "red-early");
  EXPECT_EQ(TakeOne("q", {{"color", "red"}}).id, "red-late");
  EXPECT_TRUE(Take("q", 1, {{"color", "red"}}).empty());
  EXPECT_EQ(DrainIds("q"), (std::vector<std::string>{"blue", "plain"}));
}

TEST_F(FilterTest, FilterTiesAreInEnqueueOrder) {
  for (int i = 0; i < 10; ++i) {
    Put("q", "m" + std::to_string(i), 3, {{"color", i % 2 == 0 ? "red" : "blue"}});
  }
  EXPECT_EQ(DrainIds("q", {{"color", "blue"}}),
            (std::vector<std::string>{"m1", "m3", "m5", "m7", "m9"}));
}

TEST_F(FilterTest, MultiPairFilterReturnsEarliestMessageMatchingEveryPair) {
  Put("q", "red-small", 0, {{"color", "red"}, {"size", "s"}});
  Put("q", "blue-large", 1, {{"color", "blue"}, {"size", "l"}});
  Put("q", "red-large-late", 5, {{"size", "l"}, {"color", "red"}, {"x", "y"}});
  Put("q", "red-large", 3, {{"color", "red"}, {"size", "l"}});
  Filter red_large{{"color", "red"}, {"size", "l"}};
  EXPECT_EQ(TakeIds("q", 10, red_large), (std::vector<std::string>{"red-large", "red-large-late"}));
  EXPECT_EQ(Counts("q")[MessageState::kPending], 2u);
}

TEST_F(FilterTest, FourPairFilterMatchesOnlyMessagesWithAllFour) {
  Metadata all{{"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", "4"}};
  Metadata three{{"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", "5"}};
  Put("q", "three", 0, three);
  Put("q", "all", 1, all);
  EXPECT_EQ(TakeIds("q", 10, all), (std::vector<std::string>{"all"}));
}

TEST_F(FilterTest, FilterValueMustMatchExactly) {
  Put("q", "empty", 0, {{"k", ""}});
  Put("q", "missing", 1);
  Put("q", "prefix", 2, {{"k", "va"}});
  Put("q", "value", 3, {{"k", "value"}});
  Put("q", "other-key", 4, {{"kk", "value"}});
  EXPECT_EQ(TakeIds("q", 10, {{"k", ""}}), (std::vector<std::string>{"empty"}));
  EXPECT_EQ(TakeIds("q", 10, {{"k", "value"}}), (std::vector<std::string>{"value"}));
  EXPECT_EQ(TakeIds("q", 10, {{"K", "va"}}), (std::vector<std::string>{}));
}

TEST_F(FilterTest, FilterNeverReturnsInvisibleRunningOrTerminalMessages) {
  EnqueueItem invisible = Item("invisible", 0, {{"k", "v"}});
  invisible.delay_ms = 100;
  Put("q", invisible);
  Put("q", "running", 1, {{"k", "v"}});
  Put("q", "canceled", 2, {{"k", "v"}});
  Put("q", "pending", 3, {{"k", "v"}});
  ASSERT_EQ(TakeOne("q").id, "running");
  ASSERT_TRUE(CancelOne("q", "canceled").ok());
  EXPECT_EQ(TakeIds("q", 10, {{"k", "v"}}), (std::vector<std::string>{"pending"}));
  AdvanceTime(100);
  EXPECT_EQ(TakeIds("q", 10, {{"k", "v"}}), (std::vector<std::string>{"invisible"}));
}

TEST_F(FilterTest, FilterDequeueMatchesMessagesThatReturnToPending) {
  Put("q", "a", 0, {{"k", "v"}});
  MessageRecord m = TakeOne("q", {{"k", "v"}});
  ASSERT_EQ(m.id, "a");
  EXPECT_TRUE(Take("q", 1, {{"k", "v"}}).empty());
  QueueSettings s;
  s.max_attempts = 5;
  MakeQueue("retry", s);
  Put("retry", "b", 0, {{"k", "v"}});
  MessageRecord b = TakeOne("retry", {{"k", "v"}});
  ASSERT_TRUE(FailOne("retry", "b", b.lease_token, 0).ok());
  EXPECT_EQ(TakeOne("retry", {{"k", "v"}}).id, "b");
}

TEST_F(FilterTest, FilterFollowsReprioritize) {
  Put("q", "a", 1, {{"k", "v"}});
  Put("q", "b", 2, {{"k", "v"}});
  ASSERT_TRUE(SetPriority("q", "b", 0).ok());
  EXPECT_EQ(TakeIds("q", 10, {{"k", "v"}}), (std::vector<std::string>{"b", "a"}));
}

TEST_F(FilterTest, FilterDequeueAgreesWithAScanOnRandomMessages) {
  std::mt19937 rng(5);
  struct Entry {
    std::string id;
    int64_t priority;
    int seq;
    std::string color;
    std::string size;
  };
  std::vector<Entry> entries;
  const char* colors[] = {"red", "green", "blue"};
  const char* sizes[] = {"s", "m", "l"};
  for (int i = 0; i < 400; ++i) {
    Entry e{"m" + std::to_string(i), static_cast<int64_t>(rng() % 40), i, colors[rng() % 3],
            sizes[rng() % 3]};
    Put("q", e.id, e.priority, {{"color", e.color}, {"size", e.size}});
    entries.push_back(e);
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.priority != b.priority ? a.priority < b.priority : a.seq < b.seq;
  });
  std::vector<std::string> want_green_m;
  std::vector<std::string> want_blue;
  for (const Entry& e : entries) {
    if (e.color == "green" && e.size == "m") want_green_m.push_back(e.id);
    if (e.color == "blue") want_blue.push_back(e.id);
  }
  EXPECT_EQ(DrainIds("q", {{"color", "green"}, {"size", "m"}}), want_green_m);
  EXPECT_EQ(DrainIds("q", {{"color", "blue"}}), want_blue);
}

TEST_F(FilterTest, CountByFilterCountsMatchesPerState) {
  auto red = [](int i) { return Metadata{{"color", "red"}, {"n", std::to_string(i)}}; };
  EnqueueItem invisible = Item("invisible", 0, red(0));
  invisible.delay_ms = 500;
  Put("q", invisible);
  Put("q", "errored", 0, red(1));
  Put("q", "completed", 1, red(2));
  Put("q", "running", 2, red(3));
  Put("q", "canceled", 3, red(4));
  Put("q", "pending", 4, red(5));
  Put("q", "blue-pending", 5, {{"color", "blue"}});
  Put("q", "blue-canceled", 6, {{"color", "blue"}});
  ExhaustAttempts("q", "errored");
  MessageRecord c = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", c.id, c.lease_token).ok());
  TakeOne("q");
  ASSERT_TRUE(CancelOne("q", "canceled").ok());
  ASSERT_TRUE(CancelOne("q", "blue-canceled").ok());

  StateCounts r = Counts("q", {{"color", "red"}});
  EXPECT_EQ(r[MessageState::kInvisible], 1u);
  EXPECT_EQ(r[MessageState::kPending], 1u);
  EXPECT_EQ(r[MessageState::kRunning], 1u);
  EXPECT_EQ(r[MessageState::kCompleted], 1u);
  EXPECT_EQ(r[MessageState::kCanceled], 1u);
  EXPECT_EQ(r[MessageState::kErrored], 1u);

  StateCounts b = Counts("q", {{"color", "blue"}});
  EXPECT_EQ(b[MessageState::kPending], 1u);
  EXPECT_EQ(b[MessageState::kCanceled], 1u);
  EXPECT_EQ(b[MessageState::kRunning], 0u);

  StateCounts two = Counts("q", {{"color", "red"}, {"n", "3"}});
  EXPECT_EQ(two[MessageState::kRunning], 1u);
  EXPECT_EQ(two[MessageState::kPending], 0u);

  StateCounts all = Counts("q");
  EXPECT_EQ(all[MessageState::kPending], 2u);
  EXPECT_EQ(all[MessageState::kCanceled], 2u);
  EXPECT_EQ(Counts("q", {{"color", "green"}}), StateCounts{});
}

TEST_F(FilterTest, BrowseWithFilterShowsOnlyMatches) {
  for (int i = 0; i < 30; ++i) {
    Put("q", "m" + std::to_string(i), 30 - i, {{"even", i % 2 == 0 ? "yes" : "no"}});
  }
  BrowseRequest request;
  request.filter = {{"even", "yes"}};
  request.limit = 4;
  std::vector<std::string> got;
  for (int page = 0; page < 20; ++page) {
    Result<BrowsePage> r = engine().Browse("q", request);
    ASSERT_TRUE(r.ok());
    for (const MessageSummary& m : r->messages) got.push_back(m.id);
    if (r->next_cursor.empty()) break;
    request.cursor = r->next_cursor;
  }
  std::vector<std::string> want;
  for (int i = 28; i >= 0; i -= 2) want.push_back("m" + std::to_string(i));
  EXPECT_EQ(got, want);
}

TEST_F(FilterTest, CancelByFilterCancelsInvisiblePendingAndRunningMatches) {
  QueueSettings s;
  s.max_attempts = 1;
  MakeQueue("c", s);
  EnqueueItem invisible = Item("invisible", 0, {{"job", "x"}});
  invisible.delay_ms = 100;
  Put("c", invisible);
  Put("c", "errored", 0, {{"job", "x"}});
  Put("c", "running", 1, {{"job", "x"}});
  Put("c", "completed", 2, {{"job", "x"}});
  Put("c", "pending", 3, {{"job", "x"}});
  Put("c", "other", 4, {{"job", "y"}});
  ExhaustAttempts("c", "errored");
  MessageRecord running = TakeOne("c");
  MessageRecord completed = TakeOne("c");
  ASSERT_TRUE(CompleteOne("c", "completed", completed.lease_token).ok());

  Result<uint64_t> r = engine().CancelByFilter("c", {{"job", "x"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 3u);
  EXPECT_EQ(StateOf("c", "invisible"), MessageState::kCanceled);
  EXPECT_EQ(StateOf("c", "running"), MessageState::kCanceled);
  EXPECT_EQ(StateOf("c", "pending"), MessageState::kCanceled);
  EXPECT_EQ(StateOf("c", "errored"), MessageState::kErrored);
  EXPECT_EQ(StateOf("c", "completed"), MessageState::kCompleted);
  EXPECT_EQ(StateOf("c", "other"), MessageState::kPending);
  EXPECT_EQ(CompleteOne("c", "running", running.lease_token).code(), Code::kFailedPrecondition);

  // Already canceled matches are not counted again.
  Result<uint64_t> again = engine().CancelByFilter("c", {{"job", "x"}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u);
}

TEST_F(FilterTest, CancelByFilterNeedsAtLeastOnePair) {
  Put("q", "a", 0, {{"k", "v"}});
  EXPECT_EQ(engine().CancelByFilter("q", {}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
  EXPECT_EQ(engine().CancelByFilter("nope", {{"k", "v"}}).status().code(), Code::kNotFound);
}

TEST_F(FilterTest, CancelByFilterReleasesExclusiveValues) {
  MakeQueue("x", ExclusiveSettings("tenant"));
  Put("x", "a1", 0, {{"tenant", "a"}, {"batch", "1"}});
  Put("x", "a2", 1, {{"tenant", "a"}, {"batch", "2"}});
  TakeOne("x");
  Result<uint64_t> r = engine().CancelByFilter("x", {{"batch", "1"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
  EXPECT_EQ(TakeOne("x").id, "a2");
}

TEST_F(FilterTest, ReprioritizeByFilterChangesInvisibleAndPendingMatchesOnly) {
  EnqueueItem invisible = Item("invisible", 50, {{"k", "v"}});
  invisible.delay_ms = 100;
  Put("q", invisible);
  Put("q", "running", 10, {{"k", "v"}});
  Put("q", "pending", 20, {{"k", "v"}});
  Put("q", "other", 30, {{"k", "w"}});
  ASSERT_EQ(TakeOne("q").id, "running");
  ReprioritizeRequest request;
  request.priority = -1;
  Result<uint64_t> r = engine().ReprioritizeByFilter("q", {{"k", "v"}}, request);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2u);
  EXPECT_EQ(GetMessage("q", "invisible").priority, -1);
  EXPECT_EQ(GetMessage("q", "invisible").state, MessageState::kInvisible);
  EXPECT_EQ(GetMessage("q", "invisible").version, 2u);
  EXPECT_EQ(GetMessage("q", "pending").priority, -1);
  EXPECT_EQ(GetMessage("q", "running").priority, 10);
  EXPECT_EQ(GetMessage("q", "other").priority, 30);
  EXPECT_EQ(TakeOne("q").id, "pending");
}

TEST_F(FilterTest, ReprioritizeByFilterKeepsEnqueueOrderAmongMatches) {
  Put("q", "a", 9, {{"k", "v"}});
  Put("q", "b", 3, {{"k", "v"}});
  Put("q", "c", 7, {{"k", "v"}});
  Put("q", "d", 5);
  ReprioritizeRequest request;
  request.priority = 5;
  Result<uint64_t> r = engine().ReprioritizeByFilter("q", {{"k", "v"}}, request);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 3u);
  EXPECT_EQ(DrainIds("q"), (std::vector<std::string>{"a", "b", "c", "d"}));
}

TEST_F(FilterTest, ReprioritizeByFilterWithVisibleAtHidesMatches) {
  Put("q", "a", 0, {{"k", "v"}});
  Put("q", "b", 1, {{"k", "w"}});
  ReprioritizeRequest request;
  request.visible_at = Now() + 100;
  Result<uint64_t> r = engine().ReprioritizeByFilter("q", {{"k", "v"}}, request);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kInvisible);
  EXPECT_EQ(TakeOne("q").id, "b");
  AdvanceTime(100);
  EXPECT_EQ(TakeOne("q").id, "a");
}

TEST_F(FilterTest, ReprioritizeByFilterNeedsAPairAndAField) {
  Put("q", "a", 0, {{"k", "v"}});
  ReprioritizeRequest request;
  request.priority = 1;
  EXPECT_EQ(engine().ReprioritizeByFilter("q", {}, request).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(engine().ReprioritizeByFilter("q", {{"k", "v"}}, ReprioritizeRequest{}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(GetMessage("q", "a").priority, 0);
  EXPECT_EQ(GetMessage("q", "a").version, 1u);
}

TEST_F(FilterTest, RedriveByFilterMovesMatchingErroredMessagesOnly) {
  Put("q", "x1", 0, {{"job", "x"}});
  Put("q", "y1", 1, {{"job", "y"}});
  Put("q", "x2", 2, {{"job", "x"}});
  Put("q", "x-pending", 3, {{"job", "x"}});
  ExhaustAttempts("q", "x1");
  ExhaustAttempts("q", "y1");
  ExhaustAttempts("q", "x2");
  Result<uint64_t> r = engine().RedriveByFilter("q", {{"job", "x"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2u);
  MessageRecord x1 = GetMessage("q", "x1");
  EXPECT_EQ(x1.state, MessageState::kPending);
  EXPECT_EQ(x1.attempts, 0u);
  EXPECT_EQ(StateOf("q", "x2"), MessageState::kPending);
  EXPECT_EQ(StateOf("q", "y1"), MessageState::kErrored);
  EXPECT_EQ(GetMessage("q", "x-pending").version, 1u);
  EXPECT_EQ(DrainIds("q"), (std::vector<std::string>{"x1", "x2", "x-pending"}));
}

TEST_F(FilterTest, RedriveByEmptyFilterMovesEveryErroredMessage) {
  Put("q", "a", 0, {{"job", "x"}});
  Put("q", "b", 1);
  Put("q", "c", 2);
  ExhaustAttempts("q", "a");
  ExhaustAttempts("q", "b");
  Result<uint64_t> r = engine().RedriveByFilter("q", {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2u);
  StateCounts counts = Counts("q");
  EXPECT_EQ(counts[MessageState::kErrored], 0u);
  EXPECT_EQ(counts[MessageState::kPending], 3u);
  Result<uint64_t> again = engine().RedriveByFilter("q", {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u);
}

TEST_F(FilterTest, FilterOpsOnMissingQueueAreNotFound) {
  ReprioritizeRequest request;
  request.priority = 1;
  DequeueRequest dequeue;
  dequeue.filter = {{"k", "v"}};
  EXPECT_EQ(engine().Dequeue("nope", dequeue).status().code(), Code::kNotFound);
  EXPECT_EQ(engine().Count("nope", {{"k", "v"}}).status().code(), Code::kNotFound);
  EXPECT_EQ(engine().ReprioritizeByFilter("nope", {{"k", "v"}}, request).status().code(),
            Code::kNotFound);
  EXPECT_EQ(engine().RedriveByFilter("nope", {}).status().code(), Code::kNotFound);
  EXPECT_EQ(engine().ExplainFilter("nope", {{"k", "v"}}).status().code(), Code::kNotFound);
}

TEST_F(FilterTest, DeadLetteredMessagesCanBeFoundByOrigin) {
  MakeQueue("dlq");
  QueueSettings a;
  a.max_attempts = 1;
  a.dead_letter_queue = "dlq";
  MakeQueue("from-a", a);
  MakeQueue("from-b", a);
  Put("from-a", "a1");
  Put("from-b", "b1");
  MessageRecord ma = TakeOne("from-a");
  ASSERT_TRUE(FailOne("from-a", "a1", ma.lease_token).ok());
  MessageRecord mb = TakeOne("from-b");
  ASSERT_TRUE(FailOne("from-b", "b1", mb.lease_token).ok());
  EXPECT_EQ(Counts("dlq", {{std::string(kOriginQueueKey), "from-b"}})[MessageState::kPending], 1u);
  EXPECT_EQ(TakeIds("dlq", 10, {{std::string(kOriginQueueKey), "from-b"}}),
            (std::vector<std::string>{"b1"}));
}

}  // namespace
}  // namespace sundial::engine_test
