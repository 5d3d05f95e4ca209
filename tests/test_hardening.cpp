// Misuse and stuck children (issue 8): each case reproduces a defect a probe found. Wrong-thread
// calls, re-entrant runs, children that never answer, private memory handed to forked children
// and null tensors are refused or fail with a message that names what was wrong; nothing hangs.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/child_modes.hpp"
#include "support/gate.hpp"
#include "support/matchers.hpp"
#include "support/recording_leaf.hpp"
#include "support/shared_arena.hpp"
#include "support/thread_states.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_hardening {

using namespace simpler;
using namespace simpler::testing;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

WorkerOptions process_options(int subs) {
  WorkerOptions o = thread_options(subs);
  o.child_mode = ChildMode::Process;
  return o;
}

/// Runs `orch` and returns the error run() threw (or an empty string).
template <class W, class F>
std::string run_error(W& w, F orch, const CallConfig& config = CallConfig{}) {
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) { orch(o); }, TaskArgs(), config);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

/// Calls `f` on a new thread and returns what it threw (empty when it returned).
template <class F>
std::string thrown_on_other_thread(F f) {
  std::string what = "<nothing thrown>";
  std::thread t([&] {
    try {
      f();
    } catch (const UsageError& e) {
      what = e.what();
    } catch (const std::exception& e) {
      what = std::string("not a UsageError: ") + e.what();
    }
  });
  t.join();
  return what;
}

std::int64_t g_private_value = 0;

/// What a stuck callable does: it returns only once the test releases it (after the run and
/// close() it tests returned), or after 30 s, so no test leaves a thread behind for long.
void stuck_until(const std::atomic<bool>& release) {
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (!release.load() && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(1ms);
}

}  // namespace

TEST_CASE("submit, alloc and scope calls from a thread that does not run the orchestration fail",
          "[hardening][thread]") {
  Worker w(thread_options(1));
  std::atomic<int> ran{0};
  auto count = w.register_sub("count", [&](TaskArgsView) { ++ran; });
  w.init();
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    CHECK_THAT(thrown_on_other_thread([&] { o.submit_sub(count); }),
               Contains("submit_sub") && Contains("thread"));
    CHECK_THAT(thrown_on_other_thread([&] { o.alloc({16}, DataType::Float32); }),
               Contains("alloc") && Contains("thread"));
    CHECK_THAT(thrown_on_other_thread([&] { o.scope_begin(); }),
               Contains("scope_begin") && Contains("thread"));
    CHECK_THAT(thrown_on_other_thread([&] { o.scope_end(); }), Contains("scope_end"));
    CHECK(o.scope_depth() == 1);  // nothing the other thread did took effect
    o.submit_sub(count);          // the owning thread still submits
  });
  CHECK(ran == 1);
}

TEMPLATE_TEST_CASE("run() from inside a sub callable is refused, never hangs",
                   "[hardening][reentrant]", InThreads, InProcesses) {
  SharedArena arena;
  auto& inner_ran = arena.one<std::atomic<int>>(0);
  auto& returned = arena.one<std::atomic<bool>>(false);
  Worker w(options_for<TestType>(1));
  auto noop = w.register_sub("noop", [](TaskArgsView) {});
  // The sub calls run() once the orchestration function has returned, so the call lands in the
  // run's fence, where the old in-run flag was already cleared.
  auto nested_run = w.register_sub("calls_run", [&](TaskArgsView) {
    eventually([&] { return returned.load(); });
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      ++inner_ran;
      o.submit_sub(noop);
    });
  });
  w.init();
  const std::string err = run_error(w, [&](Orchestrator& o) {
    o.submit_sub(nested_run);
    returned = true;
  });
  CHECK_THAT(err, Contains("calls_run") && Contains("Worker::run"));
  // In a forked child the Worker is a copy whose threads do not exist; in a thread the run is
  // still in its fence.
  CHECK_THAT(
      err, Contains(TestType::mode == ChildMode::Process ? "forked child" : "already in progress"));
  CHECK(inner_ran == 0);
  // The Worker still works.
  CHECK(run_error(w, [&](Orchestrator& o) { o.submit_sub(noop); }).empty());
}

