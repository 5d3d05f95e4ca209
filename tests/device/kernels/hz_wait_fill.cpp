// Test kernel for hazard ordering: a writer that may be held open. Waits until int32 tensor 0
// element 0 (the gate) becomes non-zero or scalar 2 milliseconds pass, records which in gate
// element 2 (1: it saw the gate open, 2: it gave up), then sets every element of int32 tensor 1
// to scalar 3.
//   tensors: gate (NoDep), dst (OutputExisting or InOut).  scalars: wait_ms, value.
#include <simpler/device/orchestration.hpp>

#include <atomic>
#include <chrono>
#include <thread>

SIMPLER_KERNEL(args) {
  auto* gate = args.data<std::int32_t>(0);
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(args.scalar<std::uint32_t>(2));
  bool open = std::atomic_ref<std::int32_t>(gate[0]).load() != 0;
  while (!open && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    open = std::atomic_ref<std::int32_t>(gate[0]).load() != 0;
  }
  std::atomic_ref<std::int32_t>(gate[2]).store(open ? 1 : 2);
  auto* dst = args.data<std::int32_t>(1);
  const auto n = simpler_tensor_numel(&args.tensor(1));
  const auto value = args.scalar<std::int32_t>(3);
  for (std::uint64_t i = 0; i < n; ++i) dst[i] = value;
}
