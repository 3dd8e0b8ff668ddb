// AsyncClient against the fake server: many requests in flight from several threads, answered
// in reverse order, each callback run exactly once on the I/O thread with its own answer; a
// lost connection and Close fail what is in flight; a request_id in flight twice is refused.
// Also built as client_concurrency_tests (label "concurrency"), which the TSan build runs.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/client/fake_server.h"

namespace sundial::client {
namespace {

namespace p = protocol;
using testing::FakeConnection;
using testing::FakeServer;

// Collects callback results; Wait blocks until `n` have arrived (condition variable, no sleep).
class Collected {
 public:
  AsyncClient::Callback Slot(uint64_t request_id) {
    return [this, request_id](Result<Reply> r) {
      std::lock_guard lock(mu_);
      threads_.insert(std::this_thread::get_id());
      results_.emplace(request_id, std::move(r));
      ++calls_[request_id];
      cv_.notify_all();
    };
  }
  bool Wait(size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return results_.size() >= n; });
  }
  std::multimap<uint64_t, Result<Reply>> results() {
    std::lock_guard lock(mu_);
    return results_;
  }
  std::map<uint64_t, int> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }
  std::set<std::thread::id> threads() {
    std::lock_guard lock(mu_);
    return threads_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<uint64_t, Result<Reply>> results_;
  std::map<uint64_t, int> calls_;
  std::set<std::thread::id> threads_;
};

TEST(AsyncClient, ManyInFlightFromSeveralThreadsAnsweredInReverseOrder) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  constexpr int kTotal = kThreads * kPerThread;
  FakeServer server([](FakeConnection& conn) {
    std::vector<uint64_t> ids;
    for (int i = 0; i < kTotal; ++i) {
      const p::Request* r = conn.ReadRequest();
      ASSERT_NE(r, nullptr) << i;
      ids.push_back(r->request_id());
    }
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
      // Echo the id in the answer's text so the test can check each callback got its own.
      conn.SendMessage(testing::ErrorResponse(*it, p::Code::NOT_FOUND, std::to_string(*it)));
      if (*it % 7 == 0) conn.SendMessage(testing::MessageEvent("q", "m"));
    }
    conn.WaitForClose();
  });
  auto connected = AsyncClient::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(connected.ok()) << connected.error().ToString();
  AsyncClient& client = **connected;

  Collected collected;
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t id = client.NextRequestId();
        client.Send(BuildGetQueue({id}, std::to_string(id)), collected.Slot(id));
      }
    });
  }
  for (auto& s : senders) s.join();
  ASSERT_TRUE(collected.Wait(kTotal));
  EXPECT_EQ(client.in_flight(), 0u);
  for (const auto& [id, r] : collected.results()) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Code::kNotFound);
    EXPECT_EQ(r.error().message, std::to_string(id));
  }
  for (const auto& [id, n] : collected.calls()) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(collected.threads().size(), 1u) << "callbacks run on the I/O thread only";
  EXPECT_EQ(collected.threads().count(std::this_thread::get_id()), 0u);
  client.Close();
}

TEST(AsyncClient, LostConnectionFailsEveryCallInFlight) {
  FakeServer server([](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    conn.SendMessage(testing::HealthResponse(r->request_id()));
    ASSERT_NE(conn.ReadRequest(), nullptr);
    ASSERT_NE(conn.ReadRequest(), nullptr);
    conn.Close();  // two calls left unanswered
  });
  auto connected = AsyncClient::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(connected.ok()) << connected.error().ToString();
  AsyncClient& client = **connected;
  Collected collected;
  for (int i = 0; i < 3; ++i) {
    const uint64_t id = client.NextRequestId();
    client.Send(BuildHealth({id}), collected.Slot(id));
  }
  ASSERT_TRUE(collected.Wait(3));
  int ok = 0, unavailable = 0;
  for (const auto& [id, r] : collected.results()) {
    if (r.ok()) {
      ++ok;
    } else if (r.error().unreachable()) {
      ++unavailable;
    }
  }
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(unavailable, 2);
  // And a call after the loss fails at once.
  const uint64_t id = client.NextRequestId();
  client.Send(BuildHealth({id}), collected.Slot(id));
  ASSERT_TRUE(collected.Wait(4));
  EXPECT_TRUE(collected.results().find(id)->second.error().unreachable());
}

TEST(AsyncClient, CloseFailsWhatIsInFlightAndLaterSendsAnswerAtOnce) {
  FakeServer server([](FakeConnection& conn) {
    ASSERT_NE(conn.ReadRequest(), nullptr);
    conn.WaitForClose();  // never answers
  });
  auto connected = AsyncClient::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(connected.ok()) << connected.error().ToString();
  AsyncClient& client = **connected;
  Collected collected;
  client.Send(BuildHealth({1}), collected.Slot(1));
  client.Close();
  ASSERT_TRUE(collected.Wait(1));
  EXPECT_TRUE(collected.results().find(1)->second.error().unreachable());
  client.Send(BuildHealth({2}), collected.Slot(2));  // runs the callback on this thread
  ASSERT_TRUE(collected.Wait(2));
  EXPECT_EQ(collected.results().find(2)->second.error().code, Code::kUnavailable);
  client.Close();  // idempotent
}

TEST(AsyncClient, RequestIdInFlightTwiceAndBadBytesAreRefused) {
  // The server answers the first request only after both sends are queued on the I/O thread,
  // so the second finds the first still in flight. (Answered at once, the reply could arrive
  // before the second send was looked at: then nothing is in flight twice and the fake server,
  // which reads one request, never answers the second.)
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  FakeServer server([released](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    const uint64_t id = r->request_id();
    ASSERT_EQ(released.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    conn.SendMessage(testing::HealthResponse(id));
    conn.WaitForClose();
  });
  auto connected = AsyncClient::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(connected.ok()) << connected.error().ToString();
  AsyncClient& client = **connected;
  Collected collected;
  client.Send(BuildHealth({5}), collected.Slot(5));
  client.Send(BuildHealth({5}), collected.Slot(5));
  client.Send("not a request", collected.Slot(0));
  release.set_value();
  ASSERT_TRUE(collected.Wait(3));
  auto results = collected.results();
  auto [begin, end] = results.equal_range(5);
  int ok = 0, refused = 0;
  for (auto it = begin; it != end; ++it) {
    if (it->second.ok()) ++ok;
    if (!it->second.ok() && it->second.error().code == Code::kInvalidArgument) ++refused;
  }
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(results.find(0)->second.error().origin, Error::Origin::kLocal);
}

}  // namespace
}  // namespace sundial::client
