// Address parsing and request building, without a server: every builder yields a verifiable
// Request carrying the header's request_id and durability; absent optional fields stay absent
// (so the server applies its defaults or leaves settings unchanged); the bulk forms carry a
// filter instead of ids; SummarizeRequest reads the id and a long poll's wait back.
#include <gtest/gtest.h>

#include <deque>

#include "client/client.h"

namespace sundial::client {
namespace {

namespace p = protocol;

// Keeps every request built in a test alive for the whole test, so the pointers Parse returns
// (into the buffers) stay valid across statements.
class Requests : public ::testing::Test {
 protected:
  const p::Request* Parse(std::string bytes) {
    const std::string& kept = kept_.emplace_back(std::move(bytes));
    flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(kept.data()), kept.size());
    EXPECT_TRUE(p::VerifyRequestBuffer(verifier));
    return p::GetRequest(kept.data());
  }

 private:
  std::deque<std::string> kept_;
};

TEST(ParseAddress, HostAndPort) {
  auto a = ParseAddress("example.org:8000");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "example.org");
  EXPECT_EQ(a->port, 8000);
  EXPECT_EQ(a->ToString(), "example.org:8000");
}

TEST(ParseAddress, MissingPartsTakeTheDefaults) {
  EXPECT_EQ(*ParseAddress(""), (Address{"127.0.0.1", 7400}));
  EXPECT_EQ(*ParseAddress("db1"), (Address{"db1", 7400}));
  EXPECT_EQ(*ParseAddress(":9000"), (Address{"127.0.0.1", 9000}));
  EXPECT_EQ(*ParseAddress("", kDefaultHttpPort), (Address{"127.0.0.1", 7401}));
}

TEST(ParseAddress, Ipv6NeedsBrackets) {
  EXPECT_EQ(*ParseAddress("[::1]:7500"), (Address{"::1", 7500}));
  EXPECT_EQ(*ParseAddress("[::1]"), (Address{"::1", 7400}));
  EXPECT_EQ((Address{"::1", 7500}).ToString(), "[::1]:7500");
  auto bare = ParseAddress("::1");
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.error().message.find("brackets"), std::string::npos);
  EXPECT_FALSE(ParseAddress("[::1").ok());
  EXPECT_FALSE(ParseAddress("[::1]x").ok());
}

TEST(ParseAddress, BadPortsAreInvalidArguments) {
  for (const char* text : {"h:", "h:0", "h:65536", "h:-1", "h:12ab", "h:99999999999"}) {
    auto a = ParseAddress(text);
    ASSERT_FALSE(a.ok()) << text;
    EXPECT_EQ(a.error().code, Code::kInvalidArgument) << text;
    EXPECT_EQ(a.error().origin, Error::Origin::kLocal) << text;
    EXPECT_NE(a.error().message.find("port"), std::string::npos) << text;
  }
  EXPECT_TRUE(ParseAddress("h:65535").ok());
}

TEST_F(Requests, HeaderIsCarried) {
  const p::Request* r = Parse(BuildHealth({42, Durability::relaxed}));
  EXPECT_EQ(r->request_id(), 42u);
  EXPECT_EQ(r->durability(), p::Durability::relaxed);
  EXPECT_EQ(r->op_type(), p::Operation::Health);
  const std::string bytes = BuildListQueues({43});
  EXPECT_TRUE(flatbuffers::BufferHasIdentifier(bytes.data(), p::RequestIdentifier()));
  EXPECT_EQ(Parse(bytes)->durability(), p::Durability::durable);
}

