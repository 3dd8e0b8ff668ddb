#include "tests/torture/history.h"

#include <cstdlib>
#include <sstream>

namespace sundial::torture {

std::string ResultFor(const std::string& id, uint64_t token) {
  return "res:" + id + ":" + std::to_string(token);
}

std::string FormatOp(const Op& op) {
  std::ostringstream out;
  const char* outcome = op.outcome == Outcome::kOk     ? "ok"
                        : op.outcome == Outcome::kNone ? "none"
                                                       : nullptr;
  out << "op " << op.t0 << ' ' << op.t1 << ' ' << op.client << ' ' << op.kind;
  if (op.kind == "dequeue" && op.lease_ms > 0) out << '/' << op.lease_ms;
  out << ' ' << op.queue << ' ' << (outcome != nullptr ? outcome : op.error.c_str()) << ' '
      << (op.id.empty() ? "-" : op.id) << ' ' << op.arg;
  for (const auto& [id, token] : op.leased) out << ' ' << id << ':' << token;
  return out.str();
}

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
      if (outcome == "ok") {
        op.outcome = Outcome::kOk;
      } else if (outcome == "none") {
        op.outcome = Outcome::kNone;
      } else {
        op.outcome = Outcome::kError;
        op.error = outcome;
      }
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
    } else if (tag == "kill") {
      Kill k;
      if (!(in >> k.t >> k.round >> k.how)) return bad("short kill");
      h->kills.push_back(k);
    } else if (tag == "inventory-queue" || tag == "inventory" || tag == "inventory-end") {
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
      } else {
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
