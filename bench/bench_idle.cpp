// bench_idle — CPU used by an idle, initialised Worker (PERFORMANCE.md i: <= 1 % of a core).
//
// Measures CPU time across a sleep of the main thread (2 s; 0.2 s with --tiny), in five
// situations, one repetition of each per round, interleaved:
//   baseline           no Worker exists: only the sleeping main thread
//   after_init         a Worker with 2 thread sub workers, measured right after init()
//   after_run          the same Worker, measured right after a run() of 1000 empty tasks, so the
//                      engine threads' spin-then-sleep after their last task is included
//   forked_after_init  a Worker with 2 sub workers in forked children, after init()
//   forked_after_run   the same after a run of 1000 empty tasks: the children's spin, their
//                      sleep (with its fence: docs/processes.md, "Light sends") and their
//                      liveness ticks are included
// The CPU is every thread's of this process and of its children (the forked Worker's). Reports CPU
// ms per window, the % of one core that is, and the ratio of the Worker's figures to the
// baseline's. Each round builds fresh Workers and destroys them before the next baseline.
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

struct Window {
  double cpu_ns = 0;
  double wall_ns = 0;
};

/// CPU time of this process and its children while the main thread sleeps for `d`.
Window idle_window(std::chrono::milliseconds d) {
  const std::vector<int> pids = sb::self_and_children();
  const double c0 = sb::cpu_ns(pids);
  const std::int64_t w0 = sb::now_ns();
  std::this_thread::sleep_for(d);
  const std::int64_t w1 = sb::now_ns();
  const double c1 = sb::cpu_ns(pids);
  return {c1 - c0, static_cast<double>(w1 - w0)};
}

int run(int argc, char** argv) {
  sb::Options opt = sb::parse_options(
      argc, argv,
      "CPU time of an idle initialised Worker (2 thread or forked sub workers) vs no Worker.");
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

  constexpr int kRows = 5;
  const char* names[kRows] = {"baseline", "after_init", "after_run", "forked_after_init",
                              "forked_after_run"};
  std::vector<double> cpu_ms[kRows];
  std::vector<double> core_pct[kRows];
  auto record = [&](int k, const Window& w) {
    cpu_ms[k].push_back(w.cpu_ns / 1e6);
    core_pct[k].push_back(100.0 * w.cpu_ns / w.wall_ns);
  };
  // Rows `first` (after init) and `first + 1` (after a run) for a Worker of 2 sub workers.
  const auto worker_rows = [&](simpler::ChildMode mode, int first) {
    simpler::WorkerOptions o;
    o.num_sub_workers = 2;
    o.child_mode = mode;
    simpler::Worker w(o);
    auto empty = w.register_sub("empty", [](simpler::TaskArgsView) {});
    w.init();
    record(first, idle_window(window));
    w.run([&](simpler::Orchestrator& orch, simpler::TaskArgsView, const simpler::CallConfig&) {
      for (std::uint32_t i = 0; i < run_tasks; ++i) orch.submit_sub(empty);
    });
    if (w.orchestrator().live_tasks() != 0) {
      throw std::runtime_error(fmt::format("{} tasks still live after Worker::run returned",
                                           w.orchestrator().live_tasks()));
    }
    record(first + 1, idle_window(window));
    w.close();
  };

  for (int r = 0; r < opt.reps; ++r) {
    record(0, idle_window(window));
    worker_rows(simpler::ChildMode::Thread, 1);
    worker_rows(simpler::ChildMode::Process, 3);
  }

  const std::string sc = fmt::format("i_idle_{}ms", window.count());
  rep.section(
      fmt::format("i: process CPU over a {} ms sleep of the main thread "
                  "(target: Worker <= 1 % of a core)",
                  window.count()));
  sb::Stats pct[kRows];
  for (int k = 0; k < kRows; ++k) {
    rep.add(sc, names[k], "cpu_ms", sb::summarise(cpu_ms[k]));
    pct[k] = sb::summarise(core_pct[k]);
    rep.add(sc, names[k], "core_pct", pct[k]);
  }
  for (int k = 1; k < kRows; ++k) {
    // The Worker's own share of a core: its figure minus the same round's baseline.
    std::vector<double> delta;
    for (std::size_t r = 0; r < core_pct[k].size(); ++r) {
      delta.push_back(core_pct[k][r] - core_pct[0][r]);
    }
    rep.add(sc, fmt::format("{}-baseline", names[k]), "core_pct", sb::summarise(delta));
  }
  for (int k = 1; k < kRows; ++k) {
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
