// chipw_fail (any core) — always reports failure, with a message the tests look for.
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  args.fail("chipw_fail: this kernel always fails");
}
