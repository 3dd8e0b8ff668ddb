// The torture's checker: reads a whole history (tests/torture/history.h) and reports every
// way the server broke its promises (docs/semantics.md) across the crashes in it, Jepsen-style
// (what the clients were told against what the server held afterwards).
//
// The torture's settings make the model small: leases of one hour (none expires during a
// run: a lease ends only by complete, fail or cancel) except those of `dequeue-short`, which
// are meant to expire (20 ms) and may end at any moment, and those of `dequeue/MS` (the
// failover torture's), which last MS ms from their grant: granted within their request's
// [t0, t1], held at least until t0 + MS and at most until t1 + MS (less and more a margin of
// kLeaseMarginMs for the server's millisecond wall clock against the history's monotonic one).
// max_attempts high enough that nothing is ever errored, retention of a day (terminal
// messages stay readable), client-chosen ids that are never reused. A request whose outcome is
// `none` may or may not have happened; one that got an error did not happen.
//
// Checks:
//   lost          an acknowledged enqueue is missing from a later inventory;
//   not_stuck     an acknowledged complete / cancel: later the message is not completed /
//                 canceled;
//   state         the last request that changed a message, acknowledged and overlapping no
//                 other that might have, is not what the inventory shows (a dequeue's lease
//                 gone back to pending, a fail undone, ...), or the priority differs from the
//                 last acknowledged one;
//   double_lease  two acknowledged leases of one message held at once for certain: each was
//                 granted (answered) before the other could have expired or been ended by a
//                 request (complete or fail with its token, a cancel) sent before;
//   key_concurrency
//                 (docs/semantics.md, "Flow control") more than N messages of one flow-key
//                 value (an exclusive queue's exclusivity value: N = 1) held at once for certain
//                 (each lease granted before every other could have expired or been ended, as
//                 for double_lease; one dequeue that leased several counts), or more than N
//                 running messages of one value in an inventory. N: the queue's
//                 key_concurrency from its `limits` line;
//   key_rate      per flow-key value of a queue with key_rate_per_s R and key_burst B, from
//                 the server's grant times of the leases answered (`grant` lines, across
//                 restarts: no fresh burst after one), sorted: for i <= j, j - i + 1 grants
//                 in t_j - t_i ms exceed B + floor(R * (t_j - t_i) / 1000) + 1; and in the
//                 history's times: more acknowledged leases sent and answered within [a, b]
//                 than B + floor(R * (b - a + kLeaseMarginMs) / 1000) + 1;
//   expired_delivered
//                 a lease of a message with a ttl (its enqueue's, else its queue's) granted at
//                 or after its expires_at (server times: the answer's, else enqueued_at + ttl),
//                 or answered to a dequeue sent later than its enqueue's acknowledgement + ttl +
//                 kLeaseMarginMs. An expired message is canceled: a canceled message with a ttl
//                 and no cancel sent is no phantom once its ttl (less the margin) may have run
//                 out since its enqueue was sent, and its expiry fails its dependents;
//   stale_token   an acknowledged complete of a lease that was over when it was sent: another
//                 lease of the message had been granted since, or its time had run out (and no
//                 earlier complete with the token could have come in time: a repeat is
//                 idempotent);
//   redelivered   a message leased again by a dequeue sent after its complete was
//                 acknowledged;
//   phantom       a message, a state or a priority that no request sent could have caused;
//   result        a completed message whose result is not the one its acknowledged complete
//                 stored, or (phantom result) is none that a complete sent could store
//                 (docs/semantics.md, "Results and waiting"); the same for a get, and for a
//                 dependency's outcome that a dependent's lease or get carried
//                 (include_dependency_results); a get's completed message whose result does
//                 not name the lease token it shows;
//   dependency    a dependent (docs/semantics.md, "Dependencies") leased, or shown out of
//                 waiting other than canceled or errored, before a complete (under `release`:
//                 or a failure) of each of its dependencies was sent; shown waiting although no
//                 dependency in the same read is unfinished, or (policy cancel or error) one
//                 failed; canceled or errored by a failure no request could have caused (a
//                 phantom);
//   schedule      a fire of an every_ms schedule (misfire `all`) that is not at one of its times
//                 (two ids for one fire), before its first, or missing between the earliest
//                 fire read and the latest the server made, beyond those it counted dropped
//                 (docs/semantics.md, "Schedules"); a fire is otherwise a message like any
//                 other, acknowledged once a dequeue that leased it or a trigger that made it
//                 was; a fire off the times is a trigger's (acknowledged, or one per trigger
//                 without an answer), and a last_fire_at that is a trigger's time bounds
//                 nothing;
//   drain         a message pending or invisible in a queue drained before the read (a dequeue
//                 that waited found nothing more);
//   batch         (docs/semantics.md, "Batches") an enqueue with `batch` acknowledged after a
//                 seal of it was, or refused as sealed with no seal sent; a read of a batch
//                 (get_batch) whose counts do not add up, done other than sealed with no member
//                 active, unsealed after an acknowledged seal or sealed with none sent, with
//                 members or completed / canceled counts outside what its members' requests
//                 acknowledged and sent, or below a read before it; an inventory's whose counts
//                 are not exactly the states of the members it shows, whose callback message
//                 is missing while done or present while not, or carries x-batch-* counts
//                 other than the batch's; an acknowledged create not found;
//   flow          (docs/semantics.md, "Flows") an inventory after a tree was acknowledged (sent
//                 or resent, answered ok) that does not hold every node of it, or one after it
//                 was sent that holds some nodes but not all (a flow is one log record); a
//                 resend answered ok with some nodes duplicate but not all, or with none although
//                 the tree had been acknowledged or shown whole before it was sent, or refused
//                 ALREADY_EXISTS (other content) with no reprioritize of the root sent. The nodes
//                 are also messages (an `enqueue` op each) and dependents of their children (a
//                 `deps` line each): every rule above applies to them, `dependency` for a node
//                 leased or shown released before each child's complete was sent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/torture/history.h"

