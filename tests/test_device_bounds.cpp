// Offsets, sizes and counts on the device path that could overflow a bounds check: each case
// drives the simulated runtime through the fuzz_program test orchestration (or its C ABI) with
// one hostile value and expects a named status with a clear message, and a context that still
// runs afterwards. Before the fixes these read or wrote outside their buffers, crashed, or were
// accepted silently.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "device/orchestration/fuzz_program.hpp"
#include "support/program_device.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_device_bounds {

namespace {

using namespace fuzz_program;
using simpler_test::ProgramDevice;

constexpr std::uint64_t kMax64 = std::numeric_limits<std::uint64_t>::max();

/// alloc_tensor of `shape` (1..5 extents) and `dtype`.
void alloc(Writer& w, std::vector<std::uint32_t> shape, std::uint8_t dtype) {
  w.u8(kAlloc).u8(static_cast<std::uint8_t>(shape.size())).u8(dtype);
  shape.resize(5, 0);
  for (auto s : shape) w.compact(s);
}

/// read_tensor(view, off, n) where the view is the known buffer `k` from element `first`,
/// `count` elements long (kInside and kOwner clamp both to the buffer).
void read(Writer& w, std::uint8_t k, std::uint64_t first, std::uint64_t count, std::uint64_t off,
          std::uint64_t n) {
  w.u8(kRead).u8(k).u8(kInside).compact(first).compact(count).compact(off).compact(n);
}

/// A submit of one Input tensor made by `tensor` on func_id 0 (AIV).
template <class F>
void submit_input(Writer& w, F tensor) {
  w.u8(kSubmit).u8(0xff).u8(0).u8(0xff).u8(1).u8(SIMPLER_TAG_INPUT);
  tensor(w);
  w.u8(0);  // no scalars
}

/// Tensor fields after the source byte: ndims, dtype, five extents.
void shape_fields(Writer& w, std::vector<std::uint32_t> shape, std::uint8_t dtype) {
  w.u8(static_cast<std::uint8_t>(shape.size())).u8(dtype);
  shape.resize(5, 0);
  for (auto s : shape) w.compact(s);
}

void check_usable(ProgramDevice& d) {
  Writer w;
  alloc(w, {16}, SIMPLER_INT32);
  read(w, 0, 0, 16, 60, 4);  // the last element
  const int rc = d.run(w.bytes);
  INFO(d.error());
  REQUIRE(rc == SIMPLER_OK);
}

}  // namespace

TEST_CASE("device bounds: read_tensor refuses an offset whose sum with the size wraps",
          "[device][bounds]") {
  ProgramDevice d;
  Writer w;
  alloc(w, {16}, SIMPLER_INT32);
  // 2^64 - 8 + 16 wraps to 8, inside the 64-byte view: the old check let it read 8 bytes
  // before the buffer.
  read(w, 0, 0, 16, kMax64 - 7, 16);
  REQUIRE(d.run(w.bytes) == SIMPLER_ERR_INVALID_TASK_ARGS);
  CHECK_THAT(d.error(), Catch::Contains("read_tensor") && Catch::Contains("outside the tensor"));
  check_usable(d);
}

TEST_CASE("device bounds: read_tensor reads up to the end of a view and not one byte past it",
          "[device][bounds]") {
  ProgramDevice d;
  check_usable(d);
  Writer w;
  alloc(w, {16}, SIMPLER_INT32);
  read(w, 0, 0, 16, 61, 4);
  REQUIRE(d.run(w.bytes) == SIMPLER_ERR_INVALID_TASK_ARGS);
  CHECK_THAT(d.error(), Catch::Contains("4 bytes from byte 61") && Catch::Contains("64 bytes"));
}

TEST_CASE("device bounds: read_tensor refuses a view whose offset and size wrap",
          "[device][bounds]") {
  ProgramDevice d;
  Writer w;
  alloc(w, {16}, SIMPLER_INT32);
  // A 4-element view at offset 2^64 - 1 - 3 (so the view ends past 2^64): the old check, relative
  // to the view, passed and the read began 4 bytes before the buffer.
  w.u8(kRead).u8(0).u8(kWraps).u8(3).u8(3).compact(std::uint64_t{0}).compact(std::uint64_t{4});
  REQUIRE(d.run(w.bytes) == SIMPLER_ERR_INVALID_TASK_ARGS);
  CHECK_THAT(d.error(), Catch::Contains("read_tensor") && Catch::Contains("wraps"));
  check_usable(d);
}

