// bench_chip — the simulated chip (L2): what its orchestration + scheduling path costs per task,
// and what one run() costs on top of the kernels it runs.
//
//   chip_a  10k independent empty-kernel tasks through ChipWorker::run (orch_independent)
//           vs the same 10k tasks as OpenMP tasks on 2 host threads, and vs a plain loop
//           calling the kernel (the floor: no scheduling at all).
//   chip_b  a 10k-task chain (InOut on one tensor, orch_chain) vs OpenMP depend(inout) and the
//           plain loop.
//   chip_c  one run() of a registered callable: the vector example (5 kernels over 128x128
//           floats) vs calling the same 5 kernels directly on this thread.
//   chip_e  the per-run fixed cost: run() of a 1-task graph (one empty kernel) vs the same one
//           task as an OpenMP parallel region (2 threads, single + task + taskwait) and as a
//           hand-off to a parked std::thread and back (condition variables): each pays a wake-up
//           of a sleeping thread, the floor here. Once after the gap between contenders (the
//           threads asleep), and 100 back-to-back (threads still warm). Then "spaced": 100 runs,
//           each after 30 us of host work (a spin on the clock, as a lane replying to its parent
//           would do between two chip tasks), timing the run() calls only: what a run costs when
//           its end overlaps the host's next step. Last "p50": the p50 of 2000 back-to-back
//           runs timed one by one, per repetition (the steady state, without the cold first run
//           that the warm row's mean of 100 includes).
//   chip_f  idle: the process CPU time (every thread) over a 1 s sleep of the main thread right
//           after a run, as % of one core (PERFORMANCE.md i: <= 1 %); the device threads spin
//           briefly after the run and must then sleep.
//   chip_d  device boot (arena re-wire + reset) with a 64-task window vs a 65536-task window:
//           the boot must not grow with the window (read from the context's counters).
//
// The simulated chip here runs 2 clusters (2 AIC + 4 AIV core threads) and 3 AICPU threads on a
// 2-core machine: its per-task figures are thread hand-offs, not hardware numbers.
#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <time.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "simpler/device/orchestration.hpp"
#include "simpler/simpler.hpp"

namespace sb = simpler_bench;

namespace {

std::string module(const std::string& file) {
  return std::string(SIMPLER_DEVICE_MODULE_DIR) + "/" + file;
}

simpler_kernel_fn load_kernel(const std::string& file) {
  void* h = ::dlopen(module(file).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) throw std::runtime_error(fmt::format("cannot load {}: {}", file, ::dlerror()));
  auto* fn = reinterpret_cast<simpler_kernel_fn>(::dlsym(h, "kernel_entry"));
  if (fn == nullptr) throw std::runtime_error(file + " has no kernel_entry");
  return fn;
}

/// One kernel call's args[] with its contexts, for calling a kernel directly on this thread.
struct DirectCall {
  std::array<simpler_chip_tensor, 4> tensors{};
  std::array<std::int64_t, SIMPLER_KERNEL_ARGS> args{};
  simpler_local_context local{};
  simpler_global_context global{0, 0, 1, 0};  // an AIV core

  DirectCall(std::initializer_list<float*> buffers, std::uint32_t n,
             const float* scalar = nullptr) {
    int i = 0;
    for (float* b : buffers) {
      simpler_chip_tensor& t = tensors[static_cast<std::size_t>(i)];
      t.addr = reinterpret_cast<std::uintptr_t>(b);
      t.owner_task = SIMPLER_INVALID_TASK_ID;
      t.ndims = 1;
      t.shapes[0] = n;
      t.dtype = SIMPLER_FLOAT32;
      args[static_cast<std::size_t>(i)] =
          static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&t));
      ++i;
    }
    if (scalar != nullptr)
      args[static_cast<std::size_t>(i)] =
          static_cast<std::int64_t>(simpler::device::to_u64(*scalar));
    args[SIMPLER_KERNEL_LOCAL_ARG] =
        static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&local));
    args[SIMPLER_KERNEL_GLOBAL_ARG] =
        static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&global));
  }
  void operator()(simpler_kernel_fn fn) { fn(args.data()); }
};

