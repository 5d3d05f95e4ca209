// noop — an empty kernel: takes any arguments, touches nothing. Benchmarks use it to measure
// the runtime's own cost per task (submit, dependency tracking, dispatch, completion).
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  static_cast<void>(args);
}
