// The crash torture (docs/testing.md, "Torture"): rounds of client processes driving a real
// sundiald while it is SIGKILLed, at random moments or at a named failpoint (wal/failpoint.h,
// in the sundiald-failpoints build), then restarted on the same data directory; after every
// restart an inventory of the queues goes into the history, and the checker
// (tests/torture/checker.h) judges the whole history at the end.
//
//   torture run --server BIN --dir DIR [--rounds N] [--clients K] [--seed S] [--bug NAME]
//               [--only FAILPOINT|random]
//   torture check DIR
// Exit status: 0 no violation, 1 violations found, 2 the harness itself failed.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/torture/checker.h"
#include "tests/torture/history.h"
#include "tests/torture/inventory.h"
#include "tests/torture/server.h"

namespace fs = std::filesystem;
namespace p = sundial::protocol;
using sundial::client::Client;

namespace sundial::torture {

// Reads every history file under DIR/history and prints the checker's report; the exit status.
int CheckDirectory(const std::string& dir);

namespace {

constexpr int64_t kLeaseMs = 3'600'000;       // no lease expires during a run, unless...
constexpr int64_t kShortLeaseMs = 20;         // ...a dequeue asks for this to let it expire
constexpr uint32_t kMaxAttempts = 1'000'000;  // nothing is ever errored
constexpr int64_t kRetentionMs = 86'400'000;  // terminal messages stay readable
constexpr int kRoundsPerEpoch = 5;            // queues are replaced every 5 rounds
constexpr int64_t kEveryMs = 50;              // the schedule's period (docs/semantics.md)
constexpr const char* kScheduleName = "tick";
constexpr int kBatchesPerRound = 3;  // created in each round's setup, b<ROUND>.<K>
// The queues of an epoch: enqueued by clients (the first four), dequeued by them (all).
constexpr const char* kQueueKinds[] = {"plain", "filter", "excl", "dep", "sched"};
enum QueueIndex { kPlain = 0, kFilter = 1, kExclusive = 2, kDependent = 3, kScheduled = 4 };
// Flow control in the filter queue (docs/testing.md, "Torture"): running messages per color, and
// the ttls a third of its enqueues carry (some run out while the message waits, some do not).
constexpr uint32_t kFilterKeyConcurrency = 2;
constexpr int64_t kTtlsMs[] = {200, 1000, 5000};
// The exclusive queue's values also have a token bucket: a burst of 3, then 40 a second.
constexpr double kExclusiveKeyRatePerS = 40;
constexpr uint32_t kExclusiveKeyBurst = 3;
constexpr const char* kPolicies[] = {"cancel", "error", "release"};
constexpr p::DependencyFailurePolicy kPolicyValues[] = {p::DependencyFailurePolicy::cancel,
                                                        p::DependencyFailurePolicy::error,
                                                        p::DependencyFailurePolicy::release};
constexpr const char* kFailpoints[] = {
    "wal.before_write",         "wal.after_write_before_sync", "wal.after_sync_before_reply",
    "checkpoint.before_rename", "checkpoint.after_rename",     "wal.mid_rotation"};

int64_t NowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string QueueName(const char* kind, int epoch) {
  return std::string(kind) + ".e" + std::to_string(epoch);
}

// The batches of a round (docs/semantics.md, "Batches"): created by the round's setup with a
// callback into its epoch's queue cb.eN (default id batch:<id>), joined and sealed by clients.
std::string BatchName(int round, int k) {
  return "b" + std::to_string(round) + "." + std::to_string(k);
}

// A get_batch's answer as a history read (the callback not read).
BatchRead ReadOfBatch(const p::BatchInfo* b, int64_t t0, int64_t t1) {
  BatchRead r;
  r.t0 = t0;
  r.t1 = t1;
  r.id = b->id()->str();
  r.members = b->members();
  r.active = b->active();
  r.completed = b->completed();
  r.canceled = b->canceled();
  r.errored = b->errored();
  r.sealed = b->sealed();
  r.done = b->done();
  return r;
}

// The `grant` line of a lease an answer carried: the server's times, which the checker's
// key_rate and expired_delivered rules judge (tests/torture/checker.h); expires_at is 0 for a
// message without a ttl.
std::string GrantLine(const std::string& queue, const p::Message* m) {
  return FormatLeaseStamp(LeaseStamp{queue, m->id()->str(), m->lease_token(), m->updated_at(),
                                     m->enqueued_at(), m->expires_at()});
}

// The `limits` line of a queue the setup created, from its settings (tests/torture/history.h):
// an exclusive queue is key_concurrency 1; a key rate's burst is the effective one (the server's
// default 1 filled in). "" when the queue has no limit.
std::string LimitsLine(const std::string& queue, const client::QueueSettings& s) {
  QueueLimits l;
  l.queue = queue;
  l.key_concurrency = s.key_concurrency.value_or(0);
  l.ttl_ms = s.ttl_ms.value_or(0);
  l.key_rate_per_s = s.key_rate_per_s.value_or(0);
  l.key_burst = l.key_rate_per_s > 0 ? s.key_burst.value_or(1) : 0;
  if (s.type == p::QueueType::exclusive) l.key_concurrency = 1;
  if (l.key_concurrency == 0 && l.key_rate_per_s == 0 && l.ttl_ms == 0) return "";
  return FormatQueueLimits(l);
}

// ---- The client process ------------------------------------------------------------------

struct Lease {
  std::string queue, id;
  uint64_t token;
};

class TortureClient {
 public:
  // `previous`: the history file of this client's slot in the round before (same epoch only;
  // empty: none), whose unanswered flows it sends again first.
  TortureClient(std::string name, int round, uint64_t seed, FILE* out, std::string previous)
      : name_(std::move(name)),
        round_(round),
        rng_(seed),
        out_(out),
        previous_(std::move(previous)) {}

  void Run(const client::Address& address) {
    auto c = Client::Connect(address, {}, 2000);
    if (!c.ok()) return;
    client_ = std::move(c).value();
    const int epoch = round_ / kRoundsPerEpoch;
    for (const char* kind : kQueueKinds) queues_.push_back(QueueName(kind, epoch));
    if (!ResendUnansweredFlows()) return;
    while (Step()) {
    }
  }

