// bench_engine — the in-process L3 engine against its peers, 2 worker threads each.
//
// Scenarios (PERFORMANCE.md a-d):
//   a  N independent empty tasks (no tensors; variant a1: one private OutputExisting each) ns/task
//   a_oversub4  scenario a with 4 sub workers / 4 peer threads on this 2-core machine      ns/task
//   b  a chain of N tasks, each InOut on the same 1-element tensor                         ns/hop
//   c  1 writer -> N readers (each Input X, OutputExisting its own out[i]) -> 1 final task
//      reading all of out, at N = 10k and 100k                                             ns/task
//   d  random tagged DAG (dag.hpp): each task Input on 2 buffers and InOut on a third, drawn
//      at random (fixed seed); d1 = 100k tasks over 1k buffers, d2 = 1M tasks over 1M  ns/task
//
// Contenders, each checked against the expected result on every run (a wrong result prints an
// error and exits non-zero):
// - engine: a Worker with 2 thread sub workers (Hazards::All: write-after-read is ordered too),
//   initialised once; one repetition is one Worker::run (submission + execution + drain).
//   Graphs bigger than scope_threshold tasks are submitted in Orchestrator scopes.
//   Scenarios a and a_oversub4 end with an untimed census: the share of their tasks that ran on
//   the thread creating them (engine: the run's thread at its fence; libgomp: undeferred tasks
//   and the creator's taskwait), since a runtime that runs most empty tasks as calls there pays
//   no hand-off for them.
//   Scenario b adds engine_submit_only and engine_run_only: the chain with its first task held
//   until the whole chain is submitted, each timing one half (GatedChain), and the ratio of the
//   chain to their sum (how much the two sides slow each other down in lock-step).
// - libgomp: `omp parallel num_threads(2)` + `omp single` creating the same graph with
//   `omp task` and `depend` clauses, ending in a taskwait (omp_workloads.hpp, built by g++).
// - libomp: the same source built by clang against LLVM's libomp, run in the helper process
//   bench_engine_libomp (libomp_peer.hpp): the two runtimes cannot share a process.
// - onetbb: a task_arena of 2 threads; a task_group of independent tasks for a, and for the
//   graphs with tags the same edges inferred from last-writer / readers-since tracking
//   (tbb_peer.hpp).
// A peer that is missing from the build is skipped with the reason. Each row prints ns/task per
// contender, engine/<peer> for every peer and engine/best_peer; every row carries the cross-core
// probe taken just before it in the process that measured it.
#include <simpler/simpler.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dag.hpp"
#include "harness.hpp"
#include "omp_workloads.hpp"
#ifdef SIMPLER_HAVE_TBB
#include <oneapi/tbb/global_control.h>

#include "tbb_peer.hpp"
#endif
#ifdef SIMPLER_BENCH_LIBOMP_HELPER
#include "libomp_peer.hpp"
#endif

