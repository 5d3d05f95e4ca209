// ForkShmTransport keeps several tasks in flight per child: order, completion, the window, and
// what a child's death does to every task in flight.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/matchers.hpp"
#include "support/poll.hpp"
#include "support/recording_leaf.hpp"
#include "support/shared_arena.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_fork_pipeline {

using namespace simpler;
using namespace simpler::testing;
using Catch::Matchers::Contains;

namespace {

WorkerOptions process_options_for_pipeline(int subs) {
  WorkerOptions o = thread_options(subs);
  o.child_mode = ChildMode::Process;
  return o;
}

/// What the child saw, in shared memory: the scalar of every task in the order it ran.
struct RunLog {
  std::atomic<std::uint32_t> count{0};
  std::atomic<bool> open{false};  ///< the gate of a task with scalar kGated
  std::int64_t order[8192] = {};
};

constexpr std::int64_t kGated = -1;     ///< waits (with a deadline) until the test opens the gate
constexpr std::int64_t kDie = -2;       ///< the child kills itself
constexpr std::int64_t kFailEvery = 7;  ///< scalar % 7 == 3 throws, naming its scalar

/// A sub leaf whose callable logs each task, fails some, blocks on a gate or kills its process.
struct PipelineFixture {
  SharedArena arena;
  RunLog& log = arena.one<RunLog>();
  detail::CallableRegistry registry{detail::next_worker_token()};
  CallableHandle step;
  SubWorker leaf{registry};
  PipelineFixture() {
    RunLog* l = &log;
    step = registry.add(CallableKind::Sub, "step",
                        [l](TaskArgsView v) {
                          const std::int64_t x = v.scalar(0);
                          if (x == kDie) ::kill(::getpid(), SIGKILL);
                          if (x == kGated) {
                            // A gate, not a sleep: polls the test's flag, with a deadline.
                            const auto limit =
                                std::chrono::steady_clock::now() + std::chrono::seconds(20);
                            while (!l->open.load(std::memory_order_seq_cst)) {
                              if (std::chrono::steady_clock::now() > limit)
                                throw std::runtime_error("the gate was never opened");
                              std::this_thread::yield();
                            }
                          }
                          const std::uint32_t i = l->count.fetch_add(1, std::memory_order_seq_cst);
                          if (i < std::size(l->order)) l->order[i] = x;
                          if (x >= 0 && x % kFailEvery == 3)
                            throw std::runtime_error("failed " + std::to_string(x));
                        },
                        {});
  }
  /// The request of the task with scalar `x` (its args live in `args`).
  LeafRequest request(TaskArgs& args, std::int64_t x) const {
    args = TaskArgs();
    args.add_scalar(x);
    return LeafRequest{step.digest, step.index, args.view(), &default_call_config()};
  }
};

}  // namespace

TEST_CASE("a forked child answers a full window of tasks in the order they were sent",
          "[fork-shm][pipeline]") {
  PipelineFixture f;
  ForkShmTransport::Endpoint<SubWorker> ep(f.leaf);
  ep.launch();
  const std::uint32_t window = ep.window();
  REQUIRE(window > 1);
  // Keep the window full the way a lane does: send while there is room, then take the oldest.
  constexpr std::int64_t kTasks = 5000;
  std::vector<TaskArgs> args(window);
  std::int64_t sent = 0;
  std::int64_t received = 0;
  std::uint32_t most_in_flight = 0;
  while (received < kTasks) {
    while (sent < kTasks && sent - received < window) {
      Outcome refused = Outcome::Success;
      Fault why;
      const LeafRequest r = f.request(args[sent % window], sent);
      REQUIRE(ep.send(r, refused, why));
      ++sent;
    }
    most_in_flight = std::max(most_in_flight, static_cast<std::uint32_t>(sent - received));
    Fault fault;
    const Outcome o = ep.receive(fault);
    INFO("task " << received);
    if (received % kFailEvery == 3) {
      REQUIRE(o == Outcome::TaskFailure);
      REQUIRE(fault.message == "failed " + std::to_string(received));
    } else {
      REQUIRE(o == Outcome::Success);
    }
    ++received;
  }
  CHECK(most_in_flight == window);
  REQUIRE(f.log.count.load() == kTasks);
  for (std::int64_t i = 0; i < kTasks; ++i) {
    INFO("position " << i);
    REQUIRE(f.log.order[i] == i);
  }
  CHECK(ep.alive());
}

