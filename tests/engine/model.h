// Model: a deliberately simple reference implementation of the engine's operations, written from
// docs/semantics.md alone, for the differential test (model_test.cc).
//
// It shares nothing with engine/ but the public value types (types.h, status.h, clock.h) and one
// pure function: a schedule's cron expression is parsed and its next fire times computed by
// engine/cron.h's CronSchedule (tested on its own, tests/engine/cron_test.cc); everything a
// schedule does with those times is the model's own. Queues are a std::vector, each queue's
// messages a std::vector, schedules a std::vector, and every operation is a linear scan. Speed
// is not a goal; being obviously right is. Each method has the signature of the Engine method
// of the same name and returns the same codes and values.
//
// Dependencies (docs/semantics.md, "Dependencies") are held on the dependents: each message
// has a model-wide serial number (`uid`, new for every enqueue and every dead-letter copy), and
// a dependent lists, per depends_on entry, the key "queue/id", the uid of the message it named
// and whether that one has counted as finished. A message that leaves its queue takes its uid
// with it, so a later message with the same key is another dependency. Every consequence (a
// release, a cancel or error by policy, transitively) is found by scanning every queue.
//
// Schedules (docs/semantics.md, "Schedules"): the template's metadata is kept unpacked, so the
// ScheduleInfo the model returns has an empty spec.packed_metadata (the test unpacks the
// engine's to compare), and last_error holds only "fire at T" (the engine's reason text
// follows). Advance makes the timers' transitions first, then the schedules' fires.
//
// Batches (docs/semantics.md, "Batches"): a list of BatchInfo the model counts itself; each
// message that joined and is not terminal yet names its batch (Message::batch, cleared at its
// first terminal state, a dead-letter move or its removal). A batch made done during an
// operation enqueues its callback when that operation returns (CallbackFlush), before the
// schedules' fires in Advance; done batches are removed at done_at + retention_ms, at the end
// of Advance. Members are in the dependency graph (kept past retention 0 until Advance).
//
// Flows (docs/semantics.md, "Flows"): EnqueueFlow checks the whole forest first (limits in
// pre-order, each node's arguments, resends, then each new node against the state in the order
// it would be enqueued, post-order, then the memory budget for all of them: the engine's order
// where the docs leave it open), then enqueues the new nodes children first through the same
// path as an enqueue, each waiting on its children and then its own depends_on.
//
// Advance order. Dependencies and dead-letter moves cross queues, so what one Advance does can
// depend on the order it visits queues (semantics.md, "Small conventions"). The engine visits
// them by shard; Options::visit_rank, when set, gives the model the same order (ties, and no
// rank: creation order).
//
// Nondeterminism. The engine draws lease tokens, generated ids and fail-backoff jitter at random;
// the model cannot predict them, so it is told them:
//   - Enqueue takes `generated_ids`: the id to use for item i when its id is empty;
//   - Dequeue takes `lease_tokens`: the token for the k-th message it leases;
//   - Fail takes `choose_backoff`: called with the legal range [lo, hi] of the jittered backoff
//     delay, it returns the delay to use.
// When a value is not given the model uses a placeholder that the engine will not match, so a
// divergence still shows.
//
// Checks run in this order (semantics.md leaves most of it open; this is the engine's order):
// the queue name; then every check of the arguments alone (ids, limits, filters, settings); then
// the queue's existence; then the message and its state. Batch operations (enqueue, complete,
// cancel, redrive) check the batch size and the queue for all items, then each item on its own.
// An enqueue item with depends_on: its arguments, then its dependencies' existence (NOT_FOUND),
// then the exclusivity key, then duplicate, pause, depth and budget (semantics.md, "Enqueue").
//
// History (docs/semantics.md, "History") is kept on each message as the list of entries `history`
// returns (event, from/to, attempt, token, text, time; the dropped count), built by the model's own
// RecordHistory at each transition, with the bounds and the coalescing of extends the doc gives.
// The token of an entry that ends a lease (a fail, an expiry, a cancel, a dead-letter move) is
// the token of that lease, which the model knows from its record; worker_id is resolved on read
// from the kept `leased` entry of that token. Its bytes (14 + 22 per entry + texts) are counted
// in memory_bytes() from those entries, not by engine/history.cc.
//
// Expiry, dedupe while_active and debounce (docs/semantics.md, "Flow control") are scans: every
// Advance (per queue: expiries, timers, expiries again) and every dequeue cancels the pending and
// invisible messages whose expires_at has passed, in (expires_at, seq) order (Advance: before
// each timer).
//
// Token buckets (docs/semantics.md, "Rates", "Per-key rates"): credit form in micro-tokens
// (Bucket below), not the engine's GCRA. A dequeue takes a queue token (out of them: it stops),
// then the key's (out of them: the value is throttled and passed by). Throttled values (soft in
// the engine) are the model's list: set by a dequeue that finds the value without a token or
// whose grant empties it, cleared by a dequeue, an Advance or a change of one of the queue's
// messages (a stamp: the latest is LastStamp) at or after its next token and by a key rate or
// burst change; their pending messages are blocked, explain says key_rate until the next token.
//
// Per-value overrides (docs/semantics.md, "Per-key limits") are a list by value: the limits in
// effect for a value are its override's fields, else the queue's (LimitOf, KeyRateOf...). A
// set_key_limits that changes a value's rate or burst rebuckets it as update_queue does (the
// time until full kept) and ends its throttled state. list_keys lists the values with pending or
// running messages, the overridden ones and the *cooling* ones: no message, a bucket not full by
// the queue's latest stamp (the time of the latest change to one of its messages: the engine's
// gate forgets a value only then). The latest stamp is the latest updated_at of the queue's
// messages and of those it removed (stamp_floor), a dead-letter move aside: it moves the message
// out without stamping the source queue.
//
// Fair share (docs/semantics.md, "Fair share"): whose turn it is is the engine's soft state (the
// rotation), which the model does not copy. An unfiltered dequeue of a weighted queue is checked
// instead: an overdue head goes first (the earliest; deterministic); otherwise the engine's
// next lease (FairChoices::leased) must be the earliest message of a value with a dequeueable
// message and a token, and keep the dequeue's shares: no value that was dequeueable at every
// step gets more than two turns ahead of another (served/weight). A lease the rules do not
// allow makes the model take its own earliest-deadline choice, so the divergence shows. Values
// without a token that the engine may have visited (and throttled) in a dequeue that stopped
// early are asked of the engine (FairChoices::throttled); one that ran out of candidates visited
// them all. explain's fair_share is checked by the test: it must name another value with a
// dequeueable message.
//
// Browse cursors are the model's own ("<priority>:<seq>"); they are never comparable with the
// engine's.
//
// Thread safety: none (single-threaded tests only).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/clock.h"
#include "engine/cron.h"
#include "engine/flows.h"  // FlowNode, FlowNodeResult and the flow limits (value types)
#include "engine/status.h"
#include "engine/types.h"

