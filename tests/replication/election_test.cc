// Who may take the leader key (replication/election.h): only a node that holds every
// acknowledged write — the published synchronous standby, or the leader that published it — and
// anyone at all only before the cluster's first leadership.
#include "replication/election.h"

#include <gtest/gtest.h>

namespace sundial::replication {
namespace {

TEST(Election, AnyNodeMayLeadBeforeTheClustersFirstLeadership) {
  EXPECT_EQ(MayLead({}, "a"), Eligibility::kMayLead);
  EXPECT_EQ(MayLead({}, "z"), Eligibility::kMayLead);
}

TEST(Election, NobodyTakesTheKeyWhileALeaderHoldsIt) {
  const ElectionView view{LeaderKey{"a", 7}, SyncKey{"a", "b", 9}};
  EXPECT_EQ(MayLead(view, "a"), Eligibility::kLeaderExists);
  EXPECT_EQ(MayLead(view, "b"), Eligibility::kLeaderExists);
  EXPECT_EQ(MayLead(view, "c"), Eligibility::kLeaderExists);
}

TEST(Election, OnlyTheSyncStandbyOrTheLeaderThatPublishedItMayLead) {
  const ElectionView view{std::nullopt, SyncKey{"a", "b", 9}};
  EXPECT_EQ(MayLead(view, "b"), Eligibility::kMayLead) << "the synchronous standby";
  EXPECT_EQ(MayLead(view, "a"), Eligibility::kMayLead) << "the last leader: nobody was promoted";
  EXPECT_EQ(MayLead(view, "c"), Eligibility::kNotSyncStandby) << "may lack acknowledged writes";
}

TEST(Election, ALeaderWithoutAStandbyIsTheOnlyOneThatMayLeadAgain) {
  const ElectionView view{std::nullopt, SyncKey{"b", "", 12}};
  EXPECT_EQ(MayLead(view, "b"), Eligibility::kMayLead);
  EXPECT_EQ(MayLead(view, "a"), Eligibility::kNotSyncStandby);
  EXPECT_EQ(MayLead(view, ""), Eligibility::kNotSyncStandby) << "an empty name is nobody";
}

TEST(Election, ANodeThatLostItsLogNeverLeadsAClusterThatHadALeader) {
  // The primary a lost its disk and came back under its name while b, its synchronous
  // standby, was down: a must not lead (it would serve an empty state, and b would later be
  // re-seeded from it).
  ElectionView view{std::nullopt, SyncKey{"a", "b", 9}, /*log_empty=*/true};
  EXPECT_EQ(MayLead(view, "a"), Eligibility::kLogEmpty);
  EXPECT_EQ(MayLead(view, "b"), Eligibility::kLogEmpty) << "the standby's disk, likewise";
  EXPECT_EQ(MayLead(view, "c"), Eligibility::kNotSyncStandby);
  view.log_empty = false;
  EXPECT_EQ(MayLead(view, "a"), Eligibility::kMayLead);
}

TEST(Election, EmptyLogsMayStartTheClustersFirstLeadership) {
  EXPECT_EQ(MayLead(ElectionView{std::nullopt, std::nullopt, /*log_empty=*/true}, "a"),
            Eligibility::kMayLead);
}

}  // namespace
}  // namespace sundial::replication
