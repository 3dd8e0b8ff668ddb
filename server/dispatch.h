// Dispatch: the operation table (Dragonfly's command registry is the model). One row per
// protocol Operation: its kind, the transports it may arrive on, and a small run function that
// decodes the request, calls one engine operation and encodes the reply. No I/O and no Asio.
//
// What a reply waits for follows from the row's kind, in one place (Dispatcher::Handle): a
// kMutation reply carries the log's appended end LSN, read after the engine call, and may be
// sent only once every record below it is durable (unless the request asked for durability
// relaxed). A run function cannot forget it, and a test walks every row and checks that what
// changes state is a mutation.
//
// A read-only connection (Access::kReadOnly) is refused every kMutation row, by the same kind;
// so is every connection of a node that may not write now (NodeRole: a standby, or a primary
// past its leadership's deadline), with NOT_PRIMARY naming the primary.
//
// Session operations (Auth, Subscribe, Unsubscribe, Stats, Health) need the connection or the
// server's figures: their rows call the SessionOperations the server passes in. The waiting
// part of a long-poll Dequeue is the server's too: Handle answers at once, and says whether
// the dequeue came back empty.
//
// Thread safety: Handle may be called from any number of threads at once (the engine is
// thread-safe; the dispatcher holds no mutable state; each caller brings its own builder).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/engine.h"
#include "server/node_role.h"
#include "server/transport.h"
#include "wal/group_commit_log.h"

namespace flatbuffers {
class FlatBufferBuilder;
}  // namespace flatbuffers

namespace sundial::protocol {
struct Request;
struct Dequeue;
enum class Operation : uint8_t;
enum class Result : uint8_t;
}  // namespace sundial::protocol

namespace sundial::server {

inline constexpr uint32_t kMaxWaitMs =
    60'000;  // Dequeue, Wait and Enqueue wait_ms (docs/protocol.md)

class Session;  // the connection a request came on (server/internal.h)

enum class OpKind : uint8_t {
  kRead,      // answered from the engine's state; appends nothing
  kMutation,  // changes state: logged, and the reply waits for the log
  kSession,   // about the connection or the server: auth, subscriptions, stats, health
  // Answered from the engine's state like kRead, but the reply waits, as a mutation's does,
  // until every record appended before it was built is durable: the outcomes it shows (a
  // result, a terminal state) cannot then be undone by a crash. `wait`.
  kDurableRead,
  // Changes the cluster rather than the engine's state (Switchover): appends nothing and waits
  // for no log, like kSession, but a read-only connection is refused it as it is a mutation (a
  // dashboard page under --dashboard read-only must not hand the leadership over).
  kControl,
};

// What a connection may do. kReadOnly: a dashboard page under `--dashboard read-only`
// (docs/dashboard.md) reads and subscribes, and every kMutation and kControl row is refused for
// it with FAILED_PRECONDITION, by the row's kind, before its run function.
enum class Access : uint8_t { kFull, kReadOnly };

// Builds one ServerMessage{Response} for one request in a caller's builder (reused, so a
// reply costs no allocation once the builder has grown).
class Reply {
 public:
  Reply(flatbuffers::FlatBufferBuilder* builder, uint64_t request_id);
  flatbuffers::FlatBufferBuilder& b() { return *b_; }
  uint64_t request_id() const { return request_id_; }

  // Finishes the reply with an error for the whole request.
  void Error(const Status& status) { Error(status.code(), status.detail()); }
  void Error(Code code, std::string_view message);
  // NOT_PRIMARY, naming the primary's client address when it is known.
  void NotPrimary(std::string_view message, std::string_view primary_addr);
  // Finishes the reply with a result (`result` built in b()).
  void Ok(protocol::Result type, uint32_t result_offset);
  template <typename T>
  void Ok(protocol::Result type, T result_offset) {
    Ok(type, result_offset.o);
  }

  bool finished() const { return finished_; }
  Code code() const { return code_; }
  uint64_t lsn() const { return lsn_; }
  std::string_view bytes() const;  // valid until the builder is used again

 private:
  friend class Dispatcher;
  void Finish(uint32_t response_offset);

  flatbuffers::FlatBufferBuilder* const b_;
  const uint64_t request_id_;
  const wal::GroupCommitLog* lsn_from_ = nullptr;  // mutation rows: the LSN goes in the reply
  uint64_t lsn_ = 0;
  uint64_t epoch_ = 0;  // the node's epoch (NodeRole), in every reply
  Code code_ = Code::kOk;
  bool finished_ = false;
};

// What a session operation needs from the server (implemented by its core).
class SessionOperations {
 public:
  virtual void Auth(const protocol::Request& request, Session* session, Reply& reply) = 0;
  virtual void Subscribe(const protocol::Request& request, Session* session, Reply& reply) = 0;
  virtual void Unsubscribe(const protocol::Request& request, Session* session, Reply& reply) = 0;
  virtual void Stats(Reply& reply) = 0;
  virtual void Health(Reply& reply) = 0;
  virtual void Cluster(Reply& reply) = 0;
  // True when the handover was started: `reply` is then only a placeholder, and the server
  // answers the request later (Outcome::deferred), once the handover is over.
  virtual bool Switchover(const protocol::Request& request, Reply& reply) = 0;