 private:
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  // The outcome of `r` (ok, an error the server answered, or none: it may or may not have
  // happened); false when the server is gone.
  static bool OutcomeOf(const client::Result<client::Reply>& r, Outcome* outcome,
                        std::string* error) {
    if (r.ok()) {
      *outcome = Outcome::kOk;
    } else if (r.error().origin == client::Error::Origin::kServer &&
               r.error().code != Code::kUnavailable) {
      *outcome = Outcome::kError;
      *error = std::string(CodeName(r.error().code));
    } else {
      *outcome = Outcome::kNone;
      return false;
    }
    return true;
  }

  // Records `op` with the outcome of `r`; false when the server is gone.
  template <typename F>
  bool Record(Op& op, const client::Result<client::Reply>& r, F on_ok) {
    op.t1 = NowNs();
    const bool alive = OutcomeOf(r, &op.outcome, &op.error);
    if (op.outcome == Outcome::kOk) on_ok(r.value(), op);
    std::fprintf(out_, "%s\n", FormatOp(op).c_str());
    return alive;
  }

  static void ItemOutcome(const client::Reply& reply, Op& op) {
    const auto* items = reply.result<p::ItemResults>()->items();
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

  Op Start(const char* kind, const std::string& queue, const std::string& id, int64_t arg) {
    Op op;
    op.client = name_;
    op.kind = kind;
    op.queue = queue;
    op.id = id;
    op.arg = arg;
    op.t0 = NowNs();
    return op;
  }

  // Half the enqueues into the dependency queue wait on 1-3 messages this client enqueued
  // (acknowledged) before, there or in the plain queue (docs/semantics.md, "Dependencies"),
  // with a random on_dependency_failure; a dependency of the same queue is named by its bare id
  // half the time. The history's `deps` line names each as queue/id.
  void AddDependencies(const std::string& q, client::EnqueueItem& item) {
    if (acked_.empty() || Pick(2) == 0) return;
    Dependent d;
    d.queue = q;
    d.id = item.id;
    const int policy = Pick(3);
    d.policy = kPolicies[policy];
    item.on_dependency_failure = kPolicyValues[policy];
    const int n = 1 + Pick(3);
    const size_t recent = std::min<size_t>(acked_.size(), 20);
    for (int k = 0; k < n; ++k) {
      const Lease& dep =
          acked_[acked_.size() - 1 - static_cast<size_t>(Pick(static_cast<int>(recent)))];
      const std::string key = dep.queue + "/" + dep.id;
      if (std::find(d.keys.begin(), d.keys.end(), key) != d.keys.end()) continue;
      d.keys.push_back(key);
      item.depends_on.push_back(dep.queue == q && Pick(2) ? dep.id : key);
    }
    std::fprintf(out_, "%s\n", FormatDependent(d).c_str());
  }

  bool Enqueue() {
    const int which = Pick(4);  // never the schedule's queue
    const std::string& q = queues_[which];
    client::EnqueueItem item;
    item.id = name_ + "-" + std::to_string(seq_++);
    item.priority = Pick(1000);
    item.payload = "payload of " + item.id;
    if (which == kFilter) {
      // The filter queue is gated on its color (kFilterKeyConcurrency running per color), and a
      // third of its messages expire unless leased in time.
      const std::string color = Pick(2) ? "red" : "blue";
      item.metadata = {{"color", color}};
      std::fprintf(out_, "meta %s %s %s\n", q.c_str(), item.id.c_str(), color.c_str());
      if (Pick(3) == 0) {
        item.ttl_ms = kTtlsMs[Pick(static_cast<int>(std::size(kTtlsMs)))];
        std::fprintf(out_, "%s\n", FormatMessageTtl(MessageTtl{q, item.id, *item.ttl_ms}).c_str());
      }
    }
    if (which == kExclusive) {
      const std::string value = "r" + std::to_string(round_) + "-" + std::to_string(Pick(3));
      item.metadata = {{"k", value}};
      std::fprintf(out_, "meta %s %s %s\n", q.c_str(), item.id.c_str(), value.c_str());
    }
    if (which == kDependent) AddDependencies(q, item);
    // Half the enqueues into the plain and dependency queues join a batch of this epoch (one
    // sealed already too: FAILED_PRECONDITION).
    if ((which == kPlain || which == kDependent) && Pick(2) == 0) {
      item.batch = RandomBatch();
      std::fprintf(out_, "member %s %s %s\n", q.c_str(), item.id.c_str(), item.batch.c_str());
    }
    Op op = Start("enqueue", q, item.id, item.priority);
    auto r = client_->Enqueue(q, {item});
    const bool alive = Record(op, r, [](const client::Reply& reply, Op& o) {
      const auto* items = reply.result<p::EnqueueResults>()->items();
      if (items == nullptr || items->size() != 1) {
        o.outcome = Outcome::kError;
        o.error = "BAD_REPLY";
      } else if (const auto* e = items->Get(0)->error()) {
        o.outcome = Outcome::kError;
        o.error = p::EnumNameCode(e->code());
      }
    });
    mine_.push_back({q, item.id, 0});
    if (op.outcome == Outcome::kOk && (which == kPlain || which == kDependent)) {
      acked_.push_back({q, item.id, 0});
    }
    return alive;
  }

  // ---- Flows (docs/semantics.md, "Flows") ----

  // A node of a tree in pre-order: its parent's index (-1: the root).
  struct FlatNode {
    std::string queue, id;
    int64_t priority = 0;
    int parent = -1;
  };

  // Adds a node under `parent` and, while `budget` lasts, at most three levels deep, children
  // of random number, each in the plain or the dependency queue.
  void Grow(std::vector<FlatNode>& nodes, int parent, int depth, int& budget) {
    const int index = static_cast<int>(nodes.size());
    const int which = Pick(2) ? kPlain : kDependent;
    nodes.push_back({queues_[which], name_ + "-f" + std::to_string(seq_++), Pick(1000), parent});
    while (budget > 0 && depth < 3 && Pick(3) != 0) {
      --budget;
      Grow(nodes, index, depth + 1, budget);
    }
  }

  // The tree rooted at `at` of `nodes` (pre-order: a node's children follow it, in order).
  static client::FlowNode TreeOf(const std::vector<FlatNode>& nodes, int at) {
    client::FlowNode n;
    n.queue = nodes[static_cast<size_t>(at)].queue;
    n.item.id = nodes[static_cast<size_t>(at)].id;
    n.item.priority = nodes[static_cast<size_t>(at)].priority;
    n.item.payload = "payload of " + n.item.id;
    for (size_t c = static_cast<size_t>(at) + 1; c < nodes.size(); ++c) {
      if (nodes[c].parent == at) n.children.push_back(TreeOf(nodes, static_cast<int>(c)));
    }
    return n;
  }

  // A new tree of 1-6 nodes, or now and then a resend of one acknowledged before (a
  // duplicate).
  bool EnqueueFlow() {
    if (!flows_.empty() && Pick(4) == 0) {
      return SendFlow(flows_[static_cast<size_t>(Pick(static_cast<int>(flows_.size())))], true);
    }
    std::vector<FlatNode> nodes;
    int budget = Pick(6);
    Grow(nodes, -1, 0, budget);
    return SendFlow(nodes, false);
  }

  // One enqueue_flow of the tree `nodes`. A first send writes each node's `deps` (a node
  // waits on its children, policy cancel) and `enqueue` op around the flow line.
  bool SendFlow(const std::vector<FlatNode>& nodes, bool resend) {
    FlowSend f;
    f.client = name_;
    f.resend = resend;
    for (const FlatNode& n : nodes) {
      f.keys.push_back(n.queue + "/" + n.id);
      f.parents.push_back(n.parent);
    }
    if (!resend) {
      for (size_t i = 0; i < nodes.size(); ++i) {
        Dependent d{nodes[i].queue, nodes[i].id, "cancel", {}};
        for (size_t c = i + 1; c < nodes.size(); ++c) {
          if (nodes[c].parent == static_cast<int>(i)) d.keys.push_back(f.keys[c]);
        }
        if (!d.keys.empty()) std::fprintf(out_, "%s\n", FormatDependent(d).c_str());
      }
    }
    f.t0 = NowNs();
    auto r = client_->EnqueueFlow({TreeOf(nodes, 0)});
    f.t1 = NowNs();
    const bool alive = OutcomeOf(r, &f.outcome, &f.error);
    if (f.outcome == Outcome::kOk) {
      const auto* result = r.value().result<p::FlowResult>();
      const auto* answered = result == nullptr ? nullptr : result->nodes();
      if (answered == nullptr || answered->size() != nodes.size()) {
        f.outcome = Outcome::kError;
        f.error = "BAD_REPLY";
      } else {
        for (const auto* node : *answered) f.duplicates += node->duplicate() ? 1 : 0;
      }
    }
    if (!resend) {
      for (const FlatNode& n : nodes) {
        Op op = Start("enqueue", n.queue, n.id, n.priority);
        op.t0 = f.t0;
        op.t1 = f.t1;
        op.outcome = f.outcome;
        op.error = f.error;
        std::fprintf(out_, "%s\n", FormatOp(op).c_str());
        mine_.push_back({n.queue, n.id, 0});
        if (f.outcome == Outcome::kOk) acked_.push_back({n.queue, n.id, 0});
      }
    }
    std::fprintf(out_, "%s\n", FormatFlowSend(f).c_str());
    if (f.outcome == Outcome::kOk && !resend) flows_.push_back(nodes);
    return alive;
  }

  // Sends again every first send of a flow that the client of this slot in the round before
  // got no answer to (the server died): a duplicate if it was enqueued, else enqueued now.
  bool ResendUnansweredFlows() {
    if (previous_.empty()) return true;
    std::ifstream in(previous_);
    std::stringstream text;
    text << in.rdbuf();
    History before;
    std::string error;
    if (!ParseHistory(text.str(), &before, &error)) return true;  // nothing to resend
    std::map<std::string, int64_t> priorities;  // queue/id -> the enqueue's priority
    for (const Op& op : before.ops) {
      if (op.kind == "enqueue") priorities[op.queue + "/" + op.id] = op.arg;
    }
    for (const FlowSend& f : before.flows) {
      if (f.resend || f.outcome != Outcome::kNone) continue;
      std::vector<FlatNode> nodes;
      for (size_t i = 0; i < f.keys.size(); ++i) {
        const auto slash = f.keys[i].find('/');
        nodes.push_back({f.keys[i].substr(0, slash), f.keys[i].substr(slash + 1),
                         priorities[f.keys[i]], f.parents[i]});
      }
      if (!SendFlow(nodes, true)) return false;
    }
    return true;
  }

  bool Dequeue() {
    const int which = Pick(static_cast<int>(queues_.size()));
    const std::string& q = queues_[which];
    client::DequeueOptions o;
    o.max = 1 + Pick(3);
    // One dequeue in ten lets its lease expire (the timer's transition, logged like any other,
    // is what crosses the kill then); the others hold theirs until they use it.
    const bool short_lease = Pick(10) == 0;
    o.lease_ms = short_lease ? kShortLeaseMs : kLeaseMs;
    std::string filter = "-";
    if (which == kFilter && Pick(2)) {
      o.filter = {{"color", "red"}};
      filter = "color=red";
    }
    // A dependent's lease carries its dependencies' outcomes: the checker holds each result to
    // the complete that stored it.
    o.include_dependency_results = which == kDependent;
    Op op = Start(short_lease ? "dequeue-short" : "dequeue", q, filter, 0);
    auto r = client_->Dequeue(q, o);
    return Record(op, r, [&](const client::Reply& reply, Op& d) {
      const auto* messages = reply.result<p::DequeueResult>()->messages();
      if (messages == nullptr) return;
      for (const p::Message* m : *messages) {
        d.leased.emplace_back(m->id()->str(), m->lease_token());
        std::fprintf(out_, "%s\n", GrantLine(q, m).c_str());
        if (m->dependency_results() != nullptr) {
          for (const p::WaitItem* item : *m->dependency_results()) {
            DependencyResult dr{
                d.t0,
                d.t1,
                q,
                m->id()->str(),
                item->id()->str(),
                item->error() != nullptr ? "not_found" : p::EnumNameMessageState(item->state()),
                ""};
            if (item->result() != nullptr) {
              dr.result.assign(reinterpret_cast<const char*>(item->result()->data()),
                               item->result()->size());
            }
            std::fprintf(out_, "%s\n", FormatDependencyResult(dr).c_str());
          }
        }
        if (!short_lease) held_.push_back({q, m->id()->str(), m->lease_token()});
      }
      d.arg = static_cast<int64_t>(d.leased.size());
    });
  }

  bool UseLease() {
    const size_t i = static_cast<size_t>(Pick(static_cast<int>(held_.size())));
    const Lease lease = held_[i];
    const int action = Pick(10);
    if (action < 6) {
      held_.erase(held_.begin() + static_cast<ptrdiff_t>(i));
      Op op = Start("complete", lease.queue, lease.id, static_cast<int64_t>(lease.token));
      // Its result names the lease: the checker knows what every later read must show.
      const client::CompleteItem item{lease.id, lease.token, ResultFor(lease.id, lease.token)};
      if (action < 2) return CompleteAndNext(op, item);
      auto r = client_->Complete(lease.queue, {item});
      return Record(op, r, ItemOutcome);
    }
    if (action < 8) {
      held_.erase(held_.begin() + static_cast<ptrdiff_t>(i));
      client::FailOptions f;
      f.error = "torture";
      f.retry_delay_ms = Pick(30);
      Op op = Start("fail", lease.queue, lease.id, static_cast<int64_t>(lease.token));
      auto r = client_->Fail(lease.queue, lease.id, lease.token, f);
      return Record(op, r, [](const client::Reply&, Op&) {});
    }
    Op op = Start("extend", lease.queue, lease.id, static_cast<int64_t>(lease.token));
    auto r = client_->Extend(lease.queue, lease.id, lease.token, kLeaseMs);
    return Record(op, r, [](const client::Reply&, Op&) {});
  }

  // A complete that carries the next dequeue of its queue (docs/semantics.md,
  // "Complete-and-next": one engine call, the release of the dependents it completes the last
  // dependency of before the dequeue, so the dequeue may lease them). Recorded as the complete
  // and a dequeue with the same times; the dequeue ran whatever the item's outcome.
  bool CompleteAndNext(Op& op, const client::CompleteItem& item) {
    client::DequeueOptions next;
    next.max = 1 + static_cast<uint32_t>(Pick(2));
    next.lease_ms = kLeaseMs;
    auto r = client_->CompleteAndNext(op.queue, {item}, next);
    const bool alive = Record(op, r, ItemOutcome);
    Op d = op;
    d.kind = "dequeue";
    d.id = "-";
    d.arg = 0;
    d.error.clear();
    if (r.ok()) {
      d.outcome = Outcome::kOk;
      const auto* result = r->result<p::ItemResults>();
      if (result->next_error() != nullptr && result->next_error()->code() != p::Code::OK) {
        d.outcome = Outcome::kError;
        d.error = p::EnumNameCode(result->next_error()->code());
      } else if (result->next() != nullptr) {
        for (const p::Message* m : *result->next()) {
          d.leased.emplace_back(m->id()->str(), m->lease_token());
          std::fprintf(out_, "%s\n", GrantLine(op.queue, m).c_str());
          held_.push_back({op.queue, m->id()->str(), m->lease_token()});
        }
      }
    } else {
      d.outcome = op.outcome;  // refused whole (nothing was leased), or no answer
      d.error = op.error;
    }
    d.arg = static_cast<int64_t>(d.leased.size());
    std::fprintf(out_, "%s\n", FormatOp(d).c_str());
    return alive;
  }

  bool Cancel() {
    const Lease& m = mine_[static_cast<size_t>(Pick(static_cast<int>(mine_.size())))];
    Op op = Start("cancel", m.queue, m.id, 0);
    auto r = client_->Cancel(m.queue, {m.id});
    return Record(op, r, ItemOutcome);
  }

  bool Reprioritize() {
    const Lease& m = mine_[static_cast<size_t>(Pick(static_cast<int>(mine_.size())))];
    const int64_t priority = Pick(1000);
    Op op = Start("reprioritize", m.queue, m.id, priority);
    client::ReprioritizeChange change;
    change.priority = priority;
    auto r = client_->Reprioritize(m.queue, m.id, change);
    return Record(op, r, [](const client::Reply&, Op&) {});
  }

  // A batch of this epoch's rounds up to this one.
  std::string RandomBatch() {
    const int first = round_ / kRoundsPerEpoch * kRoundsPerEpoch;
    return BatchName(first + Pick(round_ - first + 1), Pick(kBatchesPerRound));
  }

  bool SealBatch() {
    Op op = Start("seal_batch", "-", RandomBatch(), 0);
    auto r = client_->SealBatch(op.id);
    return Record(op, r, [](const client::Reply&, Op&) {});
  }

  bool GetBatch() {
    const std::string id = RandomBatch();
    const int64_t t0 = NowNs();
    auto r = client_->GetBatch(id);
    if (!r.ok()) {
      return r.error().origin == client::Error::Origin::kServer &&
             r.error().code != Code::kUnavailable;
    }
    const BatchRead read = ReadOfBatch(r->result<p::BatchResult>()->batch(), t0, NowNs());
    std::fprintf(out_, "%s\n", FormatBatchRead(read).c_str());
    return true;
  }

  // A fire of the epoch's schedule now (docs/semantics.md, "Schedules": `name@T`, T the
  // server's time, off the every_ms times mostly): recorded as a trigger op whose ID is the
  // fire's message and ARG its time ("-" 0 without an answer).
  bool TriggerSchedule() {
    Op op = Start("trigger", queues_[kScheduled], "", 0);
    auto r = client_->TriggerSchedule(op.queue, kScheduleName);
    return Record(op, r, [](const client::Reply& reply, Op& o) {
      const auto* t = reply.result<p::TriggerResult>();
      o.id = t->id()->str();
      o.arg = t->fire_at();
    });
  }

  // One request: now and then a seal or a get_batch of a random batch or a trigger of the
  // schedule, else the messages'.
  bool Step() {
    const int roll = Pick(200);
    if (roll == 0) return SealBatch();
    if (roll < 3) return GetBatch();
    if (roll == 3) return TriggerSchedule();
    if (roll < 10) return EnqueueFlow();
    return StepOf(Pick(100));
  }

  bool StepOf(int roll) {
    if (roll < 30 || mine_.empty()) return Enqueue();
    if (roll < 58) return Dequeue();
    if (roll < 88) return held_.empty() ? Dequeue() : UseLease();
    if (roll < 94) return Cancel();
    return Reprioritize();
  }

  std::string name_;
  int round_;
  std::mt19937_64 rng_;
  FILE* out_;
  std::unique_ptr<Client> client_;
  std::vector<std::string> queues_;
  std::vector<Lease> mine_;   // enqueued by this client (token unused)
  std::vector<Lease> acked_;  // of which acknowledged in the plain and dependency queues
  std::vector<Lease> held_;
  std::vector<std::vector<FlatNode>> flows_;  // first sends acknowledged
  std::string previous_;
  uint64_t seq_ = 0;
};

// ---- The orchestrator --------------------------------------------------------------------

struct Options {
  std::string server;
  std::string dir;
  int rounds = 20;
  int clients = 4;
  uint64_t seed = 1;
  std::string bug;
  std::string only;  // one failpoint, or "random"
};

class Torture {
 public:
  explicit Torture(Options o) : o_(std::move(o)), rng_(o_.seed) {}

