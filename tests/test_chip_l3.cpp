// Chips as a Worker's next-level children (L3): WorkerOptions::device_ids, register_chip, chip
// tasks next to sub tasks, in threads and in forked processes.
#include <catch2/catch.hpp>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include <simpler/simpler.hpp>

#include "support/child_modes.hpp"
#include "support/chip_modules.hpp"
#include "support/gate.hpp"
#include "support/matchers.hpp"
#include "support/shared_arena.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_chip_l3 {

using namespace simpler;
using namespace simpler::testing;
using Catch::Matchers::Contains;

namespace {
/// An L3 with chips on devices 0 and 1 and two sub workers, children per Mode.
template <class Mode>
WorkerOptions chip_options(std::vector<int> devices = {0, 1}, int subs = 2) {
  WorkerOptions o = options_for<Mode>(subs);
  o.device_ids = std::move(devices);
  return o;
}

TaskArgs fill_args(const ContinuousTensor& t, std::int64_t value) {
  TaskArgs a;
  a.add_tensor(t, TensorArgType::OutputExisting).add_scalar(static_cast<std::uint64_t>(value));
  return a;
}

/// Sends a task naming the chip callable `name` straight to the forked child of chip lane
/// `chip` (between runs, the way register_chip reaches it), bypassing the Worker's registry, and
/// returns how it ended: what that chip itself knows about the callable.
std::pair<Outcome, Fault> run_on_chip_child(Worker& w, const std::string& chip,
                                            const std::string& name) {
  std::pair<Outcome, Fault> out{Outcome::Skipped, Fault{}};
  w.scheduler().for_each_lane([&](auto& lane) {
    using L = std::remove_cvref_t<decltype(lane)>;
    if constexpr (std::is_same_v<typename L::leaf_type, ChipWorker> &&
                  std::is_same_v<typename L::transport_type, ForkShmTransport>) {
      if (lane.name != chip) return;
      LeafRequest r;
      r.digest = callable_digest(CallableKind::Chip, name);
      r.config = &default_call_config();
      out.first = lane.endpoint().execute(r, out.second);
    }
  });
  return out;
}
}  // namespace

TEMPLATE_TEST_CASE("a chip task writes heap-ring memory that a sub task then reads",
                   "[chip][l3][sim]", InThreads, InProcesses) {
  SharedArena arena;  // before init(): forked children see it
  auto seen = arena.make<std::int64_t>(8, 0);
  Worker w(chip_options<TestType>());
  CHECK(w.next_level_count() == 2);
  const auto fill = w.register_chip(chipw_callable("fill", "fill"));
  // Copies its 4-element input into seen[4 * scalar 0 ...].
  const auto copy = w.register_sub("copy", [&](TaskArgsView v) {
    const auto* src = v.tensor(0).as<std::int64_t>();
    std::copy(src, src + 4, seen.data() + 4 * v.scalar(0));
  });
  w.init();
  for (std::int64_t rep = 0; rep < 3; ++rep) {
    std::fill(seen.begin(), seen.end(), 0);
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (WorkerId chip = 0; chip < 2; ++chip) {
        const ContinuousTensor t = o.alloc({4}, DataType::Int64);  // heap ring: shared memory
        o.submit_next_level(fill, fill_args(t, 10 * rep + chip), default_call_config(), chip);
        TaskArgs read;
        read.add_tensor(t, TensorArgType::Input).add_scalar(static_cast<std::uint64_t>(chip));
        o.submit_sub(copy, std::move(read));  // runs after the chip task: it reads t
      }
    });
    for (std::size_t i = 0; i < 8; ++i) {
      CHECK(seen[i] == 10 * rep + static_cast<std::int64_t>(i / 4));
    }
  }
  w.close();
}