TEST_CASE("run() and close() from another thread during a run are refused",
          "[hardening][reentrant]") {
  Gate release;  // outlives the Worker, whose lane thread last waited on it
  Worker w(thread_options(1));
  auto wait = w.register_sub("wait", [&](TaskArgsView) { release.wait(); });
  w.init();
  std::string run_err;
  std::string close_err;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_sub(wait);
    run_err = thrown_on_other_thread(
        [&] { w.run([](Orchestrator&, TaskArgsView, const CallConfig&) {}); });
    close_err = thrown_on_other_thread([&] { w.close(); });
    release.open();
  });
  CHECK_THAT(run_err, Contains("already in progress"));
  CHECK_THAT(close_err, Contains("Worker::close") && Contains("run"));
  w.close();
}

TEST_CASE("a forked child stuck in a task is killed at its deadline and its lane is lost",
          "[hardening][deadline]") {
  SharedArena arena;
  auto& done = arena.one<std::atomic<int>>(0);
  WorkerOptions opts = process_options(2);
  opts.task_timeout = 200ms;
  Worker w(opts);
  auto spin = w.register_sub("spins_forever", [](TaskArgsView) {
    std::atomic<unsigned> i{0};
    for (;;) i.fetch_add(1, std::memory_order_relaxed);
  });
  auto count = w.register_sub("count", [&](TaskArgsView) { ++done; });
  w.init();
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) { o.submit_sub(spin, {}, 0); });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    INFO(e.what());
    CHECK(e.outcome() == Outcome::EndpointFailure);
    CHECK(e.callable() == "spins_forever");
    CHECK(e.worker() == "sub worker 0");
    CHECK_THAT(e.message(), Contains("200 ms") && Contains("killed"));
  }
  // The rest of the Worker works on; work named for the lost lane fails at once.
  CHECK(run_error(w, [&](Orchestrator& o) {
          for (int i = 0; i < 10; ++i) o.submit_sub(count);
        }).empty());
  CHECK(done == 10);
  CHECK_THAT(run_error(w, [&](Orchestrator& o) { o.submit_sub(count, {}, 0); }),
             Contains("sub worker 0"));
  CHECK_NOTHROW(w.close());
}

TEST_CASE("a per-submit timeout overrides the Worker's and covers next-level tasks",
          "[hardening][deadline]") {
  WorkerOptions opts = process_options(1);
  opts.task_timeout = std::chrono::milliseconds(60'000);
  Worker w(opts);
  auto hang = w.register_sub("sleeps", [](TaskArgsView) { ::pause(); });
  w.init();
  CallConfig quick;
  quick.timeout = 100ms;
  const std::string err =
      run_error(w, [&](Orchestrator& o) { o.submit_sub(hang, TaskArgs(), quick); });
  CHECK_THAT(err, Contains("sleeps") && Contains("100 ms"));
  CallConfig negative;
  negative.timeout = std::chrono::milliseconds(-1);
  CHECK_THAT(run_error(w, [&](Orchestrator& o) { o.submit_sub(hang, TaskArgs(), negative); }),
             Contains("timeout"));
}

TEMPLATE_TEST_CASE("a next-level task's timeout bounds the nested Worker's run",
                   "[hardening][deadline][nested]", InThreads, InProcesses) {
  static std::atomic<bool> release{false};
  release = false;
  Worker l4(options_for<TestType>(0, 4));
  Worker l3(options_for<TestType>(1, 3));
  auto stuck = l3.register_sub("stuck_in_l3", [](TaskArgsView) { stuck_until(release); });
  l4.add_worker(std::move(l3));
  auto orch = l4.register_orch(
      "l3_orchestration",
      [stuck](Orchestrator& o, TaskArgsView, const CallConfig&) { o.submit_sub(stuck); });
  l4.init();
  CallConfig limit;
  limit.timeout = 150ms;
  std::string err;
  try {
    l4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(orch, TaskArgs(), limit, 0);
    });
  } catch (const Error& e) {
    err = e.what();
  }
  // Whichever level notices first, the error names the deadline.
  CHECK_THAT(err, Contains("150 ms") && Contains("deadline"));
  release = true;
  CHECK_NOTHROW(l4.close());
}

TEST_CASE("a stopped forked child is noticed like a dead one", "[hardening][deadline]") {
  Worker w(process_options(1));  // no deadline at all
  auto stop = w.register_sub("stops_itself", [](TaskArgsView) { ::raise(SIGSTOP); });
  w.init();
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) { o.submit_sub(stop); });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    INFO(e.what());
    CHECK(e.outcome() == Outcome::EndpointFailure);
    CHECK(e.callable() == "stops_itself");
    CHECK_THAT(e.message(), Contains("stopped by signal"));
  }
  CHECK_NOTHROW(w.close());
}