namespace {

namespace sb = simpler_bench;
using simpler::CallableHandle;
using simpler::CallConfig;
using simpler::ContinuousTensor;
using simpler::DataType;
using simpler::Orchestrator;
using simpler::TaskArgs;
using simpler::TaskArgsView;
using simpler::TensorArgType;

struct Sizes {
  std::uint32_t independent = 100'000;
  std::uint32_t chain = 10'000;
  std::uint32_t fan_small = 10'000;
  std::uint32_t fan_big = 100'000;
  sb::DagSpec dag_small{100'000, 1'000};
  sb::DagSpec dag_big{1'000'000, 1'000'000};
  std::uint32_t scope_threshold = 65'536;  ///< graphs with more tasks are cut into scopes
  std::uint32_t scope_chunk = 16'384;      ///< tasks per scope when they are
};

Sizes sizes_for(const sb::Options& o) {
  Sizes s;
  if (o.tiny) {
    s.independent = 2'000;
    s.chain = 500;
    s.fan_small = 500;
    s.fan_big = 2'000;
    s.dag_small = {2'000, 64};
    s.dag_big = {4'000, 4'000};
    s.scope_threshold = 1'024;  // still exercise the scoped path
    s.scope_chunk = 256;
  }
  return s;
}

using sb::count_label;
using sb::fail;

/// Calls submit(i) for i in [0, n), in scopes of sz.scope_chunk tasks when n > sz.scope_threshold.
template <class F>
void submit_range(Orchestrator& o, const Sizes& sz, std::uint32_t n, F&& submit) {
  if (n <= sz.scope_threshold) {
    for (std::uint32_t i = 0; i < n; ++i) submit(i);
    return;
  }
  for (std::uint32_t base = 0; base < n; base += sz.scope_chunk) {
    auto scope = o.scope();
    const std::uint32_t end = n - base < sz.scope_chunk ? n : base + sz.scope_chunk;
    for (std::uint32_t i = base; i < end; ++i) submit(i);
  }
}

ContinuousTensor tensor_of(std::int32_t* p, std::uint32_t n) {
  return simpler::make_tensor(std::span<std::int32_t>(p, n));
}

// ------------------------------------------------------------------------------------------
// Engine

struct Engine {
  simpler::Worker w;
  CallableHandle empty;      // does nothing
  CallableHandle count;      // counts its calls (verification runs only)
  CallableHandle increment;  // ++t0[0]
  CallableHandle set;        // t0[0] = scalar 0
  CallableHandle copy;       // t1[0] = t0[0]
  CallableHandle sum;        // *int64(t1) = sum of t0 (int32)
  CallableHandle dag;        // t2 = dag_step(t0, t1, t2), uint64 each (scenario d)
  CallableHandle gate;       // waits for gate_open, then ++t0[0] (scenario b's split)
  std::atomic<std::uint64_t> counted{0};
  std::atomic<int> gate_open{0};

  static simpler::WorkerOptions options(int sub_workers) {
    simpler::WorkerOptions o;
    o.num_sub_workers = sub_workers;
    o.child_mode = simpler::ChildMode::Thread;
    o.hazards = simpler::Hazards::All;             // scenario d checks write-after-read ordering
    o.trace_buffer_events = std::size_t{1} << 18;  // scenario t: room for a traced run's events
    return o;
  }

  explicit Engine(int sub_workers = 2) : w(options(sub_workers)) {
    empty = w.register_sub("empty", [](TaskArgsView) {});
    count = w.register_sub(
        "count", [this](TaskArgsView) { counted.fetch_add(1, std::memory_order_relaxed); });
    increment =
        w.register_sub("increment", [](TaskArgsView v) { ++*v.tensors[0].as<std::int32_t>(); });
    set = w.register_sub("set", [](TaskArgsView v) {
      *v.tensors[0].as<std::int32_t>() = static_cast<std::int32_t>(v.scalars[0]);
    });
    copy = w.register_sub("copy", [](TaskArgsView v) {
      *v.tensors[1].as<std::int32_t>() = *v.tensors[0].as<const std::int32_t>();
    });
    sum = w.register_sub("sum", [](TaskArgsView v) {
      const auto* in = v.tensors[0].as<const std::int32_t>();
      const std::uint64_t n = v.tensors[0].numel();
      std::int64_t s = 0;
      for (std::uint64_t i = 0; i < n; ++i) s += in[i];
      *v.tensors[1].as<std::int64_t>() = s;
    });
    dag = w.register_sub("dag", [](TaskArgsView v) {
      auto* io = v.tensors[2].as<std::uint64_t>();
      *io = sb::dag_step(*v.tensors[0].as<const std::uint64_t>(),
                         *v.tensors[1].as<const std::uint64_t>(), *io);
    });
    gate = w.register_sub("gate", [this](TaskArgsView v) {
      gate_open.wait(0);  // opened by the orchestration however it ends (GatedChain)
      ++*v.tensors[0].as<std::int32_t>();
    });
    w.init();
  }

  /// Times one Worker::run of `fn` and checks that every slot was retired afterwards.
  double timed_run(const simpler::Worker::OrchFunction& fn, const char* what) {
    const double ns = sb::time_ns([&] { w.run(fn); });
    if (const auto live = w.orchestrator().live_tasks(); live != 0) {
      fail(fmt::format("{}: {} tasks still live after Worker::run returned", what, live));
    }
    return ns;
  }
};

/// One unmeasured run of n counting tasks: checks the engine runs every task exactly once.
void verify_independent(Engine& e, const Sizes& sz, std::uint32_t n) {
  e.counted.store(0);
  e.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    submit_range(o, sz, n, [&](std::uint32_t) { o.submit_sub(e.count); });
  });
  if (const auto got = e.counted.load(); got != n) {
    fail(fmt::format("a: verification run executed {} tasks, expected {}", got, n));
  }
}

sb::Contender engine_independent(Engine& e, const Sizes& sz, std::uint32_t n) {
  auto fn = std::make_shared<simpler::Worker::OrchFunction>(
      [&e, &sz, n](Orchestrator& o, TaskArgsView, const CallConfig&) {
        submit_range(o, sz, n, [&](std::uint32_t) { o.submit_sub(e.empty); });
      });
  return {"engine", [&e, fn] { return e.timed_run(*fn, "a"); }, static_cast<double>(n)};
}

/// t: scenario a with the run traced at `level` into `dir` (writing trace.json is timed too).
sb::Contender engine_independent_traced(Engine& e, const Sizes& sz, std::uint32_t n, int level,
                                        const std::string& dir) {
  auto fn = std::make_shared<simpler::Worker::OrchFunction>(
      [&e, &sz, n](Orchestrator& o, TaskArgsView, const CallConfig&) {
        submit_range(o, sz, n, [&](std::uint32_t) { o.submit_sub(e.empty); });
      });
  auto cfg = std::make_shared<CallConfig>();
  cfg->enable_l2_swimlane = level;
  dir.copy(cfg->output_prefix.data(), std::min(dir.size(), cfg->output_prefix.size() - 1));
  return {fmt::format("engine traced L{}", level),
          [&e, fn, cfg] { return sb::time_ns([&] { e.w.run(*fn, {}, *cfg); }); },
          static_cast<double>(n)};
}

