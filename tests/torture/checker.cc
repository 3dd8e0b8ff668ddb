#include "tests/torture/checker.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

namespace sundial::torture {
namespace {

using Key = std::string;  // queue '/' id
Key KeyOf(const std::string& queue, const std::string& id) { return queue + "/" + id; }

// A lease an acknowledged dequeue granted.
struct Grant {
  const Op* op;
  std::string queue, id;
  uint64_t token;
};

struct Message {
  std::string queue, id;
  std::vector<const Op*> ops;  // enqueue, complete, fail, extend, cancel, reprioritize of it
  std::vector<const Op*> dequeued_by;      // acknowledged dequeues that leased it
  std::vector<bool> expiring;              // leases meant to expire (dequeue-short)
  std::vector<uint64_t> tokens;            // their tokens, in the same order
  const std::string* key_value = nullptr;  // its flow-key (exclusivity) value, if any
  int64_t ttl_ms = 0;                      // its time to live (its enqueue's, else its queue's)
  const Dependent* dependent = nullptr;    // its dependencies, when it was enqueued with some
  int64_t fire_at = 0;                     // a schedule's fire name@T: T
};

// A schedule of the history: its upserts (docs/semantics.md, "Schedules").
struct Schedule {
  std::string queue, name;
  int64_t every_ms = 0;
  std::vector<const ScheduleUpsert*> upserts;
  int64_t first_seen = std::numeric_limits<int64_t>::max();  // the earliest fire any read showed
};

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

bool MayHaveHappened(const Op& op) { return op.outcome != Outcome::kError; }

std::string Describe(const Op& op) {
  std::ostringstream s;
  s << op.kind << " by " << op.client << " [" << op.t0 << ".." << op.t1 << "] "
    << (op.outcome == Outcome::kOk     ? "ok"
        : op.outcome == Outcome::kNone ? "none"
                                       : op.error);
  return s.str();
}

class Checker {
 public:
  explicit Checker(const History& h) : h_(h) {}

  Report Run() {
    Index();
    for (const Inventory& inv : h_.inventories) {
      CheckInventory(inv);
      CheckSchedules(inv);
      CheckDrained(inv);
    }
    CheckLeases();
    CheckKeyRates();
    CheckKeyRatesByHistory();
    CheckExpiry();
    CheckCompletes();
    CheckReleases();
    CheckResultReads();
    CheckBatches();
    CheckFlows();
    report_.inventories = h_.inventories.size();
    return std::move(report_);
  }

 private:
  void Add(const std::string& kind, const std::string& text) {
    report_.violations.push_back({kind, text});
  }

  Message& MessageOf(const std::string& queue, const std::string& id) {
    Message& m = messages_[KeyOf(queue, id)];
    m.queue = queue;
    m.id = id;
    return m;
  }

  void Index() {
    for (const auto& [q, id, value] : h_.meta) values_[KeyOf(q, id)] = value;
    // A queue described twice (an update) is held to the loosest of its settings.
    for (const QueueLimits& l : h_.limits) {
      auto [it, fresh] = limits_.try_emplace(l.queue, l);
      if (fresh) continue;
      QueueLimits& mine = it->second;
      mine.key_concurrency = std::max(mine.key_concurrency, l.key_concurrency);
      mine.key_rate_per_s = std::max(mine.key_rate_per_s, l.key_rate_per_s);
      mine.key_burst = std::max(mine.key_burst, l.key_burst);
      mine.ttl_ms = std::max(mine.ttl_ms, l.ttl_ms);
    }
    for (const MessageTtl& t : h_.ttls) ttls_[KeyOf(t.queue, t.id)] = t.ttl_ms;
    for (const Dependent& d : h_.dependents) dependents_[KeyOf(d.queue, d.id)] = &d;
    for (const ScheduleUpsert& u : h_.schedules) {
      Schedule& s = schedules_[KeyOf(u.queue, u.name)];
      s.queue = u.queue;
      s.name = u.name;
      s.every_ms = u.every_ms;
      s.upserts.push_back(&u);
      schedule_names_[u.queue].insert(u.name);
    }
    for (const Op& op : h_.ops) {
      ++report_.ops;
      if (op.outcome == Outcome::kOk) ++report_.acknowledged;
      if (op.kind == "create_batch" || op.kind == "seal_batch") {
        batch_ops_[op.id].push_back(&op);
        continue;
      }
      if (op.kind == "trigger") {
        triggers_[op.queue].push_back(&op);
        if (!op.id.empty()) MessageOf(op.queue, op.id);  // a fire, judged as one
        continue;
      }
      if (op.kind == "dequeue" || op.kind == "dequeue-short") {
        if (op.outcome == Outcome::kNone) unknown_dequeues_[op.queue].push_back(&op);
        if (op.outcome != Outcome::kOk) continue;
        for (const auto& [id, token] : op.leased) {
          Message& m = MessageOf(op.queue, id);
          m.dequeued_by.push_back(&op);
          m.tokens.push_back(token);
          m.expiring.push_back(op.kind == "dequeue-short");
        }
        continue;
      }
      if (op.kind == "enqueue" && op.outcome == Outcome::kOk) ++report_.acked_enqueues;
      MessageOf(op.queue, op.id).ops.push_back(&op);
    }
    for (auto& [key, m] : messages_) {
      auto it = values_.find(key);
      if (it != values_.end()) m.key_value = &it->second;
      if (auto t = ttls_.find(key); t != ttls_.end()) {
        m.ttl_ms = t->second;
      } else if (auto l = limits_.find(m.queue); l != limits_.end()) {
        m.ttl_ms = l->second.ttl_ms;
      }
      if (auto d = dependents_.find(key); d != dependents_.end()) m.dependent = d->second;
      m.fire_at = FireTime(m.queue, m.id);
      by_queue_[m.queue].push_back(&m);
    }
  }

