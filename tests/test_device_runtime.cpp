// The simulated device runtime through its C ABI alone (no ChipWorker): dependency order, the
// arena reused across runs, and every bad input the issue lists, each ending in a named status
// with the context still usable where it can be.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>

#include "device/orchestration/rt_cases.hpp"
#include "support/device_api.hpp"
#include "support/gate.hpp"
#include "support/thread_states.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_device_runtime {

namespace {

using simpler_test::device_module;
using simpler_test::DeviceApi;
using simpler_test::sim_api;

using namespace rt_cases;

/// One initialised context with the rt_cases callable registered under id 0.
struct Device {
  const DeviceApi& api = sim_api();
  simpler_device_context* ctx = nullptr;
  std::array<std::int32_t, 16> data{};
  std::array<std::int32_t, 16> flag{};
  std::array<std::string, 6> paths;
  std::array<simpler_kernel_desc, 6> kernels{};
  std::string orch = device_module("test_orch_rt_cases.so");

  explicit Device(simpler_init_options opts = {}, std::int32_t device_id = 0) {
    ctx = api.create_context();
    REQUIRE(ctx != nullptr);
    opts.struct_size = sizeof opts;
    REQUIRE(api.init(ctx, device_id, &opts) == SIMPLER_OK);
    const char* names[] = {"rt_noop", "rt_fail", "rt_fault", "rt_spin", "rt_inc", "rt_fill"};
    for (int i = 0; i < 6; ++i) {
      paths[i] = device_module(std::string("test_kernel_") + names[i] + ".so");
      kernels[i] = {i, paths[i].c_str(), nullptr};
    }
    REQUIRE(register_at(0) == SIMPLER_OK);
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() { api.destroy_context(ctx); }

  int register_at(std::int32_t id) {
    simpler_chip_callable_desc d{};
    d.struct_size = sizeof d;
    d.orch_path = orch.c_str();
    d.kernel_count = static_cast<std::uint32_t>(kernels.size());
    d.kernels = kernels.data();
    return api.register_callable(ctx, id, &d);
  }

  int run(int which, std::uint64_t n, const simpler_run_config* cfg = nullptr, int id = 0) {
    simpler_tensor t[2]{};
    for (int i = 0; i < 2; ++i) {
      t[i].data = reinterpret_cast<std::uintptr_t>(i == 0 ? data.data() : flag.data());
      t[i].ndims = 1;
      t[i].shapes[0] = 16;
      t[i].dtype = SIMPLER_INT32;
    }
    const std::uint64_t scalars[2] = {static_cast<std::uint64_t>(which), n};
    const simpler_task_args args{2, 2, t, scalars};
    return api.run(ctx, id, &args, cfg);
  }
  [[nodiscard]] std::string error() const { return api.last_error(ctx); }
  [[nodiscard]] simpler_context_stats stats() const {
    simpler_context_stats s{};
    REQUIRE(api.get_stats(ctx, &s) == SIMPLER_OK);
    return s;
  }
  /// The context still runs a small graph correctly.
  void check_usable() {
    data.fill(0);
    const int rc = run(kChain, 5);
    INFO(error());
    REQUIRE(rc == SIMPLER_OK);
    CHECK(data[0] == 5);
    CHECK(data[15] == 5);
  }
};

simpler_run_config small_rings(std::uint64_t window, std::uint64_t heap) {
  simpler_run_config c{};
  c.struct_size = sizeof c;
  for (int r = 0; r < 4; ++r) {
    c.ring_task_window[r] = window;
    c.ring_heap[r] = heap;
  }
  return c;
}

}  // namespace

TEST_CASE("the simulator reports the ABI version this host was built against", "[device][abi]") {
  CHECK(sim_api().device_abi_version() == SIMPLER_DEVICE_ABI_VERSION);
  CHECK(std::string(sim_api().status_name(SIMPLER_ERR_KERNEL_FAULT)) == "SIMPLER_ERR_KERNEL_FAULT");
  CHECK(std::string(sim_api().status_name(-12345)) == "SIMPLER_ERR_UNKNOWN");
}

TEST_CASE("an InOut chain over AIC and AIV cores runs in submission order", "[device][deps]") {
  Device d;
  REQUIRE(d.run(kChain, 300) == SIMPLER_OK);
  for (auto v : d.data) CHECK(v == 300);
}

TEST_CASE("a runtime-allocated buffer orders its fill, increments and the device-side read",
          "[device][deps]") {
  Device d;
  REQUIRE(d.run(kAllocChain, 40) == SIMPLER_OK);
  CHECK(d.flag[0] == 40);
  // Again, on heap memory the first run left dirty: the fill task must come first again.
  d.flag[0] = 0;
  REQUIRE(d.run(kAllocChain, 7) == SIMPLER_OK);
  CHECK(d.flag[0] == 7);
}

TEST_CASE("independent tasks recycle the task window and heap of an inner ring",
          "[device][rings]") {
  Device d;
  // 3000 tasks with outputs in the run's own scope need a window of 4096.
  REQUIRE(d.run(kIndependent, 3000) == SIMPLER_OK);
  CHECK(d.stats().tasks_completed == 3000);
}

TEST_CASE("many runs of one callable load it once and build the arena once", "[device][arena]") {
  Device d;
  for (int i = 0; i < 20; ++i) {
    d.data.fill(0);
    REQUIRE(d.run(kChain, 3) == SIMPLER_OK);
    REQUIRE(d.data[0] == 3);
  }
  const auto s = d.stats();
  CHECK(s.orch_so_loads == 1);
  CHECK(s.kernel_so_loads == 6);
  CHECK(s.arena_builds == 1);
  CHECK(s.arena_uploads == 1);
  CHECK(s.boots == 20);
  CHECK(s.runs == 20);

  SECTION("a different ring sizing builds a new arena; returning to it builds again") {
    const auto cfg = small_rings(64, 1 << 16);
    REQUIRE(d.run(kChain, 3, &cfg) == SIMPLER_OK);
    CHECK(d.stats().arena_builds == 2);
    REQUIRE(d.run(kChain, 3, &cfg) == SIMPLER_OK);
    CHECK(d.stats().arena_builds == 2);
  }
}

TEST_CASE("two device contexts run at the same time without sharing state", "[device][contexts]") {
  Device a({}, 0), b({}, 1);
  std::thread ta([&] {
    for (int i = 0; i < 5; ++i) {
      a.data.fill(0);
      if (a.run(kChain, 50) != SIMPLER_OK || a.data[7] != 50) a.flag[15] = -1;
    }
  });
  for (int i = 0; i < 5; ++i) {
    b.data.fill(100);
    REQUIRE(b.run(kChain, 20) == SIMPLER_OK);
    REQUIRE(b.data[7] == 120);
  }
  ta.join();
  CHECK(a.flag[15] == 0);
  CHECK(a.data[0] == 50);
}

TEST_CASE("device bad input: callable registration", "[device][bad-input]") {
  Device d;
  SECTION("registering an id twice is refused and the first registration still runs") {
    CHECK(d.register_at(0) == SIMPLER_ERR_DUPLICATE_CALLABLE);
    CHECK_THAT(d.error(), Catch::Contains("callable id 0 is already registered"));
    d.check_usable();
  }
  SECTION("an id outside 0..63") {
    CHECK(d.register_at(64) == SIMPLER_ERR_INVALID_ARGUMENT);
    CHECK_THAT(d.error(), Catch::Contains("outside 0..63"));
  }
  SECTION("a missing orchestration file names the path") {
    d.orch = "/nonexistent/orch.so";
    CHECK(d.register_at(1) == SIMPLER_ERR_LOAD_FAILED);
    CHECK_THAT(d.error(), Catch::Contains("/nonexistent/orch.so"));
    d.check_usable();
  }
  SECTION("an orchestration without the entry symbol") {
    d.orch = d.paths[0];  // a kernel .so: no aicpu_orchestration_entry
    CHECK(d.register_at(1) == SIMPLER_ERR_LOAD_FAILED);
    CHECK_THAT(d.error(), Catch::Contains("does not export aicpu_orchestration_entry"));
  }
  SECTION("a missing kernel file names its func_id") {
    d.paths[3] = "/nonexistent/kernel.so";
    d.kernels[3].path = d.paths[3].c_str();
    CHECK(d.register_at(1) == SIMPLER_ERR_LOAD_FAILED);
    CHECK_THAT(d.error(),
               Catch::Contains("func_id 3") && Catch::Contains("/nonexistent/kernel.so"));
  }
  SECTION("a duplicate func_id") {
    d.kernels[2].func_id = 1;
    CHECK(d.register_at(1) == SIMPLER_ERR_INVALID_ARGUMENT);
    CHECK_THAT(d.error(), Catch::Contains("func_id 1 appears twice"));
  }
  SECTION("unregistering frees the id for a new registration") {
    REQUIRE(d.api.unregister_callable(d.ctx, 0) == SIMPLER_OK);
    CHECK(d.api.unregister_callable(d.ctx, 0) == SIMPLER_ERR_UNKNOWN_CALLABLE);
    REQUIRE(d.register_at(0) == SIMPLER_OK);
    d.check_usable();
    CHECK(d.stats().orch_so_loads == 2);
  }
}

TEST_CASE("device bad input: running", "[device][bad-input]") {
  Device d;
  SECTION("an unknown callable id names the registered ones") {
    CHECK(d.run(kChain, 1, nullptr, 5) == SIMPLER_ERR_UNKNOWN_CALLABLE);
    CHECK_THAT(d.error(), Catch::Contains("callable id 5 is not registered (registered: 0)"));
    d.check_usable();
  }
  SECTION("fewer arguments than the orchestration expects") {
    const simpler_task_args none{0, 0, nullptr, nullptr};
    CHECK(d.api.run(d.ctx, 0, &none, nullptr) == SIMPLER_ERR_ARG_COUNT);
    CHECK_THAT(d.error(), Catch::Contains("expects 4 arguments"));
    d.check_usable();
  }
  SECTION("a task window that is not a power of two") {
    const auto cfg = small_rings(48, 1 << 20);
    CHECK(d.run(kChain, 1, &cfg) == SIMPLER_ERR_INVALID_ARGUMENT);
    CHECK_THAT(d.error(), Catch::Contains("ring_task_window[0] is 48"));
    d.check_usable();
  }
  SECTION("phases out of order") {
    CHECK(d.api.launch_run(d.ctx) == SIMPLER_ERR_NO_RUN);
    CHECK(d.api.wait_run(d.ctx) == SIMPLER_ERR_NO_RUN);
    simpler_tensor t[2]{};
    for (auto& x : t) {
      x.data = reinterpret_cast<std::uintptr_t>(d.data.data());
      x.ndims = 1;
      x.shapes[0] = 16;
      x.dtype = SIMPLER_INT32;
    }
    const std::uint64_t sc[2] = {kChain, 2};
    const simpler_task_args args{2, 2, t, sc};
    REQUIRE(d.api.prepare_run(d.ctx, 0, &args, nullptr) == SIMPLER_OK);
    CHECK(d.api.prepare_run(d.ctx, 0, &args, nullptr) == SIMPLER_ERR_RUN_ACTIVE);
    CHECK(d.register_at(2) == SIMPLER_ERR_RUN_ACTIVE);
    d.data.fill(0);
    REQUIRE(d.api.launch_run(d.ctx) == SIMPLER_OK);
    REQUIRE(d.api.wait_run(d.ctx) == SIMPLER_OK);
    REQUIRE(d.api.finalize_run(d.ctx) == SIMPLER_OK);
    CHECK(d.data[0] == 2);
    // A prepared run may be abandoned before launch.
    REQUIRE(d.api.prepare_run(d.ctx, 0, &args, nullptr) == SIMPLER_OK);
    REQUIRE(d.api.finalize_run(d.ctx) == SIMPLER_OK);
    CHECK(d.data[0] == 2);
    d.check_usable();
  }
}

TEST_CASE("device bad input: an uninitialised or finalised context", "[device][bad-input]") {
  const DeviceApi& api = sim_api();
  simpler_device_context* ctx = api.create_context();
  REQUIRE(ctx != nullptr);
  CHECK(api.run(ctx, 0, nullptr, nullptr) == SIMPLER_ERR_NOT_INITIALISED);
  CHECK_THAT(std::string(api.last_error(ctx)), Catch::Contains("simpler_init"));
  REQUIRE(api.init(ctx, 0, nullptr) == SIMPLER_OK);
  CHECK(api.init(ctx, 1, nullptr) == SIMPLER_ERR_ALREADY_INITIALISED);
  REQUIRE(api.finalize(ctx) == SIMPLER_OK);
  CHECK(api.run(ctx, 0, nullptr, nullptr) == SIMPLER_ERR_FINALISED);
  CHECK(api.device_malloc(ctx, 64) == nullptr);
  api.destroy_context(ctx);
  CHECK(api.run(nullptr, 0, nullptr, nullptr) == SIMPLER_ERR_INVALID_ARGUMENT);
}

TEST_CASE("device bad input: what the orchestration submits", "[device][bad-input]") {
  Device d;
  SECTION("a func_id with no kernel") {
    CHECK(d.run(kUnknownFunc, 0) == SIMPLER_ERR_UNKNOWN_FUNC_ID);
    CHECK_THAT(d.error(), Catch::Contains("func_id 99 has no kernel"));
  }
  SECTION("too many tensor args") {
    CHECK(d.run(kTooManyTensors, 0) == SIMPLER_ERR_INVALID_TASK_ARGS);
    CHECK_THAT(d.error(), Catch::Contains("too many tensor args (17 requested"));
  }
  SECTION("too many scalar args") {
    CHECK(d.run(kTooManyScalars, 0) == SIMPLER_ERR_INVALID_TASK_ARGS);
    CHECK_THAT(d.error(), Catch::Contains("too many scalar args (17 requested"));
  }
  SECTION("scope_end without scope_begin") {
    CHECK(d.run(kUnbalancedScope, 0) == SIMPLER_ERR_SCOPE_OVERFLOW);
    CHECK_THAT(d.error(), Catch::Contains("without a matching scope_begin"));
  }
  SECTION("a scope left open") {
    CHECK(d.run(kScopeLeftOpen, 0) == SIMPLER_ERR_SCOPE_OVERFLOW);
    CHECK_THAT(d.error(), Catch::Contains("left 1 scope(s) open"));
  }
  SECTION("a device-side read of bytes with more live writers than tracked") {
    // Only unordered writers stay live together: with all hazards each OutputExisting waits for
    // the one before and takes over its entry, so the read waits for the last one alone.
    CHECK(d.run(kReadManyWriters, 70) == SIMPLER_OK);
    simpler_init_options o{};
    o.hazards = SIMPLER_HAZARDS_READ_AFTER_WRITE;
    Device raw(o);
    CHECK(raw.run(kReadManyWriters, 70) == SIMPLER_ERR_TOO_MANY_PRODUCERS);
    CHECK_THAT(raw.error(), Catch::Contains("read_tensor: more than 64 live tasks write"));
    CHECK(raw.run(kReadManyWriters, 10) == SIMPLER_OK);
  }
  SECTION("the orchestration reports a fatal error") {
    CHECK(d.run(kReportFatal, 0) == SIMPLER_ERR_ORCH_FATAL);
    CHECK_THAT(d.error(), Catch::Contains("the input is not what this orchestration expects"));
  }
  d.check_usable();
}

TEST_CASE("device bad input: kernels that fail or fault", "[device][bad-input]") {
  Device d;
  SECTION("a kernel reporting failure names its func_id and message") {
    CHECK(d.run(kKernelFails, 0) == SIMPLER_ERR_KERNEL_FAILED);
    CHECK_THAT(d.error(),
               Catch::Contains("func_id 1") && Catch::Contains("deliberate failure from rt_fail"));
  }
  SECTION("a faulting kernel fails the run instead of killing the process") {
    CHECK(d.run(kKernelFaults, 0) == SIMPLER_ERR_KERNEL_FAULT);
    CHECK_THAT(d.error(), Catch::Contains("func_id 2") && Catch::Contains("signal 11") &&
                              Catch::Contains("AIC core"));
  }
  d.check_usable();
  d.check_usable();
}

TEST_CASE("device bad input: windows and heaps too small for the graph", "[device][bad-input]") {
  Device d;
  SECTION("a scope holding more tasks than its window") {
    const auto cfg = small_rings(16, 1 << 20);
    CHECK(d.run(kScopeDeadlock, 17, &cfg) == SIMPLER_ERR_SCOPE_DEADLOCK);
    CHECK_THAT(d.error(),
               Catch::Contains("ring 1 (16 tasks)") && Catch::Contains("ring_task_window[1]"));
    // The same graph fits a window of 32.
    const auto ok = small_rings(32, 1 << 20);
    CHECK(d.run(kScopeDeadlock, 17, &ok) == SIMPLER_OK);
  }
  SECTION("the run's own scope holding more tasks than ring 0's window") {
    const auto cfg = small_rings(16, 1 << 20);
    CHECK(d.run(kIndependent, 17, &cfg) == SIMPLER_ERR_SCOPE_DEADLOCK);
    CHECK_THAT(d.error(), Catch::Contains("ring 0"));
  }
  SECTION("one output larger than the heap") {
    const auto cfg = small_rings(64, 16 * 1024);
    CHECK(d.run(kHeapTooSmall, 64, &cfg) == SIMPLER_ERR_HEAP_RING_DEADLOCK);
    CHECK_THAT(d.error(), Catch::Contains("needs 65536 bytes") && Catch::Contains("ring_heap[0]"));
  }
  SECTION("a scope whose outputs outgrow the heap") {
    const auto cfg = small_rings(64, 16 * 1024);
    CHECK(d.run(kHeapScopeDeadlock, 5, &cfg) == SIMPLER_ERR_HEAP_RING_DEADLOCK);
    CHECK_THAT(d.error(), Catch::Contains("heap ring 1") && Catch::Contains("open scope"));
    CHECK(d.run(kHeapScopeDeadlock, 4, &cfg) == SIMPLER_OK);
  }
  d.check_usable();
}

TEST_CASE("a task window that never frees in time ends the run after the backstop",
          "[device][deadlock]") {
  simpler_init_options o{};
  o.resource_wait_ms = 200;
  Device d(o);
  const auto cfg = small_rings(4, 1 << 20);
  CHECK(d.run(kWindowBackstop, 1000, &cfg) == SIMPLER_ERR_FLOW_CONTROL_DEADLOCK);
  CHECK_THAT(d.error(), Catch::Contains("the task window of ring 1 stayed full for 200 ms"));
  d.check_usable();
}

TEST_CASE("an orchestration waiting on a task that waits on it ends with a named error",
          "[device][deadlock]") {
  simpler_init_options o{};
  o.tensor_wait_ms = 200;
  Device d(o);
  CHECK(d.run(kWaitsOnItself, 0) == SIMPLER_ERR_TENSOR_WAIT_TIMEOUT);
  CHECK_THAT(d.error(), Catch::Contains("read_tensor waited 200 ms for task 0:0"));
  d.check_usable();
}

TEST_CASE("the watchdog ends a run whose kernel does not return", "[device][deadlock]") {
  simpler_init_options o{};
  o.scheduler_timeout_ms = 200;
  Device d(o);
  // The kernel gives up after 1.5 s, well inside the grace period: the context stays usable.
  CHECK(d.run(kStuckKernel, 1500) == SIMPLER_ERR_SCHEDULER_TIMEOUT);
  CHECK_THAT(d.error(), Catch::Contains("no progress for 200 ms") &&
                            Catch::Contains("a kernel does not return: task 0:0 (func_id 3)"));
  d.check_usable();
}

TEST_CASE("a kernel stuck past the grace period leaves the context refusing runs",
          "[device][deadlock]") {
  simpler_init_options o{};
  o.scheduler_timeout_ms = 100;
  Device d(o);
  // 100 ms watchdog + 5 s grace < 6.5 s: the kernel is still inside when the run gives up.
  CHECK(d.run(kStuckKernel, 6500) == SIMPLER_ERR_SCHEDULER_TIMEOUT);
  CHECK_THAT(d.error(),
             Catch::Contains("context is now unusable") && Catch::Contains("never returned"));
  CHECK(d.run(kChain, 1) == SIMPLER_ERR_CONTEXT_BROKEN);
  CHECK_THAT(d.error(), Catch::Contains("destroy it and create a new one"));
  // Let the kernel go, and see it leave, before `d` (whose buffer it polls) is destroyed.
  std::atomic_ref<std::int32_t>(d.data[0]).store(1);
  CHECK(simpler::testing::eventually(
      [&] { return std::atomic_ref<std::int32_t>(d.data[1]).load() == 1; }));
}

TEST_CASE("the first run of a fresh context reaches core threads that started late",
          "[device][lifecycle]") {
  // Regression: a core thread that read its DMB register at start-up, after the scheduler had
  // already posted the first token, waited for a second token forever.
  simpler_init_options o{};
  o.scheduler_timeout_ms = 2000;
  for (int i = 0; i < 40; ++i) {
    Device d(o);
    REQUIRE(d.run(kKernelFails, 0) == SIMPLER_ERR_KERNEL_FAILED);
    d.check_usable();
  }
}

TEST_CASE("an idle device context has every thread asleep", "[device][idle]") {
  Device d;
  REQUIRE(d.run(kIndependent, 2000) == SIMPLER_OK);
  // After their bounded spin the AICPU and AICore threads block in the kernel ('S'); one that
  // kept spinning would stay 'R'. 2 clusters: 6 core threads, 4 AICPU threads.
  const bool asleep = simpler::testing::other_threads_fall_asleep(std::chrono::seconds(5));
  CHECK(asleep);
  CHECK(simpler::testing::other_thread_states().size() >= 10);
}

TEST_CASE("the device threads carry their role and device in their names", "[device][threads]") {
  Device d({}, 3);
  REQUIRE(d.run(kChain, 2) == SIMPLER_OK);
  // 2 clusters: 2 AIC and 4 AIV cores; the orchestrator and three schedulers.
  for (const char* name : {"d3 orch", "d3 sched0", "d3 sched1", "d3 sched2", "d3 aic0", "d3 aic1",
                           "d3 aiv0", "d3 aiv3"}) {
    INFO(name);
    CHECK(simpler::testing::threads_named(name).size() == 1);
  }
  CHECK(simpler::testing::threads_named("d3 aiv4").empty());
}

// Only the AICPU threads a run's aicpu_thread_num names take part in it (the default 3: the
// orchestrator and schedulers 0 and 1). The others are neither woken by its launch nor waited
// for: on two cores, a third scheduler spinning for launches it never serves delayed every
// hand-off of a one-task run.
TEST_CASE("a scheduler the run does not use sleeps through it", "[device][threads]") {
  // A device id of its own: a broken context of an earlier test may keep its threads.
  Device d({}, 12);
  const auto spare = simpler::testing::threads_named("d12 sched2");
  REQUIRE(spare.size() == 1);
  REQUIRE(d.run(kChain, 1) == SIMPLER_OK);
  // Once it slept (its start-up and any spin are over), 300 back-to-back runs must not move it.
  const bool parked = simpler::testing::eventually(
      [&] { return simpler::testing::thread_state(spare[0]) == 'S'; }, std::chrono::seconds(5));
  REQUIRE(parked);
  const long before = simpler::testing::context_switches(spare[0]);
  REQUIRE(before >= 0);
  for (int i = 0; i < 300; ++i) {
    d.data.fill(0);
    REQUIRE(d.run(kChain, 1) == SIMPLER_OK);
    REQUIRE(d.data[0] == 1);
  }
  CHECK(simpler::testing::context_switches(spare[0]) == before);
  CHECK(d.stats().runs == 301);

  SECTION("runs that use it wake it, and runs of any size that follow still end") {
    simpler_run_config cfg{};
    cfg.struct_size = sizeof cfg;
    // 4, 2, 3, ... threads in turn: every scheduler joins and sits out runs, parked or spinning.
    const std::int32_t threads[] = {4, 2, 3, 4, 4, 2, 2, 3};
    for (int i = 0; i < 96; ++i) {
      cfg.aicpu_thread_num = threads[i % 8];
      INFO("run " << i << " with " << cfg.aicpu_thread_num << " AICPU threads");
      d.data.fill(0);
      const auto n = static_cast<std::uint64_t>(1 + i % 7);
      REQUIRE(d.run(kChain, n, &cfg) == SIMPLER_OK);
      for (auto v : d.data) REQUIRE(v == static_cast<std::int32_t>(n));
      if (i % 8 == 0) {
        // Not a synchronisation: a pause now and then lets the threads park, so that the runs
        // after it find them asleep rather than spinning (both launch paths get exercised).
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    CHECK(simpler::testing::context_switches(spare[0]) > before);
    d.check_usable();
  }
}

// Cores run on: a core that finished a kernel retires the task itself and runs the next ready
// task of its shape without handing back to its scheduler (sim.hpp, Core). The run ends only once
// every core answered, and the device threads stay parked between runs.

TEST_CASE("consecutive runs on parked device threads each give the right results",
          "[device][run-on]") {
  Device d;
  std::uint64_t tasks = 0;
  for (int i = 0; i < 150; ++i) {
    const auto n = static_cast<std::uint64_t>(1 + i % 9);
    INFO("run " << i);
    switch (i % 3) {
      case 0:
        d.data.fill(0);
        REQUIRE(d.run(kChain, n) == SIMPLER_OK);
        for (auto v : d.data) REQUIRE(v == static_cast<std::int32_t>(n));
        tasks += n;
        break;
      case 1:
        REQUIRE(d.run(kIndependent, 40 * n) == SIMPLER_OK);
        tasks += 40 * n;
        break;
      default:
        d.flag[0] = -1;
        REQUIRE(d.run(kAllocChain, n) == SIMPLER_OK);
        REQUIRE(d.flag[0] == static_cast<std::int32_t>(n));
        tasks += n + 2;  // the fill, the increments, and the alloc
        break;
    }
    // Every task of the run completed before run() returned, none twice.
    REQUIRE(d.stats().tasks_completed == tasks);
  }
  CHECK(d.stats().runs == 150);
}

TEST_CASE("a run returns on its last completion, the next call waits for the device threads",
          "[device][run-on][early-return]") {
  Device d;
  // One-task runs back to back: the host usually sees the last completion before every
  // scheduler has left the run. Bounded: without the early return none would ever count.
  std::uint64_t runs = 0;
  while (d.stats().early_returns == 0 && runs < 3000) {
    d.data.fill(0);
    REQUIRE(d.run(kChain, 1) == SIMPLER_OK);
    REQUIRE(d.data[0] == 1);
    ++runs;
  }
  REQUIRE(d.stats().early_returns > 0);

  SECTION("whatever the host calls next after such a run sees the run's effects, and works") {
    for (int i = 0; i < 60; ++i) {
      INFO("round " << i);
      d.data.fill(0);
      REQUIRE(d.run(kChain, 1) == SIMPLER_OK);
      switch (i % 3) {
        case 0:  // register and run another callable at once
          REQUIRE(d.data[0] == 1);
          REQUIRE(d.register_at(1) == SIMPLER_OK);
          d.data.fill(0);
          REQUIRE(d.run(kChain, 2, nullptr, 1) == SIMPLER_OK);
          REQUIRE(d.data[0] == 2);
          REQUIRE(d.api.unregister_callable(d.ctx, 1) == SIMPLER_OK);
          break;
        case 1:  // a new ring sizing: the next run rebuilds the arena the threads just used
          if (i % 2 == 1) {
            const auto cfg = small_rings(64, 1 << 16);
            d.data.fill(0);
            REQUIRE(d.run(kChain, 5, &cfg) == SIMPLER_OK);
            REQUIRE(d.data[0] == 5);
          } else {
            REQUIRE(d.run(kIndependent, 100) == SIMPLER_OK);
          }
          break;
        default:
          REQUIRE(d.data[0] == 1);
          break;
      }
    }
    d.check_usable();
    const auto s = d.stats();
    CHECK(s.early_returns <= s.runs);
  }
  SECTION("a run that fails waits for every device thread") {
    const std::uint64_t before = d.stats().early_returns;
    for (int i = 0; i < 20; ++i) {
      REQUIRE(d.run(kChainFailsMidway, 3) == SIMPLER_ERR_KERNEL_FAILED);
    }
    CHECK(d.stats().early_returns == before);
    d.check_usable();
  }
  SECTION("a run recording a trace waits for every device thread") {
    simpler_run_config cfg{};
    cfg.struct_size = sizeof cfg;
    cfg.swimlane = 1;
    const std::uint64_t before = d.stats().early_returns;
    for (int i = 0; i < 50; ++i) REQUIRE(d.run(kChain, 1, &cfg) == SIMPLER_OK);
    CHECK(d.stats().early_returns == before);
  }
}

TEST_CASE("a core running on stops at a failed task, and the next run is clean",
          "[device][run-on][failure]") {
  Device d;
  for (int i = 0; i < 20; ++i) {
    d.data.fill(0);
    REQUIRE(d.run(kChainFailsMidway, 25) == SIMPLER_ERR_KERNEL_FAILED);
    CHECK_THAT(d.error(), Catch::Contains("deliberate failure from rt_fail"));
    // The 25 increments before the failure ran; none after it.
    CHECK(d.data[0] == 25);
    d.check_usable();
  }
}

TEST_CASE("a run using fewer clusters than the context has leaves the others' cores parked",
          "[device][run-on]") {
  simpler_init_options o{};
  o.num_clusters = 3;
  Device d(o);
  simpler_run_config cfg{};
  cfg.struct_size = sizeof cfg;
  cfg.block_dim = 1;
  for (int i = 0; i < 30; ++i) {
    d.data.fill(0);
    REQUIRE(d.run(kChain, 20, &cfg) == SIMPLER_OK);
    REQUIRE(d.data[0] == 20);
    REQUIRE(d.run(kIndependent, 200, &cfg) == SIMPLER_OK);
  }
  d.check_usable();
}

TEST_CASE("the orchestrator hands a task ready at submit to an idle core itself",
          "[device][run-on][direct]") {
  Device d;
  SECTION("a one-task run: always, since every core is idle when a run starts") {
    const std::uint64_t before = d.stats().direct_dispatches;
    for (int i = 0; i < 200; ++i) {
      d.data.fill(0);
      REQUIRE(d.run(kChain, 1) == SIMPLER_OK);
      REQUIRE(d.data[0] == 1);
    }
    CHECK(d.stats().direct_dispatches - before == 200);
  }
  SECTION("a chain: its first task, and a later one only if its producer already completed") {
    const std::uint64_t before = d.stats().direct_dispatches;
    for (int i = 0; i < 50; ++i) {
      d.data.fill(0);
      REQUIRE(d.run(kChain, 8) == SIMPLER_OK);
      REQUIRE(d.data[0] == 8);  // in order: each increment saw the one before
    }
    const std::uint64_t direct = d.stats().direct_dispatches - before;
    CHECK(direct >= 50);
    CHECK(direct <= 50 * 8);
  }
  SECTION("independent tasks: the ones that find a core idle; the rest queue, and all run") {
    const auto s0 = d.stats();
    for (int i = 0; i < 20; ++i) REQUIRE(d.run(kIndependent, 500) == SIMPLER_OK);
    const auto s1 = d.stats();
    CHECK(s1.tasks_completed - s0.tasks_completed == 20 * 500);
    CHECK(s1.direct_dispatches - s0.direct_dispatches >= 20);
    CHECK(s1.direct_dispatches - s0.direct_dispatches <= 20 * 500);
  }
  SECTION("not while a trace records per scheduler (cores do not run on then)") {
    simpler_run_config cfg{};
    cfg.struct_size = sizeof cfg;
    cfg.swimlane = 1;
    const std::uint64_t before = d.stats().direct_dispatches;
    for (int i = 0; i < 20; ++i) {
      d.data.fill(0);
      REQUIRE(d.run(kChain, 3, &cfg) == SIMPLER_OK);
      REQUIRE(d.data[0] == 3);
    }
    CHECK(d.stats().direct_dispatches == before);
  }
  d.check_usable();
}

TEST_CASE("stats fill only the struct the caller has", "[device][abi]") {
  Device d;
  REQUIRE(d.run(kChain, 1) == SIMPLER_OK);
  // A caller built before direct_dispatches existed: its struct ends at early_returns.
  constexpr std::size_t old_size = offsetof(simpler_context_stats, direct_dispatches);
  alignas(simpler_context_stats) std::array<unsigned char, sizeof(simpler_context_stats) + 8> buf{};
  buf.fill(0xAB);
  simpler_context_stats head{};
  head.struct_size = old_size;
  std::memcpy(buf.data(), &head, sizeof head.struct_size);
  REQUIRE(d.api.get_stats(d.ctx, reinterpret_cast<simpler_context_stats*>(buf.data())) ==
          SIMPLER_OK);
  for (std::size_t i = old_size; i < buf.size(); ++i) {
    INFO("byte " << i);
    CHECK(buf[i] == 0xAB);
  }
  simpler_context_stats got{};
  std::memcpy(&got, buf.data(), old_size);
  CHECK(got.struct_size == old_size);
  CHECK(got.runs == 1);
}

TEST_CASE("a context destroyed right after a run, or before any, stops its parked threads",
          "[device][run-on][lifecycle]") {
  {
    // A first context and run, not counted: the process's own helper threads that start with
    // the first thread it creates (a sanitizer's background thread) are there from now on.
    Device warm;
    REQUIRE(warm.run(kChain, 4) == SIMPLER_OK);
  }
  const std::size_t before = simpler::testing::other_thread_states().size();
  for (int i = 0; i < 30; ++i) {
    Device d;
    if (i % 2 == 0) {
      REQUIRE(d.run(kChain, 4) == SIMPLER_OK);
      REQUIRE(d.data[0] == 4);
    }
  }  // each ~Device destroys a context whose threads may still spin after the run
  // Every device thread was joined: none is left behind.
  CHECK(simpler::testing::other_thread_states().size() == before);
}

}  // namespace simpler_test_device_runtime
