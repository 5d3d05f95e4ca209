// chip_bgemm — batched GEMM on one simulated chip (L2): per group and k a GEMM on an AIC core
// into a runtime-allocated tile batch P, then an ADD on an AIV core accumulating P into C.
//
//   ChipWorker (L2, device 0)
//   ├── AICPU: orchestrator (runs orch_bgemm.so) + schedulers
//   └── AICore clusters, each 1 AIC (kernel_gemm) + 2 AIV (kernel_tile_add)
//
//   group g (own scope):  gemm_0 ──► add_0 ──► add_1 ──► ...     C[g] += sum_k A[g,k] @ B[g,k]
//                         gemm_1 ───────────────┘
#include <simpler/simpler.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

int main() {
  using namespace simpler;
  const std::string dir = SIMPLER_DEVICE_MODULE_DIR;
  ChipCallable bgemm{.name = "bgemm",
                     .orchestration = dir + "/orch_bgemm.so",
                     .kernels = {{0, dir + "/kernel_gemm.so"}, {1, dir + "/kernel_tile_add.so"}}};
  ChipWorker chip(/*device_id=*/0);
  chip.init();
  const int id = chip.register_callable(bgemm);

  constexpr std::uint32_t tile = 32, grid_k = 2, groups = 64, loop = 2;
  constexpr std::size_t t2 = std::size_t{tile} * tile;
  std::vector<float> a(groups * grid_k * loop * t2), b(a.size()), c(groups * loop * t2, 0.0F);
  std::mt19937 rng(42);
  std::normal_distribution<float> randn;
  for (auto& v : a) v = 0.01F * randn(rng);
  for (auto& v : b) v = 0.01F * randn(rng);

  TaskArgs args;
  args.add_tensor(make_tensor(a.data(), {groups, grid_k, loop, tile, tile}, DataType::Float32));
  args.add_tensor(make_tensor(b.data(), {groups, grid_k, loop, tile, tile}, DataType::Float32));
  args.add_tensor(make_tensor(c.data(), {groups * loop, tile, tile}, DataType::Float32),
                  TensorArgType::InOut);
  args.add_scalar(tile).add_scalar(grid_k).add_scalar(groups).add_scalar(loop);
  chip.run(id, args);
  const auto stats = chip.stats();
  chip.finalize();

  // Reference: C[g * loop + i] = sum_k A[g, k, i] @ B[g, k, i].
  double worst = 0;
  for (std::size_t g = 0; g < groups; ++g) {
    for (std::size_t i = 0; i < loop; ++i) {
      for (std::size_t r = 0; r < tile; ++r) {
        for (std::size_t col = 0; col < tile; ++col) {
          double want = 0;
          for (std::size_t k = 0; k < grid_k; ++k) {
            const float* pa = a.data() + ((g * grid_k + k) * loop + i) * t2;
            const float* pb = b.data() + ((g * grid_k + k) * loop + i) * t2;
            for (std::size_t p = 0; p < tile; ++p)
              want += double{pa[r * tile + p]} * pb[p * tile + col];
          }
          const float got = c[(g * loop + i) * t2 + r * tile + col];
          worst = std::fmax(worst, std::fabs(got - want));
        }
      }
    }
  }
  if (!(worst <= 1e-3)) {
    std::printf("chip_bgemm: max |C - reference| = %g, above the 1e-3 tolerance\n", worst);
    return 1;
  }
  std::printf("chip_bgemm: %u groups x %u k x %u tiles of %ux%u: %llu tasks, max error %.2g\n",
              groups, grid_k, loop, tile, tile,
              static_cast<unsigned long long>(stats.tasks_completed), worst);
  return 0;
}
