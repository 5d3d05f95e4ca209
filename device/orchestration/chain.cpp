// chain — N empty-kernel tasks in one dependency chain (a benchmark of per-task latency: each
// task waits for the previous one to complete).
//   args:    scalar N.
//   kernels: 0 noop (AIV).
//
//   token = alloc [16] int32
//   per chunk of <= 1024 tasks (its own scope, so finished tasks free the window):
//     noop(inout token) -> noop(inout token) -> ...
#include <simpler/device/orchestration.hpp>

#include <algorithm>

using namespace simpler::device;

namespace {
constexpr std::int32_t kNoop = 0;
constexpr std::uint64_t kChunk = 1024;
}  // namespace

extern "C" __attribute__((visibility("default"))) std::int32_t aicpu_orchestration_expected_args() {
  return 1;
}

SIMPLER_ORCHESTRATION(orch, args) {
  if (args.tensor_count != 0 || args.scalar_count != 1) {
    orch.report_fatal("chain: expects one scalar (N) and no tensors");
    return;
  }
  const std::uint64_t n = args.scalars[0];
  const ChipTensor token = orch.alloc({16}, SIMPLER_INT32);
  for (std::uint64_t begin = 0; begin < n && !orch.fatal(); begin += kChunk) {
    auto scope = orch.scope();
    const std::uint64_t end = std::min(n, begin + kChunk);
    for (std::uint64_t i = begin; i < end; ++i) orch.aiv(kNoop, Task().inout(token));
  }
}
