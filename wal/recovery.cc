#include "wal/recovery.h"

#include <malloc.h>

#include <algorithm>
#include <utility>

#include "engine/pages.h"
#include "wal/apply_records.h"
#include "wal/effect_codec.h"
#include "wal/effect_pipeline.h"
#include "wal/log_format.h"
#include "wal/snapshot.h"

namespace sundial::wal {
namespace {

constexpr std::string_view kDamagedSuffix = ".damaged";

bool IsTempSnapshot(std::string_view name) {
  return name.starts_with("snapshot-") && name.ends_with(kTempSuffix);
}

class Recovery {
 public:
  Recovery(FileSystem* fs, const std::string& dir, const EngineFactory& make_engine,
           const RecoveryOptions& options, Recovered* out)
      : fs_(fs),
        dir_(dir),
        make_engine_(make_engine),
        options_(options),
        read_only_(options.end_lsn.has_value()),
        out_(out),
        report_(out->report) {}

  Status Run() {
    if (!read_only_) {
      if (Status s = fs_->CreateDir(dir_); !s.ok()) return s;
    }
    auto names = fs_->ListDir(dir_);
    if (!names.ok()) return names.status();
    std::vector<std::pair<uint64_t, std::string>> snapshots;
    for (const std::string& name : *names) {
      if (auto n = ParseSegmentFileName(name)) {
        segments_.emplace_back(*n, name);
      } else if (auto lsn = ParseSnapshotFileName(name)) {
        if (!read_only_ || *lsn <= *options_.end_lsn) snapshots.emplace_back(*lsn, name);
      } else if (IsTempSnapshot(name) && !read_only_) {
        if (Status s = Remove(name); !s.ok()) return s;
        report_.removed_files.push_back(name);
      }
    }
    std::sort(segments_.begin(), segments_.end());
    std::sort(snapshots.rbegin(), snapshots.rend());  // newest first
    for (const auto& seg : segments_) max_number_ = std::max(max_number_, seg.first);

    if (Status s = LoadNewestSnapshot(snapshots); !s.ok()) return s;
    if (Status s = ReplaySegments(); !s.ok()) return s;
    // Every index in order at once (O(n)), rather than one sift per replayed effect.
    out_->engine->EndBulkLoad();
    if (read_only_ && next_lsn_ != *options_.end_lsn) {
      report_.damage =
          Corruption{dir_, 0, DamageKind::kCorruption,
                     "the log ends at LSN " + std::to_string(next_lsn_) +
                         " before the requested LSN " + std::to_string(*options_.end_lsn)};
      return Damaged();
    }
    if (!read_only_) {
      // Leftovers of a checkpoint that crashed before deleting them.
      for (const auto& [lsn, name] : snapshots) {
        if (lsn < report_.snapshot_lsn && !report_.snapshot.empty()) {
          if (Status s = Remove(name); !s.ok()) return s;
          report_.removed_files.push_back(name);
        }
      }
      for (const std::string& name : obsolete_) {
        if (Status s = Remove(name); !s.ok()) return s;
        report_.removed_files.push_back(name);
      }
      // Records replayed from the page cache (written, never synced before a kill -9) and a cut
      // tail become durable before the log acknowledges anything on top of them. Unless the
      // last segment kept was just removed as covered by the snapshot (the one after it was
      // torn, and removed too): its records are in the snapshot, and opening it for append
      // would create it again, empty, which the next start refuses as damage.
      if (last_kept_ && fs_->FileExists(Path(SegmentFileName(*last_kept_)))) {
        auto file = fs_->NewAppendableFile(Path(SegmentFileName(*last_kept_)));
        if (!file.ok()) return file.status();
        if (Status s = (*file)->Sync(); !s.ok()) return s;
        if (Status s = (*file)->Close(); !s.ok()) return s;
      }
      if (changed_dir_) {
        if (Status s = fs_->SyncDir(dir_); !s.ok()) return s;
      }
    }
    report_.next_lsn = next_lsn_;
    // The new segment continues the last one kept, so segment numbers stay consecutive.
    report_.next_segment_number = last_kept_ ? *last_kept_ + 1 : max_number_ + 1;
    return Status::Ok();
  }

 private:
  std::string Path(const std::string& name) const { return JoinPath(dir_, name); }

  Status Remove(const std::string& name) {
    changed_dir_ = true;
    return fs_->RemoveFile(Path(name));
  }

  // The error of a start refused by report_.damage, naming it.
  Status Damaged() const {
    return Status(Code::kInternal, "wal: damaged log").WithContext(ToString(*report_.damage));
  }

  // Repair gives a whole file up: counted in the report, then removed.
  Status Drop(const std::string& name) {
    auto size = fs_->FileSize(Path(name));
    report_.dropped_bytes += size.ok() ? *size : 0;
    report_.dropped_files.push_back(name);
    return Remove(name);
  }

