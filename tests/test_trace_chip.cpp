// A traced L4 -> L3 -> (chip + sub) run: the chip's own events (simulated AICPU threads and
// AICore cores) join the host trace under a "chip <id>" process.
#include <catch2/catch.hpp>

#include <simpler/simpler.hpp>

#include "support/child_modes.hpp"
#include "support/chip_modules.hpp"
#include "support/shared_arena.hpp"
#include "support/trace_files.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_trace_chip {

using namespace simpler;
using namespace simpler::testing;

TEMPLATE_TEST_CASE("a traced L4 -> L3 -> chip + sub run shows the chip's kernels under its track",
                   "[trace][chip][sim]", InThreads, InProcesses) {
  TempDir dir;
  SharedArena arena;  // before any fork
  auto seen = arena.make<std::int64_t>(4, 0);
  Worker w4(options_for<TestType>(0, 4));
  WorkerOptions o3 = options_for<TestType>(1, 3);
  o3.device_ids = {0};
  Worker l3(o3);
  const auto fill = l3.register_chip(chipw_callable("fill", "fill"));
  const auto copy = l3.register_sub("copy", [&](TaskArgsView v) {
    const auto* src = v.tensor(0).as<std::int64_t>();
    std::copy(src, src + 4, seen.data());
  });
  w4.add_worker(std::move(l3));
  const auto step =
      w4.register_orch("chip_then_sub", [&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
        const ContinuousTensor t = o.alloc({4}, DataType::Int64);
        TaskArgs a;
        a.add_tensor(t, TensorArgType::OutputExisting).add_scalar(7);
        o.submit_next_level(fill, std::move(a), default_call_config(), 0);
        TaskArgs b;
        b.add_tensor(t, TensorArgType::Input);
        o.submit_sub(copy, std::move(b));
      });
  w4.init();
  w4.run([&](OrchestratorBase& o, TaskArgsView,
             const CallConfig&) { o.submit_next_level(step, TaskArgs()); },
         {}, diagnostics_config(dir.path(), 2, false));
  CHECK(seen[0] == 7);
  const TraceIndex t(read_text(dir.file("trace.json")));
  const int l4 = t.pid_of("L4");
  const int l3p = t.pid_of("L3 worker 0");
  const int chip = t.pid_of("L3 worker 0 / chip 0");
  REQUIRE(l4 > 0);
  REQUIRE(l3p > 0);
  REQUIRE(chip > 0);
  CHECK(t.thread_names(l3p).count("chip 0") == 1);
  CHECK(t.thread_names(l3p).count("sub worker 0") == 1);
  CHECK(t.tasks_of(l4).size() == 1);
  CHECK(t.tasks_of(l3p).size() == 2);
  for (const auto& [k, slices] : t.tasks) CHECK(slices.size() == 1);
  CHECK(t.flow_edges(l3p, 1) == std::set<std::pair<long long, long long>>{{1, 2}});
  CHECK(t.flows_bound());
  int kernels = 0;
  for (const Json& e : t.others) {
    if (e["ph"].str == "X" && e["cat"].str == "kernel" && e["pid"].integer() == chip) {
      ++kernels;
      CHECK(e["dur"].num >= 0);
    }
  }
  CHECK(kernels >= 1);
  CHECK_FALSE(t.thread_names(chip).empty());
  w4.close();
}

}  // namespace simpler_test_trace_chip
