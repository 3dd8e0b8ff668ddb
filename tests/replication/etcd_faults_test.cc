// EtcdClient when etcd misbehaves: several endpoints of which the first is dead or hung, a
// paused etcd (SIGSTOP) answered by the deadline and usable again after SIGCONT, a restarted
// etcd behind a kept-alive connection. Each case owns its etcd.
#include <gtest/gtest.h>

#include "replication/etcd_client.h"
#include "tests/replication/etcd_process.h"
#include "tests/replication/fake_http_server.h"

namespace sundial::replication {
namespace {

using testing::Clock;
using testing::EtcdProcess;
using testing::Eventually;
using testing::Millis;
using testing::MsSince;
using testing::SilentListener;

EtcdEndpoint Loopback(uint16_t port) { return {"127.0.0.1", port}; }

TEST(EtcdFaults, RefusedFirstEndpointFallsThroughToTheNextWhichStaysCurrent) {
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.log();
  const uint16_t dead = testing::FreeLoopbackPorts(1)[0];
  EtcdClientOptions options;
  options.endpoints = {Loopback(dead), etcd.endpoint()};
  options.call_timeout = Millis(10'000);
  EtcdClient client(options);
  auto put = client.Put("/k", "v");
  ASSERT_TRUE(put.ok()) << put.error().ToString();
  EXPECT_EQ(client.current_endpoint(), etcd.endpoint());
  EXPECT_EQ(client.PreferredEndpoints(),
            (std::vector<EtcdEndpoint>{etcd.endpoint(), Loopback(dead)}));
  auto got = client.Get("/k");
  ASSERT_TRUE(got.ok() && got->first());
  EXPECT_EQ(got->first()->value, "v");
}

TEST(EtcdFaults, HungFirstEndpointTimesOutItsShareThenTheNextAnswers) {
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.log();
  SilentListener hung;  // accepts connections (the kernel does) and never answers
  EtcdClientOptions options;
  options.endpoints = {Loopback(hung.port()), etcd.endpoint()};
  options.call_timeout = Millis(20'000);
  options.attempt_timeout = Millis(300);
  EtcdClient client(options);
  auto put = client.Put("/k", "v");
  ASSERT_TRUE(put.ok()) << put.error().ToString();
  EXPECT_EQ(client.current_endpoint(), etcd.endpoint());
}

TEST(EtcdFaults, EveryEndpointDownIsUnavailableNamingEachOne) {
  const auto ports = testing::FreeLoopbackPorts(2);
  EtcdClientOptions options;
  options.endpoints = {Loopback(ports[0]), Loopback(ports[1])};
  EtcdClient client(options);
  auto got = client.Get("/k");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, Code::kUnavailable);
  EXPECT_FALSE(got.error().in_doubt) << "nothing was sent";
  const std::string& m = got.error().message;
  EXPECT_NE(m.find("all 2 endpoints failed"), std::string::npos) << m;
  EXPECT_NE(m.find("127.0.0.1:" + std::to_string(ports[0]) + "/v3/kv/range: connect"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("127.0.0.1:" + std::to_string(ports[1])), std::string::npos) << m;
}

TEST(EtcdFaults, NoEndpointsIsInvalidArgument) {
  EtcdClient client(EtcdClientOptions{});
  auto got = client.Get("/k");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, Code::kInvalidArgument);
}

// The pause nemesis: every kind of call against a SIGSTOPped etcd comes back UNAVAILABLE by its
// deadline, and the client works again once etcd runs.
TEST(EtcdFaults, CallsToAPausedEtcdFailByTheirDeadlineAndWorkAfterItResumes) {
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.log();
  EtcdClientOptions options;
  options.endpoints = {etcd.endpoint()};
  options.call_timeout = Millis(10'000);
  EtcdClient client(options);
  auto lease = client.GrantLease(30);
  ASSERT_TRUE(lease.ok()) << lease.error().ToString();
  ASSERT_TRUE(client.Put("/k", "v").ok());  // the connection is open and kept alive

  etcd.Pause();
  constexpr Millis kDeadline{300};
  // The bound is generous for a loaded machine; a hang would blow through it by far.
  constexpr int64_t kBoundMs = 3'000;
  {
    const auto start = Clock::now();
    auto got = client.Get("/k", Deadline::In(kDeadline));
    const int64_t took = MsSince(start);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.error().code, Code::kUnavailable);
    EXPECT_TRUE(got.error().in_doubt);
    EXPECT_NE(got.error().message.find(etcd.client_url() + "/v3/kv/range: no reply within"),
              std::string::npos)
        << got.error().message;
    EXPECT_GE(took, kDeadline.count() - 5);
    EXPECT_LT(took, kBoundMs);
  }
  {
    // A fresh connection to the paused process: the kernel accepts it, nobody answers.
    const auto start = Clock::now();
    auto renewal = client.KeepAliveOnce(lease->id, Deadline::In(kDeadline));
    ASSERT_FALSE(renewal.ok());
    EXPECT_EQ(renewal.error().code, Code::kUnavailable);
    EXPECT_LT(MsSince(start), kBoundMs);
  }
  {
    const auto start = Clock::now();
    TxnRequest txn;
    txn.compare = {Compare::KeyMissing("/leader")};
    txn.success = {TxnOp::Put("/leader", "me", lease->id)};
    auto campaign = client.Txn(txn, Deadline::In(kDeadline));
    ASSERT_FALSE(campaign.ok());
    EXPECT_EQ(campaign.error().code, Code::kUnavailable);
    EXPECT_TRUE(campaign.error().in_doubt) << "sent, never answered: maybe applied";
    EXPECT_LT(MsSince(start), kBoundMs);
  }
  {
    // The client's default deadline applies too.
    EtcdClientOptions short_options = options;
    short_options.call_timeout = kDeadline;
    EtcdClient impatient(short_options);
    const auto start = Clock::now();
    auto got = impatient.Get("/k");
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.error().code, Code::kUnavailable);
    EXPECT_LT(MsSince(start), kBoundMs);
  }

  etcd.Resume();
  EXPECT_TRUE(Eventually([&] {
    auto got = client.Get("/k", Deadline::In(Millis(1'000)));
    return got.ok() && got->first() && got->first()->value == "v";
  }));
  auto renewal = client.KeepAliveOnce(lease->id);
  EXPECT_TRUE(renewal.ok()) << renewal.error().ToString();
}

// etcd restarts while the client holds a kept-alive connection to it: the first call after
// finds the old connection closed before any reply and goes again on a fresh one, instead of
// failing.
TEST(EtcdFaults, ARestartedEtcdIsReachedAgainOnTheFirstCall) {
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.log();
  EtcdClientOptions options;
  options.endpoints = {etcd.endpoint()};
  options.call_timeout = Millis(10'000);
  EtcdClient client(options);
  ASSERT_TRUE(client.Put("/k", "v").ok());
  etcd.Stop();
  ASSERT_TRUE(etcd.Restart()) << etcd.log();
  auto got = client.Get("/k");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  ASSERT_NE(got->first(), nullptr);
  EXPECT_EQ(got->first()->value, "v");
}

}  // namespace
}  // namespace sundial::replication
