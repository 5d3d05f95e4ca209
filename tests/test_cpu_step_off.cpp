// A forked child that keeps sharing a CPU with the parent thread that sends it tasks steps off
// it (detail::CpuStepOff): the policy against a fake scheduler, including failing affinity
// calls, and a real child made to share the run's thread's CPU.
#include <catch2/catch.hpp>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/recording_leaf.hpp"
#include "support/shared_arena.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_cpu_step_off {

using namespace simpler;
using namespace simpler::testing;
using detail::CpuStepOff;
using namespace std::chrono_literals;

namespace {

/// A fake scheduler for CpuStepOff::Ops: the thread's CPU and mask, failures on demand, a clock
/// the test moves, and every mask set, in order. Function pointers cannot capture, so the
/// state is a global the tests reset.
struct FakeOs {
  int cpu = 0;
  cpu_set_t mask{};
  bool fail_get = false;
  int fail_set_call = -1;  ///< the index (0-based) of the set_affinity call that fails
  std::vector<cpu_set_t> sets;
  std::vector<std::uint32_t> announced_at_set;  ///< the step flag at each set_affinity call
  CpuStepOff::Clock::time_point now{std::chrono::seconds(100)};

  void reset(std::initializer_list<int> cpus, int on) {
    *this = FakeOs{};
    CPU_ZERO(&mask);
    for (int c : cpus) CPU_SET(c, &mask);
    cpu = on;
  }
};
FakeOs os;
std::atomic<std::uint32_t> announced{0};  ///< CpuStepOff::announce_to's flag (MailboxHeader)

constexpr CpuStepOff::Ops kFakeOps{
    []() noexcept { return os.cpu; },
    [](cpu_set_t& out) noexcept {
      if (os.fail_get) return false;
      out = os.mask;
      return true;
    },
    [](const cpu_set_t& m) noexcept {
      os.announced_at_set.push_back(announced.load());
      if (static_cast<int>(os.sets.size()) == os.fail_set_call) {
        os.sets.push_back(m);
        return false;
      }
      os.sets.push_back(m);
      os.mask = m;
      // A mask without the current CPU moves the thread to the lowest CPU of it (the kernel's
      // choice; any would do).
      if (!CPU_ISSET(os.cpu, &m)) {
        for (int c = 0; c < CPU_SETSIZE; ++c) {
          if (CPU_ISSET(c, &m)) {
            os.cpu = c;
            break;
          }
        }
      }
      return true;
    },
    []() noexcept { return os.now; },
};

/// One batch of one task sent from `sender`, answered.
bool batch(CpuStepOff& s, int sender) {
  s.picked(sender);
  return s.batch_done();
}

std::vector<int> cpus_of(const cpu_set_t& m) {
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &m)) out.push_back(c);
  }
  return out;
}

}  // namespace

TEST_CASE("a child steps off its sender's CPU after two shared batches, and restores its mask",
          "[fork][step-off]") {
  os.reset({0, 1, 2}, 1);
  CpuStepOff s(kFakeOps);
  CHECK_FALSE(batch(s, 1));  // the first shared batch: not yet
  CHECK(os.sets.empty());
  CHECK(batch(s, 1));
  CHECK(s.steps() == 1);
  REQUIRE(os.sets.size() == 2);
  CHECK(cpus_of(os.sets[0]) == std::vector<int>{0, 2});     // away from CPU 1
  CHECK(cpus_of(os.sets[1]) == std::vector<int>{0, 1, 2});  // and the mask it had, back
  CHECK(os.cpu != 1);
  CHECK_FALSE(s.off());
}

