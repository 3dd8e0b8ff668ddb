// Clock: the engine's only source of time. No engine code reads the system time directly.
//
// Times are milliseconds since the Unix epoch (TimeMs). Production uses SystemClock; tests use
// ManualClock and move time with Advance, so every time-dependent rule is tested
// deterministically.
//
// Thread safety: NowMs may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace sundial {

using TimeMs = int64_t;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimeMs NowMs() const = 0;
};

// Wall-clock time (std::chrono::system_clock).
class SystemClock final : public Clock {
 public:
  TimeMs NowMs() const override;
};

// A clock that never reads earlier than a floor (docs/replication.md, "Time"): a standby raises it
// to the time of every effect it applies, so that once it leads, its engine's time never goes
// back behind an effect it holds, whatever its own clock says.
class FloorClock final : public Clock {
 public:
  explicit FloorClock(const Clock* base) : base_(base) {}
  TimeMs NowMs() const override {
    const TimeMs now = base_->NowMs();
    const TimeMs floor = floor_.load(std::memory_order_relaxed);
    return now > floor ? now : floor;
  }
  void RaiseFloor(TimeMs t) {
    TimeMs seen = floor_.load(std::memory_order_relaxed);
    while (t > seen && !floor_.compare_exchange_weak(seen, t, std::memory_order_relaxed)) {
    }
  }
  TimeMs floor() const { return floor_.load(std::memory_order_relaxed); }

 private:
  const Clock* const base_;
  std::atomic<TimeMs> floor_{0};
};

// A clock that only moves when told to.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(TimeMs start = 1'700'000'000'000) : now_(start) {}
  TimeMs NowMs() const override { return now_.load(std::memory_order_relaxed); }
  void Set(TimeMs t) { now_.store(t, std::memory_order_relaxed); }
  void Advance(TimeMs delta) { now_.fetch_add(delta, std::memory_order_relaxed); }

 private:
  std::atomic<TimeMs> now_;
};

}  // namespace sundial
