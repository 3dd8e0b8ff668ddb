// Request builders: one function per operation of docs/protocol.md, each returning the finished
// FlatBuffer of one protocol Request (protocol/sundial.fbs, file identifier "SUND"), ready to be
// framed. The blocking Client's typed helpers and the AsyncClient's callers use the same builders.
//
// Every request carries a RequestHeader: a request_id (the server echoes it back; responses
// may come out of order, so ids in flight on one connection must differ; 0 is reserved: the
// server uses it for errors it cannot tie to a request) and a durability (durable by default:
// the reply comes after the WAL sync; relaxed: before it).
//
// Optional fields that are absent are left out of the buffer, so the server applies the
// schema's defaults (create) or leaves a setting unchanged (update). No validation happens
// here: the server checks every limit and names the offending field.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/sundial_generated.h"

namespace sundial::client {

using protocol::Durability;
using protocol::MessageState;
using protocol::QueueType;

// Metadata of a message, or a filter (a conjunction of key = value pairs), in order.
using Pairs = std::vector<std::pair<std::string, std::string>>;

struct RequestHeader {
  uint64_t request_id = 0;
  Durability durability = Durability::durable;
};

// create_queue: a setting left unset is not sent, and the queue gets the server's default
// (docs/semantics.md, "Queues"): the client keeps no copy of the defaults.
struct QueueSettings {
  std::optional<QueueType> type;  // unset: simple
  std::string exclusivity_key;    // required for exclusive queues
  std::optional<int64_t> lease_ms;
  std::optional<int64_t> invisibility_ms;
  std::optional<uint32_t> max_attempts;
  std::optional<int64_t> retry_backoff_ms;
  std::optional<int64_t> retry_backoff_max_ms;
  std::string dead_letter_queue;  // empty: none
  std::optional<int64_t> retention_ms;
  std::optional<uint64_t> max_depth;  // 0: unlimited
  std::optional<bool> enqueue_paused;
  std::optional<bool> dequeue_paused;
  std::optional<uint32_t> history_max;  // entries per message (server default 32); 0: none
  // Flow control (docs/protocol.md, "CreateQueue"): the metadata key whose values are limited,
  // fixed at creation (exclusive queues: empty or the exclusivity key); empty: none.
  std::string flow_key;
  std::optional<uint32_t> key_concurrency;  // running messages per flow-key value; 0: no limit
  // docs/semantics.md, "Flow control": a message's default ttl (0: none); id release.
  std::optional<int64_t> ttl_ms;
  std::optional<protocol::Dedupe> dedupe;
  // Token buckets (docs/semantics.md, "Rates"): tokens per second (0: none; at most 3 decimals)
  // and bucket sizes, for the whole queue and for each flow-key value.
  std::optional<double> rate_per_s;
  std::optional<uint32_t> burst;
  std::optional<double> key_rate_per_s;
  std::optional<uint32_t> key_burst;
  // Fair share over the flow key (docs/semantics.md, "Fair share").
  std::optional<protocol::Fairness> fairness;
  std::optional<int64_t> overdue_first_ms;
};

// update_queue: absent settings are left unchanged (type, exclusivity key and flow key are
// fixed).
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
  std::optional<uint32_t> history_max;      // entries per message (server default 32); 0: none
  std::optional<uint32_t> key_concurrency;  // running messages per flow-key value; 0: no limit
  std::optional<int64_t> ttl_ms;
  std::optional<protocol::Dedupe> dedupe;
  std::optional<double> rate_per_s;  // 0 clears the queue's rate
  std::optional<uint32_t> burst;
  std::optional<double> key_rate_per_s;  // 0 clears the key rate
  std::optional<uint32_t> key_burst;
  std::optional<protocol::Fairness> fairness;
  std::optional<int64_t> overdue_first_ms;
};

struct EnqueueItem {
  std::string id;  // empty: the server generates one
  int64_t priority = 0;
  std::string payload;  // bytes
  Pairs metadata;
  std::optional<int64_t> delay_ms;    // relative; or
  std::optional<int64_t> visible_at;  // absolute (not both)
  std::optional<uint32_t> max_attempts;
  // Messages that must complete first (docs/semantics.md, "Dependencies"): "queue/id", or an
  // id of the same queue. Until the last one completes, the message is waiting.
  std::vector<std::string> depends_on = {};
  // What it does when a dependency is canceled or errored: cancel (the default), release, error.
  protocol::DependencyFailurePolicy on_dependency_failure =
      protocol::DependencyFailurePolicy::cancel;
  std::string batch = {};  // the batch it joins (docs/semantics.md, "Batches"); empty: none
  // docs/semantics.md, "Flow control": its time to live (else the queue's ttl_ms), and the
  // debounce of a pending or invisible message of this id (needs an id).
  std::optional<int64_t> ttl_ms = {};
  std::optional<int64_t> debounce_ms = {};
};

