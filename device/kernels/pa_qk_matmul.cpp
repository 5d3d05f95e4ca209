// pa_qk_matmul (AIC) — paged attention, step 1 of a KV block: s = q @ k^T, float32.
//   tensors: q [M, D] (in; the query rows of one head tile), k [N, D] (in; one KV cache block),
//            s [M, N] (out).
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  const auto& tq = args.tensor(0);
  const auto& tk = args.tensor(1);
  const auto& ts = args.tensor(2);
  if (args.global().core_type != 0) {
    args.fail("pa_qk_matmul: an AIC kernel ran on an AIV core");
    return;
  }
  if (tq.dtype != SIMPLER_FLOAT32 || tk.dtype != SIMPLER_FLOAT32 || ts.dtype != SIMPLER_FLOAT32) {
    args.fail("pa_qk_matmul: q, k and s must be float32");
    return;
  }
  if (tq.ndims != 2 || tk.ndims != 2 || ts.ndims != 2 || tq.shapes[1] != tk.shapes[1] ||
      ts.shapes[0] != tq.shapes[0] || ts.shapes[1] != tk.shapes[0]) {
    args.fail("pa_qk_matmul: needs q [M, D], k [N, D] and s [M, N]");
    return;
  }
  const std::uint64_t m = tq.shapes[0], n = tk.shapes[0], d = tq.shapes[1];
  const float* q = args.data<const float>(0);
  const float* k = args.data<const float>(1);
  float* s = args.data<float>(2);
  for (std::uint64_t i = 0; i < m; ++i) {
    for (std::uint64_t j = 0; j < n; ++j) {
      float acc = 0.0F;
      for (std::uint64_t p = 0; p < d; ++p) acc += q[i * d + p] * k[j * d + p];
      s[i * n + j] = acc;
    }
  }
}
