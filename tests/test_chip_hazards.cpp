// Write-after-read and write-after-write ordering on the simulated device's TensorMap, through
// the device C ABI alone: a writer waits for the earlier readers and writer of its bytes by
// default (SIMPLER_HAZARDS_ALL), and only readers wait with SIMPLER_HAZARDS_READ_AFTER_WRITE.
//
// The races are made deterministic with a gate word: a task held open waits for the gate (up to
// wait_ms) and records whether it saw it open; the later writer opens it only after it wrote. So
// a held-open task sees the gate open exactly when the writer ran while it was still running.
// With all hazards the writer cannot start before the held-open task ends, which then gives up
// waiting (after wait_ms, a pace, not a pass condition); without them the writer runs at once
// on the other AIV core (wait_ms is then only a liveness bound).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device/orchestration/hazard_cases.hpp"
#include "support/device_api.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_chip_hazards {

namespace {

using simpler_test::device_module;
using simpler_test::DeviceApi;
using simpler_test::sim_api;

using namespace hazard_cases;

/// The gate's words: [0] open, [1] what the held-open reader saw, [2] what the held-open writer
/// saw (1 open, 2 gave up).
constexpr std::int32_t kSawOpen = 1;
constexpr std::int32_t kGaveUp = 2;

/// A liveness bound for a held-open task the other task should release at once.
constexpr std::uint32_t kLongWait = 10'000;
/// How long a held-open task waits when nothing may release it.
constexpr std::uint32_t kShortWait = 100;

simpler_init_options options(std::uint32_t hazards) {
  simpler_init_options o{};
  o.struct_size = sizeof o;
  o.num_clusters = 1;  // 2 AIV cores: a reader and a writer can run side by side
  o.aicpu_thread_num = 2;
  o.hazards = hazards;
  return o;
}

/// The hazard_cases callable on one context, with its run tensors.
struct HazardDevice {
  const DeviceApi& api = sim_api();
  simpler_device_context* ctx = nullptr;
  std::array<std::int32_t, 4> gate{};
  std::vector<std::int32_t> x = std::vector<std::int32_t>(8, 0);
  std::vector<std::int32_t> y = std::vector<std::int32_t>(8, 0);
  std::vector<std::int32_t> program = std::vector<std::int32_t>(1, 0);
  std::array<std::string, 6> paths;
  std::string orch = device_module("test_orch_hazard_cases.so");

  /// Initialises with `opts` as given (its struct_size included).
  explicit HazardDevice(const simpler_init_options& opts = options(SIMPLER_HAZARDS_ALL)) {
    ctx = api.create_context();
    REQUIRE(ctx != nullptr);
    INFO(api.last_error(ctx));
    REQUIRE(api.init(ctx, 0, &opts) == SIMPLER_OK);
    const char* files[] = {"test_kernel_hz_wait_copy.so", "test_kernel_hz_wait_fill.so",
                           "test_kernel_hz_fill_open.so", "test_kernel_rt_fail.so",
                           "test_kernel_hz_op.so",        "test_kernel_rt_noop.so"};
    std::array<simpler_kernel_desc, 6> kernels{};
    for (int i = 0; i < 6; ++i) {
      paths[i] = device_module(files[i]);
      kernels[i] = {i, paths[i].c_str(), nullptr};
    }
    simpler_chip_callable_desc d{};
    d.struct_size = sizeof d;
    d.orch_path = orch.c_str();
    d.kernel_count = static_cast<std::uint32_t>(kernels.size());
    d.kernels = kernels.data();
    REQUIRE(api.register_callable(ctx, 0, &d) == SIMPLER_OK);
  }
  HazardDevice(const HazardDevice&) = delete;
  HazardDevice& operator=(const HazardDevice&) = delete;
  ~HazardDevice() { api.destroy_context(ctx); }

