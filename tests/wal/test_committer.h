// A GroupCommitLog::Committer for tests that behaves like a server io loop: it counts its
// wake-ups and commits until what it waits for is durable, waiting (bounded) for a Wake each
// time it was registered instead of syncing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "wal/group_commit_log.h"

namespace sundial::wal::test {

class TestCommitter final : public GroupCommitLog::Committer {
 public:
  explicit TestCommitter(GroupCommitLog* log) : log_(log) {}
  ~TestCommitter() { log_->Unregister(this); }

  void Wake() override {
    std::lock_guard lock(mu_);
    ++wakes_;
    cv_.notify_all();
  }
  int wakes() {
    std::lock_guard lock(mu_);
    return wakes_;
  }
  // Waits (at most 30 s) until Wake was called `n` times in all.
  bool WaitForWakes(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return wakes_ >= n; });
  }

  // Commits `end` as an io loop does: Commit; when registered, wait for the Wake, then look at
  // DurableEnd and commit again if it is still short. Counts the Commit calls.
  Status CommitUntilDurable(uint64_t end, bool may_block = false) {
    for (;;) {
      const int seen = wakes();
      ++commits_;
      Status s = log_->Commit(this, end, may_block);
      if (!s.ok()) return s;
      if (log_->DurableEnd() >= end) return s;
      if (!WaitForWakes(seen + 1)) return Status(Code::kInternal, "test: no wake within 30 s");
    }
  }
  int commits() const { return commits_; }

 private:
  GroupCommitLog* const log_;
  std::mutex mu_;
  std::condition_variable cv_;
  int wakes_ = 0;  // GUARDED_BY(mu_)
  int commits_ = 0;
};

}  // namespace sundial::wal::test
