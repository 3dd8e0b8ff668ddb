// The HTTP JSON API's routing and mapping (server/http_api.h) without a server: which requests
// become which protocol Request, how replies and typed errors become statuses and bodies, and
// the OpenAPI document derived from the schema.
#include "server/http_api.h"

#include <flatbuffers/flexbuffers.h>
#include <flatbuffers/idl.h>
#include <gtest/gtest.h>

#include "protocol/sundial_generated.h"
#include "server/dispatch.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

const p::Request& RequestOf(const HttpApiRoute& route) {
  return *fb::GetRoot<p::Request>(route.request.data());
}

std::string_view Bytes(const fb::Vector<uint8_t>* v) {
  return {reinterpret_cast<const char*>(v->data()), v->size()};
}

// Parses `json` as any JSON value (FlatBuffers' parser into FlexBuffers); false if malformed.
bool ParseJson(const std::string& json, flexbuffers::Builder* out, std::string* error) {
  fb::IDLOptions o;
  o.strict_json = true;
  fb::Parser parser(o);
  const bool ok = parser.ParseFlexBuffer(json.c_str(), nullptr, out);
  *error = parser.error_;
  return ok;
}

class HttpApiTest : public ::testing::Test {
 protected:
  HttpApiRoute Route(std::string_view method, std::string_view target, std::string_view body = "",
                     std::string_view authorization = "", std::string_view token = "") {
    return api_.Route(
        {.method = method, .target = target, .authorization = authorization, .body = body}, token);
  }
  HttpApi api_;
};

TEST(HttpApiStatic, OnlyV1PathsBelongToTheApi) {
  EXPECT_TRUE(HttpApi::Handles("/v1"));
  EXPECT_TRUE(HttpApi::Handles("/v1/Enqueue"));
  EXPECT_TRUE(HttpApi::Handles("/v1/queues/q?x=1"));
  EXPECT_FALSE(HttpApi::Handles("/v10"));
  EXPECT_FALSE(HttpApi::Handles("/metrics"));
  EXPECT_FALSE(HttpApi::Handles("/"));
}

TEST(HttpApiStatic, TypedErrorsMapToHttpStatuses) {
  EXPECT_EQ(StatusOf(Code::kOk), 200);
  EXPECT_EQ(StatusOf(Code::kInvalidArgument), 400);
  EXPECT_EQ(StatusOf(Code::kUnauthenticated), 401);
  EXPECT_EQ(StatusOf(Code::kNotFound), 404);
  EXPECT_EQ(StatusOf(Code::kAlreadyExists), 409);
  EXPECT_EQ(StatusOf(Code::kFailedPrecondition), 412);
  EXPECT_EQ(StatusOf(Code::kResourceExhausted), 429);
  EXPECT_EQ(StatusOf(Code::kUnavailable), 503);
  EXPECT_EQ(StatusOf(Code::kNotPrimary), 503);
  EXPECT_EQ(StatusOf(Code::kInternal), 500);
}

TEST_F(HttpApiTest, UnknownRouteIsA404WithTheTypedErrorBody) {
  for (const char* target : {"/v1", "/v1/", "/v1/NoSuchOp", "/v1/queues", "/v1/queues/q/x",
                             "/v1/queues/q/messages/m/bogus", "/v1/things/q"}) {
    const HttpApiRoute r = Route("POST", target);
    EXPECT_FALSE(r.dispatch) << target;
    EXPECT_EQ(r.response.status, 404) << target;
    EXPECT_NE(r.response.body.find(R"("code":"NOT_FOUND")"), std::string::npos) << target;
  }
}

TEST_F(HttpApiTest, WrongMethodIsA405NamingTheAllowedOne) {
  HttpApiRoute r = Route("GET", "/v1/Enqueue");
  EXPECT_EQ(r.response.status, 405);
  EXPECT_EQ(r.response.allow, "POST");
  r = Route("POST", "/v1/queues/q");
  EXPECT_EQ(r.response.status, 405);
  EXPECT_EQ(r.response.allow, "GET");
  r = Route("DELETE", "/v1/queues/q/messages/m");
  EXPECT_EQ(r.response.status, 405);
  EXPECT_EQ(r.response.allow, "GET");
  r = Route("GET", "/v1/queues/q/dequeue");
  EXPECT_EQ(r.response.status, 405);
  EXPECT_EQ(r.response.allow, "POST");
}

