// Shared fixture of the engine unit tests: an Engine on a ManualClock whose effects go to a
// recording sink, and short helpers for the calls every test makes. Time only moves through
// AdvanceTime (clock and engine timers together) or AdvanceClockOnly (the clock alone, to test
// what an operation sees before Advance has run). Never sleeps.
//
// The helpers report unexpected errors with EXPECT/ADD_FAILURE and return an empty value, so a
// test keeps its own assertions about what it is testing.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/clock.h"
#include "engine/effect.h"
#include "engine/engine.h"
#include "engine/metadata.h"
#include "engine/status.h"
#include "engine/types.h"

namespace sundial {

// GoogleTest printers, so failures read "NOT_FOUND" and "pending" rather than raw bytes.
inline void PrintTo(Code code, std::ostream* os) { *os << CodeName(code); }
inline void PrintTo(MessageState state, std::ostream* os) { *os << StateName(state); }
inline void PrintTo(QueueType type, std::ostream* os) { *os << QueueTypeName(type); }
inline void PrintTo(ExplainReason reason, std::ostream* os) { *os << ExplainReasonName(reason); }
inline void PrintTo(EffectType type, std::ostream* os) { *os << EffectTypeName(type); }
inline void PrintTo(ChangeCause cause, std::ostream* os) { *os << ChangeCauseName(cause); }
inline void PrintTo(const Status& status, std::ostream* os) {
  *os << CodeName(status.code()) << " " << status.detail();
}

namespace engine_test {

// An Effect with its own copies of every string and of the settings, so it outlives OnEffect.
struct RecordedEffect {
  EffectType type = EffectType::kMessageChanged;
  ChangeCause cause = ChangeCause::kNone;
  TimeMs time = 0;
  std::string queue;
  std::optional<QueueSettings> settings;
  uint8_t purge_states = 0;
  std::string id;
  MessageState from = MessageState::kPending;
  MessageState to = MessageState::kPending;
  uint64_t seq = 0;
  uint64_t version = 0;
  int64_t priority = 0;
  uint32_t attempts = 0;
  uint32_t max_attempts = 0;
  TimeMs due_at = 0;
  uint64_t lease_token = 0;
  TimeMs enqueued_at = 0;
  std::string payload;
  std::string packed_metadata;
  std::string error;
  std::string dead_letter_queue;
  std::string result;
  std::optional<std::vector<std::string>> depends_on;
  DependencyFailurePolicy on_dependency_failure = DependencyFailurePolicy::kCancel;
  std::string dependency_edges;
  bool derived = false;
  std::optional<ScheduleSpec> schedule;
  ScheduleProgress schedule_progress;
  std::string batch;
  BatchFields batch_fields;
  std::string worker_id;
  std::string note;
  int64_t tat_us = 0;
  bool gate_record = false;
  KeyLimits key_limits;
  bool restated = false;
  std::string history;
  TimeMs expires_at = 0;

  static RecordedEffect CopyOf(const Effect& e) {
    RecordedEffect r;
    r.type = e.type;
    r.cause = e.cause;
    r.time = e.time;
    r.queue = std::string(e.queue);
    if (e.settings != nullptr) r.settings = *e.settings;
    r.purge_states = e.purge_states;
    r.id = std::string(e.id);
    r.from = e.from;
    r.to = e.to;
    r.seq = e.seq;
    r.version = e.version;
    r.priority = e.priority;
    r.attempts = e.attempts;
    r.max_attempts = e.max_attempts;
    r.due_at = e.due_at;
    r.lease_token = e.lease_token;
    r.enqueued_at = e.enqueued_at;
    r.payload = std::string(e.payload);
    r.packed_metadata = std::string(e.packed_metadata);
    r.error = std::string(e.error);
    r.dead_letter_queue = std::string(e.dead_letter_queue);
    r.result = std::string(e.result);
    if (e.depends_on != nullptr) r.depends_on = *e.depends_on;
    r.on_dependency_failure = e.on_dependency_failure;
    r.dependency_edges = std::string(e.dependency_edges);
    r.derived = e.derived;
    if (e.schedule != nullptr) r.schedule = *e.schedule;
    r.schedule_progress = e.schedule_progress;
    r.batch = std::string(e.batch);
    r.batch_fields = e.batch_fields;
    r.worker_id = std::string(e.worker_id);
    r.note = std::string(e.note);
    r.tat_us = e.tat_us;
    r.gate_record = e.gate_record;
    r.key_limits = e.key_limits;
    r.restated = e.restated;
    r.history = std::string(e.history);
    r.expires_at = e.expires_at;
    return r;
  }

