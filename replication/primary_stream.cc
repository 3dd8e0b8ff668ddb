#include "replication/primary_stream.h"

#include <algorithm>

#include "replication/catch_up.h"
#include "replication/replication_generated.h"
#include "replication/wire.h"
#include "wal/log_format.h"

namespace sundial::replication {
namespace {

constexpr size_t kChunkBytes = 1u << 20;  // a Records frame or a snapshot chunk

}  // namespace

PrimaryStream::Next PrimaryStream::Refuse(Code code, std::string message) {
  out_.push_back(EncodeRefusal(code, message, env_.epoch));
  why_ = std::move(message);
  state_ = State::kDone;
  return Next::kClose;
}

std::vector<std::string> PrimaryStream::TakeOutput() {
  std::vector<std::string> out;
  out.swap(out_);
  return out;
}

void PrimaryStream::Heartbeat() {
  if (state_ == State::kDone || state_ == State::kHello) return;
  out_.push_back(EncodeHeartbeat(env_.epoch, env_.log->AppendedEndLsn(), env_.log->DurableEnd()));
}

PrimaryStream::Next PrimaryStream::OnFrame(std::string_view bytes) {
  if (state_ == State::kDone) return Next::kClose;
  const wire::Frame* frame = VerifyFrame(bytes);
  if (frame == nullptr) {
    return Refuse(Code::kInvalidArgument, "replication: a frame that is not valid");
  }
  switch (frame->body_type()) {
    case wire::Body::Hello:
      return OnHello(frame->body_as_Hello());
    case wire::Body::Ack: {
      if (state_ == State::kHello) return Refuse(Code::kInvalidArgument, "replication: Ack first");
      const wire::Ack* a = frame->body_as_Ack();
      // Only an acknowledgement under this epoch counts: a standby that acknowledges under
      // another promised a newer leader, or never heard of this one.
      if (a->epoch() != env_.epoch) {
        if (a->epoch() > env_.epoch && env_.on_newer_epoch) env_.on_newer_epoch(a->epoch());
        return Refuse(Code::kFailedPrecondition, "replication: an Ack of another epoch");
      }
      // What it acknowledged cannot exceed what it was sent.
      const uint64_t flushed = std::min(a->flushed_end(), tail_.position());
      if (flushed > acked_end_) {
        acked_end_ = flushed;
        if (env_.on_ack) env_.on_ack(node_, acked_end_);
      }
      return Next::kContinue;
    }
    case wire::Body::Heartbeat:
      return Next::kContinue;
    case wire::Body::Refusal: {
      const wire::Refusal* r = frame->body_as_Refusal();
      if (r->epoch() > env_.epoch && env_.on_newer_epoch) env_.on_newer_epoch(r->epoch());
      why_ = "replication: the standby refused: " +
             (r->message() ? r->message()->str() : std::string());
      state_ = State::kDone;
      return Next::kClose;
    }
    default:
      return Refuse(Code::kInvalidArgument, "replication: a message only a primary sends");
  }
}

PrimaryStream::Next PrimaryStream::OnHello(const void* body) {
  const auto* h = static_cast<const wire::Hello*>(body);
  if (state_ != State::kHello) return Refuse(Code::kInvalidArgument, "replication: a second Hello");
  const std::string cluster = h->cluster() ? h->cluster()->str() : std::string();
  const std::string token = h->token() ? h->token()->str() : std::string();
  node_ = h->node() ? h->node()->str() : std::string();
  if (!env_.token.empty() && token != env_.token) {
    return Refuse(Code::kUnauthenticated, "replication: wrong token");
  }
  if (cluster != env_.cluster) {
    return Refuse(Code::kFailedPrecondition, "replication: this node is in cluster '" +
                                                 env_.cluster + "', not '" + cluster + "'");
  }
  if (node_.empty()) return Refuse(Code::kInvalidArgument, "replication: a Hello without a node");
  if (h->promised_epoch() > env_.epoch) {
    // It promised a newer leader: this node is no longer the primary.
    if (env_.on_newer_epoch) env_.on_newer_epoch(h->promised_epoch());
    return Refuse(Code::kNotPrimary, "replication: epoch " + std::to_string(env_.epoch) +
                                         " is over; the standby promised epoch " +
                                         std::to_string(h->promised_epoch()));
  }
  LogPosition standby;
  if (h->history() != nullptr) {
    for (const wire::EpochStart* e : *h->history())
      standby.history.push_back({e->epoch(), e->lsn()});
  }
  standby.end_lsn = h->end_lsn();
  LogPosition primary{env_.engine->Epochs(), env_.log->AppendedEndLsn()};
  auto oldest = tail_.OldestLsn();
  if (!oldest.ok()) return Refuse(Code::kUnavailable, "replication: " + oldest.status().ToString());
  const CatchUp catch_up = DecideCatchUp(primary, *oldest, standby);
  WelcomeMessage w;
  w.epoch = env_.epoch;
  w.primary_end_lsn = primary.end_lsn;
  switch (catch_up.kind) {
    case CatchUpKind::kStream:
      if (Status s = tail_.Seek(catch_up.lsn); !s.ok()) {
        return Refuse(Code::kUnavailable, "replication: " + s.ToString());
      }
      w.catch_up = CatchUpWire::kStream;
      w.from_lsn = catch_up.lsn;
      out_.push_back(EncodeWelcome(w));
      state_ = State::kStreaming;
      return Next::kSend;
    case CatchUpKind::kTruncate:
      w.catch_up = CatchUpWire::kTruncate;
      w.truncate_to = catch_up.lsn;
      out_.push_back(EncodeWelcome(w));
      why_ = "replication: the standby's log diverges at " + std::to_string(catch_up.lsn) +
             ": it truncates and dials again";
      state_ = State::kDone;
      return Next::kClose;
    case CatchUpKind::kSnapshot:
      break;
  }
  // The newest snapshot whose following records this node still holds.
  auto names = env_.fs->ListDir(env_.dir);
  if (!names.ok()) return Refuse(Code::kUnavailable, "replication: " + names.status().ToString());
  std::optional<uint64_t> newest;
  for (const std::string& name : *names) {
    if (auto lsn = wal::ParseSnapshotFileName(name); lsn && *lsn >= *oldest) {
      newest = std::max(newest.value_or(0), *lsn);
    }
  }
  if (!newest || !tail_.Seek(*newest).ok()) {
    return Refuse(Code::kUnavailable,
                  "replication: the standby needs a snapshot and none is ready yet; the next "
                  "checkpoint makes one: dial again");
  }
  auto file = env_.fs->NewSequentialFile(wal::JoinPath(env_.dir, wal::SnapshotFileName(*newest)));
  if (!file.ok()) return Refuse(Code::kUnavailable, "replication: " + file.status().ToString());
  snapshot_ = std::move(file).value();
  snapshot_lsn_ = *newest;
  snapshot_offset_ = 0;
  w.catch_up = CatchUpWire::kSnapshot;
  w.from_lsn = *newest;
  out_.push_back(EncodeWelcome(w));
  state_ = State::kSnapshot;
  return Next::kSend;
}

bool PrimaryStream::Produce(size_t budget) {
  size_t added = 0;
  while (added < budget) {
    if (state_ == State::kSnapshot) {
      std::string buffer(kChunkBytes, '\0');
      std::string_view part;
      if (!snapshot_->Read(kChunkBytes, buffer.data(), &part).ok()) {
        Refuse(Code::kUnavailable, "replication: reading the snapshot failed");
        return true;
      }
      const bool last = part.size() < kChunkBytes;
      out_.push_back(EncodeSnapshotChunk(snapshot_lsn_, snapshot_offset_, part, last));
      snapshot_offset_ += part.size();
      added += part.size() + 64;
      if (last) {
        snapshot_.reset();
        state_ = State::kStreaming;  // the records after the snapshot follow at once
      }
      continue;
    }
    if (state_ != State::kStreaming) break;
    // What the log has written (handed to the OS): the standby syncs it while this node does.
    if (tail_.position() >= env_.log->WrittenEnd()) break;  // lock-free: nothing new
    if (Status s = tail_.Read(env_.log->Written(), kChunkBytes, &chunk_); !s.ok()) {
      Refuse(Code::kInternal, "replication: " + s.ToString());
      return true;
    }
    if (chunk_.count == 0) break;
    out_.push_back(EncodeRecords(env_.epoch, chunk_.segment_number, chunk_.first_lsn, chunk_.count,
                                 chunk_.bytes, env_.log->DurableEnd()));
    added += chunk_.bytes.size() + 64;
  }
  return added > 0 || !out_.empty();
}

}  // namespace sundial::replication
