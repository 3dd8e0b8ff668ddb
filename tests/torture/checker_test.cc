// The torture's checker on hand-written histories: each kind of violation it exists to find,
// and the legitimate outcomes it must accept.
#include "tests/torture/checker.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace sundial::torture {
namespace {

Report CheckText(const std::string& text) {
  History h;
  std::string error;
  EXPECT_TRUE(ParseHistory(text, &h, &error)) << error;
  return Check(h);
}

// Times are in ns; a round's inventory is read at 1000 * round.
TEST(TortureChecker, AcknowledgedEnqueuesThatSurviveAreClean) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 enqueue q none m2 6\n"  // unanswered: may be absent
      "kill 50 0 random\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 pending 5\n"
      "inventory-end 1000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
  EXPECT_EQ(r.acked_enqueues, 1u);
  EXPECT_EQ(r.message_checks, 2u);
}

TEST(TortureChecker, LostAcknowledgedEnqueueIsReported) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "inventory-queue 1000 1 q\n"
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.lost, 1u);
  EXPECT_EQ(r.Count("lost"), 1u);
}

TEST(TortureChecker, AnInventoryCutShortByAKillIsIgnored) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "inventory-queue 1000 1 q\n");  // no inventory-end: the server died while it was read
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
  EXPECT_EQ(r.inventories, 0u);
}

TEST(TortureChecker, AcknowledgedCompleteThatReappearsIsReported) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 dequeue q ok - 1 m1:77\n"
      "op 50 60 c0 complete q ok m1 77\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 running 5\n"
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("not_stuck"), 1u) << r.Summary();
}

TEST(TortureChecker, AcknowledgedCancelThatReappearsIsReported) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c1 cancel q ok m1 0\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 pending 5\n"
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("not_stuck"), 1u) << r.Summary();
}

TEST(TortureChecker, AcknowledgedLeaseBackToPendingIsReported) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 dequeue q ok - 1 m1:77\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 pending 5\n"
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("state"), 1u) << r.Summary();
}

TEST(TortureChecker, AnUnansweredDequeueMayHaveLeasedAnyMessageOfItsQueue) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c1 dequeue q none - 0\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 running 5\n"
      "inventory-end 1000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, DoubleLeaseIsReported) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 dequeue q ok - 1 m1:77\n"
      "op 50 60 c1 dequeue q ok - 1 m1:78\n");
  EXPECT_EQ(r.Count("double_lease"), 1u) << r.Summary();
}

TEST(TortureChecker, ALeaseEndedByFailOrCancelMayBeGrantedAgain) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 dequeue q ok - 1 m1:77\n"
      "op 50 60 c0 fail q none m1 77\n"  // unanswered, but it may have ended the lease
      "op 70 80 c1 dequeue q ok - 1 m1:78\n"
      "op 90 95 c2 cancel q ok m1 0\n"
      "op 96 99 c1 dequeue q ok - 1 m1:79\n");
  // The third lease came after an acknowledged cancel: a canceled message is never leased,
  // but that is the server's state machine, which the inventory checks; the lease rule only
  // asks that something could have ended the previous lease.
  EXPECT_EQ(r.Count("double_lease"), 0u) << r.Summary();
}

TEST(TortureChecker, ALeaseLeftToExpireMayEndAtAnyMoment) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 dequeue-short q ok - 1 m1:77\n"
      "op 50 60 c1 dequeue q ok - 1 m1:78\n"
      "op 70 80 c0 enqueue q ok m2 5\n"
      "op 90 95 c0 dequeue-short q ok - 1 m2:79\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 running 5\n"
      "inventory 1000 1 q m2 pending 5\n"  // expired
      "inventory-end 1000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, ConcurrentDequeuesThatBothHoldALeaseAreReported) {
  // The second was sent before the first was answered: whichever the server granted second, it
  // granted while the other lease held (nothing could end it, and it does not expire).
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 50 c0 dequeue q ok - 1 m1:77\n"
      "op 40 60 c1 dequeue q ok - 1 m1:78\n");
  EXPECT_EQ(r.Count("double_lease"), 1u) << r.Summary();
}

// Leases of the failover torture: dequeue/MS, MS ms from the grant. 1 ms = 1000000 ns.
TEST(TortureChecker, ALeaseOfMsIsHeldUntilItRunsOut) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 1000000000 1001000000 c0 dequeue/1000 q ok - 1 m1:77\n"
      // 500 ms later: the first lease still held
      "op 1500000000 1501000000 c1 dequeue/1000 q ok - 1 m1:78\n");
  EXPECT_EQ(r.Count("double_lease"), 1u) << r.Summary();
}

TEST(TortureChecker, ALeaseOfMsMayBeGrantedAgainOnceItMayHaveRunOut) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 1000000000 1001000000 c0 dequeue/1000 q ok - 1 m1:77\n"
      // answered 950 ms after the first was sent: within the margin of its end
      "op 1940000000 1950000000 c1 dequeue/1000 q ok - 1 m1:78\n"
      "inventory-queue 3000000000 1 q\n"
      "inventory 3000000000 1 q m1 pending 5\n"  // the second ran out too
      "inventory-end 3000000000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, OneDequeueLeasingTwoMessagesOfOneValueIsReported) {
  const Report r = CheckText(
      "meta x m1 v\n"
      "meta x m2 v\n"
      "op 10 20 c0 enqueue x ok m1 5\n"
      "op 21 22 c0 enqueue x ok m2 6\n"
      "op 30 40 c0 dequeue/5000 x ok - 2 m1:77 m2:78\n");
  EXPECT_EQ(r.Count("key_concurrency"), 1u) << r.Summary();
}

TEST(TortureChecker, ACompleteWithATokenLeasedAgainSinceIsReported) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 1000000000 1001000000 c0 dequeue/500 q ok - 1 m1:77\n"
      "op 2000000000 2001000000 c1 dequeue/500 q ok - 1 m1:78\n"
      "op 2100000000 2101000000 c0 complete q ok m1 77\n");
  EXPECT_EQ(r.Count("stale_token"), 2u) << r.Summary();  // leased again, and past its time
}

TEST(TortureChecker, ACompleteAfterTheLeaseRanOutIsReported) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 1000000000 1001000000 c0 dequeue/500 q ok - 1 m1:77\n"
      "op 1700000000 1701000000 c0 complete q ok m1 77\n");
  EXPECT_EQ(r.Count("stale_token"), 1u) << r.Summary();
}

TEST(TortureChecker, ARepeatedCompleteAfterTheLeaseRanOutIsClean) {
  // The first may have completed it in time (its answer was lost): a repeat succeeds.
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 1000000000 1001000000 c0 dequeue/500 q ok - 1 m1:77\n"
      "op 1100000000 1200000000 c0 complete q none m1 77\n"
      "op 1700000000 1701000000 c0 complete q ok m1 77\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, AMessageLeasedAfterAnAcknowledgedCompleteIsReported) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 dequeue/5000 q ok - 1 m1:77\n"
      "op 50 60 c0 complete q ok m1 77\n"
      "op 70 80 c1 dequeue/5000 q ok - 1 m1:78\n");
  EXPECT_EQ(r.Count("redelivered"), 1u) << r.Summary();
}

TEST(TortureChecker, ALeaseOfMsRoundTripsThroughItsLine) {
  History h;
  std::string error;
  ASSERT_TRUE(ParseHistory("op 1 2 c0 dequeue/3000 q ok - 1 m1:7\n", &h, &error)) << error;
  ASSERT_EQ(h.ops.size(), 1u);
  EXPECT_EQ(h.ops[0].kind, "dequeue");
  EXPECT_EQ(h.ops[0].lease_ms, 3000);
  EXPECT_EQ(FormatOp(h.ops[0]), "op 1 2 c0 dequeue/3000 q ok - 1 m1:7");
  EXPECT_FALSE(ParseHistory("op 1 2 c0 dequeue/0 q ok - 0\n", &h, &error));
}

TEST(TortureChecker, TwoLeasesOfOneExclusivityValueAreReported) {
  const Report r = CheckText(
      "meta x m1 v\n"
      "meta x m2 v\n"
      "op 10 20 c0 enqueue x ok m1 5\n"
      "op 21 22 c0 enqueue x ok m2 6\n"
      "op 30 40 c0 dequeue x ok - 1 m1:77\n"
      "op 50 60 c1 dequeue x ok - 1 m2:78\n");
  EXPECT_EQ(r.Count("key_concurrency"), 1u) << r.Summary();
}