  int Run() {
    fs::remove_all(o_.dir);
    fs::create_directories(HistoryDir());
    const std::string data = o_.dir + "/data";
    fs::create_directories(data);
    history_ = std::fopen((HistoryDir() + "/torture.hist").c_str(), "w");
    const auto start = std::chrono::steady_clock::now();
    Server server(o_.server, data, o_.dir + "/server.log");
    for (int round = 0; round < o_.rounds; ++round) {
      if (!RunRound(server, round)) return 2;
    }
    // A last restart, without failpoints, to read what the last kill left.
    if (!server.Start("", "")) return Harness("the final restart failed");
    if (!Setup(server, o_.rounds)) return Harness("the final inventory failed");
    // Then every dependent that can run must: the plain and dependency queues are drained and
    // read once more.
    std::vector<std::string> drained;
    if (!Drain(server, &drained)) return Harness("the drain failed");
    if (!SealAll(server)) return Harness("sealing the batches failed");
    if (!Setup(server, o_.rounds + 1, drained))
      return Harness("the inventory after the drain failed");
    server.Kill();
    std::fclose(history_);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("torture: %d rounds in %.1f s, %d clients per round, seed %llu, history in %s\n",
                o_.rounds, seconds, o_.clients, static_cast<unsigned long long>(o_.seed),
                HistoryDir().c_str());
    for (const auto& [how, n] : kills_) std::printf("  kills at %-28s %d\n", how.c_str(), n);
    for (const auto& [how, n] : missed_) {
      std::printf("  failpoint %s not reached within the round (killed at random): %d\n",
                  how.c_str(), n);
    }
    return CheckDirectory(o_.dir);
  }

