// Test kernel for hazard ordering: a reader that may be held open. Waits until int32 tensor 0
// element 0 (the gate) becomes non-zero or scalar 3 milliseconds pass, records which in gate
// element 1 (1: it saw the gate open, 2: it gave up), then copies int32 tensor 1 into int32
// tensor 2 (as many elements as the smaller holds).
//   tensors: gate (NoDep), src (Input), dst (OutputExisting).  scalars: wait_ms.
#include <simpler/device/orchestration.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

SIMPLER_KERNEL(args) {
  auto* gate = args.data<std::int32_t>(0);
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(args.scalar<std::uint32_t>(3));
  bool open = std::atomic_ref<std::int32_t>(gate[0]).load() != 0;
  while (!open && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    open = std::atomic_ref<std::int32_t>(gate[0]).load() != 0;
  }
  if (args.scalar<std::uint32_t>(3) != 0)
    std::atomic_ref<std::int32_t>(gate[1]).store(open ? 1 : 2);
  const auto n =
      std::min(simpler_tensor_numel(&args.tensor(1)), simpler_tensor_numel(&args.tensor(2)));
  const auto* src = args.data<std::int32_t>(1);
  auto* dst = args.data<std::int32_t>(2);
  for (std::uint64_t i = 0; i < n; ++i) dst[i] = src[i];
}
