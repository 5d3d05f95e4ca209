// simpler — CallConfig, the execution knobs of a task. The same POD at every level: stored by
// value in the task slot, copied into mailboxes, handed to device runtimes unchanged.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <type_traits>

namespace simpler {

/// Per-ring sizing of a chip run's runtime (the device's task windows, heaps and dependency-list
/// pools, one entry per scope-depth ring). 0 = the device default.
struct RuntimeEnv {
  std::array<std::uint64_t, 4> ring_task_window{};  ///< power of two in [4, 1 << 20]
  std::array<std::uint64_t, 4> ring_heap{};         ///< bytes, >= 1024
  std::array<std::uint64_t, 4> ring_dep_pool{};     ///< entries, >= 4
};

struct CallConfig {
  std::int32_t block_dim = 0;           ///< 0 = let the device pick its maximum
  std::int32_t aicpu_thread_num = 3;    ///< AICPU threads on the chip (1 orchestrator + schedulers)
  std::int32_t enable_l2_swimlane = 0;  ///< 0 = off, 1-4 = detail level
  std::int32_t enable_dump_tensor = 0;
  std::int32_t enable_pmu = 0;  ///< 0 = off, > 0 selects the event type
  std::int32_t enable_dep_gen = 0;
  std::array<char, 1024> output_prefix{};  ///< NUL-terminated directory for diagnostics
  RuntimeEnv runtime_env{};                ///< chip runtime sizing; zeros = device defaults
  /// Deadline of the task (given to a submit) or of the run (given to run()); 0 = the Worker's
  /// WorkerOptions::task_timeout / run_timeout. A nested Worker's task is a run of the inner
  /// Worker, so the same value bounds both. Not sent to device runtimes.
  std::chrono::milliseconds timeout{0};

  /// True when any diagnostic output is requested.
  [[nodiscard]] bool wants_diagnostics() const noexcept {
    return enable_l2_swimlane != 0 || enable_dump_tensor != 0 || enable_pmu != 0 ||
           enable_dep_gen != 0;
  }
  /// Throws UsageError naming the field when the config cannot be used: a negative block_dim or
  /// thread count, a swimlane level outside 0..4, diagnostics without an output_prefix, or an
  /// output_prefix without its terminating NUL, a task window that is not a power of two in
  /// [4, 1 << 20], a heap under 1024 bytes, a dependency pool under 4 entries, or a negative
  /// timeout.
  void validate() const;
};

/// A CallConfig with every field at its default. Submit calls default to this object, which lets
/// them skip copying the config when the caller did not pass one (and a forked child's frame skip
/// carrying it).
const CallConfig& default_call_config() noexcept;

static_assert(std::is_trivially_copyable_v<CallConfig>);
static_assert(std::is_standard_layout_v<CallConfig>);

}  // namespace simpler

#include "simpler/detail/call_config.ipp"
