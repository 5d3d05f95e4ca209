// The cases of the spmd_cases test orchestration, shared with tests/test_chip_spmd.cpp.
#pragma once

namespace spmd_cases {
/// scalar 0: the case; scalar 1: the block count (int64 bit pattern) passed to Task::blocks.
/// Tensors: x, y (float32 [n]), z (float32 [n]), rec (int32 [rows, 8]). Kernel 0: spmd_add.
enum Case {
  kAiv = 0,       ///< one AIV task z = x + y with blocks(scalar 1), record rows from 0
  kAic = 1,       ///< the same on AIC cores
  kMix = 2,       ///< one MIX task (AIC + AIV0 + AIV1, all spmd_add) with blocks(scalar 1)
  kDefault = 3,   ///< one AIV task without blocks(): one block
  kConsumer = 4,  ///< tmp = x + y (blocks(scalar 1), a runtime-allocated output), then one
                  ///< single-block task z = tmp + y: its record rows follow the producer's
                  ///< (rows 3 * blocks ..)
  kNegative = 5,  ///< Task::blocks(-3)
};
}  // namespace spmd_cases
