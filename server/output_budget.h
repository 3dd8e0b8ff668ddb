// OutputBudget: --max-output-bytes for one connection (docs/server.md, "Ports and connections";
// docs/operations.md). Every transport's session keeps one (server/connection.h), so every port
// measures its output the same way. No Asio: tested on its own (tests/server).
//
// Thread safety: none; one connection's loop uses it.
#pragma once

#include <cstddef>

namespace sundial::server {

// The bytes queued for one client and not yet taken by the kernel, against --max-output-bytes.
// A plain counter, so that every transport measures the same thing the same way.
class OutputBudget {
 public:
  explicit OutputBudget(size_t limit) : limit_(limit) {}

  // `n` bytes were queued behind whatever is queued or being written.
  void Queued(size_t n) { unread_ += n; }
  // A write of `n` queued bytes began (one write at a time).
  void WriteStarted(size_t n) {
    writing_ = true;
    in_write_ = n;
  }
  // The kernel took `n` bytes of the write in progress.
  void Written(size_t n) {
    in_write_ -= n;
    unread_ -= n;
  }
  void WriteEnded() {
    unread_ -= in_write_;  // a write that ends early (an error) takes the rest with it
    in_write_ = 0;
    writing_ = false;
  }

  bool writing() const { return writing_; }
  size_t unread() const { return unread_; }
  // Reading pauses until the client reads its replies.
  bool high() const { return unread_ >= limit_ / 2; }
  // More than the limit waits behind the write in progress: a client that does not read.
  bool exceeded() const { return unread_ - in_write_ > limit_; }

 private:
  const size_t limit_;
  size_t unread_ = 0;    // queued or in the write in progress, not yet taken
  size_t in_write_ = 0;  // of unread_, the rest of the write in progress
  bool writing_ = false;
};

}  // namespace sundial::server
