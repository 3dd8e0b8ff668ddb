#include "server/replication_hub.h"

#include <algorithm>
#include <limits>

#include "wal/failpoint.h"

namespace sundial::server {

uint64_t ReplicationHub::Connected(const std::string& node, std::function<void()> wake) {
  MutexLock lock(&mu_);
  const uint64_t session = next_session_++;
  {
    MutexLock wakes(&wake_mu_);
    wakes_.emplace_back(session, std::move(wake));
  }
  for (Standby& s : standbys_) {
    if (s.node == node) {
      // A reconnection: what it acknowledged before still holds (its log keeps it).
      s.session = session;
      s.connected = true;
      return session;
    }
  }
  standbys_.push_back(Standby{node, session, 0, true, std::chrono::steady_clock::now()});
  return session;
}

void ReplicationHub::Disconnected(const std::string& node, uint64_t session) {
  MutexLock lock(&mu_);
  {
    MutexLock wakes(&wake_mu_);
    std::erase_if(wakes_, [session](const auto& w) { return w.first == session; });
  }
  for (Standby& s : standbys_) {
    if (s.node == node && s.session == session) s.connected = false;
  }
  if (SUNDIAL_BUG("no_fencing")) UpdateBoundLocked();
}

void ReplicationHub::Acked(const std::string& node, uint64_t session, uint64_t flushed_end) {
  MutexLock lock(&mu_);
  for (Standby& s : standbys_) {
    if (s.node != node || s.session != session) continue;
    if (flushed_end > s.acked_end) s.acked_end = flushed_end;
    s.last_ack = std::chrono::steady_clock::now();
  }
  UpdateBoundLocked();
}

void ReplicationHub::Written() {
  MutexLock lock(&wake_mu_);
  for (const auto& [session, wake] : wakes_) wake();
}

std::vector<replication::StandbyProgress> ReplicationHub::Standbys() const {
  MutexLock lock(&mu_);
  std::vector<replication::StandbyProgress> out;
  for (const Standby& s : standbys_) out.push_back({s.node, s.acked_end, s.connected, s.last_ack});
  return out;
}

uint64_t ReplicationHub::RequireAcks(std::vector<std::string> standbys) {
  MutexLock lock(&mu_);
  required_ = std::move(standbys);
  UpdateBoundLocked();
  return log_->DurableEnd();
}

void ReplicationHub::BeginEpoch() {
  MutexLock lock(&mu_);
  primary_ = true;
  required_.clear();
  // Acknowledgements of an earlier epoch (this node was a standby then) count for nothing now.
  for (Standby& s : standbys_) s.acked_end = 0;
  UpdateBoundLocked();
}

void ReplicationHub::EndEpoch() {
  MutexLock lock(&mu_);
  primary_ = false;
  required_.clear();
  for (Standby& s : standbys_) s.acked_end = 0;
  log_->SetReplicaBound(std::nullopt);
}

uint64_t ReplicationHub::RetainFrom() const {
  MutexLock lock(&mu_);
  uint64_t from = std::numeric_limits<uint64_t>::max();
  for (const Standby& s : standbys_) {
    // A standby that left keeps what it acknowledged in this epoch: a restart or a network
    // blip then resumes from the log instead of a snapshot (the retention bound still caps
    // what one that never returns can keep).
    if (s.connected || s.acked_end > 0) from = std::min(from, s.acked_end);
  }
  return from;
}

void ReplicationHub::UpdateBoundLocked() {
  if (!primary_ || !sync_) return log_->SetReplicaBound(std::nullopt);
  // Durable needs every required standby's acknowledgement; with none required (strict, no
  // synchronous standby yet), nothing new becomes durable.
  uint64_t bound = std::numeric_limits<uint64_t>::max();
  bool any = false;
  for (const std::string& name : required_) {
    uint64_t acked = 0;
    bool connected = false;
    for (const Standby& s : standbys_) {
      if (s.node == name) {
        acked = s.acked_end;
        connected = s.connected;
      }
    }
    // The planted bug `no_fencing` (failpoints build only): a standby that left no longer holds
    // replies back, as if it had not revoked this primary by leaving to lead.
    if (SUNDIAL_BUG("no_fencing") && !connected) continue;
    bound = std::min(bound, acked);
    any = true;
  }
  if (SUNDIAL_BUG("no_fencing") && !any && !required_.empty()) {
    return log_->SetReplicaBound(std::nullopt);  // every required standby left: no bound at all
  }
  log_->SetReplicaBound(any ? bound : log_->DurableEnd());
}

}  // namespace sundial::server
