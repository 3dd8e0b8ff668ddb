// The `sundial` CLI, run as a process (SUNDIAL_CLI): usage errors exit 2 before anything is
// sent; a port where nothing listens exits 3; against the fake server, the requests it sends
// carry the flags, its JSON lines carry the protocol's field names (docs/cli.md), a server error
// exits 1 with
// {"code","message"} on stderr, a garbage reply exits 1 with INTERNAL, and a token file makes
// Auth the first request. Global flags work before and after the subcommand and from the
// environment.
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/json/value.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/client/cli_runner.h"
#include "tests/client/fake_server.h"

namespace sundial::client {
namespace {

namespace json = boost::json;
namespace p = protocol;
using testing::ErrorResponse;
using testing::FakeConnection;
using testing::FakeServer;
using testing::OkResponse;

using testing::CliRun;
using testing::TempFiles;

CliRun RunCli(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  return testing::RunProgram(SUNDIAL_CLI, args, env);
}

// ---- Without a server ----------------------------------------------------------------------

TEST(Cli, BadUsageExitsTwoBeforeConnecting) {
  // A listener that must never see a connection: the address is valid but usage is not.
  const std::string addr = testing::LoopbackAddr(testing::ClosedPort());
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"frobnicate"},
      {"get-queue"},
      {"get", "q"},
      {"purge-queue", "q"},
      {"purge-queue", "q", "--state", "bogus"},
      {"browse", "q"},
      {"browse", "q", "--state", "pending", "--filter", "novalue"},
      {"dequeue", "q", "--filter", "=v"},
      {"dequeue", "q", "--max", "many"},
      {"enqueue", "q", "--payload", "x", "--payload-file", "f"},
      {"enqueue", "q", "--delay-ms", "1", "--visible-at", "2"},
      {"enqueue", "q", "--meta", "k"},
      {"enqueue", "q", "--payload-file", "/nonexistent/payload"},
      {"create-queue", "q", "--type", "fancy"},
      {"create-queue", "q", "--enqueue-paused", "maybe"},
      {"update-queue", "q", "--type", "simple"},
      {"update-queue", "q", "--exclusivity-key", "k"},
      {"complete", "q", "id"},
      {"complete", "q", "id", "not-a-token"},
      {"extend", "q", "id", "5"},
      {"cancel", "q"},
      {"cancel", "q", "a", "--filter", "k=v"},
      {"reprioritize", "q", "a"},
      {"reprioritize", "q", "--priority", "1"},
      {"redrive", "q"},
      {"redrive", "q", "a", "--all"},
      {"explain", "q"},
      {"watch"},
      {"stats", "--addr", "localhost:http"},
      {"stats", "--durability", "sometimes"},
      {"stats", "--token-file", "/nonexistent/token"},
      {"stats", "extra"},
  };
  for (std::vector<std::string> args : cases) {
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    if (std::find(args.begin(), args.end(), "--addr") == args.end()) {
      args.insert(args.begin(), {"--addr", addr});
    }
    const CliRun run = RunCli(args);
    EXPECT_EQ(run.exit_code, 2) << shown << "\n" << run.err;
    EXPECT_FALSE(run.err.empty()) << shown;
    EXPECT_TRUE(run.out.empty()) << shown << run.out;
  }
}

