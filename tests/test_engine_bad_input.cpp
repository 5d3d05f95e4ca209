// Bad input: each is a clear UsageError (or TimeoutError), and the Worker keeps working.
#include <catch2/catch.hpp>

#include <atomic>

#include <simpler/simpler.hpp>

#include "support/recording_leaf.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_engine_bad_input {

using namespace simpler;
using namespace simpler::testing;
using Catch::Matchers::Contains;

namespace {

struct Fixture {
  Fixture() : w(thread_options(2)) {
    count = w.register_sub("count", [this](TaskArgsView) { ++ran; });
    w.add_next_level(RecordingLeaf(log, 0));
    w.add_next_level(RecordingLeaf(log, 1));
    orch_fn = w.register_orch("nested", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
    w.init();
  }
  /// Proves the Worker still works: a run of five tasks completes.
  void still_works() {
    ran = 0;
    w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
      for (int i = 0; i < 5; ++i) o.submit_sub(count);
    });
    REQUIRE(ran == 5);
    REQUIRE(w.orchestrator().live_tasks() == 0);
  }
  /// Runs `f` inside a run and returns the UsageError it threw.
  template <class F>
  std::string usage_error_in_run(F f) {
    std::string msg;
    try {
      w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) { f(o); });
    } catch (const UsageError& e) {
      msg = e.what();
    }
    return msg;
  }

  RecordLog log;
  TestWorker w;
  std::atomic<int> ran{0};
  CallableHandle count;
  CallableHandle orch_fn;
};

}  // namespace

TEST_CASE("submitting outside run is rejected", "[engine][bad-input]") {
  Fixture f;
  OrchestratorBase* kept = nullptr;
  f.w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) { kept = &o; });
  REQUIRE_THROWS_WITH(kept->submit_sub(f.count), Contains("outside Worker::run"));
  REQUIRE_THROWS_WITH(kept->alloc({4}, DataType::Float32), Contains("outside Worker::run"));
  REQUIRE_THROWS_WITH(kept->scope_begin(), Contains("outside Worker::run"));
  f.still_works();
}

TEST_CASE("unknown and foreign callable handles are rejected", "[engine][bad-input]") {
  Fixture f;
  Worker other(thread_options(1));
  const auto foreign = other.register_sub("count", [](TaskArgsView) {});
  CHECK_THAT(f.usage_error_in_run([&](OrchestratorBase& o) { o.submit_sub(CallableHandle{}); }),
             Contains("default-constructed"));
  CHECK_THAT(f.usage_error_in_run([&](OrchestratorBase& o) { o.submit_sub(foreign); }),
             Contains("another Worker"));
  CallableHandle forged = f.count;
  forged.index = 99;
  CHECK_THAT(f.usage_error_in_run([&](OrchestratorBase& o) { o.submit_sub(forged); }),
             Contains("not registered"));
  // Kind mismatches name the right call.
  CHECK_THAT(f.usage_error_in_run([&](OrchestratorBase& o) { o.submit_sub(f.orch_fn); }),
             Contains("register_sub"));
  CHECK_THAT(
      f.usage_error_in_run([&](OrchestratorBase& o) { o.submit_next_level(f.count, TaskArgs()); }),
      Contains("submit_sub"));
  f.still_works();
}

TEST_CASE("worker ids and groups are validated", "[engine][bad-input][group]") {
  Fixture f;
  CHECK_THAT(f.usage_error_in_run([&](OrchestratorBase& o) {
    o.submit_next_level(f.orch_fn, TaskArgs(), default_call_config(), 2);
  }),
             Contains("worker id 2 does not exist"));
  CHECK_THAT(
      f.usage_error_in_run([&](OrchestratorBase& o) { o.submit_sub(f.count, TaskArgs(), 7); }),
      Contains("sub worker id 7 does not exist"));
  CHECK_THAT(f.usage_error_in_run([&](OrchestratorBase& o) {
    o.submit_next_level_group(f.orch_fn, std::vector<TaskArgs>(2), default_call_config(), {1, 1});
  }),
             Contains("appears twice"));
  CHECK_THAT(
      f.usage_error_in_run([&](OrchestratorBase& o) { o.submit_next_level_group(f.orch_fn, {}); }),
      Contains("at least one member"));
  CHECK_THAT(f.usage_error_in_run([&](OrchestratorBase& o) {
    o.submit_sub_group(f.count, std::vector<TaskArgs>(3));
  }),
             Contains("needs as many sub workers"));
  CHECK_THAT(f.usage_error_in_run([&](OrchestratorBase& o) {
    o.submit_next_level_group(f.orch_fn, std::vector<TaskArgs>(2), default_call_config(), {0});
  }),
             Contains("1 workers given for 2 members"));
  f.still_works();
}

TEST_CASE("malformed tensors and argument orders are rejected", "[engine][bad-input]") {
  Fixture f;
  float x[8] = {};
  const std::uint32_t six[] = {1, 1, 1, 1, 1, 1};
  CHECK_THROWS_WITH(make_tensor(x, six, DataType::Float32), Contains("dimensions"));
  CHECK_THROWS_WITH(make_tensor(x, {8}, static_cast<DataType>(42)), Contains("dtype"));
  ContinuousTensor bad = make_tensor(x, {8}, DataType::Float32);
  bad.ndims = 6;
  CHECK_THROWS_WITH(TaskArgs().add_tensor(bad), Contains("ndims"));
  TaskArgs a;
  a.add_scalar(1);
  CHECK_THROWS_WITH(a.add_tensor(make_tensor(x, {8}, DataType::Float32)),
                    Contains("before the first scalar"));
  CHECK_THROWS_WITH(
      TaskArgs().add_tensor(make_tensor(x, {8}, DataType::Float32), static_cast<TensorArgType>(9)),
      Contains("not a TensorArgType"));
  f.still_works();
}

