// sundial-bench: the end-to-end load generator (docs/tools.md, docs/BENCHMARKS.md). N connections
// spread over a few io threads (one io_context each, so a connection's handlers never race),
// each keeping up to --pipeline operations in flight, framed by hand (bench/protocols.h) for
// Sundial, Redis and beanstalkd alike.
//
// An operation is one unit of the workload: an enqueue request (K messages), a worker's
// dequeue followed by the complete of what it got, or (the worker workload) one
// complete-and-next request of a slot that dequeued once and then loops on it. Its latency runs
// from its start to its last reply; with --rate the start is the intended send time of an open-loop
// schedule, so a stall of the server shows up as latency instead of as fewer requests (coordinated
// omission).
//
// Phases: connect; prepare (the first connection creates the queue); setup (each connection);
// prefill (untimed, dequeue-type workloads); the measured run; teardown (the queue is deleted,
// unless --keep).
// Every phase is bounded in time; the measured run stops at --duration or --messages.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include "bench/histogram.h"
#include "bench/protocols.h"
#include "client/client.h"
#include "client/tls_client.h"

namespace sundial::bench {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

enum class Workload : uint8_t { kEnqueue, kDequeueComplete, kMixed, kFilter, kExclusive, kWorker };

struct Config {
  Target target = Target::kSundial;
  std::string host = "127.0.0.1";
  uint16_t port = 7400;
  std::string target_text = "sundial://127.0.0.1:7400";
  Workload workload = Workload::kEnqueue;
  std::string workload_text = "enqueue";
  uint32_t connections = 16;
  uint32_t threads = 2;
  uint32_t pipeline = 1;
  uint32_t batch = 1;
  uint32_t next_max = 0;  // worker: leases held at most (each request asks to refill); 0: batch
  uint32_t payload_bytes = 100;
  uint64_t messages = 0;  // 0: no count limit
  double duration_s = 10;
  double rate = 0;  // operations per second; 0: closed loop
  uint64_t prefill = 0;
  // The first message's sequence number (its id m<connection>-<sequence> and its priority):
  // runs against one kept queue (bench/soak.sh's chunks) start each past the last, so no id
  // is reused and the older messages keep coming first.
  uint64_t sequence_start = 0;
  uint32_t tenants = 16;
  uint32_t keys = 4096;
  double key_rate_per_s = 0;  // exclusive: each key's token bucket (0: none)
  uint32_t key_burst = 1;
  int64_t lease_ms = 30000;
  uint32_t redis_wait = 0;  // Redis: WAIT for this many replicas after each write
  bool relaxed = false;
  std::string addr;     // Sundial: a cluster's nodes; the run goes to its primary
  bool tls = false;     // Sundial: TLS to a server with --tls-cert
  std::string ca_file;  // PEM CAs to verify it with (empty: the system's)
  std::string queue;
  bool json = false;
  bool keep = false;             // skip the teardown: the messages stay (bench/scale.sh)
  int cpu_pid = 0;               // the server's process: its CPU time over the measured run
  double phase_timeout_s = 120;  // setup, drain; a prefill gets more when it is large
};

int64_t Nanos(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The filter workload's tenant number i, as messages carry it and connections filter on it.
std::string TenantName(uint64_t i) { return fmt::format("t{}", i); }

// The requests a connection sends outside the measured workload.
enum class ControlStep : uint8_t { kPrepare, kSetup, kTeardown };

// What a phase counted, per thread and then summed.
struct Counters {
  uint64_t messages = 0;
  uint64_t requests = 0;
  uint64_t errors = 0;
  uint64_t empty = 0;
  int64_t last_done_ns = 0;
  std::string first_error;
  LatencyHistogram latency;

  void Merge(const Counters& o) {
    messages += o.messages;
    requests += o.requests;
    errors += o.errors;
    empty += o.empty;
    last_done_ns = std::max(last_done_ns, o.last_done_ns);
    if (first_error.empty()) first_error = o.first_error;
    latency.Merge(o.latency);
  }
};

// What the server acknowledged over every phase (setup, prefill, run, teardown), for checking
// the run against the server's own counters (bench/compare.sh).
struct Acked {
  uint64_t enqueued = 0;   // messages of enqueue requests answered OK
  uint64_t leased = 0;     // messages dequeues returned
  uint64_t completed = 0;  // messages of complete requests answered OK
  void Merge(const Acked& o) {
    enqueued += o.enqueued;
    leased += o.leased;
    completed += o.completed;
  }
};

// utime + stime of process `pid` in seconds (/proc/PID/stat), or -1 when unreadable.
double ProcessCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command name may hold spaces
  if (!in.good() && text.empty()) return -1;
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // field 3 is the state
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// What every thread shares during a phase.
struct PhaseShared {
  bool measured = false;
  // The shape of an operation: kEnqueue, kDequeueComplete (also filter's and exclusive's),
  // kMixed (alternating the two) or kWorker (complete-and-next).
  Workload workload = Workload::kEnqueue;
  bool tenants = false;  // filter: messages carry a tenant and dequeues filter on one
  uint32_t batch = 1;
  uint32_t next_max = 1;  // kWorker: leases a slot holds at most
  uint32_t pipeline = 1;
  double rate_per_thread = 0;
  Clock::time_point start;
  Clock::time_point end;       // stop starting operations
  Clock::time_point hard_end;  // give up on operations in flight
  std::atomic<uint64_t> enqueue_sequence{0};

  // The message budget of the phase, split into lanes: one per tenant in the filter workload
  // (its connections enqueue into and dequeue from that tenant only), else one. A lane's limit
  // is what its connections may claim, so a filter worker never asks a tenant for more than
  // the prefill put there, and a fast connection cannot take another tenant's share.
  struct Lane {
    std::atomic<uint64_t> claimed{0};
    uint64_t limit = 0;  // 0: none
  };
  std::unique_ptr<Lane[]> lanes;
  uint32_t lane_count = 0;

  // Splits `limit` (0: none) evenly over `n` lanes; the first ones take the remainder.
  void SetLimit(uint64_t limit, uint32_t n) {
    lanes = std::make_unique<Lane[]>(n);
    lane_count = n;
    for (uint32_t i = 0; i < n; ++i) {
      lanes[i].limit = limit == 0 ? 0 : limit / n + (i < limit % n ? 1 : 0);
    }
  }
  // Takes up to `want` messages of lane `i`'s budget; returns how many (0: it is spent).
  uint32_t Claim(uint32_t i, uint32_t want) {
    Lane& lane = lanes[i];
    if (lane.limit == 0) return want;
    uint64_t claimed = lane.claimed.load(std::memory_order_relaxed);
    for (;;) {
      if (claimed >= lane.limit) return 0;
      const auto n = static_cast<uint32_t>(std::min<uint64_t>(want, lane.limit - claimed));
      if (lane.claimed.compare_exchange_weak(claimed, claimed + n, std::memory_order_relaxed)) {
        return n;
      }
    }
  }
  bool Spent(uint32_t i) const {
    return lanes[i].limit > 0 && lanes[i].claimed.load(std::memory_order_relaxed) >= lanes[i].limit;
  }
};

class Worker;

class Connection final : public ReplySink {
 public:
  Connection(Worker* worker, uint32_t index, asio::io_context& io, std::unique_ptr<Protocol> proto)
      : worker_(worker), index_(index), socket_(io), proto_(std::move(proto)) {
    in_.resize(1 << 16);
  }

  tcp::socket& socket() { return socket_; }
  // TLS over the connected socket: the handshake runs on `io` within `deadline`.
  std::string StartTls(asio::ssl::context& context, const std::string& host, asio::io_context& io,
                       Clock::time_point deadline) {
    tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket_, context);
    client::tls::PrepareConnection(tls_->native_handle(), host);
    bool done = false;
    boost::system::error_code ec = asio::error::timed_out;
    tls_->async_handshake(asio::ssl::stream_base::client, [&](boost::system::error_code e) {
      ec = e;
      done = true;
    });
    io.restart();
    while (!done && Clock::now() < deadline) io.run_one_until(deadline);
    if (!done) {
      Close();
      io.restart();
      io.run();
      return "TLS handshake timed out";
    }
    if (ec) return client::tls::HandshakeFailure(tls_->native_handle(), ec, host);
    return "";
  }
  Protocol& protocol() { return *proto_; }
  uint32_t index() const { return index_; }
  const std::string& tenant() const { return tenant_; }
  // The filter workload: this connection's tenant, and its lane in the phase's budget.
  void set_tenant(std::string t, uint32_t lane) {
    tenant_ = std::move(t);
    lane_ = lane;
  }
  uint32_t lane() const { return lane_; }

  // Slot bookkeeping: free slots and their operation state.
  struct Slot {
    enum class Stage : uint8_t {
      kFree,
      kControl,
      kEnqueue,
      kDequeue,
      kComplete,
      kCompleteAndNext
    } stage = Stage::kFree;
    int64_t start_ns = 0;
    uint32_t messages = 0;  // counted when the operation ends
    std::vector<Lease> leases;
    size_t leased = 0;        // leases[0, leased) are live
    uint32_t completing = 0;  // kCompleteAndNext: the leases it completes (no longer in leases)
  };
  std::vector<Slot>& slots() { return slots_; }
  // The phase uses slots [0, n): the free ones among them become takeable.
  void ResizeSlots(uint32_t n) {
    active_slots_ = n;
    slots_.resize(std::max<size_t>(slots_.size(), n));
    free_.clear();
    for (uint32_t i = 0; i < n; ++i) {
      if (slots_[i].stage == Slot::Stage::kFree) free_.push_back(i);
    }
  }
  bool HasFreeSlot() const { return !free_.empty(); }
  uint32_t TakeSlot() {
    const uint32_t s = free_.back();
    free_.pop_back();
    return s;
  }
  void ReleaseSlot(uint32_t s) {
    slots_[s].stage = Slot::Stage::kFree;
    free_.push_back(s);
  }
  size_t InFlight() const { return active_slots_ - free_.size(); }

  std::string& out() { return out_; }

  void StartReading() {
    WithStream([this](auto& stream) {
      stream.async_read_some(asio::buffer(in_.data() + in_len_, in_.size() - in_len_),
                             [this](boost::system::error_code ec, size_t n) { OnRead(ec, n); });
    });
  }

  void Flush() {
    if (writing_ || out_.empty() || broken_) return;
    writing_ = true;
    std::swap(out_, sending_);
    WithStream([this](auto& stream) {
      asio::async_write(stream, asio::buffer(sending_),
                        [this](boost::system::error_code ec, size_t) {
                          writing_ = false;
                          sending_.clear();
                          if (ec) {
                            Break("write: " + ec.message());
                            return;
                          }
                          Flush();
                        });
    });
  }

  bool broken() const { return broken_; }
  void Close() {
    boost::system::error_code ignored;
    socket_.close(ignored);
  }

  // ReplySink
  void Leased(uint32_t slot, std::string_view id, uint64_t token) override;
  void Done(uint32_t slot, std::string_view error) override;

 private:
  void OnRead(boost::system::error_code ec, size_t n);
  void Break(std::string why);
  // `f` gets the stream to read and write: TLS over the socket, or the socket itself.
  template <typename F>
  void WithStream(F&& f) {
    if (tls_) {
      f(*tls_);
    } else {
      f(socket_);
    }
  }

  Worker* worker_;
  uint32_t index_;
  tcp::socket socket_;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls_;
  std::unique_ptr<Protocol> proto_;
  std::string tenant_;
  uint32_t lane_ = 0;
  std::vector<char> in_;
  size_t in_len_ = 0;
  std::string out_, sending_;
  bool writing_ = false;
  bool broken_ = false;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  size_t active_slots_ = 0;
  std::string parse_error_;
};

// One io thread: its connections, its schedule and its counters.
class Worker {
 public:
  explicit Worker(const Config& config) : config_(config) {
    payload_.resize(config.payload_bytes);
    for (size_t i = 0; i < payload_.size(); ++i) payload_[i] = static_cast<char>('a' + i % 26);
  }