TEST_CASE("a thread child that does not return loses its lane and close() still returns",
          "[hardening][deadline]") {
  // The stuck callable is released after close(), so the abandoned thread ends in the test.
  static std::atomic<bool> release{false};
  release = false;
  WorkerOptions opts = thread_options(2);
  opts.task_timeout = 150ms;
  std::atomic<int> done{0};
  {
    Worker w(opts);
    auto stuck = w.register_sub("never_returns", [](TaskArgsView) { stuck_until(release); });
    auto count = w.register_sub("count", [&](TaskArgsView) { ++done; });
    w.init();
    try {
      w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
        o.submit_sub(stuck, {}, 1);
        o.submit_sub(count, {}, 1);  // queued behind it on the same lane: fails, never runs
      });
      FAIL("run() did not throw");
    } catch (const TaskError& e) {
      INFO(e.what());
      CHECK(e.outcome() == Outcome::EndpointFailure);
      CHECK(e.callable() == "never_returns");
      CHECK(e.worker() == "sub worker 1");
      CHECK_THAT(e.message(), Contains("150 ms") && Contains("lost"));
    }
    CHECK(done == 0);
    done = 0;
    CHECK(run_error(w, [&](Orchestrator& o) {
            for (int i = 0; i < 5; ++i) o.submit_sub(count);
          }).empty());
    CHECK(done == 5);
    CHECK_THAT(run_error(w, [&](Orchestrator& o) { o.submit_sub(count, {}, 1); }),
               Contains("lost"));
    CHECK_THAT(run_error(w,
                         [&](Orchestrator& o) {
                           o.submit_sub_group(count, {TaskArgs(), TaskArgs()}, {0, 1});
                         }),
               Contains("sub worker 1") && Contains("lost"));
    CHECK_NOTHROW(w.close());
  }
  release = true;
}

TEMPLATE_TEST_CASE("run() has an overall deadline", "[hardening][deadline]", InThreads,
                   InProcesses) {
  static std::atomic<bool> release{false};
  release = false;
  WorkerOptions opts = options_for<TestType>(2);
  Worker w(opts);
  auto slow = w.register_sub("slow", [](TaskArgsView) { stuck_until(release); });
  auto noop = w.register_sub("noop", [](TaskArgsView) {});
  w.init();
  CallConfig limit;
  limit.timeout = 250ms;
  std::string err;
  try {
    w.run(
        [&](Orchestrator& o, TaskArgsView, const CallConfig&) {
          const auto a = o.alloc({1}, DataType::Int64);
          o.submit_sub(slow, TaskArgs().add_tensor(a, TensorArgType::InOut), 0);
          o.submit_sub(noop, TaskArgs().add_tensor(a, TensorArgType::InOut));  // waits on it
        },
        TaskArgs(), limit);
  } catch (const TimeoutError& e) {
    err = e.what();
  }
  CHECK_THAT(err, Contains("250 ms") && Contains("deadline"));
  release = true;
  // The Worker goes on with the lane that is left.
  CHECK(run_error(w, [&](Orchestrator& o) { o.submit_sub(noop); }).empty());
  CHECK_NOTHROW(w.close());
}

