// Regressions found while documenting and attacking the server: each test failed before its fix.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include "client/client.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_process.h"

namespace sundial::e2e {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;
using client::Client;

// A union type without its table passes the FlatBuffers verifier; the server used to read the
// missing table and crash.
TEST(Regressions, AnOperationTypeWithoutItsTableIsATypedErrorNotACrash) {
  TempDir dir;
  ServerProcess server(dir.path() + "/data");
  ASSERT_TRUE(server.Start()) << server.log();
  auto c = Client::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  for (p::Operation op : {p::Operation::GetQueue, p::Operation::Enqueue, p::Operation::Dequeue,
                          p::Operation::Subscribe, p::Operation::Auth, p::Operation::Stats}) {
    fb::FlatBufferBuilder b;
    p::RequestBuilder rb(b);
    rb.add_request_id((*c)->NextRequestId());
    rb.add_op_type(op);
    p::FinishRequestBuffer(b, rb.Finish());
    auto r = (*c)->Call(b);
    ASSERT_FALSE(r.ok()) << p::EnumNameOperation(op);
    EXPECT_EQ(r.error().code, Code::kInvalidArgument) << r.error().ToString();
  }
  auto health = (*c)->Health();
  ASSERT_TRUE(health.ok()) << health.error().ToString() << "\n" << server.log();
  EXPECT_EQ(server.Terminate(), 0);
}

// Pipelining more reply bytes than --max-output-bytes used to drop a client that reads them
// all; now the server stops reading that connection until the replies are written.
TEST(Regressions, PipelinedLargeRepliesSlowAReaderInsteadOfDroppingIt) {
  TempDir dir;
  ServerProcess server(dir.path() + "/data", {"--max-output-bytes", "1048576"});
  ASSERT_TRUE(server.Start()) << server.log();
  auto c = Client::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  client::EnqueueItem item;
  item.id = "big";
  item.payload = std::string(64 << 10, 'x');
  ASSERT_TRUE((*c)->Enqueue("q", {item}).ok());
  std::vector<std::string> gets;
  for (int i = 0; i < 64; ++i) {  // 4 MiB of replies, 4x the limit, in one pipeline
    gets.push_back(client::BuildGet((*c)->NextHeader(), "q", "big"));
  }
  auto replies = (*c)->CallAll(gets);
  ASSERT_EQ(replies.size(), gets.size());
  for (const auto& r : replies) {
    ASSERT_TRUE(r.ok()) << r.error().ToString() << "\n" << server.log();
    EXPECT_EQ(r->result<p::GetResult>()->message()->payload()->size(), 64u << 10);
  }
}

// The other side of --write-timeout-ms: a client that reads, however slowly, is never dropped.
// 400 pipelined Gets of a 16 KiB message (6.4 MB of replies, 25x --max-output-bytes) through a
// 16 KiB receive buffer, read a piece at a time with a pause between reads: the server pauses
// reading that connection over and over, and every reply arrives.
TEST(Regressions, ASlowReaderIsPausedNotDropped) {
  TempDir dir;
  ServerProcess server(dir.path() + "/data",
                       {"--max-output-bytes", "262144", "--write-timeout-ms", "1000"});
  ASSERT_TRUE(server.Start()) << server.log();
  auto c = Client::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  client::EnqueueItem item;
  item.id = "big";
  item.payload = std::string(16 << 10, 'x');
  ASSERT_TRUE((*c)->Enqueue("q", {item}).ok());

  RawConn slow(server.port(), 16 << 10);
  ASSERT_TRUE(slow.ok());
  const int kGets = 400;
  std::string pipeline;
  for (int i = 0; i < kGets; ++i) {
    pipeline += Frame(client::BuildGet(Hdr(static_cast<uint64_t>(i + 1)), "q", "big"));
  }
  ASSERT_TRUE(slow.Send(pipeline));
  std::set<uint64_t> answered;
  while (answered.size() < static_cast<size_t>(kGets)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the client is slow
    auto frame = slow.ReadFrame(10'000);
    ASSERT_TRUE(frame.has_value()) << answered.size() << " replies, then the connection ended\n"
                                   << server.log();
    const auto view = ViewResponse(*frame);
    ASSERT_EQ(view.code, p::Code::OK);
    answered.insert(view.request_id);
  }
  EXPECT_EQ(answered.size(), static_cast<size_t>(kGets));
  EXPECT_EQ(server.log().find("dropping"), std::string::npos) << server.log();
  EXPECT_EQ(server.Terminate(), 0);
}

// --write-timeout-ms counts from the start of a write, not from the last write long ago: a
// client that was idle for longer than the timeout and then asks again is answered, never
// dropped as it would be if the old progress time armed the guard already expired.
TEST(Regressions, AnIdleClientIsNotDroppedByTheWriteTimeoutWhenItAsksAgain) {
  TempDir dir;
  ServerProcess server(dir.path() + "/data", {"--write-timeout-ms", "200"});
  ASSERT_TRUE(server.Start()) << server.log();
  auto c = Client::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  for (int i = 0; i < 8; ++i) {
    auto health = (*c)->Health();
    ASSERT_TRUE(health.ok()) << "round " << i << ": " << health.error().ToString() << "\n"
                             << server.log();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // idle past the timeout
  }
  EXPECT_EQ(server.log().find("dropping"), std::string::npos) << server.log();
}

}  // namespace
}  // namespace sundial::e2e