/// a1: every task writes its own private element (OutputExisting over &out[i]).
sb::Contender engine_independent_out(Engine& e, const Sizes& sz, std::uint32_t n) {
  auto out = std::make_shared<std::vector<std::int32_t>>(n, 0);
  auto fn = std::make_shared<simpler::Worker::OrchFunction>(
      [&e, &sz, n, out](Orchestrator& o, TaskArgsView, const CallConfig&) {
        std::int32_t* p = out->data();
        submit_range(o, sz, n, [&](std::uint32_t i) {
          o.submit_sub(e.increment,
                       TaskArgs().add_tensor(tensor_of(p + i, 1), TensorArgType::OutputExisting));
        });
      });
  auto expect = std::make_shared<std::int32_t>(0);
  return {"engine",
          [&e, fn, out, expect, n] {
            const double ns = e.timed_run(*fn, "a1");
            ++*expect;
            for (std::uint32_t i = 0; i < n; ++i) {
              if ((*out)[i] != *expect) {
                fail(fmt::format("a1 (engine): out[{}] = {}, expected {}", i, (*out)[i], *expect));
              }
            }
            return ns;
          },
          static_cast<double>(n)};
}

sb::Contender engine_chain(Engine& e, std::uint32_t n) {
  auto x = std::make_shared<std::vector<std::int32_t>>(1, 0);
  auto fn = std::make_shared<simpler::Worker::OrchFunction>(
      [&e, n, x](Orchestrator& o, TaskArgsView, const CallConfig&) {
        const ContinuousTensor t = tensor_of(x->data(), 1);
        for (std::uint32_t i = 0; i < n; ++i) {
          o.submit_sub(e.increment, TaskArgs().add_tensor(t, TensorArgType::InOut));
        }
      });
  return {
      "engine",
      [&e, fn, x, n] {
        (*x)[0] = 0;
        const double ns = e.timed_run(*fn, "b");
        if ((*x)[0] != static_cast<std::int32_t>(n)) {
          fail(fmt::format("b (engine): counter = {} after the chain, expected {}", (*x)[0], n));
        }
        return ns;
      },
      static_cast<double>(n)};
}

/// Scenario b split in two: the chain's first task waits until the orchestration has submitted
/// the whole chain, so submitting (against producers that have not run) and running (the lanes
/// following links the Orchestrator made long before) are timed apart. Their sum against the
/// plain chain shows what the two sides cost each other when they go in lock-step: each submit
/// then links to the task a lane has just started, and each hop waits for the next submit.
struct GatedChain {
  Engine& e;
  std::uint32_t n;
  std::vector<std::int32_t> x = std::vector<std::int32_t>(1, 0);
  double submit_ns = 0;  // last run: from the first submit to the last
  double exec_ns = 0;    // last run: from opening the gate to run() returning

  void run() {
    x[0] = 0;
    e.gate_open.store(0);
    std::int64_t submitted_at = 0;
    std::int64_t t0 = 0;
    e.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      // The gate opens however the orchestration ends, so a throwing submit cannot leave the
      // first task waiting.
      struct Open {
        std::atomic<int>& flag;
        ~Open() {
          flag.store(1);
          flag.notify_all();
        }
      } open{e.gate_open};
      const ContinuousTensor t = tensor_of(x.data(), 1);
      t0 = sb::now_ns();
      o.submit_sub(e.gate, TaskArgs().add_tensor(t, TensorArgType::InOut));
      for (std::uint32_t i = 1; i < n; ++i) {
        o.submit_sub(e.increment, TaskArgs().add_tensor(t, TensorArgType::InOut));
      }
      submitted_at = sb::now_ns();
    });
    const std::int64_t done = sb::now_ns();
    if (x[0] != static_cast<std::int32_t>(n)) {
      fail(fmt::format("b (gated engine): counter = {} after the chain, expected {}", x[0], n));
    }
    if (const auto live = e.w.orchestrator().live_tasks(); live != 0) {
      fail(fmt::format("b (gated engine): {} tasks still live after Worker::run returned", live));
    }
    submit_ns = static_cast<double>(submitted_at - t0);
    exec_ns = static_cast<double>(done - submitted_at);
  }
};

/// The two halves of GatedChain as contenders (each runs the gated chain and reports its half).
std::vector<sb::Contender> engine_chain_split(Engine& e, std::uint32_t n) {
  auto g = std::make_shared<GatedChain>(GatedChain{e, n});
  return {{"engine_submit_only",
           [g] {
             g->run();
             return g->submit_ns;
           },
           static_cast<double>(n)},
          {"engine_run_only",
           [g] {
             g->run();
             return g->exec_ns;
           },
           static_cast<double>(n)}};
}

/// State of one fan-out/fan-in contender: X, the readers' slots, the final result.
struct FanState {
  explicit FanState(std::uint32_t n) : out(n, 0) {}
  std::vector<std::int32_t> x = std::vector<std::int32_t>(1, 0);
  std::vector<std::int32_t> out;
  std::vector<std::int64_t> result = std::vector<std::int64_t>(1, 0);
  std::int32_t value = 0;  // what the writer writes this repetition

  void next() {
    ++value;
    result[0] = -1;
  }
  void check(const char* who) const {
    const auto n = static_cast<std::int64_t>(out.size());
    if (result[0] != n * value) {
      for (std::size_t i = 0; i < out.size(); ++i) {
        if (out[i] != value) {
          fail(fmt::format("c ({}): out[{}] = {}, expected {}", who, i, out[i], value));
        }
      }
      fail(fmt::format("c ({}): final sum = {}, expected {}", who, result[0], n * value));
    }
  }
};

