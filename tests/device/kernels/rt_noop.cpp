// Test kernel: does nothing.
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  static_cast<void>(args);
}
