// What the server's transports share (server/*.cc only: this header includes Boost.Asio, so
// nothing outside server/ includes it — engine, WAL and test code compile without Asio).
//
// Threads (docs/server.md has the picture): each Loop is an io thread with its own io_context
// that owns the connections assigned to it for life; a request is read, run (engine call,
// append to the log) and answered on that thread. A durable reply is held by its loop until the
// log says its LSN is durable: at the end of the loop's round the loop commits, which writes
// and syncs the group itself when no other thread is doing so (leader), or registers the loop
// to be woken once when that group is done (follower). Other threads reach a loop only by
// posting to it: the log's wake-up (once per group), long-poll results served elsewhere,
// subscription events (batched: one post per round), closing at shutdown.
//
// The Core holds what the loops share: the operation table (dispatch.h), long polls,
// subscriptions and the timer thread (Engine::Advance when the next timer is due, the stats tick
// every second), each a class of its own below.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/mutex.h"
#include "server/dispatch.h"
#include "server/live_feed.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/tls.h"
#include "wal/group_commit_log.h"

namespace sundial::server {

namespace asio = boost::asio;
using SteadyClock = std::chrono::steady_clock;

class Core;
class Loop;
class Session;

// A FIFO of T over a vector whose slots are kept when popped, so what a slot owns (a string's
// capacity) is reused: no allocation once it has grown to the largest backlog.
template <typename T>
class Ring {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return slots_[head_]; }
  T& back() { return slots_[(head_ + size_ - 1) & (slots_.size() - 1)]; }
  // The next slot at the back, holding whatever a previous use left in it.
  T& PushSlot() {
    if (size_ == slots_.size()) Grow();
    ++size_;
    return back();
  }
  void PopFront() {
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }

 private:
  void Grow() {
    std::vector<T> bigger(slots_.empty() ? 16 : slots_.size() * 2);
    for (size_t i = 0; i < size_; ++i)
      bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    slots_ = std::move(bigger);
    head_ = 0;
  }
  std::vector<T> slots_;  // a power of two in size
  size_t head_ = 0;
  size_t size_ = 0;
};

// The only way to answer a request. Made when a request is read (its connection's in-flight
// count goes up); consumed by Loop::Answer, which counts the metric once and ends the in-flight
// count once when the reply is queued. Dropped unanswered (its connection closed, or the server
// stops), it only ends the in-flight count.
class Completion {
 public:
  Completion() = default;
  Completion(std::shared_ptr<Session> session, uint64_t request_id, uint8_t op,
             SteadyClock::time_point start);
  Completion(Completion&& other) noexcept { *this = std::move(other); }
  Completion& operator=(Completion&& other) noexcept;
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;
  ~Completion() { Drop(); }

  Session* session() const { return session_.get(); }
  uint64_t request_id() const { return request_id_; }

 private:
  friend class Loop;
  void Drop();

  std::shared_ptr<Session> session_;
  uint64_t request_id_ = 0;
  uint8_t op_ = 0;
  SteadyClock::time_point start_;
};

// One io thread and what it owns. Everything not marked "any thread" runs on its thread.
class Loop final : public wal::GroupCommitLog::Committer {
 public:
  Loop(Core* core, size_t index);
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  asio::io_context& io() { return io_; }
  size_t index() const { return index_; }
  void Start();
  // Any thread: stops the io_context and joins the thread; then forgets the log.
  void Stop();

  flatbuffers::FlatBufferBuilder& builder() { return builder_; }
  // Answers `c` with `response` (copied): queued on its connection at once, or held until
  // every record below `wait_lsn` is durable (0: nothing to wait for).
  void Answer(Completion c, std::string_view response, Code code, uint64_t wait_lsn);
  // Records were appended on this thread: commit at the end of this round.
  void ScheduleRound();
  // Around the requests of one read: a round they schedule starts at EndRead, at once when the
  // loop serves one connection (no other read can join it), else after the reads already
  // queued. At once saves the loop a pass through the reactor (an epoll_wait that finds
  // nothing) per request: docs/server.md, "One connection".
  void BeginRead() { in_read_ = true; }
  void EndRead();
  // Answers every reply held for the log with UNAVAILABLE and `message` (their outcome is
  // unknown): the log failed, or this node stopped being the primary.
  void FailHeld(const std::string& message);
  // `s` has replies or events queued: it writes them at the end of this round.
  void MarkDirty(Session* s);

