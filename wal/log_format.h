// Log format: the constants and fixed layouts of WAL segments and snapshots. The grammar is
// defined in docs/wal-format.md (version 3, and every older version it still reads); this
// header must agree with it.
//
//   file    := file_header record*
//   record  := length:u32le type:u8 checksum:u64le payload:byte{length}
//   checksum = XXH3_64bits(type, file_number:u64le, payload)
//
// Thread safety: constants and pure functions only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sundial::wal {

// The version a writer writes. A reader accepts kOldestReadableVersion..kFormatVersion: each
// version only adds to the one before (docs/wal-format.md, "Versions"), so one decoder reads
// them all.
inline constexpr uint32_t kFormatVersion = 3;
inline constexpr uint32_t kOldestReadableVersion = 1;

inline constexpr std::string_view kSegmentMagic{"SUNDWAL\0", 8};
inline constexpr std::string_view kSnapshotMagic{"SUNDSNP\0", 8};

// magic:8 version:u32le file_number:u64le lsn:u64le header_checksum:u64le
inline constexpr size_t kFileHeaderBytes = 8 + 4 + 8 + 8 + 8;
// length:u32le type:u8 checksum:u64le
inline constexpr size_t kRecordHeaderBytes = 4 + 1 + 8;
// Largest payload a writer produces and a reader accepts (checked before any allocation).
inline constexpr uint32_t kMaxRecordBytes = 16u << 20;

enum class RecordType : uint8_t {
  kZero = 0,             // reserved: never written; what a zeroed region reads as
  kEffect = 1,           // payload: an encoded effect (effect_codec.h)
  kSnapshotTrailer = 2,  // payload: count:u64le digest:u64le (snapshots only)
};
inline constexpr uint8_t kMaxRecordType = 2;
// The payload of a kSnapshotTrailer record: count:u64le digest:u64le.
inline constexpr size_t kSnapshotTrailerBytes = 8 + 8;

// The decoded form of a file header. For a segment, file_number is the segment number and lsn
// the LSN of its first record; for a snapshot both are the covered LSN.
struct FileHeader {
  std::string_view magic = kSegmentMagic;
  uint32_t version = kFormatVersion;
  uint64_t file_number = 0;
  uint64_t lsn = 0;
};

// Appends the kFileHeaderBytes encoding of `header` (checksum included) to `out`.
void AppendFileHeader(const FileHeader& header, std::string* out);

enum class HeaderError : uint8_t { kNone, kBadMagic, kBadChecksum, kUnsupportedVersion };
// Parses exactly kFileHeaderBytes bytes, expecting `magic`. On success fills *header (its magic
// points to the constant `magic`).
HeaderError ParseFileHeader(std::string_view bytes, std::string_view magic, FileHeader* header);

// checksum of a record: XXH3_64bits over type, file_number (u64le) and payload.
uint64_t RecordChecksum(uint8_t type, uint64_t file_number, std::string_view payload);

// The record encoder: the only code that writes the record framing (LevelDB's
// log::Writer::EmitPhysicalRecord). Segments (GroupCommitLog) and snapshots (LogWriter) both
// frame records with it, and the golden test pins its bytes. A record is framed in two steps, so
// that a payload is encoded straight behind its header and a group of records can be framed
// before the writer knows the segment — the file number the checksum covers — it will land in:
//
//   const size_t start = BeginRecord(&out);                 // a zeroed header
//   EncodeEffect(effect, &out);                             // the payload: the rest of `out`
//   if (!FrameRecord(RecordType::kEffect, start, &out)) …   // length and type
//   SealRecord(file_number, out.data() + start);            // the checksum, when the file is known
//
// Reserves a record header at the end of *out (zeroes); returns the offset where it starts.
size_t BeginRecord(std::string* out);
// Fills the length and type of the record that starts at out[start], whose payload is the rest
// of *out. False, with *out cut back to `start`, when the payload exceeds kMaxRecordBytes.
bool FrameRecord(RecordType type, size_t start, std::string* out);
// Fills the checksum of the framed record at `record` as written in file `file_number`.
void SealRecord(uint64_t file_number, char* record);
// The bytes of the framed record at `record`, header included.
inline size_t FramedRecordBytes(const char* record);
// All three steps: appends `payload` as one sealed record of file `file_number`. False (nothing
// appended) when the payload exceeds kMaxRecordBytes.
bool AppendRecord(RecordType type, uint64_t file_number, std::string_view payload,
                  std::string* out);

// The checks every reader of framed records in memory makes (the replication tail and stream:
// replication/): the record at the start of `bytes`, as written in file `file_number`.
// LogReader makes the same checks while it reads a file, telling a torn tail from damage.
enum class RecordCheck : uint8_t {
  kOk,
  kCut,          // fewer bytes than its header, or than the length it says
  kTooLong,      // a length above kMaxRecordBytes
  kBadChecksum,  // the checksum over type, file number and payload does not match
  kUnknownType,  // zero, or above kMaxRecordType
};
struct CheckedRecord {
  RecordType type = RecordType::kZero;
  std::string_view payload;
  size_t size = 0;  // header included: where the next record starts
};
RecordCheck CheckRecord(std::string_view bytes, uint64_t file_number, CheckedRecord* record);

// "wal-000000000000002a.log" and back; nullopt for any other name.
std::string SegmentFileName(uint64_t segment_number);
std::optional<uint64_t> ParseSegmentFileName(std::string_view name);
// "snapshot-00000000000f4240.snap" and back; nullopt for any other name (".tmp" included).
std::string SnapshotFileName(uint64_t covered_lsn);
std::optional<uint64_t> ParseSnapshotFileName(std::string_view name);
inline constexpr std::string_view kTempSuffix = ".tmp";

// Little-endian fixed-width helpers shared by the codec, writer and reader.
// Inline: the encoder writes a dozen per effect, one effect per message (BM_EncodeEffect).
inline void PutFixed32(std::string* out, uint32_t v) {
  char buf[4];
  for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(buf, 4);
}
inline void PutFixed64(std::string* out, uint64_t v) {
  char buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(buf, 8);
}
// Inline: the decoder reads a dozen per effect, recovery millions of effects.
inline uint32_t DecodeFixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}
inline uint64_t DecodeFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

inline size_t FramedRecordBytes(const char* record) {
  return kRecordHeaderBytes + DecodeFixed32(record);
}

}  // namespace sundial::wal
