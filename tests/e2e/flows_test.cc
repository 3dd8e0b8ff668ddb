// Flows against a real sundiald through the `sundial` CLI (docs/semantics.md, "Flows";
// docs/cli.md, "Flows"): enqueue-flow of a tree across three queues answers each node in
// pre-order; the parents wait until their children complete; after kill -9 the tree is intact
// (one log record); a refused flow leaves nothing; a resend is a duplicate; bad files are
// usage errors.
#include <gtest/gtest.h>

#include <fstream>
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

constexpr const char* kFlow = R"({"queue": "reports", "id": "report-7", "payload": "weekly",
  "children": [{"queue": "images", "id": "image-1",
                "children": [{"queue": "thumbs", "payload": "t1"}]},
               {"queue": "images", "id": "image-2", "metadata": {"size": "large"}}]})";

class FlowsE2E : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }
  void Start() {
    server_ = std::make_unique<ServerProcess>(dir_.path() + "/data", std::vector<std::string>{});
    ASSERT_TRUE(server_->Start()) << server_->log();
  }
  std::string File(const std::string& name, const std::string& text) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  CliRun Cli(std::vector<std::string> args) {
    args.push_back("--addr");
    args.push_back(server_->addr());
    return client::testing::RunProgram(SUNDIAL_CLI, args);
  }
  std::vector<json::object> Ok(std::vector<std::string> args) {
    const CliRun run = Cli(std::move(args));
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return run.OutObjects();
  }
  std::string State(const std::string& queue, const std::string& id) {
    auto lines = Ok({"get", queue, id});
    return lines.size() == 1 ? Str(lines[0].at("state")) : "";
  }
  void Finish(const std::string& queue) {
    auto leased = Ok({"dequeue", queue});
    ASSERT_EQ(leased.size(), 1u) << queue;
    Ok({"complete", queue, Str(leased[0].at("id")),
        std::to_string(Int(leased[0].at("lease_token")))});
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(FlowsE2E, ATreeIsEnqueuedAtOnceSurvivesKill9AndItsRootRunsLast) {
  const std::string path = File("flow.json", kFlow);
  std::vector<json::object> nodes = Ok({"enqueue-flow", "--file", path});
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(Str(nodes[0].at("queue")) + "/" + Str(nodes[0].at("id")), "reports/report-7");
  EXPECT_EQ(Str(nodes[1].at("id")), "image-1");
  EXPECT_EQ(Str(nodes[2].at("queue")), "thumbs");
  EXPECT_EQ(Str(nodes[2].at("id")).size(), 26u);  // generated
  EXPECT_EQ(Str(nodes[3].at("id")), "image-2");
  for (const json::object& n : nodes) {
    EXPECT_EQ(Int(n.at("version")), 1);
    EXPECT_FALSE(n.at("duplicate").as_bool());
  }
  EXPECT_EQ(State("reports", "report-7"), "waiting");
  EXPECT_EQ(State("images", "image-1"), "waiting");

  server_->Kill();
  Start();
  EXPECT_EQ(State("reports", "report-7"), "waiting");
  EXPECT_EQ(State("images", "image-1"), "waiting");
  EXPECT_EQ(State("images", "image-2"), "pending");
  // Sent again: every node a duplicate, nothing new.
  for (const json::object& n : Ok({"enqueue-flow", "--file", path})) {
    EXPECT_TRUE(n.at("duplicate").as_bool());
  }
  Finish("thumbs");
  EXPECT_EQ(State("images", "image-1"), "pending");
  Finish("images");
  Finish("images");
  EXPECT_EQ(State("reports", "report-7"), "pending");
}

TEST_F(FlowsE2E, ARefusedFlowLeavesNothingAndBadFilesAreUsageErrors) {
  Ok({"create-queue", "closed", "--enqueue-paused", "true"});
  const std::string refused =
      File("refused.json",
           R"([{"queue": "a", "id": "x"}, {"queue": "b", "children": [{"queue": "closed"}]}])");
  const CliRun run = Cli({"enqueue-flow", "--file", refused});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const json::object e = run.ErrObject();
  EXPECT_EQ(Str(e.at("code")), "FAILED_PRECONDITION");
  EXPECT_EQ(Str(e.at("message")), "nodes[2]: queue: enqueue is paused");
  EXPECT_EQ(Cli({"get", "a", "x"}).exit_code, 1);  // not enqueued

  EXPECT_EQ(
      Cli({"enqueue-flow", "--file", File("bad.json", R"({"queue": "a", "colour": 1})")}).exit_code,
      2);
  EXPECT_EQ(Cli({"enqueue-flow", "--file", File("nojson.json", "{")}).exit_code, 2);
  EXPECT_EQ(Cli({"enqueue-flow", "--file", dir_.path() + "/missing.json"}).exit_code, 2);
}

}  // namespace
}  // namespace sundial::e2e

#endif  // SUNDIAL_CLI
