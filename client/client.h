// The Sundial client library: connects to sundiald's binary TCP port (docs/protocol.md) and calls
// the operations of docs/protocol.md. docs/cli.md describes the `sundial` CLI built on it.
//
// Wire: frames of a u32le length and one FlatBuffer (protocol/framing.h). The client sends
// Requests (client/requests.h builds them) and reads ServerMessages. Every incoming frame is
// verified with FlatBuffers' Verifier before any field is read; a frame that fails, an empty
// frame or one above kMaxResponseFrameBytes is a protocol violation: the call fails with
// INTERNAL (Error::Origin::kConnection) and the connection is closed. Responses are matched to
// calls by request_id, so they may arrive in any order; frames whose body is an EventMessage
// are skipped (subscriptions are WebSocket-only: client/watch.h). A Response with
// request_id 0 is the server's answer to a request it could not read: its error fails every
// call in flight, and the connection is closed.
//
// Errors (client/result.h): a Response with `error` set becomes Error{code, message,
// kServer}; Call never returns a Reply that carries an error. Per-item errors of batch
// operations (enqueue, complete, cancel and redrive by ids) stay in the Reply's result.
//
// Two clients:
//   - Client: blocking, one caller at a time. Each call has a deadline of timeout_ms (plus
//     the request's wait_ms for a long-poll dequeue); when it passes the call fails with
//     UNAVAILABLE and the connection is closed (a late answer could not be told apart).
//     CallAll pipelines several requests on the connection and waits for all of them.
//   - AsyncClient: pipelined, for the load generator. One connection, one background I/O
//     thread; Send may be called from any thread with many requests in flight; each
//     callback runs exactly once, on the I/O thread.
//
// Following a cluster's primary (docs/clients/cpp.md, "Clusters"): Client::Connect given two or
// more addresses (the nodes of one cluster, docs/replication.md) keeps its connection on the
// primary. It finds it with the Cluster request (any node answers; the one that says it is the
// primary, at an epoch no older than any seen, is used; a node naming another as primary sends
// the client there), and on NOT_PRIMARY, a lost connection, a call that timed out or the
// server's UNAVAILABLE it looks again and sends the call again, waiting between tries with a
// jittered exponential backoff (RetryPolicy), until RetryPolicy::budget_ms after the call began;
// then the call returns the last error it got. What is sent again depends on the operation
// (RequestResend below): every request refused with NOT_PRIMARY (it was not applied), and
// after an unknown outcome only those that are safe to repeat: reads, enqueues whose items all
// carry ids (the typed Enqueue gives an id to each item without one, so that a repeat is a
// duplicate and not a second message), complete/fail/extend with their tokens, dequeues (a
// lease the lost answer carried expires and the message comes back: at least once). Cluster
// goes to whichever node is connected; everything else to the primary. Given one address, the
// client is exactly the single-node client: no Cluster request, no retry, no id of its own.
//
// TLS (ConnectOptions::tls): the connection is TLS 1.2 or later; the server's certificate must
// chain to ConnectOptions::ca_file (or, without one, to the system's CAs) and name the host
// connected to (a DNS name, or an IP address in its subjectAltName). A refused certificate is
// UNAVAILABLE (kConnection) saying why (unknown CA, wrong host, expired).
//
// Boost.Asio stays inside client/*.cc: this header only needs FlatBuffers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "client/requests.h"
#include "client/result.h"
#include "protocol/sundial_generated.h"

namespace sundial::client {

inline constexpr uint16_t kDefaultPort = 7400;
inline constexpr uint16_t kDefaultHttpPort = 7401;
inline constexpr int kDefaultTimeoutMs = 10000;
// Largest response frame accepted (a dequeue of 1000 messages of 1 MiB each fits).
inline constexpr uint32_t kMaxResponseFrameBytes = 1u << 30;

struct Address {
  std::string host = "127.0.0.1";
  uint16_t port = kDefaultPort;

