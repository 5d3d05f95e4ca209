// simpler benchmarks — the OpenMP peer's workloads, standard C++ and OpenMP only.
//
// Compiled twice from this one source: into bench_engine by g++ -fopenmp (libgomp), and into
// bench_engine_libomp by clang -fopenmp=libomp (LLVM's libomp; bench/libomp/). The two runtimes
// cannot share a process, so libomp runs in that helper, driven by bench_engine over a pipe.
//
// Every workload is one `omp parallel num_threads(threads)` + `omp single` region creating the
// graph with `omp task` and `depend` clauses, ending in a taskwait; it returns the region's
// elapsed ns (preparing and checking the data is outside the timed part) and an error text when
// the result is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "dag.hpp"
#include "probe.hpp"

namespace simpler_bench::omp {

struct Result {
  double ns = 0;
  std::string error;  ///< empty when the result was right
};

#ifdef _OPENMP

/// a: n independent empty tasks.
inline Result independent(std::uint32_t n, int threads) {
  Result r;
  r.ns = time_ns([n, threads] {
#pragma omp parallel num_threads(threads)
#pragma omp single
    {
      for (std::uint32_t i = 0; i < n; ++i) {
#pragma omp task
        { clobber(); }
      }
#pragma omp taskwait
    }
  });
  return r;
}

/// Scenario a once more, untimed: the share of its tasks that ran on the thread creating them.
/// libgomp runs a task at once, undeferred, on the creating thread once its queue holds more
/// than 64 tasks per thread (and the creator runs queued ones at the taskwait), so this is how
/// much of the row is task creation followed by a call rather than a hand-off to another thread.
inline double independent_creator_share(std::uint32_t n, int threads) {
  struct alignas(64) Count {
    std::uint64_t v = 0;
  };
  std::vector<Count> ran(static_cast<std::size_t>(threads));
  int creator = -1;
  Count* counts = ran.data();
#pragma omp parallel num_threads(threads)
#pragma omp single
  {
    creator = omp_get_thread_num();
    for (std::uint32_t i = 0; i < n; ++i) {
#pragma omp task firstprivate(counts)
      { ++counts[omp_get_thread_num()].v; }
    }
#pragma omp taskwait
  }
  std::uint64_t all = 0;
  for (const Count& c : ran) all += c.v;
  return all == 0 || creator < 0 ? 0.0
                                 : static_cast<double>(ran[static_cast<std::size_t>(creator)].v) /
                                       static_cast<double>(all);
}

/// a1: n independent tasks, each incrementing its own out[i] (depend(out) on it). `out` is
/// kept by the caller between repetitions (n elements).
inline Result independent_out(std::vector<std::int32_t>& out, int threads) {
  const auto n = static_cast<std::uint32_t>(out.size());
  for (auto& v : out) v = 0;
  std::int32_t* p = out.data();
  Result r;
  r.ns = time_ns([n, p, threads] {
#pragma omp parallel num_threads(threads)
#pragma omp single
    {
      for (std::uint32_t i = 0; i < n; ++i) {
#pragma omp task depend(out : p[i]) firstprivate(p, i)
        { ++p[i]; }
      }
#pragma omp taskwait
    }
  });
  for (std::uint32_t i = 0; i < n; ++i) {
    if (p[i] != 1) {
      r.error = "out[" + std::to_string(i) + "] = " + std::to_string(p[i]) + ", expected 1";
      break;
    }
  }
  return r;
}

/// b: a chain of n tasks, each incrementing one counter (depend(inout) on it).
inline Result chain(std::uint32_t n, int threads) {
  std::int32_t x = 0;
  std::int32_t* xp = &x;
  Result r;
  r.ns = time_ns([n, xp, threads] {
#pragma omp parallel num_threads(threads)
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
    r.error = "counter = " + std::to_string(x) + " after the chain, expected " + std::to_string(n);
  }
  return r;
}

/// c: 1 writer (x = value) -> n readers (out[i] = x) -> 1 final task (result = sum of out).
/// `out` is kept by the caller (n elements); `value` should change between repetitions.
inline Result fan(std::vector<std::int32_t>& out, std::int32_t value, int threads) {
  const auto n = static_cast<std::uint32_t>(out.size());
  std::int32_t xv = 0;
  std::int64_t res = -1;
  std::int32_t* x = &xv;
  std::int32_t* o = out.data();
  std::int64_t* result = &res;
  Result r;
  r.ns = time_ns([=] {
#pragma omp parallel num_threads(threads)
#pragma omp single
    {
#pragma omp task depend(out : x[0]) firstprivate(x, value)
      { x[0] = value; }
      for (std::uint32_t i = 0; i < n; ++i) {
#pragma omp task depend(in : x[0]) depend(out : o[i]) firstprivate(x, o, i)
        { o[i] = x[0]; }
      }
      // One dependence per element through an iterator (OpenMP 5.0, gcc >= 12, clang >= 12).
      // A plain array section `depend(in: o[0:n])` would not do: the runtimes match dependences
      // by the section's start address only, so it would wait for the writer of o[0] alone.
#pragma omp task depend(iterator(j = 0 : n), in : o[j]) firstprivate(o, result, n)
      {
        std::int64_t s = 0;
        for (std::uint32_t i = 0; i < n; ++i) s += o[i];
        result[0] = s;
      }
#pragma omp taskwait
    }
  });
  if (res != static_cast<std::int64_t>(n) * value) {
    r.error = "final sum = " + std::to_string(res) + ", expected " +
              std::to_string(static_cast<std::int64_t>(n) * value);
  }
  return r;
}

/// d: the random tagged DAG `g` (dag.hpp): depend(in) on its two inputs, depend(inout) on its
/// InOut buffer, which gives read-after-write, write-after-read and write-after-write. `buf` is
/// kept by the caller (g.spec.buffers elements) and reset to g.initial before the region.
inline Result dag(const Dag& g, std::vector<std::uint64_t>& buf, int threads) {
  buf = g.initial;
  std::uint64_t* b = buf.data();
  const std::uint32_t* in1 = g.in1.data();
  const std::uint32_t* in2 = g.in2.data();
  const std::uint32_t* io = g.io.data();
  const std::uint32_t n = g.spec.tasks;
  Result r;
  r.ns = time_ns([=] {
#pragma omp parallel num_threads(threads)
#pragma omp single
    {
      for (std::uint32_t t = 0; t < n; ++t) {
        std::uint64_t* x = b + in1[t];
        std::uint64_t* y = b + in2[t];
        std::uint64_t* z = b + io[t];
#pragma omp task depend(in : x[0], y[0]) depend(inout : z[0]) firstprivate(x, y, z)
        { z[0] = dag_step(x[0], y[0], z[0]); }
      }
#pragma omp taskwait
    }
  });
  r.error = g.check(b);
  return r;
}

#endif  // _OPENMP

}  // namespace simpler_bench::omp
