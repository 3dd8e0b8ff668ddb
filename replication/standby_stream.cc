#include "replication/standby_stream.h"

#include "replication/replication_generated.h"
#include "replication/wire.h"
#include "wal/effect_codec.h"
#include "wal/log_format.h"

namespace sundial::replication {

std::string StandbyStream::Hello() const {
  HelloMessage m;
  m.cluster = env_.cluster;
  m.node = env_.node;
  m.token = env_.token;
  m.promised_epoch = env_.promise->promised();
  m.history = env_.engine->Epochs();
  m.end_lsn = env_.log->AppendedEndLsn();
  return EncodeHello(m);
}

std::string StandbyStream::Ack() const {
  return EncodeAck(epoch_, env_.log->DurableEnd(), env_.log->AppendedEndLsn());
}

StandbyStream::Next StandbyStream::Close(std::string why) {
  why_ = std::move(why);
  state_ = State::kDone;
  snapshot_file_.reset();
  return Next::kClose;
}

StandbyStream::Next StandbyStream::OnFrame(std::string_view bytes) {
  if (state_ == State::kDone) return Next::kClose;
  const wire::Frame* frame = VerifyFrame(bytes);
  if (frame == nullptr) return Close("replication: a frame from the primary is not valid");
  switch (frame->body_type()) {
    case wire::Body::Welcome:
      return OnWelcome(frame->body_as_Welcome());
    case wire::Body::Records:
      return OnRecords(frame->body_as_Records());
    case wire::Body::SnapshotChunk:
      return OnSnapshotChunk(frame->body_as_SnapshotChunk());
    case wire::Body::Heartbeat: {
      const wire::Heartbeat* h = frame->body_as_Heartbeat();
      if (state_ == State::kHello || h->epoch() != epoch_) {
        return Close("replication: a heartbeat out of turn");
      }
      primary_end_ = h->end_lsn();
      primary_durable_end_ = h->durable_end();
      return Next::kAck;  // keeps the primary's view of this standby fresh
    }
    case wire::Body::Refusal: {
      const wire::Refusal* r = frame->body_as_Refusal();
      return Close("replication: the primary refused: " +
                   (r->message() ? r->message()->str() : std::string()));
    }
    default:
      return Close("replication: the primary sent a message only a standby sends");
  }
}

StandbyStream::Next StandbyStream::OnWelcome(const void* body) {
  const auto* w = static_cast<const wire::Welcome*>(body);
  if (state_ != State::kHello) return Close("replication: a second Welcome");
  const uint64_t promised = env_.promise->promised();
  if (w->epoch() < promised) {
    // An old primary (paused, partitioned) that does not know it was replaced: this standby
    // promised a newer epoch and never acknowledges an older one.
    return Close("replication: the primary's epoch " + std::to_string(w->epoch()) +
                 " is older than the epoch promised here (" + std::to_string(promised) + ")");
  }
  if (w->epoch() > promised) {
    if (Status s = env_.promise->Promise(w->epoch()); !s.ok()) {
      return Close("replication: could not promise the epoch: " + s.ToString());
    }
  }
  epoch_ = w->epoch();
  primary_end_ = w->primary_end_lsn();
  switch (w->catch_up()) {
    case wire::CatchUp::stream:
      if (w->from_lsn() != env_.log->AppendedEndLsn()) {
        return Close("replication: the primary streams from another LSN than this log's end");
      }
      state_ = State::kStreaming;
      return Next::kContinue;
    case wire::CatchUp::truncate:
      if (w->truncate_to() >= env_.log->AppendedEndLsn()) {
        return Close("replication: a truncation past this log's end");
      }
      truncate_to_ = w->truncate_to();
      state_ = State::kDone;
      return Next::kTruncate;
    case wire::CatchUp::snapshot: {
      snapshot_lsn_ = w->from_lsn();
      snapshot_path_ = wal::JoinPath(env_.dir, wal::SnapshotFileName(snapshot_lsn_)) +
                       std::string(wal::kTempSuffix) + ".replica";
      auto file = env_.fs->NewWritableFile(snapshot_path_);
      if (!file.ok()) return Close("replication: " + file.status().ToString());
      snapshot_file_ = std::move(file).value();
      snapshot_received_ = 0;
      state_ = State::kSnapshot;
      return Next::kContinue;
    }
  }
  return Close("replication: an unknown way to catch up");
}

StandbyStream::Next StandbyStream::OnSnapshotChunk(const void* body) {
  const auto* c = static_cast<const wire::SnapshotChunk*>(body);
  if (state_ != State::kSnapshot) return Close("replication: a snapshot chunk out of turn");
  if (c->covered_lsn() != snapshot_lsn_ || c->offset() != snapshot_received_) {
    return Close("replication: a snapshot chunk out of order");
  }
  if (c->bytes() != nullptr && c->bytes()->size() > 0) {
    const std::string_view data(reinterpret_cast<const char*>(c->bytes()->data()),
                                c->bytes()->size());
    if (Status s = snapshot_file_->Append(data); !s.ok()) {
      return Close("replication: writing the snapshot: " + s.ToString());
    }
    snapshot_received_ += data.size();
  }
  if (!c->last()) return Next::kContinue;
  Status s = snapshot_file_->Sync();
  if (s.ok()) s = snapshot_file_->Close();
  snapshot_file_.reset();
  if (!s.ok()) return Close("replication: writing the snapshot: " + s.ToString());
  state_ = State::kDone;
  return Next::kSnapshotReady;
}

StandbyStream::Next StandbyStream::OnRecords(const void* body) {
  const auto* r = static_cast<const wire::Records*>(body);
  if (state_ != State::kStreaming) return Close("replication: records out of turn");
  if (r->epoch() != epoch_) {
    return Close("replication: records of another epoch than the primary's Welcome said");
  }
  if (r->first_lsn() != env_.log->AppendedEndLsn()) {
    return Close("replication: records that do not continue this log (first LSN " +
                 std::to_string(r->first_lsn()) + ", log end " +
                 std::to_string(env_.log->AppendedEndLsn()) + ")");
  }
  primary_durable_end_ = r->durable_end();
  if (r->first_lsn() + r->count() > primary_end_) primary_end_ = r->first_lsn() + r->count();
  const auto* bytes = r->bytes();
  const char* p = bytes ? reinterpret_cast<const char*>(bytes->data()) : nullptr;
  size_t left = bytes ? bytes->size() : 0;
  uint32_t seen = 0;
  wal::DecodedEffect decoded;
  while (left > 0) {
    // The on-disk format, checked as a reader of the primary's segment would check it.
    wal::CheckedRecord record;
    switch (wal::CheckRecord(std::string_view(p, left), r->segment_number(), &record)) {
      case wal::RecordCheck::kOk:
        break;
      case wal::RecordCheck::kCut:
      case wal::RecordCheck::kTooLong:
        return Close(left < wal::kRecordHeaderBytes
                         ? "replication: a record header was cut"
                         : "replication: a record's length overruns the frame");
      case wal::RecordCheck::kBadChecksum:
        return Close("replication: a record's checksum does not match");
      case wal::RecordCheck::kUnknownType:
        return Close("replication: a record that is not an effect in the stream");
    }
    if (record.type != wal::RecordType::kEffect) {
      return Close("replication: a record that is not an effect in the stream");
    }
    if (Status s = wal::DecodeEffect(record.payload, &decoded); !s.ok()) {
      return Close("replication: a record that does not decode: " + s.ToString());
    }
    const Effect& e = decoded.effect();
    // The engine first: a record that does not apply here (the states disagree, which the
    // logs' equality rules out unless something is broken) goes nowhere, and this node starts
    // over from a snapshot. Then this node's log, where it takes the LSN the primary gave it
    // (the logs are the same sequence), then whoever watches (subscriptions, metrics).
    // The two under the log's apply_append_mu: a fork checkpoint's cut never falls between
    // them (wal/group_commit_log.h).
    uint64_t lsn = 0;
    Status applied;
    {
      MutexLock apply_append(env_.log->apply_append_mu());
      lsn = env_.log->AppendedEndLsn();
      applied = env_.engine->Apply(e);
      if (applied.ok()) env_.log->OnEffect(e);
    }
    if (!applied.ok()) {
      reseed_ = true;
      return Close("replication: record " + std::to_string(lsn) +
                   " does not apply here: " + applied.ToString());
    }
    if (env_.log->AppendedEndLsn() != lsn + 1) {
      reseed_ = true;
      return Close("replication: this node's log refused a record (it failed or closed)");
    }
    if (env_.clock != nullptr) env_.clock->RaiseFloor(e.time);
    if (env_.observer != nullptr) {
      env_.observer->OnEffect(e);
      // A flow's messages, as the primary's subscribers saw them (engine/effect.h).
      if (e.members != nullptr) {
        for (const Effect& member : *e.members) {
          Effect again = member;
          again.derived = true;
          env_.observer->OnEffect(again);
        }
      }
    }
    ++records_;
    ++seen;
    p += record.size;
    left -= record.size;
  }
  if (seen != r->count()) return Close("replication: a frame's record count is wrong");
  return seen > 0 ? Next::kAck : Next::kContinue;
}

}  // namespace sundial::replication