  // The flow rules (docs/semantics.md, "Flows"; checker.h): the sends of each tree, by root,
  // against every inventory after the first and against each other.
  void CheckFlows() {
    std::map<std::string, std::vector<const FlowSend*>> trees;
    for (const FlowSend& f : h_.flows) trees[f.keys[0]].push_back(&f);
    for (auto& [root, sends] : trees) {  // the clients' files come in any order
      std::sort(sends.begin(), sends.end(),
                [](const FlowSend* a, const FlowSend* b) { return a->t0 < b->t0; });
    }
    std::vector<std::set<std::string>> present(h_.inventories.size());
    std::vector<std::set<std::string>> read(h_.inventories.size());
    for (size_t i = 0; i < h_.inventories.size(); ++i) {
      for (const InventoryRow& row : h_.inventories[i].rows) {
        present[i].insert(row.queue + "/" + row.id);
      }
      read[i].insert(h_.inventories[i].queues.begin(), h_.inventories[i].queues.end());
    }
    for (const auto& [root, sends] : trees) {
      const FlowSend& first = *sends.front();
      const size_t n = first.keys.size();
      int64_t acknowledged = kNever;  // the first answer ok, to a send or a resend
      for (const FlowSend* f : sends) {
        if (f->outcome == Outcome::kOk) acknowledged = std::min(acknowledged, f->t1);
      }
      // The nodes an inventory holds, or -1 when it did not read all of their queues.
      auto count = [&](size_t i) {
        int k = 0;
        for (const std::string& key : first.keys) {
          if (!read[i].count(key.substr(0, key.find('/')))) return -1;
          k += present[i].count(key) ? 1 : 0;
        }
        return k;
      };
      int64_t seen_whole = kNever;  // the first inventory that held the whole tree
      for (size_t i = 0; i < h_.inventories.size(); ++i) {
        const Inventory& inv = h_.inventories[i];
        if (inv.t < first.t1) continue;
        const int k = count(i);
        if (k < 0) continue;
        ++report_.flow_checks;
        if (k == static_cast<int>(n)) seen_whole = std::min(seen_whole, inv.t);
        std::ostringstream text;
        text << "flow " << root << " (" << n << " nodes, sent by " << first.client << ") has " << k
             << " of its nodes in the inventory of round " << inv.round;
        if (acknowledged < inv.t && k != static_cast<int>(n)) {
          Add("flow", text.str() + " after it was acknowledged");
        } else if (k != 0 && k != static_cast<int>(n)) {
          Add("flow", text.str() + ": part of one record");
        }
      }
      for (const FlowSend* f : sends) {
        if (f->resend && f->outcome == Outcome::kError && f->error == "ALREADY_EXISTS") {
          // Refused as other content: only the root's priority can have changed since.
          ++report_.flow_checks;
          bool changed = false;
          if (auto m = messages_.find(root); m != messages_.end()) {
            for (const Op* op : m->second.ops) {
              changed |= op->kind == "reprioritize" && MayHaveHappened(*op) && op->t0 < f->t1;
            }
          }
          if (!changed) {
            Add("flow", "a resend of flow " + root + " by " + f->client +
                            " was refused ALREADY_EXISTS though its root was never reprioritized");
          }
        }
        if (!f->resend || f->outcome != Outcome::kOk) continue;
        ++report_.flow_checks;
        std::ostringstream text;
        text << "a resend of flow " << root << " by " << f->client << " [" << f->t0 << ".." << f->t1
             << "] was answered with " << f->duplicates << " of " << n << " nodes duplicate";
        if (f->duplicates != 0 && f->duplicates != n) {
          Add("flow", text.str() + ": a tree is one resend or none");
        } else if (f->duplicates == 0 && (acknowledged < f->t0 || seen_whole < f->t0)) {
          Add("flow", text.str() + " although the tree existed: enqueued twice");
        }
      }
    }
  }

  // T when `id` names a fire (NAME@T) of a schedule upserted on `queue`, else 0.
  int64_t FireTime(const std::string& queue, const std::string& id) const {
    const auto at = id.rfind('@');
    if (at == std::string::npos || at + 1 >= id.size()) return 0;
    auto names = schedule_names_.find(queue);
    if (names == schedule_names_.end() || !names->second.count(id.substr(0, at))) return 0;
    const std::string digits = id.substr(at + 1);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18) {
      return 0;
    }
    return std::stoll(digits);
  }

  // The earliest a complete of `key` that may have happened was sent (kNever: none).
  int64_t CompleteSent(const std::string& key) const {
    auto m = messages_.find(key);
    if (m == messages_.end()) return kNever;
    int64_t t = kNever;
    for (const Op* op : m->second.ops) {
      if (op->kind == "complete" && MayHaveHappened(*op)) t = std::min(t, op->t0);
    }
    return t;
  }

  // The earliest moment `key` may have failed as a dependency: a cancel of it sent, or (its own
  // policy cancel or error) one of its own dependencies failed (docs/semantics.md,
  // "Dependencies": the rule applies transitively). kNever: it cannot have failed.
  int64_t FailedBy(const std::string& key) {
    if (auto memo = failed_by_.find(key); memo != failed_by_.end()) return memo->second;
    failed_by_[key] = kNever;  // dependencies are older than their dependents: no cycle
    int64_t t = kNever;
    if (auto m = messages_.find(key); m != messages_.end()) {
      for (const Op* op : m->second.ops) {
        if (op->kind == "cancel" && MayHaveHappened(*op)) t = std::min(t, op->t0);
      }
      t = std::min(t, MayHaveExpiredFrom(m->second));  // canceled as expired
    }
    if (auto d = dependents_.find(key); d != dependents_.end() && d->second->policy != "release") {
      for (const std::string& dep : d->second->keys) t = std::min(t, FailedBy(dep));
    }
    failed_by_[key] = t;
    return t;
  }

  // Whether `m`'s dependencies may all have finished (completed, or failed under `release`)
  // by requests sent before `t`: else it cannot have been released by then. The first that
  // cannot have, in *blocking.
  bool MayHaveBeenReleased(const Message& m, int64_t t, std::string* blocking) {
    for (const std::string& dep : m.dependent->keys) {
      if (CompleteSent(dep) < t) continue;
      if (m.dependent->policy == "release" && FailedBy(dep) < t) continue;
      *blocking = dep;
      return false;
    }
    return true;
  }

  // Whether one of `m`'s dependencies may have failed by `t` (its policy then applies).
  bool DependencyMayHaveFailed(const Message& m, int64_t t) {
    if (m.dependent == nullptr) return false;
    return std::any_of(m.dependent->keys.begin(), m.dependent->keys.end(),
                       [&](const std::string& dep) { return FailedBy(dep) < t; });
  }

  // The states an operation leaves its message in when it is the last to touch it. An enqueue
  // with dependencies leaves it waiting until they finish, and then pending (released) or
  // canceled or errored (a dependency failed): the phantom and dependency checks judge which.
  // A message with a ttl left pending or invisible may have expired since: canceled (the
  // phantom check judges whether it can have been by then).
  static std::set<std::string> StatesAfter(const Op& op, const Message& m) {
    if (op.kind == "enqueue" && m.dependent != nullptr) {
      return {"waiting", "pending", "invisible", "canceled", "errored"};
    }
    std::set<std::string> states = StatesAfter(op);
    if (m.ttl_ms > 0 && (states.count("pending") || states.count("invisible"))) {
      states.insert("canceled");
    }
    return states;
  }
  static std::set<std::string> StatesAfter(const Op& op) {
    const std::string& kind = op.kind;
    if (kind == "enqueue" || kind == "fail") return {"pending", "invisible"};
    if (kind == "dequeue" && op.lease_ms > 0) return {"running", "pending"};  // expired or not
    if (kind == "dequeue") return {"running"};
    if (kind == "dequeue-short") return {"running", "pending"};  // expired or not yet
    if (kind == "complete") return {"completed"};
    if (kind == "cancel") return {"canceled"};
    return {};
  }

  void CheckInventory(const Inventory& inv) {
    const std::set<std::string> queues(inv.queues.begin(), inv.queues.end());
    std::unordered_map<Key, const InventoryRow*> rows;
    std::map<std::pair<std::string, std::string>, std::vector<std::string>> running_by_value;
    for (const InventoryRow& row : inv.rows) {
      const Key key = KeyOf(row.queue, row.id);
      rows[key] = &row;
      auto m = messages_.find(key);
      // A schedule's fire is judged by CheckSchedules.
      const bool sent = FireTime(row.queue, row.id) != 0 ||
                        (m != messages_.end() &&
                         std::any_of(m->second.ops.begin(), m->second.ops.end(), [&](const Op* op) {
                           return op->kind == "enqueue" && op->t0 < inv.t;
                         }));
      if (!sent) {
        Add("phantom", "round " + std::to_string(inv.round) + ": " + key + " (" + row.state +
                           ") was never enqueued");
      }
      if (row.state == "running" && m != messages_.end() && m->second.key_value) {
        running_by_value[{row.queue, *m->second.key_value}].push_back(row.id);
      }
    }
    for (const auto& [qv, ids] : running_by_value) {
      const uint32_t n = ConcurrencyOf(qv.first);
      if (n == 0 || ids.size() <= n) continue;
      std::string names;
      for (size_t i = 0; i < ids.size() && i <= n; ++i) names += (i ? ", " : "") + ids[i];
      Add("key_concurrency", "round " + std::to_string(inv.round) + ": " + qv.first + " value " +
                                 qv.second + " has " + std::to_string(ids.size()) +
                                 " running messages (" + names + "), at most " + std::to_string(n) +
                                 " allowed");
    }
    for (const std::string& q : queues) {
      auto it = by_queue_.find(q);
      if (it == by_queue_.end()) continue;
      for (const Message* m : it->second) {
        auto row = rows.find(KeyOf(m->queue, m->id));
        CheckMessage(inv, *m, row == rows.end() ? nullptr : row->second);
        if (row != rows.end() && m->dependent != nullptr) CheckWaiting(inv, *m, *row->second, rows);
      }
    }
  }