TEST_CASE("forked children refuse tensors in memory they do not share", "[hardening][memory]") {
  void* before = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(before != MAP_FAILED);
  Worker w(process_options(1));
  auto write = w.register_sub(
      "write_one", [](TaskArgsView v) { *reinterpret_cast<std::int64_t*>(v.tensor(0).data) = 42; });
  w.init();
  void* after = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(after != MAP_FAILED);
  std::vector<std::int64_t> heap_vector(4, 0);
  std::int64_t stack_value = 0;
  auto submit_with = [&](void* p, TensorArgType tag) {
    return run_error(w, [&](Orchestrator& o) {
      o.submit_sub(write,
                   TaskArgs()
                       .add_tensor(make_tensor(p, {1}, DataType::Int64), TensorArgType::NoDep)
                       .add_tensor(make_tensor(p, {1}, DataType::Int64), tag));
    });
  };
  for (void* p : {static_cast<void*>(heap_vector.data()), static_cast<void*>(&stack_value),
                  static_cast<void*>(&g_private_value)}) {
    const std::string err = submit_with(p, TensorArgType::OutputExisting);
    INFO(err);
    CHECK_THAT(err, Contains("tensor 0") && Contains("private memory") && Contains("orch.alloc") &&
                        Contains("MAP_SHARED") && Contains("ChildMode::Thread"));
  }
  const std::string late = submit_with(after, TensorArgType::InOut);
  CHECK_THAT(late, Contains("tensor 0") && Contains("after Worker::init()"));
  // Memory shared before init() works, and the child's write is seen here.
  CHECK(submit_with(before, TensorArgType::OutputExisting).empty());
  CHECK(*static_cast<std::int64_t*>(before) == 42);
  // A tensor that runs past the end of a shared mapping is refused too.
  auto* last = static_cast<std::byte*>(before) + 4096 - 8;
  const std::string past = run_error(w, [&](Orchestrator& o) {
    o.submit_sub(write, TaskArgs().add_tensor(make_tensor(last, {2}, DataType::Int64),
                                              TensorArgType::OutputExisting));
  });
  CHECK_THAT(past, Contains("tensor 0"));
  w.close();
  ::munmap(before, 4096);
  ::munmap(after, 4096);
}

TEST_CASE("thread children accept private memory", "[hardening][memory]") {
  Worker w(thread_options(1));
  auto write = w.register_sub(
      "write_one", [](TaskArgsView v) { *reinterpret_cast<std::int64_t*>(v.tensor(0).data) = 7; });
  w.init();
  std::vector<std::int64_t> v(1, 0);
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_sub(write,
                 TaskArgs().add_tensor(make_tensor(std::span(v)), TensorArgType::OutputExisting));
  });
  CHECK(v[0] == 7);
}

TEST_CASE("a null data pointer is refused for every tag but Output", "[hardening][bad-input]") {
  Worker w(thread_options(1));
  std::atomic<int> ran{0};
  auto count = w.register_sub("count", [&](TaskArgsView) { ++ran; });
  w.init();
  for (TensorArgType tag : {TensorArgType::Input, TensorArgType::InOut,
                            TensorArgType::OutputExisting, TensorArgType::NoDep}) {
    const std::string err = run_error(w, [&](Orchestrator& o) {
      o.submit_sub(count, TaskArgs().add_tensor(make_tensor(nullptr, {4}, DataType::Float32), tag));
    });
    INFO(err);
    CHECK_THAT(err, Contains("tensor 0") && Contains("null"));
  }
  CHECK(ran == 0);
  // Output with null data is still auto-allocation.
  CHECK(run_error(w, [&](Orchestrator& o) {
          const auto r = o.submit_sub(
              count, TaskArgs().add_tensor(make_tensor(nullptr, {4}, DataType::Float32),
                                           TensorArgType::Output));
          CHECK(r.output(0).data != 0);
        }).empty());
  CHECK(ran == 1);
}

TEST_CASE("run() validates its CallConfig and the Worker its timing options",
          "[hardening][bad-input]") {
  Worker w(thread_options(1));
  w.init();
  CallConfig bad;
  bad.enable_pmu = 1;  // diagnostics without an output_prefix
  CHECK_THAT(run_error(
                 w, [](Orchestrator&) {}, bad),
             Contains("output_prefix"));
  auto with = [](auto set) {
    WorkerOptions o = thread_options(1);
    set(o);
    try {
      Worker bad_worker(o);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(with([](WorkerOptions& o) { o.heap_wait = std::chrono::milliseconds(-1); }),
             Contains("heap_wait"));
  CHECK_THAT(with([](WorkerOptions& o) { o.spin = std::chrono::microseconds(-5); }),
             Contains("spin"));
  CHECK_THAT(with([](WorkerOptions& o) { o.task_timeout = std::chrono::milliseconds(-5); }),
             Contains("task_timeout"));
  CHECK_THAT(with([](WorkerOptions& o) { o.run_timeout = std::chrono::milliseconds(-5); }),
             Contains("run_timeout"));
}

TEST_CASE("a child's error message longer than the mailbox says it was cut",
          "[hardening][fork-shm]") {
  Worker w(process_options(1));
  auto loud = w.register_sub(
      "loud", [](TaskArgsView) { throw std::runtime_error(std::string(5000, 'x') + "END"); });
  w.init();
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) { o.submit_sub(loud); });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK_THAT(e.message(), Contains("cut"));
    CHECK_THAT(e.message(), Contains("5003"));
    CHECK(e.message().find("END") == std::string::npos);
  }
}

