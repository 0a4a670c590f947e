#include "moe/core/clock.h"

namespace moe {

Clock& system_clock() {
  static SystemClock* clock = new SystemClock();  // never destroyed: usable during static teardown
  return *clock;
}

}  // namespace moe