TEST_CASE("a step is announced from before its first affinity call until after its last",
          "[fork][step-off]") {
  const auto step_with = [](int fail_set_call) {
    os.reset({0, 1}, 0);
    os.fail_set_call = fail_set_call;
    announced = 7;  // anything: the step sets and clears it
    CpuStepOff s(kFakeOps);
    s.announce_to(&announced);
    CHECK_FALSE(batch(s, 0));
    CHECK(announced == 7);  // no step, no announcement
    batch(s, 0);
    return s.steps();
  };
  SECTION("a step that works") {
    CHECK(step_with(-1) == 1);
    CHECK(os.announced_at_set == std::vector<std::uint32_t>{1, 1});
    CHECK(announced == 0);
  }
  SECTION("narrowing the mask fails") {
    CHECK(step_with(0) == 0);
    CHECK(os.announced_at_set == std::vector<std::uint32_t>{1});
    CHECK(announced == 0);
  }
  SECTION("restoring the mask fails") {
    CHECK(step_with(1) == 1);
    CHECK(os.announced_at_set == std::vector<std::uint32_t>{1, 1});
    CHECK(announced == 0);
  }
}

TEST_CASE("a batch on another CPU than the sender's, or of unknown origin, resets the streak",
          "[fork][step-off]") {
  os.reset({0, 1}, 0);
  CpuStepOff s(kFakeOps);
  for (int i = 0; i < 10; ++i) {
    CHECK_FALSE(batch(s, 0));
    CHECK_FALSE(batch(s, i % 2 == 0 ? 1 : -1));  // apart, or a sender that said "do not step"
  }
  CHECK(s.steps() == 0);
  CHECK(os.sets.empty());
  s.picked(0);  // a batch of several tasks counts once: the last one's sender decides
  s.picked(1);
  CHECK_FALSE(s.batch_done());
  CHECK(os.sets.empty());
}

TEST_CASE(
    "steps are rate-limited: a step that does not hold doubles the interval, a sleep resets it",
    "[fork][step-off]") {
  os.reset({0, 1}, 0);
  CpuStepOff s(kFakeOps);
  REQUIRE_FALSE(batch(s, 0));
  REQUIRE(batch(s, 0));  // first step, to CPU 1; the interval is now kMinInterval
  REQUIRE(os.cpu == 1);
  // Sharing again at once (the sender followed) without sleeping: not before the interval.
  CHECK_FALSE(batch(s, 1));
  CHECK_FALSE(batch(s, 1));
  CHECK(s.steps() == 1);
  os.now += CpuStepOff::kMinInterval;
  CHECK(batch(s, 1));  // did not hold: the next interval is twice as long
  CHECK(s.steps() == 2);
  std::chrono::milliseconds expected = 2 * CpuStepOff::kMinInterval;
  for (int round = 0; round < 12; ++round) {
    const int here = os.cpu;
    CHECK_FALSE(batch(s, here));  // shared again right after the step
    os.now += expected - 1us;
    CHECK_FALSE(batch(s, here));  // two in a row, but within the interval
    os.now += 1us;
    CHECK(batch(s, here));
    expected = std::min(expected * 2, std::chrono::milliseconds(CpuStepOff::kMaxInterval));
  }
  CHECK(expected == CpuStepOff::kMaxInterval);  // capped
  CHECK(s.steps() == 14);
  // After a sleep, sharing is the kernel's wake-up placement again: the interval after the
  // next step is kMinInterval (the wait already set stands).
  s.sleeping();
  const int here = os.cpu;
  CHECK_FALSE(batch(s, here));
  os.now += CpuStepOff::kMaxInterval - 1us;
  CHECK_FALSE(batch(s, here));
  os.now += 1us;
  CHECK(batch(s, here));
  const int there = os.cpu;
  CHECK_FALSE(batch(s, there));
  os.now += CpuStepOff::kMinInterval;
  CHECK(batch(s, there));
  CHECK(s.steps() == 16);
}