sb::Contender engine_fan(Engine& e, const Sizes& sz, std::uint32_t n) {
  auto st = std::make_shared<FanState>(n);
  auto fn = std::make_shared<simpler::Worker::OrchFunction>([&e, &sz, n, st](Orchestrator& o,
                                                                             TaskArgsView,
                                                                             const CallConfig&) {
    const ContinuousTensor x = tensor_of(st->x.data(), 1);
    std::int32_t* out = st->out.data();
    o.submit_sub(e.set, TaskArgs()
                            .add_tensor(x, TensorArgType::OutputExisting)
                            .add_scalar(static_cast<std::uint64_t>(st->value)));
    submit_range(o, sz, n, [&](std::uint32_t i) {
      o.submit_sub(e.copy, TaskArgs()
                               .add_tensor(x, TensorArgType::Input)
                               .add_tensor(tensor_of(out + i, 1), TensorArgType::OutputExisting));
    });
    o.submit_sub(e.sum, TaskArgs()
                            .add_tensor(tensor_of(out, n), TensorArgType::Input)
                            .add_tensor(simpler::make_tensor(std::span<std::int64_t>(st->result)),
                                        TensorArgType::OutputExisting));
  });
  return {"engine",
          [&e, fn, st] {
            st->next();
            const double ns = e.timed_run(*fn, "c");
            st->check("engine");
            return ns;
          },
          static_cast<double>(n + 2)};
}

/// d: the random tagged DAG; every run starts from g.initial and must end at g.expected.
sb::Contender engine_dag(Engine& e, const Sizes& sz, std::shared_ptr<const sb::Dag> g) {
  auto buf = std::make_shared<std::vector<std::uint64_t>>();
  auto fn = std::make_shared<simpler::Worker::OrchFunction>(
      [&e, &sz, g, buf](Orchestrator& o, TaskArgsView, const CallConfig&) {
        std::uint64_t* b = buf->data();
        const std::uint32_t* in1 = g->in1.data();
        const std::uint32_t* in2 = g->in2.data();
        const std::uint32_t* io = g->io.data();
        submit_range(o, sz, g->spec.tasks, [&](std::uint32_t t) {
          o.submit_sub(
              e.dag, TaskArgs()
                         .add_tensor(simpler::make_tensor(std::span<std::uint64_t>(b + in1[t], 1)),
                                     TensorArgType::Input)
                         .add_tensor(simpler::make_tensor(std::span<std::uint64_t>(b + in2[t], 1)),
                                     TensorArgType::Input)
                         .add_tensor(simpler::make_tensor(std::span<std::uint64_t>(b + io[t], 1)),
                                     TensorArgType::InOut));
        });
      });
  return {"engine",
          [&e, fn, g, buf] {
            *buf = g->initial;
            const double ns = e.timed_run(*fn, "d");
            if (const std::string err = g->check(buf->data()); !err.empty()) {
              fail("d (engine): " + err);
            }
            return ns;
          },
          static_cast<double>(g->spec.tasks)};
}

// ------------------------------------------------------------------------------------------
// Peers: libgomp (in process), libomp (helper process), oneTBB (in process)

enum class Work : std::uint8_t { Independent, IndependentOut, Chain, Fan, Dag };

/// What one row runs, for the peers: the work, its size, the threads, the graph of scenario d.
struct RowSpec {
  Work work = Work::Independent;
  std::uint32_t n = 0;  ///< tasks (readers for Fan; unused for Dag)
  int threads = 2;
  std::shared_ptr<const sb::Dag> dag;
  const char* tag = "a";  ///< scenario letter in error messages

  [[nodiscard]] double units() const {
    if (work == Work::Dag) return dag->spec.tasks;
    return work == Work::Fan ? n + 2.0 : n;
  }
};

#ifdef SIMPLER_HAVE_OPENMP

sb::Contender libgomp_contender(const RowSpec& r) {
  auto out = std::make_shared<std::vector<std::int32_t>>(r.n);
  auto buf = std::make_shared<std::vector<std::uint64_t>>();
  auto value = std::make_shared<std::int32_t>(0);
  return {"libgomp",
          [r, out, buf, value] {
            sb::omp::Result res;
            switch (r.work) {
              case Work::Independent:
                res = sb::omp::independent(r.n, r.threads);
                break;
              case Work::IndependentOut:
                res = sb::omp::independent_out(*out, r.threads);
                break;
              case Work::Chain:
                res = sb::omp::chain(r.n, r.threads);
                break;
              case Work::Fan:
                res = sb::omp::fan(*out, ++*value, r.threads);
                break;
              case Work::Dag:
                res = sb::omp::dag(*r.dag, *buf, r.threads);
                break;
            }
            if (!res.error.empty()) fail(fmt::format("{} (libgomp): {}", r.tag, res.error));
            return res.ns;
          },
          r.units()};
}

#endif  // SIMPLER_HAVE_OPENMP

#ifdef SIMPLER_BENCH_LIBOMP_HELPER