  // A dependent shown waiting must have a reason: a dependency that is not finished (waiting,
  // pending, invisible or running in the same read), and, under `cancel` or `error`, none that
  // failed (its policy applies in the failure's own operation). A dependency the read does not
  // show (its queue not read) leaves it unjudged. A dependent released is judged by
  // CheckMessage (no release before its dependencies finished).
  void CheckWaiting(const Inventory& inv, const Message& m, const InventoryRow& row,
                    const std::unordered_map<Key, const InventoryRow*>& rows) {
    if (row.state != "waiting") return;
    ++report_.dependency_checks;
    const std::string where = "round " + std::to_string(inv.round) + ": " + m.queue + "/" + m.id;
    bool unfinished = false;
    for (const std::string& dep : m.dependent->keys) {
      auto d = rows.find(dep);
      if (d == rows.end()) return;
      const std::string& state = d->second->state;
      if (state == "waiting" || state == "pending" || state == "invisible" || state == "running") {
        unfinished = true;
      } else if ((state == "canceled" || state == "errored") && m.dependent->policy != "release") {
        Add("dependency", where + ": still waiting although its dependency " + dep + " is " +
                              state + " (policy " + m.dependent->policy + ")");
        return;
      }
    }
    if (!unfinished) {
      Add("dependency", where + ": still waiting although every dependency is finished");
    }
  }

  // No dependent is leased before its dependencies finished: every acknowledged lease of one
  // was answered after a complete (or, under `release`, a failure) of each was sent.
  void CheckReleases() {
    for (const auto& [key, m] : messages_) {
      if (m.dependent == nullptr) continue;
      for (const Op* d : m.dequeued_by) {
        ++report_.dependency_checks;
        std::string blocking;
        if (!MayHaveBeenReleased(m, d->t1, &blocking)) {
          Add("dependency", key + ": leased by " + Describe(*d) + " before its dependency " +
                                blocking + " could have finished");
        }
      }
    }
  }

  // A message's outcome as a read showed it (a dependent's lease or get carrying its
  // dependencies' outcomes, a get): once its complete was acknowledged (answered before the
  // read was sent), completed with that complete's result; any result shown is one a complete
  // sent before the read was answered may have stored.
  void CheckResultRead(int64_t t0, int64_t t1, const Key& key, const std::string& state,
                       const std::string& result, const std::string& where) {
    ++report_.result_checks;
    auto m = messages_.find(key);
    const Op* acked = nullptr;
    bool possible = false;
    if (m != messages_.end()) {
      for (const Op* op : m->second.ops) {
        if (op->kind != "complete" || !MayHaveHappened(*op) || op->t0 >= t1) continue;
        possible |= result == ResultFor(m->second.id, static_cast<uint64_t>(op->arg));
        if (op->outcome == Outcome::kOk && op->t1 < t0) acked = op;
      }
    }
    if (acked != nullptr) {
      const std::string want = ResultFor(m->second.id, static_cast<uint64_t>(acked->arg));
      if (state != "completed" || result != want) {
        Add("result", where + " after its acknowledged complete (" + Describe(*acked) +
                          ", stored " + want + ") shows " + state + " '" + result + "'");
      }
    } else if (state == "completed" && !possible) {
      Add("result", where + " shows result '" + result + "' that no complete sent stores");
    }
  }

  void CheckResultReads() {
    for (const DependencyResult& r : h_.dependency_results) {
      CheckResultRead(r.t0, r.t1, r.key, r.state, r.result,
                      r.queue + "/" + r.id + ": its dependency " + r.key);
    }
    for (const MessageRead& r : h_.gets) {
      const Key key = KeyOf(r.queue, r.id);
      CheckResultRead(r.t0, r.t1, key, r.state, r.result, "get of " + key);
      // A completed message keeps the token that completed it: its result names that lease.
      if (r.state == "completed" && r.result != ResultFor(r.id, r.token)) {
        Add("result", "get of " + key + ": completed by lease " + std::to_string(r.token) +
                          " with result '" + r.result + "'");
      }
    }
  }

  // Fires of every_ms schedules (misfire `all`): each at a time of the schedule (its first
  // fire plus a multiple of every_ms: two ids for one fire would differ there), none before its
  // first, and none missing between the earliest fire ever read and the latest this read
  // shows or the server says it made (last_fire_at, read before the messages; next_fire_at
  // less every_ms of an acknowledged upsert that found it, durable before its reply), beyond
  // the fires the server counted as dropped (missed, failed).
  void CheckSchedules(const Inventory& inv) {
    const std::set<std::string> queues(inv.queues.begin(), inv.queues.end());
    for (auto& [skey, s] : schedules_) {
      if (!queues.count(s.queue)) continue;
      const std::string where = "round " + std::to_string(inv.round) + ": schedule " + skey;
      int64_t phase = 0, first = 0;
      bool known = false;
      int64_t made = std::numeric_limits<int64_t>::min();
      for (const ScheduleUpsert* u : s.upserts) {
        if (u->outcome != Outcome::kOk) continue;
        if (!known) {
          phase = u->next_fire_at;
          known = true;
        } else if ((u->next_fire_at - phase) % s.every_ms != 0) {
          Add("schedule", where + ": upserts answered next_fire_at " + std::to_string(phase) +
                              " and " + std::to_string(u->next_fire_at) + " (every " +
                              std::to_string(s.every_ms) + " ms)");
        }
        if (u->created) first = u->next_fire_at;
        if (!u->created && u->t1 < inv.t) made = std::max(made, u->next_fire_at - s.every_ms);
      }
      if (!known) continue;  // no upsert answered: nothing to align the fires with
      // Triggers sent before this read: their fires are at the server's time, off the
      // schedule's times (one whose answer was lost may explain one such fire), and each sets
      // last_fire_at to its time (so a last_fire_at that is a trigger's bounds nothing: the
      // timer may not have made the regular fires before it yet).
      std::set<std::string> triggered;
      std::set<int64_t> trigger_times;
      uint64_t unknown_triggers = 0;
      if (auto t = triggers_.find(s.queue); t != triggers_.end()) {
        for (const Op* op : t->second) {
          if (op->t0 >= inv.t || !MayHaveHappened(*op)) continue;
          if (op->outcome == Outcome::kOk && op->id.rfind(s.name + "@", 0) == 0) {
            triggered.insert(op->id);
            trigger_times.insert(op->arg);
          } else if (op->outcome == Outcome::kNone) {
            ++unknown_triggers;
          }
        }
      }
      uint64_t unexplained_triggers = 0;
      std::set<int64_t> fires;
      for (const InventoryRow& row : inv.rows) {
        if (row.queue != s.queue || row.id.rfind(s.name + "@", 0) != 0) continue;
        const int64_t t = FireTime(row.queue, row.id);
        if (t == 0 || (t - phase) % s.every_ms != 0 || (first != 0 && t < first)) {
          if (triggered.count(row.id) && row.priority == t) continue;
          if (t != 0 && row.priority == t && unexplained_triggers++ < unknown_triggers) continue;
          Add("schedule", where + ": fire " + row.id + " is not one of the schedule's times");
          continue;
        }
        if (row.priority != t) {
          Add("phantom",
              where + ": fire " + row.id + " has priority " + std::to_string(row.priority));
        }
        fires.insert(t);
      }
      uint64_t dropped = 0;
      for (const ScheduleState& st : inv.schedules) {
        if (st.queue != s.queue || st.name != s.name) continue;
        dropped = st.missed + st.failed;
        const bool regular =
            (st.last_fire_at - phase) % s.every_ms == 0 && !trigger_times.count(st.last_fire_at);
        if (st.last_fire_at != 0 && regular) made = std::max(made, st.last_fire_at);
      }
      if (!fires.empty()) s.first_seen = std::min(s.first_seen, *fires.begin());
      const int64_t lower = first != 0 ? first : s.first_seen;
      const int64_t upper = std::max(made, fires.empty() ? made : *fires.rbegin());
      if (lower == kNever || upper < lower) continue;
      uint64_t missing = 0;
      int64_t example = 0;
      for (int64_t t = lower; t <= upper; t += s.every_ms) {
        ++report_.schedule_checks;
        if (!fires.count(t)) {
          if (missing++ == 0) example = t;
        }
      }
      if (missing > dropped) {
        Add("schedule", where + ": " + std::to_string(missing) + " fires missing between " +
                            std::to_string(lower) + " and " + std::to_string(upper) +
                            " (the first " + s.name + "@" + std::to_string(example) +
                            "), the server dropped " + std::to_string(dropped));
      }
    }
  }

