// gemm (AIC) — a batch of tile matmuls: out[l] = a[l] @ b[l] for l < L, float32.
//   tensors: a [L, M, K] (in), b [L, K, N] (in), out [L, M, N] (out). A 2-D tensor is a batch
//   of one.
#include <simpler/device/orchestration.hpp>

#include <cstdio>

namespace {

struct Dims {
  std::uint64_t batch, rows, cols;
};

bool dims_of(const simpler_chip_tensor& t, Dims& d) {
  if (t.ndims == 2) {
    d = {1, t.shapes[0], t.shapes[1]};
    return true;
  }
  if (t.ndims == 3) {
    d = {t.shapes[0], t.shapes[1], t.shapes[2]};
    return true;
  }
  return false;
}

}  // namespace

SIMPLER_KERNEL(args) {
  const auto& ta = args.tensor(0);
  const auto& tb = args.tensor(1);
  const auto& tc = args.tensor(2);
  if (args.global().core_type != 0) {
    args.fail("gemm: an AIC kernel ran on an AIV core");
    return;
  }
  if (ta.dtype != SIMPLER_FLOAT32 || tb.dtype != SIMPLER_FLOAT32 || tc.dtype != SIMPLER_FLOAT32) {
    args.fail("gemm: a, b and out must be float32");
    return;
  }
  Dims a{}, b{}, c{};
  if (!dims_of(ta, a) || !dims_of(tb, b) || !dims_of(tc, c)) {
    args.fail("gemm: a, b and out must be 2-D [rows, cols] or 3-D [batch, rows, cols]");
    return;
  }
  if (a.batch != b.batch || a.batch != c.batch || a.cols != b.rows || c.rows != a.rows ||
      c.cols != b.cols) {
    char msg[160];
    std::snprintf(msg, sizeof msg,
                  "gemm: shapes do not chain: a [%llu,%llu,%llu] b [%llu,%llu,%llu] out "
                  "[%llu,%llu,%llu]",
                  static_cast<unsigned long long>(a.batch), static_cast<unsigned long long>(a.rows),
                  static_cast<unsigned long long>(a.cols), static_cast<unsigned long long>(b.batch),
                  static_cast<unsigned long long>(b.rows), static_cast<unsigned long long>(b.cols),
                  static_cast<unsigned long long>(c.batch), static_cast<unsigned long long>(c.rows),
                  static_cast<unsigned long long>(c.cols));
    args.fail(msg);
    return;
  }
  const std::uint64_t m = a.rows, k = a.cols, n = b.cols;
  for (std::uint64_t l = 0; l < a.batch; ++l) {
    const float* pa = args.data<const float>(0) + l * m * k;
    const float* pb = args.data<const float>(1) + l * k * n;
    float* pc = args.data<float>(2) + l * m * n;
    for (std::uint64_t i = 0; i < m; ++i) {
      float* row = pc + i * n;
      for (std::uint64_t j = 0; j < n; ++j) row[j] = 0.0F;
      for (std::uint64_t p = 0; p < k; ++p) {
        const float av = pa[i * k + p];
        const float* brow = pb + p * n;
        for (std::uint64_t j = 0; j < n; ++j) row[j] += av * brow[j];
      }
    }
  }
}
