// The `sundial` CLI with a cluster (docs/cli.md, "Clusters") against a real three-node cluster
// (tests/e2e/cluster_fixture.h): `cluster status` prints every member, `cluster switchover`
// moves the primary while a producer keeps enqueueing (no acknowledged write lost), and a
// command given every address keeps working after a kill -9 of the primary.
#include <gtest/gtest.h>

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <string>
#include <vector>

#include "tests/client/cli_runner.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/cluster_stream.h"

namespace sundial::e2e {
namespace {

namespace json = boost::json;
using client::testing::CliRun;
using client::testing::RunProgram;

CliRun Cli(const std::vector<std::string>& args) { return RunProgram(SUNDIAL_CLI, args); }

std::string Str(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

// `node` as `cluster status` on `addr` lists it (empty when it is not listed).
json::object Member(const std::string& addr, const std::string& node) {
  const CliRun run = Cli({"--addr", addr, "cluster", "status"});
  const auto views = run.OutObjects();
  if (run.exit_code != 0 || views.size() != 1) return {};
  for (const json::value& v : views[0].at("members").as_array()) {
    if (Str(v.as_object(), "node") == node) return v.as_object();
  }
  return {};
}

TEST_F(ClusterTest, ClusterStatusPrintsEveryMemberWithRolesAndTheSyncStandby) {
  const CliRun run = Cli({"--addr", cluster_.addr_list(), "cluster", "status"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto lines = run.OutObjects();
  ASSERT_EQ(lines.size(), 1u) << run.out;
  const json::object& view = lines[0];
  EXPECT_EQ(Str(view, "cluster"), "test");
  EXPECT_EQ(Str(view, "primary"), cluster_.node(primary_).name);
  EXPECT_EQ(Str(view, "node"), cluster_.node(primary_).name) << "the primary answers";
  EXPECT_EQ(Str(view, "primary_addr"), cluster_.node(primary_).addr());
  EXPECT_EQ(Str(view, "replication"), "sync");
  EXPECT_GT(view.at("epoch").to_number<uint64_t>(), 0u);
  const std::string sync = Str(view, "sync_standby");
  EXPECT_FALSE(sync.empty());
  const json::array& members = view.at("members").as_array();
  ASSERT_EQ(members.size(), cluster_.size()) << run.out;
  int primaries = 0, standbys = 0;
  for (const json::value& v : members) {
    const json::object& m = v.as_object();
    const std::string role = Str(m, "role");
    primaries += role == "primary";
    standbys += role == "standby";
    const int index = cluster_.IndexOf(Str(m, "node"));
    ASSERT_GE(index, 0) << Str(m, "node");
    EXPECT_EQ(Str(m, "addr"), cluster_.node(index).addr());
    EXPECT_EQ(m.at("sync").as_bool(), Str(m, "node") == sync);
    for (const char* field : {"epoch", "end_lsn", "flushed_lsn", "lag_records", "lag_ms"}) {
      EXPECT_TRUE(m.contains(field)) << field;
    }
  }
  EXPECT_EQ(primaries, 1);
  EXPECT_EQ(standbys, 2);

  // For people: a table with a row per node.
  const CliRun table = Cli({"--addr", cluster_.addr_list(), "cluster", "status", "--table"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("NODE"), std::string::npos) << table.out;
  for (size_t i = 0; i < cluster_.size(); ++i) {
    EXPECT_NE(table.out.find(cluster_.node(i).name + " "), std::string::npos) << table.out;
  }
  // Any node answers on its own, a standby too.
  const int standby = (primary_ + 1) % static_cast<int>(cluster_.size());
  const CliRun one = Cli({"--addr", cluster_.node(standby).addr(), "cluster", "status"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(Str(one.OutObjects().at(0), "node"), cluster_.node(standby).name);
}

// A standby that dies does not vanish from the status: once its key expired, the primary lists
// it as `unknown` with what it acknowledged and how long ago.
TEST_F(ClusterTest, ADeadStandbyStaysListedAsUnknownWithItsLag) {
  const std::string sync =
      Str(Cli({"--addr", cluster_.node(primary_).addr(), "cluster", "status"}).OutObjects().at(0),
          "sync_standby");
  int victim = -1;
  for (size_t i = 0; i < cluster_.size(); ++i) {
    if (static_cast<int>(i) != primary_ && cluster_.node(i).name != sync)
      victim = static_cast<int>(i);
  }
  ASSERT_GE(victim, 0);
  const std::string name = cluster_.node(victim).name;
  cluster_.Kill(victim);
  const CliRun enqueued = Cli({"--addr", cluster_.addr_list(), "enqueue", "q", "--payload", "x"});
  ASSERT_EQ(enqueued.exit_code, 0) << enqueued.err;  // the dead node falls behind by a record

  json::object seen;
  EXPECT_TRUE(Eventually(
      [&] {
        seen = Member(cluster_.node(primary_).addr(), name);
        return Str(seen, "role") == "unknown";
      },
      Millis(20'000)));
  ASSERT_EQ(Str(seen, "role"), "unknown") << json::serialize(seen);
  EXPECT_GT(seen.at("flushed_lsn").to_number<uint64_t>(), 0u);
  EXPECT_GT(seen.at("lag_records").to_number<uint64_t>(), 0u);
  EXPECT_GT(seen.at("lag_ms").to_number<int64_t>(), 0);
}

TEST_F(ClusterTest, SwitchoverThroughTheCliMovesThePrimaryAndLosesNoAcknowledgedWrite) {
  auto c = Follower();
  ASSERT_NE(c, nullptr);
  EnqueueStream stream(std::move(c));
  stream.Start();
  ASSERT_TRUE(stream.WaitForAcks(50)) << stream.Report();

  const CliRun run = Cli({"--addr", cluster_.addr_list(), "cluster", "switchover"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  auto lines = run.OutObjects();
  ASSERT_EQ(lines.size(), 1u) << run.out;
  EXPECT_EQ(lines[0].at("switchover").as_bool(), true);
  EXPECT_EQ(Str(lines[0], "from"), cluster_.node(primary_).name);
  const std::string to = Str(lines[0], "to");
  EXPECT_NE(to, cluster_.node(primary_).name);
  ASSERT_GE(cluster_.IndexOf(to), 0) << run.out;

  const size_t at_switch = stream.acked();
  ASSERT_TRUE(stream.WaitForAcks(at_switch + 50, Millis(30'000))) << stream.Report();
  stream.Stop();
  EXPECT_EQ(stream.failures(), 0u) << stream.Report();
  const int now = cluster_.WaitForPrimary(Millis(30'000), /*with_sync_standby=*/false);
  EXPECT_EQ(now, cluster_.IndexOf(to));
  auto check = Follower();
  ASSERT_NE(check, nullptr);
  stream.ExpectAllPresent(*check);
}

TEST_F(ClusterTest, SwitchoverToANamedStandbyOnlyToTheSyncStandby) {
  auto c = Follower();
  ASSERT_NE(c, nullptr);
  auto reply = c->Cluster();
  ASSERT_TRUE(reply.ok()) << reply.error().ToString();
  const std::string sync = reply->result<protocol::ClusterResult>()->sync_standby()->str();
  std::string other;
  for (size_t i = 0; i < cluster_.size(); ++i) {
    if (static_cast<int>(i) != primary_ && cluster_.node(i).name != sync) {
      other = cluster_.node(i).name;
    }
  }
  const CliRun refused =
      Cli({"--addr", cluster_.addr_list(), "cluster", "switchover", "--to", other});
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  EXPECT_EQ(Str(refused.ErrObject(), "code"), "FAILED_PRECONDITION") << refused.err;

  const CliRun run = Cli({"--addr", cluster_.addr_list(), "cluster", "switchover", "--to", sync});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(Str(run.OutObjects().at(0), "to"), sync);
}

TEST_F(ClusterTest, TheCliGivenEveryAddressKeepsWorkingAfterThePrimaryIsKilled) {
  ASSERT_EQ(Cli({"--addr", cluster_.addr_list(), "enqueue", "q", "--id", "before"}).exit_code, 0);
  cluster_.Kill(primary_);
  const CliRun run = Cli({"--addr", cluster_.addr_list(), "enqueue", "q", "--id", "after"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* id : {"before", "after"}) {
    const CliRun got = Cli({"--addr", cluster_.addr_list(), "get", "q", id});
    ASSERT_EQ(got.exit_code, 0) << id << ": " << got.err;
    EXPECT_EQ(Str(got.OutObjects().at(0), "id"), id);
  }
  // One standby's address alone: the single-node CLI refuses a write with NOT_PRIMARY (exit 1)
  // naming the primary.
  const int now = cluster_.WaitForPrimary(Millis(30'000), /*with_sync_standby=*/false);
  ASSERT_GE(now, 0);
  for (size_t i = 0; i < cluster_.size(); ++i) {
    if (static_cast<int>(i) == now || !cluster_.node(i).process->running()) continue;
    // The standby names the new primary once its coordinator has seen it lead.
    CliRun refused;
    EXPECT_TRUE(Eventually(
        [&] {
          refused = Cli({"--addr", cluster_.node(i).addr(), "enqueue", "q"});
          return refused.err.find(cluster_.node(now).addr()) != std::string::npos;
        },
        Millis(10'000)))
        << refused.err;
    EXPECT_EQ(refused.exit_code, 1) << refused.err;
    const json::object error = refused.ErrObject();
    EXPECT_EQ(Str(error, "code"), "NOT_PRIMARY");
    EXPECT_EQ(Str(error, "primary"), cluster_.node(now).addr());
  }
  // The dead primary stays in the new primary's status, as `unknown`.
  std::string role;
  EXPECT_TRUE(Eventually(
      [&] {
        role = Str(Member(cluster_.node(now).addr(), cluster_.node(primary_).name), "role");
        return role == "unknown";
      },
      Millis(20'000)))
      << role;
}

TEST_F(ClusterTest, TheCliWatchGivenEveryAddressSubscribesAgainOnTheNewPrimary) {
  client::testing::BackgroundProgram watch(SUNDIAL_CLI,
                                           {"--addr", cluster_.addr_list(), "watch", "w"});
  ASSERT_TRUE(watch.started());
  auto producer = Follower();
  ASSERT_NE(producer, nullptr);
  // Enqueues until one shows in the watch: then its subscription stands.
  auto seen_after = [&](const std::string& prefix) {
    int k = 0;
    return Eventually(
        [&] {
          const std::string id = prefix + std::to_string(k++);
          client::EnqueueItem item;
          item.id = id;
          if (!producer->Enqueue("w", {item}).ok()) return false;
          // Each enqueue gives the event time to arrive before the next check.
          return Eventually([&] { return watch.out().find("\"" + prefix) != std::string::npos; },
                            Millis(300));
        },
        Millis(30'000));
  };
  ASSERT_TRUE(seen_after("before-")) << watch.out() << watch.err();
  cluster_.Kill(primary_);
  ASSERT_TRUE(seen_after("after-")) << "no event after the failover:\n"
                                    << watch.out() << watch.err();
}

}  // namespace
}  // namespace sundial::e2e
