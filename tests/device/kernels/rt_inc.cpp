// Test kernel: adds 1 to every element of int32 tensor 0, in place (used with InOut).
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  auto* v = args.data<std::int32_t>(0);
  const auto n = simpler_tensor_numel(&args.tensor(0));
  for (std::uint64_t i = 0; i < n; ++i) v[i] += 1;
}