TEST_CASE("device bounds: submit refuses a view whose offset and size wrap", "[device][bounds]") {
  ProgramDevice d;
  Writer w;
  alloc(w, {16}, SIMPLER_INT32);
  submit_input(w, [](Writer& t) {
    t.u8(kRawView).u8(0).compact(kMax64 - 3).compact(std::uint64_t{SIMPLER_INVALID_TASK_ID});
    shape_fields(t, {16}, SIMPLER_INT32);
  });
  REQUIRE(d.run(w.bytes) == SIMPLER_ERR_INVALID_TASK_ARGS);
  CHECK_THAT(d.error(), Catch::Contains("submit #1") && Catch::Contains("tensor 0") &&
                            Catch::Contains("wraps"));
  check_usable(d);
}

TEST_CASE("device bounds: submit refuses an Output whose byte size overflows 64 bits",
          "[device][bounds]") {
  ProgramDevice d;
  Writer w;
  // 65536^4 int32 elements: 2^66 bytes, 0 after the old wrapping product.
  w.u8(kSubmit).u8(0xff).u8(0).u8(0xff).u8(1).u8(SIMPLER_TAG_OUTPUT).u8(kDescribe);
  shape_fields(w, {65536, 65536, 65536, 65536}, SIMPLER_INT32);
  w.u8(0);
  REQUIRE(d.run(w.bytes) == SIMPLER_ERR_INVALID_TASK_ARGS);
  CHECK_THAT(d.error(), Catch::Contains("tensor 0") && Catch::Contains("bytes"));
  check_usable(d);
}

TEST_CASE("device bounds: submit refuses an Output larger than SIMPLER_MAX_TENSOR_BYTES",
          "[device][bounds]") {
  ProgramDevice d;
  Writer w;
  // 64 * (2^55 - 1) uint64 elements = 2^64 - 512 bytes: fits 64 bits, but rounding it up to the
  // heap alignment wrapped to 0, so the task got no heap bytes for a huge output.
  w.u8(kSubmit).u8(0xff).u8(0).u8(0xff).u8(1).u8(SIMPLER_TAG_OUTPUT).u8(kDescribe);
  shape_fields(w, {4061248, 2811271, 201961}, SIMPLER_UINT64);
  w.u8(0);
  REQUIRE(d.run(w.bytes) == SIMPLER_ERR_INVALID_TASK_ARGS);
  CHECK_THAT(d.error(), Catch::Contains("tensor 0") && Catch::Contains("bytes"));
  check_usable(d);
}

TEST_CASE("device bounds: alloc_tensor refuses a byte size that overflows 64 bits",
          "[device][bounds]") {
  ProgramDevice d;
  Writer w;
  alloc(w, {65536, 65536, 65536, 65536}, SIMPLER_INT32);
  REQUIRE(d.run(w.bytes) == SIMPLER_ERR_INVALID_TASK_ARGS);
  CHECK_THAT(d.error(), Catch::Contains("alloc_tensor") && Catch::Contains("bytes"));
  check_usable(d);
}

TEST_CASE("device bounds: submit refuses a tensor owned by a task the run never created",
          "[device][bounds]") {
  ProgramDevice d;
  Writer w;
  alloc(w, {16}, SIMPLER_INT32);
  // Ring 0xfffffffe: the old code indexed the four rings with it.
  submit_input(w, [](Writer& t) {
    t.u8(kRawView).u8(0).compact(std::uint64_t{0}).compact(std::uint64_t{0xfffffffe00000000ULL});
    shape_fields(t, {16}, SIMPLER_INT32);
  });
  REQUIRE(d.run(w.bytes) == SIMPLER_ERR_INVALID_TASK_ARGS);
  CHECK_THAT(d.error(), Catch::Contains("owner task") && Catch::Contains("never created"));
  check_usable(d);

  SECTION("a task id of this run's future is refused too") {
    Writer f;
    alloc(f, {16}, SIMPLER_INT32);
    submit_input(f, [](Writer& t) {
      t.u8(kRawView).u8(0).compact(std::uint64_t{0}).compact(std::uint64_t{1000});
      shape_fields(t, {16}, SIMPLER_INT32);
    });
    REQUIRE(d.run(f.bytes) == SIMPLER_ERR_INVALID_TASK_ARGS);
    CHECK_THAT(d.error(), Catch::Contains("owner task 0:1000"));
  }
}

