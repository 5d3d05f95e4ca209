// Nested Workers: L4 over L3s, L5 over L4 over L3, in threads and in forked processes, running
// the same engine code with no branch on the level.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <simpler/simpler.hpp>

#include "support/child_modes.hpp"
#include "support/gate.hpp"
#include "support/recording_leaf.hpp"
#include "support/shared_arena.hpp"
#include "support/thread_states.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_nested {

using namespace simpler;
using namespace simpler::testing;
using Catch::Matchers::Contains;

namespace {
/// True once `pid` is gone or a zombie (exited, not reaped by whoever inherited it).
bool exited(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

std::vector<pid_t> child_pids(pid_t parent) {
  std::vector<pid_t> out;
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
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::stol(e->d_name)));
  }
  ::closedir(d);
  return out;
}

/// Children of this process, zombies included (a reaped child is gone from /proc).
int child_count() {
  return static_cast<int>(child_pids(::getpid()).size());
}

/// The shared ("rw-s") mappings of process `pid`, one per line of its maps file (not merged), as
/// "begin-end" -> path.
std::map<std::string, std::string> shared_mappings_of(pid_t pid) {
  std::map<std::string, std::string> out;
  std::istringstream maps(detail::read_maps(std::to_string(pid).c_str()));
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode;
    std::getline(fields >> std::ws, path);
    if (perms.size() == 4 && perms[3] == 's') out[range] = path;
  }
  return out;
}
}  // namespace

TEMPLATE_TEST_CASE("an L4 runs orchestrations on two L3s that run sub tasks",
                   "[nested][conformance]", InThreads, InProcesses) {
  SharedArena arena;  // before any fork
  auto out = arena.make<std::int64_t>(2, 0);
  // Orchestrations below run on engine threads or in children: Catch's CHECK is not usable there.
  auto& wrong_level = arena.one<std::atomic<int>>(0);
  Worker w4(options_for<TestType>(0, 4));
  std::array<CallableHandle, 2> fill{};
  for (int i = 0; i < 2; ++i) {
    Worker l3(options_for<TestType>(2, 3));
    // Each L3 has its own sub callable; it writes 100 + 10 * its scalar.
    fill[static_cast<std::size_t>(i)] = l3.register_sub("fill", [](TaskArgsView v) {
      *v.tensor(0).as<std::int64_t>() = 100 + 10 * static_cast<std::int64_t>(v.scalar(0));
    });
    CHECK(w4.add_worker(std::move(l3)) == i);
  }
  // The L3 orchestration: one sub task writing the tensor it was given.
  auto l3_orch =
      w4.register_orch("l3_fill", [&](OrchestratorBase& o, TaskArgsView v, const CallConfig&) {
        if (o.level() != 3) ++wrong_level;
        TaskArgs a;
        a.add_tensor(v.tensor(0), TensorArgType::OutputExisting).add_scalar(v.scalar(0));
        // A handle belongs to the Worker that issued it: pick the L3's own (the scalar says which).
        o.submit_sub(fill[v.scalar(0) - 1], std::move(a));
      });
  w4.init();
  for (int rep = 0; rep < 3; ++rep) {
    out[0] = out[1] = 0;
    w4.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
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
  Worker w4(options_for<TestType>(0, 4));
  Worker l3(options_for<TestType>(1, 3));
  auto boom = l3.register_sub("sentinel_kernel",
                              [](TaskArgsView) { throw std::runtime_error("sentinel tripped"); });
  w4.add_worker(std::move(l3));
  auto l3_orch = w4.register_orch("l3_step", [boom](OrchestratorBase& o, TaskArgsView,
                                                    const CallConfig&) { o.submit_sub(boom); });
  auto l3_ok = w4.register_orch("l3_ok", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  w4.init();
  try {
    w4.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
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
  CHECK_NOTHROW(w4.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(l3_ok, TaskArgs());
  }));
}

TEMPLATE_TEST_CASE("an L5 over an L4 over an L3 runs the same engine at every level", "[nested]",
                   InThreads, InProcesses) {
  SharedArena arena;
  auto& hits = arena.one<std::atomic<int>>(0);
  auto& wrong_level = arena.one<std::atomic<int>>(0);
  Worker w5(options_for<TestType>(0, 5));
  Worker w4(options_for<TestType>(0, 4));
  Worker l3(options_for<TestType>(2, 3));
  auto bump = l3.register_sub("bump", [&hits](TaskArgsView) { ++hits; });
  w4.add_worker(std::move(l3));
  auto l3_orch =
      w4.register_orch("l3_bump", [bump](OrchestratorBase& o, TaskArgsView v, const CallConfig&) {
        for (std::uint64_t i = 0; i < v.scalar(0); ++i) o.submit_sub(bump);
      });
  w5.add_worker(std::move(w4));
  // The L4 orchestration is registered on the L5 (the parent of the L4).
  auto l4_orch = w5.register_orch(
      "l4_fan", [&, l3_orch](OrchestratorBase& o, TaskArgsView v, const CallConfig&) {
        if (o.level() != 4) ++wrong_level;
        for (int i = 0; i < 3; ++i)
          o.submit_next_level(l3_orch, TaskArgs().add_scalar(v.scalar(0)));
      });
  w5.init();
  w5.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    CHECK(o.level() == 5);
    o.submit_next_level(l4_orch, TaskArgs().add_scalar(4));
    o.submit_next_level(l4_orch, TaskArgs().add_scalar(1));
  });
  CHECK(hits == 3 * 4 + 3 * 1);
  CHECK(wrong_level == 0);
}