/// libomp's tagged tasks slow down as a region's distinct addresses grow (about 1 us/task at
/// 100k, 21 us/task at 1M on this machine class, 1.4 GB of task memory): on the biggest graphs it
/// runs kSlowReps repetitions only, so that the bench stays within minutes.
constexpr std::uint32_t kLibompSlowTasks = 500'000;
constexpr int kLibompSlowReps = 2;

sb::Contender libomp_contender(sb::LibompChild& child, const RowSpec& r, int probe_rounds) {
  auto value = std::make_shared<std::int32_t>(0);
  const bool slow = r.work == Work::Dag && r.dag->spec.tasks >= kLibompSlowTasks;
  return {"libomp",
          [&child, r, value] {
            switch (r.work) {
              case Work::Independent:
                return child.request(fmt::format("independent {} {}", r.n, r.threads));
              case Work::IndependentOut:
                return child.request(fmt::format("independent_out {} {}", r.n, r.threads));
              case Work::Chain:
                return child.request(fmt::format("chain {} {}", r.n, r.threads));
              case Work::Fan:
                return child.request(fmt::format("fan {} {} {}", r.n, ++*value, r.threads));
              case Work::Dag:
                return child.request(fmt::format("dag {} {} {} {}", r.dag->spec.tasks,
                                                 r.dag->spec.buffers, r.dag->spec.seed, r.threads));
            }
            fail("libomp: unknown work");
          },
          r.units(),
          [&child, probe_rounds] { return child.request(fmt::format("probe {}", probe_rounds)); },
          slow ? kLibompSlowReps : 0};
}

#endif  // SIMPLER_BENCH_LIBOMP_HELPER

#ifdef SIMPLER_HAVE_TBB

/// One oneTBB contender's state: its arena (through TbbDag / TbbFlat) and the row's data.
struct TbbState {
  explicit TbbState(const RowSpec& spec)
      : r(spec),
        // oneTBB caps its worker threads at the core count: an oversubscribed row lifts the cap
        // for as long as it runs.
        cap(spec.threads > static_cast<int>(std::thread::hardware_concurrency())
                ? std::make_unique<tbb::global_control>(
                      tbb::global_control::max_allowed_parallelism,
                      static_cast<std::size_t>(spec.threads))
                : nullptr),
        dag(spec.threads),
        flat(spec.threads),
        out(spec.n, 0) {
    if (r.work == Work::Fan) {
      fan_final.reserve(r.n + 1);
      for (std::uint32_t i = 0; i < r.n; ++i) {
        fan_final.push_back({1 + i, sb::TbbDag::Mode::In});
      }
      fan_final.push_back({r.n + 1, sb::TbbDag::Mode::Out});
    }
  }

  RowSpec r;
  std::unique_ptr<tbb::global_control> cap;
  sb::TbbDag dag;
  sb::TbbFlat flat;
  std::vector<std::int32_t> out;
  std::vector<std::uint64_t> buf;
  std::vector<sb::TbbDag::Access> fan_final;  // the final task's accesses: In out[*], Out result
  std::int32_t x = 0;
  std::int32_t value = 0;
  std::int64_t result = 0;

  double run() {
    using Mode = sb::TbbDag::Mode;
    using Access = sb::TbbDag::Access;
    const std::uint32_t n = r.n;
    switch (r.work) {
      case Work::Independent:
        return sb::time_ns([&] { flat.run(n, [](std::uint32_t) { sb::clobber(); }); });
      case Work::IndependentOut: {
        std::fill(out.begin(), out.end(), 0);
        const double ns = sb::time_ns([&] {
          dag.run(
              n, n, n, [](void* c, std::uint32_t t) { ++static_cast<TbbState*>(c)->out[t]; }, this,
              [n](sb::TbbDag& d) {
                for (std::uint32_t t = 0; t < n; ++t) {
                  const Access a{t, Mode::Out};
                  d.add(t, {&a, 1});
                }
              });
        });
        for (std::uint32_t i = 0; i < n; ++i) {
          if (out[i] != 1) fail(fmt::format("a1 (onetbb): out[{}] = {}, expected 1", i, out[i]));
        }
        return ns;
      }
      case Work::Chain: {
        x = 0;
        const double ns = sb::time_ns([&] {
          dag.run(
              n, 1, n, [](void* c, std::uint32_t) { ++static_cast<TbbState*>(c)->x; }, this,
              [n](sb::TbbDag& d) {
                const Access a{0, Mode::InOut};
                for (std::uint32_t t = 0; t < n; ++t) d.add(t, {&a, 1});
              });
        });
        if (x != static_cast<std::int32_t>(n)) {
          fail(fmt::format("b (onetbb): counter = {} after the chain, expected {}", x, n));
        }
        return ns;
      }
      case Work::Fan: {
        ++value;
        result = -1;
        // Buffers: 0 = x, 1 + i = out[i], n + 1 = result. Tasks: 0 writer, 1 + i reader i,
        // n + 1 the final sum.
        const double ns = sb::time_ns([&] {
          dag.run(
              n + 2, n + 2, 3 * std::size_t{n} + 2,
              [](void* c, std::uint32_t t) {
                auto& s = *static_cast<TbbState*>(c);
                if (t == 0) {
                  s.x = s.value;
                } else if (t <= s.r.n) {
                  s.out[t - 1] = s.x;
                } else {
                  std::int64_t sum = 0;
                  for (const std::int32_t v : s.out) sum += v;
                  s.result = sum;
                }
              },
              this,
              [this, n](sb::TbbDag& d) {
                const Access w{0, Mode::Out};
                d.add(0, {&w, 1});
                for (std::uint32_t i = 0; i < n; ++i) {
                  const Access a[2] = {{0, Mode::In}, {1 + i, Mode::Out}};
                  d.add(1 + i, a);
                }
                d.add(n + 1, fan_final);
              });
        });
        if (result != static_cast<std::int64_t>(n) * value) {
          fail(fmt::format("c (onetbb): final sum = {}, expected {}", result,
                           static_cast<std::int64_t>(n) * value));
        }
        return ns;
      }
      case Work::Dag: {
        const sb::Dag& g = *r.dag;
        buf = g.initial;
        const double ns = sb::time_ns([&] {
          dag.run(
              g.spec.tasks, g.spec.buffers, 3 * std::size_t{g.spec.tasks},
              [](void* c, std::uint32_t t) {
                auto& s = *static_cast<TbbState*>(c);
                s.r.dag->step(s.buf.data(), t);
              },
              this,
              [&g](sb::TbbDag& d) {
                for (std::uint32_t t = 0; t < g.spec.tasks; ++t) {
                  const Access a[3] = {
                      {g.in1[t], Mode::In}, {g.in2[t], Mode::In}, {g.io[t], Mode::InOut}};
                  d.add(t, a);
                }
              });
        });
        if (const std::string err = g.check(buf.data()); !err.empty()) {
          fail("d (onetbb): " + err);
        }
        return ns;
      }
    }
    fail("onetbb: unknown work");
  }
};

