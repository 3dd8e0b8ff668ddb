// Effects (engine/effect.h): every operation reports the right effect type, cause, states,
// version and fields to the sink, failed operations report nothing, and Engine::Apply of the
// recorded effects on a fresh engine rebuilds the same state (same Digest), including dead-letter
// moves between queues on different shards.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

uint8_t StateBit(MessageState s) { return static_cast<uint8_t>(1u << static_cast<unsigned>(s)); }

void ExpectSameMessage(const MessageRecord& a, const MessageRecord& b) {
  EXPECT_EQ(a.queue, b.queue);
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.priority, b.priority) << a.id;
  EXPECT_EQ(a.payload, b.payload) << a.id;
  EXPECT_EQ(a.metadata, b.metadata) << a.id;
  EXPECT_EQ(a.state, b.state) << a.id;
  EXPECT_EQ(a.attempts, b.attempts) << a.id;
  EXPECT_EQ(a.max_attempts, b.max_attempts) << a.id;
  EXPECT_EQ(a.visible_at, b.visible_at) << a.id;
  EXPECT_EQ(a.lease_token, b.lease_token) << a.id;
  EXPECT_EQ(a.lease_expires_at, b.lease_expires_at) << a.id;
  EXPECT_EQ(a.version, b.version) << a.id;
  EXPECT_EQ(a.enqueued_at, b.enqueued_at) << a.id;
  EXPECT_EQ(a.updated_at, b.updated_at) << a.id;
  EXPECT_EQ(a.last_error, b.last_error) << a.id;
}

class EffectsTest : public EngineTest {
 protected:
  // The effects reported since the last call.
  std::vector<RecordedEffect> Effects() { return sink_.Take(); }

  // Expects exactly one effect and returns it.
  RecordedEffect OnlyEffect() {
    std::vector<RecordedEffect> effects = Effects();
    EXPECT_EQ(effects.size(), 1u);
    return effects.empty() ? RecordedEffect{} : effects[0];
  }

  void ExpectChange(const RecordedEffect& e, std::string_view queue, std::string_view id,
                    ChangeCause cause, MessageState from, MessageState to) {
    EXPECT_EQ(e.type, EffectType::kMessageChanged);
    EXPECT_EQ(e.cause, cause);
    EXPECT_EQ(e.queue, queue);
    EXPECT_EQ(e.id, id);
    EXPECT_EQ(e.from, from);
    EXPECT_EQ(e.to, to);
    // The effect carries the message's state after the change.
    Result<MessageRecord> m = engine().Get(queue, id);
    if (m.ok()) {
      EXPECT_EQ(e.version, m->version) << id;
      EXPECT_EQ(e.priority, m->priority) << id;
      EXPECT_EQ(e.attempts, m->attempts) << id;
      EXPECT_EQ(e.max_attempts, m->max_attempts) << id;
      EXPECT_EQ(e.lease_token, m->lease_token) << id;
      EXPECT_EQ(e.enqueued_at, m->enqueued_at) << id;
      EXPECT_EQ(e.time, m->updated_at) << id;
      EXPECT_EQ(e.error, m->last_error) << id;
      EXPECT_EQ(e.payload, m->payload) << id;
      EXPECT_EQ(e.metadata(), m->metadata) << id;
      if (to == MessageState::kInvisible) {
        EXPECT_EQ(e.due_at, m->visible_at) << id;
      } else if (to == MessageState::kRunning) {
        EXPECT_EQ(e.due_at, m->lease_expires_at) << id;
      } else if (IsTerminal(to)) {  // when retention removes it
        EXPECT_EQ(e.due_at, m->updated_at + GetQueueInfo(queue).settings.retention_ms) << id;
      } else {
        EXPECT_EQ(e.due_at, 0) << id;
      }
    }
  }

  // Applies `effects` to `target`, expecting each to fit.
  static void ApplyAll(const std::vector<RecordedEffect>& effects, Engine& target) {
    for (size_t i = 0; i < effects.size(); ++i) {
      Status s = target.Apply(effects[i].View());
      EXPECT_TRUE(s.ok()) << "effect " << i << " (" << EffectTypeName(effects[i].type) << " "
                          << effects[i].queue << "/" << effects[i].id << "): " << CodeName(s.code())
                          << " " << s.detail();
    }
  }
};

// ---- Queue effects --------------------------------------------------------------------------

TEST_F(EffectsTest, CreateQueueEmitsQueueCreatedWithItsSettings) {
  QueueSettings s = ExclusiveSettings("tenant");
  s.lease_ms = 777;
  MakeQueue("q", s);
  RecordedEffect e = OnlyEffect();
  EXPECT_EQ(e.type, EffectType::kQueueCreated);
  EXPECT_EQ(e.queue, "q");
  ASSERT_TRUE(e.settings.has_value());
  EXPECT_EQ(*e.settings, s);
  EXPECT_EQ(e.time, Now());

  MakeQueue("q", s);  // identical repeat: no change
  EXPECT_TRUE(Effects().empty());
  QueueSettings other = s;
  other.lease_ms = 778;
  EXPECT_FALSE(engine().CreateQueue("q", other).ok());
  EXPECT_FALSE(engine().CreateQueue("bad name", {}).ok());
  EXPECT_TRUE(Effects().empty());
}

TEST_F(EffectsTest, AutoCreateEmitsQueueCreatedBeforeTheFirstEnqueue) {
  Put("auto", "a");
  std::vector<RecordedEffect> effects = Effects();
  ASSERT_EQ(effects.size(), 2u);
  EXPECT_EQ(effects[0].type, EffectType::kQueueCreated);
  EXPECT_EQ(effects[0].queue, "auto");
  ASSERT_TRUE(effects[0].settings.has_value());
  EXPECT_EQ(*effects[0].settings, QueueSettings{});
  EXPECT_EQ(effects[1].type, EffectType::kMessageEnqueued);
  EXPECT_EQ(effects[1].queue, "auto");
}

TEST_F(EffectsTest, UpdateQueueEmitsTheWholeNewSettings) {
  QueueSettings s;
  s.lease_ms = 1'000;
  MakeQueue("q", s);
  Effects();
  QueueSettingsUpdate update;
  update.max_depth = 10;
  ASSERT_TRUE(engine().UpdateQueue("q", update).ok());
  RecordedEffect e = OnlyEffect();
  EXPECT_EQ(e.type, EffectType::kQueueUpdated);
  EXPECT_EQ(e.queue, "q");
  QueueSettings want = s;
  want.max_depth = 10;
  ASSERT_TRUE(e.settings.has_value());
  EXPECT_EQ(*e.settings, want);
}

