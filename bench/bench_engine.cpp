// bench_engine — the in-process L3 engine against OpenMP tasks, 2 worker threads each.
//
// Scenarios (PERFORMANCE.md a-c):
//   a  N independent empty tasks (no tensors; variant a1: one private OutputExisting each) ns/task
//   b  a chain of N tasks, each InOut on the same 1-element tensor                         ns/hop
//   c  1 writer -> N readers (each Input X, OutputExisting its own out[i]) -> 1 final task
//      reading all of out, at N = 10k and 100k                                             ns/task
//
// Engine: a Worker with 2 thread sub workers, initialised once; one repetition is one
// Worker::run (submission + execution + drain). Graphs bigger than kScopeThreshold tasks are
// submitted in Orchestrator scopes of kScopeChunk tasks so memory stays bounded.
// OpenMP: `omp parallel num_threads(2)` + `omp single` creating the same graph with `omp task`
// and `depend` clauses, ending in a taskwait; one repetition is the whole parallel region.
// The task bodies do the same (tiny) work in both. Every run's result is checked; a wrong
// result prints an error and exits non-zero.
#include <simpler/simpler.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness.hpp"

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
  std::atomic<std::uint64_t> counted{0};

  static simpler::WorkerOptions options() {
    simpler::WorkerOptions o;
    o.num_sub_workers = 2;
    o.child_mode = simpler::ChildMode::Thread;
    o.trace_buffer_events = std::size_t{1} << 18;  // scenario t: room for a traced run's events
    return o;
  }

  Engine() : w(options()) {
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

// ------------------------------------------------------------------------------------------
// OpenMP

#ifdef SIMPLER_HAVE_OPENMP

sb::Contender omp_independent(std::uint32_t n) {
  return {"openmp",
          [n] {
            return sb::time_ns([n] {
#pragma omp parallel num_threads(2)
#pragma omp single
              {
                for (std::uint32_t i = 0; i < n; ++i) {
#pragma omp task
                  { sb::clobber(); }
                }
#pragma omp taskwait
              }
            });
          },
          static_cast<double>(n)};
}

sb::Contender omp_independent_out(std::uint32_t n) {
  auto out = std::make_shared<std::vector<std::int32_t>>(n, 0);
  auto expect = std::make_shared<std::int32_t>(0);
  return {"openmp",
          [n, out, expect] {
            std::int32_t* p = out->data();
            const double ns = sb::time_ns([n, p] {
#pragma omp parallel num_threads(2)
#pragma omp single
              {
                for (std::uint32_t i = 0; i < n; ++i) {
#pragma omp task depend(out : p[i]) firstprivate(p, i)
                  { ++p[i]; }
                }
#pragma omp taskwait
              }
            });
            ++*expect;
            for (std::uint32_t i = 0; i < n; ++i) {
              if (p[i] != *expect) {
                fail(fmt::format("a1 (openmp): out[{}] = {}, expected {}", i, p[i], *expect));
              }
            }
            return ns;
          },
          static_cast<double>(n)};
}

sb::Contender omp_chain(std::uint32_t n) {
  return {"openmp",
          [n] {
            std::int32_t x = 0;
            std::int32_t* xp = &x;
            const double ns = sb::time_ns([n, xp] {
#pragma omp parallel num_threads(2)
#pragma omp single
              {
                for (std::uint32_t i = 0; i < n; ++i) {
#pragma omp task depend(inout : xp[0]) firstprivate(xp)
                  { ++xp[0]; }
                }
#pragma omp taskwait
              }
            });
            if (x != static_cast<std::int32_t>(n)) {
              fail(fmt::format("b (openmp): counter = {} after the chain, expected {}", x, n));
            }
            return ns;
          },
          static_cast<double>(n)};
}

sb::Contender omp_fan(std::uint32_t n) {
  auto st = std::make_shared<FanState>(n);
  return {"openmp",
          [n, st] {
            st->next();
            std::int32_t* x = st->x.data();
            std::int32_t* out = st->out.data();
            std::int64_t* result = st->result.data();
            const std::int32_t value = st->value;
            const double ns = sb::time_ns([=] {
#pragma omp parallel num_threads(2)
#pragma omp single
              {
#pragma omp task depend(out : x[0]) firstprivate(x, value)
                { x[0] = value; }
                for (std::uint32_t i = 0; i < n; ++i) {
#pragma omp task depend(in : x[0]) depend(out : out[i]) firstprivate(x, out, i)
                  { out[i] = x[0]; }
                }
        // One dependence per element through an iterator (OpenMP 5.0, supported by
        // gcc 12). A plain array section `depend(in: out[0:n])` would not do: libgomp
        // matches dependences by the section's start address only, so it would wait
        // for the writer of out[0] alone.
#pragma omp task depend(iterator(j = 0 : n), in : out[j]) firstprivate(out, result, n)
                {
                  std::int64_t s = 0;
                  for (std::uint32_t i = 0; i < n; ++i) s += out[i];
                  result[0] = s;
                }
#pragma omp taskwait
              }
            });
            st->check("openmp");
            return ns;
          },
          static_cast<double>(n + 2)};
}

#endif  // SIMPLER_HAVE_OPENMP

int run(int argc, char** argv) {
  sb::Options opt = sb::parse_options(
      argc, argv, "Engine (2 thread sub workers) vs OpenMP tasks (2 threads); scenarios a, b, c.");
  // Both runtimes spin a while after their last task (libgomp: up to GOMP_SPINCOUNT); on two
  // cores a still-spinning runtime would slow the next contender down. Let it fall asleep.
  if (opt.gap_ms < 0) opt.gap_ms = opt.tiny ? 0 : 20;
  const Sizes sz = sizes_for(opt);
  sb::Report rep(opt);
  rep.probe();

  if (!opt.csv_only) {
    std::printf(
        "bench_engine: %s, %d warm-up + %d measured repetitions per contender, "
        "interleaved, %d ms gap; load average %s\n",
        opt.tiny ? "tiny sizes" : "full sizes", opt.warmup, opt.reps, opt.gap_ms,
        sb::load_average().c_str());
  }
#ifndef SIMPLER_HAVE_OPENMP
  std::fprintf(opt.csv_only ? stderr : stdout,
               "OpenMP not available in this build: the openmp contender is skipped\n");
#endif

  Engine e;
  auto omp_ratio = [&](const std::string& scenario) {
#ifdef SIMPLER_HAVE_OPENMP
    rep.ratio(scenario, "engine", "openmp");
#else
    static_cast<void>(scenario);
#endif
  };

  // a: independent empty tasks.
  {
    const std::uint32_t n = sz.independent;
    verify_independent(e, sz, n);
    const std::string sc = "a_independent_" + count_label(n);
    rep.section(fmt::format("a: {} independent empty tasks, no tensors (target <= 64 ns/task)",
                            count_label(n)));
    std::vector<sb::Contender> cs{engine_independent(e, sz, n)};
#ifdef SIMPLER_HAVE_OPENMP
    cs.push_back(omp_independent(n));
#endif
    sb::run_scenario(rep, sc, "ns/task", cs);
    omp_ratio(sc);
  }
  // t: what tracing costs when on (the untraced row is scenario a's path: tracing off costs one
  // relaxed load and a predictable branch per recording point).
  {
    const std::uint32_t n = sz.independent;
    char tmpl[] = "/tmp/bench-engine-trace-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) fail("t: mkdtemp failed");
    const std::string dir = tmpl;
    const std::string sc = "t_traced_independent_" + count_label(n);
    rep.section(fmt::format("t: scenario a untraced vs traced (levels 1, 2; trace.json written)"));
    std::vector<sb::Contender> cs{engine_independent(e, sz, n),
                                  engine_independent_traced(e, sz, n, 1, dir),
                                  engine_independent_traced(e, sz, n, 2, dir)};
    sb::run_scenario(rep, sc, "ns/task", cs);
    ::unlink((dir + "/trace.json").c_str());
    ::rmdir(dir.c_str());
  }
  // a1: independent tasks with one private output each.
  {
    const std::uint32_t n = sz.independent;
    const std::string sc = "a1_independent_out_" + count_label(n);
    rep.section(
        fmt::format("a1: {} independent tasks, one private OutputExisting each", count_label(n)));
    std::vector<sb::Contender> cs{engine_independent_out(e, sz, n)};
#ifdef SIMPLER_HAVE_OPENMP
    cs.push_back(omp_independent_out(n));
#endif
    sb::run_scenario(rep, sc, "ns/task", cs);
    omp_ratio(sc);
  }
  // b: chain.
  {
    const std::uint32_t n = sz.chain;
    const std::string sc = "b_chain_" + count_label(n);
    rep.section(fmt::format("b: chain of {} tasks, InOut on one tensor (target <= 60 ns/hop)",
                            count_label(n)));
    std::vector<sb::Contender> cs{engine_chain(e, n)};
#ifdef SIMPLER_HAVE_OPENMP
    cs.push_back(omp_chain(n));
#endif
    sb::run_scenario(rep, sc, "ns/hop", cs);
    omp_ratio(sc);
  }
  // c: fan-out / fan-in, small and big.
  std::string fan_scenarios[2];
  const std::uint32_t fan_sizes[2] = {sz.fan_small, sz.fan_big};
  for (int k = 0; k < 2; ++k) {
    const std::uint32_t n = fan_sizes[k];
    const std::string sc = "c_fan_" + count_label(n);
    fan_scenarios[k] = sc;
    rep.section(fmt::format(
        "c: 1 writer -> {} readers -> 1 final task (target <= 130 ns/task){}", count_label(n),
        n > sz.scope_threshold ? fmt::format("; engine readers in scopes of {}", sz.scope_chunk)
                               : std::string()));
    std::vector<sb::Contender> cs{engine_fan(e, sz, n)};
#ifdef SIMPLER_HAVE_OPENMP
    cs.push_back(omp_fan(n));
#endif
    sb::run_scenario(rep, sc, "ns/task", cs);
    omp_ratio(sc);
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
  e.w.close();
  rep.note("load average at the end: " + sb::load_average());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return sb::guarded_main("bench_engine", run, argc, argv);
}
