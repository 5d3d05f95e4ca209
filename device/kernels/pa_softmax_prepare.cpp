// pa_softmax_prepare (AIV) — paged attention, step 2 of a KV block: the block's local softmax.
// Over the first `valid` columns of each row (the rest are past the context length and masked):
//   m[r] = max_j scale * s[r, j],  p[r, j] = exp(scale * s[r, j] - m[r]),  l[r] = sum_j p[r, j];
// masked columns get p = 0.
//   tensors: s [M, N] (in), p [M, N] (out), m [M] (out), l [M] (out); float32.
//   scalars: scale (float), valid (int, 1..N).
#include <simpler/device/orchestration.hpp>

#include <cmath>

SIMPLER_KERNEL(args) {
  const auto& ts = args.tensor(0);
  const auto& tp = args.tensor(1);
  const auto& tm = args.tensor(2);
  const auto& tl = args.tensor(3);
  if (args.global().core_type != 1) {
    args.fail("pa_softmax_prepare: an AIV kernel ran on an AIC core");
    return;
  }
  if (ts.dtype != SIMPLER_FLOAT32 || tp.dtype != SIMPLER_FLOAT32 || tm.dtype != SIMPLER_FLOAT32 ||
      tl.dtype != SIMPLER_FLOAT32) {
    args.fail("pa_softmax_prepare: s, p, m and l must be float32");
    return;
  }
  if (ts.ndims != 2 || tp.ndims != 2 || tp.shapes[0] != ts.shapes[0] ||
      tp.shapes[1] != ts.shapes[1] || simpler_tensor_numel(&tm) != ts.shapes[0] ||
      simpler_tensor_numel(&tl) != ts.shapes[0]) {
    args.fail("pa_softmax_prepare: needs s [M, N], p [M, N], m [M] and l [M]");
    return;
  }
  const std::uint64_t rows = ts.shapes[0], cols = ts.shapes[1];
  const float scale = args.scalar<float>(4);
  const auto valid = args.scalar<std::int64_t>(5);
  if (valid < 1 || static_cast<std::uint64_t>(valid) > cols) {
    args.fail("pa_softmax_prepare: valid must be in 1..N");
    return;
  }
  const auto nv = static_cast<std::uint64_t>(valid);
  const float* s = args.data<const float>(0);
  float* p = args.data<float>(1);
  float* m = args.data<float>(2);
  float* l = args.data<float>(3);
  for (std::uint64_t r = 0; r < rows; ++r) {
    const float* srow = s + r * cols;
    float* prow = p + r * cols;
    float mx = scale * srow[0];
    for (std::uint64_t j = 1; j < nv; ++j) mx = std::fmax(mx, scale * srow[j]);
    float sum = 0.0F;
    for (std::uint64_t j = 0; j < nv; ++j) {
      prow[j] = std::exp(scale * srow[j] - mx);
      sum += prow[j];
    }
    for (std::uint64_t j = nv; j < cols; ++j) prow[j] = 0.0F;
    m[r] = mx;
    l[r] = sum;
  }
}