TEST_CASE("sending to a forked child does not wait for the task before it",
          "[fork-shm][pipeline]") {
  PipelineFixture f;
  ForkShmTransport::Endpoint<SubWorker> ep(f.leaf);
  ep.launch();
  const std::uint32_t window = ep.window();
  std::vector<TaskArgs> args(window + 1);
  Outcome refused = Outcome::Success;
  Fault why;
  // The first task blocks in the child until the gate opens; the rest of the window still goes
  // out (a send that waited for the child would time the gated task out, and fail below).
  REQUIRE(ep.send(f.request(args[0], kGated), refused, why));
  for (std::uint32_t i = 1; i < window; ++i) {
    REQUIRE(ep.send(f.request(args[i], i), refused, why));
  }
  CHECK(f.log.count.load() == 0);  // nothing finished: the gate is still shut
  // The window is the bound: one more is refused, nothing is sent, the endpoint stays usable.
  CHECK_FALSE(ep.send(f.request(args[window], 100), refused, why));
  CHECK(refused == Outcome::TaskFailure);
  CHECK(why.kind == ErrorKind::Usage);
  CHECK_THAT(why.message, Contains("already in flight"));
  f.log.open.store(true, std::memory_order_seq_cst);
  for (std::uint32_t i = 0; i < window; ++i) {
    Fault fault;
    INFO("task " << i << ": " << fault.message);
    CHECK(ep.receive(fault) == (i % kFailEvery == 3 ? Outcome::TaskFailure : Outcome::Success));
  }
  REQUIRE(f.log.count.load() == window);
  CHECK(f.log.order[0] == kGated);
  for (std::uint32_t i = 1; i < window; ++i) CHECK(f.log.order[i] == i);
  // Room again: the refused task goes out now.
  REQUIRE(ep.send(f.request(args[window], 100), refused, why));
  Fault fault;
  CHECK(ep.receive(fault) == Outcome::Success);
  CHECK(f.log.order[window] == 100);
}

TEST_CASE("a forked child killed with several tasks in flight fails every one of them",
          "[fork-shm][pipeline][failure]") {
  PipelineFixture f;
  ForkShmTransport::Endpoint<SubWorker> ep(f.leaf);
  ep.launch();
  const std::uint32_t window = ep.window();
  REQUIRE(window >= 4);
  std::vector<TaskArgs> args(window);
  Outcome refused = Outcome::Success;
  Fault why;
  // Two tasks that finish, the one that kills the child, and the rest queued behind it.
  REQUIRE(ep.send(f.request(args[0], 0), refused, why));
  REQUIRE(ep.send(f.request(args[1], 1), refused, why));
  REQUIRE(ep.send(f.request(args[2], kDie), refused, why));
  for (std::uint32_t i = 3; i < window; ++i) {
    REQUIRE(ep.send(f.request(args[i], i), refused, why));
  }
  // Each receive waits at most until the liveness check sees the death (every 10 ms); the test's
  // own limit is the harness's per-test timeout.
  Fault fault;
  CHECK(ep.receive(fault) == Outcome::Success);  // answered before the child died: kept
  CHECK(ep.receive(fault) == Outcome::Success);
  Fault running;
  CHECK(ep.receive(running) == Outcome::EndpointFailure);
  CHECK(running.kind == ErrorKind::Transport);
  CHECK_THAT(running.message, Contains("killed by signal 9") && Contains("while running the task"));
  for (std::uint32_t i = 3; i < window; ++i) {
    Fault queued;
    INFO("task " << i);
    CHECK(ep.receive(queued) == Outcome::EndpointFailure);
    CHECK_THAT(queued.message, Contains("killed by signal 9") &&
                                   Contains("before the task started") &&
                                   Contains(std::to_string(i - 2) + " ahead of it"));
  }
  CHECK_FALSE(ep.alive());
  CHECK(f.log.count.load() == 2);
  // Nothing is left in flight, and a new task is refused at once.
  CHECK_FALSE(ep.send(f.request(args[0], 0), refused, why));
  CHECK(refused == Outcome::EndpointFailure);
  CHECK_THAT(why.message, Contains("gone"));
}