  // An Effect viewing this record's strings: valid while this record lives and is not moved.
  Effect View() const {
    Effect e;
    e.type = type;
    e.cause = cause;
    e.time = time;
    e.queue = queue;
    e.settings = settings ? &*settings : nullptr;
    e.purge_states = purge_states;
    e.id = id;
    e.from = from;
    e.to = to;
    e.seq = seq;
    e.version = version;
    e.priority = priority;
    e.attempts = attempts;
    e.max_attempts = max_attempts;
    e.due_at = due_at;
    e.lease_token = lease_token;
    e.enqueued_at = enqueued_at;
    e.payload = payload;
    e.packed_metadata = packed_metadata;
    e.error = error;
    e.dead_letter_queue = dead_letter_queue;
    e.result = result;
    e.depends_on = depends_on ? &*depends_on : nullptr;
    e.on_dependency_failure = on_dependency_failure;
    e.dependency_edges = dependency_edges;
    e.derived = derived;
    e.schedule = schedule ? &*schedule : nullptr;
    e.schedule_progress = schedule_progress;
    e.batch = batch;
    e.batch_fields = batch_fields;
    e.worker_id = worker_id;
    e.note = note;
    e.tat_us = tat_us;
    e.gate_record = gate_record;
    e.key_limits = key_limits;
    e.restated = restated;
    e.history = history;
    e.expires_at = expires_at;
    return e;
  }

  Metadata metadata() const { return UnpackMetadata(packed_metadata).value_or(Metadata{}); }
};

// Thread-safe: OnEffect may be called from several shards at once.
class RecordingSink final : public EffectSink {
 public:
  void OnEffect(const Effect& effect) override {
    std::lock_guard<std::mutex> lock(mu_);
    effects_.push_back(RecordedEffect::CopyOf(effect));
  }
  std::vector<RecordedEffect> All() const {
    std::lock_guard<std::mutex> lock(mu_);
    return effects_;
  }
  // Returns the effects recorded so far and forgets them.
  std::vector<RecordedEffect> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(effects_, {});
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    effects_.clear();
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return effects_.size();
  }

 private:
  mutable std::mutex mu_;
  std::vector<RecordedEffect> effects_;
};

inline bool HasPair(const Metadata& metadata, std::string_view key, std::string_view value) {
  for (const MetadataPair& p : metadata) {
    if (p.key == key && p.value == value) return true;
  }
  return false;
}

inline std::vector<std::string> IdsOf(const std::vector<MessageRecord>& records) {
  std::vector<std::string> ids;
  for (const MessageRecord& r : records) ids.push_back(r.id);
  return ids;
}

inline std::vector<std::string> IdsOf(const std::vector<MessageSummary>& summaries) {
  std::vector<std::string> ids;
  for (const MessageSummary& s : summaries) ids.push_back(s.id);
  return ids;
}

inline QueueSettings ExclusiveSettings(std::string key = "key") {
  QueueSettings s;
  s.type = QueueType::kExclusive;
  s.exclusivity_key = std::move(key);
  return s;
}

inline EnqueueItem Item(std::string id, int64_t priority = 0, Metadata metadata = {},
                        std::string payload = "payload") {
  EnqueueItem item;
  item.id = std::move(id);
  item.priority = priority;
  item.metadata = std::move(metadata);
  item.payload = std::move(payload);
  return item;
}

inline constexpr TimeMs kStartTime = 1'700'000'000'000;

class EngineTest : public ::testing::Test {
 protected:
  static Engine::Options DefaultOptions() {
    Engine::Options options;
    options.shards = 4;
    options.seed = 42;
    return options;
  }

  EngineTest() : clock_(kStartTime) { Reset(DefaultOptions()); }

  // Replaces the engine with a new, empty one (the clock keeps its time).
  void Reset(const Engine::Options& options) {
    engine_.reset();
    sink_.Clear();
    engine_ = std::make_unique<Engine>(options, &clock_, &sink_);
  }

  Engine& engine() { return *engine_; }
  TimeMs Now() const { return clock_.NowMs(); }

  // Moves the clock and runs every timer now due.
  uint64_t AdvanceTime(int64_t ms) {
    clock_.Advance(ms);
    return engine_->Advance(clock_.NowMs());
  }
  // Moves the clock only: timers stay unprocessed until the next Advance.
  void AdvanceClockOnly(int64_t ms) { clock_.Advance(ms); }

