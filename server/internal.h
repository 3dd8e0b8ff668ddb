// What the server's transports share (server/*.cc only: this header includes Boost.Asio, so
// nothing outside server/ includes it — engine, WAL and test code compile without Asio).
//
// A Connection is a client of any transport (TCP, WebSocket) as the request core sees it; the
// Core runs every request: dispatch to the engine, the wait for the WAL, long-poll waiters,
// subscriptions, stats and metrics. Each connection runs on its own strand; the core calls
// Deliver from any thread (the WAL's log thread, the long-poll drain, the ticker).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "server/dispatch.h"
#include "server/live_feed.h"  // DASHBOARD HOOK (issue 13)
#include "server/metrics.h"
#include "server/options.h"
#include "wal/group_commit_log.h"

namespace sundial::server {

namespace asio = boost::asio;
using SteadyClock = std::chrono::steady_clock;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  explicit Connection(Transport transport) : transport_(transport) {}
  virtual ~Connection() = default;

  // Any thread: queue a finished ServerMessage (a Response) for sending; ends one request in
  // flight.
  virtual void Deliver(std::string message) = 0;
  // Any thread: queue a subscription event (shared by every subscriber). Connections that
  // cannot subscribe ignore it. Called under the Core's subscription lock: it must only post.
  virtual void DeliverEvent(std::shared_ptr<const std::string> /*message*/) {}
  // Any thread: close now.
  virtual void Close() = 0;
  // Any thread: stop reading; close once every request in flight is answered and written.
  virtual void CloseWhenDone() = 0;

  bool closed() const { return closed_.load(std::memory_order_acquire); }
  Transport transport() const { return transport_; }
  // Requests received and not yet answered (for draining).
  int64_t inflight() const { return inflight_.load(std::memory_order_acquire); }

 protected:
  std::atomic<bool> closed_{false};
  std::atomic<int64_t> inflight_{0};

 private:
  const Transport transport_;
};

// --write-timeout-ms for one connection, on its strand only (nginx's send_timeout): a write
// that takes nothing for the timeout means a client that does not read, and `drop` closes it.
// The session calls Arm() as each write starts (a no-op while armed: one timer wait per
// timeout period, not per write) and Progress() whenever a write takes bytes.
class StallGuard {
 public:
  StallGuard(const asio::any_io_executor& strand, uint32_t timeout_ms)
      : timer_(strand), limit_(timeout_ms) {}

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

class Core;

// The connections that are open, for the drain at shutdown.
class ConnectionRegistry {
 public:
  void Add(const std::shared_ptr<Connection>& c);
  void Remove(const Connection* c);
  std::vector<std::shared_ptr<Connection>> All() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<const Connection*, std::weak_ptr<Connection>> all_;
};

class Core final : public EffectSink {
 public:
  Core(const Options& options, Engine* engine, wal::GroupCommitLog* log, asio::io_context* io,
       Metrics* metrics);
  ~Core() override;

  // On the connection's strand: `frame` is a verified Request buffer (copied if kept).
  void Submit(const std::shared_ptr<Connection>& conn, std::string_view frame);
  // The connection closed: its long-poll waiters and subscriptions go.
  void Forget(const Connection* conn);
  // Ends the connection's subscriptions (it fell behind).
  void DropSubscriptions(const Connection* conn);
  // /metrics.
  std::string RenderMetrics() const { return metrics_->Render(*engine_, log_); }

  // Effects from the engine (under a shard lock): wakes long-poll waiters, feeds subscribers,
  // counts lease expirations. Must stay quick.
  void OnEffect(const Effect& effect) override;

  // The ticker: a thread calling Engine::Advance every few ms, and the stats event every second.
  void StartTicker();
  void StopTicker();

  // Shutdown: answer every long-poll waiter now (empty), refuse new waits.
  void ExpireAllWaiters();

  // The StatsResult-bearing ServerMessage (a Response with `request_id`, or a StatsTick event;
  // `with_queues`: the tick carries every queue's figures, Subscribe.queue_stats).
  std::string StatsMessage(uint64_t request_id, bool as_event, bool with_queues = false) const;
  std::string HealthMessage(uint64_t request_id) const;

