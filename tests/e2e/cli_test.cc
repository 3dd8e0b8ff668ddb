// Every `sundial` subcommand against a real sundiald (tests/e2e/server_process.h), checking the
// rules of docs/semantics.md as a CLI user sees them: JSON lines with the protocol's field names,
// exit codes (0 ok, 1 server error with {"code","message"} on stderr, 2 usage, 3 unreachable),
// priority order and FIFO ties, leases and stale tokens, idempotent complete and enqueue, retries,
// dead letters and redrive, exclusivity, browse paging, auth, and watch over WebSocket.
#include <gtest/gtest.h>

#include <boost/json/serialize.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "tests/client/cli_runner.h"
#include "tests/e2e/server_process.h"

#ifdef SUNDIAL_CLI

namespace sundial::e2e {
namespace {

namespace json = boost::json;
using client::testing::BackgroundProgram;
using client::testing::CliRun;
using client::testing::TempFiles;

std::string Str(const json::value& v) { return std::string(v.as_string()); }
int64_t Int(const json::value& v) { return v.to_number<int64_t>(); }

// prefix + number (appended: GCC 12 -O3 warns -Wrestrict on `"..." + std::to_string(i)`).
std::string Numbered(std::string prefix, int64_t n) {
  prefix.append(std::to_string(n));
  return prefix;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class CliE2E : public ::testing::Test {
 protected:
  void SetUp() override { StartServer({}); }

  void StartServer(std::vector<std::string> flags) {
    server_ = std::make_unique<ServerProcess>(dir_.path() + "/data", std::move(flags));
    ASSERT_TRUE(server_->Start()) << server_->log();
  }

  // `sundial ARGS… --addr <server>`.
  CliRun Cli(std::vector<std::string> args) {
    args.push_back("--addr");
    args.push_back(server_->addr());
    return client::testing::RunProgram(SUNDIAL_CLI, args);
  }
  // Runs and expects exit 0; the JSON lines.
  std::vector<json::object> Ok(std::vector<std::string> args) {
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    const CliRun run = Cli(std::move(args));
    EXPECT_EQ(run.exit_code, 0) << shown << "\n" << run.err;
    return run.OutObjects();
  }
  // Runs and expects exit 1 with this code on stderr; the message.
  std::string ServerError(std::vector<std::string> args, const std::string& code) {
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    const CliRun run = Cli(std::move(args));
    EXPECT_EQ(run.exit_code, 1) << shown << "\n" << run.out << run.err;
    const json::object e = run.ErrObject();
    EXPECT_EQ(e.contains("code") ? Str(e.at("code")) : "", code) << shown << "\n" << run.err;
    return e.contains("message") ? Str(e.at("message")) : "";
  }

  // Leases one message; it as `dequeue` printed it.
  json::object Lease(const std::string& queue) {
    auto lines = Ok({"dequeue", queue});
    EXPECT_EQ(lines.size(), 1u);
    return lines.empty() ? json::object() : lines[0];
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(CliE2E, QueueLifecycle) {
  auto created = Ok({"create-queue", "jobs", "--lease-ms", "5000", "--max-attempts", "3"});
  ASSERT_EQ(created.size(), 1u);
  EXPECT_EQ(Str(created[0].at("name")), "jobs");
  EXPECT_EQ(Str(created[0].at("type")), "simple");
  EXPECT_EQ(Int(created[0].at("lease_ms")), 5000);
  EXPECT_EQ(Int(created[0].at("max_attempts")), 3);
  EXPECT_EQ(Int(created[0].at("retention_ms")), 3600000);  // the default (docs/semantics.md)
  Ok({"create-queue", "jobs", "--lease-ms", "5000", "--max-attempts", "3"});  // identical
  ServerError({"create-queue", "jobs", "--lease-ms", "6000"}, "ALREADY_EXISTS");

  auto updated = Ok({"update-queue", "jobs", "--lease-ms", "7000", "--enqueue-paused", "true"});
  ASSERT_EQ(updated.size(), 1u);
  EXPECT_EQ(Int(updated[0].at("lease_ms")), 7000);
  EXPECT_EQ(Int(updated[0].at("max_attempts")), 3) << "not given: unchanged";
  EXPECT_EQ(updated[0].at("enqueue_paused"), true);
  ServerError({"enqueue", "jobs", "--payload", "x"}, "FAILED_PRECONDITION");
  Ok({"update-queue", "jobs", "--enqueue-paused", "false"});

  Ok({"enqueue", "jobs", "--payload", "x"});
  auto got = Ok({"get-queue", "jobs"});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Int(got[0].at("counts").at("pending")), 1);
  Ok({"create-queue", "other"});
  EXPECT_EQ(Ok({"list-queues"}).size(), 2u);

  auto deleted = Ok({"delete-queue", "jobs"});
  ASSERT_EQ(deleted.size(), 1u);
  EXPECT_EQ(deleted[0].at("deleted"), true);
  EXPECT_NE(ServerError({"get-queue", "jobs"}, "NOT_FOUND").find("queue"), std::string::npos);
}

TEST_F(CliE2E, DequeueIsEarliestDeadlineFirstWithFifoTies) {
  Ok({"enqueue", "q", "--id", "late", "--priority", "50"});
  Ok({"enqueue", "q", "--id", "tie-1", "--priority", "10"});
  Ok({"enqueue", "q", "--id", "early", "--priority", "-3"});
  Ok({"enqueue", "q", "--id", "tie-2", "--priority", "10"});
  auto lines = Ok({"dequeue", "q", "--max", "10"});
  ASSERT_EQ(lines.size(), 4u);
  const std::vector<std::string> expected{"early", "tie-1", "tie-2", "late"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(Str(lines[i].at("id")), expected[i]);
    EXPECT_EQ(Str(lines[i].at("state")), "running");
    EXPECT_EQ(Int(lines[i].at("attempts")), 1);
    EXPECT_GT(Int(lines[i].at("lease_token")), 0);
    EXPECT_GT(Int(lines[i].at("lease_expires_at")), NowMs());
  }
  EXPECT_TRUE(Ok({"dequeue", "q"}).empty()) << "nothing left: no line";
  EXPECT_TRUE(Ok({"dequeue", "q", "--wait-ms", "100"}).empty()) << "a long poll that times out";
}

TEST_F(CliE2E, LeaseTokensGuardCompleteFailExtend) {
  Ok({"enqueue", "q", "--id", "m1", "--payload", "work"});
  const json::object m = Lease("q");
  const std::string token = std::to_string(Int(m.at("lease_token")));
  const std::string stale = std::to_string(Int(m.at("lease_token")) + 1);
  ServerError({"complete", "q", "m1", stale}, "FAILED_PRECONDITION");
  ServerError({"fail", "q", "m1", stale}, "FAILED_PRECONDITION");
  ServerError({"extend", "q", "m1", stale, "--lease-ms", "1000"}, "FAILED_PRECONDITION");

  auto extended = Ok({"extend", "q", "m1", token, "--lease-ms", "600000"});
  ASSERT_EQ(extended.size(), 1u);
  EXPECT_GT(Int(extended[0].at("lease_expires_at")), Int(m.at("lease_expires_at")));

  auto completed = Ok({"complete", "q", "m1", token});
  ASSERT_EQ(completed.size(), 1u);
  EXPECT_EQ(Str(completed[0].at("state")), "completed");
  Ok({"complete", "q", "m1", token});  // repeating a complete that succeeded: success
  auto got = Ok({"get", "q", "m1"});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Str(got[0].at("state")), "completed");
  EXPECT_EQ(Str(got[0].at("payload")), "work");
}

TEST_F(CliE2E, EnqueueIsIdempotentForIdenticalContent) {
  auto first = Ok({"enqueue", "q", "--id", "m1", "--payload", "a", "--meta", "k=v"});
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].at("duplicate"), false);
  EXPECT_EQ(Int(first[0].at("version")), 1);
  auto again = Ok({"enqueue", "q", "--id", "m1", "--payload", "a", "--meta", "k=v"});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].at("duplicate"), true);
  ServerError({"enqueue", "q", "--id", "m1", "--payload", "b"}, "ALREADY_EXISTS");
  auto generated = Ok({"enqueue", "q", "--durability", "relaxed"});
  ASSERT_EQ(generated.size(), 1u);
  EXPECT_FALSE(Str(generated[0].at("id")).empty()) << "the server generates an id";
}

