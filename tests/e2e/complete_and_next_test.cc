// Complete-and-next against a real sundiald (docs/semantics.md, "Complete-and-next"): the
// completion and the next lease in one reply after one fsync; a `next` with wait_ms waits like
// a long poll and is answered by a later enqueue, or with the completion alone when the wait
// ends; both the completion and the lease survive kill -9 once acknowledged.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "client/client.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_test.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;
using client::AsyncClient;
using client::Client;
using Clock = std::chrono::steady_clock;

void Put(Client& c, const std::string& queue, const std::string& id) {
  client::EnqueueItem item;
  item.id = id;
  auto r = c.Enqueue(queue, {item});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  ASSERT_EQ(r->result<p::EnqueueResults>()->items()->Get(0)->error(), nullptr);
}

// Dequeues one message; its (id, lease_token).
client::CompleteItem Lease(Client& c, const std::string& queue) {
  auto r = c.Dequeue(queue, client::DequeueOptions{});
  EXPECT_TRUE(r.ok()) << r.error().ToString();
  if (!r.ok() || r->result<p::DequeueResult>()->messages()->size() != 1) return {};
  const p::Message* m = r->result<p::DequeueResult>()->messages()->Get(0);
  return {m->id()->str(), m->lease_token()};
}

uint64_t Fsyncs(Client& c) {
  auto s = c.Stats();
  EXPECT_TRUE(s.ok());
  return s.ok() ? s->result<p::StatsResult>()->wal_fsyncs() : 0;
}

p::MessageState StateOf(Client& c, const std::string& queue, const std::string& id) {
  auto got = c.Get(queue, id);
  EXPECT_TRUE(got.ok()) << id << ": " << got.error().ToString();
  return got.ok() ? got->result<p::GetResult>()->message()->state() : p::MessageState::pending;
}

class CompleteAndNext : public ServerTest {};

TEST_F(CompleteAndNext, OneReplyAfterOneFsyncCarriesTheCompletionAndTheNextLease) {
  Put(*client_, "q", "a");
  Put(*client_, "q", "b");
  const client::CompleteItem a = Lease(*client_, "q");
  ASSERT_EQ(a.id, "a");
  const uint64_t before = Fsyncs(*client_);
  auto r = client_->CompleteAndNext("q", {a}, client::DequeueOptions{});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const uint64_t after = Fsyncs(*client_);
  const auto* results = r->result<p::ItemResults>();
  ASSERT_NE(results, nullptr);
  EXPECT_EQ(results->items()->Get(0)->code(), p::Code::OK);
  ASSERT_NE(results->next(), nullptr);
  ASSERT_EQ(results->next()->size(), 1u);
  EXPECT_EQ(results->next()->Get(0)->id()->str(), "b");
  EXPECT_NE(results->next()->Get(0)->lease_token(), 0u);
  EXPECT_EQ(after - before, 1u) << "the completion and the lease share one fsync";
  EXPECT_EQ(StateOf(*client_, "q", "a"), p::MessageState::completed);
  EXPECT_EQ(StateOf(*client_, "q", "b"), p::MessageState::running);
}

TEST_F(CompleteAndNext, AStaleTokenIsReportedAndTheNextIsStillLeased) {
  Put(*client_, "q", "a");
  Put(*client_, "q", "b");
  client::CompleteItem a = Lease(*client_, "q");
  a.lease_token ^= 1;
  auto r = client_->CompleteAndNext("q", {a}, client::DequeueOptions{});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const auto* results = r->result<p::ItemResults>();
  EXPECT_EQ(results->items()->Get(0)->code(), p::Code::FAILED_PRECONDITION);
  ASSERT_EQ(results->next()->size(), 1u);
  EXPECT_EQ(results->next()->Get(0)->id()->str(), "b");
}

