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
    MutexLock lock(&mu_);
    stop_ = true;
  }
  changed_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

bool EffectPipeline::Fill(Batch* b) {
  b->items.clear();
  b->items.reserve(kBatchRecords);  // once per batch: a checkpoint's pipeline is new each time
  b->bytes.reserve(kBatchBytes);
  b->bytes.resize_uninitialized(0);
  b->settings.clear();
  b->dependencies.clear();
  b->schedules.clear();
  b->groups.clear();
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
    // Settings storage only for the queue effects that carry settings (their first byte is
    // the effect type), not for every message.
    const auto type = item.payload.empty() ? 0 : static_cast<uint8_t>(item.payload[0]);
    QueueSettings* settings = type == static_cast<uint8_t>(EffectType::kQueueCreated) ||
                                      type == static_cast<uint8_t>(EffectType::kQueueUpdated)
                                  ? &b->settings.emplace_back()
                                  : nullptr;
    ScheduleSpec* schedule = type == static_cast<uint8_t>(EffectType::kScheduleUpserted)
                                 ? &b->schedules.emplace_back()
                                 : nullptr;
    EffectGroupStorage* group =
        type == static_cast<uint8_t>(EffectType::kFlowEnqueued) ? &b->groups : nullptr;
    item.decoded =
        DecodeEffectView(item.payload, &item.effect, settings, &b->dependencies, schedule, group)
            .ok();
  }
  b->last = !more;
  return more;
}

void EffectPipeline::Produce() {
  while (true) {
    Batch* b;
    {
      MutexLock lock(&mu_);
      while (!stop_ && free_.empty()) changed_.Wait(&mu_);
      if (stop_) return;
      b = free_.front();
      free_.pop_front();
    }
    const bool more = Fill(b);
    size_t waiting;
    {
      MutexLock lock(&mu_);
      ready_.push_back(b);
      waiting = ready_.size();
    }
    changed_.SignalAll();
    if (!more) return;
    // The extra work only when this thread is ahead (the consumer has batches waiting): when
    // the consumer waits for this thread instead, the extra work would make it wait longer.
    if (between_batches_ && waiting >= 2) between_batches_();
  }
}

const EffectPipeline::Item* EffectPipeline::Next() {
  while (true) {
    if (current_ != nullptr && next_item_ < current_->items.size()) {
      return &current_->items[next_item_++];
    }
    if (!Advance()) return nullptr;
  }
}

std::span<const EffectPipeline::Item> EffectPipeline::NextBatch() {
  while (true) {
    if (current_ != nullptr && next_item_ < current_->items.size()) {
      std::span<const Item> rest(current_->items.data() + next_item_,
                                 current_->items.size() - next_item_);
      next_item_ = current_->items.size();
      return rest;
    }
    if (!Advance()) return {};
  }
}

bool EffectPipeline::Advance() {
  while (true) {
    if (finished_) return false;
    if (!threaded_) {
      if (current_ != nullptr && current_->last) {
        finished_ = true;
        return false;
      }
      current_ = &batches_[0];
      Fill(current_);  // (between_batches_ is for a second thread: here it would only delay)
      next_item_ = 0;
      return true;
    }
    ReleasableMutexLock lock(&mu_);
    if (current_ != nullptr) {
      if (current_->last) {
        finished_ = true;
        lock.Release();
        if (thread_.joinable()) thread_.join();  // the reader is the caller's again
        return false;
      }
      free_.push_back(current_);
      current_ = nullptr;
      changed_.SignalAll();
    }
    while (ready_.empty()) changed_.Wait(&mu_);
    current_ = ready_.front();
    ready_.pop_front();
    next_item_ = 0;
    return true;
  }
}

}  // namespace sundial::wal