// docs/cli.md: --ttl-ms and --dedupe on create-queue and update-queue, --ttl-ms and
// --debounce-ms on enqueue (docs/semantics.md, "Flow control").
TEST_F(CliE2E, TtlDedupeAndDebounceFlags) {
  auto created = Ok({"create-queue", "d", "--ttl-ms", "60000", "--dedupe", "while_active"});
  ASSERT_EQ(created.size(), 1u);
  EXPECT_EQ(Int(created[0].at("ttl_ms")), 60000);
  EXPECT_EQ(Str(created[0].at("dedupe")), "while_active");
  auto updated = Ok({"update-queue", "d", "--dedupe", "keep"});
  ASSERT_EQ(updated.size(), 1u);
  EXPECT_EQ(Str(updated[0].at("dedupe")), "keep");
  EXPECT_EQ(Int(updated[0].at("ttl_ms")), 60000) << "not given: unchanged";
  Ok({"enqueue", "d", "--id", "a", "--payload", "first", "--ttl-ms", "5000"});
  auto got = Ok({"get", "d", "a"});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Int(got[0].at("expires_at")), Int(got[0].at("enqueued_at")) + 5000);
  auto debounced =
      Ok({"enqueue", "d", "--id", "a", "--payload", "second", "--debounce-ms", "9000"});
  ASSERT_EQ(debounced.size(), 1u);
  EXPECT_EQ(debounced[0].at("duplicate"), false);
  EXPECT_EQ(Int(debounced[0].at("version")), 2);
  got = Ok({"get", "d", "a"});
  EXPECT_EQ(Str(got[0].at("state")), "invisible");
  EXPECT_EQ(Str(got[0].at("payload")), "second");
}

