// mixed — a graph using every core shape, for checking where the runtime runs each task.
//   args:    tensor record int32 [iterations, 5, 3, 8], zeroed by the caller (one [3, 8] record
//            per task; see kernel record_core).
//   kernels: 0 record_core (on every lane).
//
//   per iteration (its own scope), tasks t = 0..4 writing record [iteration, t]:
//     t0: MIX AIC + AIV0 + AIV1    also outputs a runtime-allocated token
//     t1: AIC only
//     t2: AIV only
//     t3: AIV0 + AIV1              reads the token (t0 -> t3)
//     t4: AIC + AIV0               reads the token (t0 -> t4)
#include <simpler/device/orchestration.hpp>

using namespace simpler::device;

namespace {
constexpr std::int32_t kRecord = 0;
constexpr std::uint64_t kTasks = 5;
constexpr std::uint64_t kRecordInts = 3 * 8;
}  // namespace

extern "C" __attribute__((visibility("default"))) std::int32_t aicpu_orchestration_expected_args() {
  return 1;
}

SIMPLER_ORCHESTRATION(orch, args) {
  if (args.tensor_count != 1 || args.scalar_count != 0) {
    orch.report_fatal("mixed: expects one tensor (record) and no scalars");
    return;
  }
  const ChipTensor& record = args.tensors[0];
  const std::uint64_t n = simpler_tensor_numel(&record);
  if (record.dtype != SIMPLER_INT32 || n == 0 || n % (kTasks * kRecordInts) != 0) {
    orch.report_fatal("mixed: record must be int32 [iterations, 5, 3, 8]");
    return;
  }
  const std::uint64_t iterations = n / (kTasks * kRecordInts);
  for (std::uint64_t i = 0; i < iterations && !orch.fatal(); ++i) {
    auto scope = orch.scope();
    auto rec = [&](std::uint64_t t) {
      return view(record, (i * kTasks + t) * kRecordInts, {3, 8});
    };
    const ChipTensor token =
        orch.submit({kRecord, kRecord, kRecord}, Task().output(rec(0)).output({16}, SIMPLER_INT32))
            .tensor(1);
    orch.aic(kRecord, Task().output(rec(1)));
    orch.aiv(kRecord, Task().output(rec(2)));
    orch.submit({-1, kRecord, kRecord}, Task().output(rec(3)).input(token));
    orch.submit({kRecord, kRecord, -1}, Task().output(rec(4)).input(token));
  }
}
