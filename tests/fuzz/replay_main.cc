// The fuzz targets without libFuzzer (like LLVM's StandaloneFuzzTargetMain): runs
// LLVMFuzzerTestOneInput once on every file given, or on every file in a directory given, in
// name order. The sanitizer builds link it to each target and ctest runs it over the target's
// corpus and regressions (label fuzz_smoke): every seed and every input that once failed is
// replayed by `make test`, with ASan and UBSan watching. A finding aborts, failing the test.
//
// `--mutations=N` also runs N mutants of each file (a bit flipped, a byte set to an edge value,
// a range erased or repeated, a cut), from a fixed-seed generator: a short, deterministic fuzz
// in the ordinary test run. It finds the shallow bugs; libFuzzer (`make fuzz`) the rest.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// xorshift64*: the same mutants on every run and machine.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next() % n); }
};

std::string Mutate(std::string in, Rng& rng) {
  static constexpr uint8_t kEdges[] = {0x00, 0x01, 0x7f, 0x80, 0xff, '"', '{', '\\', '='};
  const int steps = 1 + static_cast<int>(rng.Below(3));
  for (int i = 0; i < steps; ++i) {
    const size_t at = rng.Below(in.size() + 1);
    switch (rng.Below(5)) {
      case 0:
        if (!in.empty()) in[rng.Below(in.size())] ^= static_cast<char>(1u << rng.Below(8));
        break;
      case 1:
        if (!in.empty()) in[rng.Below(in.size())] = static_cast<char>(kEdges[rng.Below(9)]);
        break;
      case 2:
        in.erase(at, 1 + rng.Below(16));
        break;
      case 3:
        in.insert(at, in.substr(rng.Below(in.size() + 1), 1 + rng.Below(16)));
        break;
      case 4:
        in.resize(at);
        break;
    }
  }
  return in;
}

void Run(const std::string& bytes) {
  // A copy of exactly the input's size, so ASan sees a read past its end.
  std::vector<uint8_t> data(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(data.data(), data.size());
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  long mutations = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = "--mutations=";
    if (std::string_view(argv[i]).starts_with(flag)) {
      mutations = std::atol(argv[i] + flag.size());
      continue;
    }
    const fs::path arg(argv[i]);
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else if (fs::is_regular_file(arg)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
      return 2;
    }
    Run(bytes);
    Rng rng{0x9e3779b97f4a7c15ull};
    for (const char c : file.filename().string()) rng.s = (rng.s ^ uint8_t(c)) * 1099511628211ull;
    for (long m = 0; m < mutations; ++m) Run(Mutate(bytes, rng));
  }
  std::printf("replay: %zu inputs and %ld mutants of each ran\n", files.size(), mutations);
  return files.empty() ? 1 : 0;
}