TEST_F(EffectsTest, UpdateThatChangesNothingEmitsNoEffect) {
  QueueSettings s;
  s.lease_ms = 1'000;
  MakeQueue("q", s);
  Effects();
  QueueSettingsUpdate same;
  same.lease_ms = 1'000;
  same.enqueue_paused = false;
  ASSERT_TRUE(engine().UpdateQueue("q", same).ok());
  ASSERT_TRUE(engine().UpdateQueue("q", QueueSettingsUpdate{}).ok());
  EXPECT_TRUE(Effects().empty());
  QueueSettingsUpdate invalid;
  invalid.lease_ms = 0;
  EXPECT_FALSE(engine().UpdateQueue("q", invalid).ok());
  EXPECT_TRUE(Effects().empty());
}

TEST_F(EffectsTest, DeleteQueueEmitsOneQueueDeleted) {
  MakeQueue("q");
  Put("q", "a");
  Put("q", "b");
  Effects();
  ASSERT_TRUE(engine().DeleteQueue("q").ok());
  RecordedEffect e = OnlyEffect();
  EXPECT_EQ(e.type, EffectType::kQueueDeleted);
  EXPECT_EQ(e.queue, "q");
  EXPECT_EQ(engine().DeleteQueue("q").code(), Code::kNotFound);
  EXPECT_TRUE(Effects().empty());
}

TEST_F(EffectsTest, PurgeQueueEmitsQueuePurgedWithTheStateBits) {
  MakeQueue("q");
  Put("q", "a");
  Put("q", "b");
  Effects();
  Result<uint64_t> r = engine().PurgeQueue("q", {MessageState::kPending, MessageState::kCompleted});
  ASSERT_TRUE(r.ok());
  RecordedEffect e = OnlyEffect();
  EXPECT_EQ(e.type, EffectType::kQueuePurged);
  EXPECT_EQ(e.queue, "q");
  EXPECT_EQ(e.purge_states, StateBit(MessageState::kPending) | StateBit(MessageState::kCompleted));
}

// ---- Message effects ------------------------------------------------------------------------

TEST_F(EffectsTest, EnqueueEmitsMessageEnqueuedWithEveryField) {
  MakeQueue("q");
  Effects();
  EnqueueItem item = Item("a", 42, {{"k", "v"}, {"x", "y"}}, "the payload");
  item.max_attempts = 7;
  Put("q", item);
  RecordedEffect e = OnlyEffect();
  EXPECT_EQ(e.type, EffectType::kMessageEnqueued);
  EXPECT_EQ(e.queue, "q");
  EXPECT_EQ(e.id, "a");
  EXPECT_EQ(e.from, MessageState::kPending);
  EXPECT_EQ(e.to, MessageState::kPending);
  EXPECT_EQ(e.version, 1u);
  EXPECT_EQ(e.priority, 42);
  EXPECT_EQ(e.attempts, 0u);
  EXPECT_EQ(e.max_attempts, 7u);
  EXPECT_EQ(e.due_at, 0);
  EXPECT_EQ(e.lease_token, 0u);
  EXPECT_EQ(e.time, Now());
  EXPECT_EQ(e.enqueued_at, Now());
  EXPECT_EQ(e.payload, "the payload");
  EXPECT_EQ(e.packed_metadata, PackMetadata(item.metadata));

  PutDelayed("q", "b", 300, 1);
  RecordedEffect d = OnlyEffect();
  EXPECT_EQ(d.type, EffectType::kMessageEnqueued);
  EXPECT_EQ(d.from, MessageState::kInvisible);
  EXPECT_EQ(d.to, MessageState::kInvisible);
  EXPECT_EQ(d.due_at, Now() + 300);
  EXPECT_EQ(d.max_attempts, 5u);
  EXPECT_GT(d.seq, e.seq) << "enqueue sequence must grow";
}

TEST_F(EffectsTest, BatchEnqueueEmitsOneEffectPerNewMessageInOrder) {
  MakeQueue("q");
  Put("q", "dup");
  Effects();
  std::vector<Result<EnqueueResult>> r =
      engine().Enqueue("q", {Item("a"), Item("dup"), Item(""), Item("b")});
  ASSERT_EQ(r.size(), 4u);
  ASSERT_TRUE(r[2].ok());
  std::vector<RecordedEffect> effects = Effects();
  ASSERT_EQ(effects.size(), 3u);
  EXPECT_EQ(effects[0].id, "a");
  EXPECT_EQ(effects[1].id, r[2]->id);
  EXPECT_EQ(effects[2].id, "b");
  EXPECT_LT(effects[0].seq, effects[1].seq);
  EXPECT_LT(effects[1].seq, effects[2].seq);
}

TEST_F(EffectsTest, DuplicateAndRefusedEnqueuesEmitNothing) {
  QueueSettings s;
  s.max_depth = 1;
  MakeQueue("q", s);
  Put("q", "a");
  Effects();
  Result<EnqueueResult> dup = EnqueueOne("q", Item("a"));
  ASSERT_TRUE(dup.ok());
  EXPECT_TRUE(dup->duplicate);
  EXPECT_FALSE(EnqueueOne("q", Item("a", 5)).ok());
  EXPECT_FALSE(EnqueueOne("q", Item("b")).ok());  // max depth
  EXPECT_FALSE(EnqueueOne("q", Item(std::string(200, 'x'))).ok());
  EXPECT_TRUE(Effects().empty());
}

TEST_F(EffectsTest, DequeueEmitsLeasedForEachMessage) {
  MakeQueue("q");
  Put("q", "a", 1);
  Put("q", "b", 2);
  Effects();
  std::vector<MessageRecord> got = Take("q", 5, {}, 400);
  ASSERT_EQ(got.size(), 2u);
  std::vector<RecordedEffect> effects = Effects();
  ASSERT_EQ(effects.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ExpectChange(effects[i], "q", got[i].id, ChangeCause::kLeased, MessageState::kPending,
                 MessageState::kRunning);
    EXPECT_EQ(effects[i].version, 2u);
    EXPECT_EQ(effects[i].attempts, 1u);
    EXPECT_EQ(effects[i].lease_token, got[i].lease_token);
    EXPECT_EQ(effects[i].due_at, Now() + 400);
  }
  EXPECT_TRUE(Take("q").empty());
  EXPECT_TRUE(Effects().empty());
}

