#include "replication/election.h"

namespace sundial::replication {

Eligibility MayLead(const ElectionView& view, const std::string& node) {
  if (view.leader) return Eligibility::kLeaderExists;
  if (!view.sync) return Eligibility::kMayLead;
  if (node.empty()) return Eligibility::kNotSyncStandby;
  if (view.sync->standby == node) return Eligibility::kMayLead;
  if (view.sync->leader == node) return Eligibility::kMayLead;
  return Eligibility::kNotSyncStandby;
}

}  // namespace sundial::replication
