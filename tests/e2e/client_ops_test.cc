// Every operation of docs/protocol.md through the client library against a real sundiald, checking
// the rules of docs/semantics.md that a client can see: priority order, leases and their tokens,
// attempts, retries and dead letters, exclusivity, per-item batch answers, typed errors.
#include <gtest/gtest.h>

#include <set>

#include "client/client.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_test.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;
using client::Client;

class ClientOps : public ServerTest {
 protected:
  // Enqueues one message; its id.
  std::string Put(const std::string& queue, const std::string& id, int64_t priority = 0,
                  client::Pairs metadata = {}) {
    client::EnqueueItem item;
    item.id = id;
    item.priority = priority;
    item.payload = "payload of " + id;
    item.metadata = std::move(metadata);
    auto r = client_->Enqueue(queue, {item});
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    if (!r.ok()) return "";
    const auto* items = r->result<p::EnqueueResults>()->items();
    EXPECT_EQ(items->size(), 1u);
    EXPECT_EQ(items->Get(0)->error(), nullptr);
    return items->Get(0)->id()->str();
  }

  struct Leased {
    std::string id;
    uint64_t token = 0;
    uint32_t attempts = 0;
  };
  std::vector<Leased> Take(const std::string& queue, uint32_t max = 1, client::Pairs filter = {}) {
    client::DequeueOptions o;
    o.max = max;
    o.filter = std::move(filter);
    auto r = client_->Dequeue(queue, o);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    std::vector<Leased> out;
    if (!r.ok()) return out;
    for (const p::Message* m : *r->result<p::DequeueResult>()->messages()) {
      EXPECT_EQ(m->state(), p::MessageState::running);
      EXPECT_GT(m->lease_token(), 0u);
      EXPECT_GT(m->lease_expires_at(), 0);
      out.push_back({m->id()->str(), m->lease_token(), m->attempts()});
    }
    return out;
  }
};

// Outside a cluster a node answers Cluster with itself alone (clients given one address need
// nothing more), refuses Switchover, and its replies carry epoch 0.
TEST_F(ClientOps, AStandaloneNodeIsItsOwnPrimary) {
  auto cluster = client_->Cluster();
  ASSERT_TRUE(cluster.ok()) << cluster.error().ToString();
  const auto* c = cluster->result<p::ClusterResult>();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->cluster()->str(), "");
  EXPECT_EQ(c->epoch(), 0u);
  ASSERT_EQ(c->members()->size(), 1u);
  const p::ClusterMember* self = c->members()->Get(0);
  EXPECT_EQ(self->role(), p::NodeRole::standalone);
  EXPECT_EQ(self->node()->str(), c->node()->str());
  EXPECT_EQ(self->addr()->str(), "127.0.0.1:" + std::to_string(server_->port()));
  EXPECT_EQ(cluster->response().epoch(), 0u);

  Put("q", "m1");
  auto after = client_->Cluster();
  ASSERT_TRUE(after.ok());
  EXPECT_GE(after->result<p::ClusterResult>()->members()->Get(0)->end_lsn(), 2u)
      << "the queue's creation and the enqueue are in its log";

  auto switchover = client_->Switchover("other");
  ASSERT_FALSE(switchover.ok());
  EXPECT_EQ(switchover.error().code, Code::kFailedPrecondition);
  EXPECT_NE(switchover.error().message.find("not in a cluster"), std::string::npos);
}

TEST_F(ClientOps, QueueLifecycle) {
  client::QueueSettings s;
  s.lease_ms = 5000;
  s.max_attempts = 3;
  auto created = client_->CreateQueue("jobs", s);
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  EXPECT_EQ(created->result<p::QueueResult>()->queue()->settings()->lease_ms(), 5000);
  EXPECT_TRUE(client_->CreateQueue("jobs", s).ok()) << "identical settings: succeeds";
  s.lease_ms = 6000;
  auto different = client_->CreateQueue("jobs", s);
  ASSERT_FALSE(different.ok());
  EXPECT_EQ(different.error().code, Code::kAlreadyExists);

  client::QueueSettingsUpdate u;
  u.max_attempts = 7;
  auto updated = client_->UpdateQueue("jobs", u);
  ASSERT_TRUE(updated.ok()) << updated.error().ToString();
  EXPECT_EQ(updated->result<p::QueueResult>()->queue()->settings()->max_attempts(), 7u);

  Put("jobs", "a");
  auto got = client_->GetQueue("jobs");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->result<p::QueueResult>()->queue()->counts()->pending(), 1u);
  auto list = client_->ListQueues();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->result<p::QueueList>()->queues()->size(), 1u);

  auto purged = client_->PurgeQueue("jobs", {p::MessageState::pending});
  ASSERT_TRUE(purged.ok()) << purged.error().ToString();
  EXPECT_EQ(purged->result<p::Counted>()->count(), 1u);
  ASSERT_TRUE(client_->DeleteQueue("jobs").ok());
  auto gone = client_->GetQueue("jobs");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, Code::kNotFound);
  EXPECT_FALSE(gone.error().message.empty());
}

