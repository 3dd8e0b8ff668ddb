// --max-memory on a real sundiald: enqueue beyond the budget is RESOURCE_EXHAUSTED with the
// budget in the message, while dequeue, complete and reads keep working; /metrics and stats
// show the usage against the budget (docs/operations.md, "Memory").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/client.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_process.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;
using client::Client;

constexpr uint64_t kBudget = 64 << 10;  // 64 KiB: a few hundred small messages

TEST(MemoryBudget, EnqueueIsRefusedAtTheBudgetWhileWorkersGoOn) {
  TempDir dir;
  ServerProcess server(dir.path() + "/data", {"--max-memory", "64K"});
  ASSERT_TRUE(server.Start()) << server.log();
  auto connected = Client::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(connected.ok()) << connected.error().ToString();
  auto& client = *connected;

  client::EnqueueItem item;
  item.payload = std::string(200, 'x');
  int accepted = 0;
  std::string refusal;
  for (int i = 0; i < 2000 && refusal.empty(); ++i) {
    item.id = "m" + std::to_string(i);
    auto r = client->Enqueue("q", {item});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    const auto* out = r->result<p::EnqueueResults>()->items()->Get(0);
    if (out->error() == nullptr) {
      ++accepted;
      continue;
    }
    ASSERT_EQ(out->error()->code(), p::Code::RESOURCE_EXHAUSTED);
    refusal = out->error()->message()->str();
  }
  ASSERT_FALSE(refusal.empty()) << "the budget never refused an enqueue";
  EXPECT_GT(accepted, 10);
  EXPECT_NE(refusal.find(std::to_string(kBudget) + " bytes"), std::string::npos) << refusal;

  // Usage against the budget, in /metrics and in stats.
  const std::string metrics = HttpGet(server.http_port(), "/metrics").body;
  EXPECT_EQ(MetricValue(metrics, "sundial_memory_budget_bytes"), static_cast<double>(kBudget));
  const auto used = MetricValue(metrics, "sundial_memory_bytes");
  ASSERT_TRUE(used.has_value());
  EXPECT_GT(*used, kBudget * 0.9);
  EXPECT_LE(*used, static_cast<double>(kBudget));
  EXPECT_GT(MetricValue(metrics, "sundial_memory_allocated_bytes").value_or(0), 0);
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->result<p::StatsResult>()->memory_budget_bytes(), kBudget);

  // Workers go on: dequeue and complete work, reads work.
  client::DequeueOptions take;
  take.max = 5;
  auto leased = client->Dequeue("q", take);
  ASSERT_TRUE(leased.ok()) << leased.error().ToString();
  const auto* messages = leased->result<p::DequeueResult>()->messages();
  ASSERT_EQ(messages->size(), 5u);
  std::vector<client::CompleteItem> done;
  for (const auto* m : *messages) done.push_back({m->id()->str(), m->lease_token()});
  auto completed = client->Complete("q", done);
  ASSERT_TRUE(completed.ok());
  for (const auto* s : *completed->result<p::ItemResults>()->items()) {
    EXPECT_EQ(s->code(), p::Code::OK);
  }
  EXPECT_TRUE(client->Get("q", "m0").ok());
  EXPECT_TRUE(client->Count("q").ok());
}

}  // namespace
}  // namespace sundial::e2e