TEMPLATE_TEST_CASE("two chip children run at the same time, each on its own device",
                   "[chip][l3][sim]", InThreads, InProcesses) {
  SharedArena arena;
  auto& counter = arena.one<std::int32_t>(0);
  auto out = arena.make<std::int64_t>(2, 0);
  Worker w(chip_options<TestType>({0, 1}, 0));
  const auto meet = w.register_chip(chipw_callable("meet", "meet"));
  w.init();
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (WorkerId chip = 0; chip < 2; ++chip) {
      TaskArgs a;
      // NoDep: both tasks use the counter, and must not be ordered by it.
      a.add_tensor(make_tensor(&counter, {1}, DataType::Int32), TensorArgType::NoDep)
          .add_tensor(make_tensor(&out[chip], {1}, DataType::Int64), TensorArgType::OutputExisting)
          .add_scalar(2)
          .add_scalar(100 + chip);
      o.submit_next_level(meet, std::move(a), default_call_config(), chip);
    }
  });
  CHECK(counter == 2);  // both kernels arrived before either left: they ran at the same time
  CHECK(out[0] == 100);
  CHECK(out[1] == 101);
  w.close();
}

// A chip lane in this process counts as every core while it runs a task
// (WorkerThread::kAwakeWeight = AwakeThreads::kCrowd): the simulated device's own threads spin
// beside it, counted, if at all, in the device runtime's copy of the count. So every engine
// spinner of the process yields its core while a chip runs; a chip lane that counted 1 would
// leave the process looking uncrowded on two cores.
TEST_CASE("a chip lane in threads counts as every core while its chip runs a task",
          "[chip][l3][sim][idle]") {
  using detail::AwakeThreads;
  const int before = AwakeThreads::count();
  SharedArena arena;
  auto& counter = arena.one<std::int32_t>(0);
  auto out = arena.make<std::int64_t>(1, 0);
  Worker w(chip_options<InThreads>({0}, 0));
  const auto meet = w.register_chip(chipw_callable("meet", "meet"));
  w.init();
  int running = 0;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    TaskArgs a;
    // The kernel waits until two parties arrived: this one, then the orchestration's below.
    a.add_tensor(make_tensor(&counter, {1}, DataType::Int32), TensorArgType::NoDep)
        .add_tensor(make_tensor(out.data(), {1}, DataType::Int64), TensorArgType::OutputExisting)
        .add_scalar(2)
        .add_scalar(7);
    o.submit_next_level(meet, std::move(a), default_call_config(), 0);
    std::atomic_ref<std::int32_t> arrived(counter);
    REQUIRE(eventually([&] { return arrived.load() == 1; }));
    running = AwakeThreads::count();
    CHECK(AwakeThreads::crowded());
    arrived.fetch_add(1);
    ::syscall(SYS_futex, &counter, FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0);
  });
  CHECK(out[0] == 7);
  CHECK(running >= before + AwakeThreads::kCrowd);
  // Asleep again, the lane's weight is off the count.
  CHECK(eventually([&] { return AwakeThreads::count() < before + AwakeThreads::kCrowd; }));
  w.close();
  CHECK(AwakeThreads::count() == before);
}

TEMPLATE_TEST_CASE("a failing chip task fails the run with a TaskError naming the chip",
                   "[chip][l3][sim][failure]", InThreads, InProcesses) {
  SharedArena arena;
  auto out = arena.make<std::int64_t>(4, 0);
  Worker w(chip_options<TestType>({0, 1}, 0));
  const auto fill = w.register_chip(chipw_callable("fill", "fill"));
  const auto fail = w.register_chip(chipw_callable("fail", "fail"));
  w.init();
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(fail, fill_args(make_tensor(&out[0], {1}, DataType::Int64), 1),
                          default_call_config(), 1);
      // Independent of the failing task: still runs.
      o.submit_next_level(fill, fill_args(make_tensor(&out[1], {1}, DataType::Int64), 7),
                          default_call_config(), 0);
    });
    FAIL("run() succeeded");
  } catch (const TaskError& e) {
    CHECK(e.outcome() == Outcome::TaskFailure);
    // The device's status survives the lane (and, with processes, the mailbox) as data.
    CHECK(e.error_kind() == ErrorKind::Device);
    CHECK(e.code() == SIMPLER_ERR_KERNEL_FAILED);
    CHECK(e.worker() == "chip 1");
    CHECK(e.callable() == "fail");
    CHECK_THAT(e.message(), Contains("ChipWorker::run('fail' as callable 1) on device 1") &&
                                Contains("SIMPLER_ERR_KERNEL_FAILED") &&
                                Contains("chipw_fail: this kernel always fails"));
    CHECK_THAT(e.what(), Contains("L3 chip 1: callable 'fail' failed"));
  }
  CHECK(out[1] == 7);
  // The next run is clean, on the chip that failed too.
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(fill, fill_args(make_tensor(&out[2], {1}, DataType::Int64), 8),
                        default_call_config(), 1);
  });
  CHECK(out[2] == 8);
  w.close();
}

