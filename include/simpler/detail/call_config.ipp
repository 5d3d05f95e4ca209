// CallConfig validation.
// Included once, at the end of its header; every function is inline (the library is header-only).
#pragma once

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <string>

#include "simpler/call_config.hpp"
#include "simpler/error.hpp"

namespace simpler {

inline const CallConfig& default_call_config() noexcept {
  static const CallConfig kDefault{};
  return kDefault;
}

inline void CallConfig::validate() const {
  if (block_dim < 0)
    throw UsageError(fmt::format("CallConfig: block_dim is {}; it must be >= 0", block_dim));
  if (aicpu_thread_num < 0) {
    throw UsageError(
        fmt::format("CallConfig: aicpu_thread_num is {}; it must be >= 0", aicpu_thread_num));
  }
  if (timeout.count() < 0) {
    throw UsageError(
        fmt::format("CallConfig: timeout is {} ms; it must be >= 0 (0 = the Worker's default)",
                    timeout.count()));
  }
  if (enable_l2_swimlane < 0 || enable_l2_swimlane > 4) {
    throw UsageError(
        fmt::format("CallConfig: enable_l2_swimlane is {}; it must be 0..4", enable_l2_swimlane));
  }
  if (std::memchr(output_prefix.data(), '\0', output_prefix.size()) == nullptr) {
    throw UsageError("CallConfig: output_prefix is not NUL-terminated");
  }
  if (wants_diagnostics() && output_prefix[0] == '\0') {
    throw UsageError(
        "CallConfig: diagnostics are enabled but output_prefix is empty; set the directory to "
        "write them to");
  }
  for (std::size_t r = 0; r < 4; ++r) {
    const auto w = runtime_env.ring_task_window[r];
    if (w != 0 && (w < 4 || w > (std::uint64_t{1} << 20) || (w & (w - 1)) != 0)) {
      throw UsageError(fmt::format(
          "CallConfig: runtime_env.ring_task_window[{}] is {}; it must be 0 (default) or a power "
          "of two in [4, 1048576]",
          r, w));
    }
    const auto h = runtime_env.ring_heap[r];
    if (h != 0 && h < 1024) {
      throw UsageError(fmt::format(
          "CallConfig: runtime_env.ring_heap[{}] is {} bytes; it must be 0 (default) or >= 1024", r,
          h));
    }
    const auto d = runtime_env.ring_dep_pool[r];
    if (d != 0 && d < 4) {
      throw UsageError(fmt::format(
          "CallConfig: runtime_env.ring_dep_pool[{}] is {}; it must be 0 (default) or >= 4", r, d));
    }
  }
}

}  // namespace simpler
