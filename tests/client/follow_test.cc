// A client given several addresses (client/client.h, docs/clients/cpp.md "Clusters") against
// scripted fake nodes: it goes where a standby says the primary is, resends a request whose
// connection died only when the operation is safe to repeat, and gives up after its budget with
// the last error, saying so. Also the pieces: ParseAddressList, ResendRule, NewMessageId. The
// real cluster is tests/e2e/cluster_*_test.cc.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/client/fake_server.h"

namespace sundial::client {
namespace {

namespace p = protocol;
using testing::ClosedPort;
using testing::FakeConnection;
using testing::FakeServer;
using testing::OkResponse;

// A Cluster answer of `node`: it leads when primary == node.
std::string ClusterAnswer(uint64_t request_id, const std::string& node, const std::string& primary,
                          const std::string& primary_addr, uint64_t epoch = 7) {
  return OkResponse(request_id, [&](flatbuffers::FlatBufferBuilder& b) {
    return std::pair{p::Result::ClusterResult,
                     p::CreateClusterResultDirect(b, "c", node.c_str(), epoch, primary.c_str(),
                                                  primary_addr.c_str(), "", "sync")
                         .Union()};
  });
}

std::string EnqueueAnswer(uint64_t request_id, const std::string& id) {
  return OkResponse(request_id, [&](flatbuffers::FlatBufferBuilder& b) {
    std::vector<flatbuffers::Offset<p::EnqueueResult>> items{
        p::CreateEnqueueResultDirect(b, id.c_str(), 1)};
    return std::pair{p::Result::EnqueueResults, p::CreateEnqueueResultsDirect(b, &items).Union()};
  });
}

std::string DoneAnswer(uint64_t request_id) {
  return OkResponse(request_id, [](flatbuffers::FlatBufferBuilder& b) {
    return std::pair{p::Result::Done, p::CreateDone(b).Union()};
  });
}

ConnectOptions Quick(int budget_ms = 2000) {
  ConnectOptions o;
  o.timeout_ms = 2000;
  o.retry.budget_ms = budget_ms;
  o.retry.initial_backoff_ms = 5;
  o.retry.max_backoff_ms = 20;
  return o;
}

EnqueueItem Item(std::string id) {
  EnqueueItem item;
  item.id = std::move(id);
  item.payload = "x";
  return item;
}

TEST(ParseAddressList, SplitsTrimsAndKeepsEachAddressOnce) {
  auto list = ParseAddressList("a:1, b:2,a:1 ,[::1]:3,c");
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  ASSERT_EQ(list->size(), 4u);
  EXPECT_EQ((*list)[0], (Address{"a", 1}));
  EXPECT_EQ((*list)[1], (Address{"b", 2}));
  EXPECT_EQ((*list)[2], (Address{"::1", 3}));
  EXPECT_EQ((*list)[3], (Address{"c", kDefaultPort}));
  for (const char* bad : {"", "a:1,,b:2", "a:1,", "a:0,b:1", "a:1,[::1"}) {
    auto refused = ParseAddressList(bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.error().code, Code::kInvalidArgument) << bad;
    EXPECT_EQ(refused.error().origin, Error::Origin::kLocal);
  }
}

TEST(ResendRule, OnlyOperationsThatARepeatCannotHarmAreSafe) {
  const RequestHeader h{1};
  EXPECT_EQ(ResendRule(BuildEnqueue(h, "q", {Item("a"), Item("b")})), RequestResend::kSafe);
  EXPECT_EQ(ResendRule(BuildEnqueue(h, "q", {Item("a"), Item("")})), RequestResend::kNotSafe)
      << "an item without an id would be enqueued twice";
  EXPECT_EQ(ResendRule(BuildComplete(h, "q", {{"a", 5}})), RequestResend::kSafe);
  EXPECT_EQ(ResendRule(BuildFail(h, "q", "a", 5, {})), RequestResend::kSafe);
  EXPECT_EQ(ResendRule(BuildExtend(h, "q", "a", 5, 1000)), RequestResend::kSafe);
  EXPECT_EQ(ResendRule(BuildDequeue(h, "q", {})), RequestResend::kSafe);
  EXPECT_EQ(ResendRule(BuildGet(h, "q", "a")), RequestResend::kSafe);
  EXPECT_EQ(ResendRule(BuildCancel(h, "q", {"a"})), RequestResend::kSafe);
  EXPECT_EQ(ResendRule(BuildCluster(h)), RequestResend::kSafe);
  EXPECT_EQ(ResendRule(BuildDeleteQueue(h, "q")), RequestResend::kNotSafe);
  EXPECT_EQ(ResendRule(BuildRedriveAll(h, "q")), RequestResend::kNotSafe);
  EXPECT_EQ(ResendRule(BuildSwitchover(h, "")), RequestResend::kNotSafe);
  EXPECT_EQ(ResendRule(BuildAuth(h, "t")), RequestResend::kNotSafe);
  EXPECT_EQ(ResendRule("not a request"), RequestResend::kNotSafe);
}

TEST(NewMessageId, IsAUniqueUlid) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = NewMessageId();
    ASSERT_EQ(id.size(), 26u);
    EXPECT_EQ(id.find_first_not_of("0123456789ABCDEFGHJKMNPQRSTVWXYZ"), std::string::npos) << id;
    EXPECT_LE(id[0], '7') << "the first digit holds 3 bits";
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(FollowingClient, AStandbyNamingThePrimarySendsTheClientThere) {
  FakeServer primary([](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->op_type(), p::Operation::Cluster);
    conn.SendMessage(ClusterAnswer(r->request_id(), "b", "b", ""));
    r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->op_type(), p::Operation::Enqueue);
    conn.SendMessage(
        EnqueueAnswer(r->request_id(), r->op_as_Enqueue()->items()->Get(0)->id()->str()));
    conn.WaitForClose();
  });
  FakeServer standby([&](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->op_type(), p::Operation::Cluster);
    conn.SendMessage(ClusterAnswer(r->request_id(), "a", "b", primary.addr()));
    conn.WaitForClose();
  });
  // Only the standby is listed: the primary's address comes from its answer.
  auto c =
      Client::Connect({Address{"127.0.0.1", standby.port()}, {"127.0.0.1", ClosedPort()}}, Quick());
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ((*c)->address().port, primary.port());
  auto r = (*c)->Enqueue("q", {Item("")});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const std::string id = r->result<p::EnqueueResults>()->items()->Get(0)->id()->str();
  EXPECT_EQ(id.size(), 26u) << "the client gave the item an id of its own: " << id;
  (*c)->Close();
}