  // "host:port", with brackets around an IPv6 host.
  std::string ToString() const;
  friend bool operator==(const Address&, const Address&) = default;
};

// Parses "host:port", "host", ":port", "[v6]:port" or "[v6]". An absent host is 127.0.0.1, an
// absent port `default_port`; "" is 127.0.0.1:default_port. INVALID_ARGUMENT (kLocal) names
// what is wrong: a port that is not a number in 1..65535, an unclosed bracket, an IPv6
// address without brackets.
Result<Address> ParseAddress(std::string_view text, uint16_t default_port = kDefaultPort);

// Parses a comma-separated list of addresses ("a:7400,b:7400,c"), each as ParseAddress;
// whitespace around an element is ignored and a repeated address is kept once. An empty list
// or element is INVALID_ARGUMENT (kLocal), as is a bad element (named).
Result<std::vector<Address>> ParseAddressList(std::string_view text,
                                              uint16_t default_port = kDefaultPort);

// How a client given several addresses retries while it follows the primary (see above).
// The wait before try n (n >= 1) is a random time in [b/2, b] with b = min(initial_backoff_ms *
// 2^(n-1), max_backoff_ms); no try starts after budget_ms from the call's start, and a try
// under way keeps its own deadline (timeout_ms, plus a long poll's wait), so a call returns
// within budget_ms + timeout_ms (+ wait_ms) at most. The default budget covers a failover
// with sundiald's default --leader-ttl-s 5 with room to spare.
struct RetryPolicy {
  int budget_ms = 20000;
  int initial_backoff_ms = 50;
  int max_backoff_ms = 1000;
};

// How to connect, beyond the address.
struct ConnectOptions {
  std::string token;                   // empty: no Auth request
  int timeout_ms = kDefaultTimeoutMs;  // connect + TLS handshake + Auth; then each call
  bool tls = false;                    // TLS (the server runs with --tls-cert/--tls-key)
  std::string ca_file;                 // PEM CAs for the server's certificate; empty: the system's
  std::string server_name;             // name the certificate must show; empty: the address's host
  RetryPolicy retry;                   // with several addresses: how calls are retried
};

// What a client following the primary may do with a request whose outcome it does not know
// (the connection was lost or the call timed out after it was written, or the server answered
// UNAVAILABLE): send it again, or return the error. A request refused with NOT_PRIMARY is
// always sent again (the node applied nothing).
enum class RequestResend : uint8_t {
  kSafe,     // reads, idempotent writes, enqueues with ids, complete/fail/extend with tokens,
             // dequeues (at least once)
  kNotSafe,  // delete_queue, redrive, switchover, an enqueue item without an id, auth,
             // subscriptions: the caller decides
};
// `request`: a verified Request (its bytes as SummarizeRequest takes them); kNotSafe for bytes
// that are not one.
RequestResend ResendRule(std::string_view request);

// True when `bytes` is a valid ServerMessage FlatBuffer (FlatBuffers' Verifier).
bool VerifyServerMessage(std::string_view bytes);

// One successful Response, owning its bytes (a whole ServerMessage).
class Reply {
 public:
  // Verifies `server_message`. A Response without an error becomes a Reply; a Response with
  // one becomes its Error (kServer); anything else (not verifiable, or an EventMessage) is
  // INTERNAL (kConnection).
  static Result<Reply> FromServerMessage(std::string server_message);
  // The same, for bytes already verified (VerifyServerMessage).
  static Result<Reply> FromVerified(std::string server_message);

  const protocol::Response& response() const;
  uint64_t request_id() const { return response().request_id(); }
  // The log position synced for a durable mutation (0 otherwise).
  uint64_t lsn() const { return response().lsn(); }
  protocol::Result result_type() const { return response().result_type(); }
  // The result table, or nullptr when the result is of another type.
  template <typename T>
  const T* result() const {
    return response().template result_as<T>();
  }
  std::string_view bytes() const { return bytes_; }

