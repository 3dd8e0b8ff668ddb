// The blocking Client against a scripted fake server (tests/client/fake_server.h): responses
// matched by request_id in any order, events skipped, server errors typed with their message,
// protocol violations (garbage, empty frames, oversized lengths) failing the call with INTERNAL
// and closing the connection, the server's request_id 0 refusal, Auth, deadlines, and a
// connection refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/client.h"
#include "tests/client/fake_server.h"

namespace sundial::client {
namespace {

namespace p = protocol;
using testing::ClosedPort;
using testing::ErrorResponse;
using testing::FakeConnection;
using testing::FakeServer;
using testing::HealthResponse;

std::unique_ptr<Client> ConnectTo(const FakeServer& server, std::string token = {},
                                  int timeout_ms = kDefaultTimeoutMs) {
  auto c = Client::Connect({"127.0.0.1", server.port()}, std::move(token), timeout_ms);
  EXPECT_TRUE(c.ok()) << c.error().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST(Client, ResponsesOutOfOrderAreMatchedByRequestId) {
  FakeServer server([](FakeConnection& conn) {
    std::vector<uint64_t> ids;
    for (int i = 0; i < 3; ++i) {
      const p::Request* r = conn.ReadRequest();
      ASSERT_NE(r, nullptr);
      ids.push_back(r->request_id());
    }
    // Answer in reverse order, with an event in between: the blocking client skips it.
    conn.SendMessage(ErrorResponse(ids[2], p::Code::NOT_FOUND, "queue: no such queue c"));
    conn.SendMessage(testing::MessageEvent("a", "m1"));
    conn.SendMessage(HealthResponse(ids[0]));
    conn.SendMessage(ErrorResponse(ids[1], p::Code::ALREADY_EXISTS, "id: taken"));
    conn.WaitForClose();
  });
  auto client = ConnectTo(server);
  ASSERT_NE(client, nullptr);
  std::vector<std::string> requests{BuildHealth(client->NextHeader()),
                                    BuildGetQueue(client->NextHeader(), "b"),
                                    BuildGetQueue(client->NextHeader(), "c")};
  std::vector<Result<Reply>> results = client->CallAll(requests);
  ASSERT_EQ(results.size(), 3u);
  ASSERT_TRUE(results[0].ok()) << results[0].error().ToString();
  EXPECT_EQ(results[0]->result_type(), p::Result::HealthResult);
  EXPECT_TRUE(results[0]->result<p::HealthResult>()->ready());
  ASSERT_FALSE(results[1].ok());
  EXPECT_EQ(results[1].error().code, Code::kAlreadyExists);
  EXPECT_EQ(results[1].error().message, "id: taken");
  ASSERT_FALSE(results[2].ok());
  EXPECT_EQ(results[2].error().code, Code::kNotFound);
  EXPECT_EQ(results[2].error().origin, Error::Origin::kServer);
  EXPECT_TRUE(client->connected());
  client->Close();
}

TEST(Client, RequestIdsIncreaseAndDurabilityIsCarried) {
  FakeServer server([](FakeConnection& conn) {
    const p::Request* first = conn.ReadRequest();
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->request_id(), 1u);
    EXPECT_EQ(first->durability(), p::Durability::durable);
    conn.SendMessage(HealthResponse(1));
    const p::Request* second = conn.ReadRequest();
    ASSERT_NE(second, nullptr);
    EXPECT_EQ(second->request_id(), 2u);
    EXPECT_EQ(second->durability(), p::Durability::relaxed);
    ASSERT_EQ(second->op_type(), p::Operation::Enqueue);
    EXPECT_EQ(second->op_as_Enqueue()->queue()->str(), "jobs");
    conn.SendMessage(ErrorResponse(2, p::Code::RESOURCE_EXHAUSTED, "max_depth: queue is full"));
    conn.WaitForClose();
  });
  auto client = ConnectTo(server);
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->Health().ok());
  client->set_durability(Durability::relaxed);
  auto r = client->Enqueue("jobs", {EnqueueItem{}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kResourceExhausted);
  EXPECT_EQ(r.error().ToString(), "RESOURCE_EXHAUSTED: max_depth: queue is full");
}

TEST(Client, GarbageFrameFailsTheCallWithInternalAndClosesTheConnection) {
  FakeServer server([](FakeConnection& conn) {
    ASSERT_NE(conn.ReadRequest(), nullptr);
    conn.SendMessage("this is not a flatbuffer at all");
    EXPECT_TRUE(conn.WaitForClose());
  });
  auto client = ConnectTo(server);
  ASSERT_NE(client, nullptr);
  auto r = client->Health();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kInternal);
  EXPECT_EQ(r.error().origin, Error::Origin::kConnection);
  EXPECT_NE(r.error().message.find("verification"), std::string::npos) << r.error().message;
  EXPECT_FALSE(client->connected());
  auto again = client->Health();
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(again.error().unreachable()) << again.error().ToString();
  server.Join();
}

TEST(Client, EmptyFrameIsAProtocolViolation) {
  FakeServer server([](FakeConnection& conn) {
    ASSERT_NE(conn.ReadRequest(), nullptr);
    conn.SendRaw(std::string("\0\0\0\0", 4));
    conn.WaitForClose();
  });
  auto client = ConnectTo(server);
  ASSERT_NE(client, nullptr);
  auto r = client->Health();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kInternal);
  EXPECT_NE(r.error().message.find("empty frame"), std::string::npos) << r.error().message;
}

