// Batches against a real sundiald through the `sundial` CLI (docs/semantics.md, "Batches";
// docs/cli.md, "Batches"): create with a callback, members in two queues with enqueue --batch,
// seal, workers finish them, the callback is in its queue once with the outcome counts; a sealed
// batch refuses new members; unknown batches are NOT_FOUND; and after kill -9 the done batch and
// its single callback are still there (recovered from the log).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/client/cli_runner.h"
#include "tests/e2e/server_process.h"

#ifdef SUNDIAL_CLI

namespace sundial::e2e {
namespace {

namespace json = boost::json;
using client::testing::CliRun;

std::string Str(const json::value& v) { return std::string(v.as_string()); }
int64_t Int(const json::value& v) { return v.to_number<int64_t>(); }

class BatchesE2E : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }
  void Start() {
    server_ = std::make_unique<ServerProcess>(dir_.path() + "/data", std::vector<std::string>{});
    ASSERT_TRUE(server_->Start()) << server_->log();
  }
  CliRun Cli(std::vector<std::string> args) {
    args.push_back("--addr");
    args.push_back(server_->addr());
    return client::testing::RunProgram(SUNDIAL_CLI, args);
  }
  std::vector<json::object> Ok(std::vector<std::string> args) {
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    const CliRun run = Cli(std::move(args));
    EXPECT_EQ(run.exit_code, 0) << shown << "\n" << run.err;
    return run.OutObjects();
  }
  json::object One(std::vector<std::string> args) {
    auto lines = Ok(std::move(args));
    EXPECT_EQ(lines.size(), 1u);
    return lines.empty() ? json::object() : lines[0];
  }
  std::string ServerError(std::vector<std::string> args, const std::string& code) {
    const CliRun run = Cli(std::move(args));
    EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
    const json::object e = run.ErrObject();
    EXPECT_EQ(e.contains("code") ? Str(e.at("code")) : "", code) << run.err;
    return e.contains("message") ? Str(e.at("message")) : "";
  }
  // Leases the next message of `queue` and completes it (or cancels it: `cancel`).
  void Finish(const std::string& queue, bool cancel = false) {
    json::object m = One({"dequeue", queue});
    const std::string id = Str(m.at("id"));
    if (cancel) {
      Ok({"cancel", queue, id});
    } else {
      Ok({"complete", queue, id, std::to_string(Int(m.at("lease_token")))});
    }
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(BatchesE2E, TheCallbackIsEnqueuedOnceWithTheCountsAndSurvivesKill9) {
  json::object created = One({"batch", "create", "nightly", "--callback-queue", "reports",
                              "--payload", "all done", "--meta", "tenant=acme"});
  EXPECT_EQ(Str(created.at("id")), "nightly");
  EXPECT_FALSE(created.at("sealed").as_bool());
  EXPECT_EQ(Str(created.at("callback").as_object().at("id")), "batch:nightly");
  // Again with the same callback: the same batch. With another: ALREADY_EXISTS.
  EXPECT_EQ(Str(One({"batch", "create", "nightly", "--callback-queue", "reports", "--payload",
                     "all done", "--meta", "tenant=acme"})
                    .at("id")),
            "nightly");
  ServerError({"batch", "create", "nightly", "--callback-queue", "elsewhere"}, "ALREADY_EXISTS");
  ServerError({"enqueue", "a", "--id", "x", "--batch", "nope"}, "NOT_FOUND");

  Ok({"enqueue", "a", "--id", "a1", "--batch", "nightly"});
  Ok({"enqueue", "a", "--id", "a2", "--batch", "nightly"});
  Ok({"enqueue", "b", "--id", "b1", "--batch", "nightly"});
  json::object sealed = One({"batch", "seal", "nightly"});
  EXPECT_TRUE(sealed.at("sealed").as_bool());
  EXPECT_EQ(Int(sealed.at("members")), 3);
  EXPECT_EQ(Int(sealed.at("active")), 3);
  ServerError({"enqueue", "a", "--id", "a3", "--batch", "nightly"}, "FAILED_PRECONDITION");

  Finish("a");
  Finish("a", /*cancel=*/true);
  json::object open = One({"batch", "get", "nightly"});
  EXPECT_FALSE(open.at("done").as_bool());
  EXPECT_EQ(Int(open.at("completed")), 1);
  EXPECT_EQ(Int(open.at("canceled")), 1);
  ServerError({"get", "reports", "batch:nightly"}, "NOT_FOUND");
  Finish("b");
  json::object done = One({"batch", "get", "nightly"});
  EXPECT_TRUE(done.at("done").as_bool());
  EXPECT_EQ(Int(done.at("active")), 0);

  auto check_callback = [&] {
    json::object cb = One({"get", "reports", "batch:nightly"});
    EXPECT_EQ(Str(cb.at("state")), "pending");
    EXPECT_EQ(Str(cb.at("payload")), "all done");
    EXPECT_EQ(Int(cb.at("version")), 1);
    const json::object& meta = cb.at("metadata").as_object();
    EXPECT_EQ(Str(meta.at("tenant")), "acme");
    EXPECT_EQ(Str(meta.at("x-batch-id")), "nightly");
    EXPECT_EQ(Str(meta.at("x-batch-total")), "3");
    EXPECT_EQ(Str(meta.at("x-batch-completed")), "2");
    EXPECT_EQ(Str(meta.at("x-batch-canceled")), "1");
    EXPECT_EQ(Str(meta.at("x-batch-errored")), "0");
    json::object reports = One({"get-queue", "reports"});
    EXPECT_EQ(Int(reports.at("counts").as_object().at("pending")), 1);
  };
  check_callback();

  server_->Kill();
  Start();
  EXPECT_TRUE(One({"batch", "get", "nightly"}).at("done").as_bool());
  check_callback();
}

}  // namespace
}  // namespace sundial::e2e

#endif  // SUNDIAL_CLI
