#include "wal/log_format.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <charconv>
#include <cstring>

namespace sundial::wal {

void AppendFileHeader(const FileHeader& header, std::string* out) {
  std::string buf;
  buf.reserve(kFileHeaderBytes);
  buf.append(header.magic.data(), 8);
  PutFixed32(&buf, header.version);
  PutFixed64(&buf, header.file_number);
  PutFixed64(&buf, header.lsn);
  PutFixed64(&buf, XXH3_64bits(buf.data(), buf.size()));
  out->append(buf);
}

HeaderError ParseFileHeader(std::string_view bytes, std::string_view magic, FileHeader* header) {
  if (bytes.size() != kFileHeaderBytes || bytes.substr(0, 8) != magic) {
    return HeaderError::kBadMagic;
  }
  const size_t body = kFileHeaderBytes - 8;
  if (XXH3_64bits(bytes.data(), body) != DecodeFixed64(bytes.data() + body)) {
    return HeaderError::kBadChecksum;
  }
  const uint32_t version = DecodeFixed32(bytes.data() + 8);
  if (version < kOldestReadableVersion || version > kFormatVersion) {
    return HeaderError::kUnsupportedVersion;
  }
  header->magic = magic;
  header->version = version;
  header->file_number = DecodeFixed64(bytes.data() + 12);
  header->lsn = DecodeFixed64(bytes.data() + 20);
  return HeaderError::kNone;
}

uint64_t RecordChecksum(uint8_t type, uint64_t file_number, std::string_view payload) {
  char prefix[9];
  prefix[0] = static_cast<char>(type);
  for (int i = 0; i < 8; ++i) prefix[1 + i] = static_cast<char>((file_number >> (8 * i)) & 0xff);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, prefix, sizeof(prefix));
  XXH3_64bits_update(&state, payload.data(), payload.size());
  return XXH3_64bits_digest(&state);
}

size_t BeginRecord(std::string* out) {
  const size_t start = out->size();
  out->append(kRecordHeaderBytes, '\0');
  return start;
}

bool FrameRecord(RecordType type, size_t start, std::string* out) {
  const size_t length = out->size() - start - kRecordHeaderBytes;
  if (length > kMaxRecordBytes) {
    out->resize(start);
    return false;
  }
  char* header = out->data() + start;
  for (int i = 0; i < 4; ++i) header[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  header[4] = static_cast<char>(type);
  return true;
}

void SealRecord(uint64_t file_number, char* record) {
  const std::string_view payload(record + kRecordHeaderBytes, DecodeFixed32(record));
  const uint64_t sum = RecordChecksum(static_cast<uint8_t>(record[4]), file_number, payload);
  for (int i = 0; i < 8; ++i) record[5 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
}

bool AppendRecord(RecordType type, uint64_t file_number, std::string_view payload,
                  std::string* out) {
  if (payload.size() > kMaxRecordBytes) return false;
  const size_t start = BeginRecord(out);
  out->append(payload);
  if (!FrameRecord(type, start, out)) return false;
  SealRecord(file_number, out->data() + start);
  return true;
}

RecordCheck CheckRecord(std::string_view bytes, uint64_t file_number, CheckedRecord* record) {
  if (bytes.size() < kRecordHeaderBytes) return RecordCheck::kCut;
  const uint32_t length = DecodeFixed32(bytes.data());
  if (length > kMaxRecordBytes) return RecordCheck::kTooLong;
  if (length > bytes.size() - kRecordHeaderBytes) return RecordCheck::kCut;
  const auto type = static_cast<uint8_t>(bytes[4]);
  const std::string_view payload = bytes.substr(kRecordHeaderBytes, length);
  if (RecordChecksum(type, file_number, payload) != DecodeFixed64(bytes.data() + 5)) {
    return RecordCheck::kBadChecksum;
  }
  if (type == 0 || type > kMaxRecordType) return RecordCheck::kUnknownType;
  record->type = static_cast<RecordType>(type);
  record->payload = payload;
  record->size = kRecordHeaderBytes + length;
  return RecordCheck::kOk;
}

namespace {

std::string NumberedName(std::string_view prefix, uint64_t number, std::string_view suffix) {
  char hex[17];
  static constexpr char kDigits[] = "0123456789abcdef";
  for (int i = 15; i >= 0; --i) {
    hex[i] = kDigits[number & 0xf];
    number >>= 4;
  }
  hex[16] = '\0';
  std::string name(prefix);
  name.append(hex, 16);
  name.append(suffix);
  return name;
}

std::optional<uint64_t> ParseNumberedName(std::string_view name, std::string_view prefix,
                                          std::string_view suffix) {
  if (name.size() != prefix.size() + 16 + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix)) {
    return std::nullopt;
  }
  std::string_view digits = name.substr(prefix.size(), 16);
  for (char c : digits) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, 16);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return std::nullopt;
  return value;
}

}  // namespace

std::string SegmentFileName(uint64_t segment_number) {
  return NumberedName("wal-", segment_number, ".log");
}
std::optional<uint64_t> ParseSegmentFileName(std::string_view name) {
  return ParseNumberedName(name, "wal-", ".log");
}
std::string SnapshotFileName(uint64_t covered_lsn) {
  return NumberedName("snapshot-", covered_lsn, ".snap");
}
std::optional<uint64_t> ParseSnapshotFileName(std::string_view name) {
  return ParseNumberedName(name, "snapshot-", ".snap");
}

}  // namespace sundial::wal
