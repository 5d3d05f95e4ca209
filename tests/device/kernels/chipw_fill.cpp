// chipw_fill (any core) — writes the task's first scalar into every element of tensor 0.
//   tensors: out int64 (any shape), then any others (ignored).
//   scalars: the value (int64).
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  const auto& out = args.tensor(0);
  if (out.dtype != SIMPLER_INT64) {
    args.fail("chipw_fill: tensor 0 must be int64");
    return;
  }
  // Scalars follow the tensors in args[]; the orchestration passes exactly one tensor.
  const auto value = args.scalar<std::int64_t>(1);
  auto* data = args.data<std::int64_t>(0);
  const std::uint64_t n = simpler_tensor_numel(&out);
  for (std::uint64_t i = 0; i < n; ++i) data[i] = value;
}
