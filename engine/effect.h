// Effects: every change of engine state, reported as it happens, with absolute times, tokens and
// versions. The WAL logs them and recovery replays them through Engine::Apply, so replay never
// re-runs a selection (which message a dequeue picks, whether a lease expired): it restores
// exactly the state that was produced.
//
// An Effect holds views into engine memory: they are valid only during EffectSink::OnEffect.
// Effects of one queue are delivered in the order they happen, under that queue's shard lock;
// effects of queues on different shards may interleave.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/clock.h"
#include "engine/types.h"

namespace sundial {

enum class EffectType : uint8_t {
  kQueueCreated = 1,     // queue, *settings
  kQueueUpdated = 2,     // queue, *settings (the whole new settings)
  kQueueDeleted = 3,     // queue: removes it and every message in it
  kQueuePurged = 4,      // queue, purge_states: removes every message in those states
  kMessageEnqueued = 5,  // a new message; every field below is meaningful
  kMessageChanged = 6,   // an existing message's new state and mutable fields; `cause` says why
  kMessageRemoved = 7,   // retention ran out (GC, or retention 0): the message and its id are gone
  // The message leaves `queue` and enters `dead_letter_queue` as pending, attempts 0, with `seq`
  // its new enqueue sequence there and metadata x-origin-queue = queue.
  kMessageDeadLettered = 8,
  // A leadership began (docs/replication.md, "Epochs"): `epoch`, and `start_lsn`, the LSN of
  // this record. No queue: the engine keeps the log's epochs in order, in snapshots too.
  kEpochStarted = 9,
  // Schedules (docs/semantics.md, "Schedules"): `queue`, `id` the schedule's name, and
  // `schedule_progress` whole (absolute values), `error` the last refused fire's reason.
  kScheduleUpserted = 10,  // also *schedule: its whole spec (also a snapshot's schedule)
  kScheduleDeleted = 11,   // no progress
  kSchedulePaused = 12,
  kScheduleResumed = 13,
  // Fires made at `time` (their enqueues are the kMessageEnqueued effects just before it;
  // a repeated one, after a crash between the two, is a duplicate: the id is name@T).
  kScheduleFired = 14,
  // Batches (docs/semantics.md, "Batches"): values of their own, from 32. `batch` names the
  // batch. kBatchCreated: `batch_fields`, and when it has a callback its template in `queue`,
  // `id` (resolved), `priority`, `payload`, `packed_metadata`, `max_attempts` (0: the queue's
  // default). A snapshot restates each batch as a kBatchCreated with its whole state
  // (sealed, counts, done). Done is not logged: Apply of the cause (the seal, or the last
  // member's terminal change) derives it and the callback's enqueue again.
  kBatchCreated = 32,
  kBatchSealed = 33,
  kBatchRemoved = 34,  // retention of a done batch ran out (GC)
  // A worker's note on running message `id` under lease `lease_token` (docs/semantics.md,
  // "History"): `note`. Changes nothing but the message's history (engine/history.h).
  kMessageNoted = 35,
  // Flows (docs/semantics.md, "Flows"; engine/flows.h): one enqueue_flow's effects as one
  // group, so that the log holds the whole flow in one record or none of it. `members`: the
  // flow's non-derived effects in the order they happened (kQueueCreated of an auto-created
  // queue, kMessageEnqueued per node); no queue of its own. Apply applies the members in
  // order. The engine reports the group first, then each member again as a derived effect, so
  // that subscribers see the messages and the log holds the group alone. Value 40: 35-39 are
  // left to the history effects.
  kFlowEnqueued = 40,
  // Flow control (docs/wal-format.md, "Token buckets"). Snapshots only: a gated queue's token
  // bucket state after its messages. `id` a flow-key value and `tat_us` its GCRA theoretical
  // arrival time (µs); or, `id` empty, the gate's record: `time` is its last collection time.
  kKeyStateRestated = 49,
  // Derived, never logged nor exported: a rated queue may have a message dequeueable again
  // (due_at 0: now, long polls retry) or a token refill is armed at due_at (the timer thread).
  kQueueReady = 50,
  // set_key_limits (docs/semantics.md, "Per-key limits"): `id` a flow-key value and
  // `key_limits` its overrides, whole (none set: the override is removed). Logged, and restated
  // by snapshots (one per override, before the messages).
  kKeyLimitsSet = 51,
};
inline bool IsScheduleEffect(EffectType t) {
  return t >= EffectType::kScheduleUpserted && t <= EffectType::kScheduleFired;
}
std::string_view EffectTypeName(EffectType type);

// Why a kMessageChanged happened (subscribers and `sundial-wal dump` show it).
enum class ChangeCause : uint8_t {
  kNone = 0,
  kLeased = 1,
  kCompleted = 2,
  kFailed = 3,
  kExtended = 4,
  kCanceled = 5,
  kReprioritized = 6,
  kRedriven = 7,
  kBecameVisible = 8,
  kLeaseExpired = 9,
  kReleased = 10,          // waiting -> pending | invisible: its last dependency completed
  kDependencyFailed = 11,  // waiting -> canceled | errored: a dependency failed (its policy)
  kExpired = 12,           // pending | invisible -> canceled: its ttl ran out ("expired")
  // pending | invisible -> the same or invisible: an enqueue with debounce_ms replaced its
  // payload and metadata (the effect's payload and packed_metadata are the new ones).
  kDebounced = 13,
};
std::string_view ChangeCauseName(ChangeCause cause);

// kBatchCreated's state of the batch (a new one: created_at = time, the rest zero).
struct BatchFields {
  bool has_callback = false;
  int64_t retention_ms = 0;
  TimeMs created_at = 0;
  bool sealed = false;
  bool done = false;
  TimeMs done_at = 0;
  BatchCounts counts;
};

struct Effect {
  EffectType type = EffectType::kMessageChanged;
  ChangeCause cause = ChangeCause::kNone;
  TimeMs time = 0;  // when it happened; becomes the message's updated_at
  std::string_view queue;

