// The task window (WorkerOptions::task_window): an orchestration that outruns its workers waits in
// submit once that many tasks are alive, so a run's memory is bounded whatever its length, its
// scopes, or its children. The wait ends when the workers catch up; it fails with a UsageError when
// only ending a scope could make room, with a TimeoutError past heap_wait, and with the run's error
// when a task fails meanwhile. Tasks accepted before any of these still run.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/child_modes.hpp"
#include "support/gate.hpp"
#include "support/matchers.hpp"
#include "support/recording_leaf.hpp"
#include "support/thread_states.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_engine_window {

using namespace simpler;
using namespace simpler::testing;

namespace {

/// These tests make the orchestration outrun its workers, often with tasks that wait for what
/// it does later: a backlog must not make a submit run such a task itself (caller_runs_tasks).
WorkerOptions window_options(int subs, std::uint32_t window) {
  WorkerOptions o = thread_options(subs);
  o.task_window = window;
  o.caller_runs_tasks = false;
  return o;
}

/// Submits `n` tasks of `h` (flat, or in inner scopes of `scope_len`), noting the most tasks
/// alive right after each submit.
std::uint32_t submit_many(Orchestrator& o, const CallableHandle& h, std::uint32_t n,
                          std::uint32_t scope_len = 0) {
  std::uint32_t most = 0;
  for (std::uint32_t i = 0; i < n;) {
    const std::uint32_t len = scope_len == 0 ? n : std::min(scope_len, n - i);
    std::optional<OrchestratorBase::Scope> s;
    if (scope_len != 0) s.emplace(o);
    for (std::uint32_t j = 0; j < len; ++j, ++i) {
      o.submit_sub(h, TaskArgs());
      most = std::max(most, o.live_tasks());
    }
  }
  return most;
}

}  // namespace

TEMPLATE_TEST_CASE("an orchestration that outruns its workers waits at the task window",
                   "[engine][window]", InThreads, InProcesses) {
  // Thread subs sleep per task; forked subs are slower than a submit anyway (a hand-off through
  // shared memory per task), so without the window the live count would climb into the
  // thousands.
  constexpr std::uint32_t kWindow = 96;
  WorkerOptions opts = options_for<TestType>(2);
  opts.task_window = kWindow;
  opts.caller_runs_tasks = false;  // else a backlog runs tasks at submit: it cannot outrun them
  Worker w(opts);
  auto slow = w.register_sub(
      "slow", [](TaskArgsView) { std::this_thread::sleep_for(std::chrono::microseconds(30)); });
  w.init();
  constexpr std::uint32_t kTasks = 6000;
  std::uint32_t most_flat = 0;
  std::uint32_t most_scoped = 0;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    most_flat = submit_many(o, slow, kTasks);
    most_scoped = submit_many(o, slow, kTasks, 1000);
  });
  INFO("most alive: flat " << most_flat << ", in scopes of 1000 " << most_scoped);
  CHECK(most_flat <= kWindow);
  CHECK(most_scoped <= kWindow);
  // The window was reached, so the test did exercise the wait.
  CHECK(most_flat == kWindow);
  CHECK(w.orchestrator().slot_capacity() <= 1024);  // one chunk of slots
  const WorkerStats st = w.stats();
  CHECK(st.tasks_submitted == 2 * kTasks);
  CHECK(st.tasks_completed == 2 * kTasks);
  // Each wait lasts until a quarter of the window is free (24 tasks), or, on a machine so loaded
  // that 24 tasks take 10 ms (kWindowTick), settles for fewer: a dev build running beside the
  // suite gave 800 waits here. A wait per free slot (the mutant) would be ~12000.
  CHECK(st.window_waits >= 1);
  CHECK(st.window_waits <= 2 * kTasks / 8);
  CHECK(w.orchestrator().live_tasks() == 0);
}

