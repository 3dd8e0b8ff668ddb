// Dispatch: requests written in the protocol's JSON form (the same schema) go through the
// operation table to a real engine; the responses carry the engine's answers, typed errors and,
// for mutations logged to a WAL, the LSN to wait for. A test walks every row of the table: what
// appends to the log must be a mutation, and a mutation's reply must wait for what it appended.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <tuple>

#include "engine/clock.h"
#include "engine/engine.h"
#include "protocol/json.h"
#include "protocol/sundial_generated.h"
#include "server/dispatch.h"
#include "wal/fault_injection_file_system.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"

namespace sundial::server {
namespace {

namespace p = protocol;

class DispatchTest : public ::testing::Test {
 protected:
  // Runs the request given as JSON; returns the Response (valid until the next call).
  const p::Response* Run(const std::string& json) {
    std::string bytes, error;
    EXPECT_TRUE(requests_.FromJson(json, &bytes, &error)) << error;
    flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    EXPECT_TRUE(p::VerifyRequestBuffer(verifier));
    outcome_ =
        dispatcher_.Handle(*p::GetRequest(bytes.data()), Transport::kTcp, nullptr, &builder_);
    response_.assign(outcome_.response);
    flatbuffers::Verifier check(reinterpret_cast<const uint8_t*>(response_.data()),
                                response_.size());
    EXPECT_TRUE(check.VerifyBuffer<p::ServerMessage>(nullptr));
    const auto* message = flatbuffers::GetRoot<p::ServerMessage>(response_.data());
    EXPECT_EQ(message->body_type(), p::ServerBody::Response);
    return message->body_as_Response();
  }
  std::string Json() {
    std::string json, error;
    EXPECT_TRUE(responses_.ToJson(response_, &json, &error)) << error;
    return json;
  }

  ManualClock clock_{1'700'000'000'000};
  Engine engine_{Engine::Options{.shards = 4, .seed = 3}, &clock_, nullptr};
  Dispatcher dispatcher_{&engine_, nullptr};
  p::JsonCodec requests_{"Request"};
  p::JsonCodec responses_{"ServerMessage"};
  flatbuffers::FlatBufferBuilder builder_;
  Dispatcher::Outcome outcome_;
  std::string response_;
};

// The queue defaults are written once, in the engine (engine/types.h): a CreateQueue that leaves
// settings out gets the engine's, and the reply describes the queue with every setting.
TEST_F(DispatchTest, SettingsLeftOutOfACreateQueueAreTheEnginesDefaults) {
  const auto* created = Run(R"({"request_id": 1, "op_type": "CreateQueue",
      "op": {"name": "plain", "settings": {"max_attempts": 2}}})");
  ASSERT_EQ(created->error(), nullptr);
  const p::QueueSettings* got = created->result_as_QueueResult()->queue()->settings();
  const QueueSettings defaults;
  EXPECT_EQ(got->type(), static_cast<p::QueueType>(defaults.type));
  EXPECT_EQ(got->max_attempts(), 2u);
  EXPECT_EQ(got->lease_ms(), defaults.lease_ms);
  EXPECT_EQ(got->invisibility_ms(), defaults.invisibility_ms);
  EXPECT_EQ(got->retry_backoff_ms(), defaults.retry_backoff_ms);
  EXPECT_EQ(got->retry_backoff_max_ms(), defaults.retry_backoff_max_ms);
  EXPECT_EQ(got->retention_ms(), defaults.retention_ms);
  EXPECT_EQ(got->max_depth(), defaults.max_depth);
  EXPECT_EQ(got->enqueue_paused(), defaults.enqueue_paused);
  EXPECT_EQ(got->dequeue_paused(), defaults.dequeue_paused);
  // Without a settings table at all: every default, the same as an auto-created queue.
  const auto* bare = Run(R"({"request_id": 2, "op_type": "CreateQueue", "op": {"name": "bare"}})");
  ASSERT_EQ(bare->error(), nullptr);
  EXPECT_EQ(bare->result_as_QueueResult()->queue()->settings()->lease_ms(), defaults.lease_ms);
  EXPECT_EQ(bare->result_as_QueueResult()->queue()->settings()->max_attempts(),
            defaults.max_attempts);
}

TEST_F(DispatchTest, EnqueueDequeueCompleteThroughTheProtocol) {
  const auto* created = Run(R"({"request_id": 1, "op_type": "CreateQueue",
      "op": {"name": "emails", "settings": {"lease_ms": 5000}}})");
  ASSERT_EQ(created->error(), nullptr);
  EXPECT_EQ(created->request_id(), 1u);
  EXPECT_EQ(created->result_as_QueueResult()->queue()->settings()->lease_ms(), 5000);

