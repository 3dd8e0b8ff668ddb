// LatencyHistogram: a log-linear histogram of durations in nanoseconds, HdrHistogram's layout
// with 64 sub-buckets per power of two: values below 64 ns are exact, above that each bucket
// is at most 1/64 (1.6%) of its value wide. Recording is an index computation and an add;
// memory is fixed (64 × 64 counters), so one histogram per io thread, merged at the end.
//
// Percentile(p) returns the upper edge of the bucket holding the p-th value (never less than
// the true value, at most 1.6% above it); Max() is exact.
//
// Thread safety: none; one owner, then Merge.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

namespace sundial::bench {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 6;  // 64 sub-buckets per power of two
  static constexpr uint64_t kSub = uint64_t{1} << kSubBits;

  void Record(uint64_t nanos) {
    ++counts_[Index(nanos)];
    ++count_;
    max_ = std::max(max_, nanos);
  }

  void Merge(const LatencyHistogram& other) {
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
    count_ += other.count_;
    max_ = std::max(max_, other.max_);
  }

  uint64_t Count() const { return count_; }
  uint64_t Max() const { return max_; }

  // The smallest recorded-bucket upper edge with at least p (0..1] of the values at or below
  // it; 0 when empty.
  uint64_t Percentile(double p) const {
    if (count_ == 0) return 0;
    uint64_t rank = static_cast<uint64_t>(p * static_cast<double>(count_) + 0.5);
    rank = std::clamp<uint64_t>(rank, 1, count_);
    uint64_t seen = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::min(UpperEdge(i), max_);
    }
    return max_;
  }

  // Bucket layout, exposed for tests.
  static size_t Index(uint64_t v) {
    if (v < kSub) return static_cast<size_t>(v);
    const int msb = 63 - std::countl_zero(v);  // >= kSubBits
    const int shift = msb - kSubBits;          // bits dropped below the 64 sub-buckets
    const uint64_t sub = (v >> shift) - kSub;  // 0..63
    return static_cast<size_t>((shift + 1) * kSub + sub);
  }
  static uint64_t UpperEdge(size_t index) {
    if (index < kSub) return index;
    const int shift = static_cast<int>(index / kSub) - 1;
    const uint64_t sub = index % kSub;
    return ((kSub + sub + 1) << shift) - 1;
  }

 private:
  std::array<uint64_t, (64 - kSubBits + 1) * kSub> counts_{};
  uint64_t count_ = 0;
  uint64_t max_ = 0;
};

}  // namespace sundial::bench