TEST(Cli, HelpExitsZero) {
  const CliRun run = RunCli({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  for (const char* sub :
       {"create-queue", "update-queue", "get-queue", "list-queues", "delete-queue", "purge-queue",
        "enqueue",      "dequeue",      "complete",  "fail",        "extend",       "cancel",
        "reprioritize", "redrive",      "get",       "browse",      "count",        "explain",
        "stats",        "health",       "watch"}) {
    EXPECT_NE(run.out.find(sub), std::string::npos) << sub;
  }
  EXPECT_EQ(RunCli({"enqueue", "--help"}).exit_code, 0);
}

TEST(Cli, NothingListeningExitsThree) {
  const std::string addr = testing::LoopbackAddr(testing::ClosedPort());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"health", "--addr", addr},
        std::vector<std::string>{"--addr", addr, "enqueue", "q", "--payload", "x"},
        std::vector<std::string>{"watch", "*", "--http-addr", addr}}) {
    const CliRun run = RunCli(args);
    EXPECT_EQ(run.exit_code, 3) << run.err;
    EXPECT_TRUE(run.out.empty());
    EXPECT_EQ(run.ErrObject().at("code"), "UNAVAILABLE") << run.err;
  }
  // SUNDIAL_ADDR is the default address.
  const CliRun env = RunCli({"stats"}, {"SUNDIAL_ADDR=" + addr});
  EXPECT_EQ(env.exit_code, 3);
  EXPECT_NE(env.err.find(addr), std::string::npos) << env.err;
}

// ---- Against the fake server ---------------------------------------------------------------

std::string Text(const flatbuffers::String* s) { return s ? s->str() : ""; }

// "m1", "m2", ... for i = 0, 1, ...
std::string MessageId(int i) {
  std::string id = "m";
  id.append(std::to_string(i + 1));
  return id;
}

std::string MessageReply(uint64_t request_id, p::Result type, const std::string& payload,
                         int count) {
  return OkResponse(request_id, [&](flatbuffers::FlatBufferBuilder& b) {
    std::vector<flatbuffers::Offset<p::Message>> messages;
    for (int i = 0; i < count; ++i) {
      std::vector<flatbuffers::Offset<p::MetadataPair>> pairs{
          p::CreateMetadataPairDirect(b, "tenant", "acme")};
      std::vector<uint8_t> bytes(payload.begin(), payload.end());
      const std::string id = MessageId(i);
      messages.push_back(p::CreateMessageDirect(
          b, "jobs", id.c_str(), -5, &bytes, &pairs, p::MessageState::running, 1, 5, 0,
          9007199254740991ull, 1'700'000'030'000, 3, 1'700'000'000'000, 1'700'000'000'100, ""));
    }
    if (type == p::Result::GetResult) {
      return std::pair{type, p::CreateGetResult(b, messages.at(0)).Union()};
    }
    return std::pair{type, p::CreateDequeueResultDirect(b, &messages).Union()};
  });
}

TEST(Cli, GetPrintsTheWholeMessageWithSpecFieldNames) {
  // One process per connection: text payload, then a payload that is not UTF-8.
  for (const std::string& payload :
       {std::string("hello \xc3\xa9"), std::string("\xff\x00\x01", 3)}) {
    FakeServer one([&](FakeConnection& conn) {
      const p::Request* r = conn.ReadRequest();
      ASSERT_NE(r, nullptr);
      ASSERT_EQ(r->op_type(), p::Operation::Get);
      EXPECT_EQ(Text(r->op_as_Get()->queue()), "jobs");
      EXPECT_EQ(Text(r->op_as_Get()->id()), "m1");
      conn.SendMessage(MessageReply(r->request_id(), p::Result::GetResult, payload, 1));
      conn.WaitForClose();
    });
    const CliRun run = RunCli({"get", "jobs", "m1", "--addr", one.addr()});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const auto lines = run.OutObjects();
    ASSERT_EQ(lines.size(), 1u);
    const json::object& m = lines[0];
    EXPECT_EQ(m.at("queue"), "jobs");
    EXPECT_EQ(m.at("id"), "m1");
    EXPECT_EQ(m.at("priority").to_number<int64_t>(), -5);
    EXPECT_EQ(m.at("state"), "running");
    EXPECT_EQ(m.at("attempts").to_number<int64_t>(), 1);
    EXPECT_EQ(m.at("max_attempts").to_number<int64_t>(), 5);
    EXPECT_EQ(m.at("lease_token").to_number<uint64_t>(), 9007199254740991ull);
    EXPECT_EQ(m.at("lease_expires_at").to_number<int64_t>(), 1'700'000'030'000);
    EXPECT_EQ(m.at("version").to_number<int64_t>(), 3);
    EXPECT_EQ(m.at("enqueued_at").to_number<int64_t>(), 1'700'000'000'000);
    EXPECT_EQ(m.at("updated_at").to_number<int64_t>(), 1'700'000'000'100);
    EXPECT_EQ(m.at("metadata").at("tenant"), "acme");
    if (payload[0] == 'h') {
      EXPECT_EQ(m.at("payload"), "hello \xc3\xa9");
      EXPECT_FALSE(m.contains("payload_base64"));
    } else {
      EXPECT_EQ(m.at("payload_base64"), "/wAB");
      EXPECT_FALSE(m.contains("payload"));
    }
  }
}

