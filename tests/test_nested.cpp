// Nested Workers: L4 over L3s, L5 over L4 over L3, in threads and in forked processes, running
// the same engine code with no branch on the level.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <simpler/simpler.hpp>

#include "support/recording_leaf.hpp"
#include "support/shared_arena.hpp"

using namespace simpler;
using namespace simpler::testing;
using Catch::Matchers::Contains;

namespace {

struct InThreads {
  static constexpr ChildMode mode = ChildMode::Thread;
};
struct InProcesses {
  static constexpr ChildMode mode = ChildMode::Process;
};

template <class Mode>
WorkerOptions level(int lvl, int subs) {
  WorkerOptions o = thread_options(subs);
  o.level = lvl;
  o.child_mode = Mode::mode;
  return o;
}

}  // namespace

TEMPLATE_TEST_CASE("an L4 runs orchestrations on two L3s that run sub tasks",
                   "[nested][conformance]", InThreads, InProcesses) {
  SharedArena arena;  // before any fork
  auto out = arena.make<std::int64_t>(2, 0);
  // Orchestrations below run on engine threads or in children: Catch's CHECK is not usable there.
  auto& wrong_level = arena.one<std::atomic<int>>(0);
  Worker w4(level<TestType>(4, 0));
  std::array<CallableHandle, 2> fill{};
  for (int i = 0; i < 2; ++i) {
    Worker l3(level<TestType>(3, 2));
    // Each L3 has its own sub callable; it writes 100 + 10 * its scalar.
    fill[static_cast<std::size_t>(i)] = l3.register_sub("fill", [](TaskArgsView v) {
      *v.tensor(0).as<std::int64_t>() = 100 + 10 * static_cast<std::int64_t>(v.scalar(0));
    });
    CHECK(w4.add_worker(std::move(l3)) == i);
  }
  // The L3 orchestration: one sub task writing the tensor it was given.
  auto l3_orch =
      w4.register_orch("l3_fill", [&](Orchestrator& o, TaskArgsView v, const CallConfig&) {
        if (o.level() != 3) ++wrong_level;
        TaskArgs a;
        a.add_tensor(v.tensor(0), TensorArgType::OutputExisting).add_scalar(v.scalar(0));
        // A handle belongs to the Worker that issued it: pick the L3's own (the scalar says which).
        o.submit_sub(fill[v.scalar(0) - 1], std::move(a));
      });
  w4.init();
  for (int rep = 0; rep < 3; ++rep) {
    out[0] = out[1] = 0;
    w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      CHECK(o.level() == 4);
      for (int i = 0; i < 2; ++i) {
        TaskArgs a;
        a.add_tensor(make_tensor(&out[static_cast<std::size_t>(i)], {1}, DataType::Int64),
                     TensorArgType::OutputExisting)
            .add_scalar(static_cast<std::uint64_t>(i + 1));
        o.submit_next_level(l3_orch, std::move(a), default_call_config(), i);
      }
    });
    CHECK(out[0] == 110);
    CHECK(out[1] == 120);
    CHECK(wrong_level == 0);
  }
  w4.close();
}

TEMPLATE_TEST_CASE("an error two levels down reaches the top with every level's context",
                   "[nested][failure]", InThreads, InProcesses) {
  Worker w4(level<TestType>(4, 0));
  Worker l3(level<TestType>(3, 1));
  auto boom = l3.register_sub("sentinel_kernel",
                              [](TaskArgsView) { throw std::runtime_error("sentinel tripped"); });
  w4.add_worker(std::move(l3));
  auto l3_orch = w4.register_orch(
      "l3_step", [boom](Orchestrator& o, TaskArgsView, const CallConfig&) { o.submit_sub(boom); });
  auto l3_ok = w4.register_orch("l3_ok", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
  w4.init();
  try {
    w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(l3_orch, TaskArgs());
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.level() == 4);
    CHECK(e.callable() == "l3_step");
    CHECK_THAT(what, Contains("L4 next-level worker 0"));
    CHECK_THAT(what, Contains("L3 sub worker 0"));
    CHECK_THAT(what, Contains("sentinel_kernel"));
    CHECK_THAT(what, Contains("sentinel tripped"));
  }
  // Both levels recover: the next run is clean.
  CHECK_NOTHROW(w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(l3_ok, TaskArgs());
  }));
}

