// chipw_one — the ChipWorker tests' orchestration: one AIV task running kernel func_id 0 with
// every tensor of the run (tagged InOut) and every scalar of the run, in order.
#include <simpler/device/orchestration.hpp>

using namespace simpler::device;

SIMPLER_ORCHESTRATION(orch, args) {
  Task t;
  for (std::int32_t i = 0; i < args.tensor_count; ++i) t.inout(args.tensors[i]);
  for (std::int32_t i = 0; i < args.scalar_count; ++i) t.scalar(args.scalars[i]);
  orch.aiv(0, t);
}
