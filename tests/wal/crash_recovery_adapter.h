// How the crash test recovers a directory: segments only (the crash test takes no checkpoints),
// replayed in order through Engine::Apply; a torn tail of the last segment is cut off. Kept
// separate so the crash test exercises whichever recovery the WAL provides.
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "wal/effect_codec.h"
#include "wal/file.h"
#include "wal/log_format.h"
#include "wal/log_reader.h"

namespace sundial::wal {

struct RecoveredLog {
  uint64_t next_lsn = 0;
  uint64_t next_segment_number = 1;
};

inline Status RecoverForCrashTest(FileSystem* fs, const std::string& dir, Engine* engine,
                                  RecoveredLog* out) {
  auto names = fs->ListDir(dir);
  if (!names.ok()) return names.status();
  std::vector<std::pair<uint64_t, std::string>> segments;
  for (const auto& name : *names) {
    if (auto n = ParseSegmentFileName(name)) segments.emplace_back(*n, name);
  }
  std::sort(segments.begin(), segments.end());
  for (size_t i = 0; i < segments.size(); ++i) {
    std::string path = JoinPath(dir, segments[i].second);
    auto file = fs->NewSequentialFile(path);
    if (!file.ok()) return file.status();
    LogReader::Options options;
    options.last_file = i + 1 == segments.size();
    options.expected_file_number = segments[i].first;
    LogReader reader(std::move(*file), path, nullptr, options);
    LogReader::Record record;
    while (reader.ReadRecord(&record)) {
      if (record.lsn != out->next_lsn) return Status(Code::kInternal, "lsn gap");
      DecodedEffect decoded;
      if (!DecodeEffect(record.payload, &decoded).ok()) {
        return Status(Code::kInternal, "undecodable record");
      }
      if (Status s = engine->Apply(decoded.effect()); !s.ok()) return s;
      out->next_lsn = record.lsn + 1;
    }
    if (!reader.status().ok()) return reader.status();
    if (reader.damage()) {
      if (reader.damage()->kind != DamageKind::kTornTail) {
        return Status(Code::kInternal, "corruption before the end of the log");
      }
      if (Status s = fs->TruncateFile(path, reader.valid_bytes()); !s.ok()) return s;
    }
    if (reader.header().file_number != 0 && i + 1 == segments.size()) {
      out->next_lsn = std::max(out->next_lsn, reader.next_lsn());
    }
    out->next_segment_number = segments[i].first + 1;
  }
  return Status::Ok();
}

}  // namespace sundial::wal