  // A new engine fed every effect recorded so far that is not derived, as the WAL would be.
  std::unique_ptr<Engine> Replayed() {
    auto replayed = std::make_unique<Engine>(DefaultOptions(), &clock_, nullptr);
    for (const RecordedEffect& e : sink_.All()) {
      if (e.derived) continue;
      Status s = replayed->Apply(e.View());
      EXPECT_TRUE(s.ok()) << EffectTypeName(e.type) << " " << e.queue << "/" << e.id << ": "
                          << s.detail();
    }
    return replayed;
  }
  // A new engine loaded from ExportState, as a snapshot would be.
  std::unique_ptr<Engine> Exported() {
    RecordingSink exported;
    engine().ExportState(&exported);
    auto loaded = std::make_unique<Engine>(DefaultOptions(), &clock_, nullptr);
    for (const RecordedEffect& e : exported.All()) {
      Status s = loaded->Apply(e.View());
      EXPECT_TRUE(s.ok()) << EffectTypeName(e.type) << " " << e.queue << "/" << e.id << ": "
                          << s.detail();
    }
    return loaded;
  }

  void MakeQueue(std::string_view name, const QueueSettings& settings = {}) {
    Result<QueueInfo> r = engine_->CreateQueue(name, settings);
    EXPECT_TRUE(r.ok()) << "CreateQueue(" << name << "): " << CodeName(r.status().code()) << " "
                        << r.status().detail();
  }
  // `name`, whose messages move to `dead_letter_queue` (made too) at their first failure.
  void MakeQueueDeadLetteringAtFirstFailure(std::string_view name,
                                            std::string_view dead_letter_queue) {
    MakeQueue(dead_letter_queue);
    QueueSettings s;
    s.max_attempts = 1;
    s.dead_letter_queue = std::string(dead_letter_queue);
    MakeQueue(name, s);
  }

  Result<EnqueueResult> EnqueueOne(std::string_view queue, EnqueueItem item) {
    std::vector<EnqueueItem> items;
    items.push_back(std::move(item));
    std::vector<Result<EnqueueResult>> results = engine_->Enqueue(queue, std::move(items));
    if (results.size() != 1) {
      ADD_FAILURE() << "Enqueue of one item answered " << results.size() << " results";
      return Status(Code::kInternal, "test: wrong result count");
    }
    return std::move(results[0]);
  }

  // Enqueues and expects success; returns the id.
  std::string Put(std::string_view queue, EnqueueItem item) {
    Result<EnqueueResult> r = EnqueueOne(queue, std::move(item));
    EXPECT_TRUE(r.ok()) << "Enqueue: " << CodeName(r.status().code()) << " " << r.status().detail();
    return r.ok() ? r->id : std::string();
  }
  std::string Put(std::string_view queue, std::string id, int64_t priority = 0,
                  Metadata metadata = {}) {
    return Put(queue, Item(std::move(id), priority, std::move(metadata)));
  }
  std::string PutDelayed(std::string_view queue, std::string id, int64_t delay_ms,
                         int64_t priority = 0) {
    EnqueueItem item = Item(std::move(id), priority);
    item.delay_ms = delay_ms;
    return Put(queue, std::move(item));
  }

  // Dequeues and expects success (possibly empty).
  std::vector<MessageRecord> Take(std::string_view queue, uint32_t max = 1, Filter filter = {},
                                  std::optional<int64_t> lease_ms = std::nullopt) {
    DequeueRequest request;
    request.max = max;
    request.filter = std::move(filter);
    request.lease_ms = lease_ms;
    Result<std::vector<MessageRecord>> r = engine_->Dequeue(queue, request);
    EXPECT_TRUE(r.ok()) << "Dequeue: " << CodeName(r.status().code()) << " " << r.status().detail();
    return r.ok() ? std::move(r).value() : std::vector<MessageRecord>{};
  }
  // Dequeues exactly one message (expects one).
  MessageRecord TakeOne(std::string_view queue, Filter filter = {},
                        std::optional<int64_t> lease_ms = std::nullopt) {
    std::vector<MessageRecord> got = Take(queue, 1, std::move(filter), lease_ms);
    EXPECT_EQ(got.size(), 1u) << "expected one dequeued message from " << queue;
    return got.empty() ? MessageRecord{} : got[0];
  }
  std::vector<std::string> TakeIds(std::string_view queue, uint32_t max = 1, Filter filter = {}) {
    return IdsOf(Take(queue, max, std::move(filter)));
  }
  // Dequeues one at a time until nothing is returned; the ids in dequeue order.
  std::vector<std::string> DrainIds(std::string_view queue, Filter filter = {}) {
    std::vector<std::string> ids;
    for (int i = 0; i < 10'000; ++i) {
      std::vector<MessageRecord> got = Take(queue, 1, filter);
      if (got.empty()) break;
      ids.push_back(got[0].id);
    }
    return ids;
  }