TEST_F(EffectsTest, CompleteEmitsCompletedAndARepeatEmitsNothing) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Effects();
  AdvanceTime(5);
  ASSERT_TRUE(CompleteOne("q", "a", m.lease_token).ok());
  RecordedEffect e = OnlyEffect();
  ExpectChange(e, "q", "a", ChangeCause::kCompleted, MessageState::kRunning,
               MessageState::kCompleted);
  EXPECT_EQ(e.version, 3u);
  EXPECT_EQ(e.lease_token, m.lease_token);
  EXPECT_EQ(e.time, Now());
  ASSERT_TRUE(CompleteOne("q", "a", m.lease_token).ok());
  EXPECT_TRUE(Effects().empty());
}

TEST_F(EffectsTest, RejectedLeaseOperationsEmitNothing) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Effects();
  EXPECT_FALSE(CompleteOne("q", "a", m.lease_token + 1).ok());
  EXPECT_FALSE(FailOne("q", "a", m.lease_token + 1).ok());
  EXPECT_FALSE(engine().Extend("q", "a", m.lease_token + 1, 100).ok());
  EXPECT_FALSE(SetPriority("q", "a", 3).ok());
  EXPECT_FALSE(RedriveOne("q", "a").ok());
  EXPECT_FALSE(CompleteOne("q", "missing", 1).ok());
  EXPECT_TRUE(Effects().empty());
}

TEST_F(EffectsTest, FailEmitsFailedToInvisibleWithErrorAndDueTime) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Effects();
  Result<FailResult> r = FailOne("q", "a", m.lease_token, 250, "went wrong");
  ASSERT_TRUE(r.ok());
  RecordedEffect e = OnlyEffect();
  ExpectChange(e, "q", "a", ChangeCause::kFailed, MessageState::kRunning, MessageState::kInvisible);
  EXPECT_EQ(e.version, 3u);
  EXPECT_EQ(e.due_at, Now() + 250);
  EXPECT_EQ(e.error, "went wrong");
  EXPECT_EQ(e.lease_token, 0u);
}

TEST_F(EffectsTest, FailWithoutDelayEmitsFailedToPending) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Effects();
  ASSERT_TRUE(FailOne("q", "a", m.lease_token, 0).ok());
  ExpectChange(OnlyEffect(), "q", "a", ChangeCause::kFailed, MessageState::kRunning,
               MessageState::kPending);
}

TEST_F(EffectsTest, FailAtMaxAttemptsEmitsFailedToErrored) {
  QueueSettings s;
  s.max_attempts = 1;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Effects();
  ASSERT_TRUE(FailOne("q", "a", m.lease_token, std::nullopt, "fatal").ok());
  RecordedEffect e = OnlyEffect();
  ExpectChange(e, "q", "a", ChangeCause::kFailed, MessageState::kRunning, MessageState::kErrored);
  EXPECT_EQ(e.error, "fatal");
  EXPECT_EQ(e.attempts, 1u);
}

TEST_F(EffectsTest, FailIntoDeadLetterQueueEmitsOneDeadLetteredEffect) {
  QueueSettings dlq;
  dlq.max_attempts = 9;
  MakeQueue("dlq", dlq);
  Put("dlq", "resident");
  QueueSettings s;
  s.max_attempts = 1;
  s.dead_letter_queue = "dlq";
  MakeQueue("q", s);
  const TimeMs enqueued_at = Now();
  Put("q", Item("a", 3, {{"k", "v"}}, "body"));
  MessageRecord m = TakeOne("q");
  std::vector<RecordedEffect> before = Effects();
  uint64_t resident_seq = 0;
  for (const RecordedEffect& e : before) {
    if (e.id == "resident") resident_seq = e.seq;
  }
  AdvanceTime(20);
  Result<FailResult> r = FailOne("q", "a", m.lease_token, std::nullopt, "bad");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->dead_letter_queue, "dlq");
  RecordedEffect e = OnlyEffect();
  EXPECT_EQ(e.type, EffectType::kMessageDeadLettered);
  EXPECT_EQ(e.queue, "q");
  EXPECT_EQ(e.dead_letter_queue, "dlq");
  EXPECT_EQ(e.id, "a");
  EXPECT_EQ(e.to, MessageState::kPending);
  EXPECT_EQ(e.attempts, 0u);
  EXPECT_EQ(e.max_attempts, 9u);
  EXPECT_EQ(e.priority, 3);
  EXPECT_EQ(e.payload, "body");
  EXPECT_EQ(e.time, Now());
  EXPECT_EQ(e.enqueued_at, enqueued_at);
  EXPECT_EQ(e.due_at, 0);
  EXPECT_EQ(e.lease_token, 0u);
  EXPECT_GT(e.seq, resident_seq);
  EXPECT_TRUE(HasPair(e.metadata(), "k", "v"));
  EXPECT_TRUE(HasPair(e.metadata(), kOriginQueueKey, "q"));
  MessageRecord moved = GetMessage("dlq", "a");
  EXPECT_EQ(e.version, moved.version);
  EXPECT_GT(e.version, m.version);
}

TEST_F(EffectsTest, LeaseExpiryIntoDeadLetterQueueEmitsDeadLettered) {
  MakeQueue("dlq");
  QueueSettings s;
  s.max_attempts = 1;
  s.lease_ms = 100;
  s.dead_letter_queue = "dlq";
  MakeQueue("q", s);
  Put("q", "a");
  TakeOne("q");
  Effects();
  AdvanceTime(130);
  RecordedEffect e = OnlyEffect();
  EXPECT_EQ(e.type, EffectType::kMessageDeadLettered);
  EXPECT_EQ(e.queue, "q");
  EXPECT_EQ(e.dead_letter_queue, "dlq");
  EXPECT_EQ(e.time, Now());
  EXPECT_EQ(e.to, MessageState::kPending);
  EXPECT_EQ(e.version, GetMessage("dlq", "a").version);
}