TEST_CASE("a step held for kHeld resets the interval even without a sleep", "[fork][step-off]") {
  os.reset({0, 1}, 0);
  CpuStepOff s(kFakeOps);
  REQUIRE_FALSE(batch(s, 0));
  REQUIRE(batch(s, 0));
  REQUIRE_FALSE(batch(s, os.cpu));
  os.now += CpuStepOff::kMinInterval;
  REQUIRE(batch(s, os.cpu));  // not held: the interval is 2 ms now
  os.now += CpuStepOff::kHeld;
  REQUIRE_FALSE(batch(s, os.cpu));  // sharing starts again only kHeld later
  REQUIRE(batch(s, os.cpu));        // held: back to 1 ms
  REQUIRE_FALSE(batch(s, os.cpu));
  os.now += CpuStepOff::kMinInterval;
  CHECK(batch(s, os.cpu));  // at 1 ms, and this one did not hold: 2 ms
  CHECK_FALSE(batch(s, os.cpu));
  os.now += CpuStepOff::kMinInterval;
  CHECK_FALSE(batch(s, os.cpu));
  os.now += CpuStepOff::kMinInterval;
  CHECK(batch(s, os.cpu));
  CHECK(s.steps() == 5);
}

TEST_CASE("a child allowed on one CPU never changes its affinity", "[fork][step-off]") {
  os.reset({3}, 3);
  CpuStepOff s(kFakeOps);
  for (int i = 0; i < 100; ++i) {
    os.now += 1ms;
    CHECK_FALSE(batch(s, 3));
  }
  CHECK(s.steps() == 0);
  CHECK(os.sets.empty());
  CHECK_FALSE(s.off());
  CHECK(os.cpu == 3);
}

TEST_CASE("a failing affinity call ends stepping and never leaves a mask wider than the old one",
          "[fork][step-off]") {
  SECTION("reading the mask fails") {
    os.reset({0, 1}, 0);
    os.fail_get = true;
    CpuStepOff s(kFakeOps);
    CHECK_FALSE(batch(s, 0));
    CHECK_FALSE(batch(s, 0));
    CHECK(s.off());
    os.fail_get = false;
    for (int i = 0; i < 10; ++i) {
      os.now += 1s;
      CHECK_FALSE(batch(s, os.cpu));
    }
    CHECK(os.sets.empty());
    CHECK(s.steps() == 0);
  }
  SECTION("narrowing it fails: the thread stays where it was, with its mask") {
    os.reset({0, 1}, 0);
    os.fail_set_call = 0;
    CpuStepOff s(kFakeOps);
    CHECK_FALSE(batch(s, 0));
    CHECK_FALSE(batch(s, 0));
    CHECK(s.off());
    CHECK(s.steps() == 0);
    CHECK(os.cpu == 0);
    CHECK(cpus_of(os.mask) == std::vector<int>{0, 1});
    os.now += 1s;
    CHECK_FALSE(batch(s, 0));
    CHECK_FALSE(batch(s, 0));
    CHECK(os.sets.size() == 1);  // no second try
  }
  SECTION("restoring it fails: the step counts, the narrower mask stays, stepping ends") {
    os.reset({0, 1, 2}, 0);
    os.fail_set_call = 1;
    CpuStepOff s(kFakeOps);
    CHECK_FALSE(batch(s, 0));
    CHECK(batch(s, 0));
    CHECK(s.off());
    CHECK(s.steps() == 1);
    CHECK(cpus_of(os.mask) == std::vector<int>{1, 2});  // a subset of what it had
    os.now += 1s;
    CHECK_FALSE(batch(s, os.cpu));
    CHECK_FALSE(batch(s, os.cpu));
    CHECK(os.sets.size() == 2);
  }
}

namespace {

/// Shared with the child: where it ran, and the size of its mask then.
struct Where {
  std::atomic<int> cpu{-1};
  std::atomic<int> mask_cpus{0};
};

cpu_set_t only(int cpu) {
  cpu_set_t m;
  CPU_ZERO(&m);
  CPU_SET(cpu, &m);
  return m;
}

}  // namespace

