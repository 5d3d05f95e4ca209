// Host-level traces (L3 and up): Chrome trace-event JSON per run (CallConfig) or per Worker
// lifetime (WorkerOptions::trace_path, SIMPLER_TRACE), across nested Workers and forked children.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include <simpler/simpler.hpp>

#include "support/child_modes.hpp"
#include "support/gate.hpp"
#include "support/shared_arena.hpp"
#include "support/trace_files.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_trace {

using namespace simpler;
using namespace simpler::testing;
using Catch::Matchers::Contains;

namespace {

/// L4 over two L3s with two sub workers each. The L4 run: task 1 (worker 0) writes out[0]; task
/// 2 (worker 1) reads it and writes out[1]. Each L3 run: a writes x, b reads x and writes y, c
/// reads x and y and writes the L4 task's last tensor: edges 1->2, 1->3, 2->3.
template <class Mode>
struct TwoLevels {
  SharedArena arena;  // before any fork
  std::int64_t* out = arena.make<std::int64_t>(2, 0).data();
  Worker w4;
  CallableHandle l3_orch;

  explicit TwoLevels(WorkerOptions top = options_for<Mode>(0, 4)) : w4(std::move(top)) {
    std::array<CallableHandle, 2> step{};
    for (int i = 0; i < 2; ++i) {
      Worker l3(options_for<Mode>(2, 3));
      step[static_cast<std::size_t>(i)] = l3.register_sub("step", [](TaskArgsView v) {
        std::int64_t s = 1;
        for (std::int32_t t = 0; t + 1 < v.tensor_count; ++t) s += *v.tensor(t).as<std::int64_t>();
        *v.tensor(v.tensor_count - 1).as<std::int64_t>() = s;
      });
      w4.add_worker(std::move(l3));
    }
    l3_orch = w4.register_orch(
        "l3_chain", [step](OrchestratorBase& o, TaskArgsView v, const CallConfig&) {
          const CallableHandle& h = step[v.scalar(0)];
          const ContinuousTensor one = make_tensor(nullptr, {1}, DataType::Int64);
          TaskArgs a;
          a.add_tensor(one, TensorArgType::Output);
          const ContinuousTensor x = o.submit_sub(h, std::move(a)).output(0);
          TaskArgs b;
          b.add_tensor(x, TensorArgType::Input).add_tensor(one, TensorArgType::Output);
          const ContinuousTensor y = o.submit_sub(h, std::move(b)).output(0);
          TaskArgs c;
          c.add_tensor(x, TensorArgType::Input)
              .add_tensor(y, TensorArgType::Input)
              .add_tensor(v.tensor(v.tensor_count - 1), TensorArgType::InOut);
          o.submit_sub(h, std::move(c));
        });
    w4.init();
  }
  void run(const CallConfig& c = default_call_config()) {
    w4.run(
        [&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
          for (std::uint64_t i = 0; i < 2; ++i) {
            TaskArgs a;
            if (i == 1)
              a.add_tensor(make_tensor(&out[0], {1}, DataType::Int64), TensorArgType::Input);
            a.add_tensor(make_tensor(&out[i], {1}, DataType::Int64), TensorArgType::InOut);
            a.add_scalar(i);
            o.submit_next_level(l3_orch, std::move(a), default_call_config(),
                                static_cast<WorkerId>(i));
          }
        },
        {}, c);
  }
};

/// Checks what every traced TwoLevels run must show, for run `run` of the L4.
void check_two_levels(const TraceIndex& t, long long run) {
  const int l4 = t.pid_of("L4");
  const int w0 = t.pid_of("L3 worker 0");
  const int w1 = t.pid_of("L3 worker 1");
  REQUIRE(l4 > 0);
  REQUIRE(w0 > 0);
  REQUIRE(w1 > 0);
  const auto l4_threads = t.thread_names(l4);
  CHECK(l4_threads.count("orchestrator") == 1);
  CHECK(l4_threads.count("scheduler") == 1);
  CHECK(l4_threads.count("next-level worker 0 (L3)") == 1);
  CHECK(l4_threads.count("next-level worker 1 (L3)") == 1);
  for (int pid : {w0, w1}) {
    const auto th = t.thread_names(pid);
    CHECK(th.count("sub worker 0") == 1);
    CHECK(th.count("sub worker 1") == 1);
  }
  // Every task exactly once, start <= end, ran fine.
  const auto l4_tasks = t.tasks_of(l4, run);
  CHECK(l4_tasks.size() == 2);
  for (const auto& [k, slices] : t.tasks) {
    INFO("pid " << std::get<0>(k) << " run " << std::get<1>(k) << " task " << std::get<2>(k));
    CHECK(slices.size() == 1);
    CHECK(slices.front().dur >= 0);
    CHECK(slices.front().outcome == "ok");
  }
  for (int pid : {w0, w1}) {
    std::size_t in_this_run = 0;
    for (const auto& k : t.tasks_of(pid)) {
      in_this_run += t.tasks.at(k).front().name == "step" ? 1 : 0;
    }
    CHECK(in_this_run % 3 == 0);
    CHECK(in_this_run >= 3);
  }
  // The inner tasks run inside their L4 task's slice (same clock in every process).
  for (int i = 0; i < 2; ++i) {
    const auto& outer = t.tasks.at({l4, run, i + 1}).front();
    CHECK(outer.name == "l3_chain");
  }
  // Dependency flows: the L4's and each L3's, bound to their tasks' slices.
  CHECK(t.flow_edges(l4, run) == std::set<std::pair<long long, long long>>{{1, 2}});
  CHECK(t.flows_bound());
}

}  // namespace