TEST_F(HttpApiTest, WithATokenEveryRouteButTheDocumentNeedsTheBearerHeader) {
  HttpApiRoute r = Route("POST", "/v1/Health", "{}", "", "secret");
  EXPECT_EQ(r.response.status, 401);
  EXPECT_TRUE(r.response.www_authenticate);
  EXPECT_NE(r.response.body.find("UNAUTHENTICATED"), std::string::npos);
  EXPECT_EQ(Route("GET", "/v1/queues/q", "", "Bearer wrong", "secret").response.status, 401);
  EXPECT_EQ(Route("GET", "/v1/queues/q", "", "secret", "secret").response.status, 401);
  EXPECT_TRUE(Route("POST", "/v1/Health", "{}", "Bearer secret", "secret").dispatch);
  EXPECT_EQ(Route("GET", "/v1/openapi.json", "", "", "secret").response.status, 200);
}

TEST_F(HttpApiTest, OperationRouteTakesTheOpsTableOrAWholeRequest) {
  HttpApiRoute r = Route("POST", "/v1/Enqueue", R"({"queue":"q","items":[{"id":"a"}]})");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  EXPECT_EQ(r.shape, HttpReplyShape::kResponse);
  EXPECT_EQ(RequestOf(r).op_type(), p::Operation::Enqueue);
  EXPECT_EQ(RequestOf(r).op_as_Enqueue()->queue()->str(), "q");

  r = Route("POST", "/v1/Enqueue",
            R"({"request_id":9,"durability":"relaxed","op_type":"Enqueue",)"
            R"("op":{"queue":"q","items":[{"id":"a"}]}})");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  EXPECT_EQ(RequestOf(r).request_id(), 9u);
  EXPECT_EQ(RequestOf(r).durability(), p::Durability::relaxed);

  r = Route("POST", "/v1/ListQueues");  // no body: an empty table
  ASSERT_TRUE(r.dispatch) << r.response.body;
  EXPECT_EQ(RequestOf(r).op_type(), p::Operation::ListQueues);
}

TEST_F(HttpApiTest, OperationRouteRefusesAnotherOperationsRequest) {
  const HttpApiRoute r = Route("POST", "/v1/Dequeue", R"({"op_type":"Health","op":{}})");
  EXPECT_FALSE(r.dispatch);
  EXPECT_EQ(r.response.status, 400);
}

TEST_F(HttpApiTest, MalformedJsonIsA400NamingTheProblem) {
  for (const char* body : {"{", "[1]", R"({"queue":1})", R"({"nope":true})", "null"}) {
    const HttpApiRoute r = Route("POST", "/v1/Get", body);
    EXPECT_FALSE(r.dispatch) << body;
    EXPECT_EQ(r.response.status, 400) << body;
    EXPECT_NE(r.response.body.find("INVALID_ARGUMENT"), std::string::npos) << body;
  }
  const std::string with_nul("{\"queue\":\"q\0\"}", 14);
  EXPECT_EQ(Route("POST", "/v1/Get", with_nul).response.status, 400);
  EXPECT_EQ(Route("POST", "/v1/queues/q/messages", with_nul).response.status, 400);
}

TEST_F(HttpApiTest, WebSocketOnlyOperationsAreNotRoutes) {
  EXPECT_EQ(Route("POST", "/v1/Subscribe", "{}").response.status, 404);
  EXPECT_EQ(Route("POST", "/v1/Unsubscribe", "{}").response.status, 404);
}