  asio::io_context& io() { return io_; }
  std::vector<std::unique_ptr<Connection>>& connections() { return connections_; }

  Counters& counters() { return counters_; }  // of the current phase
  Workload workload() const { return phase_->workload; }
  Acked& acked() { return acked_; }  // over every phase

  // Runs one phase on this thread until every operation it started has ended.
  void RunPhase(PhaseShared* phase) {
    phase_ = phase;
    counters_ = Counters{};
    stopping_ = false;
    schedule_over_ = false;
    empty_streak_ = 0;
    backlog_.clear();
    io_.restart();
    for (auto& c : connections_) c->ResizeSlots(phase->pipeline);
    asio::steady_timer guard(io_);
    guard.expires_at(phase->hard_end);
    guard.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      Error("the phase did not finish in time (operations still in flight)");
      io_.stop();
    });
    if (phase->rate_per_thread > 0) {
      next_intended_ = phase->start;
      interval_ = std::chrono::nanoseconds(static_cast<int64_t>(1e9 / phase->rate_per_thread));
      OnTick();
    } else {
      for (auto& c : connections_) {
        while (c->HasFreeSlot() && StartOp(*c, Nanos(Clock::now()))) {
        }
        c->Flush();
      }
    }
    MaybeFinish();
    io_.run();
    guard.cancel();
    timer_.cancel();
    io_.poll();  // let the cancelled handlers run
  }

  // Called by a connection when an operation ends (latency from `start_ns`).
  void OpDone(Connection& c, uint32_t slot, uint32_t messages) {
    const int64_t now = Nanos(Clock::now());
    if (messages > 0) CountDone(c.slots()[slot], messages, now);
    c.ReleaseSlot(slot);
    if (!backlog_.empty() && !stopping_) {
      if (StartOp(c, backlog_.front())) backlog_.pop_front();
    } else if (phase_->rate_per_thread <= 0) {
      StartOp(c, now);
    }
    MaybeFinish();
  }

  // The worker workload, after the reply to a slot's dequeue or complete-and-next, which
  // completed `completed` messages (leases the slot held) and leased what the slot now holds:
  // the next complete-and-next, completing up to --batch of them and asking for as many as
  // keep the slot at --next-max. When the run is over (time, budget) the slot completes what
  // it holds with a plain complete, as a worker that stops does, and the operation ends there.
  void WorkerStep(Connection& c, uint32_t slot, uint32_t completed, bool failed) {
    auto& s = c.slots()[slot];
    const int64_t now = Nanos(Clock::now());
    if (completed > 0) CountDone(s, completed, now);
    if (failed) {
      s.leased = 0;  // what a failed reply leased is left to its lease
      OpDone(c, slot, 0);
      return;
    }
    if (s.leased == 0) {  // the next came back empty
      Empty();
      OpDone(c, slot, 0);
      return;
    }
    const auto held = static_cast<uint32_t>(s.leased);
    const uint32_t complete = std::min(phase_->batch, held);
    const uint32_t kept = held - complete;
    const uint32_t want = phase_->next_max > kept ? phase_->next_max - kept : 0;
    uint32_t n = 0;
    if (!stopping_ && Clock::now() < phase_->end && want > 0) {
      n = phase_->Claim(c.lane(), want);
      if (n == 0 && AllLanesSpent()) stopping_ = true;
    }
    s.start_ns = now;
    CountRequest();
    if (n == 0) {  // the last request of this slot: everything it holds, no next
      s.stage = Connection::Slot::Stage::kComplete;
      c.protocol().Complete(slot, c.tenant(), std::span<const Lease>(s.leases.data(), s.leased),
                            &c.out());
      return;
    }
    s.stage = Connection::Slot::Stage::kCompleteAndNext;
    s.completing = complete;
    c.protocol().CompleteAndNext(slot, phase_->tenants ? c.tenant() : std::string_view(),
                                 std::span<const Lease>(s.leases.data(), complete), n, &c.out());
    // The kept leases move to the front; the reply's new ones are appended after them.
    std::rotate(s.leases.begin(), s.leases.begin() + complete, s.leases.begin() + held);
    s.leased = kept;
  }

  void Empty() {
    ++counters_.empty;
    // The queue ran dry (prefill used up): stop rather than spin on empty dequeues.
    if (++empty_streak_ > 1000) stopping_ = true;
  }

  void Error(std::string_view what) {
    ++counters_.errors;
    if (counters_.first_error.empty()) counters_.first_error = std::string(what);
  }

  void CountRequest() { ++counters_.requests; }

  // Sends the next request of the operation in `slot` (after its dequeue: the complete).
  void Continue(Connection& c, uint32_t slot) {
    auto& s = c.slots()[slot];
    if (s.leased == 0) {
      Empty();
      OpDone(c, slot, 0);
      return;
    }
    s.stage = Connection::Slot::Stage::kComplete;
    c.protocol().Complete(slot, c.tenant(), std::span<const Lease>(s.leases.data(), s.leased),
                          &c.out());
    CountRequest();
  }

  // A measured request's end: its messages and its latency (from `s.start_ns`).
  void CountDone(const Connection::Slot& s, uint32_t messages, int64_t now) {
    counters_.messages += messages;
    counters_.last_done_ns = now;
    if (phase_->measured) counters_.latency.Record(static_cast<uint64_t>(now - s.start_ns));
    empty_streak_ = 0;
  }

  // Sends one control request (prepare, setup, teardown) on `c` and runs until its reply.
  bool Control(Connection& c, ControlStep step, std::span<const std::string> tenants) {
    io_.restart();
    c.ResizeSlots(1);
    if (!c.HasFreeSlot() || c.broken()) return false;  // a request of a timed-out phase is left
    const uint32_t slot = c.TakeSlot();
    c.slots()[slot].stage = Connection::Slot::Stage::kControl;
    const size_t before = c.out().size();
    switch (step) {
      case ControlStep::kPrepare:
        c.protocol().Prepare(slot, &c.out());
        break;
      case ControlStep::kSetup:
        c.protocol().Setup(slot, c.tenant(), &c.out());
        break;
      case ControlStep::kTeardown:
        c.protocol().Teardown(slot, tenants, &c.out());
        break;
    }
    if (c.out().size() == before) {  // nothing to say
      c.ReleaseSlot(slot);
      return true;
    }
    control_done_ = false;
    c.Flush();
    const auto deadline = Clock::now() + Seconds(config_.phase_timeout_s);
    while (!control_done_ && !c.broken() && Clock::now() < deadline) {
      io_.run_one_for(std::chrono::milliseconds(100));
    }
    return control_done_ && counters_.errors == 0;
  }
  void ControlDone() { control_done_ = true; }

  void Stop() {
    stopping_ = true;
    MaybeFinish();
  }

 private:
  // The open loop's schedule is its intended send times in [start, end), however late the
  // timer fires: an operation whose time has come waits for a free slot (its wait counts as
  // latency) and is started even after `end`, so the count does not depend on the machine.
  void OnTick() {
    const auto now = Clock::now();
    while (!stopping_ && !schedule_over_ && next_intended_ <= now) {
      if (next_intended_ >= phase_->end || AllLanesSpent()) {
        schedule_over_ = true;
        break;
      }
      const int64_t intended = Nanos(next_intended_);
      next_intended_ += interval_;
      Connection* c = NextFreeConnection();
      if (c == nullptr || !StartOp(*c, intended)) {
        backlog_.push_back(intended);  // every slot busy: it waits, and the wait counts
      }
    }
    if (next_intended_ >= phase_->end) schedule_over_ = true;
    for (auto& conn : connections_) conn->Flush();
    MaybeFinish();
    if (stopping_ || schedule_over_) return;
    timer_.expires_at(next_intended_);
    timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) OnTick();
    });
  }

  Connection* NextFreeConnection() {
    for (size_t i = 0; i < connections_.size(); ++i) {
      Connection* c = connections_[(round_robin_ + i) % connections_.size()].get();
      if (c->HasFreeSlot() && !c->broken() && !phase_->Spent(c->lane())) {
        round_robin_ = (round_robin_ + i + 1) % connections_.size();
        return c;
      }
    }
    return nullptr;
  }

  bool AllLanesSpent() const {
    for (uint32_t i = 0; i < phase_->lane_count; ++i) {
      if (!phase_->Spent(i)) return false;
    }
    return true;
  }

  // Starts one operation on `c` (which has a free slot); false when the phase is over for `c`
  // (its lane's budget is spent: other connections may go on) or for this thread.
  bool StartOp(Connection& c, int64_t start_ns) {
    if (stopping_ || c.broken()) return false;
    if (phase_->rate_per_thread <= 0 && Clock::now() >= phase_->end) {
      stopping_ = true;
      return false;
    }
    const bool worker = phase_->workload == Workload::kWorker;
    const uint32_t n = phase_->Claim(c.lane(), worker ? phase_->next_max : phase_->batch);
    if (n == 0) {
      if (AllLanesSpent()) stopping_ = true;
      return false;
    }
    const uint32_t slot = c.TakeSlot();
    auto& s = c.slots()[slot];
    s.start_ns = start_ns;
    bool enqueue = phase_->workload == Workload::kEnqueue;
    if (phase_->workload == Workload::kMixed) enqueue = (mixed_flip_ ^= true);
    if (enqueue) {
      s.stage = Connection::Slot::Stage::kEnqueue;
      s.messages = n;
      BuildMessages(c, n);
      c.protocol().Enqueue(slot, messages_, &c.out());
    } else {
      s.stage = Connection::Slot::Stage::kDequeue;
      s.leased = 0;
      s.messages = 0;
      c.protocol().Dequeue(slot, n, phase_->tenants ? c.tenant() : std::string_view(), &c.out());
    }
    CountRequest();
    if (phase_->rate_per_thread <= 0) c.Flush();
    return true;
  }

  void BuildMessages(Connection& c, uint32_t n) {
    messages_.clear();
    ids_.clear();
    const uint64_t first = phase_->enqueue_sequence.fetch_add(n, std::memory_order_relaxed);
    // A connection enqueues into its own tenant (the one it dequeues from), so a request is one
    // Redis ZADD or needs no beanstalkd tube switch, and each tenant gets its lane's share.
    if (phase_->tenants) request_tenant_ = c.tenant();
    for (uint32_t i = 0; i < n; ++i) ids_.push_back(fmt::format("m{}-{}", c.index(), first + i));
    values_.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      BenchMessage m;
      m.id = ids_[i];
      m.priority = static_cast<int64_t>(first + i);
      m.payload = payload_;
      if (phase_->tenants) m.tenant = request_tenant_;
      if (config_.workload == Workload::kExclusive) {
        values_[i] = fmt::format("v{}", (first + i) % config_.keys);
        m.exclusive = values_[i];
      }
      messages_.push_back(m);
    }
  }

  // Stops this thread's io_context once it starts nothing more and nothing is in flight.
  void MaybeFinish() {
    if (!stopping_) {
      if (phase_->rate_per_thread > 0) {
        // The schedule goes on, or operations whose time has come wait for a slot.
        if (!schedule_over_ || (!backlog_.empty() && !AllLanesSpent())) return;
      } else {
        for (auto& c : connections_) {  // closed loop: all idle means nothing could start
          if (c->InFlight() > 0) return;
        }
      }
      stopping_ = true;
    }
    for (auto& c : connections_) {
      if (c->InFlight() > 0 && !c->broken()) return;
    }
    io_.stop();
  }

  const Config& config_;
  asio::io_context io_{1};
  std::vector<std::unique_ptr<Connection>> connections_;
  PhaseShared* phase_ = nullptr;
  Counters counters_;
  Acked acked_;
  bool stopping_ = false;
  bool schedule_over_ = false;  // open loop: every intended send time before `end` has come
  bool mixed_flip_ = false;
  uint64_t empty_streak_ = 0;
  std::deque<int64_t> backlog_;
  asio::steady_timer timer_{io_};
  Clock::time_point next_intended_;
  Clock::duration interval_{};
  size_t round_robin_ = 0;
  std::string payload_;
  std::vector<BenchMessage> messages_;
  std::vector<std::string> ids_, values_;
  std::string request_tenant_;
  bool control_done_ = false;
};