 private:
  std::string HistoryDir() const { return o_.dir + "/history"; }
  int Harness(const std::string& why) {
    std::fprintf(stderr, "torture: %s (see %s/server.log)\n", why.c_str(), o_.dir.c_str());
    return 2;
  }
  int Pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::string ChooseKill(int round) {
    if (!o_.only.empty()) return o_.only;
    const int n = static_cast<int>(std::size(kFailpoints));
    const int slot = round % (n + 1);
    return slot == n ? "random" : kFailpoints[slot];
  }

  std::string Armed(const std::string& how) {
    if (how == "random") return "";
    const bool per_write = how.rfind("wal.", 0) == 0 && how != "wal.mid_rotation";
    return how + ":" + std::to_string(per_write ? Pick(1, 40) : Pick(1, 2));
  }

  // One read of every message of this and the previous epoch's queues but the schedules', as
  // history lines.
  bool ReadInventory(Client& client, int epoch, int64_t t, int round, std::string* out) {
    std::vector<std::string> queues;
    for (int e = std::max(0, epoch - 1); e <= epoch; ++e) {
      for (const char* kind : kQueueKinds) {
        if (std::string(kind) != "sched") queues.push_back(QueueName(kind, e));
      }
    }
    out->clear();
    if (auto refused = torture::ReadInventory(client, queues, t, round, out)) {
      return Refused(*refused);
    }
    return true;
  }

