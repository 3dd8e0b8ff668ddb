// Golden files: a version-1 segment checked in under tests/data/wal/ must keep reading back as
// the same effects, whatever the current format version is (docs/wal-format.md, "Changing a
// format"). While version 1 is current, writing the samples again gives identical bytes.
//
// To create a golden file for a new version: SUNDIAL_WRITE_GOLDEN=1 ./wal_tests
// --gtest_filter='Golden.*', then add a reader test for it here. Never regenerate an old one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/wal/wal_test_util.h"

namespace sundial::wal::test {
namespace {

const std::string kV1Segment =
    std::string(SUNDIAL_TEST_DATA_DIR) + "/wal/v1-wal-0000000000000001.log";

std::string WriteSamplesV1() { return WriteLog(SampleEncodings(), /*segment=*/1, /*lsn=*/0).bytes; }

TEST(Golden, VersionOneSegmentReadsBackAsTheSampleEffects) {
  auto fs = NewPosixFileSystem();
  if (std::getenv("SUNDIAL_WRITE_GOLDEN") != nullptr && !fs->FileExists(kV1Segment)) {
    ASSERT_TRUE(WriteStringToFile(fs.get(), kV1Segment, WriteSamplesV1()).ok());
  }
  auto bytes = ReadFileToString(fs.get(), kV1Segment);
  ASSERT_TRUE(bytes.ok()) << kV1Segment;
  ReadResult r = ReadLog(*bytes, /*last_file=*/true, /*expected_number=*/1);
  EXPECT_TRUE(r.reports.empty());
  const std::vector<Effect> samples = SampleEffects();
  ASSERT_EQ(r.payloads.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    DecodedEffect decoded;
    ASSERT_TRUE(DecodeEffect(r.payloads[i], &decoded).ok()) << i;
    ExpectSameLoggedFields(samples[i], decoded.effect());
    EXPECT_EQ(r.lsns[i], i);
  }
}

TEST(Golden, CurrentWriterStillProducesTheVersionOneBytes) {
  ASSERT_EQ(kFormatVersion, 1u) << "version bumped: keep the v1 reader test, drop this one";
  auto fs = NewPosixFileSystem();
  auto bytes = ReadFileToString(fs.get(), kV1Segment);
  ASSERT_TRUE(bytes.ok());
  EXPECT_TRUE(*bytes == WriteSamplesV1());
}

}  // namespace
}  // namespace sundial::wal::test