 private:
  explicit Reply(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string bytes_;  // verified; the root is read again on each access (no pointer into it)
};

class AsyncClient;

// Blocking client. Not thread-safe: one caller at a time.
class Client {
 public:
  // Resolves and connects within timeout_ms (UNAVAILABLE naming the address otherwise). With
  // a token, sends Auth first: a refusal is UNAUTHENTICATED with the server's message.
  static Result<std::unique_ptr<Client>> Connect(const Address& address, std::string token = {},
                                                 int timeout_ms = kDefaultTimeoutMs);
  // The same, with TLS when options.tls (handshake and verification within timeout_ms).
  static Result<std::unique_ptr<Client>> Connect(const Address& address,
                                                 const ConnectOptions& options);
  // One address: Connect(addresses[0], options). Two or more: the nodes of one cluster; the
  // client follows the primary (see above). It connects to the primary when a node names one,
  // else to the first node that answers (calls then wait for a primary within the retry
  // budget); UNAVAILABLE (kConnection) naming every address when none answers, and
  // UNAUTHENTICATED when a node refuses the token. INVALID_ARGUMENT (kLocal) for an empty list.
  static Result<std::unique_ptr<Client>> Connect(const std::vector<Address>& addresses,
                                                 const ConnectOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // 1, 2, 3, ... (never 0).
  uint64_t NextRequestId();
  // The next request id and this client's durability (durable unless set).
  RequestHeader NextHeader();
  void set_durability(Durability d) { durability_ = d; }
  Durability durability() const { return durability_; }
  bool connected() const;
  // The address connected to (the primary's, once found, when following).
  const Address& address() const { return address_; }
  // Whether this client follows a cluster's primary (it was given two or more addresses).
  bool follows_primary() const { return follow_ != nullptr; }
  // Following: how many times a call was sent again, and the primary was looked for, so far.
  uint64_t resends() const;
  uint64_t primary_searches() const;

  // Sends one finished Request and waits for the response with its request_id.
  Result<Reply> Call(std::string_view request);
  Result<Reply> Call(const flatbuffers::FlatBufferBuilder& finished_request);
  // Sends every request at once (pipelined), then waits for all responses, in any order.
  // Results are in request order. request_ids must differ and not be 0 (INVALID_ARGUMENT,
  // kLocal, for the offending requests, which are not sent).
  std::vector<Result<Reply>> CallAll(const std::vector<std::string>& requests);
  // Closes the connection; later calls fail with UNAVAILABLE.
  void Close();

  // Typed helpers: build the request (client/requests.h) with NextHeader() and Call it. The
  // result table to read from the Reply is named after each (protocol/sundial.fbs). Following
  // a primary, Enqueue gives every item without an id one of its own (NewMessageId), so that
  // it can be sent again safely; the reply names it as usual.
  Result<Reply> CreateQueue(std::string_view name, const QueueSettings& s);        // QueueResult
  Result<Reply> UpdateQueue(std::string_view name, const QueueSettingsUpdate& u);  // QueueResult
  Result<Reply> GetQueue(std::string_view name);                                   // QueueResult
  Result<Reply> ListQueues();                                                      // QueueList
  Result<Reply> DeleteQueue(std::string_view name);                                // Done
  Result<Reply> PurgeQueue(std::string_view name,
                           const std::vector<MessageState>& states);  // Counted
  Result<Reply> Enqueue(std::string_view queue, const std::vector<EnqueueItem>& items,
                        uint32_t wait_ms = 0);                             // EnqueueResults
  Result<Reply> Dequeue(std::string_view queue, const DequeueOptions& o);  // DequeueResult
  Result<Reply> Complete(std::string_view queue,
                         const std::vector<CompleteItem>& items);  // ItemResults
  // ItemResults with `next`: the new leases (BuildCompleteAndNext).
  Result<Reply> CompleteAndNext(std::string_view queue, const std::vector<CompleteItem>& items,
                                const DequeueOptions& next);
  Result<Reply> Fail(std::string_view queue, std::string_view id, uint64_t lease_token,
                     const FailOptions& o);  // FailResult
  Result<Reply> Extend(std::string_view queue, std::string_view id, uint64_t lease_token,
                       int64_t lease_ms);  // ExtendResult
  Result<Reply> Cancel(std::string_view queue,
                       const std::vector<std::string>& ids);                  // ItemResults
  Result<Reply> CancelByFilter(std::string_view queue, const Pairs& filter);  // Counted
  Result<Reply> Reprioritize(std::string_view queue, std::string_view id,
                             const ReprioritizeChange& change);  // VersionResult
  Result<Reply> ReprioritizeByFilter(std::string_view queue, const Pairs& filter,
                                     const ReprioritizeChange& change);  // Counted
  Result<Reply> Redrive(std::string_view queue,
                        const std::vector<std::string>& ids);                  // ItemResults
  Result<Reply> RedriveAll(std::string_view queue);                            // Counted
  Result<Reply> RedriveByFilter(std::string_view queue, const Pairs& filter);  // Counted
  // GetResult; include_dependency_results: with Message.dependency_results.
  Result<Reply> Get(std::string_view queue, std::string_view id,
                    bool include_dependency_results = false);
  Result<Reply> Browse(std::string_view queue, const BrowseOptions& o);      // BrowseResult
  Result<Reply> Count(std::string_view queue, const Pairs& filter = {});     // CountResult
  Result<Reply> Explain(std::string_view queue, std::string_view id);        // ExplainResult
  Result<Reply> ExplainFilter(std::string_view queue, const Pairs& filter);  // ExplainResult
  Result<Reply> Wait(std::string_view queue, const std::vector<std::string>& ids,
                     uint32_t wait_ms);  // WaitResult
  Result<Reply> UpsertSchedule(std::string_view queue, std::string_view name,
                               const ScheduleTemplate& t);                       // ScheduleResult
  Result<Reply> GetSchedule(std::string_view queue, std::string_view name);      // ScheduleResult
  Result<Reply> ListSchedules(std::string_view queue = {});                      // ScheduleList
  Result<Reply> DeleteSchedule(std::string_view queue, std::string_view name);   // Done
  Result<Reply> PauseSchedule(std::string_view queue, std::string_view name);    // ScheduleResult
  Result<Reply> ResumeSchedule(std::string_view queue, std::string_view name);   // ScheduleResult
  Result<Reply> TriggerSchedule(std::string_view queue, std::string_view name);  // TriggerResult
  // FlowResult. Following a primary, every node without an id gets one (NewMessageId), so that
  // a resent flow is a duplicate (docs/semantics.md, "Flows").
  Result<Reply> EnqueueFlow(const std::vector<FlowNode>& roots);
  Result<Reply> CreateBatch(std::string_view id, const CreateBatchOptions& o);  // BatchResult
  Result<Reply> SealBatch(std::string_view id);                                 // BatchResult
  Result<Reply> GetBatch(std::string_view id);                                  // BatchResult
  Result<Reply> History(std::string_view queue, std::string_view id);           // HistoryResult
  // Per-key limits (docs/semantics.md, "Per-key limits").
  Result<Reply> SetKeyLimits(std::string_view queue, std::string_view value,
                             const KeyLimits& limits);                         // KeyResult
  Result<Reply> GetKeyLimits(std::string_view queue, std::string_view value);  // KeyResult
  Result<Reply> ListKeys(std::string_view queue,
                         protocol::KeyOrder order = protocol::KeyOrder::pending,
                         uint32_t limit = 20);  // KeyList
  Result<Reply> Note(std::string_view queue, std::string_view id, uint64_t lease_token,
                     std::string_view text);           // Done
  Result<Reply> Stats();                               // StatsResult
  Result<Reply> Health();                              // HealthResult
  Result<Reply> Cluster();                             // ClusterResult (any node answers)
  Result<Reply> Switchover(std::string_view to = {});  // Done

 private:
  friend class AsyncClient;
  struct Impl;
  struct Follow;
  Client(Address address, std::unique_ptr<Impl> impl);

  // Sends `requests` on the connection as it is: no retry (the single-node client).
  std::vector<Result<Reply>> CallOnce(const std::vector<std::string>& requests);
  // Following: sends them to the primary, looks for it and sends again as the rules say.
  std::vector<Result<Reply>> CallFollowing(const std::vector<std::string>& requests);
  // Following: connects to the primary (first to `hint`, a node's word for where it is, when
  // given). Ok once connected to it; else the error, and the connection is left on a node that
  // answered, if any did (Cluster requests can go there).
  Result<void> FindPrimary(const std::string& hint);

  Address address_;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<Follow> follow_;  // null: a single-node client
  uint64_t next_request_id_ = 1;
  Durability durability_ = Durability::durable;
};

// Pipelined client: one connection and one background I/O thread.
//
// Thread safety: Send, NextRequestId and in_flight may be called from any thread. Each
// callback runs exactly once, on the I/O thread (so callbacks must not block; they may call
// Send). Close and the destructor must not be called from a callback.
class AsyncClient {
 public:
  using Callback = std::function<void(Result<Reply>)>;
  // Requests in flight at once; beyond it Send fails the call with RESOURCE_EXHAUSTED.
  static constexpr size_t kMaxInFlight = 1u << 16;

