#include "wal/fault_injection_file_system.h"

namespace sundial::wal {

class FaultInjectionWritableFile final : public WritableFile {
 public:
  FaultInjectionWritableFile(FaultInjectionFileSystem* fs, std::unique_ptr<WritableFile> base,
                             std::shared_ptr<FaultInjectionFileSystem::FileState> state,
                             uint64_t generation)
      : fs_(fs), base_(std::move(base)), state_(std::move(state)), generation_(generation) {}

  Status Append(std::string_view data) override {
    MutexLock lock(&fs_->mu_);
    if (fs_->generation_ != generation_) return Unavailable("wal: file lost in simulated crash");
    if (fs_->append_no_space_) {
      fs_->append_no_space_ = false;
      return ResourceExhausted("wal: write failed (injected ENOSPC)");
    }
    if (fs_->short_append_) {
      size_t keep = std::min(*fs_->short_append_, data.size());
      fs_->short_append_.reset();
      Status s = base_->Append(data.substr(0, keep));
      if (s.ok()) s = base_->Flush();
      if (s.ok()) state_->size += keep;
      return Status(Code::kInternal, "wal: write failed (injected short write)");
    }
    // Flushed at once, so no bytes wait in the base's buffer when a crash is simulated.
    Status s = base_->Append(data);
    if (s.ok()) s = base_->Flush();
    if (s.ok()) state_->size += data.size();
    return s;
  }

  Status Flush() override {
    MutexLock lock(&fs_->mu_);
    if (fs_->generation_ != generation_) return Unavailable("wal: file lost in simulated crash");
    return base_->Flush();
  }

  Status Sync() override {
    MutexLock lock(&fs_->mu_);
    if (fs_->generation_ != generation_) return Unavailable("wal: file lost in simulated crash");
    if (fs_->sync_io_error_) {
      fs_->sync_io_error_ = false;
      // Hand the bytes to the base (as the kernel would have them), but nothing is durable.
      (void)base_->Flush();
      return Status(Code::kInternal, "wal: fdatasync failed (injected EIO)");
    }
    Status s = base_->Sync();
    if (s.ok()) state_->synced = state_->size;
    return s;
  }

  // Every Append reaches the base at once (see Append), so what was appended is what was
  // handed to the OS.
  Status SyncFlushed() override { return Sync(); }

  Status Close() override {
    MutexLock lock(&fs_->mu_);
    if (fs_->generation_ != generation_) return Unavailable("wal: file lost in simulated crash");
    return base_->Close();
  }

  void SetPreallocation(uint64_t chunk_bytes) override { base_->SetPreallocation(chunk_bytes); }
  bool PreallocationLow() const override { return base_->PreallocationLow(); }
  Status PreallocateAhead() override {
    MutexLock lock(&fs_->mu_);
    if (fs_->generation_ != generation_) return Unavailable("wal: file lost in simulated crash");
    return base_->PreallocateAhead();
  }

 private:
  FaultInjectionFileSystem* const fs_;
  std::unique_ptr<WritableFile> base_;
  std::shared_ptr<FaultInjectionFileSystem::FileState> state_;
  const uint64_t generation_;
};

void FaultInjectionFileSystem::FailNextAppendWithNoSpace() {
  MutexLock lock(&mu_);
  append_no_space_ = true;
}

void FaultInjectionFileSystem::ShortenNextAppend(size_t keep_bytes) {
  MutexLock lock(&mu_);
  short_append_ = keep_bytes;
}

void FaultInjectionFileSystem::FailNextSyncWithIoError() {
  MutexLock lock(&mu_);
  sync_io_error_ = true;
}

Status FaultInjectionFileSystem::SimulateCrash() {
  MutexLock lock(&mu_);
  ++generation_;
  append_no_space_ = false;
  short_append_.reset();
  sync_io_error_ = false;
  for (auto& [path, state] : files_) {
    if (!base_->FileExists(path)) continue;
    Status s = base_->TruncateFile(path, state->synced);
    if (!s.ok()) return s;
    state->size = state->synced;
  }
  return Status::Ok();
}

uint64_t FaultInjectionFileSystem::SyncedBytes(const std::string& path) {
  MutexLock lock(&mu_);
  auto it = files_.find(path);
  return it == files_.end() ? 0 : it->second->synced;
}

Result<std::unique_ptr<WritableFile>> FaultInjectionFileSystem::Wrap(
    const std::string& path, Result<std::unique_ptr<WritableFile>> base, uint64_t existing_bytes) {
  if (!base.ok()) return base.status();
  MutexLock lock(&mu_);
  auto state = std::make_shared<FileState>();
  state->size = state->synced = existing_bytes;
  files_[path] = state;
  return std::unique_ptr<WritableFile>(std::make_unique<FaultInjectionWritableFile>(
      this, std::move(base).value(), std::move(state), generation_));
}

Result<std::unique_ptr<WritableFile>> FaultInjectionFileSystem::NewWritableFile(
    const std::string& path) {
  return Wrap(path, base_->NewWritableFile(path), 0);
}

Result<std::unique_ptr<WritableFile>> FaultInjectionFileSystem::NewAppendableFile(
    const std::string& path) {
  auto size = base_->FileSize(path);
  return Wrap(path, base_->NewAppendableFile(path), size.ok() ? *size : 0);
}

Status FaultInjectionFileSystem::RenameFile(const std::string& from, const std::string& to) {
  Status s = base_->RenameFile(from, to);
  if (!s.ok()) return s;
  MutexLock lock(&mu_);
  auto it = files_.find(from);
  if (it != files_.end()) {
    files_[to] = it->second;
    files_.erase(it);
  } else {
    files_.erase(to);
  }
  return s;
}

Status FaultInjectionFileSystem::RemoveFile(const std::string& path) {
  Status s = base_->RemoveFile(path);
  if (s.ok()) {
    MutexLock lock(&mu_);
    files_.erase(path);
  }
  return s;
}

Status FaultInjectionFileSystem::TruncateFile(const std::string& path, uint64_t size) {
  Status s = base_->TruncateFile(path, size);
  if (s.ok()) {
    MutexLock lock(&mu_);
    auto it = files_.find(path);
    if (it != files_.end()) it->second->size = it->second->synced = size;
  }
  return s;
}

}  // namespace sundial::wal
