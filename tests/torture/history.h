// The torture's history: every request a client sent with its acknowledgement, every kill and
// every inventory read after a restart, as text lines (one event each) that the checker
// (tests/torture/checker.h) reads back. Clients append to their own files; the checker merges
// them by time (CLOCK_MONOTONIC nanoseconds, one clock for every process on the machine).
//
//   op  T0 T1 CLIENT KIND QUEUE OUTCOME ID ARG [ID:TOKEN ...]
//     T0: just before the request was sent; T1: when its outcome was known (both steady ns).
//     KIND: enqueue (ARG = priority), dequeue and dequeue-short (a 20 ms lease, left to
//     expire; ID = the filter "k=v" or "-", ARG = count of leased ID:TOKEN that follow), complete /
//     fail / extend (ARG = lease token), cancel (ARG = 0), reprioritize (ARG = the new priority),
//     trigger (QUEUE: the schedule's; ID: the fire name@T it answered, ARG = T; "-" 0 without
//     an answer), create_batch / seal_batch (ID = the batch, ARG = 0).
//     A dequeue's lease outlasts the run, unless written dequeue/MS: a lease of MS ms, which
//     expires MS ms after it was granted (the failover torture's).
//     OUTCOME: ok, none (no reply: the connection dropped or timed out, so it may or may not
//     have happened) or the error code's name (it did not happen).
//   meta QUEUE ID VALUE           the flow-key value an enqueue carried (an exclusive queue's
//                                 exclusivity value; a queue with a flow_key: that key's)
//   limits QUEUE CONCURRENCY RATE BURST TTL_MS
//                                 the flow-control settings a queue was created with
//                                 (docs/semantics.md, "Flow control"): key_concurrency N,
//                                 key_rate_per_s, key_burst (its effective value), ttl_ms; 0: not
//                                 set (that rule is not applied). A queue with `meta` lines and no
//                                 `limits` line is an exclusive queue: N = 1
//   ttl QUEUE ID TTL_MS           the ttl_ms an enqueue carried (written before its op)
//   grant QUEUE ID TOKEN GRANTED_AT ENQUEUED_AT EXPIRES_AT
//                                 the server's own times (ms since the epoch) of a lease an
//                                 acknowledged dequeue's answer carried: the message's updated_at
//                                 (the grant), enqueued_at, and expires_at (0: the answer shows
//                                 none; then enqueued_at + the ttl stands for it)
//   deps QUEUE ID POLICY KEY...   the dependencies (`queue/id` keys) and on_dependency_failure
//                                 policy (cancel, error, release) an enqueue carried
//   depres T0 T1 QUEUE ID KEY STATE RESULT
//                                 a dependency's outcome (KEY: queue/id; STATE a message state
//                                 or not_found; RESULT "-" for none) carried by the lease of
//                                 dependent ID that a dequeue sent at T0, answered at T1, got
//                                 (or a get of it sent at T0, answered at T1)
//   get T0 T1 QUEUE ID STATE TOKEN RESULT
//                                 a get of a message sent at T0, answered at T1: its state (or
//                                 not_found), lease token and result ("-" for none)
//   schedule T0 T1 QUEUE NAME EVERY_MS OUTCOME NEXT_FIRE_AT CREATED
//                                 an upsert_schedule of an every_ms schedule (misfire `all`) and
//                                 its reply's next_fire_at and created (0 0 unless OUTCOME ok)
//   flow T0 T1 CLIENT OUTCOME RESEND DUPLICATES KEY/PARENT...
//                                 an enqueue_flow (docs/semantics.md, "Flows") of one tree,
//                                 sent at T0, answered at T1; RESEND 1 when it sends again a
//                                 tree sent before (same ids and content), DUPLICATES the nodes
//                                 answered `duplicate` (ok only); then each node in pre-order as
//                                 queue/id/P, P the index of its parent ("-" for the root). A
//                                 first send also writes, before it, one `enqueue` op per node
//                                 (its outcome the flow's) and a `deps` line (policy cancel, the
//                                 children's keys) per node with children, so that every rule of
//                                 messages and dependencies applies to the nodes
//   member QUEUE ID BATCH         an enqueue (the op after it) carried `batch` (docs/semantics.md,
//                                 "Batches"); create_batch and seal_batch are ops whose QUEUE is
//                                 the callback's queue or "-" and whose ID is the batch
//   batch T0 T1 BATCH FIELDS      a get_batch sent at T0, answered at T1 (FIELDS below; the
//                                 callback's state "-": not read)
//   kill T ROUND HOW              the server died: HOW is a failpoint name or "random"
//   inventory-queue T ROUND QUEUE   a queue the inventory read (only those queues are checked)
//   inventory T ROUND QUEUE ID STATE PRIORITY [RESULT]
//     one per message present after a restart (RESULT: a completed message's result, "-" for
//     none; absent in histories written before results);
//   schedule-state T ROUND QUEUE NAME NEXT_FIRE_AT LAST_FIRE_AT FIRES MISSED FAILED
//     a schedule of an inventoried queue, read (get_schedule) before its messages;
//   batch-state T ROUND BATCH FIELDS
//     a batch of the inventoried epochs (get_batch) and its callback message (get), read after
//     the messages; FIELDS: MEMBERS ACTIVE COMPLETED CANCELED ERRORED SEALED DONE CALLBACK
//     CB_TOTAL CB_COMPLETED CB_CANCELED CB_ERRORED (CALLBACK: the callback message's state or
//     not_found; CB_*: its x-batch-* metadata, 0 when absent);
//   drained T ROUND QUEUE         the queue was drained before this inventory: a dequeue that
//     waited found nothing more, every lease it got was completed;
//   a block of them ends with
//   inventory-end T ROUND         (a block without its end is ignored: the server died in it)
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace sundial::torture {

enum class Outcome { kOk, kNone, kError };

struct Op {
  int64_t t0 = 0, t1 = 0;
  std::string client;
  std::string kind;
  std::string queue;
  Outcome outcome = Outcome::kNone;
  std::string error;  // the code's name when kError
  std::string id;     // the message (dequeue: the filter)
  int64_t arg = 0;
  std::vector<std::pair<std::string, uint64_t>> leased;  // dequeue: (id, lease token)
  int64_t lease_ms = 0;  // dequeue: the lease asked for; 0: one that outlasts the run
};

struct InventoryRow {
  std::string queue, id, state;
  int64_t priority = 0;
  std::string result;  // completed: its result ("" none)
};

// The result a torture client's complete with `token` stores for message `id` (the checker
// derives what to expect from the op alone).
std::string ResultFor(const std::string& id, uint64_t token);

// A schedule as an inventory read it (docs/semantics.md, "Schedules").
struct ScheduleState {
  std::string queue, name;
  int64_t next_fire_at = 0, last_fire_at = 0;
  uint64_t fires = 0, missed = 0, failed = 0;
};

// A batch as get_batch read it, with its callback message (docs/semantics.md, "Batches").
struct BatchRead {
  int64_t t0 = 0, t1 = 0;  // an inventory's: both its time
  std::string id;
  uint64_t members = 0, active = 0, completed = 0, canceled = 0, errored = 0;
  bool sealed = false, done = false;
  std::string callback = "-";  // the callback message's state, not_found, or "-" (not read)
  uint64_t cb_total = 0, cb_completed = 0, cb_canceled = 0, cb_errored = 0;
};

struct Inventory {
  int64_t t = 0;           // when its reads began (every row carries it)
  int64_t read_until = 0;  // when they ended: a state read may be from any time in [t, read_until]
  int round = 0;
  std::vector<std::string> queues;
  std::vector<InventoryRow> rows;
  std::vector<ScheduleState> schedules;
  std::vector<std::string> drained;  // queues drained before it was read
  std::vector<BatchRead> batches;    // read after the messages
};

// An enqueue that carried `batch`.
struct BatchMember {
  std::string queue, id, batch;
};

// An enqueue's dependencies (docs/semantics.md, "Dependencies").
struct Dependent {
  std::string queue, id;
  std::string policy;             // cancel, error, release
  std::vector<std::string> keys;  // queue/id
};

// A dependency's outcome as a dependent's lease carried it (include_dependency_results).
struct DependencyResult {
  int64_t t0 = 0, t1 = 0;  // the dequeue's
  std::string queue, id;   // the dependent
  std::string key;         // the dependency, queue/id
  std::string state;       // a message state, or not_found
  std::string result;      // "" none
};

// A message as a get read it.
struct MessageRead {
  int64_t t0 = 0, t1 = 0;
  std::string queue, id;
  std::string state;  // a message state, or not_found
  uint64_t token = 0;
  std::string result;  // "" none
};

// An upsert_schedule of an every_ms schedule (misfire `all`, overlap `allow`, no offset).
struct ScheduleUpsert {
  int64_t t0 = 0, t1 = 0;
  std::string queue, name;
  int64_t every_ms = 0;
  Outcome outcome = Outcome::kNone;
  std::string error;
  int64_t next_fire_at = 0;  // the reply's (ok only)
  bool created = false;
};

// One enqueue_flow of one tree: its nodes in pre-order, each with its parent's index (-1: root).
struct FlowSend {
  int64_t t0 = 0, t1 = 0;
  std::string client;
  Outcome outcome = Outcome::kNone;
  std::string error;
  bool resend = false;
  uint64_t duplicates = 0;        // nodes answered duplicate (ok only)
  std::vector<std::string> keys;  // queue/id
  std::vector<int> parents;
};

// A queue's flow-control settings (docs/semantics.md, "Flow control"); 0: not set.
struct QueueLimits {
  std::string queue;
  uint32_t key_concurrency = 0;  // running messages per flow-key value at once
  double key_rate_per_s = 0;     // leases per flow-key value per second, after...
  uint64_t key_burst = 0;        // ...a burst of this many
  int64_t ttl_ms = 0;            // a message's time to live unless its enqueue gave one
};

// The ttl_ms an enqueue carried.
struct MessageTtl {
  std::string queue, id;
  int64_t ttl_ms = 0;
};

// A lease an acknowledged dequeue got, with the server's times from its answer (ms since the
// epoch, the server's wall clock: comparable across restarts, not with the history's clock).
struct LeaseStamp {
  std::string queue, id;
  uint64_t token = 0;
  int64_t granted_at = 0;   // the message's updated_at: when the lease was granted
  int64_t enqueued_at = 0;  // the message's enqueued_at
  int64_t expires_at = 0;   // when the answer shows it; 0: none shown
};

struct Kill {
  int64_t t = 0;
  int round = 0;
  std::string how;
};

struct History {
  std::vector<Op> ops;
  std::vector<Inventory> inventories;  // complete blocks only
  std::vector<Kill> kills;
  // (queue, id) -> flow-key value (an exclusive queue's exclusivity value)
  std::vector<std::tuple<std::string, std::string, std::string>> meta;
  std::vector<QueueLimits> limits;
  std::vector<MessageTtl> ttls;
  std::vector<LeaseStamp> grants;
  std::vector<Dependent> dependents;
  std::vector<DependencyResult> dependency_results;
  std::vector<MessageRead> gets;
  std::vector<ScheduleUpsert> schedules;
  std::vector<BatchMember> members;
  std::vector<BatchRead> batch_reads;  // clients' get_batch
  std::vector<FlowSend> flows;
};

// Line forms of the events above.
std::string FormatOp(const Op& op);
std::string FormatDependent(const Dependent& d);
std::string FormatDependencyResult(const DependencyResult& r);
std::string FormatMessageRead(const MessageRead& r);
std::string FormatScheduleUpsert(const ScheduleUpsert& u);
std::string FormatFlowSend(const FlowSend& f);
std::string FormatQueueLimits(const QueueLimits& l);
std::string FormatMessageTtl(const MessageTtl& t);
std::string FormatLeaseStamp(const LeaseStamp& g);
// "batch T0 T1 FIELDS", and the FIELDS alone (from BATCH on) for a batch-state line.
std::string FormatBatchRead(const BatchRead& r);
std::string FormatBatchFields(const BatchRead& r);
// Parses every line of `text` into `h` (appending). False and `error` on a malformed line.
bool ParseHistory(const std::string& text, History* h, std::string* error);

}  // namespace sundial::torture