TEST(FollowingClient, ARequestWhoseConnectionDiedIsResentWhenSafe) {
  std::string first_id, second_id;
  FakeServer node(
      [&, n = 0](FakeConnection& conn) mutable {
        const p::Request* r = conn.ReadRequest();
        ASSERT_NE(r, nullptr);
        conn.SendMessage(ClusterAnswer(r->request_id(), "a", "a", ""));
        r = conn.ReadRequest();
        ASSERT_NE(r, nullptr);
        ASSERT_EQ(r->op_type(), p::Operation::Enqueue);
        const std::string id = r->op_as_Enqueue()->items()->Get(0)->id()->str();
        if (n++ == 0) {
          first_id = id;
          conn.Close();  // applied or not: the client cannot know
          return;
        }
        second_id = id;
        conn.SendMessage(EnqueueAnswer(r->request_id(), id));
        conn.WaitForClose();
      },
      2);
  auto c =
      Client::Connect({Address{"127.0.0.1", node.port()}, {"127.0.0.1", ClosedPort()}}, Quick());
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  auto r = (*c)->Enqueue("q", {Item("")});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ((*c)->resends(), 1u);
  (*c)->Close();
  node.Join();
  EXPECT_FALSE(first_id.empty());
  EXPECT_EQ(first_id, second_id) << "resent with the same id: a duplicate, not a second message";
}