namespace sundial::torture {

struct Violation {
  // lost, not_stuck, state, double_lease, key_concurrency, key_rate, expired_delivered,
  // stale_token, redelivered, phantom, result, dependency, schedule, drain, batch, flow
  std::string kind;
  std::string text;
};

struct Report {
  uint64_t ops = 0;                // requests in the history
  uint64_t acknowledged = 0;       // of which answered ok
  uint64_t acked_enqueues = 0;     // enqueues answered ok
  uint64_t inventories = 0;        // complete inventory blocks
  uint64_t message_checks = 0;     // (message, inventory) pairs compared
  uint64_t lease_checks = 0;       // pairs of acknowledged leases compared (one message or value)
  uint64_t result_checks = 0;      // completed messages whose result was compared
  uint64_t dependency_checks = 0;  // dependents' leases and states judged against their deps
  uint64_t schedule_checks = 0;    // fire times looked for in an inventory
  uint64_t drain_checks = 0;       // messages of drained queues looked at
  uint64_t batch_checks = 0;       // reads of batches judged
  uint64_t flow_checks = 0;        // (tree, inventory) pairs and resends judged
  uint64_t rate_checks = 0;        // windows of grants of one flow-key value judged
  uint64_t expiry_checks = 0;      // leases of messages with a ttl judged
  uint64_t lost = 0;               // distinct messages whose acknowledged enqueue was lost
  std::vector<Violation> violations;

  uint64_t Count(const std::string& kind) const;
  // One line of figures, then one line per violation (at most `max_lines`).
  std::string Summary(size_t max_lines = 50) const;
};

// The slack allowed between a lease's time on the server and the history's clock.
inline constexpr int64_t kLeaseMarginMs = 100;

Report Check(const History& history);

}  // namespace sundial::torture
