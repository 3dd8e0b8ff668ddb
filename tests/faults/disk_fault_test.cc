// Disk faults reaching a running sundiald (issue 14, item 4): the real binary, with the
// LD_PRELOAD shim (disk_fault_shim.cc) aimed at its data directory. Each test lets the server
// acknowledge work, then breaks the disk in one way, and checks what an operator and a client
// must see:
// - no false acknowledgement: after the fault, no mutation is answered OK; what was answered OK
//   before it is there after a restart without the fault (with `sync EIO lose-unsynced` the
//   shim zeroes every byte not covered by a good fdatasync, so a reply sent before its sync
//   would show as a lost id);
// - mutations are refused with UNAVAILABLE, reads go on;
// - /readyz answers 503 naming the error; /metrics has sundial_wal_failed 1;
// - exactly one log line, with the errno's text and the file.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/client.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_process.h"
#include "tests/faults/fault_test_util.h"

namespace sundial::faults {
namespace {

namespace p = protocol;
using client::Client;
using e2e::HttpGet;
using e2e::MetricValue;
using e2e::ServerProcess;
using e2e::TempDir;

struct FaultCase {
  std::string name;
  std::string control;     // the control file's line
  std::string errno_text;  // strerror's text, expected in the log line and /readyz
  std::string errno_name;
  // The first mutation after the fault is armed must be refused (every mutation writes and
  // syncs); false when the fault only hits a later step (a new segment, a new chunk of
  // preallocated space) and some mutations still succeed before it.
  bool first_is_refused = true;
  std::vector<std::string> flags;
};

std::ostream& operator<<(std::ostream& out, const FaultCase& c) { return out << c.name; }

class DiskFaultFixture : public ::testing::Test {
 protected:
  std::string data() const { return dir_.path() + "/data"; }
  std::string control() const { return dir_.path() + "/faults.control"; }
  std::string fault_log() const { return dir_.path() + "/faults.log"; }

  std::unique_ptr<Client> Connect(const ServerProcess& server) {
    auto c = Client::Connect({"127.0.0.1", server.port()});
    EXPECT_TRUE(c.ok()) << c.error().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  static client::Result<client::Reply> Enqueue(Client& c, const std::string& id) {
    client::EnqueueItem item;
    item.id = id;
    item.payload = "payload of " + id + std::string(1000, '.');
    return c.Enqueue("q", {item});
  }

  static bool EnqueuedOk(const client::Result<client::Reply>& r) {
    return r.ok() && r->result<p::EnqueueResults>()->items()->Get(0)->error() == nullptr;
  }

  TempDir dir_;
};

class DiskFaultTest : public DiskFaultFixture, public ::testing::WithParamInterface<FaultCase> {};
using CheckpointFault = DiskFaultFixture;

TEST_P(DiskFaultTest, RefusesWritesKeepsReadsAndLosesNothingAcknowledged) {
  const FaultCase& fault = GetParam();
  ServerProcess server(data(), fault.flags);
  server.set_env(ShimEnv(data(), control(), fault_log()));
  ASSERT_TRUE(ArmFaults(control(), ""));
  ASSERT_TRUE(server.Start()) << server.log();
  auto c = Connect(server);
  ASSERT_NE(c, nullptr);

  // Acknowledged before the fault: enqueues, and a cancel of one of them.
  std::vector<std::string> acked;
  for (int i = 0; i < 20; ++i) {
    const std::string id = "before-" + std::to_string(i);
    ASSERT_TRUE(EnqueuedOk(Enqueue(*c, id))) << id;
    acked.push_back(id);
  }
  ASSERT_TRUE(c->Cancel("q", {"before-0"}).ok());
  acked.erase(acked.begin());

  ASSERT_TRUE(ArmFaults(control(), fault.control + "\n"));
  // Mutations until the first refusal; every one answered OK before it was durable then.
  int refused_at = -1;
  constexpr int kMaxAttempts = 3000;  // the slowest case needs a new segment: ~64 enqueues
  for (int i = 0; i < kMaxAttempts; ++i) {
    const std::string id = "after-" + std::to_string(i);
    auto r = Enqueue(*c, id);
    if (EnqueuedOk(r)) {
      acked.push_back(id);
      continue;
    }
    ASSERT_FALSE(r.ok()) << id << ": a per-item error, not a refusal";
    EXPECT_EQ(r.error().code, Code::kUnavailable) << r.error().ToString();
    EXPECT_NE(r.error().message.find(fault.errno_text), std::string::npos) << r.error().ToString();
    refused_at = i;
    break;
  }
  ASSERT_GE(refused_at, 0) << "the fault never reached the server: " << ReadFile(fault_log());
  if (fault.first_is_refused) {
    EXPECT_EQ(refused_at, 0);
  }
  EXPECT_FALSE(ReadFile(fault_log()).empty()) << "the shim injected nothing";

  // From now on every mutation is refused with UNAVAILABLE; none is answered OK.
  for (int i = 0; i < 3; ++i) {
    auto r = Enqueue(*c, "refused-" + std::to_string(i));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Code::kUnavailable) << r.error().ToString();
  }
  client::DequeueOptions dequeue;
  dequeue.lease_ms = 30'000;
  auto leased = c->Dequeue("q", dequeue);
  ASSERT_FALSE(leased.ok()) << "a dequeue leases: a mutation";
  EXPECT_EQ(leased.error().code, Code::kUnavailable);
  auto cancelled = c->Cancel("q", {acked.front()});
  ASSERT_FALSE(cancelled.ok());
  EXPECT_EQ(cancelled.error().code, Code::kUnavailable);