TEST_F(CliE2E, PayloadsAndMetadataRoundTrip) {
  TempFiles files;
  const std::string binary(std::string("\x00\xff\x10 bytes", 9));
  const std::string path = files.Write("payload", binary);
  Ok({"enqueue", "q", "--id", "bin", "--payload-file", path, "--meta", "tenant=acme", "--meta",
      "empty="});
  Ok({"enqueue", "q", "--id", "text", "--payload", "héllo"});
  auto bin = Ok({"get", "q", "bin"});
  ASSERT_EQ(bin.size(), 1u);
  EXPECT_FALSE(bin[0].contains("payload"));
  EXPECT_EQ(Str(bin[0].at("payload_base64")), "AP8QIGJ5dGVz");
  EXPECT_EQ(Str(bin[0].at("metadata").at("tenant")), "acme");
  EXPECT_EQ(Str(bin[0].at("metadata").at("empty")), "");
  auto text = Ok({"get", "q", "text"});
  ASSERT_EQ(text.size(), 1u);
  EXPECT_EQ(Str(text[0].at("payload")), "héllo");
  ServerError({"get", "q", "nope"}, "NOT_FOUND");
}

TEST_F(CliE2E, FailRetriesThenDeadLetters) {
  Ok({"create-queue", "jobs.dlq"});
  Ok({"create-queue", "jobs", "--max-attempts", "2", "--dead-letter-queue", "jobs.dlq"});
  Ok({"enqueue", "jobs", "--id", "m1", "--payload", "p"});

  json::object m = Lease("jobs");
  auto retried = Ok({"fail", "jobs", "m1", std::to_string(Int(m.at("lease_token"))), "--error",
                     "smtp down", "--retry-delay-ms", "0"});
  ASSERT_EQ(retried.size(), 1u);
  const std::string state = Str(retried[0].at("state"));
  EXPECT_TRUE(state == "invisible" || state == "pending") << state;

  // Visible again within 10 ms of its due time; poll the CLI, bounded.
  json::object second;
  for (int i = 0; i < 200 && second.empty(); ++i) {
    auto lines = Ok({"dequeue", "jobs"});
    if (!lines.empty()) second = lines[0];
  }
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(Int(second.at("attempts")), 2);
  EXPECT_EQ(Str(second.at("last_error")), "smtp down");
  auto dead = Ok({"fail", "jobs", "m1", std::to_string(Int(second.at("lease_token"))), "--error",
                  "still down"});
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(Str(dead[0].at("dead_letter_queue")), "jobs.dlq");

  auto moved = Ok({"get", "jobs.dlq", "m1"});
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(Str(moved[0].at("state")), "pending");
  EXPECT_EQ(Int(moved[0].at("attempts")), 0);
  EXPECT_EQ(Str(moved[0].at("metadata").at("x-origin-queue")), "jobs");
}