TEST_CASE("scope misuse is rejected", "[engine][bad-input][scope]") {
  Fixture f;
  CHECK_THAT(f.usage_error_in_run([&](OrchestratorBase& o) { o.scope_end(); }),
             Contains("without scope_begin"));
  CHECK_THAT(f.usage_error_in_run([&](OrchestratorBase& o) {
    for (int i = 0; i < 100; ++i) o.scope_begin();
  }),
             Contains("at most 64"));
  // 63 user scopes on top of the run's own are fine.
  f.w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < 63; ++i) o.scope_begin();
    CHECK(o.scope_depth() == 64);
    o.submit_sub(f.count);
    for (int i = 0; i < 63; ++i) o.scope_end();
  });
  // Leaving a scope open is reported after the run drained.
  CHECK_THROWS_WITH(
      f.w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) { o.scope_begin(); }),
      Contains("left 1 scope(s) open"));
  f.still_works();
}

TEST_CASE("heap ring limits are enforced with a deadline", "[engine][bad-input][heap]") {
  WorkerOptions opts = thread_options(1);
  opts.heap_ring_size = 64 * 1024;
  opts.heap_wait = std::chrono::milliseconds(50);
  Worker w(opts);
  std::atomic<int> ran{0};
  auto count = w.register_sub("count", [&](TaskArgsView) { ++ran; });
  w.init();
  auto run_error = [&](auto f) {
    std::string msg;
    try {
      w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) { f(o); });
    } catch (const Error& e) {
      msg = e.what();
    }
    return msg;
  };
  CHECK_THAT(run_error([](OrchestratorBase& o) { o.alloc({100 * 1024}, DataType::UInt8); }),
             Contains("raise WorkerOptions::heap_ring_size"));
  CHECK_THAT(run_error([&](OrchestratorBase& o) {
               o.submit_sub(count,
                            TaskArgs().add_tensor(make_tensor(nullptr, {1 << 20}, DataType::UInt8),
                                                  TensorArgType::Output));
             }),
             Contains("heap ring 0"));
  // Everything in the run's own scope stays alive until the run ends: only this orchestration
  // could free the ring, so a full ring fails at once (test_hardening.cpp has more).
  std::string full;
  try {
    w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
      for (int i = 0; i < 1000; ++i) o.alloc({1024}, DataType::UInt8);
    });
  } catch (const UsageError& e) {
    full = e.what();
  }
  CHECK_THAT(full, Contains("heap ring 0") && Contains("outermost scope"));
  // Buffers of closed scopes whose tasks still run come back, so that wait is bounded by
  // heap_wait instead (test_hardening.cpp: "a heap-ring wait ends at its deadline ...").
  // Inner scopes use their own ring and reclaim: the same volume goes through.
  ran = 0;
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < 1000; ++i) {
      auto s = o.scope();
      const auto t = o.alloc({1024}, DataType::UInt8);
      o.submit_sub(count, TaskArgs().add_tensor(t));
    }
  });
  CHECK(ran == 1000);
}

TEST_CASE("lifecycle misuse is rejected", "[engine][bad-input][lifecycle]") {
  Fixture f;
  CHECK_THROWS_WITH(f.w.init(), Contains("already initialised"));
  f.still_works();
  CHECK_THROWS_WITH(f.w.add_next_level(RecordingLeaf(f.log, 9)), Contains("before init()"));
  CHECK_THROWS_WITH(f.w.register_sub("count", [](TaskArgsView) {}), Contains("already registered"));
  CHECK_THROWS_WITH(f.w.run({}), Contains("empty"));
  CHECK_THROWS_WITH(
      f.w.run([&](OrchestratorBase&, TaskArgsView, const CallConfig&) { f.w.close(); }),
      Contains("inside a run"));
  CHECK_THROWS_WITH(f.w.run([&](OrchestratorBase&, TaskArgsView, const CallConfig&) {
    f.w.run([](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  }),
                    Contains("re-entrant"));
  f.still_works();
  f.w.close();
  f.w.close();  // idempotent
  CHECK_THROWS_WITH(f.w.run([](OrchestratorBase&, TaskArgsView, const CallConfig&) {}),
                    Contains("closed"));

  Worker fresh(thread_options(1));
  CHECK_THROWS_WITH(fresh.run([](OrchestratorBase&, TaskArgsView, const CallConfig&) {}),
                    Contains("not initialised"));
  WorkerOptions neg = thread_options(-1);
  CHECK_THROWS_WITH(Worker(neg), Contains("num_sub_workers"));
}

TEST_CASE("a bad CallConfig is rejected at submit", "[engine][bad-input]") {
  Fixture f;
  CallConfig cfg;
  cfg.enable_pmu = 1;
  CHECK_THAT(f.usage_error_in_run(
                 [&](OrchestratorBase& o) { o.submit_next_level(f.orch_fn, TaskArgs(), cfg, 0); }),
             Contains("output_prefix"));
  cfg.enable_pmu = 0;
  cfg.block_dim = 24;
  f.w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(f.orch_fn, TaskArgs(), cfg, 1);
  });
  const auto e = f.log.entries();
  REQUIRE(e.size() == 1);
  CHECK(e[0].config.block_dim == 24);
  CHECK(e[0].leaf == 1);
  f.still_works();
}

}  // namespace simpler_test_engine_bad_input