  // A drained queue holds nothing dequeueable: its last dequeue waited and found nothing.
  void CheckDrained(const Inventory& inv) {
    const std::set<std::string> drained(inv.drained.begin(), inv.drained.end());
    if (drained.empty()) return;
    for (const InventoryRow& row : inv.rows) {
      if (!drained.count(row.queue)) continue;
      ++report_.drain_checks;
      if (row.state == "pending" || row.state == "invisible") {
        Add("drain", "round " + std::to_string(inv.round) + ": " + row.queue + "/" + row.id +
                         " is " + row.state + " after the queue was drained");
      }
    }
  }

  void CheckMessage(const Inventory& inv, const Message& m, const InventoryRow* row) {
    const std::string where = "round " + std::to_string(inv.round) + ": " + m.queue + "/" + m.id;
    // Everything this inventory can be held to: requests sent before it was read.
    std::vector<const Op*> before;
    for (const Op* op : m.ops) {
      if (op->t0 < inv.t) before.push_back(op);
    }
    bool any_enqueue_sent = false;
    const Op* acked_enqueue = nullptr;
    const Op* acked_complete = nullptr;
    const Op* acked_cancel = nullptr;
    bool complete_sent = false, cancel_sent = false;
    std::set<int64_t> priorities;
    for (const Op* op : before) {
      if (op->kind == "enqueue") {
        any_enqueue_sent = true;
        if (MayHaveHappened(*op)) priorities.insert(op->arg);
        if (op->outcome == Outcome::kOk) acked_enqueue = op;
      } else if (op->kind == "complete") {
        complete_sent |= MayHaveHappened(*op);
        if (op->outcome == Outcome::kOk) acked_complete = op;
      } else if (op->kind == "cancel") {
        cancel_sent |= MayHaveHappened(*op);
        if (op->outcome == Outcome::kOk) acked_cancel = op;
      } else if (op->kind == "reprioritize" && MayHaveHappened(*op)) {
        priorities.insert(op->arg);
      }
    }
    // A schedule's fire was enqueued by the server; it is acknowledged once a dequeue that
    // leased it was.
    const Op* acked_lease = nullptr;
    if (m.fire_at != 0) {
      any_enqueue_sent = true;
      priorities.insert(m.fire_at);
      for (const Op* d : m.dequeued_by) {
        if (d->outcome == Outcome::kOk && d->t1 < inv.t) acked_lease = d;
      }
      // Or once a trigger that made it was.
      if (auto t = triggers_.find(m.queue); t != triggers_.end() && acked_lease == nullptr) {
        for (const Op* op : t->second) {
          if (op->outcome == Outcome::kOk && op->t1 < inv.t && op->id == m.id) acked_lease = op;
        }
      }
    }
    if (!any_enqueue_sent) return;
    ++report_.message_checks;
    if (row == nullptr) {
      const Op* acked = acked_enqueue != nullptr ? acked_enqueue : acked_lease;
      if (acked != nullptr) {
        Add("lost", where + ": acknowledged " +
                        (acked_enqueue              ? "enqueue ("
                         : acked->kind == "trigger" ? "trigger of a fire ("
                                                    : "lease of a fire (") +
                        Describe(*acked) + ") missing after the restart");
        if (lost_.insert(KeyOf(m.queue, m.id)).second) ++report_.lost;
      }
      return;
    }
    // A dependent out of waiting (not by a failure) was released: its dependencies finished.
    if (m.dependent != nullptr && row->state != "waiting" && row->state != "canceled" &&
        row->state != "errored") {
      ++report_.dependency_checks;
      std::string blocking;
      if (!MayHaveBeenReleased(m, inv.t, &blocking)) {
        Add("dependency", where + ": " + row->state + " before its dependency " + blocking +
                              " could have finished");
      }
    }
    if (acked_complete != nullptr && row->state != "completed") {
      Add("not_stuck", where + ": acknowledged complete, found " + row->state);
    }
    if (acked_cancel != nullptr && row->state != "canceled") {
      Add("not_stuck", where + ": acknowledged cancel, found " + row->state);
    }
    // Results: an acknowledged complete's result is what every later read shows; any result
    // shown is one a complete that may have happened would store.
    if (row->state == "completed") {
      ++report_.result_checks;
      if (acked_complete != nullptr) {
        const std::string want = ResultFor(m.id, static_cast<uint64_t>(acked_complete->arg));
        if (row->result != want) {
          Add("result", where + ": acknowledged complete (" + Describe(*acked_complete) +
                            ") stored " + want + ", found '" + row->result + "'");
        }
      } else {
        bool possible = false;
        for (const Op* op : before) {
          possible |= op->kind == "complete" && MayHaveHappened(*op) &&
                      row->result == ResultFor(m.id, static_cast<uint64_t>(op->arg));
        }
        if (!possible) {
          Add("result", where + ": result '" + row->result + "' that no complete sent stores");
        }
      }
    }
    // States nothing sent could have caused.
    bool dequeue_sent = false;
    for (const Op* d : m.dequeued_by) dequeue_sent |= d->t0 < inv.t;
    if (auto it = unknown_dequeues_.find(m.queue); it != unknown_dequeues_.end()) {
      for (const Op* d : it->second) dequeue_sent |= d->t0 < inv.t;
    }
    // A dependency's failure cancels (policy cancel) or errors (policy error) its dependent.
    const bool dependency_failed = DependencyMayHaveFailed(m, inv.t);
    const std::string policy = m.dependent != nullptr ? m.dependent->policy : "";
    if ((row->state == "completed" && !complete_sent) ||
        (row->state == "canceled" && !cancel_sent && !(dependency_failed && policy == "cancel") &&
         MayHaveExpiredFrom(m) >= inv.read_until) ||
        (row->state == "running" && !dequeue_sent) ||
        (row->state == "errored" && !(dependency_failed && policy == "error")) ||
        (row->state == "waiting" && m.dependent == nullptr)) {
      Add("phantom", where + ": state " + row->state + " that no request sent could cause");
    }
    if (!priorities.count(row->priority)) {
      Add("phantom", where + ": priority " + std::to_string(row->priority) + " never requested");
    }
    // The last request that may have changed the state, with every dequeue that may have
    // leased it (acknowledged ones that did, and unanswered ones on its queue).
    std::vector<const Op*> changers;
    for (const Op* op : before) {
      if (MayHaveHappened(*op) && !StatesAfter(*op).empty()) changers.push_back(op);
    }
    for (const Op* d : m.dequeued_by) {
      if (d->t0 < inv.t) changers.push_back(d);
    }
    if (auto it = unknown_dequeues_.find(m.queue); it != unknown_dequeues_.end()) {
      for (const Op* d : it->second) {
        if (d->t0 < inv.t) changers.push_back(d);
      }
    }
    if (!changers.empty()) {
      const Op* last = *std::max_element(changers.begin(), changers.end(),
                                         [](const Op* a, const Op* b) { return a->t0 < b->t0; });
      const bool alone = std::all_of(changers.begin(), changers.end(),
                                     [&](const Op* o) { return o == last || o->t1 < last->t0; });
      if (last->outcome == Outcome::kOk && alone && !StatesAfter(*last, m).count(row->state)) {
        Add("state", where + ": last change " + Describe(*last) + ", found " + row->state);
      }
    }
    // The priority: the last request that set one, if acknowledged and alone.
    std::vector<const Op*> setters;
    for (const Op* op : before) {
      if ((op->kind == "enqueue" || op->kind == "reprioritize") && MayHaveHappened(*op)) {
        setters.push_back(op);
      }
    }
    if (!setters.empty()) {
      const Op* last = *std::max_element(setters.begin(), setters.end(),
                                         [](const Op* a, const Op* b) { return a->t0 < b->t0; });
      const bool alone = std::all_of(setters.begin(), setters.end(),
                                     [&](const Op* o) { return o == last || o->t1 < last->t0; });
      if (last->outcome == Outcome::kOk && alone && row->priority != last->arg) {
        Add("state", where + ": last priority " + std::to_string(last->arg) + " (" +
                         Describe(*last) + "), found " + std::to_string(row->priority));
      }
    }
  }