TEST_F(CliE2E, ErroredMessagesAreRedriven) {
  Ok({"create-queue", "q", "--max-attempts", "1"});
  for (const char* id : {"a", "b", "c"}) Ok({"enqueue", "q", "--id", id});
  for (int i = 0; i < 3; ++i) {
    json::object m = Lease("q");
    Ok({"fail", "q", Str(m.at("id")), std::to_string(Int(m.at("lease_token")))});
  }
  auto counts = Ok({"count", "q"});
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(Int(counts[0].at("errored")), 3);
  auto explained = Ok({"explain", "q", "a"});
  ASSERT_EQ(explained.size(), 1u);
  EXPECT_EQ(Str(explained[0].at("reason")), "attempts_spent");

  const CliRun by_ids = Cli({"redrive", "q", "a", "missing"});
  EXPECT_EQ(by_ids.exit_code, 1);
  auto ok_lines = by_ids.OutObjects();
  ASSERT_EQ(ok_lines.size(), 1u);
  EXPECT_EQ(Str(ok_lines[0].at("id")), "a");
  EXPECT_EQ(Str(ok_lines[0].at("state")), "pending");
  EXPECT_EQ(Str(by_ids.ErrObject().at("id")), "missing");

  auto all = Ok({"redrive", "q", "--all"});
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(Int(all[0].at("redriven")), 2);
  auto got = Ok({"get", "q", "b"});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Str(got[0].at("state")), "pending");
  EXPECT_EQ(Int(got[0].at("attempts")), 0);
}

TEST_F(CliE2E, FlowKeyAndKeyConcurrencyFlags) {
  auto created = Ok({"create-queue", "keyed", "--flow-key", "tenant", "--key-concurrency", "3"});
  ASSERT_EQ(created.size(), 1u);
  EXPECT_EQ(Str(created[0].at("flow_key")), "tenant");
  EXPECT_EQ(Int(created[0].at("key_concurrency")), 3);
  auto updated = Ok({"update-queue", "keyed", "--key-concurrency", "0"});
  ASSERT_EQ(updated.size(), 1u);
  EXPECT_EQ(Int(updated[0].at("key_concurrency")), 0) << "0: no limit";
  EXPECT_EQ(Str(updated[0].at("flow_key")), "tenant");
  auto plain = Ok({"create-queue", "plain"});
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(Str(plain[0].at("flow_key")), "");
  EXPECT_EQ(Int(plain[0].at("key_concurrency")), 0);
  EXPECT_EQ(ServerError({"create-queue", "bad", "--key-concurrency", "2"}, "INVALID_ARGUMENT"),
            "key_concurrency: needs a flow_key");
  EXPECT_EQ(
      ServerError({"create-queue", "long", "--flow-key", std::string(65, 'k')}, "INVALID_ARGUMENT"),
      "flow_key: must be a metadata key of 1-64 bytes");
}

TEST_F(CliE2E, RateFlagsThrottleAKeyAndExplainSaysSo) {
  auto created = Ok({"create-queue", "charges", "--flow-key", "merchant", "--key-rate-per-s",
                     "0.001", "--key-burst", "2", "--rate-per-s", "2.5", "--burst", "10"});
  ASSERT_EQ(created.size(), 1u);
  EXPECT_EQ(created[0].at("key_rate_per_s").to_number<double>(), 0.001);
  EXPECT_EQ(Int(created[0].at("key_burst")), 2);
  EXPECT_EQ(created[0].at("rate_per_s").to_number<double>(), 2.5);
  EXPECT_EQ(Int(created[0].at("burst")), 10);
  auto updated = Ok({"update-queue", "charges", "--rate-per-s", "100"});
  ASSERT_EQ(updated.size(), 1u);
  EXPECT_TRUE(updated[0].at("rate_per_s").is_int64()) << "a whole rate prints as an integer";
  EXPECT_EQ(Int(updated[0].at("rate_per_s")), 100);
  EXPECT_EQ(Int(updated[0].at("key_burst")), 2) << "not given: unchanged";
  EXPECT_EQ(
      ServerError({"update-queue", "charges", "--key-rate-per-s", "0.0005"}, "INVALID_ARGUMENT"),
      "key_rate_per_s: must be 0.001-1000000 with at most 3 decimals");
  EXPECT_EQ(ServerError({"create-queue", "bare", "--key-rate-per-s", "1"}, "INVALID_ARGUMENT"),
            "key_rate_per_s: needs a flow_key");
  for (const char* id : {"a1", "a2", "a3"}) {
    Ok({"enqueue", "charges", "--id", id, "--meta", "merchant=acme"});
  }
  Ok({"enqueue", "charges", "--id", "b1", "--meta", "merchant=bolt"});
  auto leased = Ok({"dequeue", "charges", "--max", "10"});
  ASSERT_EQ(leased.size(), 3u) << "acme's burst of 2, and bolt's";
  auto why = Ok({"explain", "charges", "a3"});
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(Str(why[0].at("reason")), "key_rate");
  EXPECT_EQ(Str(why[0].at("exclusivity_value")), "acme");
  EXPECT_EQ(Str(why[0].at("explanation")),
            "key acme has no token (key_rate_per_s); next token at " +
                std::to_string(Int(why[0].at("until"))));
  auto counts = Ok({"count", "charges"});
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(Int(counts[0].at("blocked")), 1);
}