TEST_CASE("a task with a deadline waits for the tasks in flight before it goes out",
          "[fork-shm][pipeline][timeout]") {
  PipelineFixture f;
  ForkShmTransport::Endpoint<SubWorker> ep(f.leaf);
  ep.launch();
  std::vector<TaskArgs> args(3);
  Outcome refused = Outcome::Success;
  Fault why;
  REQUIRE(ep.send(f.request(args[0], 0), refused, why));
  REQUIRE(ep.send(f.request(args[1], 1), refused, why));
  LeafRequest timed = f.request(args[2], 2);
  timed.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  timed.deadline_ms = 30'000;
  REQUIRE(ep.send(timed, refused, why));
  // It went out to an idle child: both earlier tasks had been answered by then (the child may
  // have run this one too by the time the count is read).
  CHECK(f.log.count.load() >= 2);
  for (int i = 0; i < 3; ++i) {
    Fault fault;
    CHECK(ep.receive(fault) == Outcome::Success);
  }
  CHECK(f.log.order[2] == 2);
}

TEST_CASE("many tasks over forked children all run exactly once", "[fork-shm][pipeline]") {
  SharedArena arena;
  constexpr int kTasks = 20'000;
  struct Hits {
    std::atomic<std::uint32_t> n[kTasks];  // zero: C++20 atomics value-initialise
  };
  auto& hits = arena.one<Hits>().n;
  Worker w(process_options_for_pipeline(2));
  auto mark = w.register_sub("mark", [&hits](TaskArgsView v) {
    hits[static_cast<std::size_t>(v.scalar(0))].fetch_add(1, std::memory_order_relaxed);
  });
  w.init();
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < kTasks; ++i) o.submit_sub(mark, TaskArgs().add_scalar(i));
  });
  int wrong = 0;
  for (int i = 0; i < kTasks; ++i) wrong += hits[i].load() != 1 ? 1 : 0;
  CHECK(wrong == 0);
  CHECK_NOTHROW(w.close());
}

namespace {

/// One forked sub worker with a `gated` task (runs until `release` is set, 20 s at most) and a
/// `quick` one; both count in `ran`. tasks_sent() is what the lane has handed to the child.
struct GatedChild {
  SharedArena arena;
  std::atomic<bool>& release = arena.one<std::atomic<bool>>(false);
  std::atomic<int>& ran = arena.one<std::atomic<int>>(0);
  Worker w{process_options_for_pipeline(1)};
  CallableHandle gated = w.register_sub("gated", [this](TaskArgsView) {
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!release.load(std::memory_order_seq_cst)) {
      if (std::chrono::steady_clock::now() > limit)
        throw std::runtime_error("the gate was never opened");
      std::this_thread::yield();
    }
    ran.fetch_add(1, std::memory_order_seq_cst);
  });
  CallableHandle quick = w.register_sub(
      "quick", [this](TaskArgsView) { ran.fetch_add(1, std::memory_order_seq_cst); });

