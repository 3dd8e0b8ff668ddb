// BatchTable: the server's batches and their members (docs/semantics.md, "Batches"). Internal
// to engine/; the engine owns one for all queues, since a batch's members may be in any queue
// (Sidekiq's batches): batches are server-wide, named by their id alone.
//
// Per batch: its callback template, whether it is sealed, and counters of its members per
// outcome (BatchCounts). Per active member (a message that joined and is not terminal yet),
// one entry "queue/id" -> batch number. Nothing is ever scanned: a member's terminal change
// (or its leaving the queue) touches its own entry and its batch's counters, so a fan-in of N
// members costs N entries and N counter updates, and get_batch reads four counters. A member
// leaves the table at its first terminal state: its outcome is counted once (a redrive after
// errored does not bring it back, as for dependencies).
//
// A batch is done when it is sealed and has no active member; MarkDone records it and starts
// its retention (done_at + retention_ms), after which DueForRemoval lists it for GC. The engine
// enqueues the callback itself, in the same call as the change that made the batch done.
//
// Durability: the log replays the causes (kBatchCreated, the enqueue of a member with its
// `batch`, the members' changes, kBatchSealed, kBatchRemoved). A snapshot carries each batch
// (Restore: its whole BatchInfo, in creation order) and each active member (AddMember).
//
// Thread safety: none; the engine guards it with batches_mu_ (engine.h, lock order).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "engine/types.h"

namespace sundial {

// How a member stopped being active.
enum class BatchOutcome : uint8_t { kCompleted, kCanceled, kErrored };

// The checks of create_batch that need no state: the id, the template, the retention.
Status ValidateCreateBatch(const CreateBatchRequest& request);
// The callback's message id: the template's, else "batch:<id>".
std::string BatchCallbackId(const CreateBatchRequest& request);

class BatchTable {
 public:
  BatchTable() = default;
  BatchTable(const BatchTable&) = delete;
  BatchTable& operator=(const BatchTable&) = delete;

  const BatchInfo* Find(std::string_view id) const;
  // Adds a batch as `info` describes it (a new one, or one restored from a snapshot with its
  // counts). REQUIRES: no batch `info.id`. A done one gets its GC timer.
  void Add(BatchInfo info);
  // Removes batch `id` (GC). REQUIRES: it has no active member.
  void Remove(std::string_view id);

  // Message `key` ("queue/id") joins batch `id`. REQUIRES: the batch exists, is not done,
  // and `key` is not an active member. `count`: false when restoring a snapshot's member
  // (already in the restored counts).
  void AddMember(std::string_view id, std::string_view key, bool count = true);
  // The batch whose active member `key` is, if any.
  const BatchInfo* BatchOf(std::string_view key) const;
  // Active member `key` stopped being active with `outcome`: counted, forgotten. Returns its
  // batch's id when that batch is now sealed with no active member (the caller marks it done
  // and enqueues its callback); nullopt otherwise, and when `key` is no active member.
  std::optional<std::string> Finish(std::string_view key, BatchOutcome outcome);
  // Seals batch `id` (it exists). True when it is now sealed with no active member and not
  // done yet.
  bool Seal(std::string_view id);
  // Batch `id` is done at `now`: its retention starts.
  void MarkDone(std::string_view id, TimeMs now);

  // Earliest done_at + retention_ms of a done batch, INT64_MAX when none.
  TimeMs NextDueTime() const;
  // Done batches whose retention ran out at `now`, earliest first.
  std::vector<std::string> DueForRemoval(TimeMs now) const;

  // Snapshots: every batch in creation order, then every active member (key, batch id) in the
  // order they joined. Views are valid during the call.
  void ForEachBatch(const std::function<void(const BatchInfo&)>& visit) const;
  void ForEachMember(
      const std::function<void(std::string_view key, std::string_view batch)>& visit) const;
  // XXH3 of every batch (by id) and every active member (order-independent); 0 when there is
  // no batch, so a state without batches keeps the digest it had before they existed.
  uint64_t Digest() const;

  size_t batch_count() const { return index_.size(); }
  size_t member_count() const { return members_.size(); }

 private:
  struct Slot {
    BatchInfo info;
    uint64_t created = 0;  // creation order
    bool in_use = false;
  };
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Member {
    uint32_t batch = 0;
    uint64_t joined = 0;
  };
  std::optional<uint32_t> Lookup(std::string_view id) const;
  static TimeMs RemovalTime(const BatchInfo& info);

  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  boost::unordered_flat_map<std::string, uint32_t, KeyHash, std::equal_to<>> index_;
  boost::unordered_flat_map<std::string, Member, KeyHash, std::equal_to<>> members_;
  std::set<std::pair<TimeMs, std::string>> removals_;  // (done_at + retention_ms, id)
  uint64_t next_created_ = 1;
  uint64_t next_joined_ = 1;
};

}  // namespace sundial