sb::Contender tbb_contender(const RowSpec& r) {
  auto st = std::make_shared<TbbState>(r);
  // Size the dependency storage outside the measured part.
  if (r.work == Work::Dag) {
    st->dag.prepare(r.dag->spec.tasks, r.dag->spec.buffers, 3 * std::size_t{r.dag->spec.tasks});
  } else {
    st->dag.prepare(r.n + 2, r.n + 2, 3 * std::size_t{r.n} + 2);
  }
  return {"onetbb", [st] { return st->run(); }, r.units()};
}

#endif  // SIMPLER_HAVE_TBB

/// The peers available in this build and process.
struct Peers {
#ifdef SIMPLER_BENCH_LIBOMP_HELPER
  std::unique_ptr<sb::LibompChild> libomp;
#endif
  int probe_rounds = 20'000;

  /// Adds a contender per available peer for row r.
  void add(std::vector<sb::Contender>& cs, const RowSpec& r) {
#ifdef SIMPLER_HAVE_OPENMP
    cs.push_back(libgomp_contender(r));
#endif
#ifdef SIMPLER_BENCH_LIBOMP_HELPER
    if (libomp) cs.push_back(libomp_contender(*libomp, r, probe_rounds));
#endif
#ifdef SIMPLER_HAVE_TBB
    cs.push_back(tbb_contender(r));
#endif
    static_cast<void>(cs);
    static_cast<void>(r);
  }
};

/// engine/<peer> for every peer of the row, then engine/best_peer (the peer with the lowest
/// median; target <= 0.8).
void peer_ratios(const sb::Report& rep, const std::string& sc,
                 const std::vector<sb::Contender>& cs) {
  const sb::Row* engine = rep.find(sc, "engine");
  const sb::Row* best = nullptr;
  for (const sb::Contender& c : cs) {
    if (c.name.starts_with("engine")) continue;  // the engine's own variants are not peers
    rep.ratio(sc, "engine", c.name);
    const sb::Row* r = rep.find(sc, c.name);
    if (r != nullptr && (best == nullptr || r->stats.median < best->stats.median)) best = r;
  }
  if (engine == nullptr || best == nullptr || best->stats.median <= 0) return;
  rep.ratio_value(sc, fmt::format("engine/best_peer({})", best->contender),
                  engine->stats.median / best->stats.median,
                  std::min(engine->stats.reps, best->stats.reps));
}

/// Scenario a's census (untimed, after the timed runs): the share of the tasks that ran on the
/// thread creating them, for the engine (tasks the run's thread ran itself at its fence,
/// LaneStats::ran_by_run_thread) and libgomp (see sb::omp::independent_creator_share). A peer
/// that runs most empty tasks as plain calls on the creating thread pays no hand-off for them.
void creator_shares(sb::Report& rep, const std::string& sc, Engine& e, const Sizes& sz,
                    std::uint32_t n, [[maybe_unused]] int threads) {
  const auto ran_by_run_thread = [&e] {
    std::uint64_t k = 0;
    for (const simpler::LaneStats& l : e.w.stats().lanes) k += l.ran_by_run_thread;
    return k;
  };
  const std::uint64_t before = ran_by_run_thread();
  e.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    submit_range(o, sz, n, [&](std::uint32_t) { o.submit_sub(e.empty); });
  });
  rep.note(fmt::format(
      "{}: share of the tasks run on the thread that created them (untimed census run)", sc));
  rep.ratio_value(sc, "engine_tasks_on_run_thread",
                  static_cast<double>(ran_by_run_thread() - before) / n, 1);
