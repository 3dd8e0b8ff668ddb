// Dependencies on the wire against a real sundiald (docs/semantics.md, "Dependencies";
// docs/protocol.md, "Dependencies"): enqueue with depends_on makes a waiting message, counted as
// waiting; completing its dependency with a result releases it, and a dequeue (plain, or the
// `next` of a complete) or a get with include_dependency_results carries that result. Bad input
// (an unknown policy, too many dependencies, a malformed key, a dependency on itself or on a
// message that does not exist) is a typed error, over the binary protocol and the HTTP JSON API.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/client.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_test.h"
#include "tests/e2e/ws_client.h"

namespace sundial::e2e {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

std::string Bytes(const fb::Vector<uint8_t>* v) {
  return v ? std::string(reinterpret_cast<const char*>(v->data()), v->size()) : std::string();
}

HttpReply Post(uint16_t port, std::string_view target, std::string_view body) {
  return HttpRequest(
      port, "POST", target,
      "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n",
      body);
}

class Dependencies : public ServerTest {
 protected:
  // The one item's error code of an enqueue of `item` (OK when it was accepted).
  p::Code EnqueueCode(const std::string& queue, const client::EnqueueItem& item,
                      std::string* message = nullptr) {
    auto r = client_->Enqueue(queue, {item});
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    if (!r.ok()) return p::Code::INTERNAL;
    const p::Error* error = r->result<p::EnqueueResults>()->items()->Get(0)->error();
    if (error != nullptr && message != nullptr) *message = error->message()->str();
    return error ? error->code() : p::Code::OK;
  }

  void Put(const std::string& queue, const std::string& id,
           std::vector<std::string> depends_on = {}) {
    client::EnqueueItem item;
    item.id = id;
    item.payload = "job " + id;
    item.depends_on = std::move(depends_on);
    std::string message;
    ASSERT_EQ(EnqueueCode(queue, item, &message), p::Code::OK) << message;
  }

  p::MessageState StateOf(const std::string& queue, const std::string& id) {
    auto r = client_->Get(queue, id);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? r->result<p::GetResult>()->message()->state() : p::MessageState::invisible;
  }

  // Leases the one dequeueable message of `queue`: (id, token); empty id when none.
  std::pair<std::string, uint64_t> Lease(const std::string& queue) {
    auto r = client_->Dequeue(queue, {});
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return {};
    const auto* messages = r->result<p::DequeueResult>()->messages();
    if (messages->size() != 1) return {};
    return {messages->Get(0)->id()->str(), messages->Get(0)->lease_token()};
  }
};

TEST_F(Dependencies, ADependentWaitsAndIsReleasedWithItsDependencysResult) {
  Put("q", "parent");
  Put("q", "child", {"parent"});
  EXPECT_EQ(StateOf("q", "child"), p::MessageState::waiting);
  auto count = client_->Count("q");
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(count->result<p::CountResult>()->counts()->waiting(), 1u);
  EXPECT_EQ(count->result<p::CountResult>()->counts()->pending(), 1u);
  auto explained = client_->Explain("q", "child");
  ASSERT_TRUE(explained.ok());
  EXPECT_EQ(explained->result<p::ExplainResult>()->reason(),
            p::ExplainReason::waiting_on_dependencies);

  // Only the parent is dequeueable.
  const auto parent = Lease("q");
  ASSERT_EQ(parent.first, "parent");
  EXPECT_EQ(Lease("q").first, "");
  auto done = client_->Complete("q", {{"parent", parent.second, "parent's result"}});
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->result<p::ItemResults>()->items()->Get(0)->code(), p::Code::OK);
  EXPECT_EQ(StateOf("q", "child"), p::MessageState::pending);

  client::DequeueOptions o;
  o.include_dependency_results = true;
  auto leased = client_->Dequeue("q", o);
  ASSERT_TRUE(leased.ok());
  const auto* messages = leased->result<p::DequeueResult>()->messages();
  ASSERT_EQ(messages->size(), 1u);
  const p::Message* child = messages->Get(0);
  EXPECT_EQ(child->id()->str(), "child");
  ASSERT_NE(child->dependency_results(), nullptr);
  ASSERT_EQ(child->dependency_results()->size(), 1u);
  const p::WaitItem* dep = child->dependency_results()->Get(0);
  EXPECT_EQ(dep->id()->str(), "q/parent");
  EXPECT_EQ(dep->state(), p::MessageState::completed);
  EXPECT_EQ(Bytes(dep->result()), "parent's result");
  EXPECT_EQ(dep->error(), nullptr);