  const auto* enqueued = Run(R"({"request_id": 2, "op_type": "Enqueue", "op": {"queue": "emails",
      "items": [{"id": "a", "priority": 2, "payload": [104, 105],
                 "metadata": [{"key": "tenant", "value": "acme"}]},
                {"id": "b", "priority": 1}]}})");
  ASSERT_EQ(enqueued->error(), nullptr);
  const auto* items = enqueued->result_as_EnqueueResults()->items();
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ(items->Get(0)->id()->str(), "a");
  EXPECT_FALSE(items->Get(0)->duplicate());

  const auto* leased = Run(R"({"request_id": 3, "op_type": "Dequeue",
      "op": {"queue": "emails", "max": 5, "filter": [{"key": "tenant", "value": "acme"}]}})");
  ASSERT_EQ(leased->error(), nullptr);
  const auto* messages = leased->result_as_DequeueResult()->messages();
  ASSERT_EQ(messages->size(), 1u);  // only "a" carries tenant=acme
  const p::Message* m = messages->Get(0);
  EXPECT_EQ(m->id()->str(), "a");
  EXPECT_EQ(m->state(), p::MessageState::running);
  EXPECT_EQ(m->lease_expires_at(), 1'700'000'005'000);
  EXPECT_EQ(std::string(m->payload()->begin(), m->payload()->end()), "hi");
  const uint64_t token = m->lease_token();

  const auto* completed =
      Run(R"({"request_id": 4, "op_type": "Complete", "op": {"queue": "emails", "items": [
          {"id": "a", "lease_token": )" +
          std::to_string(token) + R"(},
          {"id": "a", "lease_token": 1}]}})");
  const auto* statuses = completed->result_as_ItemResults()->items();
  ASSERT_EQ(statuses->size(), 2u);
  EXPECT_EQ(statuses->Get(0)->code(), p::Code::OK);
  EXPECT_EQ(statuses->Get(1)->code(), p::Code::FAILED_PRECONDITION);

  const auto* got = Run(R"({"request_id": 5, "op_type": "Get",
      "op": {"queue": "emails", "id": "a"}})");
  EXPECT_EQ(got->result_as_GetResult()->message()->state(), p::MessageState::completed);
  const auto* count = Run(R"({"request_id": 6, "op_type": "Count", "op": {"queue": "emails"}})");
  EXPECT_EQ(count->result_as_CountResult()->counts()->pending(), 1u);
  EXPECT_EQ(count->result_as_CountResult()->counts()->completed(), 1u);
}

// sundial_messages_total counts a lease as a dequeue's whichever request carried it: a Complete
// with `next` reports its completed items as its own messages and its leases apart (bench/
// compare.sh checks what the bench saw acknowledged against these counters).
TEST_F(DispatchTest, LeasesOfACompletesNextAreCountedApartFromItsCompletions) {
  ASSERT_EQ(Run(R"({"request_id": 1, "op_type": "Enqueue", "op": {"queue": "jobs",
      "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}})")
                ->error(),
            nullptr);
  const auto* leased = Run(R"({"request_id": 2, "op_type": "Dequeue",
      "op": {"queue": "jobs", "max": 1}})");
  ASSERT_EQ(outcome_.messages, 1u);
  EXPECT_EQ(outcome_.next_leased, 0u);
  const p::Message* m = leased->result_as_DequeueResult()->messages()->Get(0);
  const auto* completed = Run(R"({"request_id": 3, "op_type": "Complete", "op": {"queue": "jobs",
      "items": [{"id": ")" + m->id()->str() +
                              R"(", "lease_token": )" + std::to_string(m->lease_token()) +
                              R"(}], "next": {"max": 2}}})");
  ASSERT_EQ(completed->error(), nullptr);
  ASSERT_EQ(completed->result_as_ItemResults()->next()->size(), 2u);
  EXPECT_EQ(outcome_.messages, 1u);     // the completion
  EXPECT_EQ(outcome_.next_leased, 2u);  // the leases
}

TEST_F(DispatchTest, ErrorsAreTypedAndNameTheProblem) {
  const auto* missing = Run(R"({"request_id": 9, "op_type": "Get",
      "op": {"queue": "nope", "id": "x"}})");
  ASSERT_NE(missing->error(), nullptr);
  EXPECT_EQ(missing->error()->code(), p::Code::NOT_FOUND);
  EXPECT_EQ(missing->request_id(), 9u);
  EXPECT_NE(Json().find("NOT_FOUND"), std::string::npos);

  const auto* bad = Run(R"({"request_id": 10, "op_type": "CreateQueue", "op": {"name": ""}})");
  ASSERT_NE(bad->error(), nullptr);
  EXPECT_EQ(bad->error()->code(), p::Code::INVALID_ARGUMENT);
  EXPECT_FALSE(bad->error()->message()->str().empty());

  const auto* none = Run(R"({"request_id": 11})");
  ASSERT_NE(none->error(), nullptr);
  EXPECT_EQ(none->error()->code(), p::Code::INVALID_ARGUMENT);

  std::string many = R"({"request_id": 12, "op_type": "Enqueue", "op": {"queue": "q", "items": [)";
  for (int i = 0; i < 1001; ++i) many += std::string(i ? "," : "") + "{}";
  many += "]}}";
  const auto* too_many = Run(many);
  ASSERT_NE(too_many->error(), nullptr);
  EXPECT_EQ(too_many->error()->code(), p::Code::INVALID_ARGUMENT);
}