  /// Runs `which` with the gate closed.
  int run(Case which, std::uint32_t wait_ms, std::uint32_t count = 0,
          const simpler_run_config* cfg = nullptr) {
    gate.fill(0);
    std::vector<std::int32_t>* bufs[] = {&x, &y, &program};
    simpler_tensor t[4]{};
    for (int i = 0; i < 4; ++i) {
      std::int32_t* data = i == 0 ? gate.data() : bufs[i - 1]->data();
      const std::size_t n = i == 0 ? gate.size() : bufs[i - 1]->size();
      t[i].data = reinterpret_cast<std::uintptr_t>(data);
      t[i].ndims = 1;
      t[i].shapes[0] = static_cast<std::uint32_t>(n);
      t[i].dtype = SIMPLER_INT32;
    }
    const std::uint64_t scalars[3] = {which, wait_ms, count};
    const simpler_task_args args{4, 3, t, scalars};
    return api.run(ctx, 0, &args, cfg);
  }
  [[nodiscard]] std::string error() const { return api.last_error(ctx); }
  [[nodiscard]] std::int32_t saw(int word) const {
    return std::atomic_ref<const std::int32_t>(gate[static_cast<std::size_t>(word)]).load();
  }
};

std::vector<std::int32_t> filled(std::size_t n, std::int32_t v) {
  return std::vector<std::int32_t>(n, v);
}
std::vector<std::int32_t> iota(std::size_t n, std::int32_t from) {
  std::vector<std::int32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = from + static_cast<std::int32_t>(i);
  return v;
}

}  // namespace

// ---- write after read ------------------------------------------------------------------------

TEST_CASE("a device writer waits for an earlier reader of its bytes", "[device][hazards]") {
  const Case which = GENERATE(kReadThenWrite, kReadThenInOut);
  INFO((which == kReadThenWrite ? "OutputExisting writer" : "InOut writer"));
  HazardDevice d;
  d.x = iota(8, 1);
  REQUIRE(d.run(which, kShortWait) == SIMPLER_OK);
  CHECK(d.y == iota(8, 1));  // the reader saw the bytes as they were before the writer
  CHECK(d.x == filled(8, 7));
  CHECK(d.saw(1) == kGaveUp);  // the writer never ran while the reader was running
}

TEST_CASE("with read-after-write hazards only, a device writer overtakes a running reader",
          "[device][hazards]") {
  const Case which = GENERATE(kReadThenWrite, kReadThenInOut);
  HazardDevice d(options(SIMPLER_HAZARDS_READ_AFTER_WRITE));
  d.x = iota(8, 1);
  REQUIRE(d.run(which, kLongWait) == SIMPLER_OK);
  CHECK(d.saw(1) == kSawOpen);  // the writer ran, and wrote, while the reader was running
  CHECK(d.y == filled(8, 7));   // so the reader read the new bytes
}

// ---- write after write -----------------------------------------------------------------------

TEST_CASE("a device OutputExisting writer waits for the earlier writer of its bytes",
          "[device][hazards]") {
  HazardDevice d;
  REQUIRE(d.run(kWriteThenWrite, kShortWait) == SIMPLER_OK);
  CHECK(d.x == filled(8, 2));  // the later writer's bytes are the final ones
  CHECK(d.saw(2) == kGaveUp);
}

TEST_CASE("with read-after-write hazards only, device writers of the same bytes do not wait",
          "[device][hazards]") {
  HazardDevice d(options(SIMPLER_HAZARDS_READ_AFTER_WRITE));
  REQUIRE(d.run(kWriteThenWrite, kLongWait) == SIMPLER_OK);
  CHECK(d.saw(2) == kSawOpen);
  CHECK(d.x == filled(8, 1));  // the earlier writer wrote last
}

// ---- failures, views, capacity ----------------------------------------------------------------

TEST_CASE("a failed device reader fails its run as itself, not through the writer after it",
          "[device][hazards][failure]") {
  // The device has no per-task failure propagation: the first failure ends the run. The
  // order-only edge to the writer must not turn it into something else (a deadlock, a timeout,
  // a failure blamed on the writer), and the context must stay usable.
  HazardDevice d;
  d.x = iota(8, 1);
  CHECK(d.run(kFailedReader, 0) == SIMPLER_ERR_KERNEL_FAILED);
  CHECK_THAT(d.error(),
             Catch::Contains("deliberate failure from rt_fail") && Catch::Contains("func_id 3"));
  d.x = iota(8, 1);
  REQUIRE(d.run(kReadThenWrite, kShortWait) == SIMPLER_OK);
  CHECK(d.y == iota(8, 1));
  CHECK(d.x == filled(8, 7));
}

