#include "tools/log_directory.h"

#include <algorithm>
#include <utility>

#include "wal/effect_codec.h"
#include "wal/log_format.h"

namespace sundial::tools {
namespace {

constexpr size_t kTrailerBytes = 16;  // count:u64le digest:u64le

// The segment read before the current one, for the continuity checks.
struct PreviousSegment {
  uint64_t number = 0;
  uint64_t next_lsn = 0;
  bool damaged = false;
};

class DirectoryScan {
 public:
  DirectoryScan(wal::FileSystem* fs, const std::string& dir, const ScanOptions& options,
                const RecordVisitor& visitor, ScanReport* report)
      : fs_(fs), dir_(dir), options_(options), visitor_(visitor), report_(report) {}

  Status Run() {
    auto files = ListLogFiles(fs_, dir_);
    if (!files.ok()) return files.status();
    size_t last_segment = files->size();
    for (size_t i = 0; i < files->size(); ++i) {
      const LogFile& f = (*files)[i];
      if (f.kind == LogFileKind::kSnapshot) {
        newest_snapshot_lsn_ = std::max(newest_snapshot_lsn_.value_or(0), f.number);
      } else {
        last_segment = i;
      }
    }
    for (size_t i = 0; i < files->size(); ++i) {
      report_->files.push_back(FileReport{});
      FileReport& file = report_->files.back();
      file.file = (*files)[i];
      if (Status s = ScanFile(i == last_segment, &file); !s.ok()) return s;
      if (options_.stop_at_first_corruption && file.damage &&
          file.damage->kind == wal::DamageKind::kCorruption) {
        break;
      }
    }
    return Status::Ok();
  }

 private:
  static void SetDamage(FileReport* file, uint64_t offset, std::string reason) {
    if (file->damage) return;  // the first problem of a file is the one reported
    file->damage =
        wal::Corruption{file->file.name, offset, wal::DamageKind::kCorruption, std::move(reason)};
  }

  // The continuity rules between segments (docs/wal-format.md, "LSN"; wal/recovery.h).
  void CheckSegmentContinuity(FileReport* file) {
    const uint64_t lsn = file->header_lsn;
    if (!previous_) {
      const uint64_t state_lsn = newest_snapshot_lsn_.value_or(0);
      if (lsn > state_lsn) {
        SetDamage(file, 0,
                  "LSN gap: the first segment starts at LSN " + std::to_string(lsn) +
                      (newest_snapshot_lsn_
                           ? ", above the newest snapshot's LSN " + std::to_string(state_lsn)
                           : " but there is no snapshot (the log starts at LSN 0)"));
      }
      return;
    }
    if (previous_->damaged) return;  // already reported; its end is unknown
    if (file->file.number != previous_->number + 1) {
      SetDamage(file, 0, "missing segment " + wal::SegmentFileName(previous_->number + 1));
    } else if (lsn != previous_->next_lsn) {
      SetDamage(file, 0,
                "first LSN " + std::to_string(lsn) +
                    " does not continue the previous segment, which ends at " +
                    std::to_string(previous_->next_lsn));
    }
  }

