// simpler — ChipCallable (an orchestration .so plus its kernel table) and ChipOptions (the
// context-wide settings of a chip), the host-side descriptions a ChipWorker hands to a device
// runtime (<simpler/device/device_abi.h>).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

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
};

/// The device runtime a ChipWorker loads when ChipOptions::device_runtime is empty:
/// $SIMPLER_DEVICE_RUNTIME when set and non-empty, else the simulator of the build tree this
/// library was built in when that file exists, else the simulator's install location.
std::string default_device_runtime();

/// Throws UsageError naming the field when `c` cannot be registered: an empty name, an empty or
/// missing orchestration file, an empty entry, a func_id outside 0..1023 or used twice, an empty
/// or missing kernel file, an empty kernel symbol.
void validate(const ChipCallable& c);

/// `c` with its orchestration and kernel paths made absolute (against the current directory).
ChipCallable with_absolute_paths(ChipCallable c);

}  // namespace simpler
