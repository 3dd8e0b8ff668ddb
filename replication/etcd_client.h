// EtcdClient: a blocking client for etcd 3.4's v3 API over its JSON gateway (HTTP/1.1, the
// way Patroni's etcd3 module drives it), the coordination store of high availability
// (docs/replication.md). No gRPC: each operation is one POST of a JSON body to `/v3/...` on a
// kept-alive connection; keys and values travel base64-encoded and are plain bytes here.
//
// Operations: lease grant / keep-alive (one POST = one renewal) / revoke, put (optionally on a
// lease), get and prefix range, delete, transactions (compares on create_revision,
// mod_revision, version or value; put, delete and range ops on either branch), compaction.
// Watches are in replication/etcd_watch.h (each on its own connection and thread).
//
// Deadlines. Every call takes a Deadline (default: now + Options::call_timeout) and returns by
// it, with UNAVAILABLE if etcd did not answer in time, however etcd misbehaves (refused,
// paused with SIGSTOP, half-written replies). No call blocks past its deadline by more than
// the scheduling delay of the calling thread.
//
// Several endpoints. The client keeps one connection to the endpoint that last answered and
// sends each call there first. When that endpoint cannot be reached, times out, or answers
// that it cannot serve (gRPC UNAVAILABLE: no leader, request timed out, leader changed, or a
// 5xx without an etcd body), the call moves on to the next endpoint, each attempt bounded by
// Options::attempt_timeout and all of them by the call's deadline; the endpoint that answers
// becomes the current one. Each endpoint is tried at most once per call. Every request carries
// gRPC metadata `hasleader: true`, so a member cut off from its leader refuses at once
// instead of serving stale reads or holding a request.
//
// In-doubt writes. A write whose request was sent but whose reply never came (timeout, dropped
// connection) may or may not have been applied: EtcdError::in_doubt says so. Because the call
// then moves on to the next endpoint, a transaction can be applied by a first endpoint and
// fail its compares on the second (it sees its own write). Callers that must know (the leader
// election) put a range of the key in the failure branch and compare the value with their
// own, or re-read.
//
// Errors. Every failure is an EtcdError: a Code chosen by what the caller should do (as in
// engine/status.h) and a message naming the endpoint and the operation:
//   UNAVAILABLE          unreachable, timed out, no leader, every endpoint failed: retry later
//   NOT_FOUND            the lease does not exist (expired or revoked): keep-alive, revoke, put
//   INVALID_ARGUMENT     etcd refused the request (empty key, bad range)
//   FAILED_PRECONDITION  the revision is compacted or in the future
//   RESOURCE_EXHAUSTED   etcd's quota is exceeded, or a reply is larger than max_response_bytes
//   UNAUTHENTICATED      etcd wants authentication (not supported here)
//   INTERNAL             the endpoint answered something that is not etcd's JSON (garbage,
//                        wrong types, bad base64): not retried elsewhere
//
// Thread safety: an EtcdClient is NOT thread-safe; calls are blocking and made from one thread
// at a time (the HA control thread). Use one client per thread. Value types are plain data.
//
// Not supported (left out on purpose): TLS and authentication to etcd, discovering members
// from the cluster (the list given is the list used), gRPC-only features.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "engine/status.h"

namespace sundial::replication {

using EtcdClock = std::chrono::steady_clock;

// ---- Errors -------------------------------------------------------------------------------

struct EtcdError {
  Code code = Code::kInternal;
  // "etcd http://127.0.0.1:2379 /v3/kv/txn: read: timed out after 500 ms"; several endpoints'
  // failures are joined with "; ".
  std::string message;
  // The request was written to an endpoint and no reply came: a write may have been applied.
  bool in_doubt = false;

  // The code with a static detail (engine/status.h), for code that speaks Status.
  Status status() const;
  // "UNAVAILABLE: " + message.
  std::string ToString() const;
};

template <typename T>
class [[nodiscard]] EtcdResult {
 public:
  EtcdResult(T value) : value_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  EtcdResult(EtcdError error) : value_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(value_); }
  // kOk when ok().
  Code code() const { return ok() ? Code::kOk : error().code; }
  // REQUIRES: !ok().
  const EtcdError& error() const { return std::get<EtcdError>(value_); }
  // REQUIRES: ok().
  T& value() & { return std::get<T>(value_); }
  const T& value() const& { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, EtcdError> value_;
};

// ---- Endpoints and deadlines --------------------------------------------------------------

struct EtcdEndpoint {
  std::string host;  // a name, an IPv4 address, or an IPv6 address without brackets
  uint16_t port = 2379;

