#include "bench/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace sundial::bench {
namespace {

TEST(LatencyHistogram, SmallValuesAreExact) {
  LatencyHistogram h;
  for (uint64_t v = 1; v <= 63; ++v) h.Record(v);
  EXPECT_EQ(h.Count(), 63u);
  EXPECT_EQ(h.Percentile(0.5), 32u);
  EXPECT_EQ(h.Percentile(1.0), 63u);
  EXPECT_EQ(h.Max(), 63u);
}

TEST(LatencyHistogram, BucketsAreContiguousAndNarrow) {
  // Every value lands in a bucket whose upper edge is >= the value and at most 1/64 above it,
  // and indexes never go down as values grow.
  size_t last = 0;
  for (uint64_t v = 1; v < (uint64_t{1} << 40); v = v + 1 + v / 97) {
    const size_t i = LatencyHistogram::Index(v);
    ASSERT_GE(i, last) << v;
    last = i;
    const uint64_t edge = LatencyHistogram::UpperEdge(i);
    ASSERT_GE(edge, v) << v;
    ASSERT_LE(static_cast<double>(edge - v), static_cast<double>(v) / 64.0 + 1) << v;
  }
  EXPECT_LT(LatencyHistogram::Index(~uint64_t{0}), (64 - 6 + 1) * 64u);
}

TEST(LatencyHistogram, PercentilesMatchSortedSamplesWithinOneBucket) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> d(11.0, 1.5);  // ~60 us median, long tail
  std::vector<uint64_t> samples;
  LatencyHistogram a, b;
  for (int i = 0; i < 100000; ++i) {
    const auto v = static_cast<uint64_t>(d(rng)) + 1;
    samples.push_back(v);
    (i % 2 ? a : b).Record(v);
  }
  a.Merge(b);
  std::sort(samples.begin(), samples.end());
  EXPECT_EQ(a.Count(), samples.size());
  EXPECT_EQ(a.Max(), samples.back());
  for (double p : {0.5, 0.9, 0.99, 0.999}) {
    const uint64_t exact = samples[static_cast<size_t>(p * samples.size()) - 1];
    const uint64_t got = a.Percentile(p);
    EXPECT_GE(got, exact) << p;
    EXPECT_LE(static_cast<double>(got), static_cast<double>(exact) * (1 + 1.0 / 32)) << p;
  }
}

TEST(LatencyHistogram, EmptyIsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.Percentile(0.99), 0u);
  EXPECT_EQ(h.Max(), 0u);
}

}  // namespace
}  // namespace sundial::bench
