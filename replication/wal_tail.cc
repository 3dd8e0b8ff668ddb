#include "replication/wal_tail.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "wal/log_format.h"

namespace sundial::replication {
namespace {

using wal::DecodeFixed32;
using wal::kFileHeaderBytes;
using wal::kRecordHeaderBytes;

// Reads n bytes into `into` (fewer at the end of the file); *got says how many.
Status ReadFully(wal::SequentialFile* file, size_t n, char* into, size_t* got) {
  *got = 0;
  while (*got < n) {
    std::string_view part;
    if (Status s = file->Read(n - *got, into + *got, &part); !s.ok()) return s;
    if (part.empty()) break;
    if (part.data() != into + *got) std::copy(part.begin(), part.end(), into + *got);
    *got += part.size();
  }
  return Status::Ok();
}

// Reads n bytes (fewer at the end of the file) into *scratch; *out views them.
Status ReadUpTo(wal::SequentialFile* file, size_t n, std::string* scratch, std::string_view* out) {
  scratch->resize(n);
  size_t got = 0;
  Status s = ReadFully(file, n, scratch->data(), &got);
  *out = std::string_view(scratch->data(), got);
  return s;
}

// The numbers of the directory's segments, oldest first.
Result<std::vector<uint64_t>> SegmentNumbers(wal::FileSystem* fs, const std::string& dir) {
  auto names = fs->ListDir(dir);
  if (!names.ok()) return names.status();
  std::vector<uint64_t> numbers;
  for (const std::string& name : *names) {
    if (auto n = wal::ParseSegmentFileName(name)) numbers.push_back(*n);
  }
  std::sort(numbers.begin(), numbers.end());
  return numbers;
}

}  // namespace

void WalTail::LimitReads(wal::SequentialFile* file, uint64_t number) const {
  if (written_ && number == written_->segment_number) file->SetReadLimit(written_->segment_bytes);
}

Status WalTail::Open(uint64_t number, uint64_t* first_lsn) {
  const std::string path = wal::JoinPath(dir_, wal::SegmentFileName(number));
  auto file = fs_->NewSequentialFile(path);
  if (!file.ok()) return file.status();
  LimitReads(file->get(), number);  // the header is written before the segment is in use
  std::string_view header;
  if (Status s = ReadUpTo(file->get(), kFileHeaderBytes, &scratch_, &header); !s.ok()) return s;
  wal::FileHeader parsed;
  if (header.size() < kFileHeaderBytes ||
      wal::ParseFileHeader(header, wal::kSegmentMagic, &parsed) != wal::HeaderError::kNone ||
      parsed.file_number != number) {
    return Status(Code::kInternal, "replication: a segment's header is damaged: " + path);
  }
  file_ = std::move(file).value();
  segment_ = number;
  offset_ = kFileHeaderBytes;
  *first_lsn = parsed.lsn;
  return Status::Ok();
}

Status WalTail::Reread() {
  const std::string path = wal::JoinPath(dir_, wal::SegmentFileName(segment_));
  auto file = fs_->NewSequentialFile(path);
  if (!file.ok()) return file.status();
  LimitReads(file->get(), segment_);
  if (Status s = (*file)->Skip(offset_); !s.ok()) return s;
  file_ = std::move(file).value();
  return Status::Ok();
}

Status WalTail::FindSegmentStartingAt(uint64_t lsn, uint64_t* number, bool* found) {
  *found = false;
  auto numbers = SegmentNumbers(fs_, dir_);
  if (!numbers.ok()) return numbers.status();
  // Newest first: the segment that starts at `lsn` is usually the last one (a rotation).
  for (auto it = numbers->rbegin(); it != numbers->rend(); ++it) {
    uint64_t first = 0;
    if (Status s = Open(*it, &first); !s.ok()) return s;
    if (first == lsn) {
      *number = *it;
      *found = true;
      return Status::Ok();  // left open, positioned at its first record
    }
    if (first < lsn) break;
  }
  file_.reset();
  return Status::Ok();
}

Result<uint64_t> WalTail::OldestLsn() {
  auto numbers = SegmentNumbers(fs_, dir_);
  if (!numbers.ok()) return numbers.status();
  WalTail probe(fs_, dir_);  // this tail keeps its position
  for (uint64_t number : *numbers) {
    uint64_t first = 0;
    Status s = probe.Open(number, &first);
    if (s.code() == Code::kNotFound) continue;  // a checkpoint removed it since the listing
    if (!s.ok()) return s;
    return first;
  }
  return uint64_t{0};
}

Status WalTail::Seek(uint64_t lsn) {
  file_.reset();
  auto numbers = SegmentNumbers(fs_, dir_);
  if (!numbers.ok()) return numbers.status();
  // The newest segment that starts at or before `lsn` holds it (or ends exactly there, when it
  // is the active one and `lsn` is its end).
  for (auto it = numbers->rbegin(); it != numbers->rend(); ++it) {
    uint64_t first = 0;
    Status opened = Open(*it, &first);
    // Removed by a checkpoint since the listing: it and every older one are gone.
    if (opened.code() == Code::kNotFound) break;
    if (!opened.ok()) return opened;
    if (first > lsn) continue;
    lsn_ = first;
    // Skip the records before `lsn`: their headers say how long each is.
    while (lsn_ < lsn) {
      std::string_view header;
      if (Status s = ReadUpTo(file_.get(), kRecordHeaderBytes, &scratch_, &header); !s.ok()) {
        return s;
      }
      if (header.size() < kRecordHeaderBytes || header[4] == 0) {
        return Status(Code::kNotFound, "replication: the log does not reach the LSN asked for");
      }
      if (Status s = file_->Skip(DecodeFixed32(header.data())); !s.ok()) return s;
      offset_ += kRecordHeaderBytes + DecodeFixed32(header.data());
      ++lsn_;
    }
    return Status::Ok();
  }
  file_.reset();
  return Status(Code::kNotFound, "replication: no segment holds that LSN any more");
}

Status WalTail::Read(const wal::GroupCommitLog::WrittenPosition& written, size_t max_bytes,
                     Chunk* chunk) {
  chunk->bytes.clear();
  chunk->count = 0;
  chunk->first_lsn = lsn_;
  chunk->segment_number = segment_;
  if (file_ == nullptr)
    return Status(Code::kFailedPrecondition, "replication: tail not positioned");
  written_ = written;
  const uint64_t end_lsn = written.end_lsn;
  LimitReads(file_.get(), segment_);
  bool reread = false;  // the record at offset_ was read again from the disk
  while (lsn_ < end_lsn && (chunk->count == 0 || chunk->bytes.size() < max_bytes)) {
    std::string_view header;
    if (Status s = ReadUpTo(file_.get(), kRecordHeaderBytes, &scratch_, &header); !s.ok()) {
      return s;
    }
    if (header.size() < kRecordHeaderBytes || header[4] == 0) {
      if (chunk->count > 0) return Reread();  // a chunk never spans two segments
      if (!reread) {                          // stale read-ahead, or truly this segment's end
        if (Status s = Reread(); !s.ok()) return s;
        reread = true;
        continue;
      }
      // The end of this segment's records (its end, or preallocated zeroes): the log rotated,
      // and the record at lsn_ is the first of the next segment.
      uint64_t next = 0;
      bool found = false;
      if (Status s = FindSegmentStartingAt(lsn_, &next, &found); !s.ok()) return s;
      if (!found) {
        return Status(Code::kInternal, "replication: record " + std::to_string(lsn_) +
                                           " was written but no segment holds it");
      }
      chunk->segment_number = segment_;
      reread = false;
      continue;
    }
    // The whole record, then the checks every reader makes (wal::CheckRecord).
    const uint32_t length = DecodeFixed32(header.data());
    const size_t at = chunk->bytes.size();
    wal::CheckedRecord record;
    bool whole = length <= wal::kMaxRecordBytes;
    if (whole) {
      chunk->bytes.append(header);
      chunk->bytes.resize(at + kRecordHeaderBytes + length);
      size_t got = 0;
      if (Status s =
              ReadFully(file_.get(), length, chunk->bytes.data() + at + kRecordHeaderBytes, &got);
          !s.ok()) {
        return s;
      }
      chunk->bytes.resize(at + kRecordHeaderBytes + got);  // a cut record checks as kCut
      whole = wal::CheckRecord(std::string_view(chunk->bytes).substr(at), segment_, &record) ==
              wal::RecordCheck::kOk;
    }
    if (!whole) {
      chunk->bytes.resize(at);
      if (chunk->count > 0) {  // ship what is whole; the next call reads this one again
        if (Status s = Reread(); !s.ok()) return s;
        return Status::Ok();
      }
      if (!reread) {
        if (Status s = Reread(); !s.ok()) return s;
        reread = true;
        continue;
      }
      return Status(Code::kInternal, "replication: a damaged record " + std::to_string(lsn_) +
                                         " in segment " + std::to_string(segment_));
    }
    ++chunk->count;
    ++lsn_;
    offset_ += kRecordHeaderBytes + length;
    reread = false;
  }
  return Status::Ok();
}

}  // namespace sundial::replication
