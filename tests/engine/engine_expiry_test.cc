// Expiry, dedupe while_active and debounce (docs/semantics.md, "Flow control": "Expiry",
// "Releasing ids: dedupe while_active", "Debounce"): the engine's rules, their effects, and
// that replay and snapshots agree with the live engine (digest).
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

class ExpiryTest : public EngineTest {
 protected:
  EnqueueItem WithTtl(std::string id, int64_t ttl_ms) {
    EnqueueItem item = Item(std::move(id));
    item.ttl_ms = ttl_ms;
    return item;
  }
  EnqueueItem Debounced(std::string id, int64_t debounce_ms, std::string payload,
                        Metadata metadata = {}) {
    EnqueueItem item = Item(std::move(id), 0, std::move(metadata), std::move(payload));
    item.debounce_ms = debounce_ms;
    return item;
  }
  // The effects recorded after the first `mark` (all of them stay for Replayed()).
  std::vector<RecordedEffect> Since(size_t mark) {
    std::vector<RecordedEffect> all = sink_.All();
    return std::vector<RecordedEffect>(all.begin() + static_cast<ptrdiff_t>(mark), all.end());
  }
  void ExpectReplayAndSnapshotAgree() {
    const uint64_t live = engine().Digest();
    EXPECT_EQ(Replayed()->Digest(), live);
    EXPECT_EQ(Exported()->Digest(), live);
  }
};

