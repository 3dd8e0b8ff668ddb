#include "replication/reload.h"

#include <algorithm>
#include <vector>

#include "wal/log_format.h"
#include "wal/log_reader.h"

namespace sundial::replication {
namespace {

struct Files {
  std::vector<uint64_t> segments;   // numbers, ascending
  std::vector<uint64_t> snapshots;  // covered LSNs, ascending
  std::vector<std::string> temps;   // *.tmp (and partial replica snapshots)
};

Result<Files> List(wal::FileSystem* fs, const std::string& dir) {
  auto names = fs->ListDir(dir);
  if (!names.ok()) return names.status();
  Files f;
  for (const std::string& name : *names) {
    if (auto n = wal::ParseSegmentFileName(name)) {
      f.segments.push_back(*n);
    } else if (auto lsn = wal::ParseSnapshotFileName(name)) {
      f.snapshots.push_back(*lsn);
    } else if (name.find(wal::kTempSuffix) != std::string::npos) {
      f.temps.push_back(name);
    }
  }
  std::sort(f.segments.begin(), f.segments.end());
  std::sort(f.snapshots.begin(), f.snapshots.end());
  return f;
}

Status RemoveAll(wal::FileSystem* fs, const std::string& dir, const Files& f,
                 const std::string& keep = {}) {
  for (uint64_t n : f.segments) {
    if (Status s = fs->RemoveFile(wal::JoinPath(dir, wal::SegmentFileName(n))); !s.ok()) return s;
  }
  for (uint64_t lsn : f.snapshots) {
    if (Status s = fs->RemoveFile(wal::JoinPath(dir, wal::SnapshotFileName(lsn))); !s.ok()) {
      return s;
    }
  }
  for (const std::string& name : f.temps) {
    if (wal::JoinPath(dir, name) == keep) continue;
    if (Status s = fs->RemoveFile(wal::JoinPath(dir, name)); !s.ok()) return s;
  }
  return fs->SyncDir(dir);
}

}  // namespace

Status PrepareReload(wal::FileSystem* fs, const std::string& dir, const ReloadRequest& request) {
  switch (request.kind) {
    case ReloadRequest::Kind::kTruncate:
      return TruncateLog(fs, dir, request.lsn);
    case ReloadRequest::Kind::kSnapshot:
      return InstallSnapshot(fs, dir, request.snapshot_tmp, request.lsn);
    case ReloadRequest::Kind::kReseed:
      return Reseed(fs, dir);
  }
  return Reseed(fs, dir);
}

Status Reseed(wal::FileSystem* fs, const std::string& dir) {
  auto files = List(fs, dir);
  if (!files.ok()) return files.status();
  return RemoveAll(fs, dir, *files);
}

Status InstallSnapshot(wal::FileSystem* fs, const std::string& dir, const std::string& tmp_path,
                       uint64_t lsn) {
  auto files = List(fs, dir);
  if (!files.ok()) return files.status();
  if (Status s = RemoveAll(fs, dir, *files, tmp_path); !s.ok()) return s;
  if (Status s = fs->RenameFile(tmp_path, wal::JoinPath(dir, wal::SnapshotFileName(lsn)));
      !s.ok()) {
    return s;
  }
  return fs->SyncDir(dir);
}

Status TruncateLog(wal::FileSystem* fs, const std::string& dir, uint64_t lsn) {
  auto listed = List(fs, dir);
  if (!listed.ok()) return listed.status();
  Files f = std::move(listed).value();
  // Snapshots holding records at or past `lsn` hold the divergent tail: they go.
  std::vector<uint64_t> kept_snapshots;
  for (uint64_t s : f.snapshots) {
    if (s > lsn) {
      if (Status st = fs->RemoveFile(wal::JoinPath(dir, wal::SnapshotFileName(s))); !st.ok()) {
        return st;
      }
    } else {
      kept_snapshots.push_back(s);
    }
  }
  // Walk the segments: cut the one holding `lsn` at that record; remove those after.
  bool cut = false;
  uint64_t first_lsn = UINT64_MAX;
  for (uint64_t n : f.segments) {
    const std::string path = wal::JoinPath(dir, wal::SegmentFileName(n));
    if (cut) {
      if (Status s = fs->RemoveFile(path); !s.ok()) return s;
      continue;
    }
    auto file = fs->NewSequentialFile(path);
    if (!file.ok()) return file.status();
    wal::LogReader reader(std::move(file).value(), path, nullptr, {});
    if (!reader.ReadHeader()) return Status(Code::kInternal, "reload: a damaged segment: " + path);
    first_lsn = std::min(first_lsn, reader.header().lsn);
    if (reader.header().lsn >= lsn) {
      // It starts at or after the cut: nothing of it is kept.
      if (Status s = fs->RemoveFile(path); !s.ok()) return s;
      cut = true;
      continue;
    }
    wal::LogReader::Record record;
    uint64_t offset = reader.valid_bytes();
    while (reader.next_lsn() < lsn && reader.ReadRecord(&record)) offset = reader.valid_bytes();
    if (reader.next_lsn() == lsn) {
      if (Status s = fs->TruncateFile(path, offset); !s.ok()) return s;
      cut = true;
    }
  }
  if (Status s = fs->SyncDir(dir); !s.ok()) return s;
  // The kept prefix must be rebuildable: a snapshot at or below `lsn`, or the segments from the
  // log's start (LSN 0).
  if (kept_snapshots.empty() && first_lsn != 0) return Reseed(fs, dir);
  return Status::Ok();
}

}  // namespace sundial::replication