TEST_CASE("device bounds: read_tensor refuses a view owned by a task the run never created",
          "[device][bounds]") {
  ProgramDevice d;
  Writer w;
  alloc(w, {16}, SIMPLER_INT32);
  w.u8(kRead).u8(0).u8(kOwner).compact(std::uint64_t{0}).compact(std::uint64_t{16});
  w.compact(std::uint64_t{0xfffffffe00000000ULL});
  w.compact(std::uint64_t{0}).compact(std::uint64_t{4});
  REQUIRE(d.run(w.bytes) == SIMPLER_ERR_INVALID_TASK_ARGS);
  CHECK_THAT(d.error(), Catch::Contains("read_tensor") && Catch::Contains("never created"));
  check_usable(d);
}

TEST_CASE("device bounds: a func_id below -1 is refused instead of taken for an unused lane",
          "[device][bounds]") {
  ProgramDevice d;
  Writer w;
  w.u8(kSubmit).u8(0xfe).raw(std::int32_t{-5}).u8(0).u8(0xff).u8(0).u8(0);
  REQUIRE(d.run(w.bytes) == SIMPLER_ERR_UNKNOWN_FUNC_ID);
  CHECK_THAT(d.error(), Catch::Contains("func_id -5") && Catch::Contains("-1"));
  check_usable(d);
}

TEST_CASE("device bounds: a run tensor whose byte size overflows is refused before the run",
          "[device][bounds]") {
  ProgramDevice d;
  std::vector<std::uint8_t> mem(16);
  simpler_tensor t = simpler_test::host_bytes(mem);
  t.ndims = 4;
  t.dtype = SIMPLER_INT32;
  for (int i = 0; i < 4; ++i) t.shapes[i] = 65536;  // 2^66 bytes: 0 after the old product
  REQUIRE(d.run({}, nullptr, {t}) == SIMPLER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(d.error(), Catch::Contains("run tensor 1") && Catch::Contains("bytes"));
  check_usable(d);
}

TEST_CASE("device bounds: a run tensor with more than five dimensions is refused, not read past",
          "[device][bounds]") {
  ProgramDevice d;
  std::vector<std::uint8_t> mem(16);
  simpler_tensor t = simpler_test::host_bytes(mem);
  t.ndims = 9;  // shapes[] holds five extents: the message must not read a sixth
  REQUIRE(d.run({}, nullptr, {t}) == SIMPLER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(d.error(), Catch::Contains("run tensor 1") && Catch::Contains("invalid"));
  check_usable(d);
}

TEST_CASE("device bounds: a heap ring size that wraps when rounded up is refused",
          "[device][bounds]") {
  ProgramDevice d;
  simpler_run_config cfg{};
  cfg.struct_size = sizeof cfg;
  cfg.ring_heap[0] = kMax64 - 100;  // rounded to pages it wrapped to 0: a ring with no memory
  Writer w;
  alloc(w, {1U << 26}, SIMPLER_INT32);  // 256 MiB on ring 0
  read(w, 0, (1U << 26) - 1, 1, 0, 4);  // its last element
  REQUIRE(d.run(w.bytes, &cfg) == SIMPLER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(d.error(), Catch::Contains("ring_heap[0]"));
  check_usable(d);
}

TEST_CASE("device bounds: a dependency pool whose size in bytes wraps is refused",
          "[device][bounds]") {
  ProgramDevice d;
  simpler_run_config cfg{};
  cfg.struct_size = sizeof cfg;
  cfg.ring_dep_pool[3] = (std::uint64_t{1} << 60) + 4;  // x 16 bytes = 64 bytes after wrapping
  REQUIRE(d.run({}, &cfg) == SIMPLER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(d.error(), Catch::Contains("ring_dep_pool[3]"));
  check_usable(d);
}

TEST_CASE("device bounds: device_malloc refuses a size that wraps when rounded up",
          "[device][bounds]") {
  ProgramDevice d;
  // Rounded up to 1024 it wrapped to 0, and the runtime handed out a 1024-byte block.
  void* p = d.api().device_malloc(d.ctx(), std::numeric_limits<std::size_t>::max() - 10);
  CHECK(p == nullptr);
  CHECK_THAT(std::string(d.api().last_error(d.ctx())), Catch::Contains("device memory"));
  void* q = d.api().device_malloc(d.ctx(), 100);
  REQUIRE(q != nullptr);
  CHECK(d.api().device_free(d.ctx(), q) == SIMPLER_OK);
}

}  // namespace simpler_test_device_bounds
