// simpler::detail — a loaded device runtime library: every function of
// <simpler/device/device_abi.h>, resolved once.
//
// load_device_runtime() dlopens a runtime (RTLD_NOW | RTLD_LOCAL) the first time a path is asked
// for, checks simpler_device_abi_version() against SIMPLER_DEVICE_ABI_VERSION, resolves every
// function into a table, and keeps the library loaded for the rest of the process (a runtime's
// threads and callables may outlive any one ChipWorker, and dlclose of a library whose code may
// still run is never safe). Later calls with the same path return the same table.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "simpler/device/chip_callable.hpp"
#include "simpler/device/device_abi.h"
#include "simpler/error.hpp"

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
  X(run, simpler_run)                                 \
  X(get_run_trace, simpler_get_run_trace)

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

/// What to do when a device runtime cannot be loaded.
inline constexpr const char* kDeviceRuntimeWhatToDo =
    "build the simpler_device_sim target, or point ChipOptions::device_runtime (or "
    "WorkerOptions::device_runtime, or $SIMPLER_DEVICE_RUNTIME) at a device runtime .so";

[[noreturn]] inline void device_runtime_load_error(const std::string& what) {
  throw DeviceError(what, SIMPLER_ERR_LOAD_FAILED);
}

/// dlopens and resolves the runtime at `path` (no caching: see load_device_runtime).
inline std::unique_ptr<DeviceRuntime> open_device_runtime(const std::string& path) {
  const char* const what_to_do = kDeviceRuntimeWhatToDo;
  if (path.empty()) {
    device_runtime_load_error(
        fmt::format("device runtime: no library path was given; {}", what_to_do));
  }
  if (!is_regular_file(path)) {
    device_runtime_load_error(
        fmt::format("device runtime '{}' does not exist (or is not a file); {}", path, what_to_do));
  }
  ::dlerror();
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    device_runtime_load_error(
        fmt::format("device runtime '{}': dlopen failed: {}; is it a shared library built "
                    "for this machine?",
                    path, why != nullptr ? why : "unknown error"));
  }
  // From here on a failure unloads the library again: nothing of it was used yet.
  struct Closer {
    void* h;
    ~Closer() {
      if (h != nullptr) ::dlclose(h);
    }
  } closer{handle};

  auto rt = std::make_unique<DeviceRuntime>();
  rt->path = path;
  rt->handle = handle;
  std::vector<const char*> missing;
  const auto resolve = [&](auto& member, const char* symbol) {
    void* p = ::dlsym(handle, symbol);
    if (p == nullptr) {
      missing.push_back(symbol);
      return;
    }
    // POSIX guarantees that a dlsym result converts to a function pointer.
    member = reinterpret_cast<std::remove_reference_t<decltype(member)>>(p);
  };
  resolve(rt->device_abi_version, "simpler_device_abi_version");
  if (rt->device_abi_version == nullptr) {
    device_runtime_load_error(
        fmt::format("device runtime '{}' does not export simpler_device_abi_version; it is "
                    "not a simpler device runtime; {}",
                    path, what_to_do));
  }
  const std::uint32_t version = rt->device_abi_version();
  if (version != SIMPLER_DEVICE_ABI_VERSION) {
    device_runtime_load_error(
        fmt::format("device runtime '{}' implements device ABI version {}, but this build of "
                    "simpler needs version {}; rebuild the runtime against this simpler's "
                    "<simpler/device/device_abi.h> (or use the runtime built with it)",
                    path, version, SIMPLER_DEVICE_ABI_VERSION));
  }
#define SIMPLER_DEVICE_ABI_RESOLVE(member, symbol) resolve(rt->member, #symbol);
  SIMPLER_DEVICE_ABI_FUNCTIONS(SIMPLER_DEVICE_ABI_RESOLVE)
#undef SIMPLER_DEVICE_ABI_RESOLVE
  if (!missing.empty()) {
    device_runtime_load_error(
        fmt::format("device runtime '{}' does not export {} (device ABI version {} needs "
                    "every function of <simpler/device/device_abi.h>); rebuild it",
                    path, fmt::join(missing, ", "), SIMPLER_DEVICE_ABI_VERSION));
  }
  closer.h = nullptr;  // loaded for good
  return rt;
}

/// The runtimes loaded so far, by absolute path. Never destroyed: a runtime's threads may run
/// until the process ends, and nothing of it may be unloaded under them.
struct LoadedDeviceRuntimes {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<DeviceRuntime>> by_path;
};
inline LoadedDeviceRuntimes& loaded_device_runtimes() {
  static auto* const loaded = new LoadedDeviceRuntimes;
  return *loaded;
}

/// The runtime at `path`, loaded on first use (see above). Thread-safe. Throws DeviceError with
/// status SIMPLER_ERR_LOAD_FAILED naming the path and what to do when the file does not exist,
/// dlopen fails (with dlerror's text), a function is missing (naming every missing one), or the
/// ABI version differs (saying both versions). A failed load is not cached: a later call tries
/// again.
inline const DeviceRuntime& load_device_runtime(const std::string& path) {
  // Keyed by absolute path. Entries are never removed (the libraries stay loaded), so a
  // reference handed out stays valid. The lock is held across dlopen: a library is loaded once.
  std::string key = path;
  if (!key.empty()) {
    std::error_code ec;
    auto abs = std::filesystem::absolute(path, ec);
    if (!ec) key = abs.lexically_normal().string();
  }
  LoadedDeviceRuntimes& loaded = loaded_device_runtimes();
  std::lock_guard lk(loaded.mu);
  if (auto it = loaded.by_path.find(key); it != loaded.by_path.end()) return *it->second;
  auto rt = open_device_runtime(key);
  return *loaded.by_path.emplace(key, std::move(rt)).first->second;
}

/// "SIMPLER_ERR_X (meaning): detail" for a status, from the runtime's own descriptions.
inline std::string describe_status(const DeviceRuntime& rt, int status, const char* detail) {
  const char* name = rt.status_name(status);
  const char* meaning = rt.status_meaning(status);
  std::string text = fmt::format("{} ({})", name != nullptr ? name : "?",
                                 meaning != nullptr ? meaning : "no description");
  if (detail != nullptr && *detail != '\0') {
    text += ": ";
    text += detail;
  }
  return text;
}

}  // namespace simpler::detail