  // "http://127.0.0.1:2379", "http://[::1]:2379".
  std::string url() const;
  friend bool operator==(const EtcdEndpoint&, const EtcdEndpoint&) = default;
};

// Parses `--etcd`'s value: "URL[,URL...]", each "http://host:port" or "host:port" (the port
// defaults to 2379). INVALID_ARGUMENT for an empty list, https:// (not supported), a path, or
// a bad port.
EtcdResult<std::vector<EtcdEndpoint>> ParseEtcdEndpoints(std::string_view list);

// When a call must have returned. Default-constructed: now + EtcdClientOptions::call_timeout.
struct Deadline {
  std::optional<EtcdClock::time_point> at;

  static Deadline In(std::chrono::milliseconds from_now) { return {EtcdClock::now() + from_now}; }
  static Deadline At(EtcdClock::time_point when) { return {when}; }
};

// ---- Data ---------------------------------------------------------------------------------

// etcd's ResponseHeader: `revision` is the store's revision when the request was served (after
// a write, the write's revision).
struct ResponseHeader {
  uint64_t cluster_id = 0;
  uint64_t member_id = 0;
  int64_t revision = 0;
  uint64_t raft_term = 0;
};

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // revision of the put that created the key (the HA epoch)
  int64_t mod_revision = 0;     // revision of the last put
  int64_t version = 0;          // number of puts since creation
  int64_t lease = 0;            // 0: not on a lease
};

struct RangeResult {
  ResponseHeader header;
  std::vector<KeyValue> kvs;  // ascending by key
  int64_t count = 0;          // keys in the range (may exceed kvs.size() with a limit)
  bool more = false;

  // The first (for Get: the only) key, or nullptr when there is none.
  const KeyValue* first() const { return kvs.empty() ? nullptr : &kvs.front(); }
};

struct PutResult {
  ResponseHeader header;  // header.revision: the put's revision
};

struct DeleteResult {
  ResponseHeader header;
  int64_t deleted = 0;
};

struct Lease {
  int64_t id = 0;
  int64_t ttl_seconds = 0;  // as granted: etcd raises a TTL below its minimum
  ResponseHeader header;
};

struct LeaseRenewal {
  int64_t ttl_seconds = 0;  // the lease's TTL, restarted by this renewal
  // When the renewing request was written to the endpoint that answered (CLOCK_MONOTONIC):
  // the lease cannot expire before sent + ttl_seconds (etcd restarted it after receiving).
  // Patroni's rule (docs/replication.md): a leader must stop acting as one at
  // sent + ttl - margin unless a later renewal succeeds.
  EtcdClock::time_point sent;
  ResponseHeader header;
};

// One compare of a transaction: `target` of `key` `relation` the operand. A key that does not
// exist has create_revision, mod_revision and version 0 and compares as such (so
// KeyMissing(key) is "create_revision == 0"); a missing key's value compares false.
struct Compare {
  enum class Target : uint8_t { kCreateRevision, kModRevision, kVersion, kValue };
  enum class Relation : uint8_t { kEqual, kNotEqual, kGreater, kLess };

  std::string key;
  Target target = Target::kCreateRevision;
  Relation relation = Relation::kEqual;
  int64_t number = 0;  // the operand of the revision and version targets
  std::string value;   // the operand of kValue

  static Compare KeyMissing(std::string key) {
    return {std::move(key), Target::kCreateRevision, Relation::kEqual, 0, {}};
  }
  static Compare CreateRevisionIs(std::string key, int64_t revision) {
    return {std::move(key), Target::kCreateRevision, Relation::kEqual, revision, {}};
  }
  static Compare ModRevisionIs(std::string key, int64_t revision) {
    return {std::move(key), Target::kModRevision, Relation::kEqual, revision, {}};
  }
  static Compare ValueIs(std::string key, std::string value) {
    return {std::move(key), Target::kValue, Relation::kEqual, 0, std::move(value)};
  }
};

// One operation of a transaction branch.
struct TxnOp {
  enum class Kind : uint8_t { kPut, kDelete, kRange };

  Kind kind = Kind::kRange;
  std::string key;
  std::string range_end;  // empty: the key alone; else [key, range_end) (see PrefixRangeEnd)
  std::string value;      // kPut
  int64_t lease = 0;      // kPut: 0 for none