  Status ScanFile(bool last_segment, FileReport* file) {
    const bool segment = file->file.kind == LogFileKind::kSegment;
    const std::string path = wal::JoinPath(dir_, file->file.name);
    auto size = fs_->FileSize(path);
    if (!size.ok()) return size.status();
    file->bytes = *size;
    auto in = fs_->NewSequentialFile(path);
    if (!in.ok()) return in.status();

    wal::LogReader::Options reader_options;
    reader_options.magic = segment ? wal::kSegmentMagic : wal::kSnapshotMagic;
    // A snapshot is renamed into place only when complete: no tear is expected in one.
    reader_options.last_file = segment && last_segment;
    reader_options.expected_file_number = file->file.number;
    wal::LogReader reader(std::move(*in), file->file.name, nullptr, reader_options);

    if (!reader.ReadHeader()) {
      if (!reader.status().ok()) return reader.status();
      file->damage = *reader.damage();
      // A torn header: recovery removes the whole segment.
      if (file->damage->kind == wal::DamageKind::kTornTail) file->torn_bytes = file->bytes;
      if (segment) previous_ = PreviousSegment{file->file.number, 0, true};
      return Status::Ok();
    }
    file->header_read = true;
    file->header_lsn = reader.header().lsn;
    if (segment) CheckSegmentContinuity(file);

    uint64_t trailer_offset = 0;
    wal::LogReader::Record record;
    wal::DecodedEffect decoded;
    SnapshotTrailer trailer;
    while (reader.ReadRecord(&record)) {
      ScannedRecord scanned{file->file};
      scanned.index = file->records;
      scanned.offset = record.offset;
      scanned.lsn = segment ? record.lsn : file->header_lsn;
      scanned.type = record.type;
      if (file->trailer) {
        SetDamage(file, record.offset, "record after the snapshot trailer");
        break;
      }
      if (record.type == wal::RecordType::kEffect) {
        if (Status s = wal::DecodeEffect(record.payload, &decoded); !s.ok()) {
          SetDamage(file, record.offset, "undecodable effect: " + std::string(s.detail()));
          break;
        }
        scanned.effect = &decoded.effect();
        ++file->effects;
      } else if (segment) {
        SetDamage(file, record.offset, "snapshot trailer in a log segment");
        break;
      } else {
        if (record.payload.size() != kTrailerBytes) {
          SetDamage(file, record.offset, "snapshot trailer of the wrong size");
          break;
        }
        trailer.count = wal::DecodeFixed64(record.payload.data());
        trailer.digest = wal::DecodeFixed64(record.payload.data() + 8);
        trailer_offset = record.offset;
        file->trailer = trailer;
        scanned.trailer = &trailer;
      }
      ++file->records;
      if (visitor_) visitor_(scanned);
    }
    if (!reader.status().ok()) return reader.status();
    if (reader.damage() && !file->damage) {
      file->damage = *reader.damage();
      if (file->damage->kind == wal::DamageKind::kTornTail) {
        file->torn_bytes = file->bytes - std::min(file->bytes, reader.valid_bytes());
      }
    }
    if (!segment && !file->damage) {
      if (!file->trailer) {
        SetDamage(file, reader.valid_bytes(), "snapshot has no trailer");
      } else if (file->trailer->count != file->effects) {
        SetDamage(file, trailer_offset,
                  "snapshot trailer count mismatch: the trailer says " +
                      std::to_string(file->trailer->count) + " effects, the file holds " +
                      std::to_string(file->effects));
      }
    }
    file->next_lsn = file->header_lsn + file->records;
    if (segment) {
      previous_ = PreviousSegment{file->file.number, file->next_lsn, file->damage.has_value()};
    }
    return Status::Ok();
  }

  wal::FileSystem* const fs_;
  const std::string& dir_;
  const ScanOptions& options_;
  const RecordVisitor& visitor_;
  ScanReport* const report_;
  std::optional<uint64_t> newest_snapshot_lsn_;
  std::optional<PreviousSegment> previous_;
};

}  // namespace

std::string_view LogFileKindName(LogFileKind kind) {
  return kind == LogFileKind::kSnapshot ? "snapshot" : "segment";
}

Result<std::vector<LogFile>> ListLogFiles(wal::FileSystem* fs, const std::string& dir) {
  auto names = fs->ListDir(dir);
  if (!names.ok()) return names.status();
  std::vector<LogFile> files;
  for (const std::string& name : *names) {
    if (auto number = wal::ParseSegmentFileName(name)) {
      files.push_back(LogFile{name, LogFileKind::kSegment, *number});
    } else if (auto lsn = wal::ParseSnapshotFileName(name)) {
      files.push_back(LogFile{name, LogFileKind::kSnapshot, *lsn});
    }
  }
  // ListDir sorts by name already; sorting here keeps the contract whatever the file system.
  std::sort(files.begin(), files.end(),
            [](const LogFile& a, const LogFile& b) { return a.name < b.name; });
  return files;
}

const wal::Corruption* ScanReport::first_corruption() const {
  for (const FileReport& f : files) {
    if (f.damage && f.damage->kind == wal::DamageKind::kCorruption) return &*f.damage;
  }
  return nullptr;
}

const FileReport* ScanReport::torn_tail() const {
  for (const FileReport& f : files) {
    if (f.damage && f.damage->kind == wal::DamageKind::kTornTail) return &f;
  }
  return nullptr;
}

Status ScanLogDirectory(wal::FileSystem* fs, const std::string& dir, const ScanOptions& options,
                        const RecordVisitor& visitor, ScanReport* report) {
  *report = ScanReport{};
  return DirectoryScan(fs, dir, options, visitor, report).Run();
}

}  // namespace sundial::tools