  // get reads them too; without the flag a message carries none.
  auto got = client_->Get("q", "child", /*include_dependency_results=*/true);
  ASSERT_TRUE(got.ok());
  const p::Message* m = got->result<p::GetResult>()->message();
  ASSERT_NE(m->dependency_results(), nullptr);
  EXPECT_EQ(Bytes(m->dependency_results()->Get(0)->result()), "parent's result");
  got = client_->Get("q", "child");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->result<p::GetResult>()->message()->dependency_results(), nullptr);
}

TEST_F(Dependencies, ADequeueWithoutTheFlagCarriesNoDependencyResults) {
  Put("q", "parent");
  Put("q", "child", {"q/parent"});
  const auto parent = Lease("q");
  ASSERT_TRUE(client_->Complete("q", {{"parent", parent.second, "r"}}).ok());
  auto leased = client_->Dequeue("q", {});
  ASSERT_TRUE(leased.ok());
  const auto* messages = leased->result<p::DequeueResult>()->messages();
  ASSERT_EQ(messages->size(), 1u);
  EXPECT_EQ(messages->Get(0)->dependency_results(), nullptr);
}

TEST_F(Dependencies, CompleteAndNextLeasesTheReleasedDependentWithItsResults) {
  Put("q", "parent");
  Put("other", "a");
  Put("q", "child", {"parent", "other/a"});
  // other/a completes first, with no result.
  const auto a = Lease("other");
  ASSERT_TRUE(client_->Complete("other", {{"a", a.second}}).ok());
  const auto parent = Lease("q");
  ASSERT_EQ(parent.first, "parent");
  client::DequeueOptions next;
  next.include_dependency_results = true;
  auto r = client_->CompleteAndNext("q", {{"parent", parent.second, "42"}}, next);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const p::ItemResults* items = r->result<p::ItemResults>();
  ASSERT_EQ(items->items()->Get(0)->code(), p::Code::OK);
  ASSERT_NE(items->next(), nullptr);
  ASSERT_EQ(items->next()->size(), 1u);
  const p::Message* child = items->next()->Get(0);
  EXPECT_EQ(child->id()->str(), "child");
  ASSERT_NE(child->dependency_results(), nullptr);
  ASSERT_EQ(child->dependency_results()->size(), 2u);
  EXPECT_EQ(child->dependency_results()->Get(0)->id()->str(), "q/parent");
  EXPECT_EQ(Bytes(child->dependency_results()->Get(0)->result()), "42");
  EXPECT_EQ(child->dependency_results()->Get(1)->id()->str(), "other/a");
  EXPECT_EQ(child->dependency_results()->Get(1)->state(), p::MessageState::completed);
  EXPECT_EQ(child->dependency_results()->Get(1)->result(), nullptr);
}

TEST_F(Dependencies, PoliciesTravelOnTheWire) {
  Put("q", "parent");
  client::EnqueueItem released;
  released.id = "released";
  released.depends_on = {"parent"};
  released.on_dependency_failure = p::DependencyFailurePolicy::release;
  ASSERT_EQ(EnqueueCode("q", released), p::Code::OK);
  client::EnqueueItem errored = released;
  errored.id = "errored";
  errored.on_dependency_failure = p::DependencyFailurePolicy::error;
  ASSERT_EQ(EnqueueCode("q", errored), p::Code::OK);
  client::EnqueueItem canceled = released;
  canceled.id = "canceled";
  canceled.on_dependency_failure = p::DependencyFailurePolicy::cancel;
  ASSERT_EQ(EnqueueCode("q", canceled), p::Code::OK);
  auto c = client_->Cancel("q", {"parent"});
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->result<p::ItemResults>()->items()->Get(0)->code(), p::Code::OK);
  EXPECT_EQ(StateOf("q", "released"), p::MessageState::pending);
  EXPECT_EQ(StateOf("q", "errored"), p::MessageState::errored);
  EXPECT_EQ(StateOf("q", "canceled"), p::MessageState::canceled);
  // The released one reads its canceled dependency's outcome.
  auto got = client_->Get("q", "released", true);
  ASSERT_TRUE(got.ok());
  const auto* deps = got->result<p::GetResult>()->message()->dependency_results();
  ASSERT_NE(deps, nullptr);
  EXPECT_EQ(deps->Get(0)->state(), p::MessageState::canceled);
}

