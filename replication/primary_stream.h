// PrimaryStream: what a primary does for one standby connected to its replication port
// (docs/replication.md, "Catching up" and "Streaming"). No sockets: the replication port's
// session (server/replication_port.cc) carries the frames.
//
// The standby's Hello is checked (cluster, token, name) and answered with a Welcome: stream
// from its end, truncate its divergent tail, or take a snapshot (replication/catch_up.h). A
// standby that promised a newer epoch than this primary's is refused: this node is no longer
// the primary, whatever it believes. Then the stream: the newest snapshot's bytes first (for a
// snapshot), then the log's records as the segments hold them (WalTail), up to what the log
// has written — before it is synced here, so the standby's fsync runs beside the primary's.
// The standby's Acks (of this epoch only) are reported to the caller.
//
// Thread safety: one thread (the session's loop).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "engine/engine.h"
#include "engine/status.h"
#include "replication/wal_tail.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"

namespace sundial::replication {

struct PrimaryEnv {
  wal::GroupCommitLog* log = nullptr;
  Engine* engine = nullptr;
  wal::FileSystem* fs = nullptr;
  std::string dir;
  std::string cluster;
  std::string token;  // empty: none needed
  uint64_t epoch = 0;
  // A standby's acknowledgement of this epoch: every record below `flushed_end` is fsynced there.
  std::function<void(const std::string& node, uint64_t flushed_end)> on_ack;
  // A standby promised a newer epoch than this primary's: another node leads now.
  std::function<void(uint64_t newer_epoch)> on_newer_epoch;
};

class PrimaryStream {
 public:
  explicit PrimaryStream(PrimaryEnv env) : env_(std::move(env)), tail_(env_.fs, env_.dir) {}

  enum class Next : uint8_t {
    kContinue,  // nothing more to send for this frame
    kSend,      // frames are ready: TakeOutput()
    kClose,     // send what is ready (a Refusal, a final Welcome), then close (why())
  };
  // One frame from the standby (8-byte aligned).
  Next OnFrame(std::string_view frame);

  // Fills the output with what the standby should get next, up to about `budget` bytes: the
  // rest of a snapshot, then records below the log's written end. Returns whether anything
  // was added.
  bool Produce(size_t budget);
  // The frames ready to send (each a finished FlatBuffer), taken.
  std::vector<std::string> TakeOutput();
  // A Heartbeat (nothing else was sent for a while).
  void Heartbeat();

  bool streaming() const { return state_ == State::kStreaming || state_ == State::kSnapshot; }
  const std::string& node() const { return node_; }
  const std::string& why() const { return why_; }
  uint64_t acked_end() const { return acked_end_; }
  uint64_t sent_end() const { return tail_.position(); }

 private:
  enum class State : uint8_t { kHello, kSnapshot, kStreaming, kDone };

  Next Refuse(Code code, std::string message);
  Next OnHello(const void* hello);

  PrimaryEnv env_;
  WalTail tail_;
  WalTail::Chunk chunk_;
  State state_ = State::kHello;
  std::string node_;
  uint64_t acked_end_ = 0;
  // A snapshot being sent.
  std::unique_ptr<wal::SequentialFile> snapshot_;
  uint64_t snapshot_lsn_ = 0;
  uint64_t snapshot_offset_ = 0;
  std::vector<std::string> out_;
  std::string why_;
};

}  // namespace sundial::replication
