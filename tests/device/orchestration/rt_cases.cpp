// Test orchestration for the device runtime's own tests. scalar 0 picks the case, scalar 1 is a
// count; tensor 0 is an int32 host buffer of at least 4 elements ("data"), tensor 1 another one
// ("flag"). Kernels: 0 noop, 1 fail, 2 fault, 3 spin (waits on tensor 0), 4 inc (tensor 0 += 1),
// 5 fill (tensor 0 = scalar).
#include <simpler/device/orchestration.hpp>

#include <atomic>

#include "rt_cases.hpp"

using simpler::device::Task;

using namespace rt_cases;

// Every run passes data, flag, case and count.
extern "C" __attribute__((visibility("default"))) std::int32_t aicpu_orchestration_expected_args() {
  return 4;
}

SIMPLER_ORCHESTRATION(orch, args) {
  const auto which = static_cast<int>(args.scalars[0]);
  const auto n = static_cast<std::uint32_t>(args.scalars[1]);
  const simpler_chip_tensor& data = args.tensors[0];
  const simpler_chip_tensor& flag = args.tensors[1];
  switch (which) {
    case kIndependent:
      for (std::uint32_t i = 0; i < n; ++i) orch.aiv(0, Task().output({16}, SIMPLER_INT32));
      break;
    case kUnknownFunc:
      orch.aiv(99, Task().input(data));
      break;
    case kTooManyTensors: {
      Task t;
      for (int i = 0; i < SIMPLER_MAX_TASK_TENSORS + 1; ++i) t.input(data);
      orch.aiv(0, t);
      break;
    }
    case kTooManyScalars: {
      Task t;
      for (int i = 0; i < SIMPLER_MAX_TASK_SCALARS + 1; ++i) t.scalar(i);
      orch.aiv(0, t);
      break;
    }
    case kScopeDeadlock: {  // n tasks in one inner scope; the test makes the window smaller
      auto s = orch.scope();
      for (std::uint32_t i = 0; i < n; ++i) orch.aiv(0, Task().input(data));
      break;
    }
    case kHeapTooSmall:  // one output of n KiB
      orch.aiv(0, Task().output({n * 256}, SIMPLER_INT32));
      break;
    case kHeapScopeDeadlock: {  // n outputs of 4 KiB in one scope
      auto s = orch.scope();
      for (std::uint32_t i = 0; i < n; ++i) orch.aiv(0, Task().output({1024}, SIMPLER_INT32));
      break;
    }
    case kKernelFails:
      orch.aiv(0, Task().input(data));
      orch.aiv(1, Task().input(data));
      break;
    case kKernelFaults:
      orch.aic(2, Task().input(data));
      break;
    case kWaitsOnItself: {
      // The spin task waits for `data` to become non-zero, which this orchestration only does
      // after reading the spin task's output: a dependency that can never resolve.
      auto r = orch.aiv(3, Task().no_dep(data).output({4}, SIMPLER_INT32).scalar(3000));
      const auto v = orch.read<std::int32_t>(r.tensor(1), 0);
      std::atomic_ref<std::int32_t>(static_cast<std::int32_t*>(simpler_tensor_data(&data))[0])
          .store(v + 1);
      break;
    }
    case kStuckKernel:  // the spin kernel gives up after n ms
      orch.aiv(3, Task().no_dep(data).output({4}, SIMPLER_INT32).scalar(n));
      break;
    case kUnbalancedScope:
      orch.scope_end();
      break;
    case kReportFatal:
      orch.report_fatal("the input is not what this orchestration expects");
      orch.aiv(0, Task().input(data));
      break;
    case kChain: {  // n increments of data through InOut, half of them in inner scopes
      for (std::uint32_t i = 0; i < n; ++i) {
        if (i % 2 == 0) {
          orch.aiv(4, Task().inout(data));
        } else {
          auto s = orch.scope();
          orch.aic(4, Task().inout(data));
        }
      }
      break;
    }
    case kScopeLeftOpen:
      orch.scope_begin();
      orch.aiv(0, Task().input(data));
      break;
    case kAllocChain: {  // a runtime-allocated buffer incremented n times, then copied out
      auto buf = orch.alloc({4}, SIMPLER_INT32);
      orch.aiv(5, Task().output(buf).scalar(std::int32_t{0}));
      for (std::uint32_t i = 0; i < n; ++i) orch.aiv(4, Task().inout(buf));
      const auto v = orch.read<std::int32_t>(buf, 0);
      static_cast<std::int32_t*>(simpler_tensor_data(&flag))[0] = v;
      break;
    }
    case kWindowBackstop: {
      // A slow task (n ms) in a scope that already ended still occupies ring 1; a second scope
      // then needs more of ring 1's window than is left. Not structural: the backstop decides.
      {
        auto s = orch.scope();
        orch.aiv(3, Task().no_dep(data).output({4}, SIMPLER_INT32).scalar(n));
      }
      auto s = orch.scope();
      for (int i = 0; i < 4; ++i) orch.aiv(0, Task().input(flag));
      break;
    }
    case kReadManyWriters:  // n writers of `data` (held by the run's scope), then a read of it
      for (std::uint32_t i = 0; i < n; ++i) orch.aiv(0, Task().output(data));
      static_cast<void>(orch.read<std::int32_t>(data, 0));
      break;
    case kChainFailsMidway:  // n increments of data, a failing task, then n more increments
      for (std::uint32_t i = 0; i < 2 * n + 1; ++i) orch.aiv(i == n ? 1 : 4, Task().inout(data));
      break;
    default:
      orch.report_fatal("rt_cases: unknown case");
  }
}