  // The schedules' queues of this and the previous epoch, read once (fires keep coming, so two
  // reads rarely agree; a fire only adds a message at the end of pending): the schedule first
  // (its last_fire_at: every fire up to it is in the messages read after), then the messages.
  bool ReadSchedules(Client& client, int epoch, int64_t t, int round, std::string* out) {
    for (int e = std::max(0, epoch - 1); e <= epoch; ++e) {
      const std::string q = QueueName("sched", e);
      auto r = client.GetSchedule(q, kScheduleName);
      if (r.ok()) {
        const p::Schedule* s = r->result<p::ScheduleResult>()->schedule();
        *out += "schedule-state " + std::to_string(t) + ' ' + std::to_string(round) + ' ' + q +
                ' ' + kScheduleName + ' ' + std::to_string(s->next_fire_at()) + ' ' +
                std::to_string(s->last_fire_at()) + ' ' + std::to_string(s->fires()) + ' ' +
                std::to_string(s->missed()) + ' ' + std::to_string(s->failed()) + '\n';
      } else if (r.error().origin != client::Error::Origin::kServer ||
                 r.error().code != Code::kNotFound) {
        return Refused(r.error());
      }
      if (auto refused = torture::ReadInventory(client, {q}, t, round, out)) {
        return Refused(*refused);
      }
    }
    return true;
  }

  // The batches of this and the previous epoch's rounds so far (those the setups created), each
  // with its callback message (get of batch:<id> in cb.eN: its state and x-batch-* metadata),
  // read after the messages: a batch-state line each; one not found (never created: the
  // setup's server died first) has none.
  bool ReadBatches(Client& client, int epoch, int64_t t, int round, std::string* out) {
    const int last = std::min(round, o_.rounds);  // rounds before it created theirs
    for (int r = std::max(0, epoch - 1) * kRoundsPerEpoch; r < last; ++r) {
      if (r / kRoundsPerEpoch > epoch) break;
      for (int k = 0; k < kBatchesPerRound; ++k) {
        const std::string id = BatchName(r, k);
        auto b = client.GetBatch(id);
        if (!b.ok()) {
          if (b.error().origin == client::Error::Origin::kServer &&
              b.error().code == Code::kNotFound) {
            continue;
          }
          return Refused(b.error());
        }
        BatchRead read = ReadOfBatch(b->result<p::BatchResult>()->batch(), t, t);
        read.callback = "not_found";
        auto m = client.Get(QueueName("cb", r / kRoundsPerEpoch), "batch:" + id);
        if (m.ok()) {
          const p::Message* message = m->result<p::GetResult>()->message();
          read.callback = p::EnumNameMessageState(message->state());
          if (message->metadata() != nullptr) {
            for (const p::MetadataPair* pair : *message->metadata()) {
              const std::string key = pair->key()->str();
              const uint64_t value = std::strtoull(pair->value()->c_str(), nullptr, 10);
              if (key == "x-batch-total") read.cb_total = value;
              if (key == "x-batch-completed") read.cb_completed = value;
              if (key == "x-batch-canceled") read.cb_canceled = value;
              if (key == "x-batch-errored") read.cb_errored = value;
            }
          }
        } else if (m.error().origin != client::Error::Origin::kServer ||
                   m.error().code != Code::kNotFound) {
          return Refused(m.error());
        }
        *out += "batch-state " + std::to_string(t) + ' ' + std::to_string(round) + ' ' +
                FormatBatchFields(read) + '\n';
      }
    }
    return true;
  }

