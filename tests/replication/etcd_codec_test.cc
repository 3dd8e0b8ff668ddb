// What needs no etcd: the --etcd list, prefix ranges, base64, the gateway's JSON forms, the
// watch queue's bound.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include "replication/etcd_client.h"
#include "replication/etcd_json.h"
#include "replication/etcd_watch.h"

namespace sundial::replication {
namespace {

namespace bj = boost::json;

TEST(ParseEtcdEndpoints, AcceptsUrlsHostPortsAndIpv6) {
  auto parsed = ParseEtcdEndpoints("http://10.0.0.1:2379,etcd-b:12379,[::1]:3000,etcd-c");
  ASSERT_TRUE(parsed.ok()) << parsed.error().ToString();
  ASSERT_EQ(parsed->size(), 4u);
  EXPECT_EQ((*parsed)[0], (EtcdEndpoint{"10.0.0.1", 2379}));
  EXPECT_EQ((*parsed)[1], (EtcdEndpoint{"etcd-b", 12379}));
  EXPECT_EQ((*parsed)[2], (EtcdEndpoint{"::1", 3000}));
  EXPECT_EQ((*parsed)[3], (EtcdEndpoint{"etcd-c", 2379}));
  EXPECT_EQ((*parsed)[2].url(), "http://[::1]:3000");
  EXPECT_EQ((*parsed)[0].url(), "http://10.0.0.1:2379");
}

TEST(ParseEtcdEndpoints, RefusesWhatItCannotUseNamingTheItem) {
  for (const char* bad : {"", "a:1,", "https://a:2379", "http://a:2379/v3", "a:0", "a:99999", "a:x",
                          "::1:2379", "[::1", ":2379", "a:"}) {
    auto parsed = ParseEtcdEndpoints(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.error().code, Code::kInvalidArgument) << bad;
    EXPECT_NE(parsed.error().message.find("etcd endpoint"), std::string::npos) << bad;
  }
}

TEST(PrefixRangeEnd, IncrementsTheLastByteBelow0xff) {
  EXPECT_EQ(PrefixRangeEnd("/sundial/c/members/"), "/sundial/c/members0");
  EXPECT_EQ(PrefixRangeEnd("a\xff"), "b");
  EXPECT_EQ(PrefixRangeEnd("\xff\xff"), std::string(1, '\0'));
  EXPECT_EQ(PrefixRangeEnd(""), std::string(1, '\0'));
}

TEST(Base64, RoundTripsEveryLengthAndByte) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  for (size_t n = 0; n <= bytes.size(); n += (n < 8 ? 1 : 37)) {
    const std::string in = bytes.substr(0, n);
    const auto out = json::Base64Decode(json::Base64Encode(in));
    ASSERT_TRUE(out.has_value()) << n;
    EXPECT_EQ(*out, in) << n;
  }
  EXPECT_EQ(json::Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(json::Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(json::Base64Encode("f"), "Zg==");
}

TEST(Base64, RefusesBadInput) {
  for (const char* bad : {"Zm9", "Zm9v!", "Z===", "Zm=v", "=Zm9", "Zm9v\n", "Zg=a"}) {
    EXPECT_FALSE(json::Base64Decode(bad).has_value()) << bad;
  }
}

TEST(GatewayJson, Int64sComeAsStringsOrNumbersAndAbsentIsZero) {
  const bj::object o = bj::parse(R"({"a":"42","b":7,"c":"x","d":1.5,"e":"-3"})").as_object();
  EXPECT_EQ(std::get<int64_t>(json::Int64Field(o, "a")), 42);
  EXPECT_EQ(std::get<int64_t>(json::Int64Field(o, "b")), 7);
  EXPECT_EQ(std::get<int64_t>(json::Int64Field(o, "e")), -3);
  EXPECT_EQ(std::get<int64_t>(json::Int64Field(o, "missing")), 0);
  EXPECT_TRUE(std::holds_alternative<json::DecodeError>(json::Int64Field(o, "c")));
  EXPECT_TRUE(std::holds_alternative<json::DecodeError>(json::Int64Field(o, "d")));
}

TEST(GatewayJson, HeaderIdsAreUnsigned64Bit) {
  const bj::object o =
      bj::parse(
          R"({"header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437",)"
          R"("revision":"12","raft_term":"2"}})")
          .as_object();
  auto header = json::DecodeHeader(o);
  ASSERT_TRUE(std::holds_alternative<ResponseHeader>(header));
  EXPECT_EQ(std::get<ResponseHeader>(header).cluster_id, 14841639068965178418u);
  EXPECT_EQ(std::get<ResponseHeader>(header).member_id, 10276657743932975437u);
  EXPECT_EQ(std::get<ResponseHeader>(header).revision, 12);
}

TEST(GatewayJson, FindsBothErrorShapes) {
  auto unary = json::FindError(
      bj::parse(R"({"error":"etcdserver: requested lease not found","code":5})").as_object());
  ASSERT_TRUE(unary.has_value());
  EXPECT_EQ(unary->grpc_code, 5);
  EXPECT_EQ(json::CodeOfGrpc(unary->grpc_code), Code::kNotFound);
  auto streamed = json::FindError(
      bj::parse(R"({"error":{"grpc_code":14,"http_code":503,"message":"no leader"}})").as_object());
  ASSERT_TRUE(streamed.has_value());
  EXPECT_EQ(streamed->message, "no leader");
  EXPECT_TRUE(json::GrpcCodeTriesNextEndpoint(streamed->grpc_code));
  EXPECT_FALSE(json::FindError(bj::parse(R"({"header":{}})").as_object()).has_value());
}

TEST(GatewayJson, TxnEncodesCompareTargetsAndOps) {
  TxnRequest request;
  request.compare = {Compare::KeyMissing("k"), Compare::ModRevisionIs("s", 9),
                     Compare::ValueIs("v", "me")};
  request.success = {TxnOp::Put("k", "x", 77), TxnOp::DeletePrefix("p/")};
  request.failure = {TxnOp::Get("k")};
  const bj::object o = json::EncodeTxn(request);
  const auto& compare = o.at("compare").as_array();
  ASSERT_EQ(compare.size(), 3u);
  EXPECT_EQ(compare[0].at("target"), "CREATE");
  EXPECT_EQ(compare[0].at("create_revision"), "0");
  EXPECT_EQ(compare[1].at("target"), "MOD");
  EXPECT_EQ(compare[1].at("mod_revision"), "9");
  EXPECT_EQ(compare[2].at("target"), "VALUE");
  EXPECT_EQ(compare[2].at("value"), "bWU=");
  const auto& success = o.at("success").as_array();
  EXPECT_EQ(success[0].at("request_put").at("lease"), "77");
  EXPECT_EQ(success[1].at("request_delete_range").at("range_end"),
            bj::value(json::Base64Encode("p0")));
  EXPECT_TRUE(o.at("failure").as_array()[0].as_object().contains("request_range"));
}

WatchEvent Put(int64_t revision) {
  WatchEvent e;
  e.kv.key = "k";
  e.kv.mod_revision = revision;
  return e;
}

TEST(WatchQueue, DeliversInOrderThenTheBreakAndNothingAfter) {
  WatchQueue queue;
  WatchCallbacks cb = queue.callbacks();
  cb.on_events({Put(5)});
  cb.on_events({Put(6), Put(6)});
  cb.on_broken(WatchBreak{{Code::kUnavailable, "gone", false}, 7, 0});
  cb.on_events({Put(8)});  // after the break: not taken
  const auto soon = EtcdClock::now() + std::chrono::seconds(5);
  auto a = queue.Pop(soon);
  auto b = queue.Pop(soon);
  auto c = queue.Pop(soon);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->events.at(0).kv.mod_revision, 5);
  EXPECT_EQ(b->events.size(), 2u);
  ASSERT_TRUE(c->broken.has_value());
  EXPECT_EQ(c->broken->resume_revision, 7);
  EXPECT_FALSE(queue.Pop(EtcdClock::now()).has_value());
}

TEST(WatchQueue, FullQueueEndsWithResourceExhaustedFromTheFirstDroppedRevision) {
  WatchQueue queue(2);
  WatchCallbacks cb = queue.callbacks();
  cb.on_events({Put(1)});
  cb.on_events({Put(2)});
  cb.on_events({Put(3)});  // no room: the queue ends here
  cb.on_events({Put(4)});
  const auto soon = EtcdClock::now() + std::chrono::seconds(5);
  EXPECT_EQ(queue.Pop(soon)->events.at(0).kv.mod_revision, 1);
  EXPECT_EQ(queue.Pop(soon)->events.at(0).kv.mod_revision, 2);
  auto end = queue.Pop(soon);
  ASSERT_TRUE(end && end->broken);
  EXPECT_EQ(end->broken->error.code, Code::kResourceExhausted);
  EXPECT_EQ(end->broken->resume_revision, 3);
  EXPECT_FALSE(queue.Pop(EtcdClock::now()).has_value());
}

TEST(EtcdError, StatusKeepsTheCodeAndToStringTheMessage) {
  EtcdError e{Code::kUnavailable, "etcd http://127.0.0.1:1/v3/kv/range: connect: refused", false};
  EXPECT_EQ(e.status().code(), Code::kUnavailable);
  EXPECT_EQ(e.ToString(), "UNAVAILABLE: etcd http://127.0.0.1:1/v3/kv/range: connect: refused");
}

}  // namespace
}  // namespace sundial::replication