  // Any thread: runs `f` on this loop.
  template <typename F>
  void Post(F&& f) {
    asio::post(io_, std::forward<F>(f));
  }
  // Any thread: an event for `s` (a subscriber on this loop); events are delivered in batches,
  // one post per round whatever their number.
  void PostEvent(std::weak_ptr<Session> s, std::shared_ptr<const std::string> event);

  // The log (any thread, under its lock): what this loop waits for is durable.
  void Wake() override;

 private:
  // The end of a round: write immediate replies, commit what this thread appended and what
  // its held replies wait for, send the replies now durable, write them.
  void RunRound();
  void CompleteDurable();
  void FlushDirty();
  // Under a replica bound (--replication sync): a held reply that waited --sync-timeout-ms for
  // a standby is answered UNAVAILABLE; the timer looks again when the oldest one is due.
  void ExpireHeld();
  void ArmHeldTimer();
  void DeliverEvents();
  void Send(Completion& c, std::string_view response, Code code);
  // A request of `s` began: keeps the run of requests from one session.
  void CountRequestFrom(const Session* s);

  friend class Session;  // CountRequestFrom

  struct Held {
    uint64_t lsn = 0;
    Completion completion;
    std::string response;
    Code code = Code::kOk;
    SteadyClock::time_point since;
  };
  std::optional<asio::steady_timer> held_timer_;
  bool held_timer_armed_ = false;

  Core* const core_;
  wal::GroupCommitLog* const log_;
  const size_t index_;
  asio::io_context io_{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::thread thread_;
  flatbuffers::FlatBufferBuilder builder_{1024};
  Ring<Held> held_;        // in the order answered: LSN order, but for long-poll hand-overs
  uint64_t held_max_ = 0;  // the largest LSN held
  // The loop serves one connection (it may block in an fdatasync) once this many requests in a
  // row came from the same session: a single client, pipelined or not. Several clients
  // interleave their requests. Measured in docs/server.md.
  static constexpr int kAloneAfterRequests = 3;
  bool ServesOneConnection() const { return same_session_requests_ >= kAloneAfterRequests; }
  const Session* last_session_ = nullptr;  // compared only, never followed
  int same_session_requests_ = 0;
  bool round_scheduled_ = false;
  bool in_round_ = false;        // in RunRound
  bool in_read_ = false;         // between BeginRead and EndRead
  bool round_deferred_ = false;  // ScheduleRound ran in a read: EndRead starts the round
  std::vector<std::shared_ptr<Session>> dirty_;
  std::atomic<bool> wake_posted_{false};
  Mutex events_mu_;
  std::vector<std::pair<std::weak_ptr<Session>, std::shared_ptr<const std::string>>> events_
      GUARDED_BY(events_mu_);
  bool events_posted_ GUARDED_BY(events_mu_) = false;
  std::vector<std::pair<std::weak_ptr<Session>, std::shared_ptr<const std::string>>> delivering_;
};

// A client connection of any transport, as the core sees it: owned by one loop for life.
// Everything not marked "any thread" runs on that loop's thread.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `access`: Access::kReadOnly for a dashboard page under --dashboard read-only.
  Session(Loop* loop, Core* core, Transport transport, Access access = Access::kFull)
      : loop_(loop), core_(core), transport_(transport), access_(access) {}
  virtual ~Session() = default;

  Loop* loop() const { return loop_; }
  Transport transport() const { return transport_; }
  Access access() const { return access_; }
  bool closed() const { return closed_.load(std::memory_order_acquire); }         // any thread
  int64_t inflight() const { return inflight_.load(std::memory_order_acquire); }  // any thread

  // A finished ServerMessage to send (framed for the transport when written).
  virtual void QueueReply(std::string_view message) = 0;
  // A subscription event (shared by every subscriber). Sessions that cannot subscribe drop it.
  virtual void QueueEvent(std::shared_ptr<const std::string> /*event*/) {}
  // Starts writing what is queued, unless a write is in progress.
  virtual void Flush() = 0;
  // On its loop: a request of this connection is about to be held for a while (a long poll, a
  // Wait). A transport whose reads may not have seen a reset yet (server/drained_read.h) looks
  // now and closes, posted, so the waiter just filed is dropped, not served.
  virtual void CheckPeer() {}

