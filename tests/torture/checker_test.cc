// The torture's checker on hand-written histories: each kind of violation it exists to find,
// and the legitimate outcomes it must accept.
#include "tests/torture/checker.h"

#include <gtest/gtest.h>

#include <string>

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
  EXPECT_EQ(r.Count("exclusivity"), 1u) << r.Summary();
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
  EXPECT_EQ(r.Count("exclusivity"), 1u) << r.Summary();
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
  EXPECT_EQ(r.Count("exclusivity"), 1u) << r.Summary();
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

TEST(TortureChecker, MalformedLinesAreRefused) {
  History h;
  std::string error;
  EXPECT_FALSE(ParseHistory("op 1 2 c0\n", &h, &error));
  EXPECT_NE(error.find("line 1"), std::string::npos);
  EXPECT_FALSE(ParseHistory("bogus 1\n", &h, &error));
}

}  // namespace
}  // namespace sundial::torture