  // Reads go on.
  auto got = c->Get("q", acked.front());
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->result<p::GetResult>()->message()->state(), p::MessageState::pending);
  EXPECT_TRUE(c->Count("q").ok());
  EXPECT_TRUE(c->Stats().ok());

  // What the operator sees.
  const e2e::HttpReply ready = HttpGet(server.http_port(), "/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_NE(ready.body.find(fault.errno_text), std::string::npos) << ready.body;
  EXPECT_EQ(HttpGet(server.http_port(), "/healthz").status, 200) << "alive: reads are served";
  EXPECT_EQ(MetricValue(HttpGet(server.http_port(), "/metrics").body, "sundial_wal_failed"), 1.0);
  const std::string log = server.log();
  const auto lines = LinesWith(log, "WRITE-AHEAD LOG FAILED");
  ASSERT_EQ(lines.size(), 1u) << log;
  std::printf("%s\n/readyz: %s", lines[0].c_str(), ready.body.c_str());
  EXPECT_NE(lines[0].find(fault.errno_text), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("(" + fault.errno_name + ")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(data() + "/wal-"), std::string::npos) << "names the file: " << lines[0];

  // A drain cannot flush a failed log: the exit code says so.
  EXPECT_EQ(server.Terminate(), 1) << server.log();
  EXPECT_EQ(LinesWith(server.log(), "WRITE-AHEAD LOG FAILED").size(), 1u) << server.log();

  // The disk is fixed (no shim): everything acknowledged is there.
  server.set_env({});
  ASSERT_TRUE(server.Start()) << server.log();
  c = Connect(server);
  ASSERT_NE(c, nullptr);
  for (const std::string& id : acked) {
    auto found = c->Get("q", id);
    ASSERT_TRUE(found.ok()) << id << " was acknowledged and is gone: " << found.error().ToString();
    EXPECT_EQ(found->result<p::GetResult>()->message()->state(), p::MessageState::pending) << id;
  }
  auto gone = c->Get("q", "before-0");
  EXPECT_TRUE(!gone.ok() ||
              gone->result<p::GetResult>()->message()->state() == p::MessageState::canceled)
      << "an acknowledged cancel stuck";
  // And it takes writes again.
  EXPECT_TRUE(EnqueuedOk(Enqueue(*c, "after-restart")));
  std::printf("%s: %zu acknowledged (%d after the fault was armed), all present after restart\n",
              fault.name.c_str(), acked.size(), refused_at);
}

// The HTTP JSON API (docs/http-api.md) answers after the log's fsync like the other doors: once
// fdatasync fails, the very next enqueue over HTTP is a 503 UNAVAILABLE, never a 200 for a
// message that was not synced; and what HTTP acknowledged before is there after a restart
// (`lose-unsynced` zeroes what no good fdatasync covered).
TEST_F(DiskFaultFixture, HttpApiRepliesOnlyAfterTheFsync) {
  ServerProcess server(data());
  server.set_env(ShimEnv(data(), control(), fault_log()));
  ASSERT_TRUE(ArmFaults(control(), ""));
  ASSERT_TRUE(server.Start()) << server.log();
  auto enqueue = [&](const std::string& id) {
    const std::string body =
        R"({"id":")" + id + R"(","payload":")" + std::string(1000, '.') + R"("})";
    return e2e::HttpRequest(server.http_port(), "POST", "/v1/queues/q/messages",
                            "Content-Length: " + std::to_string(body.size()) + "\r\n", body);
  };
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(enqueue("before-" + std::to_string(i)).status, 200) << i;
  }
  ASSERT_TRUE(ArmFaults(control(), "sync EIO lose-unsynced\n"));
  const e2e::HttpReply refused = enqueue("after-0");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_NE(refused.body.find(R"("code":"UNAVAILABLE")"), std::string::npos) << refused.body;
  EXPECT_EQ(enqueue("after-1").status, 503);

  server.Kill();
  ASSERT_TRUE(ArmFaults(control(), ""));
  ServerProcess restarted(data());
  ASSERT_TRUE(restarted.Start()) << restarted.log();
  for (int i = 0; i < 10; ++i) {
    const e2e::HttpReply got =
        e2e::HttpGet(restarted.http_port(), "/v1/queues/q/messages/before-" + std::to_string(i));
    EXPECT_EQ(got.status, 200) << i << " " << got.body;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Faults, DiskFaultTest,
    ::testing::Values(
        // fsyncgate: the sync fails and the unsynced bytes are gone.
        FaultCase{
            "EioOnFdatasync", "sync EIO lose-unsynced", "Input/output error", "EIO", true, {}},
        FaultCase{"EnospcOnWrite", "write ENOSPC", "No space left on device", "ENOSPC", true, {}},
        // Preallocation: each new segment (every 64 KiB here) writes a chunk of zeroes ahead.
        FaultCase{"EnospcOnPreallocation",
                  "prealloc ENOSPC",
                  "No space left on device",
                  "ENOSPC",
                  false,
                  {"--segment-bytes", "65536"}},
        // A read-only file system: the next segment cannot be created (rotation every 64 KiB).
        FaultCase{"ErofsAtSegmentRotation",
                  "open EROFS",
                  "Read-only file system",
                  "EROFS",
                  false,
                  {"--segment-bytes", "65536"}}),
    [](const ::testing::TestParamInfo<FaultCase>& info) { return info.param.name; });

// A checkpoint that cannot write its snapshot (a read-only file system that spares the segments,
// here: only *.snap* files fail) is not a WAL failure: writes go on and stay durable, /readyz
// stays 200, and the log says once that checkpoints fail and once that they work again.
TEST_F(CheckpointFault, ACheckpointThatCannotWriteItsSnapshotKeepsTheServerWritable) {
  ServerProcess server(
      data(), {"--segment-bytes", "65536", "--checkpoint-bytes", "1", "--checkpoint-growth", "0"});
  server.set_env(ShimEnv(data(), control(), fault_log()));
  ASSERT_TRUE(ArmFaults(control(), "open EROFS match=.snap\n"));
  ASSERT_TRUE(server.Start()) << server.log();
  auto c = Connect(server);
  ASSERT_NE(c, nullptr);
  std::vector<std::string> acked;
  int i = 0;
  auto enqueue_some = [&](int n) {
    for (int k = 0; k < n; ++k, ++i) {
      const std::string id = "m-" + std::to_string(i);
      ASSERT_TRUE(EnqueuedOk(Enqueue(*c, id))) << id << "\n" << server.log();
      acked.push_back(id);
    }
  };
  enqueue_some(100);
  const std::string failed_line = "sundiald: checkpoint of " + data() + " failed";
  ASSERT_TRUE(e2e::Eventually([&] { return !LinesWith(server.log(), failed_line).empty(); }))
      << server.log();
  enqueue_some(100);  // writes go on while checkpoints fail
  EXPECT_EQ(HttpGet(server.http_port(), "/readyz").status, 200);
  EXPECT_EQ(MetricValue(HttpGet(server.http_port(), "/metrics").body, "sundial_wal_failed"), 0.0);
  const auto failed = LinesWith(server.log(), failed_line);
  ASSERT_EQ(failed.size(), 1u) << "once, not per retry:\n" << server.log();
  EXPECT_NE(failed[0].find("Read-only file system (EROFS)"), std::string::npos) << failed[0];
  EXPECT_TRUE(LinesWith(server.log(), "WRITE-AHEAD LOG FAILED").empty()) << server.log();

  ASSERT_TRUE(ArmFaults(control(), ""));
  const std::string again = "sundiald: checkpoint of " + data() + " succeeded again";
  ASSERT_TRUE(e2e::Eventually([&] { return !LinesWith(server.log(), again).empty(); }, 30'000))
      << server.log();
  EXPECT_EQ(server.Terminate(), 0) << server.log();

  server.set_env({});
  ASSERT_TRUE(server.Start()) << server.log();
  c = Connect(server);
  ASSERT_NE(c, nullptr);
  for (const std::string& id : acked) {
    auto found = c->Get("q", id);
    ASSERT_TRUE(found.ok()) << id << " was acknowledged and is gone: " << found.error().ToString();
  }
  std::printf("%s\n%s\n", failed[0].c_str(), LinesWith(server.log(), again)[0].c_str());
}

}  // namespace
}  // namespace sundial::faults
