// axpy (AIV kernel of the package consumer) — out = a * x + y, elementwise over float32.
//   tensors: x (in), y (in), out (out), float32 with the same element count.
//   scalars: a (float).
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  const auto& x = args.tensor(0);
  const auto& y = args.tensor(1);
  const auto& out = args.tensor(2);
  if (x.dtype != SIMPLER_FLOAT32 || y.dtype != SIMPLER_FLOAT32 || out.dtype != SIMPLER_FLOAT32) {
    args.fail("axpy: x, y and out must be float32");
    return;
  }
  const std::uint64_t n = simpler_tensor_numel(&out);
  if (simpler_tensor_numel(&x) != n || simpler_tensor_numel(&y) != n) {
    args.fail("axpy: x, y and out must have the same element count");
    return;
  }
  const float a = args.scalar<float>(3);
  const float* px = args.data<const float>(0);
  const float* py = args.data<const float>(1);
  float* po = args.data<float>(2);
  for (std::uint64_t i = 0; i < n; ++i) po[i] = a * px[i] + py[i];
}