  // A reader of segments_[i]; `last`: the last segment of the log (only there is a tail torn).
  Result<std::unique_ptr<LogReader>> OpenSegment(size_t i, bool last) {
    const auto& [number, name] = segments_[i];
    auto file = fs_->NewSequentialFile(Path(name));
    if (!file.ok()) return file.status();
    LogReader::Options reader_options;
    reader_options.last_file = last;
    reader_options.expected_file_number = number;
    return std::make_unique<LogReader>(std::move(*file), name, nullptr, reader_options);
  }

  Status LoadNewestSnapshot(const std::vector<std::pair<uint64_t, std::string>>& snapshots) {
    for (const auto& [lsn, name] : snapshots) {
      out_->engine = make_engine_();
      out_->engine->BeginBulkLoad();
      FirstCorruption damage;
      auto info = LoadSnapshot(fs_, dir_, name, out_->engine.get(), &damage);
      if (info.ok()) {
        report_.snapshot = name;
        report_.snapshot_lsn = lsn;
        report_.snapshot_effects = info->effects;
        report_.latest_effect_time = std::max(report_.latest_effect_time, info->latest_time);
        report_.bytes_read += info->bytes;
        next_lsn_ = lsn;
        return Status::Ok();
      }
      out_->engine.reset();
      if (!damage.first()) return info.status();  // I/O error
      report_.damage = damage.first();
      // Given up by a repair (kept as *.damaged for inspection), which then tries an older one.
      auto size = fs_->FileSize(Path(name));
      report_.dropped_bytes += size.ok() ? *size : 0;
      report_.dropped_files.push_back(name);
      if (read_only_ || !options_.repair) return Damaged();
      report_.repaired = true;
      changed_dir_ = true;
      if (Status s = fs_->RenameFile(Path(name), Path(name + std::string(kDamagedSuffix)));
          !s.ok()) {
        return s;
      }
    }
    out_->engine = make_engine_();
    out_->engine->BeginBulkLoad();
    next_lsn_ = 0;
    return Status::Ok();
  }

  // Damage in segments_[i] at `damage`: refuse, or (repair) cut the log there, which ends it.
  Status SegmentDamaged(size_t i, Corruption damage) {
    report_.damage = std::move(damage);
    const uint64_t offset = report_.damage->offset;
    const std::string& name = segments_[i].second;
    if (read_only_ || !options_.repair) {
      if (!read_only_) CountWhatRepairDrops(i, offset);
      return Damaged();
    }
    report_.repaired = true;
    end_of_log_ = true;
    if (offset < kFileHeaderBytes) {
      if (Status s = Drop(name); !s.ok()) return s;
    } else {
      auto size = fs_->FileSize(Path(name));
      if (!size.ok()) return size.status();
      report_.dropped_bytes += *size - std::min(*size, offset);
      changed_dir_ = true;
      if (Status s = fs_->TruncateFile(Path(name), offset); !s.ok()) return s;
      last_kept_ = segments_[i].first;
    }
    for (size_t j = i + 1; j < segments_.size(); ++j) {
      if (Status s = Drop(segments_[j].second); !s.ok()) return s;
    }
    return Status::Ok();
  }

  // Without repair: what a repair of damage at `offset` of segments_[i] would drop, for the
  // operator deciding whether to run it. Changes nothing.
  void CountWhatRepairDrops(size_t i, uint64_t offset) {
    auto bytes_of = [&](const std::string& name) -> uint64_t {
      auto size = fs_->FileSize(Path(name));
      return size.ok() ? *size : 0;
    };
    const std::string& name = segments_[i].second;
    const uint64_t size = bytes_of(name);
    if (offset < kFileHeaderBytes) {
      report_.dropped_bytes += size;
      report_.dropped_files.push_back(name);
    } else {
      report_.dropped_bytes += size - std::min(size, offset);
    }
    for (size_t j = i + 1; j < segments_.size(); ++j) {
      report_.dropped_bytes += bytes_of(segments_[j].second);
      report_.dropped_files.push_back(segments_[j].second);
    }
  }

  // True when segments_[i] holds only records below `lsn`: the next segment starts at or
  // below it.
  bool WhollyCovered(size_t i, uint64_t lsn) {
    if (i + 1 >= segments_.size()) return false;
    auto next = OpenSegment(i + 1, /*last=*/false);
    return next.ok() && (*next)->ReadHeader() && (*next)->header().lsn <= lsn;
  }

  // Repair of damage in segments_[i] below the snapshot: removes it and the earlier segments.
  Status DropCovered(size_t i, const Corruption& damage) {
    report_.damage = damage;
    report_.repaired = true;
    report_.damage->reason += " (in records the snapshot holds: nothing lost)";
    for (size_t j = 0; j <= i; ++j) {
      const std::string& name = segments_[j].second;
      if (!fs_->FileExists(Path(name))) continue;
      if (Status s = Remove(name); !s.ok()) return s;
      report_.removed_files.push_back(name);
    }
    obsolete_.clear();
    return Status::Ok();
  }