TEST_F(Requests, CreateQueueCarriesTheSettingsSetAndNoDefaults) {
  QueueSettings s;
  s.type = QueueType::exclusive;
  s.exclusivity_key = "tenant";
  s.lease_ms = 1234;
  s.max_attempts = 9;
  s.dead_letter_queue = "dlq";
  s.max_depth = 100;
  s.dequeue_paused = true;
  s.flow_key = "tenant";
  s.key_concurrency = 1;
  const std::string bytes = BuildCreateQueue({1}, "jobs", s);
  const p::CreateQueue* op = Parse(bytes)->op_as_CreateQueue();
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->name()->str(), "jobs");
  const p::QueueSettings* got = op->settings();
  EXPECT_EQ(got->type(), p::QueueType::exclusive);
  EXPECT_EQ(got->exclusivity_key()->str(), "tenant");
  EXPECT_EQ(got->lease_ms(), 1234);
  EXPECT_EQ(got->max_attempts(), 9u);
  EXPECT_FALSE(got->retry_backoff_ms().has_value()) << "not set: the server's default, not sent";
  EXPECT_EQ(got->dead_letter_queue()->str(), "dlq");
  EXPECT_EQ(got->max_depth(), 100u);
  EXPECT_EQ(got->dequeue_paused(), true);
  EXPECT_FALSE(got->enqueue_paused().has_value());
  EXPECT_EQ(got->flow_key()->str(), "tenant");
  EXPECT_EQ(got->key_concurrency(), 1u);
  const p::QueueSettings* none =
      Parse(BuildCreateQueue({1}, "jobs", {}))->op_as_CreateQueue()->settings();
  EXPECT_EQ(none->flow_key(), nullptr) << "no flow key: not sent";
  EXPECT_FALSE(none->key_concurrency().has_value());
}

TEST_F(Requests, UpdateQueueLeavesAbsentSettingsAbsent) {
  QueueSettingsUpdate u;
  u.lease_ms = 500;
  u.dead_letter_queue = "";  // clears it
  u.enqueue_paused = false;
  u.key_concurrency = 0;  // no limit: sent, unlike an absent one
  const std::string bytes = BuildUpdateQueue({1}, "jobs", u);
  const p::QueueSettingsUpdate* got = Parse(bytes)->op_as_UpdateQueue()->update();
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->lease_ms(), std::optional<int64_t>(500));
  EXPECT_EQ(got->enqueue_paused(), std::optional<bool>(false));
  EXPECT_FALSE(got->max_attempts().has_value());
  EXPECT_FALSE(got->invisibility_ms().has_value());
  EXPECT_FALSE(got->dequeue_paused().has_value());
  EXPECT_EQ(got->key_concurrency(), std::optional<uint32_t>(0));
  EXPECT_FALSE(got->history_max().has_value());
  ASSERT_NE(got->dead_letter_queue(), nullptr);
  EXPECT_EQ(got->dead_letter_queue()->str(), "");
  EXPECT_EQ(
      Parse(BuildUpdateQueue({1}, "jobs", {}))->op_as_UpdateQueue()->update()->dead_letter_queue(),
      nullptr);
}

TEST_F(Requests, EnqueueItems) {
  EnqueueItem a;
  a.id = "m1";
  a.priority = -5;
  a.payload = std::string("bin\0ary", 7);
  a.metadata = {{"tenant", "acme"}, {"kind", "email"}};
  a.delay_ms = 1000;
  EnqueueItem b;  // no id: the server generates one
  b.visible_at = 1'700'000'000'000;
  b.max_attempts = 2;
  const std::string bytes = BuildEnqueue({3}, "jobs", {a, b});
  const p::Enqueue* op = Parse(bytes)->op_as_Enqueue();
  ASSERT_EQ(op->items()->size(), 2u);
  const p::EnqueueItem* first = op->items()->Get(0);
  EXPECT_EQ(first->id()->str(), "m1");
  EXPECT_EQ(first->priority(), -5);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(first->payload()->data()),
                        first->payload()->size()),
            a.payload);
  ASSERT_EQ(first->metadata()->size(), 2u);
  EXPECT_EQ(first->metadata()->Get(1)->key()->str(), "kind");
  EXPECT_EQ(first->delay_ms(), std::optional<int64_t>(1000));
  EXPECT_FALSE(first->visible_at().has_value());
  EXPECT_FALSE(first->max_attempts().has_value());
  const p::EnqueueItem* second = op->items()->Get(1);
  EXPECT_EQ(second->id(), nullptr);
  EXPECT_EQ(second->visible_at(), std::optional<int64_t>(1'700'000'000'000));
  EXPECT_EQ(second->max_attempts(), std::optional<uint32_t>(2));
  EXPECT_EQ(second->metadata(), nullptr);
}