struct Chip {
  simpler::ChipWorker worker{0};
  int independent = -1, chain = -1, vector = -1;
  simpler::CallConfig config = simpler::default_call_config();

  Chip() {
    worker.init();
    const simpler::ChipKernel noop{0, module("kernel_noop.so")};
    independent = worker.register_callable(
        {.name = "independent", .orchestration = module("orch_independent.so"), .kernels = {noop}});
    chain = worker.register_callable(
        {.name = "chain", .orchestration = module("orch_chain.so"), .kernels = {noop}});
    vector = worker.register_callable({.name = "vector",
                                       .orchestration = module("orch_vector_example.so"),
                                       .kernels = {{0, module("kernel_add.so")},
                                                   {1, module("kernel_add_scalar.so")},
                                                   {2, module("kernel_mul.so")}}});
  }
  void run_count(int id, std::uint64_t n) {
    simpler::TaskArgs a;
    a.add_scalar(n);
    worker.run(id, a, config);
  }
};

/// Context switches (voluntary + involuntary, all threads of the process) per task of one run:
/// how often threads went to sleep or were preempted. Much less noisy than time on this VM.
double switches_per_task(Chip& c, int id, std::uint64_t n) {
  auto switches = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return u.ru_nvcsw + u.ru_nivcsw;
  };
  const auto before = switches();
  c.run_count(id, n);
  return static_cast<double>(switches() - before) / static_cast<double>(n);
}

sb::Contender chip_graph(Chip& c, int id, std::uint64_t n) {
  return {"chip", [&c, id, n] { return sb::time_ns([&] { c.run_count(id, n); }); },
          static_cast<double>(n)};
}

sb::Contender plain_loop(simpler_kernel_fn fn, std::uint64_t n) {
  return {"plain_loop",
          [fn, n] {
            static float buf[16];
            DirectCall call({buf}, 16);
            return sb::time_ns([&] {
              for (std::uint64_t i = 0; i < n; ++i) {
                call(fn);
                sb::clobber();
              }
            });
          },
          static_cast<double>(n)};
}

/// A parked std::thread that runs one kernel call per request: the hand-off floor of a
/// one-task run (wake a sleeping thread, then be woken by it).
class ParkedThread {
 public:
  explicit ParkedThread(simpler_kernel_fn fn) : fn_(fn), thread_([this] { loop(); }) {}
  ParkedThread(const ParkedThread&) = delete;
  ParkedThread& operator=(const ParkedThread&) = delete;
  ~ParkedThread() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void round_trip() {
    std::unique_lock lk(mu_);
    const std::uint64_t want = ++requested_;
    cv_.notify_one();
    done_cv_.wait(lk, [&] { return done_ == want; });
  }

 private:
  void loop() {
    static float buf[16];
    DirectCall call({buf}, 16);
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || requested_ != done_; });
      if (stop_) return;
      call(fn_);
      ++done_;
      done_cv_.notify_one();
    }
  }
  simpler_kernel_fn fn_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::uint64_t requested_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

/// `runs` calls of `call`, each after `host_work` of spinning on the clock; the summed time of
/// the calls alone, in ns.
template <class Call>
double spaced_calls_ns(int runs, std::chrono::microseconds host_work, Call&& call) {
  double total = 0;
  for (int r = 0; r < runs; ++r) {
    const auto until = std::chrono::steady_clock::now() + host_work;
    while (std::chrono::steady_clock::now() < until) sb::clobber();
    total += sb::time_ns(call);
  }
  return total;
}

