#include "tests/torture/checker.h"

#include <algorithm>
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
  std::vector<const Op*> dequeued_by;  // acknowledged dequeues that leased it
  std::vector<bool> expiring;          // leases meant to expire (dequeue-short)
  std::vector<uint64_t> tokens;        // their tokens, in the same order
  const std::string* exclusivity_value = nullptr;
};

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
    for (const Inventory& inv : h_.inventories) CheckInventory(inv);
    CheckLeases();
    CheckCompletes();
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
    for (const Op& op : h_.ops) {
      ++report_.ops;
      if (op.outcome == Outcome::kOk) ++report_.acknowledged;
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
      if (it != values_.end()) m.exclusivity_value = &it->second;
      by_queue_[m.queue].push_back(&m);
    }
  }

  // The states an operation leaves its message in when it is the last to touch it.
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
      const bool sent = m != messages_.end() &&
                        std::any_of(m->second.ops.begin(), m->second.ops.end(), [&](const Op* op) {
                          return op->kind == "enqueue" && op->t0 < inv.t;
                        });
      if (!sent) {
        Add("phantom", "round " + std::to_string(inv.round) + ": " + key + " (" + row.state +
                           ") was never enqueued");
      }
      if (row.state == "running" && m != messages_.end() && m->second.exclusivity_value) {
        running_by_value[{row.queue, *m->second.exclusivity_value}].push_back(row.id);
      }
    }
    for (const auto& [qv, ids] : running_by_value) {
      if (ids.size() > 1) {
        Add("exclusivity", "round " + std::to_string(inv.round) + ": " + qv.first + " value " +
                               qv.second + " has " + std::to_string(ids.size()) +
                               " running messages (" + ids[0] + ", " + ids[1] + ")");
      }
    }
    for (const std::string& q : queues) {
      auto it = by_queue_.find(q);
      if (it == by_queue_.end()) continue;
      for (const Message* m : it->second) {
        auto row = rows.find(KeyOf(m->queue, m->id));
        CheckMessage(inv, *m, row == rows.end() ? nullptr : row->second);
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
    if (!any_enqueue_sent) return;
    ++report_.message_checks;
    if (row == nullptr) {
      if (acked_enqueue != nullptr) {
        Add("lost", where + ": acknowledged enqueue (" + Describe(*acked_enqueue) +
                        ") missing after the restart");
        if (lost_.insert(KeyOf(m.queue, m.id)).second) ++report_.lost;
      }
      return;
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
    if ((row->state == "completed" && !complete_sent) ||
        (row->state == "canceled" && !cancel_sent) || (row->state == "running" && !dequeue_sent) ||
        row->state == "errored") {
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
      if (last->outcome == Outcome::kOk && alone && !StatesAfter(*last).count(row->state)) {
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
        if (m.exclusivity_value) by_value[{m.queue, *m.exclusivity_value}].push_back({&m, i});
      }
    }
    for (const auto& [qv, grants] : by_value) {
      for (size_t g = 0; g < grants.size(); ++g) {
        for (size_t h = g + 1; h < grants.size(); ++h) {
          const auto [m1, i1] = grants[g];
          const auto [m2, i2] = grants[h];
          if (m1 == m2) continue;
          if (Overlap(*m1, i1, *m2, i2)) {
            Add("exclusivity", qv.first + " value " + qv.second + ": " + m1->id + " leased by " +
                                   Describe(*m1->dequeued_by[i1]) + " while " + m2->id +
                                   " was leased by " + Describe(*m2->dequeued_by[i2]));
          }
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

  const History& h_;
  Report report_;
  std::map<Key, Message> messages_;
  std::unordered_map<Key, std::string> values_;
  std::unordered_map<std::string, std::vector<const Op*>> unknown_dequeues_;  // by queue
  std::unordered_map<std::string, std::vector<const Message*>> by_queue_;
  std::set<Key> lost_;
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
    << ", lease pairs " << lease_checks << ", results " << result_checks << "; lost " << lost
    << ", violations " << violations.size();
  for (const char* kind : {"lost", "not_stuck", "state", "double_lease", "exclusivity",
                           "stale_token", "redelivered", "phantom", "result"}) {
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
