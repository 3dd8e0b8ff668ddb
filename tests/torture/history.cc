#include "tests/torture/history.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace sundial::torture {

namespace {

const char* OutcomeName(const Outcome outcome, const std::string& error) {
  return outcome == Outcome::kOk ? "ok" : outcome == Outcome::kNone ? "none" : error.c_str();
}

void ParseOutcome(const std::string& text, Outcome* outcome, std::string* error) {
  if (text == "ok") {
    *outcome = Outcome::kOk;
  } else if (text == "none") {
    *outcome = Outcome::kNone;
  } else {
    *outcome = Outcome::kError;
    *error = text;
  }
}

}  // namespace

std::string ResultFor(const std::string& id, uint64_t token) {
  return "res:" + id + ":" + std::to_string(token);
}

std::string FormatOp(const Op& op) {
  std::ostringstream out;
  out << "op " << op.t0 << ' ' << op.t1 << ' ' << op.client << ' ' << op.kind;
  if (op.kind == "dequeue" && op.lease_ms > 0) out << '/' << op.lease_ms;
  out << ' ' << op.queue << ' ' << OutcomeName(op.outcome, op.error) << ' '
      << (op.id.empty() ? "-" : op.id) << ' ' << op.arg;
  for (const auto& [id, token] : op.leased) out << ' ' << id << ':' << token;
  return out.str();
}

std::string FormatDependent(const Dependent& d) {
  std::string line = "deps " + d.queue + ' ' + d.id + ' ' + d.policy;
  for (const std::string& key : d.keys) line += ' ' + key;
  return line;
}

std::string FormatDependencyResult(const DependencyResult& r) {
  std::ostringstream out;
  out << "depres " << r.t0 << ' ' << r.t1 << ' ' << r.queue << ' ' << r.id << ' ' << r.key << ' '
      << r.state << ' ' << (r.result.empty() ? "-" : r.result);
  return out.str();
}

std::string FormatMessageRead(const MessageRead& r) {
  std::ostringstream out;
  out << "get " << r.t0 << ' ' << r.t1 << ' ' << r.queue << ' ' << r.id << ' ' << r.state << ' '
      << r.token << ' ' << (r.result.empty() ? "-" : r.result);
  return out.str();
}

std::string FormatScheduleUpsert(const ScheduleUpsert& u) {
  std::ostringstream out;
  out << "schedule " << u.t0 << ' ' << u.t1 << ' ' << u.queue << ' ' << u.name << ' ' << u.every_ms
      << ' ' << OutcomeName(u.outcome, u.error) << ' ' << u.next_fire_at << ' '
      << (u.created ? 1 : 0);
  return out.str();
}

std::string FormatFlowSend(const FlowSend& f) {
  std::ostringstream out;
  out << "flow " << f.t0 << ' ' << f.t1 << ' ' << f.client << ' ' << OutcomeName(f.outcome, f.error)
      << ' ' << (f.resend ? 1 : 0) << ' ' << f.duplicates;
  for (size_t i = 0; i < f.keys.size(); ++i) {
    out << ' ' << f.keys[i] << '/';
    if (f.parents[i] < 0) {
      out << '-';
    } else {
      out << f.parents[i];
    }
  }
  return out.str();
}

std::string FormatQueueLimits(const QueueLimits& l) {
  std::ostringstream out;
  out << "limits " << l.queue << ' ' << l.key_concurrency << ' ' << l.key_rate_per_s << ' '
      << l.key_burst << ' ' << l.ttl_ms;
  return out.str();
}

std::string FormatMessageTtl(const MessageTtl& t) {
  return "ttl " + t.queue + ' ' + t.id + ' ' + std::to_string(t.ttl_ms);
}

std::string FormatLeaseStamp(const LeaseStamp& g) {
  std::ostringstream out;
  out << "grant " << g.queue << ' ' << g.id << ' ' << g.token << ' ' << g.granted_at << ' '
      << g.enqueued_at << ' ' << g.expires_at;
  return out.str();
}