// Schedules through the protocol (docs/protocol.md, "Schedules"): the JSON form is the
// schema's, the fires are made by the engine's Advance.
TEST_F(DispatchTest, SchedulesUpsertGetListTriggerPauseAndDelete) {
  const auto* created = Run(R"({"request_id": 1, "op_type": "UpsertSchedule",
      "op": {"queue": "jobs", "name": "tick", "every_ms": 1000, "payload": [104, 105],
             "metadata": [{"key": "k", "value": "v"}], "priority_offset_ms": 50,
             "misfire": "all", "overlap": "skip_if_active"}})");
  ASSERT_EQ(created->error(), nullptr) << created->error()->message()->str();
  const p::ScheduleResult* result = created->result_as_ScheduleResult();
  EXPECT_TRUE(result->created());
  EXPECT_EQ(result->schedule()->next_fire_at(), 1'700'000'001'000);
  EXPECT_EQ(result->schedule()->misfire(), p::MisfirePolicy::all);
  EXPECT_EQ(result->schedule()->overlap(), p::OverlapPolicy::skip_if_active);
  EXPECT_EQ(result->schedule()->metadata()->Get(0)->value()->str(), "v");
  EXPECT_NE(Json().find(R"("misfire": "all")"), std::string::npos) << Json();

  clock_.Advance(1000);
  engine_.Advance(clock_.NowMs());
  const auto* got = Run(R"({"request_id": 2, "op_type": "GetSchedule",
      "op": {"queue": "jobs", "name": "tick"}})");
  ASSERT_EQ(got->error(), nullptr);
  EXPECT_EQ(got->result_as_ScheduleResult()->schedule()->fires(), 1u);
  EXPECT_EQ(got->result_as_ScheduleResult()->schedule()->last_fire_at(), 1'700'000'001'000);
  const auto* message = Run(R"({"request_id": 3, "op_type": "Get",
      "op": {"queue": "jobs", "id": "tick@1700000001000"}})");
  ASSERT_EQ(message->error(), nullptr);
  EXPECT_EQ(message->result_as_GetResult()->message()->priority(), 1'700'000'001'050);

  clock_.Advance(10);
  const auto* fired = Run(R"({"request_id": 4, "op_type": "TriggerSchedule",
      "op": {"queue": "jobs", "name": "tick"}})");
  ASSERT_EQ(fired->error(), nullptr);
  EXPECT_EQ(fired->result_as_TriggerResult()->id()->str(), "tick@1700000001010");

  const auto* paused = Run(R"({"request_id": 5, "op_type": "PauseSchedule",
      "op": {"queue": "jobs", "name": "tick"}})");
  EXPECT_TRUE(paused->result_as_ScheduleResult()->schedule()->paused());
  EXPECT_EQ(paused->result_as_ScheduleResult()->schedule()->next_fire_at(), 0);
  const auto* listed = Run(R"({"request_id": 6, "op_type": "ListSchedules", "op": {}})");
  EXPECT_EQ(listed->result_as_ScheduleList()->schedules()->size(), 1u);
  const auto* deleted = Run(R"({"request_id": 7, "op_type": "DeleteSchedule",
      "op": {"queue": "jobs", "name": "tick"}})");
  EXPECT_EQ(deleted->error(), nullptr);
  const auto* gone = Run(R"({"request_id": 8, "op_type": "GetSchedule",
      "op": {"queue": "jobs", "name": "tick"}})");
  ASSERT_NE(gone->error(), nullptr);
  EXPECT_EQ(gone->error()->code(), p::Code::NOT_FOUND);

  const auto* both = Run(R"({"request_id": 9, "op_type": "UpsertSchedule",
      "op": {"queue": "jobs", "name": "x", "every_ms": 1000, "cron": "* * * * *"}})");
  ASSERT_NE(both->error(), nullptr);
  EXPECT_EQ(both->error()->code(), p::Code::INVALID_ARGUMENT);
}

TEST_F(DispatchTest, AnOutOfRangeMisfirePolicyIsInvalidArgument) {
  flatbuffers::FlatBufferBuilder b;
  auto op = p::CreateUpsertScheduleDirect(b, "jobs", "x", nullptr, nullptr, 1000, nullptr, nullptr,
                                          0, 0, static_cast<p::MisfirePolicy>(9));
  b.Finish(
      p::CreateRequest(b, 1, p::Durability::durable, p::Operation::UpsertSchedule, op.Union()));
  const auto outcome =
      dispatcher_.Handle(*p::GetRequest(b.GetBufferPointer()), Transport::kTcp, nullptr, &builder_);
  const auto* response =
      flatbuffers::GetRoot<p::ServerMessage>(outcome.response.data())->body_as_Response();
  ASSERT_NE(response->error(), nullptr);
  EXPECT_EQ(response->error()->code(), p::Code::INVALID_ARGUMENT);
  EXPECT_EQ(response->error()->message()->str(), "misfire: one of skip, one, all");
}

