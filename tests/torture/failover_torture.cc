// The failover torture (docs/testing.md, "Failover torture"): etcd and three sundiald nodes on
// loopback (tests/torture/cluster_under_test.h), producers and workers that find the primary
// themselves, a seeded nemesis that kills, pauses and cuts off the primary, its synchronous
// standby and etcd, and at the end, once everything is healed, every node's inventory, LSN and
// state digest; the checker (tests/torture/checker.h) judges the whole history.
//
//   failover_torture run --server BIN --dir DIR [--rounds N] [--seed S]
//       [--replication sync|async] [--nemesis KIND,...] [--bug NAME] [--replication-delay-ms MS]
//       [--restart-delay-ms MS] [--producers N] [--workers N] [--pace-ms MS]
//       [--expect clean|lost|violations]
//   failover_torture check DIR
//
// Nemesis kinds: kill-primary, pause-primary, partition-primary-etcd,
// partition-primary-standbys, partition-clients-primary, kill-sync-standby, pause-etcd,
// switchover, rolling-restart (default: all).
//
// Exit status: 0 the outcome expected (--expect clean, the default: no violation, the cluster
// healed, every node at one LSN and one digest; lost: the checker found lost writes; violations:
// it found any), 1 another outcome, 2 the harness itself failed.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "engine/clock.h"
#include "engine/engine.h"
#include "tests/torture/checker.h"
#include "tests/torture/cluster_under_test.h"
#include "tests/torture/history.h"
#include "tests/torture/inventory.h"
#include "wal/file.h"
#include "wal/recovery.h"

namespace fs = std::filesystem;
namespace p = sundial::protocol;
using sundial::client::Client;
using Millis = std::chrono::milliseconds;

namespace sundial::torture {
namespace {

constexpr int64_t kLeaseMs = 5'000;    // a worker's lease (kept across a failover)
constexpr int64_t kSlowLeaseMs = 700;  // a slow worker's: it completes after 1 s, too late
constexpr int64_t kSlowWorkMs = 1'000;
constexpr uint32_t kMaxAttempts = 1'000'000;  // nothing is ever errored
constexpr int64_t kRetentionMs = 86'400'000;  // terminal messages stay readable
constexpr int kCallTimeoutMs = 4'000;         // a client's call (a blackholed link ends so)
constexpr int kProbeTimeoutMs = 1'000;        // asking a node who the primary is
// An enqueue, complete or fail without a definite answer is sent again for so long.
constexpr int64_t kResendForNs = 30'000'000'000;
constexpr int kExclusivityValues = 8;
const char* const kQueues[] = {"plain", "filter", "excl"};
const char* const kAllNemeses[] = {"kill-primary",
                                   "pause-primary",
                                   "partition-primary-etcd",
                                   "partition-primary-standbys",
                                   "partition-clients-primary",
                                   "kill-sync-standby",
                                   "pause-etcd",
                                   "switchover",
                                   "rolling-restart"};

int64_t NowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double Seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

bool IsMutation(const Op& op) {
  return op.kind == "enqueue" || op.kind == "complete" || op.kind == "fail" ||
         (op.kind == "dequeue" && !op.leased.empty());
}

// An acknowledged write: when it was sent and answered, and by which node.
struct Ack {
  int64_t t0 = 0, t1 = 0;
  int node = -1;
};

// ---- Clients that find the primary ---------------------------------------------------------

// One client thread's connection to whichever node it believes is the primary, and what it
// recorded. It asks the nodes (through their client proxies) who the primary is, follows a
// NOT_PRIMARY refusal to another node it names, and after a connection failure or an
// UNAVAILABLE (an outcome unknown) asks again. While calls keep failing it backs off (50 ms
// doubling to 800 ms) before it dials, so a node that accepts and drops connections (its proxy
// up, the node behind it down) is not dialed in a loop.
class Session {
 public:
  Session(const ClusterUnderTest& cluster, std::string name, uint64_t seed,
          const std::atomic<bool>& stop, std::atomic<int64_t>* last_ack)
      : cluster_(cluster), name_(std::move(name)), rng_(seed), stop_(stop), last_ack_(last_ack) {}

  const std::string& name() const { return name_; }
  std::vector<Op>& ops() { return ops_; }
  std::vector<std::string>& meta() { return meta_; }
  const std::vector<Ack>& acks() const { return acks_; }
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool stopping() const { return stop_.load(); }

  // Sends one request (`call` on the primary's client) and records it as an op of `kind`;
  // `on_ok` reads an answered reply (and may turn the outcome into a per-item error). Nothing,
  // when the run is stopping before a primary was found.
  template <typename Call, typename OnOk>
  std::optional<Op> Exec(Op op, Call call, OnOk on_ok) {
    Client* c = Primary();
    if (c == nullptr) return std::nullopt;
    const int node = node_;
    op.client = name_;
    op.t0 = NowNs();
    auto r = call(*c);
    op.t1 = NowNs();
    if (r.ok()) {
      op.outcome = Outcome::kOk;
      failures_ = 0;
      on_ok(r.value(), op);
    } else {
      op.outcome = Failed(r.error());
      op.error = op.outcome == Outcome::kError ? std::string(CodeName(r.error().code)) : "";
      if (op.outcome == Outcome::kNone || op.error == "NOT_PRIMARY") {
        Explain(op, node,
                r.error().ToString() +
                    (r.error().primary.empty() ? "" : " [primary " + r.error().primary + "]"));
      }
    }
    if (op.outcome == Outcome::kOk && IsMutation(op)) {
      acks_.push_back({op.t0, op.t1, node});
      int64_t seen = last_ack_->load();
      while (op.t1 > seen && !last_ack_->compare_exchange_weak(seen, op.t1)) {
      }
    }
    ops_.push_back(op);
    return op;
  }

  static Op NewOp(const char* kind, const std::string& queue, const std::string& id, int64_t arg) {
    Op op;
    op.kind = kind;
    op.queue = queue;
    op.id = id;
    op.arg = arg;
    return op;
  }

