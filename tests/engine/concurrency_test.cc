// Concurrency: many threads drive one Engine (4 shards) on simple and exclusive queues with
// enqueue, dequeue, complete, fail, extend, cancel, reprioritize and reads, while one thread moves
// a ManualClock and runs Advance. Built as engine_concurrency_tests and run under ThreadSanitizer.
//
// A LeaseLedger records every lease the engine hands out and fails the test when a dequeue
// certainly ran while another lease of the same message, or of the same exclusivity value, was
// certainly still valid (handed out, not yet released, canceled or expired). Calls are ordered by
// a logical tick, so a report is always a real violation. At the end the per-state counts must
// add up to what was enqueued, and every completed or canceled message must be found so.
//
// No sleeps: every thread runs a fixed number of operations.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/status.h"
#include "engine/types.h"
#include "tests/engine/engine_fixture.h"

namespace sundial {
namespace {

constexpr TimeMs kForever = std::numeric_limits<TimeMs>::max();
constexpr int64_t kLeaseMs = 20;
constexpr int64_t kLongRetention = 3'153'600'000'000;  // no GC during the test

// Every lease handed out, with the calls around it ordered by a logical tick. Ticks are taken
// under one mutex, so their order agrees with the order of the events between them in every
// thread: if tick a < tick b, whatever happened before a happened before whatever follows b.
//
// The engine reads its clock before it takes a shard lock, so an operation may carry a time a
// little older than operations it is ordered after; stamped times (a lease's start) therefore
// cannot order calls. Only `expires` is used as a time: the engine releases a lease by time only
// through Advance(now >= expires), which needs the clock to have reached `expires`.
class LeaseLedger {
 public:
  static constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

  uint64_t Tick() {
    std::lock_guard<std::mutex> lock(mu_);
    return ++ticks_;
  }

  // A lease from a dequeue called at tick `called`, returned before tick `returned`, with the
  // clock read after it returned. message_key names the message (unique across the test);
  // value_key its exclusivity value (empty when the queue is not exclusive). Returns its index.
  size_t Record(const std::string& message_key, const std::string& value_key, uint64_t token,
                TimeMs expires, uint64_t called, uint64_t returned, TimeMs clock_after) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t index = leases_.size();
    leases_.push_back(
        Lease{message_key, value_key, token, expires, called, returned, clock_after, kNever});
    auto terminal = terminal_tick_.find(message_key);
    if (terminal != terminal_tick_.end() && terminal->second < called) {
      Violation("dequeued " + message_key + " after it was completed or canceled");
    }
    CheckAgainst(index, by_message_[message_key], "message " + message_key);
    by_message_[message_key].push_back(index);
    if (!value_key.empty()) {
      CheckAgainst(index, by_value_[value_key], "exclusivity value " + value_key);
      by_value_[value_key].push_back(index);
    }
    return index;
  }

  void Extended(size_t index, TimeMs expires) {
    std::lock_guard<std::mutex> lock(mu_);
    leases_[index].expires = std::max(leases_[index].expires, expires);
  }
  // Call just before the holder's complete or fail.
  void ReleaseAttempt(size_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    leases_[index].released = std::min(leases_[index].released, ++ticks_);
  }
  // Call just before a cancel: from then on the message may lose its lease.
  void CancelAttempt(const std::string& message_key) {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_tick_.emplace(message_key, ++ticks_);  // keeps the first
  }
  bool CancelAttempted(const std::string& message_key) {
    std::lock_guard<std::mutex> lock(mu_);
    return cancel_tick_.count(message_key) > 0;
  }
  // Call after a complete or cancel succeeded.
  void Terminal(const std::string& message_key) {
    std::lock_guard<std::mutex> lock(mu_);
    terminal_tick_.emplace(message_key, ++ticks_);
  }

