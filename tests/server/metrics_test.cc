// The cluster series of /metrics (server/metrics.h, RenderClusterFigures; docs/operations.md,
// "Metrics"): what each role exports, in Prometheus' text format.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/clock.h"
#include "engine/engine.h"
#include "server/metrics.h"

namespace sundial::server {
namespace {

std::string Render(const ClusterFigures& f) {
  std::string out;
  RenderClusterFigures(f, &out);
  return out;
}

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.starts_with(line + "\n");
}

TEST(ClusterMetrics, StandaloneExportsItsRoleEpochZeroAndReadinessOnly) {
  ClusterFigures f;
  f.ready = true;
  const std::string text = Render(f);
  EXPECT_TRUE(Has(text, R"(sundial_role{role="standalone"} 1)")) << text;
  EXPECT_TRUE(Has(text, R"(sundial_role{role="primary"} 0)")) << text;
  EXPECT_TRUE(Has(text, R"(sundial_role{role="standby"} 0)")) << text;
  EXPECT_TRUE(Has(text, R"(sundial_role{role="unknown"} 0)")) << text;
  EXPECT_TRUE(Has(text, "sundial_epoch 0")) << text;
  EXPECT_TRUE(Has(text, "sundial_ready 1")) << text;
  EXPECT_EQ(text.find("sundial_cluster_info"), std::string::npos) << text;
  EXPECT_EQ(text.find("sundial_replication_"), std::string::npos) << text;
  EXPECT_EQ(text.find("sundial_standby_"), std::string::npos) << text;
}

TEST(ClusterMetrics, PrimaryExportsLagPerStandbyAndItsSynchronousStandby) {
  ClusterFigures f;
  f.role = RoleKind::kPrimary;
  f.epoch = 127;
  f.ready = true;
  f.cluster = "jobs";
  f.node = "n1";
  f.replication = "sync";
  f.etcd_reachable = true;
  f.promotions = 2;
  f.demotions = 1;
  f.standbys = {{"n2", 0, 0, true}, {"n3", 40, 1.5, false}};
  f.sync_standby = "n2";
  f.sync_standby_connected = true;
  const std::string text = Render(f);
  EXPECT_TRUE(Has(text, R"(sundial_role{role="primary"} 1)")) << text;
  EXPECT_TRUE(Has(text, R"(sundial_role{role="standalone"} 0)")) << text;
  EXPECT_TRUE(Has(text, "sundial_epoch 127")) << text;
  EXPECT_TRUE(Has(text, R"(sundial_cluster_info{cluster="jobs",node="n1",replication="sync"} 1)"))
      << text;
  EXPECT_TRUE(Has(text, "sundial_etcd_reachable 1")) << text;
  EXPECT_TRUE(Has(text, "sundial_promotions_total 2")) << text;
  EXPECT_TRUE(Has(text, "sundial_demotions_total 1")) << text;
  EXPECT_TRUE(Has(text, R"(sundial_replication_lag_records{standby="n2"} 0)")) << text;
  EXPECT_TRUE(Has(text, R"(sundial_replication_lag_records{standby="n3"} 40)")) << text;
  EXPECT_TRUE(Has(text, R"(sundial_replication_lag_seconds{standby="n3"} 1.5)")) << text;
  EXPECT_TRUE(Has(text, R"(sundial_replication_standby_connected{standby="n2"} 1)")) << text;
  EXPECT_TRUE(Has(text, R"(sundial_replication_standby_connected{standby="n3"} 0)")) << text;
  EXPECT_TRUE(Has(text, R"(sundial_replication_sync_standby{standby="n2"} 1)")) << text;
  EXPECT_TRUE(Has(text, "sundial_replication_sync_standby_connected 1")) << text;
  EXPECT_EQ(text.find("sundial_standby_"), std::string::npos) << "a standby's series: " << text;
  EXPECT_NE(text.find("# TYPE sundial_promotions_total counter"), std::string::npos) << text;
}

TEST(ClusterMetrics, PrimaryWithoutSynchronousStandbySaysSo) {
  ClusterFigures f;
  f.role = RoleKind::kPrimary;
  f.cluster = "jobs";
  const std::string text = Render(f);
  EXPECT_TRUE(Has(text, "sundial_replication_sync_standby_connected 0")) << text;
  EXPECT_EQ(text.find("sundial_replication_sync_standby{"), std::string::npos) << text;
}

TEST(ClusterMetrics, StandbyExportsItsLinkAndLagButNoStandbys) {
  ClusterFigures f;
  f.role = RoleKind::kStandby;
  f.epoch = 9;
  f.cluster = "jobs";
  f.node = "n2";
  f.replication = "async";
  f.primary_connected = true;
  f.lag_records = 12;
  const std::string text = Render(f);
  EXPECT_TRUE(Has(text, R"(sundial_role{role="standby"} 1)")) << text;
  EXPECT_TRUE(Has(text, "sundial_ready 0")) << text;
  EXPECT_TRUE(Has(text, "sundial_standby_connected 1")) << text;
  EXPECT_TRUE(Has(text, "sundial_standby_lag_records 12")) << text;
  EXPECT_EQ(text.find("sundial_replication_"), std::string::npos) << text;
}

TEST(ClusterMetrics, LabelValuesAreEscaped) {
  ClusterFigures f;
  f.role = RoleKind::kPrimary;
  f.cluster = "a\"b";
  f.node = "back\\slash";
  f.standbys = {{"new\nline", 1, 0, true}};
  const std::string text = Render(f);
  EXPECT_TRUE(
      Has(text, R"(sundial_cluster_info{cluster="a\"b",node="back\\slash",replication=""} 1)"))
      << text;
  EXPECT_TRUE(Has(text, R"(sundial_replication_lag_records{standby="new\nline"} 1)")) << text;
}

}  // namespace
}  // namespace sundial::server

