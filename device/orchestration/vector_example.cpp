// vector_example — f = (a + b + 1)(a + b + 2) + (a + b), elementwise over float32.
//   args:    tensors a (in), b (in), f (out), all float32 with the same element count.
//   kernels: 0 add, 1 add_scalar, 2 mul (all AIV).
//
//   t0: c = a + b                      outer scope (ring 0); c runtime-allocated
//   scope (ring 1):
//     t1: d = c + 1      t0 -> t1
//     t2: e = c + 2      t0 -> t2
//     t3: g = d * e      t1, t2 -> t3
//     t4: f = g + c      t3, t0 -> t4; f is the caller's tensor
#include <simpler/device/orchestration.hpp>

using namespace simpler::device;

namespace {
constexpr std::int32_t kAdd = 0;
constexpr std::int32_t kAddScalar = 1;
constexpr std::int32_t kMul = 2;
}  // namespace

extern "C" __attribute__((visibility("default"))) std::int32_t aicpu_orchestration_expected_args() {
  return 3;
}

SIMPLER_ORCHESTRATION(orch, args) {
  if (args.tensor_count != 3 || args.scalar_count != 0) {
    orch.report_fatal("vector_example: expects three tensors (a, b, f) and no scalars");
    return;
  }
  const ChipTensor& a = args.tensors[0];
  const ChipTensor& b = args.tensors[1];
  const ChipTensor& f = args.tensors[2];
  const std::uint64_t n = simpler_tensor_numel(&f);
  if (a.dtype != SIMPLER_FLOAT32 || b.dtype != SIMPLER_FLOAT32 || f.dtype != SIMPLER_FLOAT32 ||
      simpler_tensor_numel(&a) != n || simpler_tensor_numel(&b) != n || n == 0 || n > UINT32_MAX) {
    orch.report_fatal("vector_example: a, b and f must be non-empty float32 of one size");
    return;
  }
  const auto len = static_cast<std::uint32_t>(n);

  const ChipTensor c = orch.aiv(kAdd, Task().input(a).input(b).output({len})).tensor(2);
  {
    auto scope = orch.scope();
    const ChipTensor d = orch.aiv(kAddScalar, Task().input(c).output({len}).scalar(1.0F)).tensor(1);
    const ChipTensor e = orch.aiv(kAddScalar, Task().input(c).output({len}).scalar(2.0F)).tensor(1);
    const ChipTensor g = orch.aiv(kMul, Task().input(d).input(e).output({len})).tensor(2);
    orch.aiv(kAdd, Task().input(g).input(c).output(f));
  }
}
