// The dependency graph of a run (CallConfig::enable_dep_gen) as DOT and JSON: its edges are the
// ones a sequential oracle derives from the program, and a trace's flows are the same edges.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <tuple>

#include <simpler/simpler.hpp>

#include "support/child_modes.hpp"
#include "support/dag_program.hpp"
#include "support/trace_files.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_dep_graph {

using namespace simpler;
using namespace simpler::testing;

namespace {

using EdgeSet = std::set<std::tuple<long long, long long, long long>>;

/// The edges the engine must infer for `p` as run by run_dag (task i is node i + 1, the
/// snapshot task is last), with the bytes that cause them: a read depends on the writer of
/// every value slice it covers (kValueElems words each), an InOut accumulator on its previous
/// toucher (one word). Write-after-read is not tracked; NoDep reads add nothing.
EdgeSet oracle_edges(const DagProgram& p) {
  constexpr long long kSlice = kValueElems * sizeof(std::int64_t);
  std::vector<long long> writer(p.values, 0);  // node that wrote each value
  std::vector<long long> toucher(p.accums, 0);
  std::map<std::pair<long long, long long>, long long> bytes;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const DagOp& op = p.ops[i];
    const long long node = static_cast<long long>(i) + 1;
    if (op.write >= 0) writer[static_cast<std::size_t>(op.write)] = node;
    if (op.accum >= 0) {
      long long& prev = toucher[static_cast<std::size_t>(op.accum)];
      if (prev != 0) bytes[{prev, node}] += sizeof(std::int64_t);
      prev = node;
    }
    for (std::size_t r = 0; r < op.reads.size(); ++r) {
      for (std::uint32_t k = 0; k < op.spans[r]; ++k) {
        bytes[{writer[static_cast<std::size_t>(op.reads[r]) + k], node}] += kSlice;
      }
    }
  }
  const long long snap = static_cast<long long>(p.ops.size()) + 1;
  for (long long w : writer) bytes[{w, snap}] += kSlice;
  for (long long t : toucher) {
    if (t != 0) bytes[{t, snap}] += sizeof(std::int64_t);
  }
  EdgeSet out;
  for (const auto& [e, n] : bytes) out.insert({e.first, e.second, n});
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("the DOT and JSON graphs of random DAGs have the oracle's edges", "[dag][trace]",
                   InThreads, InProcesses) {
  SharedArena arena;  // before the Worker: mapped before it forks
  Worker w(options_for<TestType>(3));
  const auto kernel = w.register_sub("dag", dag_kernel);
  const auto snap = w.register_sub("snapshot", dag_snapshot_kernel);
  w.init();
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    INFO("seed " << seed);
    TempDir dir;
    const DagProgram p = random_program(seed, 60, 3);
    DagState st(p, arena);
    SubTarget target{kernel, snap};
    // run_dag with the diagnostics on: the same program, through Worker::run with a config.
    const CallConfig c = diagnostics_config(dir.path(), 2, true);
    w.run(
        [&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
          for (std::size_t i = 0; i < p.ops.size(); ++i) {
            SubmitResult r = target.submit(o, DagCallable::Kernel, dag_args(p, st, i, true));
            const DagOp& op = p.ops[i];
            if (op.write >= 0 && op.write_auto)
              st.value_tensor[static_cast<std::size_t>(op.write)] = r.output(0);
          }
          TaskArgs a;
          a.add_tensor(st.result(), TensorArgType::OutputExisting);
          for (const ContinuousTensor& t : st.value_tensor) a.add_tensor(t, TensorArgType::Input);
          for (std::uint32_t i = 0; i < p.accums; ++i)
            a.add_tensor(st.accum(i), TensorArgType::Input);
          target.submit(o, DagCallable::Snapshot, std::move(a));
        },
        {}, c);
    CHECK(dir.files() == std::set<std::string>{"dag.dot", "dag.json", "trace.json"});
    const EdgeSet want = oracle_edges(p);
    const Json dag = parse_json(read_text(dir.file("dag.json")));
    CHECK(dag_json_edges(dag) == want);
    CHECK(dag_dot_edges(read_text(dir.file("dag.dot"))) == want);
    // Nodes: every task once, in submission order, with its callable and tensors.
    REQUIRE(dag["nodes"].arr.size() == p.ops.size() + 1);
    for (std::size_t i = 0; i < dag["nodes"].arr.size(); ++i) {
      const Json& n = dag["nodes"][i];
      CHECK(n["id"].integer() == static_cast<long long>(i) + 1);
      CHECK(n["callable"].str == (i < p.ops.size() ? "dag" : "snapshot"));
      CHECK(n["role"].str == "sub");
    }
    CHECK(dag["nodes"][0]["tensors"].arr.size() ==
          (p.ops[0].write >= 0 ? 1U : 0U) + (p.ops[0].accum >= 0 ? 1U : 0U) +
              p.ops[0].reads.size() + (p.ops[0].read_const ? 1U : 0U));
    // The trace's dependency flows are the graph's edges.
    const TraceIndex t(read_text(dir.file("trace.json")));
    std::set<std::pair<long long, long long>> pairs;
    for (const auto& [a, b, n] : want) pairs.insert({a, b});
    CHECK(t.flow_edges(t.pid_of("L3"), w.run_count()) == pairs);
    CHECK(t.flows_bound());
    CHECK(t.tasks_of(t.pid_of("L3")).size() == p.ops.size() + 1);
  }
  w.close();
}

