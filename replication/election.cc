#include "replication/election.h"

namespace sundial::replication {

Eligibility MayLead(const ElectionView& view, const std::string& node) {
  if (view.leader) return Eligibility::kLeaderExists;
  if (!view.sync) return Eligibility::kMayLead;
  if (node.empty()) return Eligibility::kNotSyncStandby;
  if (view.sync->standby != node && view.sync->leader != node) return Eligibility::kNotSyncStandby;
  return view.log_empty ? Eligibility::kLogEmpty : Eligibility::kMayLead;
}

}  // namespace sundial::replication