void Connection::Leased(uint32_t slot, std::string_view id, uint64_t token) {
  ++worker_->acked().leased;
  auto& s = slots_[slot];
  if (s.leases.size() <= s.leased) s.leases.emplace_back();
  s.leases[s.leased].id.assign(id);
  s.leases[s.leased].token = token;
  ++s.leased;
}

void Connection::Done(uint32_t slot, std::string_view error) {
  if (slot >= slots_.size() || slots_[slot].stage == Slot::Stage::kFree) {
    Break("a reply for no request in flight");
    return;
  }
  auto& s = slots_[slot];
  if (!error.empty()) worker_->Error(error);
  switch (s.stage) {
    case Slot::Stage::kControl:
      ReleaseSlot(slot);
      worker_->ControlDone();
      return;
    case Slot::Stage::kDequeue:
      if (worker_->workload() == Workload::kWorker) {
        worker_->WorkerStep(*this, slot, 0, !error.empty());
        return;
      }
      if (!error.empty()) {
        worker_->OpDone(*this, slot, 0);
        return;
      }
      worker_->Continue(*this, slot);
      return;
    case Slot::Stage::kCompleteAndNext:
      if (error.empty()) worker_->acked().completed += s.completing;
      worker_->WorkerStep(*this, slot, error.empty() ? s.completing : 0, !error.empty());
      return;
    case Slot::Stage::kComplete:
      if (error.empty()) worker_->acked().completed += s.leased;
      worker_->OpDone(*this, slot, error.empty() ? static_cast<uint32_t>(s.leased) : 0);
      return;
    case Slot::Stage::kEnqueue:
      if (error.empty()) worker_->acked().enqueued += s.messages;
      worker_->OpDone(*this, slot, error.empty() ? s.messages : 0);
      return;
    case Slot::Stage::kFree:
      return;
  }
}