TEST_CASE("a full heap ring that only the blocked orchestration could free fails at once",
          "[hardening][heap]") {
  WorkerOptions opts = thread_options(1);
  opts.heap_ring_size = 64 * 1024;
  opts.heap_wait = std::chrono::milliseconds(120'000);  // far beyond the test's timeout
  Worker w(opts);
  auto count = w.register_sub("count", [](TaskArgsView) {});
  w.init();
  // The run's own scope: its buffers live until the run ends.
  const std::string outer = run_error(w, [](Orchestrator& o) {
    for (int i = 0; i < 1000; ++i) o.alloc({1024}, DataType::UInt8);
  });
  CHECK_THAT(outer, Contains("heap ring 0") && Contains("scope"));
  // An inner scope that fills its own ring: its buffers come back only at its scope_end.
  const std::string inner = run_error(w, [](Orchestrator& o) {
    auto s = o.scope();
    for (int i = 0; i < 1000; ++i) o.alloc({1024}, DataType::UInt8);
  });
  CHECK_THAT(inner, Contains("heap ring 1"));
  // Closed sibling scopes free their buffers: the same volume goes through.
  CHECK(run_error(w, [&](Orchestrator& o) {
          for (int i = 0; i < 1000; ++i) {
            auto s = o.scope();
            o.submit_sub(count, TaskArgs().add_tensor(o.alloc({1024}, DataType::UInt8)));
          }
        }).empty());
}

namespace {
/// Runs a graph whose second scope needs heap-ring bytes held by a closed scope's task that is
/// still running (so waiting for them is not hopeless), and returns the TimeoutError's text.
std::string held_ring_timeout(WorkerOptions opts) {
  opts.heap_ring_size = 64 * 1024;
  // Owned by the callable: at the run's deadline the lane running `holds` is abandoned and its
  // thread detached, so it may still be leaving hold->wait() after the Worker is gone; the
  // registry (kept alive for a lost lane) keeps the gate with it.
  auto hold = std::make_shared<Gate>();
  Worker w(opts);
  auto holds = w.register_sub("holds", [hold](TaskArgsView) { hold->wait(20s); });
  w.init();
  std::string err;
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      {
        auto s = o.scope();
        o.submit_sub(holds,
                     TaskArgs().add_tensor(make_tensor(nullptr, {60 * 1024}, DataType::UInt8),
                                           TensorArgType::Output));
      }
      auto s = o.scope();
      try {
        o.alloc({32 * 1024}, DataType::UInt8);
      } catch (...) {
        hold->open();
        throw;
      }
    });
  } catch (const TimeoutError& e) {
    err = e.what();
  }
  return err;
}
}  // namespace

TEST_CASE("a heap-ring wait ends at its deadline or the run's, whichever comes first",
          "[hardening][heap][deadline]") {
  WorkerOptions opts = thread_options(1);
  opts.heap_wait = 50ms;
  CHECK_THAT(held_ring_timeout(opts), Contains("heap ring 1") && Contains("stayed full"));
  opts.heap_wait = std::chrono::milliseconds(120'000);  // far beyond the test's timeout
  opts.run_timeout = 200ms;
  CHECK_THAT(held_ring_timeout(opts), Contains("run passed its deadline of 200 ms"));
}

namespace {
/// Two thread sub workers and heap rings of 64 KiB, so a 60 KiB output and a 32 KiB alloc do not
/// fit at once; a submit waits for bytes up to `heap_wait`.
WorkerOptions two_subs_small_ring(std::chrono::milliseconds heap_wait) {
  WorkerOptions opts = thread_options(2);
  opts.heap_ring_size = 64 * 1024;
  opts.heap_wait = heap_wait;
  return opts;
}
}  // namespace

TEST_CASE("a heap-ring wait takes bytes a task gave back while other work keeps running",
          "[hardening][heap]") {
  // A wait for heap bytes is woken per 32 retirements, or when the scheduler goes idle: with a
  // lane busy the whole time and a single retirement, it must still notice the bytes (it looks
  // again every few ms) instead of sleeping until heap_wait fails the submit.
  Worker w(two_subs_small_ring(3s));
  Gate run_may_end;
  std::atomic<bool> about_to_alloc{false};
  std::atomic<pid_t> orch_tid{0};
  auto busy = w.register_sub("busy", [&](TaskArgsView) { run_may_end.wait(); });
  // Returns (and so gives its 60 KiB back) once the orchestration sleeps for want of them.
  auto holds = w.register_sub("holds", [&](TaskArgsView) {
    await_asleep(
        orch_tid, [&] { return about_to_alloc.load(); },
        "the orchestration never waited for heap bytes");
  });
  w.init();
  std::chrono::milliseconds waited{0};
  CHECK(run_error(w, [&](Orchestrator& o) {
          orch_tid = ::gettid();
          o.submit_sub(busy, TaskArgs(), 1);
          {
            auto s = o.scope();
            o.submit_sub(holds,
                         TaskArgs().add_tensor(make_tensor(nullptr, {60 * 1024}, DataType::UInt8),
                                               TensorArgType::Output),
                         0);
          }
          auto s = o.scope();
          const auto t0 = std::chrono::steady_clock::now();
          about_to_alloc = true;  // from here the only sleep is the heap wait
          try {
            o.alloc({32 * 1024}, DataType::UInt8);
          } catch (...) {
            run_may_end.open();
            throw;
          }
          waited = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - t0);
          run_may_end.open();
        }).empty());
  CHECK(waited < 1s);
}