TEST_F(CliE2E, KeyLimitsOverrideOneValueAndListKeysShowsThem) {
  Ok({"create-queue", "studios", "--flow-key", "studio", "--key-concurrency", "1"});
  for (const char* id : {"a1", "a2", "a3"}) {
    Ok({"enqueue", "studios", "--id", id, "--meta", "studio=acme"});
  }
  Ok({"enqueue", "studios", "--id", "b1", "--meta", "studio=bolt"});
  auto set = Ok({"set-key-limits", "studios", "acme", "--concurrency", "2", "--weight", "3",
                 "--rate-per-s", "0.5"});
  ASSERT_EQ(set.size(), 1u);
  EXPECT_EQ(Int(set[0].at("concurrency")), 2);
  EXPECT_EQ(Int(set[0].at("overrides").at("weight")), 3);
  EXPECT_EQ(set[0].at("rate_per_s").to_number<double>(), 0.5);
  EXPECT_FALSE(set[0].at("overrides").as_object().contains("burst")) << "not overridden";
  EXPECT_EQ(Ok({"dequeue", "studios", "--max", "10"}).size(), 2u) << "acme's one token, bolt";
  auto keys = Ok({"list-keys", "studios"});
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(Str(keys[0].at("value")), "acme") << "more pending first";
  EXPECT_EQ(Int(keys[0].at("pending")), 2);
  EXPECT_GT(Int(keys[0].at("next_token")), 0) << "acme is out of tokens";
  auto running = Ok({"list-keys", "studios", "--order", "running", "--limit", "1"});
  ASSERT_EQ(running.size(), 1u);
  auto reset = Ok({"set-key-limits", "studios", "acme"});
  ASSERT_EQ(reset.size(), 1u);
  EXPECT_TRUE(reset[0].at("overrides").as_object().empty());
  EXPECT_EQ(Int(reset[0].at("concurrency")), 1) << "the queue's again";
  auto got = Ok({"get-key-limits", "studios", "acme"});
  EXPECT_TRUE(got[0].at("held").as_bool());
  EXPECT_EQ(ServerError({"set-key-limits", "studios", "acme", "--weight", "0"}, "INVALID_ARGUMENT"),
            "weight: must be 1-1000");
  Ok({"create-queue", "plain"});
  EXPECT_EQ(ServerError({"list-keys", "plain"}, "FAILED_PRECONDITION"),
            "queue: has no flow_key (key limits need one)");
}