namespace sundial::model {

inline constexpr uint64_t kModelMessageOverheadBytes = 80;
inline constexpr int64_t kMaxLeaseMs = 43'200'000;
inline constexpr int64_t kMaxDelayMs = 3'153'600'000'000;
inline constexpr uint32_t kMaxAttemptsLimit = 1'000'000;
inline constexpr size_t kMaxExclusivityKeyBytes = 64;

class Model {
 public:
  struct Options {
    uint64_t memory_budget_bytes = 0;  // 0: unlimited
    size_t max_payload_bytes = 1 << 20;
    size_t max_result_bytes = kDefaultMaxResultBytes;
    bool auto_create_queues = true;
    // The order in which Advance visits queues (lower first); null: creation order.
    std::function<size_t(std::string_view)> visit_rank = nullptr;
  };

  // One depends_on entry of a dependent.
  struct Dependency {
    std::string key;        // "queue/id", resolved
    uint64_t uid = 0;       // the message it named at enqueue
    bool finished = false;  // it completed (or failed, under the release policy)
  };

  // A message as the model stores it: the record get() returns, plus the queue-internal fields.
  struct Message {
    MessageRecord record;
    uint64_t seq = 0;                      // enqueue sequence in its queue
    TimeMs gc_at = 0;                      // terminal: when retention GC removes it
    bool gc_held = false;                  // Advance found it due but held (counted once)
    uint64_t uid = 0;                      // model-wide serial (see the top of this file)
    std::vector<Dependency> dependencies;  // as listed at enqueue (empty: not a dependent)
    DependencyFailurePolicy policy = DependencyFailurePolicy::kCancel;
    // History: entries oldest first (the first, then the latest), dropped count; worker_id of
    // the entries left empty (resolved by History()). No entries: the message holds no history.
    MessageHistory history;
    // A dependent, or listed by one: never removed by the finishing operation (retention 0).
    bool in_graph = false;
    // Batches: the batch it is an active member of (empty: none, or no longer active).
    std::string batch;
  };