TEST_F(DispatchTest, BulkFormsAndExplain) {
  Run(R"({"request_id": 1, "op_type": "Enqueue", "op": {"queue": "jobs", "items": [
      {"id": "x", "metadata": [{"key": "k", "value": "1"}]},
      {"id": "y", "metadata": [{"key": "k", "value": "1"}]},
      {"id": "z", "metadata": [{"key": "k", "value": "2"}]}]}})");
  const auto* canceled = Run(R"({"request_id": 2, "op_type": "Cancel",
      "op": {"queue": "jobs", "filter": [{"key": "k", "value": "1"}]}})");
  EXPECT_EQ(canceled->result_as_Counted()->count(), 2u);
  const auto* explained = Run(R"({"request_id": 3, "op_type": "Explain",
      "op": {"queue": "jobs", "id": "z"}})");
  EXPECT_EQ(explained->result_as_ExplainResult()->reason(), p::ExplainReason::dequeueable);
  const auto* listed = Run(R"({"request_id": 4, "op_type": "ListQueues", "op": {}})");
  EXPECT_EQ(listed->result_as_QueueList()->queues()->size(), 1u);
}

// A queue "q" (lease 5 s) with "a" leased (its token) and "b" pending, a schedule "s" of "q"
// every minute, an open batch "open", and a queue "keyed" with a flow key, in an engine whose
// effects go to a log in memory.
struct LoggedEngine {
  LoggedEngine() {
    auto opened = wal::GroupCommitLog::Open(&faulty, "data", {}, 0, 1);
    EXPECT_TRUE(opened.ok());
    log = std::move(opened).value();
    engine = std::make_unique<Engine>(Engine::Options{.shards = 2, .seed = 1}, &clock, log.get());
    QueueSettings settings;
    settings.lease_ms = 5000;
    EXPECT_TRUE(engine->CreateQueue("q", settings).ok());
    std::vector<EnqueueItem> items(2);
    items[0].id = "a";
    items[1].id = "b";
    items[1].priority = 1;
    for (const auto& r : engine->Enqueue("q", std::move(items))) EXPECT_TRUE(r.ok());
    auto leased = engine->Dequeue("q", DequeueRequest{});
    EXPECT_TRUE(leased.ok() && leased->size() == 1);
    token = leased.ok() && !leased->empty() ? (*leased)[0].lease_token : 0;
    ScheduleSpec every_minute;
    every_minute.every_ms = 60'000;
    EXPECT_TRUE(engine->UpsertSchedule("q", "s", every_minute).ok());
    CreateBatchRequest batch;
    batch.id = "open";
    EXPECT_TRUE(engine->CreateBatch(batch).ok());
    QueueSettings keyed;
    keyed.flow_key = "tenant";
    EXPECT_TRUE(engine->CreateQueue("keyed", keyed).ok());
  }
  ~LoggedEngine() { (void)log->Close(); }

  std::unique_ptr<wal::FileSystem> fs = wal::NewMemoryFileSystem();
  wal::FaultInjectionFileSystem faulty{fs.get()};
  ManualClock clock{1'700'000'000'000};
  std::unique_ptr<wal::GroupCommitLog> log;
  std::unique_ptr<Engine> engine;
  uint64_t token = 0;
};

// A request of each operation that does what it says on LoggedEngine's state. A new operation
// fails OperationTable.* until it has one here.
std::string RequestFor(std::string_view name, uint64_t token) {
  const std::string t = std::to_string(token);
  const std::map<std::string_view, std::string> ops = {
      {"Auth", R"({"token": "x"})"},
      {"CreateQueue", R"({"name": "new"})"},
      {"UpdateQueue", R"({"name": "q", "update": {"lease_ms": 1000}})"},
      {"GetQueue", R"({"name": "q"})"},
      {"ListQueues", R"({})"},
      {"DeleteQueue", R"({"name": "q"})"},
      {"PurgeQueue", R"({"name": "q", "states": ["pending"]})"},
      {"Enqueue", R"({"queue": "q", "items": [{"id": "c"}]})"},
      {"Dequeue", R"({"queue": "q", "max": 1})"},
      {"Complete", R"({"queue": "q", "items": [{"id": "a", "lease_token": )" + t + "}]}"},
      {"Fail", R"({"queue": "q", "id": "a", "error": "x", "lease_token": )" + t + "}"},
      {"Extend", R"({"queue": "q", "id": "a", "lease_ms": 9000, "lease_token": )" + t + "}"},
      {"Cancel", R"({"queue": "q", "ids": ["b"]})"},
      {"Reprioritize", R"({"queue": "q", "id": "b", "priority": 7})"},
      {"Redrive", R"({"queue": "q", "all": true})"},
      {"Get", R"({"queue": "q", "id": "b"})"},
      {"Browse", R"({"queue": "q", "state": "pending"})"},
      {"Count", R"({"queue": "q"})"},
      {"Explain", R"({"queue": "q", "id": "b"})"},
      {"Subscribe", R"({"queue": "q"})"},
      {"Unsubscribe", R"({"queue": "q"})"},
      {"Stats", R"({})"},
      {"Health", R"({})"},
      {"Cluster", R"({})"},
      {"Switchover", R"({"to": "b"})"},
      {"Wait", R"({"queue": "q", "ids": ["a"], "wait_ms": 0})"},
      {"UpsertSchedule", R"({"queue": "q", "name": "t", "cron": "@daily", "tz": "UTC",
                             "misfire": "one", "overlap": "skip_if_active"})"},
      {"GetSchedule", R"({"queue": "q", "name": "s"})"},
      {"ListSchedules", R"({"queue": "q"})"},
      {"DeleteSchedule", R"({"queue": "q", "name": "s"})"},
      {"PauseSchedule", R"({"queue": "q", "name": "s"})"},
      {"ResumeSchedule", R"({"queue": "q", "name": "s"})"},
      {"TriggerSchedule", R"({"queue": "q", "name": "s"})"},
      {"CreateBatch", R"({"id": "new", "callback": {"queue": "done"}})"},
      {"SealBatch", R"({"id": "open"})"},
      {"GetBatch", R"({"id": "open"})"},
      {"EnqueueFlow", R"({"nodes": [{"queue": "q", "item": {"id": "p"},
                                    "children": [{"queue": "q", "item": {"id": "c"}}]}]})"},
      {"History", R"({"queue": "q", "id": "b"})"},
      {"Note", R"({"queue": "q", "id": "a", "text": "n", "lease_token": )" + t + "}"},
      {"SetKeyLimits", R"({"queue": "keyed", "value": "acme", "limits": {"concurrency": 2}})"},
      {"GetKeyLimits", R"({"queue": "keyed", "value": "acme"})"},
      {"ListKeys", R"({"queue": "keyed"})"},
  };
  auto it = ops.find(name);
  if (it == ops.end()) return "";
  return R"({"request_id": 5, "op_type": ")" + std::string(name) + R"(", "op": )" + it->second +
         "}";
}