void Connection::OnRead(boost::system::error_code ec, size_t n) {
  if (ec) {
    if (ec != asio::error::operation_aborted) Break("read: " + ec.message());
    return;
  }
  in_len_ += n;
  const int64_t used = proto_->Consume(std::string_view(in_.data(), in_len_), this, &parse_error_);
  if (used < 0) {
    Break(parse_error_);
    return;
  }
  in_len_ -= static_cast<size_t>(used);
  if (in_len_ > 0 && used > 0) std::memmove(in_.data(), in_.data() + used, in_len_);
  if (in_len_ == in_.size()) in_.resize(in_.size() * 2);
  Flush();
  StartReading();
}

void Connection::Break(std::string why) {
  if (broken_) return;
  broken_ = true;
  worker_->Error(why);
  Close();
  worker_->Stop();
}

// ---- Setup ----------------------------------------------------------------------------------

bool ParseTarget(const std::string& text, Config* c) {
  const size_t scheme_end = text.find("://");
  if (scheme_end == std::string::npos) return false;
  const std::string scheme = text.substr(0, scheme_end);
  std::string rest = text.substr(scheme_end + 3);
  if (scheme == "sundial") {
    c->target = Target::kSundial;
    c->port = 7400;
  } else if (scheme == "redis") {
    c->target = Target::kRedis;
    c->port = 6379;
  } else if (scheme == "http") {
    c->target = Target::kHttp;
    c->port = 7401;
  } else if (scheme == "beanstalk") {
    c->target = Target::kBeanstalk;
    c->port = 11300;
  } else {
    return false;
  }
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  std::string host = rest, port;
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:PORT
    const size_t close = rest.find(']');
    if (close == std::string::npos) return false;
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return false;
      port = rest.substr(close + 2);
      if (port.empty()) return false;
    }
  } else if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (port.empty()) return false;
  }
  if (!port.empty()) {
    char* end = nullptr;
    const unsigned long p = std::strtoul(port.c_str(), &end, 10);
    if (*end != '\0' || p == 0 || p > 65535) return false;
    c->port = static_cast<uint16_t>(p);
  }
  if (host.empty()) return false;
  c->host = host;
  c->target_text = text;
  return true;
}

