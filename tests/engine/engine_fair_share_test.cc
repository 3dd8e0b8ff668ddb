// Fair share (docs/semantics.md, "Fair share"): with fairness weighted a gated queue's
// unfiltered dequeues serve its flow-key values by weighted deficit round robin among those with
// a dequeueable message (earliest deadline first within a value), work-conserving; with one value
// it is plain EDF; a message overdue by more than overdue_first_ms jumps the rotation; a filter
// dequeue stays EDF among its matches; limits (concurrency, rates) still apply.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tests/engine/engine_fixture.h"

namespace sundial::engine_test {
namespace {

QueueSettings Fair(int64_t overdue_first_ms = 0) {
  QueueSettings s;
  s.flow_key = "tenant";
  s.fairness = Fairness::kWeighted;
  s.overdue_first_ms = overdue_first_ms;
  s.lease_ms = 10'000;
  return s;
}

class FairShareTest : public EngineTest {
 protected:
  void SetUp() override { MakeQueue("f", Fair()); }
  void PutMany(const std::string& queue, const std::string& tenant, int n, int64_t priority = 0) {
    for (int i = 0; i < n; ++i) {
      Put(queue, tenant + std::to_string(i), priority + i, {{"tenant", tenant}});
    }
  }
  void SetWeight(const std::string& queue, const std::string& tenant, uint32_t weight) {
    KeyLimits limits;
    limits.set = KeyLimits::kWeight;
    limits.weight = weight;
    ASSERT_TRUE(engine().SetKeyLimits(queue, tenant, limits).ok());
  }
  // The tenant of each message the next `n` single dequeues return, completing each.
  std::vector<std::string> ServeOneByOne(const std::string& queue, int n) {
    std::vector<std::string> tenants;
    for (int i = 0; i < n; ++i) {
      std::vector<MessageRecord> got = Take(queue, 1);
      if (got.empty()) break;
      EXPECT_TRUE(CompleteOne(queue, got[0].id, got[0].lease_token).ok());
      tenants.push_back(got[0].id.substr(0, got[0].id.find_first_of("0123456789")));
    }
    return tenants;
  }
};

TEST_F(FairShareTest, SettingsAreValidated) {
  QueueSettings s = Fair();
  s.flow_key = "";
  EXPECT_EQ(engine().CreateQueue("bad1", s).status().code(), Code::kInvalidArgument);
  s = Fair(-1);
  EXPECT_EQ(engine().CreateQueue("bad2", s).status().code(), Code::kInvalidArgument);
  QueueSettings plain;
  plain.flow_key = "tenant";
  plain.overdue_first_ms = 1000;  // needs fairness weighted
  EXPECT_EQ(engine().CreateQueue("bad3", plain).status().code(), Code::kInvalidArgument);
  QueueSettings x = ExclusiveSettings("tenant");
  x.fairness = Fairness::kWeighted;
  EXPECT_TRUE(engine().CreateQueue("x", x).ok());
}

TEST_F(FairShareTest, KeysTakeTurnsWhereEarliestDeadlineFirstWouldServeOneFirst) {
  PutMany("f", "big", 6, 0);  // the earliest deadlines: EDF would serve all six first
  PutMany("f", "small", 3, 100);
  PutMany("f", "tiny", 2, 200);
  EXPECT_EQ(ServeOneByOne("f", 11),
            (std::vector<std::string>{"big", "small", "tiny", "big", "small", "tiny", "big",
                                      "small", "big", "big", "big"}));
  // Within a value: its own deadline order.
  PutMany("f", "solo", 3, 0);
  EXPECT_EQ(TakeIds("f", 3), (std::vector<std::string>{"solo0", "solo1", "solo2"}));
}

TEST_F(FairShareTest, WeightsGiveTheirShareAtSaturation) {
  PutMany("f", "heavy", 3000);
  PutMany("f", "light", 3000);
  SetWeight("f", "heavy", 2);
  std::map<std::string, int> served;
  for (const std::string& t : ServeOneByOne("f", 3000)) ++served[t];
  EXPECT_EQ(served["heavy"], 2000);
  EXPECT_EQ(served["light"], 1000);
  // A batch dequeue takes the same turns.
  std::map<char, int> batch;
  for (const std::string& id : TakeIds("f", 300)) ++batch[id[0]];
  EXPECT_EQ(batch['h'], 200);
  EXPECT_EQ(batch['l'], 100);
}

TEST_F(FairShareTest, WorkConservingAndEqualToEdfWithOneKey) {
  QueueSettings edf;
  edf.flow_key = "tenant";
  MakeQueue("e", edf);
  for (const char* q : {"f", "e"}) {
    Put(q, "a3", 3, {{"tenant", "a"}});
    Put(q, "a1", 1, {{"tenant", "a"}});
    Put(q, "a2", 2, {{"tenant", "a"}});
  }
  EXPECT_EQ(TakeIds("f", 10), TakeIds("e", 10));
  // A held key leaves its turn to the others; nothing waits while something is dequeueable.
  QueueSettings limited = Fair();
  limited.key_concurrency = 1;
  MakeQueue("l", limited);
  PutMany("l", "a", 3);
  PutMany("l", "b", 3);
  EXPECT_EQ(TakeIds("l", 10), (std::vector<std::string>{"a0", "b0"}));
}

TEST_F(FairShareTest, AnOverdueMessageJumpsTheRotation) {
  MakeQueue("o", Fair(/*overdue_first_ms=*/1000));
  const int64_t now = Now();
  Put("o", "a0", now + 10, {{"tenant", "a"}});
  Put("o", "b0", now + 20, {{"tenant", "b"}});
  Put("o", "b1", now - 5000, {{"tenant", "b"}});  // overdue by 5 s
  Put("o", "a1", now - 500, {{"tenant", "a"}});   // overdue, but by less than 1 s
  EXPECT_EQ(TakeIds("o", 1), (std::vector<std::string>{"b1"}));
  // Then the turns, EDF within each key: a (a1 before a0), then b.
  EXPECT_EQ(TakeIds("o", 3), (std::vector<std::string>{"a1", "b0", "a0"}));
}

TEST_F(FairShareTest, AFilterDequeueIsEarliestDeadlineFirstAmongItsMatches) {
  for (int i = 0; i < 3; ++i) {
    Put("f", "a" + std::to_string(i), i, {{"tenant", "a"}, {"color", "red"}});
    Put("f", "b" + std::to_string(i), 10 + i, {{"tenant", "b"}, {"color", "red"}});
  }
  EXPECT_EQ(TakeIds("f", 2, {{"color", "red"}}), (std::vector<std::string>{"a0", "a1"}));
  EXPECT_EQ(TakeIds("f", 2), (std::vector<std::string>{"a2", "b0"}));
}

// Found while writing the model's fair-share check (which judges each dequeue alone, so the
// rotation across dequeues is pinned here): a filtered dequeue that took the front value's message
// spent one of its turn (semantics.md: a filter dequeue spends no value's turn), as did an
// overdue pick of it.
TEST_F(FairShareTest, NeitherAFilterNorAnOverdueDequeueSpendsTheFrontValuesTurn) {
  SetWeight("f", "a", 2);
  PutMany("f", "a", 5);
  PutMany("f", "b", 5);
  EXPECT_EQ(TakeIds("f", 1), (std::vector<std::string>{"a0"}));  // a's turn: one of two left
  EXPECT_EQ(TakeIds("f", 1, {{"tenant", "a"}}), (std::vector<std::string>{"a1"}));
  // a's last one, b's turn, a's next turn (spent by the filter, b would have come first).
  EXPECT_EQ(TakeIds("f", 3), (std::vector<std::string>{"a2", "b0", "a3"}));

  MakeQueue("o", Fair(/*overdue_first_ms=*/1000));
  SetWeight("o", "a", 2);
  const int64_t now = Now();
  Put("o", "a0", now, {{"tenant", "a"}});
  Put("o", "b0", now + 1, {{"tenant", "b"}});
  Put("o", "a1", now + 2, {{"tenant", "a"}});
  EXPECT_EQ(TakeIds("o", 1), (std::vector<std::string>{"a0"}));  // a's turn: one left
  Put("o", "a9", now - 5000, {{"tenant", "a"}});                 // overdue: out of turn
  EXPECT_EQ(TakeIds("o", 3), (std::vector<std::string>{"a9", "a1", "b0"}));
}

// A turn begun under a larger weight ends at the new one (it ran on before, which broke the
// model's bound of two turns' lead per dequeue for a value whose weight was lowered).
TEST_F(FairShareTest, ALoweredWeightCutsTheTurnInProgress) {
  SetWeight("f", "a", 3);
  PutMany("f", "a", 5);
  PutMany("f", "b", 5);
  EXPECT_EQ(TakeIds("f", 1), (std::vector<std::string>{"a0"}));    // two of three left
  ASSERT_TRUE(engine().SetKeyLimits("f", "a", KeyLimits{}).ok());  // weight 1 again
  EXPECT_EQ(TakeIds("f", 3), (std::vector<std::string>{"a1", "b0", "a2"}));
}

TEST_F(FairShareTest, ExplainNamesTheValueWhoseTurnItIsAndRestartsKeepTheSettings) {
  PutMany("f", "a", 2);
  PutMany("f", "b", 2, 10);
  Result<Explanation> x = engine().Explain("f", "b0");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->reason, ExplainReason::kFairShare);
  EXPECT_EQ(x->exclusivity_value, "a");
  EXPECT_EQ(engine().Explain("f", "a0")->reason, ExplainReason::kDequeueable);
  const uint64_t digest = engine().Digest();
  EXPECT_EQ(Replayed()->Digest(), digest);
  std::unique_ptr<Engine> loaded = Exported();
  EXPECT_EQ(loaded->Digest(), digest);
  EXPECT_EQ(loaded->GetQueue("f")->settings.fairness, Fairness::kWeighted);
  // Off again: plain EDF (a's two first).
  QueueSettingsUpdate u;
  u.fairness = Fairness::kNone;
  ASSERT_TRUE(engine().UpdateQueue("f", u).ok());
  EXPECT_EQ(TakeIds("f", 2), (std::vector<std::string>{"a0", "a1"}));
}

TEST_F(FairShareTest, DigestOfAQueueWithoutFairnessIsUnchanged) {
  QueueSettings s;
  s.flow_key = "tenant";
  MakeQueue("p", s);
  const uint64_t before = engine().Digest();
  QueueSettingsUpdate u;
  u.fairness = Fairness::kWeighted;
  ASSERT_TRUE(engine().UpdateQueue("p", u).ok());
  EXPECT_NE(engine().Digest(), before);
  u.fairness = Fairness::kNone;
  ASSERT_TRUE(engine().UpdateQueue("p", u).ok());
  EXPECT_EQ(engine().Digest(), before);
}

}  // namespace
}  // namespace sundial::engine_test