namespace sundial::server {
namespace {

// The flow-control series (docs/operations.md, "Metrics"): blocked by reason, summing to
// sundial_messages_blocked, and the throttled dequeues per queue.
TEST(QueueMetrics, BlockedByReasonAndThrottledDequeues) {
  ManualClock clock;
  Engine engine(Engine::Options{}, &clock, nullptr);
  QueueSettings s;
  s.flow_key = "tenant";
  s.key_concurrency = 1;
  s.key_rate_milli = 1'000;  // one token per second, burst 1
  s.key_burst = 1;
  ASSERT_TRUE(engine.CreateQueue("q", s).ok());
  std::vector<EnqueueItem> items;
  for (const char* tenant : {"a", "a", "a", "b", "b"}) {
    EnqueueItem item;
    item.metadata = {{"tenant", tenant}};
    items.push_back(std::move(item));
  }
  for (const auto& r : engine.Enqueue("q", std::move(items))) ASSERT_TRUE(r.ok());
  DequeueRequest request;
  request.max = 10;
  std::vector<MessageRecord> got = engine.Dequeue("q", request).value();
  ASSERT_EQ(got.size(), 2u);  // one of a, one of b: both at N = 1 and out of tokens
  // b's lease ends: b is below N, out of tokens.
  const MessageRecord& b = got[0].metadata[0].value == "b" ? got[0] : got[1];
  const std::vector<Status> done = engine.Complete("q", {{b.id, b.lease_token}});
  ASSERT_TRUE(done.at(0).ok());
  EXPECT_TRUE(engine.Dequeue("q", request).value().empty());  // held back by both reasons

  Metrics metrics;
  const std::string text = metrics.Render(engine, nullptr, ClusterFigures{});
  EXPECT_TRUE(Has(text, "sundial_messages_blocked{queue=\"q\"} 3")) << text;
  EXPECT_TRUE(Has(text, "sundial_messages_blocked_by_reason{queue=\"q\",reason=\"concurrency\"} 2"))
      << text;
  EXPECT_TRUE(Has(text, "sundial_messages_blocked_by_reason{queue=\"q\",reason=\"rate\"} 1"))
      << text;
  EXPECT_TRUE(Has(text, "sundial_throttled_dequeues_total{queue=\"q\"} 1")) << text;
  EXPECT_TRUE(Has(text, "# TYPE sundial_throttled_dequeues_total counter")) << text;
  EXPECT_TRUE(Has(text, "# TYPE sundial_messages_blocked_by_reason gauge")) << text;
}

// The checkpointer's series (docs/operations.md, "Metrics"): present once a source is set.
TEST(CheckpointMetrics, CountsAndTheLastCheckpointsFigures) {
  ManualClock clock;
  Engine engine(Engine::Options{}, &clock, nullptr);
  Metrics metrics;
  EXPECT_FALSE(Has(metrics.Render(engine, nullptr, ClusterFigures{}), "sundial_checkpoint"));
  wal::CheckpointStats stats;
  stats.checkpoints = 7;
  stats.failures = 2;
  stats.fork_fallbacks = 1;
  stats.last.duration_ms = 1'250;
  stats.last.pause_us = 3'500;
  stats.last.snapshot_bytes = 123'456;
  metrics.SetCheckpointStats([&stats] { return stats; });
  const std::string text = metrics.Render(engine, nullptr, ClusterFigures{});
  EXPECT_TRUE(Has(text, "sundial_checkpoints_total{result=\"ok\"} 7")) << text;
  EXPECT_TRUE(Has(text, "sundial_checkpoints_total{result=\"failed\"} 2")) << text;
  EXPECT_TRUE(Has(text, "sundial_checkpoint_fork_fallbacks_total 1")) << text;
  EXPECT_TRUE(Has(text, "sundial_checkpoint_last_duration_seconds 1.25")) << text;
  EXPECT_TRUE(Has(text, "sundial_checkpoint_last_pause_seconds 0.0035")) << text;
  EXPECT_TRUE(Has(text, "sundial_checkpoint_last_snapshot_bytes 123456")) << text;
  EXPECT_TRUE(Has(text, "# TYPE sundial_checkpoints_total counter")) << text;
}

}  // namespace
}  // namespace sundial::server