TEST(TortureChecker, AValueReleasedByCompleteMayBeLeasedAgain) {
  const Report r = CheckText(
      "meta x m1 v\n"
      "meta x m2 v\n"
      "op 10 20 c0 enqueue x ok m1 5\n"
      "op 21 22 c0 enqueue x ok m2 6\n"
      "op 30 40 c0 dequeue x ok - 1 m1:77\n"
      "op 45 48 c0 complete x ok m1 77\n"
      "op 50 60 c1 dequeue x ok - 1 m2:78\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, TwoRunningMessagesOfOneValueInAnInventoryAreReported) {
  const Report r = CheckText(
      "meta x m1 v\n"
      "meta x m2 v\n"
      "op 10 20 c0 enqueue x ok m1 5\n"
      "op 21 22 c0 enqueue x ok m2 6\n"
      "op 30 40 c0 dequeue x none - 0\n"
      "op 31 41 c1 dequeue x none - 0\n"
      "inventory-queue 1000 1 x\n"
      "inventory 1000 1 x m1 running 5\n"
      "inventory 1000 1 x m2 running 6\n"
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("key_concurrency"), 1u) << r.Summary();
}

TEST(TortureChecker, PhantomMessageIsReported) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 pending 5\n"
      "inventory 1000 1 q ghost pending 0\n"
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("phantom"), 1u) << r.Summary();
}

TEST(TortureChecker, PhantomStatesAndPrioritiesAreReported) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 10 20 c0 enqueue q ok m2 5\n"
      "op 10 20 c0 enqueue q ok m3 5\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 completed 5\n"  // nobody sent a complete
      "inventory 1000 1 q m2 errored 5\n"    // attempts are never spent in the torture
      "inventory 1000 1 q m3 pending 9\n"    // nobody asked for priority 9
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("phantom"), 3u) << r.Summary();
}

TEST(TortureChecker, AnAcknowledgedReprioritizeMustHold) {
  const Report bad = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 reprioritize q ok m1 9\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 pending 5\n"
      "inventory-end 1000 1\n");
  EXPECT_EQ(bad.Count("state"), 1u) << bad.Summary();
  const Report unsure = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 reprioritize q none m1 9\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 pending 5\n"
      "inventory-end 1000 1\n");
  EXPECT_TRUE(unsure.violations.empty()) << unsure.Summary();
}

TEST(TortureChecker, FailedRequestsChangedNothing) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 complete q FAILED_PRECONDITION m1 3\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 completed 5\n"
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("phantom"), 1u) << r.Summary();
}

TEST(TortureChecker, AnAcknowledgedResultReadBackIsClean) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 dequeue q ok - 1 m1:77\n"
      "op 50 60 c0 complete q ok m1 77\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 completed 5 res:m1:77\n"
      "inventory-end 1000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
  EXPECT_EQ(r.result_checks, 1u);
}

TEST(TortureChecker, AnAcknowledgedResultLostOrChangedIsReported) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 11 21 c0 enqueue q ok m2 5\n"
      "op 30 40 c0 dequeue q ok - 2 m1:77 m2:78\n"
      "op 50 60 c0 complete q ok m1 77\n"
      "op 51 61 c0 complete q ok m2 78\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 completed 5 -\n"          // the result is gone
      "inventory 1000 1 q m2 completed 5 res:m2:99\n"  // another lease's
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("result"), 2u) << r.Summary();
}

TEST(TortureChecker, AnUnansweredCompleteMayHaveStoredItsResult) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 dequeue q ok - 1 m1:77\n"
      "op 50 60 c0 complete q none m1 77\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 completed 5 res:m1:77\n"
      "inventory-end 1000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

// ---- Dependencies (docs/semantics.md, "Dependencies") --------------------------------------