TEMPLATE_TEST_CASE("each next-level task's orchestration sees the CallConfig it was submitted with",
                   "[nested]", InThreads, InProcesses) {
  // A forked child's frames are reused round the ring, and only a task with a config of its own
  // copies one into its frame: a default-config task in a frame that last carried another
  // config must still see the default (the callee's own default object), and a custom config
  // must arrive whole. 120 tasks go nearly four times round the 32-frame ring, and every frame
  // carries both kinds.
  constexpr int kTasks = 120;
  SharedArena arena;
  auto seen_block_dim = arena.make<std::int32_t>(kTasks, -1);
  auto seen_prefix = arena.make<char>(kTasks, '?');
  auto seen_default = arena.make<std::int32_t>(kTasks, -1);
  Worker w4(options_for<TestType>(0, 4));
  Worker l3(options_for<TestType>(1, 3));
  l3.register_sub("noop", [](TaskArgsView) {});
  w4.add_worker(std::move(l3));
  auto record = w4.register_orch("record_config",
                                 [&](OrchestratorBase&, TaskArgsView v, const CallConfig& c) {
                                   const std::size_t i = v.scalar(0);
                                   seen_block_dim[i] = c.block_dim;
                                   seen_prefix[i] = c.output_prefix[0];
                                   seen_default[i] = &c == &default_call_config() ? 1 : 0;
                                 });
  w4.init();
  const auto custom = [](int i) { return i % 3 == 0; };
  std::vector<CallConfig> configs(kTasks);
  for (int i = 0; i < kTasks; ++i) {
    configs[static_cast<std::size_t>(i)].block_dim = 10 + i;
    configs[static_cast<std::size_t>(i)].output_prefix[0] = static_cast<char>('a' + i % 26);
  }
  w4.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < kTasks; ++i) {
      TaskArgs a;
      a.add_scalar(static_cast<std::uint64_t>(i));
      o.submit_next_level(record, std::move(a),
                          custom(i) ? configs[static_cast<std::size_t>(i)] : default_call_config());
    }
  });
  for (int i = 0; i < kTasks; ++i) {
    INFO("task " << i << (custom(i) ? " (own config)" : " (default config)"));
    const auto k = static_cast<std::size_t>(i);
    if (custom(i)) {
      CHECK(seen_block_dim[k] == 10 + i);
      CHECK(seen_prefix[k] == static_cast<char>('a' + i % 26));
      CHECK(seen_default[k] == 0);
    } else {
      CHECK(seen_block_dim[k] == 0);
      CHECK(seen_prefix[k] == '\0');
      CHECK(seen_default[k] == 1);
    }
  }
}

TEMPLATE_TEST_CASE("the engine's threads carry their level and role in their names",
                   "[nested][diagnostics]", InThreads, InProcesses) {
  // top -H, perf and gdb show these. Counted as deltas: a lost lane's detached thread from
  // another test may still carry one of the names.
  const std::vector<std::string> l4 = {"L4 sched", "L4 next 0"};
  const std::vector<std::string> l3 = {"L3 sched", "L3 sub 0", "L3 sub 1"};
  const auto count = [](const std::vector<std::string>& names) {
    std::vector<std::size_t> n;
    for (const auto& name : names) n.push_back(threads_named(name).size());
    return n;
  };
  const auto l4_before = count(l4);
  const auto l3_before = count(l3);
  Worker w4(options_for<TestType>(0, 4));
  Worker l3w(options_for<TestType>(2, 3));
  l3w.register_sub("noop", [](TaskArgsView) {});
  w4.add_worker(std::move(l3w));
  w4.init();
  const auto l4_up = count(l4);
  const auto l3_up = count(l3);
  for (std::size_t i = 0; i < l4.size(); ++i) {
    INFO(l4[i]);
    CHECK(l4_up[i] == l4_before[i] + 1);
  }
  // A forked L3 runs its engine in its own process: none of its threads are in this one.
  const std::size_t l3_here = std::is_same_v<TestType, InThreads> ? 1 : 0;
  for (std::size_t i = 0; i < l3.size(); ++i) {
    INFO(l3[i]);
    CHECK(l3_up[i] == l3_before[i] + l3_here);
  }
  w4.close();
  CHECK(count(l4) == l4_before);
  CHECK(count(l3) == l3_before);
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
  // The Worker says so instead of half-working.
  CHECK_THROWS_WITH(w.run([](OrchestratorBase&, TaskArgsView, const CallConfig&) {}),
                    Contains("init() failed"));
  CHECK_THROWS_WITH(w.init(), Contains("init() failed"));
  CHECK_NOTHROW(w.close());
}

