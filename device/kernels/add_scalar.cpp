// add_scalar (AIV) — out = x + s, elementwise over float32.
//   tensors: x (in), out (out); float32 with the same element count.
//   scalars: s (float).
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  const auto& x = args.tensor(0);
  const auto& out = args.tensor(1);
  if (args.global().core_type != 1) {
    args.fail("add_scalar: an AIV kernel ran on an AIC core");
    return;
  }
  if (x.dtype != SIMPLER_FLOAT32 || out.dtype != SIMPLER_FLOAT32) {
    args.fail("add_scalar: x and out must be float32");
    return;
  }
  const std::uint64_t n = simpler_tensor_numel(&out);
  if (simpler_tensor_numel(&x) != n) {
    args.fail("add_scalar: x and out must have the same element count");
    return;
  }
  const float s = args.scalar<float>(2);
  const float* a = args.data<const float>(0);
  float* c = args.data<float>(1);
  for (std::uint64_t i = 0; i < n; ++i) c[i] = a[i] + s;
}
