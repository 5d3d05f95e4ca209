// Test orchestration for write-after-read and write-after-write ordering on the device
// TensorMap (see hazard_cases.hpp for the cases and the run's arguments).
#include <simpler/device/orchestration.hpp>

#include "hazard_cases.hpp"

using simpler::device::Task;
using simpler::device::view;

using namespace hazard_cases;

SIMPLER_ORCHESTRATION(orch, args) {
  const auto which = static_cast<Case>(args.scalars[0]);
  const auto wait_ms = static_cast<std::uint32_t>(args.scalars[1]);
  const auto count = static_cast<std::uint32_t>(args.scalars[2]);
  const simpler_chip_tensor& gate = args.tensors[0];
  const simpler_chip_tensor& x = args.tensors[1];
  const simpler_chip_tensor& y = args.tensors[2];
  switch (which) {
    case kReadThenWrite:
    case kReadThenInOut: {
      orch.aiv(kWaitCopy, Task().no_dep(gate).input(x).output(y).scalar(wait_ms));
      Task w;
      w.no_dep(gate);
      if (which == kReadThenWrite)
        w.output(x);
      else
        w.inout(x);
      orch.aiv(kFillOpen, w.scalar(7));
      break;
    }
    case kWriteThenWrite:
      orch.aiv(kWaitFill, Task().no_dep(gate).output(x).scalar(wait_ms).scalar(1));
      orch.aiv(kFillOpen, Task().no_dep(gate).output(x).scalar(2));
      break;
    case kFailedReader:
      orch.aiv(kFail, Task().input(x));
      orch.aiv(kFillOpen, Task().no_dep(gate).output(x).scalar(5));
      break;
    case kDisjoint: {
      const std::uint32_t half = x.shapes[0] / 2;
      orch.aiv(kWaitCopy, Task().no_dep(gate).input(view(x, 0, {half})).output(y).scalar(wait_ms));
      orch.aiv(kFillOpen, Task().no_dep(gate).output(view(x, half, {half})).scalar(9));
      orch.aiv(kFillOpen, Task().no_dep(gate).inout(view(x, half, {half})).scalar(9));
      break;
    }
    case kManyReaders:
      orch.aiv(kWaitFill, Task().no_dep(gate).output(x).scalar(wait_ms).scalar(5));
      for (std::uint32_t i = 0; i < count; ++i)
        orch.aiv(kWaitCopy, Task().no_dep(gate).input(x).output(view(y, 1 + i, {1})).scalar(0));
      orch.aiv(kFillOpen, Task().no_dep(gate).output(x).scalar(9));
      break;
    case kRandom: {
      const simpler_chip_tensor& prog = args.tensors[3];
      const auto* ops = static_cast<const ProgramOp*>(simpler_tensor_data(&prog));
      const std::uint64_t n = simpler_tensor_numel(&prog) / kOpWords;
      const simpler_chip_tensor* bufs[2] = {&x, &y};
      for (std::uint64_t i = 0; i < n; ++i) {
        const ProgramOp& op = ops[i];
        const auto len = static_cast<std::uint32_t>(op.len);
        const simpler_chip_tensor dst = view(*bufs[op.dst_buf], op.dst_off, {len});
        const simpler_chip_tensor src = view(*bufs[op.src_buf], op.src_off, {len});
        Task t;
        if (op.mode == 0 || op.mode == 2)
          t.output(dst);
        else
          t.inout(dst);
        if (op.mode >= 2)
          t.input(src);
        else
          t.no_dep(gate);  // not read
        orch.aiv(kOp, t.scalar(op.mode).scalar(op.value).scalar(op.spin));
      }
      break;
    }
    case kReadHeavy:
      for (std::uint32_t i = 0; i < count; ++i) {
        if (i % 16 == 15)
          orch.aiv(kNoop, Task().inout(x));
        else
          orch.aiv(kNoop, Task().input(x).input(x).input(x).input(x).output(view(y, i % 8, {1})));
      }
      break;
    default:
      orch.report_fatal("hazard_cases: unknown case");
      break;
  }
}