  MessageRecord GetMessage(std::string_view queue, std::string_view id) {
    Result<MessageRecord> r = engine_->Get(queue, id);
    EXPECT_TRUE(r.ok()) << "Get(" << queue << ", " << id << "): " << CodeName(r.status().code());
    return r.ok() ? r.value() : MessageRecord{};
  }
  MessageState StateOf(std::string_view queue, std::string_view id) {
    return GetMessage(queue, id).state;
  }
  Code GetCode(std::string_view queue, std::string_view id) {
    return engine_->Get(queue, id).status().code();
  }
  StateCounts Counts(std::string_view queue, const Filter& filter = {}) {
    Result<StateCounts> r = engine_->Count(queue, filter);
    EXPECT_TRUE(r.ok()) << "Count(" << queue << "): " << CodeName(r.status().code());
    return r.ok() ? r.value() : StateCounts{};
  }
  QueueInfo GetQueueInfo(std::string_view queue) {
    Result<QueueInfo> r = engine_->GetQueue(queue);
    EXPECT_TRUE(r.ok()) << "GetQueue(" << queue << "): " << CodeName(r.status().code());
    return r.ok() ? r.value() : QueueInfo{};
  }

  Status CompleteOne(std::string_view queue, std::string id, uint64_t token) {
    std::vector<Status> r = engine_->Complete(queue, {CompleteItem{std::move(id), token}});
    if (r.size() != 1) {
      ADD_FAILURE() << "Complete of one item answered " << r.size() << " results";
      return Status(Code::kInternal, "test: wrong result count");
    }
    return r[0];
  }
  Result<FailResult> FailOne(std::string_view queue, std::string id, uint64_t token,
                             std::optional<int64_t> retry_delay_ms = std::nullopt,
                             std::string error = "boom") {
    FailRequest request;
    request.id = std::move(id);
    request.lease_token = token;
    request.error = std::move(error);
    request.retry_delay_ms = retry_delay_ms;
    return engine_->Fail(queue, request);
  }
  Status CancelOne(std::string_view queue, std::string id) {
    std::vector<Status> r = engine_->Cancel(queue, {std::move(id)});
    if (r.size() != 1) {
      ADD_FAILURE() << "Cancel of one id answered " << r.size() << " results";
      return Status(Code::kInternal, "test: wrong result count");
    }
    return r[0];
  }
  Status RedriveOne(std::string_view queue, std::string id) {
    std::vector<Status> r = engine_->Redrive(queue, {std::move(id)});
    if (r.size() != 1) {
      ADD_FAILURE() << "Redrive of one id answered " << r.size() << " results";
      return Status(Code::kInternal, "test: wrong result count");
    }
    return r[0];
  }
  Result<uint64_t> SetPriority(std::string_view queue, std::string_view id, int64_t priority) {
    ReprioritizeRequest request;
    request.priority = priority;
    return engine_->Reprioritize(queue, id, request);
  }
  Result<uint64_t> SetVisibleAt(std::string_view queue, std::string_view id, TimeMs visible_at) {
    ReprioritizeRequest request;
    request.visible_at = visible_at;
    return engine_->Reprioritize(queue, id, request);
  }

  // Dequeues and fails `id` until it is errored (queue without retry delay between attempts).
  void ExhaustAttempts(std::string_view queue, std::string_view id) {
    for (int i = 0; i < 100; ++i) {
      MessageRecord m = GetMessage(queue, id);
      if (m.state == MessageState::kErrored || m.id.empty()) return;
      std::vector<MessageRecord> got = Take(queue);
      if (got.empty() || got[0].id != id) {
        ADD_FAILURE() << "ExhaustAttempts: " << id << " was not the next dequeued message";
        return;
      }
      Result<FailResult> r = FailOne(queue, got[0].id, got[0].lease_token, 0);
      EXPECT_TRUE(r.ok());
      if (r.ok() && r->state == MessageState::kErrored) return;
    }
    ADD_FAILURE() << "ExhaustAttempts: " << id << " never became errored";
  }

  ManualClock clock_;
  RecordingSink sink_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace engine_test
}  // namespace sundial