TEMPLATE_TEST_CASE("a traced L4 over L3 run writes one JSON with every level's tasks and flows",
                   "[trace][nested]", InThreads, InProcesses) {
  TempDir dir;
  TwoLevels<TestType> f;
  f.run(diagnostics_config(dir.path(), 2, false));
  CHECK(f.out[1] == 4);  // the chain ran: c wrote 1 + x + y = 1 + 1 + 2
  CHECK(dir.files() == std::set<std::string>{"trace.json"});
  const TraceIndex t(read_text(dir.file("trace.json")));
  check_two_levels(t, 1);
  for (const char* name : {"L3 worker 0", "L3 worker 1"}) {
    INFO(name);
    const int pid = t.pid_of(name);
    CHECK(t.tasks_of(pid).size() == 3);
    CHECK(t.flow_edges(pid, 1) ==
          std::set<std::pair<long long, long long>>{{1, 2}, {1, 3}, {2, 3}});
  }
  CHECK(t.doc["otherData"]["dropped_events"].integer() == 0);
  f.w4.close();
}

TEMPLATE_TEST_CASE("WorkerOptions::trace_path keeps every run and writes the file at close",
                   "[trace][nested]", InThreads, InProcesses) {
  TempDir dir;
  WorkerOptions top = options_for<TestType>(0, 4);
  top.trace_path = dir.file("life-%p.json");
  top.trace_level = 3;
  TwoLevels<TestType> f(top);
  const std::string path = f.w4.trace_path();
  CHECK_THAT(path, Contains(std::to_string(::getpid())));
  f.run();
  f.run();
  CHECK(dir.files().empty());  // written at close
  f.w4.close();
  REQUIRE(dir.files().size() == 1);
  const TraceIndex t(read_text(path));
  check_two_levels(t, 1);
  check_two_levels(t, 2);
  const int l4 = t.pid_of("L4");
  CHECK(t.tasks_of(l4).size() == 4);
  // Each L3 ran once per L4 run: 2 runs x 3 tasks on one process track.
  CHECK(t.tasks_of(t.pid_of("L3 worker 0")).size() == 6);
  // Level 3: scheduler passes and the ready-queue counter.
  bool pass = false;
  bool counter = false;
  for (const Json& e : t.others) {
    pass = pass || (e["ph"].str == "X" && e["name"].str == "dispatch pass");
    counter = counter || (e["ph"].str == "C" && e["name"].str == "ready queue");
  }
  CHECK(pass);
  CHECK(counter);
}

