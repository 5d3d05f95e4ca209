// Test support: a simulated device context that runs fuzz_program programs
// (tests/device/orchestration/fuzz_program.hpp) with no-op kernels at func_ids 0 and 1. Used by
// the device bounds tests and the device fuzzer, which keeps one across inputs.
#pragma once

#include <simpler/device/device_abi.h>
#include <simpler/device/task_abi.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/orchestration/fuzz_program.hpp"
#include "support/device_api.hpp"

namespace simpler_test {

class ProgramDevice {
 public:
  static constexpr std::size_t kMaxBuffers = 15;

  /// Short waits: a program that makes the runtime wait fails in well under a second.
  static simpler_init_options default_options() {
    simpler_init_options o{};
    o.struct_size = sizeof o;
    o.num_clusters = 1;
    o.aicpu_thread_num = 2;
    o.scheduler_timeout_ms = 2000;
    o.resource_wait_ms = 200;
    o.tensor_wait_ms = 2000;
    return o;
  }

  explicit ProgramDevice(simpler_init_options opts = default_options()) : api_(sim_api()) {
    ctx_ = api_.create_context();
    if (ctx_ == nullptr) throw std::runtime_error("ProgramDevice: create_context failed");
    if (api_.init(ctx_, 0, &opts) != SIMPLER_OK) fail("init");
    simpler_kernel_desc k[2] = {{0, noop_.c_str(), nullptr}, {1, noop_.c_str(), nullptr}};
    simpler_chip_callable_desc d{};
    d.struct_size = sizeof d;
    d.orch_path = orch_.c_str();
    d.kernel_count = 2;
    d.kernels = k;
    if (api_.register_callable(ctx_, 0, &d) != SIMPLER_OK) fail("register_callable");
  }
  ProgramDevice(const ProgramDevice&) = delete;
  ProgramDevice& operator=(const ProgramDevice&) = delete;
  ~ProgramDevice() { api_.destroy_context(ctx_); }

  /// Runs `program` with `buffers` as run tensors 1.. (they must describe their memory
  /// truthfully) and `scalars`.
  int run(const std::vector<std::uint8_t>& program, const simpler_run_config* cfg = nullptr,
          const std::vector<simpler_tensor>& buffers = {},
          const std::vector<std::uint64_t>& scalars = {}) {
    simpler_tensor p{};
    // An empty program still needs a non-NULL buffer of one element.
    static const std::uint8_t empty = 0;
    p.data = reinterpret_cast<std::uintptr_t>(program.empty() ? &empty : program.data());
    p.ndims = 1;
    p.shapes[0] = static_cast<std::uint32_t>(program.empty() ? 1 : program.size());
    p.dtype = SIMPLER_UINT8;
    std::array<simpler_tensor, kMaxBuffers + 1> all{};
    if (buffers.size() > kMaxBuffers)
      throw std::invalid_argument("ProgramDevice: too many buffers");
    all[0] = p;
    for (std::size_t i = 0; i < buffers.size(); ++i) all[i + 1] = buffers[i];
    const simpler_task_args args{static_cast<std::int32_t>(buffers.size() + 1),
                                 static_cast<std::int32_t>(scalars.size()), all.data(),
                                 scalars.empty() ? nullptr : scalars.data()};
    return api_.run(ctx_, 0, &args, cfg);
  }

  [[nodiscard]] std::string error() const { return api_.last_error(ctx_); }
  [[nodiscard]] const DeviceApi& api() const noexcept { return api_; }
  [[nodiscard]] simpler_device_context* ctx() const noexcept { return ctx_; }

 private:
  [[noreturn]] void fail(const char* what) {
    const std::string why = api_.last_error(ctx_);
    api_.destroy_context(ctx_);
    throw std::runtime_error(std::string("ProgramDevice: ") + what + " failed: " + why);
  }

  const DeviceApi& api_;
  simpler_device_context* ctx_ = nullptr;
  std::string orch_ = device_module("test_orch_fuzz_program.so");
  std::string noop_ = device_module("kernel_noop.so");
};

/// A 1-D host tensor over `bytes` (UINT8).
inline simpler_tensor host_bytes(std::vector<std::uint8_t>& bytes) {
  simpler_tensor t{};
  t.data = reinterpret_cast<std::uintptr_t>(bytes.data());
  t.ndims = 1;
  t.shapes[0] = static_cast<std::uint32_t>(bytes.size());
  t.dtype = SIMPLER_UINT8;
  return t;
}

}  // namespace simpler_test