TEST_CASE("100k empty tasks on two forked subs stay within the task window",
          "[engine][window][process][memory]") {
  constexpr std::uint32_t kWindow = 2048;
  WorkerOptions opts = options_for<InProcesses>(2);
  opts.task_window = kWindow;
  Worker w(opts);
  auto empty = w.register_sub("empty", [](TaskArgsView) {});
  w.init();
  std::uint32_t most = 0;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    most = submit_many(o, empty, 100'000);
  });
  INFO("most alive " << most);
  CHECK(most <= kWindow);
  CHECK(w.orchestrator().slot_capacity() <= kWindow + 1024);
  CHECK(w.stats().tasks_completed == 100'000);
}

TEST_CASE("a window of one still runs a chain in order", "[engine][window]") {
  // Each task must finish and give its slot back before the next can even be submitted.
  Worker w(window_options(2, 1));
  auto inc = w.register_sub("inc", [](TaskArgsView v) { ++*v.tensor(0).as<std::int64_t>(); });
  w.init();
  std::int64_t word = 0;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < 500; ++i) {
      o.submit_sub(inc, TaskArgs().add_tensor(make_tensor(&word, {1}, DataType::Int64),
                                              TensorArgType::InOut));
      CHECK(o.live_tasks() <= 1);
    }
  });
  CHECK(word == 500);
}

TEST_CASE("a task window full of heap owners of open scopes is a UsageError naming the fix",
          "[engine][window][bad-input]") {
  constexpr std::uint32_t kWindow = 16;
  Worker w(window_options(2, kWindow));
  std::atomic<int> ran{0};
  auto out = w.register_sub("out", [&](TaskArgsView v) {
    *v.tensor(0).as<std::int64_t>() = 1;
    ran.fetch_add(1);
  });
  w.init();
  const auto output = [] {
    return TaskArgs().add_tensor(make_tensor(nullptr, {1}, DataType::Int64), TensorArgType::Output);
  };
  SECTION("submit") {
    bool threw = false;
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      // Each task owns its auto-allocated output until the run's scope ends.
      for (std::uint32_t i = 0; i < kWindow; ++i) o.submit_sub(out, output());
      CHECK_THROWS_MATCHES(o.submit_sub(out, output()), UsageError,
                           WhatContains("task_window = 16") && WhatContains("inner scope"));
      threw = true;
      // An orch.alloc buffer needs a place in the window as well.
      CHECK_THROWS_AS(o.alloc({1}, DataType::Int64), UsageError);
    });
    CHECK(threw);
    CHECK(ran.load() == static_cast<int>(kWindow));  // nothing accepted was lost
  }
  SECTION("alloc") {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (std::uint32_t i = 0; i < kWindow; ++i) (void)o.alloc({4}, DataType::Int64);
      CHECK_THROWS_MATCHES(o.alloc({4}, DataType::Int64), UsageError,
                           WhatContains("Orchestrator::alloc") && WhatContains("task_window"));
    });
  }
  SECTION("the same work in inner scopes fits") {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (int round = 0; round < 20; ++round) {
        auto s = o.scope();
        for (std::uint32_t i = 0; i < kWindow / 2; ++i) o.submit_sub(out, output());
      }
    });
    CHECK(ran.load() == 20 * static_cast<int>(kWindow / 2));
  }
}

TEST_CASE("a task window that stays full past heap_wait is a TimeoutError",
          "[engine][window][timeout]") {
  WorkerOptions opts = window_options(2, 4);
  opts.heap_wait = std::chrono::milliseconds(300);
  Worker w(opts);
  Gate gate;
  std::atomic<int> ran{0};
  auto blocked = w.register_sub("blocked", [&](TaskArgsView) {
    gate.wait();
    ran.fetch_add(1);
  });
  w.init();
  std::chrono::milliseconds waited{0};
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < 4; ++i) o.submit_sub(blocked, TaskArgs());
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_MATCHES(o.submit_sub(blocked, TaskArgs()), TimeoutError,
                         WhatContains("task_window = 4") && WhatContains("300 ms") &&
                             WhatContains("4 of them not finished"));
    waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - t0);
    gate.open();
  });
  CHECK(waited >= std::chrono::milliseconds(250));
  CHECK(ran.load() == 4);
  // The Worker is fine afterwards.
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < 10; ++i) o.submit_sub(blocked, TaskArgs());
  });
  CHECK(ran.load() == 14);
}

