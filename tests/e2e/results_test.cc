// Results and waiting against a real sundiald (docs/semantics.md, "Results and waiting";
// docs/protocol.md "Wait"): a complete's result is read back by get and wait; a waiting `wait`
// (on another connection) is woken by the completing effect, not by polling; `enqueue` with
// wait_ms answers with the outcome; wait_ms ends a wait with what is settled; an acknowledged
// result survives kill -9; the CLI's complete --result, wait and enqueue --wait-ms.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>

#include "client/client.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_test.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;
using client::AsyncClient;
using Clock = std::chrono::steady_clock;

std::string Bytes(const flatbuffers::Vector<uint8_t>* v) {
  return v ? std::string(reinterpret_cast<const char*>(v->data()), v->size()) : std::string();
}

struct Answer {
  client::Result<client::Reply> reply = client::Error{};
  Clock::time_point at;
};

class Results : public ServerTest {
 protected:
  std::unique_ptr<AsyncClient> Async() {
    auto a = AsyncClient::Connect({"127.0.0.1", server_->port()});
    EXPECT_TRUE(a.ok()) << a.error().ToString();
    return a.ok() ? std::move(a).value() : nullptr;
  }

  std::future<Answer> Send(AsyncClient* async, std::string request) {
    auto promise = std::make_shared<std::promise<Answer>>();
    auto future = promise->get_future();
    async->Send(std::move(request), [promise](client::Result<client::Reply> r) {
      promise->set_value({std::move(r), Clock::now()});
    });
    return future;
  }

  void Put(const std::string& queue, const std::string& id) {
    client::EnqueueItem item;
    item.id = id;
    item.payload = "job " + id;
    auto r = client_->Enqueue(queue, {item});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    ASSERT_EQ(r->result<p::EnqueueResults>()->items()->Get(0)->error(), nullptr);
  }

  // Dequeues one message of `queue`: (id, lease token).
  std::pair<std::string, uint64_t> Lease(const std::string& queue) {
    client::DequeueOptions o;
    auto r = client_->Dequeue(queue, o);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return {};
    const auto* messages = r->result<p::DequeueResult>()->messages();
    EXPECT_EQ(messages->size(), 1u);
    if (messages->size() != 1) return {};
    return {messages->Get(0)->id()->str(), messages->Get(0)->lease_token()};
  }

  void CompleteWith(const std::string& queue, const std::pair<std::string, uint64_t>& lease,
                    const std::string& result) {
    auto r = client_->Complete(queue, {{lease.first, lease.second, result}});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    ASSERT_EQ(r->result<p::ItemResults>()->items()->Get(0)->code(), p::Code::OK);
  }
};