TEST(Client, OversizedLengthIsRefusedFromTheHeader) {
  FakeServer server([](FakeConnection& conn) {
    ASSERT_NE(conn.ReadRequest(), nullptr);
    conn.SendRaw("\xff\xff\xff\xff");  // 4 GiB - 1, and nothing after it
    conn.WaitForClose();
  });
  auto client = ConnectTo(server);
  ASSERT_NE(client, nullptr);
  auto r = client->Health();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kInternal);
  EXPECT_NE(r.error().message.find("frame above"), std::string::npos) << r.error().message;
}

TEST(Client, ResponseWithoutRequestIdFailsEveryCallInFlight) {
  FakeServer server([](FakeConnection& conn) {
    ASSERT_NE(conn.ReadRequest(), nullptr);
    ASSERT_NE(conn.ReadRequest(), nullptr);
    conn.SendMessage(
        ErrorResponse(0, p::Code::INVALID_ARGUMENT, "frame: not a valid Request FlatBuffer"));
    conn.Close();
  });
  auto client = ConnectTo(server);
  ASSERT_NE(client, nullptr);
  auto results =
      client->CallAll({BuildHealth(client->NextHeader()), BuildStats(client->NextHeader())});
  for (const auto& r : results) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Code::kInvalidArgument);
    EXPECT_EQ(r.error().message, "frame: not a valid Request FlatBuffer");
    EXPECT_EQ(r.error().origin, Error::Origin::kServer);
  }
  EXPECT_FALSE(client->connected());
}

TEST(Client, ErrorThenCloseOnTheFirstRequestIsReportedThenUnavailable) {
  FakeServer server([](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    conn.SendMessage(ErrorResponse(r->request_id(), p::Code::UNAUTHENTICATED, "auth: needed"));
    conn.Close();
  });
  auto client = ConnectTo(server);
  ASSERT_NE(client, nullptr);
  auto first = client->Health();
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.error().code, Code::kUnauthenticated);
  server.Join();
  auto second = client->Health();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, Code::kUnavailable);
  EXPECT_TRUE(second.error().unreachable());
}

TEST(Client, TokenIsSentAsAuthBeforeAnythingElse) {
  FakeServer server([](FakeConnection& conn) {
    const p::Request* auth = conn.ReadRequest();
    ASSERT_NE(auth, nullptr);
    ASSERT_EQ(auth->op_type(), p::Operation::Auth);
    EXPECT_EQ(auth->op_as_Auth()->token()->str(), "s3cret");
    conn.SendMessage(testing::OkResponse(auth->request_id(), [](flatbuffers::FlatBufferBuilder& b) {
      return std::pair{p::Result::AuthResult, p::CreateAuthResult(b).Union()};
    }));
    const p::Request* next = conn.ReadRequest();
    ASSERT_NE(next, nullptr);
    EXPECT_EQ(next->op_type(), p::Operation::Health);
    conn.SendMessage(HealthResponse(next->request_id()));
    conn.WaitForClose();
  });
  auto client = ConnectTo(server, "s3cret");
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->Health().ok());
}