  bool ready() const { return ready_.load() && !draining_.load() && !(log_ && log_->failed()); }
  void set_ready(bool r) { ready_.store(r); }
  void set_draining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  const char* not_ready_reason() const;

  Metrics* metrics() { return metrics_; }
  // The shared token (--auth-token-file), empty when none is needed.
  const std::string& auth_token() const { return auth_token_; }
  void set_auth_token(std::string token) { auth_token_ = std::move(token); }
  const Options& options() const { return options_; }
  ConnectionRegistry& registry() { return registry_; }

 private:
  struct Waiter;
  struct QueueWaiters {
    std::deque<std::shared_ptr<Waiter>> waiters;
    bool drain_scheduled = false;
  };
  struct Subscription {
    std::weak_ptr<Connection> conn;
    const Connection* key;
    std::string queue;  // "*": every queue
    Metadata filter;
    SubscriptionOptions options;  // DASHBOARD HOOK (issue 13): queue_stats, sampling, ids
  };

  void Finish(const std::shared_ptr<Connection>& conn, Dispatcher::Outcome outcome, uint8_t op,
              uint64_t request_id, SteadyClock::time_point start);
  void Wait(const std::shared_ptr<Connection>& conn, std::string_view frame, uint64_t generation,
            SteadyClock::time_point start);
  void ScheduleDrainLocked(const std::string& queue);  // REQUIRES: waiters_mu_
  void Drain(const std::string& queue);
  void Expire(const std::shared_ptr<Waiter>& w);
  void RemoveWaiter(const std::shared_ptr<Waiter>& w);
  void Subscribe(const std::shared_ptr<Connection>& conn, const protocol::Request& request,
                 SteadyClock::time_point start);
  void Unsubscribe(const std::shared_ptr<Connection>& conn, const protocol::Request& request,
                   SteadyClock::time_point start);
  void PublishEvent(const Effect& effect);
  void TickerLoop();
  std::atomic<uint64_t>& Generation(std::string_view queue);

  const Options& options_;
  Engine* const engine_;
  wal::GroupCommitLog* const log_;
  asio::io_context* const io_;
  Metrics* const metrics_;
  const Dispatcher dispatcher_;
  const SteadyClock::time_point started_ = SteadyClock::now();
  ConnectionRegistry registry_;
  std::string auth_token_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};

  // Long-poll waiters, FIFO per queue. A generation per hash bucket of queue names changes with
  // every effect, so a waiter registered after an empty dequeue sees what it might have missed.
  std::mutex waiters_mu_;
  std::unordered_map<std::string, QueueWaiters> waiters_;  // GUARDED_BY(waiters_mu_)
  std::atomic<int64_t> waiting_{0};
  std::array<std::atomic<uint64_t>, 64> generations_{};
  asio::strand<asio::io_context::executor_type> drain_strand_;

  std::mutex subs_mu_;
  std::vector<Subscription> subs_;  // GUARDED_BY(subs_mu_); sorted by key (connection)
  QueueActivity activity_;          // DASHBOARD HOOK (issue 13): per-queue transition totals
  std::atomic<int64_t> subscriber_count_{0};

  std::mutex ticker_mu_;
  std::condition_variable ticker_cv_;
  bool ticker_stop_ = false;  // GUARDED_BY(ticker_mu_)
  std::thread ticker_;
};

// The TCP listener (server/tcp.cc) and the HTTP/WebSocket listener (server/http.cc). Both bind
// in Start (returning the bound port) and accept until Stop.
class Listener {
 public:
  virtual ~Listener() = default;
  virtual Status Start(const std::string& address, uint16_t port) = 0;
  virtual uint16_t port() const = 0;
  virtual void Stop() = 0;
};
std::unique_ptr<Listener> NewTcpListener(asio::io_context* io, Core* core);
std::unique_ptr<Listener> NewHttpListener(asio::io_context* io, Core* core);

}  // namespace sundial::server
