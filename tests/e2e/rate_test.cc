// Token buckets against a real sundiald (docs/semantics.md, "Rates", "Per-key rates"): the
// settings on the wire (tokens per second with up to 3 decimals, bucket sizes) and their
// refusals, a throttled key passed by while other keys are served, explain's reasons and times,
// no fresh burst after kill -9, and a long poll woken by a refill.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string>

#include "client/client.h"
#include "tests/e2e/server_test.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;

class Rates : public ServerTest {
 protected:
  void EnqueueKeyed(const std::string& queue, const std::string& id, const std::string& key) {
    client::EnqueueItem item;
    item.id = id;
    item.payload = "job";
    item.metadata = {{"tenant", key}};
    auto r = client_->Enqueue(queue, {item});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    ASSERT_EQ(r->result<p::EnqueueResults>()->items()->Get(0)->error(), nullptr);
  }
  // The ids one dequeue returns.
  std::set<std::string> DequeueIds(client::Client& c, const std::string& queue, uint32_t max,
                                   uint32_t wait_ms = 0) {
    client::DequeueOptions o;
    o.max = max;
    o.wait_ms = wait_ms;
    auto r = c.Dequeue(queue, o);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    std::set<std::string> ids;
    if (!r.ok()) return ids;
    for (const p::Message* m : *r->result<p::DequeueResult>()->messages())
      ids.insert(m->id()->str());
    return ids;
  }
  p::ExplainReason Reason(client::Client& c, const std::string& queue, const std::string& id,
                          int64_t* until) {
    auto r = c.Explain(queue, id);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    if (!r.ok()) return p::ExplainReason::dequeueable;
    *until = r->result<p::ExplainResult>()->until();
    return r->result<p::ExplainResult>()->reason();
  }
  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

TEST_F(Rates, SettingsAndKeyLimitsRoundTripChangeAndSurviveKillMinus9) {
  client::QueueSettings s;
  s.flow_key = "tenant";
  s.rate_per_s = 2.5;
  s.burst = 4;
  s.key_rate_per_s = 0.125;
  s.key_burst = 2;
  ASSERT_TRUE(client_->CreateQueue("rated", s).ok());
  ASSERT_TRUE(client_->CreateQueue("rated", s).ok()) << "the same settings: idempotent";
  client::QueueSettingsUpdate u;
  u.rate_per_s = 1000000;  // the largest
  u.key_burst = 7;
  u.fairness = p::Fairness::weighted;
  u.overdue_first_ms = 30'000;
  auto updated = client_->UpdateQueue("rated", u);
  ASSERT_TRUE(updated.ok()) << updated.error().ToString();
  client::KeyLimits acme;
  acme.concurrency = 4;
  acme.rate_per_s = 0.25;
  acme.weight = 3;
  ASSERT_TRUE(client_->SetKeyLimits("rated", "acme", acme).ok());
  client_.reset();
  server_->Kill();
  ASSERT_TRUE(server_->Start()) << server_->log();
  auto c = client::Client::Connect({"127.0.0.1", server_->port()});
  ASSERT_TRUE(c.ok());
  auto got = (*c)->GetQueue("rated");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  const p::QueueSettings* settings = got->result<p::QueueResult>()->queue()->settings();
  EXPECT_EQ(settings->rate_per_s(), std::optional<double>(1000000));
  EXPECT_EQ(settings->burst(), std::optional<uint32_t>(4));
  EXPECT_EQ(settings->key_rate_per_s(), std::optional<double>(0.125));
  EXPECT_EQ(settings->key_burst(), std::optional<uint32_t>(7));
  EXPECT_EQ(settings->fairness(), std::optional<p::Fairness>(p::Fairness::weighted));
  EXPECT_EQ(settings->overdue_first_ms(), std::optional<int64_t>(30'000));
  auto key = (*c)->GetKeyLimits("rated", "acme");
  ASSERT_TRUE(key.ok()) << key.error().ToString();
  const p::KeyLimits* o = key->result<p::KeyResult>()->key()->overrides();
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->concurrency(), std::optional<uint32_t>(4));
  EXPECT_EQ(o->rate_per_s(), std::optional<double>(0.25));
  EXPECT_EQ(o->burst(), std::nullopt) << "not overridden";
  EXPECT_EQ(o->weight(), std::optional<uint32_t>(3));
  // 0 clears a rate; a queue without any describes them as 0 and 1.
  client::QueueSettingsUpdate clear;
  clear.rate_per_s = 0;
  clear.key_rate_per_s = 0;
  ASSERT_TRUE((*c)->UpdateQueue("rated", clear).ok());
  got = (*c)->GetQueue("rated");
  ASSERT_TRUE(got.ok());
  settings = got->result<p::QueueResult>()->queue()->settings();
  EXPECT_EQ(settings->rate_per_s(), std::optional<double>(0));
  EXPECT_EQ(settings->key_rate_per_s(), std::optional<double>(0));
  ASSERT_TRUE((*c)->CreateQueue("plain", {}).ok());
  got = (*c)->GetQueue("plain");
  ASSERT_TRUE(got.ok());
  settings = got->result<p::QueueResult>()->queue()->settings();
  EXPECT_EQ(settings->rate_per_s(), std::optional<double>(0));
  EXPECT_EQ(settings->burst(), std::optional<uint32_t>(1));
}

TEST_F(Rates, BadRatesAndBurstsAreInvalidArgumentNamingTheField) {
  struct Case {
    double rate_per_s;
    const char* field;
  };
  const Case bad[] = {{0.0001, "rate_per_s"},
                      {1.0005, "rate_per_s"},
                      {-1, "rate_per_s"},
                      {1000000.001, "rate_per_s"},
                      {std::numeric_limits<double>::quiet_NaN(), "rate_per_s"},
                      {std::numeric_limits<double>::infinity(), "rate_per_s"}};
  for (const Case& c : bad) {
    client::QueueSettings s;
    s.rate_per_s = c.rate_per_s;
    auto r = client_->CreateQueue("q", s);
    ASSERT_FALSE(r.ok()) << c.rate_per_s;
    EXPECT_EQ(r.error().code, Code::kInvalidArgument) << c.rate_per_s;
    EXPECT_NE(r.error().message.find(c.field), std::string::npos) << r.error().ToString();
  }
  client::QueueSettings key_rate_alone;
  key_rate_alone.key_rate_per_s = 1;
  auto r = client_->CreateQueue("q", key_rate_alone);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("key_rate_per_s: needs a flow_key"), std::string::npos)
      << r.error().ToString();
  client::QueueSettings zero_burst;
  zero_burst.burst = 0;
  r = client_->CreateQueue("q", zero_burst);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("burst"), std::string::npos) << r.error().ToString();
  client::QueueSettings huge_key_burst;
  huge_key_burst.flow_key = "tenant";
  huge_key_burst.key_burst = 1000001;
  r = client_->CreateQueue("q", huge_key_burst);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("key_burst"), std::string::npos) << r.error().ToString();
  // Nothing was created by the refusals; an update is checked the same way.
  EXPECT_FALSE(client_->GetQueue("q").ok());
  ASSERT_TRUE(client_->CreateQueue("q", {}).ok());
  client::QueueSettingsUpdate u;
  u.rate_per_s = 0.0015;
  r = client_->UpdateQueue("q", u);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kInvalidArgument);
}

