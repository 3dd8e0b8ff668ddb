#include "replication/coordinator.h"

#include <future>

#include <boost/json.hpp>
#include <cstdio>

namespace sundial::replication {
namespace {

namespace json = boost::json;

std::string Text(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

uint64_t Number(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return 0;
  if (v->is_uint64()) return v->as_uint64();
  if (v->is_int64() && v->as_int64() >= 0) return static_cast<uint64_t>(v->as_int64());
  return 0;
}

// A key's JSON object, or an empty one when it is not JSON (a key someone else wrote by hand
// reads as empty fields, never as a crash).
json::object Parse(const std::string& text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return {};
  return std::move(v.as_object());
}

NodeAddresses AddressesOf(const json::object& o) {
  return {Text(o, "addr"), Text(o, "http_addr"), Text(o, "replication_addr")};
}

// One line on stderr: "sundiald: cluster NAME: WHAT" (`format` takes the cluster and one text).
void Log(const char* format, const std::string& a, const std::string& b = {}) {
  std::fprintf(stderr, format, a.c_str(), b.c_str());
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options, ClusterNode* node)
    : options_(std::move(options)),
      node_(node),
      prefix_("/sundial/" + options_.cluster + "/"),
      etcd_(EtcdClientOptions{.endpoints = options_.etcd,
                              .call_timeout = options_.etcd_timeout,
                              .attempt_timeout = std::chrono::milliseconds(0),
                              .max_response_bytes = 16 << 20}) {}

Coordinator::~Coordinator() { Stop(); }

void Coordinator::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Coordinator::Stop() {
  {
    MutexLock lock(&mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
  AnswerSwitchover(Unavailable("switchover: the node is stopping"));
  if (lease_id_ != 0) {
    // The member key and, for a primary, the leader key go with the lease: a standby takes over
    // at once rather than after the TTL.
    (void)etcd_.RevokeLease(lease_id_);
    lease_id_ = 0;
  }
}

CoordinatorView Coordinator::view() const {
  MutexLock lock(&mu_);
  return view_;
}

void Coordinator::Run() {
  for (;;) {
    RunOnce();
    // A switchover under way looks at its standby often: writes are stopped meanwhile.
    const auto interval = handover_ ? std::chrono::milliseconds(2) : options_.loop_interval;
    const auto deadline = SteadyClock::now() + interval;
    MutexLock lock(&mu_);
    while (!stop_ && !switchover_.has_value()) {
      if (!cv_.WaitUntil(&mu_, deadline)) break;  // the interval passed
    }
    if (stop_) return;
  }
}

SteadyClock::time_point Coordinator::WritableUntil() const {
  return renewed_sent_ + std::chrono::seconds(options_.ttl_seconds) - options_.renew_margin;
}

bool Coordinator::RenewLease() {
  if (lease_id_ == 0) {
    const auto sent = SteadyClock::now();
    auto lease = etcd_.GrantLease(options_.ttl_seconds);
    if (!lease.ok()) return false;
    lease_id_ = lease->id;
    renewed_sent_ = sent;
    return true;
  }
  auto renewal = etcd_.KeepAliveOnce(lease_id_);
  if (renewal.ok()) {
    renewed_sent_ = renewal->sent;
    return true;
  }
  if (renewal.code() == Code::kNotFound) {
    // Expired (we could not renew in time) or revoked: every key on it is gone.
    lease_id_ = 0;
    if (role_ == Role::kPrimary) BecomeNone("its etcd lease expired");
  }
  return false;
}

bool Coordinator::ReadKeys(CoordinatorView* view, int64_t* sync_mod_revision,
                           int64_t* leader_lease) {
  auto keys = etcd_.GetPrefix(prefix_);
  if (!keys.ok()) return false;
  view->cluster = options_.cluster;
  view->node = options_.node;
  view->etcd_reachable = true;
  *sync_mod_revision = 0;
  *leader_lease = 0;
  const std::string members = prefix_ + "members/";
  for (const KeyValue& kv : keys->kvs) {
    const json::object o = Parse(kv.value);
    if (kv.key == prefix_ + "leader") {
      view->leader =
          LeaderInfo{Text(o, "node"), static_cast<uint64_t>(kv.create_revision), AddressesOf(o)};
      *leader_lease = kv.lease;
    } else if (kv.key == prefix_ + "sync") {
      view->sync =
          SyncKey{Text(o, "leader"), Text(o, "standby"), static_cast<uint64_t>(kv.mod_revision)};
      *sync_mod_revision = kv.mod_revision;
    } else if (kv.key.starts_with(members)) {
      view->members.push_back(MemberView{kv.key.substr(members.size()), Text(o, "role"),
                                         AddressesOf(o), Number(o, "epoch"), Number(o, "end_lsn"),
                                         Number(o, "flushed_lsn")});
    }
  }
  return true;
}

void Coordinator::RunOnce() {
  std::optional<std::string> switchover;
  uint64_t request = 0;
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    switchover.swap(switchover_);
    request = switchover_request_;
  }
  const bool renewed = RenewLease();
  // A demotion (the lease expired) answered it already: a later request is not this one.
  if (switchover && !SwitchoverAsked(request)) switchover.reset();
  // A primary handing over stays stopped until the handover ends.
  if (role_ == Role::kPrimary && renewed && !handover_) {
    node_->ExtendLeadership(WritableUntil());
  }

  CoordinatorView view;
  int64_t sync_mod_revision = 0;
  int64_t leader_lease = 0;
  if (!renewed || !ReadKeys(&view, &sync_mod_revision, &leader_lease)) {
    view.cluster = options_.cluster;
    view.node = options_.node;
    view.etcd_reachable = false;
    if (switchover) {
      // Taken from switchover_ this round: answered, or its request would wait for good.
      FinishSwitchover(Unavailable("switchover: etcd did not answer; nothing was changed"));
    }
    MutexLock lock(&mu_);
    view_.etcd_reachable = false;
    node_->Publish(view_);
    return;  // a primary's deadline passes by itself; a standby keeps following
  }

  if (switchover && role_ != Role::kPrimary) {
    FinishSwitchover(
        FailedPrecondition("switchover: this node is not the primary (send it to the primary)"));
    switchover.reset();
  }
  if (role_ == Role::kPrimary) {
    if (!view.leader || view.leader->node != options_.node || view.leader->epoch != epoch_) {
      if (handover_) FinishSwitchover(Unavailable("switchover: the leadership was lost"));
      BecomeNone("the leader key is no longer this node's");
    } else if (switchover) {
      StartSwitchover(*switchover);
    } else if (handover_) {
      ContinueSwitchover();
    } else {
      ManageSync(view);
    }
  } else if (view.leader) {
    if (view.leader->node == options_.node) {
      if (leader_lease == lease_id_) {
        // Our own transaction's answer was lost (in doubt) but it took: lead.
        node_->StopFollowing();
        const Status s = node_->Promote(view.leader->epoch, WritableUntil());
        if (s.ok()) {
          role_ = Role::kPrimary;
          epoch_ = view.leader->epoch;
          sync_mod_revision_ = sync_mod_revision;
          sync_standby_ = view.sync ? view.sync->standby : std::string();
        } else {
          (void)etcd_.Txn({{Compare::CreateRevisionIs(prefix_ + "leader",
                                                      static_cast<int64_t>(view.leader->epoch))},
                           {TxnOp::Delete(prefix_ + "leader")},
                           {}});
          BecomeNone("promotion failed: " + s.ToString());
        }
      } else {
        // A leader key of a previous run of this node (its process restarted): nobody else may
        // lead while it stands, and this run is not that leader. Drop it so that the election
        // can run now instead of after its lease's TTL.
        (void)etcd_.Txn({{Compare::CreateRevisionIs(prefix_ + "leader",
                                                    static_cast<int64_t>(view.leader->epoch))},
                         {TxnOp::Delete(prefix_ + "leader")},
                         {}});
      }
    } else if (!following_ || following_->node != view.leader->node ||
               following_->epoch != view.leader->epoch) {
      node_->Follow(*view.leader);
      following_ = view.leader;
      role_ = Role::kStandby;
    }
  } else if (SteadyClock::now() >= hold_until_) {
    const Eligibility may =
        MayLead(ElectionView{std::nullopt, view.sync, node_->EndLsn() == 0}, options_.node);
    if (may == Eligibility::kMayLead) {
      TryLead(view, sync_mod_revision);
    } else if (may == Eligibility::kLogEmpty && !said_log_empty_) {
      said_log_empty_ = true;
      Log("sundiald: cluster %s: %s", options_.cluster,
          "this node is named in the sync key but its log is empty (a lost or new data "
          "directory): it holds none of the writes it acknowledged, so it does not lead; it "
          "follows the next leader");
    }
  }

  PutMember();
  if (role_ == Role::kPrimary) {
    // What this round wrote, so the view does not lag a round behind this node's own writes.
    view.leader = LeaderInfo{options_.node, epoch_, options_.addresses};
    view.sync = SyncKey{options_.node, sync_standby_, static_cast<uint64_t>(sync_mod_revision_)};
  }
  {
    MutexLock lock(&mu_);
    view_ = view;
    node_->Publish(view_);
  }
}

void Coordinator::TryLead(const CoordinatorView& view, int64_t sync_mod_revision) {
  // First: acknowledge nothing more to the old primary. What this node holds now is all it
  // will ever hold of the old epoch, and its own epoch starts at its end.
  node_->StopFollowing();
  following_.reset();
  TxnRequest txn;
  txn.compare.push_back(Compare::KeyMissing(prefix_ + "leader"));
  txn.compare.push_back(view.sync ? Compare::ModRevisionIs(prefix_ + "sync", sync_mod_revision)
                                  : Compare::KeyMissing(prefix_ + "sync"));
  txn.success.push_back(TxnOp::Put(prefix_ + "leader", LeaderValue(), lease_id_));
  json::object sync{{"leader", options_.node}, {"standby", ""}};
  txn.success.push_back(TxnOp::Put(prefix_ + "sync", json::serialize(sync)));
  auto result = etcd_.Txn(txn);
  if (!result.ok() || !result->succeeded) return;  // in doubt: the next round reads what took
  const uint64_t epoch = static_cast<uint64_t>(result->header.revision);
  Log("sundiald: cluster %s: this node won the election", options_.cluster);
  const Status s = node_->Promote(epoch, WritableUntil());
  if (!s.ok()) {
    (void)etcd_.Txn({{Compare::CreateRevisionIs(prefix_ + "leader", static_cast<int64_t>(epoch))},
                     {TxnOp::Delete(prefix_ + "leader")},
                     {}});
    BecomeNone("promotion failed: " + s.ToString());
    return;
  }
  role_ = Role::kPrimary;
  epoch_ = epoch;
  sync_mod_revision_ = result->header.revision;
  sync_standby_.clear();
  pending_sync_.reset();
}

bool Coordinator::PublishSync(const std::string& standby) {
  TxnRequest txn;
  txn.compare.push_back(
      Compare::CreateRevisionIs(prefix_ + "leader", static_cast<int64_t>(epoch_)));
  txn.compare.push_back(Compare::ModRevisionIs(prefix_ + "sync", sync_mod_revision_));
  json::object sync{{"leader", options_.node}, {"standby", standby}};
  txn.success.push_back(TxnOp::Put(prefix_ + "sync", json::serialize(sync)));
  auto result = etcd_.Txn(txn);
  if (!result.ok() || !result->succeeded) return false;
  sync_mod_revision_ = result->header.revision;
  sync_standby_ = standby;
  return true;
}

void Coordinator::ManageSync(const CoordinatorView&) {
  const std::vector<StandbyProgress> standbys = node_->Standbys();
  const auto find = [&](const std::string& name) -> const StandbyProgress* {
    for (const StandbyProgress& s : standbys) {
      if (s.node == name && s.connected) return &s;
    }
    return nullptr;
  };
  if (!options_.sync_replication) {
    // Async: the published standby is only whom a failover promotes; no reply waits for it.
    if (!sync_standby_.empty() && find(sync_standby_) != nullptr) return;
    const StandbyProgress* best = nullptr;
    for (const StandbyProgress& s : standbys) {
      if (s.connected && (best == nullptr || s.acked_end > best->acked_end)) best = &s;
    }
    if (best != nullptr && best->node != sync_standby_) (void)PublishSync(best->node);
    return;
  }
  if (pending_sync_) {
    const StandbyProgress* target = find(pending_sync_->target);
    if (target == nullptr) {
      // It went away before it caught up: back to the published one alone.
      node_->RequireAcks(sync_standby_.empty() ? std::vector<std::string>{}
                                               : std::vector<std::string>{sync_standby_});
      pending_sync_.reset();
    } else if (target->acked_end >= pending_sync_->must_reach) {
      // It holds every acknowledged record, and every reply since waited for it too.
      if (PublishSync(target->node)) {
        Log("sundiald: cluster %s: synchronous standby is now %s", options_.cluster, target->node);
        node_->RequireAcks({target->node});
        pending_sync_.reset();
      }
    }
    return;
  }
  if (!sync_standby_.empty() && find(sync_standby_) != nullptr) return;
  const StandbyProgress* best = nullptr;
  for (const StandbyProgress& s : standbys) {
    if (s.connected && s.node != sync_standby_ &&
        (best == nullptr || s.acked_end > best->acked_end)) {
      best = &s;
    }
  }
  if (best == nullptr) return;
  // From here a reply needs the candidate's acknowledgement too (and the current standby's,
  // while it is published): whatever is acknowledged from now on is on the candidate. It must
  // then catch up with what was acknowledged before.
  std::vector<std::string> both{best->node};
  if (!sync_standby_.empty()) both.push_back(sync_standby_);
  pending_sync_ = PendingSync{best->node, node_->RequireAcks(both)};
}

void Coordinator::PutMember() {
  if (lease_id_ == 0) return;
  (void)etcd_.Put(prefix_ + "members/" + options_.node, MemberValue(), lease_id_);
}

std::string Coordinator::MemberValue() const {
  const char* role = role_ == Role::kPrimary   ? "primary"
                     : role_ == Role::kStandby ? "standby"
                                               : "unknown";
  json::object o{{"addr", options_.addresses.addr},
                 {"http_addr", options_.addresses.http_addr},
                 {"replication_addr", options_.addresses.replication_addr},
                 {"role", role},
                 {"epoch", role_ == Role::kPrimary ? epoch_ : (following_ ? following_->epoch : 0)},
                 {"end_lsn", node_->EndLsn()},
                 {"flushed_lsn", node_->FlushedLsn()}};
  return json::serialize(o);
}

std::string Coordinator::LeaderValue() const {
  json::object o{{"node", options_.node},
                 {"addr", options_.addresses.addr},
                 {"http_addr", options_.addresses.http_addr},
                 {"replication_addr", options_.addresses.replication_addr}};
  return json::serialize(o);
}

void Coordinator::BecomeNone(const std::string& why) {
  // A switchover waiting for its answer is answered before the demotion.
  handover_.reset();
  AnswerSwitchover(Status(Code::kUnavailable,
                          "switchover: the leadership ended (" + why + ") before the handover"));
  Log("sundiald: cluster %s: no longer the primary: %s", options_.cluster, why);
  role_ = Role::kNone;
  following_.reset();
  pending_sync_.reset();
  node_->Demote(why);
}

void Coordinator::RequestSwitchover(const std::string& to, std::function<void(Status)> done) {
  ReleasableMutexLock lock(&mu_);
  if (stop_ || switchover_busy_) {
    const bool stopping = stop_;
    lock.Release();
    done(stopping ? Unavailable("switchover: the node is stopping")
                  : FailedPrecondition("switchover: one is already under way"));
    return;
  }
  switchover_busy_ = true;
  ++switchover_request_;
  switchover_ = to;
  switchover_done_ = std::move(done);
  cv_.SignalAll();
}

Status Coordinator::RequestSwitchover(const std::string& to) {
  std::promise<Status> result;
  RequestSwitchover(to, [&result](Status s) { result.set_value(std::move(s)); });
  return result.get_future().get();
}

bool Coordinator::SwitchoverAsked(uint64_t request) const {
  MutexLock lock(&mu_);
  return switchover_busy_ && switchover_request_ == request;
}

void Coordinator::FinishSwitchover(Status result) {
  handover_.reset();
  AnswerSwitchover(std::move(result));
}

void Coordinator::AnswerSwitchover(Status result) {
  std::function<void(Status)> done;
  {
    MutexLock lock(&mu_);
    if (!switchover_busy_) return;  // answered already
    switchover_busy_ = false;
    switchover_.reset();
    done = std::move(switchover_done_);
    switchover_done_ = nullptr;
  }
  if (done) done(std::move(result));
}

void Coordinator::StartSwitchover(std::string to) {
  if (role_ != Role::kPrimary) {
    return FinishSwitchover(
        FailedPrecondition("switchover: this node is not the primary (send it to the primary)"));
  }
  if (to.empty()) to = sync_standby_;
  if (to.empty()) {
    return FinishSwitchover(
        FailedPrecondition("switchover: there is no synchronous standby to hand over to"));
  }
  if (to != sync_standby_) {
    bool connected = false;
    for (const StandbyProgress& s : node_->Standbys()) connected |= s.node == to && s.connected;
    if (options_.sync_replication || !connected) {
      return FinishSwitchover(Status(
          Code::kFailedPrecondition,
          "switchover: " + to +
              (options_.sync_replication ? " is not the synchronous standby (" + sync_standby_ + ")"
                                         : " is not a connected standby")));
    }
  }
  // Stop taking writes now; hand over once `to` holds every record.
  node_->ExtendLeadership(SteadyClock::now());
  handover_ = Handover{to, node_->EndLsn(), SteadyClock::now() + options_.switchover_timeout};
  Log("sundiald: cluster %s: switchover to %s: writes stopped", options_.cluster, to);
  ContinueSwitchover();
}

void Coordinator::ContinueSwitchover() {
  const Handover h = *handover_;
  bool caught_up = false;
  std::string progress = h.to + " is not connected";
  for (const StandbyProgress& s : node_->Standbys()) {
    if (s.node != h.to) continue;
    caught_up |= s.connected && s.acked_end >= h.end;
    progress = h.to + (s.connected ? " is connected" : " is not connected") +
               " and acknowledged every record below " + std::to_string(s.acked_end) + " of " +
               std::to_string(h.end);
  }
  if (!caught_up) {
    if (SteadyClock::now() < h.give_up) return;  // the next round looks again
    node_->ExtendLeadership(WritableUntil());
    return FinishSwitchover(
        Status(Code::kUnavailable, "switchover: the standby did not hold every record in time (" +
                                       progress + "); writes resume here"));
  }
  // Give up the leader key; do not try to take it back for a while (the target is eligible as
  // the synchronous standby, and so is this node, as the last leader).
  auto released =
      etcd_.Txn({{Compare::CreateRevisionIs(prefix_ + "leader", static_cast<int64_t>(epoch_))},
                 {TxnOp::Delete(prefix_ + "leader")},
                 {}});
  if (!released.ok() || !released->succeeded) {
    node_->ExtendLeadership(WritableUntil());
    return FinishSwitchover(Unavailable("switchover: could not release the leader key in etcd"));
  }
  hold_until_ = SteadyClock::now() + options_.switchover_hold;
  // The requester first: BecomeNone would answer it as failed. Writes stopped when the
  // handover began and the key is released: the leadership is given up already.
  FinishSwitchover(Status::Ok());
  BecomeNone("switchover to " + h.to);
}

}  // namespace sundial::replication