TEST_CASE("close reaps a whole tree of forked Workers", "[nested][lifecycle]") {
  REQUIRE(child_count() == 0);
  {
    Worker w4(options_for<InProcesses>(0, 4));
    Worker l3(options_for<InProcesses>(2, 3));
    l3.register_sub("noop", [](TaskArgsView) {});
    w4.add_worker(std::move(l3));
    w4.init();
    CHECK(child_count() == 1);  // the L3; its two sub workers are the L3's children
    w4.close();
    CHECK(child_count() == 0);
  }
}

TEST_CASE("killing the top process takes its whole tree of children with it",
          "[nested][lifecycle]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t top = ::fork();
  REQUIRE(top >= 0);
  if (top == 0) {
    // The "parent" under test: an L4 whose L3 child has two sub worker grandchildren.
    ::close(fds[0]);
    try {
      Worker w4(options_for<InProcesses>(0, 4));
      Worker l3(options_for<InProcesses>(2, 3));
      l3.register_sub("noop", [](TaskArgsView) {});
      w4.add_worker(std::move(l3));
      w4.init();
      pid_t l3_pid = -1;
      w4.scheduler().for_each_lane([&](auto& lane) {
        if constexpr (requires { lane.endpoint().pid(); }) l3_pid = lane.endpoint().pid();
      });
      if (::write(fds[1], &l3_pid, sizeof l3_pid) != sizeof l3_pid) ::_exit(3);
      for (;;) ::pause();  // until SIGKILLed
    } catch (...) {
      ::_exit(4);
    }
  }
  ::close(fds[1]);
  pid_t l3 = -1;
  REQUIRE(::read(fds[0], &l3, sizeof l3) == sizeof l3);
  ::close(fds[0]);
  REQUIRE(l3 > 0);
  std::vector<pid_t> tree = child_pids(l3);
  CHECK(tree.size() == 2);  // the L3's sub workers
  // The shared memory of the tree is anonymous (a name in /dev/shm would outlive a SIGKILL):
  // the L3 maps what the top process mapped before forking it (heap rings, its mailbox) plus its
  // sub workers' two mailboxes; a sub worker sees what was mapped before it was forked (its own
  // mailbox included) at the same addresses.
  const auto top_shared = shared_mappings_of(top);
  const auto l3_shared = shared_mappings_of(l3);
  std::size_t l3_own = 0;
  for (const auto& [range, path] : l3_shared) {
    CHECK(path == "/dev/zero (deleted)");
    if (!top_shared.contains(range)) ++l3_own;
  }
  CHECK(l3_own == 2);
  for (const auto& [range, path] : top_shared) CHECK(l3_shared.contains(range));
  for (pid_t sub : tree) {
    const auto sub_shared = shared_mappings_of(sub);
    for (const auto& [range, path] : top_shared) CHECK(sub_shared.contains(range));
    for (const auto& [range, path] : sub_shared) CHECK(l3_shared.contains(range));
    CHECK(sub_shared.size() > top_shared.size());
  }
  tree.push_back(l3);
  ::kill(top, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(top, &status, 0) == top);
  const bool all_gone = eventually(
      [&] { return std::all_of(tree.begin(), tree.end(), [](pid_t p) { return exited(p); }); },
      std::chrono::seconds(10));
  CHECK(all_gone);
}

namespace {
/// A next-level leaf whose child dies during start-up without a word.
struct DiesDuringStart {
  void start() { ::_exit(5); }
  void run(const LeafRequest&) {}
  [[nodiscard]] std::string callable_name(const LeafRequest&) const { return "none"; }
};
}  // namespace

TEST_CASE("a child that exits during init makes init() throw with its exit status",
          "[nested][lifecycle][bad-input]") {
  REQUIRE(child_count() == 0);
  using Lanes = BasicWorker<ProcessSubLane, WorkerThread<ForkShmTransport, DiesDuringStart>>;
  WorkerOptions o = thread_options(1);
  o.child_mode = ChildMode::Process;
  Lanes w(o);
  w.add_next_level(DiesDuringStart{});
  CHECK_THROWS_WITH(w.init(), Contains("exited with code 5 during start-up"));
  CHECK(child_count() == 0);
}

}  // namespace simpler_test_nested