// A node of enqueue_flow (docs/semantics.md, "Flows"): its message, in `queue`, waits on all
// its children (and on its item's depends_on).
struct FlowNode {
  std::string queue;
  EnqueueItem item;
  std::vector<FlowNode> children = {};
};

// create_batch's callback: the message enqueued once the batch is done (protocol/sundial.fbs).
struct BatchCallback {
  std::string queue;
  std::string id;  // empty: "batch:<batch id>"
  int64_t priority = 0;
  std::string payload;  // bytes
  Pairs metadata;       // at most 11 pairs; the server adds the x-batch-* ones
  std::optional<uint32_t> max_attempts;
};

struct CreateBatchOptions {
  std::optional<BatchCallback> callback;  // unset: none
  std::optional<int64_t> retention_ms;    // unset: the server's default (3600000)
};

struct DequeueOptions {
  uint32_t max = 1;  // 1..1000
  std::optional<int64_t> lease_ms;
  Pairs filter;
  uint32_t wait_ms = 0;  // long poll, 0..60000
  // Each leased message carries its dependencies' outcomes: Message.dependency_results (per
  // dependency, a WaitItem whose id is "queue/id": state, result, last_error).
  bool include_dependency_results = false;
  // Who dequeues (0..128 bytes; empty: not said): kept in each leased message's history.
  std::string worker_id = {};
};

struct CompleteItem {
  std::string id;
  uint64_t lease_token = 0;
  std::string result = {};  // bytes stored with the message (empty: none)
};

struct FailOptions {
  std::string error;
  std::optional<int64_t> retry_delay_ms;  // else the queue's exponential backoff
  // Fail-and-next (docs/semantics.md, "Complete-and-next"): then dequeue from the same queue;
  // the new leases are in FailResult.next.
  std::optional<DequeueOptions> next = std::nullopt;
};

struct ReprioritizeChange {
  std::optional<int64_t> priority = std::nullopt;
  std::optional<int64_t> visible_at = std::nullopt;
};

struct BrowseOptions {
  MessageState state = MessageState::pending;
  Pairs filter;
  std::string cursor;
  uint32_t limit = 100;  // 1..1000
};

// Queues.
std::string BuildAuth(RequestHeader h, std::string_view token);
std::string BuildCreateQueue(RequestHeader h, std::string_view name, const QueueSettings& s);
std::string BuildUpdateQueue(RequestHeader h, std::string_view name, const QueueSettingsUpdate& u);
std::string BuildGetQueue(RequestHeader h, std::string_view name);
std::string BuildListQueues(RequestHeader h);
std::string BuildDeleteQueue(RequestHeader h, std::string_view name);
std::string BuildPurgeQueue(RequestHeader h, std::string_view name,
                            const std::vector<MessageState>& states);

// Messages.
// wait_ms > 0: answered once every item is terminal (or wait_ms ran out), each EnqueueResult
// with its `outcome`.
std::string BuildEnqueue(RequestHeader h, std::string_view queue,
                         const std::vector<EnqueueItem>& items, uint32_t wait_ms = 0);
std::string BuildDequeue(RequestHeader h, std::string_view queue, const DequeueOptions& o);
std::string BuildComplete(RequestHeader h, std::string_view queue,
                          const std::vector<CompleteItem>& items);
// Complete-and-next (docs/semantics.md): completes `items`, then dequeues from the same queue
// as `next` says, in one request; the reply's ItemResults.next holds the new leases. With
// next.wait_ms the reply waits for a message like a long poll.
std::string BuildCompleteAndNext(RequestHeader h, std::string_view queue,
                                 const std::vector<CompleteItem>& items,
                                 const DequeueOptions& next);
std::string BuildFail(RequestHeader h, std::string_view queue, std::string_view id,
                      uint64_t lease_token, const FailOptions& o);
std::string BuildExtend(RequestHeader h, std::string_view queue, std::string_view id,
                        uint64_t lease_token, int64_t lease_ms);
std::string BuildCancel(RequestHeader h, std::string_view queue,
                        const std::vector<std::string>& ids);
std::string BuildCancelByFilter(RequestHeader h, std::string_view queue, const Pairs& filter);
std::string BuildReprioritize(RequestHeader h, std::string_view queue, std::string_view id,
                              const ReprioritizeChange& change);
std::string BuildReprioritizeByFilter(RequestHeader h, std::string_view queue, const Pairs& filter,
                                      const ReprioritizeChange& change);
std::string BuildRedrive(RequestHeader h, std::string_view queue,
                         const std::vector<std::string>& ids);
std::string BuildRedriveAll(RequestHeader h, std::string_view queue);
std::string BuildRedriveByFilter(RequestHeader h, std::string_view queue, const Pairs& filter);
// include_dependency_results: the message carries Message.dependency_results.
std::string BuildGet(RequestHeader h, std::string_view queue, std::string_view id,
                     bool include_dependency_results = false);