TEST_F(ClientOps, FlowKeyAndKeyConcurrencyRoundTripWithTheEnginesRules) {
  client::QueueSettings s;
  s.flow_key = "tenant";
  s.key_concurrency = 2;
  auto created = client_->CreateQueue("keyed", s);
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  const p::QueueSettings* got = created->result<p::QueueResult>()->queue()->settings();
  EXPECT_EQ(got->flow_key()->str(), "tenant");
  EXPECT_EQ(got->key_concurrency(), std::optional<uint32_t>(2));
  EXPECT_TRUE(client_->CreateQueue("keyed", s).ok()) << "identical settings: succeeds";
  client::QueueSettings other_key = s;
  other_key.flow_key = "region";
  auto different = client_->CreateQueue("keyed", other_key);
  ASSERT_FALSE(different.ok());
  EXPECT_EQ(different.error().code, Code::kAlreadyExists);

  client::QueueSettingsUpdate u;
  u.key_concurrency = 5;
  auto updated = client_->UpdateQueue("keyed", u);
  ASSERT_TRUE(updated.ok()) << updated.error().ToString();
  auto read = client_->GetQueue("keyed");
  ASSERT_TRUE(read.ok());
  got = read->result<p::QueueResult>()->queue()->settings();
  EXPECT_EQ(got->flow_key()->str(), "tenant") << "fixed at creation";
  EXPECT_EQ(got->key_concurrency(), std::optional<uint32_t>(5));
  u.key_concurrency = 1'000'001;
  auto too_many = client_->UpdateQueue("keyed", u);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.error().code, Code::kInvalidArgument);
  EXPECT_EQ(too_many.error().message, "key_concurrency: must be 0 (no limit) to 1000000");

  client::QueueSettings no_key;
  no_key.key_concurrency = 3;
  auto refused = client_->CreateQueue("unkeyed", no_key);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Code::kInvalidArgument);
  EXPECT_EQ(refused.error().message, "key_concurrency: needs a flow_key");
  client::QueueSettings plain;
  ASSERT_TRUE(client_->CreateQueue("plain", plain).ok());
  client::QueueSettingsUpdate limit;
  limit.key_concurrency = 1;
  auto no_flow_key = client_->UpdateQueue("plain", limit);
  ASSERT_FALSE(no_flow_key.ok());
  EXPECT_EQ(no_flow_key.error().message, "key_concurrency: needs a flow_key");

  client::QueueSettings exclusive;
  exclusive.type = p::QueueType::exclusive;
  exclusive.exclusivity_key = "tenant";
  exclusive.flow_key = "region";
  auto mismatched = client_->CreateQueue("ex", exclusive);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_EQ(mismatched.error().message,
            "flow_key: an exclusive queue's flow key is its exclusivity_key");
  exclusive.flow_key = "tenant";
  exclusive.key_concurrency = 1;
  ASSERT_TRUE(client_->CreateQueue("ex", exclusive).ok());
  client::QueueSettingsUpdate two;
  two.key_concurrency = 2;
  auto exclusive_two = client_->UpdateQueue("ex", two);
  ASSERT_FALSE(exclusive_two.ok());
  EXPECT_EQ(exclusive_two.error().message,
            "key_concurrency: an exclusive queue runs one message per value");
}

TEST_F(ClientOps, DequeueFollowsPriorityAndLeasesOnce) {
  Put("q", "low", 10);
  Put("q", "high", 1);
  Put("q", "mid", 5);
  auto first = Take("q", 2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].id, "high");
  EXPECT_EQ(first[1].id, "mid");
  EXPECT_EQ(first[0].attempts, 1u);
  auto rest = Take("q", 10);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].id, "low");
  EXPECT_TRUE(Take("q").empty()) << "everything is leased";
}

