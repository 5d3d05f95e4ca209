// Test kernel for SPMD tasks: z = x + y over float32 vectors, the work split by block index
// (block b of B takes elements [b * ceil(n / B), min(n, (b + 1) * ceil(n / B)))).
//   tensors: x, y (float32 [n]), z (float32 [n], written), rec (int32, rows of 8) where block b
//            on lane l (0 AIC, 1 AIV0, 2 AIV1) writes row b * 3 + l:
//            {runs (incremented), core_id, cluster_id, block_num, core_type, block_idx, 0, 0}.
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  const std::int32_t b = args.block_idx();
  const std::int32_t nb = args.block_num();
  if (nb < 1 || b < 0 || b >= nb) {
    args.fail("spmd_add: block_idx outside 0..block_num-1");
    return;
  }
  const std::uint64_t n = simpler_tensor_numel(&args.tensor(0));
  const std::uint64_t chunk =
      (n + static_cast<std::uint64_t>(nb) - 1) / static_cast<std::uint64_t>(nb);
  const std::uint64_t begin = std::min<std::uint64_t>(n, chunk * static_cast<std::uint64_t>(b));
  const std::uint64_t end = std::min<std::uint64_t>(n, begin + chunk);
  const float* x = args.data<float>(0);
  const float* y = args.data<float>(1);
  float* z = args.data<float>(2);
  // Every lane of a MIX block computes the same slice: the stores are relaxed atomics so lanes
  // writing equal values to the same element are not a data race.
  for (std::uint64_t i = begin; i < end; ++i) {
    float v = x[i] + y[i];
    __atomic_store(&z[i], &v, __ATOMIC_RELAXED);
  }

  {
    const simpler_global_context& g = args.global();
    const int lane = g.core_type == 0 ? 0 : 1 + g.sub_block_id;
    if (args.tensor(3).dtype != SIMPLER_INT32) {
      args.fail("spmd_add: the record must be int32");
      return;
    }
    const std::uint64_t row = static_cast<std::uint64_t>(b) * 3 + static_cast<std::uint64_t>(lane);
    if ((row + 1) * 8 > simpler_tensor_numel(&args.tensor(3))) {
      args.fail("spmd_add: the record has too few rows for this block");
      return;
    }
    std::int32_t* r = args.data<std::int32_t>(3) + row * 8;
    __atomic_fetch_add(&r[0], 1, __ATOMIC_RELAXED);
    r[1] = g.core_id;
    r[2] = g.cluster_id;
    r[3] = nb;
    r[4] = g.core_type;
    r[5] = b;
  }
}
