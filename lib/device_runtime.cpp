// Loading device runtime libraries (dlopen/dlsym), and where the bundled simulator is.
#include "simpler/detail/device_runtime.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "simpler/device/chip_callable.hpp"
#include "simpler/error.hpp"

#ifndef SIMPLER_SIM_RUNTIME_BUILD_PATH
#define SIMPLER_SIM_RUNTIME_BUILD_PATH ""
#endif
#ifndef SIMPLER_SIM_RUNTIME_INSTALL_PATH
#define SIMPLER_SIM_RUNTIME_INSTALL_PATH ""
#endif

namespace simpler {

namespace {
bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
}  // namespace

std::string default_device_runtime() {
  if (const char* env = std::getenv("SIMPLER_DEVICE_RUNTIME"); env != nullptr && *env != '\0') {
    return env;
  }
  const std::string build = SIMPLER_SIM_RUNTIME_BUILD_PATH;
  if (!build.empty() && is_regular_file(build)) return build;
  return SIMPLER_SIM_RUNTIME_INSTALL_PATH;
}

namespace detail {

namespace {
constexpr const char* kWhatToDo =
    "build the simpler_device_sim target, or point ChipOptions::device_runtime (or "
    "WorkerOptions::device_runtime, or $SIMPLER_DEVICE_RUNTIME) at a device runtime .so";

[[noreturn]] void load_error(const std::string& what) {
  throw DeviceError(what, SIMPLER_ERR_LOAD_FAILED);
}

std::unique_ptr<DeviceRuntime> load(const std::string& path) {
  if (path.empty()) {
    load_error(fmt::format("device runtime: no library path was given; {}", kWhatToDo));
  }
  if (!is_regular_file(path)) {
    load_error(
        fmt::format("device runtime '{}' does not exist (or is not a file); {}", path, kWhatToDo));
  }
  ::dlerror();
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    load_error(
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
    load_error(
        fmt::format("device runtime '{}' does not export simpler_device_abi_version; it is "
                    "not a simpler device runtime; {}",
                    path, kWhatToDo));
  }
  const std::uint32_t version = rt->device_abi_version();
  if (version != SIMPLER_DEVICE_ABI_VERSION) {
    load_error(
        fmt::format("device runtime '{}' implements device ABI version {}, but this build of "
                    "simpler needs version {}; rebuild the runtime against this simpler's "
                    "<simpler/device/device_abi.h> (or use the runtime built with it)",
                    path, version, SIMPLER_DEVICE_ABI_VERSION));
  }
#define SIMPLER_DEVICE_ABI_RESOLVE(member, symbol) resolve(rt->member, #symbol);
  SIMPLER_DEVICE_ABI_FUNCTIONS(SIMPLER_DEVICE_ABI_RESOLVE)
#undef SIMPLER_DEVICE_ABI_RESOLVE
  if (!missing.empty()) {
    load_error(
        fmt::format("device runtime '{}' does not export {} (device ABI version {} needs "
                    "every function of <simpler/device/device_abi.h>); rebuild it",
                    path, fmt::join(missing, ", "), SIMPLER_DEVICE_ABI_VERSION));
  }
  closer.h = nullptr;  // loaded for good
  return rt;
}
}  // namespace

const DeviceRuntime& load_device_runtime(const std::string& path) {
  // Keyed by absolute path. Entries are never removed (the libraries stay loaded), so a
  // reference handed out stays valid. The lock is held across dlopen: a library is loaded once.
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<DeviceRuntime>> loaded;
  std::string key = path;
  if (!key.empty()) {
    std::error_code ec;
    auto abs = std::filesystem::absolute(path, ec);
    if (!ec) key = abs.lexically_normal().string();
  }
  std::lock_guard lk(mu);
  if (auto it = loaded.find(key); it != loaded.end()) return *it->second;
  auto rt = load(key);
  return *loaded.emplace(key, std::move(rt)).first->second;
}

std::string describe_status(const DeviceRuntime& rt, int status, const char* detail) {
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

}  // namespace detail
}  // namespace simpler