  // Replays every segment in order, from the state the snapshot left (docs/wal-format.md,
  // "Recovery"), until the last one or until the log ends early (end_of_log_).
  Status ReplaySegments() {
    const uint64_t snapshot_lsn = next_lsn_;
    for (size_t i = 0; i < segments_.size() && !end_of_log_; ++i) {
      if (read_only_ && next_lsn_ >= *options_.end_lsn) break;
      if (Status s = ReplaySegment(i, snapshot_lsn); !s.ok()) return s;
    }
    return Status::Ok();
  }

  // segments_[i]: its header, its place after the previous segment, its records, its tail.
  Status ReplaySegment(size_t i, uint64_t snapshot_lsn) {
    const bool last = !read_only_ && i + 1 == segments_.size();
    auto opened = OpenSegment(i, last);
    if (!opened.ok()) return opened.status();
    LogReader& reader = **opened;
    if (!reader.ReadHeader()) return UnreadableHeader(i, reader, last);
    if (auto broken = BrokenChain(i, reader.header())) return SegmentDamaged(i, *broken);
    if (auto bad = ApplySegment(i, &reader)) return SegmentDamaged(i, *bad);
    if (!reader.status().ok()) return reader.status();
    report_.bytes_read += reader.valid_bytes();
    if (const auto& damage = reader.damage()) {
      if (options_.repair && !read_only_ && WhollyCovered(i, snapshot_lsn)) {
        // Damage in records the snapshot already holds: this segment and every earlier one are
        // obsolete; nothing is lost. Go on with the next segment.
        chain_ = Chain{};
        last_kept_.reset();
        return DropCovered(i, *damage);
      }
      if (damage->kind != DamageKind::kTornTail || !last) return SegmentDamaged(i, *damage);
      if (Status s = CutTornTail(i, reader); !s.ok()) return s;
    }
    Keep(i, reader, snapshot_lsn, last);
    return Status::Ok();
  }

  // segments_[i] has no readable header: an I/O error, damage, or — in the last segment — a
  // torn header, which ends the log.
  Status UnreadableHeader(size_t i, const LogReader& reader, bool last) {
    if (!reader.status().ok()) return reader.status();
    const Corruption& damage = *reader.damage();
    if (damage.kind != DamageKind::kTornTail || !last) return SegmentDamaged(i, damage);
    // A crash right after the segment was created: nothing in it was ever acknowledged.
    const std::string& name = segments_[i].second;
    auto size = fs_->FileSize(Path(name));
    report_.torn_tail = damage;
    report_.torn_bytes = size.ok() ? *size : 0;
    end_of_log_ = true;
    return Remove(name);
  }

  // Damage when segments_[i], whose header is `header`, does not continue the log: a segment
  // missing before it, a first LSN other than the previous segment's end, or a gap after the
  // state recovered so far.
  std::optional<Corruption> BrokenChain(size_t i, const FileHeader& header) const {
    // Not a structured binding: clang 14 cannot capture one in the lambda.
    const uint64_t number = segments_[i].first;
    const std::string& name = segments_[i].second;
    auto broken = [&](std::string reason) {
      return Corruption{name, 0, DamageKind::kCorruption, std::move(reason)};
    };
    if (chain_.started && number != chain_.number + 1) {
      return broken("missing segment " + SegmentFileName(chain_.number + 1));
    }
    if (chain_.started && header.lsn != chain_.end_lsn) {
      return broken("first LSN " + std::to_string(header.lsn) +
                    " does not continue the previous segment, which ends at " +
                    std::to_string(chain_.end_lsn));
    }
    if (header.lsn > next_lsn_) {
      return broken("LSN gap: the segment starts at " + std::to_string(header.lsn) +
                    " but the state ends at " + std::to_string(next_lsn_));
    }
    return std::nullopt;
  }

  // Applies the records of segments_[i] past the state (ApplyRecords), read and decoded on a
  // second thread while this one applies (effect_pipeline.h). Returns the first bad record, once
  // that thread has stopped (a repair changes the file).
  std::optional<Corruption> ApplySegment(size_t i, LogReader* reader) {
    const std::string& name = segments_[i].second;
    const auto file_bytes = fs_->FileSize(Path(name));
    EffectPipeline pipeline(reader, file_bytes.ok() && EffectPipeline::WorthAThread(*file_bytes),
                            PrefaultForTheEngine);
    ApplyOptions apply;
    apply.file = name;
    apply.kind = FileKind::kSegment;
    apply.first_lsn = next_lsn_;
    if (read_only_) apply.end_lsn = options_.end_lsn;
    AppliedRecords applied = ApplyRecords(&pipeline, out_->engine.get(), apply);
    next_lsn_ += applied.effects;
    report_.records_replayed += applied.effects;
    report_.latest_effect_time = std::max(report_.latest_effect_time, applied.latest_time);
    return std::move(applied.damage);
  }

