// simpler benchmarks — the random tagged DAG of scenario d, and its sequential oracle.
//
// Standard C++ only: bench_engine (engine, libgomp, oneTBB) and the libomp helper
// (bench/libomp/, another compiler) build the same graph from the same seed.
//
// A graph is `tasks` tasks over `buffers` buffers of one std::uint64_t each. Task t reads
// buffers in1[t] and in2[t] (Input) and updates io[t] (InOut), three distinct buffers chosen
// uniformly at random: buf[io] = dag_step(buf[in1], buf[in2], buf[io]). The step is not
// commutative in its updates, so running two tasks that share a buffer in the wrong order (a
// missed read-after-write, write-after-read or write-after-write) changes the final buffers;
// every run is compared with `expected`, the buffers after running the tasks in order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace simpler_bench {

struct DagSpec {
  std::uint32_t tasks = 0;
  std::uint32_t buffers = 0;  ///< at least 3
  std::uint64_t seed = 0x5eed'da9'2026ULL;

  friend bool operator==(const DagSpec&, const DagSpec&) = default;
};

/// splitmix64: a fixed, portable generator (std distributions differ between standard libraries).
inline std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// One task's work: the new value of its InOut buffer.
inline std::uint64_t dag_step(std::uint64_t in1, std::uint64_t in2, std::uint64_t io) noexcept {
  const std::uint64_t mixed = in1 + ((in2 << 21) | (in2 >> 43));
  return (io ^ mixed) * 0x9E3779B97F4A7C15ULL + 1;
}

struct Dag {
  DagSpec spec;
  std::vector<std::uint32_t> in1, in2, io;  ///< per task
  std::vector<std::uint64_t> initial;       ///< the buffers before a run
  std::vector<std::uint64_t> expected;      ///< the buffers after the tasks ran in order

  /// Runs task t on `buf` (the sequential oracle, and every contender's task body).
  void step(std::uint64_t* buf, std::uint32_t t) const noexcept {
    buf[io[t]] = dag_step(buf[in1[t]], buf[in2[t]], buf[io[t]]);
  }

  /// "" when `buf` holds the expected buffers, else a description of the first difference.
  [[nodiscard]] std::string check(const std::uint64_t* buf) const {
    for (std::uint32_t b = 0; b < spec.buffers; ++b) {
      if (buf[b] != expected[b]) {
        return "buffer " + std::to_string(b) + " = " + std::to_string(buf[b]) + ", expected " +
               std::to_string(expected[b]) + " (the tasks were not ordered as tagged)";
      }
    }
    return {};
  }
};

inline std::uint32_t draw_below(std::uint64_t& state, std::uint32_t n) noexcept {
  return static_cast<std::uint32_t>(((splitmix64(state) >> 32) * n) >> 32);
}

/// Builds the graph of `spec` and its oracle.
inline Dag make_dag(const DagSpec& spec) {
  Dag g;
  g.spec = spec;
  std::uint64_t state = spec.seed;
  g.in1.resize(spec.tasks);
  g.in2.resize(spec.tasks);
  g.io.resize(spec.tasks);
  for (std::uint32_t t = 0; t < spec.tasks; ++t) {
    const std::uint32_t a = draw_below(state, spec.buffers);
    std::uint32_t b = draw_below(state, spec.buffers);
    while (b == a) b = draw_below(state, spec.buffers);
    std::uint32_t c = draw_below(state, spec.buffers);
    while (c == a || c == b) c = draw_below(state, spec.buffers);
    g.in1[t] = a;
    g.in2[t] = b;
    g.io[t] = c;
  }
  g.initial.resize(spec.buffers);
  for (auto& v : g.initial) v = splitmix64(state);
  g.expected = g.initial;
  for (std::uint32_t t = 0; t < spec.tasks; ++t) g.step(g.expected.data(), t);
  return g;
}

}  // namespace simpler_bench
