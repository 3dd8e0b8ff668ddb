#include "server/replica_node.h"

#include <algorithm>
#include <cstdio>

#include "engine/mutex.h"
#include "server/internal.h"
#include "wal/failpoint.h"

namespace sundial::server {
namespace {

void Log(const std::string& line) {
  std::fprintf(stderr, "sundiald: cluster: %s\n", line.c_str());
  std::fflush(stderr);
}

// The leadership's deadline as the role enforces it. The planted bug `no_fencing` (the failover
// torture's negative control; the failpoints build only, wal/failpoint.h) drops it: a primary
// then writes for as long as it believes it leads.
std::chrono::steady_clock::time_point Deadline(std::chrono::steady_clock::time_point until) {
  if (SUNDIAL_BUG("no_fencing")) return std::chrono::steady_clock::time_point::max();
  return until;
}

RoleKind RoleOf(const std::string& role) {
  if (role == "primary") return RoleKind::kPrimary;
  if (role == "standby") return RoleKind::kStandby;
  return RoleKind::kUnknown;
}

}  // namespace

ReplicaNode::ReplicaNode(const Options& options, Core* core, Engine* engine,
                         wal::GroupCommitLog* log, wal::FileSystem* fs, FloorClock* clock,
                         RestartRequest restart)
    : options_(options),
      core_(core),
      engine_(engine),
      log_(log),
      fs_(fs),
      clock_(clock),
      restart_(std::move(restart)),
      timeout_(options.replication_timeout_ms),
      state_(fs, options.data_dir),
      hub_(log, options.replication == "sync") {
  // Before the loops start (Server::Start): a scrape may come as soon as they do.
  core_->set_cluster_figures([this](ClusterFigures* f) { Figures(f); });
}

ReplicaNode::~ReplicaNode() { Stop(); }

Status ReplicaNode::Start(replication::NodeAddresses addresses) {
  if (Status s = state_.Load(options_.cluster, options_.node_name); !s.ok()) return s;
  // The log tells the hub when it wrote: the primary's sessions ship at once.
  log_->SetWrittenObserver([this] { hub_.Written(); });
  replication::StandbyEnv env;
  env.log = log_;
  env.engine = engine_;
  env.observer = core_;
  env.clock = clock_;
  env.promise = &state_;
  env.fs = fs_;
  env.dir = options_.data_dir;
  env.cluster = options_.cluster;
  env.node = options_.node_name;
  env.token = core_->auth_token();
  StandbyLinkOptions link_options;
  link_options.timeout = timeout_;
  link_options.tls = core_->tls() != nullptr;
  link_options.ca_file = options_.tls_ca_file;
  link_ = std::make_unique<StandbyLink>(std::move(env), link_options,
                                        [this](replication::ReloadRequest r) {
                                          if (restarting_.exchange(true)) return;
                                          Log("reloading this node's state: " + r.why);
                                          restart_(std::move(r));
                                        });
  replication::CoordinatorOptions o;
  o.cluster = options_.cluster;
  o.node = options_.node_name;
  o.addresses = addresses;
  auto endpoints = replication::ParseEtcdEndpoints(options_.etcd);
  if (!endpoints.ok())
    return Status(Code::kInvalidArgument, "--etcd: " + endpoints.error().message);
  o.etcd = *endpoints;
  o.sync_replication = options_.replication == "sync";
  o.loop_interval = std::chrono::milliseconds(options_.ha_loop_ms);
  o.ttl_seconds = options_.leader_ttl_s;
  o.renew_margin =
      std::chrono::milliseconds(std::min<int64_t>(options_.leader_ttl_s * 1000 / 4, 1000));
  o.etcd_timeout = std::chrono::milliseconds(
      std::max<int64_t>(100, std::min<int64_t>(options_.ha_loop_ms * 2, 1000)));
  addresses_ = o.addresses;
  coordinator_ = std::make_unique<replication::Coordinator>(o, this);
  core_->set_switchover([this](std::string_view to, std::function<void(Status)> done) {
    coordinator_->RequestSwitchover(std::string(to), std::move(done));
  });
  coordinator_->Start();
  return Status::Ok();
}

void ReplicaNode::Stop() {
  if (coordinator_) coordinator_->Stop();
  if (link_) link_->Stop();
  // The log outlives this node and the io loops (main.cc closes it once the server is gone, and
  // that close writes what is pending): from here on no write may wake a replication session.
  log_->SetWrittenObserver(nullptr);
}

uint64_t ReplicaNode::EndLsn() const { return log_->AppendedEndLsn(); }
uint64_t ReplicaNode::FlushedLsn() const { return log_->DurableEnd(); }

void ReplicaNode::Follow(const replication::LeaderInfo& leader) {
  // Promised before the first byte to it: records of an older epoch are refused from here on.
  if (Status s = state_.Promise(leader.epoch); !s.ok()) {
    Log("cannot promise epoch " + std::to_string(leader.epoch) + ": " + s.ToString());
    return;
  }
  {
    MutexLock lock(&mu_);
    leader_ = leader;
  }
  primary_.store(false);
  epoch_.store(leader.epoch);
  Log("following " + leader.node + " (epoch " + std::to_string(leader.epoch) + ") at " +
      leader.addresses.replication_addr);
  link_->Follow(leader);
}

void ReplicaNode::StopFollowing() {
  link_->Stop();
  MutexLock lock(&mu_);
  leader_.reset();
}

Status ReplicaNode::Promote(uint64_t epoch, std::chrono::steady_clock::time_point until) {
  if (Status s = state_.Promise(epoch); !s.ok()) return s;
  // The epoch's first record, durable here before the first write is taken. Its time is never
  // behind an effect this node holds (the clock's floor).
  const uint64_t start = log_->AppendedEndLsn();
  if (Status s = engine_->StartEpoch(epoch, start); !s.ok()) return s;
  if (Status s = log_->WaitDurable(log_->AppendedEndLsn(), /*local_only=*/true); !s.ok()) {
    return s;
  }
  hub_.BeginEpoch();
  epoch_.store(epoch);
  primary_.store(true);
  core_->role()->SetWritableUntil(Deadline(until));
  ClusterInfo info = core_->role()->cluster();
  info.epoch = epoch;
  info.primary = options_.node_name;
  info.primary_addr = addresses_.addr;
  // The view as a standby named this node as the old primary's synchronous standby: a new
  // primary has none until it publishes one (a switchover asked meanwhile would be refused).
  info.sync_standby.clear();
  for (MemberInfo& m : info.members) m.sync = false;
  core_->role()->Set(RoleKind::kPrimary, epoch, std::move(info));
  core_->timers().Notify();  // timers run on a primary only
  promotions_.fetch_add(1);
  Log("promoted: this node is the primary of epoch " + std::to_string(epoch) + " from LSN " +
      std::to_string(start));
  return Status::Ok();
}

void ReplicaNode::ExtendLeadership(std::chrono::steady_clock::time_point until) {
  core_->role()->SetWritableUntil(Deadline(until));
}

void ReplicaNode::Demote(const std::string& why) {
  const bool was = primary_.exchange(false);
  ClusterInfo info = core_->role()->cluster();
  info.primary.clear();
  info.primary_addr.clear();
  core_->role()->Set(RoleKind::kUnknown, epoch_.load(), std::move(info));
  if (!was) return;
  demotions_.fetch_add(1);
  Log("demoted: " + why);
  // No mutation passes the role check any more; what waits for a standby may never be
  // acknowledged by one: answered as unknown, before the bound that holds it goes.
  FailWaitingReplies("not primary any more (" + why +
                     "): the change may or may not be applied; retry with the new primary");
  hub_.EndEpoch();
}

void ReplicaNode::FailWaitingReplies(const std::string& why) {
  Mutex mu;
  CondVar cv;
  size_t left = core_->loops().size();
  for (Loop* loop : core_->loops()) {
    loop->Post([loop, &why, &mu, &cv, &left] {
      loop->FailHeld(why);
      MutexLock lock(&mu);
      if (--left == 0) cv.SignalAll();
    });
  }
  MutexLock lock(&mu);
  while (left != 0) cv.Wait(&mu);
}

std::vector<replication::StandbyProgress> ReplicaNode::Standbys() const { return hub_.Standbys(); }

uint64_t ReplicaNode::RequireAcks(const std::vector<std::string>& standbys) {
  return hub_.RequireAcks(standbys);
}

void ReplicaNode::Publish(const replication::CoordinatorView& view) {
  ClusterInfo info;
  info.cluster = view.cluster;
  info.node = view.node;
  info.replication = options_.replication;
  // A view that still names this node as the leader after it stepped down (read before the
  // demotion) would send clients back to it for a round: no primary is known until the next.
  const bool stale_self = view.leader && view.leader->node == view.node && !primary_.load();
  if (view.leader) info.epoch = view.leader->epoch;
  if (view.leader && !stale_self) {
    info.primary = view.leader->node;
    info.primary_addr = view.leader->addresses.addr;
  }
  // Right after a switchover or a failover the key still names the new primary (it was the
  // synchronous standby) until that primary publishes its own: no synchronous standby yet, or a
  // client would be told it can switch over when the primary would refuse.
  if (view.sync && (!view.leader || view.sync->standby != view.leader->node)) {
    info.sync_standby = view.sync->standby;
  }
  etcd_reachable_.store(view.etcd_reachable);
  {
    MutexLock lock(&mu_);
    sync_standby_ = info.sync_standby;
  }
  const std::vector<replication::StandbyProgress> standbys = hub_.Standbys();
  uint64_t primary_end = 0;
  for (const replication::MemberView& m : view.members) {
    if (view.leader && m.node == view.leader->node) primary_end = m.end_lsn;
  }
  if (primary_.load()) primary_end = log_->AppendedEndLsn();
  const auto now = std::chrono::steady_clock::now();
  // What the primary knows first hand: its own record of a standby's acknowledgements.
  const auto lag_from_acks = [&](const replication::StandbyProgress& s, MemberInfo* mi) {
    mi->flushed_lsn = std::max(mi->flushed_lsn, s.acked_end);
    mi->end_lsn = std::max(mi->end_lsn, mi->flushed_lsn);  // its key may be a round older
    mi->lag_records = primary_end > s.acked_end ? primary_end - s.acked_end : 0;
    mi->lag_ms =
        mi->lag_records == 0 || s.acked_end == 0
            ? 0
            : std::chrono::duration_cast<std::chrono::milliseconds>(now - s.last_ack).count();
  };
  for (const replication::MemberView& m : view.members) {
    MemberInfo mi;
    mi.node = m.node;
    mi.role = RoleOf(m.role);
    mi.addr = m.addresses.addr;
    mi.http_addr = m.addresses.http_addr;
    mi.replication_addr = m.addresses.replication_addr;
    mi.epoch = m.epoch;
    mi.end_lsn = m.end_lsn;
    mi.flushed_lsn = m.flushed_lsn;
    mi.sync = !info.sync_standby.empty() && m.node == info.sync_standby;
    if (mi.role == RoleKind::kStandby) {
      mi.lag_records = primary_end > m.flushed_lsn ? primary_end - m.flushed_lsn : 0;
      for (const auto& s : standbys) {
        if (s.node == m.node && s.connected) lag_from_acks(s, &mi);
      }
    }
    info.members.push_back(std::move(mi));
  }
  for (const MemberInfo& m : info.members) last_seen_[m.node] = SeenMember{m, now};
  // A member whose key is gone (its process or its machine died, its lease expired) stays in
  // the answer, as `unknown`, so that an operator sees a node missing rather than a smaller
  // cluster: a primary's standby with what it acknowledged and since when (first hand), any
  // other member as it was last seen, `lag_ms` counting from then.
  const auto listed = [&info](const std::string& node) {
    return std::any_of(info.members.begin(), info.members.end(),
                       [&node](const MemberInfo& m) { return m.node == node; });
  };
  if (primary_.load()) {
    for (const auto& s : standbys) {
      if (listed(s.node) || s.connected) continue;
      MemberInfo mi;
      mi.node = s.node;
      mi.role = RoleKind::kUnknown;
      mi.epoch = info.epoch;
      mi.end_lsn = s.acked_end;
      lag_from_acks(s, &mi);
      info.members.push_back(std::move(mi));
    }
  }
  for (const auto& entry : last_seen_) {
    const SeenMember& seen = entry.second;
    if (listed(entry.first)) continue;
    MemberInfo mi = seen.info;
    mi.role = RoleKind::kUnknown;
    mi.sync = false;
    mi.lag_records = primary_end > mi.flushed_lsn ? primary_end - mi.flushed_lsn : 0;
    mi.lag_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - seen.at).count();
    info.members.push_back(std::move(mi));
  }
  RoleKind kind = RoleKind::kUnknown;
  if (primary_.load()) {
    kind = RoleKind::kPrimary;
  } else {
    MutexLock lock(&mu_);
    if (leader_) kind = RoleKind::kStandby;
  }
  const uint64_t epoch = primary_.load() ? epoch_.load() : info.epoch;
  core_->role()->Set(kind, epoch, std::move(info));
}

