// bench_idle — CPU used by an idle, initialised Worker (PERFORMANCE.md i: <= 1 % of a core).
//
// Measures the process CPU time (CLOCK_PROCESS_CPUTIME_ID: user + system of every thread) across
// a sleep of the main thread (2 s; 0.2 s with --tiny), in three situations, one repetition of
// each per round (baseline, after init, after run), interleaved:
//   baseline    no Worker exists: only the sleeping main thread
//   after_init  a Worker with 2 thread sub workers, measured right after init()
//   after_run   the same Worker, measured right after a run() of 1000 empty tasks, so the
//               engine threads' spin-then-sleep after their last task is included
// Reports CPU ms per window, the % of one core that is, and the ratio of the Worker's figures to
// the baseline's. Each round builds a fresh Worker and destroys it before the next baseline.
// Default: 1 round (each window is already 2 s long); --reps N for more.
#include <simpler/simpler.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

namespace {

namespace sb = simpler_bench;

double process_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) {
    throw std::runtime_error("clock_gettime(CLOCK_PROCESS_CPUTIME_ID) failed");
  }
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

struct Window {
  double cpu_ns = 0;
  double wall_ns = 0;
};

/// CPU time of the whole process while the main thread sleeps for `d`.
Window idle_window(std::chrono::milliseconds d) {
  const double c0 = process_cpu_ns();
  const std::int64_t w0 = sb::now_ns();
  std::this_thread::sleep_for(d);
  const std::int64_t w1 = sb::now_ns();
  const double c1 = process_cpu_ns();
  return {c1 - c0, static_cast<double>(w1 - w0)};
}

int run(int argc, char** argv) {
  sb::Options opt = sb::parse_options(
      argc, argv, "CPU time of an idle initialised Worker (2 thread sub workers) vs no Worker.");
  if (!opt.reps_given) opt.reps = 1;
  const std::chrono::milliseconds window(opt.tiny ? 200 : 2000);
  const std::uint32_t run_tasks = opt.tiny ? 100 : 1000;
  sb::Report rep(opt);

  if (!opt.csv_only) {
    std::printf(
        "bench_idle: %lld ms windows, %d round(s), run of %u tasks before after_run; "
        "load average %s\n",
        static_cast<long long>(window.count()), opt.reps, run_tasks, sb::load_average().c_str());
  }

  const char* names[3] = {"baseline", "after_init", "after_run"};
  std::vector<double> cpu_ms[3];
  std::vector<double> core_pct[3];
  auto record = [&](int k, const Window& w) {
    cpu_ms[k].push_back(w.cpu_ns / 1e6);
    core_pct[k].push_back(100.0 * w.cpu_ns / w.wall_ns);
  };

  for (int r = 0; r < opt.reps; ++r) {
    record(0, idle_window(window));
    {
      simpler::WorkerOptions o;
      o.num_sub_workers = 2;
      o.child_mode = simpler::ChildMode::Thread;
      simpler::Worker w(o);
      auto empty = w.register_sub("empty", [](simpler::TaskArgsView) {});
      w.init();
      record(1, idle_window(window));
      w.run([&](simpler::Orchestrator& orch, simpler::TaskArgsView, const simpler::CallConfig&) {
        for (std::uint32_t i = 0; i < run_tasks; ++i) orch.submit_sub(empty);
      });
      if (w.orchestrator().live_tasks() != 0) {
        throw std::runtime_error(fmt::format("{} tasks still live after Worker::run returned",
                                             w.orchestrator().live_tasks()));
      }
      record(2, idle_window(window));
      w.close();
    }
  }

  const std::string sc = fmt::format("i_idle_{}ms", window.count());
  rep.section(
      fmt::format("i: process CPU over a {} ms sleep of the main thread "
                  "(target: Worker <= 1 % of a core)",
                  window.count()));
  sb::Stats pct[3];
  for (int k = 0; k < 3; ++k) {
    rep.add(sc, names[k], "cpu_ms", sb::summarise(cpu_ms[k]));
    pct[k] = sb::summarise(core_pct[k]);
    rep.add(sc, names[k], "core_pct", pct[k]);
  }
  for (int k = 1; k < 3; ++k) {
    // The Worker's own share of a core: its figure minus the same round's baseline.
    std::vector<double> delta;
    for (std::size_t r = 0; r < core_pct[k].size(); ++r) {
      delta.push_back(core_pct[k][r] - core_pct[0][r]);
    }
    rep.add(sc, fmt::format("{}-baseline", names[k]), "core_pct", sb::summarise(delta));
  }
  for (int k = 1; k < 3; ++k) {
    if (pct[0].median > 0) {
      rep.ratio_value(sc, fmt::format("{}/baseline", names[k]), pct[k].median / pct[0].median,
                      pct[k].reps);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return sb::guarded_main("bench_idle", run, argc, argv);
}