  // One line of the session's log (DIR/clients/NAME.log): why a request had no definite answer.
  void Explain(const Op& op, int node, const std::string& why) {
    explained_.push_back(std::to_string(op.t0) + " " + std::to_string(op.t1) + " " + op.kind + " " +
                         op.queue + " " + op.id + " on node " + std::to_string(node + 1) + ": " +
                         why);
  }
  const std::vector<std::string>& explained() const { return explained_; }

  // What a failed call means (kError: it did not run; kNone: unknown), and where to go next: a
  // NOT_PRIMARY refusal names the primary; after an UNAVAILABLE or a lost connection the
  // primary is looked for again.
  Outcome Failed(const client::Error& e) {
    const bool server = e.origin == client::Error::Origin::kServer;
    if (server && e.code != Code::kUnavailable && e.code != Code::kNotPrimary) {
      failures_ = 0;
      return Outcome::kError;
    }
    ++failures_;
    // Another node named as the primary is dialed at once; no name, or this very node (which
    // cannot renew its leadership), means looking again after the backoff.
    const std::string here = node_ >= 0 ? cluster_.ClientAddress(node_) : "";
    if (e.code == Code::kNotPrimary && !e.primary.empty() && e.primary != here) {
      redirect_ = e.primary;
      failures_ = 0;
    }
    client_.reset();
    // NOT_PRIMARY: refused before it ran; anything else: it may or may not have happened.
    return server && e.code == Code::kNotPrimary ? Outcome::kError : Outcome::kNone;
  }

  // A client connected to the node believed to be the primary; nullptr once stopping.
  Client* Primary() {
    auto backoff = Millis(50);
    while (!stop_.load()) {
      if (client_ && client_->connected()) return client_.get();
      client_.reset();
      if (failures_ > 0) {
        // The last calls failed: a node that accepts and drops connections (its proxy is up,
        // the node behind it down) must not be dialed in a loop. A backoff, not a wait for a
        // state.
        const int shift = std::min(failures_ - 1, 4);
        std::this_thread::sleep_for(Millis(50) * (1 << shift));
      }
      std::string target;
      target.swap(redirect_);
      if (target.empty()) target = Discover();
      if (!target.empty()) {
        auto address = client::ParseAddress(target);
        if (address.ok()) {
          auto c = Client::Connect(*address, {}, kCallTimeoutMs);
          if (c.ok()) {
            client_ = std::move(c).value();
            node_ = cluster_.NodeOfAddress(target);
            return client_.get();
          }
        }
      }
      std::this_thread::sleep_for(backoff);  // a backoff between attempts, not a wait for a state
      backoff = std::min(backoff * 2, Millis(500));
    }
    return nullptr;
  }

 private:
  // Asks the nodes in turn (from a random one) who the primary is; "" when none knows.
  std::string Discover() {
    const auto addresses = cluster_.ClientAddresses();
    const int n = static_cast<int>(addresses.size());
    const int first = Pick(n);
    for (int k = 0; k < n && !stop_.load(); ++k) {
      auto address = client::ParseAddress(addresses[(first + k) % n]);
      if (!address.ok()) continue;
      auto c = Client::Connect(*address, {}, kProbeTimeoutMs);
      if (!c.ok()) continue;
      auto r = c.value()->Cluster();
      if (!r.ok()) continue;
      const auto* result = r->result<p::ClusterResult>();
      if (result != nullptr && result->primary_addr() != nullptr &&
          result->primary_addr()->size() > 0) {
        return result->primary_addr()->str();
      }
    }
    return "";
  }