  // Creates the round's batches, each with a callback into the epoch's cb queue (recorded as
  // create_batch ops of client "setup").
  bool CreateBatches(Client& client, int round) {
    const std::string cb = QueueName("cb", round / kRoundsPerEpoch);
    for (int k = 0; k < kBatchesPerRound; ++k) {
      Op op;
      op.client = "setup";
      op.kind = "create_batch";
      op.queue = cb;
      op.id = BatchName(round, k);
      client::CreateBatchOptions o;
      o.callback = client::BatchCallback{};
      o.callback->queue = cb;
      o.callback->payload = "callback of " + op.id;
      op.t0 = NowNs();
      auto r = client.CreateBatch(op.id, o);
      op.t1 = NowNs();
      op.outcome = r.ok() ? Outcome::kOk : Outcome::kNone;
      if (!r.ok() && r.error().origin == client::Error::Origin::kServer &&
          r.error().code != Code::kUnavailable) {
        op.outcome = Outcome::kError;
        op.error = std::string(CodeName(r.error().code));
      }
      std::fprintf(history_, "%s\n", FormatOp(op).c_str());
      std::fflush(history_);
      if (op.outcome == Outcome::kError) return Refused(r.error());
      if (op.outcome != Outcome::kOk) return false;
    }
    return true;
  }

  // Gets a few messages the inventory `rows` showed (completed ones first), with their
  // dependencies' outcomes: each read's result is held to the acknowledged complete's, like the
  // inventory's (which reads results with wait).
  bool ReadSome(Client& client, int round, const std::string& rows) {
    std::vector<std::pair<std::string, std::string>> completed, others;
    std::istringstream lines(rows);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream in(line);
      std::string tag, t, r, q, id, state;
      if (!(in >> tag >> t >> r >> q >> id >> state) || tag != "inventory") continue;
      (state == "completed" ? completed : others).emplace_back(q, id);
    }
    std::mt19937_64 rng(o_.seed * 1'000'003 + static_cast<uint64_t>(round));
    std::shuffle(completed.begin(), completed.end(), rng);
    std::shuffle(others.begin(), others.end(), rng);
    completed.resize(std::min<size_t>(completed.size(), 12));
    others.resize(std::min<size_t>(others.size(), 4));
    completed.insert(completed.end(), others.begin(), others.end());
    std::string out;
    for (const auto& [q, id] : completed) {
      MessageRead read{NowNs(), 0, q, id, "not_found", 0, ""};
      auto r = client.Get(q, id, /*include_dependency_results=*/true);
      read.t1 = NowNs();
      if (!r.ok()) {
        if (r.error().origin != client::Error::Origin::kServer ||
            r.error().code != Code::kNotFound) {
          return Refused(r.error());
        }
      } else {
        const p::Message* m = r->result<p::GetResult>()->message();
        read.state = p::EnumNameMessageState(m->state());
        read.token = m->lease_token();
        if (m->result() != nullptr) {
          read.result.assign(reinterpret_cast<const char*>(m->result()->data()),
                             m->result()->size());
        }
        if (m->dependency_results() != nullptr) {
          for (const p::WaitItem* item : *m->dependency_results()) {
            DependencyResult dr{
                read.t0,
                read.t1,
                q,
                id,
                item->id()->str(),
                item->error() != nullptr ? "not_found" : p::EnumNameMessageState(item->state()),
                ""};
            if (item->result() != nullptr) {
              dr.result.assign(reinterpret_cast<const char*>(item->result()->data()),
                               item->result()->size());
            }
            out += FormatDependencyResult(dr) + '\n';
          }
        }
      }
      out += FormatMessageRead(read) + '\n';
    }
    std::fputs(out.c_str(), history_);
    std::fflush(history_);
    return true;
  }

  // Upserts this epoch's schedule (every kEveryMs ms, misfire `all`: every fire missed while
  // the server was down is made on restart; docs/semantics.md, "Schedules"), recorded with the
  // next_fire_at it answered. Repeated each round: a replacement that keeps the timing keeps
  // the schedule's progress.
  bool UpsertSchedule(Client& client, int epoch) {
    ScheduleUpsert u;
    u.queue = QueueName("sched", epoch);
    u.name = kScheduleName;
    u.every_ms = kEveryMs;
    client::ScheduleTemplate tmpl;
    tmpl.every_ms = kEveryMs;
    tmpl.payload = "tick";
    tmpl.misfire = p::MisfirePolicy::all;
    u.t0 = NowNs();
    auto r = client.UpsertSchedule(u.queue, u.name, tmpl);
    u.t1 = NowNs();
    if (r.ok()) {
      u.outcome = Outcome::kOk;
      const auto* result = r->result<p::ScheduleResult>();
      u.next_fire_at = result->schedule()->next_fire_at();
      u.created = result->created();
    } else if (r.error().origin == client::Error::Origin::kServer &&
               r.error().code != Code::kUnavailable) {
      u.outcome = Outcome::kError;
      u.error = std::string(CodeName(r.error().code));
    }
    std::fprintf(history_, "%s\n", FormatScheduleUpsert(u).c_str());
    std::fflush(history_);
    if (u.outcome == Outcome::kError) return Refused(r.error());
    return u.outcome == Outcome::kOk;
  }