  // True when some request that may have happened, sent before `until`, could have ended
  // the lease `grant` of message `m` (complete or fail with its token, or a cancel).
  bool MayHaveBeenEnded(const Message& m, size_t grant, int64_t until) const {
    const uint64_t token = m.tokens[grant];
    for (const Op* op : m.ops) {
      if (!MayHaveHappened(*op) || op->t0 >= until) continue;
      if (op->kind == "cancel") return true;
      if ((op->kind == "complete" || op->kind == "fail") &&
          static_cast<uint64_t>(op->arg) == token) {
        return true;
      }
    }
    return false;
  }

  // Until when the lease `grant` of `m` certainly lasted unless a request ended it: a short
  // lease not at all, a dequeue/MS lease MS ms (less the margin) from the earliest moment it
  // could have been granted, any other the whole run.
  static int64_t HeldUntil(const Message& m, size_t grant) {
    if (m.expiring[grant]) return std::numeric_limits<int64_t>::min();
    const Op* d = m.dequeued_by[grant];
    if (d->lease_ms <= 0) return std::numeric_limits<int64_t>::max();
    return d->t0 + (d->lease_ms - kLeaseMarginMs) * 1'000'000;
  }

  // Both leases were held at one moment for certain: each was granted (by its answer, t1)
  // before the other could have run out or been ended by a request sent before that answer.
  // (The later grant came while the earlier lease held, whichever order the server saw.)
  bool Overlap(const Message& m1, size_t i1, const Message& m2, size_t i2) {
    ++report_.lease_checks;
    const Op* a = m1.dequeued_by[i1];
    const Op* b = m2.dequeued_by[i2];
    if (!(b->t1 < HeldUntil(m1, i1) && a->t1 < HeldUntil(m2, i2))) return false;
    return !MayHaveBeenEnded(m1, i1, b->t1) && !MayHaveBeenEnded(m2, i2, a->t1);
  }

  void CheckLeases() {
    std::map<std::pair<std::string, std::string>, std::vector<std::pair<const Message*, size_t>>>
        by_value;
    for (const auto& [key, m] : messages_) {
      for (size_t i = 0; i < m.dequeued_by.size(); ++i) {
        for (size_t j = i + 1; j < m.dequeued_by.size(); ++j) {
          if (Overlap(m, i, m, j)) {
            Add("double_lease", m.queue + "/" + m.id + ": leased by " +
                                    Describe(*m.dequeued_by[i]) + " and again by " +
                                    Describe(*m.dequeued_by[j]));
          }
        }
        if (m.key_value) by_value[{m.queue, *m.key_value}].push_back({&m, i});
      }
    }
    for (const auto& [qv, grants] : by_value) CheckKeyConcurrency(qv.first, qv.second, grants);
  }

  // Running messages allowed per flow-key value of `queue`: its key_concurrency, else 1 (an
  // exclusive queue, the only one whose enqueues carry a value without a `limits` line); 0: no
  // limit.
  uint32_t ConcurrencyOf(const std::string& queue) const {
    auto l = limits_.find(queue);
    return l == limits_.end() ? 1 : l->second.key_concurrency;
  }

  // The moment (exclusive) until which lease `grant` of `m` certainly lasted from its answer:
  // HeldUntil, or just past the sending of the first request that may have ended it. Two leases
  // A and B were held at once for certain (Overlap) exactly when each was answered before the
  // other's CertainEnd.
  int64_t CertainEnd(const Message& m, size_t grant) const {
    int64_t end = HeldUntil(m, grant);
    const uint64_t token = m.tokens[grant];
    for (const Op* op : m.ops) {
      if (!MayHaveHappened(*op)) continue;
      if (op->kind == "cancel" || ((op->kind == "complete" || op->kind == "fail") &&
                                   static_cast<uint64_t>(op->arg) == token)) {
        end = std::min(end, op->t0 + 1);
      }
    }
    return end;
  }

  // key_concurrency: no more than N messages of one value held at once for certain. A set of
  // leases was, exactly when each was answered (a) before every other's CertainEnd (e): then at
  // the latest real grant among them every one had been granted and none had ended. Every such
  // set has a member Z of the latest answer, and is within {Z} and the leases X of other
  // messages with a_X <= a_Z, a_Z < e_X and a_X < e_Z, itself such a set: the largest of
  // those, one lease per message, over every Z, is the most held at once.
  void CheckKeyConcurrency(const std::string& queue, const std::string& value,
                           const std::vector<std::pair<const Message*, size_t>>& grants) {
    const uint32_t n = ConcurrencyOf(queue);
    if (n == 0) return;
    std::vector<int64_t> answered(grants.size()), end(grants.size());
    for (size_t g = 0; g < grants.size(); ++g) {
      answered[g] = grants[g].first->dequeued_by[grants[g].second]->t1;
      end[g] = CertainEnd(*grants[g].first, grants[g].second);
    }
    for (size_t z = 0; z < grants.size(); ++z) {
      std::vector<size_t> held = {z};
      std::set<const Message*> messages = {grants[z].first};
      for (size_t x = 0; x < grants.size(); ++x) {
        if (messages.count(grants[x].first)) continue;
        ++report_.lease_checks;
        if (answered[x] <= answered[z] && answered[z] < end[x] && answered[x] < end[z]) {
          held.push_back(x);
          messages.insert(grants[x].first);
        }
      }
      if (held.size() <= n) continue;
      std::string leases;
      for (size_t x : held) {
        const auto [m, i] = grants[x];
        leases +=
            (leases.empty() ? "" : "; ") + m->id + " leased by " + Describe(*m->dequeued_by[i]);
      }
      Add("key_concurrency", queue + " value " + value + ": " + std::to_string(held.size()) +
                                 " messages held at once, at most " + std::to_string(n) +
                                 " allowed (" + leases + ")");
      return;  // one report per value
    }
  }

