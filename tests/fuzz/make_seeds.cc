// Writes the seed corpora of the fuzz targets from the real code paths: requests in the
// protocol's JSON form are encoded by the JSON codec (as the WebSocket session decodes them),
// framed by protocol::AppendFrame (as clients frame them) and run through the dispatch harness
// the targets use, whose engine logs to a real GroupCommitLog; its segments and a snapshot
// written by wal::WriteSnapshot of the same engine are the WAL and snapshot seeds.
//
//   build/fuzz/tests/fuzz/make_seeds tests/fuzz
//
// Requests that need a lease token (complete, fail, extend) say "$TOKEN": it is replaced by
// the token of the last message leased, which is the same on every run (the harness's engine
// has a fixed seed and a manual clock), so a seed replays exactly.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "protocol/framing.h"
#include "protocol/json.h"
#include "tests/fuzz/dispatch_harness.h"
#include "wal/log_format.h"
#include "wal/snapshot.h"

namespace {

using namespace sundial;
namespace p = protocol;

struct Scenario {
  const char* name;
  std::vector<std::string> requests;  // JSON
};

std::vector<Scenario> Scenarios() {
  const std::string create =
      R"({"request_id": 1, "op_type": "CreateQueue", "op": {"name": "emails",
          "settings": {"lease_ms": 5000, "max_attempts": 2, "dead_letter_queue": "dlq",
                       "retry_backoff_ms": 10}}})";
  const std::string create_dlq =
      R"({"request_id": 2, "op_type": "CreateQueue", "op": {"name": "dlq"}})";
  const std::string enqueue =
      R"({"request_id": 3, "op_type": "Enqueue", "op": {"queue": "emails", "items": [
          {"id": "a", "priority": 2, "payload": [104, 105],
           "metadata": [{"key": "tenant", "value": "acme"}]},
          {"id": "b", "priority": 1, "delay_ms": 1500},
          {"priority": 7, "visible_at": 1700000000000, "max_attempts": 1}]}})";
  const std::string dequeue =
      R"({"request_id": 4, "op_type": "Dequeue", "op": {"queue": "emails", "max": 1,
          "lease_ms": 3000}})";
  return {
      {"lifecycle",
       {create, create_dlq, enqueue, dequeue,
        R"({"request_id": 5, "op_type": "Extend", "op": {"queue": "emails", "id": "$ID",
            "lease_token": $TOKEN, "lease_ms": 9000}})",
        R"({"request_id": 6, "op_type": "Complete", "op": {"queue": "emails",
            "items": [{"id": "$ID", "lease_token": $TOKEN}]}})",
        R"({"request_id": 7, "op_type": "Get", "op": {"queue": "emails", "id": "a"}})",
        R"({"request_id": 8, "op_type": "Browse", "op": {"queue": "emails", "state": "completed",
            "limit": 10}})"}},
      {"fail_to_dead_letter",
       {create, create_dlq, enqueue, dequeue,
        R"({"request_id": 5, "op_type": "Fail", "op": {"queue": "emails", "id": "$ID",
            "lease_token": $TOKEN, "error": "boom", "retry_delay_ms": 0}})",
        dequeue,
        R"({"request_id": 7, "op_type": "Fail", "op": {"queue": "emails", "id": "$ID",
            "lease_token": $TOKEN, "error": "boom again"}})",
        R"({"request_id": 8, "op_type": "Redrive", "op": {"queue": "dlq", "all": true}})",
        R"({"request_id": 9, "op_type": "Redrive", "op": {"queue": "dlq", "ids": ["a"],
            "filter": [{"key": "tenant", "value": "acme"}]}})"}},
      {"exclusive",
       {R"({"request_id": 1, "op_type": "CreateQueue", "op": {"name": "jobs", "settings":
            {"type": "exclusive", "exclusivity_key": "tenant", "invisibility_ms": 10}}})",
        R"({"request_id": 2, "op_type": "Enqueue", "op": {"queue": "jobs", "items": [
            {"id": "x", "metadata": [{"key": "tenant", "value": "t1"}]},
            {"id": "y", "metadata": [{"key": "tenant", "value": "t1"}]},
            {"id": "z", "metadata": [{"key": "tenant", "value": "t2"}]}]}})",
        R"({"request_id": 3, "op_type": "Dequeue", "op": {"queue": "jobs", "max": 3,
            "filter": [{"key": "tenant", "value": "t1"}], "wait_ms": 0}})",
        R"({"request_id": 4, "op_type": "Explain", "op": {"queue": "jobs", "id": "y"}})",
        R"({"request_id": 5, "op_type": "Explain", "op": {"queue": "jobs",
            "filter": [{"key": "tenant", "value": "t2"}]}})",
        R"({"request_id": 6, "op_type": "Count", "op": {"queue": "jobs",
            "filter": [{"key": "tenant", "value": "t1"}]}})"}},
      {"bulk",
       {create, enqueue,
        R"({"request_id": 4, "op_type": "Reprioritize", "op": {"queue": "emails", "id": "a",
            "priority": 9}})",
        R"({"request_id": 5, "op_type": "Reprioritize", "op": {"queue": "emails",
            "filter": [{"key": "tenant", "value": "acme"}], "visible_at": 1700000009000}})",
        R"({"request_id": 6, "op_type": "Cancel", "op": {"queue": "emails", "ids": ["b", "c"]}})",
        R"({"request_id": 7, "op_type": "Cancel", "op": {"queue": "emails",
            "filter": [{"key": "tenant", "value": "acme"}]}})",
        R"({"request_id": 8, "op_type": "PurgeQueue", "op": {"name": "emails",
            "states": ["canceled", "completed"]}})",
        R"({"request_id": 9, "op_type": "DeleteQueue", "op": {"name": "emails"}})"}},
      {"settings",
       {create,
        R"({"request_id": 2, "op_type": "UpdateQueue", "op": {"name": "emails", "update": {
            "lease_ms": 1000, "invisibility_ms": 5, "max_attempts": 3, "retry_backoff_ms": 1,
            "retry_backoff_max_ms": 100, "dead_letter_queue": "", "retention_ms": 1,
            "max_depth": 2, "enqueue_paused": false, "dequeue_paused": true}}})",
        enqueue, dequeue, R"({"request_id": 5, "op_type": "GetQueue", "op": {"name": "emails"}})",
        R"({"request_id": 6, "op_type": "ListQueues", "op": {}})",
        R"({"request_id": 7, "durability": "relaxed", "op_type": "Enqueue", "op":
            {"queue": "auto", "items": [{"id": "q"}]}})"}},
      {"results",
       {create, create_dlq, enqueue, dequeue,
        R"({"request_id": 5, "op_type": "Wait", "op": {"queue": "emails", "ids": ["$ID", "b",
            "nope"], "wait_ms": 0}})",
        R"({"request_id": 6, "op_type": "Complete", "op": {"queue": "emails",
            "items": [{"id": "$ID", "lease_token": $TOKEN, "result": [111, 107, 0, 255]}]}})",
        R"({"request_id": 7, "op_type": "Wait", "op": {"queue": "emails", "ids": ["$ID"],
            "wait_ms": 1000}})",
        R"({"request_id": 8, "op_type": "Get", "op": {"queue": "emails", "id": "$ID"}})",
        R"({"request_id": 9, "op_type": "Enqueue", "op": {"queue": "emails", "items": [
            {"id": "$ID"}, {"id": "fresh"}], "wait_ms": 0}})",
        R"({"request_id": 10, "op_type": "Enqueue", "op": {"queue": "emails", "items": [
            {"id": "later"}], "wait_ms": 60001}})"}},
      {"batches",
       {R"({"request_id": 1, "op_type": "CreateBatch", "op": {"id": "b", "callback":
            {"queue": "done", "payload": [1, 2], "metadata": [{"key": "k", "value": "v"}]}}})",
        R"({"request_id": 2, "op_type": "Enqueue", "op": {"queue": "emails", "items": [
            {"id": "m1", "batch": "b"}, {"id": "m2", "batch": "nope"}]}})",
        R"({"request_id": 3, "op_type": "SealBatch", "op": {"id": "b"}})",
        R"({"request_id": 4, "op_type": "Enqueue", "op": {"queue": "emails", "items": [
            {"id": "m3", "batch": "b"}]}})",
        R"({"request_id": 5, "op_type": "GetBatch", "op": {"id": "b"}})",
        R"({"request_id": 6, "op_type": "CreateBatch", "op": {"id": "b"}})"}},
      {"history",
       {R"({"request_id": 1, "op_type": "CreateQueue", "op": {"name": "emails", "settings":
            {"history_max": 3, "max_attempts": 3, "invisibility_ms": 1}}})",
        enqueue,
        R"({"request_id": 3, "op_type": "Dequeue", "op": {"queue": "emails", "max": 1,
            "lease_ms": 30000, "worker_id": "host-7/pid-42"}})",
        R"({"request_id": 4, "op_type": "Note", "op": {"queue": "emails", "id": "$ID",
            "lease_token": $TOKEN, "text": "halfway"}})",
        R"({"request_id": 5, "op_type": "Fail", "op": {"queue": "emails", "id": "$ID",
            "lease_token": $TOKEN, "error": "boom", "retry_delay_ms": 0}})",
        R"({"request_id": 6, "op_type": "History", "op": {"queue": "emails", "id": "$ID"}})",
        R"({"request_id": 7, "op_type": "Note", "op": {"queue": "emails", "id": "$ID",
            "lease_token": 1, "text": ""}})",
        R"({"request_id": 8, "op_type": "History", "op": {"queue": "emails", "id": "nope"}})"}},
      {"flows",
       {R"({"request_id": 1, "op_type": "EnqueueFlow", "op": {"nodes": [{"queue": "reports",
            "item": {"id": "r", "payload": [1]}, "children": [{"queue": "images", "item": {},
            "children": [{"queue": "thumbs", "item": {"id": "t", "depends_on": ["emails/x"]}}]},
            {"queue": "images", "item": {"id": "i2", "batch": "b"}}]}]}})",
        R"({"request_id": 2, "op_type": "EnqueueFlow", "op": {"nodes": [{"queue": "reports",
            "item": {"id": "r", "payload": [1]}}]}})",
        R"({"request_id": 3, "op_type": "EnqueueFlow", "op": {"nodes": []}})"}},
      {"dependencies",
       {create, create_dlq, enqueue,
        R"({"request_id": 4, "op_type": "Enqueue", "op": {"queue": "reports", "items": [
            {"id": "r1", "depends_on": ["emails/a", "emails/b"]},
            {"id": "r2", "depends_on": ["r1", "emails/c"], "on_dependency_failure": "release"},
            {"id": "r3", "depends_on": ["emails/a"], "on_dependency_failure": "error"},
            {"id": "r4", "depends_on": ["emails/nope"]}]}})",
        dequeue,
        R"({"request_id": 6, "op_type": "Complete", "op": {"queue": "emails",
            "items": [{"id": "$ID", "lease_token": $TOKEN, "result": [49]}]}})",
        R"({"request_id": 7, "op_type": "Explain", "op": {"queue": "reports", "id": "r1"}})",
        R"({"request_id": 8, "op_type": "Get", "op": {"queue": "reports", "id": "r1",
            "include_dependency_results": true}})",
        R"({"request_id": 9, "op_type": "Cancel", "op": {"queue": "emails", "ids": ["b"]}})",
        R"({"request_id": 10, "op_type": "Browse", "op": {"queue": "reports",
            "state": "waiting", "limit": 10}})"}},
      {"schedules",
       {create,
        R"({"request_id": 2, "op_type": "UpsertSchedule", "op": {"queue": "emails",
            "name": "nightly", "cron": "30 2 * * 1-5", "tz": "Europe/Paris", "payload": [1],
            "metadata": [{"key": "k", "value": "v"}], "priority_offset_ms": 600000,
            "max_attempts": 2, "misfire": "all", "overlap": "skip_if_active"}})",
        R"({"request_id": 3, "op_type": "UpsertSchedule", "op": {"queue": "emails",
            "name": "tick", "every_ms": 1000, "misfire": "one"}})",
        R"({"request_id": 4, "op_type": "TriggerSchedule", "op": {"queue": "emails",
            "name": "tick"}})",
        R"({"request_id": 5, "op_type": "PauseSchedule", "op": {"queue": "emails",
            "name": "nightly"}})",
        R"({"request_id": 6, "op_type": "ListSchedules", "op": {"queue": "emails"}})",
        R"({"request_id": 7, "op_type": "ResumeSchedule", "op": {"queue": "emails",
            "name": "nightly"}})",
        R"({"request_id": 8, "op_type": "GetSchedule", "op": {"queue": "emails",
            "name": "tick"}})",
        R"({"request_id": 9, "op_type": "DeleteSchedule", "op": {"queue": "emails",
            "name": "tick"}})"}},
      // Flow control (docs/semantics.md, "Flow control"): a gated queue with every flow
      // setting, an item without the flow key (refused), per-key overrides (effect 51 in the
      // segment and the snapshot), grants that spend tokens (effect 49 in the snapshot), a held
      // message explained, the rates changed.
      {"flow_control",
       {R"({"request_id": 1, "op_type": "CreateQueue", "op": {"name": "jobs", "settings":
            {"flow_key": "tenant", "key_concurrency": 1, "key_rate_per_s": 0.01, "key_burst": 2,
             "rate_per_s": 10, "burst": 5, "fairness": "weighted", "overdue_first_ms": 60000,
             "ttl_ms": 3600000, "dedupe": "while_active"}}})",
        R"({"request_id": 2, "op_type": "Enqueue", "op": {"queue": "jobs", "items": [
            {"id": "a1", "priority": 1, "metadata": [{"key": "tenant", "value": "acme"}]},
            {"id": "a2", "priority": 2, "metadata": [{"key": "tenant", "value": "acme"}]},
            {"id": "a3", "priority": 3, "metadata": [{"key": "tenant", "value": "acme"}]},
            {"id": "g1", "priority": 1, "metadata": [{"key": "tenant", "value": "globex"}]},
            {"id": "e1", "metadata": [{"key": "tenant", "value": ""}]},
            {"id": "n1", "ttl_ms": 600000, "metadata": [{"key": "tenant", "value": "globex"}]},
            {"id": "x", "payload": [1]}]}})",
        R"({"request_id": 3, "op_type": "SetKeyLimits", "op": {"queue": "jobs", "value": "acme",
            "limits": {"concurrency": 2, "rate_per_s": 0.02, "burst": 3, "weight": 4}}})",
        R"({"request_id": 4, "op_type": "SetKeyLimits", "op": {"queue": "jobs",
            "value": "globex", "limits": {"weight": 2}}})",
        R"({"request_id": 5, "op_type": "GetKeyLimits", "op": {"queue": "jobs",
            "value": "acme"}})",
        R"({"request_id": 6, "op_type": "ListKeys", "op": {"queue": "jobs", "order": "pending",
            "limit": 10}})",
        R"({"request_id": 7, "op_type": "Dequeue", "op": {"queue": "jobs", "max": 4,
            "lease_ms": 30000}})",
        R"({"request_id": 8, "op_type": "Explain", "op": {"queue": "jobs", "id": "a3"}})",
        R"({"request_id": 9, "op_type": "ListKeys", "op": {"queue": "jobs",
            "order": "throttled"}})",
        R"({"request_id": 10, "op_type": "Complete", "op": {"queue": "jobs",
            "items": [{"id": "$ID", "lease_token": $TOKEN}]}})",
        R"({"request_id": 11, "op_type": "SetKeyLimits", "op": {"queue": "jobs",
            "value": "globex", "limits": {}}})",
        R"({"request_id": 12, "op_type": "UpdateQueue", "op": {"name": "jobs", "update": {
            "key_concurrency": 3, "key_rate_per_s": 0.005, "key_burst": 1, "rate_per_s": 0.25,
            "burst": 1,
            "fairness": "none", "overdue_first_ms": 0, "ttl_ms": 0}}})",
        R"({"request_id": 13, "op_type": "Dequeue", "op": {"queue": "jobs", "max": 2}})",
        R"({"request_id": 14, "op_type": "Explain", "op": {"queue": "jobs",
            "filter": [{"key": "tenant", "value": "globex"}]}})",
        R"({"request_id": 15, "op_type": "GetQueue", "op": {"name": "jobs"}})"}},
      // Expiry, debounce and dedupe while_active: a message's ttl runs out (cause expired), an
      // enqueue replaces a pending message's payload (cause debounced), and an expired id is
      // released by the next enqueue of it.
      {"expiry_debounce",
       {R"({"request_id": 1, "op_type": "CreateQueue", "op": {"name": "jobs", "settings":
            {"ttl_ms": 60000, "dedupe": "while_active"}}})",
        R"({"request_id": 2, "op_type": "Enqueue", "op": {"queue": "jobs", "items": [
            {"id": "short", "ttl_ms": 1}, {"id": "d", "payload": [1],
             "metadata": [{"key": "v", "value": "1"}], "debounce_ms": 500}]}})",
        R"({"request_id": 3, "op_type": "Browse", "op": {"queue": "jobs", "state": "canceled",
            "limit": 10}})",
        R"({"request_id": 4, "op_type": "Enqueue", "op": {"queue": "jobs", "items": [
            {"id": "d", "payload": [2], "metadata": [{"key": "v", "value": "2"}],
             "debounce_ms": 2000}, {"id": "short"}]}})",
        R"({"request_id": 5, "op_type": "Get", "op": {"queue": "jobs", "id": "short"}})",
        R"({"request_id": 6, "op_type": "Dequeue", "op": {"queue": "jobs", "max": 2}})",
        R"({"request_id": 7, "op_type": "Complete", "op": {"queue": "jobs",
            "items": [{"id": "$ID", "lease_token": $TOKEN}]}})",
        R"({"request_id": 8, "op_type": "Enqueue", "op": {"queue": "jobs", "items": [
            {"id": "$ID", "debounce_ms": 100}]}})",
        R"({"request_id": 9, "op_type": "Explain", "op": {"queue": "jobs", "id": "d"}})"}},
      {"session_ops",
       {R"({"request_id": 1, "op_type": "Auth", "op": {"token": "secret"}})",
        R"({"request_id": 2, "op_type": "Subscribe", "op": {"queue": "emails",
            "filter": [{"key": "k", "value": "v"}], "queue_stats": true,
            "max_events_per_sec": 10, "ids": ["a"]}})",
        R"({"request_id": 3, "op_type": "Unsubscribe", "op": {"queue": "emails"}})",
        R"({"request_id": 4, "op_type": "Stats", "op": {}})",
        R"({"request_id": 5, "op_type": "Health", "op": {}})"}},
  };
}