  struct Schedule {
    std::string queue;
    std::string name;
    ScheduleSpec spec;  // packed_metadata empty: `metadata` instead
    Metadata metadata;
    ScheduleProgress progress;
    std::string last_error;
    std::optional<CronSchedule> cron;
  };

  // A token bucket (docs/semantics.md, "Rates", "Per-key rates") in credit form, independent of
  // the engine's GCRA: `tokens` in micro-tokens (1e-6 token) as of `at` (ms); it refills by
  // rate_milli micro-tokens per ms (R tokens/s = R·1e6 micro-tokens per 1000 ms) up to
  // burst·1e6; a grant takes 1e6. While the rate is 0 it holds only `full_at_us`, when it is
  // full. No bucket: full. A rate or burst change keeps the time until the bucket is full (no
  // refill, no reset: the old missing credit over the old rate, times the new rate; it may leave
  // the bucket in debt), and when it is full already, since when (`full_at_us`: the engine's gate
  // keeps a value without messages until its bucket is full by the queue's latest stamp). Exact in
  // integers when rate_milli divides 1e6 (every T a whole ms): the test picks only such rates.
  struct Bucket {
    int64_t tokens = 0;
    TimeMs at = 0;
    int64_t full_at_us = 0;  // rate 0, or full at `at` already: since when (µs)
  };

  struct Queue {
    std::string name;
    QueueSettings settings;
    uint64_t next_seq = 1;
    std::vector<Message> messages;  // in no particular order
    std::optional<Bucket> bucket;   // the queue-wide one (rate_milli, burst)
    std::vector<std::pair<std::string, Bucket>> key_buckets;  // per flow-key value
    // Values out of tokens that a dequeue found so or whose grant emptied them, until the
    // refill at a dequeue or Advance at or after their next token (or a key rate change):
    // their pending messages are blocked, explain says key_rate (semantics.md: "throttled").
    std::vector<std::string> throttled;
    // A dequeue found the queue's bucket empty: its next token (soft, like throttled; cleared by
    // a dequeue or Advance at or after it and by a settings change); explain says queue_rate.
    TimeMs queue_refill = 0;
    std::vector<std::pair<std::string, KeyLimits>> limits;  // per-value overrides, by value
    TimeMs stamp_floor = 0;  // the latest updated_at of the messages it removed
  };

  // What the engine chose in a fair-share dequeue (see the top of this file).
  struct FairChoices {
    std::vector<std::string> leased;                        // ids, in order
    std::function<bool(std::string_view value)> throttled;  // after the dequeue
  };

  // Returns the backoff delay to use, in [lo, hi].
  using ChooseBackoff = std::function<int64_t(int64_t lo, int64_t hi)>;

  Model(Options options, const Clock* clock);

  // ---- Queues -------------------------------------------------------------------------------
  Result<QueueInfo> CreateQueue(std::string_view name, const QueueSettings& settings);
  Result<QueueInfo> UpdateQueue(std::string_view name, const QueueSettingsUpdate& update);
  Result<QueueInfo> GetQueue(std::string_view name) const;
  std::vector<QueueInfo> ListQueues() const;
  Result<KeyInfo> SetKeyLimits(std::string_view queue, std::string_view value,
                               const KeyLimits& limits);
  Result<KeyInfo> GetKeyLimits(std::string_view queue, std::string_view value) const;
  Result<std::vector<KeyInfo>> ListKeys(std::string_view queue, KeyOrder order,
                                        uint32_t limit) const;
  Status DeleteQueue(std::string_view name);
  Result<uint64_t> PurgeQueue(std::string_view name, const std::vector<MessageState>& states);