#ifdef SIMPLER_HAVE_OPENMP
/// One empty-kernel task as an OpenMP region on 2 threads, `runs` times.
double omp_one_task(simpler_kernel_fn fn, int runs) {
  static float buf[16];
  float* p = buf;
  return sb::time_ns([&] {
    for (int r = 0; r < runs; ++r) {
#pragma omp parallel num_threads(2)
#pragma omp single
      {
#pragma omp task firstprivate(p)
        {
          DirectCall call({p}, 16);
          call(fn);
        }
#pragma omp taskwait
      }
    }
  });
}

sb::Contender omp_independent(simpler_kernel_fn fn, std::uint64_t n) {
  return {"openmp",
          [fn, n] {
            std::vector<float> buf(n * 16);
            return sb::time_ns([&] {
#pragma omp parallel num_threads(2)
#pragma omp single
              {
                for (std::uint64_t i = 0; i < n; ++i) {
                  float* p = buf.data() + i * 16;
#pragma omp task depend(out : p[0]) firstprivate(p)
                  {
                    DirectCall call({p}, 16);
                    call(fn);
                  }
                }
#pragma omp taskwait
              }
            });
          },
          static_cast<double>(n)};
}

sb::Contender omp_chain(simpler_kernel_fn fn, std::uint64_t n) {
  return {"openmp",
          [fn, n] {
            static float token[16];
            float* t = token;
            return sb::time_ns([&] {
#pragma omp parallel num_threads(2)
#pragma omp single
              {
                for (std::uint64_t i = 0; i < n; ++i) {
#pragma omp task depend(inout : t[0]) firstprivate(t)
                  {
                    DirectCall call({t}, 16);
                    call(fn);
                  }
                }
#pragma omp taskwait
              }
            });
          },
          static_cast<double>(n)};
}
#endif