std::string FormatBatchFields(const BatchRead& r) {
  std::ostringstream out;
  out << r.id << ' ' << r.members << ' ' << r.active << ' ' << r.completed << ' ' << r.canceled
      << ' ' << r.errored << ' ' << (r.sealed ? 1 : 0) << ' ' << (r.done ? 1 : 0) << ' '
      << r.callback << ' ' << r.cb_total << ' ' << r.cb_completed << ' ' << r.cb_canceled << ' '
      << r.cb_errored;
  return out.str();
}

std::string FormatBatchRead(const BatchRead& r) {
  return "batch " + std::to_string(r.t0) + ' ' + std::to_string(r.t1) + ' ' + FormatBatchFields(r);
}

namespace {

bool ParseBatchFields(std::istringstream& in, BatchRead* r) {
  int sealed = 0, done = 0;
  if (!(in >> r->id >> r->members >> r->active >> r->completed >> r->canceled >> r->errored >>
        sealed >> done >> r->callback >> r->cb_total >> r->cb_completed >> r->cb_canceled >>
        r->cb_errored)) {
    return false;
  }
  r->sealed = sealed != 0;
  r->done = done != 0;
  return true;
}

}  // namespace

bool ParseHistory(const std::string& text, History* h, std::string* error) {
  std::istringstream lines(text);
  std::string line;
  Inventory open;  // the block being read
  bool in_block = false;
  size_t number = 0;
  auto bad = [&](const std::string& why) {
    *error = "line " + std::to_string(number) + ": " + why + ": " + line;
    return false;
  };
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    std::istringstream in(line);
    std::string tag;
    in >> tag;
    if (tag == "op") {
      Op op;
      std::string outcome;
      if (!(in >> op.t0 >> op.t1 >> op.client >> op.kind >> op.queue >> outcome >> op.id >>
            op.arg)) {
        return bad("short op");
      }
      if (op.id == "-") op.id.clear();
      if (op.kind.rfind("dequeue/", 0) == 0) {
        op.lease_ms = std::atoll(op.kind.c_str() + 8);
        if (op.lease_ms <= 0) return bad("a dequeue's lease must be positive");
        op.kind = "dequeue";
      }
      ParseOutcome(outcome, &op.outcome, &op.error);
      std::string leased;
      while (in >> leased) {
        const auto colon = leased.rfind(':');
        if (colon == std::string::npos) return bad("leased item without a token");
        op.leased.emplace_back(leased.substr(0, colon), std::stoull(leased.substr(colon + 1)));
      }
      h->ops.push_back(std::move(op));
    } else if (tag == "meta") {
      std::string q, id, value;
      if (!(in >> q >> id >> value)) return bad("short meta");
      h->meta.emplace_back(q, id, value);
    } else if (tag == "limits") {
      QueueLimits l;
      if (!(in >> l.queue >> l.key_concurrency >> l.key_rate_per_s >> l.key_burst >> l.ttl_ms)) {
        return bad("short limits");
      }
      if (l.key_rate_per_s < 0 || l.ttl_ms < 0) return bad("a limit must not be negative");
      h->limits.push_back(std::move(l));
    } else if (tag == "ttl") {
      MessageTtl t;
      if (!(in >> t.queue >> t.id >> t.ttl_ms)) return bad("short ttl");
      if (t.ttl_ms <= 0) return bad("a ttl must be positive");
      h->ttls.push_back(std::move(t));
    } else if (tag == "grant") {
      LeaseStamp g;
      if (!(in >> g.queue >> g.id >> g.token >> g.granted_at >> g.enqueued_at >> g.expires_at)) {
        return bad("short grant");
      }
      h->grants.push_back(std::move(g));
    } else if (tag == "deps") {
      Dependent d;
      if (!(in >> d.queue >> d.id >> d.policy)) return bad("short deps");
      if (d.policy != "cancel" && d.policy != "error" && d.policy != "release") {
        return bad("unknown dependency policy");
      }
      std::string key;
      while (in >> key) d.keys.push_back(key);
      if (d.keys.empty()) return bad("deps without a dependency");
      h->dependents.push_back(std::move(d));
    } else if (tag == "depres") {
      DependencyResult r;
      if (!(in >> r.t0 >> r.t1 >> r.queue >> r.id >> r.key >> r.state >> r.result)) {
        return bad("short depres");
      }
      if (r.result == "-") r.result.clear();
      h->dependency_results.push_back(std::move(r));
    } else if (tag == "get") {
      MessageRead r;
      if (!(in >> r.t0 >> r.t1 >> r.queue >> r.id >> r.state >> r.token >> r.result)) {
        return bad("short get");
      }
      if (r.result == "-") r.result.clear();
      h->gets.push_back(std::move(r));
    } else if (tag == "schedule") {
      ScheduleUpsert u;
      std::string outcome;
      int created = 0;
      if (!(in >> u.t0 >> u.t1 >> u.queue >> u.name >> u.every_ms >> outcome >> u.next_fire_at >>
            created)) {
        return bad("short schedule");
      }
      if (u.every_ms <= 0) return bad("a schedule's every_ms must be positive");
      ParseOutcome(outcome, &u.outcome, &u.error);
      u.created = created != 0;
      h->schedules.push_back(std::move(u));
    } else if (tag == "flow") {
      FlowSend f;
      std::string outcome, node;
      int resend = 0;
      if (!(in >> f.t0 >> f.t1 >> f.client >> outcome >> resend >> f.duplicates)) {
        return bad("short flow");
      }
      ParseOutcome(outcome, &f.outcome, &f.error);
      f.resend = resend != 0;
      while (in >> node) {
        const auto slash = node.rfind('/');
        if (slash == std::string::npos || slash == 0) return bad("flow node without a parent");
        const std::string parent = node.substr(slash + 1);
        f.keys.push_back(node.substr(0, slash));
        f.parents.push_back(parent == "-" ? -1 : std::atoi(parent.c_str()));
        if (f.parents.back() >= static_cast<int>(f.keys.size()) - 1) {
          return bad("a flow node's parent must come before it");
        }
      }
      if (f.keys.empty() || f.parents[0] != -1) return bad("a flow must start with its root");
      h->flows.push_back(std::move(f));
    } else if (tag == "member") {
      BatchMember m;
      if (!(in >> m.queue >> m.id >> m.batch)) return bad("short member");
      h->members.push_back(std::move(m));
    } else if (tag == "batch") {
      BatchRead r;
      if (!(in >> r.t0 >> r.t1) || !ParseBatchFields(in, &r)) return bad("short batch");
      h->batch_reads.push_back(std::move(r));
    } else if (tag == "kill") {
      Kill k;
      if (!(in >> k.t >> k.round >> k.how)) return bad("short kill");
      h->kills.push_back(k);
    } else if (tag == "inventory-queue" || tag == "inventory" || tag == "schedule-state" ||
               tag == "drained" || tag == "batch-state" || tag == "inventory-end") {
      int64_t t = 0;
      int round = 0;
      if (!(in >> t >> round)) return bad("short inventory line");
      if (!in_block || open.round != round) {
        open = Inventory{};
        open.t = t;
        open.round = round;
        in_block = true;
      }
      if (tag == "inventory-queue") {
        std::string q;
        if (!(in >> q)) return bad("short inventory-queue");
        open.queues.push_back(q);
      } else if (tag == "inventory") {
        InventoryRow row;
        if (!(in >> row.queue >> row.id >> row.state >> row.priority))
          return bad("short inventory");
        if (in >> row.result && row.result == "-") row.result.clear();
        open.rows.push_back(std::move(row));
      } else if (tag == "schedule-state") {
        ScheduleState s;
        if (!(in >> s.queue >> s.name >> s.next_fire_at >> s.last_fire_at >> s.fires >> s.missed >>
              s.failed)) {
          return bad("short schedule-state");
        }
        open.schedules.push_back(std::move(s));
      } else if (tag == "batch-state") {
        BatchRead r;
        if (!ParseBatchFields(in, &r)) return bad("short batch-state");
        r.t0 = r.t1 = t;
        open.batches.push_back(std::move(r));
      } else if (tag == "drained") {
        std::string q;
        if (!(in >> q)) return bad("short drained");
        open.drained.push_back(q);
      } else {
        // "inventory-end T ROUND [READ_UNTIL]" (older histories end at T).
        int64_t until = 0;
        open.read_until = in >> until ? std::max(until, open.t) : open.t;
        h->inventories.push_back(std::move(open));
        open = Inventory{};
        in_block = false;
      }
    } else {
      return bad("unknown event");
    }
  }
  return true;
}

}  // namespace sundial::torture
