// How a standby catches up (replication/catch_up.h): a prefix of the primary's log streams from
// its end; a divergent tail is truncated where the last common epoch ends on the primary; what
// the primary no longer holds, or a log of another history, comes from a snapshot.
#include "replication/catch_up.h"

#include <gtest/gtest.h>

namespace sundial::replication {
namespace {

// The primary of the tests: epochs 3 (from 0), 8 (from 100), 12 (from 250); its log ends at 400.
const LogPosition kPrimary{{{3, 0}, {8, 100}, {12, 250}}, 400};

TEST(CatchUp, AnEmptyLogStreamsFromTheStartOrTakesASnapshot) {
  EXPECT_EQ(DecideCatchUp(kPrimary, 0, {}), (CatchUp{CatchUpKind::kStream, 0}));
  EXPECT_EQ(DecideCatchUp(kPrimary, 1, {}), (CatchUp{CatchUpKind::kSnapshot, 0}))
      << "the primary checkpointed its first records away";
}

TEST(CatchUp, APrefixStreamsFromItsEnd) {
  // Behind in the current epoch.
  EXPECT_EQ(DecideCatchUp(kPrimary, 0, {{{3, 0}, {8, 100}, {12, 250}}, 300}),
            (CatchUp{CatchUpKind::kStream, 300}));
  // Ended in an older epoch exactly where the primary's next one starts.
  EXPECT_EQ(DecideCatchUp(kPrimary, 0, {{{3, 0}, {8, 100}}, 250}),
            (CatchUp{CatchUpKind::kStream, 250}));
  // Inside an older epoch.
  EXPECT_EQ(DecideCatchUp(kPrimary, 0, {{{3, 0}}, 40}), (CatchUp{CatchUpKind::kStream, 40}));
  // Up to date.
  EXPECT_EQ(DecideCatchUp(kPrimary, 0, {kPrimary.history, 400}),
            (CatchUp{CatchUpKind::kStream, 400}));
}

TEST(CatchUp, ATailWrittenAfterTheCommonEpochEndedOnThePrimaryIsTruncated) {
  // An old primary of epoch 8 that went on writing after the primary took over at 250.
  EXPECT_EQ(DecideCatchUp(kPrimary, 0, {{{3, 0}, {8, 100}}, 270}),
            (CatchUp{CatchUpKind::kTruncate, 250}));
  // A node that led an epoch (10) the primary never knew: back to where epoch 8 ended on it.
  EXPECT_EQ(DecideCatchUp(kPrimary, 0, {{{3, 0}, {8, 100}, {10, 230}}, 240}),
            (CatchUp{CatchUpKind::kTruncate, 230}));
}

TEST(CatchUp, TruncationNeedsThePrimaryToHoldWhatFollows) {
  EXPECT_EQ(DecideCatchUp(kPrimary, 251, {{{3, 0}, {8, 100}}, 270}),
            (CatchUp{CatchUpKind::kSnapshot, 0}));
  EXPECT_EQ(DecideCatchUp(kPrimary, 250, {{{3, 0}, {8, 100}}, 270}),
            (CatchUp{CatchUpKind::kTruncate, 250}));
}

TEST(CatchUp, WhatThePrimaryNoLongerHoldsComesFromASnapshot) {
  EXPECT_EQ(DecideCatchUp(kPrimary, 301, {{{3, 0}, {8, 100}, {12, 250}}, 300}),
            (CatchUp{CatchUpKind::kSnapshot, 0}));
  EXPECT_EQ(DecideCatchUp(kPrimary, 300, {{{3, 0}, {8, 100}, {12, 250}}, 300}),
            (CatchUp{CatchUpKind::kStream, 300}));
}

TEST(CatchUp, ALogOfAnotherHistoryIsReplacedBySnapshot) {
  // Records with no epoch (a node that ran outside the cluster).
  EXPECT_EQ(DecideCatchUp(kPrimary, 0, {{}, 50}), (CatchUp{CatchUpKind::kSnapshot, 0}));
  // Epochs the primary never had.
  EXPECT_EQ(DecideCatchUp(kPrimary, 0, {{{5, 0}}, 50}), (CatchUp{CatchUpKind::kSnapshot, 0}));
  // The same epoch number starting elsewhere is not the same leadership.
  EXPECT_EQ(DecideCatchUp(kPrimary, 0, {{{3, 1}}, 50}), (CatchUp{CatchUpKind::kSnapshot, 0}));
}

TEST(CatchUp, EpochEndIsWhereTheNextEpochStartsOrTheLogEnds) {
  EXPECT_EQ(EpochEnd(kPrimary, 3), 100u);
  EXPECT_EQ(EpochEnd(kPrimary, 8), 250u);
  EXPECT_EQ(EpochEnd(kPrimary, 12), 400u);
}

}  // namespace
}  // namespace sundial::replication
