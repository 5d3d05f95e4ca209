// Test kernel for hazard ordering: a writer that opens the gate once it wrote. Sets every
// element of int32 tensor 1 to scalar 2, then sets int32 tensor 0 element 0 (the gate) to 1, so
// a held-open task that is still running sees the gate open only after these bytes changed.
//   tensors: gate (NoDep), dst (OutputExisting or InOut).  scalars: value.
#include <simpler/device/orchestration.hpp>

#include <atomic>

SIMPLER_KERNEL(args) {
  auto* dst = args.data<std::int32_t>(1);
  const auto n = simpler_tensor_numel(&args.tensor(1));
  const auto value = args.scalar<std::int32_t>(2);
  for (std::uint64_t i = 0; i < n; ++i) dst[i] = value;
  std::atomic_ref<std::int32_t>(args.data<std::int32_t>(0)[0]).store(1);
}