TEST(FollowingClient, ARequestWhoseConnectionDiedIsNotResentWhenARepeatCouldHarm) {
  int deletes = 0;
  FakeServer node([&](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    conn.SendMessage(ClusterAnswer(r->request_id(), "a", "a", ""));
    r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->op_type(), p::Operation::DeleteQueue);
    ++deletes;
    conn.Close();
  });
  auto c =
      Client::Connect({Address{"127.0.0.1", node.port()}, {"127.0.0.1", ClosedPort()}}, Quick());
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  auto r = (*c)->DeleteQueue("q");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kUnavailable);
  EXPECT_EQ(r.error().origin, Error::Origin::kConnection);
  EXPECT_EQ((*c)->resends(), 0u);
  node.Join();
  EXPECT_EQ(deletes, 1);
}

TEST(FollowingClient, NotPrimaryIsResentAndTheBudgetEndsItWithTheLastError) {
  // A node that knows no primary (an election that never ends): every Cluster says so, every
  // write is NOT_PRIMARY.
  int writes = 0;
  FakeServer node([&](FakeConnection& conn) {
    while (const p::Request* r = conn.ReadRequest()) {
      if (r->op_type() == p::Operation::Cluster) {
        conn.SendMessage(ClusterAnswer(r->request_id(), "a", "", ""));
      } else {
        ++writes;
        conn.SendMessage(testing::ErrorResponse(r->request_id(), p::Code::NOT_PRIMARY,
                                                "not primary: a knows no primary"));
      }
    }
  });
  auto c =
      Client::Connect({Address{"127.0.0.1", node.port()}, {"127.0.0.1", ClosedPort()}}, Quick(300));
  ASSERT_TRUE(c.ok()) << c.error().ToString() << ": a node answered, so Connect succeeds";
  // Cluster goes to whichever node answers.
  auto view = (*c)->Cluster();
  ASSERT_TRUE(view.ok()) << view.error().ToString();
  EXPECT_EQ(view->result<p::ClusterResult>()->node()->str(), "a");
  // Anything else waits for a primary until the budget is spent.
  auto r = (*c)->Enqueue("q", {Item("m")});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kNotPrimary) << r.error().ToString();
  EXPECT_NE(r.error().message.find("gave up following the primary"), std::string::npos)
      << r.error().message;
  (*c)->Close();
  node.Join();
  EXPECT_EQ(writes, 0) << "no write goes to a node that does not answer as the primary";
}

TEST(FollowingClient, ASwitchoverRefusedWithNotPrimaryGoesToTheNamedPrimary) {
  FakeServer primary([](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    conn.SendMessage(ClusterAnswer(r->request_id(), "b", "b", "", 8));
    r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->op_type(), p::Operation::Switchover);
    conn.SendMessage(DoneAnswer(r->request_id()));
    conn.WaitForClose();
  });
  // "a" still believes it leads (epoch 7), then refuses the write naming b.
  FakeServer stale([&](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    conn.SendMessage(ClusterAnswer(r->request_id(), "a", "a", ""));
    r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    flatbuffers::FlatBufferBuilder b;
    auto error = p::CreateErrorDirect(b, p::Code::NOT_PRIMARY, "not primary: a is a standby",
                                      primary.addr().c_str());
    b.Finish(p::CreateServerMessage(b, p::ServerBody::Response,
                                    p::CreateResponse(b, r->request_id(), error).Union()));
    conn.SendMessage(testing::Bytes(b));
    conn.WaitForClose();
  });
  auto c =
      Client::Connect({Address{"127.0.0.1", stale.port()}, {"127.0.0.1", ClosedPort()}}, Quick());
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  auto r = (*c)->Switchover();
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ((*c)->address().port, primary.port());
  (*c)->Close();
}

}  // namespace
}  // namespace sundial::client