Counters RunPhase(std::vector<std::unique_ptr<Worker>>& workers, PhaseShared* phase) {
  std::vector<std::thread> threads;
  for (size_t i = 1; i < workers.size(); ++i) {
    threads.emplace_back([&, i] { workers[i]->RunPhase(phase); });
  }
  workers[0]->RunPhase(phase);
  for (auto& t : threads) t.join();
  Counters t;
  for (auto& w : workers) t.Merge(w->counters());
  return t;
}

std::string JsonEscape(std::string_view s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(static_cast<unsigned char>(ch)));
    } else {
      out += ch;
    }
  }
  return out;
}

int Run(Config& config) {
  const bool dequeues = config.workload != Workload::kEnqueue;
  ProtocolOptions po;
  po.queue = config.queue;
  po.relaxed = config.relaxed;
  po.lease_ms = config.lease_ms;
  po.redis_wait = config.redis_wait;
  po.exclusive = config.workload == Workload::kExclusive;
  po.key_rate_per_s = config.key_rate_per_s;
  po.key_burst = config.key_burst;
  // A key out of tokens leaves the dequeue empty until its refill: wait for it in the server
  // (woken by the refill) rather than spin; short, so the run ends soon after --duration.
  po.dequeue_wait_ms = config.key_rate_per_s > 0 ? 100 : 0;

  // Every tenant in use has a worker: a tenant no connection dequeues from would only hold
  // prefilled messages that no one can take.
  const uint32_t tenants = std::min(config.tenants, config.connections);
  const uint32_t lanes = config.workload == Workload::kFilter ? tenants : 1;

  std::shared_ptr<asio::ssl::context> tls_context;
  if (config.tls) {
    auto made = client::tls::MakeContext(config.ca_file);
    if (!made.ok()) {
      fmt::print(stderr, "sundial-bench: {}\n", made.error().message);
      return 2;
    }
    tls_context = *made;
  }

  // Connect.
  const uint32_t nthreads = std::max<uint32_t>(1, std::min(config.threads, config.connections));
  std::vector<std::unique_ptr<Worker>> workers;
  for (uint32_t i = 0; i < nthreads; ++i) workers.push_back(std::make_unique<Worker>(config));
  std::vector<Connection*> all;
  for (uint32_t i = 0; i < config.connections; ++i) {
    Worker& w = *workers[i % nthreads];
    auto c = std::make_unique<Connection>(&w, i, w.io(), MakeProtocol(config.target, po));
    if (config.workload == Workload::kFilter) c->set_tenant(TenantName(i % tenants), i % tenants);
    boost::system::error_code ec;
    tcp::resolver resolver(w.io());
    const auto endpoints = resolver.resolve(config.host, std::to_string(config.port), ec);
    if (!ec) {
      // Bounded: a filtered port would otherwise hold a blocking connect for minutes.
      ec = asio::error::timed_out;
      bool connected = false;
      asio::async_connect(c->socket(), endpoints,
                          [&](boost::system::error_code e, const tcp::endpoint&) {
                            ec = e;
                            connected = true;
                          });
      w.io().restart();
      const auto give_up = Clock::now() + std::chrono::seconds(10);
      while (!connected && Clock::now() < give_up) w.io().run_one_until(give_up);
      if (ec == asio::error::timed_out) c->Close();
    }
    if (ec) {
      fmt::print(stderr, "sundial-bench: cannot connect to {}: {}\n", config.target_text,
                 ec.message());
      return 3;
    }
    c->socket().set_option(tcp::no_delay(true));
    if (tls_context) {
      const std::string failed =
          c->StartTls(*tls_context, config.host, w.io(), Clock::now() + std::chrono::seconds(10));
      if (!failed.empty()) {
        fmt::print(stderr, "sundial-bench: {}: {}\n", config.target_text, failed);
        return 3;
      }
    }
    c->StartReading();
    all.push_back(c.get());
    w.connections().push_back(std::move(c));
  }
  auto control = [&](Connection* c, ControlStep step, std::span<const std::string> tenants) {
    Worker& w = *workers[c->index() % nthreads];
    if (!w.Control(*c, step, tenants)) {
      static constexpr const char* kNames[] = {"prepare", "setup", "teardown"};
      fmt::print(stderr, "sundial-bench: {} failed: {}\n", kNames[static_cast<int>(step)],
                 w.counters().first_error.empty() ? "no reply in time" : w.counters().first_error);
      return false;
    }
    return true;
  };
  if (!control(all[0], ControlStep::kPrepare, {})) return 1;
  for (Connection* c : all) {
    if (!control(c, ControlStep::kSetup, {})) return 1;
  }

  // Prefill (untimed).
  const auto now = Clock::now();
  if (dequeues && config.prefill > 0) {
    PhaseShared fill;
    fill.workload = Workload::kEnqueue;
    fill.tenants = config.workload == Workload::kFilter;
    fill.batch = std::min<uint64_t>(100, config.prefill);
    fill.pipeline = 4;
    fill.SetLimit(config.prefill, lanes);
    fill.enqueue_sequence = config.sequence_start;
    fill.start = now;
    // At least 20,000 messages/s, whatever the server (beanstalkd -f 0 does ~6,000 puts/s).
    fill.end = now + Seconds(std::max(config.phase_timeout_s,
                                      static_cast<double>(config.prefill) / 20000.0));
    fill.hard_end = fill.end + Seconds(10);
    const Counters t = RunPhase(workers, &fill);
    if (t.errors > 0 || t.messages < config.prefill) {
      fmt::print(stderr, "sundial-bench: prefill enqueued {} of {} messages: {}\n", t.messages,
                 config.prefill, t.first_error.empty() ? "timed out" : t.first_error);
      return 1;
    }
  }

  // The measured run.
  PhaseShared run;
  run.measured = true;
  run.workload = config.workload == Workload::kEnqueue || config.workload == Workload::kMixed ||
                         config.workload == Workload::kWorker
                     ? config.workload
                     : Workload::kDequeueComplete;
  run.tenants = config.workload == Workload::kFilter;
  run.batch = config.batch;
  run.next_max = config.next_max;
  run.pipeline = config.pipeline;
  run.rate_per_thread = config.rate > 0 ? config.rate / nthreads : 0;
  run.SetLimit(config.messages, lanes);
  run.start = Clock::now();
  run.end = run.start + Seconds(config.duration_s);
  run.hard_end = run.end + Seconds(std::min(30.0, config.phase_timeout_s));
  run.enqueue_sequence = config.sequence_start + config.prefill;
  const double cpu_before = config.cpu_pid > 0 ? ProcessCpuSeconds(config.cpu_pid) : -1;
  const Counters t = RunPhase(workers, &run);
  const double cpu_after = config.cpu_pid > 0 ? ProcessCpuSeconds(config.cpu_pid) : -1;
  const double server_cpu_s = cpu_before >= 0 && cpu_after >= 0 ? cpu_after - cpu_before : -1;
  const double seconds = t.last_done_ns > 0
                             ? static_cast<double>(t.last_done_ns - Nanos(run.start)) / 1e9
                             : std::chrono::duration<double>(Clock::now() - run.start).count();

  // Teardown: the queue / keys go.
  std::vector<std::string> tenant_names;
  if (config.workload == Workload::kFilter) {
    for (uint32_t i = 0; i < lanes; ++i) tenant_names.push_back(TenantName(i));
  }
  bool torn = true;
  if (!all[0]->broken() && !config.keep) {
    torn = control(all[0], ControlStep::kTeardown, tenant_names);
  }
  for (Connection* c : all) c->Close();

  Acked acked;
  for (auto& w : workers) acked.Merge(w->acked());
  // CPU per operation (a request or a worker's dequeue+complete), as ops counts them.
  const double ops_in_requests =
      static_cast<double>(t.messages) / std::max<uint32_t>(1, config.batch);
  const double server_cpu_us_per_op =
      server_cpu_s >= 0 && ops_in_requests > 0 ? server_cpu_s * 1e6 / ops_in_requests : -1;
  const double ops_per_sec = seconds > 0 ? static_cast<double>(t.messages) / seconds : 0;
  const double requests_per_sec = seconds > 0 ? static_cast<double>(t.requests) / seconds : 0;
  auto us = [&](double p) { return static_cast<double>(t.latency.Percentile(p)) / 1e3; };
  // The exclusive workload spreads its messages evenly over its keys.
  const double per_key = config.workload == Workload::kExclusive ? ops_per_sec / config.keys : 0;
  if (config.json) {
    fmt::print(
        "{{\"target\":\"{}\",\"workload\":\"{}\",\"connections\":{},\"pipeline\":{},"
        "\"batch\":{},\"next_max\":{},\"rate\":{},\"ops\":{},\"seconds\":{:.3f},\"ops_per_sec\":{:."
        "1f},"
        "\"requests_per_sec\":{:.1f},\"p50_us\":{:.1f},\"p90_us\":{:.1f},\"p99_us\":{:.1f},"
        "\"p999_us\":{:.1f},\"max_us\":{:.1f},"
        "\"errors\":{},\"empty\":{},\"first_error\":\"{}\","
        "\"server_cpu_s\":{:.3f},\"server_cpu_us_per_op\":{:.2f},\"per_key_ops_per_sec\":{:.2f},"
        "\"acked\":{{\"enqueued\":{},\"leased\":{},\"completed\":{}}}}}\n",
        JsonEscape(config.target_text), config.workload_text, config.connections, config.pipeline,
        config.batch, config.next_max, config.rate, t.messages, seconds, ops_per_sec,
        requests_per_sec, us(0.5), us(0.9), us(0.99), us(0.999),
        static_cast<double>(t.latency.Max()) / 1e3, t.errors, t.empty, JsonEscape(t.first_error),
        server_cpu_s, server_cpu_us_per_op, per_key, acked.enqueued, acked.leased, acked.completed);
  } else {
    fmt::print(
        "target       {}\nworkload     {} (batch {}{}, payload {} B)\n", config.target_text,
        config.workload_text, config.batch,
        config.workload == Workload::kWorker ? fmt::format(", next max {}", config.next_max) : "",
        config.payload_bytes);
    fmt::print("connections  {} on {} threads, pipeline {}{}\n", config.connections, nthreads,
               config.pipeline,
               config.rate > 0 ? fmt::format(", open loop at {:.0f} ops/s", config.rate) : "");
    fmt::print("messages     {} in {:.3f} s: {:.0f} msg/s, {:.0f} requests/s\n", t.messages,
               seconds, ops_per_sec, requests_per_sec);
    fmt::print("latency us   p50 {:.1f}  p90 {:.1f}  p99 {:.1f}  p99.9 {:.1f}  max {:.1f}\n",
               us(0.5), us(0.9), us(0.99), us(0.999), static_cast<double>(t.latency.Max()) / 1e3);
    fmt::print("errors       {}{}\nempty        {}\n", t.errors,
               t.first_error.empty() ? "" : " (first: " + t.first_error + ")", t.empty);
    if (config.key_rate_per_s > 0) {
      fmt::print("per key      {:.2f} msg/s over {} keys: {:.4f} of key_rate_per_s {}\n", per_key,
                 config.keys, per_key / config.key_rate_per_s, config.key_rate_per_s);
    }
    if (server_cpu_s >= 0) {
      fmt::print("server CPU   {:.3f} s, {:.1f} us per operation\n", server_cpu_s,
                 server_cpu_us_per_op);
    }
    fmt::print("acknowledged {} enqueued, {} leased, {} completed (every phase)\n", acked.enqueued,
               acked.leased, acked.completed);
  }
  return (t.errors > 0 || !torn) ? 1 : 0;
}

}  // namespace
}  // namespace sundial::bench