  // Any thread: stop reading; close once every request in flight is answered and written.
  void CloseWhenDone() {
    loop_->Post([self = shared_from_this()] { self->DoCloseWhenDone(); });
  }
  // Any thread: close now.
  void Close() {
    loop_->Post([self = shared_from_this()] { self->DoClose(); });
  }

 protected:
  virtual void DoCloseWhenDone() = 0;
  virtual void DoClose() = 0;
  // A request was answered (its reply queued): a read paused at --max-inflight may resume.
  virtual void RequestEnded() {}

  Loop* const loop_;
  Core* const core_;
  std::atomic<bool> closed_{false};

 private:
  friend class Completion;
  friend class Loop;
  // A request began (+1; on the loop thread: its loop counts who sends) or ended (-1).
  void AddInflight(int64_t delta);
  const Transport transport_;
  const Access access_;
  std::atomic<int64_t> inflight_{0};
  bool dirty_ = false;  // in its loop's dirty list
};

// --write-timeout-ms for one connection, on its loop only (nginx's send_timeout): a write that
// takes nothing for the timeout means a client that does not read, and `drop` closes it. The
// session calls Arm() as each write starts (a no-op while armed: one timer wait per timeout
// period, not per write) and Progress() whenever a write takes bytes.
class StallGuard {
 public:
  StallGuard(asio::io_context& io, uint32_t timeout_ms) : timer_(io), limit_(timeout_ms) {}

  void Progress() { last_progress_ = SteadyClock::now(); }
  void Cancel() { timer_.cancel(); }

  // `still_writing()`: whether a write is in progress (else the guard disarms). Both callables
  // keep the session alive.
  template <class StillWriting, class Drop>
  void Arm(StillWriting still_writing, Drop drop) {
    if (armed_) return;
    armed_ = true;
    Progress();  // unarmed means no write was waiting: the clock starts with this one
    Wait(std::move(still_writing), std::move(drop));
  }

 private:
  template <class StillWriting, class Drop>
  void Wait(StillWriting still_writing, Drop drop) {
    timer_.expires_at(last_progress_ + limit_);
    timer_.async_wait([this, still_writing = std::move(still_writing),
                       drop = std::move(drop)](boost::system::error_code ec) mutable {
      if (ec || !still_writing()) {
        armed_ = false;
        return;
      }
      if (SteadyClock::now() - last_progress_ >= limit_) {
        armed_ = false;
        return drop();
      }
      Wait(std::move(still_writing), std::move(drop));
    });
  }

  asio::steady_timer timer_;
  const std::chrono::milliseconds limit_;
  SteadyClock::time_point last_progress_;
  bool armed_ = false;
};

// The connections that are open, for the drain at shutdown.
class ConnectionRegistry {
 public:
  void Add(const std::shared_ptr<Session>& s);
  void Remove(const Session* s);
  std::vector<std::shared_ptr<Session>> All() const;

 private:
  mutable Mutex mu_;
  std::unordered_map<const Session*, std::weak_ptr<Session>> all_ GUARDED_BY(mu_);
};

// Long-poll dequeues (docs/protocol.md, "Long polling"): FIFO per queue, woken by the effects that
// can make a message dequeueable. A wake-up schedules one drain of the queue, run on the loop of
// its first waiter: it dequeues for the waiters in order and hands each result to its waiter's
// loop.
class LongPolls {
 public:
  explicit LongPolls(Core* core) : core_(core) {}

  // Read before the first (empty) dequeue: a waiter registered after it looks again if an
  // effect came in between.
  uint64_t Generation(std::string_view queue) const;
  // On the session's loop: `frame` is the Dequeue that came back empty, or a Complete or Fail
  // whose `next` did (complete-and-next, docs/semantics.md): then `first` is its reply, sent
  // as it is (after `first_lsn` is durable) if nothing comes, and only its dequeue is run again.
  void Wait(Completion c, std::string_view frame, uint64_t generation,
            SteadyClock::time_point start, std::string_view first = {}, uint64_t first_lsn = 0);
  // Under a shard lock (any thread): counts the generation, schedules drains.
  void OnEffect(const Effect& e);
  void ExpireAll();  // shutdown: every waiter is answered empty
  void Forget(const Session* s);
  // After the loops stopped (their threads joined): drops every waiter, with its timer and its
  // session, while the loops' io_contexts still exist.
  void Clear();

