// LogReader: reads one file written by LogWriter (a WAL segment or a snapshot) record by record,
// checking the file header, every record's length bound, checksum and type
// (docs/wal-format.md, "Reading: torn tail versus damage").
//
// The first record it cannot accept ends the read: it is reported once, to one
// CorruptionReporter, with the file name, the byte offset of the damaged record (or header) and
// a reason, classified as a torn tail (a truncated or zeroed record at the very end of the last
// file: what a crash mid-write leaves) or as corruption (a bad checksum, a length above
// kMaxRecordBytes, an unknown type, a bad header, a truncation in a file that is not the last).
// The reader never resynchronises past damage and never returns a record that failed a check.
//
// Memory: a record's length is checked against kMaxRecordBytes before anything is allocated,
// and payloads are read in 64 KiB chunks, so the buffer never exceeds about twice the bytes
// actually present.
//
// I/O errors (the file could not be read) are not damage: ReadRecord returns false and status()
// holds the error; nothing is reported.
//
// Thread safety: none; one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "engine/status.h"
#include "wal/file.h"
#include "wal/log_format.h"

namespace sundial::wal {

enum class DamageKind : uint8_t {
  kTornTail = 0,    // recovery cuts the file at `offset` and goes on
  kCorruption = 1,  // recovery stops (unless repairing)
};
std::string_view DamageKindName(DamageKind kind);  // "torn tail", "corruption"

struct Corruption {
  std::string file;
  uint64_t offset = 0;  // of the record (or file header) that failed
  DamageKind kind = DamageKind::kCorruption;
  std::string reason;
};
// "wal-0000000000000001.log at offset 123: corruption: record checksum mismatch"
std::string ToString(const Corruption& c);

class CorruptionReporter {
 public:
  virtual ~CorruptionReporter() = default;
  virtual void Report(const Corruption& damage) = 0;
};

// Keeps the first damage reported: for a caller that acts on it (recovery, a repair).
class FirstCorruption final : public CorruptionReporter {
 public:
  void Report(const Corruption& damage) override {
    if (!first_) first_ = damage;
  }
  const std::optional<Corruption>& first() const { return first_; }

 private:
  std::optional<Corruption> first_;
};

class LogReader {
 public:
  struct Options {
    std::string_view magic = kSegmentMagic;
    // True for the last segment of the log: only there can a tail be torn.
    bool last_file = true;
    // When set, the header's file_number must equal it (the number in the file's name).
    std::optional<uint64_t> expected_file_number;
  };

  struct Record {
    RecordType type = RecordType::kEffect;
    uint64_t lsn = 0;          // header.lsn + index of the record in the file
    uint64_t offset = 0;       // byte offset of the record header in the file
    std::string_view payload;  // valid until the next ReadRecord
  };

  // `reporter` may be null and must outlive the reader. `file_name` is used in reports only.
  LogReader(std::unique_ptr<SequentialFile> file, std::string file_name,
            CorruptionReporter* reporter, Options options);
  LogReader(const LogReader&) = delete;
  LogReader& operator=(const LogReader&) = delete;

  // Reads and checks the header (ReadRecord does so first if not yet done). False on damage
  // (reported) or I/O error.
  bool ReadHeader();
  // The next good record; false at the clean end of the file, at damage or on I/O error.
  bool ReadRecord(Record* record);

  // Valid after ReadHeader returned true.
  const FileHeader& header() const { return header_; }
  // The offset just past the last good record (or the header): where a torn tail is cut.
  uint64_t valid_bytes() const { return valid_bytes_; }
  // LSN the next record would have: header.lsn + good records read.
  uint64_t next_lsn() const { return next_lsn_; }
  // The damage reported, if any.
  const std::optional<Corruption>& damage() const { return damage_; }
  // The I/O error that stopped the read, or OK.
  Status status() const { return status_; }

 private:
  // Reads up to n bytes, appending to buffer_ in bounded chunks. Returns bytes read; sets
  // status_ on I/O error.
  size_t ReadInto(size_t n);
  // True when every byte from the current position to the end of the file is zero.
  bool RestIsZero(std::string_view already_read);
  bool Stop(uint64_t offset, DamageKind kind, std::string reason);
  // A truncation at `offset`: a torn tail in the last file, corruption elsewhere.
  bool Truncated(uint64_t offset, std::string reason);

  std::unique_ptr<SequentialFile> file_;
  const std::string file_name_;
  CorruptionReporter* const reporter_;
  const Options options_;

  FileHeader header_;
  bool header_read_ = false;
  bool done_ = false;
  uint64_t offset_ = 0;  // bytes consumed from the file
  uint64_t valid_bytes_ = 0;
  uint64_t next_lsn_ = 0;
  std::optional<Corruption> damage_;
  Status status_;
  std::string buffer_;
};

}  // namespace sundial::wal
