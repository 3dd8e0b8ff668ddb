// Reply JSON: the JSON objects the `sundial` CLI prints for the protocol's result tables, one
// object per line (docs/cli.md, "Output"). Built with Boost.JSON, which does the escaping.
//
// Field names are the protocol's (docs/protocol.md), in snake_case; enum values are written by name
// (`state`: "pending", `type`: "exclusive", `reason`: "exclusivity_held"). Every field of a table
// is written, zero or empty ones too, so scripts can rely on them. Integers are exact (64-bit).
// Text is a JSON string when it is valid UTF-8, otherwise field `x` becomes `x_base64`
// (RFC 4648 base64 of the raw bytes), as in `sundial-wal dump`: so `payload` is the payload as
// text, or `payload_base64`. Metadata is an object of its pairs (`metadata_base64`, a list of
// [key, value] base64 pairs, when a key or value is not UTF-8).
//
// Thread safety: pure functions.
#pragma once

#include <boost/json/object.hpp>
#include <string_view>

#include "client/result.h"
#include "protocol/sundial_generated.h"

namespace sundial::tools {

// A queue: name, every setting (flat), `counts`, oldest_pending_age_ms, memory_bytes.
boost::json::object QueueToJson(const protocol::QueueInfo& queue);
// Per-state counts and `blocked`; all zero for a missing table.
boost::json::object CountsToJson(const protocol::StateCounts* counts);
// A whole message (get, dequeue); with include_dependency_results, `dependency_results`: one
// WaitItemToJson object per dependency (its id is "queue/id").
boost::json::object MessageToJson(const protocol::Message& message);
// One message's outcome (wait, enqueue --wait-ms): id, state, result, last_error; or, for an
// id with an error, id, code and message.
boost::json::object WaitItemToJson(const protocol::WaitItem& item);
// A schedule: queue, name, cron and tz or every_ms, the template (payload, metadata,
// priority_offset_ms, max_attempts), misfire, overlap, paused, next_fire_at, last_fire_at,
// last_enqueued_at, fires, overlap_skips, missed, failed, last_error, created_at, updated_at.
boost::json::object ScheduleToJson(const protocol::Schedule& schedule);
// A browse entry.
boost::json::object SummaryToJson(const protocol::MessageSummary& summary);
// explain: the reason's name, its fields, and `explanation`, one sentence for people.
boost::json::object ExplainToJson(const protocol::ExplainResult& explain);
boost::json::object StatsToJson(const protocol::StatsResult& stats);
boost::json::object HealthToJson(const protocol::HealthResult& health);
// cluster status: the answering node's view (cluster, node, epoch, primary, primary_addr,
// sync_standby, replication) and `members`, one object each (node, role, addr, http_addr,
// replication_addr, epoch, end_lsn, flushed_lsn, lag_records, lag_ms, sync).
boost::json::object ClusterToJson(const protocol::ClusterResult& cluster);
// watch: {"event":"message"|"stats"|"closed", ...the event's fields}.
boost::json::object EventToJson(const protocol::EventMessage& event);
// A batch (create_batch, seal_batch, get_batch): id, sealed, done, done_at, created_at,
// retention_ms, the counts (members, active, completed, canceled, errored) and `callback` (its
// queue, id, priority, payload, metadata, max_attempts; null when it has none).
boost::json::object BatchToJson(const protocol::BatchInfo& batch);
// A message's history (docs/semantics.md, "History"): {entries: [{time, event, from, to,
// attempt, lease_token, actor, worker_id?, text?}], dropped}.
boost::json::object HistoryToJson(const protocol::HistoryResult& history);
// A flow-key value (get_key_limits, set_key_limits, each line of list_keys).
boost::json::object KeyInfoToJson(const protocol::KeyInfo& key);

// One node of an enqueue_flow's answer: queue, id, version, duplicate.
boost::json::object FlowNodeToJson(const protocol::FlowNodeResult& node);
// {"code":"NOT_FOUND","message":"..."}; NOT_PRIMARY adds "primary" (the primary's address)
// when the node named it.
boost::json::object ErrorToJson(const client::Error& error);

}  // namespace sundial::tools