 protected:
  ~SessionOperations() = default;
};

struct OpContext {
  Engine* engine = nullptr;
  SessionOperations* server = nullptr;  // null: session operations answer FAILED_PRECONDITION
  Session* session = nullptr;
  bool empty_dequeue = false;  // set by Dequeue: it succeeded with no message
  // Set by Wait, and by Enqueue with wait_ms: some message is not terminal yet (the server
  // may hold the request until it is: server/result_waits.cc).
  bool unfinished = false;
  // Messages the operation handled (sundial_messages_total): enqueue items accepted, messages
  // leased, complete items that succeeded.
  uint64_t messages = 0;
  // Messages a Complete's or Fail's `next` leased: counted as op="dequeue", not as the
  // request's operation (a lease is a dequeue's work whichever request carried it).
  uint64_t next_leased = 0;
  // Set by Switchover: the server answers later; the reply built now is not sent.
  bool deferred = false;
};

inline constexpr uint8_t kOverTcp = 1u << static_cast<uint8_t>(Transport::kTcp);
inline constexpr uint8_t kOverWebSocket = 1u << static_cast<uint8_t>(Transport::kWebSocket);
// The HTTP JSON API (server/http_api.h): one request per HTTP request, no connection state.
inline constexpr uint8_t kOverHttp = 1u << static_cast<uint8_t>(Transport::kHttp);

struct OperationRow {
  protocol::Operation op;
  std::string_view name;  // the union member's name, as in the schema
  OpKind kind;
  uint8_t transports;  // kOverTcp | kOverWebSocket | kOverHttp
  // Decodes `request` (verified, with its op table present), runs it, finishes `reply`.
  void (*run)(const protocol::Request& request, OpContext& ctx, Reply& reply);
};

// Every row, in the order of the Operation union (the test walks them).
std::span<const OperationRow> OperationTable();
// The row of `op`, or nullptr for NONE and values this build does not know.
const OperationRow* FindOperation(protocol::Operation op);

class Dispatcher {
 public:
  // `log` may be null (no durability to wait for: tests, --fsync=never without a log).
  // `server` may be null (tests): session operations are then refused. `role` may be null: a
  // standalone node.
  Dispatcher(Engine* engine, const wal::GroupCommitLog* log, SessionOperations* server = nullptr,
             const NodeRole* role = nullptr)
      : engine_(engine), log_(log), server_(server), role_(role) {}

  struct Outcome {
    std::string_view response;   // a finished ServerMessage in the builder given to Handle
    uint64_t wait_lsn = 0;       // send once every record below this is durable; 0: now
    Code code = Code::kOk;       // of the whole request (metrics); items of a batch may still fail
    bool empty_dequeue = false;  // a Dequeue that succeeded with no message (long-poll waits)
    bool unfinished = false;     // OpContext::unfinished
    uint64_t messages = 0;       // OpContext::messages
    uint64_t next_leased = 0;    // OpContext::next_leased
    bool deferred = false;       // OpContext::deferred: the caller answers later, not `response`
    const OperationRow* row = nullptr;  // null: the operation was unknown or refused before it
  };
  Outcome Handle(const protocol::Request& request, Transport transport, Session* session,
                 flatbuffers::FlatBufferBuilder* builder, Access access = Access::kFull) const;
  // Answers again a request that was unfinished (Outcome::unfinished): a Wait is run again; an
  // Enqueue with wait_ms is not (it would be a duplicate): its `first` reply is answered again
  // with each enqueued message's outcome now. The reply waits for the log like a kDurableRead.
  // Complete-and-next waiting for a message (LongPolls): runs the `next` dequeue of the
  // Complete or Fail `request` again, and answers `first` (its first reply, which had no
  // leases) with the messages now leased. The reply waits for the log like a mutation's. When
  // this node may not write now, or the log failed, it dequeues nothing (answers empty).
  Outcome AnswerNext(const protocol::Request& request, std::string_view first,
                     flatbuffers::FlatBufferBuilder* builder) const;
  Outcome Reanswer(const protocol::Request& request, std::string_view first, Transport transport,
                   Session* session, flatbuffers::FlatBufferBuilder* builder,
                   Access access = Access::kFull) const;

 private:
  Engine* engine_;
  const wal::GroupCommitLog* log_;
  SessionOperations* server_;
  const NodeRole* role_;
};

// The dequeue a request asks for: a Dequeue's own, a Complete's or Fail's `next`; else null.
const protocol::Dequeue* DequeueOf(const protocol::Request& request);
// The queue that dequeue reads (a `next` without a queue: the request's queue).
std::string_view WaitQueueOf(const protocol::Request& request);

// A finished ServerMessage{Response} with only `request_id` and an error.
std::string ErrorResponse(uint64_t request_id, Code code, std::string_view message);
// A finished ServerMessage{Response} with an empty DequeueResult (a long poll that timed out).
std::string EmptyDequeueResponse(uint64_t request_id);

}  // namespace sundial::server