 private:
  struct Waiter;
  struct QueueWaiters {
    std::deque<std::shared_ptr<Waiter>> waiters;
    bool drain_scheduled = false;
  };
  std::atomic<uint64_t>& GenerationOf(std::string_view queue) const;
  void ScheduleDrainLocked(const std::string& queue) REQUIRES(mu_);
  void Drain(Loop* loop, const std::string& queue);  // on `loop`
  void Expire(const std::shared_ptr<Waiter>& w);     // on the waiter's loop
  void Remove(const std::shared_ptr<Waiter>& w);

  Core* const core_;
  Mutex mu_;
  std::unordered_map<std::string, QueueWaiters> by_queue_ GUARDED_BY(mu_);
  std::atomic<int64_t> waiting_{0};
  mutable std::array<std::atomic<uint64_t>, 64> generations_{};
};

// Requests waiting for messages to be terminal (docs/protocol.md, "Wait"; `enqueue` with wait_ms;
// docs/server.md, "Waiting for results"). A waiter is filed under each (queue, id) it waits for;
// the effect that makes one of them terminal (or removes it, or its queue) posts one
// re-evaluation to the waiter's loop, which answers once every message is settled or wait_ms
// has run out. No polling: an effect costs one relaxed atomic load while nobody waits.
// Everything about a waiter after it is filed runs on its session's loop.
class ResultWaits {
 public:
  explicit ResultWaits(Core* core) : core_(core) {}

  // Read before the first answer: a waiter filed after it looks again if an effect on its
  // queue came in between.
  uint64_t Generation(std::string_view queue) const;
  // On the session's loop: `frame` is the request (Wait, or Enqueue with wait_ms) whose first
  // answer `first` was unfinished; `ids` the messages it waits for.
  void Wait(Completion c, std::string_view frame, std::string_view first, std::string queue,
            std::vector<std::string> ids, uint32_t wait_ms, uint64_t generation,
            SteadyClock::time_point start);
  // Under a shard lock (any thread).
  void OnEffect(const Effect& e);
  void ExpireAll();  // shutdown: every waiter is answered with what is terminal now
  void Forget(const Session* s);
  void Clear();  // after the loops stopped
  int64_t waiting() const { return waiting_.load(std::memory_order_relaxed); }

 private:
  struct Waiter;
  static std::string Key(std::string_view queue, std::string_view id);
  std::atomic<uint64_t>& GenerationOf(std::string_view queue) const;
  void Schedule(const std::shared_ptr<Waiter>& w, bool final);  // any thread
  void Evaluate(const std::shared_ptr<Waiter>& w, bool final);  // on the waiter's loop
  void Remove(const std::shared_ptr<Waiter>& w);

  Core* const core_;
  Mutex mu_;
  // "queue\0id" -> the waiters on that message.
  std::unordered_map<std::string, std::vector<std::shared_ptr<Waiter>>> by_message_ GUARDED_BY(mu_);
  std::atomic<int64_t> waiting_{0};
  mutable std::array<std::atomic<uint64_t>, 64> generations_{};
};

// Subscriptions (docs/protocol.md, "Subscriptions"; WebSocket only): per queue or "*", with a
// metadata filter and the dashboard's options (server/live_feed.h: the per-queue tick, a per-second
// sample, ids); one event per connection per change, however many of its subscriptions match.
class Subscriptions {
 public:
  explicit Subscriptions(Core* core) : core_(core) {}

  void Subscribe(const protocol::Request& request, Session* session, Reply& reply);
  void Unsubscribe(const protocol::Request& request, Session* session, Reply& reply);
  // Under a shard lock (any thread): builds the event once and posts it to each subscriber.
  void Publish(const Effect& e);
  // The stats tick (any thread): to every connection with a subscription, `with_queues` to
  // those of them that asked for queue_stats (when it is not null), `plain` to the others.
  void PublishTick(const std::shared_ptr<const std::string>& plain,
                   const std::shared_ptr<const std::string>& with_queues);
  void Forget(const Session* s);
  bool any() const { return count_.load(std::memory_order_relaxed) > 0; }
  // Whether some subscription asked for queue_stats (the tick then carries every queue).
  bool any_queue_stats() const { return queue_stats_count_.load(std::memory_order_relaxed) > 0; }

