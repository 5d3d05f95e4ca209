// Failures: a throwing callable fails its task, skips its downstream cone, leaves independent
// work alone, makes later submits throw, and does not leak into the next run.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>

#include <simpler/simpler.hpp>

#include "support/gate.hpp"
#include "support/recording_leaf.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_engine_failure {

using namespace simpler;
using namespace simpler::testing;

namespace {
ContinuousTensor one(std::int64_t& x) {
  return make_tensor(&x, {1}, DataType::Int64);
}
}  // namespace

TEST_CASE("a throwing sub callable fails the run with its context", "[engine][failure]") {
  WorkerOptions opts = thread_options(2);
  opts.level = 3;
  Worker w(opts);
  std::atomic<int> downstream_ran{0};
  std::atomic<int> independent_ran{0};
  Gate submitted;  // the failure happens only after the whole graph was submitted
  auto boom = w.register_sub("exploding_kernel", [&](TaskArgsView) {
    submitted.wait();
    throw std::runtime_error("sensor value out of range");
  });
  auto after = w.register_sub("after", [&](TaskArgsView) { ++downstream_ran; });
  auto other = w.register_sub("other", [&](TaskArgsView) { ++independent_ran; });
  auto noop = w.register_sub("noop", [](TaskArgsView) {});
  w.init();

  std::int64_t a = 0;
  std::int64_t b = 0;
  std::int64_t c = 0;
  std::int64_t z = 0;
  bool later_submit_threw = false;
  try {
    w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
      o.submit_sub(boom, TaskArgs().add_tensor(one(a), TensorArgType::OutputExisting));
      // Downstream cone: a -> b -> c, and a second reader of a.
      o.submit_sub(after,
                   TaskArgs().add_tensor(one(a)).add_tensor(one(b), TensorArgType::OutputExisting));
      o.submit_sub(after,
                   TaskArgs().add_tensor(one(b)).add_tensor(one(c), TensorArgType::OutputExisting));
      o.submit_sub(after, TaskArgs().add_tensor(one(a), TensorArgType::InOut));
      // Independent work.
      for (int i = 0; i < 10; ++i)
        o.submit_sub(other, TaskArgs().add_tensor(one(z), TensorArgType::InOut));
      submitted.open();
      // Once the failure is recorded, submits throw at once.
      try {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (std::chrono::steady_clock::now() < deadline) {
          o.submit_sub(noop);
          std::this_thread::yield();
        }
      } catch (const TaskError& e) {
        later_submit_threw =
            std::string(e.what()).find("sensor value out of range") != std::string::npos;
        throw;
      }
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("exploding_kernel") != std::string::npos);
    CHECK(what.find("sub worker") != std::string::npos);
    CHECK(what.find("sensor value out of range") != std::string::npos);
    CHECK(what.find("L3") != std::string::npos);
    CHECK(e.callable() == "exploding_kernel");
    CHECK(e.message() == "sensor value out of range");
    CHECK(e.outcome() == Outcome::TaskFailure);
    CHECK(e.level() == 3);
  }
  CHECK(later_submit_threw);
  CHECK(downstream_ran == 0);
  CHECK(independent_ran == 10);
  CHECK(w.orchestrator().live_tasks() == 0);

  // The next run on the same Worker is clean.
  std::atomic<int> ok{0};
  auto count = w.register_sub("count", [&](TaskArgsView) { ++ok; });
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < 5; ++i)
      o.submit_sub(count, TaskArgs().add_tensor(one(a), TensorArgType::InOut));
  });
  CHECK(ok == 5);
}

TEST_CASE("a consumer submitted after its producer failed is skipped", "[engine][failure]") {
  Worker w(thread_options(1));
  std::atomic<int> ran{0};
  auto boom = w.register_sub("boom", [](TaskArgsView) { throw std::logic_error("no"); });
  auto after = w.register_sub("after", [&](TaskArgsView) { ++ran; });
  w.init();
  std::int64_t x = 0;
  std::int64_t y = 0;
  CHECK_THROWS_AS(w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    const auto p = o.submit_sub(boom, TaskArgs().add_tensor(one(x), TensorArgType::OutputExisting));
    // Wait until the producer has failed, without submitting (which would throw).
    REQUIRE(eventually([&] { return o.state_of(p.slot_id) == TaskState::Failed; }));
    // The run is failed now: this submit throws before creating a task.
    o.submit_sub(after,
                 TaskArgs().add_tensor(one(x)).add_tensor(one(y), TensorArgType::OutputExisting));
  }),
                  TaskError);
  CHECK(ran == 0);
}

TEST_CASE("a failed group member fails the group once every member ended",
          "[engine][failure][group]") {
  RecordLog log;
  TestWorker w(thread_options(1));
  auto member =
      w.register_orch("member", [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
  auto after =
      w.register_sub("after", [](TaskArgsView) { FAIL("a consumer of a failed group ran"); });
  w.add_next_level(RecordingLeaf(log, 0));
  w.add_next_level(RecordingLeaf(log, 1));
  w.init();
  log.on(member.digest, [](const LeafRequest& r, int) {
    if (r.args.scalar(0) == 1) throw std::runtime_error("member one broke");
  });
  std::int64_t x = 0;
  try {
    w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
      std::vector<TaskArgs> members(2);
      members[0].add_tensor(one(x), TensorArgType::InOut).add_scalar(0);
      members[1].add_scalar(1);
      o.submit_next_level_group(member, std::move(members));
      o.submit_sub(after, TaskArgs().add_tensor(one(x)));
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK(std::string(e.what()).find("member one broke") != std::string::npos);
    CHECK(e.worker().find("next-level worker") != std::string::npos);
  }
  CHECK(log.size() == 2);  // both members ran
}

TEST_CASE("an exception from the orchestration function cancels unstarted tasks",
          "[engine][failure]") {
  Worker w(thread_options(1));
  std::atomic<int> ran{0};
  std::atomic<const OrchestratorBase*> orch{nullptr};
  // Holds the only lane until the run is cancelled, so every other task is still queued then.
  auto hold = w.register_sub("hold", [&](TaskArgsView) {
    REQUIRE(eventually([&] { return orch.load()->run_cancelled(); }));
  });
  auto count = w.register_sub("count", [&](TaskArgsView) { ++ran; });
  w.init();
  struct UserError : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  CHECK_THROWS_AS(w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    orch = &o;
    o.submit_sub(hold);
    for (int i = 0; i < 20; ++i) o.submit_sub(count);
    throw UserError("orchestration gave up");
  }),
                  UserError);
  // Nothing that had not started when the run was cancelled ran; the Worker still works.
  CHECK(ran == 0);
  CHECK(w.orchestrator().live_tasks() == 0);
  ran = 0;
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < 20; ++i) o.submit_sub(count);
  });
  CHECK(ran == 20);
}

TEST_CASE("a callable throwing a non-std exception fails its task with a message",
          "[engine][failure]") {
  Worker w(thread_options(1));
  auto odd = w.register_sub("throws_an_int", [](TaskArgsView) { throw 42; });
  w.init();
  try {
    w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) { o.submit_sub(odd); });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK(e.callable() == "throws_an_int");
    CHECK(e.message() == "a non-std::exception was thrown");
  }
}

}  // namespace simpler_test_engine_failure