TEMPLATE_TEST_CASE("a chip child whose device runtime fails to start makes init() throw",
                   "[chip][l3][failure]", InThreads, InProcesses) {
  WorkerOptions o = chip_options<TestType>({0}, 1);
  o.device_runtime = device_module_file("test_runtime_init_fails.so");
  Worker w(o);
  CHECK_THROWS_MATCHES(w.init(), Error,
                       WhatContains("SIMPLER_ERR_SYSTEM") &&
                           WhatContains("could not start the AICPU threads of device 0"));
  CHECK_THROWS_MATCHES(w.run([](Orchestrator&, TaskArgsView, const CallConfig&) {}), UsageError,
                       WhatContains("init() failed"));
}

TEMPLATE_TEST_CASE(
    "a chip handle directed at a nested Worker, or an orch handle at a chip, is refused at submit",
    "[chip][l3][failure]", InThreads, InProcesses) {
  FakeRuntime fake("fake");
  WorkerOptions o = chip_options<TestType>({0}, 0);
  o.chip.device_runtime = fake.path();
  Worker w(o);
  CHECK(w.add_worker(Worker(options_for<TestType>(0))) == 1);  // after the chip
  const auto chip = w.register_chip(chipw_callable("fill", "fill"));
  const auto orch = w.register_orch("inner", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
  w.init();
  const auto submit_to = [&](const CallableHandle& h, WorkerId worker) {
    w.run([&](Orchestrator& orc, TaskArgsView, const CallConfig&) {
      orc.submit_next_level(h, TaskArgs{}, default_call_config(), worker);
    });
  };
  CHECK_THROWS_MATCHES(submit_to(chip, 1), UsageError,
                       WhatContains("next-level worker 1 ('next-level worker 1 (L3)') cannot run "
                                    "'fill', a chip callable"));
  CHECK_THROWS_MATCHES(submit_to(orch, 0), UsageError,
                       WhatContains("next-level worker 0 ('chip 0') cannot run 'inner', a orch "
                                    "callable"));
  submit_to(orch, 1);  // both still work
  submit_to(chip, 0);
  w.close();
}

TEMPLATE_TEST_CASE(
    "in a mixed pool, any_worker routes chip callables to chips and orchestration "
    "functions to nested Workers",
    "[chip][l3][routing]", InThreads, InProcesses) {
  FakeRuntime fake("fake");
  WorkerOptions o = chip_options<TestType>({0, 1}, 0);
  o.chip.device_runtime = fake.path();
  Worker w(o);
  CHECK(w.add_worker(Worker(options_for<TestType>(0))) == 2);
  CHECK(w.add_worker(Worker(options_for<TestType>(0))) == 3);
  const auto chip = w.register_chip(chipw_callable("fill", "fill"));
  const auto orch = w.register_orch("inner", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
  w.init();
  // Interleaved, many more than the lanes hold: before routing knew what each lane runs, about
  // half of these landed on a lane that could not run them and failed the run.
  w.run([&](Orchestrator& orc, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < 64; ++i) {
      orc.submit_next_level(i % 2 == 0 ? chip : orch, TaskArgs{});
    }
  });
  // A group of chip members with no named workers takes the chips, never a nested Worker.
  w.run([&](Orchestrator& orc, TaskArgsView, const CallConfig&) {
    orc.submit_next_level_group(chip, std::vector<TaskArgs>(2));
  });
  // Three chip members cannot be placed on two chips, whatever the pool's size.
  CHECK_THROWS_MATCHES(w.run([&](Orchestrator& orc, TaskArgsView, const CallConfig&) {
    orc.submit_next_level_group(chip, std::vector<TaskArgs>(3));
  }),
                       UsageError,
                       WhatContains("a group of 3 members needs as many next-level workers that "
                                    "run chip callables, this Worker has 2"));
  w.close();
}

TEMPLATE_TEST_CASE("register_chip checks a chip callable before any chip sees it",
                   "[chip][l3][failure]", InThreads, InProcesses) {
  Worker w(chip_options<TestType>({0}, 0));
  const ChipCallable good = chipw_callable("good", "fill");
  ChipCallable c = good;
  c.name.clear();
  CHECK_THROWS_MATCHES(w.register_chip(c), UsageError, WhatContains("ChipCallable::name is empty"));
  c = good;
  c.orchestration = "missing_orch.so";
  CHECK_THROWS_MATCHES(w.register_chip(c), UsageError,
                       WhatContains("orchestration 'missing_orch.so' does not exist"));
  c = good;
  c.kernels.push_back({0, good.kernels[0].path});
  CHECK_THROWS_MATCHES(w.register_chip(c), UsageError,
                       WhatContains("kernels[1].func_id 0 is used by an earlier kernel"));
  c = good;
  c.kernels[0].func_id = 1024;
  CHECK_THROWS_MATCHES(w.register_chip(c), UsageError, WhatContains("func_id is 1024"));
  c = good;
  c.kernels[0].path = "/nonexistent/kernel.so";
  CHECK_THROWS_MATCHES(w.register_chip(c), UsageError,
                       WhatContains("kernels[0].path '/nonexistent/kernel.so' (func_id 0) does "
                                    "not exist"));
  const auto h = w.register_chip(good);
  CHECK(h.kind == CallableKind::Chip);
  CHECK(h.digest == callable_digest(CallableKind::Chip, "good"));
  CHECK_THROWS_MATCHES(w.register_chip(good), UsageError,
                       WhatContains("a chip callable named 'good' is already registered"));
  // A chip callable cannot go to a sub worker.
  w.init();
  CHECK_THROWS_MATCHES(
      w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) { o.submit_sub(h); }), UsageError,
      WhatContains("'good' is a chip callable"));
  w.close();
}