// Runs in every build. It failed 4 of 12 runs while it was hidden, for two causes it now
// guards: AwakeThreads counted the cores on the first thread that asked, which here was the
// run's thread after the test pinned it (one core: the process always looked crowded and no
// frame named its sender's CPU), and the lane's thread raced the run's fence for the child's
// answers, stayed awake from run to run, and made the process crowded that way.
TEST_CASE("a forked child made to share the run's thread's CPU moves off it and keeps its mask",
          "[fork][step-off][process]") {
  cpu_set_t allowed;
  REQUIRE(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  const std::vector<int> cpus = cpus_of(allowed);
  REQUIRE(!cpus.empty());
  const int home = cpus.front();

  SharedArena arena;
  Where& where = arena.one<Where>();
  WorkerOptions o = thread_options(1);
  o.child_mode = ChildMode::Process;
  Worker w(o);
  // Runs in the child: moves it onto `home` (then gives back the whole mask, as a user's
  // kernel library might; the child stays where it is until something moves it).
  auto go_home = w.register_sub("go_home", [home](TaskArgsView) {
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof all, &all) != 0) throw std::runtime_error("getaffinity");
    const cpu_set_t one = only(home);
    if (sched_setaffinity(0, sizeof one, &one) != 0) throw std::runtime_error("setaffinity");
    if (sched_setaffinity(0, sizeof all, &all) != 0) throw std::runtime_error("setaffinity");
  });
  auto report = w.register_sub("report", [&where](TaskArgsView) {
    cpu_set_t m;
    where.mask_cpus.store(sched_getaffinity(0, sizeof m, &m) == 0 ? CPU_COUNT(&m) : -1);
    where.cpu.store(sched_getcpu());
  });
  w.init();

  // The run's thread (this one) on `home` only; the Worker's own threads keep their masks.
  const cpu_set_t pinned = only(home);
  REQUIRE(sched_setaffinity(0, sizeof pinned, &pinned) == 0);
  struct Restore {
    cpu_set_t mask;
    ~Restore() { sched_setaffinity(0, sizeof(mask), &mask); }
  } restore{allowed};

  const auto one_task = [](const CallableHandle& h) {
    return [&h](Orchestrator& orc, TaskArgsView, const CallConfig&) { orc.submit_sub(h); };
  };
  // A child steps only off a CPU its sender named, and a sender names none while the process
  // has as many threads awake as cores (CpuStepOff::sender_cpu). Under load from other
  // processes (ctest -j2) the engine's threads can take milliseconds to get a CPU and fall
  // asleep after a run, so each run waits (bounded) for the process to be uncrowded first.
  int crowded_runs = 0;
  const auto settle = [&crowded_runs] {
    const auto until = std::chrono::steady_clock::now() + 50ms;
    while (detail::AwakeThreads::count() >= detail::AwakeThreads::cores() &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(200us);
    }
    if (detail::AwakeThreads::count() >= detail::AwakeThreads::cores()) ++crowded_runs;
  };
  w.run(one_task(go_home));
  std::uint64_t steps = 0;
  bool seen_away = false;
  // Back-to-back one-task runs: parent and child spin for each other on one CPU until the
  // child steps off. Bounded: a few thousand runs take well under a second either way.
  for (int i = 0; i < 5000 && !(steps > 0 && seen_away); ++i) {
    settle();
    w.run(one_task(report));
    steps = w.stats().lanes.at(0).child_cpu_steps;
    if (steps > 0 && where.cpu.load() != home) seen_away = true;
    // The kernel moved the child away by itself before it stepped: put it back on `home`.
    if (steps == 0 && where.cpu.load() != home) w.run(one_task(go_home));
    REQUIRE(where.mask_cpus.load() == static_cast<int>(cpus.size()));  // never left narrowed
  }
  INFO("child on CPU " << where.cpu.load() << ", run's thread on " << home << ", awake threads "
                       << detail::AwakeThreads::count() << " of " << detail::AwakeThreads::cores()
                       << ", runs started crowded " << crowded_runs);
  if (cpus.size() >= 2) {
    CHECK(steps > 0);
    CHECK(seen_away);
  } else {
    CHECK(steps == 0);  // one CPU: nowhere to step to
  }
  w.close();
}

}  // namespace simpler_test_cpu_step_off
