// The cases of the rt_cases test orchestration, shared with tests/test_device_runtime.cpp.
#pragma once

namespace rt_cases {
enum Case {
  kIndependent = 0,
  kUnknownFunc = 1,
  kTooManyTensors = 2,
  kTooManyScalars = 3,
  kScopeDeadlock = 4,
  kHeapTooSmall = 5,
  kHeapScopeDeadlock = 6,
  kKernelFails = 7,
  kKernelFaults = 8,
  kWaitsOnItself = 9,
  kStuckKernel = 10,
  kUnbalancedScope = 11,
  kReportFatal = 12,
  kChain = 13,
  kScopeLeftOpen = 14,
  kAllocChain = 15,
  kWindowBackstop = 16,
  kReadManyWriters = 17,
  kChainFailsMidway = 18,
};
}  // namespace rt_cases