TEST_F(EffectsTest, ExtendEmitsExtendedWithTheNewExpiry) {
  MakeQueue("q");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Effects();
  AdvanceTime(10);
  ASSERT_TRUE(engine().Extend("q", "a", m.lease_token, 5'000).ok());
  RecordedEffect e = OnlyEffect();
  ExpectChange(e, "q", "a", ChangeCause::kExtended, MessageState::kRunning, MessageState::kRunning);
  EXPECT_EQ(e.due_at, Now() + 5'000);
  EXPECT_EQ(e.lease_token, m.lease_token);
  EXPECT_EQ(e.version, 3u);
}

TEST_F(EffectsTest, CancelEmitsCanceledFromEachLiveState) {
  MakeQueue("q");
  PutDelayed("q", "invisible", 100);
  Put("q", "running", 0);
  Put("q", "pending", 1);
  TakeOne("q");
  Effects();
  std::vector<Status> r = engine().Cancel("q", {"invisible", "running", "pending", "pending"});
  ASSERT_EQ(r.size(), 4u);
  std::vector<RecordedEffect> effects = Effects();
  ASSERT_EQ(effects.size(), 3u);  // the repeated cancel changes nothing
  ExpectChange(effects[0], "q", "invisible", ChangeCause::kCanceled, MessageState::kInvisible,
               MessageState::kCanceled);
  ExpectChange(effects[1], "q", "running", ChangeCause::kCanceled, MessageState::kRunning,
               MessageState::kCanceled);
  EXPECT_EQ(effects[1].lease_token, 0u);
  ExpectChange(effects[2], "q", "pending", ChangeCause::kCanceled, MessageState::kPending,
               MessageState::kCanceled);
}

TEST_F(EffectsTest, CancelByFilterEmitsOneCanceledPerMessage) {
  MakeQueue("q");
  Put("q", "a", 0, {{"k", "v"}});
  Put("q", "b", 1, {{"k", "v"}});
  Put("q", "c", 2, {{"k", "w"}});
  Effects();
  Result<uint64_t> r = engine().CancelByFilter("q", {{"k", "v"}});
  ASSERT_TRUE(r.ok());
  std::vector<RecordedEffect> effects = Effects();
  ASSERT_EQ(effects.size(), 2u);
  for (const RecordedEffect& e : effects) {
    EXPECT_EQ(e.cause, ChangeCause::kCanceled);
    EXPECT_EQ(e.to, MessageState::kCanceled);
    EXPECT_NE(e.id, "c");
  }
}

TEST_F(EffectsTest, ReprioritizeEmitsReprioritized) {
  MakeQueue("q");
  Put("q", "a", 5);
  Effects();
  ASSERT_TRUE(SetPriority("q", "a", -3).ok());
  RecordedEffect e = OnlyEffect();
  ExpectChange(e, "q", "a", ChangeCause::kReprioritized, MessageState::kPending,
               MessageState::kPending);
  EXPECT_EQ(e.priority, -3);
  EXPECT_EQ(e.version, 2u);

  ASSERT_TRUE(SetVisibleAt("q", "a", Now() + 60).ok());
  RecordedEffect hidden = OnlyEffect();
  ExpectChange(hidden, "q", "a", ChangeCause::kReprioritized, MessageState::kPending,
               MessageState::kInvisible);
  EXPECT_EQ(hidden.due_at, Now() + 60);
  EXPECT_EQ(hidden.version, 3u);
}

TEST_F(EffectsTest, RedriveEmitsRedriven) {
  QueueSettings s;
  s.max_attempts = 1;
  MakeQueue("q", s);
  Put("q", "a");
  ExhaustAttempts("q", "a");
  Effects();
  ASSERT_TRUE(RedriveOne("q", "a").ok());
  RecordedEffect e = OnlyEffect();
  ExpectChange(e, "q", "a", ChangeCause::kRedriven, MessageState::kErrored, MessageState::kPending);
  EXPECT_EQ(e.attempts, 0u);
  EXPECT_EQ(e.version, 4u);
}

TEST_F(EffectsTest, TimersEmitBecameVisibleAndLeaseExpiredAtAdvancesNow) {
  QueueSettings s;
  s.lease_ms = 100;
  s.max_attempts = 2;
  MakeQueue("q", s);
  PutDelayed("q", "delayed", 50, 1);
  Put("q", "leased", 0);
  ASSERT_EQ(TakeOne("q").id, "leased");
  Effects();
  AdvanceTime(77);
  RecordedEffect visible = OnlyEffect();
  ExpectChange(visible, "q", "delayed", ChangeCause::kBecameVisible, MessageState::kInvisible,
               MessageState::kPending);
  EXPECT_EQ(visible.time, Now());
  EXPECT_EQ(visible.version, 2u);

  AdvanceTime(30);
  RecordedEffect expired = OnlyEffect();
  ExpectChange(expired, "q", "leased", ChangeCause::kLeaseExpired, MessageState::kRunning,
               MessageState::kPending);
  EXPECT_EQ(expired.time, Now());
  EXPECT_EQ(expired.version, 3u);

  ASSERT_EQ(TakeOne("q").id, "leased");
  Effects();
  AdvanceTime(100);
  RecordedEffect errored = OnlyEffect();
  ExpectChange(errored, "q", "leased", ChangeCause::kLeaseExpired, MessageState::kRunning,
               MessageState::kErrored);
}

TEST_F(EffectsTest, DueTimersAreProcessedInDueTimeThenEnqueueOrder) {
  MakeQueue("q");
  PutDelayed("q", "late", 30);
  PutDelayed("q", "tie-first", 20);
  PutDelayed("q", "early", 10);
  PutDelayed("q", "tie-second", 20);
  Effects();
  EXPECT_EQ(AdvanceTime(100), 4u);
  std::vector<RecordedEffect> effects = Effects();
  std::vector<std::string> ids;
  for (const RecordedEffect& e : effects) {
    ids.push_back(e.id);
    EXPECT_EQ(e.cause, ChangeCause::kBecameVisible);
    EXPECT_EQ(e.time, Now());
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"early", "tie-first", "tie-second", "late"}));
}

TEST_F(EffectsTest, RetentionEmitsMessageRemoved) {
  QueueSettings s;
  s.retention_ms = 200;
  MakeQueue("q", s);
  Put("q", "a");
  ASSERT_TRUE(CancelOne("q", "a").ok());
  Effects();
  AdvanceTime(250);
  RecordedEffect e = OnlyEffect();
  EXPECT_EQ(e.type, EffectType::kMessageRemoved);
  EXPECT_EQ(e.queue, "q");
  EXPECT_EQ(e.id, "a");
  EXPECT_EQ(e.time, Now());
}

// ---- Retention 0: removed by the operation that makes the message terminal -----------------

// The terminal change (due_at 0: no timer armed) and then its removal, both at `now`.
void ExpectChangedThenRemoved(const std::vector<RecordedEffect>& effects, std::string_view id,
                              MessageState to, TimeMs now) {
  ASSERT_EQ(effects.size(), 2u) << id;
  EXPECT_EQ(effects[0].type, EffectType::kMessageChanged) << id;
  EXPECT_EQ(effects[0].to, to) << id;
  EXPECT_EQ(effects[0].due_at, 0) << id;
  EXPECT_EQ(effects[0].time, now) << id;
  EXPECT_EQ(effects[1].type, EffectType::kMessageRemoved) << id;
  EXPECT_EQ(effects[1].id, id);
  EXPECT_EQ(effects[1].from, to) << id;
  EXPECT_EQ(effects[1].time, now) << id;
}

TEST_F(EffectsTest, RetentionZeroRemovesACompletedMessageInTheCompleteItself) {
  QueueSettings s;
  s.retention_ms = 0;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord a = TakeOne("q");
  Effects();
  ASSERT_TRUE(CompleteOne("q", "a", a.lease_token).ok());
  ExpectChangedThenRemoved(Effects(), "a", MessageState::kCompleted, Now());
  // Gone without an Advance, and no timer is left for it (nothing wakes the timer thread).
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
  EXPECT_EQ(Counts("q")[MessageState::kCompleted], 0u);
  EXPECT_EQ(engine().NextDueTime(), INT64_MAX);
  EXPECT_EQ(engine().memory_bytes(), 0u);
  // A repeated complete finds nothing (the message and its lease are gone).
  EXPECT_EQ(CompleteOne("q", "a", a.lease_token).code(), Code::kNotFound);
  // The id is free again: the same id is a new message, not a duplicate.
  Result<EnqueueResult> again = EnqueueOne("q", Item("a"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->duplicate);
}

TEST_F(EffectsTest, RetentionZeroRemovesOnCancelFailAndLeaseExpiry) {
  QueueSettings s;
  s.retention_ms = 0;
  s.max_attempts = 1;
  s.lease_ms = 100;
  MakeQueue("q", s);
  Put("q", "canceled");
  Put("q", "failed");
  Put("q", "expired");
  Effects();
  ASSERT_TRUE(CancelOne("q", "canceled").ok());
  ExpectChangedThenRemoved(Effects(), "canceled", MessageState::kCanceled, Now());
  MessageRecord f = TakeOne("q");
  ASSERT_EQ(f.id, "failed");
  Effects();
  Result<FailResult> failed = FailOne("q", "failed", f.lease_token);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->state, MessageState::kErrored);
  ExpectChangedThenRemoved(Effects(), "failed", MessageState::kErrored, Now());
  TakeOne("q");
  Effects();
  EXPECT_EQ(AdvanceTime(100), 1u) << "one transition: the expiry, its removal within it";
  ExpectChangedThenRemoved(Effects(), "expired", MessageState::kErrored, Now());
  for (const char* id : {"canceled", "failed", "expired"})
    EXPECT_EQ(GetCode("q", id), Code::kNotFound);
  EXPECT_EQ(engine().NextDueTime(), INT64_MAX);
}

TEST_F(EffectsTest, RetentionZeroAppliesToMessagesThatBecomeTerminalAfterTheUpdate) {
  QueueSettings s;
  s.retention_ms = 1'000;
  MakeQueue("q", s);
  Put("q", "before");
  Put("q", "after");
  ASSERT_TRUE(CancelOne("q", "before").ok());
  QueueSettingsUpdate update;
  update.retention_ms = 0;
  ASSERT_TRUE(engine().UpdateQueue("q", update).ok());
  ASSERT_TRUE(CancelOne("q", "after").ok());
  EXPECT_EQ(GetCode("q", "after"), Code::kNotFound);
  EXPECT_EQ(StateOf("q", "before"), MessageState::kCanceled) << "kept its own retention";
  AdvanceTime(999);
  EXPECT_EQ(StateOf("q", "before"), MessageState::kCanceled);
  AdvanceTime(1);
  EXPECT_EQ(GetCode("q", "before"), Code::kNotFound);
}

TEST_F(EffectsTest, RetentionZeroCompleteAndNextRemovesTheFirstAndLeasesTheNext) {
  QueueSettings s;
  s.retention_ms = 0;
  MakeQueue("q", s);
  Put("q", "a", 0);
  Put("q", "b", 1);
  MessageRecord a = TakeOne("q");
  Effects();
  DequeueRequest next;
  Engine::CompleteAndNextResult r =
      engine().CompleteAndDequeue("q", {CompleteItem{"a", a.lease_token}}, next);
  ASSERT_EQ(r.completed.size(), 1u);
  EXPECT_TRUE(r.completed[0].ok());
  ASSERT_TRUE(r.next.ok());
  ASSERT_EQ(r.next->size(), 1u);
  EXPECT_EQ((*r.next)[0].id, "b");
  std::vector<RecordedEffect> effects = Effects();
  ASSERT_EQ(effects.size(), 3u);
  ExpectChangedThenRemoved({effects[0], effects[1]}, "a", MessageState::kCompleted, Now());
  EXPECT_EQ(effects[2].cause, ChangeCause::kLeased);
  EXPECT_EQ(GetCode("q", "a"), Code::kNotFound);
}

TEST_F(EffectsTest, EachChangeRaisesTheMessageVersionByOne) {
  QueueSettings s;
  s.lease_ms = 100;
  s.max_attempts = 3;
  s.retention_ms = 100;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  ASSERT_TRUE(engine().Extend("q", "a", m.lease_token, 100).ok());
  ASSERT_TRUE(FailOne("q", "a", m.lease_token, 10).ok());
  AdvanceTime(10);
  ASSERT_TRUE(SetPriority("q", "a", 4).ok());
  TakeOne("q");
  AdvanceTime(100);
  m = TakeOne("q");
  ASSERT_TRUE(FailOne("q", "a", m.lease_token, 0).ok());
  ASSERT_TRUE(RedriveOne("q", "a").ok());
  m = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "a", m.lease_token).ok());

  uint64_t expected = 0;
  TimeMs last_time = 0;
  for (const RecordedEffect& e : Effects()) {
    if (e.type == EffectType::kQueueCreated || e.type == EffectType::kMessageRemoved) continue;
    EXPECT_EQ(e.version, ++expected) << EffectTypeName(e.type) << " " << ChangeCauseName(e.cause);
    EXPECT_GE(e.time, last_time);
    last_time = e.time;
  }
  EXPECT_EQ(expected, 13u);
  EXPECT_EQ(GetMessage("q", "a").version, 13u);
}

