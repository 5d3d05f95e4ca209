// One conformance suite over the library's leaves: a sub worker, a nested Worker and a chip each
// run their kind of callable, fail with the callable's kind and code intact, stay usable after a
// failure, and are refused a callable of another kind at submit. (The transport axis is
// test_conformance.cpp.)
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <string>

#include <simpler/simpler.hpp>

#include "support/child_modes.hpp"
#include "support/chip_modules.hpp"
#include "support/matchers.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_leaf_conformance {

using namespace simpler;
using namespace simpler::testing;

namespace {

TaskArgs write_args(std::int64_t* where, std::int64_t value) {
  TaskArgs a;
  a.add_tensor(make_tensor(where, {1}, DataType::Int64), TensorArgType::OutputExisting)
      .add_scalar(static_cast<std::uint64_t>(value));
  return a;
}

void write_value(TaskArgsView v) {
  *v.tensor(0).as<std::int64_t>() = static_cast<std::int64_t>(v.scalar(0));
}

/// Each case: a Worker whose one next-level (or sub) child runs the leaf, a callable that writes
/// scalar 0 to tensor 0, one that fails with SIMPLER_ERR_KERNEL_FAILED, and one of another kind.
struct SubCase {
  static constexpr const char* kWorker = "sub worker 0";
  Worker w{options_for<InThreads>(1)};
  CallableHandle good, bad, other;
  SubCase() {
    good = w.register_sub("good", write_value);
    bad = w.register_sub("bad", [](TaskArgsView) {
      throw DeviceError("the sub worker's device said no", SIMPLER_ERR_KERNEL_FAILED);
    });
    other = w.register_orch("other", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
  }
  static void submit(Orchestrator& o, const CallableHandle& h, TaskArgs a) {
    o.submit_sub(h, std::move(a));
  }
};

struct NestedCase {
  static constexpr const char* kWorker = "next-level worker 0 (L3)";
  Worker w{options_for<InThreads>(0, 4)};
  CallableHandle good, bad, other;
  CallableHandle inner_good, inner_bad;
  NestedCase() {
    Worker inner(options_for<InThreads>(1));
    // The inner Worker's sub callables live on it; the outer Worker's orchestration functions
    // submit them there.
    inner_good = inner.register_sub("inner_good", write_value);
    inner_bad = inner.register_sub("inner_bad", [](TaskArgsView) {
      throw DeviceError("two levels down", SIMPLER_ERR_KERNEL_FAILED);
    });
    w.add_worker(std::move(inner));
    good = w.register_orch("good", [this](Orchestrator& o, TaskArgsView a, const CallConfig&) {
      TaskArgs fwd;
      fwd.add_tensor(a.tensor(0), TensorArgType::OutputExisting).add_scalar(a.scalar(0));
      o.submit_sub(inner_good, std::move(fwd));
    });
    bad = w.register_orch("bad", [this](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_sub(inner_bad);
    });
    other = w.register_sub("other", [](TaskArgsView) {});
  }
  static void submit(Orchestrator& o, const CallableHandle& h, TaskArgs a) {
    o.submit_next_level(h, std::move(a));
  }
};

struct ChipCase {
  static constexpr const char* kWorker = "chip 0";
  Worker w{[] {
    WorkerOptions o = options_for<InThreads>(0);
    o.device_ids = {0};
    return o;
  }()};
  CallableHandle good, bad, other;
  ChipCase() {
    good = w.register_chip(chipw_callable("good", "fill"));
    bad = w.register_chip(chipw_callable("bad", "fail"));
    other = w.register_orch("other", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
  }
  static void submit(Orchestrator& o, const CallableHandle& h, TaskArgs a) {
    o.submit_next_level(h, std::move(a));
  }
};

}  // namespace

TEMPLATE_TEST_CASE(
    "every leaf runs its callables, reports failures with kind and code, and "
    "stays usable",
    "[conformance][leaf]", SubCase, NestedCase, ChipCase) {
  TestType c;
  c.w.init();
  std::int64_t out[2] = {0, 0};
  c.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    TestType::submit(o, c.good, write_args(&out[0], 41));
  });
  CHECK(out[0] == 41);
  try {
    c.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      TestType::submit(o, c.bad, write_args(&out[1], 1));
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK(e.outcome() == Outcome::TaskFailure);
    CHECK(e.worker() == TestType::kWorker);
    CHECK(e.callable() == "bad");
    CHECK(e.error_kind() == ErrorKind::Device);
    CHECK(e.code() == SIMPLER_ERR_KERNEL_FAILED);
  }
  // Usable after the failure.
  c.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    TestType::submit(o, c.good, write_args(&out[1], 42));
  });
  CHECK(out[1] == 42);
  // A callable of a kind this leaf does not run is refused at submit, before any lane sees it.
  CHECK_THROWS_AS(c.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    TestType::submit(o, c.other, TaskArgs{});
  }),
                  UsageError);
  c.w.close();
}

}  // namespace simpler_test_leaf_conformance