TEST(OperationTable, EveryOperationHasOneRowNamedAfterItsUnionMember) {
  const auto table = OperationTable();
  ASSERT_EQ(table.size(), static_cast<size_t>(p::Operation::MAX));
  for (size_t i = 0; i < table.size(); ++i) {
    const auto op = static_cast<p::Operation>(i + 1);
    EXPECT_EQ(table[i].op, op);
    EXPECT_EQ(table[i].name, p::EnumNameOperation(op));
    EXPECT_EQ(FindOperation(op), &table[i]);
    EXPECT_NE(table[i].run, nullptr);
    EXPECT_NE(table[i].transports, 0);
  }
  EXPECT_EQ(FindOperation(p::Operation::NONE), nullptr);
  EXPECT_EQ(FindOperation(static_cast<p::Operation>(200)), nullptr);
}

// The property that makes an early acknowledgement impossible by construction: whatever a row
// appends to the log, the row is a mutation, and a mutation's reply carries — and Handle makes
// it wait for — an LSN covering every record appended when it was answered.
TEST(OperationTable, WhatAppendsIsAMutationAndItsReplyWaitsForWhatItAppended) {
  p::JsonCodec codec("Request");
  for (const OperationRow& row : OperationTable()) {
    SCOPED_TRACE(std::string(row.name));
    LoggedEngine e;
    const std::string json = RequestFor(row.name, e.token);
    ASSERT_FALSE(json.empty()) << "add a request for this operation to RequestFor";
    std::string bytes, error;
    ASSERT_TRUE(codec.FromJson(json, &bytes, &error)) << error;
    Dispatcher dispatcher(e.engine.get(), e.log.get());
    flatbuffers::FlatBufferBuilder builder;
    const uint64_t before = e.log->AppendedEndLsn();
    const Transport transport =
        (row.transports & kOverTcp) != 0 ? Transport::kTcp : Transport::kWebSocket;
    const auto outcome =
        dispatcher.Handle(*p::GetRequest(bytes.data()), transport, nullptr, &builder);
    const uint64_t after = e.log->AppendedEndLsn();
    const auto* response =
        flatbuffers::GetRoot<p::ServerMessage>(outcome.response.data())->body_as_Response();
    ASSERT_EQ(outcome.row, &row);
    if (after > before) {
      EXPECT_EQ(row.kind, OpKind::kMutation) << "appended but not a mutation";
    }
    if (row.kind == OpKind::kMutation) {
      EXPECT_EQ(response->error(), nullptr) << response->error()->message()->str();
      EXPECT_GE(outcome.wait_lsn, after);
      EXPECT_EQ(response->lsn(), outcome.wait_lsn);
    } else if (row.kind == OpKind::kDurableRead) {
      // Appends nothing, but waits for everything appended before it answered.
      EXPECT_EQ(response->error(), nullptr) << response->error()->message()->str();
      EXPECT_EQ(outcome.wait_lsn, after);
      EXPECT_EQ(response->lsn(), outcome.wait_lsn);
      EXPECT_GT(outcome.wait_lsn, 0u);
    } else {
      EXPECT_EQ(outcome.wait_lsn, 0u);
      EXPECT_EQ(response->lsn(), 0u);
    }
    if (row.kind == OpKind::kSession || row.kind == OpKind::kControl) {
      // Without a server behind the dispatcher, session operations are refused, not faked.
      ASSERT_NE(response->error(), nullptr);
      EXPECT_EQ(response->error()->code(), p::Code::FAILED_PRECONDITION);
    }
  }
}