TEST_CASE("a window TimeoutError counts unfinished tasks of scopes that already ended",
          "[engine][window][timeout]") {
  WorkerOptions opts = window_options(2, 4);
  opts.heap_wait = std::chrono::milliseconds(200);
  Worker w(opts);
  Gate gate;
  auto blocked = w.register_sub("blocked", [&](TaskArgsView) { gate.wait(); });
  w.init();
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    {
      auto s = o.scope();  // ended below: its 4 tasks are alive, but in no open scope's frame
      for (int i = 0; i < 4; ++i) o.submit_sub(blocked, TaskArgs());
    }
    CHECK_THROWS_MATCHES(o.submit_sub(blocked, TaskArgs()), TimeoutError,
                         WhatContains("4 tasks alive, 4 of them not finished"));
    gate.open();
  });
}

TEST_CASE("the run's deadline bounds a wait for the task window", "[engine][window][timeout]") {
  WorkerOptions opts = window_options(1, 2);
  opts.run_timeout = std::chrono::milliseconds(200);  // well before heap_wait (10 s)
  Worker w(opts);
  // Static: the run's deadline abandons the lane, whose thread may still be inside wait() (or
  // unlocking the gate's mutex) when this test returns.
  static Gate gate;
  auto blocked = w.register_sub("blocked", [](TaskArgsView) { gate.wait(); });
  w.init();
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_MATCHES(w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    struct Open {
      Gate& g;
      ~Open() { g.open(); }
    } open{gate};
    for (int i = 0; i < 3; ++i) o.submit_sub(blocked, TaskArgs());
  }),
                       TimeoutError, WhatContains("deadline of 200 ms"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}

TEST_CASE("a task that fails while submit waits for the window ends the wait with its error",
          "[engine][window][failure]") {
  Worker w(window_options(2, 2));
  Gate first;   // the failing task's
  Gate second;  // the other task's: opened once the waiting submit threw (or after 3 s)
  auto fails = w.register_sub("fails", [&](TaskArgsView) {
    first.wait();
    throw std::runtime_error("boom from the first task");
  });
  auto blocked = w.register_sub("blocked", [&](TaskArgsView) { second.wait(); });
  w.init();
  std::string caught;
  std::jthread opener([&] {
    // The failure lands while the third submit waits for the window (the stat counts the wait
    // before it sleeps; 10 s at most, so a broken wait cannot hang the test).
    eventually([&] { return w.stats().window_waits >= 1; });
    first.open();
    for (int i = 0; i < 300 && !second.is_open(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    second.open();
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_MATCHES(w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_sub(fails, TaskArgs());
    o.submit_sub(blocked, TaskArgs());
    try {
      o.submit_sub(blocked, TaskArgs());  // waits: two alive, and only the failing one ends
    } catch (const TaskError& e) {
      caught = e.what();
      second.open();
      throw;
    }
  }),
                       TaskError, WhatContains("boom from the first task"));
  CHECK(caught.find("boom from the first task") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(2500));
}

// A consumer holds no reference on its producers: once a producer finished, its slot (and its
// place in the window) comes back though a consumer still waits for another producer. Window 4,
// full with P (finished), G and H (gated) and C (reading P and G): the next submit must find P's
// place. Were P held until C ends, nothing in the window could come back before the gate opens,
// and the submit would end in a TimeoutError.
TEST_CASE("a finished producer gives its window place back while its consumer still waits",
          "[engine][window]") {
  WorkerOptions opts = window_options(2, 4);
  opts.heap_wait = std::chrono::milliseconds(1000);
  Worker w(opts);
  Gate first;
  Gate second;
  // Waits for gate scalar 1 (0: first, 1: second), then writes scalar 0 into tensor 0.
  auto gated_set = w.register_sub("gated_set", [&](TaskArgsView v) {
    (v.scalar(1) == 0 ? first : second).wait();
    *v.tensor(0).as<std::int64_t>() = static_cast<std::int64_t>(v.scalar(0));
  });
  auto add = w.register_sub("add", [](TaskArgsView v) {
    *v.tensor(2).as<std::int64_t>() =
        *v.tensor(0).as<const std::int64_t>() + *v.tensor(1).as<const std::int64_t>();
  });
  auto empty = w.register_sub("empty", [](TaskArgsView) {});
  w.init();
  std::int64_t p_word = 0;
  std::int64_t g_word = 0;
  std::int64_t h_word = 0;
  std::int64_t sum = 0;
  const auto word = [](std::int64_t& x) { return make_tensor(&x, {1}, DataType::Int64); };
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    const SubmitResult p =
        o.submit_sub(gated_set, TaskArgs()
                                    .add_tensor(word(p_word), TensorArgType::OutputExisting)
                                    .add_scalar(5)
                                    .add_scalar(0));
    o.submit_sub(gated_set, TaskArgs()
                                .add_tensor(word(g_word), TensorArgType::OutputExisting)
                                .add_scalar(7)
                                .add_scalar(1));
    o.submit_sub(add, TaskArgs()
                          .add_tensor(word(p_word), TensorArgType::Input)
                          .add_tensor(word(g_word), TensorArgType::Input)
                          .add_tensor(word(sum), TensorArgType::OutputExisting));
    first.open();
    CHECK(eventually([&] { return o.state_of(p.slot_id) == TaskState::Completed; }));
    o.submit_sub(gated_set, TaskArgs()
                                .add_tensor(word(h_word), TensorArgType::OutputExisting)
                                .add_scalar(9)
                                .add_scalar(1));
    REQUIRE(o.live_tasks() == 4);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_NOTHROW(o.submit_sub(empty));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(500));
    second.open();
  });
  CHECK(sum == 12);
  CHECK(h_word == 9);
}