  // key_rate (docs/semantics.md, "Flow control"): per flow-key value of a queue with
  // key_rate_per_s R and key_burst B, the grants' server times (every lease an answer carried,
  // across restarts: a restart grants no fresh burst) sorted t_1 <= ... <= t_k: for i <= j,
  // j - i + 1 <= B + floor(R * (t_j - t_i) / 1000) + 1 (the +1: grant times are whole ms, the
  // bucket's arithmetic finer). The window that exceeds it most is reported, once per value.
  void CheckKeyRates() {
    std::map<std::pair<std::string, std::string>,
             std::map<std::pair<std::string, uint64_t>, int64_t>>
        grants;  // (queue, value) -> (id, token) -> granted_at
    for (const LeaseStamp& g : h_.grants) {
      auto l = limits_.find(g.queue);
      if (l == limits_.end() || l->second.key_rate_per_s <= 0) continue;
      auto v = values_.find(KeyOf(g.queue, g.id));
      if (v == values_.end()) continue;  // no value: not limited per key
      grants[{g.queue, v->second}][{g.id, g.token}] = g.granted_at;
    }
    for (const auto& [qv, by_lease] : grants) {
      const QueueLimits& l = limits_.at(qv.first);
      std::vector<int64_t> times;
      for (const auto& [lease, t] : by_lease) times.push_back(t);
      std::sort(times.begin(), times.end());
      int64_t worst = 0;
      size_t worst_i = 0, worst_j = 0;
      for (size_t j = 0; j < times.size(); ++j) {
        for (size_t i = 0; i <= j; ++i) {
          ++report_.rate_checks;
          const auto refilled = static_cast<int64_t>(
              std::floor(l.key_rate_per_s * static_cast<double>(times[j] - times[i]) / 1000.0));
          const int64_t excess =
              static_cast<int64_t>(j - i + 1) - (static_cast<int64_t>(l.key_burst) + refilled + 1);
          if (excess > worst) {
            worst = excess;
            worst_i = i;
            worst_j = j;
          }
        }
      }
      if (worst > 0) {
        std::ostringstream text;
        text << qv.first << " value " << qv.second << ": " << worst_j - worst_i + 1
             << " leases granted in " << times[worst_j] - times[worst_i] << " ms (server times "
             << times[worst_i] << ".." << times[worst_j] << "), at most "
             << worst_j - worst_i + 1 - static_cast<size_t>(worst) << " allowed by rate "
             << l.key_rate_per_s << "/s, burst " << l.key_burst;
        Add("key_rate", text.str());
      }
    }
  }

  // key_rate in the history's own times, which needs no `grant` line (the server's stamps
  // are not trusted here): the leases whose dequeue was sent at or after a and answered at or
  // before b were granted within b - a, so at most B + floor(R * (b - a + margin) / 1000) + 1
  // of one value (the margin, kLeaseMarginMs, for the server's clock against the history's).
  // The windows from a dequeue's sending to one's answer suffice.
  void CheckKeyRatesByHistory() {
    std::map<std::pair<std::string, std::string>, std::vector<std::pair<int64_t, int64_t>>>
        leases;  // (queue, value) -> (t0, t1) of each acknowledged lease
    for (const auto& [key, m] : messages_) {
      if (m.key_value == nullptr) continue;
      auto l = limits_.find(m.queue);
      if (l == limits_.end() || l->second.key_rate_per_s <= 0) continue;
      for (const Op* d : m.dequeued_by) leases[{m.queue, *m.key_value}].emplace_back(d->t0, d->t1);
    }
    for (auto& [qv, spans] : leases) {
      const QueueLimits& l = limits_.at(qv.first);
      std::sort(spans.begin(), spans.end());
      for (size_t i = 0; i < spans.size(); ++i) {
        std::vector<int64_t> answers;  // of the leases sent at or after spans[i]'s
        for (size_t j = i; j < spans.size(); ++j) answers.push_back(spans[j].second);
        std::sort(answers.begin(), answers.end());
        bool found = false;
        for (size_t k = 0; k < answers.size() && !found; ++k) {
          ++report_.rate_checks;
          const double ms = static_cast<double>(answers[k] - spans[i].first) / 1e6 + kLeaseMarginMs;
          const auto allowed = static_cast<int64_t>(l.key_burst) +
                               static_cast<int64_t>(std::floor(l.key_rate_per_s * ms / 1000.0)) + 1;
          if (static_cast<int64_t>(k + 1) <= allowed) continue;
          std::ostringstream text;
          text << qv.first << " value " << qv.second << ": " << k + 1
               << " leases sent and answered within [" << spans[i].first << ".." << answers[k]
               << "] (history times), at most " << allowed << " allowed by rate "
               << l.key_rate_per_s << "/s, burst " << l.key_burst << " and the margin";
          Add("key_rate", text.str());
          found = true;
        }
        if (found) break;  // one report per value
      }
    }
  }

  // The earliest moment (history time) message `m`, if it has a ttl, may have expired: its
  // earliest enqueue that may have happened, sent at t0, plus the ttl less the margin. kNever:
  // it has none.
  static int64_t MayHaveExpiredFrom(const Message& m) {
    if (m.ttl_ms <= 0) return kNever;
    int64_t sent = kNever;
    for (const Op* op : m.ops) {
      if (op->kind == "enqueue" && MayHaveHappened(*op)) sent = std::min(sent, op->t0);
    }
    if (sent == kNever) return kNever;
    return sent + (m.ttl_ms - kLeaseMarginMs) * 1'000'000;
  }

  // expired_delivered (docs/semantics.md, "Flow control"): no lease of a message granted at or
  // after its expires_at, both the server's times (the answer's expires_at, else its
  // enqueued_at plus the ttl); and none answered to a dequeue sent later than the message's
  // first acknowledged enqueue was answered plus the ttl and the margin (by then it had expired,
  // or was running or terminal: either way not to be leased).
  void CheckExpiry() {
    for (const LeaseStamp& g : h_.grants) {
      auto m = messages_.find(KeyOf(g.queue, g.id));
      const int64_t ttl = m != messages_.end() ? m->second.ttl_ms : 0;
      const int64_t expires_at = g.expires_at != 0 ? g.expires_at
                                 : ttl > 0         ? g.enqueued_at + ttl
                                                   : 0;
      if (expires_at == 0) continue;
      ++report_.expiry_checks;
      if (g.granted_at >= expires_at) {
        Add("expired_delivered", KeyOf(g.queue, g.id) + ": lease " + std::to_string(g.token) +
                                     " granted at " + std::to_string(g.granted_at) +
                                     ", the message expired at " + std::to_string(expires_at) +
                                     " (server times)");
      }
    }
    for (const auto& [key, m] : messages_) {
      if (m.ttl_ms <= 0) continue;
      int64_t acknowledged = kNever;
      for (const Op* op : m.ops) {
        if (op->kind == "enqueue" && op->outcome == Outcome::kOk) {
          acknowledged = std::min(acknowledged, op->t1);
        }
      }
      if (acknowledged == kNever) continue;
      const int64_t expired_by = acknowledged + (m.ttl_ms + kLeaseMarginMs) * 1'000'000;
      for (const Op* d : m.dequeued_by) {
        ++report_.expiry_checks;
        if (d->t0 > expired_by) {
          Add("expired_delivered", key + ": leased by " + Describe(*d) + ", sent " +
                                       std::to_string((d->t0 - acknowledged) / 1'000'000) +
                                       " ms after its enqueue was acknowledged, its ttl " +
                                       std::to_string(m.ttl_ms) + " ms");
        }
      }
    }
  }

