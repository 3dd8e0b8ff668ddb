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

Status LogWriter::CanAdd() const {
  if (!error_.ok()) return error_;
  if (!header_written_) return FailedPrecondition("wal: record before the file header");
  return Status::Ok();
}

Status LogWriter::AddRecord(RecordType type, std::string_view payload) {
  if (Status s = CanAdd(); !s.ok()) return s;
  scratch_.clear();
  if (!AppendRecord(type, header_.file_number, payload, &scratch_)) {
    return InvalidArgument("wal: record exceeds 16 MiB");
  }
  return AppendFramed();
}

Status LogWriter::AddEffect(const Effect& effect) {
  if (Status s = CanAdd(); !s.ok()) return s;
  scratch_.clear();
  const size_t start = BeginRecord(&scratch_);
  EncodeEffect(effect, &scratch_);
  if (!FrameRecord(RecordType::kEffect, start, &scratch_)) {
    return InvalidArgument("wal: record exceeds 16 MiB");
  }
  SealRecord(header_.file_number, scratch_.data() + start);
  return AppendFramed();
}

Status LogWriter::AppendFramed() {
  Status s = file_->Append(scratch_);
  if (!s.ok()) return Fail(s);
  bytes_written_ += scratch_.size();
  ++next_lsn_;
  return Status::Ok();
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