  GatedChild() { w.init(); }
  std::uint32_t tasks_sent() {
    std::uint32_t n = 0;
    w.scheduler().for_each_lane([&](auto& lane) {
      if constexpr (requires { lane.endpoint().tasks_sent(); }) n += lane.endpoint().tasks_sent();
    });
    return n;
  }
  /// Polls (200 us apart, 5 s at most) until `n` tasks were sent after `before`; the count seen.
  std::uint32_t sent_reaches(std::uint32_t before, std::uint32_t n) {
    poll_until([&] { return tasks_sent() - before >= n; }, std::chrono::seconds(5),
               std::chrono::microseconds(200));
    return tasks_sent() - before;
  }
};

}  // namespace

TEST_CASE("a task posted while a forked child runs an earlier one is sent before that one ends",
          "[fork-shm][pipeline]") {
  // The lane waits for the child's answer and for the scheduler's next post at once
  // (AwaitsAnswerOr): the second task goes out while the first still runs, so the child finds
  // it as soon as it finishes. A lane that only sent it after receiving the first answer would
  // leave tasks_sent() one short until the gate opens. (The scheduler tops a lane up to two
  // shared tasks: kAnyDepth.)
  GatedChild c;
  for (int round = 0; round < 3; ++round) {
    c.release.store(false, std::memory_order_seq_cst);
    c.ran.store(0, std::memory_order_seq_cst);
    const std::uint32_t before = c.tasks_sent();
    std::uint32_t seen = 0;
    std::uint32_t first = 0;
    c.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_sub(c.gated);
      first = c.sent_reaches(before, 1);  // the lane sent it and now waits for its answer
      o.submit_sub(c.quick);
      seen = c.sent_reaches(before, 2);
      c.release.store(true, std::memory_order_seq_cst);  // ends the run either way
    });
    INFO("round " << round);
    CHECK(first == 1);
    CHECK(seen == 2);  // the second went out while the first one ran
    CHECK(c.ran.load() == 2);
  }
  CHECK_NOTHROW(c.w.close());
}

TEST_CASE("a backlog of shared tasks fills a forked child's whole window while its first runs",
          "[fork-shm][pipeline]") {
  // With a long shared queue the scheduler posts a lane deeper than kAnyDepth (a quarter of
  // the lane's share, up to LaneCore::kDepth), and the lane sends all of it: the child then
  // finds each next frame already there. 100k empty tasks on one child took 610-640 ns each
  // with a window of 8, 275-325 with 32 (bench_fork, t row).
  static_assert(ForkShmTransport::kWindow <= detail::LaneCore::kDepth,
                "the lane's ring holds the child's whole window");
  constexpr std::uint32_t kWindow = ForkShmTransport::kWindow;
  constexpr int kQuick = 400;  // one lane's backlog: at least 4 * kDepth
  GatedChild c;
  const std::uint32_t before = c.tasks_sent();
  std::uint32_t seen = 0;
  c.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_sub(c.gated);
    for (int i = 0; i < kQuick; ++i) o.submit_sub(c.quick);
    seen = c.sent_reaches(before, kWindow);
    c.release.store(true, std::memory_order_seq_cst);  // ends the run either way
  });
  CHECK(seen == kWindow);  // never more: the window bounds it
  CHECK(c.ran.load() == kQuick + 1);
  CHECK_NOTHROW(c.w.close());
}

namespace {

/// A Worker over one forked sub worker with one callable, "step", that counts in shared memory
/// (mapped before the fork) the tasks that ran; the task whose scalar is `kill_at` kills its
/// child before it counts (none does for -1, or for tasks without a scalar).
struct CountingWorker {
  SharedArena arena;
  std::atomic<int>& ran = arena.one<std::atomic<int>>(0);
  Worker w{process_options_for_pipeline(1)};
  CallableHandle step;
  explicit CountingWorker(std::int64_t kill_at = -1) {
    step = w.register_sub("step", [&r = ran, kill_at](TaskArgsView v) {
      if (v.scalar_count > 0 && static_cast<std::int64_t>(v.scalar(0)) == kill_at)
        ::kill(::getpid(), SIGKILL);
      r.fetch_add(1, std::memory_order_seq_cst);
    });
    w.init();
  }
};

}  // namespace