TEST(Cli, DequeuePrintsOneLinePerLeasedMessageAndNothingWhenEmpty) {
  for (int count : {3, 0}) {
    FakeServer server([count](FakeConnection& conn) {
      const p::Request* r = conn.ReadRequest();
      ASSERT_NE(r, nullptr);
      const p::Dequeue* d = r->op_as_Dequeue();
      ASSERT_NE(d, nullptr);
      EXPECT_EQ(d->max(), 3u);
      EXPECT_EQ(d->wait_ms(), 250u);
      EXPECT_EQ(d->lease_ms(), std::optional<int64_t>(60000));
      ASSERT_NE(d->filter(), nullptr);
      ASSERT_EQ(d->filter()->size(), 2u);
      EXPECT_EQ(Text(d->filter()->Get(1)->key()), "kind");
      EXPECT_EQ(Text(d->filter()->Get(1)->value()), "a=b");  // split at the first '='
      conn.SendMessage(MessageReply(r->request_id(), p::Result::DequeueResult, "x", count));
      conn.WaitForClose();
    });
    const CliRun run =
        RunCli({"--addr", server.addr(), "dequeue", "jobs", "--max", "3", "--wait-ms", "250",
                "--lease-ms", "60000", "--filter", "tenant=acme", "--filter", "kind=a=b"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const auto lines = run.OutObjects();
    ASSERT_EQ(lines.size(), static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(lines[i].at("id").as_string(), MessageId(i));
      EXPECT_TRUE(lines[i].contains("lease_token"));
    }
  }
}

TEST(Cli, ServerErrorExitsOneWithCodeAndMessageOnStderr) {
  FakeServer server([](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    conn.SendMessage(ErrorResponse(r->request_id(), p::Code::NOT_FOUND, "queue: no such queue"));
    conn.WaitForClose();
  });
  const CliRun run = RunCli({"get-queue", "nope"}, {"SUNDIAL_ADDR=" + server.addr()});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(run.out.empty());
  const json::object e = run.ErrObject();
  EXPECT_EQ(e.at("code"), "NOT_FOUND");
  EXPECT_EQ(e.at("message"), "queue: no such queue");
}

TEST(Cli, GarbageFromTheServerExitsOneWithInternal) {
  FakeServer server([](FakeConnection& conn) {
    ASSERT_NE(conn.ReadRequest(), nullptr);
    conn.SendMessage("definitely not a ServerMessage");
    conn.WaitForClose();
  });
  const CliRun run = RunCli({"health", "--addr", server.addr()});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.ErrObject().at("code"), "INTERNAL") << run.err;
}

TEST(Cli, TokenFileMakesAuthTheFirstRequest) {
  TempFiles files;
  const std::string token_file = files.Write("token", "s3cret\n");
  FakeServer server([](FakeConnection& conn) {
    const p::Request* auth = conn.ReadRequest();
    ASSERT_NE(auth, nullptr);
    ASSERT_EQ(auth->op_type(), p::Operation::Auth);
    EXPECT_EQ(Text(auth->op_as_Auth()->token()), "s3cret");  // trailing newline stripped
    conn.SendMessage(OkResponse(auth->request_id(), [](flatbuffers::FlatBufferBuilder& b) {
      return std::pair{p::Result::AuthResult, p::CreateAuthResult(b).Union()};
    }));
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->op_type(), p::Operation::Health);
    conn.SendMessage(testing::HealthResponse(r->request_id()));
    conn.WaitForClose();
  });
  const CliRun run = RunCli({"health", "--token-file", token_file, "--addr", server.addr()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = run.OutObjects();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].at("live"), true);
  EXPECT_EQ(lines[0].at("ready"), true);
}

