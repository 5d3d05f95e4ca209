// The lane set is open: a transport and a leaf defined here, outside the library, plug into
// BasicWorker without any change to it (docs/extending.md walks through the same code).
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/matchers.hpp"
#include "support/pumped_transport.hpp"
#include "support/recording_leaf.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_extending {

using namespace simpler;
using namespace simpler::testing;

namespace {

/// A leaf from outside the library: runs orchestration-kind callables by counting them (it
/// never calls the function), and says so with kRuns.
struct CountingLeaf {
  static constexpr std::uint8_t kRuns = kind_bit(CallableKind::Orch);
  std::atomic<int>* count;
  std::atomic<bool>* started;
  void start() { started->store(true); }
  void stop() noexcept { started->store(false); }
  void run(const LeafRequest& r) {
    if (r.args.scalar_count > 0 && r.args.scalar(0) == 13) throw DeviceError("unlucky", -120);
    count->fetch_add(1);
  }
  [[nodiscard]] std::string callable_name(const LeafRequest&) const { return "counted"; }
};
static_assert(Leaf<CountingLeaf> && DeclaresKinds<CountingLeaf> && Starts<CountingLeaf>);

/// A leaf that runs only chip callables (and does nothing with them).
struct ChipOnly {
  static constexpr std::uint8_t kRuns = kind_bit(CallableKind::Chip);
  void run(const LeafRequest&) {}
  [[nodiscard]] std::string callable_name(const LeafRequest&) const { return {}; }
};

using Pumped = PumpedTransport<200>;
static_assert(Transport<Pumped> && DefaultForChildMode<Pumped> && !EnforcesDeadlines<Pumped>);

}  // namespace

TEST_CASE("a transport defined outside the library runs tasks only when the test pumps them",
          "[extending][transport]") {
  using W = BasicWorker<WorkerThread<Pumped, SubWorker>>;
  WorkerOptions o = thread_options(2);
  W w(o);
  std::vector<std::thread::id> ran_on(3);
  const auto record = w.register_sub("record", [&](TaskArgsView v) {
    ran_on[static_cast<std::size_t>(v.scalar(0))] = std::this_thread::get_id();
  });
  w.init();
  CHECK(w.sub_count() == 2);
  Pump& pump = Pumped::pump();
  const std::size_t before = pump.parked_total();
  w.run([&](OrchestratorBase& orc, TaskArgsView, const CallConfig&) {
    for (std::uint64_t i = 0; i < 3; ++i) orc.submit_sub(record, TaskArgs().add_scalar(i));
    // Nothing runs until pumped: the lanes park what they were given.
    for (int i = 0; i < 3; ++i) REQUIRE(pump.run_one(std::chrono::seconds(10)));
  });
  CHECK(pump.parked_total() - before == 3);
  CHECK(pump.waiting() == 0);
  for (const auto& id : ran_on) CHECK(id == std::this_thread::get_id());  // the pumping thread
  w.close();
}

TEST_CASE("a leaf defined outside the library is added with add_child and routed by its kinds",
          "[extending][leaf]") {
  using CountingLane = WorkerThread<ThreadTransport, CountingLeaf>;
  using W = BasicWorker<SubLane, CountingLane>;
  std::atomic<int> count{0};
  std::atomic<bool> started{false};
  W w(thread_options(1));
  CHECK(w.add_child<CountingLane>(CountingLeaf{&count, &started}) == 0);
  CHECK(w.add_child<CountingLane>(CountingLeaf{&count, &started}, "counter b") == 1);
  const auto orch = w.register_orch("o", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  const auto sub = w.register_sub("s", [](TaskArgsView) {});
  w.init();
  CHECK(started.load());  // ThreadTransport started the leaf (Starts)
  w.run([&](OrchestratorBase& orc, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < 10; ++i) orc.submit_next_level(orch, TaskArgs{});
    orc.submit_next_level(orch, TaskArgs{}, default_call_config(), 1);
    orc.submit_sub(sub);
  });
  CHECK(count.load() == 11);
  // A kind the leaf does not declare is refused at submit, naming the lane.
  CHECK_THROWS_MATCHES(w.run([&](OrchestratorBase& orc, TaskArgsView, const CallConfig&) {
    orc.submit_next_level(sub, TaskArgs{});
  }),
                       UsageError, WhatContains("'s' is a sub callable"));
  // A device status the leaf raised reaches the caller as data, not only as text.
  try {
    w.run([&](OrchestratorBase& orc, TaskArgsView, const CallConfig&) {
      orc.submit_next_level(orch, TaskArgs().add_scalar(13), default_call_config(), 1);
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK(e.worker() == "counter b");
    CHECK(e.error_kind() == ErrorKind::Device);
    CHECK(e.code() == -120);
    CHECK(e.message() == "unlucky");
  }
  w.close();
  CHECK_FALSE(started.load());  // and stopped it
}

TEST_CASE("a lane whose leaf cannot run a callable kind is refused as a target at submit",
          "[extending][routing]") {
  using Lane = WorkerThread<ThreadTransport, ChipOnly>;
  BasicWorker<Lane> w(thread_options(0));
  w.add_child<Lane>(ChipOnly{}, "chip-like");
  const auto orch = w.register_orch("o", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  w.init();
  CHECK_THROWS_MATCHES(
      w.run([&](OrchestratorBase& orc, TaskArgsView, const CallConfig&) {
        orc.submit_next_level(orch, TaskArgs{}, default_call_config(), 0);
      }),
      UsageError,
      WhatContains("'o' is a orch callable and none of this Worker's next-level workers runs orch "
                   "callables"));
  w.close();
}

}  // namespace simpler_test_extending