 private:
  struct Subscription {
    std::weak_ptr<Session> session;
    const Session* key;
    std::string queue;  // "*": every queue
    Metadata filter;
    SubscriptionOptions options;  // queue_stats, the per-second sample, ids
  };
  // Removes the subscriptions `remove` selects; returns how many.
  template <typename Pred>
  size_t EraseLocked(Pred remove) REQUIRES(mu_);

  Core* const core_;
  Mutex mu_;
  std::vector<Subscription> subs_ GUARDED_BY(mu_);  // sorted by key (connection)
  std::atomic<int64_t> count_{0};
  std::atomic<int64_t> queue_stats_count_{0};  // subscriptions with options.queue_stats()
};

// The timer thread: Engine::Advance when the earliest timer is due (never early, within a few
// ms), woken early by an effect whose due time is sooner than its sleep; the stats tick to
// subscribers every second. It commits what Advance appended.
class Timers {
 public:
  explicit Timers(Core* core) : core_(core) {}
  ~Timers() { Stop(); }
  void Start();
  void Stop();
  // Under a shard lock (any thread): an effect with a due time may wake the thread.
  void OnEffect(const Effect& e);
  // Any thread: look again now (a subscription began: the stats tick starts).
  void Notify();

 private:
  void Run();

  Core* const core_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool earlier_ GUARDED_BY(mu_) = false;  // a timer sooner than the sleep was added
  std::atomic<TimeMs> sleeping_until_{INT64_MAX};
  std::thread thread_;
};

class Core final : public EffectSink, public SessionOperations {
 public:
  Core(const Options& options, Engine* engine, wal::GroupCommitLog* log, Metrics* metrics);
  ~Core() override;

  // On `session`'s loop: `frame` is a verified Request buffer (8-byte aligned; copied if kept).
  void Submit(const std::shared_ptr<Session>& session, std::string_view frame);
  // On `session`'s loop, when it closes: its long-poll waiters and subscriptions go.
  void Forget(const Session* session);
  // /metrics: the server's series and the node's place in its cluster.
  std::string RenderMetrics() const;
  // What a node of a cluster adds to its figures (the standbys, the link, etcd): set once,
  // before the loops start (ReplicaNode's constructor); called on a loop at each scrape.
  using ClusterFiguresSource = std::function<void(ClusterFigures*)>;
  void set_cluster_figures(ClusterFiguresSource source) { cluster_figures_ = std::move(source); }

  // EffectSink (under a shard lock, any thread): long-poll wake-ups, subscribers, timers,
  // lease-expiry metrics, the per-queue transition totals. Must stay quick.
  void OnEffect(const Effect& effect) override;

  // SessionOperations (dispatch.h), on the session's loop.
  void Auth(const protocol::Request& request, Session* session, Reply& reply) override;
  void Subscribe(const protocol::Request& request, Session* session, Reply& reply) override;
  void Unsubscribe(const protocol::Request& request, Session* session, Reply& reply) override;
  void Stats(Reply& reply) override;
  void Health(Reply& reply) override;
  void Cluster(Reply& reply) override;
  bool Switchover(const protocol::Request& request, Reply& reply) override;
  // A Switchover request the dispatcher let through (Outcome::deferred): handed to the
  // coordinator, answered on `loop` when the handover is over.
  void StartSwitchover(const protocol::Switchover& request, Completion completion, Loop* loop);

  // A StatsResult table built into `b` (its offset), for a Stats reply or a StatsTick
  // (`queues`: the engine's ListQueues, when the caller has it already).
  uint32_t BuildStatsResult(flatbuffers::FlatBufferBuilder& b) const;
  uint32_t BuildStatsResult(flatbuffers::FlatBufferBuilder& b,
                            const std::vector<QueueInfo>& queues) const;
  // The StatsTick events of one second (finished ServerMessage{EventMessage{StatsTick}}s):
  // `plain` always; `with_queues` (every queue's figures and totals, Subscribe.queue_stats)
  // only when asked, from the same ListQueues.
  struct StatsTicks {
    std::shared_ptr<const std::string> plain;
    std::shared_ptr<const std::string> with_queues;
  };
  StatsTicks BuildStatsTicks(bool with_queues) const;