  // stale_token and redelivered: every acknowledged complete against the leases of its message.
  void CheckCompletes() {
    for (const auto& [key, m] : messages_) {
      for (const Op* c : m.ops) {
        if (c->kind != "complete" || c->outcome != Outcome::kOk) continue;
        const uint64_t token = static_cast<uint64_t>(c->arg);
        for (size_t h = 0; h < m.dequeued_by.size(); ++h) {
          const Op* d = m.dequeued_by[h];
          if (d->t0 > c->t1) {
            Add("redelivered", key + ": leased by " + Describe(*d) + " after " + Describe(*c));
          }
        }
        for (size_t g = 0; g < m.dequeued_by.size(); ++g) {
          if (m.tokens[g] != token) continue;
          const Op* d = m.dequeued_by[g];
          // Another lease granted after this one (its dequeue sent once this one was answered)
          // and answered before the complete was sent: the token was no longer current.
          for (size_t h = 0; h < m.dequeued_by.size(); ++h) {
            const Op* newer = m.dequeued_by[h];
            if (h != g && newer->t0 > d->t1 && newer->t1 < c->t0) {
              Add("stale_token", key + ": " + Describe(*c) + " with token " +
                                     std::to_string(token) + " accepted after " + Describe(*newer) +
                                     " leased it again");
            }
          }
          // Sent after the lease ran out, with no earlier complete of the token that could
          // have come in time (a repeat of a complete that succeeded succeeds) and no extend.
          if (m.expiring[g] || d->lease_ms <= 0) continue;
          const int64_t expired_by = d->t1 + (d->lease_ms + kLeaseMarginMs) * 1'000'000;
          if (c->t0 <= expired_by) continue;
          bool in_time = false;
          for (const Op* op : m.ops) {
            if (!MayHaveHappened(*op) || static_cast<uint64_t>(op->arg) != token) continue;
            in_time |= op->kind == "extend" || (op->kind == "complete" && op->t0 < expired_by);
          }
          if (!in_time) {
            Add("stale_token", key + ": " + Describe(*c) + " with token " + std::to_string(token) +
                                   " accepted after its lease of " + std::to_string(d->lease_ms) +
                                   " ms from " + Describe(*d) + " had run out");
          }
        }
      }
    }
  }

  // Batches (docs/semantics.md, "Batches"). From the requests alone: no enqueue with `batch` is
  // acknowledged once a seal of its batch had been acknowledged before it was sent, none is
  // refused as sealed unless a seal was sent. Every read of a batch (a client's get_batch, an
  // inventory's): its counts add up, done exactly when sealed with no member active, sealed
  // after an acknowledged seal and only after one was sent, its members and completed /
  // canceled counts within what the members' requests acknowledged (at least) and sent (at
  // most), and nothing goes back between two reads ordered in time. An inventory's read
  // against the members it shows: the counts are exactly their states, and the callback
  // message exists exactly when the batch is done, with x-batch-* metadata equal to the counts.
  void CheckBatches() {
    std::map<std::string, std::vector<const BatchMember*>> members;  // by batch
    std::unordered_map<Key, std::string> batch_of;
    for (const BatchMember& m : h_.members) {
      members[m.batch].push_back(&m);
      batch_of[KeyOf(m.queue, m.id)] = m.batch;
    }
    auto seals = [&](const std::string& batch) {
      std::vector<const Op*> out;
      if (auto it = batch_ops_.find(batch); it != batch_ops_.end()) {
        for (const Op* op : it->second) {
          if (op->kind == "seal_batch") out.push_back(op);
        }
      }
      return out;
    };
    for (const Op& op : h_.ops) {
      if (op.kind != "enqueue") continue;
      auto b = batch_of.find(KeyOf(op.queue, op.id));
      if (b == batch_of.end()) continue;
      const std::vector<const Op*> sealed_by = seals(b->second);
      if (op.outcome == Outcome::kOk) {
        for (const Op* seal : sealed_by) {
          if (seal->outcome == Outcome::kOk && seal->t1 < op.t0) {
            Add("batch", "enqueue of " + KeyOf(op.queue, op.id) + " into batch " + b->second +
                             " acknowledged although a seal was acknowledged before it was sent");
            break;
          }
        }
      } else if (op.outcome == Outcome::kError && op.error == "FAILED_PRECONDITION") {
        const bool sent = std::any_of(sealed_by.begin(), sealed_by.end(), [&](const Op* seal) {
          return seal->outcome != Outcome::kError && seal->t0 < op.t1;
        });
        if (!sent) {
          Add("batch", "enqueue of " + KeyOf(op.queue, op.id) +
                           " refused as sealed but no seal of " + b->second + " was sent");
        }
      }
    }
    // Every read, by batch.
    std::map<std::string, std::vector<const BatchRead*>> reads;
    for (const BatchRead& r : h_.batch_reads) reads[r.id].push_back(&r);
    for (const Inventory& inv : h_.inventories) {
      for (const BatchRead& r : inv.batches) {
        reads[r.id].push_back(&r);
        CheckBatchInInventory(inv, r, members[r.id]);
      }
      // An acknowledged create_batch is read by every later inventory of its epoch (its
      // callback's queue cb.eN names it: the inventory of plain.eN reads the batch).
      for (const auto& [batch, ops] : batch_ops_) {
        for (const Op* op : ops) {
          if (op->kind != "create_batch" || op->outcome != Outcome::kOk || op->t1 >= inv.t ||
              op->queue.rfind("cb.", 0) != 0) {
            continue;
          }
          const std::string plain = "plain." + op->queue.substr(3);
          if (std::find(inv.queues.begin(), inv.queues.end(), plain) == inv.queues.end()) continue;
          const bool read = std::any_of(inv.batches.begin(), inv.batches.end(),
                                        [&](const BatchRead& r) { return r.id == batch; });
          if (!read) {
            Add("batch", "round " + std::to_string(inv.round) + ": batch " + batch +
                             " (create acknowledged) not found");
          }
          break;
        }
      }
    }
    for (auto& [batch, list] : reads) {
      std::sort(list.begin(), list.end(),
                [](const BatchRead* a, const BatchRead* b) { return a->t0 < b->t0; });
      const std::vector<const Op*> sealed_by = seals(batch);
      const std::vector<const BatchMember*>& mine = members[batch];
      for (size_t i = 0; i < list.size(); ++i) {
        const BatchRead& r = *list[i];
        ++report_.batch_checks;
        const std::string where = "batch " + batch + " read at " + std::to_string(r.t0);
        if (r.members != r.active + r.completed + r.canceled + r.errored) {
          Add("batch", where + ": members " + std::to_string(r.members) +
                           " != active + completed + canceled + errored");
        }
        if (r.done != (r.sealed && r.active == 0)) {
          Add("batch", where + ": done " + std::to_string(r.done) + " with sealed " +
                           std::to_string(r.sealed) + " and " + std::to_string(r.active) +
                           " active");
        }
        bool seal_acked = false, seal_sent = false;
        for (const Op* seal : sealed_by) {
          seal_acked |= seal->outcome == Outcome::kOk && seal->t1 < r.t0;
          seal_sent |= seal->outcome != Outcome::kError && seal->t0 < r.t1;
        }
        if (seal_acked && !r.sealed)
          Add("batch", where + ": not sealed after an acknowledged seal");
        if (r.sealed && !seal_sent) Add("batch", where + ": sealed but no seal was sent");
        // Bounds from the members' own requests.
        uint64_t joined_min = 0, joined_max = 0, completed_min = 0, completed_max = 0,
                 canceled_min = 0;
        for (const BatchMember* m : mine) {
          auto it = messages_.find(KeyOf(m->queue, m->id));
          if (it == messages_.end()) continue;
          bool enq_acked = false, enq_sent = false, done_acked = false, done_sent = false,
               cancel_acked = false;
          for (const Op* op : it->second.ops) {
            const bool acked = op->outcome == Outcome::kOk && op->t1 < r.t0;
            const bool sent = op->outcome != Outcome::kError && op->t0 < r.t1;
            if (op->kind == "enqueue") {
              enq_acked |= acked;
              enq_sent |= sent;
            } else if (op->kind == "complete") {
              done_acked |= acked;
              done_sent |= sent;
            } else if (op->kind == "cancel") {
              cancel_acked |= acked;
            }
          }
          joined_min += enq_acked;
          joined_max += enq_sent;
          completed_min += done_acked;
          completed_max += done_sent;
          canceled_min += cancel_acked && !done_acked;
        }
        if (r.members < joined_min || r.members > joined_max) {
          Add("batch", where + ": " + std::to_string(r.members) + " members, the requests say " +
                           std::to_string(joined_min) + ".." + std::to_string(joined_max));
        }
        if (r.completed < completed_min || r.completed > completed_max) {
          Add("batch", where + ": " + std::to_string(r.completed) +
                           " completed, the requests say " + std::to_string(completed_min) + ".." +
                           std::to_string(completed_max));
        }
        if (r.canceled < canceled_min) {
          Add("batch", where + ": " + std::to_string(r.canceled) + " canceled, at least " +
                           std::to_string(canceled_min) + " cancels were acknowledged");
        }
        // Nothing goes back between two reads ordered in time.
        for (size_t j = 0; j < i; ++j) {
          const BatchRead& a = *list[j];
          if (a.t1 >= r.t0) continue;
          if (r.members < a.members || r.completed < a.completed || r.canceled < a.canceled ||
              r.errored < a.errored || (a.sealed && !r.sealed) || (a.done && !r.done)) {
            Add("batch", where + " went back from the read at " + std::to_string(a.t0) + ": " +
                             FormatBatchFields(a) + " -> " + FormatBatchFields(r));
          }
        }
      }
    }
  }

