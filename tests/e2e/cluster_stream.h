// EnqueueStream: a producer for the cluster tests (tests/e2e/cluster_*_test.cc): one thread
// enqueueing through a client that follows the primary, alternating two queues: "with-ids"
// (ids of the test's own, "m-0", "m-1", ...) and "no-ids" (no id: the client gives one of its
// own). It records what was acknowledged, so that after a failover or a switchover a test can
// check that every acknowledged enqueue is on the new primary and none is there twice.
//
// Thread safety: Start/Stop/checks from the test thread; the counters are atomics or under mu_.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/replication/etcd_process.h"

namespace sundial::e2e {

class EnqueueStream {
 public:
  explicit EnqueueStream(std::unique_ptr<client::Client> client) : client_(std::move(client)) {}
  ~EnqueueStream() { Stop(); }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  // Waits until `n` enqueues in all were acknowledged; false after `timeout`.
  bool WaitForAcks(size_t n,
                   std::chrono::milliseconds timeout = std::chrono::milliseconds(15'000)) {
    return replication::testing::Eventually([&] { return acked() >= n; }, timeout);
  }
  size_t acked() const { return acked_.load(); }
  size_t failures() const { return failures_.load(); }
  uint64_t resends() const { return resends_.load(); }

  std::string Report() const {
    std::lock_guard lock(mu_);
    return "acknowledged " + std::to_string(acked_) + " (" + std::to_string(with_ids_.size()) +
           " with ids, " + std::to_string(no_ids_) + " without), failed " +
           std::to_string(failures_) + ", resent " + std::to_string(resends_) +
           (last_error_.empty() ? "" : "; last error: " + last_error_);
  }

  // Every acknowledged enqueue is there (by id), and each queue holds exactly as many messages
  // as were acknowledged into it (nothing enqueued twice). REQUIRES: stopped, no failures (a
  // failed enqueue may or may not have been applied).
  void ExpectAllPresent(client::Client& c) {
    std::lock_guard lock(mu_);
    for (const std::string& id : with_ids_) {
      auto got = c.Get("with-ids", id);
      EXPECT_TRUE(got.ok()) << id << ": " << (got.ok() ? "" : got.error().ToString());
    }
    EXPECT_EQ(Pending(c, "with-ids"), with_ids_.size());
    EXPECT_EQ(Pending(c, "no-ids"), no_ids_) << "an enqueue without an id was applied twice";
  }

 private:
  static uint64_t Pending(client::Client& c, std::string_view queue) {
    auto counted = c.Count(queue);
    if (!counted.ok()) {
      ADD_FAILURE() << "count " << queue << ": " << counted.error().ToString();
      return 0;
    }
    const protocol::CountResult* r = counted->result<protocol::CountResult>();
    return r && r->counts() ? r->counts()->pending() : 0;
  }

  void Run() {
    for (uint64_t i = 0; !stop_; ++i) {
      const bool with_id = i % 2 == 0;
      client::EnqueueItem item;
      if (with_id) item.id = "m-" + std::to_string(i);
      item.payload = "payload " + std::to_string(i);
      auto reply = client_->Enqueue(with_id ? "with-ids" : "no-ids", {item});
      std::string error;
      if (!reply.ok()) {
        error = reply.error().ToString();
      } else {
        const auto* r = reply->result<protocol::EnqueueResults>();
        if (r == nullptr || r->items() == nullptr || r->items()->size() != 1) {
          error = "no item result";
        } else if (r->items()->Get(0)->error() != nullptr) {
          error =
              "item error " + std::to_string(static_cast<int>(r->items()->Get(0)->error()->code()));
        }
      }
      resends_ = client_->resends();
      std::lock_guard lock(mu_);
      if (!error.empty()) {
        ++failures_;
        last_error_ = error;
        continue;
      }
      if (with_id) {
        with_ids_.insert(item.id);
      } else {
        ++no_ids_;
      }
      ++acked_;
    }
  }

  std::unique_ptr<client::Client> client_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> acked_{0};
  std::atomic<size_t> failures_{0};
  std::atomic<uint64_t> resends_{0};
  mutable std::mutex mu_;
  std::set<std::string> with_ids_;  // GUARDED_BY(mu_)
  size_t no_ids_ = 0;               // GUARDED_BY(mu_)
  std::string last_error_;          // GUARDED_BY(mu_)
};

}  // namespace sundial::e2e