TEST_F(ClientOps, CompleteNeedsTheLeaseToken) {
  Put("q", "m");
  auto leased = Take("q");
  ASSERT_EQ(leased.size(), 1u);
  auto wrong = client_->Complete("q", {{"m", leased[0].token + 1}});
  ASSERT_TRUE(wrong.ok());
  EXPECT_NE(wrong->result<p::ItemResults>()->items()->Get(0)->code(), p::Code::OK);
  auto right = client_->Complete("q", {{"m", leased[0].token}});
  ASSERT_TRUE(right.ok());
  EXPECT_EQ(right->result<p::ItemResults>()->items()->Get(0)->code(), p::Code::OK);
  EXPECT_GT(right->lsn(), 0u) << "a durable mutation carries the synced LSN";
  auto got = client_->Get("q", "m");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->result<p::GetResult>()->message()->state(), p::MessageState::completed);
}

TEST_F(ClientOps, FailRetriesThenDeadLetters) {
  client::QueueSettings s;
  s.max_attempts = 2;
  s.dead_letter_queue = "dlq";
  ASSERT_TRUE(client_->CreateQueue("dlq", {}).ok());
  auto created = client_->CreateQueue("q", s);
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  Put("q", "m");
  client::FailOptions retry_now;
  retry_now.error = "boom";
  retry_now.retry_delay_ms = 0;
  auto l1 = Take("q");
  ASSERT_EQ(l1.size(), 1u);
  auto f1 = client_->Fail("q", "m", l1[0].token, retry_now);
  ASSERT_TRUE(f1.ok()) << f1.error().ToString();
  EXPECT_NE(f1->result<p::FailResult>()->state(), p::MessageState::errored);
  // Retry delay 0: visible again at once (the ticker moves it within 10 ms; a dequeue that
  // finds it proves it).
  std::vector<Leased> l2;
  for (int i = 0; i < 1000 && l2.empty(); ++i) {
    l2 = Take("q");
    if (l2.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(l2.size(), 1u);
  EXPECT_EQ(l2[0].attempts, 2u);
  auto f2 = client_->Fail("q", "m", l2[0].token, retry_now);
  ASSERT_TRUE(f2.ok());
  EXPECT_EQ(f2->result<p::FailResult>()->state(), p::MessageState::errored);
  EXPECT_EQ(f2->result<p::FailResult>()->dead_letter_queue()->str(), "dlq");
  auto count = client_->Count("dlq");
  ASSERT_TRUE(count.ok()) << count.error().ToString();
  const auto* c = count->result<p::CountResult>()->counts();
  EXPECT_EQ(c->pending() + c->errored(), 1u);
}

TEST_F(ClientOps, ExtendCancelReprioritizeRedriveBrowseExplain) {
  Put("q", "a", 5, {{"tenant", "t1"}});
  Put("q", "b", 5, {{"tenant", "t2"}});
  Put("q", "c", 5, {{"tenant", "t1"}});

  client::ReprioritizeChange up;
  up.priority = -1;
  auto rep = client_->Reprioritize("q", "c", up);
  ASSERT_TRUE(rep.ok()) << rep.error().ToString();
  EXPECT_GT(rep->result<p::VersionResult>()->version(), 1u);

  client::BrowseOptions b;
  b.state = p::MessageState::pending;
  auto page = client_->Browse("q", b);
  ASSERT_TRUE(page.ok()) << page.error().ToString();
  ASSERT_EQ(page->result<p::BrowseResult>()->messages()->size(), 3u);
  EXPECT_EQ(page->result<p::BrowseResult>()->messages()->Get(0)->id()->str(), "c");

  auto filtered = Take("q", 10, {{"tenant", "t2"}});
  ASSERT_EQ(filtered.size(), 1u);
  EXPECT_EQ(filtered[0].id, "b");
  auto ext = client_->Extend("q", "b", filtered[0].token, 60'000);
  ASSERT_TRUE(ext.ok()) << ext.error().ToString();
  EXPECT_GT(ext->result<p::ExtendResult>()->lease_expires_at(), 0);

  auto explain = client_->Explain("q", "b");
  ASSERT_TRUE(explain.ok());
  EXPECT_EQ(explain->result<p::ExplainResult>()->reason(), p::ExplainReason::running);

  auto cancel = client_->Cancel("q", {"a", "nope"});
  ASSERT_TRUE(cancel.ok());
  const auto* items = cancel->result<p::ItemResults>()->items();
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ(items->Get(0)->code(), p::Code::OK);
  EXPECT_EQ(items->Get(1)->code(), p::Code::NOT_FOUND);

  auto counts = client_->Count("q", {{"tenant", "t1"}});
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->result<p::CountResult>()->counts()->canceled(), 1u);
  EXPECT_EQ(counts->result<p::CountResult>()->counts()->pending(), 1u);

  auto bulk = client_->CancelByFilter("q", {{"tenant", "t1"}});
  ASSERT_TRUE(bulk.ok()) << bulk.error().ToString();
  EXPECT_EQ(bulk->result<p::Counted>()->count(), 1u);

  auto redrive = client_->RedriveAll("q");
  ASSERT_TRUE(redrive.ok()) << redrive.error().ToString();
  EXPECT_EQ(redrive->result<p::Counted>()->count(), 0u) << "nothing is errored";
}

TEST_F(ClientOps, ExclusiveQueueRunsOneMessagePerValue) {
  client::QueueSettings s;
  s.type = p::QueueType::exclusive;
  s.exclusivity_key = "account";
  ASSERT_TRUE(client_->CreateQueue("x", s).ok());
  Put("x", "a1", 1, {{"account", "A"}});
  Put("x", "a2", 2, {{"account", "A"}});
  Put("x", "b1", 3, {{"account", "B"}});
  auto leased = Take("x", 10);
  std::set<std::string> ids;
  for (const auto& l : leased) ids.insert(l.id);
  EXPECT_EQ(ids, (std::set<std::string>{"a1", "b1"}));
  auto blocked = client_->Count("x");
  ASSERT_TRUE(blocked.ok());
  EXPECT_EQ(blocked->result<p::CountResult>()->counts()->blocked(), 1u);
  ASSERT_TRUE(
      client_->Complete("x", {{"a1", leased[0].id == "a1" ? leased[0].token : leased[1].token}})
          .ok());
  auto next = Take("x");
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].id, "a2");
}