// ---- Apply ----------------------------------------------------------------------------------

class ApplyEffectsTest : public EffectsTest {
 protected:
  // A fresh engine to apply effects to, with its own clock and sink.
  struct Replica {
    explicit Replica(TimeMs now, size_t shards = 4) : clock(now) {
      Engine::Options options;
      options.shards = shards;
      options.seed = 99;
      engine = std::make_unique<Engine>(options, &clock, &sink);
    }
    ManualClock clock;
    RecordingSink sink;
    std::unique_ptr<Engine> engine;
  };

  // Records (effects so far, digest) after each step of a scenario.
  void Checkpoint() { checkpoints_.emplace_back(sink_.size(), engine().Digest()); }

  // A history that uses every kind of effect, on several queues.
  void RunScenario() {
    Checkpoint();
    MakeQueue("dlq");
    QueueSettings jobs;
    jobs.lease_ms = 100;
    jobs.max_attempts = 2;
    jobs.retention_ms = 1'000;
    jobs.dead_letter_queue = "dlq";
    MakeQueue("jobs", jobs);
    QueueSettings tenants = ExclusiveSettings("tenant");
    tenants.lease_ms = 100;
    tenants.max_attempts = 1;
    MakeQueue("tenants", tenants);
    Checkpoint();

    Put("jobs", Item("j1", 5, {{"k", "v"}}, "payload one"));
    Put("jobs", Item("j2", 5, {{"k", "w"}}, ""));
    PutDelayed("jobs", "j3", 50, 1);
    Put("jobs", Item("", 9));  // generated id
    Put("auto", "x1");         // auto-created queue
    Put("tenants", "t1", 0, {{"tenant", "a"}});
    Put("tenants", "t2", 1, {{"tenant", "a"}});
    Put("tenants", "t3", 2, {{"tenant", "b"}});
    Checkpoint();

    MessageRecord j1 = TakeOne("jobs");
    MessageRecord t1 = TakeOne("tenants");
    MessageRecord t3 = TakeOne("tenants");
    Checkpoint();
    ASSERT_TRUE(engine().Extend("jobs", "j1", j1.lease_token, 300).ok());
    ASSERT_TRUE(FailOne("tenants", "t1", t1.lease_token, std::nullopt, "t1 failed").ok());
    ASSERT_TRUE(CompleteOne("tenants", "t3", t3.lease_token).ok());
    Checkpoint();

    AdvanceTime(60);  // j3 becomes visible
    Checkpoint();
    MessageRecord j3 = TakeOne("jobs");
    ASSERT_TRUE(FailOne("jobs", "j3", j3.lease_token).ok());  // backoff with jitter
    ASSERT_TRUE(SetPriority("jobs", "j2", 0).ok());
    ASSERT_TRUE(SetVisibleAt("auto", "x1", Now() + 500).ok());
    Checkpoint();

    MessageRecord j2 = TakeOne("jobs");
    AdvanceTime(100);  // j2's lease expires
    Checkpoint();
    j2 = TakeOne("jobs");
    AdvanceTime(100);  // expires again at max attempts: dead-lettered
    Checkpoint();
    ASSERT_EQ(GetCode("dlq", "j2"), Code::kOk);

    ASSERT_TRUE(RedriveOne("tenants", "t1").ok());
    ASSERT_TRUE(CancelOne("tenants", "t2").ok());
    ASSERT_TRUE(CompleteOne("jobs", "j1", j1.lease_token).ok());
    Checkpoint();

    QueueSettingsUpdate update;
    update.lease_ms = 250;
    update.dequeue_paused = true;
    ASSERT_TRUE(engine().UpdateQueue("tenants", update).ok());
    ASSERT_TRUE(engine().PurgeQueue("auto", {MessageState::kInvisible}).ok());
    Checkpoint();

    AdvanceTime(1'000);  // retention removes j1; j3 becomes visible again
    Checkpoint();
    Put("doomed", "d1");
    ASSERT_TRUE(engine().DeleteQueue("doomed").ok());
    Put("jobs", "j9", 3, {{"k", "v"}});
    ASSERT_TRUE(engine().CancelByFilter("jobs", {{"k", "v"}}).ok());
    Checkpoint();
  }

  std::vector<std::pair<size_t, uint64_t>> checkpoints_;
};

TEST_F(ApplyEffectsTest, ApplyingRecordedEffectsOnAFreshEngineGivesTheSameDigest) {
  RunScenario();
  ASSERT_FALSE(HasFatalFailure());
  std::vector<RecordedEffect> effects = sink_.All();
  Replica replica(Now());
  EXPECT_EQ(replica.engine->Digest(), checkpoints_[0].second) << "empty engines differ";
  size_t applied = 0;
  for (const auto& [count, digest] : checkpoints_) {
    for (; applied < count; ++applied) {
      Status s = replica.engine->Apply(effects[applied].View());
      ASSERT_TRUE(s.ok()) << "effect " << applied << " (" << EffectTypeName(effects[applied].type)
                          << " " << effects[applied].queue << "/" << effects[applied].id
                          << "): " << CodeName(s.code()) << " " << s.detail();
    }
    EXPECT_EQ(replica.engine->Digest(), digest) << "after " << count << " effects";
  }
  EXPECT_EQ(replica.engine->Digest(), engine().Digest());
}

TEST_F(ApplyEffectsTest, DigestChangesWhenStateChanges) {
  uint64_t empty = engine().Digest();
  MakeQueue("q");
  uint64_t with_queue = engine().Digest();
  EXPECT_NE(with_queue, empty);
  Put("q", "a", 1);
  uint64_t with_message = engine().Digest();
  EXPECT_NE(with_message, with_queue);
  ASSERT_TRUE(SetPriority("q", "a", 2).ok());
  EXPECT_NE(engine().Digest(), with_message);
  uint64_t before_lease = engine().Digest();
  TakeOne("q");
  EXPECT_NE(engine().Digest(), before_lease);
}

TEST_F(ApplyEffectsTest, RebuiltEngineHasTheSameMessagesAndQueues) {
  RunScenario();
  ASSERT_FALSE(HasFatalFailure());
  Replica replica(Now());
  ApplyAll(sink_.All(), *replica.engine);
  std::vector<QueueInfo> want = engine().ListQueues();
  std::vector<QueueInfo> got = replica.engine->ListQueues();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].settings, want[i].settings) << want[i].name;
    EXPECT_EQ(got[i].counts, want[i].counts) << want[i].name;
    EXPECT_EQ(got[i].memory_bytes, want[i].memory_bytes) << want[i].name;
    for (MessageState state :
         {MessageState::kInvisible, MessageState::kPending, MessageState::kRunning,
          MessageState::kCompleted, MessageState::kCanceled, MessageState::kErrored}) {
      BrowseRequest request;
      request.state = state;
      request.limit = kMaxBrowseLimit;
      Result<BrowsePage> page = engine().Browse(want[i].name, request);
      ASSERT_TRUE(page.ok());
      for (const MessageSummary& summary : page->messages) {
        Result<MessageRecord> a = engine().Get(want[i].name, summary.id);
        Result<MessageRecord> b = replica.engine->Get(want[i].name, summary.id);
        ASSERT_TRUE(a.ok());
        ASSERT_TRUE(b.ok()) << want[i].name << "/" << summary.id << " missing after Apply";
        ExpectSameMessage(*a, *b);
      }
    }
  }
  EXPECT_EQ(replica.engine->memory_bytes(), engine().memory_bytes());
  EXPECT_EQ(replica.engine->NextDueTime(), engine().NextDueTime());
}