TEST_CASE("a Worker whose forked child dies with tasks in flight fails the run without hanging",
          "[fork-shm][pipeline][failure]") {
  CountingWorker c(5);
  Worker& w = c.w;
  const CallableHandle step = c.step;
  std::atomic<int>& ran = c.ran;
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (int i = 0; i < 200; ++i) o.submit_sub(step, TaskArgs().add_scalar(i));
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    INFO(e.what());
    CHECK(e.outcome() == Outcome::EndpointFailure);
    CHECK_THAT(std::string(e.what()), Contains("killed by signal 9"));
  }
  CHECK(ran.load() <= 5);  // the death ended the child: nothing after it ran
  CHECK_NOTHROW(w.close());
}

TEST_CASE("the run's thread sends to a forked child itself and takes the answer in its fence",
          "[fork-shm][pipeline][driven]") {
  // A one-task run through a forked child: the Orchestrator's own scheduler pass sends the task
  // (the lane's thread is left asleep) and its fence takes the answer. The lane's thread may
  // still send some (it holds the lane for a moment at a liveness tick), so most, not all.
  CountingWorker c;
  Worker& w = c.w;
  const CallableHandle count = c.step;
  std::atomic<int>& ran = c.ran;
  constexpr int kRuns = 200;
  for (int i = 0; i < kRuns; ++i) {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) { o.submit_sub(count); });
  }
  CHECK(ran.load() == kRuns);
  const WorkerStats st = w.stats();
  REQUIRE(st.lanes.size() == 1);
  INFO("sent by the run's thread: " << st.lanes[0].sent_by_run_thread);
  CHECK(st.lanes[0].completed == static_cast<std::uint64_t>(kRuns));
  CHECK(st.lanes[0].sent_by_run_thread >= kRuns / 2);
  CHECK(st.lanes[0].sent_by_run_thread <= static_cast<std::uint64_t>(kRuns));
  CHECK_NOTHROW(w.close());
}

namespace {

/// Submits `callable` to sub worker `worker` from the run's thread once the scheduler thread
/// sleeps, so the Orchestrator's own pass posts it and sends it to the child (a driven lane).
/// True when it did; false when the lane's thread held the pipeline just then (a liveness tick,
/// or taking the last answer in) and so sent the task itself: a legitimate race that the tests
/// retry rather than count as the behaviour under test.
bool submit_sent_by_run_thread(Worker& w, Orchestrator& o, const CallableHandle& callable,
                               WorkerId worker) {
  REQUIRE(poll_until([&] { return w.scheduler().asleep(); }, std::chrono::seconds(5),
                     std::chrono::microseconds(100)));
  const std::uint64_t before = w.stats().lanes[worker].sent_by_run_thread;
  o.submit_sub(callable, TaskArgs(), worker);
  return w.stats().lanes[worker].sent_by_run_thread == before + 1;
}

}  // namespace

TEST_CASE("a task the run's thread sent completes while the orchestration is still busy",
          "[fork-shm][pipeline][driven]") {
  // Nobody polls for the answer while the orchestration function runs on: the lane's thread
  // takes it (woken by the child, or at its next liveness tick); only the run's fence would
  // otherwise, and the wait below would run out. Every task must complete, whoever sent it.
  Worker w(process_options_for_pipeline(1));
  auto quick = w.register_sub("quick", [](TaskArgsView) {});
  w.init();
  int sent_by_run_thread = 0;
  for (int rep = 0; rep < 8; ++rep) {
    INFO("rep " << rep);
    bool done = false;
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      const std::uint64_t before = w.stats().lanes[0].completed;
      if (submit_sent_by_run_thread(w, o, quick, 0)) ++sent_by_run_thread;
      done = poll_until([&] { return w.stats().lanes[0].completed == before + 1; },
                        std::chrono::seconds(5), std::chrono::microseconds(100));
    });
    CHECK(done);
  }
  CHECK(sent_by_run_thread >= 4);
  CHECK_NOTHROW(w.close());
}