TEST_F(HttpApiTest, RestEnqueueTakesTextOrBase64Payloads) {
  HttpApiRoute r = Route("POST", "/v1/queues/emails/messages",
                         R"({"id":"m1","payload":"héllo","priority":-3,)"
                         R"("metadata":{"tenant":"a"},"delay_ms":500})");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  EXPECT_EQ(r.shape, HttpReplyShape::kEnqueueOne);
  const p::Enqueue* e = RequestOf(r).op_as_Enqueue();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->queue()->str(), "emails");
  ASSERT_EQ(e->items()->size(), 1u);
  const p::EnqueueItem* item = e->items()->Get(0);
  EXPECT_EQ(item->id()->str(), "m1");
  EXPECT_EQ(Bytes(item->payload()), "héllo");
  EXPECT_EQ(item->priority(), -3);
  EXPECT_EQ(item->metadata()->Get(0)->key()->str(), "tenant");
  EXPECT_EQ(item->delay_ms(), 500);

  r = Route("POST", "/v1/queues/emails/messages", R"({"payload":{"base64":"AP8="}})");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  EXPECT_EQ(Bytes(RequestOf(r).op_as_Enqueue()->items()->Get(0)->payload()),
            std::string("\0\xff", 2));
  EXPECT_FALSE(RequestOf(r).op_as_Enqueue()->items()->Get(0)->delay_ms().has_value());
}

TEST_F(HttpApiTest, RestBodiesRefuseUnknownMembersAndWrongTypes) {
  for (const char* body :
       {R"({"payload":"x","colour":"red"})", R"({"payload":7})", R"({"payload":{"base64":"*"}})",
        R"({"priority":"high"})", R"({"metadata":{"k":1}})", R"([])", R"("text")"}) {
    const HttpApiRoute r = Route("POST", "/v1/queues/q/messages", body);
    EXPECT_FALSE(r.dispatch) << body;
    EXPECT_EQ(r.response.status, 400) << body;
  }
}

TEST_F(HttpApiTest, PathSegmentsArePercentDecoded) {
  const HttpApiRoute r = Route("GET", "/v1/queues/a%2Fb/messages/id%20x");
  ASSERT_TRUE(r.dispatch);
  EXPECT_EQ(RequestOf(r).op_as_Get()->queue()->str(), "a/b");
  EXPECT_EQ(RequestOf(r).op_as_Get()->id()->str(), "id x");
  EXPECT_EQ(Route("GET", "/v1/queues/a%zz").response.status, 400);
  EXPECT_EQ(Route("GET", "/v1/queues/a%2").response.status, 400);
}

TEST_F(HttpApiTest, RestItemRoutesTakeTheLeaseTokenAsNumberOrString) {
  HttpApiRoute r = Route("POST", "/v1/queues/q/messages/m/complete",
                         R"({"lease_token":"18446744073709551615","result":"done"})");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  const p::CompleteItem* c = RequestOf(r).op_as_Complete()->items()->Get(0);
  EXPECT_EQ(c->lease_token(), UINT64_MAX);
  EXPECT_EQ(Bytes(c->result()), "done");

  r = Route("POST", "/v1/queues/q/messages/m/fail",
            R"({"lease_token":12,"error":"boom","retry_delay_ms":0})");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  EXPECT_EQ(RequestOf(r).op_as_Fail()->lease_token(), 12u);
  EXPECT_EQ(RequestOf(r).op_as_Fail()->retry_delay_ms(), 0);

  r = Route("POST", "/v1/queues/q/messages/m/extend", R"({"lease_token":12,"lease_ms":9000})");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  EXPECT_EQ(RequestOf(r).op_as_Extend()->lease_ms(), 9000);

  EXPECT_EQ(
      Route("POST", "/v1/queues/q/messages/m/extend", R"({"lease_token":-1})").response.status,
      400);
  EXPECT_EQ(
      Route("POST", "/v1/queues/q/messages/m/extend", R"({"lease_token":"1x"})").response.status,
      400);
}