  // An inventory's read of a batch against the member messages it shows and its callback.
  void CheckBatchInInventory(const Inventory& inv, const BatchRead& r,
                             const std::vector<const BatchMember*>& mine) {
    const std::string where = "round " + std::to_string(inv.round) + ": batch " + r.id;
    std::unordered_map<Key, const InventoryRow*> rows;
    for (const InventoryRow& row : inv.rows) rows[KeyOf(row.queue, row.id)] = &row;
    uint64_t members = 0, completed = 0, canceled = 0, errored = 0;
    for (const BatchMember* m : mine) {
      if (std::find(inv.queues.begin(), inv.queues.end(), m->queue) == inv.queues.end()) {
        return;  // a member's queue not read: nothing to count against
      }
      auto it = rows.find(KeyOf(m->queue, m->id));
      if (it == rows.end()) continue;  // never enqueued (refused, or a reply lost before it)
      ++members;
      const std::string& state = it->second->state;
      completed += state == "completed";
      canceled += state == "canceled";
      errored += state == "errored";
    }
    if (r.members != members || r.completed != completed || r.canceled != canceled ||
        r.errored != errored) {
      Add("batch", where + ": " + FormatBatchFields(r) + " but its members read show " +
                       std::to_string(members) + " members, " + std::to_string(completed) +
                       " completed, " + std::to_string(canceled) + " canceled, " +
                       std::to_string(errored) + " errored");
    }
    if (r.callback == "-") return;
    if (r.done != (r.callback != "not_found")) {
      Add("batch", where + (r.done ? ": done but its callback message is missing"
                                   : ": not done but its callback message exists"));
    } else if (r.done && (r.cb_total != r.members || r.cb_completed != r.completed ||
                          r.cb_canceled != r.canceled || r.cb_errored != r.errored)) {
      Add("batch", where + ": callback's x-batch-* metadata " + std::to_string(r.cb_total) + "/" +
                       std::to_string(r.cb_completed) + "/" + std::to_string(r.cb_canceled) + "/" +
                       std::to_string(r.cb_errored) + " differ from the batch's " +
                       FormatBatchFields(r));
    }
  }

  const History& h_;
  Report report_;
  std::map<Key, Message> messages_;
  std::unordered_map<Key, std::string> values_;
  std::unordered_map<std::string, QueueLimits> limits_;                       // by queue
  std::unordered_map<Key, int64_t> ttls_;                                     // an enqueue's ttl_ms
  std::unordered_map<std::string, std::vector<const Op*>> unknown_dequeues_;  // by queue
  std::unordered_map<std::string, std::vector<const Message*>> by_queue_;
  std::set<Key> lost_;
  std::unordered_map<Key, const Dependent*> dependents_;
  std::unordered_map<Key, int64_t> failed_by_;
  std::unordered_map<std::string, std::vector<const Op*>> batch_ops_;      // by batch id
  std::unordered_map<std::string, std::vector<const Op*>> triggers_;       // by queue
  std::map<Key, Schedule> schedules_;                                      // queue '/' name
  std::unordered_map<std::string, std::set<std::string>> schedule_names_;  // by queue
};

}  // namespace

uint64_t Report::Count(const std::string& kind) const {
  return static_cast<uint64_t>(std::count_if(violations.begin(), violations.end(),
                                             [&](const Violation& v) { return v.kind == kind; }));
}

std::string Report::Summary(size_t max_lines) const {
  std::ostringstream s;
  s << "ops " << ops << " (acknowledged " << acknowledged << ", enqueues acknowledged "
    << acked_enqueues << "), inventories " << inventories << ", message checks " << message_checks
    << ", lease pairs " << lease_checks << ", results " << result_checks << ", dependencies "
    << dependency_checks << ", fire slots " << schedule_checks << ", drained " << drain_checks
    << ", batch reads " << batch_checks << ", flow checks " << flow_checks << ", rate windows "
    << rate_checks << ", expiry checks " << expiry_checks << "; lost " << lost << ", violations "
    << violations.size();
  for (const char* kind : {"lost", "not_stuck", "state", "double_lease", "key_concurrency",
                           "key_rate", "expired_delivered", "stale_token", "redelivered", "phantom",
                           "result", "dependency", "schedule", "drain", "batch", "flow"}) {
    s << ' ' << kind << '=' << Count(kind);
  }
  s << '\n';
  for (size_t i = 0; i < violations.size() && i < max_lines; ++i) {
    s << "  " << violations[i].kind << ": " << violations[i].text << '\n';
  }
  return s.str();
}

Report Check(const History& history) { return Checker(history).Run(); }

}  // namespace sundial::torture