TEST_CASE("SIMPLER_TRACE turns the lifetime trace on for a top-level Worker", "[trace]") {
  TempDir dir;
  const std::string path = dir.file("env.json");
  struct Env {
    explicit Env(const std::string& v) { ::setenv("SIMPLER_TRACE", v.c_str(), 1); }
    ~Env() { ::unsetenv("SIMPLER_TRACE"); }
  } env(path);
  Worker w(thread_options(1));
  auto h = w.register_sub("noop", [](TaskArgsView) {});
  w.init();
  CHECK(w.trace_path() == path);
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < 5; ++i) o.submit_sub(h);
  });
  w.close();
  const TraceIndex t(read_text(path));
  CHECK(t.tasks_of(t.pid_of("L3")).size() == 5);
}

TEST_CASE("an option path wins over SIMPLER_TRACE", "[trace]") {
  TempDir dir;
  struct Env {
    explicit Env(const std::string& v) { ::setenv("SIMPLER_TRACE", v.c_str(), 1); }
    ~Env() { ::unsetenv("SIMPLER_TRACE"); }
  } env(dir.file("env.json"));
  WorkerOptions o = thread_options(1);
  o.trace_path = dir.file("option.json");
  Worker w(o);
  w.register_sub("noop", [](TaskArgsView) {});
  w.init();
  w.close();
  CHECK(dir.files() == std::set<std::string>{"option.json"});
}

TEMPLATE_TEST_CASE("with every diagnostic off no file is written", "[trace][dag]", InThreads,
                   InProcesses) {
  TempDir dir;
  ::unsetenv("SIMPLER_TRACE");
  TwoLevels<TestType> f;
  CallConfig c = diagnostics_config(dir.path(), 0, false);  // a prefix, but nothing asked
  f.run(c);
  f.run();
  f.w4.close();
  CHECK(f.w4.trace_path().empty());
  CHECK(dir.files().empty());
}

TEST_CASE("failed and skipped tasks appear once with their outcome", "[trace][failure]") {
  TempDir dir;
  SharedArena arena;
  auto x = arena.make<std::int64_t>(1, 0);
  Worker w(thread_options(2));
  Gate both_submitted;  // else the second submit may see the failure first
  auto boom = w.register_sub("boom", [&](TaskArgsView) {
    both_submitted.wait();
    throw std::runtime_error("no");
  });
  auto after = w.register_sub("after", [](TaskArgsView) {});
  w.init();
  const ContinuousTensor t = make_tensor(x.data(), {1}, DataType::Int64);
  CHECK_THROWS_AS(w.run(
                      [&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
                        TaskArgs a;
                        a.add_tensor(t, TensorArgType::OutputExisting);
                        o.submit_sub(boom, std::move(a));
                        TaskArgs b;
                        b.add_tensor(t, TensorArgType::Input);
                        o.submit_sub(after, std::move(b));
                        both_submitted.open();
                      },
                      {}, diagnostics_config(dir.path(), 2, false)),
                  TaskError);
  const TraceIndex tr(read_text(dir.file("trace.json")));
  const int l3 = tr.pid_of("L3");
  REQUIRE(tr.tasks_of(l3).size() == 2);
  CHECK(tr.tasks.at({l3, 1, 1}).front().outcome == "failed");
  CHECK(tr.tasks.at({l3, 1, 2}).size() == 1);
  CHECK(tr.tasks.at({l3, 1, 2}).front().outcome == "skipped");
  CHECK(tr.flow_edges(l3, 1) == std::set<std::pair<long long, long long>>{{1, 2}});
  CHECK(tr.flows_bound());
  w.close();
}

