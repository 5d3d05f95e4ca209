// simpler — CallConfig, the execution knobs of a task. The same POD at every level: stored by
// value in the task slot, copied into mailboxes, handed to device runtimes unchanged.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

namespace simpler {

struct CallConfig {
  std::int32_t block_dim = 0;           ///< 0 = let the device pick its maximum
  std::int32_t aicpu_thread_num = 3;    ///< AICPU threads on the chip (1 orchestrator + schedulers)
  std::int32_t enable_l2_swimlane = 0;  ///< 0 = off, 1-4 = detail level
  std::int32_t enable_dump_tensor = 0;
  std::int32_t enable_pmu = 0;  ///< 0 = off, > 0 selects the event type
  std::int32_t enable_dep_gen = 0;
  std::array<char, 1024> output_prefix{};  ///< NUL-terminated directory for diagnostics

  /// True when any diagnostic output is requested.
  [[nodiscard]] bool wants_diagnostics() const noexcept {
    return enable_l2_swimlane != 0 || enable_dump_tensor != 0 || enable_pmu != 0 ||
           enable_dep_gen != 0;
  }
  /// Throws UsageError naming the field when the config cannot be used: a negative block_dim or
  /// thread count, a swimlane level outside 0..4, diagnostics without an output_prefix, or an
  /// output_prefix without its terminating NUL.
  void validate() const;
};

static_assert(std::is_trivially_copyable_v<CallConfig>);
static_assert(std::is_standard_layout_v<CallConfig>);

}  // namespace simpler
