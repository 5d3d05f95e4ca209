// Test kernel: reports failure.
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  args.fail("deliberate failure from rt_fail");
}
