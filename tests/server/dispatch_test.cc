// Dispatch: requests written in the protocol's JSON form (the same schema) go through the
// dispatcher to a real engine; the responses carry the engine's answers, typed errors and, for
// mutations logged to a WAL, the LSN to wait for.
#include <gtest/gtest.h>

#include "engine/clock.h"
#include "engine/engine.h"
#include "protocol/json.h"
#include "protocol/sundial_generated.h"
#include "server/dispatch.h"
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
    outcome_ = dispatcher_.Handle(*p::GetRequest(bytes.data()));
    flatbuffers::Verifier check(reinterpret_cast<const uint8_t*>(outcome_.response.data()),
                                outcome_.response.size());
    EXPECT_TRUE(check.VerifyBuffer<p::ServerMessage>(nullptr));
    const auto* message = flatbuffers::GetRoot<p::ServerMessage>(outcome_.response.data());
    EXPECT_EQ(message->body_type(), p::ServerBody::Response);
    return message->body_as_Response();
  }
  std::string Json() {
    std::string json, error;
    EXPECT_TRUE(responses_.ToJson(outcome_.response, &json, &error)) << error;
    return json;
  }

  ManualClock clock_{1'700'000'000'000};
  Engine engine_{Engine::Options{.shards = 4, .seed = 3}, &clock_, nullptr};
  Dispatcher dispatcher_{&engine_, nullptr};
  p::JsonCodec requests_{"Request"};
  p::JsonCodec responses_{"ServerMessage"};
  Dispatcher::Outcome outcome_;
};

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

TEST(DispatchWal, MutationsCarryTheLsnToWaitForAndReadsDoNot) {
  auto fs = wal::NewMemoryFileSystem();
  ManualClock clock(1'700'000'000'000);
  auto log = wal::GroupCommitLog::Open(fs.get(), "data", {}, 0, 1);
  ASSERT_TRUE(log.ok());
  Engine engine(Engine::Options{.shards = 2, .seed = 1}, &clock, log->get());
  Dispatcher dispatcher(&engine, log->get());
  p::JsonCodec codec("Request");
  auto handle = [&](const std::string& json) {
    std::string bytes, error;
    EXPECT_TRUE(codec.FromJson(json, &bytes, &error)) << error;
    return dispatcher.Handle(*p::GetRequest(bytes.data()));
  };
  auto enqueued = handle(R"({"request_id": 1, "durability": "relaxed", "op_type": "Enqueue",
      "op": {"queue": "q", "items": [{"id": "a"}]}})");
  EXPECT_GT(enqueued.wait_lsn, 0u);  // queue created + message enqueued
  EXPECT_TRUE(enqueued.relaxed);
  const auto* response =
      flatbuffers::GetRoot<p::ServerMessage>(enqueued.response.data())->body_as_Response();
  EXPECT_EQ(response->lsn(), enqueued.wait_lsn);
  EXPECT_TRUE((*log)->WaitDurable(enqueued.wait_lsn).ok());
  auto read = handle(R"({"request_id": 2, "op_type": "Get", "op": {"queue": "q", "id": "a"}})");
  EXPECT_EQ(read.wait_lsn, 0u);
  EXPECT_FALSE(read.relaxed);
  ASSERT_TRUE((*log)->Close().ok());
}

}  // namespace
}  // namespace sundial::server