  const ClusterUnderTest& cluster_;
  const std::string name_;
  std::mt19937_64 rng_;
  const std::atomic<bool>& stop_;
  std::atomic<int64_t>* last_ack_;
  std::unique_ptr<Client> client_;
  int node_ = -1;
  std::string redirect_;
  int failures_ = 0;  // calls in a row without a definite answer
  std::vector<Op> ops_;
  std::vector<std::string> meta_;
  std::vector<Ack> acks_;
  std::vector<std::string> explained_;
};

// The outcome of a single-item ItemResults reply (complete).
void ItemOutcome(const client::Reply& reply, Op& op) {
  const auto* result = reply.result<p::ItemResults>();
  const auto* items = result != nullptr ? result->items() : nullptr;
  if (items == nullptr || items->size() != 1) {
    op.outcome = Outcome::kError;
    op.error = "BAD_REPLY";
    return;
  }
  const p::Code code = items->Get(0)->code();
  if (code == p::Code::OK) return;
  op.outcome = code == p::Code::UNAVAILABLE ? Outcome::kNone : Outcome::kError;
  op.error = p::EnumNameCode(code);
}

// Whether an op should be sent again: it was not answered, or refused by a node that is not
// the primary (it did not run).
bool Resend(const Op& op) {
  return op.outcome == Outcome::kNone ||
         (op.outcome == Outcome::kError && op.error == "NOT_PRIMARY");
}

// Enqueues messages with ids of its own, each resent with its id until it is answered.
void Producer(Session& s, int pace_ms) {
  for (uint64_t seq = 0; !s.stopping(); ++seq) {
    const int which = s.Pick(3);
    const std::string q = kQueues[which];
    client::EnqueueItem item;
    item.id = s.name() + "-" + std::to_string(seq);
    item.priority = s.Pick(1000);
    item.payload = "payload of " + item.id;
    if (which == 1) item.metadata = {{"color", s.Pick(2) ? "red" : "blue"}};
    if (which == 2) {
      const std::string value = "v" + std::to_string(s.Pick(kExclusivityValues));
      item.metadata = {{"k", value}};
      s.meta().push_back("meta " + q + " " + item.id + " " + value);
    }
    for (const int64_t until = NowNs() + kResendForNs; NowNs() < until;) {
      auto op = s.Exec(
          Session::NewOp("enqueue", q, item.id, item.priority),
          [&](Client& c) { return c.Enqueue(q, {item}); },
          [](const client::Reply& reply, Op& o) {
            const auto* result = reply.result<p::EnqueueResults>();
            const auto* items = result != nullptr ? result->items() : nullptr;
            if (items == nullptr || items->size() != 1) {
              o.outcome = Outcome::kError;
              o.error = "BAD_REPLY";
            } else if (const auto* e = items->Get(0)->error()) {
              o.outcome = e->code() == p::Code::UNAVAILABLE ? Outcome::kNone : Outcome::kError;
              o.error = p::EnumNameCode(e->code());
            }
          });
      if (!op || !Resend(*op)) break;
    }
    if (pace_ms > 0) std::this_thread::sleep_for(Millis(s.Pick(2 * pace_ms)));  // the load's pace
  }
}

// Completes (or fails) one lease, resending it with its token until it is answered.
void UseLease(Session& s, const std::string& q, const std::string& id, uint64_t token, bool fail) {
  for (const int64_t until = NowNs() + kResendForNs; NowNs() < until;) {
    std::optional<Op> op;
    if (fail) {
      client::FailOptions f;
      f.error = "torture";
      f.retry_delay_ms = 20;
      op = s.Exec(
          Session::NewOp("fail", q, id, static_cast<int64_t>(token)),
          [&](Client& c) { return c.Fail(q, id, token, f); }, [](const client::Reply&, Op&) {});
    } else {
      op = s.Exec(
          Session::NewOp("complete", q, id, static_cast<int64_t>(token)),
          [&](Client& c) {
            return c.Complete(q, {{id, token, ResultFor(id, token)}});
          },
          ItemOutcome);
    }
    if (!op || !Resend(*op)) return;
  }
}

// Dequeues (one in thirty with a lease too short for its work: its complete comes late and must be
// refused if the message was leased again) and completes, fails (one in ten) or abandons (one
// in twenty, left to expire) what it got.
void Worker(Session& s) {
  while (!s.stopping()) {
    const int which = s.Pick(3);
    const std::string q = kQueues[which];
    const bool slow = s.Pick(30) == 0;
    client::DequeueOptions o;
    o.max = 1 + static_cast<uint32_t>(s.Pick(3));
    o.lease_ms = slow ? kSlowLeaseMs : kLeaseMs;
    o.wait_ms = 100;
    std::string filter = "-";
    if (which == 1 && s.Pick(2)) {
      o.filter = {{"color", "red"}};
      filter = "color=red";
    }
    Op start = Session::NewOp("dequeue", q, filter, 0);
    start.lease_ms = *o.lease_ms;
    auto op = s.Exec(
        start, [&](Client& c) { return c.Dequeue(q, o); },
        [](const client::Reply& reply, Op& d) {
          const auto* result = reply.result<p::DequeueResult>();
          if (result == nullptr || result->messages() == nullptr) return;
          for (const p::Message* m : *result->messages()) {
            d.leased.emplace_back(m->id()->str(), m->lease_token());
          }
          d.arg = static_cast<int64_t>(d.leased.size());
        });
    if (!op || op->outcome != Outcome::kOk || op->leased.empty()) continue;
    if (slow) std::this_thread::sleep_for(Millis(kSlowWorkMs));  // the work outlasts the lease
    for (const auto& [id, token] : op->leased) {
      const int roll = s.Pick(20);
      if (roll == 0) continue;  // abandoned: the lease runs out
      UseLease(s, q, id, token, /*fail=*/roll <= 2);
    }
  }
}

// ---- The orchestrator ----------------------------------------------------------------------

struct Options {
  std::string server;
  std::string dir;
  int rounds = 10;
  uint64_t seed = 1;
  std::string replication = "sync";
  std::vector<std::string> nemeses;  // empty: all
  std::string bug;
  int replication_delay_ms = 0;
  int restart_delay_ms = -1;  // -1: chosen by the seed
  int producers = 3;
  int workers = 4;
  int pace_ms = 20;
  std::string expect = "clean";
};

// One fault the nemesis injected.
struct Fault {
  std::string kind;
  int round = 0;
  int target = -1;    // the node it hit (-1: etcd, or none)
  int64_t start = 0;  // injected
  int64_t heal = 0;   // removed (the node restarted, resumed, the link back)
  std::string note;
};

class FailoverTorture {
 public:
  explicit FailoverTorture(Options o) : o_(std::move(o)), rng_(o_.seed) {}

