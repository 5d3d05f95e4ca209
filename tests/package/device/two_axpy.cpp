// two_axpy (orchestration of the package consumer) — out = 3 * (2x + y) + x = 7x + 3y.
//   args:    tensors x (in), y (in), out (out), float32 with the same element count.
//   kernels: 0 axpy (AIV).
//
//   t0: u = 2x + y          u is allocated by the runtime
//   t1: out = 3u + x        t0 -> t1 (reads u)
#include <simpler/device/orchestration.hpp>

using namespace simpler::device;

SIMPLER_ORCHESTRATION(orch, args) {
  if (args.tensor_count != 3 || args.scalar_count != 0) {
    orch.report_fatal("two_axpy: expects three tensors (x, y, out) and no scalars");
    return;
  }
  const ChipTensor& x = args.tensors[0];
  const ChipTensor& y = args.tensors[1];
  const ChipTensor& out = args.tensors[2];
  const std::uint64_t n = simpler_tensor_numel(&out);
  if (n == 0 || n > UINT32_MAX || simpler_tensor_numel(&x) != n || simpler_tensor_numel(&y) != n) {
    orch.report_fatal("two_axpy: x, y and out must be non-empty and of one size");
    return;
  }
  const auto len = static_cast<std::uint32_t>(n);
  constexpr std::int32_t kAxpy = 0;
  const ChipTensor u =
      orch.aiv(kAxpy, Task().input(x).input(y).output({len}).scalar(2.0F)).tensor(2);
  orch.aiv(kAxpy, Task().input(u).input(x).output(out).scalar(3.0F));
}
