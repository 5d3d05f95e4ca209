// Out of memory inside Orchestrator::submit, at every allocation the orchestration thread makes.
//
// A program of its own: it replaces the global operator new with one that throws bad_alloc at
// the N-th allocation made on the armed thread (the run's thread), for N = 0, 1, 2, ... until a
// run makes no N-th allocation. Each run submits 3000 tasks of 7 tensors over fresh buffers, so
// the failure lands in turn on every growth the submit path has: the slot's argument storage,
// the frame, the TensorMap's pools and index, the edges and the holds, and the
// retirements collected inside submit. Each run must either throw the bad_alloc out of run() (the
// submit failed; the run failed with it) or complete (a retirement absorbed it: a sweep's index
// shrink keeps the old index), never hang, and the same Worker must then run a checked program
// correctly. Each point is tried again with an orchestration that catches the bad_alloc and submits
// 10 increments more: a submit that failed before its task took part changed nothing (the run goes
// on and they run); one that failed after failed the run (the later submits throw its error, and so
// does run()). Before the fix a failure after the task took its slot hung the run's fence, and one
// in a retirement's hole list (the TensorMap no longer keeps one) terminated. A watchdog ends the
// program (exit 2) when one case makes no progress for 60 s: a hang fails the test with a message
// instead of waiting for ctest's timeout. A second sweep (run_passes) reaches the scheduler passes
// the run's thread runs: their queues growing. A third (flood) lets thousands of tasks become ready
// while no queue can grow, on any thread: they are skipped, and the log says so once. Exit 0 on
// success; 1 with a message otherwise.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "simpler/simpler.hpp"
#include "support/gate.hpp"
#include "support/thread_states.hpp"

namespace {
thread_local long t_countdown = -1;  // allocations left before the failure (-1: disarmed)
thread_local bool t_fired = false;
// Any thread: every allocation of at least this many bytes fails (0: disarmed). Reaches the
// scheduler's queues on whichever thread holds the pass; log lines and the sink stay below it.
std::atomic<std::size_t> g_fail_from{0};
}  // namespace

