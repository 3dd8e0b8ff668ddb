// Rewrites the checksums of a WAL file (segment or snapshot) so that fuzzed bytes get past them:
// without it nearly every mutation fails the XXH3 check of its record and the effect decoder
// and Engine::Apply behind it are never reached. The header's fields and every record's
// length and type are kept as they are; where a length runs past the end the walk stops.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "wal/log_format.h"

namespace sundial::fuzz {

inline void FixChecksums(std::string* file) {
  using namespace sundial::wal;
  if (file->size() < kFileHeaderBytes) return;
  FileHeader header;
  header.magic = std::string_view(file->data(), 8);
  header.version = DecodeFixed32(file->data() + 8);
  header.file_number = DecodeFixed64(file->data() + 12);
  header.lsn = DecodeFixed64(file->data() + 20);
  std::string encoded;
  AppendFileHeader(header, &encoded);
  file->replace(0, kFileHeaderBytes, encoded);
  size_t at = kFileHeaderBytes;
  while (file->size() - at >= kRecordHeaderBytes) {
    const uint32_t length = DecodeFixed32(file->data() + at);
    const uint8_t type = static_cast<uint8_t>((*file)[at + 4]);
    if (length > file->size() - at - kRecordHeaderBytes) return;
    const std::string_view payload(file->data() + at + kRecordHeaderBytes, length);
    std::string checksum;
    PutFixed64(&checksum, RecordChecksum(type, header.file_number, payload));
    file->replace(at + 5, 8, checksum);
    at += kRecordHeaderBytes + length;
  }
}

}  // namespace sundial::fuzz
