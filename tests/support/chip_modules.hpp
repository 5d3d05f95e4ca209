// Test support: the device modules the chip tests load (built into SIMPLER_DEVICE_MODULE_DIR),
// and a handle on a fake device runtime's call record (tests/device/runtimes/).
#pragma once

#include <dlfcn.h>

#include <stdexcept>
#include <string>
#include <string_view>

#include <simpler/simpler.hpp>

#include "device/runtimes/fake_runtime_record.h"

namespace simpler::testing {

/// The path of a device module built for the tests (a runtime, kernel or orchestration .so).
inline std::string device_module_file(std::string_view file) {
  return std::string(SIMPLER_DEVICE_MODULE_DIR) + "/" + std::string(file);
}

/// A chip callable of the tests' one-task orchestration (tests/device/orchestration/chipw_one)
/// running tests/device/kernels/chipw_<kernel> as func_id 0.
inline ChipCallable chipw_callable(std::string name, std::string_view kernel) {
  ChipCallable c;
  c.name = std::move(name);
  c.orchestration = device_module_file("test_orch_chipw_one.so");
  c.kernels.push_back(
      ChipKernel{0, device_module_file("test_kernel_chipw_" + std::string(kernel) + ".so")});
  return c;
}

/// A fake device runtime test_runtime_<stem>.so and what it recorded. Loads the library itself
/// (the dynamic loader hands ChipWorker the same instance) and resets the record.
class FakeRuntime {
 public:
  explicit FakeRuntime(std::string_view stem)
      : path_(device_module_file("test_runtime_" + std::string(stem) + ".so")) {
    handle_ = ::dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) throw std::runtime_error("FakeRuntime: cannot load " + path_);
    record_ = reinterpret_cast<const fake_record* (*)()>(::dlsym(handle_, "fake_runtime_record"));
    reset_ = reinterpret_cast<void (*)()>(::dlsym(handle_, "fake_runtime_reset"));
    if (record_ == nullptr || reset_ == nullptr) {
      throw std::runtime_error("FakeRuntime: " + path_ + " is not a fake runtime");
    }
    reset_();
  }
  FakeRuntime(const FakeRuntime&) = delete;
  FakeRuntime& operator=(const FakeRuntime&) = delete;
  ~FakeRuntime() { ::dlclose(handle_); }

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] const fake_record& record() const { return *record_(); }
  /// ChipOptions that load this runtime.
  [[nodiscard]] ChipOptions options() const {
    ChipOptions o;
    o.device_runtime = path_;
    return o;
  }

 private:
  std::string path_;
  void* handle_ = nullptr;
  const fake_record* (*record_)() = nullptr;
  void (*reset_)() = nullptr;
};

}  // namespace simpler::testing
