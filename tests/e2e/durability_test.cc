// Durability of acknowledged requests through the real server: SIGTERM with requests in flight
// (a drain: every acknowledged request is in the log, exit 0) and kill -9 under load from
// concurrent client and CLI writers (after a restart every acknowledged id is present, in its
// acknowledged state).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "client/client.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_process.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;
using client::AsyncClient;
using client::Client;

std::unique_ptr<Client> Connect(const ServerProcess& server) {
  auto c = Client::Connect({"127.0.0.1", server.port()});
  EXPECT_TRUE(c.ok()) << c.error().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST(Durability, SigtermWithRequestsInFlightKeepsEveryAcknowledgedRequest) {
  TempDir dir;
  ServerProcess server(dir.path() + "/data");
  ASSERT_TRUE(server.Start()) << server.log();
  auto async = AsyncClient::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(async.ok()) << async.error().ToString();

  std::mutex mu;
  std::vector<std::string> acked;
  std::atomic<int> answered{0};
  constexpr int kRequests = 3000;
  for (int i = 0; i < kRequests; ++i) {
    client::EnqueueItem item;
    item.id = "m-" + std::to_string(i);
    item.payload = std::string(100, 'x');
    const client::RequestHeader h = Hdr((*async)->NextRequestId());
    (*async)->Send(
        client::BuildEnqueue(h, "q", {item}), [&, id = item.id](client::Result<client::Reply> r) {
          if (r.ok() && r->result<p::EnqueueResults>()->items()->Get(0)->error() == nullptr) {
            std::lock_guard lock(mu);
            acked.push_back(id);
            // SIGTERM once some are acknowledged, with the rest still in flight.
            if (acked.size() == 300) ::kill(server.pid(), SIGTERM);
          }
          answered.fetch_add(1);
        });
  }
  EXPECT_EQ(server.WaitExit(60'000), 0) << server.log();
  (*async)->Close();
  EXPECT_EQ(answered.load(), kRequests) << "every request is answered or failed, none hangs";
  ASSERT_GE(acked.size(), 300u);

  ASSERT_TRUE(server.Start()) << server.log();
  auto c = Connect(server);
  ASSERT_NE(c, nullptr);
  for (const std::string& id : acked) {
    auto got = c->Get("q", id);
    ASSERT_TRUE(got.ok()) << id << " was acknowledged and is gone: " << got.error().ToString();
    EXPECT_EQ(got->result<p::GetResult>()->message()->state(), p::MessageState::pending);
  }
  std::printf("%zu of %d enqueues acknowledged before the drain; all present after restart\n",
              acked.size(), kRequests);
}

// What one writer saw acknowledged.
struct Acked {
  std::map<std::string, p::MessageState> state;  // id -> the state the server acknowledged
};

// `mode`: --checkpoint-mode (a fork checkpoint's writer dies with the server).
void KillNineUnderLoadLosesNothingAcknowledged(const std::string& mode) {
  TempDir dir;
  // Small segments and an eager checkpointer, so a kill can land during rotation and checkpoint.
  ServerProcess server(dir.path() + "/data",
                       {"--segment-bytes", "65536", "--checkpoint-bytes", "131072",
                        "--checkpoint-growth", "10", "--checkpoint-mode", mode});
  ASSERT_TRUE(server.Start()) << server.log();

  constexpr int kWriters = 4;
  std::vector<Acked> acked(kWriters);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> operations{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      auto c = Client::Connect({"127.0.0.1", server.port()});
      if (!c.ok()) return;
      Client& client = **c;
      for (int i = 0; !stop.load(); ++i) {
        client::EnqueueItem item;
        item.id = "w" + std::to_string(w) + "-" + std::to_string(i);
        item.payload = std::string(64, 'p');
        item.priority = i % 7;
        auto r = client.Enqueue("q" + std::to_string(w % 2), {item});
        if (!r.ok()) return;  // the server is gone
        if (r->result<p::EnqueueResults>()->items()->Get(0)->error() == nullptr) {
          acked[w].state[item.id] = p::MessageState::pending;
        }
        operations.fetch_add(1);
        if (i % 3 != 0) continue;
        // A worker's loop on the same connection: dequeue one, then complete it.
        client::DequeueOptions o;
        auto d = client.Dequeue("q" + std::to_string(w % 2), o);
        if (!d.ok()) return;
        for (const p::Message* m : *d->result<p::DequeueResult>()->messages()) {
          auto done =
              client.Complete("q" + std::to_string(w % 2), {{m->id()->str(), m->lease_token()}});
          if (!done.ok()) return;
          if (done->result<p::ItemResults>()->items()->Get(0)->code() == p::Code::OK) {
            // Another writer's message may be completed here: record it under this writer.
            acked[w].state[m->id()->str()] = p::MessageState::completed;
          }
        }
      }
    });
  }
#ifdef SUNDIAL_CLI
  // A CLI writer beside them: every `sundial enqueue` that exits 0 was acknowledged.
  std::vector<std::string> cli_acked;
  std::thread cli([&] {
    for (int i = 0; !stop.load(); ++i) {
      const std::string id = "cli-" + std::to_string(i);
      const std::string cmd = std::string(SUNDIAL_CLI) + " --addr " + server.addr() +
                              " enqueue q0 --id " + id + " --payload x >/dev/null 2>&1";
      if (std::system(cmd.c_str()) != 0) break;
      cli_acked.push_back(id);
    }
  });
#endif
  // Let the load run until enough has been acknowledged, then kill -9 in the middle of it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (operations.load() < 3000 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  server.Kill();
  stop.store(true);
  for (auto& t : writers) t.join();
#ifdef SUNDIAL_CLI
  cli.join();
#endif
  ASSERT_GE(operations.load(), 100) << server.log();

  ASSERT_TRUE(server.Start()) << server.log();
  auto c = Connect(server);
  ASSERT_NE(c, nullptr);
  // A message completed by one writer and enqueued by another: completed wins.
  std::map<std::string, p::MessageState> all;
  for (const Acked& a : acked) {
    for (const auto& [id, state] : a.state) {
      if (state == p::MessageState::completed || all.count(id) == 0) all[id] = state;
    }
  }
  size_t checked = 0;
  for (const auto& [id, state] : all) {
    const std::string queue = "q" + std::to_string((id[1] - '0') % 2);
    auto got = c->Get(queue, id);
    ASSERT_TRUE(got.ok()) << id << " was acknowledged and is gone: " << got.error().ToString();
    const auto now = got->result<p::GetResult>()->message()->state();
    if (state == p::MessageState::completed) {
      EXPECT_EQ(now, p::MessageState::completed) << id;
    } else {
      EXPECT_TRUE(now == p::MessageState::pending || now == p::MessageState::running ||
                  now == p::MessageState::completed)
          << id << " is " << p::EnumNameMessageState(now);
    }
    ++checked;
  }
#ifdef SUNDIAL_CLI
  for (const std::string& id : cli_acked) {
    auto got = c->Get("q0", id);
    ASSERT_TRUE(got.ok()) << id << " (CLI) was acknowledged and is gone";
    ++checked;
  }
#endif
  std::printf("checked %zu acknowledged messages after kill -9 and restart\n", checked);
  EXPECT_EQ(server.Terminate(), 0) << server.log();
}

TEST(Durability, KillNineUnderLoadLosesNothingAcknowledged) {
  KillNineUnderLoadLosesNothingAcknowledged("replay");
}

TEST(Durability, KillNineUnderLoadWithForkCheckpointsLosesNothingAcknowledged) {
  KillNineUnderLoadLosesNothingAcknowledged("fork");
}

}  // namespace
}  // namespace sundial::e2e
