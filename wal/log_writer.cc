#include "wal/log_writer.h"

#include "wal/effect_codec.h"

namespace sundial::wal {

LogWriter::LogWriter(std::unique_ptr<WritableFile> file, FileHeader header)
    : file_(std::move(file)), header_(header), next_lsn_(header.lsn) {}

Status LogWriter::Fail(Status s) {
  if (error_.ok()) error_ = s;
  return error_;
}

Status LogWriter::WriteHeader() {
  if (!error_.ok()) return error_;
  if (header_written_) return FailedPrecondition("wal: header already written");
  std::string bytes;
  AppendFileHeader(header_, &bytes);
  Status s = file_->Append(bytes);
  if (!s.ok()) return Fail(s);
  header_written_ = true;
  bytes_written_ += bytes.size();
  return Status::Ok();
}

Status LogWriter::AddRecord(RecordType type, std::string_view payload) {
  if (!error_.ok()) return error_;
  if (!header_written_) return FailedPrecondition("wal: record before the file header");
  if (payload.size() > kMaxRecordBytes) return InvalidArgument("wal: record exceeds 16 MiB");
  const auto type_byte = static_cast<uint8_t>(type);
  std::string header;
  header.reserve(kRecordHeaderBytes);
  PutFixed32(&header, static_cast<uint32_t>(payload.size()));
  header.push_back(static_cast<char>(type_byte));
  PutFixed64(&header, RecordChecksum(type_byte, header_.file_number, payload));
  Status s = file_->Append(header);
  if (s.ok()) s = file_->Append(payload);
  if (!s.ok()) return Fail(s);
  bytes_written_ += kRecordHeaderBytes + payload.size();
  ++next_lsn_;
  return Status::Ok();
}

Status LogWriter::AddEffect(const Effect& effect) {
  scratch_.clear();
  EncodeEffect(effect, &scratch_);
  return AddRecord(RecordType::kEffect, scratch_);
}

Status LogWriter::Flush() {
  if (!error_.ok()) return error_;
  Status s = file_->Flush();
  return s.ok() ? s : Fail(s);
}

Status LogWriter::Sync() {
  if (!error_.ok()) return error_;
  Status s = file_->Sync();
  return s.ok() ? s : Fail(s);
}

Status LogWriter::Close() {
  if (!error_.ok()) return error_;
  Status s = file_->Close();
  return s.ok() ? s : Fail(s);
}

}  // namespace sundial::wal