int main(int argc, char** argv) {
  using namespace sundial::bench;
  Config config;
  CLI::App app{
      "sundial-bench: load generator for Sundial, Redis and beanstalkd (docs/BENCHMARKS.md)"};
  app.add_option(
         "--target", config.target_text,
         "sundial://HOST:PORT, http://HOST:PORT (Sundial's HTTP JSON API), redis://HOST:PORT or "
         "beanstalk://HOST:PORT")
      ->capture_default_str();
  CLI::Option* addr_option = app.add_option(
      "--addr", config.addr,
      "Sundial: a cluster's nodes, comma-separated (a:7400,b:7400,c:7400): the run goes to "
      "the primary found with the Cluster request (not followed during the run)");
  app.add_option("--workload", config.workload_text,
                 "enqueue | dequeue-complete | mixed | filter | exclusive | worker")
      ->capture_default_str();
  app.add_option("--connections,-c", config.connections, "connections")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  app.add_option("--threads", config.threads, "io threads")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  app.add_option("--pipeline", config.pipeline, "operations in flight per connection")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--batch", config.batch, "messages per request (enqueue, dequeue, complete)")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  app.add_option("--next-max", config.next_max,
                 "worker: leases a slot holds at most; each request completes up to --batch of "
                 "them and asks for the rest (default: --batch)")
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--payload-bytes", config.payload_bytes, "payload size")
      ->check(CLI::Range(0u, 1u << 20))
      ->capture_default_str();
  app.add_option("--messages", config.messages, "stop after this many messages (0: no limit)")
      ->capture_default_str();
  app.add_option("--duration", config.duration_s, "stop after this many seconds")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_option("--rate", config.rate, "open loop: operations per second (0: closed loop)")
      ->check(CLI::Range(0.0, 1e8))
      ->capture_default_str();
  CLI::Option* prefill_option =
      app.add_option("--prefill", config.prefill,
                     "messages enqueued (untimed) before a dequeue-type workload (default: "
                     "--messages, else 100000; 0: none)");
  app.add_option("--sequence-start", config.sequence_start,
                 "first message sequence number (ids m<connection>-<n>, priority n)")
      ->capture_default_str();
  app.add_option("--tenants", config.tenants,
                 "filter: tenants (connection i serves tenant i mod N; at most one per connection)")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  app.add_option("--keys", config.keys, "exclusive: distinct exclusivity values")
      ->check(CLI::Range(1u, 100000000u))
      ->capture_default_str();
  app.add_option("--key-rate-per-s", config.key_rate_per_s,
                 "exclusive, Sundial: each key's token bucket (dequeues per second); dequeues "
                 "then long-poll 100 ms, and the run reports the rate per key");
  app.add_option("--key-burst", config.key_burst, "with --key-rate-per-s: each key's bucket size")
      ->check(CLI::Range(1u, 1000000u))
      ->capture_default_str();
  app.add_option("--lease-ms", config.lease_ms, "lease of a dequeue")
      ->check(CLI::Range(1000, 3600000))
      ->capture_default_str();
  app.add_option("--redis-wait", config.redis_wait,
                 "Redis: follow every write with WAIT N 0 (N replicas acknowledged it)")
      ->check(CLI::Range(0u, 16u));
  app.add_flag("--relaxed", config.relaxed, "Sundial: durability relaxed on every request");
  app.add_flag("--tls", config.tls, "Sundial: TLS (the server runs with --tls-cert)");
  app.add_option(
      "--ca-file", config.ca_file,
      "Sundial: PEM CAs to verify the server with (default: the system's); implies --tls");
  app.add_option("--queue", config.queue, "queue / key / tube name (default: a fresh one)");
  app.add_flag("--json", config.json, "print one JSON object");
  app.add_flag("--keep", config.keep, "leave the queue and its messages (no teardown)");
  app.add_option("--cpu-pid", config.cpu_pid,
                 "the server's PID: report its CPU time (utime+stime) over the measured run")
      ->check(CLI::Range(1, 1 << 30));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!ParseTarget(config.target_text, &config)) {
    fmt::print(
        stderr,
        "sundial-bench: --target '{}': expected sundial://, http://, redis:// or beanstalk:// "
        "followed by HOST[:PORT]\n",
        config.target_text);
    return 2;
  }
  if (!config.ca_file.empty()) config.tls = true;
  if (addr_option->count() > 0) {
    if (config.target != Target::kSundial) {
      fmt::print(stderr, "sundial-bench: --addr: for Sundial only (not with --target {})\n",
                 config.target_text);
      return 2;
    }
    auto addresses = sundial::client::ParseAddressList(config.addr);
    if (!addresses.ok()) {
      fmt::print(stderr, "sundial-bench: --addr: {}\n", addresses.error().message);
      return 2;
    }
    // The primary, once: a client given every node finds it (Health goes to the primary).
    sundial::client::ConnectOptions options;
    options.tls = config.tls;
    options.ca_file = config.ca_file;
    auto found = sundial::client::Client::Connect(*addresses, options);
    sundial::client::Result<sundial::client::Reply> health =
        found.ok() ? (*found)->Health()
                   : sundial::client::Result<sundial::client::Reply>(found.error());
    if (!health.ok()) {
      fmt::print(stderr, "sundial-bench: --addr {}: no primary: {}\n", config.addr,
                 health.error().ToString());
      return 3;
    }
    config.host = (*found)->address().host;
    config.port = (*found)->address().port;
    config.target_text = "sundial://" + (*found)->address().ToString();
  }
  if (config.tls && config.target != Target::kSundial) {
    fmt::print(stderr, "sundial-bench: --tls: for sundial:// targets only\n");
    return 2;
  }
  const std::pair<const char*, Workload> workloads[] = {
      {"enqueue", Workload::kEnqueue},     {"dequeue-complete", Workload::kDequeueComplete},
      {"mixed", Workload::kMixed},         {"filter", Workload::kFilter},
      {"exclusive", Workload::kExclusive}, {"worker", Workload::kWorker}};
  bool known = false;
  for (const auto& [name, w] : workloads) {
    if (config.workload_text == name) {
      config.workload = w;
      known = true;
    }
  }
  if (!known) {
    fmt::print(stderr,
               "sundial-bench: --workload '{}': expected enqueue, dequeue-complete, mixed, "
               "filter, exclusive or worker\n",
               config.workload_text);
    return 2;
  }
  if (config.workload == Workload::kExclusive && config.target != Target::kSundial &&
      config.target != Target::kHttp) {
    fmt::print(stderr,
               "sundial-bench: the exclusive workload needs Sundial's exclusive queues; "
               "Redis and beanstalkd have no equivalent\n");
    return 2;
  }
  if (config.key_rate_per_s > 0 &&
      (config.workload != Workload::kExclusive || config.target != Target::kSundial)) {
    fmt::print(stderr,
               "sundial-bench: --key-rate-per-s needs --workload exclusive against sundial://\n");
    return 2;
  }
  if (config.workload == Workload::kWorker && config.rate > 0) {
    fmt::print(stderr,
               "sundial-bench: --rate: the worker workload is a closed loop (each reply sends "
               "the next request)\n");
    return 2;
  }
  if (config.next_max == 0) config.next_max = config.batch;
  if (config.relaxed && config.target != Target::kSundial && config.target != Target::kHttp) {
    fmt::print(stderr,
               "sundial-bench: --relaxed is a Sundial request flag; set the peer's fsync "
               "policy instead\n");
    return 2;
  }
  // An explicit --prefill 0 is none (a run on a kept queue that already holds messages).
  if (prefill_option->count() == 0 && config.workload != Workload::kEnqueue) {
    config.prefill = config.messages == 0 ? 100000 : config.messages;
  }
  if (config.queue.empty()) {
    config.queue = fmt::format("bench-{}-{}", getpid(),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                       .count() %
                                   100000000);
  }
  return Run(config);
}