  const QueueSettings* settings = nullptr;  // kQueueCreated, kQueueUpdated
  uint8_t purge_states = 0;                 // kQueuePurged: bit (1 << state) per state

  // Message effects: the message's state after the change.
  std::string_view id;
  MessageState from = MessageState::kPending;  // kMessageEnqueued: same as `to`
  MessageState to = MessageState::kPending;
  uint64_t seq = 0;  // enqueue sequence (in dead_letter_queue for kMessageDeadLettered)
  uint64_t version = 0;
  int64_t priority = 0;
  uint32_t attempts = 0;
  uint32_t max_attempts = 0;
  // to == invisible: visible_at; running: lease_expires_at; completed, canceled, errored: the
  // time retention removes it, or 0 when the same operation removes it (retention 0: its
  // kMessageRemoved follows at once); pending: 0.
  TimeMs due_at = 0;
  uint64_t lease_token = 0;
  TimeMs enqueued_at = 0;
  std::string_view payload;          // all message effects (the WAL logs it for kMessageEnqueued)
  std::string_view packed_metadata;  // all message effects; metadata.h format
  std::string_view error;            // kMessageChanged: the message's last_error after the change
  // kMessageChanged to completed, and kMessageEnqueued (ExportState) of a completed message:
  // the result its complete carried (empty: none).
  std::string_view result = {};
  std::string_view dead_letter_queue;  // kMessageDeadLettered
  uint64_t epoch = 0;                  // kEpochStarted
  uint64_t start_lsn = 0;              // kEpochStarted: the LSN of its own record
  // kMessageEnqueued of a waiting message: its dependencies as keys "queue/id", and its policy.
  // A snapshot (ExportState) carries the dependency graph in kMessageChanged effects that
  // restate a dependent unchanged (cause kNone, from = to) after every message: depends_on
  // and the policy as above, and `dependency_edges`, one byte of flags per entry of depends_on
  // (kEdgeListed, kEdgeGone: engine/dependencies.h). Empty everywhere else.
  const std::vector<std::string>* depends_on = nullptr;
  DependencyFailurePolicy on_dependency_failure = DependencyFailurePolicy::kCancel;
  int64_t tat_us = 0;  // kKeyStateRestated
  // kKeyStateRestated: the queue's record (its bucket, the gate's collection time), not a
  // flow-key value's, whose value may be empty like any other.
  bool gate_record = false;
  KeyLimits key_limits = {};  // kKeyLimitsSet
  std::string_view dependency_edges = {};
  // A consequence of the effect before it (a dependent released, canceled or errored by the
  // completion or failure of its dependency: docs/engine.md, "Dependencies"). Subscribers see
  // it; the log does not record it, since Apply of the cause derives it again.
  bool derived = false;
  // Schedule effects (kSchedule*). due_at is the schedule's next fire (0: none), so that a
  // timer sleeping past it wakes.
  const ScheduleSpec* schedule = nullptr;  // kScheduleUpserted
  ScheduleProgress schedule_progress = {};
  // kMessageEnqueued: the batch the message joins. A snapshot (ExportState) restates each
  // active member unchanged in a kMessageChanged (cause kNone, from = to) carrying its batch,
  // after the batches. kBatch*: the batch. Empty everywhere else.
  std::string_view batch = {};
  BatchFields batch_fields = {};  // kBatchCreated
  // History (engine/history.h). kMessageChanged cause kLeased: the dequeue's worker_id (empty:
  // none given). kMessageNoted: the note.
  std::string_view worker_id = {};
  std::string_view note = {};
  // kMessageEnqueued restating a message (ExportState, or a snapshot's record: the reader sets
  // it, the log does not hold it): the message's history is `history`, its history block
  // (empty: none), not a new enqueue's entry.
  bool restated = false;
  std::string_view history = {};
  // kMessageEnqueued (and a snapshot's restatement): when its ttl runs out (0: no ttl; fixed
  // at enqueue, docs/semantics.md, "Expiry"). Other effects carry the message's value too.
  TimeMs expires_at = 0;
  // kFlowEnqueued: its members (none of them a kFlowEnqueued). Null everywhere else.
  const std::vector<Effect>* members = nullptr;
};

class EffectSink {
 public:
  virtual ~EffectSink() = default;
  // Called under the shard lock of the effect's queue (both queues' for kMessageDeadLettered):
  // must be quick and must not call back into the engine.
  virtual void OnEffect(const Effect& effect) = 0;
};

}  // namespace sundial