  static TxnOp Put(std::string key, std::string value, int64_t lease = 0);
  static TxnOp Delete(std::string key);
  static TxnOp DeletePrefix(std::string prefix);
  static TxnOp Get(std::string key);
  static TxnOp GetPrefix(std::string prefix);
};

struct TxnRequest {
  std::vector<Compare> compare;  // all must hold for `success` to run
  std::vector<TxnOp> success;
  std::vector<TxnOp> failure;
};

// The response to one op of the branch that ran, in order.
struct TxnOpResponse {
  TxnOp::Kind kind = TxnOp::Kind::kRange;
  RangeResult range;    // kRange: what it read
  int64_t deleted = 0;  // kDelete
};

struct TxnResult {
  ResponseHeader header;   // after a successful write: its revision (a created key's epoch)
  bool succeeded = false;  // whether the compares held (`success` ran) or not (`failure` ran)
  std::vector<TxnOpResponse> responses;
};

// ---- The client ---------------------------------------------------------------------------

struct EtcdClientOptions {
  std::vector<EtcdEndpoint> endpoints;
  // A call's deadline when the caller gives none.
  std::chrono::milliseconds call_timeout{1000};
  // One endpoint's share of a call (connect, write, reply). 0: call_timeout divided by the
  // number of endpoints, at least 100 ms, so every endpoint gets its try within one call.
  std::chrono::milliseconds attempt_timeout{0};
  // A reply body larger than this is refused (RESOURCE_EXHAUSTED) and the connection closed.
  size_t max_response_bytes = 16 << 20;
};

class EtcdClient {
 public:
  // Connects lazily, on the first call. With no endpoints every call is INVALID_ARGUMENT.
  explicit EtcdClient(EtcdClientOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // /v3/lease/grant. etcd raises a TTL below its minimum (ceil(1.5 × election timeout)).
  EtcdResult<Lease> GrantLease(int64_t ttl_seconds, Deadline deadline = {});
  // /v3/lease/keepalive, one renewal. NOT_FOUND when the lease is gone (expired or revoked).
  EtcdResult<LeaseRenewal> KeepAliveOnce(int64_t lease_id, Deadline deadline = {});
  // /v3/lease/revoke: the lease and every key on it are deleted. NOT_FOUND when already gone.
  EtcdResult<ResponseHeader> RevokeLease(int64_t lease_id, Deadline deadline = {});

  // /v3/kv/put. `lease` 0: the key outlives every lease. NOT_FOUND when the lease is gone.
  EtcdResult<PutResult> Put(std::string_view key, std::string_view value, int64_t lease = 0,
                            Deadline deadline = {});
  // /v3/kv/range of one key (linearizable): kvs holds it or is empty.
  EtcdResult<RangeResult> Get(std::string_view key, Deadline deadline = {});
  // /v3/kv/range of every key starting with `prefix`, ascending (at most `limit`, 0: all).
  EtcdResult<RangeResult> GetPrefix(std::string_view prefix, int64_t limit = 0,
                                    Deadline deadline = {});
  // /v3/kv/deleterange of one key, or of every key starting with `prefix`.
  EtcdResult<DeleteResult> Delete(std::string_view key, Deadline deadline = {});
  EtcdResult<DeleteResult> DeletePrefix(std::string_view prefix, Deadline deadline = {});
  // /v3/kv/txn: the compares, then `success` or `failure`, atomically at one revision.
  EtcdResult<TxnResult> Txn(const TxnRequest& request, Deadline deadline = {});
  // /v3/kv/compaction: forget history before `revision` (watches from older revisions then
  // fail with FAILED_PRECONDITION). For tests and operators; the HA does not compact.
  EtcdResult<ResponseHeader> Compact(int64_t revision, Deadline deadline = {});

  const std::vector<EtcdEndpoint>& endpoints() const;
  // The endpoint the next call goes to first: the last one that answered.
  const EtcdEndpoint& current_endpoint() const;
  // The endpoints, the current one first and then the others in order: what to give
  // Watch::Start so that it does not spend its deadline on an endpoint known to be down.
  std::vector<EtcdEndpoint> PreferredEndpoints() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The exclusive end of the range holding every key that starts with `prefix`: the prefix with
// its last byte below 0xff incremented and what follows dropped; "\0" (every key from the
// start) when there is no such byte.
std::string PrefixRangeEnd(std::string_view prefix);

}  // namespace sundial::replication
