// Fuzz target: a snapshot file read by wal::LoadSnapshot (through wal/log_reader.h and the
// effect codec into Engine::Apply, then the trailer's count and digest) on the memory file
// system. The first byte chooses the mode: bit 0 rewrites the checksums first (wal_fixup.h), so
// the payloads reach the decoder. The rest is the file, stored as snapshot-<kCoveredLsn>.snap
// (the LSN the seeds were written with). A load that succeeds must have checked the digest:
// the engine's digest is then the trailer's. Seeds: tests/fuzz/snapshot/corpus (make_seeds.cc).
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/clock.h"
#include "engine/engine.h"
#include "tests/fuzz/wal_fixup.h"
#include "wal/file.h"
#include "wal/log_format.h"
#include "wal/log_reader.h"
#include "wal/snapshot.h"

namespace sundial::fuzz {
inline constexpr uint64_t kCoveredLsn = 1'000;  // make_seeds.cc writes its snapshots at this LSN
}  // namespace sundial::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sundial;
  if (size == 0) return 0;
  std::string file(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 1) fuzz::FixChecksums(&file);
  auto fs = wal::NewMemoryFileSystem();
  if (!fs->CreateDir("data").ok()) std::abort();
  const std::string name = wal::SnapshotFileName(fuzz::kCoveredLsn);
  if (!wal::WriteStringToFile(fs.get(), wal::JoinPath("data", name), file).ok()) std::abort();
  ManualClock clock(1'700'000'000'000);
  Engine::Options o;
  o.shards = 2;
  o.seed = 14;
  Engine engine(o, &clock, nullptr);
  wal::FirstCorruption damage;
  auto loaded = wal::LoadSnapshot(fs.get(), "data", name, &engine, &damage);
  if (loaded.ok() && loaded.value().digest != engine.Digest()) std::abort();
  if (loaded.ok() == damage.first().has_value()) std::abort();  // damage iff not loaded (no I/O)
  return 0;
}