TEST_F(Dependencies, BadDependencyInputIsATypedError) {
  Put("q", "parent");
  std::string message;
  client::EnqueueItem item;
  item.id = "x";

  item.depends_on = {"nope"};
  EXPECT_EQ(EnqueueCode("q", item, &message), p::Code::NOT_FOUND);
  EXPECT_NE(message.find("depends_on"), std::string::npos) << message;

  item.depends_on = {"x"};  // itself: it does not exist before its own enqueue
  EXPECT_EQ(EnqueueCode("q", item, &message), p::Code::NOT_FOUND) << message;

  // Malformed: an empty entry, or one that is not UTF-8.
  item.depends_on = {""};
  EXPECT_EQ(EnqueueCode("q", item, &message), p::Code::INVALID_ARGUMENT);
  EXPECT_NE(message.find("depends_on"), std::string::npos) << message;
  item.depends_on = {"q/\xff"};
  EXPECT_EQ(EnqueueCode("q", item, &message), p::Code::INVALID_ARGUMENT) << message;
  // What precedes a '/' names a queue only when it is a queue name: else the whole entry is an
  // id of this queue (docs/semantics.md), here one that does not exist.
  item.depends_on = {"bad queue!/parent"};
  EXPECT_EQ(EnqueueCode("q", item, &message), p::Code::NOT_FOUND) << message;
  EXPECT_NE(message.find("q/bad queue!/parent"), std::string::npos) << message;

  item.depends_on.assign(100'001, "parent");
  EXPECT_EQ(EnqueueCode("q", item, &message), p::Code::INVALID_ARGUMENT);
  EXPECT_NE(message.find("depends_on"), std::string::npos) << message;

  // A policy the schema does not have (a binary client may send any byte).
  fb::FlatBufferBuilder b;
  std::vector<fb::Offset<p::EnqueueItem>> items = {
      p::CreateEnqueueItem(b, b.CreateString("y"), 0, 0, 0, fb::nullopt, fb::nullopt, fb::nullopt,
                           b.CreateVectorOfStrings(std::vector<std::string>{"parent"}),
                           static_cast<p::DependencyFailurePolicy>(7))};
  auto op = p::CreateEnqueue(b, b.CreateString("q"), b.CreateVector(items));
  b.Finish(p::CreateRequest(b, client_->NextHeader().request_id, p::Durability::durable,
                            p::Operation::Enqueue, op.Union()),
           p::RequestIdentifier());
  auto r = client_->Call(b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kInvalidArgument) << r.error().ToString();
  EXPECT_NE(r.error().message.find("on_dependency_failure"), std::string::npos)
      << r.error().ToString();

  // Nothing of the refused items was kept.
  EXPECT_FALSE(client_->Get("q", "x").ok());
  EXPECT_FALSE(client_->Get("q", "y").ok());
}

TEST_F(Dependencies, WebSocketTextFramesCarryTheFieldsByName) {
  WsClient ws;
  ASSERT_FALSE(ws.Connect(server_->http_port()));
  auto call = [&](const std::string& json) {
    EXPECT_FALSE(ws.SendText(json));
    auto m = ws.Read();
    EXPECT_TRUE(m.has_value() && m->text) << json;
    return m.has_value() ? m->data : std::string();
  };
  std::string reply =
      call(R"({"request_id":1,"op_type":"Enqueue","op":{"queue":"w","items":[{"id":"p"},)"
           R"({"id":"c","depends_on":["p"],"on_dependency_failure":"error"}]}})");
  EXPECT_EQ(reply.find("\"error\""), std::string::npos) << reply;
  reply = call(R"({"request_id":2,"op_type":"Get","op":{"queue":"w","id":"c"}})");
  EXPECT_NE(reply.find(R"("state": "waiting")"), std::string::npos) << reply;
  reply = call(R"({"request_id":3,"op_type":"Dequeue","op":{"queue":"w"}})");
  const auto at = reply.find(R"("lease_token": )");
  ASSERT_NE(at, std::string::npos) << reply;
  const std::string token = reply.substr(at + 15, reply.find_first_of(",}", at) - at - 15);
  reply = call(R"({"request_id":4,"op_type":"Complete","op":{"queue":"w","items":[{"id":"p",)"
               R"("lease_token":)" +
               token + R"(,"result":[104,105]}],"next":{"include_dependency_results":true}}})");
  EXPECT_NE(reply.find(R"("dependency_results": [{"id": "w/p","state": "completed",)"
                       R"("result": [104,105]}])"),
            std::string::npos)
      << reply;
  // An unknown policy: the JSON is refused with a typed error, the connection stays.
  reply = call(R"({"request_id":5,"op_type":"Enqueue","op":{"queue":"w","items":[)"
               R"({"id":"d","depends_on":["p"],"on_dependency_failure":"retry"}]}})");
  EXPECT_NE(reply.find("INVALID_ARGUMENT"), std::string::npos) << reply;
  reply = call(R"({"request_id":6,"op_type":"Count","op":{"queue":"w"}})");
  EXPECT_NE(reply.find("CountResult"), std::string::npos) << reply;
}

TEST_F(Dependencies, TheHttpApiTakesAndShowsDependencies) {
  const uint16_t port = server_->http_port();
  HttpReply r = Post(port, "/v1/queues/h/messages", R"({"id":"parent","payload":"p"})");
  ASSERT_EQ(r.status, 200) << r.body;
  r = Post(port, "/v1/queues/h/messages",
           R"({"id":"child","depends_on":["parent"],"on_dependency_failure":"release"})");
  ASSERT_EQ(r.status, 200) << r.body;
  r = HttpGet(port, "/v1/queues/h/messages/child");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find(R"("state":"waiting")"), std::string::npos) << r.body;

  r = Post(port, "/v1/queues/h/dequeue", "{}");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto at = r.body.find(R"("lease_token":)");
  ASSERT_NE(at, std::string::npos) << r.body;
  const std::string token = r.body.substr(at + 14, r.body.find(',', at) - at - 14);
  r = Post(port, "/v1/queues/h/messages/parent/complete",
           R"({"lease_token":)" + token + R"(,"result":"done"})");
  ASSERT_EQ(r.status, 200) << r.body;

  r = Post(port, "/v1/queues/h/dequeue", R"({"include_dependency_results":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find(
                R"("dependency_results":[{"id":"h/parent","state":"completed","result":"done"}])"),
            std::string::npos)
      << r.body;
  r = HttpGet(port, "/v1/queues/h/messages/child?include_dependency_results=true");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find(R"("dependency_results":[{"id":"h/parent")"), std::string::npos) << r.body;
  r = HttpGet(port, "/v1/queues/h/messages/child");
  EXPECT_EQ(r.body.find("dependency_results"), std::string::npos) << r.body;

  // The operation route takes the schema's JSON, the policy by name.
  r = Post(
      port, "/v1/Enqueue",
      R"({"queue":"h","items":[{"id":"c2","depends_on":["child"],"on_dependency_failure":"error"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body.find("error"), std::string::npos) << r.body;
  r = Post(port, "/v1/Get", R"({"queue":"h","id":"c2","include_dependency_results":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find(R"("dependency_results": [{"id": "h/child")"), std::string::npos) << r.body;
}

TEST_F(Dependencies, TheHttpApiRefusesBadDependencyInputWithTypedErrors) {
  const uint16_t port = server_->http_port();
  HttpReply r = Post(port, "/v1/queues/h/messages",
                     R"({"id":"c","depends_on":["p"],"on_dependency_failure":"retry"})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find(R"("code":"INVALID_ARGUMENT")"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("on_dependency_failure"), std::string::npos) << r.body;

  r = Post(port, "/v1/queues/h/messages", R"({"id":"c","depends_on":"p"})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("depends_on"), std::string::npos) << r.body;

  r = Post(port, "/v1/queues/h/messages", R"({"id":"c","depends_on":["missing"]})");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_NE(r.body.find(R"("code":"NOT_FOUND")"), std::string::npos) << r.body;

  r = Post(port, "/v1/queues/h/messages", R"({"id":"c","depends_on":[""]})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("depends_on"), std::string::npos) << r.body;

  r = Post(port, "/v1/queues/h/dequeue", R"({"include_dependency_results":"yes"})");
  EXPECT_EQ(r.status, 400) << r.body;
  r = HttpGet(port, "/v1/queues/h/messages/c?include_dependency_results=maybe");
  EXPECT_EQ(r.status, 400) << r.body;

  // The schema's JSON: an unknown enum name is refused by the parser.
  r = Post(port, "/v1/Enqueue",
           R"({"queue":"h","items":[{"id":"c","on_dependency_failure":"retry"}]})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("INVALID_ARGUMENT"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace sundial::e2e