  // Checks every pair again, now that every release and extension is known.
  void CheckAll() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto* groups : {&by_message_, &by_value_}) {
      for (const auto& [key, indexes] : *groups) {
        for (size_t i = 0; i < indexes.size(); ++i) {
          for (size_t j = i + 1; j < indexes.size(); ++j) {
            if (Conflict(leases_[indexes[i]], leases_[indexes[j]])) {
              Violation("two valid leases at once on " + key);
            }
          }
        }
      }
    }
  }

  std::vector<std::string> violations() {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }
  size_t violation_count() {
    std::lock_guard<std::mutex> lock(mu_);
    return violation_count_;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return leases_.size();
  }

 private:
  struct Lease {
    std::string message_key;
    std::string value_key;
    uint64_t token;
    TimeMs expires;
    uint64_t called;
    uint64_t returned;
    TimeMs clock_after;
    uint64_t released;  // tick of the holder's complete or fail call
  };

  // REQUIRES: mu_ held.
  void Violation(std::string what) {
    if (violations_.size() < 20) violations_.push_back(std::move(what));
    ++violation_count_;
  }

  // REQUIRES: mu_ held. True when `later` was certainly granted while `earlier` was certainly
  // still valid: after `earlier` was handed out, before anything that could end it (its
  // holder's release, a cancel of its message) was called, and before the clock reached its
  // expiry.
  bool GrantedWhileHeld(const Lease& earlier, const Lease& later) const {
    uint64_t end = earlier.released;
    auto cancel = cancel_tick_.find(earlier.message_key);
    if (cancel != cancel_tick_.end()) end = std::min(end, cancel->second);
    return earlier.returned < later.called && later.returned < end &&
           later.clock_after < earlier.expires;
  }
  bool Conflict(const Lease& a, const Lease& b) const {
    return GrantedWhileHeld(a, b) || GrantedWhileHeld(b, a);
  }
  void CheckAgainst(size_t index, const std::vector<size_t>& others, const std::string& what) {
    const Lease& lease = leases_[index];
    for (size_t other : others) {
      if (Conflict(lease, leases_[other])) {
        Violation("two valid leases at once on " + what + ": tokens " +
                  std::to_string(leases_[other].token) + " (expires " +
                  std::to_string(leases_[other].expires) + ") and " + std::to_string(lease.token) +
                  " (expires " + std::to_string(lease.expires) + ")");
      }
    }
  }

  std::mutex mu_;
  uint64_t ticks_ = 0;
  std::deque<Lease> leases_;
  std::map<std::string, std::vector<size_t>> by_message_;
  std::map<std::string, std::vector<size_t>> by_value_;
  std::map<std::string, uint64_t> cancel_tick_;
  std::map<std::string, uint64_t> terminal_tick_;
  std::vector<std::string> violations_;
  size_t violation_count_ = 0;
};

// Outcomes the threads report, checked against the engine's counts at the end.
struct QueueTally {
  std::atomic<uint64_t> enqueued{0};
  std::atomic<uint64_t> completed{0};
  std::mutex mu;
  std::set<std::string> completed_ids;
  std::set<std::string> canceled_ids;
};

class ConcurrencyTest : public ::testing::Test {
 protected:
  static constexpr int kThreads = 8;

  ConcurrencyTest() {
    Engine::Options options;
    options.shards = 4;
    options.seed = 1234;
    engine_ = std::make_unique<Engine>(options, &clock_, nullptr);
  }

  struct Held {
    std::string queue;
    std::string id;
    uint64_t token;
    TimeMs expires;
    size_t ledger_index;
  };

  static std::string MessageKey(const std::string& queue, const std::string& id) {
    return queue + "/" + id;
  }
  static std::string ValueOf(const MessageRecord& m, const std::string& key) {
    for (const MetadataPair& p : m.metadata) {
      if (p.key == key) return p.value;
    }
    return {};
  }

  // Leases from a dequeue: checks each against the ledger and returns them as held.
  struct DequeueCall {
    uint64_t called;
    uint64_t returned;
    TimeMs clock_before;
    TimeMs clock_after;
  };
  void RecordLeases(const std::vector<MessageRecord>& got, const std::string& queue, bool exclusive,
                    const DequeueCall& call, std::vector<Held>* held, bool key_by_id_only = false) {
    for (const MessageRecord& m : got) {
      if (m.state != MessageState::kRunning || m.lease_token == 0 ||
          m.lease_token > kMaxLeaseToken || m.attempts == 0 ||
          m.lease_expires_at < call.clock_before + kLeaseMs ||
          m.lease_expires_at > call.clock_after + kLeaseMs) {
        std::lock_guard<std::mutex> lock(report_mu_);
        bad_records_.push_back(queue + "/" + m.id);
        continue;
      }
      std::string key = key_by_id_only ? m.id : MessageKey(queue, m.id);
      std::string value = exclusive ? queue + "#" + ValueOf(m, "tenant") : std::string();
      size_t index = ledger_.Record(key, value, m.lease_token, m.lease_expires_at, call.called,
                                    call.returned, call.clock_after);
      held->push_back(Held{queue, m.id, m.lease_token, m.lease_expires_at, index});
    }
  }

  // Dequeues, noting the ticks and clock around the call.
  Result<std::vector<MessageRecord>> TimedDequeue(const std::string& queue,
                                                  const DequeueRequest& request,
                                                  DequeueCall* call) {
    call->clock_before = clock_.NowMs();
    call->called = ledger_.Tick();
    Result<std::vector<MessageRecord>> r = engine_->Dequeue(queue, request);
    call->returned = ledger_.Tick();
    call->clock_after = clock_.NowMs();
    return r;
  }

  void Unexpected(const std::string& what) {
    std::lock_guard<std::mutex> lock(report_mu_);
    if (unexpected_.size() < 20) unexpected_.push_back(what);
    ++unexpected_count_;
  }