TEST_CASE("a forked child that dies under a task the run's thread sent fails the run at once",
          "[fork-shm][pipeline][driven][failure]") {
  // The task went out from the run's thread, which then stays in the orchestration function:
  // the lane's thread, ticking every 10 ms while a task is in flight, finds the child dead. The
  // run's thread sees the failure without reaching its fence, well within 500 ms (an idle lane
  // thread sleeps a second at a time: a lane that did not tick would miss it). A fresh Worker
  // is tried again when the lane's thread happened to send the task (see above).
  bool sent_here = false;
  for (int attempt = 0; attempt < 5 && !sent_here; ++attempt) {
    INFO("attempt " << attempt);
    Worker w(process_options_for_pipeline(2));
    auto die = w.register_sub("dies", [](TaskArgsView) { ::kill(::getpid(), SIGKILL); });
    auto count = w.register_sub("count", [](TaskArgsView) {});
    w.init();
    bool seen_dead = false;
    try {
      w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
        sent_here = submit_sent_by_run_thread(w, o, die, 0);
        seen_dead = poll_until(
            [&] {
              const WorkerStats st = w.stats();
              return st.lanes[0].dead && st.lanes[0].failed == 1;
            },
            std::chrono::milliseconds(500), std::chrono::milliseconds(1));
      });
      FAIL("run() did not throw");
    } catch (const TaskError& e) {
      INFO(e.what());
      CHECK(e.outcome() == Outcome::EndpointFailure);
      CHECK_THAT(std::string(e.what()), Contains("killed by signal 9"));
    }
    if (!sent_here) continue;
    CHECK(seen_dead);
    // The other child takes the shared work from now on.
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (int i = 0; i < 10; ++i) o.submit_sub(count);
    });
    CHECK(w.stats().lanes[1].completed == 10);
    CHECK_NOTHROW(w.close());
  }
  CHECK(sent_here);
}

TEST_CASE("a burst to a forked child goes out from passes off the run's thread, and completes",
          "[fork-shm][pipeline][driven]") {
  // More live tasks than the run's thread routes inline: the scheduler thread (or an idle lane)
  // runs the passes, and each sends what it posts to the child itself. The orchestration then
  // waits for every answer without reaching its fence: the spinning scheduler thread, or the
  // lane's thread once nobody polls (the child wakes it), must take them in. A poller that never
  // let go, or a lane thread that left answers to a poller that went to sleep, would hang here.
  CountingWorker c;
  Worker& w = c.w;
  const CallableHandle count = c.step;
  std::atomic<int>& ran = c.ran;
  constexpr std::uint64_t kTasks = 3000;
  for (int rep = 0; rep < 3; ++rep) {
    INFO("rep " << rep);
    const std::uint64_t before = w.stats().lanes[0].completed;
    bool done = false;
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (std::uint64_t i = 0; i < kTasks; ++i) o.submit_sub(count);
      done = poll_until([&] { return w.stats().lanes[0].completed == before + kTasks; },
                        std::chrono::seconds(10), std::chrono::microseconds(200));
    });
    CHECK(done);
  }
  CHECK(ran.load() == static_cast<int>(3 * kTasks));
  const LaneStats l = w.stats().lanes.at(0);
  INFO("sent by the run's thread " << l.sent_by_run_thread << ", by other passes "
                                   << l.sent_by_passes << ", of " << l.submitted);
  CHECK(l.sent_by_passes > 0);
  CHECK(l.sent_by_run_thread + l.sent_by_passes <= l.submitted);
  CHECK_NOTHROW(w.close());
}