  // Connects (and authenticates) like Client::Connect, then starts the I/O thread.
  static Result<std::unique_ptr<AsyncClient>> Connect(const Address& address,
                                                      std::string token = {},
                                                      int timeout_ms = kDefaultTimeoutMs);
  static Result<std::unique_ptr<AsyncClient>> Connect(const Address& address,
                                                      const ConnectOptions& options);
  // Several addresses: connects to the cluster's primary, found as Client does (waiting for
  // one within options.retry's budget). It does not follow it afterwards: when the primary
  // changes, calls fail with NOT_PRIMARY or UNAVAILABLE and the caller connects again.
  static Result<std::unique_ptr<AsyncClient>> Connect(const std::vector<Address>& addresses,
                                                      const ConnectOptions& options);
  ~AsyncClient();  // Close()
  AsyncClient(const AsyncClient&) = delete;
  AsyncClient& operator=(const AsyncClient&) = delete;

  // Unique on this client; 1, 2, 3, ...
  uint64_t NextRequestId();
  // Sends one finished Request (its request_id must not be in flight on this client). The
  // callback gets its Reply or Error: the server's, INVALID_ARGUMENT for bytes that are not a
  // Request or a request_id in flight, UNAVAILABLE when the connection is lost or closed
  // before the answer. After Close the callback runs at once, on the caller's thread.
  void Send(std::string request, Callback callback);
  // Calls sent and not yet answered.
  size_t in_flight() const;
  // Fails every call in flight with UNAVAILABLE, closes the connection and joins the I/O
  // thread. Idempotent.
  void Close();

 private:
  struct Impl;
  explicit AsyncClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sundial::client