TEST_F(CompleteAndNext, AWaitingNextIsAnsweredByALaterEnqueue) {
  Put(*client_, "q", "a");
  const client::CompleteItem a = Lease(*client_, "q");
  auto async = AsyncClient::Connect({"127.0.0.1", server_->port()});
  ASSERT_TRUE(async.ok()) << async.error().ToString();
  client::DequeueOptions next;
  next.wait_ms = 30'000;
  std::promise<client::Result<client::Reply>> promise;
  (*async)->Send(client::BuildCompleteAndNext(Hdr((*async)->NextRequestId()), "q", {a}, next),
                 [&](client::Result<client::Reply> r) { promise.set_value(std::move(r)); });
  // The completion is applied at once, before any message comes.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (StateOf(*client_, "q", "a") != p::MessageState::completed && Clock::now() < deadline) {
  }
  ASSERT_EQ(StateOf(*client_, "q", "a"), p::MessageState::completed);
  auto future = promise.get_future();
  EXPECT_EQ(future.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  Put(*client_, "q", "late");
  auto r = future.get();
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const auto* results = r->result<p::ItemResults>();
  ASSERT_NE(results, nullptr);
  EXPECT_EQ(results->items()->Get(0)->code(), p::Code::OK);
  ASSERT_NE(results->next(), nullptr);
  ASSERT_EQ(results->next()->size(), 1u);
  EXPECT_EQ(results->next()->Get(0)->id()->str(), "late");
  EXPECT_EQ(StateOf(*client_, "q", "late"), p::MessageState::running);
}

TEST_F(CompleteAndNext, AWaitThatEndsEmptyAnswersTheCompletionAlone) {
  Put(*client_, "q", "a");
  const client::CompleteItem a = Lease(*client_, "q");
  client::DequeueOptions next;
  next.wait_ms = 100;
  auto r = client_->CompleteAndNext("q", {a}, next);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const auto* results = r->result<p::ItemResults>();
  ASSERT_NE(results, nullptr);
  EXPECT_EQ(results->items()->Get(0)->code(), p::Code::OK);
  ASSERT_NE(results->next(), nullptr);
  EXPECT_EQ(results->next()->size(), 0u);
  EXPECT_EQ(StateOf(*client_, "q", "a"), p::MessageState::completed);
}

TEST_F(CompleteAndNext, FailWithNextRetriesAndLeasesTheNext) {
  Put(*client_, "q", "a");
  Put(*client_, "q", "b");
  const client::CompleteItem a = Lease(*client_, "q");
  client::FailOptions o;
  o.error = "boom";
  o.retry_delay_ms = 600'000;
  o.next.emplace();
  auto r = client_->Fail("q", a.id, a.lease_token, o);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const auto* failed = r->result<p::FailResult>();
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->state(), p::MessageState::invisible);
  ASSERT_NE(failed->next(), nullptr);
  ASSERT_EQ(failed->next()->size(), 1u);
  EXPECT_EQ(failed->next()->Get(0)->id()->str(), "b");
}

TEST_F(CompleteAndNext, ARefusedFailLeasesNothing) {
  Put(*client_, "q", "a");
  Put(*client_, "q", "b");
  const client::CompleteItem a = Lease(*client_, "q");
  client::FailOptions o;
  o.next.emplace();
  auto r = client_->Fail("q", a.id, a.lease_token ^ 1, o);
  EXPECT_FALSE(r.ok() && r->result<p::FailResult>() != nullptr);
  EXPECT_EQ(StateOf(*client_, "q", "b"), p::MessageState::pending);
}

TEST(CompleteAndNextDurability, TheCompletionAndTheLeaseSurviveKillNine) {
  TempDir dir;
  ServerProcess server(dir.path() + "/data");
  ASSERT_TRUE(server.Start()) << server.log();
  uint64_t token = 0;
  {
    auto c = Client::Connect({"127.0.0.1", server.port()});
    ASSERT_TRUE(c.ok()) << c.error().ToString();
    Put(**c, "q", "a");
    Put(**c, "q", "b");
    const client::CompleteItem a = Lease(**c, "q");
    client::DequeueOptions next;
    next.lease_ms = 600'000;
    auto r = (*c)->CompleteAndNext("q", {a}, next);
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    ASSERT_EQ(r->result<p::ItemResults>()->next()->size(), 1u);
    token = r->result<p::ItemResults>()->next()->Get(0)->lease_token();
  }
  server.Kill();
  ASSERT_TRUE(server.Start()) << server.log();
  auto c = Client::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(StateOf(**c, "q", "a"), p::MessageState::completed);
  auto b = (*c)->Get("q", "b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->result<p::GetResult>()->message()->state(), p::MessageState::running);
  EXPECT_EQ(b->result<p::GetResult>()->message()->lease_token(), token);
  // The lease recovered is the one acknowledged: its token completes it.
  auto done = (*c)->Complete("q", {{"b", token}});
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->result<p::ItemResults>()->items()->Get(0)->code(), p::Code::OK);
}

}  // namespace
}  // namespace sundial::e2e