TEST_CASE("a submit at a full window waits for a quarter of it, then takes any free slot",
          "[engine][window]") {
  // Window 64: a submit that finds it full gives back what finished, and returns at once only
  // when 16 slots (a quarter) are free; else every few finished tasks would cost a walk over the
  // whole window. With fewer free it waits, and past a 10 ms tick settles for what there is, so
  // an orchestration still moves while tasks finish slowly.
  constexpr std::uint32_t kWindow = 64;
  Worker w(window_options(2, kWindow));
  std::atomic<std::uint64_t> released{0};
  // Task i runs once more than i tasks were released (at most 10 s: a failing test cannot hang).
  auto gated = w.register_sub("gated", [&](TaskArgsView v) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (released.load() <= v.scalars[0] && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  });
  w.init();
  auto task = [](std::uint64_t i) {
    TaskArgs a;
    a.add_scalar(i);
    return a;
  };
  std::chrono::steady_clock::duration blocked{};
  std::uint64_t released_when_back = 0;
  std::uint32_t live_when_back = 0;
  bool first_four_done = false;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    std::vector<TaskSlot> slots;
    for (std::uint64_t i = 0; i < kWindow; ++i)
      slots.push_back(o.submit_sub(gated, task(i)).slot_id);
    released.store(4);
    first_four_done = eventually([&] {
      return std::all_of(slots.begin(), slots.begin() + 4,
                         [&](TaskSlot s) { return o.state_of(s) == TaskState::Completed; });
    });
    const auto t0 = std::chrono::steady_clock::now();
    o.submit_sub(gated, task(kWindow));  // 4 free: too few to return at once
    blocked = std::chrono::steady_clock::now() - t0;
    released_when_back = released.load();
    live_when_back = o.live_tasks();
    released.store(1'000'000);
  });
  REQUIRE(first_four_done);
  CHECK(w.stats().window_waits == 1);
  // It waited (for the tick: nothing else finished) rather than taking one of the 4 at once...
  CHECK(blocked >= std::chrono::milliseconds(5));
  // ... and then went on with what was free, without waiting for more tasks to finish (nor
  // until heap_wait, 10 s).
  CHECK(blocked < std::chrono::seconds(2));
  CHECK(released_when_back == 4);
  CHECK(live_when_back == kWindow - 4 + 1);
}

