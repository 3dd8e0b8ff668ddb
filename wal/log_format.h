// Log format: the constants and fixed layouts of WAL segments and snapshots. The grammar is
// defined in docs/wal-format.md (version 2, and every older version it still reads); this
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
inline constexpr uint32_t kFormatVersion = 2;
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

// "wal-000000000000002a.log" and back; nullopt for any other name.
std::string SegmentFileName(uint64_t segment_number);
std::optional<uint64_t> ParseSegmentFileName(std::string_view name);
// "snapshot-00000000000f4240.snap" and back; nullopt for any other name (".tmp" included).
std::string SnapshotFileName(uint64_t covered_lsn);
std::optional<uint64_t> ParseSnapshotFileName(std::string_view name);
inline constexpr std::string_view kTempSuffix = ".tmp";

// Little-endian fixed-width helpers shared by the codec, writer and reader.
void PutFixed32(std::string* out, uint32_t v);
void PutFixed64(std::string* out, uint64_t v);
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

}  // namespace sundial::wal
