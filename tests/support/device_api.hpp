// Test support: the device runtime's C API, loaded by the library's own loader
// (detail::load_device_runtime) but driven directly, without ChipWorker, so the runtime's own
// behaviour is tested through exactly the ABI it exports.
#pragma once

#include <simpler/device/device_abi.h>
#include <simpler/device/task_abi.h>
#include <simpler/detail/device_runtime.hpp>

#include <string>

namespace simpler_test {

inline std::string device_module(const std::string& file) {
  return std::string(SIMPLER_DEVICE_MODULE_DIR) + "/" + file;
}

/// Every function of device_abi.h, resolved once from one runtime module.
using DeviceApi = simpler::detail::DeviceRuntime;

/// The bundled simulator's function table.
inline const DeviceApi& sim_api() {
  return simpler::detail::load_device_runtime(device_module("simpler_device_sim.so"));
}

}  // namespace simpler_test
