// The wire protocols sundial-bench speaks: Sundial's binary frames, Redis (a sorted set and a
// Lua lease script, formatted and parsed by hiredis) and beanstalkd's text protocol. Each is a
// pure encoder/decoder over byte buffers, one instance per connection; the driver
// (sundial_bench.cc) owns the sockets. The same message (id, priority, payload, tenant,
// exclusivity value) goes to all three, mapped as docs/BENCHMARKS.md describes:
//
//   operation   Sundial                Redis                               beanstalkd
//   enqueue     Enqueue (K items)      ZADD key score member (K pairs)     K × put
//   dequeue     Dequeue max K          EVALSHA lease script (n = K)        K × reserve-with-timeout
//   0 complete    Complete (K items)     ZREM key member…                    K × delete complete
//   Complete (K items)     EVALSHA lease script (n = M,        K × delete, then and next    with
//   next: max M       members to ZREM first)              M × reserve-with-timeout 0 tenant
//   metadata tenant=T,     key "<queue>:T"                     tube "<queue>.T"
//               Dequeue filter
//
// Requests carry a `slot` (the driver's in-flight operation); replies hand it back through a
// ReplySink, in any order for Sundial (request ids) and in order for the other two.
//
// Thread safety: none; one connection's thread owns its Protocol.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace sundial::bench {

// kHttp: Sundial's HTTP JSON API (docs/http-api.md), POST /v1/<Operation> with keep-alive.
enum class Target : uint8_t { kSundial, kRedis, kBeanstalk, kHttp };

struct ProtocolOptions {
  std::string queue;     // queue name / Redis key prefix / beanstalkd tube prefix
  bool relaxed = false;  // Sundial: durability relaxed on every request
  int64_t lease_ms = 30000;
  bool exclusive = false;  // Sundial: the queue is exclusive on metadata "key"
  // Sundial: each value of "key" gets this token bucket (key_rate_per_s; 0: none), and a
  // dequeue long-polls up to dequeue_wait_ms for a token rather than coming back empty.
  double key_rate_per_s = 0;
  uint32_t key_burst = 1;
  uint32_t dequeue_wait_ms = 0;
  // Redis: each write is followed by WAIT <redis_wait> 0, and done when WAIT answers (the
  // closest Redis has to a synchronous standby: the replica received it, not fsynced it).
  uint32_t redis_wait = 0;
};

struct BenchMessage {
  std::string_view id;
  int64_t priority = 0;
  std::string_view payload;
  std::string_view tenant;     // empty: none
  std::string_view exclusive;  // exclusivity value (Sundial's exclusive workload); empty: none
};

// A leased message: what the complete needs back.
struct Lease {
  std::string id;  // Sundial id / Redis member / beanstalkd job id
  uint64_t token = 0;
};

class ReplySink {
 public:
  virtual ~ReplySink() = default;
  // One leased message of a dequeue reply (before that request's Done).
  virtual void Leased(uint32_t slot, std::string_view id, uint64_t token) = 0;
  // The whole reply of the request with `slot` arrived; `error` is empty when it succeeded.
  virtual void Done(uint32_t slot, std::string_view error) = 0;
};

class Protocol {
 public:
  virtual ~Protocol() = default;

  // Sent once by the first connection before any other connection starts (create the queue).
  virtual void Prepare(uint32_t slot, std::string* out) = 0;
  // Sent once by every connection before its workload (Redis: load the script; beanstalkd:
  // choose tubes). `tenant` is the connection's tenant for the filter workload, else empty.
  virtual void Setup(uint32_t slot, std::string_view tenant, std::string* out) = 0;
  // Sent by the first connection after the run (delete the queue / keys).
  virtual void Teardown(uint32_t slot, std::span<const std::string> tenants, std::string* out) = 0;

  virtual void Enqueue(uint32_t slot, std::span<const BenchMessage> messages, std::string* out) = 0;
  virtual void Dequeue(uint32_t slot, uint32_t max, std::string_view tenant, std::string* out) = 0;
  // `tenant`: the one the leases were dequeued with (Redis: the key they are in).
  virtual void Complete(uint32_t slot, std::string_view tenant, std::span<const Lease> leases,
                        std::string* out) = 0;
  // The worker's loop step (complete-and-next, docs/semantics.md): completes `leases` and leases
  // up to `next_max` more in one request (Redis: one script call; beanstalkd: the deletes and
  // the reserves pipelined in one write). The new leases are reported like a dequeue's, before
  // Done.
  virtual void CompleteAndNext(uint32_t slot, std::string_view tenant,
                               std::span<const Lease> leases, uint32_t next_max,
                               std::string* out) = 0;

  // Consumes every complete reply at the front of `in`, reporting them to `sink`; returns the
  // bytes consumed, or -1 when the bytes cannot be a reply (the connection is then broken;
  // *error says why).
  virtual int64_t Consume(std::string_view in, ReplySink* sink, std::string* error) = 0;
};

std::unique_ptr<Protocol> MakeProtocol(Target target, const ProtocolOptions& options);

}  // namespace sundial::bench
