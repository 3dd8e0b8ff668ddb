// The bench's protocol drivers (bench/protocols.h) on hand-made replies, and sundial-bench run
// end to end against a real sundiald. Built where the bench is (release builds).
#ifdef SUNDIAL_BENCH_BUILT
#include "bench/protocols.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "protocol/framing.h"
#include "protocol/sundial_generated.h"
#include "tests/e2e/server_process.h"

namespace sundial::bench {
namespace {

struct Recorder : ReplySink {
  struct Reply {
    uint32_t slot;
    std::string error;
    std::vector<std::string> leased;
  };
  std::vector<Reply> replies;
  std::vector<std::string> leased;
  void Leased(uint32_t, std::string_view id, uint64_t) override { leased.emplace_back(id); }
  void Done(uint32_t slot, std::string_view error) override {
    replies.push_back({slot, std::string(error), leased});
    leased.clear();
  }
};

// Feeds `text` one byte at a time, as the worst split of a TCP stream would.
void FeedByteByByte(Protocol& p, std::string_view text, Recorder* r) {
  std::string buffer;
  for (char ch : text) {
    buffer += ch;
    std::string error;
    const int64_t used = p.Consume(buffer, r, &error);
    ASSERT_GE(used, 0) << error;
    buffer.erase(0, static_cast<size_t>(used));
  }
  EXPECT_TRUE(buffer.empty());
}

TEST(BenchBeanstalk, RequestsAndSplitRepliesPairUpInOrder) {
  auto p = MakeProtocol(Target::kBeanstalk, {.queue = "q"});
  std::string out;
  p->Setup(0, "", &out);
  EXPECT_EQ(out, "use q\r\nwatch q\r\nignore default\r\n");
  BenchMessage m;
  m.id = "a";
  m.priority = 7;
  m.payload = "hello";
  p->Enqueue(1, std::span(&m, 1), &out);
  p->Dequeue(2, 2, "", &out);
  Lease lease;
  lease.id = "42";
  p->Complete(3, "", std::span(&lease, 1), &out);
  EXPECT_EQ(out,
            "use q\r\nwatch q\r\nignore default\r\n"
            "put 7 0 30 5\r\nhello\r\nreserve-with-timeout 0\r\nreserve-with-timeout 0\r\n"
            "delete 42\r\n");
  Recorder r;
  FeedByteByByte(*p,
                 "USING q\r\nWATCHING 2\r\nWATCHING 1\r\nINSERTED 9\r\nRESERVED 42 "
                 "5\r\nhel\r\n\r\nTIMED_OUT\r\nNOT_FOUND\r\n",
                 &r);
  ASSERT_EQ(r.replies.size(), 4u);  // setup's three lines are one reply
  EXPECT_EQ(r.replies[0].slot, 0u);
  EXPECT_EQ(r.replies[1].slot, 1u);
  EXPECT_EQ(r.replies[1].error, "");
  EXPECT_EQ(r.replies[2].slot, 2u);
  EXPECT_EQ(r.replies[2].leased, std::vector<std::string>{"42"});  // the body held "\r\n"
  EXPECT_EQ(r.replies[3].slot, 3u);
  EXPECT_EQ(r.replies[3].error, "beanstalkd: NOT_FOUND");
}

// The worker's step: the deletes, then the reserves, in one write; one reply for all of them.
TEST(BenchBeanstalk, CompleteAndNextDeletesThenReservesAsOneReply) {
  auto p = MakeProtocol(Target::kBeanstalk, {.queue = "q"});
  std::string out;
  Lease leases[2];
  leases[0].id = "7";
  leases[1].id = "8";
  p->CompleteAndNext(4, "", leases, 2, &out);
  EXPECT_EQ(out, "delete 7\r\ndelete 8\r\nreserve-with-timeout 0\r\nreserve-with-timeout 0\r\n");
  Recorder r;
  FeedByteByByte(*p, "DELETED\r\nDELETED\r\nRESERVED 9 2\r\nab\r\nTIMED_OUT\r\n", &r);
  ASSERT_EQ(r.replies.size(), 1u);
  EXPECT_EQ(r.replies[0].slot, 4u);
  EXPECT_EQ(r.replies[0].error, "");
  EXPECT_EQ(r.replies[0].leased, std::vector<std::string>{"9"});
}

TEST(BenchBeanstalk, AReplyNobodyAskedForBreaksTheConnection) {
  auto p = MakeProtocol(Target::kBeanstalk, {.queue = "q"});
  Recorder r;
  std::string error;
  EXPECT_EQ(p->Consume("DELETED\r\n", &r, &error), -1);
  EXPECT_NE(error.find("nobody asked"), std::string::npos);
}

TEST(BenchRedis, LeaseScriptRepliesAndErrors) {
  auto p = MakeProtocol(Target::kRedis, {.queue = "q"});
  std::string out;
  p->Setup(1, "", &out);  // SCRIPT LOAD
  EXPECT_NE(out.find("SCRIPT"), std::string::npos);
  EXPECT_NE(out.find("BYSCORE"), std::string::npos);
  out.clear();
  p->Dequeue(2, 2, "", &out);
  p->Dequeue(3, 1, "t1", &out);
  EXPECT_NE(out.find("$4\r\nq:t1\r\n"), std::string::npos) << out;
  Recorder r;
  FeedByteByByte(
      *p, "$3\r\nabc\r\n*2\r\n$4\r\nm1|x\r\n$4\r\nm2|y\r\n-NOSCRIPT No matching script\r\n", &r);
  ASSERT_EQ(r.replies.size(), 3u);
  EXPECT_EQ(r.replies[1].leased, (std::vector<std::string>{"m1|x", "m2|y"}));
  EXPECT_EQ(r.replies[2].error, "redis: NOSCRIPT No matching script");
}

// The worker's step is one call of the lease script, with the members to remove after its three
// arguments (the script ZREMs them first); its reply is a dequeue's.
TEST(BenchRedis, CompleteAndNextIsOneLeaseScriptCallThatRemovesFirst) {
  auto p = MakeProtocol(Target::kRedis, {.queue = "q"});
  std::string out;
  p->Setup(1, "", &out);
  EXPECT_NE(out.find("ZREM"), std::string::npos) << out;
  Recorder r;
  FeedByteByByte(*p, "$3\r\nabc\r\n", &r);  // the script's sha
  out.clear();
  Lease lease;
  lease.id = "m1|x";
  p->CompleteAndNext(2, "", std::span(&lease, 1), 3, &out);
  EXPECT_EQ(out.rfind("*8\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$1\r\nq\r\n", 0), 0u) << out;
  EXPECT_NE(out.find("$1\r\n3\r\n$5\r\n30000\r\n$4\r\nm1|x\r\n"), std::string::npos) << out;
  FeedByteByByte(*p, "*1\r\n$4\r\nm2|y\r\n", &r);
  ASSERT_EQ(r.replies.size(), 2u);
  EXPECT_EQ(r.replies[1].slot, 2u);
  EXPECT_EQ(r.replies[1].leased, std::vector<std::string>{"m2|y"});
}

TEST(BenchSundial, RepliesComeBackBySlotInAnyOrder) {
  namespace p = sundial::protocol;
  auto proto = MakeProtocol(Target::kSundial, {.queue = "q"});
  auto reply = [](uint64_t request_id, bool with_message) {
    flatbuffers::FlatBufferBuilder b;
    flatbuffers::Offset<p::Response> resp;
    if (with_message) {
      auto m = p::CreateMessage(b, 0, b.CreateString("id-1"), 0, 0, 0, p::MessageState::running, 1,
                                5, 0, 77);
      auto result = p::CreateDequeueResult(b, b.CreateVector(&m, 1));
      resp = p::CreateResponse(b, request_id, 0, 0, p::Result::DequeueResult, result.Union());
    } else {
      auto err = p::CreateError(b, p::Code::NOT_FOUND, b.CreateString("no queue"));
      resp = p::CreateResponse(b, request_id, err);
    }
    b.Finish(p::CreateServerMessage(b, p::ServerBody::Response, resp.Union()));
    std::string out;
    protocol::AppendFrame(
        std::string_view(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()), &out);
    return out;
  };
  Recorder r;
  FeedByteByByte(*proto,
                 reply((uint64_t{5} << 32) | 9, true) + reply((uint64_t{4} << 32) | 3, false), &r);
  ASSERT_EQ(r.replies.size(), 2u);
  EXPECT_EQ(r.replies[0].slot, 9u);
  EXPECT_EQ(r.replies[0].leased, std::vector<std::string>{"id-1"});
  EXPECT_EQ(r.replies[1].slot, 3u);
  EXPECT_EQ(r.replies[1].error, "NOT_FOUND: no queue");
  std::string error;
  EXPECT_EQ(proto->Consume(std::string("\0\0\0\0", 4), &r, &error), -1);  // a zero length
}

TEST(BenchHttp, RequestsArePostsAndInOrderRepliesPairUpSplitAnywhere) {
  auto p = MakeProtocol(Target::kHttp, {.queue = "q"});
  std::string out;
  BenchMessage m;
  m.id = "a";
  m.payload = "hi";
  m.tenant = "t";
  p->Enqueue(1, std::span(&m, 1), &out);
  EXPECT_EQ(out.rfind("POST /v1/Enqueue HTTP/1.1\r\n", 0), 0u) << out;
  EXPECT_NE(out.find(R"("payload":[104,105],"metadata":[{"key":"tenant","value":"t"}])"),
            std::string::npos)
      << out;
  p->Dequeue(2, 2, "", &out);
  Lease lease;
  lease.id = "a";
  lease.token = 77;
  p->Complete(3, "", std::span(&lease, 1), &out);
  EXPECT_NE(out.find(R"({"id":"a","lease_token":77})"), std::string::npos) << out;
  auto reply = [](int status, const std::string& body) {
    return "HTTP/1.1 " + std::to_string(status) +
           " X\r\nServer: sundiald\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  Recorder r;
  FeedByteByByte(
      *p,
      reply(200, R"({"lsn": 1})") +
          reply(200, R"({"result": {"messages": [{"queue": "q","id": "a","lease_token": 77},)"
                     R"({"queue": "q","id": "b","lease_token": 78}]}})") +
          reply(412, R"({"error": {"code": "FAILED_PRECONDITION"}})"),
      &r);
  ASSERT_EQ(r.replies.size(), 3u);
  EXPECT_EQ(r.replies[0].slot, 1u);
  EXPECT_EQ(r.replies[0].error, "");
  EXPECT_EQ(r.replies[1].slot, 2u);
  EXPECT_EQ(r.replies[1].leased, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.replies[2].slot, 3u);
  EXPECT_NE(r.replies[2].error.find("FAILED_PRECONDITION"), std::string::npos);
}

// ---- sundial-bench, end to end ------------------------------------------------------------

struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome RunBench(const std::string& args) {
  Outcome o;
  FILE* f = ::popen((std::string(SUNDIAL_BENCH_BIN) + " " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) o.output.append(buf, n);
  const int status = ::pclose(f);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

uint64_t JsonNumber(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return 0;
  return std::strtoull(json.c_str() + at + key.size() + 3, nullptr, 10);
}

class BenchEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.Start()) << server_.log(); }
  std::string Target() const { return "--target sundial://" + server_.addr(); }
  e2e::TempDir dir_;
  e2e::ServerProcess server_{dir_.path()};
};

TEST_F(BenchEndToEnd, EveryWorkloadRunsItsCountWithoutErrors) {
  for (const std::string workload :
       {"enqueue", "dequeue-complete", "mixed", "filter", "exclusive", "worker"}) {
    const Outcome o = RunBench(Target() + " --workload " + workload +
                               " --connections 4 --threads 2 --pipeline 2 --messages 400 "
                               "--prefill 800 --duration 30 --json");
    ASSERT_EQ(o.exit_code, 0) << workload << ": " << o.output;
    EXPECT_EQ(JsonNumber(o.output, "errors"), 0u) << o.output;
    // --messages is exact, and no dequeue finds its queue (or its tenant) empty while the
    // prefill holds more than the run takes.
    EXPECT_EQ(JsonNumber(o.output, "ops"), 400u) << workload << ": " << o.output;
    EXPECT_EQ(JsonNumber(o.output, "empty"), 0u) << workload << ": " << o.output;
  }
  // Every run deleted its queue.
  const Outcome list =
      RunBench(Target() + " --workload enqueue --connections 1 --messages 1 --json");
  EXPECT_EQ(list.exit_code, 0) << list.output;
}

// The worker workload's batch form: each request completes up to --batch of the leases a slot
// holds and refills it to --next-max; every message leased is completed, the last ones by a
// plain complete when the budget is spent.
TEST_F(BenchEndToEnd, WorkerBatchesCompleteEveryLeaseExactly) {
  for (const std::string shape :
       {"--batch 1 --next-max 1", "--batch 3 --next-max 7", "--batch 10 --next-max 4"}) {
    const Outcome o = RunBench(Target() + " --workload worker " + shape +
                               " --connections 3 --threads 2 --pipeline 2 --messages 301 "
                               "--prefill 400 --duration 30 --json");
    ASSERT_EQ(o.exit_code, 0) << shape << ": " << o.output;
    EXPECT_EQ(JsonNumber(o.output, "ops"), 301u) << shape << ": " << o.output;
    EXPECT_EQ(JsonNumber(o.output, "empty"), 0u) << shape << ": " << o.output;
    const size_t acked = o.output.find("\"acked\"");
    ASSERT_NE(acked, std::string::npos) << o.output;
    EXPECT_EQ(JsonNumber(o.output.substr(acked), "leased"), 301u) << shape << ": " << o.output;
    EXPECT_EQ(JsonNumber(o.output.substr(acked), "completed"), 301u) << shape << ": " << o.output;
  }
  // A closed loop only.
  EXPECT_EQ(RunBench(Target() + " --workload worker --rate 10").exit_code, 2);
}

// The HTTP JSON API target (docs/http-api.md) runs the workloads too.
TEST_F(BenchEndToEnd, HttpTargetRunsEnqueueAndDequeueComplete) {
  for (const std::string workload : {"enqueue", "dequeue-complete", "filter", "worker"}) {
    const Outcome o =
        RunBench("--target http://127.0.0.1:" + std::to_string(server_.http_port()) +
                 " --workload " + workload +
                 " --connections 4 --threads 2 --pipeline 2 --messages 400 --prefill 800 "
                 "--duration 30 --json");
    ASSERT_EQ(o.exit_code, 0) << workload << ": " << o.output;
    EXPECT_EQ(JsonNumber(o.output, "errors"), 0u) << o.output;
    EXPECT_EQ(JsonNumber(o.output, "ops"), 400u) << workload << ": " << o.output;
    EXPECT_EQ(JsonNumber(o.output, "empty"), 0u) << workload << ": " << o.output;
  }
}

// Regression: the filter workload's prefill went to --tenants tenants while its connections
// served only as many as there were connections, and one shared count let a fast connection
// ask its tenant for more than it held: "empty" dequeues on a queue that still had work.
TEST_F(BenchEndToEnd, FilterWorkersEachGetTheirTenantsShareExactly) {
  for (const std::string shape : {"--connections 3 --tenants 16 --pipeline 4 --batch 7",
                                  "--connections 5 --tenants 2 --pipeline 2 --batch 3"}) {
    const Outcome o = RunBench(Target() + " --workload filter " + shape +
                               " --threads 2 --messages 301 --prefill 301 --duration 30 --json");
    ASSERT_EQ(o.exit_code, 0) << shape << ": " << o.output;
    EXPECT_EQ(JsonNumber(o.output, "ops"), 301u) << shape << ": " << o.output;
    EXPECT_EQ(JsonNumber(o.output, "empty"), 0u) << shape << ": " << o.output;
  }
}

TEST_F(BenchEndToEnd, BatchesCountMessagesAndOpenLoopKeepsItsRate) {
  Outcome o = RunBench(Target() +
                       " --workload enqueue --batch 50 --connections 2 --messages 1000 "
                       "--duration 30 --json");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(JsonNumber(o.output, "ops"), 1000u) << o.output;
  // Open loop at 200 ops/s for 0.5 s: the schedule has 100 send times (50 on each of the two
  // threads, 10 ms apart), and each is run however late the machine lets it start.
  o = RunBench(Target() + " --workload enqueue --connections 2 --rate 200 --duration 0.5 --json");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(JsonNumber(o.output, "ops"), 100u) << o.output;
}

// bench/soak.sh runs one kept queue through consecutive runs: --keep leaves the messages,
// --sequence-start keeps a later run's ids from repeating an earlier one's (a repeated id is a
// duplicate enqueue: no new message), and an explicit --prefill 0 enqueues nothing first.
TEST_F(BenchEndToEnd, AKeptQueueCarriesOverWithoutPrefillOrReusedIds) {
  const std::string common = Target() + " --queue kept --keep --connections 2 --json";
  Outcome o = RunBench(common + " --workload enqueue --messages 100");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = RunBench(common + " --workload enqueue --messages 100 --sequence-start 1000000");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  // Both runs' 200 messages are there: taken with nothing prefilled and no dequeue empty.
  o = RunBench(common + " --workload dequeue-complete --prefill 0 --messages 200 --duration 30");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(JsonNumber(o.output, "ops"), 200u) << o.output;
  EXPECT_EQ(JsonNumber(o.output, "empty"), 0u) << o.output;
  // And nothing more: the queue is empty.
  o = RunBench(common + " --workload dequeue-complete --prefill 0 --messages 1 --duration 1");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(JsonNumber(o.output, "ops"), 0u) << o.output;
  EXPECT_GT(JsonNumber(o.output, "empty"), 0u) << o.output;
}

TEST(BenchUsage, BadFlagsExit2AndNoServerExits3) {
  EXPECT_EQ(RunBench("--workload nosuch").exit_code, 2);
  EXPECT_EQ(RunBench("--target gopher://127.0.0.1:1").exit_code, 2);
  EXPECT_EQ(RunBench("--target redis://127.0.0.1:1 --workload exclusive").exit_code, 2);
  const Outcome o = RunBench("--target sundial://127.0.0.1:1 --duration 1");
  EXPECT_EQ(o.exit_code, 3) << o.output;
  EXPECT_NE(o.output.find("cannot connect"), std::string::npos) << o.output;
}

}  // namespace
}  // namespace sundial::bench
#endif  // SUNDIAL_BENCH_BUILT
