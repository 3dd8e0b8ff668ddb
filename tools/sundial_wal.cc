// sundial-wal: inspects a Sundial data directory without changing it (docs/tools.md).
//
//   sundial-wal verify DIR         checks every snapshot and segment; names the first bad record
//   sundial-wal dump DIR           every record as one JSON object per line
//   sundial-wal stats [--json] DIR  per-file and total counts
//
// Exit codes: 0 fine (a torn tail at the end of the last segment is only a warning), 1 damage
// found, 2 bad usage, 3 the directory or a file could not be read.
#include <CLI/CLI.hpp>
#include <array>
#include <boost/json/serialize.hpp>
#include <cstdio>
#include <string>
#include <string_view>

#include "engine/effect.h"
#include "engine/status.h"
#include "tools/log_directory.h"
#include "tools/record_json.h"
#include "wal/file.h"
#include "wal/log_reader.h"

namespace sundial::tools {
namespace {

namespace json = boost::json;

constexpr int kExitOk = 0;
constexpr int kExitDamaged = 1;
constexpr int kExitUsage = 2;
constexpr int kExitIoError = 3;

// One slot per effect type value (schedules from 10, batches from 32, flows 40: all fit). The
// types up to kMessageDeadLettered are always shown; the others when a record has them.
constexpr size_t kEffectTypeSlots = 256;
constexpr size_t kAlwaysShownTypes = static_cast<size_t>(EffectType::kMessageDeadLettered) + 1;

int IoError(const std::string& dir, Status s) {
  // With the errno's text: "No such file or directory", "Permission denied", "Input/output error".
  std::fprintf(stderr, "sundial-wal: cannot read %s: %s\n", dir.c_str(), s.ToString().c_str());
  return kExitIoError;
}

void PrintLine(std::FILE* out, std::string_view line) {
  std::fwrite(line.data(), 1, line.size(), out);
  std::fputc('\n', out);
}

// What recovery does with a torn tail: cuts the bytes after the last good record, or removes a
// segment whose header is torn (a crash right after the segment was created).
std::string TornTailAction(const FileReport& torn) {
  if (!torn.header_read) {
    return "recovery will remove the file (" + std::to_string(torn.torn_bytes) + " bytes)";
  }
  return "recovery will cut " + std::to_string(torn.torn_bytes) + " bytes";
}

std::string TornTailWarning(const FileReport& torn) {
  return "warning: " + wal::ToString(*torn.damage) + "; " + TornTailAction(torn);
}

// Totals over a scan (verify's summary line and stats).
struct Totals {
  uint64_t segments = 0;
  uint64_t snapshots = 0;
  uint64_t bytes = 0;
  uint64_t records = 0;
  std::optional<uint64_t> newest_snapshot_lsn;
  std::optional<uint64_t> first_lsn;  // of the first segment whose header was read
  std::optional<uint64_t> next_lsn;   // after the last such segment