TEST_F(Requests, DependenciesTravelOnlyWhenGiven) {
  EnqueueItem a;
  a.id = "child";
  a.depends_on = {"parent", "other/m7"};
  a.on_dependency_failure = p::DependencyFailurePolicy::release;
  EnqueueItem b;
  b.id = "plain";
  const p::Enqueue* op = Parse(BuildEnqueue({4}, "jobs", {a, b}))->op_as_Enqueue();
  const p::EnqueueItem* first = op->items()->Get(0);
  ASSERT_NE(first->depends_on(), nullptr);
  ASSERT_EQ(first->depends_on()->size(), 2u);
  EXPECT_EQ(first->depends_on()->Get(1)->str(), "other/m7");
  EXPECT_EQ(first->on_dependency_failure(), p::DependencyFailurePolicy::release);
  EXPECT_EQ(op->items()->Get(1)->depends_on(), nullptr);
  EXPECT_EQ(op->items()->Get(1)->on_dependency_failure(), p::DependencyFailurePolicy::cancel);

  DequeueOptions o;
  o.include_dependency_results = true;
  EXPECT_TRUE(Parse(BuildDequeue({5}, "jobs", o))->op_as_Dequeue()->include_dependency_results());
  EXPECT_FALSE(Parse(BuildDequeue({6}, "jobs", {}))->op_as_Dequeue()->include_dependency_results());
  const p::Complete* c = Parse(BuildCompleteAndNext({7}, "jobs", {{"a", 1}}, o))->op_as_Complete();
  EXPECT_TRUE(c->next()->include_dependency_results());
  EXPECT_TRUE(
      Parse(BuildGet({8}, "jobs", "child", true))->op_as_Get()->include_dependency_results());
  EXPECT_FALSE(Parse(BuildGet({9}, "jobs", "child"))->op_as_Get()->include_dependency_results());
}

TEST_F(Requests, DequeueAndSummary) {
  DequeueOptions o;
  o.max = 10;
  o.lease_ms = 2000;
  o.filter = {{"tenant", "acme"}};
  o.wait_ms = 1500;
  const std::string bytes = BuildDequeue({77}, "jobs", o);
  const p::Dequeue* op = Parse(bytes)->op_as_Dequeue();
  EXPECT_EQ(op->max(), 10u);
  EXPECT_EQ(op->lease_ms(), std::optional<int64_t>(2000));
  EXPECT_EQ(op->filter()->Get(0)->value()->str(), "acme");
  EXPECT_EQ(op->wait_ms(), 1500u);
  const auto summary = SummarizeRequest(bytes);
  ASSERT_TRUE(summary.has_value());
  EXPECT_EQ(summary->request_id, 77u);
  EXPECT_EQ(summary->wait_ms, 1500u);
  EXPECT_EQ(SummarizeRequest(BuildStats({78}))->wait_ms, 0u);
  EXPECT_FALSE(SummarizeRequest("junk").has_value());
  EXPECT_FALSE(Parse(BuildDequeue({1}, "q", {}))->op_as_Dequeue()->lease_ms().has_value());
}

TEST_F(Requests, LeaseOperations) {
  const p::Complete* c = Parse(BuildComplete({1}, "q", {{"a", 11}, {"b", 12}}))->op_as_Complete();
  ASSERT_EQ(c->items()->size(), 2u);
  EXPECT_EQ(c->items()->Get(1)->lease_token(), 12u);

  FailOptions f;
  f.error = "smtp timeout";
  const std::string fail_bytes = BuildFail({1}, "q", "a", 11, f);
  const p::Fail* fail = Parse(fail_bytes)->op_as_Fail();
  EXPECT_EQ(fail->error()->str(), "smtp timeout");
  EXPECT_FALSE(fail->retry_delay_ms().has_value());
  f.retry_delay_ms = 0;
  EXPECT_EQ(Parse(BuildFail({1}, "q", "a", 11, f))->op_as_Fail()->retry_delay_ms(),
            std::optional<int64_t>(0));

  const p::Extend* e = Parse(BuildExtend({1}, "q", "a", 11, 9000))->op_as_Extend();
  EXPECT_EQ(e->lease_token(), 11u);
  EXPECT_EQ(e->lease_ms(), 9000);
}