TEST_F(ApplyEffectsTest, RebuiltEngineAcceptsTheRecordedLeaseTokens) {
  MakeQueue("q");
  Put("q", "a");
  Put("q", "b");
  MessageRecord a = TakeOne("q");
  MessageRecord b = TakeOne("q");
  Replica replica(Now());
  ApplyAll(sink_.All(), *replica.engine);
  std::vector<Status> done = replica.engine->Complete("q", {CompleteItem{"a", a.lease_token}});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].ok());
  std::vector<Status> stale = replica.engine->Complete("q", {CompleteItem{"b", b.lease_token + 1}});
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_EQ(stale[0].code(), Code::kFailedPrecondition);
  // A duplicate of an applied enqueue is still recognised.
  std::vector<Result<EnqueueResult>> dup = replica.engine->Enqueue("q", {Item("a")});
  ASSERT_EQ(dup.size(), 1u);
  ASSERT_TRUE(dup[0].ok());
  EXPECT_TRUE(dup[0]->duplicate);
}

TEST_F(ApplyEffectsTest, RebuiltEngineRunsTheSameTimers) {
  RunScenario();
  ASSERT_FALSE(HasFatalFailure());
  Replica replica(Now());
  ApplyAll(sink_.All(), *replica.engine);
  ASSERT_EQ(replica.engine->Digest(), engine().Digest());
  for (int step = 0; step < 5; ++step) {
    clock_.Advance(400);
    replica.clock.Advance(400);
    EXPECT_EQ(replica.engine->Advance(replica.clock.NowMs()), engine().Advance(Now()));
    EXPECT_EQ(replica.engine->Digest(), engine().Digest()) << "step " << step;
  }
}