TEST(TortureChecker, ADependentReleasedAfterItsDependencyCompletedIsClean) {
  const Report r = CheckText(
      "deps q d1 cancel q/m1\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 21 22 c0 enqueue q ok d1 6\n"
      "op 30 40 c0 dequeue q ok - 1 m1:77\n"
      "op 50 60 c0 complete q ok m1 77\n"
      "op 70 80 c1 dequeue q ok - 1 d1:78\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 completed 5 res:m1:77\n"
      "inventory 1000 1 q d1 running 6\n"
      "inventory-end 1000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
  EXPECT_EQ(r.dependency_checks, 2u);
}

TEST(TortureChecker, ADependentLeasedBeforeItsDependencyCompletedIsReported) {
  const Report r = CheckText(
      "deps q d1 cancel q/m1\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 21 22 c0 enqueue q ok d1 6\n"
      "op 30 40 c1 dequeue q ok - 1 d1:78\n"  // m1 was never completed
      "op 50 60 c0 dequeue q ok - 1 m1:77\n"
      "op 70 80 c0 complete q ok m1 77\n");
  EXPECT_EQ(r.Count("dependency"), 1u) << r.Summary();
}

TEST(TortureChecker, ADependentPendingBeforeItsDependencyCompletedIsReported) {
  const Report r = CheckText(
      "deps q d1 cancel q/m1 q/m2\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 11 21 c0 enqueue q ok m2 5\n"
      "op 22 23 c0 enqueue q ok d1 6\n"
      "op 30 40 c0 dequeue q ok - 1 m1:77\n"
      "op 50 60 c0 complete q ok m1 77\n"  // m2 is still pending
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 completed 5 res:m1:77\n"
      "inventory 1000 1 q m2 pending 5\n"
      "inventory 1000 1 q d1 pending 6\n"
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("dependency"), 1u) << r.Summary();
}

TEST(TortureChecker, ADependentStillWaitingAfterItsDependenciesCompletedIsReported) {
  const Report r = CheckText(
      "deps q d1 cancel q/m1\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 21 22 c0 enqueue q ok d1 6\n"
      "op 30 40 c0 dequeue q ok - 1 m1:77\n"
      "op 50 60 c0 complete q ok m1 77\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 completed 5 res:m1:77\n"
      "inventory 1000 1 q d1 waiting 6\n"  // the release was lost
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("dependency"), 1u) << r.Summary();
}

TEST(TortureChecker, ADependentWaitingOnAnUnfinishedDependencyIsClean) {
  const Report r = CheckText(
      "deps q d1 cancel q/m1\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 21 22 c0 enqueue q ok d1 6\n"
      "op 30 40 c0 dequeue q ok - 1 m1:77\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 running 5\n"
      "inventory 1000 1 q d1 waiting 6\n"
      "inventory-end 1000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, ADependencyCanceledAppliesTheDependentsPolicy) {
  // cancel: canceled; error: errored; release: runs anyway. Each legitimate.
  const Report clean = CheckText(
      "deps q d1 cancel q/m1\n"
      "deps q d2 error q/m1\n"
      "deps q d3 release q/m1\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 21 22 c0 enqueue q ok d1 6\n"
      "op 23 24 c0 enqueue q ok d2 6\n"
      "op 25 26 c0 enqueue q ok d3 6\n"
      "op 30 40 c1 cancel q ok m1 0\n"
      "op 50 60 c0 dequeue q ok - 1 d3:78\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 canceled 5\n"
      "inventory 1000 1 q d1 canceled 6\n"
      "inventory 1000 1 q d2 errored 6\n"
      "inventory 1000 1 q d3 running 6\n"
      "inventory-end 1000 1\n");
  EXPECT_TRUE(clean.violations.empty()) << clean.Summary();
  // The same failure, the policy not applied: d1 and d2 still wait, d4 (release) too.
  const Report stuck = CheckText(
      "deps q d1 cancel q/m1\n"
      "deps q d2 error q/m1\n"
      "deps q d4 release q/m1\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 21 22 c0 enqueue q ok d1 6\n"
      "op 23 24 c0 enqueue q ok d2 6\n"
      "op 25 26 c0 enqueue q ok d4 6\n"
      "op 30 40 c1 cancel q ok m1 0\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 canceled 5\n"
      "inventory 1000 1 q d1 waiting 6\n"
      "inventory 1000 1 q d2 waiting 6\n"
      "inventory 1000 1 q d4 waiting 6\n"
      "inventory-end 1000 1\n");
  EXPECT_EQ(stuck.Count("dependency"), 3u) << stuck.Summary();
}

TEST(TortureChecker, APolicyAppliedWithoutAFailureIsReported) {
  const Report r = CheckText(
      "deps q d1 cancel q/m1\n"
      "deps q d2 error q/m1\n"
      "deps q d3 cancel q/m1\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 21 22 c0 enqueue q ok d1 6\n"
      "op 23 24 c0 enqueue q ok d2 6\n"
      "op 25 26 c0 enqueue q ok d3 6\n"
      "op 30 40 c0 dequeue q ok - 1 m1:77\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 running 5\n"
      "inventory 1000 1 q d1 canceled 6\n"  // nobody canceled m1
      "inventory 1000 1 q d2 errored 6\n"
      "inventory 1000 1 q d3 errored 6\n"  // and d3's policy is cancel
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("phantom"), 3u) << r.Summary();
}

TEST(TortureChecker, AFailureTravelsDownAChainOfDependents) {
  // m1 canceled: d1 (cancel) is canceled, so d2 (cancel), which waits on d1, is canceled too;
  // d3 (release on d1) may run.
  const Report r = CheckText(
      "deps q d1 cancel q/m1\n"
      "deps q d2 cancel q/d1\n"
      "deps q d3 release q/d1\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 21 22 c0 enqueue q ok d1 6\n"
      "op 23 24 c0 enqueue q ok d2 6\n"
      "op 25 26 c0 enqueue q ok d3 6\n"
      "op 30 40 c1 cancel q ok m1 0\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 canceled 5\n"
      "inventory 1000 1 q d1 canceled 6\n"
      "inventory 1000 1 q d2 canceled 6\n"
      "inventory 1000 1 q d3 pending 6\n"
      "inventory-end 1000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, ADependentReleasedTwiceAfterItsCompleteIsReported) {
  // A release derived again on replay that put a completed dependent back to pending.
  const Report r = CheckText(
      "deps q d1 cancel q/m1\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 21 22 c0 enqueue q ok d1 6\n"
      "op 30 40 c0 dequeue q ok - 1 m1:77\n"
      "op 50 60 c0 complete q ok m1 77\n"
      "op 70 80 c0 dequeue q ok - 1 d1:78\n"
      "op 90 95 c0 complete q ok d1 78\n"
      "kill 100 0 random\n"
      "inventory-queue 1000 1 q\n"
      "inventory 1000 1 q m1 completed 5 res:m1:77\n"
      "inventory 1000 1 q d1 pending 6\n"
      "inventory-end 1000 1\n");
  EXPECT_GE(r.Count("not_stuck"), 1u) << r.Summary();
}

TEST(TortureChecker, ADependencysResultCarriedByALeaseMustBeItsAcknowledgedOne) {
  const std::string history =
      "deps q d1 cancel q/m1 q/m2 q/m3\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 11 21 c0 enqueue q ok m2 5\n"
      "op 12 22 c0 enqueue q ok m3 5\n"
      "op 23 24 c0 enqueue q ok d1 6\n"
      "op 30 40 c0 dequeue q ok - 3 m1:77 m2:78 m3:79\n"
      "op 50 60 c0 complete q ok m1 77\n"
      "op 51 61 c0 complete q ok m2 78\n"
      "op 52 62 c0 complete q none m3 79\n"  // unanswered: its result may be there
      "op 70 80 c1 dequeue q ok - 1 d1:90\n";
  const Report clean = CheckText(history +
                                 "depres 70 80 q d1 q/m1 completed res:m1:77\n"
                                 "depres 70 80 q d1 q/m2 completed res:m2:78\n"
                                 "depres 70 80 q d1 q/m3 completed res:m3:79\n");
  EXPECT_TRUE(clean.violations.empty()) << clean.Summary();
  const Report bad = CheckText(history +
                               "depres 70 80 q d1 q/m1 completed -\n"           // lost
                               "depres 70 80 q d1 q/m2 running -\n"             // undone
                               "depres 70 80 q d1 q/m3 completed res:m3:5\n");  // no such
  EXPECT_EQ(bad.Count("result"), 3u) << bad.Summary();
}

TEST(TortureChecker, AGetMustShowTheAcknowledgedResultAndTheLeaseThatStoredIt) {
  const std::string history =
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 11 21 c0 enqueue q ok m2 5\n"
      "op 30 40 c0 dequeue q ok - 2 m1:77 m2:78\n"
      "op 50 60 c0 complete q ok m1 77\n"
      "op 51 61 c0 complete q ok m2 78\n";
  const Report clean = CheckText(history +
                                 "get 70 80 q m1 completed 77 res:m1:77\n"
                                 "get 70 80 q m2 completed 78 res:m2:78\n");
  EXPECT_TRUE(clean.violations.empty()) << clean.Summary();
  const Report bad = CheckText(history +
                               "get 70 80 q m1 running 77 -\n"              // undone
                               "get 70 80 q m2 completed 79 res:m2:78\n");  // another token
  EXPECT_EQ(bad.Count("result"), 2u) << bad.Summary();
}

TEST(TortureChecker, DependenciesRoundTripThroughTheirLine) {
  History h;
  std::string error;
  ASSERT_TRUE(ParseHistory("deps q d1 release q/m1 p/m2\n", &h, &error)) << error;
  ASSERT_EQ(h.dependents.size(), 1u);
  EXPECT_EQ(FormatDependent(h.dependents[0]), "deps q d1 release q/m1 p/m2");
  ASSERT_TRUE(ParseHistory("depres 1 2 q d1 q/m1 completed res:m1:7\n", &h, &error)) << error;
  ASSERT_EQ(h.dependency_results.size(), 1u);
  EXPECT_EQ(FormatDependencyResult(h.dependency_results[0]),
            "depres 1 2 q d1 q/m1 completed res:m1:7");
  ASSERT_TRUE(ParseHistory("get 1 2 q m1 completed 7 res:m1:7\n", &h, &error)) << error;
  ASSERT_EQ(h.gets.size(), 1u);
  EXPECT_EQ(FormatMessageRead(h.gets[0]), "get 1 2 q m1 completed 7 res:m1:7");
  EXPECT_FALSE(ParseHistory("deps q d1 release\n", &h, &error));
  EXPECT_FALSE(ParseHistory("deps q d1 maybe q/m1\n", &h, &error));
}

// ---- Schedules (docs/semantics.md, "Schedules") --------------------------------------------

// A schedule s on queue q every 100 ms whose first fire is at 5000.
constexpr const char* kUpserted = "schedule 1 2 q s 100 ok 5000 1\n";

TEST(TortureChecker, EveryFireOfAScheduleInPlaceIsClean) {
  const Report r = CheckText(std::string(kUpserted) +
                             "inventory-queue 1000 1 q\n"
                             "schedule-state 1000 1 q s 5300 5200 3 0 0\n"
                             "inventory 1000 1 q s@5000 completed 5000 -\n"
                             "inventory 1000 1 q s@5100 pending 5100\n"
                             "inventory 1000 1 q s@5200 pending 5200\n"
                             "inventory-end 1000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
  EXPECT_EQ(r.schedule_checks, 3u);
}

TEST(TortureChecker, AMissingFireIsReported) {
  const Report r = CheckText(std::string(kUpserted) +
                             "inventory-queue 1000 1 q\n"
                             "schedule-state 1000 1 q s 5300 5200 3 0 0\n"
                             "inventory 1000 1 q s@5000 pending 5000\n"
                             "inventory 1000 1 q s@5200 pending 5200\n"
                             "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("schedule"), 1u) << r.Summary();
}

TEST(TortureChecker, AFireTheServerSaysItMadeMustBeThere) {
  // last_fire_at 5200 (read before the messages), but the read shows only the first fire.
  const Report r = CheckText(std::string(kUpserted) +
                             "inventory-queue 1000 1 q\n"
                             "schedule-state 1000 1 q s 5300 5200 3 0 0\n"
                             "inventory 1000 1 q s@5000 pending 5000\n"
                             "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("schedule"), 1u) << r.Summary();
}

TEST(TortureChecker, FiresOfTriggersOffTheSchedulesTimesAreClean) {
  // s@5150 by an acknowledged trigger, s@5170 by one whose answer was lost; last_fire_at 5170
  // is a trigger's: the timer had not made 5100 yet when it was read (it bounds nothing).
  const Report r = CheckText(std::string(kUpserted) +
                             "op 10 20 c0 trigger q ok s@5150 5150\n"
                             "op 30 40 c0 trigger q none - 0\n"
                             "inventory-queue 1000 1 q\n"
                             "schedule-state 1000 1 q s 5200 5170 3 0 0\n"
                             "inventory 1000 1 q s@5000 pending 5000\n"
                             "inventory 1000 1 q s@5150 pending 5150\n"
                             "inventory 1000 1 q s@5170 pending 5170\n"
                             "inventory-end 1000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, AnAcknowledgedTriggersFireThatIsMissingIsLost) {
  const Report r = CheckText(std::string(kUpserted) +
                             "op 10 20 c0 trigger q ok s@5150 5150\n"
                             "inventory-queue 1000 1 q\n"
                             "schedule-state 1000 1 q s 5100 5000 1 0 0\n"
                             "inventory 1000 1 q s@5000 pending 5000\n"
                             "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("lost"), 1u) << r.Summary();
  EXPECT_EQ(r.violations.size(), 1u) << r.Summary();
}

TEST(TortureChecker, MoreOffTimeFiresThanTriggersSentAreReported) {
  // One trigger without an answer explains one fire off the times, not two.
  const Report r = CheckText(std::string(kUpserted) +
                             "op 30 40 c0 trigger q none - 0\n"
                             "inventory-queue 1000 1 q\n"
                             "schedule-state 1000 1 q s 5100 5000 1 0 0\n"
                             "inventory 1000 1 q s@5000 pending 5000\n"
                             "inventory 1000 1 q s@5013 pending 5013\n"
                             "inventory 1000 1 q s@5017 pending 5017\n"
                             "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("schedule"), 1u) << r.Summary();
}

TEST(TortureChecker, FiresTheServerCountedDroppedMayBeMissing) {
  const Report r = CheckText(std::string(kUpserted) +
                             "inventory-queue 1000 1 q\n"
                             "schedule-state 1000 1 q s 5400 5300 2 2 0\n"
                             "inventory 1000 1 q s@5000 pending 5000\n"
                             "inventory 1000 1 q s@5300 pending 5300\n"
                             "inventory-end 1000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, AFireLostAfterAnEarlierReadShowedItIsReported) {
  // The first read saw 5000 and 5100; the second (after a kill) starts at 5100.
  const Report r = CheckText(std::string(kUpserted) +
                             "inventory-queue 1000 1 q\n"
                             "inventory 1000 1 q s@5000 pending 5000\n"
                             "inventory 1000 1 q s@5100 pending 5100\n"
                             "inventory-end 1000 1\n"
                             "kill 1500 1 random\n"
                             "inventory-queue 2000 2 q\n"
                             "inventory 2000 2 q s@5100 pending 5100\n"
                             "inventory 2000 2 q s@5200 pending 5200\n"
                             "inventory-end 2000 2\n");
  EXPECT_EQ(r.Count("schedule"), 1u) << r.Summary();
}

TEST(TortureChecker, AFireOffTheSchedulesTimesIsReportedAsDoubled) {
  // 5150 is no time of a schedule that fires every 100 ms from 5000: a second id for a fire.
  const Report r = CheckText(std::string(kUpserted) +
                             "inventory-queue 1000 1 q\n"
                             "inventory 1000 1 q s@5000 pending 5000\n"
                             "inventory 1000 1 q s@5100 pending 5100\n"
                             "inventory 1000 1 q s@5150 pending 5150\n"
                             "inventory 1000 1 q s@4900 pending 4900\n"  // before the first
                             "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("schedule"), 2u) << r.Summary();
}

TEST(TortureChecker, AFiresUpsertAnsweredNextFireAtMustHaveBeenMade) {
  // An upsert that found the schedule answered next_fire_at 5300: 5200 was made before it.
  const Report r = CheckText(std::string(kUpserted) +
                             "schedule 100 200 q s 100 ok 5300 0\n"
                             "inventory-queue 1000 1 q\n"
                             "inventory 1000 1 q s@5000 pending 5000\n"
                             "inventory 1000 1 q s@5100 pending 5100\n"
                             "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("schedule"), 1u) << r.Summary();
}

TEST(TortureChecker, ACompletedFireThatComesBackIsReported) {
  // A fire made again after it was leased and completed (a doubled fire) is pending again.
  const Report r = CheckText(std::string(kUpserted) +
                             "op 10 20 c0 dequeue q ok - 1 s@5000:77\n"
                             "op 30 40 c0 complete q ok s@5000 77\n"
                             "kill 50 0 random\n"
                             "inventory-queue 1000 1 q\n"
                             "inventory 1000 1 q s@5000 pending 5000\n"
                             "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("not_stuck"), 1u) << r.Summary();
  EXPECT_EQ(r.Count("phantom"), 0u) << r.Summary();
}

TEST(TortureChecker, ALeasedFireThatVanishesIsLost) {
  const Report r = CheckText(std::string(kUpserted) +
                             "op 10 20 c0 dequeue q ok - 1 s@5000:77\n"
                             "inventory-queue 1000 1 q\n"
                             "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("lost"), 1u) << r.Summary();
}

TEST(TortureChecker, ScheduleLinesRoundTrip) {
  History h;
  std::string error;
  ASSERT_TRUE(ParseHistory(std::string(kUpserted) + "schedule 3 4 q s 100 none 0 0\n"
                                                    "inventory-queue 9 1 q\n"
                                                    "schedule-state 9 1 q s 5300 5200 3 1 2\n"
                                                    "drained 9 1 q\n"
                                                    "inventory-end 9 1\n",
                           &h, &error))
      << error;
  ASSERT_EQ(h.schedules.size(), 2u);
  EXPECT_EQ(FormatScheduleUpsert(h.schedules[0]) + "\n", kUpserted);
  EXPECT_EQ(h.schedules[1].outcome, Outcome::kNone);
  ASSERT_EQ(h.inventories.size(), 1u);
  ASSERT_EQ(h.inventories[0].schedules.size(), 1u);
  EXPECT_EQ(h.inventories[0].schedules[0].missed, 1u);
  EXPECT_EQ(h.inventories[0].drained, std::vector<std::string>{"q"});
}

// ---- Drain -------------------------------------------------------------------------------

TEST(TortureChecker, AMessageLeftPendingByADrainIsReported) {
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 11 21 c0 enqueue q ok m2 5\n"
      "op 30 40 drain dequeue q ok - 1 m1:77\n"
      "op 50 60 drain complete q ok m1 77\n"
      "op 70 80 drain dequeue q ok - 0\n"
      "inventory-queue 1000 1 q\n"
      "drained 1000 1 q\n"
      "inventory 1000 1 q m1 completed 5 res:m1:77\n"
      "inventory 1000 1 q m2 pending 5\n"
      "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("drain"), 1u) << r.Summary();
}

// ---- Batches (docs/semantics.md, "Batches") ----------------------------------------------------

// Two members, one completed and one canceled, then the seal: done, its callback there with
// the counts.
std::string BatchHistory(const std::string& state_line, const std::string& extra = "") {
  return "op 1 2 setup create_batch cb.e0 ok b0.0 0\n"
         "member plain.e0 m1 b0.0\n"
         "op 10 20 c0 enqueue plain.e0 ok m1 5\n"
         "member plain.e0 m2 b0.0\n"
         "op 30 40 c0 enqueue plain.e0 ok m2 6\n"
         "op 50 60 c0 dequeue plain.e0 ok - 1 m1:7\n"
         "op 70 80 c0 complete plain.e0 ok m1 7\n"
         "op 90 100 c1 cancel plain.e0 ok m2 0\n"
         "op 110 120 c1 seal_batch - ok b0.0 0\n" +
         extra +
         "inventory-queue 1000 1 plain.e0\n"
         "inventory 1000 1 plain.e0 m1 completed 5 res:m1:7\n"
         "inventory 1000 1 plain.e0 m2 canceled 6\n" +
         state_line + "inventory-end 1000 1\n";
}

TEST(TortureChecker, ADoneBatchWithItsCallbackIsClean) {
  const Report r = CheckText(BatchHistory("batch-state 1000 1 b0.0 2 0 1 1 0 1 1 pending 2 1 1 0\n",
                                          "batch 45 46 b0.0 2 2 0 0 0 0 0 - 0 0 0 0\n"));
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
  EXPECT_EQ(r.batch_checks, 2u);
}

TEST(TortureChecker, ADoneBatchWithoutItsCallbackIsReported) {
  const Report r =
      CheckText(BatchHistory("batch-state 1000 1 b0.0 2 0 1 1 0 1 1 not_found 0 0 0 0\n"));
  EXPECT_EQ(r.Count("batch"), 1u) << r.Summary();
  EXPECT_EQ(r.violations.size(), 1u) << r.Summary();
}

TEST(TortureChecker, ACallbackOfABatchNotDoneIsReported) {
  // Not sealed (its seal refused), so not done: a callback is one no operation made.
  std::string text = BatchHistory("batch-state 1000 1 b0.0 2 0 1 1 0 0 0 pending 2 1 1 0\n");
  text.replace(text.find("c1 seal_batch - ok"), 18, "c1 seal_batch - NOT_FOUND");
  const Report r = CheckText(text);
  EXPECT_EQ(r.Count("batch"), 1u) << r.Summary();
  EXPECT_EQ(r.violations.size(), 1u) << r.Summary();
}

TEST(TortureChecker, ACallbackWhoseCountsDifferFromTheBatchsIsReported) {
  // A callback enqueued twice (the second at another time, with other counts) would show so.
  const Report r =
      CheckText(BatchHistory("batch-state 1000 1 b0.0 2 0 1 1 0 1 1 pending 2 2 0 0\n"));
  EXPECT_EQ(r.Count("batch"), 1u) << r.Summary();
  EXPECT_EQ(r.violations.size(), 1u) << r.Summary();
}

TEST(TortureChecker, BatchCountsOtherThanItsMembersStatesAreReported) {
  // m2's cancel counted as a completion (the requests allow 1 completed at most).
  const Report r =
      CheckText(BatchHistory("batch-state 1000 1 b0.0 2 0 2 0 0 1 1 pending 2 2 0 0\n"));
  EXPECT_GE(r.Count("batch"), 1u) << r.Summary();
  EXPECT_EQ(r.violations.size(), r.Count("batch")) << r.Summary();
}

TEST(TortureChecker, ABatchNotDoneWithNoMemberActiveIsReported) {
  const Report r =
      CheckText(BatchHistory("batch-state 1000 1 b0.0 2 0 1 1 0 1 0 not_found 0 0 0 0\n"));
  EXPECT_EQ(r.Count("batch"), 1u) << r.Summary();
  EXPECT_EQ(r.violations.size(), 1u) << r.Summary();
}

TEST(TortureChecker, AnUnsealedBatchAfterAnAcknowledgedSealIsReported) {
  const Report r =
      CheckText(BatchHistory("batch-state 1000 1 b0.0 2 0 1 1 0 0 0 not_found 0 0 0 0\n"));
  EXPECT_EQ(r.Count("batch"), 1u) << r.Summary();
  EXPECT_EQ(r.violations.size(), 1u) << r.Summary();
}

TEST(TortureChecker, AnEnqueueIntoABatchAcknowledgedAfterItsSealIsReported) {
  const Report r = CheckText(BatchHistory("batch-state 1000 1 b0.0 2 0 1 1 0 1 1 pending 2 1 1 0\n",
                                          "member dep.e0 m3 b0.0\n"
                                          "op 130 140 c0 enqueue dep.e0 ok m3 1\n"));
  // (Its count says 2 members where the requests say 3 too.)
  ASSERT_GE(r.Count("batch"), 1u) << r.Summary();
  EXPECT_NE(r.violations[0].text.find("acknowledged although a seal was acknowledged"),
            std::string::npos)
      << r.Summary();
}

TEST(TortureChecker, AnEnqueueRefusedAsSealedWithNoSealSentIsReported) {
  const Report r = CheckText(BatchHistory("batch-state 1000 1 b0.0 2 0 1 1 0 1 1 pending 2 1 1 0\n",
                                          "member plain.e0 m0 b0.0\n"
                                          "op 3 4 c0 enqueue plain.e0 FAILED_PRECONDITION m0 1\n"));
  EXPECT_EQ(r.Count("batch"), 1u) << r.Summary();
  EXPECT_EQ(r.violations.size(), 1u) << r.Summary();
}

TEST(TortureChecker, AnEnqueueRefusedAfterASealWasSentIsClean) {
  const Report r =
      CheckText(BatchHistory("batch-state 1000 1 b0.0 2 0 1 1 0 1 1 pending 2 1 1 0\n",
                             "member plain.e0 m3 b0.0\n"
                             "op 115 130 c0 enqueue plain.e0 FAILED_PRECONDITION m3 1\n"));
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, BatchCountsThatGoBackBetweenReadsAreReported) {
  // m2's enqueue unanswered: 1 or 2 members are both possible, but not 2 and then 1.
  std::string text = BatchHistory("batch-state 1000 1 b0.0 2 0 1 1 0 1 1 pending 2 1 1 0\n",
                                  "batch 45 46 b0.0 2 2 0 0 0 0 0 - 0 0 0 0\n"
                                  "batch 47 48 b0.0 1 1 0 0 0 0 0 - 0 0 0 0\n");
  text.replace(text.find("enqueue plain.e0 ok m2"), 22, "enqueue plain.e0 none m2");
  const Report r = CheckText(text);
  EXPECT_EQ(r.Count("batch"), 1u) << r.Summary();
}

TEST(TortureChecker, AnAcknowledgedMemberMissingFromTheCountsIsReported) {
  // Read after both enqueues were acknowledged, it counts one member.
  const Report r = CheckText(BatchHistory("batch-state 1000 1 b0.0 2 0 1 1 0 1 1 pending 2 1 1 0\n",
                                          "batch 45 46 b0.0 1 1 0 0 0 0 0 - 0 0 0 0\n"));
  EXPECT_EQ(r.Count("batch"), 1u) << r.Summary();
}

TEST(TortureChecker, ABatchWhoseCreateWasAcknowledgedMustBeFound) {
  const Report r = CheckText(BatchHistory(""));
  EXPECT_EQ(r.Count("batch"), 1u) << r.Summary();
  EXPECT_EQ(r.violations.size(), 1u) << r.Summary();
}

TEST(TortureChecker, BatchLinesRoundTrip) {
  BatchRead b;
  b.t0 = 5;
  b.t1 = 9;
  b.id = "b3.1";
  b.members = 4;
  b.active = 1;
  b.completed = 2;
  b.errored = 1;
  b.sealed = true;
  History h;
  std::string error;
  ASSERT_TRUE(ParseHistory(FormatBatchRead(b) + "\nmember q m1 b3.1\n", &h, &error)) << error;
  ASSERT_EQ(h.batch_reads.size(), 1u);
  EXPECT_EQ(FormatBatchRead(h.batch_reads[0]), FormatBatchRead(b));
  ASSERT_EQ(h.members.size(), 1u);
  EXPECT_EQ(h.members[0].batch, "b3.1");
}

TEST(TortureChecker, MalformedLinesAreRefused) {
  History h;
  std::string error;
  EXPECT_FALSE(ParseHistory("op 1 2 c0\n", &h, &error));
  EXPECT_NE(error.find("line 1"), std::string::npos);
  EXPECT_FALSE(ParseHistory("bogus 1\n", &h, &error));
}

// ---- Flows (docs/semantics.md, "Flows") --------------------------------------------------------

// A tree r(a, b) across queues p and d, sent by c0 at [10, 20] as the torture writes it: one
// enqueue op per node, the root's deps on its children, then the flow line.
std::string FlowSent(const std::string& outcome) {
  return "deps d r cancel p/a d/b\n"
         "op 10 20 c0 enqueue p " +
         outcome +
         " a 1\n"
         "op 10 20 c0 enqueue d " +
         outcome +
         " b 2\n"
         "op 10 20 c0 enqueue d " +
         outcome +
         " r 3\n"
         "flow 10 20 c0 " +
         outcome + " 0 0 d/r/- p/a/0 d/b/0\n";
}

std::string InventoryOf(int round, const std::string& rows) {
  const std::string t = std::to_string(1000 * round) + " " + std::to_string(round);
  return "inventory-queue " + t + " p\ninventory-queue " + t + " d\n" + rows + "inventory-end " +
         t + "\n";
}

TEST(TortureChecker, AFlowRoundTripsThroughItsLine) {
  History h;
  std::string error;
  ASSERT_TRUE(ParseHistory("flow 10 20 c0 ok 1 3 d/r/- p/a/0 d/b/0\n", &h, &error)) << error;
  ASSERT_EQ(h.flows.size(), 1u);
  EXPECT_EQ(FormatFlowSend(h.flows[0]), "flow 10 20 c0 ok 1 3 d/r/- p/a/0 d/b/0");
  EXPECT_EQ(h.flows[0].parents, (std::vector<int>{-1, 0, 0}));
  EXPECT_FALSE(ParseHistory("flow 10 20 c0 ok 0 0 p/a/0\n", &h, &error));  // no root
}

TEST(TortureChecker, AnAcknowledgedFlowWholeAfterRestartIsClean) {
  const Report r = CheckText(FlowSent("ok") + "kill 50 0 random\n" +
                             InventoryOf(1,
                                         "inventory 1000 1 p a pending 1\n"
                                         "inventory 1000 1 d b pending 2\n"
                                         "inventory 1000 1 d r waiting 3\n"));
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
  EXPECT_EQ(r.flow_checks, 1u);
}

TEST(TortureChecker, AnAcknowledgedFlowMissingANodeIsReported) {
  const Report r = CheckText(FlowSent("ok") + "kill 50 0 random\n" +
                             InventoryOf(1,
                                         "inventory 1000 1 p a pending 1\n"
                                         "inventory 1000 1 d r waiting 3\n"));
  EXPECT_EQ(r.Count("flow"), 1u) << r.Summary();
}

TEST(TortureChecker, AnUnansweredFlowWholeOrAbsentIsClean) {
  const Report absent = CheckText(FlowSent("none") + "kill 50 0 random\n" + InventoryOf(1, ""));
  EXPECT_TRUE(absent.violations.empty()) << absent.Summary();
  const Report whole = CheckText(FlowSent("none") + "kill 50 0 random\n" +
                                 InventoryOf(1,
                                             "inventory 1000 1 p a pending 1\n"
                                             "inventory 1000 1 d b pending 2\n"
                                             "inventory 1000 1 d r waiting 3\n"));
  EXPECT_TRUE(whole.violations.empty()) << whole.Summary();
}

TEST(TortureChecker, AnUnansweredFlowFoundInPartIsReported) {
  const Report r = CheckText(FlowSent("none") + "kill 50 0 random\n" +
                             InventoryOf(1, "inventory 1000 1 p a pending 1\n"));
  EXPECT_EQ(r.Count("flow"), 1u) << r.Summary();
  EXPECT_EQ(r.Count("phantom"), 0u) << r.Summary();  // each node alone may have been enqueued
}

TEST(TortureChecker, AResendOfAnAcknowledgedFlowAnsweredDuplicateIsClean) {
  const Report r = CheckText(FlowSent("ok") + "flow 30 40 c0 ok 1 3 d/r/- p/a/0 d/b/0\n" +
                             InventoryOf(1,
                                         "inventory 1000 1 p a pending 1\n"
                                         "inventory 1000 1 d b pending 2\n"
                                         "inventory 1000 1 d r waiting 3\n"));
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, AResendOfAnAcknowledgedFlowEnqueuedAgainIsReported) {
  const Report r = CheckText(FlowSent("ok") + "flow 30 40 c0 ok 1 0 d/r/- p/a/0 d/b/0\n");
  EXPECT_EQ(r.Count("flow"), 1u) << r.Summary();
}

TEST(TortureChecker, AResendOfAFlowShownWholeEnqueuedAgainIsReported) {
  // Unanswered at first, found whole after the restart, then resent: it must be a duplicate.
  const Report r = CheckText(FlowSent("none") + "kill 50 0 random\n" +
                             InventoryOf(1,
                                         "inventory 1000 1 p a pending 1\n"
                                         "inventory 1000 1 d b pending 2\n"
                                         "inventory 1000 1 d r waiting 3\n") +
                             "flow 1100 1200 c1.0 ok 1 0 d/r/- p/a/0 d/b/0\n");
  EXPECT_EQ(r.Count("flow"), 1u) << r.Summary();
}

TEST(TortureChecker, AResendRefusedAsOtherContentNeedsAReprioritizedRoot) {
  const Report clean = CheckText(FlowSent("ok") +
                                 "op 30 40 c0 reprioritize d ok r 9\n"
                                 "flow 50 60 c0 ALREADY_EXISTS 1 0 d/r/- p/a/0 d/b/0\n");
  EXPECT_TRUE(clean.violations.empty()) << clean.Summary();
  const Report refused =
      CheckText(FlowSent("ok") + "flow 50 60 c0 ALREADY_EXISTS 1 0 d/r/- p/a/0 d/b/0\n");
  EXPECT_EQ(refused.Count("flow"), 1u) << refused.Summary();
}

TEST(TortureChecker, AResendAnsweredPartlyDuplicateIsReported) {
  const Report r = CheckText(FlowSent("none") + "flow 30 40 c0 ok 1 2 d/r/- p/a/0 d/b/0\n");
  EXPECT_EQ(r.Count("flow"), 1u) << r.Summary();
}

TEST(TortureChecker, AResendThatEnqueuedAnUnansweredFlowMustKeepItWhole) {
  const Report r = CheckText(FlowSent("none") + "kill 50 0 random\n" + InventoryOf(1, "") +
                             "flow 1100 1200 c1.0 ok 1 0 d/r/- p/a/0 d/b/0\n"
                             "kill 1300 1 random\n" +
                             InventoryOf(2, "inventory 2000 2 p a pending 1\n"));
  EXPECT_EQ(r.Count("flow"), 1u) << r.Summary();
}

TEST(TortureChecker, AFlowNodeLeasedBeforeItsChildrenCompletedIsReported) {
  const Report r = CheckText(FlowSent("ok") +
                             "op 30 40 c0 dequeue p ok - 1 a:7\n"
                             "op 50 60 c0 complete p ok a 7\n"
                             "op 70 80 c1 dequeue d ok - 1 r:8\n");  // b never completed
  EXPECT_EQ(r.Count("dependency"), 1u) << r.Summary();
}

TEST(TortureChecker, AFlowNodeReleasedAgainAfterItCompletedIsReported) {
  // Both children and the root completed and acknowledged; after the restart the root is back
  // to pending (its release replayed).
  const Report r = CheckText(FlowSent("ok") +
                             "op 30 40 c0 dequeue p ok - 1 a:7\n"
                             "op 41 42 c0 complete p ok a 7\n"
                             "op 43 44 c0 dequeue d ok - 1 b:8\n"
                             "op 45 46 c0 complete d ok b 8\n"
                             "op 47 48 c0 dequeue d ok - 1 r:9\n"
                             "op 49 50 c0 complete d ok r 9\n"
                             "kill 60 0 random\n" +
                             InventoryOf(1,
                                         "inventory 1000 1 p a completed 1 res:a:7\n"
                                         "inventory 1000 1 d b completed 2 res:b:8\n"
                                         "inventory 1000 1 d r pending 3\n"));
  EXPECT_GE(r.Count("not_stuck") + r.Count("state"), 1u) << r.Summary();
  EXPECT_EQ(r.Count("flow"), 0u) << r.Summary();
}

// ---- Flow control (docs/semantics.md, "Flow control") ---------------------------------------

// Queue g limits each value of its flow key to 2 running messages; m1..m4 carry value a, m5 b.
std::string GatedQueue() {
  return "limits g 2 0 0 0\n"
         "meta g m1 a\nmeta g m2 a\nmeta g m3 a\nmeta g m4 a\nmeta g m5 b\n"
         "op 10 20 c0 enqueue g ok m1 5\n"
         "op 21 22 c0 enqueue g ok m2 5\n"
         "op 23 24 c0 enqueue g ok m3 5\n"
         "op 25 26 c0 enqueue g ok m4 5\n"
         "op 27 28 c0 enqueue g ok m5 5\n";
}

TEST(TortureChecker, MoreThanNLeasesOfOneKeyHeldAtOnceAreReported) {
  const Report r = CheckText(GatedQueue() +
                             "op 30 40 c0 dequeue g ok - 1 m1:71\n"
                             "op 50 60 c1 dequeue g ok - 1 m2:72\n"
                             "op 70 80 c2 dequeue g ok - 1 m3:73\n");
  EXPECT_EQ(r.Count("key_concurrency"), 1u) << r.Summary();
}

TEST(TortureChecker, OneDequeueLeasingMoreThanNOfOneKeyIsReported) {
  const Report r = CheckText(GatedQueue() + "op 30 40 c0 dequeue g ok - 3 m1:71 m2:72 m3:73\n");
  EXPECT_EQ(r.Count("key_concurrency"), 1u) << r.Summary();
}

TEST(TortureChecker, NLeasesOfOneKeyAndOthersOfAnotherKeyAreClean) {
  const Report r = CheckText(GatedQueue() +
                             "op 30 40 c0 dequeue g ok - 3 m1:71 m2:72 m5:75\n"
                             "inventory-queue 1000 1 g\n"
                             "inventory 1000 1 g m1 running 5\n"
                             "inventory 1000 1 g m2 running 5\n"
                             "inventory 1000 1 g m3 pending 5\n"
                             "inventory 1000 1 g m4 pending 5\n"
                             "inventory 1000 1 g m5 running 5\n"
                             "inventory-end 1000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, LeasesOfOneKeyThatOverlapOnlyInTurnAreClean) {
  // m1's lease may have ended (its complete was sent at 90) before m3's was granted: at most
  // two of the three were ever held at once for certain.
  const Report r = CheckText(GatedQueue() +
                             "op 30 40 c0 dequeue g ok - 1 m1:71\n"
                             "op 50 60 c1 dequeue g ok - 1 m2:72\n"
                             "op 90 95 c0 complete g none m1 71\n"
                             "op 100 110 c2 dequeue g ok - 1 m3:73\n"
                             "op 120 130 c1 fail g ok m2 72\n"
                             "op 140 150 c3 dequeue g ok - 1 m4:74\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, AKeyLeasedByAConcurrentDequeueBeyondNIsReported) {
  // The third dequeue was sent before the second was answered and nothing ended any lease:
  // whichever the server granted last, it granted while the other two held.
  const Report r = CheckText(GatedQueue() +
                             "op 30 40 c0 dequeue g ok - 1 m1:71\n"
                             "op 50 90 c1 dequeue g ok - 1 m2:72\n"
                             "op 60 80 c2 dequeue g ok - 1 m3:73\n");
  EXPECT_EQ(r.Count("key_concurrency"), 1u) << r.Summary();
}

TEST(TortureChecker, MoreThanNRunningMessagesOfOneKeyInAnInventoryAreReported) {
  const Report r = CheckText(GatedQueue() +
                             "op 30 40 c0 dequeue g none - 0\n"
                             "op 31 41 c1 dequeue g none - 0\n"
                             "op 32 42 c2 dequeue g none - 0\n"
                             "inventory-queue 1000 1 g\n"
                             "inventory 1000 1 g m1 running 5\n"
                             "inventory 1000 1 g m2 running 5\n"
                             "inventory 1000 1 g m3 running 5\n"
                             "inventory 1000 1 g m4 pending 5\n"
                             "inventory 1000 1 g m5 pending 5\n"
                             "inventory-end 1000 1\n");
  EXPECT_EQ(r.Count("key_concurrency"), 1u) << r.Summary();
}

// The rule by its definition, by brute force: some N + 1 leases of distinct messages that
// pairwise were held at once for certain (each answered before the other could have run out or
// been ended by a request sent before that answer), on random histories of one value.
TEST(TortureChecker, KeyConcurrencyAgreesWithItsDefinitionOnRandomHistories) {
  struct Lease {
    int message;
    int64_t t0, t1, lease_ms;
    bool short_lease;
    uint64_t token;
  };
  struct Ender {
    int message;
    int64_t t0;
    bool cancel;
    uint64_t token;
  };
  constexpr int64_t kMs = 1'000'000;
  int reported = 0;
  for (uint64_t seed = 1; seed <= 1500; ++seed) {
    std::mt19937_64 rng(seed);
    auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
    const uint32_t n = 1 + static_cast<uint32_t>(pick(3));
    const int messages = 2 + static_cast<int>(pick(4));
    std::string text = "limits g " + std::to_string(n) + " 0 0 0\n";
    for (int m = 0; m < messages; ++m) {
      text += "meta g m" + std::to_string(m) + " a\nop 1 2 c0 enqueue g ok m" + std::to_string(m) +
              " 5\n";
    }
    std::vector<Lease> leases;
    std::vector<Ender> enders;
    const int ops = 2 + static_cast<int>(pick(7));
    for (int k = 0; k < ops; ++k) {
      const int64_t t0 = 10 + pick(300) * kMs;
      const int64_t t1 = t0 + 1 + pick(60) * kMs;
      if (leases.empty() || pick(3) != 0) {
        Lease l{static_cast<int>(pick(messages)), t0, t1, 0, false, 100 + leases.size()};
        const int64_t kind = pick(6);
        l.short_lease = kind == 0;
        l.lease_ms = kind == 1 ? 150 + pick(100) : 0;
        const std::string id = "m" + std::to_string(l.message);
        text += "op " + std::to_string(t0) + ' ' + std::to_string(t1) + " c" + std::to_string(k) +
                (l.short_lease ? " dequeue-short"
                 : l.lease_ms  ? " dequeue/" + std::to_string(l.lease_ms)
                               : " dequeue") +
                " g ok - 1 " + id + ':' + std::to_string(l.token) + '\n';
        leases.push_back(l);
      } else {
        const Lease& of = leases[static_cast<size_t>(pick(static_cast<int64_t>(leases.size())))];
        const int64_t kind = pick(3);
        const char* outcome = pick(4) == 0 ? "FAILED_PRECONDITION" : pick(2) ? "ok" : "none";
        const std::string id = "m" + std::to_string(of.message);
        text += "op " + std::to_string(t0) + ' ' + std::to_string(t1) + " c" + std::to_string(k) +
                (kind == 0   ? " cancel g "
                 : kind == 1 ? " complete g "
                             : " fail g ") +
                outcome + ' ' + id + ' ' + (kind == 0 ? "0" : std::to_string(of.token)) + '\n';
        if (std::string(outcome) != "FAILED_PRECONDITION") {
          enders.push_back({of.message, t0, kind == 0, of.token});
        }
      }
    }
    auto held_until = [&](const Lease& l) {
      if (l.short_lease) return std::numeric_limits<int64_t>::min();
      if (l.lease_ms == 0) return std::numeric_limits<int64_t>::max();
      return l.t0 + (l.lease_ms - kLeaseMarginMs) * kMs;
    };
    auto ended = [&](const Lease& l, int64_t until) {
      for (const Ender& e : enders) {
        if (e.message == l.message && e.t0 < until && (e.cancel || e.token == l.token)) {
          return true;
        }
      }
      return false;
    };
    auto overlap = [&](const Lease& x, const Lease& y) {
      return y.t1 < held_until(x) && x.t1 < held_until(y) && !ended(x, y.t1) && !ended(y, x.t1);
    };
    bool expected = false;
    for (uint32_t set = 0; set < (1u << leases.size()) && !expected; ++set) {
      std::vector<const Lease*> members;
      for (size_t i = 0; i < leases.size(); ++i) {
        if (set & (1u << i)) members.push_back(&leases[i]);
      }
      if (members.size() != n + 1) continue;
      bool clique = true;
      for (size_t i = 0; i < members.size() && clique; ++i) {
        for (size_t j = i + 1; j < members.size() && clique; ++j) {
          clique = members[i]->message != members[j]->message && overlap(*members[i], *members[j]);
        }
      }
      expected = clique;
    }
    const Report r = CheckText(text);
    ASSERT_EQ(r.Count("key_concurrency"), expected ? 1u : 0u)
        << "seed " << seed << ", N " << n << "\n"
        << text << r.Summary();
    reported += expected;
  }
  // Both outcomes are exercised.
  EXPECT_GT(reported, 100);
  EXPECT_LT(reported, 1400);
}

TEST(TortureChecker, AQueueWithoutKeyConcurrencyLimitsNoKey) {
  const Report r = CheckText(
      "limits g 0 0 0 0\n"
      "meta g m1 a\nmeta g m2 a\n"
      "op 10 20 c0 enqueue g ok m1 5\n"
      "op 21 22 c0 enqueue g ok m2 5\n"
      "op 30 40 c0 dequeue g ok - 2 m1:71 m2:72\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

// Queue r: 10 leases per second per value after a burst of 2; m1..m8 all carry value a.
// `grant` lines: the server's times, ms since the epoch.
std::string RatedQueue() {
  std::string text = "limits r 0 10 2 0\n";
  for (int i = 1; i <= 8; ++i) {
    const std::string id = "m" + std::to_string(i);
    text += "meta r " + id + " a\nop " + std::to_string(10 * i) + ' ' + std::to_string(10 * i + 5) +
            " c0 enqueue r ok " + id + " 5\n";
  }
  return text;
}

std::string Grant(int i, int64_t granted_at) {
  const std::string id = "m" + std::to_string(i);
  return "grant r " + id + ' ' + std::to_string(70 + i) + ' ' + std::to_string(granted_at) +
         " 1000 0\n";
}

TEST(TortureChecker, GrantsWithinTheBurstAndTheRateAreClean) {
  // 3 at once (the burst and the rounding's one), then one per 100 ms.
  const Report r = CheckText(RatedQueue() + Grant(1, 5000) + Grant(2, 5000) + Grant(3, 5001) +
                             Grant(4, 5100) + Grant(5, 5200) + Grant(6, 5300) + Grant(7, 6000));
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
  EXPECT_GT(r.rate_checks, 0u);
}

TEST(TortureChecker, GrantsBeyondTheBurstAreReported) {
  const Report r =
      CheckText(RatedQueue() + Grant(1, 5000) + Grant(2, 5001) + Grant(3, 5002) + Grant(4, 5003));
  EXPECT_EQ(r.Count("key_rate"), 1u) << r.Summary();
}

TEST(TortureChecker, AFreshBurstAfterARestartIsReported) {
  // A burst, a kill, and a second burst 50 ms later (half a token refilled): the restart must
  // not have refilled the bucket.
  const Report r =
      CheckText(RatedQueue() + Grant(1, 5000) + Grant(2, 5000) + Grant(3, 5001) +
                "kill 200 0 random\n" + Grant(4, 5050) + Grant(5, 5050) + Grant(6, 5051));
  EXPECT_EQ(r.Count("key_rate"), 1u) << r.Summary();
}

TEST(TortureChecker, GrantsOfOtherKeysOrWithoutALimitAreNotCounted) {
  const Report r = CheckText(RatedQueue() +
                             "meta r x1 b\nmeta r x2 c\n"
                             "grant r x1 1 5000 1000 0\ngrant r x2 2 5000 1000 0\n"
                             "grant q y1 3 5000 1000 0\ngrant q y2 4 5000 1000 0\n" +
                             Grant(1, 5000) + Grant(2, 5000) + Grant(3, 5000));
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

// Five dequeues of r, each leasing one message of value a, the k-th sent at start + k * step ms
// and answered 1 ms later; no grant lines: only the history's times are judged.
std::string RatedLeases(int64_t start_ms, int64_t step_ms) {
  std::string text;
  for (int k = 1; k <= 5; ++k) {
    const int64_t t0 = (start_ms + k * step_ms) * 1'000'000;
    text += "op " + std::to_string(t0) + ' ' + std::to_string(t0 + 1'000'000) + " c" +
            std::to_string(k) + " dequeue r ok - 1 m" + std::to_string(k) + ':' +
            std::to_string(70 + k) + '\n';
  }
  return text;
}

TEST(TortureChecker, LeasesBeyondTheRateInTheHistorysTimesAreReported) {
  // 5 leases within 51 ms: at most 2 + floor(10 * 0.151) + 1 = 4 with the margin.
  const Report r = CheckText(RatedQueue() + RatedLeases(100, 10));
  EXPECT_EQ(r.Count("key_rate"), 1u) << r.Summary();
}

TEST(TortureChecker, LeasesWithinTheRateInTheHistorysTimesAreClean) {
  const Report r = CheckText(RatedQueue() + RatedLeases(100, 100));
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, ALeaseGrantedAtOrAfterItsExpiryIsReported) {
  const Report r = CheckText(
      "ttl q m1 1000\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 dequeue q ok - 1 m1:71\n"
      "grant q m1 71 5000 4000 0\n"  // enqueued at 4000, expired at 5000
      "op 50 60 c0 enqueue q ok m2 5\n"
      "op 70 80 c0 dequeue q ok - 1 m2:72\n"
      "grant q m2 72 5000 1000 4999\n");  // the answer's own expires_at
  EXPECT_EQ(r.Count("expired_delivered"), 2u) << r.Summary();
}

TEST(TortureChecker, ALeaseAnsweredToADequeueSentAfterTheTtlIsReported) {
  // The queue's ttl of 200 ms applies; the dequeue was sent 400 ms after the enqueue's answer.
  const Report r = CheckText(
      "limits q 0 0 0 200\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 400000020 400000030 c0 dequeue q ok - 1 m1:71\n");
  EXPECT_EQ(r.Count("expired_delivered"), 1u) << r.Summary();
}

TEST(TortureChecker, LeasesBeforeExpiryAndAnExpiredMessageCanceledAreClean) {
  const Report r = CheckText(
      "ttl q m1 1000\n"
      "ttl q m2 200\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 40 c0 dequeue q ok - 1 m1:71\n"
      "grant q m1 71 4999 4000 0\n"
      "op 50 60 c0 enqueue q ok m2 5\n"
      // within the ttl and the margin of the enqueue's answer
      "op 250000000 250000010 c0 dequeue-short q ok - 1 m2:72\n"
      "grant q m2 72 4199 4000 0\n"
      // the short lease lapsed and m2 expired: canceled with no cancel sent
      "inventory-queue 1000000000 1 q\n"
      "inventory 1000000000 1 q m1 running 5\n"
      "inventory 1000000000 1 q m2 canceled 5\n"
      "inventory-end 1000000000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
  EXPECT_EQ(r.expiry_checks, 4u);
}

TEST(TortureChecker, AMessageCanceledBeforeItsTtlCouldRunOutIsAPhantom) {
  const Report r = CheckText(
      "ttl q m1 60000\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "inventory-queue 1000000000 1 q\n"
      "inventory 1000000000 1 q m1 canceled 5\n"
      "inventory-end 1000000000 1\n");
  EXPECT_EQ(r.Count("phantom"), 1u) << r.Summary();
}

// An inventory's rows carry the time its reads began; a message whose ttl ran out while they
// went on (read again until two agree: long under relaxed load) may be read as canceled.
TEST(TortureChecker, AMessageThatExpiredWhileTheInventoryWasReadIsNoPhantom) {
  const std::string before =
      "ttl q m1 1000\n"
      "op 10 20 c0 enqueue q ok m1 5\n"
      "inventory-queue 800000000 1 q\n"
      "inventory 800000000 1 q m1 canceled 5\n";
  // Read until 1 s after the enqueue was sent: by then its ttl (less the margin) had run out.
  EXPECT_TRUE(CheckText(before + "inventory-end 800000000 1 1000000000\n").violations.empty());
  // Read at once: 800 ms after the enqueue, 1 s ttl, nothing could have canceled it.
  EXPECT_EQ(CheckText(before + "inventory-end 800000000 1 800000000\n").Count("phantom"), 1u);
  EXPECT_EQ(CheckText(before + "inventory-end 800000000 1\n").Count("phantom"), 1u);
}

TEST(TortureChecker, AnExpiredDependencyFailsItsDependents) {
  const Report r = CheckText(
      "ttl q a 100\n"
      "deps q d cancel q/a\n"
      "op 10 20 c0 enqueue q ok a 5\n"
      "op 30 40 c0 enqueue q ok d 5\n"
      "inventory-queue 1000000000 1 q\n"
      "inventory 1000000000 1 q a canceled 5\n"
      "inventory 1000000000 1 q d canceled 5\n"
      "inventory-end 1000000000 1\n");
  EXPECT_TRUE(r.violations.empty()) << r.Summary();
}

TEST(TortureChecker, FlowControlLinesRoundTrip) {
  History h;
  std::string error;
  ASSERT_TRUE(
      ParseHistory("limits g 2 12.5 5 3000\n"
                   "ttl g m1 250\n"
                   "grant g m1 71 5000 4000 6000\n",
                   &h, &error))
      << error;
  ASSERT_EQ(h.limits.size(), 1u);
  EXPECT_EQ(FormatQueueLimits(h.limits[0]), "limits g 2 12.5 5 3000");
  ASSERT_EQ(h.ttls.size(), 1u);
  EXPECT_EQ(FormatMessageTtl(h.ttls[0]), "ttl g m1 250");
  ASSERT_EQ(h.grants.size(), 1u);
  EXPECT_EQ(FormatLeaseStamp(h.grants[0]), "grant g m1 71 5000 4000 6000");
  EXPECT_FALSE(ParseHistory("ttl g m1 0\n", &h, &error));
  EXPECT_FALSE(ParseHistory("limits g 2 -1 5 0\n", &h, &error));
  EXPECT_FALSE(ParseHistory("grant g m1 71 5000\n", &h, &error));
}

}  // namespace
}  // namespace sundial::torture
