// Test kernel: kills the process it runs in (a chip child dying in the middle of a task).
#include <simpler/device/orchestration.hpp>

#include <csignal>

#include <unistd.h>

SIMPLER_KERNEL(args) {
  static_cast<void>(args);
  ::kill(::getpid(), SIGKILL);
}
