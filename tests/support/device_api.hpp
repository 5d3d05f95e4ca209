// Test support: the device runtime's C API loaded straight from a module with dlopen, without
// ChipWorker, so the runtime's own behaviour is tested through exactly the ABI it exports.
#pragma once

#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include <simpler/device/device_abi.h>
#include <simpler/device/task_abi.h>

namespace simpler_test {

inline std::string device_module(const std::string& file) {
  return std::string(SIMPLER_DEVICE_MODULE_DIR) + "/" + file;
}

/// Every function of device_abi.h, resolved once from one runtime module.
struct DeviceApi {
#define SIMPLER_TEST_FN(name) decltype(&::name) name = nullptr;
  SIMPLER_TEST_FN(simpler_device_abi_version)
  SIMPLER_TEST_FN(simpler_status_name)
  SIMPLER_TEST_FN(simpler_create_context)
  SIMPLER_TEST_FN(simpler_destroy_context)
  SIMPLER_TEST_FN(simpler_init)
  SIMPLER_TEST_FN(simpler_finalize)
  SIMPLER_TEST_FN(simpler_last_error)
  SIMPLER_TEST_FN(simpler_get_stats)
  SIMPLER_TEST_FN(simpler_device_malloc)
  SIMPLER_TEST_FN(simpler_device_free)
  SIMPLER_TEST_FN(simpler_register_callable)
  SIMPLER_TEST_FN(simpler_unregister_callable)
  SIMPLER_TEST_FN(simpler_prepare_run)
  SIMPLER_TEST_FN(simpler_launch_run)
  SIMPLER_TEST_FN(simpler_wait_run)
  SIMPLER_TEST_FN(simpler_finalize_run)
  SIMPLER_TEST_FN(simpler_run)
#undef SIMPLER_TEST_FN

  static const DeviceApi& sim() {
    static const DeviceApi api(device_module("simpler_device_sim.so"));
    return api;
  }

  explicit DeviceApi(const std::string& path) {
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) throw std::runtime_error("cannot load " + path + ": " + ::dlerror());
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(h, name));
      if (fn == nullptr) throw std::runtime_error(path + " lacks " + name);
    };
#define SIMPLER_TEST_GET(name) get(name, #name);
    SIMPLER_TEST_GET(simpler_device_abi_version)
    SIMPLER_TEST_GET(simpler_status_name)
    SIMPLER_TEST_GET(simpler_create_context)
    SIMPLER_TEST_GET(simpler_destroy_context)
    SIMPLER_TEST_GET(simpler_init)
    SIMPLER_TEST_GET(simpler_finalize)
    SIMPLER_TEST_GET(simpler_last_error)
    SIMPLER_TEST_GET(simpler_get_stats)
    SIMPLER_TEST_GET(simpler_device_malloc)
    SIMPLER_TEST_GET(simpler_device_free)
    SIMPLER_TEST_GET(simpler_register_callable)
    SIMPLER_TEST_GET(simpler_unregister_callable)
    SIMPLER_TEST_GET(simpler_prepare_run)
    SIMPLER_TEST_GET(simpler_launch_run)
    SIMPLER_TEST_GET(simpler_wait_run)
    SIMPLER_TEST_GET(simpler_finalize_run)
    SIMPLER_TEST_GET(simpler_run)
#undef SIMPLER_TEST_GET
  }
};

}  // namespace simpler_test