int run(int argc, char** argv) {
  sb::Options opt = sb::parse_options(
      argc, argv,
      "Simulated chip (2 clusters, 3 AICPU threads) vs host threads: per-task and per-run cost.");
  if (opt.gap_ms < 0) opt.gap_ms = opt.tiny ? 0 : 20;
  const std::uint64_t n = opt.tiny ? 200 : 10'000;
  sb::Report rep(opt);
  rep.probe();
  if (!opt.csv_only) {
    std::printf(
        "bench_chip: %s, %d warm-up + %d measured repetitions, interleaved, %d ms gap; "
        "load average %s\n",
        opt.tiny ? "tiny sizes" : "full sizes", opt.warmup, opt.reps, opt.gap_ms,
        sb::load_average().c_str());
  }
#ifndef SIMPLER_HAVE_OPENMP
  std::fprintf(opt.csv_only ? stderr : stdout, "OpenMP not available: that contender is skipped\n");
#endif
  Chip chip;
  const simpler_kernel_fn noop = load_kernel("kernel_noop.so");

  // chip_a and chip_b: one graph on the chip against the same graph as OpenMP tasks (when
  // built with OpenMP) and the plain loop.
  auto graph_scenario = [&](const std::string& sc, const std::string& title, int id,
                            const char* metric, const char* unit, sb::Contender omp) {
    rep.section(title);
    std::vector<sb::Contender> cs{chip_graph(chip, id, n), plain_loop(noop, n)};
    if (omp.run) cs.push_back(std::move(omp));
    sb::run_scenario(rep, sc, metric, cs);
    rep.ratio(sc, "chip", "openmp");  // prints nothing without the openmp contender
    rep.note(
        fmt::format("chip: {:.2f} context switches per {}", switches_per_task(chip, id, n), unit));
  };
#ifdef SIMPLER_HAVE_OPENMP
  sb::Contender omp_a = omp_independent(noop, n), omp_b = omp_chain(noop, n);
#else
  sb::Contender omp_a, omp_b;
#endif
  const std::string label = sb::count_label(static_cast<std::uint32_t>(n));
  graph_scenario("chip_a_independent_" + label,
                 fmt::format("chip_a: {} independent empty-kernel tasks", n), chip.independent,
                 "ns/task", "task", std::move(omp_a));
  graph_scenario("chip_b_chain_" + label,
                 fmt::format("chip_b: a chain of {} empty-kernel tasks (InOut on one tensor)", n),
                 chip.chain, "ns/hop", "hop", std::move(omp_b));
  {
    rep.section("chip_c: one run() of a registered callable vs its kernels called directly");
    constexpr std::uint32_t kLen = 128 * 128;
    std::vector<float> a(kLen, 2.0F), b(kLen, 3.0F), f(kLen, 0.0F), c(kLen), d(kLen), e(kLen),
        g(kLen);
    const simpler_kernel_fn add = load_kernel("kernel_add.so");
    const simpler_kernel_fn add_scalar = load_kernel("kernel_add_scalar.so");
    const simpler_kernel_fn mul = load_kernel("kernel_mul.so");
    std::vector<sb::Contender> cs{
        {"chip_run",
         [&] {
           simpler::TaskArgs args;
           args.add_tensor(simpler::make_tensor(std::span<float>(a)),
                           simpler::TensorArgType::Input);
           args.add_tensor(simpler::make_tensor(std::span<float>(b)),
                           simpler::TensorArgType::Input);
           args.add_tensor(simpler::make_tensor(std::span<float>(f)),
                           simpler::TensorArgType::Output);
           const double ns = sb::time_ns([&] { chip.worker.run(chip.vector, args, chip.config); });
           if (f[kLen - 1] != 47.0F) throw std::runtime_error("vector example: f != 47");
           return ns;
         },
         1},
        {"kernels_direct",
         [&] {
           const float one = 1.0F, two = 2.0F;
           DirectCall k1({a.data(), b.data(), c.data()}, kLen),
               k2({c.data(), d.data()}, kLen, &one), k3({c.data(), e.data()}, kLen, &two),
               k4({d.data(), e.data(), g.data()}, kLen), k5({g.data(), c.data(), f.data()}, kLen);
           const double ns = sb::time_ns([&] {
             k1(add);
             k2(add_scalar);
             k3(add_scalar);
             k4(mul);
             k5(add);
           });
           if (f[0] != 47.0F) throw std::runtime_error("direct kernels: f != 47");
           return ns;
         },
         1},
    };
    sb::run_scenario(rep, "chip_c_run", "ns/run", cs);
    rep.ratio("chip_c_run", "chip_run", "kernels_direct");
  }
  {
    rep.section("chip_e: run() of a 1-task graph vs one task on host threads (wake + wait)");
    ParkedThread parked(noop);
    for (const int runs : {1, 100}) {
      const std::string sc = runs == 1 ? "chip_e_run_1_task_cold" : "chip_e_run_1_task_warm";
      std::vector<sb::Contender> cs{
          {"chip",
           [&, runs] {
             return sb::time_ns([&] {
               for (int r = 0; r < runs; ++r) chip.run_count(chip.chain, 1);
             });
           },
           static_cast<double>(runs)},
          {"thread",
           [&, runs] {
             return sb::time_ns([&] {
               for (int r = 0; r < runs; ++r) parked.round_trip();
             });
           },
           static_cast<double>(runs)},
      };
#ifdef SIMPLER_HAVE_OPENMP
      cs.push_back(
          {"openmp", [&, runs] { return omp_one_task(noop, runs); }, static_cast<double>(runs)});
#endif
      sb::run_scenario(rep, sc, "ns/run", cs);
      rep.ratio(sc, "chip", "openmp");
      rep.ratio(sc, "chip", "thread");
    }
    constexpr int kSpacedRuns = 100;
    constexpr std::chrono::microseconds kHostWork{30};
    std::vector<sb::Contender> spaced{
        {"chip",
         [&] {
           return spaced_calls_ns(kSpacedRuns, kHostWork, [&] { chip.run_count(chip.chain, 1); });
         },
         static_cast<double>(kSpacedRuns)},
        {"thread",
         [&] { return spaced_calls_ns(kSpacedRuns, kHostWork, [&] { parked.round_trip(); }); },
         static_cast<double>(kSpacedRuns)},
    };
    sb::run_scenario(rep, "chip_e_run_1_task_spaced", "ns/run", spaced);
    rep.ratio("chip_e_run_1_task_spaced", "chip", "thread");

    // The steady state: each repetition times kLatencyRuns back-to-back runs one by one, after
    // kLatencyWarm untimed ones (the first run after the gap is the cold one above), and keeps
    // their p50. Rows: the median and p99 over repetitions of those p50s.
    const int kLatencyRuns = opt.tiny ? 50 : 2000, kLatencyWarm = opt.tiny ? 5 : 100;
    auto p50_of = [&](auto&& call) {
      for (int r = 0; r < kLatencyWarm; ++r) call();
      std::vector<double> one;
      one.reserve(static_cast<std::size_t>(kLatencyRuns));
      for (int r = 0; r < kLatencyRuns; ++r) one.push_back(sb::time_ns(call));
      return sb::summarise(std::move(one)).median;
    };
    std::vector<double> chip_p50, thread_p50;
    for (int rep_i = 0; rep_i < opt.reps; ++rep_i) {
      if (opt.gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.gap_ms));
      chip_p50.push_back(p50_of([&] { chip.run_count(chip.chain, 1); }));
      if (opt.gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.gap_ms));
      thread_p50.push_back(p50_of([&] { parked.round_trip(); }));
    }
    rep.add("chip_e_run_1_task_p50", "chip", "ns/run", sb::summarise(chip_p50));
    rep.add("chip_e_run_1_task_p50", "thread", "ns/run", sb::summarise(thread_p50));
    rep.ratio("chip_e_run_1_task_p50", "chip", "thread");
    rep.note(
        fmt::format("p50 of {} back-to-back runs per repetition; target (issue 13): chip "
                    "<= 20 us",
                    kLatencyRuns));
  }
  {
    rep.section("chip_d: device boot (re-wire + reset) vs task window size");
    auto boot_ns = [&](std::uint64_t window) {
      simpler::CallConfig cfg = simpler::default_call_config();
      for (auto& w : cfg.runtime_env.ring_task_window) w = window;
      std::vector<double> v;
      for (int i = 0; i < (opt.tiny ? 2 : 21); ++i) {
        simpler::TaskArgs a;
        a.add_scalar(std::uint64_t{1});
        chip.worker.run(chip.chain, a, cfg);
        v.push_back(static_cast<double>(chip.worker.stats().last_boot_ns));
      }
      v.erase(v.begin());  // the first run with a new sizing builds and uploads the arena
      return sb::summarise(v);
    };
    const sb::Stats small = boot_ns(64), big = boot_ns(65536);
    rep.add("chip_d_boot", "window_64", "ns/boot", small);
    rep.add("chip_d_boot", "window_65536", "ns/boot", big);
    rep.ratio("chip_d_boot", "window_65536", "window_64");
    const auto s = chip.worker.stats();
    rep.note(fmt::format("arena builds {}, uploads {}, boots {}, orchestration loads {}",
                         s.arena_builds, s.arena_uploads, s.boots, s.orch_so_loads));
  }
  {
    rep.section("chip_f: idle CPU right after a run (process CPU over a sleep, % of one core)");
    auto cpu_ns = [] {
      timespec ts{};
      ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
    };
    const auto window = std::chrono::milliseconds(opt.tiny ? 100 : 1000);
    std::vector<double> pct;
    for (int i = 0; i < (opt.tiny ? 1 : 3); ++i) {
      chip.run_count(chip.independent, n);
      const double c0 = cpu_ns();
      std::this_thread::sleep_for(window);
      pct.push_back(100.0 * (cpu_ns() - c0) /
                    static_cast<double>(std::chrono::nanoseconds(window).count()));
    }
    rep.add("chip_f_idle", "after_run", "%core", sb::summarise(pct));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return sb::guarded_main("bench_chip", run, argc, argv);
}