void* operator new(std::size_t n) {
  if (t_countdown >= 0 && t_countdown-- == 0) {
    t_fired = true;
    throw std::bad_alloc();
  }
  if (const std::size_t from = g_fail_from.load(std::memory_order_relaxed); from != 0 && n >= from)
    throw std::bad_alloc();
  void* p = std::malloc(n != 0 ? n : 1);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace {

using simpler::TaskArgs;
using simpler::TaskArgsView;
using simpler::TensorArgType;

// Ends the program when `progress` has not moved for a minute (a run hung).
class Watchdog {
 public:
  Watchdog()
      : thread_([this] {
          std::unique_lock lk(mu_);
          long seen = -2;
          while (!done_) {
            if (progress_ == seen) {
              std::fprintf(stderr, "submit_oom: no progress in 60 s at allocation %ld: hung\n",
                           progress_);
              std::fflush(stderr);
              ::_exit(2);
            }
            seen = progress_;
            cv_.wait_for(lk, std::chrono::seconds(60), [&] { return done_ || progress_ != seen; });
          }
        }) {}
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() {
    {
      std::lock_guard lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void at(long n) {
    {
      std::lock_guard lk(mu_);
      progress_ = n;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  long progress_ = -1;
  bool done_ = false;
  std::thread thread_;
};

// The scheduler's queues grow on demand inside passes, and the run's thread runs such passes
// inside submit. A failure there fails the run without the submit itself throwing (run_passes
// tests that); here it would blur what each outcome says about the submit path. So each Worker
// first grows them past what the test's run needs: many ready tasks at once, in scopes (another
// frame than the test's run uses) and without tensors, so the submit path's own growth (the
// frame, the TensorMap's pools) is still ahead.
void warm_scheduler(simpler::Worker& w, const simpler::CallableHandle& noop) {
  w.run([&](simpler::Orchestrator& orch, TaskArgsView, const simpler::CallConfig&) {
    for (int t = 0; t < 3000; t += 16) {
      auto scope = orch.scope();
      for (int i = 0; i < 16; ++i) orch.submit_sub(noop, TaskArgs());
    }
  });
}

// The Worker goes on after a failure: a chain of 100 read-modify-writes over 8 counters, checked.
bool goes_on(simpler::Worker& w, const simpler::CallableHandle& add) {
  std::vector<std::uint64_t> counters(8, 0);
  w.run([&](simpler::Orchestrator& orch, TaskArgsView, const simpler::CallConfig&) {
    for (int t = 0; t < 100; ++t) {
      TaskArgs a;
      a.add_tensor(simpler::make_tensor(std::span<std::uint64_t>(counters.data() + t % 8, 1)),
                   TensorArgType::InOut);
      orch.submit_sub(add, std::move(a));
    }
  });
  for (std::size_t i = 0; i < counters.size(); ++i) {
    if (counters[i] != (i < 4 ? 13U : 12U)) return false;
  }
  return true;
}

int fail(const char* what, long at) {
  std::fprintf(stderr, "submit_oom: %s (failure injected at allocation %ld)\n", what, at);
  return 1;
}

// Waits until `steps` reaches `n` (the tasks of the run so far ran), sleeping between looks so
// the lanes have the cores. Throws (the program fails) when they have not run in 30 s.
void settle(const std::atomic<long>& steps, long n) {
  const bool ran = simpler::testing::eventually(
      [&] {
        if (steps.load() >= n) return true;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        return false;
      },
      std::chrono::seconds(30));
  if (!ran) {
    throw std::runtime_error("only " + std::to_string(steps.load()) + " of the " +
                             std::to_string(n) + " tasks submitted so far ran within 30 s");
  }
}

// How one run with a failure injected at allocation `at` ended.
struct Attempt {
  bool fired = false;       // the failure was injected
  bool run_threw = false;   // run() threw the bad_alloc
  bool caught = false;      // (swallow) the orchestration caught it from a submit
  int accepted = 0;         // (swallow) of the 10 submits after, those that did not throw
  std::uint64_t later = 0;  // (swallow) increments those tasks did
};

// One run of kTasks submits of kTensors tensors with the failure armed. With `swallow`, the
// orchestration catches the bad_alloc and submits 10 increments more.
Attempt attempt(simpler::Worker& w, const simpler::CallableHandle& step, std::atomic<long>& steps,
                const simpler::CallableHandle& add, std::vector<std::uint64_t>& buf, long at,
                bool swallow) {
  constexpr int kTasks = 3000;
  constexpr int kTensors = 7;
  constexpr int kSettleEvery = 250;
  Attempt r;
  steps = 0;
  std::vector<std::uint64_t> later(10, 0);
  t_fired = false;
  try {
    w.run([&](simpler::Orchestrator& orch, TaskArgsView, const simpler::CallConfig&) {
      t_countdown = at;
      try {
        for (int t = 0; t < kTasks; ++t) {
          TaskArgs a;
          for (int j = 0; j < kTensors; ++j) {
            const std::size_t b = static_cast<std::size_t>(t * kTensors + j) * 3 % buf.size();
            a.add_tensor(simpler::make_tensor(std::span<std::uint64_t>(buf.data() + b, 1)),
                         j == 0 ? TensorArgType::InOut : TensorArgType::Input);
          }
          orch.submit_sub(step, std::move(a));
          if (t % kSettleEvery == kSettleEvery - 1) {
            // Disarmed meanwhile: let every task submitted so far finish, so the submits after
            // retire them (and their TensorMap entries) however loaded the machine is. Without
            // this, lanes that lag behind the submits under load (ctest -j2) left no
            // retirement inside the armed submits (whose failures were then never absorbed).
            const long armed = t_countdown;
            t_countdown = -1;
            settle(steps, t + 1);
            t_countdown = armed;
          }
        }
      } catch (const std::bad_alloc&) {
        t_countdown = -1;
        if (!swallow) throw;
        r.caught = true;
      }
      t_countdown = -1;
      if (!swallow) return;
      for (std::uint64_t& c : later) {
        TaskArgs a;
        a.add_tensor(simpler::make_tensor(std::span<std::uint64_t>(&c, 1)), TensorArgType::InOut);
        orch.submit_sub(add, std::move(a));
        ++r.accepted;
      }
    });
  } catch (const std::bad_alloc&) {
    r.run_threw = true;
  }
  t_countdown = -1;
  r.fired = t_fired;
  for (std::uint64_t c : later) r.later += c;
  return r;
}

// Out of memory in the engine's own work on the run's thread after the submits: a fresh Worker
// whose threads all sleep queues its first ready tasks in a scheduler pass on the run's thread
// (Orchestrator::dispatch_published), and the run's fence collects the lanes' results in passes
// there too. Each run ends with every task it accepted ended: it completes, or throws the
// bad_alloc (a task no queue could take is skipped, and the run fails). The same Worker then runs
// a checked program. Before the fix a failed queue growth in a pass terminated the program.
int run_passes(Watchdog& watchdog) {
  int completed = 0;  // the failure was absorbed (a retirement) or never mattered
  int in_engine = 0;  // it failed outside any submit's own work (a pass), and the run with it
  int in_submit = 0;  // a submit threw it
  for (long at = 0;; ++at) {
    if (at > 5000) return fail("the pass runs never stopped allocating", at);
    watchdog.at(1'000'000 + at);
    simpler::WorkerOptions o;
    o.num_sub_workers = 2;
    o.child_mode = simpler::ChildMode::Thread;
    simpler::Worker w(o);
    const auto add =
        w.register_sub("add", [](TaskArgsView v) { *v.tensors[0].as<std::uint64_t>() += 1; });
    w.init();
    // Every engine thread asleep (they spin 20 us after work, then block): the run's thread takes
    // the first published tasks itself. Read from /proc, not waited out: a loaded machine can keep
    // a thread spinning past any fixed sleep.
    if (!simpler::testing::other_threads_fall_asleep(std::chrono::seconds(10)))
      return fail("the engine threads of a fresh Worker did not all block within 10 s", at);
    std::vector<std::uint64_t> cells(4, 0);
    const auto cell = [&](std::size_t i) {
      TaskArgs a;
      a.add_tensor(simpler::make_tensor(std::span<std::uint64_t>(&cells[i], 1)),
                   TensorArgType::InOut);
      return a;
    };
    bool submitted = false;  // every submit returned
    bool earlier = false;    // a submit threw a failure that had fired before it was called
    bool threw = false;
    t_fired = false;
    try {
      w.run([&](simpler::Orchestrator& orch, TaskArgsView, const simpler::CallConfig&) {
        const auto submit = [&](auto&& call) {
          const bool fired_before = t_fired;
          try {
            call();
          } catch (const std::bad_alloc&) {
            // The run had failed already: its error comes back from this submit (check_open).
            earlier = fired_before;
            throw;
          }
        };
        t_countdown = at;
        // A task for any worker, a group, a task for worker 1 (each queue grows on its first
        // task), and a consumer of the first.
        submit([&] { orch.submit_sub(add, cell(0)); });
        submit([&] { orch.submit_sub_group(add, {cell(1), cell(2)}); });
        submit([&] { orch.submit_sub(add, cell(3), simpler::WorkerId{1}); });
        submit([&] { orch.submit_sub(add, cell(0)); });
        submitted = true;
      });
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    t_countdown = -1;
    if (!t_fired) break;  // every allocation of the run's thread was tried
    if (!threw) {
      if (cells != std::vector<std::uint64_t>{2, 1, 1, 1})
        return fail("a run that completed computed a wrong count", at);
      ++completed;
    } else {
      (submitted || earlier ? in_engine : in_submit) += 1;
    }
    if (!goes_on(w, add)) return fail("the run after a failed pass computed a wrong count", at);
  }
  std::printf(
      "submit_oom: passes: %d runs completed, %d failed in the engine's work outside a submit, %d "
      "in a submit\n",
      completed, in_engine, in_submit);
  if (in_engine < 1) return fail("no failure reached the engine's work outside a submit", -1);
  if (in_submit < 1) return fail("no failure reached a submit of the pass runs", -1);
  return 0;
}

// Counts the log lines that report a ready task the scheduler could not queue (no allocation:
// the sink runs while allocations fail).
std::atomic<int> g_unqueueable_lines{0};
void count_unqueueable(simpler::LogLevel, std::string_view line, void*) {
  if (line.find("out of memory queueing a ready task") != std::string_view::npos)
    g_unqueueable_lines.fetch_add(1);
}

// Many tasks become ready at once while the scheduler's queues cannot grow: a producer held on a
// gate and kFan consumers of its tensor, then every allocation of 1 KiB or more fails (queues
// hold 4-byte slot ids and double from 16, so the 257th task queued at once finds no room) and
// the gate opens. Every task past the queue's room is skipped and the run fails with the
// bad_alloc, as before; the log gets one line for the run, not one per skipped task (it had
// hundreds), and the Worker goes on.
int flood() {
  constexpr int kFan = 2000;
  simpler::WorkerOptions o;
  o.num_sub_workers = 2;
  o.child_mode = simpler::ChildMode::Thread;
  simpler::Worker w(o);
  simpler::testing::Gate gate;
  std::atomic<int> ran{0};
  const auto held = w.register_sub("held", [&](TaskArgsView) { gate.wait(); });
  const auto read = w.register_sub("read", [&](TaskArgsView) { ran.fetch_add(1); });
  const auto add =
      w.register_sub("add", [](TaskArgsView v) { *v.tensors[0].as<std::uint64_t>() += 1; });
  w.init();
  std::uint64_t x = 0;
  const auto tensor = simpler::make_tensor(std::span<std::uint64_t>(&x, 1));
  const simpler::WorkerStats before = w.stats();
  simpler::set_log_sink(&count_unqueueable);
  bool threw = false;
  try {
    w.run([&](simpler::Orchestrator& orch, TaskArgsView, const simpler::CallConfig&) {
      orch.submit_sub(held, TaskArgs().add_tensor(tensor, TensorArgType::InOut));
      for (int i = 0; i < kFan; ++i)
        orch.submit_sub(read, TaskArgs().add_tensor(tensor, TensorArgType::Input));
      g_fail_from.store(1024);
      gate.open();
    });
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  g_fail_from.store(0);
  simpler::set_log_sink(nullptr);
  const std::uint64_t skipped = w.stats().tasks_skipped - before.tasks_skipped;
  std::printf("submit_oom: flood: %d of %d ready tasks ran, %llu skipped, %d warning line(s)\n",
              ran.load(), kFan, static_cast<unsigned long long>(skipped),
              g_unqueueable_lines.load());
  if (!threw) return fail("flood: the run whose queues could not grow did not fail", -1);
  if (skipped < 2) return fail("flood: fewer than 2 tasks were skipped; no flood to report", -1);
  if (static_cast<std::uint64_t>(ran.load()) + skipped != kFan)
    return fail("flood: tasks that ran and tasks skipped do not add up to the tasks submitted", -1);
  if (g_unqueueable_lines.load() != 1)
    return fail("flood: a run with skipped unqueueable tasks must log exactly one line", -1);
  if (!goes_on(w, add)) return fail("flood: the run after the flood computed a wrong count", -1);
  return 0;
}

int run_all() {
  std::vector<std::uint64_t> buf(100'000);
  int threw = 0;       // run() threw the bad_alloc
  int absorbed = 0;    // a retirement met the failure; the run completed
  int given_back = 0;  // (swallow) the submit failed before its task took part: nothing changed
  int failed_run = 0;  // (swallow) it failed after: the run failed and refused what came later
  Watchdog watchdog;
  for (long at = 0;; ++at) {
    if (at > 5000) return fail("the runs never stopped allocating", at);
    bool fired = false;
    for (const bool swallow : {false, true}) {
      watchdog.at(at * 2 + (swallow ? 1 : 0));
      simpler::WorkerOptions o;
      o.num_sub_workers = 2;
      o.child_mode = simpler::ChildMode::Thread;
      o.hazards = simpler::Hazards::All;
      // The lanes run every task. Run at submit over settled bytes (every task here, once the
      // lanes have settled), a task takes no TensorMap entry and its retirement makes no hole:
      // the sweep would miss the map's growths and the retirements that meet a failure.
      o.caller_runs_tasks = false;
      simpler::Worker w(o);
      const auto noop = w.register_sub("noop", [](TaskArgsView) {});
      std::atomic<long> steps{0};
      const auto step = w.register_sub("step", [&steps](TaskArgsView) { steps.fetch_add(1); });
      const auto add =
          w.register_sub("add", [](TaskArgsView v) { *v.tensors[0].as<std::uint64_t>() += 1; });
      w.init();
      warm_scheduler(w, noop);
      const Attempt r = attempt(w, step, steps, add, buf, at, swallow);
      if (!r.fired) {
        if (r.run_threw || r.caught) return fail("bad_alloc without an injected failure", at);
        if (swallow && r.later != 10) return fail("a clean run lost increments", at);
        continue;
      }
      fired = true;
      if (!swallow) {
        (r.run_threw ? threw : absorbed) += 1;
      } else if (!r.caught) {
        if (r.run_threw || r.later != 10)
          return fail("a run whose retirement met the failure did not complete", at);
      } else if (r.run_threw) {
        // The submit failed after its task took part: the run failed, and refused what came
        // later with the same error.
        if (r.accepted != 0 || r.later != 0)
          return fail("a failed run still took submits after the failure", at);
        ++failed_run;
      } else {
        // It failed before: nothing had changed, so the run went on and ran what came later.
        if (r.accepted != 10 || r.later != 10)
          return fail("a run that went on lost increments", at);
        ++given_back;
      }
      if (!goes_on(w, add)) return fail("the next run computed a wrong count", at);
    }
    if (!fired) break;  // the runs made fewer allocations than `at`: every point was tried
  }
  std::printf(
      "submit_oom: %d runs failed with bad_alloc, %d absorbed it in a retirement; swallowed: %d "
      "submits gave their slot back, %d failed the run\n",
      threw, absorbed, given_back, failed_run);
  // Every way must have been taken, or the test no longer reaches what it was written for.
  if (threw < 20) return fail("fewer than 20 submits failed: the injection misses them", -1);
  // (No retirement need meet one: since the TensorMap counts its holes instead of listing them,
  // retiring allocates nothing but a sweep's index shrink, which keeps the old index on
  // bad_alloc. Those that do must complete, checked above.)
  if (given_back < 1 || failed_run < 1) return fail("a swallowed failure took only one way", -1);
  if (const int r = run_passes(watchdog); r != 0) return r;
  return flood();
}

}  // namespace

int main() {
  try {
    return run_all();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "submit_oom: unexpected exception: %s\n", e.what());
    return 1;
  }
}
