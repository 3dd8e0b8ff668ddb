// The failpoints of wal/failpoint.h: each one kills sundiald-failpoints where it is named (what
// survives the kill shows where it stopped), the real sundiald has none of them, and the
// planted bug is caught by the torture's checker.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/torture/checker.h"
#include "tests/torture/history.h"
#include "tests/torture/server.h"

namespace sundial::torture {
namespace {

namespace fs = std::filesystem;
namespace p = protocol;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "sundial-torture-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

size_t CountMatching(const std::vector<std::string>& names, const std::string& prefix,
                     const std::string& suffix) {
  size_t n = 0;
  for (const auto& name : names) {
    if (name.rfind(prefix, 0) == 0 && name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      ++n;
    }
  }
  return n;
}

struct Driven {
  std::vector<std::string> acknowledged;
  std::string unanswered;  // the enqueue the kill cut off
};

// Enqueues one message at a time until the server stops answering (or `limit` messages).
Driven EnqueueUntilKilled(const Server& server, int limit) {
  Driven d;
  auto c = client::Client::Connect(server.address(), {}, 5000);
  EXPECT_TRUE(c.ok());
  if (!c.ok()) return d;
  for (int i = 0; i < limit; ++i) {
    client::EnqueueItem item;
    item.id = "m" + std::to_string(i);
    item.payload = std::string(64, 'x');
    auto r = c.value()->Enqueue("q", {item});
    if (!r.ok()) {
      d.unanswered = item.id;
      break;
    }
    d.acknowledged.push_back(item.id);
  }
  return d;
}

bool Present(client::Client& c, const std::string& id) {
  auto r = c.Get("q", id);
  if (r.ok()) return true;
  EXPECT_EQ(r.error().code, Code::kNotFound) << r.error().ToString();
  return false;
}

class EachFailpoint : public ::testing::TestWithParam<const char*> {};

TEST_P(EachFailpoint, KillsTheServerWhereItIsNamed) {
  const std::string name = GetParam();
  TempDir dir;
  const std::string data = dir.path() + "/data";
  fs::create_directories(data);
  Server server(SUNDIALD_FAILPOINTS_BIN, data, dir.path() + "/server.log");
  ASSERT_TRUE(server.Start(name + ":1", "")) << ReadFile(dir.path() + "/server.log");
  const Driven d = EnqueueUntilKilled(server, 20000);
  ASSERT_TRUE(server.Exited(10'000));
  EXPECT_EQ(server.killed_by_signal(), SIGKILL);
  EXPECT_NE(ReadFile(dir.path() + "/server.log").find("failpoint " + name + " reached (hit 1)"),
            std::string::npos);
  ASSERT_FALSE(d.unanswered.empty());

  // What the kill left on disk, before recovery touches it.
  const std::vector<std::string> files = Names(data);
  const size_t snapshots = CountMatching(files, "snapshot-", ".snap");
  const size_t temp_snapshots = CountMatching(files, "snapshot-", ".tmp");
  const size_t segments = CountMatching(files, "wal-", ".log");
  if (name == "checkpoint.before_rename") {
    EXPECT_EQ(temp_snapshots, 1u);  // written and synced, not renamed
    EXPECT_EQ(snapshots, 0u);
  } else if (name == "checkpoint.after_rename") {
    EXPECT_EQ(snapshots, 1u);
    EXPECT_GE(segments, 2u);  // the segments it covers are not deleted yet
  } else if (name.rfind("wal.", 0) == 0 && name != "wal.mid_rotation") {
    EXPECT_EQ(d.unanswered, "m0");  // the first write is the first enqueue's
  }

  ASSERT_TRUE(server.Start("", "")) << ReadFile(dir.path() + "/server.log");
  auto c = client::Client::Connect(server.address(), {}, 5000);
  ASSERT_TRUE(c.ok());
  for (const std::string& id : d.acknowledged) EXPECT_TRUE(Present(*c.value(), id)) << id;
  if (name == "wal.before_write") {
    EXPECT_FALSE(Present(*c.value(), d.unanswered));  // never written
  } else if (name == "wal.after_write_before_sync" || name == "wal.after_sync_before_reply") {
    EXPECT_TRUE(Present(*c.value(), d.unanswered));  // written (the kernel keeps it), unanswered
  }
}

INSTANTIATE_TEST_SUITE_P(Failpoints, EachFailpoint,
                         ::testing::Values("wal.before_write", "wal.after_write_before_sync",
                                           "wal.after_sync_before_reply",
                                           "checkpoint.before_rename", "checkpoint.after_rename",
                                           "wal.mid_rotation"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& ch : n) {
                             if (ch == '.') ch = '_';
                           }
                           return n;
                         });

TEST(Failpoints, TheRealSundialdHasNoneOfThem) {
  const std::string real = ReadFile(SUNDIALD_BIN);
  const std::string test_build = ReadFile(SUNDIALD_FAILPOINTS_BIN);
  for (const char* name :
       {"wal.before_write", "wal.after_write_before_sync", "wal.after_sync_before_reply",
        "checkpoint.before_rename", "checkpoint.after_rename", "wal.mid_rotation",
        "SUNDIAL_FAILPOINT", "ack_before_sync"}) {
    EXPECT_EQ(real.find(name), std::string::npos) << name;
    EXPECT_NE(test_build.find(name), std::string::npos) << name;
  }
}

TEST(Failpoints, TheRealSundialdIgnoresTheVariables) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  fs::create_directories(data);
  Server server(SUNDIALD_BIN, data, dir.path() + "/server.log");
  for (const char* armed : {"wal.before_write:1", "checkpoint.before_rename:1"}) {
    ASSERT_TRUE(server.Start(armed, "ack_before_sync"));
    const Driven d = EnqueueUntilKilled(server, 400);  // several checkpoints' worth
    EXPECT_EQ(d.acknowledged.size(), 400u) << armed;
    EXPECT_FALSE(server.Exited(0));
    server.Kill();
    fs::remove_all(data);
    fs::create_directories(data);
  }
  EXPECT_EQ(ReadFile(dir.path() + "/server.log").find("failpoint"), std::string::npos);
}

// The checker can fail: with replies sent before their records are written (the planted bug
// `ack_before_sync`), kills at wal.before_write lose acknowledged enqueues, and the checker
// says so.
TEST(PlantedBug, AckBeforeSyncIsCaughtAsLostAcknowledgedWrites) {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  const std::string command = std::string(TORTURE_BIN) + " run --server " +
                              SUNDIALD_FAILPOINTS_BIN + " --dir " + run +
                              " --rounds 10 --clients 3 --seed 7 --bug ack_before_sync" +
                              " --only wal.before_write > " + dir.path() + "/out.txt 2>&1";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << ReadFile(dir.path() + "/out.txt");

  History h;
  for (const auto& e : fs::directory_iterator(run + "/history")) {
    std::string error;
    ASSERT_TRUE(ParseHistory(ReadFile(e.path().string()), &h, &error)) << error;
  }
  const Report report = Check(h);
  EXPECT_GT(report.lost, 0u) << report.Summary();
  EXPECT_GT(report.Count("lost"), 0u);
}

}  // namespace
}  // namespace sundial::torture
