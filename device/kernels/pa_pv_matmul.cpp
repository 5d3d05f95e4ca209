// pa_pv_matmul (AIC) — paged attention, step 3 of a KV block: o = p @ v, float32.
//   tensors: p [M, N] (in), v [N, D] (in; one KV cache block), o [M, D] (out).
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  const auto& tp = args.tensor(0);
  const auto& tv = args.tensor(1);
  const auto& to = args.tensor(2);
  if (args.global().core_type != 0) {
    args.fail("pa_pv_matmul: an AIC kernel ran on an AIV core");
    return;
  }
  if (tp.dtype != SIMPLER_FLOAT32 || tv.dtype != SIMPLER_FLOAT32 || to.dtype != SIMPLER_FLOAT32) {
    args.fail("pa_pv_matmul: p, v and o must be float32");
    return;
  }
  if (tp.ndims != 2 || tv.ndims != 2 || to.ndims != 2 || tp.shapes[1] != tv.shapes[0] ||
      to.shapes[0] != tp.shapes[0] || to.shapes[1] != tv.shapes[1]) {
    args.fail("pa_pv_matmul: needs p [M, N], v [N, D] and o [M, D]");
    return;
  }
  const std::uint64_t m = tp.shapes[0], n = tp.shapes[1], d = tv.shapes[1];
  const float* p = args.data<const float>(0);
  const float* v = args.data<const float>(1);
  float* o = args.data<float>(2);
  for (std::uint64_t i = 0; i < m; ++i) {
    float* orow = o + i * d;
    for (std::uint64_t c = 0; c < d; ++c) orow[c] = 0.0F;
    for (std::uint64_t j = 0; j < n; ++j) {
      const float w = p[i * n + j];
      const float* vrow = v + j * d;
      for (std::uint64_t c = 0; c < d; ++c) orow[c] += w * vrow[c];
    }
  }
}