  // ---- Messages -----------------------------------------------------------------------------
  std::vector<Result<EnqueueResult>> Enqueue(std::string_view queue, std::vector<EnqueueItem> items,
                                             const std::vector<std::string>& generated_ids = {});
  Result<std::vector<MessageRecord>> Dequeue(std::string_view queue, const DequeueRequest& request,
                                             const std::vector<uint64_t>& lease_tokens = {},
                                             const FairChoices* fair = nullptr);
  std::vector<Status> Complete(std::string_view queue, const std::vector<CompleteItem>& items);
  Result<FailResult> Fail(std::string_view queue, const FailRequest& request,
                          const ChooseBackoff& choose_backoff = nullptr);
  Result<TimeMs> Extend(std::string_view queue, std::string_view id, uint64_t lease_token,
                        int64_t lease_ms);
  std::vector<Status> Cancel(std::string_view queue, const std::vector<std::string>& ids);
  Result<uint64_t> CancelByFilter(std::string_view queue, const Filter& filter);
  Result<uint64_t> Reprioritize(std::string_view queue, std::string_view id,
                                const ReprioritizeRequest& request);
  Result<uint64_t> ReprioritizeByFilter(std::string_view queue, const Filter& filter,
                                        const ReprioritizeRequest& request);
  std::vector<Status> Redrive(std::string_view queue, const std::vector<std::string>& ids);
  Result<uint64_t> RedriveByFilter(std::string_view queue, const Filter& filter);

  Result<MessageRecord> Get(std::string_view queue, std::string_view id) const;
  Result<std::vector<std::pair<std::string, Result<MessageOutcome>>>> DependencyOutcomes(
      std::string_view queue, std::string_view id) const;
  std::vector<Result<MessageOutcome>> Outcomes(std::string_view queue,
                                               const std::vector<std::string>& ids) const;
  Result<BrowsePage> Browse(std::string_view queue, const BrowseRequest& request) const;
  Result<StateCounts> Count(std::string_view queue, const Filter& filter) const;
  Result<Explanation> Explain(std::string_view queue, std::string_view id) const;
  Result<Explanation> ExplainFilter(std::string_view queue, const Filter& filter) const;

  // ---- Schedules ----------------------------------------------------------------------------
  // The engine's overload that takes the template's metadata unpacked (spec.packed_metadata is
  // ignored).
  Result<ScheduleUpsertResult> UpsertSchedule(std::string_view queue, std::string_view name,
                                              ScheduleSpec spec, const Metadata& metadata);
  Result<ScheduleInfo> GetSchedule(std::string_view queue, std::string_view name) const;
  std::vector<ScheduleInfo> ListSchedules(std::string_view queue) const;
  Status DeleteSchedule(std::string_view queue, std::string_view name);
  Result<ScheduleInfo> PauseSchedule(std::string_view queue, std::string_view name);
  Result<ScheduleInfo> ResumeSchedule(std::string_view queue, std::string_view name);
  Result<ScheduleTriggerResult> TriggerSchedule(std::string_view queue, std::string_view name);
  const Schedule* FindSchedule(std::string_view queue, std::string_view name) const;

  // ---- Batches (docs/semantics.md, "Batches"; model.cc, "Batches") ---------------------------
  // A batch's members are counted on the messages themselves (Message::batch); the callback
  // of a batch made done during an operation is enqueued at the end of that operation (the
  // model's queues may not grow while an operation holds references into them).
  Result<BatchInfo> CreateBatch(const CreateBatchRequest& request);
  Result<BatchInfo> SealBatch(std::string_view id);
  Result<BatchInfo> GetBatch(std::string_view id) const;
  const std::vector<BatchInfo>& batches() const { return batches_; }
  // The callbacks ("queue/id") enqueued since the last call, in order.
  std::vector<std::string> TakeCallbacks() { return std::exchange(callbacks_, {}); }