TEST_CASE("a device writer of other bytes of the buffer does not wait for a reader",
          "[device][hazards]") {
  HazardDevice d;
  d.x = iota(8, 1);
  d.y = filled(4, 0);
  // The reader holds bytes [0, 16) open; the writers write [16, 32): adjacent, not overlapping.
  REQUIRE(d.run(kDisjoint, kLongWait) == SIMPLER_OK);
  CHECK(d.saw(1) == kSawOpen);  // a writer ran while the reader was running: no false edge
  CHECK(d.y == iota(4, 1));
  CHECK(d.x == std::vector<std::int32_t>{1, 2, 3, 4, 9, 9, 9, 9});
}

TEST_CASE("a device writer after more readers than a task can wait for waits for them all",
          "[device][hazards]") {
  // 200 readers, pending behind a held-open writer, are more than the 64 tasks one task can
  // wait for: the later writer's submit waits for readers to complete instead.
  constexpr std::uint32_t kReaders = 200;
  HazardDevice d;
  d.x = filled(4, 0);
  d.y = filled(kReaders + 1, 0);
  REQUIRE(d.run(kManyReaders, kShortWait, kReaders) == SIMPLER_OK);
  std::vector<std::int32_t> expected = filled(kReaders + 1, 5);
  expected[0] = 0;
  CHECK(d.y == expected);  // every reader saw the first writer's bytes, none the last one's
  CHECK(d.x == filled(4, 9));
}

TEST_CASE("a device writer stuck behind readers that never finish ends with a named error",
          "[device][hazards][deadlock]") {
  simpler_init_options o = options(SIMPLER_HAZARDS_ALL);
  o.resource_wait_ms = 100;
  HazardDevice d(o);
  d.x = filled(4, 0);
  d.y = filled(201, 0);
  // The readers wait behind a writer held open for 1 s, far past the 100 ms backstop.
  CHECK(d.run(kManyReaders, 1000, 200) == SIMPLER_ERR_FLOW_CONTROL_DEADLOCK);
  CHECK_THAT(d.error(), Catch::Contains("overwrites bytes that more than") &&
                            Catch::Contains("none of them completed for 100 ms"));
  d.x = iota(8, 1);
  d.y = filled(8, 0);
  REQUIRE(d.run(kReadThenWrite, kShortWait) == SIMPLER_OK);
  CHECK(d.y == iota(8, 1));
}

TEST_CASE("device read entries do not fill the TensorMap", "[device][hazards]") {
  // 4000 tasks in the run's own scope (none retires before the run ends) record 5 entries each,
  // 20000, in a TensorMap of 8216 (twice the rings' windows): a writer takes over the entries
  // of the readers it waited for, and a done reader's entries are reclaimed.
  simpler_run_config cfg{};
  cfg.struct_size = sizeof cfg;
  cfg.ring_task_window[0] = 4096;
  for (int r = 1; r < 4; ++r) cfg.ring_task_window[r] = 4;
  const std::uint32_t hazards = GENERATE(SIMPLER_HAZARDS_ALL, SIMPLER_HAZARDS_READ_AFTER_WRITE);
  HazardDevice d(options(hazards));
  INFO("hazards " << hazards);
  const int rc = d.run(kReadHeavy, 0, 4000, &cfg);
  INFO(d.error());
  CHECK(rc == SIMPLER_OK);
}

// ---- random programs against a sequential oracle -------------------------------------------