// The renderer looks tasks up by id in a dense table when the ids are dense (1..n per run), and
// in sorted ids otherwise (a child's records are not trusted to be dense). Both must give a
// task its Submit's callable, its slice, and the flows between slices; these ids are 2^31 apart.
TEST_CASE("trace records with task ids far apart render like dense ones", "[trace]") {
  for (const std::uint32_t stride : {1u, 1u << 31}) {
    INFO("stride " << stride);
    const std::uint32_t a = 1;
    const std::uint32_t b = a + stride;
    detail::TraceProcess p;
    p.name = "L3";
    p.run = 7;
    p.tracks = {"orchestrator", "scheduler", "sub 0"};
    p.callables = {"make \"x\"", "use"};
    const auto ev = [](detail::TraceKind k, std::uint32_t task, std::int64_t t0, std::int64_t t1,
                       std::uint32_t arg, std::uint16_t track) {
      detail::TraceEvent e;
      e.kind = k;
      e.task = task;
      e.t0 = t0;
      e.t1 = t1;
      e.arg = arg;
      e.track = track;
      return e;
    };
    using K = detail::TraceKind;
    p.events = {ev(K::Submit, a, 1000, 0, 0, 0), ev(K::Submit, b, 2000, 0, 1, 0),
                ev(K::Edge, b, 0, 64, a, 0),     ev(K::Run, a, 3000, 5000, 0, 2),
                ev(K::Run, b, 6000, 9000, 0, 2), ev(K::Ready, 9, 7000, 0, 0, 1)};
    const std::string json = detail::render_chrome_trace({p});
    CHECK_THAT(json, Contains(R"("name":"make \"x\"","pid":1,"tid":3,"ts":3.000,"dur":2.000)"));
    CHECK_THAT(
        json, Contains(fmt::format(
                  R"("name":"use","pid":1,"tid":3,"ts":6.000,"dur":3.000,"args":{{"task":{})", b)));
    CHECK_THAT(json,
               Contains(fmt::format(R"("ts":4.999,"args":{{"from":{},"to":{},"run":7,)", a, b)));
    CHECK_THAT(json, Contains(R"("name":"ready task 9")"));  // never submitted: named by id
  }
}

TEST_CASE("a full trace buffer drops and counts events instead of failing", "[trace]") {
  TempDir dir;
  WorkerOptions o = thread_options(1);
  o.trace_buffer_events = 4;  // the test seam: a tiny buffer per thread
  Worker w(o);
  auto h = w.register_sub("noop", [](TaskArgsView) {});
  w.init();
  for (int rep = 0; rep < 2; ++rep) {
    w.run(
        [&](OrchestratorBase& orch, TaskArgsView, const CallConfig&) {
          for (int i = 0; i < 50; ++i) orch.submit_sub(h);
        },
        {}, diagnostics_config(dir.path(), 2, false));
    const TraceIndex t(read_text(dir.file("trace.json")));
    CHECK(t.doc["otherData"]["dropped_events"].integer() > 0);
    CHECK(t.tasks_of(t.pid_of("L3")).size() <= 4);
  }
  w.close();
}

TEST_CASE("a trace path in a missing directory is refused at init, naming it", "[trace][errors]") {
  WorkerOptions o = thread_options(1);
  o.trace_path = "/nonexistent-simpler-dir/trace.json";
  Worker w(o);
  try {
    w.init();
    FAIL("init() did not throw");
  } catch (const UsageError& e) {
    CHECK_THAT(e.what(), Contains("/nonexistent-simpler-dir"));
    CHECK_THAT(e.what(), Contains("errno"));
  }
}

TEST_CASE("a run's output_prefix must be an existing directory", "[trace][errors]") {
  Worker w(thread_options(1));
  auto h = w.register_sub("noop", [](TaskArgsView) {});
  w.init();
  const auto orch = [&](OrchestratorBase& o, TaskArgsView, const CallConfig&) { o.submit_sub(h); };
  try {
    w.run(orch, {}, diagnostics_config("/nonexistent-simpler-dir/run1", 1, false));
    FAIL("run() did not throw");
  } catch (const UsageError& e) {
    CHECK_THAT(e.what(), Contains("/nonexistent-simpler-dir/run1"));
    CHECK_THAT(e.what(), Contains("output_prefix"));
  }
  w.run(orch);  // the Worker stays usable
  WorkerOptions bad = thread_options(1);
  bad.trace_level = 5;
  CHECK_THROWS_AS(Worker(bad), UsageError);
  w.close();
}

}  // namespace simpler_test_trace