  int Run() {
    fs::remove_all(o_.dir);
    fs::create_directories(o_.dir + "/history");
    nemesis_log_ = std::fopen((o_.dir + "/nemesis.log").c_str(), "w");
    ClusterOptions co;
    co.server = o_.server;
    co.dir = o_.dir;
    co.replication = o_.replication;
    co.bug = o_.bug;
    co.replication_delay = Millis(o_.replication_delay_ms);
    cluster_ = std::make_unique<ClusterUnderTest>(co);
    const int64_t began = NowNs();
    if (!cluster_->Start()) return Harness(cluster_->why());
    Note("cluster up: etcd on %u; nodes %s, %s, %s (client proxies)",
         cluster_->etcd().client_port(), cluster_->ClientAddress(0).c_str(),
         cluster_->ClientAddress(1).c_str(), cluster_->ClientAddress(2).c_str());
    if (!CreateQueues()) return Harness("the queues could not be created within 60 s");

    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<std::thread> threads;
    for (int i = 0; i < o_.producers + o_.workers; ++i) {
      const bool producer = i < o_.producers;
      sessions.push_back(std::make_unique<Session>(
          *cluster_, (producer ? "p" : "w") + std::to_string(i), rng_(), stop_, &last_ack_));
      Session* s = sessions.back().get();
      const int pace = o_.pace_ms;
      threads.emplace_back([s, producer, pace] {
        if (producer) {
          Producer(*s, pace);
        } else {
          Worker(*s);
        }
      });
    }
    WaitForAckAfter(NowNs(), Millis(30'000));

    for (int round = 0; round < o_.rounds; ++round) {
      std::this_thread::sleep_for(Millis(Pick(1500, 3000)));  // the quiet between two faults
      RestartNodesThatDied();
      Fault f = Inject(ChooseNemesis(round), round);
      const bool recovered = WaitForAckAfter(f.heal, Millis(30'000));
      if (!recovered) {
        Finding("round " + std::to_string(round) + " (" + f.kind +
                "): no write acknowledged within 30 s after the fault was healed");
      }
      Note("round %d: %s on %s %s%s", round, f.kind.c_str(), TargetName(f.target).c_str(),
           f.note.c_str(), recovered ? "" : " NOT RECOVERED");
      faults_.push_back(std::move(f));
    }

    // Heal everything, let the clients see the healed cluster, then stop them.
    HealAll();
    const bool converged = WaitConverged(Millis(60'000));
    if (!converged) Finding("the cluster did not converge within 60 s of healing");
    WaitForAckAfter(NowNs(), Millis(10'000));
    stop_.store(true);
    for (auto& t : threads) t.join();
    Note("clients stopped");
    Session drain(*cluster_, "drain", rng_(), drain_stop_, &last_ack_);
    const bool drained = converged && Drain(drain);
    std::vector<Session*> all;
    for (auto& s : sessions) all.push_back(s.get());
    all.push_back(&drain);
    WriteHistory(all);

    // Every node: one LSN, one inventory, one digest.
    bool same = false;
    if (converged && WaitSameLsn(Millis(30'000))) {
      same = ReadInventories();
    } else if (converged) {
      Finding("the nodes did not reach one LSN within 30 s of the drain");
    }
    const bool stopped = StopNodes();
    const bool digests = CompareDigests();
    const int64_t ended = NowNs();

    History h;
    std::string error;
    if (!LoadHistory(o_.dir, &h, &error)) return Harness(error);
    const Report report = Check(h);
    PrintFigures(all, Seconds(ended - began));
    std::printf("checker: %s", report.Summary().c_str());
    for (const std::string& f : findings_) std::printf("finding: %s\n", f.c_str());
    if (nemesis_log_ != nullptr) std::fclose(nemesis_log_);
    nemesis_log_ = nullptr;
    cluster_->Stop();

    const bool clean = report.violations.empty() && findings_.empty() && converged && drained &&
                       same && stopped && digests;
    bool as_expected = false;
    if (o_.expect == "clean") as_expected = clean;
    if (o_.expect == "lost") as_expected = report.lost > 0;
    if (o_.expect == "violations") as_expected = !report.violations.empty();
    std::printf("failover torture: %s (expected: %s)\n",
                clean ? "clean" : (report.violations.empty() ? "findings" : "VIOLATIONS"),
                o_.expect.c_str());
    return as_expected ? 0 : 1;
  }

 private:
  // A finding (not a checker violation: the cluster did not do what it should, in time), noted
  // with its time.
  void Finding(const std::string& what) {
    findings_.push_back(what);
    Note("finding: %s", what.c_str());
  }

  int Harness(const std::string& why) {
    std::fprintf(stderr, "failover torture: %s (logs in %s)\n", why.c_str(), o_.dir.c_str());
    if (cluster_) cluster_->Stop();
    return 2;
  }

  template <typename... Args>
  void Note(const char* format, Args... args) {
    char line[1024];
    std::snprintf(line, sizeof line, format, args...);
    const double t = Seconds(NowNs() - start_ns_);
    std::printf("[%7.2f] %s\n", t, line);
    std::fflush(stdout);
    if (nemesis_log_ != nullptr) {
      std::fprintf(nemesis_log_, "%lld %s\n", static_cast<long long>(NowNs()), line);
      std::fflush(nemesis_log_);
    }
  }

  int Pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::string TargetName(int target) const {
    return target < 0 ? std::string("-") : cluster_->node(target).name();
  }

  std::string ChooseNemesis(int round) {
    std::vector<std::string> kinds = o_.nemeses;
    if (kinds.empty()) kinds.assign(std::begin(kAllNemeses), std::end(kAllNemeses));
    // Each kind in turn, in an order the seed shuffles once per cycle through them.
    if (round % static_cast<int>(kinds.size()) == 0) {
      order_ = kinds;
      std::shuffle(order_.begin(), order_.end(), rng_);
    }
    return order_[round % order_.size()];
  }

  // Waits (bounded) until a write is acknowledged after `after`.
  bool WaitForAckAfter(int64_t after, Millis timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (last_ack_.load() <= after) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(Millis(5));  // polling a condition with a deadline
    }
    return true;
  }

  // Waits (bounded) for a node that says it is the primary.
  int WaitForPrimary(Millis timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const int p = cluster_->Primary();
      if (p >= 0 || std::chrono::steady_clock::now() >= deadline) return p;
      std::this_thread::sleep_for(Millis(50));
    }
  }

  bool CreateQueues() {
    std::atomic<bool> never{false};
    std::atomic<int64_t> ignored{0};
    Session s(*cluster_, "setup", rng_(), never, &ignored);
    const auto deadline = std::chrono::steady_clock::now() + Millis(60'000);
    for (const char* name : kQueues) {
      client::QueueSettings settings;
      settings.lease_ms = kLeaseMs;
      settings.max_attempts = kMaxAttempts;
      settings.retention_ms = kRetentionMs;
      settings.retry_backoff_ms = 10;
      settings.retry_backoff_max_ms = 100;
      if (std::string(name) == "excl") {
        settings.type = p::QueueType::exclusive;
        settings.exclusivity_key = "k";
      }
      for (;;) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        auto r = s.Primary()->CreateQueue(name, settings);
        if (r.ok() || (r.error().origin == client::Error::Origin::kServer &&
                       r.error().code == Code::kAlreadyExists)) {
          break;
        }
        (void)s.Failed(r.error());                 // reconnects to the primary
        std::this_thread::sleep_for(Millis(100));  // a backoff before the next attempt
      }
    }
    return true;
  }

  // ---- The nemesis ----

  Fault Inject(const std::string& kind, int round) {
    Fault f;
    f.kind = kind;
    f.round = round;
    const int ttl_ms = cluster_->options().leader_ttl_s * 1000;
    if (kind == "pause-etcd") {
      f.start = NowNs();
      cluster_->etcd().Pause();
      std::this_thread::sleep_for(Millis(Pick(2000, 4000)));
      cluster_->etcd().Resume();
      f.heal = NowNs();
      return f;
    }
    const int primary = WaitForPrimary(Millis(20'000));
    if (primary < 0) {
      f.note = "(skipped: no primary within 20 s)";
      f.start = f.heal = NowNs();
      Finding("round " + std::to_string(round) + ": no primary within 20 s");
      return f;
    }
    f.target = primary;
    NodeProcess& node = cluster_->node(primary);
    if (kind == "kill-primary") {
      f.start = NowNs();
      node.Kill();
      const int delay = o_.restart_delay_ms >= 0 ? o_.restart_delay_ms : Pick(0, 5) * 1000;
      std::this_thread::sleep_for(Millis(delay));
      if (!node.Start(Millis(60'000))) Finding(node.name() + " did not restart");
      f.heal = NowNs();
      f.note = "(restarted after " + std::to_string(delay) + " ms)";
    } else if (kind == "pause-primary") {
      f.start = NowNs();
      node.Pause();
      const int ms = ttl_ms + Pick(500, 2000);  // longer than its lease
      std::this_thread::sleep_for(Millis(ms));
      node.Resume();
      f.heal = NowNs();
      f.note = "(" + std::to_string(ms) + " ms)";
    } else if (kind == "partition-primary-etcd" || kind == "partition-primary-standbys" ||
               kind == "partition-clients-primary") {
      TcpProxy& proxy = kind == "partition-primary-etcd" ? cluster_->etcd_proxy(primary)
                        : kind == "partition-primary-standbys"
                            ? cluster_->replication_proxy(primary)
                            : cluster_->client_proxy(primary);
      f.start = NowNs();
      proxy.SetMode(TcpProxy::Mode::kBlackhole);
      const int ms =
          kind == "partition-primary-etcd" ? ttl_ms + Pick(1000, 3000) : Pick(2000, 5000);
      std::this_thread::sleep_for(Millis(ms));
      const bool reset = Pick(0, 1) == 1;  // the held connections cut, or let through again
      proxy.SetMode(TcpProxy::Mode::kPass);
      if (reset) proxy.ResetAll();
      f.heal = NowNs();
      f.note = "(" + std::to_string(ms) + " ms, then " + (reset ? "reset" : "resumed") + ")";
    } else if (kind == "kill-sync-standby") {
      const int sync = cluster_->SyncStandby();
      if (sync < 0) {
        f.note = "(skipped: no synchronous standby published)";
        f.start = f.heal = NowNs();
        return f;
      }
      f.target = sync;
      NodeProcess& standby = cluster_->node(sync);
      f.start = NowNs();
      standby.Kill();
      const int delay = Pick(500, 4000);
      std::this_thread::sleep_for(Millis(delay));
      if (!standby.Start(Millis(60'000))) Finding(standby.name() + " did not restart");
      f.heal = NowNs();
      f.note = "(restarted after " + std::to_string(delay) + " ms)";
    } else if (kind == "switchover") {
      f.start = NowNs();
      auto c = Client::Connect(cluster_->DirectAddress(primary), {}, 15'000);
      if (c.ok()) {
        auto r = c.value()->Switchover();
        f.note = r.ok() ? "(done)" : "(refused: " + r.error().ToString() + ")";
      } else {
        f.note = "(could not connect: " + c.error().ToString() + ")";
      }
      f.heal = NowNs();
    } else if (kind == "rolling-restart") {
      f.start = NowNs();
      // Standbys first, the primary last; each one waits for its restart before the next goes.
      std::vector<int> order;
      for (int i = 0; i < ClusterUnderTest::kNodes; ++i) {
        if (i != primary) order.push_back(i);
      }
      order.push_back(primary);
      for (int i : order) {
        NodeProcess& n = cluster_->node(i);
        if (!n.Terminate(Millis(20'000))) {
          Finding("rolling restart: " + n.name() + " did not stop cleanly on SIGTERM within 20 s");
        }
        if (!n.Start(Millis(60'000))) Finding(n.name() + " did not restart");
        WaitForPrimary(Millis(20'000));
      }
      f.heal = NowNs();
    } else {
      f.note = "(unknown nemesis)";
      f.start = f.heal = NowNs();
    }
    return f;
  }

  // A node that exited without being told to is a finding; it is started again, and so is one
  // that an earlier start left down.
  void RestartNodesThatDied() {
    for (int i = 0; i < ClusterUnderTest::kNodes; ++i) {
      NodeProcess& n = cluster_->node(i);
      if (auto status = n.ExitedOnItsOwn()) {
        Finding(n.name() + " exited by itself (wait status " + std::to_string(*status) + "; see " +
                n.log() + ")");
      }
      if (!n.running()) {
        Note("starting %s again", n.name().c_str());
        if (!n.Start(Millis(60'000))) Finding(n.name() + " did not restart");
      }
    }
  }

  void HealAll() {
    cluster_->etcd().Resume();
    for (int i = 0; i < ClusterUnderTest::kNodes; ++i) {
      for (TcpProxy* proxy : {&cluster_->client_proxy(i), &cluster_->replication_proxy(i),
                              &cluster_->etcd_proxy(i)}) {
        proxy->SetMode(TcpProxy::Mode::kPass);
      }
      NodeProcess& n = cluster_->node(i);
      n.Resume();
    }
    RestartNodesThatDied();
    for (int i = 0; i < ClusterUnderTest::kNodes; ++i) {
      NodeProcess& n = cluster_->node(i);
      if (!n.running() && !n.Start(Millis(60'000))) {
        Finding(n.name() + " did not restart");
      }
    }
  }

  // Every node names one primary of one epoch, and (sync) a synchronous standby is published.
  bool WaitConverged(Millis timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      std::set<std::pair<std::string, uint64_t>> leaders;
      std::string sync;
      bool all = true;
      for (int i = 0; i < ClusterUnderTest::kNodes; ++i) {
        auto v = cluster_->View(i);
        if (!v || v->primary.empty()) {
          all = false;
          break;
        }
        leaders.insert({v->primary, v->epoch});
        if (v->primary == v->node) sync = v->sync_standby;
      }
      if (all && leaders.size() == 1 && (o_.replication != "sync" || !sync.empty())) {
        Note("converged: primary %s, epoch %llu, synchronous standby %s",
             leaders.begin()->first.c_str(),
             static_cast<unsigned long long>(leaders.begin()->second), sync.c_str());
        return true;
      }
      std::this_thread::sleep_for(Millis(100));
    }
    return false;
  }

  // Dequeues and completes everything left, until no queue has a message that is not terminal
  // (bounded): every pending message must be dequeueable again after the faults.
  bool Drain(Session& s) {
    const auto deadline = std::chrono::steady_clock::now() + Millis(60'000);
    std::set<std::string> done;
    while (done.size() < std::size(kQueues)) {
      bool progress = false;
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string left;
        for (const char* q : kQueues) {
          if (!done.count(q)) left += std::string(" ") + q;
        }
        Finding("drain: messages still not terminal after 60 s in" + left);
        return false;
      }
      for (const char* name : kQueues) {
        const std::string q = name;
        if (done.count(q)) continue;
        client::DequeueOptions o;
        o.max = 100;
        o.lease_ms = 60'000;
        Op start = Session::NewOp("dequeue", q, "-", 0);
        start.lease_ms = *o.lease_ms;
        auto op = s.Exec(
            start, [&](Client& c) { return c.Dequeue(q, o); },
            [](const client::Reply& reply, Op& d) {
              const auto* result = reply.result<p::DequeueResult>();
              if (result == nullptr || result->messages() == nullptr) return;
              for (const p::Message* m : *result->messages()) {
                d.leased.emplace_back(m->id()->str(), m->lease_token());
              }
              d.arg = static_cast<int64_t>(d.leased.size());
            });
        if (!op) return false;
        if (!op->leased.empty()) CompleteAll(s, q, op->leased);
        progress |= !op->leased.empty();
        if (op->outcome != Outcome::kOk || !op->leased.empty()) continue;
        // Nothing dequeued: finished once nothing is left but terminal messages (running ones
        // of lost workers expire within a lease; retries within their delay).
        Client* c = s.Primary();
        auto count = c->Count(q);
        if (!count.ok()) continue;
        const auto* counts = count->result<p::CountResult>();
        const auto* by_state = counts != nullptr ? counts->counts() : nullptr;
        if (by_state != nullptr &&
            by_state->pending() + by_state->running() + by_state->invisible() == 0) {
          done.insert(q);
        }
      }
      if (!progress) std::this_thread::sleep_for(Millis(50));  // leases of lost workers run out
    }
    Note("drained every queue");
    return true;
  }

  // Completes `leased` in one request (recorded as one complete op per message, with the
  // request's times), resending the ones not answered.
  static void CompleteAll(Session& s, const std::string& q,
                          std::vector<std::pair<std::string, uint64_t>> leased) {
    for (const int64_t until = NowNs() + kResendForNs; NowNs() < until && !leased.empty();) {
      Client* c = s.Primary();
      if (c == nullptr) return;
      std::vector<client::CompleteItem> items;
      for (const auto& [id, token] : leased) items.push_back({id, token, ResultFor(id, token)});
      const int64_t t0 = NowNs();
      auto r = c->Complete(q, items);
      const int64_t t1 = NowNs();
      const Outcome whole = r.ok() ? Outcome::kOk : s.Failed(r.error());
      const auto* result = r.ok() ? r->result<p::ItemResults>() : nullptr;
      std::vector<std::pair<std::string, uint64_t>> again;
      for (size_t i = 0; i < leased.size(); ++i) {
        Op op =
            Session::NewOp("complete", q, leased[i].first, static_cast<int64_t>(leased[i].second));
        op.client = s.name();
        op.t0 = t0;
        op.t1 = t1;
        op.outcome = whole;
        if (whole == Outcome::kError) op.error = std::string(CodeName(r.error().code));
        if (whole == Outcome::kOk) {
          const p::Code code =
              result != nullptr && result->items() != nullptr && i < result->items()->size()
                  ? result->items()->Get(static_cast<flatbuffers::uoffset_t>(i))->code()
                  : p::Code::INTERNAL;
          if (code != p::Code::OK) {
            op.outcome = code == p::Code::UNAVAILABLE ? Outcome::kNone : Outcome::kError;
            op.error = p::EnumNameCode(code);
          }
        }
        s.ops().push_back(op);
        if (Resend(op)) again.push_back(leased[i]);
      }
      leased.swap(again);
    }
  }

  // Every node's Stats: one next LSN, all of it durable, twice in a row.
  bool WaitSameLsn(Millis timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    uint64_t previous = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      std::set<uint64_t> next;
      bool durable = true;
      for (int i = 0; i < ClusterUnderTest::kNodes; ++i) {
        auto c = Client::Connect(cluster_->DirectAddress(i), {}, 2000);
        if (!c.ok()) {
          durable = false;
          break;
        }
        auto r = c.value()->Stats();
        if (!r.ok()) {
          durable = false;
          break;
        }
        const auto* stats = r->result<p::StatsResult>();
        next.insert(stats->wal_next_lsn());
        durable &= stats->wal_durable_lsn() == stats->wal_next_lsn();
      }
      if (durable && next.size() == 1) {
        if (*next.begin() == previous) {
          Note("every node at LSN %llu", static_cast<unsigned long long>(previous));
          final_lsn_ = previous;
          return true;
        }
        previous = *next.begin();
      } else {
        previous = 0;
      }
      std::this_thread::sleep_for(Millis(200));
    }
    return false;
  }

  // Each node's inventory into the history (round = the node's number) and compared.
  bool ReadInventories() {
    std::vector<std::string> queues(std::begin(kQueues), std::end(kQueues));
    const int64_t t = NowNs();
    std::string first;
    bool same = true;
    std::ofstream out(o_.dir + "/history/inventory.hist");
    for (int i = 0; i < ClusterUnderTest::kNodes; ++i) {
      auto c = Client::Connect(cluster_->DirectAddress(i), {}, 10'000);
      std::string rows;
      if (!c.ok()) {
        Finding("inventory: cannot connect to " + cluster_->node(i).name());
        return false;
      }
      if (auto error = ReadInventory(*c.value(), queues, t, i + 1, &rows)) {
        Finding("inventory of " + cluster_->node(i).name() + ": " + error->ToString());
        return false;
      }
      out << rows << "inventory-end " << t << ' ' << (i + 1) << '\n';
      // The same rows on every node, but for the round number (each line's third field).
      std::string normal;
      std::istringstream lines(rows);
      for (std::string line; std::getline(lines, line);) {
        std::istringstream fields(line);
        std::string tag, time, round, rest;
        fields >> tag >> time >> round;
        std::getline(fields, rest);
        normal += tag + ' ' + time + rest + '\n';
      }
      if (i == 0) {
        first = normal;
      } else if (normal != first) {
        same = false;
        Finding("inventory of " + cluster_->node(i).name() + " differs from " +
                cluster_->node(0).name() + "'s");
      }
    }
    Note("inventories read from every node: %s", same ? "identical" : "DIFFERENT");
    return same;
  }

  // Standbys first, then the primary (so no node is left to take over and write an epoch).
  bool StopNodes() {
    const int primary = cluster_->Primary();
    std::vector<int> order;
    for (int i = 0; i < ClusterUnderTest::kNodes; ++i) {
      if (i != primary) order.push_back(i);
    }
    if (primary >= 0) order.push_back(primary);
    bool clean = true;
    for (int i : order) {
      NodeProcess& n = cluster_->node(i);
      if (n.running() && !n.Terminate(Millis(20'000))) {
        clean = false;
        Finding(n.name() + " did not stop cleanly on SIGTERM within 20 s");
      }
    }
    return clean;
  }

  // Each data directory recovered offline: its end LSN and its state's digest.
  bool CompareDigests() {
    struct NullSink final : EffectSink {
      void OnEffect(const Effect&) override {}
    };
    NullSink sink;
    SystemClock clock;
    auto files = wal::NewPosixFileSystem();
    std::set<std::pair<uint64_t, uint64_t>> seen;
    std::string line;
    for (int i = 0; i < ClusterUnderTest::kNodes; ++i) {
      wal::Recovered recovered;
      const Status s = wal::Recover(
          files.get(), cluster_->node(i).data_dir(),
          [&] { return std::make_unique<Engine>(Engine::Options{}, &clock, &sink); }, {},
          &recovered);
      if (!s.ok()) {
        Finding("recovery of " + cluster_->node(i).data_dir() + ": " + s.ToString());
        return false;
      }
      const uint64_t digest = recovered.engine->Digest();
      const uint64_t lsn = recovered.report.next_lsn;
      seen.insert({lsn, digest});
      char part[96];
      std::snprintf(part, sizeof part, " %s: LSN %llu digest %016llx",
                    cluster_->node(i).name().c_str(), static_cast<unsigned long long>(lsn),
                    static_cast<unsigned long long>(digest));
      line += part;
    }
    Note("offline:%s", line.c_str());
    if (seen.size() != 1) {
      Finding("the nodes' logs differ after healing:" + line);
      return false;
    }
    return true;
  }

  void WriteHistory(const std::vector<Session*>& sessions) {
    fs::create_directories(o_.dir + "/clients");
    for (Session* s : sessions) {
      std::ofstream log(o_.dir + "/clients/" + s->name() + ".log");
      for (const std::string& line : s->explained()) log << line << '\n';
      std::ofstream out(o_.dir + "/history/" + s->name() + ".hist");
      for (const std::string& m : s->meta()) out << m << '\n';
      for (const Op& op : s->ops()) out << FormatOp(op) << '\n';
    }
  }

  static bool LoadHistory(const std::string& dir, History* h, std::string* error) {
    for (const auto& entry : fs::directory_iterator(dir + "/history")) {
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      std::string why;
      if (!ParseHistory(text.str(), h, &why)) {
        *error = entry.path().string() + ": " + why;
        return false;
      }
    }
    return true;
  }

  // The figures: faults, leadership changes (from the nodes' logs), and per kind of fault the
  // time from its start to the first write acknowledged after it (by another node than the one
  // it hit, when it hit the primary).
  void PrintFigures(const std::vector<Session*>& sessions, double seconds) {
    std::vector<Ack> acks;
    uint64_t ops = 0;
    for (Session* s : sessions) {
      acks.insert(acks.end(), s->acks().begin(), s->acks().end());
      ops += s->ops().size();
    }
    std::sort(acks.begin(), acks.end(), [](const Ack& a, const Ack& b) { return a.t1 < b.t1; });
    int promotions = 0;
    for (int i = 0; i < ClusterUnderTest::kNodes; ++i) {
      std::ifstream in(cluster_->node(i).log());
      std::string line;
      while (std::getline(in, line)) {
        promotions += line.find("promoted: this node is the primary of epoch") != std::string::npos;
      }
    }
    std::printf(
        "failover torture: %d rounds in %.1f s, seed %llu, %s replication, %zu acknowledged "
        "writes of %llu requests, history in %s/history\n",
        o_.rounds, seconds, static_cast<unsigned long long>(o_.seed), o_.replication.c_str(),
        acks.size(), static_cast<unsigned long long>(ops), o_.dir.c_str());
    std::printf("  leaderships: %d promotions, so %d failovers or switchovers\n", promotions,
                std::max(0, promotions - 1));
    // Per fault: the longest time without an acknowledged write from its start to the first
    // write acknowledged after it was healed; for a kill of the primary also the failover time,
    // from the kill to the first write acknowledged after it (by the new primary).
    std::map<std::string, std::vector<double>> outages;
    std::map<std::string, int> counts;
    std::vector<double> failovers;
    for (const Fault& f : faults_) {
      ++counts[f.kind];
      if (f.note.rfind("(skipped", 0) == 0) continue;
      int64_t previous = f.start, longest = 0;
      bool healed = false;
      for (const Ack& a : acks) {
        if (a.t1 <= f.start) continue;
        if (f.kind == "kill-primary" && previous == f.start) {
          failovers.push_back(Seconds(a.t1 - f.start));
        }
        longest = std::max(longest, a.t1 - previous);
        previous = a.t1;
        if (a.t1 > f.heal) {
          healed = true;
          break;
        }
      }
      if (healed) outages[f.kind].push_back(Seconds(longest));
    }
    std::printf("  %-27s %5s   %s\n", "fault", "count",
                "longest time without an acknowledged write, from the fault to the first write "
                "after healing");
    for (const auto& [kind, n] : counts) {
      auto& v = outages[kind];
      std::sort(v.begin(), v.end());
      if (v.empty()) {
        std::printf("  %-27s %5d\n", kind.c_str(), n);
      } else {
        std::printf("  %-27s %5d   p50 %.2f s, max %.2f s\n", kind.c_str(), n, v[v.size() / 2],
                    v.back());
      }
    }
    int refused = 0;
    for (const Fault& f : faults_)
      refused += f.kind == "switchover" && f.note.rfind("(done", 0) != 0;
    if (counts.count("switchover")) {
      std::printf("  switchovers refused or failed: %d of %d\n", refused, counts["switchover"]);
    }
    if (!failovers.empty()) {
      std::sort(failovers.begin(), failovers.end());
      std::printf(
          "  failover time, kill -9 of the primary to the first write acknowledged after it: "
          "p50 %.2f s, max %.2f s over %zu kills\n",
          failovers[failovers.size() / 2], failovers.back(), failovers.size());
    }
  }

  Options o_;
  std::mt19937_64 rng_;
  std::unique_ptr<ClusterUnderTest> cluster_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> drain_stop_{false};
  std::atomic<int64_t> last_ack_{0};
  std::vector<std::string> order_;
  std::vector<Fault> faults_;
  std::vector<std::string> findings_;
  FILE* nemesis_log_ = nullptr;
  const int64_t start_ns_ = NowNs();
  uint64_t final_lsn_ = 0;
};

int CheckDirectory(const std::string& dir) {
  History h;
  for (const auto& entry : fs::directory_iterator(dir + "/history")) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    std::string error;
    if (!ParseHistory(text.str(), &h, &error)) {
      std::fprintf(stderr, "failover torture: %s: %s\n", entry.path().c_str(), error.c_str());
      return 2;
    }
  }
  const Report report = Check(h);
  std::printf("checker: %s", report.Summary().c_str());
  return report.violations.empty() ? 0 : 1;
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

}  // namespace
}  // namespace sundial::torture

int main(int argc, char** argv) {
  using sundial::torture::Options;
  if (argc >= 3 && std::string(argv[1]) == "check") {
    return sundial::torture::CheckDirectory(argv[2]);
  }
  if (argc < 2 || std::string(argv[1]) != "run") {
    std::fprintf(stderr,
                 "usage: failover_torture run --server BIN --dir DIR [--rounds N] [--seed S]\n"
                 "         [--replication sync|async] [--nemesis KIND,...] [--bug NAME]\n"
                 "         [--replication-delay-ms MS] [--restart-delay-ms MS] [--producers N]\n"
                 "         [--workers N] [--pace-ms MS] [--expect clean|lost|violations]\n"
                 "       failover_torture check DIR\n");
    return 2;
  }
  Options o;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--server") {
      o.server = value;
    } else if (flag == "--dir") {
      o.dir = value;
    } else if (flag == "--rounds") {
      o.rounds = std::atoi(value.c_str());
    } else if (flag == "--seed") {
      o.seed = std::strtoull(value.c_str(), nullptr, 10);
    } else if (flag == "--replication") {
      o.replication = value;
    } else if (flag == "--nemesis") {
      o.nemeses = sundial::torture::Split(value);
      for (const std::string& n : o.nemeses) {
        if (std::find(std::begin(sundial::torture::kAllNemeses),
                      std::end(sundial::torture::kAllNemeses),
                      n) == std::end(sundial::torture::kAllNemeses)) {
          std::fprintf(stderr, "failover torture: unknown nemesis %s\n", n.c_str());
          return 2;
        }
      }
    } else if (flag == "--bug") {
      o.bug = value;
    } else if (flag == "--replication-delay-ms") {
      o.replication_delay_ms = std::atoi(value.c_str());
    } else if (flag == "--restart-delay-ms") {
      o.restart_delay_ms = std::atoi(value.c_str());
    } else if (flag == "--producers") {
      o.producers = std::atoi(value.c_str());
    } else if (flag == "--workers") {
      o.workers = std::atoi(value.c_str());
    } else if (flag == "--pace-ms") {
      o.pace_ms = std::atoi(value.c_str());
    } else if (flag == "--expect") {
      o.expect = value;
    } else {
      std::fprintf(stderr, "failover torture: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (o.server.empty() || o.dir.empty() ||
      (o.expect != "clean" && o.expect != "lost" && o.expect != "violations")) {
    std::fprintf(stderr,
                 "failover torture: --server and --dir are required; --expect is clean, lost or "
                 "violations\n");
    return 2;
  }
  return sundial::torture::FailoverTorture(std::move(o)).Run();
}
