// Fuzz target: the simulated device runtime's run-args path (prepare_run), run config, task
// builder, alloc_tensor and read_tensor, through the fuzz_program test orchestration with no-op
// kernels (tests/device/orchestration/fuzz_program.hpp). The orchestration aborts when the
// runtime accepts what it must refuse; every refusal must be a named status with a message.
//
// Input: [u8 config][u8 buffer count][per buffer: u8 kind, u8 ndims, u8 dtype, 5 compact u32
// extents][u8 scalar count][scalars, one byte each][the program ...]
#include <simpler/device/device_abi.h>
#include <simpler/device/task_abi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device/orchestration/fuzz_program.hpp"
#include "fuzz/fuzz_targets.hpp"
#include "support/program_device.hpp"

namespace {

using fuzz_program::Reader;

/// Run buffers the orchestration may read: real memory, at most this large.
constexpr std::uint64_t kMaxBuffer = 64 * 1024;

[[noreturn]] void defect(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz_device: %s %s\n", what, detail.c_str());
  std::abort();
}

/// A run config from the input: none, defaults, small rings, or one raw field. Raw values the
/// runtime would accept are clamped to sizes that keep one execution fast.
bool make_config(Reader& in, simpler_run_config& c) {
  c = simpler_run_config{};
  c.struct_size = sizeof c;
  const std::uint8_t kind = in.u8();
  const int ring = in.u8() % 4;
  switch (kind % 8) {
    case 0:
      return false;
    case 1:
      break;
    case 2:
    case 3: {
      const std::uint64_t w = kind % 8 == 2 ? 4 : 16;
      for (int r = 0; r < 4; ++r) {
        c.ring_task_window[r] = w;
        c.ring_heap[r] = 256 * w;
        c.ring_dep_pool[r] = w;
      }
      break;
    }
    case 4: {
      const auto v = in.compact<std::uint64_t>();
      c.ring_heap[ring] = v > (std::uint64_t{1} << 28) && v <= (std::uint64_t{1} << 40)
                              ? std::uint64_t{1} << 28
                              : v;
      break;
    }
    case 5: {
      const auto v = in.compact<std::uint64_t>();
      c.ring_dep_pool[ring] =
          v > (std::uint64_t{1} << 16) && v <= (std::uint64_t{1} << 24) ? 1U << 16 : v;
      break;
    }
    case 6: {
      const auto v = in.compact<std::uint64_t>();
      const bool pow2 = v != 0 && (v & (v - 1)) == 0;
      c.ring_task_window[ring] = pow2 && v > 4096 && v <= (std::uint64_t{1} << 20) ? 4096 : v;
      break;
    }
    default:
      c.struct_size = in.compact<std::uint32_t>();
      c.aicpu_thread_num = static_cast<std::int8_t>(in.u8());
      break;
  }
  return true;
}

/// A run tensor from the input: honest (its memory matches its descriptor, shrunk if needed),
/// or one the runtime must refuse before the run (bad ndims/dtype, a size past the maximum, a
/// NULL buffer).
simpler_tensor make_buffer(Reader& in, std::vector<std::vector<std::uint8_t>>& memory) {
  simpler_tensor t{};
  const std::uint8_t kind = in.u8() % 3;
  t.ndims = in.u8();
  t.dtype = in.u8();
  for (auto& s : t.shapes) s = in.compact<std::uint32_t>();
  std::uint64_t bytes = 0;
  const bool valid =
      t.ndims >= 1 && t.ndims <= 5 && simpler_dtype_size(t.dtype) != 0 &&
      fuzz_program::checked_nbytes(t.shapes, t.ndims, simpler_dtype_size(t.dtype), bytes);
  memory.emplace_back();
  if (kind == 1 && !valid) {  // refused at prepare: no memory behind it is ever read
    memory.back().resize(1);
    t.data = reinterpret_cast<std::uintptr_t>(memory.back().data());
    return t;
  }
  if (!valid || bytes > kMaxBuffer) {
    t.ndims = 1;
    t.dtype = static_cast<std::uint8_t>(t.dtype % 9);
    for (int i = 1; i < 5; ++i) t.shapes[i] = 0;
    t.shapes[0] = static_cast<std::uint32_t>(t.shapes[0] % (kMaxBuffer / 8 + 1));
    bytes = std::uint64_t{t.shapes[0]} * simpler_dtype_size(t.dtype);
  }
  memory.back().resize(bytes == 0 ? 1 : bytes);
  t.data = kind == 2 ? 0 : reinterpret_cast<std::uintptr_t>(memory.back().data());
  return t;
}

}  // namespace

int simpler_fuzz_device(const std::uint8_t* data, std::size_t size) {
  static simpler_test::ProgramDevice device;
  Reader in(data, size);
  simpler_run_config cfg{};
  const bool have_cfg = make_config(in, cfg);
  std::vector<std::vector<std::uint8_t>> memory;
  memory.reserve(simpler_test::ProgramDevice::kMaxBuffers);
  std::vector<simpler_tensor> buffers;
  const std::size_t nbuf = in.u8() % (simpler_test::ProgramDevice::kMaxBuffers + 1);
  for (std::size_t i = 0; i < nbuf; ++i) buffers.push_back(make_buffer(in, memory));
  std::vector<std::uint64_t> scalars(in.u8() % 8);
  for (auto& s : scalars) s = in.u8();
  const std::vector<std::uint8_t> program(in.rest(), in.rest() + in.left());

  const int rc = device.run(program, have_cfg ? &cfg : nullptr, buffers, scalars);
  if (rc == SIMPLER_OK) return 0;
  const std::string name = device.api().status_name(rc);
  if (name == "SIMPLER_ERR_UNKNOWN")
    defect("a run failed with an unnamed status", std::to_string(rc));
  if (device.error().empty()) defect("a run failed without a message:", name);
  if (rc == SIMPLER_ERR_CONTEXT_BROKEN || rc == SIMPLER_ERR_SCHEDULER_TIMEOUT)
    defect("no-op kernels left the device stuck:", device.error());
  return 0;
}
