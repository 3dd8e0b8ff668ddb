// The torture's checker: reads a whole history (tests/torture/history.h) and reports every
// way the server broke its promises (docs/semantics.md) across the crashes in it, Jepsen-style
// (what the clients were told against what the server held afterwards).
//
// The torture's settings make the model small: leases of one hour (none expires during a
// run: a lease ends only by complete, fail or cancel) except those of `dequeue-short`, which
// are meant to expire (20 ms) and may end at any moment, max_attempts high enough that nothing
// is ever errored, retention of a day (terminal messages stay readable), client-chosen ids that
// are never reused. A request whose outcome is `none` may or may not have happened; one that
// got an error did not happen.
//
// Checks:
//   lost          an acknowledged enqueue is missing from a later inventory;
//   not_stuck     an acknowledged complete / cancel: later the message is not completed /
//                 canceled;
//   state         the last request that changed a message, acknowledged and overlapping no
//                 other that might have, is not what the inventory shows (a dequeue's lease
//                 gone back to pending, a fail undone, ...), or the priority differs from the
//                 last acknowledged one;
//   double_lease  a message leased by an acknowledged dequeue sent after another acknowledged
//                 lease of it had begun and before any request that could end that lease;
//   exclusivity   the same for two messages of one exclusivity value, or two running messages
//                 of one value in an inventory;
//   phantom       a message, a state or a priority that no request sent could have caused;
//   result        a completed message whose result is not the one its acknowledged complete
//                 stored, or (phantom result) is none that a complete sent could store
//                 (docs/semantics.md, "Results and waiting").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/torture/history.h"

namespace sundial::torture {

struct Violation {
  std::string kind;  // lost, not_stuck, state, double_lease, exclusivity, phantom, result
  std::string text;
};

struct Report {
  uint64_t ops = 0;             // requests in the history
  uint64_t acknowledged = 0;    // of which answered ok
  uint64_t acked_enqueues = 0;  // enqueues answered ok
  uint64_t inventories = 0;     // complete inventory blocks
  uint64_t message_checks = 0;  // (message, inventory) pairs compared
  uint64_t lease_checks = 0;    // pairs of acknowledged leases compared
  uint64_t result_checks = 0;   // completed messages whose result was compared
  uint64_t lost = 0;            // distinct messages whose acknowledged enqueue was lost
  std::vector<Violation> violations;

  uint64_t Count(const std::string& kind) const;
  // One line of figures, then one line per violation (at most `max_lines`).
  std::string Summary(size_t max_lines = 50) const;
};

Report Check(const History& history);

}  // namespace sundial::torture