TEST_F(CliE2E, FairnessFlagsTakeTurnsAndExplainSaysWhose) {
  auto created = Ok({"create-queue", "fair", "--flow-key", "tenant", "--fairness", "weighted",
                     "--overdue-first-ms", "60000"});
  ASSERT_EQ(created.size(), 1u);
  EXPECT_EQ(Str(created[0].at("fairness")), "weighted");
  EXPECT_EQ(Int(created[0].at("overdue_first_ms")), 60000);
  // Priorities below are small numbers: as deadlines they are long overdue, and would all jump
  // the turns. Without overdue_first_ms, the turns alone.
  Ok({"update-queue", "fair", "--overdue-first-ms", "0"});
  for (const char* id : {"big0", "big1"}) {
    Ok({"enqueue", "fair", "--id", id, "--meta", "tenant=big"});
  }
  Ok({"enqueue", "fair", "--id", "small0", "--priority", "9", "--meta", "tenant=small"});
  auto why = Ok({"explain", "fair", "small0"});
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(Str(why[0].at("reason")), "fair_share");
  EXPECT_EQ(Str(why[0].at("explanation")), "fair share: key big has its turn");
  auto leased = Ok({"dequeue", "fair", "--max", "2"});
  ASSERT_EQ(leased.size(), 2u);
  EXPECT_EQ(Str(leased[1].at("id")), "small0") << "small's turn after big's";
  EXPECT_EQ(ServerError({"create-queue", "plain", "--fairness", "weighted"}, "INVALID_ARGUMENT"),
            "fairness: needs a flow_key");
  EXPECT_EQ(ServerError({"update-queue", "fair", "--fairness", "none", "--overdue-first-ms", "5"},
                        "INVALID_ARGUMENT"),
            "overdue_first_ms: needs fairness weighted");
}

TEST_F(CliE2E, ExclusiveQueueLeasesOneMessagePerValue) {
  ServerError({"create-queue", "ex", "--type", "exclusive"}, "INVALID_ARGUMENT");
  Ok({"create-queue", "ex", "--type", "exclusive", "--exclusivity-key", "tenant"});
  ServerError({"enqueue", "ex", "--id", "nokey"}, "INVALID_ARGUMENT");
  Ok({"enqueue", "ex", "--id", "a1", "--priority", "1", "--meta", "tenant=a"});
  Ok({"enqueue", "ex", "--id", "a2", "--priority", "2", "--meta", "tenant=a"});
  Ok({"enqueue", "ex", "--id", "b1", "--priority", "3", "--meta", "tenant=b"});
  auto leased = Ok({"dequeue", "ex", "--max", "10"});
  ASSERT_EQ(leased.size(), 2u);
  EXPECT_EQ(Str(leased[0].at("id")), "a1");
  EXPECT_EQ(Str(leased[1].at("id")), "b1");
  auto counts = Ok({"count", "ex"});
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(Int(counts[0].at("blocked")), 1);
  auto why = Ok({"explain", "ex", "a2"});
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(Str(why[0].at("reason")), "exclusivity_held");
  EXPECT_EQ(Str(why[0].at("exclusivity_value")), "a");
  EXPECT_EQ(Int(why[0].at("lease_token")), Int(leased[0].at("lease_token")));

  Ok({"complete", "ex", "a1", std::to_string(Int(leased[0].at("lease_token")))});
  auto next = Ok({"dequeue", "ex"});
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(Str(next[0].at("id")), "a2") << "released by complete";
}

TEST_F(CliE2E, FiltersCancelReprioritizeAndPurge) {
  Ok({"enqueue", "q", "--id", "a", "--priority", "5", "--meta", "tenant=acme"});
  Ok({"enqueue", "q", "--id", "b", "--priority", "6", "--meta", "tenant=acme"});
  Ok({"enqueue", "q", "--id", "c", "--priority", "7", "--meta", "tenant=other"});
  auto filtered = Ok({"count", "q", "--filter", "tenant=acme"});
  ASSERT_EQ(filtered.size(), 1u);
  EXPECT_EQ(Int(filtered[0].at("pending")), 2);

  auto repri = Ok({"reprioritize", "q", "c", "--priority", "1"});
  ASSERT_EQ(repri.size(), 1u);
  EXPECT_EQ(Int(repri[0].at("version")), 2);
  auto bulk = Ok({"reprioritize", "q", "--filter", "tenant=acme", "--priority", "100"});
  ASSERT_EQ(bulk.size(), 1u);
  EXPECT_EQ(Int(bulk[0].at("reprioritized")), 2);
  auto first = Ok({"dequeue", "q", "--filter", "tenant=acme"});
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(Str(first[0].at("id")), "a") << "FIFO among equal priorities";

  const CliRun cancel = Cli({"cancel", "q", "b", "missing"});
  EXPECT_EQ(cancel.exit_code, 1);
  ASSERT_EQ(cancel.OutObjects().size(), 1u);
  EXPECT_EQ(Str(cancel.OutObjects()[0].at("state")), "canceled");
  EXPECT_EQ(Str(cancel.ErrObject().at("code")), "NOT_FOUND");
  auto canceled = Ok({"cancel", "q", "--filter", "tenant=other"});
  ASSERT_EQ(canceled.size(), 1u);
  EXPECT_EQ(Int(canceled[0].at("canceled")), 1);

  auto purged = Ok({"purge-queue", "q", "--state", "canceled", "completed"});
  ASSERT_EQ(purged.size(), 1u);
  EXPECT_EQ(Int(purged[0].at("purged")), 2);
  ServerError({"get", "q", "b"}, "NOT_FOUND");
}