TEST_CASE("a lane's run of kept successors gives its finished heap owners to a heap wait",
          "[hardening][heap]") {
  // The heap-ring twin of the window case in test_engine_window.cpp: c2..c4 of a chain own the
  // ring's bytes, end on their lane after their scope ended, and c5, which follows them there,
  // waits for a task submitted only once the bytes are back. The lane must hand their slots
  // over while the orchestration waits, not only when its batch fills or the chain ends.
  Worker w(two_subs_small_ring(2s));
  std::int64_t x = 0;
  Gate chain_may_start;
  Gate tail_released;
  std::atomic<bool> about_to_alloc{false};
  std::atomic<pid_t> orch_tid{0};
  auto first = w.register_sub("first", [&](TaskArgsView) { chain_may_start.wait(); });
  auto step = w.register_sub("step", [](TaskArgsView) {});
  auto until_waiting = w.register_sub("until_waiting", [&](TaskArgsView) {
    await_asleep(
        orch_tid, [&] { return about_to_alloc.load(); },
        "the orchestration never waited for heap bytes");
  });
  auto tail = w.register_sub("tail", [&](TaskArgsView) { tail_released.wait(4000ms); });
  auto release = w.register_sub("release", [&](TaskArgsView) { tail_released.open(); });
  w.init();
  const auto on_x = [&] {
    return TaskArgs().add_tensor(make_tensor(&x, {1}, DataType::Int64), TensorArgType::InOut);
  };
  const auto owning = [&] {
    return on_x().add_tensor(make_tensor(nullptr, {20 * 1024}, DataType::UInt8),
                             TensorArgType::Output);
  };
  CHECK(run_error(w, [&](Orchestrator& o) {
          orch_tid = ::gettid();
          o.submit_sub(first, on_x(), 0);  // the chain runs on sub worker 0
          {
            auto s = o.scope();  // heap ring 1; ends before c2 starts
            o.submit_sub(step, owning(), 0);
            o.submit_sub(step, owning(), 0);
            o.submit_sub(until_waiting, owning(), 0);
          }
          o.submit_sub(tail, on_x(), 0);
          chain_may_start.open();
          {
            auto s = o.scope();     // heap ring 1 again: 60 of its 64 KiB are c2..c4's
            about_to_alloc = true;  // from here the only sleep is the heap wait
            o.alloc({32 * 1024}, DataType::UInt8);
          }
          o.submit_sub(release, TaskArgs(), 1);
        }).empty());
  CHECK(tail_released.is_open());
}

