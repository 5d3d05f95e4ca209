// mul (AIV) — out = x * y, elementwise over float32.
//   tensors: x (in), y (in), out (out); all float32 with the same element count.
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  const auto& x = args.tensor(0);
  const auto& y = args.tensor(1);
  const auto& out = args.tensor(2);
  if (args.global().core_type != 1) {
    args.fail("mul: an AIV kernel ran on an AIC core");
    return;
  }
  if (x.dtype != SIMPLER_FLOAT32 || y.dtype != SIMPLER_FLOAT32 || out.dtype != SIMPLER_FLOAT32) {
    args.fail("mul: x, y and out must be float32");
    return;
  }
  const std::uint64_t n = simpler_tensor_numel(&out);
  if (simpler_tensor_numel(&x) != n || simpler_tensor_numel(&y) != n) {
    args.fail("mul: x, y and out must have the same element count");
    return;
  }
  const float* a = args.data<const float>(0);
  const float* b = args.data<const float>(1);
  float* c = args.data<float>(2);
  for (std::uint64_t i = 0; i < n; ++i) c[i] = a[i] * b[i];
}