void ReplicaNode::Figures(ClusterFigures* f) const {
  f->cluster = options_.cluster;
  f->node = options_.node_name;
  f->replication = options_.replication;
  f->etcd_reachable = etcd_reachable_.load();
  f->promotions = promotions_.load();
  f->demotions = demotions_.load();
  if (f->role == RoleKind::kPrimary) {
    const uint64_t end = log_->AppendedEndLsn();
    const auto now = std::chrono::steady_clock::now();
    {
      MutexLock lock(&mu_);
      f->sync_standby = sync_standby_;
    }
    for (const replication::StandbyProgress& s : hub_.Standbys()) {
      ClusterFigures::Standby out;
      out.node = s.node;
      out.connected = s.connected;
      out.lag_records = end > s.acked_end ? end - s.acked_end : 0;
      if (out.lag_records > 0) {
        out.lag_seconds = std::chrono::duration<double>(now - s.last_ack).count();
      }
      if (s.node == f->sync_standby) f->sync_standby_connected = s.connected;
      f->standbys.push_back(std::move(out));
    }
  } else if (f->role == RoleKind::kStandby && link_) {
    f->primary_connected = link_->connected();
    const uint64_t primary_end = link_->primary_end();
    const uint64_t flushed = log_->DurableEnd();
    f->lag_records = primary_end > flushed ? primary_end - flushed : 0;
  }
}

std::optional<replication::PrimaryEnv> ReplicaNode::StreamEnv() {
  if (!primary_.load()) return std::nullopt;
  replication::PrimaryEnv env;
  env.log = log_;
  env.engine = engine_;
  env.fs = fs_;
  env.dir = options_.data_dir;
  env.cluster = options_.cluster;
  env.token = core_->auth_token();
  env.epoch = epoch_.load();
  env.on_newer_epoch = [](uint64_t epoch) {
    Log("a standby promised epoch " + std::to_string(epoch) + ": a newer primary exists");
  };
  return env;
}

}  // namespace sundial::server
