// tile_add (AIV) — accumulates: acc += x, elementwise over float32 (the ADD of batched GEMM:
// C tiles += a GEMM's partial products).
//   tensors: acc (inout), x (in); float32 with the same element count.
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  const auto& acc = args.tensor(0);
  const auto& x = args.tensor(1);
  if (args.global().core_type != 1) {
    args.fail("tile_add: an AIV kernel ran on an AIC core");
    return;
  }
  if (acc.dtype != SIMPLER_FLOAT32 || x.dtype != SIMPLER_FLOAT32) {
    args.fail("tile_add: acc and x must be float32");
    return;
  }
  const std::uint64_t n = simpler_tensor_numel(&acc);
  if (simpler_tensor_numel(&x) != n) {
    args.fail("tile_add: acc and x must have the same element count");
    return;
  }
  float* c = args.data<float>(0);
  const float* p = args.data<const float>(1);
  for (std::uint64_t i = 0; i < n; ++i) c[i] += p[i];
}
