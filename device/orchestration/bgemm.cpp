// bgemm — batched GEMM: C[g * loop + i] += sum_k A[g, k, i] @ B[g, k, i].
//   args:    tensors A [num_groups, grid_k, loop, tile, tile] (in), B (same shape, in),
//            C [num_groups * loop, tile, tile] (inout), all float32;
//            scalars tile, grid_k, num_groups, loop.
//   kernels: 0 gemm (AIC), 1 tile_add (AIV).
//
//   per group g (its own scope, ring 1), per k:
//     gemm_k: P = A[g, k] @ B[g, k]     P runtime-allocated: [loop, tile, tile]
//     add_k:  C[g] += P                 gemm_k -> add_k (P), add_{k-1} -> add_k (inout C[g])
//   2 * num_groups * grid_k tasks; groups are independent.
#include <simpler/device/orchestration.hpp>

using namespace simpler::device;

namespace {
constexpr std::int32_t kGemm = 0;
constexpr std::int32_t kTileAdd = 1;
}  // namespace

extern "C" __attribute__((visibility("default"))) std::int32_t aicpu_orchestration_expected_args() {
  return 7;
}

SIMPLER_ORCHESTRATION(orch, args) {
  if (args.tensor_count != 3 || args.scalar_count != 4) {
    orch.report_fatal("bgemm: expects tensors A, B, C and scalars tile, grid_k, num_groups, loop");
    return;
  }
  const ChipTensor& a = args.tensors[0];
  const ChipTensor& b = args.tensors[1];
  const ChipTensor& c = args.tensors[2];
  const std::uint64_t tile = args.scalars[0];
  const std::uint64_t grid_k = args.scalars[1];
  const std::uint64_t groups = args.scalars[2];
  const std::uint64_t loop = args.scalars[3];
  if (tile == 0 || grid_k == 0 || groups == 0 || loop == 0 || tile > 4096 || loop > 4096) {
    orch.report_fatal(
        "bgemm: tile, grid_k, num_groups and loop must be positive (tile, loop <= "
        "4096)");
    return;
  }
  const std::uint64_t tile_elems = tile * tile;
  if (a.dtype != SIMPLER_FLOAT32 || b.dtype != SIMPLER_FLOAT32 || c.dtype != SIMPLER_FLOAT32 ||
      simpler_tensor_numel(&a) != groups * grid_k * loop * tile_elems ||
      simpler_tensor_numel(&b) != groups * grid_k * loop * tile_elems ||
      simpler_tensor_numel(&c) != groups * loop * tile_elems) {
    orch.report_fatal(
        "bgemm: A and B must be float32 [num_groups, grid_k, loop, tile, tile] and C float32 "
        "[num_groups * loop, tile, tile]");
    return;
  }
  const auto t = static_cast<std::uint32_t>(tile);
  const auto l = static_cast<std::uint32_t>(loop);
  const std::uint64_t block = loop * tile_elems;  // elements of one [loop, tile, tile] block

  for (std::uint64_t g = 0; g < groups && !orch.fatal(); ++g) {
    auto scope = orch.scope();
    const ChipTensor c_view = view(c, g * block, {l, t, t});
    for (std::uint64_t k = 0; k < grid_k; ++k) {
      const std::uint64_t at = (g * grid_k + k) * block;
      const ChipTensor p = orch.aic(kGemm, Task()
                                               .input(view(a, at, {l, t, t}))
                                               .input(view(b, at, {l, t, t}))
                                               .output({l, t, t}))
                               .tensor(2);
      orch.aiv(kTileAdd, Task().inout(c_view).input(p));
    }
  }
}