TEST_CASE("with forked chips, a chip callable registered after init() reaches every chip",
          "[chip][l3][sim]") {
  SharedArena arena;
  auto out = arena.make<std::int64_t>(3, 0);
  Worker w(chip_options<InProcesses>({0, 1}, 0));
  const auto first = w.register_chip(chipw_callable("first", "fill"));
  w.init();
  const auto late = w.register_chip(chipw_callable("late", "fill"));
  for (int rep = 0; rep < 2; ++rep) {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(first, fill_args(make_tensor(&out[0], {1}, DataType::Int64), 1 + rep),
                          default_call_config(), 0);
      for (WorkerId chip = 0; chip < 2; ++chip) {
        o.submit_next_level(
            late, fill_args(make_tensor(&out[1 + chip], {1}, DataType::Int64), 10 * chip + rep),
            default_call_config(), chip);
      }
    });
    CHECK(out[0] == 1 + rep);
    CHECK(out[1] == rep);
    CHECK(out[2] == 10 + rep);
  }
  w.close();
}

TEST_CASE("a chip callable a forked chip refuses after init() is withdrawn, naming the chip",
          "[chip][l3][sim][bad-input]") {
  SharedArena arena;
  auto out = arena.make<std::int64_t>(1, 0);
  Worker w(chip_options<InProcesses>({0, 1}, 0));
  w.init();
  ChipCallable bad = chipw_callable("late", "fill");
  bad.kernels[0].path = bad.orchestration;  // exists, but exports no kernel_entry
  // Chip 0 is asked first and refuses: the device's status comes back with the refusal.
  try {
    w.register_chip(bad);
    FAIL("register_chip accepted a callable no chip can load");
  } catch (const DeviceError& e) {
    CHECK_THAT(e.what(),
               Contains("register_chip('late'): chip 0 refused it") && Contains("kernel_entry"));
    CHECK(e.status() == SIMPLER_ERR_LOAD_FAILED);
  }
  // Neither chip holds it: a task naming it is unknown to each chip itself.
  for (const std::string chip : {"chip 0", "chip 1"}) {
    const auto [outcome, fault] = run_on_chip_child(w, chip, "late");
    CHECK(outcome == Outcome::TaskFailure);
    CHECK_THAT(fault.message, Contains("no chip callable with digest"));
  }
  // The name is free again and a good callable under it runs.
  const auto good = w.register_chip(chipw_callable("late", "fill"));
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(good, fill_args(make_tensor(&out[0], {1}, DataType::Int64), 7),
                        default_call_config(), 1);
  });
  CHECK(out[0] == 7);
  w.close();
}

