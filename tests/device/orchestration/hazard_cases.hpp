// The cases of the hazard_cases test orchestration, shared with tests/test_chip_hazards.cpp.
#pragma once

#include <cstdint>

namespace hazard_cases {

/// Run tensors: 0 gate (int32 [4]), 1 X (int32), 2 Y (int32), 3 program (int32, kRandom only).
/// Scalars: 0 the case, 1 wait_ms (how long a held-open task waits for the gate), 2 a count.
enum Case : std::uint32_t {
  /// R reads X into Y, held open; then W (OutputExisting) writes 7 into X and opens the gate.
  kReadThenWrite = 0,
  /// As kReadThenWrite with W an InOut of X.
  kReadThenInOut = 1,
  /// W1 (held open) writes 1 into X; then W2 writes 2 into X and opens the gate.
  kWriteThenWrite = 2,
  /// R (a failing kernel) reads X; then W writes 5 into X and opens the gate.
  kFailedReader = 3,
  /// R reads the first half of X into Y, held open; W writes 9 into the second half of X
  /// (OutputExisting, then an InOut writes 9 again) and opens the gate.
  kDisjoint = 4,
  /// G (held open) writes 5 into X; `count` readers each copy X[0] into Y[1 + i]; then W writes
  /// 9 into X.
  kManyReaders = 5,
  /// Runs the program in tensor 3: kOpWords int32 per op (see ProgramOp).
  kRandom = 6,
  /// `count` no-op tasks: each reads X four times and writes Y[i % 8], every 16th instead
  /// updates X (InOut): five TensorMap entries per task, none of them retired before the run
  /// ends.
  kReadHeavy = 7,
};

/// Kernels of the callable, by func_id.
enum Func : std::int32_t {
  kWaitCopy = 0,  // hz_wait_copy
  kWaitFill = 1,  // hz_wait_fill
  kFillOpen = 2,  // hz_fill_open
  kFail = 3,      // rt_fail
  kOp = 4,        // hz_op
  kNoop = 5,      // rt_noop
};

/// One op of a kRandom program: hz_op with `mode` on dst = view [dst_off, dst_off + len) of
/// buffer dst_buf (0 = X, 1 = Y) and, for modes 2 and 3, src = view [src_off, src_off + len) of
/// buffer src_buf.
struct ProgramOp {
  std::int32_t mode, dst_buf, dst_off, len, src_buf, src_off, value, spin;
};
inline constexpr int kOpWords = 8;
static_assert(sizeof(ProgramOp) == kOpWords * sizeof(std::int32_t));

}  // namespace hazard_cases
