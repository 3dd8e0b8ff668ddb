#include "wal/log_reader.h"

#include <algorithm>

namespace sundial::wal {
namespace {

constexpr size_t kReadChunkBytes = 64 << 10;

bool AllZero(std::string_view bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == '\0'; });
}

}  // namespace

std::string_view DamageKindName(DamageKind kind) {
  return kind == DamageKind::kTornTail ? "torn tail" : "corruption";
}

std::string ToString(const Corruption& c) {
  std::string s = c.file;
  s += " at offset ";
  s += std::to_string(c.offset);
  s += ": ";
  s += DamageKindName(c.kind);
  s += ": ";
  s += c.reason;
  return s;
}

LogReader::LogReader(std::unique_ptr<SequentialFile> file, std::string file_name,
                     CorruptionReporter* reporter, Options options)
    : file_(std::move(file)),
      file_name_(std::move(file_name)),
      reporter_(reporter),
      options_(options) {}

size_t LogReader::ReadInto(size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t want = std::min(kReadChunkBytes, n - got);
    size_t old = buffer_.size();
    buffer_.resize(old + want);
    std::string_view chunk;
    Status s = file_->Read(want, buffer_.data() + old, &chunk);
    if (!s.ok()) {
      status_ = s;
      buffer_.resize(old);
      return got;
    }
    if (chunk.data() != buffer_.data() + old) {
      std::copy(chunk.begin(), chunk.end(), buffer_.begin() + static_cast<ptrdiff_t>(old));
    }
    buffer_.resize(old + chunk.size());
    got += chunk.size();
    offset_ += chunk.size();
    if (chunk.size() < want) break;
  }
  return got;
}

bool LogReader::RestIsZero(std::string_view already_read) {
  if (!AllZero(already_read)) return false;
  while (true) {
    buffer_.clear();
    size_t got = ReadInto(kReadChunkBytes);
    if (!status_.ok()) return false;
    if (!AllZero(buffer_)) return false;
    if (got < kReadChunkBytes) return true;
  }
}

bool LogReader::Stop(uint64_t offset, DamageKind kind, std::string reason) {
  done_ = true;
  if (!status_.ok()) return false;  // an I/O error is not damage
  damage_ = Corruption{file_name_, offset, kind, std::move(reason)};
  if (reporter_ != nullptr) reporter_->Report(*damage_);
  return false;
}

bool LogReader::Truncated(uint64_t offset, std::string reason) {
  if (options_.last_file) return Stop(offset, DamageKind::kTornTail, std::move(reason));
  return Stop(offset, DamageKind::kCorruption, reason + " in a segment that is not the last");
}

bool LogReader::ReadHeader() {
  if (header_read_) return true;
  if (done_) return false;
  buffer_.clear();
  size_t got = ReadInto(kFileHeaderBytes);
  if (!status_.ok()) return Stop(0, DamageKind::kCorruption, "");
  std::string_view bytes = buffer_;
  if (got < kFileHeaderBytes) {
    return Truncated(0, got == 0 ? "empty file" : "truncated file header");
  }
  if (AllZero(bytes)) {
    if (options_.last_file && RestIsZero({})) {
      return Stop(0, DamageKind::kTornTail, "zeroed file header");
    }
    return Stop(0, DamageKind::kCorruption, "zeroed file header");
  }
  switch (ParseFileHeader(bytes, options_.magic, &header_)) {
    case HeaderError::kNone:
      break;
    case HeaderError::kBadMagic:
      return Stop(0, DamageKind::kCorruption, "bad file magic");
    case HeaderError::kBadChecksum:
      return Stop(0, DamageKind::kCorruption, "file header checksum mismatch");
    case HeaderError::kUnsupportedVersion:
      return Stop(0, DamageKind::kCorruption, "unsupported format version");
  }
  if (options_.expected_file_number && header_.file_number != *options_.expected_file_number) {
    return Stop(0, DamageKind::kCorruption, "file number in header does not match file name");
  }
  header_read_ = true;
  valid_bytes_ = kFileHeaderBytes;
  next_lsn_ = header_.lsn;
  return true;
}

bool LogReader::ReadRecord(Record* record) {
  if (!ReadHeader() || done_) return false;
  const uint64_t start = offset_;
  buffer_.clear();
  size_t got = ReadInto(kRecordHeaderBytes);
  if (!status_.ok()) return Stop(start, DamageKind::kCorruption, "");
  if (got == 0) {
    done_ = true;  // clean end of file
    return false;
  }
  const std::string header_bytes = buffer_;
  if (got < kRecordHeaderBytes) {
    if (options_.last_file && AllZero(header_bytes)) {
      return Stop(start, DamageKind::kTornTail, "zeroed tail");
    }
    return Truncated(start, "truncated record header");
  }
  const uint32_t length = DecodeFixed32(header_bytes.data());
  const auto type = static_cast<uint8_t>(header_bytes[4]);
  const uint64_t checksum = DecodeFixed64(header_bytes.data() + 5);
  if (options_.last_file && AllZero(header_bytes)) {
    if (RestIsZero({})) return Stop(start, DamageKind::kTornTail, "zeroed tail");
    if (!status_.ok()) return Stop(start, DamageKind::kCorruption, "");
    return Stop(start, DamageKind::kCorruption, "zeroed record followed by data");
  }
  if (length > kMaxRecordBytes) {
    return Stop(start, DamageKind::kCorruption, "record length exceeds the maximum");
  }
  buffer_.clear();
  got = ReadInto(length);
  if (!status_.ok()) return Stop(start, DamageKind::kCorruption, "");
  if (got < length) return Truncated(start, "truncated record payload");
  std::string_view payload = buffer_;
  if (RecordChecksum(type, header_.file_number, payload) != checksum) {
    return Stop(start, DamageKind::kCorruption, "record checksum mismatch");
  }
  if (type == 0 || type > kMaxRecordType) {
    return Stop(start, DamageKind::kCorruption, "unknown record type");
  }
  record->type = static_cast<RecordType>(type);
  record->lsn = next_lsn_++;
  record->offset = start;
  record->payload = payload;
  valid_bytes_ = offset_;
  return true;
}

}  // namespace sundial::wal