TEST_CASE("a late chip callable too large for a mailbox is refused before any chip sees it",
          "[chip][l3][bad-input]") {
  SharedArena arena;
  auto out = arena.make<std::int64_t>(1, 0);
  Worker w(chip_options<InProcesses>({0, 1}, 0));
  w.init();
  ChipCallable big = chipw_callable(std::string(detail::kMailboxBlobCapacity, 'n'), "fill");
  CHECK_THROWS_MATCHES(w.register_chip(big), UsageError,
                       WhatContains("mailbox payload that carries callables registered after "
                                    "init() to forked chips; register it before init()"));
  for (const std::string chip : {"chip 0", "chip 1"}) {
    CHECK_THAT(run_on_chip_child(w, chip, big.name).second.message,
               Contains("no chip callable with digest"));
  }
  // The Worker and its chips are unchanged: a late callable that fits still reaches them.
  const auto good = w.register_chip(chipw_callable("late", "fill"));
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(good, fill_args(make_tensor(&out[0], {1}, DataType::Int64), 5),
                        default_call_config(), 1);
  });
  CHECK(out[0] == 5);
  w.close();
}

TEST_CASE("with chips in threads, a chip callable registered after init() runs",
          "[chip][l3][sim]") {
  std::array<std::int64_t, 2> out{};
  Worker w(chip_options<InThreads>({0}, 0));
  const auto first = w.register_chip(chipw_callable("first", "fill"));
  w.init();
  const auto late = w.register_chip(chipw_callable("late", "fill"));
  for (int rep = 0; rep < 2; ++rep) {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(first, fill_args(make_tensor(&out[0], {1}, DataType::Int64), 1 + rep));
      o.submit_next_level(late, fill_args(make_tensor(&out[1], {1}, DataType::Int64), 3 + rep));
    });
    CHECK(out[0] == 1 + rep);
    CHECK(out[1] == 3 + rep);
  }
  w.close();
}

TEST_CASE("chips are next-level workers 0..n-1 in device_ids order, before added Workers",
          "[chip][l3]") {
  WorkerOptions o = chip_options<InThreads>({5, 3}, 0);
  Worker w(o);
  CHECK(w.next_level_count() == 2);
  CHECK(w.add_worker(Worker(options_for<InThreads>(0))) == 2);
  std::map<WorkerId, std::string> names;
  w.scheduler().for_each_lane([&](auto& lane) {
    if (lane.role == detail::Role::NextLevel) names[lane.id] = lane.name;
  });
  CHECK(names.at(0) == "chip 5");
  CHECK(names.at(1) == "chip 3");
  CHECK(names.at(2) == "next-level worker 2 (L3)");
}

TEST_CASE("WorkerOptions::device_ids rejects negative and repeated ids", "[chip][l3][failure]") {
  CHECK_THROWS_MATCHES(Worker(chip_options<InThreads>({0, -1}, 0)), UsageError,
                       WhatContains("device_ids[1] is -1"));
  CHECK_THROWS_MATCHES(Worker(chip_options<InThreads>({2, 1, 2}, 0)), UsageError,
                       WhatContains("device 2 appears twice"));
  WorkerOptions o = chip_options<InThreads>({0}, 0);
  o.device_runtime = "/a/runtime.so";
  o.chip.device_runtime = "/b/runtime.so";
  CHECK_THROWS_MATCHES(Worker(o), UsageError, WhatContains("differ"));
  o.chip.aicpu_thread_num = -1;
  o.chip.device_runtime.clear();
  CHECK_THROWS_MATCHES(Worker(o), UsageError, WhatContains("aicpu_thread_num"));
}

