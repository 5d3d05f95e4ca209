// simpler — ChipCallable (an orchestration .so plus its kernel table) and ChipOptions (the
// context-wide settings of a chip), the host-side descriptions a ChipWorker hands to a device
// runtime (<simpler/device/device_abi.h>).
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "simpler/device/task_abi.h"
#include "simpler/error.hpp"
#include "simpler/types.hpp"

// Where the bundled simulated device runtime is: the build tree's copy and the installed one.
// The simpler::simpler target defines both for its consumers (the build-tree path only inside
// the build tree); a build that does not use the target finds neither and must name a runtime.
#ifndef SIMPLER_SIM_RUNTIME_BUILD_PATH
#define SIMPLER_SIM_RUNTIME_BUILD_PATH ""
#endif
#ifndef SIMPLER_SIM_RUNTIME_INSTALL_PATH
#define SIMPLER_SIM_RUNTIME_INSTALL_PATH ""
#endif

namespace simpler {

/// One kernel of a chip callable: the kernel .so exporting `symbol`, filed under `func_id`
/// (0..1023, unique within the callable; the orchestration submits tasks by func_id).
struct ChipKernel {
  std::int32_t func_id = 0;
  std::string path;
  std::string symbol = "kernel_entry";
};

/// What a chip runs: an orchestration function (in its own .so) and the kernels it submits.
/// Paths are file paths (not library names searched like dlopen does); registration makes them
/// absolute, so a later change of the working directory does not matter.
struct ChipCallable {
  std::string name;           ///< required; names the callable in messages and in its digest
  std::string orchestration;  ///< path of the orchestration .so
  std::string entry = "aicpu_orchestration_entry";
  std::vector<ChipKernel> kernels;
};

/// Context-wide settings of a chip, fixed when it is initialised (simpler_init_options). Zero
/// takes the device runtime's default.
struct ChipOptions {
  std::string device_runtime;      ///< runtime .so; empty = default_device_runtime()
  std::uint32_t num_clusters = 0;  ///< AICore clusters (1 AIC + 2 AIV each)
  /// AICPU threads of a run whose CallConfig::aicpu_thread_num is 0. (CallConfig's default is
  /// 3, which is passed to the device as is and then wins over this.)
  std::int32_t aicpu_thread_num = 0;
  std::chrono::milliseconds scheduler_timeout{0};  ///< no-progress watchdog of a run
  std::chrono::milliseconds resource_wait{0};      ///< back-pressure backstop
  std::chrono::milliseconds tensor_wait{0};        ///< deadline of an orchestration's tensor read
  /// Which orderings the chip's TensorMap infers (Hazards). A Worker's chips take
  /// WorkerOptions::hazards.
  Hazards hazards = Hazards::All;
};

namespace detail {
/// Whether `path` names a regular file (following symlinks).
inline bool is_regular_file(const std::string& path) noexcept {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

/// `path` made absolute against the current directory and normalised; `path` itself when that
/// fails.
inline std::string absolute_path(const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}
}  // namespace detail

/// The device runtime a ChipWorker loads when ChipOptions::device_runtime is empty:
/// $SIMPLER_DEVICE_RUNTIME when set and non-empty, else the simulator of the build tree this
/// library was built in when that file exists, else the simulator's install location.
inline std::string default_device_runtime() {
  if (const char* env = std::getenv("SIMPLER_DEVICE_RUNTIME"); env != nullptr && *env != '\0') {
    return env;
  }
  const std::string build = SIMPLER_SIM_RUNTIME_BUILD_PATH;
  if (!build.empty() && detail::is_regular_file(build)) return build;
  return SIMPLER_SIM_RUNTIME_INSTALL_PATH;
}

/// Throws UsageError naming the field when `c` cannot be registered: an empty name, an empty or
/// missing orchestration file, an empty entry, a func_id outside 0..1023 or used twice, an empty
/// or missing kernel file, an empty kernel symbol.
inline void validate(const ChipCallable& c) {
  if (c.name.empty()) {
    throw UsageError("ChipCallable::name is empty; every chip callable needs a name");
  }
  const auto where = [&] { return fmt::format("ChipCallable '{}'", c.name); };
  if (c.orchestration.empty()) {
    throw UsageError(
        fmt::format("{}: orchestration is empty; give the path of the orchestration "
                    ".so",
                    where()));
  }
  if (!detail::is_regular_file(c.orchestration)) {
    throw UsageError(fmt::format("{}: orchestration '{}' does not exist (or is not a file)",
                                 where(), c.orchestration));
  }
  if (c.entry.empty()) {
    throw UsageError(
        fmt::format("{}: entry is empty; name the orchestration's entry symbol "
                    "(default aicpu_orchestration_entry)",
                    where()));
  }
  std::set<std::int32_t> seen;
  for (std::size_t i = 0; i < c.kernels.size(); ++i) {
    const ChipKernel& k = c.kernels[i];
    if (k.func_id < 0 || k.func_id >= SIMPLER_MAX_FUNC_ID) {
      throw UsageError(fmt::format("{}: kernels[{}].func_id is {}; it must be in 0..{}", where(), i,
                                   k.func_id, SIMPLER_MAX_FUNC_ID - 1));
    }
    if (!seen.insert(k.func_id).second) {
      throw UsageError(
          fmt::format("{}: kernels[{}].func_id {} is used by an earlier kernel; "
                      "func_ids are unique within a callable",
                      where(), i, k.func_id));
    }
    if (k.path.empty()) {
      throw UsageError(
          fmt::format("{}: kernels[{}].path (func_id {}) is empty; give the path of "
                      "the kernel .so",
                      where(), i, k.func_id));
    }
    if (!detail::is_regular_file(k.path)) {
      throw UsageError(
          fmt::format("{}: kernels[{}].path '{}' (func_id {}) does not exist (or is "
                      "not a file)",
                      where(), i, k.path, k.func_id));
    }
    if (k.symbol.empty()) {
      throw UsageError(
          fmt::format("{}: kernels[{}].symbol (func_id {}) is empty; name the "
                      "kernel's entry symbol (default kernel_entry)",
                      where(), i, k.func_id));
    }
  }
}

/// `c` with its orchestration and kernel paths made absolute (against the current directory).
inline ChipCallable with_absolute_paths(ChipCallable c) {
  c.orchestration = detail::absolute_path(c.orchestration);
  for (ChipKernel& k : c.kernels) k.path = detail::absolute_path(k.path);
  return c;
}

}  // namespace simpler