std::string BuildBrowse(RequestHeader h, std::string_view queue, const BrowseOptions& o);
std::string BuildCount(RequestHeader h, std::string_view queue, const Pairs& filter);
std::string BuildExplain(RequestHeader h, std::string_view queue, std::string_view id);
std::string BuildExplainFilter(RequestHeader h, std::string_view queue, const Pairs& filter);
// Answered when every message is terminal, or at wait_ms (0..60000) with what is so far.
std::string BuildWait(RequestHeader h, std::string_view queue, const std::vector<std::string>& ids,
                      uint32_t wait_ms);

// Schedules (docs/semantics.md, "Schedules"): exactly one of cron (with tz) and every_ms.
struct ScheduleTemplate {
  std::string cron;  // 5 fields or a macro
  std::string tz;    // IANA zone of cron; empty: UTC
  int64_t every_ms = 0;
  std::string payload;
  Pairs metadata;
  int64_t priority_offset_ms = 0;  // a fire at T enqueues name@T at priority T + this
  uint32_t max_attempts = 0;       // 0: the queue's default
  protocol::MisfirePolicy misfire = protocol::MisfirePolicy::skip;
  protocol::OverlapPolicy overlap = protocol::OverlapPolicy::allow;
};
std::string BuildUpsertSchedule(RequestHeader h, std::string_view queue, std::string_view name,
                                const ScheduleTemplate& t);
std::string BuildGetSchedule(RequestHeader h, std::string_view queue, std::string_view name);
std::string BuildListSchedules(RequestHeader h, std::string_view queue);  // empty: all
std::string BuildDeleteSchedule(RequestHeader h, std::string_view queue, std::string_view name);
std::string BuildPauseSchedule(RequestHeader h, std::string_view queue, std::string_view name);
std::string BuildResumeSchedule(RequestHeader h, std::string_view queue, std::string_view name);
std::string BuildTriggerSchedule(RequestHeader h, std::string_view queue, std::string_view name);

// enqueue_flow: the forest `roots`, answered with a FlowResult (one node per node, pre-order).
std::string BuildEnqueueFlow(RequestHeader h, const std::vector<FlowNode>& roots);

// Batches (docs/semantics.md, "Batches"): each answered with a BatchResult.
std::string BuildCreateBatch(RequestHeader h, std::string_view id, const CreateBatchOptions& o);
std::string BuildSealBatch(RequestHeader h, std::string_view id);
std::string BuildGetBatch(RequestHeader h, std::string_view id);

// History (docs/semantics.md, "History"): a message's transitions (HistoryResult), and a
// worker's note under its lease (Done).
std::string BuildHistory(RequestHeader h, std::string_view queue, std::string_view id);
std::string BuildNote(RequestHeader h, std::string_view queue, std::string_view id,
                      uint64_t lease_token, std::string_view text);

// Per-key limits (docs/semantics.md, "Per-key limits"): a value's overrides (KeyResult; none
// set: removes them), one value (KeyResult), the top keys (KeyList).
struct KeyLimits {
  std::optional<uint32_t> concurrency;
  std::optional<double> rate_per_s;
  std::optional<uint32_t> burst;
  std::optional<uint32_t> weight;
};
std::string BuildSetKeyLimits(RequestHeader h, std::string_view queue, std::string_view value,
                              const KeyLimits& limits);
std::string BuildGetKeyLimits(RequestHeader h, std::string_view queue, std::string_view value);
std::string BuildListKeys(RequestHeader h, std::string_view queue, protocol::KeyOrder order,
                          uint32_t limit);

// Server.
std::string BuildSubscribe(RequestHeader h, std::string_view queue, const Pairs& filter);
std::string BuildStats(RequestHeader h);
std::string BuildHealth(RequestHeader h);
std::string BuildCluster(RequestHeader h);
std::string BuildSwitchover(RequestHeader h, std::string_view to);  // to: empty = sync standby

// A new message id for an enqueue item the caller gave none (a client following a primary
// sends such items with an id of its own, so a retry cannot enqueue twice): a ULID like the
// server's (docs/semantics.md, "Enqueue"): 26 characters of Crockford base32, a 48-bit ms
// timestamp then 80 random bits. Thread-safe.
std::string NewMessageId();

// The finished Request in a builder (for requests built by hand): its bytes.
std::string FinishedBytes(const flatbuffers::FlatBufferBuilder& b);

// The request_id and the Dequeue wait_ms of a request's bytes, after verifying them; nullopt
// when the bytes are not a valid Request.
struct RequestSummary {
  uint64_t request_id = 0;
  uint32_t wait_ms = 0;  // a long-poll Dequeue's, a Wait's or an Enqueue's wait, else 0
};
std::optional<RequestSummary> SummarizeRequest(std::string_view bytes);

}  // namespace sundial::client