TEST_F(ApplyEffectsTest, ApplyOnADifferentShardCountGivesTheSameDigest) {
  RunScenario();
  ASSERT_FALSE(HasFatalFailure());
  for (size_t shards : {1u, 3u, 16u}) {
    Replica replica(Now(), shards);
    ApplyAll(sink_.All(), *replica.engine);
    EXPECT_EQ(replica.engine->Digest(), engine().Digest()) << shards << " shards";
  }
}

TEST_F(ApplyEffectsTest, ApplyReportsNothingToTheSink) {
  RunScenario();
  ASSERT_FALSE(HasFatalFailure());
  Replica replica(Now());
  ApplyAll(sink_.All(), *replica.engine);
  EXPECT_EQ(replica.sink.size(), 0u);
}

// Eight source/dead-letter pairs: with four shards, the chance that every pair shares a shard is
// (1/4)^8, so dead-letter moves across shards are certainly among them.
TEST_F(ApplyEffectsTest, DeadLetterMovesBetweenQueuesOnDifferentShardsApplyToTheSameState) {
  for (int i = 0; i < 8; ++i) {
    std::string dlq = "dead-letters-" + std::to_string(i);
    std::string source = "orders." + std::to_string(i * 7919);
    QueueSettings d;
    d.max_attempts = 3;
    MakeQueue(dlq, d);
    QueueSettings s;
    s.max_attempts = 1;
    s.lease_ms = 100;
    s.dead_letter_queue = dlq;
    MakeQueue(source, s);
    Put(source, Item("m" + std::to_string(i), i, {{"n", std::to_string(i)}}, "payload"));
    Put(dlq, "resident");
    MessageRecord m = TakeOne(source);
    if (i % 2 == 0) {
      Result<FailResult> r = FailOne(source, m.id, m.lease_token);
      ASSERT_TRUE(r.ok());
      ASSERT_EQ(r->dead_letter_queue, dlq);
    } else {
      AdvanceTime(100);
    }
    ASSERT_EQ(StateOf(dlq, m.id), MessageState::kPending);
    ASSERT_EQ(GetCode(source, m.id), Code::kNotFound);
  }
  std::vector<RecordedEffect> effects = sink_.All();
  size_t moves = 0;
  for (const RecordedEffect& e : effects) moves += e.type == EffectType::kMessageDeadLettered;
  EXPECT_EQ(moves, 8u);

  Replica replica(Now());
  ApplyAll(effects, *replica.engine);
  EXPECT_EQ(replica.engine->Digest(), engine().Digest());
  for (int i = 0; i < 8; ++i) {
    std::string dlq = "dead-letters-" + std::to_string(i);
    std::string id = "m" + std::to_string(i);
    Result<MessageRecord> got = replica.engine->Get(dlq, id);
    ASSERT_TRUE(got.ok()) << dlq << "/" << id;
    ExpectSameMessage(GetMessage(dlq, id), *got);
    EXPECT_EQ(replica.engine->Get("orders." + std::to_string(i * 7919), id).status().code(),
              Code::kNotFound);
  }
  // The moved messages come out of the dead-letter queues after the residents on both engines.
  for (int i = 0; i < 8; ++i) {
    std::string dlq = "dead-letters-" + std::to_string(i);
    DequeueRequest request;
    request.max = 10;
    Result<std::vector<MessageRecord>> a = engine().Dequeue(dlq, request);
    Result<std::vector<MessageRecord>> b = replica.engine->Dequeue(dlq, request);
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(IdsOf(*a), IdsOf(*b));
  }
}