TEST_F(HttpApiTest, RestDequeueBuildsALongPoll) {
  const HttpApiRoute r = Route("POST", "/v1/queues/q/dequeue",
                               R"({"max":10,"lease_ms":100,"filter":{"k":"v"},"wait_ms":5000})");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  EXPECT_EQ(r.shape, HttpReplyShape::kMessages);
  const p::Dequeue* d = RequestOf(r).op_as_Dequeue();
  EXPECT_EQ(d->max(), 10u);
  EXPECT_EQ(d->lease_ms(), 100);
  EXPECT_EQ(d->wait_ms(), 5000u);
  EXPECT_EQ(d->filter()->size(), 1u);
}

TEST_F(HttpApiTest, RestFormsCarryDependencies) {
  HttpApiRoute r = Route("POST", "/v1/queues/q/messages",
                         R"({"id":"c","depends_on":["p","other/x"],)"
                         R"("on_dependency_failure":"error"})");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  const p::EnqueueItem* item = RequestOf(r).op_as_Enqueue()->items()->Get(0);
  ASSERT_EQ(item->depends_on()->size(), 2u);
  EXPECT_EQ(item->depends_on()->Get(1)->str(), "other/x");
  EXPECT_EQ(item->on_dependency_failure(), p::DependencyFailurePolicy::error);
  r = Route("POST", "/v1/queues/q/messages", R"({"id":"c"})");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  EXPECT_EQ(RequestOf(r).op_as_Enqueue()->items()->Get(0)->depends_on(), nullptr);

  r = Route("POST", "/v1/queues/q/dequeue", R"({"include_dependency_results":true})");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  EXPECT_TRUE(RequestOf(r).op_as_Dequeue()->include_dependency_results());
  r = Route("GET", "/v1/queues/q/messages/c?include_dependency_results=true");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  EXPECT_TRUE(RequestOf(r).op_as_Get()->include_dependency_results());
  r = Route("GET", "/v1/queues/q/messages/c?x=1&include_dependency_results=0");
  ASSERT_TRUE(r.dispatch) << r.response.body;
  EXPECT_FALSE(RequestOf(r).op_as_Get()->include_dependency_results());

  for (const char* body :
       {R"({"depends_on":"p"})", R"({"depends_on":[1]})", R"({"depends_on":{"a":"b"}})",
        R"({"on_dependency_failure":"retry"})", R"({"on_dependency_failure":1})"}) {
    const HttpApiRoute bad = Route("POST", "/v1/queues/q/messages", body);
    EXPECT_FALSE(bad.dispatch) << body;
    EXPECT_EQ(bad.response.status, 400) << body;
  }
  EXPECT_EQ(
      Route("POST", "/v1/queues/q/dequeue", R"({"include_dependency_results":1})").response.status,
      400);
  EXPECT_EQ(Route("GET", "/v1/queues/q/messages/c?include_dependency_results=yes").response.status,
            400);
}

