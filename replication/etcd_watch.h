// Watch: etcd's /v3/watch over the JSON gateway, on its own connection and its own thread,
// delivering the PUT and DELETE events of a key or a prefix from a revision on (docs/
// replication.md "Watches").
//
// The gateway streams one JSON object per message ({"result": {...}}, chunked). Start() opens
// the stream and returns once etcd has confirmed the watch ("created"), so a caller that
// re-reads after Start has a watch that misses nothing from `start_revision` on. Events then
// arrive on the watch's thread, a batch per etcd message, in revision order (all events of one
// transaction are in one batch). Every event of a key is delivered; no event is delivered
// twice on one Watch.
//
// A watch ends in one of two ways:
//   - Stop() (or the destructor), from any other thread: returns promptly, whatever etcd does
//     (even paused by SIGSTOP); after it returns no callback runs. No on_broken for a stop.
//   - It breaks: the connection drops or times out (UNAVAILABLE), etcd cancels it
//     (FAILED_PRECONDITION when start_revision is compacted; UNAVAILABLE when its member loses
//     the leader, as every request asks with `hasleader`), or etcd sends something that is not
//     its JSON (INTERNAL). on_broken runs once, last, with `resume_revision`: the revision a
//     new watch must start from to miss nothing (the last delivered event's mod_revision + 1,
//     or later after a progress notification). After a compaction the events between
//     resume_revision and compact_revision are gone: re-read the keys, then watch from the
//     read's header.revision + 1. Patroni's rule fits: on a break, re-read and re-watch.
// A watch does not reconnect by itself: the caller decides (it may have to re-read first).
//
// A paused or partitioned etcd sends nothing, which looks like a quiet key. `idle_timeout`
// (when set) breaks the watch after that long without any message; etcd sends progress
// notifications (requested here) every --experimental-watch-progress-notify-interval (10 min
// by default), so set the server's interval below the idle timeout when using one. The HA
// loop's own lease keep-alives detect an unreachable etcd sooner; the watch only wakes it up.
//
// Threading: the callbacks run on the watch's thread, one at a time, and must not block for
// long (events are not read meanwhile) nor call Stop() or destroy the Watch. WatchQueue below
// hands the events to another thread instead.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/mutex.h"
#include "replication/etcd_client.h"

namespace sundial::replication {

struct WatchEvent {
  enum class Type : uint8_t { kPut, kDelete };
  Type type = Type::kPut;
  // For a DELETE: the key, mod_revision (the delete's revision) and no value.
  KeyValue kv;
  // The key before this event, when WatchOptions::prev_kv asked for it.
  std::optional<KeyValue> prev_kv;
};

// Why a watch ended (not for Stop()).
struct WatchBreak {
  EtcdError error;
  int64_t resume_revision = 0;   // start the next watch here
  int64_t compact_revision = 0;  // when etcd cancelled for a compaction: its earliest revision
};

struct WatchOptions {
  std::string key;
  bool prefix = false;         // every key starting with `key`
  int64_t start_revision = 0;  // 0: from the next change on; else replay from this revision
  bool prev_kv = false;        // deliver the previous value with each event
  // Break (UNAVAILABLE) after this long without any message from etcd; 0: never.
  std::chrono::milliseconds idle_timeout{0};
  // One endpoint's share of Start's deadline (as in EtcdClientOptions).
  std::chrono::milliseconds attempt_timeout{0};
  size_t max_message_bytes = 16 << 20;  // a bigger message breaks the watch (INTERNAL)
};

struct WatchCallbacks {
  std::function<void(const std::vector<WatchEvent>& events)> on_events;
  std::function<void(const WatchBreak& why)> on_broken;
};

class Watch {
 public:
  // Opens the watch on the first of `endpoints` that confirms it, by `deadline` (default:
  // 1 s). UNAVAILABLE when none did; INVALID_ARGUMENT for an empty key (with prefix: empty
  // means every key); what etcd answered otherwise.
  static EtcdResult<std::unique_ptr<Watch>> Start(const std::vector<EtcdEndpoint>& endpoints,
                                                  WatchOptions options, WatchCallbacks callbacks,
                                                  Deadline deadline = {});
  ~Watch();  // Stop()
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // Ends the watch and joins its thread. Idempotent. Not from a callback.
  void Stop();

  const EtcdEndpoint& endpoint() const;
  // The revision a new watch would start from to miss nothing delivered so far.
  int64_t resume_revision() const;

 private:
  struct Impl;
  explicit Watch(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A bounded hand-off from a Watch's thread to a consumer thread: callbacks() feed it, Pop()
// waits for the next item. Items are event batches and, last, the break. When `capacity`
// batches are waiting, the queue stops taking events and ends with a RESOURCE_EXHAUSTED break
// whose resume_revision is the first revision it dropped (the consumer re-reads and
// re-watches), so a slow consumer never blocks the watch nor grows memory without bound.
//
// One queue per Watch: after the break it takes nothing more (the next watch gets a new queue).
// Thread safety: all members are thread-safe. The queue must outlive the Watch feeding it.
class WatchQueue {
 public:
  struct Item {
    std::vector<WatchEvent> events;  // empty when `broken` is set
    std::optional<WatchBreak> broken;
  };

  explicit WatchQueue(size_t capacity = 1024) : capacity_(capacity) {}

  WatchCallbacks callbacks();
  // The next item, or nullopt when `deadline` passes first.
  std::optional<Item> Pop(EtcdClock::time_point deadline);

 private:
  void PushEvents(const std::vector<WatchEvent>& events);
  void PushBreak(const WatchBreak& why);

  const size_t capacity_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Item> items_ GUARDED_BY(mu_);
  bool ended_ GUARDED_BY(mu_) = false;  // a break is queued; nothing more is taken
};

}  // namespace sundial::replication
