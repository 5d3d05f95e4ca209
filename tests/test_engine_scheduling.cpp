// Scheduling: directed and any-worker placement, groups, SUB independence, scale and idleness.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <atomic>
#include <fstream>
#include <set>
#include <sstream>

#include <simpler/simpler.hpp>

#include "support/child_modes.hpp"
#include "support/gate.hpp"
#include "support/recording_leaf.hpp"
#include "support/thread_states.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_engine_scheduling {

using namespace simpler;
using namespace simpler::testing;

namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr std::uint64_t kManyTasks = 200'000;  // sanitizers are 10-50x slower
#else
constexpr std::uint64_t kManyTasks = 10'000'000;
#endif

}  // namespace

TEST_CASE("a directed next-level task runs on the worker it names", "[engine][scheduling]") {
  RecordLog log;
  TestWorker w(thread_options(1));
  auto fn = w.register_orch("fn", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  for (int i = 0; i < 3; ++i) CHECK(w.add_next_level(RecordingLeaf(log, i)) == i);
  w.init();
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    for (std::uint64_t i = 0; i < 30; ++i) {
      o.submit_next_level(fn, TaskArgs().add_scalar(i), default_call_config(),
                          static_cast<WorkerId>(i % 3));
    }
  });
  const auto e = log.entries();
  REQUIRE(e.size() == 30);
  for (const auto& r : e) CHECK(static_cast<std::uint64_t>(r.leaf) == r.scalars[0] % 3);
}

TEST_CASE("any-worker tasks spread over idle workers", "[engine][scheduling]") {
  RecordLog log;
  TestWorker w(thread_options(0));
  auto fn = w.register_orch("fn", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  w.add_next_level(RecordingLeaf(log, 0));
  w.add_next_level(RecordingLeaf(log, 1));
  w.init();
  // Each task waits until the other one is running: only two workers at once can finish this.
  Rendezvous both(2);
  log.on(fn.digest, [&](const LeafRequest&, int) { both.arrive_and_wait(); });
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(fn, TaskArgs());
    o.submit_next_level(fn, TaskArgs());
  });
  const auto e = log.entries();
  REQUIRE(e.size() == 2);
  CHECK(e[0].leaf != e[1].leaf);
}

TEST_CASE("a group runs all its members at the same time on the workers it names",
          "[engine][scheduling][group]") {
  RecordLog log;
  TestWorker w(thread_options(0));
  auto fn = w.register_orch("fn", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  for (int i = 0; i < 3; ++i) w.add_next_level(RecordingLeaf(log, i));
  w.init();
  // The members meet (so they run at the same time), then hold until the Orchestrator has
  // looked at the consumer: no member can end before that look, whatever the timing.
  Rendezvous members(2);
  Gate release;
  std::atomic<int> members_done{0};
  std::atomic<int> done_when_consumer_ran{-1};
  log.on(fn.digest, [&](const LeafRequest& r, int) {
    if (r.args.scalar_count == 0) return;
    if (r.args.scalar(0) < 2) {
      members.arrive_and_wait();
      release.wait();
      members_done.fetch_add(1);
    } else {
      done_when_consumer_ran = members_done.load();
    }
  });
  std::int64_t x = 0;
  TaskState consumer_while_held = TaskState::Free;
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    std::vector<TaskArgs> args(2);
    args[0].add_tensor(make_tensor(&x, {1}, DataType::Int64), TensorArgType::InOut).add_scalar(0);
    args[1].add_scalar(1);
    o.submit_next_level_group(fn, std::move(args), default_call_config(), {2, 0});
    // A consumer of the group waits for both members, though worker 1 is idle.
    const auto after = o.submit_next_level(
        fn, TaskArgs().add_tensor(make_tensor(&x, {1}, DataType::Int64)).add_scalar(9));
    consumer_while_held = o.state_of(after.slot_id);
    release.open();
  });
  CHECK(consumer_while_held == TaskState::Pending);
  CHECK(done_when_consumer_ran == 2);
  const auto e = log.entries();
  REQUIRE(e.size() == 3);
  std::set<std::pair<int, std::uint64_t>> placed;
  for (const auto& r : e) placed.insert({r.leaf, r.scalars[0]});
  CHECK(placed.count({2, 0}) == 1);  // member 0 on worker 2
  CHECK(placed.count({0, 1}) == 1);  // member 1 on worker 0
  CHECK(e.back().scalars[0] == 9);   // the consumer ran last
}