TEST_CASE("a graph without a trace writes only the DOT and JSON files", "[dag]") {
  TempDir dir;
  SharedArena arena;
  auto x = arena.make<std::int64_t>(4, 0);
  Worker w(thread_options(1));
  auto h = w.register_sub("touch", [](TaskArgsView) {});
  w.init();
  w.run(
      [&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
        TaskArgs a;
        a.add_tensor(make_tensor(x.data(), {4}, DataType::Int64), TensorArgType::OutputExisting);
        o.submit_sub(h, std::move(a));
        TaskArgs b;  // reads two of the four words: the edge carries 16 bytes
        b.add_tensor(make_tensor(x.data() + 1, {2}, DataType::Int64), TensorArgType::Input);
        o.submit_sub(h, std::move(b));
      },
      {}, diagnostics_config(dir.path(), 0, true));
  CHECK(dir.files() == std::set<std::string>{"dag.dot", "dag.json"});
  const Json dag = parse_json(read_text(dir.file("dag.json")));
  CHECK(dag_json_edges(dag) == EdgeSet{{1, 2, 16}});
  CHECK(dag["nodes"][1]["tensors"][0]["tag"].str == "Input");
  CHECK(dag["nodes"][1]["tensors"][0]["bytes"].integer() == 16);
  w.close();
}

TEST_CASE("order edges show which writers wait for earlier readers and writers", "[dag][hazards]") {
  const Hazards mode = GENERATE(Hazards::All, Hazards::ReadAfterWrite);
  INFO("hazards " << static_cast<int>(mode));
  TempDir dir;
  SharedArena arena;
  auto x = arena.make<std::int64_t>(4, 0);
  WorkerOptions opts = thread_options(2);
  opts.hazards = mode;
  Worker w(opts);
  auto h = w.register_sub("touch", [](TaskArgsView) {});
  w.init();
  const auto words = [&](std::int64_t first, std::int64_t n) {
    return make_tensor(x.data() + first, {static_cast<std::uint32_t>(n)}, DataType::Int64);
  };
  w.run(
      [&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
        const auto one = [&](std::int64_t first, std::int64_t n, TensorArgType tag) {
          TaskArgs a;
          a.add_tensor(words(first, n), tag);
          o.submit_sub(h, std::move(a));
        };
        one(0, 4, TensorArgType::OutputExisting);  // 1 writes x[0, 4)
        one(0, 2, TensorArgType::Input);           // 2 reads x[0, 2)
        one(2, 2, TensorArgType::Input);           // 3 reads x[2, 4)
        one(1, 2, TensorArgType::OutputExisting);  // 4 overwrites x[1, 3)
        one(0, 4, TensorArgType::InOut);           // 5 reads and overwrites all of x
      },
      {}, diagnostics_config(dir.path(), 0, true));
  const Json dag = parse_json(read_text(dir.file("dag.json")));
  // Data edges do not depend on the mode: 5 reads x[0] and x[3] from 1, x[1, 3) from 4.
  CHECK(dag_json_edges(dag) == EdgeSet{{1, 2, 16}, {1, 3, 16}, {1, 5, 16}, {4, 5, 16}});
  using Pairs = std::set<std::pair<long long, long long>>;
  // 4 waits for the writer before it and both readers; 5 for the readers of the bytes 4 did not
  // overwrite (x[0] read by 2, x[3] read by 3).
  const Pairs order =
      mode == Hazards::All ? Pairs{{1, 4}, {2, 4}, {3, 4}, {2, 5}, {3, 5}} : Pairs{};
  CHECK(dag_json_order_edges(dag) == order);
  CHECK(dag_dot_order_edges(read_text(dir.file("dag.dot"))) == order);
  w.close();
}

}  // namespace simpler_test_dep_graph