TEST(Client, RefusedTokenIsUnauthenticated) {
  // As sundiald refuses: an error with request_id 0, then a close.
  FakeServer server([](FakeConnection& conn) {
    ASSERT_NE(conn.ReadRequest(), nullptr);
    conn.SendMessage(ErrorResponse(0, p::Code::UNAUTHENTICATED, "auth: wrong token"));
    conn.Close();
  });
  auto c = Client::Connect({"127.0.0.1", server.port()}, "wrong");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Code::kUnauthenticated);
  EXPECT_EQ(c.error().message, "auth: wrong token");
}

TEST(Client, NothingListeningIsUnavailable) {
  const uint16_t port = ClosedPort();
  auto c = Client::Connect({"127.0.0.1", port}, "", 2000);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Code::kUnavailable);
  EXPECT_TRUE(c.error().unreachable());
  EXPECT_NE(c.error().message.find(testing::LoopbackAddr(port)), std::string::npos)
      << c.error().message;
}

TEST(Client, UnansweredCallTimesOutAndClosesTheConnection) {
  FakeServer server([](FakeConnection& conn) {
    ASSERT_NE(conn.ReadRequest(), nullptr);
    EXPECT_TRUE(conn.WaitForClose());  // never answers; the client gives up and closes
  });
  auto client = ConnectTo(server, "", 100);
  ASSERT_NE(client, nullptr);
  auto r = client->Health();
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().unreachable()) << r.error().ToString();
  EXPECT_NE(r.error().message.find("100 ms"), std::string::npos) << r.error().message;
  EXPECT_FALSE(client->connected());
  server.Join();
}

TEST(Client, LongPollDeadlineIncludesTheRequestsWaitMs) {
  FakeServer server([](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->op_type(), p::Operation::Dequeue);
    EXPECT_EQ(r->op_as_Dequeue()->wait_ms(), 5000u);
    const uint64_t id = r->request_id();
    // Answer only once the client's own timeout (50 ms) has long passed: the client must still
    // be waiting, since a long poll may take wait_ms.
    pollfd none{-1, 0, 0};
    ::poll(&none, 0, 300);
    conn.SendMessage(testing::OkResponse(id, [](flatbuffers::FlatBufferBuilder& b) {
      std::vector<flatbuffers::Offset<p::Message>> empty;
      return std::pair{p::Result::DequeueResult, p::CreateDequeueResultDirect(b, &empty).Union()};
    }));
    conn.WaitForClose();
  });
  auto client = ConnectTo(server, "", 50);
  ASSERT_NE(client, nullptr);
  DequeueOptions o;
  o.wait_ms = 5000;
  auto r = client->Dequeue("jobs", o);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->result<p::DequeueResult>()->messages()->size(), 0u);
}

TEST(Client, BadRequestBytesAndRepeatedIdsAreRefusedLocally) {
  FakeServer server([](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    conn.SendMessage(HealthResponse(r->request_id()));
    conn.WaitForClose();
  });
  auto client = ConnectTo(server);
  ASSERT_NE(client, nullptr);
  const RequestHeader h = client->NextHeader();
  auto results = client->CallAll(
      {"garbage", BuildHealth(h), BuildStats(h), BuildHealth({0, Durability::durable})});
  ASSERT_FALSE(results[0].ok());
  EXPECT_EQ(results[0].error().origin, Error::Origin::kLocal);
  EXPECT_TRUE(results[1].ok()) << results[1].error().ToString();
  ASSERT_FALSE(results[2].ok());
  EXPECT_NE(results[2].error().message.find("twice"), std::string::npos);
  ASSERT_FALSE(results[3].ok());
  EXPECT_NE(results[3].error().message.find("reserved"), std::string::npos);
}

TEST(Reply, FromServerMessageTypesTheError) {
  auto ok = Reply::FromServerMessage(HealthResponse(7));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->request_id(), 7u);
  EXPECT_EQ(ok->result<p::StatsResult>(), nullptr);
  ASSERT_NE(ok->result<p::HealthResult>(), nullptr);
  Reply copy = *ok;  // owns its bytes: a copy reads the same
  EXPECT_EQ(copy.request_id(), 7u);

  auto error = Reply::FromServerMessage(ErrorResponse(7, p::Code::FAILED_PRECONDITION, "stale"));
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.error().code, Code::kFailedPrecondition);
  EXPECT_EQ(error.error().message, "stale");

  auto event = Reply::FromServerMessage(testing::MessageEvent("q", "m"));
  ASSERT_FALSE(event.ok());
  EXPECT_EQ(event.error().code, Code::kInternal);
}

}  // namespace
}  // namespace sundial::client