TEST_CASE("a forked lane's thread waits for the answers to the tasks with a deadline it sent",
          "[fork-shm][pipeline][driven][deadline]") {
  // Only the lane's thread sends a task with a deadline (it kills the child at that deadline),
  // so it must stay with each until its answer comes, even while the run's fence polls and
  // would take the answer in: a lane thread that left it to the fence could not enforce the
  // deadline. Untimed tasks it leaves to whoever else collects (the fence, the scheduler
  // thread), which the t row of bench_fork measures.
  CountingWorker c;
  Worker& w = c.w;
  CallConfig timed;
  timed.timeout = std::chrono::seconds(30);
  constexpr int kRuns = 40;
  const LaneStats before = w.stats().lanes.at(0);
  for (int i = 0; i < kRuns; ++i) {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_sub(c.step, TaskArgs(), timed);
    });
  }
  const LaneStats after = w.stats().lanes.at(0);
  CHECK(c.ran.load() == kRuns);
  CHECK(after.completed - before.completed == static_cast<std::uint64_t>(kRuns));
  CHECK(after.sent_by_run_thread == before.sent_by_run_thread);  // the lane's thread sent them
  CHECK(after.sent_by_passes == before.sent_by_passes);
  CHECK(after.taken_by_lane_thread - before.taken_by_lane_thread ==
        static_cast<std::uint64_t>(kRuns));
  CHECK_NOTHROW(w.close());
}

TEST_CASE("an answer nobody polls for is taken at once, not at the lane's next liveness tick",
          "[fork-shm][pipeline][driven]") {
  // The orchestration sends one task at a time and waits for each inside the run (no fence
  // polls). Whoever polled last (the scheduler thread's spin) must have let go, so the child,
  // about to sleep with an answer nobody took, wakes the lane's thread for it. A poller flag
  // left up would leave every answer to the lane's 10 ms liveness tick instead.
  Worker w(process_options_for_pipeline(1));
  auto quick = w.register_sub("quick", [](TaskArgsView) {});
  w.init();
  constexpr int kTasks = 41;
  std::vector<double> waited_ms;
  bool all_done = true;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < kTasks && all_done; ++i) {
      const std::uint64_t before = w.stats().lanes[0].completed;
      const auto t0 = std::chrono::steady_clock::now();
      o.submit_sub(quick);
      all_done = poll_until([&] { return w.stats().lanes[0].completed == before + 1; },
                            std::chrono::seconds(5), std::chrono::microseconds(50));
      waited_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  });
  REQUIRE(all_done);
  std::sort(waited_ms.begin(), waited_ms.end());
  const double median = waited_ms[waited_ms.size() / 2];
  const double tick_ms =
      static_cast<double>(ForkShmTransport::Endpoint<SubWorker>::liveness_tick().count());
  INFO("median wait " << median << " ms, liveness tick " << tick_ms << " ms");
  CHECK(median < tick_ms / 2);
  CHECK_NOTHROW(w.close());
}

TEST_CASE("a forked child that dies under a burst sent by the scheduler's passes fails the run",
          "[fork-shm][pipeline][driven][failure]") {
  // As above, with the child killed part-way: the orchestration stays busy (never reaching its
  // fence), and the death must still end the tasks in flight and mark the lane dead promptly.
  CountingWorker c(1500);
  Worker& w = c.w;
  const CallableHandle step = c.step;
  std::atomic<int>& ran = c.ran;
  bool seen_dead = false;
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (int i = 0; i < 3000; ++i) o.submit_sub(step, TaskArgs().add_scalar(i));
      seen_dead = poll_until([&] { return w.stats().lanes[0].dead; }, std::chrono::seconds(2),
                             std::chrono::milliseconds(1));
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    INFO(e.what());
    CHECK(e.outcome() == Outcome::EndpointFailure);
    CHECK_THAT(std::string(e.what()), Contains("killed by signal 9"));
  }
  CHECK(seen_dead);
  CHECK(ran.load() == 1500);  // every task before the killer ran, none after it
  CHECK(w.stats().lanes.at(0).sent_by_passes > 0);
  CHECK_NOTHROW(w.close());
}