TEST_CASE("a blocked group keeps its workers from later singles", "[engine][scheduling][group]") {
  RecordLog log;
  TestWorker w(thread_options(0));
  auto hold = w.register_orch("hold", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  auto fn = w.register_orch("fn", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  w.add_next_level(RecordingLeaf(log, 0));
  w.add_next_level(RecordingLeaf(log, 1));
  w.init();
  Gate gate;
  log.on(hold.digest, [&](const LeafRequest&, int) { gate.wait(); });
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    const auto h = o.submit_next_level(hold, TaskArgs(), default_call_config(), 0);
    REQUIRE(
        eventually([&] { return o.state_of(h.slot_id) == TaskState::Running; }));  // worker 0 busy
    o.submit_next_level_group(fn, std::vector<TaskArgs>(2), default_call_config(), {0, 1});
    o.submit_next_level(fn, TaskArgs().add_scalar(7), default_call_config(),
                        1);  // must not overtake
    gate.open();
  });
  const auto e = log.entries();
  REQUIRE(e.size() == 4);
  CHECK(e[0].digest == hold.digest);
  // On worker 1 the group's member ran before the single submitted after the group.
  std::vector<std::uint64_t> on_one;
  for (const auto& r : e) {
    if (r.leaf == 1) on_one.push_back(r.scalars.empty() ? 0 : r.scalars[0]);
  }
  REQUIRE(on_one.size() == 2);
  CHECK(on_one[0] == 0);  // the group member (no scalars)
  CHECK(on_one[1] == 7);  // then the single
}

TEST_CASE("a saturated next-level pool does not block sub tasks", "[engine][scheduling]") {
  RecordLog log;
  TestWorker w(thread_options(1));
  auto hold = w.register_orch("hold", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  Gate gate;
  auto opener = w.register_sub("open", [&](TaskArgsView) { gate.open(); });
  w.add_next_level(RecordingLeaf(log, 0));
  w.init();
  log.on(hold.digest, [&](const LeafRequest&, int) { gate.wait(); });
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(hold, TaskArgs());
    o.submit_next_level(hold, TaskArgs());  // queued behind the first
    o.submit_sub(opener);                   // runs although every next-level worker is busy
  });
  CHECK(log.size() == 2);
}

TEST_CASE("a sub group runs on distinct sub workers at once", "[engine][scheduling][group]") {
  Worker w(thread_options(3));
  Rendezvous all(3);
  std::mutex mu;
  std::set<std::uint64_t> members;
  auto fn = w.register_sub("member", [&](TaskArgsView v) {
    all.arrive_and_wait();
    std::lock_guard lk(mu);
    members.insert(v.scalar(0));
  });
  w.init();
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    std::vector<TaskArgs> args(3);
    for (std::uint64_t i = 0; i < 3; ++i) args[i].add_scalar(i);
    o.submit_sub_group(fn, std::move(args));
  });
  CHECK(members == std::set<std::uint64_t>{0, 1, 2});
}

TEST_CASE("ten million tasks in one run stay within the memory of live tasks", "[engine][scale]") {
  Worker w(thread_options(2));
  std::atomic<std::uint64_t> ran{0};
  auto fn = w.register_sub("count", [&](TaskArgsView v) {
    ran.fetch_add(v.tensor_count > 0 ? 1 : 1, std::memory_order_relaxed);
  });
  w.init();
  std::vector<std::int64_t> bufs(64);
  std::uint32_t peak_capacity = 0;
  std::size_t peak_map = 0;
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    for (std::uint64_t i = 0; i < kManyTasks;) {
      auto scope = o.scope();
      for (int j = 0; j < 1000; ++j, ++i) {
        // Dependencies and an auto-allocated output each time, so every structure churns.
        TaskArgs a;
        a.add_tensor(make_tensor(&bufs[i % 64], {1}, DataType::Int64), TensorArgType::InOut);
        a.add_tensor(make_tensor(nullptr, {16}, DataType::Float32), TensorArgType::Output);
        o.submit_sub(fn, std::move(a));
      }
      peak_capacity = std::max(peak_capacity, o.slot_capacity());
      peak_map = std::max(peak_map, o.tensor_map_size());
    }
  });
  CHECK(ran == kManyTasks);
  INFO("slot capacity " << peak_capacity << ", peak TensorMap entries " << peak_map);
  // Live tasks are bounded by what one scope holds plus what the scheduler has not retired yet;
  // the slot table never needs to approach the tasks submitted.
  CHECK(peak_capacity <= 64 * 1024);
  CHECK(peak_map <= 64 * 1024);
  CHECK(w.orchestrator().live_tasks() == 0);
  CHECK(w.orchestrator().tensor_map_size() == 0);
  for (int r = 0; r < 4; ++r) CHECK(w.orchestrator().heap_ring(r).live_allocations() == 0);
}

