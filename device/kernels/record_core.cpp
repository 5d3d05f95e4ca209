// record_core (any core) — writes where it ran into its task's record, so a test can check
// that each lane of a task ran on a core of the right type and the lanes of a MIX task on one
// cluster. All lanes of a task get the same arguments; each writes its own row.
//   tensors: record int32 [3, 8] (out; one row per lane: AIC, AIV0, AIV1), then any others
//            (ignored; orchestrations use them to make dependencies).
//   row = {runs, core_type, cluster_id, sub_block_id, core_id, 0, 0, 0}; runs is incremented.
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  constexpr int kRowInts = 8;
  const auto& rec = args.tensor(0);
  if (rec.dtype != SIMPLER_INT32 || simpler_tensor_numel(&rec) < 3 * kRowInts) {
    args.fail("record_core: the record must be int32 with at least 3 x 8 elements");
    return;
  }
  const simpler_global_context& g = args.global();
  int lane = -1;
  if (g.core_type == 0 && g.sub_block_id == 0) lane = 0;
  if (g.core_type == 1 && (g.sub_block_id == 0 || g.sub_block_id == 1)) lane = 1 + g.sub_block_id;
  if (lane < 0) {
    args.fail("record_core: the core reports an unknown core_type / sub_block_id pair");
    return;
  }
  std::int32_t* row = args.data<std::int32_t>(0) + lane * kRowInts;
  row[0] += 1;
  row[1] = g.core_type;
  row[2] = g.cluster_id;
  row[3] = g.sub_block_id;
  row[4] = g.core_id;
}
