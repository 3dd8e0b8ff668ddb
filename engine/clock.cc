#include "engine/clock.h"

#include <chrono>

namespace sundial {

TimeMs SystemClock::NowMs() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace sundial
