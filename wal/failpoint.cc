// The failpoint registry of the test build (wal/failpoint.h). Linked only into
// sundiald-failpoints.
#include "wal/failpoint.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace sundial::failpoint {
namespace {

struct Armed {
  std::string name;  // empty: nothing armed
  uint64_t at = 1;   // the hit that kills
  std::atomic<uint64_t> hits{0};
};

Armed& Settings() {
  static Armed* armed = [] {
    auto* a = new Armed;  // never destroyed: a failpoint may be reached during exit
    const char* env = std::getenv("SUNDIAL_FAILPOINT");
    if (env == nullptr || *env == '\0') return a;
    std::string text = env;
    const auto colon = text.find(':');
    if (colon != std::string::npos) {
      a->at = std::strtoull(text.c_str() + colon + 1, nullptr, 10);
      if (a->at == 0) a->at = 1;
      text.resize(colon);
    }
    a->name = text;
    return a;
  }();
  return *armed;
}

void WriteAll(const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(2, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void Reach(const char* name) {
  Armed& a = Settings();
  if (a.name.empty() || a.name != name) return;
  const uint64_t hit = a.hits.fetch_add(1, std::memory_order_relaxed) + 1;
  if (hit != a.at) return;
  WriteAll("failpoint " + a.name + " reached (hit " + std::to_string(hit) + "): SIGKILL\n");
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();  // SIGKILL cannot be caught: nothing runs after it
}

bool BugEnabled(const char* name) {
  static const std::string bug = [] {
    const char* env = std::getenv("SUNDIAL_BUG");
    return std::string(env == nullptr ? "" : env);
  }();
  return !bug.empty() && bug == name;
}

}  // namespace sundial::failpoint
