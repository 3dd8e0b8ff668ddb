// Fuzz target: a WAL segment read by recovery (wal/recovery.h, through wal/log_reader.h and the
// effect codec into Engine::Apply) on the memory file system. The first byte chooses the mode:
//   bit 0: rewrite the checksums first (wal_fixup.h), so the payloads reach the decoder;
//   bit 1: recover with repair (--wal-repair).
// The rest is the segment, stored as wal-…01.log. Whatever recovery says, it must not crash,
// leak or allocate beyond the input's size; and once it succeeded, the directory it left must
// recover again without repair to the same state (a repair or a cut torn tail leaves a clean
// log). Seeds: tests/fuzz/wal_segment/corpus (make_seeds.cc: segments of a real workload).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/clock.h"
#include "engine/engine.h"
#include "tests/fuzz/wal_fixup.h"
#include "wal/file.h"
#include "wal/log_format.h"
#include "wal/recovery.h"

namespace {

using namespace sundial;

Status RecoverOnce(wal::FileSystem* fs, bool repair, uint64_t* digest, std::string* summary) {
  ManualClock clock(1'700'000'000'000);
  Engine::Options o;
  o.shards = 2;
  o.seed = 14;
  wal::RecoveryOptions options;
  options.repair = repair;
  wal::Recovered recovered;
  const Status s = wal::Recover(
      fs, "data", [&] { return std::make_unique<Engine>(o, &clock, nullptr); }, options,
      &recovered);
  *summary = recovered.report.Summary();
  if (s.ok()) *digest = recovered.engine->Digest();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::string segment(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode & 1) fuzz::FixChecksums(&segment);
  auto fs = wal::NewMemoryFileSystem();
  if (!fs->CreateDir("data").ok()) std::abort();
  if (!wal::WriteStringToFile(fs.get(), wal::JoinPath("data", wal::SegmentFileName(1)), segment)
           .ok()) {
    std::abort();
  }
  uint64_t first = 0, second = 0;
  std::string summary;
  if (!RecoverOnce(fs.get(), (mode & 2) != 0, &first, &summary).ok()) return 0;
  const Status again = RecoverOnce(fs.get(), false, &second, &summary);
  if (!again.ok() || second != first) {
    std::fprintf(stderr, "fuzz: a recovered directory does not recover again the same: %.*s %s\n",
                 static_cast<int>(again.detail().size()), again.detail().data(), summary.c_str());
    std::abort();
  }
  return 0;
}