  // Cuts the torn tail of the last segment off at the end of its last good record.
  Status CutTornTail(size_t i, const LogReader& reader) {
    const std::string& name = segments_[i].second;
    auto size = fs_->FileSize(Path(name));
    if (!size.ok()) return size.status();
    report_.torn_tail = reader.damage();
    report_.torn_bytes = *size - std::min(*size, reader.valid_bytes());
    changed_dir_ = true;
    return fs_->TruncateFile(Path(name), reader.valid_bytes());
  }

  // segments_[i] was read to its end and stays: the next segment must continue it.
  void Keep(size_t i, const LogReader& reader, uint64_t snapshot_lsn, bool last) {
    const auto& [number, name] = segments_[i];
    last_kept_ = number;
    chain_ = Chain{true, number, reader.next_lsn()};
    if (reader.next_lsn() <= snapshot_lsn && !last) {
      obsolete_.push_back(name);  // wholly covered by the snapshot
    } else {
      ++report_.segments_replayed;
    }
  }

  FileSystem* const fs_;
  const std::string& dir_;
  const EngineFactory& make_engine_;
  const RecoveryOptions& options_;
  const bool read_only_;
  Recovered* const out_;
  RecoveryReport& report_;
  std::vector<std::pair<uint64_t, std::string>> segments_;
  std::vector<std::string> obsolete_;
  uint64_t next_lsn_ = 0;
  uint64_t max_number_ = 0;            // of every segment found
  std::optional<uint64_t> last_kept_;  // number of the last segment that stays
  bool changed_dir_ = false;
  // The previous segment read, which the next must continue (plain values: GCC 12 -O2
  // misreports optionals here).
  struct Chain {
    bool started = false;
    uint64_t number = 0;
    uint64_t end_lsn = 0;
  };
  Chain chain_;
  // The log ends before the next segment: the last segment's header was torn (and the segment
  // removed), or a repair cut the log.
  bool end_of_log_ = false;
};

}  // namespace

void PrefaultForTheEngine() {
  constexpr size_t kBlocksAhead = 8;  // 16 MiB: ~80,000 messages of 200 bytes
  pages::FillPool(kBlocksAhead);
}

std::string RecoveryReport::Summary() const {
  std::string s = "recovered ";
  if (!snapshot.empty()) {
    s += snapshot + " (" + std::to_string(snapshot_effects) + " effects) + ";
  }
  s += std::to_string(records_replayed) + " records from " + std::to_string(segments_replayed) +
       " segments, " + std::to_string(bytes_read) + " bytes read; next LSN " +
       std::to_string(next_lsn);
  if (torn_tail) {
    s += "; cut a torn tail of " + std::to_string(torn_bytes) + " bytes (" + ToString(*torn_tail) +
         ")";
  }
  if (damage && repaired) {
    s +=
        "; REPAIRED " + ToString(*damage) + ": dropped " + std::to_string(dropped_bytes) + " bytes";
    for (const auto& f : dropped_files) s += ", " + f;
  } else if (damage) {
    s += "; found damage, not repaired: " + ToString(*damage);
  }
  if (!removed_files.empty()) {
    s += "; removed";
    for (const auto& f : removed_files) s += " " + f;
  }
  return s;
}

Status Recover(FileSystem* fs, const std::string& dir, const EngineFactory& make_engine,
               const RecoveryOptions& options, Recovered* out) {
  *out = Recovered{};
  Recovery recovery(fs, dir, make_engine, options, out);
  Status s = recovery.Run();
  pages::DrainPool();
  // Give back what the load freed into malloc (the decode thread's arena, buffers): after a
  // restart the process should hold its state and little else.
  malloc_trim(0);
  if (!s.ok()) out->engine.reset();
  return s;
}

Status RecoverAndOpenLog(FileSystem* fs, const std::string& dir, const EngineFactory& make_engine,
                         const RecoveryOptions& recovery, const LogOptions& log_options,
                         DeferredSink* sink, OpenedLog* out) {
  *out = OpenedLog{};
  Recovered recovered;
  Status s = Recover(fs, dir, make_engine, recovery, &recovered);
  out->report = std::move(recovered.report);
  if (!s.ok()) return s;
  auto log = GroupCommitLog::Open(fs, dir, log_options, out->report.next_lsn,
                                  out->report.next_segment_number);
  if (!log.ok()) return log.status();
  out->engine = std::move(recovered.engine);
  out->log = std::move(log).value();
  sink->set_target(out->log.get());
  return Status::Ok();
}

}  // namespace sundial::wal