  // Creates this epoch's queues and schedule, reads the inventory of this and the previous
  // epoch (`drained`: queues drained before it), deletes the one before. False when the server
  // died meanwhile.
  bool Setup(Server& server, int round, const std::vector<std::string>& drained = {}) {
    auto c = Client::Connect(server.address(), {}, 5000);
    if (!c.ok()) return false;
    Client& client = *c.value();
    const int epoch = std::min(round, o_.rounds) / kRoundsPerEpoch;  // the drain's: the last
    // The inventory first: it must see the state the previous round's kill left. Timers run
    // while it is read (a recovered lease that expired, a retry delay ending) and move messages
    // to pending: pending is read after the states they leave, so none is missed, and the
    // whole read is repeated until two in a row agree (a page boundary in pending could
    // otherwise hide a message that arrived before the cursor).
    const int64_t t = NowNs();
    std::string rows, again;
    if (!ReadInventory(client, epoch, t, round, &rows)) return false;
    for (int attempt = 0; attempt < 5; ++attempt) {
      again.clear();
      if (!ReadInventory(client, epoch, t, round, &again)) return false;
      if (again == rows) break;
      rows.swap(again);
    }
    if (!ReadSchedules(client, epoch, t, round, &rows)) return false;
    if (!ReadBatches(client, epoch, t, round, &rows)) return false;
    // Rows carry the time the reads began; a state may be from any time until they ended.
    const int64_t read_until = NowNs();
    std::ostringstream block;
    block << rows;
    for (const std::string& q : drained)
      block << "drained " << t << ' ' << round << ' ' << q << '\n';
    block << "inventory-end " << t << ' ' << round << ' ' << read_until << '\n';
    std::fputs(block.str().c_str(), history_);
    std::fflush(history_);
    if (!ReadSome(client, round, rows)) return false;
    if (round >= o_.rounds) return true;
    for (const char* kind : kQueueKinds) {
      client::QueueSettings s;
      s.lease_ms = kLeaseMs;
      s.max_attempts = kMaxAttempts;
      s.retention_ms = kRetentionMs;
      s.retry_backoff_ms = 10;
      s.retry_backoff_max_ms = 100;
      if (std::string(kind) == "excl") {
        s.type = p::QueueType::exclusive;
        s.exclusivity_key = "k";
        s.key_rate_per_s = kExclusiveKeyRatePerS;
        s.key_burst = kExclusiveKeyBurst;
      }
      if (std::string(kind) == "filter") {
        s.flow_key = "color";
        s.key_concurrency = kFilterKeyConcurrency;
      }
      auto r = client.CreateQueue(QueueName(kind, epoch), s);
      if (!r.ok()) return Refused(r.error());
      if (const std::string limits = LimitsLine(QueueName(kind, epoch), s); !limits.empty()) {
        std::fprintf(history_, "%s\n", limits.c_str());
        std::fflush(history_);
      }
      // Two epochs back is checked for good: its messages leave the server (its schedule
      // first: it would create the queue again).
      if (epoch >= 2) {
        if (std::string(kind) == "sched") {
          (void)client.DeleteSchedule(QueueName(kind, epoch - 2), kScheduleName);
        }
        (void)client.DeleteQueue(QueueName(kind, epoch - 2));
      }
    }
    // The callback queue, deleted after the members' queues (their deletion cancels the
    // members, which makes batches done and enqueues callbacks: the queue would be created
    // again).
    client::QueueSettings s;
    s.lease_ms = kLeaseMs;
    s.retention_ms = kRetentionMs;
    if (auto r = client.CreateQueue(QueueName("cb", epoch), s); !r.ok()) return Refused(r.error());
    if (epoch >= 2) (void)client.DeleteQueue(QueueName("cb", epoch - 2));
    return UpsertSchedule(client, epoch) && CreateBatches(client, round);
  }

  // Leases and completes everything dequeueable in the plain and dependency queues of the
  // last two epochs (completions release dependents, which are leased in turn) until a pass
  // that waits finds nothing; every request is in the history (client "drain").
  bool Drain(Server& server, std::vector<std::string>* drained) {
    auto c = Client::Connect(server.address(), {}, 5000);
    if (!c.ok()) return false;
    Client& client = *c.value();
    const int epoch = o_.rounds / kRoundsPerEpoch;
    std::vector<std::string> queues;
    for (int e = std::max(0, epoch - 1); e <= epoch; ++e) {
      queues.push_back(QueueName("plain", e));
      queues.push_back(QueueName("dep", e));
    }
    bool waited = false;
    for (int pass = 0; pass < 10'000; ++pass) {
      bool leased_any = false;
      for (const std::string& q : queues) {
        for (;;) {
          client::DequeueOptions o;
          o.max = 100;
          o.lease_ms = kLeaseMs;
          o.wait_ms = waited ? 150 : 0;  // a last pass waits out the retry delays still running
          Op d = DrainOp("dequeue", q, "-");
          auto r = client.Dequeue(q, o);
          d.t1 = NowNs();
          if (!r.ok()) {
            if (r.error().origin == client::Error::Origin::kServer &&
                r.error().code == Code::kNotFound) {
              break;  // never created
            }
            return false;
          }
          d.outcome = Outcome::kOk;
          std::vector<client::CompleteItem> items;
          for (const p::Message* m : *r->result<p::DequeueResult>()->messages()) {
            d.leased.emplace_back(m->id()->str(), m->lease_token());
            std::fprintf(history_, "%s\n", GrantLine(q, m).c_str());
            items.push_back(
                {m->id()->str(), m->lease_token(), ResultFor(m->id()->str(), m->lease_token())});
          }
          d.arg = static_cast<int64_t>(d.leased.size());
          std::fprintf(history_, "%s\n", FormatOp(d).c_str());
          if (items.empty()) break;
          leased_any = true;
          Op done = DrainOp("complete", q, "");
          auto cr = client.Complete(q, items);
          done.t1 = NowNs();
          if (!cr.ok()) return false;
          const auto* results = cr->result<p::ItemResults>()->items();
          for (size_t i = 0; i < items.size(); ++i) {
            Op one = done;
            one.id = items[i].id;
            one.arg = static_cast<int64_t>(items[i].lease_token);
            const p::Code code = results != nullptr && i < results->size()
                                     ? results->Get(static_cast<flatbuffers::uoffset_t>(i))->code()
                                     : p::Code::INTERNAL;
            one.outcome = code == p::Code::OK ? Outcome::kOk : Outcome::kError;
            if (code != p::Code::OK) one.error = p::EnumNameCode(code);
            std::fprintf(history_, "%s\n", FormatOp(one).c_str());
          }
        }
      }
      std::fflush(history_);
      if (!leased_any) {
        if (waited) {
          *drained = queues;
          return true;
        }
        waited = true;
      } else {
        waited = false;
      }
    }
    return false;
  }