  // ---- Flows (docs/semantics.md, "Flows"; model.cc, "Flows") ---------------------------------
  // `generated_ids[i]`: the id to use for node i (pre-order) when its id is empty. The byte
  // limit of a flow (kMaxFlowBytes) is not modelled: the engine's count is approximate, and the
  // test never comes near it.
  Result<std::vector<FlowNodeResult>> EnqueueFlow(
      const std::vector<FlowNode>& roots, const std::vector<std::string>& generated_ids = {});

  // ---- History (docs/semantics.md, "History") -----------------------------------------------
  Result<MessageHistory> History(std::string_view queue, std::string_view id) const;
  Status Note(std::string_view queue, std::string_view id, uint64_t lease_token,
              std::string_view text);
  // Accounted bytes of a message's history: 14 + per entry 22 + its text (0 without entries).
  static uint64_t HistoryBytes(const MessageHistory& history);

  // ---- Time and inspection ------------------------------------------------------------------
  // Timers (visibility, lease expiry, retention GC), then schedule fires. Returns the number of
  // timer transitions plus the fires that enqueued.
  uint64_t Advance(TimeMs now);
  uint64_t memory_bytes() const;

  // For the test driver: the model's whole state (queues in creation order).
  const std::vector<Queue>& queues() const { return queues_; }
  const std::vector<Schedule>& schedules() const { return schedules_; }
  // How many times Advance found a terminal message due for GC but held by a waiting dependent
  // (its removal is looked at again later; the engine reports no effect for that).
  uint64_t held_rechecks() const { return held_rechecks_; }
  const Queue* FindQueue(std::string_view name) const;
  // Fair share's explain (model.h top): the flow-key value of message `id`, and whether `value`
  // has a dequeueable message (pending, not held, not throttled).
  std::optional<std::string> ValueOf(std::string_view queue, std::string_view id) const;
  bool Dequeueable(std::string_view queue, std::string_view value) const;

  // Accounted bytes of one message: overhead + id + payload + packed metadata + result.
  static uint64_t AccountedBytes(const MessageRecord& record);
  // The same with its history.
  static uint64_t AccountedBytes(const Message& message);
  static uint64_t PackedMetadataBytes(const Metadata& metadata);
  // The legal range [lo, hi] of a jittered backoff for a message failing after `attempts`.
  static std::pair<int64_t, int64_t> BackoffRange(const QueueSettings& settings, uint32_t attempts);

