#include "wal/snapshot.h"

#include <optional>
#include <utility>
#include <vector>

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

Status Damaged(std::optional<Corruption>* damage, const std::string& file, uint64_t offset,
               std::string reason) {
  *damage = Corruption{file, offset, DamageKind::kCorruption, std::move(reason)};
  return Status(Code::kInternal, "wal: damaged snapshot");
}

Result<SnapshotInfo> WriteSnapshotFiles(FileSystem* fs, const std::string& dir,
                                        const Engine& engine, uint64_t covered_lsn,
                                        const SnapshotHook& hook, bool* remove_temp) {
  SnapshotInfo info;
  info.file = SnapshotFileName(covered_lsn);
  info.covered_lsn = covered_lsn;
  const std::string path = JoinPath(dir, info.file);
  const std::string temp = path + std::string(kTempSuffix);

  auto file = fs->NewWritableFile(temp);
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
  if (hook) {
    if (Status s = hook(SnapshotStep::kTempSynced); !s.ok()) {
      *remove_temp = false;  // a simulated crash leaves the files as a crash would
      return s;
    }
  }
  if (Status s = fs->RenameFile(temp, path); !s.ok()) return s;
  *remove_temp = false;
  if (Status s = fs->SyncDir(dir); !s.ok()) return s;
  if (hook) {
    if (Status s = hook(SnapshotStep::kRenamed); !s.ok()) return s;
  }
  return info;
}

}  // namespace

Result<SnapshotInfo> WriteSnapshot(FileSystem* fs, const std::string& dir, const Engine& engine,
                                   uint64_t covered_lsn, const SnapshotHook& hook) {
  bool remove_temp = false;
  auto info = WriteSnapshotFiles(fs, dir, engine, covered_lsn, hook, &remove_temp);
  // A failed write leaves no temp file behind (a crash does; recovery removes those).
  if (!info.ok() && remove_temp) {
    (void)fs->RemoveFile(JoinPath(dir, SnapshotFileName(covered_lsn)) + std::string(kTempSuffix));
  }
  return info;
}

Result<SnapshotInfo> LoadSnapshot(FileSystem* fs, const std::string& dir, const std::string& file,
                                  Engine* engine, std::optional<Corruption>* damage) {
  damage->reset();
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
  bool trailer = false;
  uint64_t trailer_offset = 0, trailer_count = 0, trailer_digest = 0;
  if (reader.ReadHeader()) {
    // Read and decoded on a second thread while this one applies (effect_pipeline.h).
    EffectPipeline pipeline(&reader, EffectPipeline::WorthAThread(info.bytes),
                            PrefaultForTheEngine);
    std::vector<Effect> run;  // consecutive effects to apply together (ApplyBatch)
    std::vector<uint64_t> run_offsets;
    // The first bad record (offset, reason); the effects before it are applied first, so that
    // one that does not apply is reported at its own, earlier, offset.
    std::optional<std::pair<uint64_t, const char*>> bad;
    while (!bad) {
      const auto batch = pipeline.NextBatch();
      if (batch.empty()) break;
      run.clear();
      run_offsets.clear();
      for (const EffectPipeline::Item& record : batch) {
        if (trailer) {
          bad.emplace(record.offset, "record after the snapshot trailer");
        } else if (record.type == RecordType::kSnapshotTrailer) {
          if (record.payload.size() != 16) {
            bad.emplace(record.offset, "snapshot trailer of the wrong size");
            break;
          }
          trailer = true;
          trailer_offset = record.offset;
          trailer_count = DecodeFixed64(record.payload.data());
          trailer_digest = DecodeFixed64(record.payload.data() + 8);
          continue;
        } else if (record.type != RecordType::kEffect) {
          bad.emplace(record.offset, "unexpected record type in a snapshot");
        } else if (!record.decoded) {
          bad.emplace(record.offset, "undecodable effect");
        }
        if (bad) break;
        run.push_back(record.effect);
        run_offsets.push_back(record.offset);
      }
      size_t applied = 0;
      if (!engine->ApplyBatch(run.data(), run.size(), &applied).ok()) {
        bad.emplace(run_offsets[applied], "effect does not apply to the state");
      }
      info.effects += applied;
    }
    if (bad) return Damaged(damage, file, bad->first, bad->second);
  }
  if (!reader.status().ok()) return reader.status();
  if (reader.damage()) {
    *damage = *reader.damage();
    return Status(Code::kInternal, "wal: damaged snapshot");
  }
  if (!trailer) return Damaged(damage, file, reader.valid_bytes(), "snapshot has no trailer");
  if (trailer_count != info.effects) {
    return Damaged(damage, file, trailer_offset, "snapshot trailer count mismatch");
  }
  info.digest = engine->Digest();
  if (trailer_digest != info.digest) {
    return Damaged(damage, file, trailer_offset, "snapshot digest mismatch");
  }
  return info;
}

}  // namespace sundial::wal