TEST_CASE("a forked child about to sleep with an answer nobody took wakes the parent's sleeper",
          "[fork-shm][pipeline][driven]") {
  // The thread that sent a task may be busy elsewhere (a driven lane's run thread): the child
  // wakes whoever sleeps on the answer event for it. Task 1 is not the one the parent last said
  // it waits for (`wanted` is still task 0), so only that wake can end the sleep below early.
  PipelineFixture f;
  ForkShmTransport::Endpoint<SubWorker> ep(f.leaf);
  ep.launch();
  std::vector<TaskArgs> args(2);
  Outcome refused = Outcome::Success;
  Fault why;
  REQUIRE(ep.send(f.request(args[0], 0), refused, why));
  REQUIRE(ep.receive(why) == Outcome::Success);
  REQUIRE(ep.send(f.request(args[1], kGated), refused, why));
  CHECK_FALSE(ep.answer_ready());
  CHECK_FALSE(ep.answers_waiting());
  bool woke = false;
  std::thread sleeper([&] {
    woke =
        ep.answer_event().await([&] { return ep.answers_waiting(); }, std::chrono::nanoseconds(0),
                                std::chrono::steady_clock::now() + std::chrono::seconds(5));
  });
  // Open the gate only once the sleeper sleeps: an answer before that would be seen without a
  // wake.
  poll_until([&] { return ep.answer_event().has_waiters(); }, std::chrono::seconds(5),
             std::chrono::microseconds(100));
  const auto opened = std::chrono::steady_clock::now();
  f.log.open.store(true, std::memory_order_seq_cst);
  sleeper.join();
  const auto waited = std::chrono::steady_clock::now() - opened;
  CHECK(woke);
  CHECK(waited < std::chrono::seconds(2));
  CHECK(ep.answer_ready());
  CHECK(ep.receive(why) == Outcome::Success);
  CHECK_FALSE(ep.answers_waiting());
}

TEST_CASE("a driven endpoint tells answered, unanswered and dead apart without waiting",
          "[fork-shm][pipeline][driven][failure]") {
  PipelineFixture f;
  ForkShmTransport::Endpoint<SubWorker> ep(f.leaf);
  ep.launch();
  std::vector<TaskArgs> args(2);
  Outcome refused = Outcome::Success;
  Fault why;
  CHECK(ep.answer_ready());  // nothing in flight: receive() would not wait
  REQUIRE(ep.send(f.request(args[0], kGated), refused, why));
  CHECK_FALSE(ep.answer_ready());
  CHECK_FALSE(ep.answers_waiting());
  CHECK(ep.poll_child());
  f.log.open.store(true, std::memory_order_seq_cst);
  CHECK(poll_until([&] { return ep.answers_waiting(); }, std::chrono::seconds(5),
                   std::chrono::microseconds(20)));
  CHECK(ep.answer_ready());
  CHECK(ep.receive(why) == Outcome::Success);
  CHECK_FALSE(ep.answers_waiting());
  // A child that dies under a task: poll_child() notices, and the task is settled at once.
  REQUIRE(ep.send(f.request(args[1], kDie), refused, why));
  CHECK(poll_until([&] { return !ep.poll_child(); }, std::chrono::seconds(5),
                   std::chrono::milliseconds(1)));
  CHECK_FALSE(ep.alive());
  CHECK(ep.answer_ready());
  Fault fault;
  CHECK(ep.receive(fault) == Outcome::EndpointFailure);
  CHECK_THAT(fault.message, Contains("killed by signal 9"));
  CHECK_FALSE(ep.poll_child());
}

}  // namespace simpler_test_fork_pipeline