#ifdef SIMPLER_HAVE_OPENMP
  rep.ratio_value(sc, "libgomp_tasks_on_creating_thread",
                  sb::omp::independent_creator_share(n, threads), 1);
#endif
}

int run(int argc, char** argv) {
  sb::Options opt = sb::parse_options(
      argc, argv,
      "Engine (2 thread sub workers) vs libgomp, libomp and oneTBB (2 threads); scenarios a-d.",
      {"a", "a_oversub4", "t", "a1", "b", "c10k", "c100k", "d1", "d2"});
  // Every runtime spins a while after its last task (libgomp: up to GOMP_SPINCOUNT; libomp:
  // KMP_BLOCKTIME, 10 ms as the helper is started); on two cores a still-spinning runtime would
  // slow the next contender down. Let it fall asleep.
  if (opt.gap_ms < 0) opt.gap_ms = opt.tiny ? 0 : 20;
  const Sizes sz = sizes_for(opt);
  sb::Report rep(opt);
  rep.probe();
  auto row_probe = [&] {
    if (opt.gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.gap_ms));
    rep.probe();
  };

  if (!opt.csv_only) {
    std::printf(
        "bench_engine: %s, %d warm-up + %d measured repetitions per contender, "
        "interleaved, %d ms gap; load average %s\n",
        opt.tiny ? "tiny sizes" : "full sizes", opt.warmup, opt.reps, opt.gap_ms,
        sb::load_average().c_str());
  }
  FILE* const skip_out = opt.csv_only ? stderr : stdout;
  Peers peers;
  peers.probe_rounds = rep.probe_rounds();
#ifndef SIMPLER_HAVE_OPENMP
  std::fprintf(skip_out, "libgomp skipped: OpenMP not found when this build was configured\n");
#endif
#ifdef SIMPLER_BENCH_LIBOMP_HELPER
  {
    std::string why;
    peers.libomp = sb::LibompChild::start(SIMPLER_BENCH_LIBOMP_HELPER, why);
    if (!peers.libomp) std::fprintf(skip_out, "libomp skipped: %s\n", why.c_str());
  }
#else
  std::fprintf(skip_out, "libomp skipped: %s\n", SIMPLER_BENCH_LIBOMP_SKIP);
#endif
#ifndef SIMPLER_HAVE_TBB
  std::fprintf(skip_out, "onetbb skipped: %s\n", SIMPLER_BENCH_TBB_SKIP);