  // Seals every batch of the last two epochs (client "drain"): the read after it finds each
  // one with no member active done, its callback enqueued.
  bool SealAll(Server& server) {
    auto c = Client::Connect(server.address(), {}, 5000);
    if (!c.ok()) return false;
    const int epoch = o_.rounds / kRoundsPerEpoch;
    for (int r = std::max(0, epoch - 1) * kRoundsPerEpoch; r < o_.rounds; ++r) {
      for (int k = 0; k < kBatchesPerRound; ++k) {
        Op op = DrainOp("seal_batch", "-", BatchName(r, k));
        auto sealed = c.value()->SealBatch(op.id);
        op.t1 = NowNs();
        op.outcome = sealed.ok() ? Outcome::kOk : Outcome::kError;
        if (!sealed.ok()) {
          if (sealed.error().origin != client::Error::Origin::kServer ||
              sealed.error().code != Code::kNotFound) {
            return false;
          }
          op.error = std::string(CodeName(sealed.error().code));
        }
        std::fprintf(history_, "%s\n", FormatOp(op).c_str());
      }
    }
    std::fflush(history_);
    return true;
  }

  Op DrainOp(const char* kind, const std::string& queue, const std::string& id) {
    Op op;
    op.client = "drain";
    op.kind = kind;
    op.queue = queue;
    op.id = id;
    op.t0 = NowNs();
    return op;
  }

  // False; a refusal by a live server is the harness's own bug and stops the run.
  bool Refused(const client::Error& e) {
    if (e.origin == client::Error::Origin::kServer) {
      refused_ = true;
      Harness("setup refused: " + e.ToString());
    }
    return false;
  }

  bool RunRound(Server& server, int round) {
    const std::string how = ChooseKill(round);
    const std::string armed = Armed(how);
    if (!server.Start(armed, o_.bug)) {
      // A failpoint reached during recovery or start-up is a kill like any other.
      if (!armed.empty() && server.killed_by_signal() == SIGKILL) {
        Record(round, how);
        return true;
      }
      Harness("round " + std::to_string(round) + ": the server did not start");
      return false;
    }
    if (!Setup(server, round)) {
      if (refused_) return false;
      if (!armed.empty() && server.Exited(5000)) {
        Record(round, how);  // reached while the queues were set up
      } else {
        server.Kill();
        Record(round, "random");
      }
      return true;
    }
    std::vector<pid_t> children;
    for (int k = 0; k < o_.clients; ++k) {
      const uint64_t seed = rng_();
      const pid_t pid = ::fork();
      if (pid == 0) {
        const std::string name = "c" + std::to_string(round) + "." + std::to_string(k);
        FILE* out = std::fopen((HistoryDir() + "/" + name + ".hist").c_str(), "w");
        if (out == nullptr) ::_exit(2);
        std::string previous;  // the slot's history in the round before, same epoch only
        if (round > 0 && (round - 1) / kRoundsPerEpoch == round / kRoundsPerEpoch) {
          previous =
              HistoryDir() + "/c" + std::to_string(round - 1) + "." + std::to_string(k) + ".hist";
        }
        TortureClient(name, round, seed, out, previous).Run(server.address());
        std::fclose(out);
        ::_exit(0);
      }
      children.push_back(pid);
    }
    if (armed.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(Pick(10, 400)));
      server.Kill();
      Record(round, "random");
    } else if (server.Exited(10'000)) {
      Record(round, how);
    } else {
      server.Kill();  // the failpoint was not reached in time: a random kill after all
      ++missed_[how];
      Record(round, "random");
    }
    for (pid_t child : children) {
      int status = 0;
      ::waitpid(child, &status, 0);
    }
    return true;
  }

  void Record(int round, const std::string& how) {
    ++kills_[how];
    std::fprintf(history_, "kill %lld %d %s\n", static_cast<long long>(NowNs()), round,
                 how.c_str());
    std::fflush(history_);
  }

  Options o_;
  std::mt19937_64 rng_;
  FILE* history_ = nullptr;
  std::map<std::string, int> kills_;
  std::map<std::string, int> missed_;
  bool refused_ = false;
};

}  // namespace

int CheckDirectory(const std::string& dir) {
  History h;
  for (const auto& entry : fs::directory_iterator(dir + "/history")) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    std::string error;
    if (!ParseHistory(text.str(), &h, &error)) {
      std::fprintf(stderr, "torture: %s: %s\n", entry.path().c_str(), error.c_str());
      return 2;
    }
  }
  const Report report = Check(h);
  std::printf("checker: %s", report.Summary().c_str());
  return report.violations.empty() ? 0 : 1;
}

}  // namespace sundial::torture

int main(int argc, char** argv) {
  using sundial::torture::Options;
  if (argc >= 3 && std::string(argv[1]) == "check")
    return sundial::torture::CheckDirectory(argv[2]);
  if (argc < 2 || std::string(argv[1]) != "run") {
    std::fprintf(stderr,
                 "usage: torture run --server BIN --dir DIR [--rounds N] [--clients K] "
                 "[--seed S] [--bug NAME] [--only FAILPOINT|random]\n       torture check DIR\n");
    return 2;
  }
  Options o;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--server")
      o.server = value;
    else if (flag == "--dir")
      o.dir = value;
    else if (flag == "--rounds")
      o.rounds = std::atoi(value.c_str());
    else if (flag == "--clients")
      o.clients = std::atoi(value.c_str());
    else if (flag == "--seed")
      o.seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--bug")
      o.bug = value;
    else if (flag == "--only")
      o.only = value;
    else {
      std::fprintf(stderr, "torture: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (o.server.empty() || o.dir.empty()) {
    std::fprintf(stderr, "torture: --server and --dir are required\n");
    return 2;
  }
  return sundial::torture::Torture(std::move(o)).Run();
}