TEMPLATE_TEST_CASE("an L5 over an L4 over an L3 runs the same engine at every level", "[nested]",
                   InThreads, InProcesses) {
  SharedArena arena;
  auto& hits = arena.one<std::atomic<int>>(0);
  auto& wrong_level = arena.one<std::atomic<int>>(0);
  Worker w5(level<TestType>(5, 0));
  Worker w4(level<TestType>(4, 0));
  Worker l3(level<TestType>(3, 2));
  auto bump = l3.register_sub("bump", [&hits](TaskArgsView) { ++hits; });
  w4.add_worker(std::move(l3));
  auto l3_orch =
      w4.register_orch("l3_bump", [bump](Orchestrator& o, TaskArgsView v, const CallConfig&) {
        for (std::uint64_t i = 0; i < v.scalar(0); ++i) o.submit_sub(bump);
      });
  w5.add_worker(std::move(w4));
  // The L4 orchestration is registered on the L5 (the parent of the L4).
  auto l4_orch =
      w5.register_orch("l4_fan", [&, l3_orch](Orchestrator& o, TaskArgsView v, const CallConfig&) {
        if (o.level() != 4) ++wrong_level;
        for (int i = 0; i < 3; ++i)
          o.submit_next_level(l3_orch, TaskArgs().add_scalar(v.scalar(0)));
      });
  w5.init();
  w5.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    CHECK(o.level() == 5);
    o.submit_next_level(l4_orch, TaskArgs().add_scalar(4));
    o.submit_next_level(l4_orch, TaskArgs().add_scalar(1));
  });
  CHECK(hits == 3 * 4 + 3 * 1);
  CHECK(wrong_level == 0);
}

TEST_CASE("add_worker validates its child and its timing", "[nested][bad-input]") {
  Worker w4(thread_options(0));
  Worker started(thread_options(1));
  started.init();
  CHECK_THROWS_WITH(w4.add_worker(std::move(started)), Contains("already initialised"));
  w4.init();
  CHECK_THROWS_WITH(w4.add_worker(Worker(thread_options(1))), Contains("before init()"));
}

namespace {
/// A next-level leaf whose start() fails, as a nested Worker whose own children cannot start.
struct FailsToStart {
  void start() { throw std::runtime_error("grandchild refused to start"); }
  void stop() noexcept {}
  void run(const LeafRequest&) {}
  [[nodiscard]] std::string callable_name(const LeafRequest&) const { return "none"; }
};

/// Children of this process, zombies included (a reaped child is gone from /proc).
int child_count() {
  int n = 0;
  const std::string me = std::to_string(::getpid());
  DIR* d = ::opendir("/proc");
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    std::getline(f, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string state;
    std::string ppid;
    rest >> state >> ppid;
    n += ppid == me ? 1 : 0;
  }
  ::closedir(d);
  return n;
}
}  // namespace

TEST_CASE("a child that fails during init makes init() throw and leaves no child behind",
          "[nested][lifecycle]") {
  REQUIRE(child_count() == 0);
  using Lanes = BasicWorker<ProcessSubLane, WorkerThread<ForkShmTransport, FailsToStart>>;
  WorkerOptions o = thread_options(2);
  o.child_mode = ChildMode::Process;
  Lanes w(o);
  w.add_next_level(FailsToStart{});
  CHECK_THROWS_WITH(w.init(), Contains("grandchild refused to start"));
  CHECK(child_count() == 0);  // the sub worker children that did start were reaped too
}

TEST_CASE("close reaps a whole tree of forked Workers", "[nested][lifecycle]") {
  REQUIRE(child_count() == 0);
  {
    Worker w4(level<InProcesses>(4, 0));
    Worker l3(level<InProcesses>(3, 2));
    l3.register_sub("noop", [](TaskArgsView) {});
    w4.add_worker(std::move(l3));
    w4.init();
    CHECK(child_count() == 1);  // the L3; its two sub workers are the L3's children
    w4.close();
    CHECK(child_count() == 0);
  }
}