#endif

  Engine e;

  // a: independent empty tasks.
  if (opt.wants("a")) {
    const std::uint32_t n = sz.independent;
    verify_independent(e, sz, n);
    const std::string sc = "a_independent_" + count_label(n);
    row_probe();
    rep.section(fmt::format("a: {} independent empty tasks, no tensors (target <= 64 ns/task)",
                            count_label(n)));
    std::vector<sb::Contender> cs{engine_independent(e, sz, n)};
    peers.add(cs, {Work::Independent, n, 2, nullptr, "a"});
    sb::run_scenario(rep, sc, "ns/task", cs);
    peer_ratios(rep, sc, cs);
    creator_shares(rep, sc, e, sz, n, 2);
  }
  // a_oversub4: scenario a with twice as many threads as cores; must not collapse.
  if (opt.wants("a_oversub4")) {
    const std::uint32_t n = sz.independent;
    Engine e4(4);
    verify_independent(e4, sz, n);
    const std::string sc = "a_oversub4_" + count_label(n);
    row_probe();
    rep.section(
        fmt::format("a_oversub4: scenario a with 4 sub workers / 4 peer threads on {} cores",
                    std::thread::hardware_concurrency()));
    std::vector<sb::Contender> cs{engine_independent(e4, sz, n)};
    peers.add(cs, {Work::Independent, n, 4, nullptr, "a_oversub4"});
    sb::run_scenario(rep, sc, "ns/task", cs);
    peer_ratios(rep, sc, cs);
    creator_shares(rep, sc, e4, sz, n, 4);
    const sb::Row* two = rep.find("a_independent_" + count_label(n), "engine");
    const sb::Row* four = rep.find(sc, "engine");
    if (two != nullptr && four != nullptr && two->stats.median > 0) {
      rep.ratio_value(sc, "engine_4subs/engine_2subs", four->stats.median / two->stats.median,
                      std::min(two->stats.reps, four->stats.reps));
    }
    e4.w.close();
  }
  // t: what tracing costs when on (the untraced row is scenario a's path: tracing off costs one
  // relaxed load and a predictable branch per recording point).
  if (opt.wants("t")) {
    const std::uint32_t n = sz.independent;
    char tmpl[] = "/tmp/bench-engine-trace-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) fail("t: mkdtemp failed");
    const std::string dir = tmpl;
    const std::string sc = "t_traced_independent_" + count_label(n);
    row_probe();
    rep.section(fmt::format("t: scenario a untraced vs traced (levels 1, 2; trace.json written)"));
    std::vector<sb::Contender> cs{engine_independent(e, sz, n),
                                  engine_independent_traced(e, sz, n, 1, dir),
                                  engine_independent_traced(e, sz, n, 2, dir)};
    sb::run_scenario(rep, sc, "ns/task", cs);
    ::unlink((dir + "/trace.json").c_str());
    ::rmdir(dir.c_str());
  }
  // a1: independent tasks with one private output each.
  if (opt.wants("a1")) {
    const std::uint32_t n = sz.independent;
    const std::string sc = "a1_independent_out_" + count_label(n);
    row_probe();
    rep.section(
        fmt::format("a1: {} independent tasks, one private OutputExisting each", count_label(n)));
    std::vector<sb::Contender> cs{engine_independent_out(e, sz, n)};
    peers.add(cs, {Work::IndependentOut, n, 2, nullptr, "a1"});
    sb::run_scenario(rep, sc, "ns/task", cs);
    peer_ratios(rep, sc, cs);
  }
  // b: chain.
  if (opt.wants("b")) {
    const std::uint32_t n = sz.chain;
    const std::string sc = "b_chain_" + count_label(n);
    row_probe();
    rep.section(fmt::format("b: chain of {} tasks, InOut on one tensor (target <= 60 ns/hop)",
                            count_label(n)));
    std::vector<sb::Contender> cs{engine_chain(e, n)};
    // The gated chain holds every task at once: only while the window allows it.
    const bool split = n < Engine::options(2).task_window;
    if (split) {
      for (sb::Contender& c : engine_chain_split(e, n)) cs.push_back(std::move(c));
    }
    peers.add(cs, {Work::Chain, n, 2, nullptr, "b"});
    sb::run_scenario(rep, sc, "ns/hop", cs);
    peer_ratios(rep, sc, cs);
    const sb::Row* whole = rep.find(sc, "engine");
    const sb::Row* sub = rep.find(sc, "engine_submit_only");
    const sb::Row* ran = rep.find(sc, "engine_run_only");
    if (whole != nullptr && sub != nullptr && ran != nullptr) {
      const double parts = sub->stats.median + ran->stats.median;
      if (parts > 0) {
        rep.note(
            "b: the chain against its halves timed apart (submitting with nothing running, then "
            "running what was submitted); above 1, the two sides slow each other down");
        rep.ratio_value(sc, "engine/(submit_only+run_only)", whole->stats.median / parts,
                        std::min({whole->stats.reps, sub->stats.reps, ran->stats.reps}));
      }
    }
  }
  // c: fan-out / fan-in, small and big.
  std::string fan_scenarios[2];
  const std::uint32_t fan_sizes[2] = {sz.fan_small, sz.fan_big};
  const char* const fan_tags[2] = {"c10k", "c100k"};  // named by their full sizes
  for (int k = 0; k < 2; ++k) {
    if (!opt.wants(fan_tags[k])) continue;
    const std::uint32_t n = fan_sizes[k];
    const std::string sc = "c_fan_" + count_label(n);
    fan_scenarios[k] = sc;
    row_probe();
    rep.section(fmt::format(
        "c: 1 writer -> {} readers -> 1 final task (target <= 130 ns/task){}", count_label(n),
        n > sz.scope_threshold ? fmt::format("; engine readers in scopes of {}", sz.scope_chunk)
                               : std::string()));
    std::vector<sb::Contender> cs{engine_fan(e, sz, n)};
    peers.add(cs, {Work::Fan, n, 2, nullptr, "c"});
    sb::run_scenario(rep, sc, "ns/task", cs);
    peer_ratios(rep, sc, cs);
  }
  {
    const sb::Row* small = rep.find(fan_scenarios[0], "engine");
    const sb::Row* big = rep.find(fan_scenarios[1], "engine");
    if (small != nullptr && big != nullptr && small->stats.median > 0) {
      rep.note("c: engine per-task cost of the big fan over the small fan (target <= 1.2)");
      rep.ratio_value(
          "c_fan",
          fmt::format("engine_{}/engine_{}", count_label(sz.fan_big), count_label(sz.fan_small)),
          big->stats.median / small->stats.median, std::min(small->stats.reps, big->stats.reps));
    }
  }
  // d: random tagged DAGs (2 Input + 1 InOut per task), write-after-read ordered by everyone.
  const std::pair<const char*, sb::DagSpec> dags[2] = {{"d1", sz.dag_small}, {"d2", sz.dag_big}};
  for (const auto& [tag, spec] : dags) {
    if (!opt.wants(tag)) continue;
    auto g = std::make_shared<const sb::Dag>(sb::make_dag(spec));
    const std::string sc =
        fmt::format("{}_dag_{}_over_{}", tag, count_label(spec.tasks), count_label(spec.buffers));
    row_probe();
    rep.section(fmt::format(
        "{}: random tagged DAG, {} tasks over {} buffers, 2 Input + 1 InOut each (seed {:#x}; "
        "target <= 0.8x best peer)",
        tag, count_label(spec.tasks), count_label(spec.buffers), spec.seed));
    std::vector<sb::Contender> cs{engine_dag(e, sz, g)};
    peers.add(cs, {Work::Dag, 0, 2, g, tag});
    sb::run_scenario(rep, sc, "ns/task", cs);
    peer_ratios(rep, sc, cs);
  }
  e.w.close();
  rep.note("load average at the end: " + sb::load_average());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return sb::guarded_main("bench_engine", run, argc, argv);
}