  void ExpectNoReports() {
    ledger_.CheckAll();
    EXPECT_EQ(ledger_.violation_count(), 0u);
    for (const std::string& v : ledger_.violations()) ADD_FAILURE() << v;
    std::lock_guard<std::mutex> lock(report_mu_);
    EXPECT_EQ(unexpected_count_, 0u);
    for (const std::string& u : unexpected_) ADD_FAILURE() << u;
    EXPECT_TRUE(bad_records_.empty()) << "malformed dequeued record, e.g. " << bad_records_[0];
  }

  ManualClock clock_;
  std::unique_ptr<Engine> engine_;
  LeaseLedger ledger_;
  std::mutex report_mu_;
  std::vector<std::string> unexpected_;
  size_t unexpected_count_ = 0;
  std::vector<std::string> bad_records_;
};

TEST_F(ConcurrencyTest, ManyThreadsNeverDoubleLeaseNorBreakExclusivityAndCountsAddUp) {
  constexpr int kOpsPerThread = 3'000;
  constexpr int kQueuesPerType = 4;
  constexpr int kValues = 5;

  std::vector<std::string> queues;
  std::vector<bool> exclusive;
  for (int i = 0; i < kQueuesPerType; ++i) {
    QueueSettings simple;
    simple.lease_ms = kLeaseMs;
    simple.max_attempts = 4;
    simple.retention_ms = kLongRetention;
    queues.push_back("simple-" + std::to_string(i));
    exclusive.push_back(false);
    ASSERT_TRUE(engine_->CreateQueue(queues.back(), simple).ok());
    QueueSettings x = simple;
    x.type = QueueType::kExclusive;
    x.exclusivity_key = "tenant";
    queues.push_back("exclusive-" + std::to_string(i));
    exclusive.push_back(true);
    ASSERT_TRUE(engine_->CreateQueue(queues.back(), x).ok());
  }
  std::vector<QueueTally> tallies(queues.size());

  auto worker = [&](int thread) {
    std::mt19937 rng(static_cast<uint32_t>(thread * 7'919 + 1));
    std::vector<Held> held;
    std::vector<std::pair<size_t, std::string>> mine;  // (queue index, id) enqueued by me
    int next_id = 0;
    for (int op = 0; op < kOpsPerThread; ++op) {
      if (thread == 0 && op % 3 == 0) {
        clock_.Advance(1);
        engine_->Advance(clock_.NowMs());
      }
      const size_t qi = rng() % queues.size();
      const std::string& queue = queues[qi];
      const unsigned choice = rng() % 100;
      if (choice < 25) {
        std::vector<EnqueueItem> items;
        const int n = 1 + static_cast<int>(rng() % 3);
        for (int i = 0; i < n; ++i) {
          EnqueueItem item;
          item.id = "t" + std::to_string(thread) + "-" + std::to_string(next_id++);
          item.priority = static_cast<int64_t>(rng() % 10);
          item.payload = "p";
          item.metadata.push_back({"color", rng() % 2 ? "red" : "blue"});
          if (exclusive[qi])
            item.metadata.push_back({"tenant", "v" + std::to_string(rng() % kValues)});
          if (rng() % 8 == 0) item.delay_ms = static_cast<int64_t>(rng() % 5);
          items.push_back(std::move(item));
        }
        std::vector<std::string> ids;
        for (const EnqueueItem& item : items) ids.push_back(item.id);
        std::vector<Result<EnqueueResult>> r = engine_->Enqueue(queue, std::move(items));
        if (r.size() != ids.size()) {
          Unexpected("enqueue answered " + std::to_string(r.size()) + " results");
          continue;
        }
        for (size_t i = 0; i < r.size(); ++i) {
          if (!r[i].ok() || r[i]->duplicate || r[i]->id != ids[i]) {
            Unexpected("enqueue of " + ids[i] +
                       " failed: " + std::string(CodeName(r[i].status().code())));
            continue;
          }
          tallies[qi].enqueued.fetch_add(1);
          mine.emplace_back(qi, ids[i]);
        }
      } else if (choice < 55) {
        DequeueRequest request;
        request.max = 1 + rng() % 3;
        request.lease_ms = kLeaseMs;
        const unsigned f = rng() % 4;
        if (f == 0) request.filter = {{"color", "red"}};
        if (f == 1 && exclusive[qi]) {
          request.filter = {{"tenant", "v" + std::to_string(rng() % kValues)}};
        }
        DequeueCall call;
        Result<std::vector<MessageRecord>> r = TimedDequeue(queue, request, &call);
        if (!r.ok()) {
          Unexpected("dequeue failed: " + std::string(CodeName(r.status().code())));
          continue;
        }
        if (r->size() > request.max) Unexpected("dequeue returned more than max");
        if (exclusive[qi]) {
          std::set<std::string> values;
          for (const MessageRecord& m : *r) {
            if (!values.insert(ValueOf(m, "tenant")).second) {
              Unexpected("one dequeue returned two messages of value " + ValueOf(m, "tenant"));
            }
          }
        }
        RecordLeases(*r, queue, exclusive[qi], call, &held);
      } else if (choice < 80) {
        if (held.empty()) continue;
        const size_t hi = rng() % held.size();
        Held h = held[hi];
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(hi));
        const std::string key = MessageKey(h.queue, h.id);
        const size_t hq =
            static_cast<size_t>(std::find(queues.begin(), queues.end(), h.queue) - queues.begin());
        const unsigned action = rng() % 10;
        if (action < 5) {
          ledger_.ReleaseAttempt(h.ledger_index);
          std::vector<Status> r = engine_->Complete(h.queue, {CompleteItem{h.id, h.token}});
          const TimeMs after = clock_.NowMs();
          if (r.size() == 1 && r[0].ok()) {
            ledger_.Terminal(key);
            tallies[hq].completed.fetch_add(1);
            std::lock_guard<std::mutex> lock(tallies[hq].mu);
            if (!tallies[hq].completed_ids.insert(h.id).second) {
              Unexpected("completed twice: " + key);
            }
          } else if (r.size() != 1 || r[0].code() != Code::kFailedPrecondition ||
                     (after < h.expires && !ledger_.CancelAttempted(key))) {
            Unexpected("complete of a valid lease on " + key + " refused");
          }
        } else if (action < 7) {
          ledger_.ReleaseAttempt(h.ledger_index);
          FailRequest request;
          request.id = h.id;
          request.lease_token = h.token;
          request.error = "boom";
          request.retry_delay_ms = static_cast<int64_t>(rng() % 4);
          Result<FailResult> r = engine_->Fail(h.queue, request);
          const TimeMs after = clock_.NowMs();
          if (!r.ok() && (r.status().code() != Code::kFailedPrecondition ||
                          (after < h.expires && !ledger_.CancelAttempted(key)))) {
            Unexpected("fail of a valid lease on " + key + " refused");
          }
        } else if (action < 8) {
          const TimeMs before = clock_.NowMs();
          Result<TimeMs> r = engine_->Extend(h.queue, h.id, h.token, kLeaseMs);
          const TimeMs after = clock_.NowMs();
          if (r.ok()) {
            if (*r < before + kLeaseMs || *r > after + kLeaseMs) {
              Unexpected("extend gave an expiry outside [before, after] + lease on " + key);
            }
            ledger_.Extended(h.ledger_index, *r);
            h.expires = *r;
            held.push_back(h);
          } else if (r.status().code() != Code::kFailedPrecondition ||
                     (after < h.expires && !ledger_.CancelAttempted(key))) {
            Unexpected("extend of a valid lease on " + key + " refused");
          }
        }
        // else: abandon the lease and let it expire.
      } else if (choice < 88) {
        if (mine.empty()) continue;
        const auto& [mq, id] = mine[rng() % mine.size()];
        const std::string key = MessageKey(queues[mq], id);
        ledger_.CancelAttempt(key);
        std::vector<Status> r = engine_->Cancel(queues[mq], {id});
        if (r.size() == 1 && r[0].ok()) {
          ledger_.Terminal(key);
          std::lock_guard<std::mutex> lock(tallies[mq].mu);
          tallies[mq].canceled_ids.insert(id);
        } else if (r.size() != 1 || r[0].code() != Code::kFailedPrecondition) {
          Unexpected("cancel of " + key + " answered neither OK nor FAILED_PRECONDITION");
        }
      } else if (choice < 96) {
        Result<StateCounts> counts = engine_->Count(queue, {});
        if (!counts.ok()) {
          Unexpected("count failed");
        } else if (counts->blocked > (*counts)[MessageState::kPending]) {
          Unexpected("more blocked than pending in " + queue);
        }
        BrowseRequest browse;
        browse.state = MessageState::kRunning;
        browse.limit = 5;
        if (!engine_->Browse(queue, browse).ok()) Unexpected("browse failed");
        if (!mine.empty()) {
          const auto& [mq, id] = mine[rng() % mine.size()];
          if (!engine_->Get(queues[mq], id).ok()) Unexpected("get lost " + id);
        }
      } else {
        if (mine.empty()) continue;
        const auto& [mq, id] = mine[rng() % mine.size()];
        ReprioritizeRequest request;
        request.priority = static_cast<int64_t>(rng() % 10);
        Result<uint64_t> r = engine_->Reprioritize(queues[mq], id, request);
        if (!r.ok() && r.status().code() != Code::kFailedPrecondition) {
          Unexpected("reprioritize of " + id + " failed unexpectedly");
        }
      }
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();

  // Let every lease expire and every delay pass.
  clock_.Advance(10 * kLeaseMs);
  engine_->Advance(clock_.NowMs());
  ExpectNoReports();
  EXPECT_GT(ledger_.size(), 1'000u) << "too few leases to test anything";

  for (size_t qi = 0; qi < queues.size(); ++qi) {
    SCOPED_TRACE(queues[qi]);
    Result<StateCounts> counts = engine_->Count(queues[qi], {});
    ASSERT_TRUE(counts.ok());
    uint64_t total = 0;
    for (uint64_t n : counts->by_state) total += n;
    EXPECT_EQ(total, tallies[qi].enqueued.load());
    EXPECT_EQ((*counts)[MessageState::kRunning], 0u);
    EXPECT_EQ((*counts)[MessageState::kInvisible], 0u);
    EXPECT_EQ(counts->blocked, 0u);
    EXPECT_EQ((*counts)[MessageState::kCompleted], tallies[qi].completed.load());
    EXPECT_EQ((*counts)[MessageState::kCanceled], tallies[qi].canceled_ids.size());
    for (const std::string& id : tallies[qi].completed_ids) {
      Result<MessageRecord> m = engine_->Get(queues[qi], id);
      ASSERT_TRUE(m.ok()) << id;
      EXPECT_EQ(m->state, MessageState::kCompleted) << id;
    }
    for (const std::string& id : tallies[qi].canceled_ids) {
      Result<MessageRecord> m = engine_->Get(queues[qi], id);
      ASSERT_TRUE(m.ok()) << id;
      EXPECT_EQ(m->state, MessageState::kCanceled) << id;
    }

    // Nothing is stuck: every pending message can still be dequeued.
    const uint64_t pending = (*counts)[MessageState::kPending];
    uint64_t drained = 0;
    for (uint64_t i = 0; i <= pending; ++i) {
      DequeueRequest request;
      request.lease_ms = kLeaseMs;
      Result<std::vector<MessageRecord>> got = engine_->Dequeue(queues[qi], request);
      ASSERT_TRUE(got.ok());
      if (got->empty()) break;
      ++drained;
      std::vector<Status> done =
          engine_->Complete(queues[qi], {CompleteItem{(*got)[0].id, (*got)[0].lease_token}});
      ASSERT_EQ(done.size(), 1u);
      EXPECT_TRUE(done[0].ok());
    }
    EXPECT_EQ(drained, pending);
    Result<StateCounts> after = engine_->Count(queues[qi], {});
    ASSERT_TRUE(after.ok());
    EXPECT_EQ((*after)[MessageState::kPending], 0u);
    EXPECT_EQ((*after)[MessageState::kCompleted] + (*after)[MessageState::kCanceled] +
                  (*after)[MessageState::kErrored],
              tallies[qi].enqueued.load());
  }
}

// Pairs of queues that are each other's dead-letter queue: concurrent fails and lease expiries
// move messages both ways between shards at once, which takes both shard locks. The test ends
// (no deadlock), no message is lost or duplicated, and none is ever left errored.
TEST_F(ConcurrencyTest, CrossShardDeadLetterMovesBothWaysNeitherDeadlockNorLoseMessages) {
  constexpr int kOpsPerThread = 2'500;
  constexpr int kPairs = 4;
  std::vector<std::string> queues;
  for (int i = 0; i < kPairs; ++i) {
    QueueSettings s;
    s.lease_ms = kLeaseMs;
    s.max_attempts = 1;
    s.retention_ms = kLongRetention;
    std::string ping = "ping-" + std::to_string(i);
    std::string pong = "pong-" + std::to_string(i);
    ASSERT_TRUE(engine_->CreateQueue(ping, s).ok());
    QueueSettings to_ping = s;
    to_ping.dead_letter_queue = ping;
    ASSERT_TRUE(engine_->CreateQueue(pong, to_ping).ok());
    QueueSettingsUpdate to_pong;
    to_pong.dead_letter_queue = pong;
    ASSERT_TRUE(engine_->UpdateQueue(ping, to_pong).ok());
    queues.push_back(ping);
    queues.push_back(pong);
  }
  std::atomic<uint64_t> enqueued{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> moved{0};

  auto worker = [&](int thread) {
    std::mt19937 rng(static_cast<uint32_t>(thread * 104'729 + 3));
    std::vector<Held> held;
    int next_id = 0;
    for (int op = 0; op < kOpsPerThread; ++op) {
      if (thread == 0 && op % 3 == 0) {
        clock_.Advance(1);
        engine_->Advance(clock_.NowMs());
      }
      const std::string& queue = queues[rng() % queues.size()];
      const unsigned choice = rng() % 10;
      if (choice < 3) {
        EnqueueItem item;
        item.id = "t" + std::to_string(thread) + "-" + std::to_string(next_id++);
        item.priority = static_cast<int64_t>(rng() % 5);
        std::vector<Result<EnqueueResult>> r = engine_->Enqueue(queue, {item});
        if (r.size() == 1 && r[0].ok()) {
          enqueued.fetch_add(1);
        } else {
          Unexpected("enqueue failed");
        }
      } else if (choice < 7) {
        DequeueRequest request;
        request.max = 1 + rng() % 2;
        request.lease_ms = kLeaseMs;
        DequeueCall call;
        Result<std::vector<MessageRecord>> r = TimedDequeue(queue, request, &call);
        if (!r.ok()) {
          Unexpected("dequeue failed");
          continue;
        }
        // Ids are unique across queues, so a message is keyed by id as it moves.
        RecordLeases(*r, queue, false, call, &held, /*key_by_id_only=*/true);
      } else if (!held.empty()) {
        const size_t hi = rng() % held.size();
        Held h = held[hi];
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(hi));
        if (rng() % 4 == 0) continue;  // abandon: the lease expires and moves it
        ledger_.ReleaseAttempt(h.ledger_index);
        if (rng() % 3 == 0) {
          std::vector<Status> r = engine_->Complete(h.queue, {CompleteItem{h.id, h.token}});
          if (r.size() == 1 && r[0].ok()) {
            completed.fetch_add(1);
          } else if (clock_.NowMs() < h.expires) {
            Unexpected("complete of a valid lease refused");
          }
        } else {
          FailRequest request;
          request.id = h.id;
          request.lease_token = h.token;
          Result<FailResult> r = engine_->Fail(h.queue, request);
          if (r.ok()) {
            if (r->state != MessageState::kErrored || r->dead_letter_queue.empty()) {
              Unexpected("fail at max attempts did not move " + h.id);
            } else {
              moved.fetch_add(1);
            }
          } else if (clock_.NowMs() < h.expires) {
            Unexpected("fail of a valid lease refused");
          }
        }
      }
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();
  clock_.Advance(10 * kLeaseMs);
  engine_->Advance(clock_.NowMs());
  ExpectNoReports();
  EXPECT_GT(moved.load(), 100u) << "too few dead-letter moves to test anything";

  StateCounts sum;
  for (const std::string& queue : queues) {
    Result<StateCounts> counts = engine_->Count(queue, {});
    ASSERT_TRUE(counts.ok());
    for (size_t s = 0; s < kStateCount; ++s) sum.by_state[s] += counts->by_state[s];
  }
  uint64_t total = 0;
  for (uint64_t n : sum.by_state) total += n;
  EXPECT_EQ(total, enqueued.load());
  EXPECT_EQ(sum[MessageState::kCompleted], completed.load());
  EXPECT_EQ(sum[MessageState::kErrored], 0u);
  EXPECT_EQ(sum[MessageState::kRunning], 0u);
  EXPECT_EQ(sum[MessageState::kPending], total - completed.load());
}

// Dependencies under concurrency: threads enqueue with depends_on across queues and shards,
// complete, fail into a dead-letter queue, cancel, purge and delete queues, while thread 0 runs
// the timers. The effects the engine reports, without the derived ones, in the order the sink
// saw them (as the log would write them), replay into a new engine to the same digest, which
// covers the dependency graph; an export of the state loads to it too.
TEST(DependencyConcurrencyTest, TheLoggedEffectsReplayToTheSameStateAndGraph) {
  constexpr int kThreads = 6;
  constexpr int kOpsPerThread = 2'000;
  ManualClock clock(1'700'000'000'000);
  engine_test::RecordingSink sink;
  Engine::Options options;
  options.shards = 4;
  options.seed = 99;
  Engine engine(options, &clock, &sink);
  QueueSettings failing;
  failing.max_attempts = 1;
  failing.lease_ms = kLeaseMs;
  failing.dead_letter_queue = "dlq";
  ASSERT_TRUE(engine.CreateQueue("dlq", {}).ok());
  ASSERT_TRUE(engine.CreateQueue("d0", failing).ok());
  for (const char* q : {"d1", "d2", "d3"}) ASSERT_TRUE(engine.CreateQueue(q, {}).ok());
  const std::vector<std::string> queues = {"d0", "d1", "d2", "d3"};
  std::mutex keys_mu;
  std::vector<std::string> keys;  // recent "queue/id" of enqueued messages
  std::atomic<uint64_t> waiting_enqueued{0};

  auto worker = [&](int thread) {
    std::mt19937 rng(static_cast<uint32_t>(thread * 7'919 + 1));
    struct Lease {
      std::string queue, id;
      uint64_t token;
    };
    std::vector<Lease> held;
    int next_id = 0;
    auto random_key = [&]() -> std::string {
      std::lock_guard<std::mutex> lock(keys_mu);
      return keys.empty() ? std::string() : keys[rng() % keys.size()];
    };
    for (int op = 0; op < kOpsPerThread; ++op) {
      if (thread == 0 && op % 4 == 0) {
        clock.Advance(3);
        engine.Advance(clock.NowMs());
      }
      const std::string& queue = queues[rng() % queues.size()];
      const unsigned choice = rng() % 100;
      if (choice < 35) {
        EnqueueItem item;
        item.id = "t" + std::to_string(thread) + "-" + std::to_string(next_id++);
        if (rng() % 2 == 0) {
          for (unsigned k = 1 + rng() % 3; k > 0; --k) {
            std::string key = random_key();
            if (!key.empty()) item.depends_on.push_back(std::move(key));
          }
          item.on_dependency_failure = static_cast<DependencyFailurePolicy>(rng() % 3);
        }
        const bool with_dependencies = !item.depends_on.empty();
        auto r = engine.Enqueue(queue, {item});
        if (r[0].ok()) {
          if (with_dependencies) waiting_enqueued.fetch_add(1);
          std::lock_guard<std::mutex> lock(keys_mu);
          keys.push_back(queue + "/" + r[0]->id);
          if (keys.size() > 200) keys.erase(keys.begin());
        }
      } else if (choice < 60) {
        DequeueRequest request;
        request.lease_ms = kLeaseMs;
        auto r = engine.Dequeue(queue, request);
        if (r.ok()) {
          for (const MessageRecord& m : *r) held.push_back({queue, m.id, m.lease_token});
        }
      } else if (choice < 85 && !held.empty()) {
        const size_t i = rng() % held.size();
        const Lease l = held[i];
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        if (rng() % 4 == 0) {
          FailRequest request;
          request.id = l.id;
          request.lease_token = l.token;
          (void)engine.Fail(l.queue, request);
        } else {
          (void)engine.Complete(l.queue, {CompleteItem{l.id, l.token}});
        }
      } else if (choice < 92) {
        const std::string key = random_key();
        const size_t slash = key.find('/');
        if (slash != std::string::npos) {
          (void)engine.Cancel(key.substr(0, slash), {key.substr(slash + 1)});
        }
      } else if (choice < 97) {
        (void)engine.PurgeQueue(queue,
                                {rng() % 2 ? MessageState::kWaiting : MessageState::kPending});
      } else if (choice < 98 && queue == "d3") {
        (void)engine.DeleteQueue("d3");  // the next enqueue creates it again
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();
  EXPECT_GT(waiting_enqueued.load(), 500u) << "too few dependents to test anything";

  Engine replayed(options, &clock, nullptr);
  size_t derived = 0;
  for (const engine_test::RecordedEffect& e : sink.All()) {
    if (e.derived) {
      ++derived;
      continue;
    }
    Status s = replayed.Apply(e.View());
    ASSERT_TRUE(s.ok()) << EffectTypeName(e.type) << " " << e.queue << "/" << e.id << ": "
                        << s.detail();
  }
  EXPECT_GT(derived, 100u) << "too few releases and failures to test anything";
  EXPECT_EQ(replayed.Digest(), engine.Digest());

  engine_test::RecordingSink exported;
  engine.ExportState(&exported);
  Engine loaded(options, &clock, nullptr);
  for (const engine_test::RecordedEffect& e : exported.All()) {
    ASSERT_TRUE(loaded.Apply(e.View()).ok()) << EffectTypeName(e.type) << " " << e.id;
  }
  EXPECT_EQ(loaded.Digest(), engine.Digest());
}

// Batches under concurrency: threads create batches, enqueue members into any queue (across
// shards), seal them, complete, fail into a dead-letter queue, cancel, purge and delete queues,
// while thread 0 runs the timers (lease expiry, GC of done batches). Each done batch's callback
// is enqueued exactly once; the effects without the derived ones, in sink order, replay to the
// same digest (which covers the batches); an export loads to it too.
TEST(BatchConcurrencyTest, EachCallbackIsEnqueuedOnceAndTheLoggedEffectsReplayToTheSameState) {
  constexpr int kThreads = 6;
  constexpr int kOpsPerThread = 2'000;
  ManualClock clock(1'700'000'000'000);
  engine_test::RecordingSink sink;
  Engine::Options options;
  options.shards = 4;
  options.seed = 7;
  Engine engine(options, &clock, &sink);
  QueueSettings failing;
  failing.max_attempts = 1;
  failing.lease_ms = kLeaseMs;
  failing.dead_letter_queue = "dlq";
  ASSERT_TRUE(engine.CreateQueue("dlq", {}).ok());
  ASSERT_TRUE(engine.CreateQueue("b0", failing).ok());
  for (const char* q : {"b1", "b2", "b3"}) ASSERT_TRUE(engine.CreateQueue(q, {}).ok());
  const std::vector<std::string> queues = {"b0", "b1", "b2", "b3"};
  std::mutex batches_mu;
  std::vector<std::string> batches;
  std::atomic<uint64_t> members{0};

  auto worker = [&](int thread) {
    std::mt19937 rng(static_cast<uint32_t>(thread * 104'729 + 3));
    struct Lease {
      std::string queue, id;
      uint64_t token;
    };
    std::vector<Lease> held;
    int next_id = 0;
    auto random_batch = [&]() -> std::string {
      std::lock_guard<std::mutex> lock(batches_mu);
      return batches.empty() ? std::string() : batches[rng() % batches.size()];
    };
    for (int op = 0; op < kOpsPerThread; ++op) {
      if (thread == 0 && op % 4 == 0) {
        clock.Advance(5);
        engine.Advance(clock.NowMs());
      }
      const std::string& queue = queues[rng() % queues.size()];
      const unsigned choice = rng() % 100;
      if (choice < 4) {
        CreateBatchRequest r;
        r.id = "t" + std::to_string(thread) + "-batch" + std::to_string(next_id++);
        r.callback = BatchCallback{"callbacks", "", 0, "done", {}, std::nullopt};
        r.retention_ms = 200;
        if (engine.CreateBatch(r).ok()) {
          std::lock_guard<std::mutex> lock(batches_mu);
          batches.push_back(r.id);
        }
      } else if (choice < 8) {
        const std::string batch = random_batch();
        if (!batch.empty()) (void)engine.SealBatch(batch);
      } else if (choice < 40) {
        EnqueueItem item;
        item.id = "t" + std::to_string(thread) + "-" + std::to_string(next_id++);
        item.batch = random_batch();
        if (engine.Enqueue(queue, {item})[0].ok() && !item.batch.empty()) members.fetch_add(1);
      } else if (choice < 65) {
        DequeueRequest request;
        request.lease_ms = kLeaseMs;
        auto r = engine.Dequeue(queue, request);
        if (r.ok()) {
          for (const MessageRecord& m : *r) held.push_back({queue, m.id, m.lease_token});
        }
      } else if (choice < 90 && !held.empty()) {
        const size_t i = rng() % held.size();
        const Lease l = held[i];
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        if (rng() % 4 == 0) {
          FailRequest request;
          request.id = l.id;
          request.lease_token = l.token;
          (void)engine.Fail(l.queue, request);
        } else if (rng() % 8 == 0) {
          (void)engine.Cancel(l.queue, {l.id});
        } else {
          (void)engine.Complete(l.queue, {CompleteItem{l.id, l.token}});
        }
      } else if (choice < 95) {
        (void)engine.PurgeQueue(queue, {MessageState::kPending});
      } else if (choice < 96 && queue == "b3") {
        (void)engine.DeleteQueue("b3");  // the next enqueue creates it again
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();
  EXPECT_GT(members.load(), 1'000u) << "too few members to test anything";

  // Every batch that was done (still kept, or removed after its retention) has exactly one
  // callback, and no other message entered "callbacks".
  std::map<std::string, int> callbacks;
  std::set<std::string> removed;
  Engine replayed(options, &clock, nullptr);
  for (const engine_test::RecordedEffect& e : sink.All()) {
    if (e.type == EffectType::kMessageEnqueued && e.queue == "callbacks") ++callbacks[e.id];
    if (e.type == EffectType::kBatchRemoved) removed.insert(e.batch);
    if (e.derived) continue;
    Status s = replayed.Apply(e.View());
    ASSERT_TRUE(s.ok()) << EffectTypeName(e.type) << " " << e.queue << "/" << e.id << ": "
                        << s.detail();
  }
  size_t done = removed.size();
  for (const std::string& id : batches) {
    auto b = engine.GetBatch(id);
    if (b.ok()) {
      EXPECT_EQ(b->done, b->sealed && b->counts.active() == 0) << id;
      done += b->done;
    }
  }
  EXPECT_GT(done, 10u) << "too few done batches to test anything";
  EXPECT_EQ(callbacks.size(), done);
  for (const auto& [id, n] : callbacks) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(replayed.Digest(), engine.Digest());

  engine_test::RecordingSink exported;
  engine.ExportState(&exported);
  Engine loaded(options, &clock, nullptr);
  for (const engine_test::RecordedEffect& e : exported.All()) {
    ASSERT_TRUE(loaded.Apply(e.View()).ok()) << EffectTypeName(e.type) << " " << e.id;
  }
  EXPECT_EQ(loaded.Digest(), engine.Digest());
}

}  // namespace
}  // namespace sundial
