// EffectPipeline: the records of one log or snapshot file read, checked and decoded on a second
// thread while the caller applies the ones before them (recovery, docs/wal-format.md
// "Recovery"). A restart so spends one core on read(2), checksums and decoding and the other on
// Engine::Apply, instead of one core on both.
//
// The second thread fills batches of up to kBatchRecords records (their bytes copied into the
// batch, each kEffect decoded with DecodeEffectView into views of those bytes) and hands them
// over through a bounded queue of kBatches batches, so at most a few MiB are in flight. Items
// are returned in file order, exactly as LogReader::ReadRecord would return them; a record that
// does not decode is returned with decoded = false (the caller reports it as damage at its
// offset, as before).
//
// The LogReader belongs to the second thread from construction until Next returns null (or the
// pipeline is destroyed): then its status(), damage(), valid_bytes() and next_lsn() are final
// and the caller may read them.
//
// Thread safety: one consumer thread calls Next; the pipeline owns the second thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/effect.h"
#include "engine/mutex.h"
#include "engine/pages.h"
#include "engine/types.h"
#include "wal/effect_codec.h"
#include "wal/log_format.h"
#include "wal/log_reader.h"

namespace sundial::wal {

class EffectPipeline {
 public:
  static bool WorthAThread(uint64_t file_bytes) { return file_bytes >= kThreadedFileBytes; }

  struct Item {
    RecordType type = RecordType::kEffect;
    uint64_t lsn = 0;
    uint64_t offset = 0;
    std::string_view payload;  // the record's bytes
    bool decoded = false;      // a kEffect that DecodeEffectView accepted
    Effect effect;             // when decoded; views into `payload`
  };

  // `reader` must have read its header and must outlive the pipeline. `threaded`: use a second
  // thread (worth it for files of a MiB or more; otherwise batches are filled by Next on the
  // caller's thread, with the same results). `between_batches`, if set, runs on the second
  // thread after a batch when that thread is ahead (two batches or more wait for the caller).
  EffectPipeline(LogReader* reader, bool threaded, std::function<void()> between_batches = nullptr);
  ~EffectPipeline();
  EffectPipeline(const EffectPipeline&) = delete;
  EffectPipeline& operator=(const EffectPipeline&) = delete;

  // The next record, valid until the next call; null once the reader has stopped (the end of
  // the file, damage or an I/O error: ask the reader).
  const Item* Next();
  // The rest of the current batch (or the next batch), valid until the next call of Next or
  // NextBatch; empty once the reader has stopped.
  std::span<const Item> NextBatch();

 private:
  static constexpr size_t kBatchRecords = 2048;
  static constexpr size_t kBatchBytes = size_t{2} << 20;
  static constexpr size_t kBatches = 4;

  struct Batch {
    std::vector<Item> items;
    PodVector<char> bytes;               // on pages (mmap): given back whole when the pipeline ends
    std::deque<QueueSettings> settings;  // of queue effects (stable addresses)
    std::deque<std::vector<std::string>> dependencies;  // depends_on of message effects
    std::deque<ScheduleSpec> schedules;                 // of kScheduleUpserted effects
    EffectGroupStorage groups;                          // members of kFlowEnqueued effects
    bool last = false;                                  // the reader stopped after these items
  };

  // Files at least this large are worth a second thread.
  static constexpr uint64_t kThreadedFileBytes = uint64_t{1} << 20;

  // Consumer: moves to the next batch; false once the reader has stopped.
  bool Advance();
  void Produce();
  // Fills `b` from the reader; returns false when the reader has stopped.
  bool Fill(Batch* b);
  void Stop();

  LogReader* const reader_;
  const std::function<void()> between_batches_;
  std::vector<Batch> batches_;

  Mutex mu_;
  CondVar changed_;
  std::deque<Batch*> free_ GUARDED_BY(mu_);
  std::deque<Batch*> ready_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;

  Batch* current_ = nullptr;  // consumer's
  size_t next_item_ = 0;      // consumer's
  bool finished_ = false;     // consumer's: the last batch was consumed
  const bool threaded_;
  std::thread thread_;
};

}  // namespace sundial::wal