void Write(const std::filesystem::path& file, std::string_view bytes) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) fuzz::Fail("cannot write", file.string());
}

void Replace(std::string* s, std::string_view what, std::string_view with) {
  for (size_t at; (at = s->find(what)) != std::string::npos;) s->replace(at, what.size(), with);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds TESTS_FUZZ_DIR\n");
    return 2;
  }
  const std::filesystem::path out(argv[1]);
  p::JsonCodec codec("Request");
  for (const Scenario& scenario : Scenarios()) {
    fuzz::DispatchHarness harness;
    std::string frames, texts, id = "a", token = "0";
    int n = 0;
    for (std::string json : scenario.requests) {
      const bool leased_before = json.find("$TOKEN") != std::string::npos;
      Replace(&json, "$ID", id);
      Replace(&json, "$TOKEN", token);
      std::string bytes, error;
      if (!codec.FromJson(json, &bytes, &error)) fuzz::Fail("seed does not decode:", error);
      if (!protocol::VerifyRequest(bytes)) fuzz::Fail("seed does not verify:", json);
      p::AppendFrame(bytes, &frames);
      if (!texts.empty()) texts += '\x1e';
      texts += json;
      // Each request alone too: a short seed the fuzzer mutates cheaply.
      std::string frame;
      p::AppendFrame(bytes, &frame);
      const std::string single = std::string(scenario.name) + "_" + std::to_string(n++);
      Write(out / "tcp_frame/corpus" / single, frame);
      Write(out / "ws_json/corpus" / single, json);

      const std::string_view reply = harness.Handle(bytes, server::Transport::kTcp);
      const auto* response =
          flatbuffers::GetRoot<p::ServerMessage>(reply.data())->body_as_Response();
      if (response == nullptr) fuzz::Fail("no response");
      // The seeds must reach what a lease allows, not stop at a wrong token.
      if (leased_before && response->error() != nullptr) {
        fuzz::Fail("a seed's lease operation failed:", response->error()->message()->string_view());
      }
      if (const auto* leased = response->result_as_DequeueResult();
          leased != nullptr && leased->messages() != nullptr && leased->messages()->size() > 0) {
        id = leased->messages()->Get(0)->id()->str();
        token = std::to_string(leased->messages()->Get(0)->lease_token());
      }
    }
    Write(out / "tcp_frame/corpus" / scenario.name, frames);
    Write(out / "ws_json/corpus" / scenario.name, texts);

    // The snapshot of the state the scenario left, and the segment its log holds.
    // (In a directory of its own: recovery of "data" below must not see it.)
    if (!harness.fs()->CreateDir("snap").ok()) fuzz::Fail("mkdir");
    auto snap = wal::WriteSnapshot(harness.fs(), "snap", harness.engine(), 1'000);
    if (!snap.ok()) fuzz::Fail("snapshot:", snap.status().detail());
    auto snap_bytes = wal::ReadFileToString(harness.fs(), wal::JoinPath("snap", snap->file));
    if (!snap_bytes.ok()) fuzz::Fail("reading the snapshot");
    Write(out / "snapshot/corpus" / scenario.name, std::string(1, '\0') + *snap_bytes);
    harness.CheckRecovery();  // closes the log: the segment is sealed
    auto segment =
        wal::ReadFileToString(harness.fs(), wal::JoinPath("data", wal::SegmentFileName(1)));
    if (!segment.ok()) fuzz::Fail("reading the segment");
    Write(out / "wal_segment/corpus" / scenario.name, std::string(1, '\0') + *segment);
    // The same segment cut mid-record: a torn tail, and with repair (mode bit 1).
    Write(out / "wal_segment/corpus" / (std::string(scenario.name) + "_torn"),
          std::string(1, '\2') + segment->substr(0, segment->size() - 5));
  }
  std::printf("seeds written under %s\n", out.c_str());
  return 0;
}