TEST_CASE("a chip child killed during a kernel fails its task and the other chip keeps working",
          "[chip][l3][failure]") {
  SharedArena arena;  // before init(): the chip children see it
  auto data = arena.make<std::int32_t>(16, 0);
  auto flag = arena.make<std::int32_t>(16, 0);
  WorkerOptions o;
  o.device_ids = {0, 1};
  o.child_mode = ChildMode::Process;
  Worker w(o);
  const std::string dir = SIMPLER_DEVICE_MODULE_DIR;
  const std::string orch = dir + "/test_orch_rt_cases.so";
  // rt_cases: scalar 0 picks the case (0: one task of func_id 0; 13: a chain of func_id 4).
  const auto dies = w.register_chip(
      {.name = "dies", .orchestration = orch, .kernels = {{0, dir + "/test_kernel_rt_die.so"}}});
  const auto inc = w.register_chip(
      {.name = "inc", .orchestration = orch, .kernels = {{4, dir + "/test_kernel_rt_inc.so"}}});
  w.init();
  auto args = [&](std::uint64_t which, std::uint64_t n) {
    TaskArgs a;
    a.add_tensor(make_tensor(std::span<std::int32_t>(data.data(), 16)), TensorArgType::InOut)
        .add_tensor(make_tensor(std::span<std::int32_t>(flag.data(), 16)), TensorArgType::Input)
        .add_scalar(which)
        .add_scalar(n);
    return a;
  };
  CHECK_THROWS_WITH(w.run([&](Orchestrator& orc, TaskArgsView, const CallConfig&) {
    orc.submit_next_level(dies, args(0, 1), default_call_config(), 0);
  }),
                    Contains("chip 0") && Contains("signal 9"));
  for (int rep = 1; rep <= 3; ++rep) {
    w.run([&](Orchestrator& orc, TaskArgsView, const CallConfig&) {
      orc.submit_next_level(inc, args(13, 5), default_call_config(), 1);
    });
    CHECK(data[0] == 5 * rep);
    CHECK(data[15] == 5 * rep);
  }
  CHECK_NOTHROW(w.close());  // the death was reported with its task, not again
}

TEST_CASE("a late chip callable the second chip cannot take is withdrawn from the first",
          "[chip][l3][failure]") {
  SharedArena arena;
  auto out = arena.make<std::int64_t>(1, 0);
  Worker w(chip_options<InProcesses>({0, 1}, 0));
  const std::string dir = SIMPLER_DEVICE_MODULE_DIR;
  const auto dies = w.register_chip({.name = "dies",
                                     .orchestration = dir + "/test_orch_rt_cases.so",
                                     .kernels = {{0, dir + "/test_kernel_rt_die.so"}}});
  const auto fill = w.register_chip(chipw_callable("fill", "fill"));
  w.init();
  // Chip 1 dies in a kernel (rt_cases case 0: one task of func_id 0).
  auto data = arena.make<std::int32_t>(16, 0);
  auto flag = arena.make<std::int32_t>(16, 0);
  CHECK_THROWS_AS(w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    TaskArgs a;
    a.add_tensor(make_tensor(data), TensorArgType::NoDep)
        .add_tensor(make_tensor(flag), TensorArgType::NoDep)
        .add_scalar(0)
        .add_scalar(1);
    o.submit_next_level(dies, std::move(a), default_call_config(), 1);
  }),
                  TaskError);
  // Chip 0 takes the late callable, chip 1 cannot: the registration fails naming chip 1 (so
  // chip 0 was asked first, and took it), chip 0 no longer holds it, and keeps running what it
  // had.
  CHECK_THROWS_MATCHES(w.register_chip(chipw_callable("late", "fill")), Error,
                       WhatContains("register_chip('late'): chip 1 refused it") &&
                           WhatContains("the child is gone"));
  const auto [outcome, fault] = run_on_chip_child(w, "chip 0", "late");
  CHECK(outcome == Outcome::TaskFailure);
  CHECK_THAT(fault.message, Contains("chip worker on device 0: no chip callable with digest"));
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(fill, fill_args(make_tensor(&out[0], {1}, DataType::Int64), 9),
                        default_call_config(), 0);
  });
  CHECK(out[0] == 9);
  CHECK_NOTHROW(w.close());
}

}  // namespace simpler_test_chip_l3