// A key out of tokens is passed by, the others are served, explain says why and until when,
// and kill -9 grants no fresh burst (the refill interval, 1000 s, outlasts the test).
TEST_F(Rates, AThrottledKeyIsPassedByExplainedAndGetsNoFreshBurstAfterKillMinus9) {
  client::QueueSettings s;
  s.flow_key = "tenant";
  s.key_rate_per_s = 0.001;
  s.key_burst = 2;
  ASSERT_TRUE(client_->CreateQueue("rated", s).ok());
  for (const char* id : {"a1", "a2", "a3", "a4"}) EnqueueKeyed("rated", id, "acme");
  EnqueueKeyed("rated", "b1", "bolt");
  const int64_t before = NowMs();
  EXPECT_EQ(DequeueIds(*client_, "rated", 10), (std::set<std::string>{"a1", "a2", "b1"}));
  int64_t until = 0;
  EXPECT_EQ(Reason(*client_, "rated", "a3", &until), p::ExplainReason::key_rate);
  // The third token of a burst of 2 at 1 per 1000 s comes 1000 s after the first grant.
  EXPECT_GE(until, before + 1'000'000);
  EXPECT_LE(until, NowMs() + 1'000'000);
  auto count = client_->Count("rated", {});
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(count->result<p::CountResult>()->counts()->blocked(), 2u);

  client_.reset();
  server_->Kill();
  ASSERT_TRUE(server_->Start()) << server_->log();
  auto c = client::Client::Connect({"127.0.0.1", server_->port()});
  ASSERT_TRUE(c.ok());
  client_ = std::move(c).value();
  EnqueueKeyed("rated", "b2", "bolt");
  // The leases a1, a2, b1 were logged: acme's bucket is rebuilt empty, bolt's has one token.
  EXPECT_EQ(DequeueIds(*client_, "rated", 10), (std::set<std::string>{"b2"}));
  EXPECT_EQ(Reason(*client_, "rated", "a3", &until), p::ExplainReason::key_rate);
  EXPECT_GE(until, before + 1'000'000);
}

// Nothing polls: the server's timer wakes the long poll when the key's token refills (one
// every 200 ms here), within the poll's wait.
TEST_F(Rates, ALongPollIsWokenWhenTheKeysTokenRefills) {
  client::QueueSettings s;
  s.flow_key = "tenant";
  s.key_rate_per_s = 5;
  ASSERT_TRUE(client_->CreateQueue("rated", s).ok());
  EnqueueKeyed("rated", "a1", "acme");
  EnqueueKeyed("rated", "a2", "acme");
  EXPECT_EQ(DequeueIds(*client_, "rated", 10), (std::set<std::string>{"a1"}));
  int64_t until = 0;
  EXPECT_EQ(Reason(*client_, "rated", "a2", &until), p::ExplainReason::key_rate);
  // A refill the poll missed would leave it empty at its 20 s end.
  EXPECT_EQ(DequeueIds(*client_, "rated", 10, /*wait_ms=*/20'000), (std::set<std::string>{"a2"}));
  EXPECT_GE(NowMs(), until);
}

// The queue-wide bucket holds every key; explain names it once a dequeue found it empty.
TEST_F(Rates, TheQueueRateHoldsEveryKeyAndExplainNamesIt) {
  client::QueueSettings s;
  s.rate_per_s = 0.001;
  s.burst = 2;
  ASSERT_TRUE(client_->CreateQueue("rated", s).ok());
  for (const char* id : {"m1", "m2", "m3"}) EnqueueKeyed("rated", id, id);
  EXPECT_EQ(DequeueIds(*client_, "rated", 10), (std::set<std::string>{"m1", "m2"}));
  int64_t until = 0;
  EXPECT_EQ(Reason(*client_, "rated", "m3", &until), p::ExplainReason::queue_rate);
  EXPECT_GT(until, NowMs() + 900'000);
}

}  // namespace
}  // namespace sundial::e2e
