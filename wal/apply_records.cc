#include "wal/apply_records.h"

#include <algorithm>
#include <string>
#include <vector>

#include "wal/log_format.h"

namespace sundial::wal {
namespace {

// Why `record` may not stand where it is in a file of `kind` (after a trailer, when
// `after_trailer`), or null.
const char* Misplaced(const EffectPipeline::Item& record, FileKind kind, bool after_trailer) {
  if (after_trailer) return "record after the snapshot trailer";
  if (record.type == RecordType::kEffect) {
    if (!record.decoded) return "undecodable effect";
    // A dependent's graph entry restated (engine/effect.h) is what a snapshot carries; a log
    // replays the enqueue that made it.
    if (kind == FileKind::kSegment && !record.effect.dependency_edges.empty()) {
      return "dependency entry in a log segment";
    }
    // The same for a batch's active member restated with its batch (docs/wal-format.md,
    // "Batches"): a log has the member's enqueue.
    if (kind == FileKind::kSegment && record.effect.type == EffectType::kMessageChanged &&
        !record.effect.batch.empty()) {
      return "batch member entry in a log segment";
    }
    // A message's history restated (docs/wal-format.md, "History"): a log has the effects
    // it is derived from.
    if (kind == FileKind::kSegment && !record.effect.history.empty()) {
      return "history in a log segment";
    }
    // A token bucket restated (docs/wal-format.md, "Token buckets"): a log has the leases it
    // is derived from.
    if (kind == FileKind::kSegment && record.effect.type == EffectType::kKeyStateRestated) {
      return "key state in a log segment";
    }
    return nullptr;
  }
  if (kind == FileKind::kSegment) return "snapshot trailer in a log segment";
  if (record.type != RecordType::kSnapshotTrailer) return "unexpected record type in a snapshot";
  if (record.payload.size() != kSnapshotTrailerBytes) return "snapshot trailer of the wrong size";
  return nullptr;
}

SnapshotTrailer DecodeTrailer(const EffectPipeline::Item& record) {
  return SnapshotTrailer{record.offset, DecodeFixed64(record.payload.data()),
                         DecodeFixed64(record.payload.data() + 8)};
}

}  // namespace

AppliedRecords ApplyRecords(EffectPipeline* pipeline, Engine* engine, const ApplyOptions& options) {
  AppliedRecords out;
  auto bad = [&](uint64_t offset, const char* reason) {
    out.damage = Corruption{std::string(options.file), offset, DamageKind::kCorruption, reason};
  };
  const bool segment = options.kind == FileKind::kSegment;
  std::vector<Effect> run;  // consecutive effects to apply together (ApplyBatch)
  std::vector<uint64_t> run_offsets;
  bool at_end = false;
  while (!at_end && !out.damage) {
    const auto batch = pipeline->NextBatch();
    if (batch.empty()) break;
    run.clear();
    run_offsets.clear();
    for (const EffectPipeline::Item& record : batch) {
      if (segment && record.lsn < options.first_lsn) continue;  // in the state already
      if (segment && options.end_lsn && record.lsn >= *options.end_lsn) {
        at_end = true;
        break;
      }
      if (const char* reason = Misplaced(record, options.kind, out.trailer.has_value())) {
        bad(record.offset, reason);
        break;
      }
      if (record.type == RecordType::kSnapshotTrailer) {
        out.trailer = DecodeTrailer(record);
        continue;
      }
      run.push_back(record.effect);
      // A snapshot restates each message with its history (none when it has no extension):
      // not an enqueue that begins one (engine/effect.h, restated).
      run.back().restated = !segment && record.effect.type == EffectType::kMessageEnqueued;
      run_offsets.push_back(record.offset);
    }
    // The run before a bad record is applied too: an effect in it that does not apply is the
    // first bad record.
    size_t applied = 0;
    if (!engine->ApplyBatch(run.data(), run.size(), &applied).ok()) {
      bad(run_offsets[applied], segment ? "effect does not apply to the recovered state"
                                        : "effect does not apply to the state");
    }
    out.effects += applied;
    for (size_t i = 0; i < applied; ++i) out.latest_time = std::max(out.latest_time, run[i].time);
  }
  return out;
}

}  // namespace sundial::wal
