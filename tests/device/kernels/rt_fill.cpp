// Test kernel: sets every element of int32 tensor 0 to scalar 1 (args index 1).
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  auto* v = args.data<std::int32_t>(0);
  const auto n = simpler_tensor_numel(&args.tensor(0));
  const auto value = args.scalar<std::int32_t>(1);
  for (std::uint64_t i = 0; i < n; ++i) v[i] = value;
}
