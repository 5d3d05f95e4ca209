// bench_engine_libomp — bench_engine's libomp peer: the OpenMP workloads of omp_workloads.hpp
// built by clang with -fopenmp=libomp, run on request of bench_engine.
//
// libgomp (g++ -fopenmp, linked into bench_engine) and LLVM's libomp cannot be linked into one
// process safely (both define the omp_* API and the GOMP_* entry points), so bench_engine spawns
// this program and drives it over its stdin/stdout, one request line and one reply line at a
// time; the ns figures are measured here, around the parallel region only:
//
//   hello                                 (sent once at start) "hello <runtime>"
//   probe <rounds>                        -> "ok <cross-core round trip ns, in this process>"
//   independent <n> <threads>             -> "ok <ns>" | "err <text>"
//   independent_out <n> <threads>
//   chain <n> <threads>
//   fan <n> <value> <threads>
//   dag <tasks> <buffers> <seed> <threads>
//   quit                                  (or end of input) exits
//
// Standard C++, POSIX and OpenMP only: it is configured on its own with the other compiler
// (bench/libomp/CMakeLists.txt), without fmt or simpler.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "omp_workloads.hpp"

#ifndef _OPENMP
#error "bench_engine_libomp needs OpenMP (clang -fopenmp=libomp)"
#endif

namespace {

namespace sb = simpler_bench;

/// Which OpenMP runtime the process runs on: libomp defines the __kmpc_* entry points that
/// clang's code calls, libgomp does not.
const char* runtime_name() {
  return ::dlsym(RTLD_DEFAULT, "__kmpc_fork_call") != nullptr ? "libomp" : "unknown";
}

void reply(const sb::omp::Result& r) {
  if (r.error.empty()) {
    std::printf("ok %.1f\n", r.ns);
  } else {
    std::string text = r.error;
    for (char& ch : text) {
      if (ch == '\n') ch = ' ';
    }
    std::printf("err %s\n", text.c_str());
  }
  std::fflush(stdout);
}

/// Buffers kept between repetitions of a row, as bench_engine keeps its own.
struct State {
  std::map<std::uint32_t, std::vector<std::int32_t>> outs;  // by size: a1 and c
  std::unique_ptr<sb::Dag> dag;
  std::vector<std::uint64_t> dag_buf;

  std::vector<std::int32_t>& out(std::uint32_t n) {
    auto& v = outs[n];
    v.resize(n);
    return v;
  }
  const sb::Dag& dag_for(const sb::DagSpec& spec) {
    if (!dag || !(dag->spec == spec)) dag = std::make_unique<sb::Dag>(sb::make_dag(spec));
    return *dag;
  }
};

sb::omp::Result serve(State& st, const std::string& verb, std::istringstream& in) {
  sb::omp::Result bad;
  bad.error = "malformed request: " + verb;
  if (verb == "independent" || verb == "independent_out" || verb == "chain") {
    std::uint32_t n = 0;
    int threads = 0;
    if (!(in >> n >> threads)) return bad;
    if (verb == "independent") return sb::omp::independent(n, threads);
    if (verb == "chain") return sb::omp::chain(n, threads);
    return sb::omp::independent_out(st.out(n), threads);
  }
  if (verb == "fan") {
    std::uint32_t n = 0;
    std::int32_t value = 0;
    int threads = 0;
    if (!(in >> n >> value >> threads)) return bad;
    return sb::omp::fan(st.out(n), value, threads);
  }
  if (verb == "dag") {
    sb::DagSpec spec;
    int threads = 0;
    if (!(in >> spec.tasks >> spec.buffers >> spec.seed >> threads) || spec.buffers < 3) {
      return bad;
    }
    return sb::omp::dag(st.dag_for(spec), st.dag_buf, threads);
  }
  bad.error = "unknown request: " + verb;
  return bad;
}

}  // namespace

int main() {
  std::printf("hello %s\n", runtime_name());
  std::fflush(stdout);
  State st;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string verb;
    in >> verb;
    if (verb.empty()) continue;
    if (verb == "quit") break;
    try {
      if (verb == "probe") {
        int rounds = 0;
        if (!(in >> rounds) || rounds < 1) {
          reply({0, "malformed request: probe"});
          continue;
        }
        reply({sb::cross_core_round_trip_ns(rounds), {}});
        continue;
      }
      reply(serve(st, verb, in));
    } catch (const std::exception& ex) {
      reply({0, std::string("exception: ") + ex.what()});
    }
  }
  return 0;
}
