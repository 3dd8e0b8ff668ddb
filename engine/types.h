// Domain types of the engine's public API: queue settings, messages as seen by callers, and the
// requests and answers of every operation (docs/protocol.md, "Requests"). Plain value types; see
// engine.h for the operations and docs/semantics.md for the rules.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/clock.h"
#include "engine/status.h"

namespace sundial {

// Limits (docs/semantics.md, "Limits").
inline constexpr size_t kMaxIdBytes = 128;
inline constexpr size_t kMaxQueueNameBytes = 128;
inline constexpr size_t kMaxMetadataPairs = 16;
inline constexpr size_t kMaxMetadataKeyBytes = 64;
inline constexpr size_t kMaxMetadataValueBytes = 256;
inline constexpr size_t kMaxErrorBytes = 1024;
inline constexpr size_t kMaxFilterPairs = 4;
inline constexpr size_t kMaxBatchItems = 1000;
inline constexpr size_t kMaxDependencies = 100'000;  // depends_on entries of one message (fan-in)
// Bytes of one message's depends_on entries written as "queue/id" keys: its enqueue is one log
// record, below the log's 16 MiB (docs/semantics.md, "Limits").
inline constexpr size_t kMaxDependencyKeyBytes = size_t{12} << 20;
inline constexpr uint32_t kMaxDequeueCount = 1000;
inline constexpr uint32_t kMaxBrowseLimit = 1000;
inline constexpr uint64_t kMaxLeaseToken = (uint64_t{1} << 53) - 1;
// Default of Engine::Options::max_result_bytes (--max-result-bytes): a complete's result.
inline constexpr size_t kDefaultMaxResultBytes = size_t{64} << 10;
// History (docs/semantics.md, "History"): entries kept per message by default (a queue's
// history_max: 0 turns history off, else 2..kMaxHistoryEntries), and the limits of a dequeue's
// worker_id and of a note's text.
inline constexpr uint32_t kDefaultHistoryMax = 32;
inline constexpr uint32_t kMaxHistoryEntries = 1000;
inline constexpr size_t kMaxWorkerIdBytes = 128;
inline constexpr size_t kMaxNoteBytes = 1024;
// Metadata key under which a dead-lettered message records the queue it came from.
inline constexpr std::string_view kOriginQueueKey = "x-origin-queue";

enum class MessageState : uint8_t {
  kInvisible = 0,
  kPending = 1,
  kRunning = 2,
  kCompleted = 3,
  kCanceled = 4,
  kErrored = 5,
  // Enqueued with depends_on: not dequeueable until its last dependency completes
  // (docs/semantics.md, "Dependencies"). Not terminal.
  kWaiting = 6,
};
inline constexpr size_t kStateCount = 7;
std::string_view StateName(MessageState s);  // "invisible", "pending", ...
std::optional<MessageState> ParseState(std::string_view name);
inline bool IsTerminal(MessageState s) {
  return s == MessageState::kCompleted || s == MessageState::kCanceled ||
         s == MessageState::kErrored;
}

// What happens to a waiting message when one of its dependencies is canceled or errored
// (docs/semantics.md, "Dependencies").
enum class DependencyFailurePolicy : uint8_t {
  kCancel = 0,   // it is canceled, with a reason naming the dependency (default)
  kRelease = 1,  // the dependency counts as finished: it runs anyway
  kError = 2,    // it becomes errored, with a reason naming the dependency
};

enum class QueueType : uint8_t { kSimple = 0, kExclusive = 1 };
std::string_view QueueTypeName(QueueType t);  // "simple", "exclusive"

// What an enqueue with an existing id does when that message is terminal (docs/semantics.md,
// "Flow control"): keep the id (duplicate, as always) or release it and enqueue anew.
enum class Dedupe : uint8_t { kKeep = 0, kWhileActive = 1 };
std::string_view DedupeName(Dedupe d);  // "keep", "while_active"

// How a gated queue's dequeues choose among its flow-key values (docs/semantics.md, "Fair
// share"): earliest deadline first over every value (none), or weighted deficit round robin
// among the values with a dequeueable message, earliest deadline first within one (weighted).
enum class Fairness : uint8_t { kNone = 0, kWeighted = 1 };
std::string_view FairnessName(Fairness f);  // "none", "weighted"

// Flow-control limits (docs/semantics.md, "Flow control").
inline constexpr uint32_t kMaxKeyConcurrency = 1'000'000;
// Token buckets: rates in milli-tokens per second (rate_per_s × 1000, at most 1e6/s), bursts.
inline constexpr uint64_t kMaxRateMilli = 1'000'000'000;
inline constexpr uint32_t kMaxBurst = 1'000'000;
// A rate as the wire and the CLI give it (tokens per second) in the engine's milli-tokens: one
// that is negative, not finite, above 1e6 or has more than 3 decimals maps to kMaxRateMilli + 1,
// which validation refuses with the field's message.
uint64_t RateMilliOf(double per_s);
inline double RatePerSOf(uint64_t milli) { return static_cast<double>(milli) / 1000.0; }

struct MetadataPair {
  std::string key;
  std::string value;
  friend bool operator==(const MetadataPair&, const MetadataPair&) = default;
};
using Metadata = std::vector<MetadataPair>;
// A conjunction of key = value pairs (0..kMaxFilterPairs).
using Filter = std::vector<MetadataPair>;

// A leadership of a cluster (docs/replication.md, "Epochs"): its epoch (the etcd revision that
// created its leader key) and the LSN of its first record, the kEpochStarted effect.
struct EpochStart {
  uint64_t epoch = 0;
  uint64_t lsn = 0;
  friend bool operator==(const EpochStart&, const EpochStart&) = default;
};

struct QueueSettings {
  QueueType type = QueueType::kSimple;
  std::string exclusivity_key;  // required for kExclusive, empty for kSimple
  int64_t lease_ms = 30'000;
  int64_t invisibility_ms = 0;
  uint32_t max_attempts = 5;
  int64_t retry_backoff_ms = 1'000;
  int64_t retry_backoff_max_ms = 300'000;
  std::string dead_letter_queue;  // empty: none
  int64_t retention_ms = 3'600'000;
  uint64_t max_depth = 0;  // 0: unlimited
  bool enqueue_paused = false;
  bool dequeue_paused = false;
  uint32_t history_max = kDefaultHistoryMax;  // entries per message; 0: no history
  // The metadata key whose value the key gate limits; fixed at creation. An exclusive queue's
  // is its exclusivity_key (flow_key empty or equal to it).
  std::string flow_key;
  uint32_t key_concurrency = 0;  // running messages per flow-key value; 0: no limit
  // Each flow-key value's token bucket: key_rate_per_s × 1000 (integer milli-tokens per second,
  // so that every node computes the same interval); 0: no key rate. key_burst: 1..1,000,000.
  uint64_t key_rate_milli = 0;
  uint32_t key_burst = 1;
  // The queue-wide token bucket (any queue), checked before the key's: rate_per_s × 1000; 0:
  // none. burst: 1..1,000,000.
  uint64_t rate_milli = 0;
  uint32_t burst = 1;
  int64_t ttl_ms = 0;  // a message's default time to live from its enqueue; 0: none
  Dedupe dedupe = Dedupe::kKeep;
  // Fair share over the flow key; with weighted, a message whose priority (a deadline in ms)
  // is more than overdue_first_ms before now jumps the rotation (0: never).
  Fairness fairness = Fairness::kNone;
  int64_t overdue_first_ms = 0;
  friend bool operator==(const QueueSettings&, const QueueSettings&) = default;
};

// update_queue: only the fields that are set change. Type and exclusivity key are fixed.
struct QueueSettingsUpdate {
  std::optional<int64_t> lease_ms;
  std::optional<int64_t> invisibility_ms;
  std::optional<uint32_t> max_attempts;
  std::optional<int64_t> retry_backoff_ms;
  std::optional<int64_t> retry_backoff_max_ms;
  std::optional<std::string> dead_letter_queue;  // "" clears it
  std::optional<int64_t> retention_ms;
  std::optional<uint64_t> max_depth;
  std::optional<bool> enqueue_paused;
  std::optional<bool> dequeue_paused;
  std::optional<uint32_t> history_max;
  std::optional<uint32_t> key_concurrency;
  std::optional<uint64_t> key_rate_milli;  // 0 clears the key rate
  std::optional<uint32_t> key_burst;
  std::optional<uint64_t> rate_milli;  // 0 clears the queue rate
  std::optional<uint32_t> burst;
  std::optional<int64_t> ttl_ms;
  std::optional<Dedupe> dedupe;
  std::optional<Fairness> fairness;
  std::optional<int64_t> overdue_first_ms;
};

struct StateCounts {
  std::array<uint64_t, kStateCount> by_state{};  // indexed by MessageState
  // Pending messages held back by the key gate: blocked = blocked_concurrency + blocked_rate.
  uint64_t blocked = 0;
  uint64_t blocked_concurrency = 0;  // of values at their key_concurrency (exclusive: N = 1)
  uint64_t blocked_rate = 0;         // of values out of tokens and below their key_concurrency
  uint64_t operator[](MessageState s) const { return by_state[static_cast<size_t>(s)]; }
  friend bool operator==(const StateCounts&, const StateCounts&) = default;
};

struct QueueInfo {
  std::string name;
  QueueSettings settings;
  StateCounts counts;
  // now - enqueued_at of the next message a dequeue would return; 0 when none is pending.
  int64_t oldest_pending_age_ms = 0;
  uint64_t memory_bytes = 0;  // accounted bytes of this queue's messages (engine.h)
  // Since the process started: dequeues held back by a token bucket (the queue's bucket empty
  // while a message was ready, or fewer messages than asked while values were out of tokens).
  // Not on the wire (metrics only).
  uint64_t throttled_dequeues = 0;
};

// One flow-key value's overrides of its queue's key limits (set_key_limits; docs/semantics.md,
// "Per-key limits"): each field in `set` replaces the queue's setting for that value alone;
// none set: the value follows the queue.
struct KeyLimits {
  static constexpr uint8_t kConcurrency = 1, kRate = 2, kBurst = 4, kWeight = 8;
  static constexpr uint8_t kAll = kConcurrency | kRate | kBurst | kWeight;
  uint8_t set = 0;
  uint32_t concurrency = 0;  // key_concurrency (0: no limit)
  uint64_t rate_milli = 0;   // key_rate_per_s × 1000 (0: no rate)
  uint32_t burst = 1;        // key_burst
  uint32_t weight = 1;       // its share under fairness weighted
  bool empty() const { return set == 0; }
  bool has(uint8_t field) const { return (set & field) != 0; }
  friend bool operator==(const KeyLimits&, const KeyLimits&) = default;
};
inline constexpr uint32_t kMaxKeyWeight = 1000;
inline constexpr size_t kMaxKeyOverrides = 10'000;  // per queue

// A flow-key value as get_key_limits and list_keys describe it: its overrides, the limits in
// effect (the override, else the queue's), and where its messages are.
struct KeyInfo {
  std::string value;
  KeyLimits overrides;
  uint32_t concurrency = 0;
  uint64_t rate_milli = 0;
  uint32_t burst = 1;
  uint32_t weight = 1;
  uint64_t pending = 0;  // pending messages of the value (held back or not)
  uint32_t running = 0;
  bool held = false;      // running at its concurrency
  TimeMs next_token = 0;  // throttled: when its next token comes; else 0
};

// list_keys: which keys come first (each descending; ties by value).
enum class KeyOrder : uint8_t { kPending = 0, kRunning = 1, kThrottled = 2 };

// One message of an enqueue batch.
struct EnqueueItem {
  std::string id;  // empty: the engine generates one
  int64_t priority = 0;
  std::string payload;
  Metadata metadata;
  std::optional<int64_t> delay_ms;       // relative delay; or
  std::optional<TimeMs> visible_at;      // absolute time (not both)
  std::optional<uint32_t> max_attempts;  // else the queue's default
  // Messages that must complete first: "queue/id", or an id of this queue (at most
  // kMaxDependencies). The message waits (state waiting) until the last one completes.
  std::vector<std::string> depends_on = {};
  DependencyFailurePolicy on_dependency_failure = DependencyFailurePolicy::kCancel;
  // The batch it joins (docs/semantics.md, "Batches"): an open batch of this server, else
  // NOT_FOUND (none) or FAILED_PRECONDITION (sealed). Empty: none.
  std::string batch = {};
  // Time to live from the enqueue (else the queue's ttl_ms); past it, a pending or invisible
  // message is canceled as expired.
  std::optional<int64_t> ttl_ms = {};
  // With an id: a pending or invisible message of that id is replaced (payload, metadata) and
  // becomes visible no earlier than now + debounce_ms, instead of a duplicate.
  std::optional<int64_t> debounce_ms = {};
};

struct EnqueueResult {
  std::string id;
  uint64_t version = 0;
  bool duplicate = false;
};

// A whole message with its state (get, dequeue).
struct MessageRecord {
  std::string queue;
  std::string id;
  int64_t priority = 0;
  std::string payload;
  Metadata metadata;
  MessageState state = MessageState::kPending;
  uint32_t attempts = 0;
  uint32_t max_attempts = 0;
  TimeMs visible_at = 0;        // when invisible: when it becomes pending; else 0
  uint64_t lease_token = 0;     // running (and completed: the token that completed it); else 0
  TimeMs lease_expires_at = 0;  // running; else 0
  uint64_t version = 0;
  TimeMs enqueued_at = 0;
  TimeMs updated_at = 0;
  std::string last_error;
  std::string result = {};  // completed: the result its complete carried (may be empty)
  TimeMs expires_at = 0;    // its ttl runs out then (docs/semantics.md, "Expiry"); 0: none
};

struct DequeueRequest {
  uint32_t max = 1;                 // 1..kMaxDequeueCount
  std::optional<int64_t> lease_ms;  // else the queue's lease_ms
  Filter filter;
  // Who dequeues (at most kMaxWorkerIdBytes of UTF-8; empty: not said): kept in the history
  // of each message leased.
  std::string worker_id = {};
};

struct CompleteItem {
  std::string id;
  uint64_t lease_token = 0;
  std::string result = {};  // bytes, at most Engine::Options::max_result_bytes; kept with it
};

// What `wait` reports of one message (docs/semantics.md, "Results and waiting").
struct MessageOutcome {
  std::string id;
  MessageState state = MessageState::kPending;
  std::string result;      // completed
  std::string last_error;  // the last fail's text (errored, or retried)
};

struct FailRequest {
  std::string id;
  uint64_t lease_token = 0;
  std::string error;                      // truncated to kMaxErrorBytes
  std::optional<int64_t> retry_delay_ms;  // else exponential backoff
};

struct FailResult {
  MessageState state = MessageState::kInvisible;  // invisible, pending or errored
  TimeMs visible_at = 0;                          // when invisible
  std::string dead_letter_queue;  // set when the message moved to this dead-letter queue
};

// History (docs/semantics.md, "History"). What happened to a message: its values are the
// ChangeCause of the transition (1..13), and these.
enum class HistoryEvent : uint8_t {
  kEnqueued = 0,
  kLeased = 1,
  kCompleted = 2,
  kFailed = 3,
  kExtended = 4,
  kCanceled = 5,
  kReprioritized = 6,
  kRedriven = 7,
  kBecameVisible = 8,
  kLeaseExpired = 9,
  kReleased = 10,
  kDependencyFailed = 11,
  kExpired = 12,       // canceled by its ttl (the timer, or a dequeue that found it expired)
  kDebounced = 13,     // an enqueue with debounce_ms replaced its payload and metadata
  kDeadLettered = 16,  // arrived in this queue, its dead-letter queue
  kNoted = 17,         // a worker's note; no change of state
};
std::string_view HistoryEventName(HistoryEvent e);  // "enqueued", "leased", ...
// Who made it happen, derived from the event: a request (producer or operator), the worker
// holding the lease, the timer, a dependency, or the engine itself (a dead-letter move).
enum class HistoryActor : uint8_t { kRequest, kWorker, kTimer, kDependency, kEngine };
HistoryActor HistoryActorOf(HistoryEvent e);
std::string_view HistoryActorName(HistoryActor a);  // "request", "worker", ...

struct HistoryEntry {
  TimeMs time = 0;
  HistoryEvent event = HistoryEvent::kEnqueued;
  MessageState from = MessageState::kPending;
  MessageState to = MessageState::kPending;
  uint32_t attempt = 0;      // the message's attempts after it
  uint64_t lease_token = 0;  // the lease it concerns (0: none)
  std::string text;          // leased: the worker_id; failed: the error; noted: the note; ...
  std::string worker_id;     // resolved: the worker_id of the lease `lease_token` names
  friend bool operator==(const HistoryEntry&, const HistoryEntry&) = default;
};

struct MessageHistory {
  std::vector<HistoryEntry> entries;  // oldest first: the first, then the latest
  uint64_t dropped = 0;               // entries dropped between the first and the rest
  friend bool operator==(const MessageHistory&, const MessageHistory&) = default;
};

struct ReprioritizeRequest {
  std::optional<int64_t> priority;
  std::optional<TimeMs> visible_at;
};

struct BrowseRequest {
  MessageState state = MessageState::kPending;
  Filter filter;
  std::string cursor;    // empty: from the start; else next_cursor of the previous page
  uint32_t limit = 100;  // 1..kMaxBrowseLimit
};

struct MessageSummary {
  std::string id;
  int64_t priority = 0;
  MessageState state = MessageState::kPending;
  uint32_t attempts = 0;
  uint64_t version = 0;
  TimeMs visible_at = 0;
  TimeMs lease_expires_at = 0;
  TimeMs enqueued_at = 0;
  TimeMs updated_at = 0;
  TimeMs expires_at = 0;  // 0: no ttl
};

struct BrowsePage {
  std::vector<MessageSummary> messages;  // in (priority, enqueue order)
  std::string next_cursor;               // empty when there is nothing after this page
};

// explain: why a message (or the best match of a filter) is or is not dequeueable now.
enum class ExplainReason : uint8_t {
  kDequeueable = 0,      // a dequeue (with that filter) would return it now
  kInvisible = 1,        // until `until`
  kExclusivityHeld = 2,  // value `exclusivity_value` held by lease `lease_token` until `until`
  kQueuePaused = 3,      // dequeue_paused
  kNoMatch = 4,          // filter: no pending message matches
  kAttemptsSpent = 5,    // errored after `attempts` attempts
  kRunning = 6,          // leased by `lease_token` until `until`
  kTerminal = 7,         // completed or canceled
  kWaitingOnDependencies = 8,  // waiting: some dependency has not completed
  kKeyConcurrency = 9,         // flow-key value `exclusivity_value` runs key_concurrency messages
                        // already; `lease_token`/`until`: the one of them whose lease ends first
  kKeyRate = 10,    // flow-key value `exclusivity_value` has no token (key_rate_per_s): `until`
                    // its next token
  kQueueRate = 11,  // the queue's bucket (rate_per_s) has no token: `until` its next one
  kFairShare = 12,  // fairness weighted: another value of the flow key has its turn now
};
std::string_view ExplainReasonName(ExplainReason r);

struct Explanation {
  ExplainReason reason = ExplainReason::kDequeueable;
  std::string id;  // the message explained (for a filter: the best match, if any)
  MessageState state = MessageState::kPending;
  TimeMs until = 0;
  uint64_t lease_token = 0;
  std::string exclusivity_value;
  uint32_t attempts = 0;
  // kWaitingOnDependencies: how many it depends on, how many of them are not finished yet, and
  // the first kMaxExplainWaitingOn of those ("queue/id"), in the order listed at enqueue.
  uint32_t dependencies = 0;
  uint32_t unfinished = 0;
  std::vector<std::string> waiting_on;
  // Explain by id, in any state: the first kMaxExplainDependents of the dependents that still
  // wait on this message ("queue/id", in the order they were enqueued) and how many wait in all.
  // None once it is terminal: its completion released them (or its failure applied their policy).
  std::vector<std::string> dependents;
  uint32_t waiting_dependents = 0;
  // kExclusivityHeld, kKeyConcurrency: how many messages of the value run, and the queue's
  // key_concurrency (1 for an exclusive queue), as in "key acme 5/5 running".
  uint32_t key_running = 0;
  uint32_t key_concurrency = 0;
};
inline constexpr size_t kMaxExplainWaitingOn = 10;
inline constexpr size_t kMaxExplainDependents = 10;

// ---- Schedules (docs/semantics.md, "Schedules") ----------------------------------------------

// Fires missed by more than kScheduleMisfireGraceMs (the server was down, or stalled) follow the
// schedule's misfire policy; at most kMaxCatchUpFires of them are made, and none older than
// kScheduleCatchUpHorizonMs.
inline constexpr TimeMs kScheduleMisfireGraceMs = 60'000;
inline constexpr size_t kMaxCatchUpFires = 100;
inline constexpr TimeMs kScheduleCatchUpHorizonMs = TimeMs{400} * 86'400'000;
inline constexpr size_t kMaxScheduleNameBytes = 100;  // the fire id name@T stays <= 128 bytes
inline constexpr size_t kMaxSchedules = 100'000;
inline constexpr int64_t kMinScheduleEveryMs = 10;

enum class MisfirePolicy : uint8_t {
  kSkip = 0,  // missed fires are dropped (default)
  kOne = 1,   // the latest missed fire is made, the others dropped
  kAll = 2,   // every missed fire is made, the latest kMaxCatchUpFires at most
};
std::string_view MisfirePolicyName(MisfirePolicy p);  // "skip", "one", "all"
std::optional<MisfirePolicy> ParseMisfirePolicy(std::string_view name);

enum class OverlapPolicy : uint8_t {
  kAllow = 0,         // every fire enqueues (default)
  kSkipIfActive = 1,  // a fire is skipped while the previous fire's message is not terminal
};
std::string_view OverlapPolicyName(OverlapPolicy p);  // "allow", "skip_if_active"
std::optional<OverlapPolicy> ParseOverlapPolicy(std::string_view name);

// What upsert_schedule sets: when it fires (`cron` in `tz`, or `every_ms`) and the message
// each fire enqueues (id name@T, priority T + priority_offset_ms).
struct ScheduleSpec {
  std::string cron;      // 5 fields or a macro (engine/cron.h); empty: every_ms
  std::string tz;        // IANA zone of `cron`; empty: UTC
  int64_t every_ms = 0;  // 0: cron
  std::string payload;
  std::string packed_metadata;  // metadata.h format
  int64_t priority_offset_ms = 0;
  uint32_t max_attempts = 0;  // 0: the queue's default
  MisfirePolicy misfire = MisfirePolicy::kSkip;
  OverlapPolicy overlap = OverlapPolicy::kAllow;

