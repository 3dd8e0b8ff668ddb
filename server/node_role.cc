#include "server/node_role.h"

namespace sundial::server {

NodeRole::Refusal NodeRole::WhyNotWritable() const {
  MutexLock lock(&mu_);
  const std::string epoch = " (epoch " + std::to_string(info_.epoch) + ")";
  switch (kind()) {
    case RoleKind::kStandby:
      if (!info_.primary.empty()) {
        return {"not primary: " + info_.node + " is a standby; the primary is " + info_.primary +
                    " at " + info_.primary_addr + epoch,
                info_.primary_addr};
      }
      return {"not primary: " + info_.node + " is a standby and knows no primary yet" + epoch, {}};
    case RoleKind::kPrimary:
      return {"not primary: " + info_.node +
                  " could not renew its leadership in etcd in time and stopped taking writes" +
                  epoch + "; retry: the primary may change",
              {}};
    default:
      return {"not primary: " + info_.node + " knows no primary (an election is under way)" +
                  epoch + "; retry",
              {}};
  }
}

}  // namespace sundial::server
