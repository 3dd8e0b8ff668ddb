#include "wal/snapshot.h"

#include <optional>
#include <utility>
#include <vector>

#include "wal/apply_records.h"
#include "wal/effect_codec.h"
#include "wal/effect_pipeline.h"
#include "wal/log_format.h"
#include "wal/log_writer.h"
#include "wal/recovery.h"

namespace sundial::wal {
namespace {

// Appends every exported effect to the snapshot file; keeps the first error.
class SnapshotSink final : public EffectSink {
 public:
  explicit SnapshotSink(LogWriter* writer) : writer_(writer) {}
  void OnEffect(const Effect& effect) override {
    if (!status_.ok()) return;
    status_ = writer_->AddEffect(effect);
    if (status_.ok()) ++count_;
  }
  Status status() const { return status_; }
  uint64_t count() const { return count_; }

 private:
  LogWriter* writer_;
  Status status_;
  uint64_t count_ = 0;
};

// Reports `damage` and returns the error naming it.
Status Damaged(CorruptionReporter* reporter, const Corruption& damage) {
  if (reporter != nullptr) reporter->Report(damage);
  return Status(Code::kInternal, "wal: damaged snapshot").WithContext(ToString(damage));
}

Status Damaged(CorruptionReporter* reporter, const std::string& file, uint64_t offset,
               const char* reason) {
  return Damaged(reporter, Corruption{file, offset, DamageKind::kCorruption, reason});
}

// The temp file, complete and synced; *remove_temp once it exists.
Result<SnapshotInfo> WriteTemp(FileSystem* fs, const std::string& dir, const Engine& engine,
                               uint64_t covered_lsn, bool* remove_temp) {
  SnapshotInfo info;
  info.file = SnapshotFileName(covered_lsn);
  info.covered_lsn = covered_lsn;
  auto file = fs->NewWritableFile(SnapshotTempPath(dir, covered_lsn));
  if (!file.ok()) return file.status();
  *remove_temp = true;
  FileHeader header;
  header.magic = kSnapshotMagic;
  header.file_number = covered_lsn;
  header.lsn = covered_lsn;
  LogWriter writer(std::move(*file), header);
  if (Status s = writer.WriteHeader(); !s.ok()) return s;
  SnapshotSink sink(&writer);
  engine.ExportState(&sink);
  if (!sink.status().ok()) return sink.status();
  info.effects = sink.count();
  info.digest = engine.Digest();
  std::string trailer;
  PutFixed64(&trailer, info.effects);
  PutFixed64(&trailer, info.digest);
  if (Status s = writer.AddRecord(RecordType::kSnapshotTrailer, trailer); !s.ok()) return s;
  if (Status s = writer.Sync(); !s.ok()) return s;
  if (Status s = writer.Close(); !s.ok()) return s;
  info.bytes = writer.bytes_written();
  return info;
}

}  // namespace

std::string SnapshotTempPath(const std::string& dir, uint64_t covered_lsn) {
  return JoinPath(dir, SnapshotFileName(covered_lsn)) + std::string(kTempSuffix);
}

Result<SnapshotInfo> WriteSnapshotTemp(FileSystem* fs, const std::string& dir, const Engine& engine,
                                       uint64_t covered_lsn) {
  bool remove_temp = false;
  auto info = WriteTemp(fs, dir, engine, covered_lsn, &remove_temp);
  // A failed write leaves no temp file behind (a crash does; recovery removes those).
  if (!info.ok() && remove_temp) (void)fs->RemoveFile(SnapshotTempPath(dir, covered_lsn));
  return info;
}

Status CommitSnapshot(FileSystem* fs, const std::string& dir, uint64_t covered_lsn,
                      const SnapshotHook& hook) {
  const std::string temp = SnapshotTempPath(dir, covered_lsn);
  if (hook) {
    // A simulated crash leaves the files as a crash would: the temp file stays.
    if (Status s = hook(SnapshotStep::kTempSynced); !s.ok()) return s;
  }
  if (Status s = fs->RenameFile(temp, JoinPath(dir, SnapshotFileName(covered_lsn))); !s.ok()) {
    (void)fs->RemoveFile(temp);
    return s;
  }
  if (Status s = fs->SyncDir(dir); !s.ok()) return s;
  if (hook) return hook(SnapshotStep::kRenamed);
  return Status::Ok();
}

Result<SnapshotInfo> WriteSnapshot(FileSystem* fs, const std::string& dir, const Engine& engine,
                                   uint64_t covered_lsn, const SnapshotHook& hook) {
  auto info = WriteSnapshotTemp(fs, dir, engine, covered_lsn);
  if (!info.ok()) return info;
  if (Status s = CommitSnapshot(fs, dir, covered_lsn, hook); !s.ok()) return s;
  return info;
}

Result<SnapshotInfo> LoadSnapshot(FileSystem* fs, const std::string& dir, const std::string& file,
                                  Engine* engine, CorruptionReporter* reporter) {
  auto covered = ParseSnapshotFileName(file);
  if (!covered) return InvalidArgument("wal: not a snapshot file name");
  SnapshotInfo info;
  info.file = file;
  info.covered_lsn = *covered;
  const std::string path = JoinPath(dir, file);
  auto size = fs->FileSize(path);
  if (!size.ok()) return size.status();
  info.bytes = *size;
  auto in = fs->NewSequentialFile(path);
  if (!in.ok()) return in.status();

  LogReader::Options options;
  options.magic = kSnapshotMagic;
  options.last_file = false;  // a snapshot is renamed only when complete: no tear is expected
  options.expected_file_number = *covered;
  LogReader reader(std::move(*in), file, nullptr, options);
  AppliedRecords applied;
  if (reader.ReadHeader()) {
    // Read and decoded on a second thread while this one applies (effect_pipeline.h).
    EffectPipeline pipeline(&reader, EffectPipeline::WorthAThread(info.bytes),
                            PrefaultForTheEngine);
    ApplyOptions apply;
    apply.file = file;
    apply.kind = FileKind::kSnapshot;
    applied = ApplyRecords(&pipeline, engine, apply);
  }
  // The first problem in file order: a bad record comes before whatever the reader (which reads
  // ahead) stopped at.
  if (applied.damage) return Damaged(reporter, *applied.damage);
  if (!reader.status().ok()) return reader.status();
  if (reader.damage()) return Damaged(reporter, *reader.damage());
  const std::optional<SnapshotTrailer>& trailer = applied.trailer;
  if (!trailer) return Damaged(reporter, file, reader.valid_bytes(), "snapshot has no trailer");
  info.effects = applied.effects;
  info.latest_time = applied.latest_time;
  if (trailer->count != info.effects) {
    return Damaged(reporter, file, trailer->offset, "snapshot trailer count mismatch");
  }
  info.digest = engine->Digest();
  if (trailer->digest != info.digest) {
    return Damaged(reporter, file, trailer->offset, "snapshot digest mismatch");
  }
  return info;
}

}  // namespace sundial::wal
