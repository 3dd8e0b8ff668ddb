// The connection policy that every transport shares (the binary TCP port, WebSocket, and any
// port added later), written once so that it cannot drift between them. A transport keeps only
// what is its own: TCP its framing, TLS handshake and Auth; WebSocket the upgrade and its JSON or
// binary messages. Included by server/*.cc only (Asio).
//
// The policy, for one connection on its loop:
//  - Accounting: counted (the connections metric and the drain's registry) from Open() until the
//    first Shut(), exactly once, and Shut() also ends its long polls and subscriptions. Open() is
//    called as the transport's session starts: before a TLS handshake or an Auth, as the HTTP
//    port counts a connection before its request, so --max-connections counts every socket the
//    server holds.
//  - Output (--max-output-bytes): reading pauses while the bytes not yet taken by the kernel
//    reach half the limit, and resumes as the client reads (a client that pipelines large
//    replies and reads them is slowed, not dropped); a client that lets more than the limit
//    wait behind the write in progress is dropped. A single reply larger than the limit still
//    goes to a client that reads.
//  - Stalls (--write-timeout-ms): a write that takes no byte for that long drops the client.
//  - In flight (--max-inflight): reading pauses at the limit, resumes as replies are queued.
//  - Drain (shutdown): no new request is read; the connection finishes once nothing is in flight,
//    queued or being written.
//  - Bad input: a transport says what a message it cannot read costs the connection (OnBadInput).
#pragma once

#include <cstdio>
#include <string_view>

#include "server/internal.h"
#include "server/output_budget.h"

namespace sundial::server {

// What a message that cannot be read (not a valid Request, bad JSON, a refused length) costs
// its connection, after the typed error (request_id 0) that names the fault is written.
enum class OnBadInput : uint8_t {
  // The binary TCP port: a length-prefixed byte stream whose client sent a frame the server
  // cannot read is a broken or hostile client, and after a refused length the stream cannot be
  // resynchronised (the frame's bytes were never read): the connection closes.
  kClose,
  // WebSocket: every message is delimited by WebSocket's own framing, so the next one is
  // unaffected, and a browser page may send one malformed message among good ones: it stays open.
  kKeepOpen,
};

class Connection : public Session {
 public:
  // `name`: how operators' log lines name the transport ("TCP", "WebSocket").
  Connection(Loop* loop, Core* core, Transport transport, Access access, const char* name,
             OnBadInput on_bad_input)
      : Session(loop, core, transport, access),
        options_(core->options()),
        output_(core->options().max_output_bytes),
        stall_(loop->io(), core->options().write_timeout_ms),
        name_(name),
        on_bad_input_(on_bad_input) {}

 protected:
  // Counts the connection; once, as its session starts.
  void Open() {
    core_->registry().Add(shared_from_this());
    core_->metrics()->AddConnection(transport(), 1);
    opened_ = true;
  }
  // The first call marks the connection closed, ends its long polls and subscriptions and its
  // count, and returns true: the transport then closes its socket and timers. Later calls
  // return false.
  bool Shut() {
    if (closed_.exchange(true)) return false;
    stall_.Cancel();
    core_->Forget(this);
    if (opened_) {
      core_->registry().Remove(this);
      core_->metrics()->AddConnection(transport(), -1);
    }
    return true;
  }

  // Whether a new request may be read now.
  bool MayRead() const {
    return !closed() && !draining_ && inflight() < static_cast<int64_t>(options_.max_inflight) &&
           !output_.high();
  }

  // Before a message is queued (the transport then counts its bytes with output_.Queued):
  // false, and the client dropped, for one that does not read.
  bool AdmitOutput() {
    if (closed()) return false;
    if (output_.exceeded()) {
      std::fprintf(stderr, "sundiald: dropping a %s client: %zu bytes unread\n", name_,
                   output_.unread());
      DoClose();
      return false;
    }
    return true;
  }

  // As each write starts; the guard drops the connection when no byte is taken for
  // --write-timeout-ms.
  void ArmStallGuard() {
    stall_.Arm([self = shared_from_this(), this] { return !closed() && output_.writing(); },
               [self = shared_from_this(), this] {
                 std::fprintf(stderr,
                              "sundiald: dropping a %s client: %zu bytes unread, none taken for "
                              "%u ms\n",
                              name_, output_.unread(), options_.write_timeout_ms);
                 DoClose();
               });
  }
  // The kernel took `n` bytes of the write in progress.
  void Wrote(size_t n) {
    stall_.Progress();
    output_.Written(n);
  }

  // The drain: stop reading new requests; Finish() once the connection is idle.
  void DoCloseWhenDone() final {
    draining_ = true;
    DrainStarted();
    MaybeFinish();
  }
  bool draining() const { return draining_; }
  void MaybeFinish() {
    if (draining_ && !closed() && inflight() == 0 && output_.unread() == 0 && !output_.writing()) {
      Finish();
    }
  }
  // Called once the drain began (e.g. to stop a read in progress from starting requests).
  virtual void DrainStarted() {}
  // Ends an idle, draining connection (a WebSocket says goodbye first).
  virtual void Finish() { DoClose(); }

  // A message the transport cannot read: a typed error naming the fault, then OnBadInput.
  void RefuseInput(Code code, std::string_view message) {
    QueueReply(ErrorResponse(0, code, message));
    if (on_bad_input_ == OnBadInput::kClose) close_after_write_ = true;
    loop_->MarkDirty(this);
  }
  // After a refused input under OnBadInput::kClose: read nothing more, close once written.
  bool close_after_write() const { return close_after_write_; }
  // Read nothing more; close once what is queued is written (a session that says goodbye).
  void CloseAfterWrite() {
    close_after_write_ = true;
    loop_->MarkDirty(this);
  }

  const Options& options_;
  OutputBudget output_;

 private:
  StallGuard stall_;
  const char* const name_;
  const OnBadInput on_bad_input_;
  bool opened_ = false;
  bool draining_ = false;
  bool close_after_write_ = false;
};

}  // namespace sundial::server
