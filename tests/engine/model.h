// Model: a deliberately simple reference implementation of the engine's operations, written from
// docs/semantics.md alone, for the differential test (model_test.cc).
//
// It shares nothing with engine/ but the public value types (types.h, status.h, clock.h): queues
// are a std::vector, each queue's messages a std::vector, and every operation is a linear scan.
// Speed is not a goal; being obviously right is. Each method has the signature of the Engine
// method of the same name and returns the same codes and values.
//
// Nondeterminism. The engine draws lease tokens, generated ids and fail-backoff jitter at random;
// the model cannot predict them, so it is told them:
//   - Enqueue takes `generated_ids`: the id to use for item i when its id is empty;
//   - Dequeue takes `lease_tokens`: the token for the k-th message it leases;
//   - Fail takes `choose_backoff`: called with the legal range [lo, hi] of the jittered backoff
//     delay, it returns the delay to use.
// When a value is not given the model uses a placeholder that the engine will not match, so a
// divergence still shows.
//
// Checks run in this order (semantics.md leaves most of it open; this is the engine's order):
// the queue name; then every check of the arguments alone (ids, limits, filters, settings); then
// the queue's existence; then the message and its state. Batch operations (enqueue, complete,
// cancel, redrive) check the batch size and the queue for all items, then each item on its own.
//
// Browse cursors are the model's own ("<priority>:<seq>"); they are never comparable with the
// engine's.
//
// Thread safety: none (single-threaded tests only).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/clock.h"
#include "engine/status.h"
#include "engine/types.h"

namespace sundial::model {

inline constexpr uint64_t kModelMessageOverheadBytes = 80;
inline constexpr int64_t kMaxLeaseMs = 43'200'000;
inline constexpr int64_t kMaxDelayMs = 3'153'600'000'000;
inline constexpr uint32_t kMaxAttemptsLimit = 1'000'000;
inline constexpr size_t kMaxExclusivityKeyBytes = 64;

class Model {
 public:
  struct Options {
    uint64_t memory_budget_bytes = 0;  // 0: unlimited
    size_t max_payload_bytes = 1 << 20;
    size_t max_result_bytes = kDefaultMaxResultBytes;
    bool auto_create_queues = true;
  };

  // A message as the model stores it: the record get() returns, plus the queue-internal fields.
  struct Message {
    MessageRecord record;
    uint64_t seq = 0;  // enqueue sequence in its queue
    TimeMs gc_at = 0;  // terminal: when retention GC removes it
  };

  struct Queue {
    std::string name;
    QueueSettings settings;
    uint64_t next_seq = 1;
    std::vector<Message> messages;  // in no particular order
  };

  // Returns the backoff delay to use, in [lo, hi].
  using ChooseBackoff = std::function<int64_t(int64_t lo, int64_t hi)>;

  Model(Options options, const Clock* clock);

  // ---- Queues -------------------------------------------------------------------------------
  Result<QueueInfo> CreateQueue(std::string_view name, const QueueSettings& settings);
  Result<QueueInfo> UpdateQueue(std::string_view name, const QueueSettingsUpdate& update);
  Result<QueueInfo> GetQueue(std::string_view name) const;
  std::vector<QueueInfo> ListQueues() const;
  Status DeleteQueue(std::string_view name);
  Result<uint64_t> PurgeQueue(std::string_view name, const std::vector<MessageState>& states);

  // ---- Messages -----------------------------------------------------------------------------
  std::vector<Result<EnqueueResult>> Enqueue(std::string_view queue, std::vector<EnqueueItem> items,
                                             const std::vector<std::string>& generated_ids = {});
  Result<std::vector<MessageRecord>> Dequeue(std::string_view queue, const DequeueRequest& request,
                                             const std::vector<uint64_t>& lease_tokens = {});
  std::vector<Status> Complete(std::string_view queue, const std::vector<CompleteItem>& items);
  Result<FailResult> Fail(std::string_view queue, const FailRequest& request,
                          const ChooseBackoff& choose_backoff = nullptr);
  Result<TimeMs> Extend(std::string_view queue, std::string_view id, uint64_t lease_token,
                        int64_t lease_ms);
  std::vector<Status> Cancel(std::string_view queue, const std::vector<std::string>& ids);
  Result<uint64_t> CancelByFilter(std::string_view queue, const Filter& filter);
  Result<uint64_t> Reprioritize(std::string_view queue, std::string_view id,
                                const ReprioritizeRequest& request);
  Result<uint64_t> ReprioritizeByFilter(std::string_view queue, const Filter& filter,
                                        const ReprioritizeRequest& request);
  std::vector<Status> Redrive(std::string_view queue, const std::vector<std::string>& ids);
  Result<uint64_t> RedriveByFilter(std::string_view queue, const Filter& filter);

  Result<MessageRecord> Get(std::string_view queue, std::string_view id) const;
  std::vector<Result<MessageOutcome>> Outcomes(std::string_view queue,
                                               const std::vector<std::string>& ids) const;
  Result<BrowsePage> Browse(std::string_view queue, const BrowseRequest& request) const;
  Result<StateCounts> Count(std::string_view queue, const Filter& filter) const;
  Result<Explanation> Explain(std::string_view queue, std::string_view id) const;
  Result<Explanation> ExplainFilter(std::string_view queue, const Filter& filter) const;

  // ---- Time and inspection ------------------------------------------------------------------
  uint64_t Advance(TimeMs now);
  uint64_t memory_bytes() const;

  // For the test driver: the model's whole state (queues in creation order).
  const std::vector<Queue>& queues() const { return queues_; }
  const Queue* FindQueue(std::string_view name) const;

  // Accounted bytes of one message: overhead + id + payload + packed metadata + result.
  static uint64_t AccountedBytes(const MessageRecord& record);
  static uint64_t PackedMetadataBytes(const Metadata& metadata);
  // The legal range [lo, hi] of a jittered backoff for a message failing after `attempts`.
  static std::pair<int64_t, int64_t> BackoffRange(const QueueSettings& settings, uint32_t attempts);

 private:
  Queue* MutableQueue(std::string_view name);
  Result<EnqueueResult> EnqueueOne(size_t queue_index, const EnqueueItem& item,
                                   const std::string& generated_id, TimeMs now);
  QueueInfo Info(const Queue& queue, TimeMs now) const;
  Status ValidateSettings(std::string_view name, const QueueSettings& settings) const;
  // Turns the running message at `index` of `queue` errored, moving it to the dead-letter queue
  // when the rules allow. Returns the dead-letter queue's name when it moved.
  std::string ErrorOrDeadLetter(Queue& queue, size_t index, TimeMs now);
  // Makes the message at `index` terminal; with retention 0 removes it instead (returns true:
  // `index` then names the message after it).
  bool MakeTerminal(Queue& queue, size_t index, MessageState state, TimeMs now);

  Options options_;
  const Clock* clock_;
  std::vector<Queue> queues_;
  uint64_t placeholder_counter_ = 0;
};

// Validation helpers (public so the test driver can build valid and invalid inputs).
bool IsValidUtf8(std::string_view s);
bool IsValidQueueName(std::string_view name);
// Truncates to at most `max_bytes` without splitting a UTF-8 sequence.
std::string TruncateUtf8(std::string_view s, size_t max_bytes);

}  // namespace sundial::model