// --dashboard read-only (docs/dashboard.md): a read-only connection is refused exactly the
// mutation rows and the control rows (Switchover: a read-only page handed the leadership over,
// found while documenting the dashboard's cluster panel), before they run (nothing appended),
// and everything else runs as usual.
TEST(OperationTable, AReadOnlyConnectionIsRefusedEveryMutationAndControlAndNothingElse) {
  p::JsonCodec codec("Request");
  for (const OperationRow& row : OperationTable()) {
    SCOPED_TRACE(std::string(row.name));
    LoggedEngine e;
    std::string bytes, error;
    ASSERT_TRUE(codec.FromJson(RequestFor(row.name, e.token), &bytes, &error)) << error;
    Dispatcher dispatcher(e.engine.get(), e.log.get());
    flatbuffers::FlatBufferBuilder builder;
    const uint64_t before = e.log->AppendedEndLsn();
    const Transport transport =
        (row.transports & kOverTcp) != 0 ? Transport::kTcp : Transport::kWebSocket;
    const auto outcome = dispatcher.Handle(*p::GetRequest(bytes.data()), transport, nullptr,
                                           &builder, Access::kReadOnly);
    const auto* response =
        flatbuffers::GetRoot<p::ServerMessage>(outcome.response.data())->body_as_Response();
    const std::string message = response->error() ? response->error()->message()->str() : "";
    if (row.kind == OpKind::kMutation || row.kind == OpKind::kControl) {
      ASSERT_NE(response->error(), nullptr);
      EXPECT_EQ(response->error()->code(), p::Code::FAILED_PRECONDITION);
      EXPECT_NE(message.find("read-only"), std::string::npos) << message;
      EXPECT_EQ(e.log->AppendedEndLsn(), before);
      EXPECT_EQ(outcome.wait_lsn, 0u);
    } else {
      EXPECT_EQ(outcome.row, &row);
      EXPECT_EQ(message.find("read-only"), std::string::npos) << message;
    }
  }
}

// A node that may not write (a standby, a primary past its leadership's deadline, a node that
// knows no primary) is refused every mutation row with NOT_PRIMARY before it runs, naming the
// primary when it knows it; reads and session operations go on; every reply carries the epoch.
TEST(OperationTable, ANodeThatMayNotWriteIsRefusedEveryMutationWithNotPrimary) {
  NodeRole role;
  ClusterInfo info;
  info.cluster = "jobs";
  info.node = "b";
  info.epoch = 9;
  info.primary = "a";
  info.primary_addr = "10.0.0.1:7400";
  role.Set(RoleKind::kStandby, 9, info);
  p::JsonCodec codec("Request");
  for (const OperationRow& row : OperationTable()) {
    SCOPED_TRACE(std::string(row.name));
    LoggedEngine e;
    std::string bytes, error;
    ASSERT_TRUE(codec.FromJson(RequestFor(row.name, e.token), &bytes, &error)) << error;
    Dispatcher dispatcher(e.engine.get(), e.log.get(), nullptr, &role);
    flatbuffers::FlatBufferBuilder builder;
    const uint64_t before = e.log->AppendedEndLsn();
    const Transport transport =
        (row.transports & kOverTcp) != 0 ? Transport::kTcp : Transport::kWebSocket;
    const auto outcome =
        dispatcher.Handle(*p::GetRequest(bytes.data()), transport, nullptr, &builder);
    const auto* response =
        flatbuffers::GetRoot<p::ServerMessage>(outcome.response.data())->body_as_Response();
    EXPECT_EQ(response->epoch(), 9u);
    if (row.kind == OpKind::kMutation) {
      ASSERT_NE(response->error(), nullptr);
      EXPECT_EQ(response->error()->code(), p::Code::NOT_PRIMARY);
      EXPECT_EQ(response->error()->primary()->str(), "10.0.0.1:7400");
      EXPECT_NE(response->error()->message()->str().find("the primary is a at 10.0.0.1:7400"),
                std::string::npos)
          << response->error()->message()->str();
      EXPECT_EQ(e.log->AppendedEndLsn(), before);
      EXPECT_EQ(outcome.wait_lsn, 0u);
      EXPECT_EQ(outcome.code, Code::kNotPrimary);
    } else {
      EXPECT_EQ(outcome.row, &row);
      if (response->error() != nullptr) {
        EXPECT_NE(response->error()->code(), p::Code::NOT_PRIMARY);
      }
    }
  }
}

