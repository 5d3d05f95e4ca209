// One conformance suite, run over transport types: the engine gives the same results whether
// sub workers are threads (ThreadTransport), forked processes (ForkShmTransport) or a transport
// from outside the library (the test's PumpedTransport, pumped on a background thread). Each
// instantiates BasicWorker over its own lane set. Everything a task writes lives in shared
// memory (SharedArena, heap rings).
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>

#include <simpler/simpler.hpp>

#include "support/dag_program.hpp"
#include "support/pumped_transport.hpp"
#include "support/recording_leaf.hpp"
#include "support/shared_arena.hpp"

using namespace simpler;
using namespace simpler::testing;

namespace {

/// A Worker whose sub workers are reached through transport T, and whatever T needs running
/// alongside (a pump for the test transport).
template <class T>
struct OnTransport {
  using W = BasicWorker<WorkerThread<T, SubWorker>>;
  static WorkerOptions options(int subs) {
    WorkerOptions o = thread_options(subs);
    o.child_mode = T::kChildMode;
    return o;
  }
};
template <class T>
struct Helper {
  explicit Helper() = default;
};
template <int Tag>
struct Helper<PumpedTransport<Tag>> {
  Pumper pumper{PumpedTransport<Tag>::pump()};
};

using Pumped = PumpedTransport<100>;

}  // namespace

TEMPLATE_TEST_CASE("random tagged DAGs match the oracle on every transport", "[conformance][dag]",
                   ThreadTransport, ForkShmTransport, Pumped) {
  SharedArena arena;  // mapped before init() forks the sub workers
  [[maybe_unused]] Helper<TestType> helper;
  typename OnTransport<TestType>::W w(OnTransport<TestType>::options(2));
  const auto kernel = w.register_sub("dag", dag_kernel);
  const auto snap = w.register_sub("snapshot", dag_snapshot_kernel);
  w.init();
  for (std::uint32_t seed = 1; seed <= 4; ++seed) {
    const auto p = random_program(seed * 104729, 200, 3);
    const auto want = run_oracle(p);
    for (int rep = 0; rep < 2; ++rep) {
      INFO("seed " << seed << " rep " << rep);
      REQUIRE(run_engine(w, kernel, snap, p, arena) == want);
    }
  }
  CHECK(w.orchestrator().live_tasks() == 0);
}

TEMPLATE_TEST_CASE("a failing task skips its cone and names itself on every transport",
                   "[conformance][failure]", ThreadTransport, ForkShmTransport, Pumped) {
  SharedArena arena;
  auto& downstream = arena.one<std::atomic<int>>(0);
  auto& independent = arena.one<std::atomic<int>>(0);
  auto buf = arena.make<std::int64_t>(4, 0);
  [[maybe_unused]] Helper<TestType> helper;
  typename OnTransport<TestType>::W w(OnTransport<TestType>::options(2));
  auto boom = w.register_sub("failing_step",
                             [](TaskArgsView) { throw std::runtime_error("calibration drifted"); });
  auto after = w.register_sub("after", [&downstream](TaskArgsView) { ++downstream; });
  auto other = w.register_sub("other", [&independent](TaskArgsView) { ++independent; });
  w.init();
  auto t = [&](int i) {
    return make_tensor(&buf[static_cast<std::size_t>(i)], {1}, DataType::Int64);
  };
  try {
    w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
      // Independent work first, so the failure cannot make these submits throw.
      for (int i = 0; i < 8; ++i)
        o.submit_sub(other, TaskArgs().add_tensor(t(3), TensorArgType::InOut));
      o.submit_sub(boom, TaskArgs().add_tensor(t(0), TensorArgType::OutputExisting));
      o.submit_sub(after,
                   TaskArgs().add_tensor(t(0)).add_tensor(t(1), TensorArgType::OutputExisting));
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK(e.callable() == "failing_step");
    CHECK(e.message() == "calibration drifted");
    CHECK(e.worker().find("sub worker") != std::string::npos);
    CHECK(e.outcome() == Outcome::TaskFailure);
  }
  CHECK(downstream == 0);
  CHECK(independent == 8);
  // The next run is clean.
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) { o.submit_sub(other); });
  CHECK(independent == 9);
}

TEMPLATE_TEST_CASE("heap-ring outputs written by a task are read by the next on every transport",
                   "[conformance][alloc]", ThreadTransport, ForkShmTransport, Pumped) {
  SharedArena arena;
  auto sum = arena.make<std::int64_t>(1, 0);
  [[maybe_unused]] Helper<TestType> helper;
  typename OnTransport<TestType>::W w(OnTransport<TestType>::options(2));
  auto fill = w.register_sub("fill", [](TaskArgsView v) {
    auto* p = v.tensor(0).as<std::int64_t>();
    for (int i = 0; i < 100; ++i) p[i] = i;
  });
  auto add = w.register_sub("add", [](TaskArgsView v) {
    const auto* p = v.tensor(0).as<const std::int64_t>();
    std::int64_t s = 0;
    for (int i = 0; i < 100; ++i) s += p[i];
    *v.tensor(1).as<std::int64_t>() = s;
  });
  w.init();
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    const auto r = o.submit_sub(
        fill,
        TaskArgs().add_tensor(make_tensor(nullptr, {100}, DataType::Int64), TensorArgType::Output));
    o.submit_sub(add, TaskArgs()
                          .add_tensor(r.output(0))
                          .add_tensor(make_tensor(sum.data(), {1}, DataType::Int64),
                                      TensorArgType::OutputExisting));
  });
  CHECK(sum[0] == 4950);
}