TEST(Cli, RefusedTokenExitsOneUnauthenticated) {
  TempFiles files;
  const std::string token_file = files.Write("token", "wrong");
  FakeServer server([](FakeConnection& conn) {
    ASSERT_NE(conn.ReadRequest(), nullptr);
    conn.SendMessage(ErrorResponse(0, p::Code::UNAUTHENTICATED, "auth: wrong token"));
    conn.Close();
  });
  const CliRun run = RunCli({"--token-file", token_file, "--addr", server.addr(), "list-queues"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.ErrObject().at("code"), "UNAUTHENTICATED");
}

TEST(Cli, EnqueueSendsEveryFlag) {
  TempFiles files;
  const std::string payload_file = files.Write("payload", std::string("\x01\x02\x00", 3));
  FakeServer server([](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->durability(), p::Durability::relaxed);
    const p::Enqueue* e = r->op_as_Enqueue();
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(Text(e->queue()), "jobs");
    ASSERT_EQ(e->items()->size(), 1u);
    const p::EnqueueItem* item = e->items()->Get(0);
    EXPECT_EQ(Text(item->id()), "m1");
    EXPECT_EQ(item->priority(), -7);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(item->payload()->data()),
                          item->payload()->size()),
              std::string("\x01\x02\x00", 3));
    ASSERT_EQ(item->metadata()->size(), 2u);
    EXPECT_EQ(Text(item->metadata()->Get(0)->key()), "tenant");
    EXPECT_EQ(Text(item->metadata()->Get(1)->value()), "");
    EXPECT_EQ(item->delay_ms(), std::optional<int64_t>(1500));
    EXPECT_FALSE(item->visible_at().has_value());
    EXPECT_EQ(item->max_attempts(), std::optional<uint32_t>(2));
    conn.SendMessage(OkResponse(r->request_id(), [](flatbuffers::FlatBufferBuilder& b) {
      std::vector<flatbuffers::Offset<p::EnqueueResult>> items{
          p::CreateEnqueueResultDirect(b, "m1", 1, true)};
      return std::pair{p::Result::EnqueueResults, p::CreateEnqueueResultsDirect(b, &items).Union()};
    }));
    conn.WaitForClose();
  });
  const CliRun run = RunCli({"enqueue", "jobs",           "--id",       "m1",     "--priority",
                             "-7",      "--payload-file", payload_file, "--meta", "tenant=acme",
                             "--meta",  "empty=",         "--delay-ms", "1500",   "--max-attempts",
                             "2",       "--durability",   "relaxed",    "--addr", server.addr()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = run.OutObjects();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].at("id"), "m1");
  EXPECT_EQ(lines[0].at("version").to_number<int64_t>(), 1);
  EXPECT_EQ(lines[0].at("duplicate"), true);
}

TEST(Cli, EnqueueItemErrorExitsOne) {
  FakeServer server([](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    conn.SendMessage(OkResponse(r->request_id(), [](flatbuffers::FlatBufferBuilder& b) {
      auto error = p::CreateErrorDirect(b, p::Code::ALREADY_EXISTS, "id: taken, other content");
      std::vector<flatbuffers::Offset<p::EnqueueResult>> items{
          p::CreateEnqueueResultDirect(b, nullptr, 0, false, error)};
      return std::pair{p::Result::EnqueueResults, p::CreateEnqueueResultsDirect(b, &items).Union()};
    }));
    conn.WaitForClose();
  });
  const CliRun run = RunCli({"enqueue", "jobs", "--id", "m1", "--addr", server.addr()});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.ErrObject().at("code"), "ALREADY_EXISTS");
}