TEST_F(HttpApiTest, RestMessagesShowTheirDependencyResults) {
  fb::FlatBufferBuilder b;
  const std::vector<uint8_t> result{'o', 'k'};
  auto error = p::CreateErrorDirect(b, p::Code::NOT_FOUND, "id: no such message");
  std::vector<fb::Offset<p::WaitItem>> deps{
      p::CreateWaitItemDirect(b, "q/a", p::MessageState::completed, &result),
      p::CreateWaitItemDirect(b, "q/b", p::MessageState::invisible, nullptr, nullptr, error)};
  auto deps_vector = b.CreateVector(deps);
  auto id = b.CreateString("c");
  p::MessageBuilder m(b);
  m.add_id(id);
  m.add_dependency_results(deps_vector);
  const auto message = m.Finish();
  auto get = p::CreateGetResult(b, message);
  b.Finish(p::CreateServerMessage(
      b, p::ServerBody::Response,
      p::CreateResponse(b, 1, 0, 0, p::Result::GetResult, get.Union()).Union()));
  const std::string reply(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
  const HttpApiResponse r = api_.MapReply(HttpReplyShape::kMessage, reply);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(
      r.body.find(R"("dependency_results":[{"id":"q/a","state":"completed","result":"ok"},)"
                  R"({"id":"q/b","error":{"code":"NOT_FOUND","message":"id: no such message"}}])"),
      std::string::npos)
      << r.body;
}

TEST_F(HttpApiTest, EveryTypedErrorOfAReplyMapsToItsStatusWithTheErrorAsBody) {
  for (int c = 1; c <= 9; ++c) {
    const Code code = static_cast<Code>(c);
    const std::string reply = ErrorResponse(0, code, "why");
    for (HttpReplyShape shape : {HttpReplyShape::kResponse, HttpReplyShape::kMessages,
                                 HttpReplyShape::kEnqueueOne, HttpReplyShape::kMessage}) {
      const HttpApiResponse r = api_.MapReply(shape, reply);
      EXPECT_EQ(r.status, StatusOf(code));
      EXPECT_NE(r.body.find(std::string(CodeName(code))), std::string::npos) << r.body;
      EXPECT_NE(r.body.find("why"), std::string::npos) << r.body;
    }
  }
}

TEST_F(HttpApiTest, AnEmptyDequeueIsAnEmptyList) {
  const HttpApiResponse r = api_.MapReply(HttpReplyShape::kMessages, EmptyDequeueResponse(0));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"messages":[]})");
}

TEST_F(HttpApiTest, AReplyThatIsNotAResponseIsA500) {
  EXPECT_EQ(api_.MapReply(HttpReplyShape::kResponse, "garbage").status, 500);
  EXPECT_EQ(api_.MapReply(HttpReplyShape::kMessage, EmptyDequeueResponse(0)).status, 500)
      << "a route given another operation's result";
}

TEST_F(HttpApiTest, OpenApiDocumentIsJsonOf31WithEveryHttpOperation) {
  const HttpApiRoute r = Route("GET", "/v1/openapi.json");
  ASSERT_EQ(r.response.status, 200);
  const std::string& doc = r.response.body;
  flexbuffers::Builder flex;
  std::string error;
  ASSERT_TRUE(ParseJson(doc, &flex, &error)) << error;
  const auto root = flexbuffers::GetRoot(flex.GetBuffer()).AsMap();
  EXPECT_EQ(root["openapi"].AsString().str().rfind("3.1.", 0), 0u);
  const auto paths = root["paths"].AsMap();
  const auto schemas = root["components"].AsMap()["schemas"].AsMap();
  for (const OperationRow& row : OperationTable()) {
    const bool http = (row.transports & kOverHttp) != 0;
    EXPECT_EQ(paths["/v1/" + std::string(row.name)].IsMap(), http) << row.name;
    EXPECT_TRUE(schemas[std::string(row.name).c_str()].IsMap()) << row.name;
  }
  for (const char* rest :
       {"/v1/queues/{q}", "/v1/queues/{q}/messages", "/v1/queues/{q}/dequeue",
        "/v1/queues/{q}/messages/{id}", "/v1/queues/{q}/messages/{id}/complete",
        "/v1/queues/{q}/messages/{id}/fail", "/v1/queues/{q}/messages/{id}/extend"}) {
    EXPECT_TRUE(paths[rest].IsMap()) << rest;
  }
  // Generated, not hand kept: a field of the schema shows in its table's schema.
  const auto dequeue = schemas["Dequeue"].AsMap()["properties"].AsMap();
  EXPECT_TRUE(dequeue["wait_ms"].IsMap());
  EXPECT_TRUE(schemas["Request"].AsMap()["properties"].AsMap()["op_type"].IsMap());
  // Every $ref resolves to a schema of the document.
  size_t at = 0;
  const std::string prefix = "\"$ref\":\"#/components/schemas/";
  while ((at = doc.find(prefix, at)) != std::string::npos) {
    at += prefix.size();
    const std::string name = doc.substr(at, doc.find('"', at) - at);
    EXPECT_TRUE(schemas[name.c_str()].IsMap()) << name;
  }
}

}  // namespace
}  // namespace sundial::server