TEST_F(Requests, BulkFormsCarryAFilterInsteadOfIds) {
  const Pairs filter{{"tenant", "acme"}};
  const p::Cancel* by_ids = Parse(BuildCancel({1}, "q", {"a", "b"}))->op_as_Cancel();
  EXPECT_EQ(by_ids->ids()->size(), 2u);
  EXPECT_EQ(by_ids->filter(), nullptr);
  const p::Cancel* by_filter = Parse(BuildCancelByFilter({1}, "q", filter))->op_as_Cancel();
  EXPECT_EQ(by_filter->ids(), nullptr);
  EXPECT_EQ(by_filter->filter()->size(), 1u);

  const p::Reprioritize* one =
      Parse(BuildReprioritize({1}, "q", "a", {.priority = 5}))->op_as_Reprioritize();
  EXPECT_EQ(one->id()->str(), "a");
  EXPECT_EQ(one->priority(), std::optional<int64_t>(5));
  EXPECT_FALSE(one->visible_at().has_value());
  const p::Reprioritize* bulk =
      Parse(BuildReprioritizeByFilter({1}, "q", filter, {.visible_at = 9}))->op_as_Reprioritize();
  EXPECT_EQ(bulk->id(), nullptr);
  EXPECT_EQ(bulk->visible_at(), std::optional<int64_t>(9));

  const p::Redrive* ids = Parse(BuildRedrive({1}, "q", {"x"}))->op_as_Redrive();
  EXPECT_FALSE(ids->all());
  EXPECT_EQ(ids->ids()->size(), 1u);
  EXPECT_TRUE(Parse(BuildRedriveAll({1}, "q"))->op_as_Redrive()->all());
  const p::Redrive* filtered = Parse(BuildRedriveByFilter({1}, "q", filter))->op_as_Redrive();
  EXPECT_FALSE(filtered->all());
  EXPECT_EQ(filtered->filter()->size(), 1u);
}

TEST_F(Requests, ReadOperations) {
  BrowseOptions b;
  b.state = MessageState::errored;
  b.cursor = "c1";
  b.limit = 7;
  const p::Browse* browse = Parse(BuildBrowse({1}, "q", b))->op_as_Browse();
  EXPECT_EQ(browse->state(), p::MessageState::errored);
  EXPECT_EQ(browse->cursor()->str(), "c1");
  EXPECT_EQ(browse->limit(), 7u);
  EXPECT_EQ(Parse(BuildBrowse({1}, "q", {}))->op_as_Browse()->cursor(), nullptr);

  EXPECT_EQ(Parse(BuildGet({1}, "q", "a"))->op_as_Get()->id()->str(), "a");
  EXPECT_EQ(Parse(BuildCount({1}, "q", {}))->op_as_Count()->filter(), nullptr);
  EXPECT_EQ(Parse(BuildExplain({1}, "q", "a"))->op_as_Explain()->id()->str(), "a");
  EXPECT_EQ(Parse(BuildExplainFilter({1}, "q", {{"k", "v"}}))->op_as_Explain()->filter()->size(),
            1u);
  const std::vector<MessageState> states{MessageState::completed, MessageState::canceled};
  const p::PurgeQueue* purge = Parse(BuildPurgeQueue({1}, "q", states))->op_as_PurgeQueue();
  ASSERT_EQ(purge->states()->size(), 2u);
  EXPECT_EQ(purge->states()->Get(1), p::MessageState::canceled);
  EXPECT_EQ(Parse(BuildAuth({1}, "tok"))->op_as_Auth()->token()->str(), "tok");
  EXPECT_EQ(Parse(BuildSubscribe({1}, "*", {}))->op_as_Subscribe()->queue()->str(), "*");
}

TEST_F(Requests, HandBuiltRequestBytes) {
  flatbuffers::FlatBufferBuilder b;
  b.Finish(p::CreateRequest(b, 9, p::Durability::durable, p::Operation::Stats,
                            p::CreateStats(b).Union()),
           p::RequestIdentifier());
  EXPECT_EQ(SummarizeRequest(FinishedBytes(b))->request_id, 9u);
}

}  // namespace
}  // namespace sundial::client
