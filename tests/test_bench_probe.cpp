// The benches' per-CPU speed probe (bench/probe.hpp) is what tells a slow vCPU from a
// regression in a bench's figures: it must time every CPU the caller may run on, and leave the
// caller's affinity as it found it (the bench's own threads inherit it afterwards).
#include <catch2/catch.hpp>

#include <sched.h>

#include <cmath>
#include <vector>

#include "../bench/probe.hpp"

namespace simpler_test_bench_probe {

namespace {

std::vector<int> allowed_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  REQUIRE(sched_getaffinity(0, sizeof mask, &mask) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  }
  return cpus;
}

void check_speeds(const std::vector<simpler_bench::CpuSpeed>& speeds,
                  const std::vector<int>& cpus) {
  REQUIRE(speeds.size() == cpus.size());
  for (std::size_t i = 0; i < speeds.size(); ++i) {
    INFO("cpu " << speeds[i].cpu);
    CHECK(speeds[i].cpu == cpus[i]);
    CHECK(std::isfinite(speeds[i].ns_per_iter));
    CHECK(speeds[i].ns_per_iter > 0.0);
  }
}

}  // namespace

TEST_CASE("the per-CPU speed probe times every CPU the caller may use and restores its affinity",
          "[bench][probe]") {
  const std::vector<int> cpus = allowed_cpus();
  REQUIRE_FALSE(cpus.empty());
  check_speeds(simpler_bench::per_cpu_speed(2000), cpus);
  CHECK(allowed_cpus() == cpus);
}

TEST_CASE("the per-CPU speed probe of a caller pinned to one CPU times only that one",
          "[bench][probe]") {
  cpu_set_t before;
  CPU_ZERO(&before);
  REQUIRE(sched_getaffinity(0, sizeof before, &before) == 0);
  struct Restore {
    cpu_set_t mask;
    ~Restore() { sched_setaffinity(0, sizeof mask, &mask); }
  } restore{before};
  const int last = allowed_cpus().back();
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(last, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);

  check_speeds(simpler_bench::per_cpu_speed(2000), {last});
  // Not widened back to the process's CPUs: the caller's own mask.
  CHECK(allowed_cpus() == std::vector<int>{last});
}

}  // namespace simpler_test_bench_probe