TEST_F(ClientOps, BatchEnqueueAnswersPerItemAndDuplicatesAreReported) {
  std::vector<client::EnqueueItem> items(3);
  items[0].id = "same";
  items[1].id = "same";
  items[2].id = std::string("\xff\xfe", 2);  // not UTF-8
  auto r = client_->Enqueue("q", items);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const auto* out = r->result<p::EnqueueResults>()->items();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_FALSE(out->Get(0)->duplicate());
  EXPECT_TRUE(out->Get(1)->duplicate());
  ASSERT_NE(out->Get(2)->error(), nullptr);
  EXPECT_EQ(out->Get(2)->error()->code(), p::Code::INVALID_ARGUMENT);
}

TEST_F(ClientOps, StatsAndHealth) {
  Put("q", "m");
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.error().ToString();
  EXPECT_EQ(stats->result<p::StatsResult>()->queues(), 1u);
  EXPECT_EQ(stats->result<p::StatsResult>()->messages()->pending(), 1u);
  EXPECT_GT(stats->result<p::StatsResult>()->wal_fsyncs(), 0u);
  auto health = client_->Health();
  ASSERT_TRUE(health.ok());
  EXPECT_TRUE(health->result<p::HealthResult>()->live());
  EXPECT_TRUE(health->result<p::HealthResult>()->ready());
}

TEST_F(ClientOps, AStateChangeSurvivesARestart) {
  Put("q", "kept", 3);
  auto leased = Take("q");
  ASSERT_EQ(leased.size(), 1u);
  ASSERT_TRUE(client_->Complete("q", {{"kept", leased[0].token}}).ok());
  client_.reset();
  ASSERT_EQ(server_->Terminate(), 0) << server_->log();
  ASSERT_TRUE(server_->Start()) << server_->log();
  auto c = Client::Connect({"127.0.0.1", server_->port()});
  ASSERT_TRUE(c.ok());
  auto got = (*c)->Get("q", "kept");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->result<p::GetResult>()->message()->state(), p::MessageState::completed);
}

TEST_F(ClientOps, FlowSettingsSurviveARestart) {
  client::QueueSettings s;
  s.flow_key = "tenant";
  s.key_concurrency = 4;
  ASSERT_TRUE(client_->CreateQueue("keyed", s).ok());
  client::QueueSettingsUpdate u;
  u.key_concurrency = 2;
  ASSERT_TRUE(client_->UpdateQueue("keyed", u).ok());
  client_.reset();
  ASSERT_EQ(server_->Terminate(), 0) << server_->log();
  ASSERT_TRUE(server_->Start()) << server_->log();
  auto c = Client::Connect({"127.0.0.1", server_->port()});
  ASSERT_TRUE(c.ok());
  auto got = (*c)->GetQueue("keyed");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  const p::QueueSettings* settings = got->result<p::QueueResult>()->queue()->settings();
  EXPECT_EQ(settings->flow_key()->str(), "tenant");
  EXPECT_EQ(settings->key_concurrency(), std::optional<uint32_t>(2));
  EXPECT_FALSE((*c)->CreateQueue("keyed", s).ok()) << "the settings now differ (2, not 4)";
}

}  // namespace
}  // namespace sundial::e2e