TEST(Cli, CancelPrintsEachIdAndExitsOneWhenAnyFailed) {
  FakeServer server([](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    const p::Cancel* c = r->op_as_Cancel();
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(c->ids()->size(), 2u);
    EXPECT_EQ(Text(c->ids()->Get(1)), "stats");  // an id named like a subcommand
    conn.SendMessage(OkResponse(r->request_id(), [](flatbuffers::FlatBufferBuilder& b) {
      std::vector<flatbuffers::Offset<p::ItemStatus>> items{
          p::CreateItemStatusDirect(b, p::Code::OK, ""),
          p::CreateItemStatusDirect(b, p::Code::NOT_FOUND, "id: no such message")};
      return std::pair{p::Result::ItemResults, p::CreateItemResultsDirect(b, &items).Union()};
    }));
    conn.WaitForClose();
  });
  const CliRun run = RunCli({"cancel", "jobs", "a", "stats", "--addr", server.addr()});
  EXPECT_EQ(run.exit_code, 1);
  const auto lines = run.OutObjects();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].at("id"), "a");
  EXPECT_EQ(lines[0].at("state"), "canceled");
  const json::object e = run.ErrObject();
  EXPECT_EQ(e.at("id"), "stats");
  EXPECT_EQ(e.at("code"), "NOT_FOUND");
}