TEST_F(ExpiryTest, APendingMessagePastItsTtlIsCanceledAsExpiredByTheTimer) {
  Put("q", WithTtl("a", 1000));
  EXPECT_EQ(GetMessage("q", "a").expires_at, Now() + 1000);
  EXPECT_EQ(engine().NextDueTime(), Now() + 1000);
  AdvanceTime(999);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kPending);
  const size_t mark = sink_.size();
  AdvanceTime(1);
  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.state, MessageState::kCanceled);
  EXPECT_EQ(m.last_error, "expired");
  std::vector<RecordedEffect> effects = Since(mark);
  ASSERT_EQ(effects.size(), 1u);
  EXPECT_EQ(effects[0].cause, ChangeCause::kExpired);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(ExpiryTest, TheQueueDefaultAppliesAndTheItemOverridesIt) {
  QueueSettings s;
  s.ttl_ms = 5000;
  MakeQueue("q", s);
  Put("q", "a");
  Put("q", WithTtl("b", 100));
  EXPECT_EQ(GetMessage("q", "a").expires_at, Now() + 5000);
  EXPECT_EQ(GetMessage("q", "b").expires_at, Now() + 100);
  Put("other", "c");
  EXPECT_EQ(GetMessage("other", "c").expires_at, 0);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(ExpiryTest, ADequeueNeverDeliversAnExpiredMessageEvenWhenTheTimerIsLate) {
  Put("q", WithTtl("a", 1000));
  Put("q", "b", 1);  // after a in priority order
  AdvanceClockOnly(1000);
  std::vector<std::string> ids = TakeIds("q", 10);
  EXPECT_EQ(ids, std::vector<std::string>{"b"});
  EXPECT_EQ(StateOf("q", "a"), MessageState::kCanceled);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(ExpiryTest, AnInvisibleMessageExpiresAndARunningOneOnlyWhenItComesBack) {
  EnqueueItem late = WithTtl("inv", 500);
  late.delay_ms = 2000;
  Put("q", std::move(late));
  Put("q", WithTtl("run", 500));
  MessageRecord leased = TakeOne("q", {}, 10'000);
  ASSERT_EQ(leased.id, "run");
  AdvanceTime(600);
  EXPECT_EQ(StateOf("q", "inv"), MessageState::kCanceled);
  EXPECT_EQ(StateOf("q", "run"), MessageState::kRunning);
  // A retry does not extend the ttl: failed back to pending, it expires in the same operation's
  // wake-up.
  ASSERT_TRUE(FailOne("q", "run", leased.lease_token, 0).ok());
  EXPECT_EQ(StateOf("q", "run"), MessageState::kPending);
  EXPECT_LE(engine().NextDueTime(), Now());
  AdvanceTime(0);
  EXPECT_EQ(StateOf("q", "run"), MessageState::kCanceled);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(ExpiryTest, AnExpiredDependencyFailsItsDependents) {
  Put("q", WithTtl("dep", 100));
  EnqueueItem child = Item("child");
  child.depends_on = {"dep"};
  Put("q", std::move(child));
  AdvanceClockOnly(100);
  // The dequeue expires the dependency first (every shard locked), then finds nothing.
  EXPECT_TRUE(Take("q").empty());
  EXPECT_EQ(StateOf("q", "dep"), MessageState::kCanceled);
  EXPECT_EQ(StateOf("q", "child"), MessageState::kCanceled);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(ExpiryTest, ExpiryWorksInAnExclusiveQueueAndBrowseShowsIt) {
  MakeQueue("x", ExclusiveSettings());
  EnqueueItem a = Item("a", 0, {{"key", "k"}});
  a.ttl_ms = 50;
  Put("x", std::move(a));
  Put("x", Item("b", 1, {{"key", "k"}}));
  BrowseRequest browse;
  browse.state = MessageState::kPending;
  browse.limit = 10;
  Result<BrowsePage> page = engine().Browse("x", browse);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->messages.size(), 2u);
  EXPECT_EQ(page->messages[0].expires_at, Now() + 50);
  EXPECT_EQ(page->messages[1].expires_at, 0);
  AdvanceTime(50);
  EXPECT_EQ(TakeIds("x"), std::vector<std::string>{"b"});
  ExpectReplayAndSnapshotAgree();
}

TEST_F(ExpiryTest, DedupeWhileActiveReleasesTheIdOfATerminalMessage) {
  QueueSettings s;
  s.dedupe = Dedupe::kWhileActive;
  MakeQueue("q", s);
  Put("q", "a");
  Result<EnqueueResult> again = EnqueueOne("q", Item("a"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);  // still active
  MessageRecord leased = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "a", leased.lease_token).ok());
  const size_t mark = sink_.size();
  Result<EnqueueResult> anew = EnqueueOne("q", Item("a", 0, {}, "second"));
  ASSERT_TRUE(anew.ok());
  EXPECT_FALSE(anew->duplicate);
  EXPECT_EQ(anew->version, 1u);
  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.state, MessageState::kPending);
  EXPECT_EQ(m.payload, "second");
  std::vector<RecordedEffect> effects = Since(mark);
  ASSERT_EQ(effects.size(), 2u);
  EXPECT_EQ(effects[0].type, EffectType::kMessageRemoved);
  EXPECT_EQ(effects[1].type, EffectType::kMessageEnqueued);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(ExpiryTest, DedupeKeepAnswersADuplicateForATerminalMessage) {
  Put("q", "a");
  MessageRecord leased = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "a", leased.lease_token).ok());
  Result<EnqueueResult> again = EnqueueOne("q", Item("a"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(StateOf("q", "a"), MessageState::kCompleted);
}

TEST_F(ExpiryTest, DebounceReplacesAPendingMessageAndPushesItsVisibility) {
  Put("q", Item("a", 7, {{"k", "1"}}, "first"));
  const size_t mark = sink_.size();
  Result<EnqueueResult> r = EnqueueOne("q", Debounced("a", 1000, "second", {{"k", "2"}}));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->duplicate);
  EXPECT_EQ(r->version, 2u);
  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.state, MessageState::kInvisible);
  EXPECT_EQ(m.visible_at, Now() + 1000);
  EXPECT_EQ(m.payload, "second");
  EXPECT_EQ(m.priority, 7);
  EXPECT_TRUE(HasPair(m.metadata, "k", "2"));
  std::vector<RecordedEffect> effects = Since(mark);
  ASSERT_EQ(effects.size(), 1u);
  EXPECT_EQ(effects[0].cause, ChangeCause::kDebounced);
  EXPECT_EQ(effects[0].payload, "second");
  // Again, sooner: the later visible_at stays.
  AdvanceTime(100);
  ASSERT_TRUE(EnqueueOne("q", Debounced("a", 500, "third")).ok());
  EXPECT_EQ(GetMessage("q", "a").visible_at, Now() + 900);
  EXPECT_EQ(Counts("q")[MessageState::kInvisible], 1u);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(ExpiryTest, DebounceOfARunningMessageIsADuplicateAndOfAnAbsentOneADelayedEnqueue) {
  Put("q", "a");
  MessageRecord leased = TakeOne("q");
  const size_t mark = sink_.size();
  Result<EnqueueResult> r = EnqueueOne("q", Debounced("a", 1000, "other"));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->duplicate);
  EXPECT_EQ(sink_.size(), mark);
  EXPECT_EQ(GetMessage("q", "a").payload, "payload");
  Result<EnqueueResult> fresh = EnqueueOne("q", Debounced("b", 300, "x"));
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE(fresh->duplicate);
  EXPECT_EQ(GetMessage("q", "b").visible_at, Now() + 300);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(ExpiryTest, DebounceKeepsTheTtlHistoryAndLargePayloads) {
  QueueSettings s;
  s.history_max = 10;
  MakeQueue("q", s);
  Put("q", WithTtl("a", 10'000));
  const TimeMs expires_at = GetMessage("q", "a").expires_at;
  AdvanceTime(10);
  ASSERT_TRUE(EnqueueOne("q", Debounced("a", 100, std::string(20'000, 'z'))).ok());
  MessageRecord m = GetMessage("q", "a");
  EXPECT_EQ(m.expires_at, expires_at);
  EXPECT_EQ(m.payload.size(), 20'000u);
  Result<MessageHistory> h = engine().History("q", "a");
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h->entries.size(), 2u);
  EXPECT_EQ(h->entries[1].event, HistoryEvent::kDebounced);
  ASSERT_TRUE(EnqueueOne("q", Debounced("a", 100, "small")).ok());
  EXPECT_EQ(GetMessage("q", "a").payload, "small");
  ExpectReplayAndSnapshotAgree();
  AdvanceTime(10'000);
  Result<MessageHistory> after = engine().History("q", "a");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->entries.back().event, HistoryEvent::kExpired);
  ExpectReplayAndSnapshotAgree();
}

TEST_F(ExpiryTest, TheArgumentsAreChecked) {
  EnqueueItem no_id = Debounced("", 10, "x");
  EXPECT_EQ(EnqueueOne("q", std::move(no_id)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EnqueueOne("q", WithTtl("a", 0)).status().code(), Code::kInvalidArgument);
  QueueSettings s;
  s.ttl_ms = -1;
  EXPECT_EQ(engine().CreateQueue("bad", s).status().code(), Code::kInvalidArgument);
  QueueSettingsUpdate u;
  u.ttl_ms = 100;
  u.dedupe = Dedupe::kWhileActive;
  MakeQueue("q2");
  Result<QueueInfo> updated = engine().UpdateQueue("q2", u);
  ASSERT_TRUE(updated.ok());
  EXPECT_EQ(updated->settings.ttl_ms, 100);
  EXPECT_EQ(updated->settings.dedupe, Dedupe::kWhileActive);
  ExpectReplayAndSnapshotAgree();
}

}  // namespace
}  // namespace sundial::engine_test