TEST_F(CliE2E, BrowsePagesThroughEveryMessageInPriorityOrder) {
  for (int i = 0; i < 7; ++i) {
    Ok({"enqueue", "q", "--id", Numbered("m", i), "--priority", std::to_string(100 - i)});
  }
  std::vector<std::string> seen;
  std::string cursor;
  for (int page = 0; page < 10; ++page) {
    std::vector<std::string> args{"browse", "q", "--state", "pending", "--limit", "3"};
    if (!cursor.empty()) {
      args.push_back("--cursor");
      args.push_back(cursor);
    }
    cursor.clear();
    for (const json::object& line : Ok(args)) {
      if (line.contains("next_cursor")) {
        cursor = Str(line.at("next_cursor"));
      } else {
        EXPECT_EQ(Str(line.at("state")), "pending");
        seen.push_back(Str(line.at("id")));
      }
    }
    if (cursor.empty()) break;
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"m6", "m5", "m4", "m3", "m2", "m1", "m0"}));
}

TEST_F(CliE2E, DependenciesWaitAndCarryTheirResults) {
  Ok({"enqueue", "q", "--id", "parent"});
  Ok({"enqueue", "other", "--id", "a"});
  Ok({"enqueue", "q", "--id", "child", "--depends-on", "parent,other/a", "--on-dependency-failure",
      "release"});
  Ok({"enqueue", "q", "--id", "grandchild", "--depends-on", "child", "--depends-on", "parent"});
  auto got = Ok({"get", "q", "child"});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Str(got[0].at("state")), "waiting");
  auto counts = Ok({"count", "q"});
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(Int(counts[0].at("waiting")), 2);
  auto browsed = Ok({"browse", "q", "--state", "waiting"});
  EXPECT_EQ(browsed.size(), 2u);
  auto why = Ok({"explain", "q", "child"});
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(Str(why[0].at("reason")), "waiting_on_dependencies");
  EXPECT_EQ(Int(why[0].at("dependencies")), 2);
  EXPECT_EQ(Int(why[0].at("unfinished")), 2);
  EXPECT_EQ(Str(why[0].at("explanation")), "waiting on 2 of 2 dependencies: q/parent, other/a");

  // other/a is canceled: child's policy is release, so it still waits for parent only.
  Ok({"cancel", "other", "a"});
  const json::object parent = Lease("q");
  ASSERT_EQ(Str(parent.at("id")), "parent");
  Ok({"complete", "q", "parent", std::to_string(Int(parent.at("lease_token"))), "--result",
      "from parent"});
  auto leased = Ok({"dequeue", "q", "--include-dependency-results"});
  ASSERT_EQ(leased.size(), 1u);
  EXPECT_EQ(Str(leased[0].at("id")), "child");
  const json::array& deps = leased[0].at("dependency_results").as_array();
  ASSERT_EQ(deps.size(), 2u);
  EXPECT_EQ(Str(deps[0].at("id")), "q/parent");
  EXPECT_EQ(Str(deps[0].at("state")), "completed");
  EXPECT_EQ(Str(deps[0].at("result")), "from parent");
  EXPECT_EQ(Str(deps[1].at("id")), "other/a");
  EXPECT_EQ(Str(deps[1].at("state")), "canceled");
  got = Ok({"get", "q", "child", "--include-dependency-results"});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].at("dependency_results").as_array().size(), 2u);
  EXPECT_FALSE(Ok({"get", "q", "child"})[0].contains("dependency_results"));

  const std::string message = ServerError({"enqueue", "q", "--depends-on", "missing"}, "NOT_FOUND");
  EXPECT_NE(message.find("depends_on"), std::string::npos) << message;
  const CliRun bad =
      Cli({"enqueue", "q", "--depends-on", "parent", "--on-dependency-failure", "retry"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

TEST_F(CliE2E, StatsAndHealth) {
  Ok({"enqueue", "q"});
  auto stats = Ok({"stats"});
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(Int(stats[0].at("queues")), 1);
  EXPECT_EQ(Int(stats[0].at("messages").at("pending")), 1);
  EXPECT_GE(Int(stats[0].at("wal_durable_lsn")), 1);
  EXPECT_EQ(stats[0].at("wal_failed"), false);
  auto health = Ok({"health"});
  ASSERT_EQ(health.size(), 1u);
  EXPECT_EQ(health[0].at("live"), true);
  EXPECT_EQ(health[0].at("ready"), true);
}

TEST_F(CliE2E, WatchPrintsEveryStateChange) {
  Ok({"create-queue", "q"});
  BackgroundProgram watch(
      SUNDIAL_CLI, {"watch", "q", "--http-addr", Numbered("127.0.0.1:", server_->http_port())});
  ASSERT_TRUE(watch.started());
  // The subscription starts once the upgrade is done: enqueue until the watcher sees one.
  bool seen = false;
  for (int i = 0; i < 200 && !seen; ++i) {
    Ok({"enqueue", "q", "--id", Numbered("w", i)});
    for (int polls = 0; polls < 20 && !seen; ++polls) {
      seen = watch.out().find("\"cause\":\"enqueued\"") != std::string::npos;
      if (!seen) ::usleep(5000);  // waiting for another process's output, bounded
    }
  }
  ASSERT_TRUE(seen) << watch.err();
  json::object leased = Lease("q");
  // Fields in the CLI's order (tools/reply_json.h); a substring, since the watcher may be
  // mid-line.
  std::string event = R"("queue":"q","id":")";
  event.append(Str(leased.at("id")));
  event.append(R"(","from":"pending","to":"running","version":)");
  event.append(std::to_string(Int(leased.at("version"))));
  bool leased_seen = false;
  for (int polls = 0; polls < 400 && !leased_seen; ++polls) {
    leased_seen = watch.out().find(event) != std::string::npos;
    if (!leased_seen) ::usleep(5000);  // waiting for another process's output, bounded
  }
  EXPECT_TRUE(leased_seen) << event << "\n" << watch.out();
}

TEST_F(CliE2E, UnreachableServerExitsThree) {
  const std::string addr = server_->addr();
  ASSERT_EQ(server_->Terminate(), 0);
  const CliRun run = client::testing::RunProgram(SUNDIAL_CLI, {"health", "--addr", addr});
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_EQ(Str(run.ErrObject().at("code")), "UNAVAILABLE");
}

class CliAuthE2E : public CliE2E {
 protected:
  void SetUp() override {
    token_file_ = files_.Write("token", "correct horse\n");
    StartServer({"--auth-token-file", token_file_});
  }
  TempFiles files_;
  std::string token_file_;
};

TEST_F(CliAuthE2E, TokenFileIsNeededAndChecked) {
  ServerError({"health"}, "UNAUTHENTICATED");
  const std::string wrong = files_.Write("wrong", "battery staple\n");
  ServerError({"--token-file", wrong, "health"}, "UNAUTHENTICATED");
  auto ok = Ok({"health", "--token-file", token_file_});
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].at("live"), true);

  // watch presents the token on the upgrade; without it the upgrade is refused.
  const std::string http = Numbered("127.0.0.1:", server_->http_port());
  BackgroundProgram refused(SUNDIAL_CLI, {"watch", "*", "--http-addr", http});
  EXPECT_EQ(refused.WaitExit(10'000), 1);
  EXPECT_NE(refused.err().find("UNAUTHENTICATED"), std::string::npos) << refused.err();
  BackgroundProgram accepted(SUNDIAL_CLI,
                             {"watch", "*", "--http-addr", http, "--token-file", token_file_});
  bool ticked = false;  // a stats tick every second
  for (int polls = 0; polls < 600 && !ticked; ++polls) {
    ticked = accepted.out().find("\"event\":\"stats\"") != std::string::npos;
    if (!ticked) ::usleep(5000);
  }
  EXPECT_TRUE(ticked) << accepted.err();
}

}  // namespace
}  // namespace sundial::e2e

#endif  // SUNDIAL_CLI
