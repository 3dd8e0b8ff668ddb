// StandbyStream: what a standby does with what its primary sends, one connection's worth
// (docs/replication.md, "Streaming" and "Fencing"). No sockets: the standby's link (server/)
// carries the bytes, and the fuzz target feeds it garbage.
//
// A standby says Hello (its promised epoch, its log's epochs and end); the primary's Welcome
// says how it catches up. Streamed Records are verified record by record (length, type,
// checksum over the primary's segment number), must continue the standby's log exactly (the
// first LSN is its end) and belong to the epoch it promised; each effect is appended to its own
// log and applied to its engine, in order. Nothing the primary sends is acknowledged before it
// is fsynced here (the caller waits for the log, then sends Ack), and nothing of an epoch older
// than the promise is ever accepted: a Welcome of a newer epoch is promised (durably) first.
//
// A frame that breaks any rule ends the connection (kClose, with the reason) before anything
// of it is applied past the bad record: the standby then dials again and starts from its log.
//
// Thread safety: one thread (the standby's link).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "engine/clock.h"
#include "engine/effect.h"
#include "engine/engine.h"
#include "engine/status.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"

namespace sundial::replication {

// The standby's durable promise: the highest epoch it has seen and will never go back on
// (replication/node_state.h implements it in the data directory).
class EpochPromise {
 public:
  virtual ~EpochPromise() = default;
  virtual uint64_t promised() const = 0;
  // Durable before it returns: written, fsynced.
  virtual Status Promise(uint64_t epoch) = 0;
};

struct StandbyEnv {
  wal::GroupCommitLog* log = nullptr;
  Engine* engine = nullptr;
  EffectSink* observer = nullptr;  // after the log and the engine (subscriptions); may be null
  FloorClock* clock = nullptr;     // raised to each effect's time; may be null
  EpochPromise* promise = nullptr;
  wal::FileSystem* fs = nullptr;  // a snapshot received goes into `dir`
  std::string dir;
  std::string cluster;
  std::string node;
  std::string token;
};

class StandbyStream {
 public:
  explicit StandbyStream(StandbyEnv env) : env_(std::move(env)) {}

  // The first frame to send.
  std::string Hello() const;

  enum class Next : uint8_t {
    kContinue,       // nothing to do
    kAck,            // records were appended: make them durable, then send Ack()
    kClose,          // a rule was broken (why()): close and dial again
    kTruncate,       // keep the log below truncate_to(), reload, dial again (the node restarts)
    kSnapshotReady,  // a snapshot is complete in `dir` (snapshot_path()): install it, restart
  };
  // One frame from the primary (8-byte aligned).
  Next OnFrame(std::string_view frame);

  // After kAck: the Ack to send once the log is durable up to log->AppendedEndLsn().
  std::string Ack() const;

  const std::string& why() const { return why_; }
  uint64_t epoch() const { return epoch_; }
  uint64_t truncate_to() const { return truncate_to_; }
  uint64_t snapshot_lsn() const { return snapshot_lsn_; }
  const std::string& snapshot_path() const { return snapshot_path_; }
  // The primary's durable end and log end as it last said (for lag).
  uint64_t primary_durable_end() const { return primary_durable_end_; }
  uint64_t primary_end() const { return primary_end_; }
  // Records appended through this stream.
  uint64_t records() const { return records_; }
  // After kClose: this node's state can no longer be trusted to continue its log (a record did
  // not apply, or its log failed): it must start over from a snapshot.
  bool must_reseed() const { return reseed_; }

 private:
  enum class State : uint8_t { kHello, kStreaming, kSnapshot, kDone };

  Next Close(std::string why);
  Next OnWelcome(const void* welcome);
  Next OnRecords(const void* records);
  Next OnSnapshotChunk(const void* chunk);

  StandbyEnv env_;
  State state_ = State::kHello;
  uint64_t epoch_ = 0;  // the primary's, accepted
  uint64_t truncate_to_ = 0;
  uint64_t snapshot_lsn_ = 0;
  uint64_t snapshot_received_ = 0;
  std::string snapshot_path_;
  std::unique_ptr<wal::WritableFile> snapshot_file_;
  uint64_t primary_durable_end_ = 0;
  uint64_t primary_end_ = 0;
  uint64_t records_ = 0;
  bool reseed_ = false;
  std::string why_;
};

}  // namespace sundial::replication
