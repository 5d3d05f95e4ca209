// Test kernel: waits until int32 tensor 0 element 0 becomes non-zero, or scalar 0 milliseconds
// pass (so a test that never sets it still gets its thread back), then writes 1 into int32
// tensor 1 element 0 and 1 into tensor 0 element 1.
#include <simpler/device/orchestration.hpp>

#include <atomic>
#include <chrono>
#include <thread>

SIMPLER_KERNEL(args) {
  auto* flag = args.data<std::int32_t>(0);
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(args.scalar<std::uint32_t>(2));
  while (std::atomic_ref<std::int32_t>(*flag).load() == 0 &&
         std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  args.data<std::int32_t>(1)[0] = 1;
  std::atomic_ref<std::int32_t>(flag[1]).store(1);  // "the kernel has left"
}
