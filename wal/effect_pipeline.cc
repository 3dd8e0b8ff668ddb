#include "wal/effect_pipeline.h"

#include <cstring>
#include <utility>

#include "wal/effect_codec.h"

namespace sundial::wal {

EffectPipeline::EffectPipeline(LogReader* reader, bool threaded,
                               std::function<void()> between_batches)
    : reader_(reader),
      between_batches_(std::move(between_batches)),
      batches_(threaded ? kBatches : 1),
      threaded_(threaded) {
  for (Batch& b : batches_) free_.push_back(&b);
  if (threaded_) thread_ = std::thread([this] { Produce(); });
}

EffectPipeline::~EffectPipeline() { Stop(); }

void EffectPipeline::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool EffectPipeline::Fill(Batch* b) {
  b->items.clear();
  b->bytes.reserve(kBatchBytes);
  b->bytes.resize_uninitialized(0);
  b->settings.clear();
  b->last = false;
  LogReader::Record record;
  // Payloads are copied first and decoded after, so that growing `bytes` for an oversized
  // record (the first of its batch) cannot move bytes that earlier items already view.
  std::vector<size_t> starts;
  starts.reserve(kBatchRecords);
  bool more = true;
  while (b->items.size() < kBatchRecords) {
    if (!b->items.empty() && b->bytes.size() >= kBatchBytes / 2) break;
    if (!reader_->ReadRecord(&record)) {
      more = false;
      break;
    }
    Item item;
    item.type = record.type;
    item.lsn = record.lsn;
    item.offset = record.offset;
    const size_t at = b->bytes.size();
    starts.push_back(at);
    b->bytes.resize_uninitialized(at + record.payload.size());
    if (!record.payload.empty()) {
      std::memcpy(b->bytes.data() + at, record.payload.data(), record.payload.size());
    }
    b->items.push_back(item);
  }
  for (size_t i = 0; i < b->items.size(); ++i) {
    Item& item = b->items[i];
    const size_t end = i + 1 < starts.size() ? starts[i + 1] : b->bytes.size();
    item.payload = std::string_view(b->bytes.data() + starts[i], end - starts[i]);
    if (item.type != RecordType::kEffect) continue;
    QueueSettings* settings = &b->settings.emplace_back();
    item.decoded = DecodeEffectView(item.payload, &item.effect, settings).ok();
  }
  b->last = !more;
  return more;
}

void EffectPipeline::Produce() {
  while (true) {
    Batch* b;
    {
      std::unique_lock lock(mu_);
      changed_.wait(lock, [this] { return stop_ || !free_.empty(); });
      if (stop_) return;
      b = free_.front();
      free_.pop_front();
    }
    const bool more = Fill(b);
    {
      std::lock_guard lock(mu_);
      ready_.push_back(b);
    }
    changed_.notify_all();
    if (!more) return;
    if (between_batches_) between_batches_();
  }
}

const EffectPipeline::Item* EffectPipeline::Next() {
  while (true) {
    if (current_ != nullptr && next_item_ < current_->items.size()) {
      return &current_->items[next_item_++];
    }
    if (finished_) return nullptr;
    if (!threaded_) {
      if (current_ != nullptr && current_->last) {
        finished_ = true;
        return nullptr;
      }
      current_ = &batches_[0];
      Fill(current_);
      if (between_batches_) between_batches_();
      next_item_ = 0;
      continue;
    }
    std::unique_lock lock(mu_);
    if (current_ != nullptr) {
      if (current_->last) {
        finished_ = true;
        lock.unlock();
        if (thread_.joinable()) thread_.join();  // the reader is the caller's again
        return nullptr;
      }
      free_.push_back(current_);
      current_ = nullptr;
      changed_.notify_all();
    }
    changed_.wait(lock, [this] { return !ready_.empty(); });
    current_ = ready_.front();
    ready_.pop_front();
    next_item_ = 0;
  }
}

}  // namespace sundial::wal