TEST_CASE("a task that fails while submit waits for heap bytes ends the wait with its error",
          "[hardening][heap][failure]") {
  Worker w(two_subs_small_ring(5s));
  Gate first;   // the failing task's
  Gate second;  // the byte owner's: opened once the waiting alloc threw (or after 3 s)
  std::atomic<bool> about_to_alloc{false};
  std::atomic<pid_t> orch_tid{0};
  auto fails = w.register_sub("fails", [&](TaskArgsView) {
    first.wait();
    throw std::runtime_error("boom while the heap was full");
  });
  auto holds = w.register_sub("holds", [&](TaskArgsView) { second.wait(); });
  w.init();
  std::jthread opener([&] {
    // The failure lands while the alloc sleeps in its heap wait (10 s at most).
    try {
      await_asleep(
          orch_tid, [&] { return about_to_alloc.load(); }, "no heap wait");
    } catch (const std::exception&) {
    }
    first.open();
    for (int i = 0; i < 300 && !second.is_open(); ++i) std::this_thread::sleep_for(10ms);
    second.open();
  });
  std::string caught;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_MATCHES(w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    orch_tid = ::gettid();
    o.submit_sub(fails, TaskArgs(), 1);
    {
      auto s = o.scope();  // heap ring 1: its 60 KiB come back only when `holds` ends
      o.submit_sub(holds,
                   TaskArgs().add_tensor(make_tensor(nullptr, {60 * 1024}, DataType::UInt8),
                                         TensorArgType::Output),
                   0);
    }
    auto s = o.scope();
    about_to_alloc = true;
    try {
      o.alloc({32 * 1024}, DataType::UInt8);
    } catch (const TaskError& e) {
      caught = e.what();
      second.open();
      throw;
    }
    second.open();
  }),
                       TaskError, WhatContains("boom while the heap was full"));
  CHECK_THAT(caught, Contains("boom while the heap was full"));
  CHECK(std::chrono::steady_clock::now() - t0 < 2500ms);
}

TEST_CASE("timeouts too long for the clock mean no deadline, not an instant one",
          "[hardening][deadline]") {
  WorkerOptions opts = thread_options(1);
  opts.task_timeout = std::chrono::milliseconds::max();
  opts.run_timeout = std::chrono::milliseconds::max();
  opts.heap_wait = std::chrono::milliseconds::max();
  Worker w(opts);
  std::atomic<int> ran{0};
  auto count = w.register_sub("count", [&](TaskArgsView) { ++ran; });
  w.init();
  CallConfig forever;
  forever.timeout = std::chrono::milliseconds::max();
  CHECK(run_error(
            w,
            [&](Orchestrator& o) {
              o.submit_sub(count, TaskArgs(), forever);
              o.submit_sub(count);
            },
            forever)
            .empty());
  CHECK(ran == 2);
  // The helpers behind it saturate instead of overflowing.
  const auto now = std::chrono::steady_clock::now();
  CHECK(detail::deadline_after(now, std::chrono::milliseconds::max()) ==
        std::chrono::steady_clock::time_point::max());
  CHECK(detail::deadline_after(now, 5ms) == now + 5ms);
  CHECK(detail::clamp_ms(std::chrono::milliseconds::max()) == 0xffffffffU);
  CHECK(detail::clamp_ms(-5ms) == 0);
  CHECK(detail::clamp_ms(7ms) == 7);
}

TEST_CASE("the shared mappings are parsed, sorted and merged from a maps file",
          "[hardening][memory]") {
  const auto m = detail::parse_shared_mappings(
      "7f0000004000-7f0000005000 rw-s 00000000 00:01 13\n"
      "7f0000001000-7f0000002000 rw-p 00000000 00:00 0\n"
      "garbage line\n"
      "7f0000000000-7f0000001000 r--s 00000000 00:01 11 /memfd:a\n"
      "7f0000003000-7f0000004000 rw-s 00000000 00:01 12 /dev/zero (deleted)\n"
      "7f0000009000-7f0000008000 rw-s 00000000 00:01 14\n"  // end before begin: skipped
      "7f000000a000-7f000000b000 rw-s");                    // no newline at the end
  using R = std::pair<std::uintptr_t, std::uintptr_t>;
  REQUIRE(m == std::vector<R>{{0x7f0000000000, 0x7f0000001000},
                              {0x7f0000003000, 0x7f0000005000},  // adjacent (not in order), merged
                              {0x7f000000a000, 0x7f000000b000}});
  CHECK(detail::mapping_holding(m, 0x7f0000004fff) == &m[1]);
  CHECK(detail::mapping_holding(m, 0x7f0000005000) == nullptr);
  CHECK(detail::mapping_holding(m, 0x7f0000001000) == nullptr);  // private, between two
  CHECK(detail::mapping_holding(m, 0x10) == nullptr);
}

}  // namespace simpler_test_hardening