// After the bounded spin every engine thread blocks in the kernel ('S'); a thread that kept
// spinning would stay 'R'. They also count themselves awake (detail::AwakeThreads, which
// spin_until asks whether spinning threads outnumber the cores) while they run, and their sleeps
// take off only what they added: a thread's share is never negative, so with every engine thread
// asleep the count is where it was before the Worker. A lane or scheduler thread that slept
// without counting itself would take its weight off for good and leave the count below.
TEMPLATE_TEST_CASE("an idle initialised Worker has every thread asleep and out of the awake count",
                   "[engine][idle]", InThreads, InProcesses) {
  using detail::AwakeThreads;
  const int before = AwakeThreads::count();
  const auto back_to_before = [&] {
    // >=: the scheduler thread's liveness tick (a timeout) may have it awake, and counted, for a
    // moment; nothing can take the count below `before`. Then the exact value, once it sleeps.
    CHECK(AwakeThreads::count() >= before);
    CHECK(eventually([&] { return AwakeThreads::count() == before; }));
  };
  {
    Worker w(options_for<TestType>(2));
    auto fn = w.register_sub("noop", [](TaskArgsView) {});
    w.init();
    w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
      for (int i = 0; i < 1000; ++i) o.submit_sub(fn);
    });
    REQUIRE(other_threads_fall_asleep(std::chrono::seconds(5)));
    CHECK(other_thread_states().size() >= 3);  // scheduler + 2 lanes
    back_to_before();
    // Awake again for a run, asleep again after it: nothing drifts.
    w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) { o.submit_sub(fn); });
    REQUIRE(other_threads_fall_asleep(std::chrono::seconds(5)));
    back_to_before();
    w.close();
  }
  CHECK(AwakeThreads::count() == before);  // every member has gone
}

// A lane counts its weight (WorkerThread::kAwakeWeight) while it runs a task: a thread sub
// worker's lane counts 1, itself. With the scheduler thread asleep and the run's thread counted
// in `before`, the count is then exactly before + 1; a lane that counted 2 (the weight of a lane
// with a forked child) would make every spinner of a one-lane Worker yield on two cores.
TEST_CASE("a thread sub worker's lane counts one awake thread while it runs a task",
          "[engine][idle]") {
  using detail::AwakeThreads;
  const int before = AwakeThreads::count();
  Worker w(thread_options(1));
  Gate release;
  std::atomic<bool> started{false};
  auto hold = w.register_sub("hold", [&](TaskArgsView) {
    started = true;
    release.wait();
  });
  w.init();
  int seen = 0;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_sub(hold);
    REQUIRE(eventually([&] { return started.load(); }));
    // The scheduler thread may be awake for a moment (its pass, its idle tick): wait for the
    // count to settle at the lane's share.
    eventually([&] { return AwakeThreads::count() == before + 1; });
    seen = AwakeThreads::count();
    release.open();
  });
  CHECK(seen == before + 1);
  w.close();
  CHECK(AwakeThreads::count() == before);
}

TEST_CASE("child memory is keyed per next-level worker", "[engine][scheduling][tensormap]") {
  RecordLog log;
  TestWorker w(thread_options(0));
  auto hold = w.register_orch("hold", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  auto read = w.register_orch("read", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  w.add_next_level(RecordingLeaf(log, 0));
  w.add_next_level(RecordingLeaf(log, 1));
  w.init();
  Gate gate;
  log.on(hold.digest, [&](const LeafRequest&, int) { gate.wait(); });
  // The same device address on two chips is two different buffers.
  ContinuousTensor dev;
  dev.data = 0x10000;
  dev.ndims = 1;
  dev.shapes[0] = 256;
  dev.dtype = DataType::Float32;
  dev.child_memory = 1;
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(hold, TaskArgs().add_tensor(dev, TensorArgType::OutputExisting),
                        default_call_config(), 0);
    const auto other_chip =
        o.submit_next_level(read, TaskArgs().add_tensor(dev), default_call_config(), 1);
    const auto same_chip =
        o.submit_next_level(read, TaskArgs().add_tensor(dev), default_call_config(), 0);
    CHECK(o.state_of(same_chip.slot_id) == TaskState::Pending);
    // The read on the other chip finishes while the write on chip 0 is still held.
    CHECK(eventually([&] { return o.state_of(other_chip.slot_id) == TaskState::Completed; }));
    gate.open();
  });
  CHECK(log.size() == 3);
}

TEST_CASE("a next-level group without named workers runs on distinct idle workers",
          "[engine][scheduling][group]") {
  RecordLog log;
  TestWorker w(thread_options(0));
  auto fn = w.register_orch("fn", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  for (int i = 0; i < 3; ++i) w.add_next_level(RecordingLeaf(log, i));
  w.init();
  Rendezvous all(3);
  log.on(fn.digest, [&](const LeafRequest&, int) { all.arrive_and_wait(); });
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level_group(fn, std::vector<TaskArgs>(3));
  });
  std::set<int> leaves;
  for (const auto& r : log.entries()) leaves.insert(r.leaf);
  CHECK(leaves == std::set<int>{0, 1, 2});
}

}  // namespace simpler_test_engine_scheduling
