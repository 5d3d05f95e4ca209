// Test orchestration for SPMD tasks (tests/test_chip_spmd.cpp); see spmd_cases.hpp.
#include "spmd_cases.hpp"

#include <simpler/device/orchestration.hpp>

using simpler::device::Task;
using simpler::device::view;

using namespace spmd_cases;

SIMPLER_ORCHESTRATION(orch, args) {
  const auto which = static_cast<int>(args.scalars[0]);
  const auto blocks = static_cast<std::int64_t>(args.scalars[1]);
  const simpler_chip_tensor& x = args.tensors[0];
  const simpler_chip_tensor& y = args.tensors[1];
  const simpler_chip_tensor& z = args.tensors[2];
  const simpler_chip_tensor& rec = args.tensors[3];
  const auto task = [&] { return Task().input(x).input(y).output(z).no_dep(rec); };
  switch (which) {
    case kAiv:
      orch.aiv(0, task().blocks(blocks));
      break;
    case kAic:
      orch.aic(0, task().blocks(blocks));
      break;
    case kMix:
      orch.submit({0, 0, 0}, task().blocks(blocks));
      break;
    case kDefault:
      orch.aiv(0, task());
      break;
    case kConsumer: {
      const std::uint32_t n = x.shapes[0];
      const auto resolved = static_cast<std::uint32_t>(blocks == 0 ? 2 * orch.clusters() : blocks);
      const auto first = orch.aiv(0, Task()
                                         .input(x)
                                         .input(y)
                                         .output({n})
                                         .no_dep(view(rec, 0, {resolved * 3 * 8}))
                                         .blocks(blocks));
      orch.aiv(0, Task()
                      .input(first.tensor(2))
                      .input(y)
                      .output(z)
                      .no_dep(view(rec, std::uint64_t{resolved} * 3 * 8, {3 * 8})));
      break;
    }
    case kNegative:
      orch.aiv(0, task().blocks(-3));
      break;
    default:
      orch.report_fatal("spmd_cases: unknown case");
  }
}
