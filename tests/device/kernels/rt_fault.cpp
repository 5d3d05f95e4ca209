// Test kernel: writes through an invalid pointer (a fault the runtime must contain).
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  static_cast<void>(args);
  volatile std::uintptr_t address = 8;  // volatile: the compiler cannot see the bad pointer
  *reinterpret_cast<volatile int*>(address) = 1;
}