namespace {

constexpr std::int32_t kBufElems = 32;

std::vector<ProgramOp> random_program(std::uint32_t seed, int n) {
  std::mt19937 rng(seed);
  auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<ProgramOp> ops;
  for (int i = 0; i < n; ++i) {
    ProgramOp op{};
    op.mode = pick(0, 3);
    op.len = pick(1, 12);
    op.dst_buf = pick(0, 1);
    op.dst_off = pick(0, kBufElems - op.len);
    op.src_buf = 1 - op.dst_buf;  // a task never reads and writes one buffer
    op.src_off = pick(0, kBufElems - op.len);
    op.value = pick(-9, 9);
    op.spin = pick(0, 3) == 0 ? pick(0, 200) : 0;
    ops.push_back(op);
  }
  return ops;
}

/// The program run one op after the other.
void run_sequentially(const std::vector<ProgramOp>& ops, std::vector<std::int32_t>& x,
                      std::vector<std::int32_t>& y) {
  std::vector<std::int32_t>* bufs[] = {&x, &y};
  for (const ProgramOp& op : ops) {
    std::int32_t* dst = bufs[op.dst_buf]->data() + op.dst_off;
    const std::int32_t* src = bufs[op.src_buf]->data() + op.src_off;
    for (std::int32_t i = 0; i < op.len; ++i) {
      switch (op.mode) {
        case 0:
          dst[i] = op.value;
          break;
        case 1:
          dst[i] += op.value;
          break;
        case 2:
          dst[i] = src[i] + op.value;
          break;
        default:
          dst[i] += src[i];
          break;
      }
    }
  }
}

}  // namespace

TEST_CASE("random device programs of views with every hazard give the sequential result",
          "[device][hazards]") {
  simpler_init_options o = options(SIMPLER_HAZARDS_ALL);
  o.num_clusters = 2;  // 4 AIV cores
  o.aicpu_thread_num = 3;
  HazardDevice d(o);
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    INFO("seed " << seed);
    const std::vector<ProgramOp> ops = random_program(seed, 80);
    std::vector<std::int32_t> x = iota(kBufElems, 100), y = iota(kBufElems, -50);
    d.x = x;
    d.y = y;
    run_sequentially(ops, x, y);
    d.program.resize(ops.size() * kOpWords);
    std::memcpy(d.program.data(), ops.data(), ops.size() * sizeof(ProgramOp));
    INFO(d.error());
    REQUIRE(d.run(kRandom, 0) == SIMPLER_OK);
    CHECK(d.x == x);
    CHECK(d.y == y);
  }
}

// ---- the ABI ---------------------------------------------------------------------------------

TEST_CASE("device init options of ABI 2 (without hazards) take every hazard",
          "[device][hazards][abi]") {
  // What an ABI 2 host passes: struct_size 24. The word after it is not its to read.
  struct {
    simpler_init_options o;
    std::uint32_t after;
  } old{};
  old.o = options(SIMPLER_HAZARDS_READ_AFTER_WRITE);  // ... beyond the caller's struct_size
  old.o.struct_size = offsetof(simpler_init_options, hazards);
  REQUIRE(old.o.struct_size == 24);
  old.after = 77;
  HazardDevice d(old.o);
  d.x = iota(8, 1);
  REQUIRE(d.run(kReadThenWrite, kShortWait) == SIMPLER_OK);
  CHECK(d.y == iota(8, 1));
  CHECK(d.saw(1) == kGaveUp);
}

TEST_CASE("device init refuses an unknown hazards value and a truncated options struct",
          "[device][hazards][abi]") {
  const DeviceApi& api = sim_api();
  simpler_device_context* ctx = api.create_context();
  REQUIRE(ctx != nullptr);
  simpler_init_options o = options(2);
  CHECK(api.init(ctx, 0, &o) == SIMPLER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(api.last_error(ctx)), Catch::Contains("hazards is 2"));
  o = options(SIMPLER_HAZARDS_ALL);
  o.struct_size = 20;
  CHECK(api.init(ctx, 0, &o) == SIMPLER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(api.last_error(ctx)), Catch::Contains("struct_size is 20"));
  // Neither left the context half-initialised.
  o.struct_size = sizeof o;
  CHECK(api.init(ctx, 0, &o) == SIMPLER_OK);
  api.destroy_context(ctx);
}

}  // namespace simpler_test_chip_hazards
