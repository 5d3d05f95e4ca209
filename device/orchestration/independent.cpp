// independent — N empty-kernel tasks with no dependencies between them (a benchmark of
// throughput: submit and dispatch as fast as the cores take tasks).
//   args:    scalar N.
//   kernels: 0 noop (AIV).
//
//   per chunk of <= 1024 tasks (its own scope, so finished tasks free the window):
//     buf = alloc [chunk, 16] float32
//     noop(out buf[j]) for each j        each task writes its own 64-byte view
#include <simpler/device/orchestration.hpp>

#include <algorithm>

using namespace simpler::device;

namespace {
constexpr std::int32_t kNoop = 0;
constexpr std::uint64_t kChunk = 1024;
constexpr std::uint32_t kViewFloats = 16;
}  // namespace

extern "C" __attribute__((visibility("default"))) std::int32_t aicpu_orchestration_expected_args() {
  return 1;
}

SIMPLER_ORCHESTRATION(orch, args) {
  if (args.tensor_count != 0 || args.scalar_count != 1) {
    orch.report_fatal("independent: expects one scalar (N) and no tensors");
    return;
  }
  const std::uint64_t n = args.scalars[0];
  for (std::uint64_t begin = 0; begin < n && !orch.fatal(); begin += kChunk) {
    auto scope = orch.scope();
    const auto count = static_cast<std::uint32_t>(std::min(n - begin, kChunk));
    const ChipTensor buf = orch.alloc({count, kViewFloats});
    for (std::uint32_t j = 0; j < count; ++j) {
      orch.aiv(kNoop, Task().output(view(buf, std::uint64_t{j} * kViewFloats, {kViewFloats})));
    }
  }
}