  void SetLoops(std::vector<Loop*> loops) { loops_ = std::move(loops); }
  const std::vector<Loop*>& loops() const { return loops_; }
  Loop* NextLoop();  // round robin, for a new connection
  void StartTimers() { timers_.Start(); }
  void StopTimers() { timers_.Stop(); }
  void ExpireAllWaiters() {
    long_polls_.ExpireAll();
    result_waits_.ExpireAll();
  }

  // Ready means writes are taken here (/readyz): recovered, not draining, the log working, and
  // in a cluster the primary within its leadership.
  bool ready() const {
    return ready_.load() && !draining_.load() && !(log_ && log_->failed()) &&
           role_.MayWrite(SteadyClock::now());
  }
  void set_ready(bool r) { ready_.store(r); }
  void set_draining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  // Empty when ready; a failed WAL's reason names the operation, the file and the errno's text.
  std::string not_ready_reason() const;

  Engine* engine() const { return engine_; }
  // This node's role in its cluster (standalone outside one): what mutations may run here.
  NodeRole* role() { return &role_; }
  const NodeRole* role() const { return &role_; }
  // What a Switchover request does (set by the replication coordinator; unset: refused): starts
  // the handover and returns at once; `done` gets the outcome later, from any thread, once.
  // Submit answers the request then (an io loop never waits for a handover: the standby's
  // replication session may be on it).
  using SwitchoverHandler =
      std::function<void(std::string_view to, std::function<void(Status)> done)>;
  void set_switchover(SwitchoverHandler handler) { switchover_ = std::move(handler); }
  wal::GroupCommitLog* log() const { return log_; }
  Metrics* metrics() const { return metrics_; }
  // sundial_messages_total for one dispatched request of operation `op`: its messages as `op`,
  // the leases of a Complete's or Fail's `next` as a dequeue's.
  void CountMessages(protocol::Operation op, const Dispatcher::Outcome& outcome) const {
    if (outcome.messages > 0) metrics_->CountMessages(static_cast<uint8_t>(op), outcome.messages);
    if (outcome.next_leased > 0) {
      metrics_->CountMessages(static_cast<uint8_t>(protocol::Operation::Dequeue),
                              outcome.next_leased);
    }
  }
  const Dispatcher& dispatcher() const { return dispatcher_; }
  LongPolls& long_polls() { return long_polls_; }
  ResultWaits& result_waits() { return result_waits_; }
  Subscriptions& subscriptions() { return subscriptions_; }
  Timers& timers() { return timers_; }
  // The shared token (--auth-token-file), empty when none is needed.
  const std::string& auth_token() const { return auth_token_; }
  void set_auth_token(std::string token) { auth_token_ = std::move(token); }
  const Options& options() const { return options_; }
  ConnectionRegistry& registry() { return registry_; }
  // TLS on both ports (--tls-cert/--tls-key), or null: plain TCP.
  TlsContexts* tls() const { return tls_; }
  void set_tls(TlsContexts* tls) { tls_ = tls; }

 private:
  const Options& options_;
  Engine* const engine_;
  wal::GroupCommitLog* const log_;
  Metrics* const metrics_;
  NodeRole role_;
  SwitchoverHandler switchover_;
  ClusterFiguresSource cluster_figures_;
  const Dispatcher dispatcher_;
  const SteadyClock::time_point started_ = SteadyClock::now();
  ConnectionRegistry registry_;
  std::string auth_token_;
  TlsContexts* tls_ = nullptr;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::vector<Loop*> loops_;
  std::atomic<size_t> next_loop_{0};
  LongPolls long_polls_{this};
  ResultWaits result_waits_{this};
  Subscriptions subscriptions_{this};
  Timers timers_{this};
  QueueActivity activity_;  // per-queue transition totals, for the queue_stats tick
};

// The TCP listener (server/tcp.cc) and the HTTP/WebSocket listener (server/http.cc). Both bind
// in Start (returning the bound port) and accept on `loop` until Stop; each connection goes to
// the core's next loop for life.
class Listener {
 public:
  virtual ~Listener() = default;
  virtual Status Start(const std::string& address, uint16_t port) = 0;
  virtual uint16_t port() const = 0;
  virtual void Stop() = 0;
};
std::unique_ptr<Listener> NewTcpListener(Loop* loop, Core* core);
std::unique_ptr<Listener> NewHttpListener(Loop* loop, Core* core);

}  // namespace sundial::server