TEST(OperationTable, APrimaryWritesUntilItsDeadlineAndNotAfter) {
  NodeRole role;
  ClusterInfo info;
  info.node = "a";
  info.epoch = 4;
  role.Set(RoleKind::kPrimary, 4, info);
  const auto now = NodeRole::SteadyClock::now();
  role.SetWritableUntil(now + std::chrono::seconds(1));
  EXPECT_TRUE(role.MayWrite(now));
  EXPECT_TRUE(role.MayWrite(now + std::chrono::milliseconds(999)));
  EXPECT_FALSE(role.MayWrite(now + std::chrono::seconds(1)));
  EXPECT_NE(role.WhyNotWritable().message.find("could not renew its leadership"),
            std::string::npos);
  role.Set(RoleKind::kUnknown, 5, info);
  EXPECT_FALSE(role.MayWrite(now)) << "no primary known: nobody writes";
  EXPECT_TRUE(role.WhyNotWritable().primary_addr.empty());
  NodeRole standalone;
  EXPECT_TRUE(standalone.MayWrite(now)) << "outside a cluster a node always writes";
  EXPECT_EQ(standalone.epoch(), 0u);
}

TEST(OperationTable, RelaxedMutationsCarryTheirLsnButDoNotWait) {
  LoggedEngine e;
  Dispatcher dispatcher(e.engine.get(), e.log.get());
  flatbuffers::FlatBufferBuilder builder;
  p::JsonCodec codec("Request");
  std::string bytes, error;
  ASSERT_TRUE(codec.FromJson(R"({"request_id": 1, "durability": "relaxed", "op_type": "Enqueue",
      "op": {"queue": "q", "items": [{"id": "x"}]}})",
                             &bytes, &error))
      << error;
  const auto outcome =
      dispatcher.Handle(*p::GetRequest(bytes.data()), Transport::kTcp, nullptr, &builder);
  EXPECT_EQ(outcome.wait_lsn, 0u);
  const auto* response =
      flatbuffers::GetRoot<p::ServerMessage>(outcome.response.data())->body_as_Response();
  EXPECT_EQ(response->lsn(), e.log->AppendedEndLsn());
  EXPECT_GT(response->lsn(), 0u);
}

// `wait` and `enqueue` with wait_ms (docs/semantics.md, "Results and waiting"): unfinished until
// every message is terminal; an enqueue is answered again from its first reply, not run again.
TEST(WaitRows, AWaitIsUnfinishedUntilEveryMessageIsSettled) {
  LoggedEngine e;
  Dispatcher dispatcher(e.engine.get(), e.log.get());
  flatbuffers::FlatBufferBuilder builder;
  p::JsonCodec codec("Request");
  std::string bytes, error;
  ASSERT_TRUE(codec.FromJson(R"({"request_id": 1, "op_type": "Wait",
      "op": {"queue": "q", "ids": ["a", "gone"], "wait_ms": 1000}})",
                             &bytes, &error))
      << error;
  const p::Request& request = *p::GetRequest(bytes.data());
  auto outcome = dispatcher.Handle(request, Transport::kTcp, nullptr, &builder);
  EXPECT_TRUE(outcome.unfinished);  // "a" runs; "gone" is settled (NOT_FOUND)
  auto* wait = flatbuffers::GetRoot<p::ServerMessage>(outcome.response.data())
                   ->body_as_Response()
                   ->result_as_WaitResult();
  ASSERT_NE(wait, nullptr);
  EXPECT_FALSE(wait->done());
  EXPECT_EQ(wait->items()->Get(0)->state(), p::MessageState::running);
  EXPECT_EQ(wait->items()->Get(1)->error()->code(), p::Code::NOT_FOUND);

  ASSERT_TRUE(e.engine->Complete("q", {{"a", e.token, "ok"}})[0].ok());
  outcome = dispatcher.Reanswer(request, {}, Transport::kTcp, nullptr, &builder);
  EXPECT_FALSE(outcome.unfinished);
  wait = flatbuffers::GetRoot<p::ServerMessage>(outcome.response.data())
             ->body_as_Response()
             ->result_as_WaitResult();
  EXPECT_TRUE(wait->done());
  EXPECT_EQ(wait->items()->Get(0)->state(), p::MessageState::completed);
  EXPECT_EQ(wait->items()->Get(0)->result()->size(), 2u);
  EXPECT_EQ(outcome.wait_lsn, e.log->AppendedEndLsn());  // covers the complete's record
}