TEST(Cli, RedriveAllPrintsTheCount) {
  FakeServer server([](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    ASSERT_NE(r->op_as_Redrive(), nullptr);
    EXPECT_TRUE(r->op_as_Redrive()->all());
    conn.SendMessage(OkResponse(r->request_id(), [](flatbuffers::FlatBufferBuilder& b) {
      return std::pair{p::Result::Counted, p::CreateCounted(b, 4).Union()};
    }));
    conn.WaitForClose();
  });
  const CliRun run = RunCli({"redrive", "jobs", "--all", "--addr", server.addr()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.OutObjects().at(0).at("redriven").to_number<int64_t>(), 4);
}

TEST(Cli, BrowsePrintsSummariesThenTheNextCursor) {
  FakeServer server([](FakeConnection& conn) {
    const p::Request* r = conn.ReadRequest();
    ASSERT_NE(r, nullptr);
    const p::Browse* br = r->op_as_Browse();
    ASSERT_NE(br, nullptr);
    EXPECT_EQ(br->state(), p::MessageState::errored);
    EXPECT_EQ(br->limit(), 2u);
    EXPECT_EQ(Text(br->cursor()), "c0");
    conn.SendMessage(OkResponse(r->request_id(), [](flatbuffers::FlatBufferBuilder& b) {
      std::vector<flatbuffers::Offset<p::MessageSummary>> items{
          p::CreateMessageSummaryDirect(b, "a", 1, p::MessageState::errored, 5, 9),
          p::CreateMessageSummaryDirect(b, "b", 2, p::MessageState::errored, 5, 9)};
      return std::pair{p::Result::BrowseResult,
                       p::CreateBrowseResultDirect(b, &items, "c1").Union()};
    }));
    conn.WaitForClose();
  });
  const CliRun run = RunCli({"browse", "jobs", "--state", "errored", "--limit", "2", "--cursor",
                             "c0", "--addr", server.addr()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = run.OutObjects();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].at("id"), "a");
  EXPECT_EQ(lines[1].at("state"), "errored");
  EXPECT_EQ(lines[1].at("attempts").to_number<int64_t>(), 5);
  EXPECT_EQ(lines[2].at("next_cursor"), "c1");
  EXPECT_EQ(lines[2].size(), 1u);
}

TEST(Cli, CreateAndUpdateQueueMapTheSettingFlags) {
  auto queue_reply = [](uint64_t request_id) {
    return OkResponse(request_id, [](flatbuffers::FlatBufferBuilder& b) {
      // As the server does: every setting of the queue it describes.
      auto settings = p::CreateQueueSettingsDirect(b, p::QueueType::exclusive, "tenant", 1000, 0, 5,
                                                   1000, 300000, "jobs.dlq", 3600000, 0, false,
                                                   true, 32, "tenant", 1);
      auto counts = p::CreateStateCounts(b, 0, 2, 1, 0, 0, 0, 1);
      return std::pair{
          p::Result::QueueResult,
          p::CreateQueueResult(b, p::CreateQueueInfoDirect(b, "jobs", settings, counts, 40, 4096))
              .Union()};
    });
  };
  FakeServer server(
      [&](FakeConnection& conn) {
        const p::Request* r = conn.ReadRequest();
        ASSERT_NE(r, nullptr);
        if (const p::CreateQueue* c = r->op_as_CreateQueue()) {
          const p::QueueSettings* s = c->settings();
          EXPECT_EQ(s->type(), p::QueueType::exclusive);
          EXPECT_EQ(Text(s->exclusivity_key()), "tenant");
          EXPECT_EQ(s->lease_ms(), 1000);
          EXPECT_FALSE(s->max_attempts().has_value()) << "not given: the server's default";
          EXPECT_EQ(Text(s->dead_letter_queue()), "jobs.dlq");
          EXPECT_TRUE(s->dequeue_paused());
          EXPECT_EQ(Text(s->flow_key()), "tenant");
          EXPECT_EQ(s->key_concurrency(), std::optional<uint32_t>(1));
        } else {
          const p::UpdateQueue* u = r->op_as_UpdateQueue();
          ASSERT_NE(u, nullptr);
          EXPECT_EQ(u->update()->max_depth(), std::optional<uint64_t>(10));
          EXPECT_EQ(u->update()->enqueue_paused(), std::optional<bool>(false));
          EXPECT_FALSE(u->update()->lease_ms().has_value());
          EXPECT_EQ(u->update()->key_concurrency(), std::optional<uint32_t>(0));
          EXPECT_EQ(u->update()->dead_letter_queue(), nullptr);
        }
        conn.SendMessage(queue_reply(r->request_id()));
        conn.WaitForClose();
      },
      2);
  const CliRun created =
      RunCli({"create-queue", "jobs", "--type", "exclusive", "--exclusivity-key", "tenant",
              "--lease-ms", "1000", "--dead-letter-queue", "jobs.dlq", "--dequeue-paused", "true",
              "--flow-key", "tenant", "--key-concurrency", "1", "--addr", server.addr()});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  const json::object q = created.OutObjects().at(0);
  EXPECT_EQ(q.at("name"), "jobs");
  EXPECT_EQ(q.at("type"), "exclusive");
  EXPECT_EQ(q.at("exclusivity_key"), "tenant");
  EXPECT_EQ(q.at("lease_ms").to_number<int64_t>(), 1000);
  EXPECT_EQ(q.at("max_attempts").to_number<int64_t>(), 5);
  EXPECT_EQ(q.at("counts").at("pending").to_number<int64_t>(), 2);
  EXPECT_EQ(q.at("counts").at("blocked").to_number<int64_t>(), 1);
  EXPECT_EQ(q.at("oldest_pending_age_ms").to_number<int64_t>(), 40);
  EXPECT_EQ(q.at("flow_key"), "tenant");
  EXPECT_EQ(q.at("key_concurrency").to_number<int64_t>(), 1);
  const CliRun updated = RunCli({"update-queue", "jobs", "--max-depth", "10", "--enqueue-paused",
                                 "false", "--key-concurrency", "0", "--addr", server.addr()});
  EXPECT_EQ(updated.exit_code, 0) << updated.err;
}

}  // namespace
}  // namespace sundial::client
