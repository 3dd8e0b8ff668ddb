// Helpers for the disk fault tests: a real sundiald with the LD_PRELOAD shim
// (tests/faults/disk_fault_shim.cc) aimed at its data directory, and the control file that arms
// faults while it runs.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/server_process.h"

namespace sundial::faults {

// The shim's environment for a process whose disk under `data_dir` should fail on demand.
// Under ASan the shim comes before the ASan runtime in the link order, which ASan refuses unless
// told not to check (verify_asan_link_order=0); in a release build the option is ignored.
inline std::vector<std::string> ShimEnv(const std::string& data_dir, const std::string& control,
                                        const std::string& log) {
  std::string asan = "ASAN_OPTIONS=verify_asan_link_order=0";
  if (const char* existing = std::getenv("ASAN_OPTIONS")) asan += std::string(":") + existing;
  return {"LD_PRELOAD=" DISK_FAULT_SHIM, "SUNDIAL_FAULT_DIR=" + data_dir,
          "SUNDIAL_FAULT_CONTROL=" + control, "SUNDIAL_FAULT_LOG=" + log, asan};
}

// Replaces the control file at once (a new file renamed over the old: the shim sees a new
// inode and re-reads it at its next intercepted call).
inline bool ArmFaults(const std::string& control, const std::string& text) {
  const std::string tmp = control + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), control.c_str()) == 0;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The lines of `text` that contain `needle`.
inline std::vector<std::string> LinesWith(const std::string& text, const std::string& needle) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) lines.push_back(line);
  }
  return lines;
}

}  // namespace sundial::faults
