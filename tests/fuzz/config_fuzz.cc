// Fuzz target: sundiald's --config file (server/options.cc: TOML or INI through CLI11, then the
// checks ParseOptions makes on the values, --fsync and --max-memory among them). The input is
// the file, handed over as /proc/self/fd/N of a memfd (no disk). ParseOptions must return,
// never throw or crash: a bad file is a usage error (exit code 2) with a message. Seeds:
// tests/fuzz/config/corpus (written by hand from docs/operations.md's settings), dictionary
// tests/fuzz/config.dict.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "server/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = [] {
    const int fd = memfd_create("sundial-fuzz-config", 0);
    if (fd < 0) std::abort();
    return fd;
  }();
  if (ftruncate(fd, 0) != 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const char* argv[] = {"sundiald", "--config", path.c_str()};
  const auto result = sundial::server::ParseOptions(3, argv);
  if (result.exit_code > 0 && result.message.empty()) {
    std::fprintf(stderr, "fuzz: a refused config file without a message\n");
    std::abort();
  }
  return 0;
}