 private:
  Queue* MutableQueue(std::string_view name);
  // `forced`: a batch's callback (enqueue_paused, max_depth and the budget do not refuse it).
  Result<EnqueueResult> EnqueueOne(size_t queue_index, const EnqueueItem& item,
                                   const std::string& generated_id, TimeMs now,
                                   bool forced = false);
  QueueInfo Info(const Queue& queue, TimeMs now) const;
  // An enqueue with debounce_ms met pending or invisible message `index` (semantics.md,
  // "Debounce").
  Result<EnqueueResult> Debounce(Queue& queue, size_t index, const EnqueueItem& item, TimeMs now);
  // Cancels, as expired, every pending or invisible message of `queue` whose ttl ran out by
  // `now`, in (expires_at, seq) order; returns how many.
  uint64_t ExpireDue(Queue& queue, TimeMs now);
  // Removes message `index` of `queue`, keeping its updated_at as the queue's stamp floor (a
  // dead-letter move, which does not stamp the source, erases by hand).
  static void Remove(Queue& queue, size_t index);
  KeyInfo DescribeKey(const Queue& queue, std::string_view value, TimeMs now) const;
  Status ValidateSettings(std::string_view name, const QueueSettings& settings) const;
  Status ValidateItem(const EnqueueItem& item) const;
  // Turns the running message at `index` of `queue` errored, moving it to the dead-letter queue
  // when the rules allow. Returns the dead-letter queue's name when it moved.
  // `event` (failed, lease_expired) and `lease_token` (the lease it ends) are for the history.
  // `stamped_before`: the message's updated_at before the operation (a move does not stamp
  // `queue`).
  std::string ErrorOrDeadLetter(Queue& queue, size_t index, TimeMs now, HistoryEvent event,
                                uint64_t lease_token, TimeMs stamped_before);
  // Makes the message at `index` terminal; with retention 0 removes it instead (returns true:
  // `index` then names the message after it).
  bool MakeTerminal(Queue& queue, size_t index, MessageState state, TimeMs now);
  // A request's cancel of the live message at `index` (with its history entry); returns
  // MakeTerminal's answer.
  bool CancelMessage(Queue& queue, size_t index, TimeMs now);
  // A message named `key` with `uid` finished: completed, or failed (canceled, errored,
  // removed: `verb` says which). Its waiting dependents follow (docs/semantics.md,
  // "Dependencies"), transitively.
  void DependencyCompleted(uint64_t uid, TimeMs now);
  void DependencyFailed(uint64_t uid, const std::string& key, const std::string& verb, TimeMs now);
  // Waiting dependents with an unfinished entry for `uid`, in the order they were enqueued.
  std::vector<std::pair<Queue*, size_t>> WaitingOn(uint64_t uid);
  void Release(Queue& queue, Message& message, TimeMs now);
  // Whether a waiting dependent listed `uid` (a terminal one is then kept past retention).
  bool IsHeld(uint64_t uid) const;
  // Messages of `queue_name` left it without finishing (purged, queue deleted): failures.
  void DependenciesRemoved(const std::string& queue_name, std::vector<Message> removed, TimeMs now);
  Schedule* MutableSchedule(std::string_view queue, std::string_view name);
  // History: the entry of a transition of `message` (of `queue`) from `from` to its state now,
  // when the queue keeps history (history_max > 0).
  static void RecordHistory(const Queue& queue, Message& message, HistoryEvent event,
                            MessageState from, TimeMs now, uint64_t lease_token = 0,
                            std::string_view text = {});
  ScheduleInfo InfoOf(const Schedule& schedule) const;
  // Makes the fires `fires` of `schedule` (docs/semantics.md, "Schedules").
  void MakeFires(Schedule& schedule, const std::vector<TimeMs>& fires, TimeMs after,
                 uint64_t dropped, bool check_overlap, uint64_t* enqueued, bool* duplicate);
  uint64_t FireSchedules(TimeMs now);
  static TimeMs NextFire(const Schedule& schedule, TimeMs after);
  // Batches.
  // Enqueues the pending callbacks when the operation that declares it returns.
  struct CallbackFlush {
    Model* model;
    explicit CallbackFlush(Model* m) : model(m) {}
    ~CallbackFlush() { model->EnqueueCallbacks(model->clock_->NowMs()); }
    CallbackFlush(const CallbackFlush&) = delete;
    CallbackFlush& operator=(const CallbackFlush&) = delete;
  };
  BatchInfo* MutableBatch(std::string_view id);
  // `message`, an active member, stopped being active with outcome `state` (completed, canceled
  // or errored); its batch may be done.
  void FinishMember(Message& message, MessageState state, TimeMs now);
  // Enqueues the callbacks of the batches made done since the last call.
  void EnqueueCallbacks(TimeMs now);
  // Removes the done batches whose retention ran out; returns how many.
  uint64_t RemoveDueBatches(TimeMs now);

  Options options_;
  const Clock* clock_;
  std::vector<Queue> queues_;
  std::vector<Schedule> schedules_;  // in no particular order
  uint64_t placeholder_counter_ = 0;
  uint64_t next_uid_ = 1;
  uint64_t held_rechecks_ = 0;
  std::vector<BatchInfo> batches_;         // in creation order
  std::vector<std::string> done_batches_;  // done, callback not enqueued yet
  std::vector<std::string> callbacks_;     // enqueued, not taken yet
};

// Validation helpers (public so the test driver can build valid and invalid inputs).
bool IsValidUtf8(std::string_view s);
bool IsValidQueueName(std::string_view name);
// Truncates to at most `max_bytes` without splitting a UTF-8 sequence.
std::string TruncateUtf8(std::string_view s, size_t max_bytes);

}  // namespace sundial::model