TEST_F(ApplyEffectsTest, AppliedDeadLetterMoveKeepsTheErrorOfTheFailThatCausedIt) {
  MakeQueueDeadLetteringAtFirstFailure("q", "dlq");
  Put("q", "a");
  MessageRecord m = TakeOne("q");
  Result<FailResult> r = FailOne("q", "a", m.lease_token, std::nullopt, "the reason");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->dead_letter_queue, "dlq");
  ASSERT_EQ(GetMessage("dlq", "a").last_error, "the reason");
  Replica replica(Now());
  ApplyAll(sink_.All(), *replica.engine);
  Result<MessageRecord> applied = replica.engine->Get("dlq", "a");
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->last_error, "the reason");
  EXPECT_EQ(replica.engine->Digest(), engine().Digest());
}

TEST_F(ApplyEffectsTest, RetentionZeroRemovalsReplayToTheSameState) {
  QueueSettings s;
  s.retention_ms = 0;
  s.max_attempts = 1;
  s.lease_ms = 100;
  MakeQueue("q", s);
  for (const char* id : {"a", "b", "c", "d", "keep"}) Put("q", id);
  MessageRecord a = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "a", a.lease_token).ok());
  MessageRecord b = TakeOne("q");
  ASSERT_TRUE(FailOne("q", "b", b.lease_token).ok());
  ASSERT_TRUE(CancelOne("q", "c").ok());
  TakeOne("q");  // d: its lease expires past max_attempts
  AdvanceTime(100);
  ASSERT_EQ(GetCode("q", "d"), Code::kNotFound);
  Replica replica(Now());
  ApplyAll(sink_.All(), *replica.engine);
  EXPECT_EQ(replica.engine->Digest(), engine().Digest());
  EXPECT_EQ(replica.engine->NextDueTime(), engine().NextDueTime());
  EXPECT_EQ(replica.engine->memory_bytes(), engine().memory_bytes());
}

TEST_F(ApplyEffectsTest, ARetentionZeroChangeWithoutItsRemovalIsRemovedByTheNextAdvance) {
  // A log cut between the two records (a torn tail): the message is terminal with its timer
  // due at 0, so the recovered node's first Advance removes it, as the primary did.
  QueueSettings s;
  s.retention_ms = 0;
  MakeQueue("q", s);
  Put("q", "a");
  MessageRecord a = TakeOne("q");
  ASSERT_TRUE(CompleteOne("q", "a", a.lease_token).ok());
  std::vector<RecordedEffect> history = sink_.All();
  ASSERT_EQ(history.back().type, EffectType::kMessageRemoved);
  history.pop_back();
  Replica replica(Now());
  ApplyAll(history, *replica.engine);
  ASSERT_TRUE(replica.engine->Get("q", "a").ok());
  EXPECT_EQ(replica.engine->NextDueTime(), 0);
  EXPECT_EQ(replica.engine->Advance(Now()), 1u);
  EXPECT_EQ(replica.engine->Get("q", "a").status().code(), Code::kNotFound);
  EXPECT_EQ(replica.engine->Digest(), engine().Digest());
}

TEST_F(ApplyEffectsTest, ApplyOfAnEffectThatDoesNotFitIsInternalAndChangesNothing) {
  MakeQueue("q");
  Put("q", "a");
  std::vector<RecordedEffect> history = sink_.All();
  Replica replica(Now());
  ApplyAll(history, *replica.engine);
  const uint64_t digest = replica.engine->Digest();

  // The same enqueue again: the id is taken.
  EXPECT_EQ(replica.engine->Apply(history.back().View()).code(), Code::kInternal);
  // The queue exists already, with other settings.
  RecordedEffect recreate = history.front();
  ASSERT_TRUE(recreate.settings.has_value());
  recreate.settings->lease_ms += 1;
  EXPECT_EQ(replica.engine->Apply(recreate.View()).code(), Code::kInternal);
  // A change to a message that does not exist.
  RecordedEffect ghost = history.back();
  ghost.type = EffectType::kMessageChanged;
  ghost.cause = ChangeCause::kLeased;
  ghost.id = "ghost";
  ghost.from = MessageState::kPending;
  ghost.to = MessageState::kRunning;
  ghost.version = 2;
  ghost.lease_token = 7;
  ghost.due_at = Now() + 100;
  EXPECT_EQ(replica.engine->Apply(ghost.View()).code(), Code::kInternal);
  // A message effect for a queue that does not exist.
  RecordedEffect elsewhere = history.back();
  elsewhere.queue = "missing";
  EXPECT_EQ(replica.engine->Apply(elsewhere.View()).code(), Code::kInternal);
  // Removal of a message that does not exist.
  RecordedEffect removed = history.back();
  removed.type = EffectType::kMessageRemoved;
  removed.id = "ghost";
  EXPECT_EQ(replica.engine->Apply(removed.View()).code(), Code::kInternal);
  // Deleting a queue that does not exist.
  RecordedEffect deleted = history.front();
  deleted.type = EffectType::kQueueDeleted;
  deleted.queue = "missing";
  deleted.settings.reset();
  EXPECT_EQ(replica.engine->Apply(deleted.View()).code(), Code::kInternal);

  EXPECT_EQ(replica.engine->Digest(), digest);
  EXPECT_EQ(replica.engine->Digest(), engine().Digest());
}

}  // namespace
}  // namespace sundial::engine_test
