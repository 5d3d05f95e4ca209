// simpler::detail — a loaded device runtime library: every function of
// <simpler/device/device_abi.h>, resolved once.
//
// load_device_runtime() dlopens a runtime (RTLD_NOW | RTLD_LOCAL) the first time a path is asked
// for, checks simpler_device_abi_version() against SIMPLER_DEVICE_ABI_VERSION, resolves every
// function into a table, and keeps the library loaded for the rest of the process (a runtime's
// threads and callables may outlive any one ChipWorker, and dlclose of a library whose code may
// still run is never safe). Later calls with the same path return the same table.
#pragma once

#include <cstdint>
#include <string>

#include "simpler/device/device_abi.h"

namespace simpler::detail {

// Every function of device_abi.h: X(member, C symbol).
#define SIMPLER_DEVICE_ABI_FUNCTIONS(X)               \
  X(device_abi_version, simpler_device_abi_version)   \
  X(status_name, simpler_status_name)                 \
  X(status_meaning, simpler_status_meaning)           \
  X(create_context, simpler_create_context)           \
  X(destroy_context, simpler_destroy_context)         \
  X(init, simpler_init)                               \
  X(finalize, simpler_finalize)                       \
  X(last_error, simpler_last_error)                   \
  X(get_stats, simpler_get_stats)                     \
  X(device_malloc, simpler_device_malloc)             \
  X(device_free, simpler_device_free)                 \
  X(copy_to_device, simpler_copy_to_device)           \
  X(copy_from_device, simpler_copy_from_device)       \
  X(register_callable, simpler_register_callable)     \
  X(unregister_callable, simpler_unregister_callable) \
  X(prepare_run, simpler_prepare_run)                 \
  X(launch_run, simpler_launch_run)                   \
  X(wait_run, simpler_wait_run)                       \
  X(finalize_run, simpler_finalize_run)               \
  X(run, simpler_run)

/// The function table of one loaded device runtime. Immutable once loaded; shared by every
/// ChipWorker using the same path. Thread-safe (the functions themselves follow device_abi.h:
/// one thread drives a context at a time).
struct DeviceRuntime {
  std::string path;  ///< absolute path it was loaded from
  void* handle = nullptr;
#define SIMPLER_DEVICE_ABI_MEMBER(member, symbol) decltype(&::symbol) member = nullptr;
  SIMPLER_DEVICE_ABI_FUNCTIONS(SIMPLER_DEVICE_ABI_MEMBER)
#undef SIMPLER_DEVICE_ABI_MEMBER
};

/// The runtime at `path`, loaded on first use (see above). Thread-safe. Throws DeviceError with
/// status SIMPLER_ERR_LOAD_FAILED naming the path and what to do when the file does not exist,
/// dlopen fails (with dlerror's text), a function is missing (naming every missing one), or the
/// ABI version differs (saying both versions). A failed load is not cached: a later call tries
/// again.
const DeviceRuntime& load_device_runtime(const std::string& path);

/// "SIMPLER_ERR_X (meaning): detail" for a status, from the runtime's own descriptions.
std::string describe_status(const DeviceRuntime& rt, int status, const char* detail);

}  // namespace simpler::detail
