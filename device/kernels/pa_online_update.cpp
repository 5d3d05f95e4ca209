// pa_online_update (AIV) — paged attention, step 4 of a KV block: merges the block's softmax
// (mij, lij, oij) into the running accumulators (mi, li, oi) of its head tile:
//   first block:  mi = mij, li = lij, oi = oij
//   later blocks: mn = max(mi, mij), a = exp(mi - mn), b = exp(mij - mn),
//                 li = a li + b lij,  oi = a oi + b oij,  mi = mn
// and on the last block writes out = oi / li.
//   tensors: mij [M], lij [M], oij [M, D] (in); mi [M], li [M], oi [M, D] (inout);
//            out [M, D] (out); float32.
//   scalars: is_first, is_last (0/1).
#include <simpler/device/orchestration.hpp>

#include <cmath>

SIMPLER_KERNEL(args) {
  if (args.global().core_type != 1) {
    args.fail("pa_online_update: an AIV kernel ran on an AIC core");
    return;
  }
  for (int i = 0; i < 7; ++i) {
    if (args.tensor(i).dtype != SIMPLER_FLOAT32) {
      args.fail("pa_online_update: every tensor must be float32");
      return;
    }
  }
  const auto& toij = args.tensor(2);
  if (toij.ndims != 2) {
    args.fail("pa_online_update: oij must be [M, D]");
    return;
  }
  const std::uint64_t rows = toij.shapes[0], d = toij.shapes[1];
  for (int i : {0, 1, 3, 4}) {
    if (simpler_tensor_numel(&args.tensor(i)) != rows) {
      args.fail("pa_online_update: mij, lij, mi and li must have M elements");
      return;
    }
  }
  for (int i : {5, 6}) {
    if (simpler_tensor_numel(&args.tensor(i)) != rows * d) {
      args.fail("pa_online_update: oi and out must have M x D elements");
      return;
    }
  }
  const bool is_first = args.scalar<std::int64_t>(7) != 0;
  const bool is_last = args.scalar<std::int64_t>(8) != 0;
  const float* mij = args.data<const float>(0);
  const float* lij = args.data<const float>(1);
  const float* oij = args.data<const float>(2);
  float* mi = args.data<float>(3);
  float* li = args.data<float>(4);
  float* oi = args.data<float>(5);
  float* out = args.data<float>(6);
  for (std::uint64_t r = 0; r < rows; ++r) {
    float* orow = oi + r * d;
    const float* brow = oij + r * d;
    if (is_first) {
      mi[r] = mij[r];
      li[r] = lij[r];
      for (std::uint64_t c = 0; c < d; ++c) orow[c] = brow[c];
    } else {
      const float mn = std::fmax(mi[r], mij[r]);
      const float a = std::exp(mi[r] - mn);
      const float b = std::exp(mij[r] - mn);
      li[r] = a * li[r] + b * lij[r];
      for (std::uint64_t c = 0; c < d; ++c) orow[c] = a * orow[c] + b * brow[c];
      mi[r] = mn;
    }
    if (is_last) {
      float* dst = out + r * d;
      for (std::uint64_t c = 0; c < d; ++c) dst[c] = orow[c] / li[r];
    }
  }
}
