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

TEST(TortureChecker, ConcurrentDequeuesAreNotJudged) {
  // The second was sent before the first was answered: the server may have ordered them
  // either way, and only one of them can be wrong, which this rule cannot tell.
  const Report r = CheckText(
      "op 10 20 c0 enqueue q ok m1 5\n"
      "op 30 50 c0 dequeue q ok - 1 m1:77\n"
      "op 40 60 c1 dequeue q ok - 1 m1:78\n");
  EXPECT_EQ(r.Count("double_lease"), 0u) << r.Summary();
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
