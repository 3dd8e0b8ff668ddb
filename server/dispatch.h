// Dispatch: one verified protocol Request -> one engine operation -> one Response (SPEC §3).
// No I/O and no Asio: sessions (TCP, WebSocket) decode a frame, call Handle, then wait for the
// WAL before they send the reply — Outcome says up to which LSN (0: nothing to wait for).
//
// Not handled here (the session layer owns them): Auth, Subscribe/Unsubscribe, and the waiting
// part of a long-poll Dequeue (Handle answers at once; a session retries on wakeups until
// wait_ms has passed). Stats and Health are answered with the engine's figures only.
//
// Thread safety: Handle may be called from any number of threads at once (the engine is
// thread-safe; the dispatcher holds no mutable state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/engine.h"
#include "wal/group_commit_log.h"

namespace sundial::protocol {
struct Request;
enum class Operation : uint8_t;
}  // namespace sundial::protocol

namespace sundial::server {

inline constexpr uint32_t kMaxWaitMs = 60'000;  // Dequeue.wait_ms (SPEC §3)

class Dispatcher {
 public:
  // `log` may be null (no durability to wait for: tests, --fsync=never without a log).
  Dispatcher(Engine* engine, const wal::GroupCommitLog* log) : engine_(engine), log_(log) {}

  struct Outcome {
    std::string response;        // a finished ServerMessage FlatBuffer (body: Response)
    uint64_t wait_lsn = 0;       // reply once every record below this is durable; 0: reply now
    bool relaxed = false;        // the request asked for durability: relaxed
    Code code = Code::kOk;       // of the whole request (metrics); items of a batch may still fail
    bool empty_dequeue = false;  // a Dequeue that succeeded with no message (long-poll waits)
  };
  Outcome Handle(const protocol::Request& request) const;

 private:
  Engine* engine_;
  const wal::GroupCommitLog* log_;
};

// A finished ServerMessage{Response} with only `request_id` and an error.
std::string ErrorResponse(uint64_t request_id, Code code, std::string_view message);
// A finished ServerMessage{Response} with an empty DequeueResult (a long poll that timed out).
std::string EmptyDequeueResponse(uint64_t request_id);

// True for the operations that change state (and so are logged and wait for the WAL).
bool IsMutation(protocol::Operation op);

}  // namespace sundial::server