TEST_F(Results, GetAndWaitReturnTheResultACompleteCarried) {
  Put("q", "a");
  CompleteWith("q", Lease("q"), std::string("bin\0ary", 7));
  auto got = client_->Get("q", "a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(Bytes(got->result<p::GetResult>()->message()->result()), std::string("bin\0ary", 7));
  auto waited = client_->Wait("q", {"a", "nope"}, 0);
  ASSERT_TRUE(waited.ok()) << waited.error().ToString();
  const p::WaitResult* w = waited->result<p::WaitResult>();
  ASSERT_EQ(w->items()->size(), 2u);
  EXPECT_TRUE(w->done());
  EXPECT_EQ(w->items()->Get(0)->state(), p::MessageState::completed);
  EXPECT_EQ(Bytes(w->items()->Get(0)->result()), std::string("bin\0ary", 7));
  ASSERT_NE(w->items()->Get(1)->error(), nullptr);
  EXPECT_EQ(w->items()->Get(1)->error()->code(), p::Code::NOT_FOUND);
  EXPECT_GT(waited->lsn(), 0u);  // a durable read: sent once what it shows is synced
}

TEST_F(Results, AWaitOnAnotherConnectionIsWokenByTheCompletingEffect) {
  Put("q", "a");
  const auto lease = Lease("q");
  auto async = Async();
  ASSERT_NE(async, nullptr);
  auto waiting =
      Send(async.get(), client::BuildWait(Hdr(async->NextRequestId()), "q", {"a"}, 30'000));
  // Not answered while the message runs (the server holds it, up to 30 s).
  ASSERT_EQ(waiting.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  const auto completed_at = Clock::now();
  CompleteWith("q", lease, "done!");
  const auto acked_at = Clock::now();
  const Answer a = waiting.get();
  ASSERT_TRUE(a.reply.ok()) << a.reply.error().ToString();
  const p::WaitResult* w = a.reply->result<p::WaitResult>();
  EXPECT_TRUE(w->done());
  EXPECT_EQ(w->items()->Get(0)->state(), p::MessageState::completed);
  EXPECT_EQ(Bytes(w->items()->Get(0)->result()), "done!");
  // Woken by the effect: nothing else would answer before 30 s. How soon is printed, not
  // asserted (a busy machine decides that; docs/BENCHMARKS.md measures it).
  std::printf(
      "wait woken %lld us after the complete was sent, %lld us after its ack\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::microseconds>(a.at - completed_at).count()),
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::microseconds>(a.at - acked_at).count()));
}

TEST_F(Results, AWaitWaitsForEveryIdAndEndsAtWaitMsWithWhatIsSettled) {
  Put("q", "a");
  Put("q", "b");
  const auto first = Lease("q");
  auto async = Async();
  ASSERT_NE(async, nullptr);
  auto waiting =
      Send(async.get(), client::BuildWait(Hdr(async->NextRequestId()), "q", {"a", "b"}, 400));
  CompleteWith("q", first, "one");
  // "b" is still pending: answered at wait_ms, with "a" settled and "b" not.
  const Answer a = waiting.get();
  ASSERT_TRUE(a.reply.ok());
  const p::WaitResult* w = a.reply->result<p::WaitResult>();
  EXPECT_FALSE(w->done());
  EXPECT_EQ(w->items()->Get(0)->state(), p::MessageState::completed);
  EXPECT_EQ(w->items()->Get(1)->state(), p::MessageState::pending);
}

TEST_F(Results, EnqueueWithWaitMsAnswersWithTheOutcome) {
  auto async = Async();
  ASSERT_NE(async, nullptr);
  client::EnqueueItem item;
  item.id = "job";
  auto waiting =
      Send(async.get(), client::BuildEnqueue(Hdr(async->NextRequestId()), "rpc", {item}, 30'000));
  // The message is enqueued at once (a worker can lease it) while the reply waits.
  std::pair<std::string, uint64_t> lease;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (lease.first.empty() && Clock::now() < deadline) {
    client::DequeueOptions o;
    o.wait_ms = 1000;
    auto r = client_->Dequeue("rpc", o);
    ASSERT_TRUE(r.ok());
    const auto* messages = r->result<p::DequeueResult>()->messages();
    if (messages->size() == 1)
      lease = {messages->Get(0)->id()->str(), messages->Get(0)->lease_token()};
  }
  ASSERT_EQ(lease.first, "job");
  ASSERT_EQ(waiting.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  CompleteWith("rpc", lease, "pong");
  const Answer a = waiting.get();
  ASSERT_TRUE(a.reply.ok()) << a.reply.error().ToString();
  const p::EnqueueResult* e = a.reply->result<p::EnqueueResults>()->items()->Get(0);
  EXPECT_EQ(e->id()->str(), "job");
  EXPECT_EQ(e->version(), 1u);
  EXPECT_FALSE(e->duplicate());
  ASSERT_NE(e->outcome(), nullptr);
  EXPECT_EQ(e->outcome()->state(), p::MessageState::completed);
  EXPECT_EQ(Bytes(e->outcome()->result()), "pong");
}

TEST_F(Results, EnqueueWithWaitMsAboveTheLimitIsRefusedBeforeAnythingIsEnqueued) {
  client::EnqueueItem item;
  item.id = "x";
  auto r = client_->Enqueue("q", {item}, 60'001);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kInvalidArgument);
  auto got = client_->Get("q", "x");
  EXPECT_FALSE(got.ok());
}

TEST_F(Results, AResultAboveMaxResultBytesIsRefused) {
  server_->Kill();
  server_->set_flags({"--max-result-bytes", "16"});
  ASSERT_TRUE(server_->Start()) << server_->log();
  auto c = client::Client::Connect({"127.0.0.1", server_->port()});
  ASSERT_TRUE(c.ok());
  client_ = std::move(c).value();
  Put("q", "a");
  const auto lease = Lease("q");
  auto r = client_->Complete("q", {{lease.first, lease.second, std::string(17, 'x')}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->result<p::ItemResults>()->items()->Get(0)->code(), p::Code::INVALID_ARGUMENT);
  CompleteWith("q", lease, std::string(16, 'x'));
}

TEST_F(Results, AnAcknowledgedResultIsReadableAfterKillMinus9) {
  Put("q", "a");
  CompleteWith("q", Lease("q"), "kept");
  server_->Kill();
  ASSERT_TRUE(server_->Start()) << server_->log();
  auto c = client::Client::Connect({"127.0.0.1", server_->port()});
  ASSERT_TRUE(c.ok());
  auto waited = (*c)->Wait("q", {"a"}, 0);
  ASSERT_TRUE(waited.ok());
  EXPECT_EQ(Bytes(waited->result<p::WaitResult>()->items()->Get(0)->result()), "kept");
}

TEST_F(Results, AWaitingWaitIsAnsweredAtShutdown) {
  Put("q", "a");
  auto async = Async();
  ASSERT_NE(async, nullptr);
  auto waiting =
      Send(async.get(), client::BuildWait(Hdr(async->NextRequestId()), "q", {"a"}, 60'000));
  ASSERT_EQ(waiting.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  EXPECT_EQ(server_->Terminate(), 0);
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const Answer a = waiting.get();
  ASSERT_TRUE(a.reply.ok()) << a.reply.error().ToString();
  EXPECT_FALSE(a.reply->result<p::WaitResult>()->done());
}

}  // namespace
}  // namespace sundial::e2e