  bool operator==(const ScheduleSpec&) const = default;
};

// What a schedule's fires, pauses and resumes change; logged whole (absolute values) by every
// schedule effect.
struct ScheduleProgress {
  TimeMs created_at = 0;
  TimeMs updated_at = 0;
  TimeMs anchor_at = 0;         // every_ms fires at anchor_at + k * every_ms, k >= 1
  TimeMs after = 0;             // the next fire is the first one strictly after this
  TimeMs last_fire_at = 0;      // T of the latest fire made (enqueued or skipped); 0: none
  TimeMs last_enqueued_at = 0;  // T of the latest fire that enqueued name@T; 0: none
  uint64_t fires = 0;           // fires that enqueued (a duplicate counts)
  uint64_t overlap_skips = 0;   // fires skipped by skip_if_active
  uint64_t missed = 0;          // fires dropped by the misfire policy
  uint64_t failed = 0;          // fires whose enqueue was refused (last_error says why)
  bool paused = false;

  bool operator==(const ScheduleProgress&) const = default;
};

struct ScheduleInfo {
  std::string queue;
  std::string name;
  ScheduleSpec spec;
  ScheduleProgress progress;
  TimeMs next_fire_at = 0;  // 0: none (paused)
  std::string last_error;   // the latest refused fire's reason; empty: none
};

struct ScheduleUpsertResult {
  ScheduleInfo schedule;
  bool created = false;
};

// trigger_schedule: the fire made now.
struct ScheduleTriggerResult {
  std::string id;  // name@T
  TimeMs fire_at = 0;
  bool duplicate = false;  // a fire at the same T existed already
};

// ---- Batches (docs/semantics.md, "Batches"; engine/batches.h) --------------------------------

// A batch id: 1-kMaxBatchIdBytes bytes of valid UTF-8, so that its callback's default id
// "batch:<id>" is a valid message id.
inline constexpr size_t kMaxBatchIdBytes = 120;
// Metadata pairs of a callback template: the engine adds kBatchCallbackKeys more.
inline constexpr size_t kBatchCallbackKeys = 5;
// The callback's metadata keys added by the engine (values in decimal).
inline constexpr std::string_view kBatchIdKey = "x-batch-id";
inline constexpr std::string_view kBatchTotalKey = "x-batch-total";
inline constexpr std::string_view kBatchCompletedKey = "x-batch-completed";
inline constexpr std::string_view kBatchCanceledKey = "x-batch-canceled";
inline constexpr std::string_view kBatchErroredKey = "x-batch-errored";
// A done batch is kept (readable, its id taken) this long by default, as a queue's
// retention_ms.
inline constexpr int64_t kDefaultBatchRetentionMs = 3'600'000;

// The message a batch enqueues when it is done.
struct BatchCallback {
  std::string queue;
  std::string id;  // empty: "batch:<batch id>"
  int64_t priority = 0;
  std::string payload;
  Metadata metadata;                     // at most 16 - kBatchCallbackKeys pairs, no x-batch-*
  std::optional<uint32_t> max_attempts;  // else the queue's default
  bool operator==(const BatchCallback&) const = default;
};

struct CreateBatchRequest {
  std::string id;
  std::optional<BatchCallback> callback;
  std::optional<int64_t> retention_ms;  // else kDefaultBatchRetentionMs
};

// Members per outcome. A member is active until it becomes terminal (or leaves its queue).
struct BatchCounts {
  uint64_t members = 0;  // every message that joined
  uint64_t completed = 0;
  uint64_t canceled = 0;  // canceled, purged or deleted with its queue
  uint64_t errored = 0;   // errored, or moved to a dead-letter queue
  uint64_t active() const { return members - completed - canceled - errored; }
  bool operator==(const BatchCounts&) const = default;
};

struct BatchInfo {
  std::string id;
  std::optional<BatchCallback> callback;  // its id resolved ("batch:<id>" by default)
  int64_t retention_ms = kDefaultBatchRetentionMs;
  TimeMs created_at = 0;
  bool sealed = false;
  bool done = false;   // sealed and no member active: the callback was enqueued
  TimeMs done_at = 0;  // when done; removed at done_at + retention_ms
  BatchCounts counts;
  bool operator==(const BatchInfo&) const = default;
};

}  // namespace sundial