TEST_CASE("WorkerOptions::task_window out of range is refused", "[engine][window][bad-input]") {
  WorkerOptions o = thread_options(1);
  o.task_window = 0;
  CHECK_THROWS_MATCHES(Worker(o), UsageError, WhatContains("WorkerOptions::task_window is 0"));
  o.task_window = (std::uint32_t{1} << 24) + 1;
  CHECK_THROWS_MATCHES(Worker(o), UsageError, WhatContains("it must be 1..16777216"));
}

TEST_CASE("a lane's run of kept successors gives its finished slots to a window wait at once",
          "[engine][window]") {
  // A lane running successors it made ready itself hands their slots to the Orchestrator in
  // batches (RetireBatch), but at once while the Orchestrator waits for its task window
  // (EngineCore::complete). Here the batch is the only way the window can open: c2..c4 of the
  // chain end on that lane after their scope ended, c5, which follows them there, waits for a
  // task submitted only once the window has room, and every other task alive owns heap bytes of
  // the open scope. Held until the batch fills, their slots would keep the window full until
  // heap_wait.
  WorkerOptions opts = window_options(2, 8);  // a wait ends with 2 free places
  opts.heap_wait = std::chrono::milliseconds(2000);
  Worker w(opts);
  std::int64_t x = 0;
  Gate chain_may_start;
  Gate tail_released;
  std::atomic<pid_t> orch_tid{0};
  auto step = w.register_sub("step", [](TaskArgsView) {});
  auto first = w.register_sub("first", [&](TaskArgsView) { chain_may_start.wait(); });
  // Returns once the Orchestrator sleeps in its window wait (counted once its flag is up; the
  // only sleep after that count is the wait itself).
  auto until_waiting = w.register_sub("until_waiting", [&](TaskArgsView) {
    await_asleep(
        orch_tid, [&] { return w.stats().window_waits != 0; },
        "the Orchestrator never slept in its window wait");
  });
  auto tail = w.register_sub(
      "tail", [&](TaskArgsView) { tail_released.wait(std::chrono::milliseconds(4000)); });
  auto release = w.register_sub("release", [&](TaskArgsView) { tail_released.open(); });
  auto owner = w.register_sub("owner", [](TaskArgsView) {});
  w.init();
  const auto on_x = [&] {
    return TaskArgs().add_tensor(make_tensor(&x, {1}, DataType::Int64), TensorArgType::InOut);
  };
  std::uint32_t live_at_wait = 0;
  CHECK_NOTHROW(w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    orch_tid = ::gettid();
    // The chain runs on sub worker 0, everything else on 1 (not queued behind c5).
    // c1 owns heap bytes, so it keeps its place until the run ends, like the owners below.
    o.submit_sub(
        first,
        on_x().add_tensor(make_tensor(nullptr, {16}, DataType::Float32), TensorArgType::Output), 0);
    {
      auto inner = o.scope();  // ends before c2 starts: the lane drops their last references
      o.submit_sub(step, on_x(), 0);
      o.submit_sub(step, on_x(), 0);
      o.submit_sub(until_waiting, on_x(), 0);
    }
    o.submit_sub(tail, on_x(), 0);
    chain_may_start.open();
    for (int i = 0; i < 3; ++i) {
      o.submit_sub(owner,
                   TaskArgs().add_tensor(make_tensor(nullptr, {16}, DataType::Float32),
                                         TensorArgType::Output),
                   1);
    }
    live_at_wait = o.live_tasks();
    o.submit_sub(release, {}, 1);  // waits for the window
  }));
  CHECK(live_at_wait == 8);  // the submit above had to wait
  CHECK(tail_released.is_open());
  CHECK(w.stats().window_waits >= 1);
}

}  // namespace simpler_test_engine_window