  explicit Totals(const ScanReport& report) {
    for (const FileReport& f : report.files) {
      bytes += f.bytes;
      records += f.records;
      if (f.file.kind == LogFileKind::kSnapshot) {
        ++snapshots;
        newest_snapshot_lsn = f.file.number;  // name order is number order
      } else {
        ++segments;
        if (!f.header_read) continue;
        if (!first_lsn) first_lsn = f.header_lsn;
        next_lsn = f.next_lsn;
      }
    }
  }
};

int Verify(wal::FileSystem* fs, const std::string& dir) {
  ScanOptions options;
  options.stop_at_first_corruption = true;
  ScanReport report;
  if (Status s = ScanLogDirectory(fs, dir, options, nullptr, &report); !s.ok()) {
    return IoError(dir, s);
  }
  if (const wal::Corruption* c = report.first_corruption()) {
    PrintLine(stdout, wal::ToString(*c));
    return kExitDamaged;
  }
  if (const FileReport* torn = report.torn_tail()) PrintLine(stdout, TornTailWarning(*torn));
  const Totals t(report);
  std::string line = "ok: snapshots: " + std::to_string(t.snapshots) +
                     ", segments: " + std::to_string(t.segments) +
                     ", records: " + std::to_string(t.records) +
                     ", bytes: " + std::to_string(t.bytes);
  if (t.newest_snapshot_lsn) {
    line += ", newest snapshot LSN: " + std::to_string(*t.newest_snapshot_lsn);
  }
  if (t.next_lsn) line += ", next LSN: " + std::to_string(*t.next_lsn);
  PrintLine(stdout, line);
  return kExitOk;
}

int Dump(wal::FileSystem* fs, const std::string& dir) {
  ScanReport report;
  Status s = ScanLogDirectory(
      fs, dir, ScanOptions{},
      [](const ScannedRecord& record) { PrintLine(stdout, json::serialize(RecordToJson(record))); },
      &report);
  std::fflush(stdout);
  if (!s.ok()) return IoError(dir, s);
  for (const FileReport& f : report.files) {
    if (!f.damage) continue;
    if (f.damage->kind == wal::DamageKind::kTornTail) {
      PrintLine(stderr, TornTailWarning(f));
    } else {
      PrintLine(stderr, wal::ToString(*f.damage));
    }
  }
  return report.first_corruption() ? kExitDamaged : kExitOk;
}

json::object FileToJson(const FileReport& f) {
  json::object o;
  o["file"] = f.file.name;
  o["kind"] = LogFileKindName(f.file.kind);
  o["bytes"] = f.bytes;
  o["records"] = f.records;
  o["effects"] = f.effects;
  if (f.file.kind == LogFileKind::kSnapshot) {
    o["covered_lsn"] = f.file.number;
  } else if (f.header_read) {
    o["first_lsn"] = f.header_lsn;
    if (f.records > 0) {
      o["last_lsn"] = f.next_lsn - 1;
    } else {
      o["last_lsn"] = nullptr;
    }
    o["next_lsn"] = f.next_lsn;
  }
  if (f.damage) {
    json::object d;
    d["kind"] = wal::DamageKindName(f.damage->kind);
    d["offset"] = f.damage->offset;
    d["reason"] = f.damage->reason;
    if (f.damage->kind == wal::DamageKind::kTornTail) d["torn_bytes"] = f.torn_bytes;
    o["damage"] = std::move(d);
  }
  return o;
}

std::string OrDash(std::optional<uint64_t> v) { return v ? std::to_string(*v) : "-"; }

void PrintStatsText(const std::string& dir, const ScanReport& report, const Totals& t,
                    const std::array<uint64_t, kEffectTypeSlots>& by_type) {
  std::printf("data directory: %s\n", dir.c_str());
  std::printf("%-32s %-8s %12s %10s %12s %12s  %s\n", "FILE", "KIND", "BYTES", "RECORDS",
              "FIRST_LSN", "LAST_LSN", "NOTE");
  for (const FileReport& f : report.files) {
    std::optional<uint64_t> first, last;
    std::string note;
    if (f.file.kind == LogFileKind::kSnapshot) {
      note = "covered LSN " + std::to_string(f.file.number);
    } else if (f.header_read && f.records > 0) {
      first = f.header_lsn;
      last = f.next_lsn - 1;
    } else if (f.header_read) {
      note = "empty, starts at LSN " + std::to_string(f.header_lsn);
    }
    if (f.damage) {
      if (!note.empty()) note += "; ";
      note += std::string(wal::DamageKindName(f.damage->kind)) + " at offset " +
              std::to_string(f.damage->offset) + ": " + f.damage->reason;
      if (f.damage->kind == wal::DamageKind::kTornTail) {
        note += " (" + TornTailAction(f) + ")";
      }
    }
    std::printf("%-32s %-8s %12llu %10llu %12s %12s%s%s\n", f.file.name.c_str(),
                std::string(LogFileKindName(f.file.kind)).c_str(),
                static_cast<unsigned long long>(f.bytes),
                static_cast<unsigned long long>(f.records), OrDash(first).c_str(),
                OrDash(last).c_str(), note.empty() ? "" : "  ", note.c_str());
  }
  std::printf("segments: %llu  snapshots: %llu  bytes: %llu  records: %llu\n",
              static_cast<unsigned long long>(t.segments),
              static_cast<unsigned long long>(t.snapshots),
              static_cast<unsigned long long>(t.bytes), static_cast<unsigned long long>(t.records));
  std::string effects = "effects:";
  for (size_t i = 1; i < kEffectTypeSlots; ++i) {
    if (i >= kAlwaysShownTypes && by_type[i] == 0) continue;
    effects += std::string(i == 1 ? " " : ", ") +
               std::string(EffectTypeName(static_cast<EffectType>(i))) + " " +
               std::to_string(by_type[i]);
  }
  PrintLine(stdout, effects);
  std::printf("newest snapshot: %s\n",
              t.newest_snapshot_lsn
                  ? ("covered LSN " + std::to_string(*t.newest_snapshot_lsn)).c_str()
                  : "none");
  if (t.first_lsn) {
    std::printf("segment LSNs: first %llu, next %llu\n",
                static_cast<unsigned long long>(*t.first_lsn),
                static_cast<unsigned long long>(*t.next_lsn));
  }
}

int Stats(wal::FileSystem* fs, const std::string& dir, bool as_json) {
  std::array<uint64_t, kEffectTypeSlots> by_type{};
  ScanReport report;
  Status s = ScanLogDirectory(
      fs, dir, ScanOptions{},
      [&by_type](const ScannedRecord& record) {
        if (record.effect != nullptr) ++by_type[static_cast<size_t>(record.effect->type)];
      },
      &report);
  if (!s.ok()) return IoError(dir, s);
  const Totals t(report);
  if (!as_json) {
    PrintStatsText(dir, report, t, by_type);
  } else {
    json::object o;
    o["dir"] = dir;
    json::array files;
    for (const FileReport& f : report.files) files.push_back(FileToJson(f));
    o["files"] = std::move(files);
    o["segments"] = t.segments;
    o["snapshots"] = t.snapshots;
    o["bytes"] = t.bytes;
    o["records"] = t.records;
    json::object effects;
    for (size_t i = 1; i < kEffectTypeSlots; ++i) {
      if (i >= kAlwaysShownTypes && by_type[i] == 0) continue;
      effects[EffectTypeName(static_cast<EffectType>(i))] = by_type[i];
    }
    o["effects_by_type"] = std::move(effects);
    auto optional = [](std::optional<uint64_t> v) { return v ? json::value(*v) : json::value(); };
    o["newest_snapshot_lsn"] = optional(t.newest_snapshot_lsn);
    o["first_lsn"] = optional(t.first_lsn);
    o["next_lsn"] = optional(t.next_lsn);
    o["damaged"] = report.first_corruption() != nullptr;
    PrintLine(stdout, json::serialize(o));
  }
  return report.first_corruption() ? kExitDamaged : kExitOk;
}

int Main(int argc, char** argv) {
  CLI::App app{"Inspect a Sundial data directory (WAL segments and snapshots) read-only.",
               "sundial-wal"};
  app.require_subcommand(1);
  std::string dir;
  bool as_json = false;
  CLI::App* verify = app.add_subcommand(
      "verify", "Check every snapshot and segment; exit 1 naming the first bad record.");
  verify->add_option("DIR", dir, "data directory")->required();
  CLI::App* dump = app.add_subcommand("dump", "Print every record as one JSON object per line.");
  dump->add_option("DIR", dir, "data directory")->required();
  CLI::App* stats = app.add_subcommand("stats", "Per-file and total counts.");
  stats->add_option("DIR", dir, "data directory")->required();
  stats->add_flag("--json", as_json, "print one JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; every other parse error is bad usage.
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }

  std::unique_ptr<wal::FileSystem> fs = wal::NewPosixFileSystem();
  if (verify->parsed()) return Verify(fs.get(), dir);
  if (dump->parsed()) return Dump(fs.get(), dir);
  return Stats(fs.get(), dir, as_json);
}

}  // namespace
}  // namespace sundial::tools

int main(int argc, char** argv) { return sundial::tools::Main(argc, argv); }