TEST(WaitRows, AnEnqueueWithWaitMsIsAnsweredAgainFromItsFirstReply) {
  LoggedEngine e;
  Dispatcher dispatcher(e.engine.get(), e.log.get());
  flatbuffers::FlatBufferBuilder builder;
  p::JsonCodec codec("Request");
  std::string bytes, error;
  ASSERT_TRUE(codec.FromJson(R"({"request_id": 1, "op_type": "Enqueue", "op": {"queue": "q",
      "items": [{"id": "c"}, {"id": "a", "payload": [1]}], "wait_ms": 5000}})",
                             &bytes, &error))
      << error;
  const p::Request& request = *p::GetRequest(bytes.data());
  const auto first = dispatcher.Handle(request, Transport::kTcp, nullptr, &builder);
  EXPECT_TRUE(first.unfinished);
  const std::string first_reply(first.response);
  const uint64_t appended = e.log->AppendedEndLsn();
  // "c" runs and completes; the enqueue is not run again (no append, not a duplicate).
  auto leased = e.engine->Dequeue("q", DequeueRequest{});  // "c": priority 0, before "b"
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->size(), 1u);
  ASSERT_EQ((*leased)[0].id, "c");
  ASSERT_TRUE(e.engine->Complete("q", {{"c", (*leased)[0].lease_token, "42"}})[0].ok());
  const uint64_t before = e.log->AppendedEndLsn();
  const auto again = dispatcher.Reanswer(request, first_reply, Transport::kTcp, nullptr, &builder);
  EXPECT_EQ(e.log->AppendedEndLsn(), before);
  EXPECT_GT(before, appended);
  EXPECT_FALSE(again.unfinished);
  EXPECT_EQ(again.wait_lsn, before);
  const auto* items = flatbuffers::GetRoot<p::ServerMessage>(again.response.data())
                          ->body_as_Response()
                          ->result_as_EnqueueResults()
                          ->items();
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ(items->Get(0)->id()->str(), "c");
  EXPECT_FALSE(items->Get(0)->duplicate());
  EXPECT_EQ(items->Get(0)->outcome()->state(), p::MessageState::completed);
  EXPECT_EQ(items->Get(0)->outcome()->result()->size(), 2u);
  // The refused item keeps its error, message included.
  ASSERT_NE(items->Get(1)->error(), nullptr);
  EXPECT_EQ(items->Get(1)->error()->code(), p::Code::ALREADY_EXISTS);
  EXPECT_GT(items->Get(1)->error()->message()->size(), 0u);
  EXPECT_EQ(items->Get(1)->outcome(), nullptr);
}

TEST(WaitRows, WaitMsAboveTheLimitIsRefused) {
  LoggedEngine e;
  Dispatcher dispatcher(e.engine.get(), e.log.get());
  flatbuffers::FlatBufferBuilder builder;
  p::JsonCodec codec("Request");
  for (const char* json :
       {R"({"request_id": 1, "op_type": "Wait", "op": {"queue": "q", "ids": ["a"],
            "wait_ms": 60001}})",
        R"({"request_id": 1, "op_type": "Wait", "op": {"queue": "q", "ids": []}})",
        R"({"request_id": 1, "op_type": "Enqueue", "op": {"queue": "q", "items": [{"id": "z"}],
            "wait_ms": 60001}})"}) {
    std::string bytes, error;
    ASSERT_TRUE(codec.FromJson(json, &bytes, &error)) << error;
    const auto outcome =
        dispatcher.Handle(*p::GetRequest(bytes.data()), Transport::kTcp, nullptr, &builder);
    const auto* response =
        flatbuffers::GetRoot<p::ServerMessage>(outcome.response.data())->body_as_Response();
    ASSERT_NE(response->error(), nullptr) << json;
    EXPECT_EQ(response->error()->code(), p::Code::INVALID_ARGUMENT);
  }
  EXPECT_EQ(e.engine->Get("q", "z").status().code(), Code::kNotFound);
}

TEST(OperationTable, WebSocketOnlyOperationsAreRefusedOverTcpAndAFailedLogRefusesMutations) {
  LoggedEngine e;
  Dispatcher dispatcher(e.engine.get(), e.log.get());
  flatbuffers::FlatBufferBuilder builder;
  p::JsonCodec codec("Request");
  auto handle = [&](const std::string& json, Transport transport) {
    std::string bytes, error;
    EXPECT_TRUE(codec.FromJson(json, &bytes, &error)) << error;
    const auto outcome =
        dispatcher.Handle(*p::GetRequest(bytes.data()), transport, nullptr, &builder);
    const auto* response =
        flatbuffers::GetRoot<p::ServerMessage>(outcome.response.data())->body_as_Response();
    return std::make_pair(response->error() ? response->error()->code() : p::Code::OK,
                          response->error() ? response->error()->message()->str() : "");
  };
  auto [code, message] =
      handle(R"({"request_id": 1, "op_type": "Subscribe", "op": {"queue": "q"}})", Transport::kTcp);
  EXPECT_EQ(code, p::Code::INVALID_ARGUMENT);
  EXPECT_EQ(message, "subscribe: WebSocket connections only (the HTTP port's /ws)");

  e.faulty.FailNextSyncWithIoError();
  ASSERT_EQ(e.log->WaitDurable(e.log->AppendedEndLsn()).code(), Code::kUnavailable);
  std::tie(code, message) =
      handle(R"({"request_id": 2, "op_type": "Enqueue", "op": {"queue": "q", "items": [{}]}})",
             Transport::kTcp);
  EXPECT_EQ(code, p::Code::UNAVAILABLE);
  EXPECT_NE(message.find("write-ahead log has failed"), std::string::npos);
  std::tie(code, message) = handle(
      R"({"request_id": 3, "op_type": "Get", "op": {"queue": "q", "id": "b"}})", Transport::kTcp);
  EXPECT_EQ(code, p::Code::OK) << message;  // reads go on
}

}  // namespace
}  // namespace sundial::server
