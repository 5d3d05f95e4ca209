// simpler benchmarks — the shared harness (see docs in /work/shared/design/PERFORMANCE.md).
//
// A benchmark program declares scenarios; each scenario has contenders (named functions that run
// one repetition and return its elapsed nanoseconds) and a unit count (tasks, hops, ...) that
// turns a repetition's time into a per-unit figure. The harness runs the warm-up repetitions,
// then N measured repetitions with the contenders interleaved A B A B ..., and reports per
// contender the median and p99 (nearest rank) of the per-unit figure as an aligned table and as
// grep-able CSV lines:
//
//   csv,<scenario>,<contender>,<metric>,<median>,<p99>,<reps>,<probe_ns>
//
// plus ratio lines ("engine/openmp = 0.87") comparing two contenders' medians. <probe_ns> is the
// cross-core spin round trip (probe.hpp) measured in the process that produced the figure, last
// taken before it (Report::probe; a contender run in another process brings its own): these VMs
// switch latency modes, so a figure is only comparable with figures taken under a similar probe.
//
// Flags: --tiny (very small sizes, no warm-up, 1 repetition: a CI smoke run), --reps N,
//        --gap-ms N (sleep between contender runs), --csv-only (print only the csv lines), --help,
//        and where the program names its rows, --only ROW[,ROW...] (run only those rows).
#pragma once

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "probe.hpp"

namespace simpler_bench {

struct Options {
  bool tiny = false;      ///< very small sizes, no warm-up, 1 repetition
  bool csv_only = false;  ///< print only csv lines
  int reps = 7;           ///< measured repetitions per contender
  int warmup = 2;         ///< unmeasured repetitions per contender before the measured ones
  int gap_ms = -1;        ///< sleep between two contender runs; -1 = the program's default
  bool reps_given = false;
  std::vector<std::string> rows;  ///< the rows the program declared to parse_options
  std::vector<std::string> only;  ///< rows to run (--only); empty = every row

  /// Whether --only lets row `tag` run. A tag the program did not declare is its own bug (that
  /// row could never be picked): it throws, so any run of the program, --tiny included, finds it.
  bool wants(const std::string& tag) const {
    if (std::find(rows.begin(), rows.end(), tag) == rows.end())
      throw std::logic_error("bench: row '" + tag +
                             "' is not among the rows passed to parse_options");
    return only.empty() || std::find(only.begin(), only.end(), tag) != only.end();
  }
};

/// Parses the common flags. Prints usage and exits on --help or an unknown flag. `rows` names
/// the rows --only may pick; a program that passes none takes no --only.
inline Options parse_options(int argc, char** argv, const char* what = "",
                             const std::vector<std::string>& rows = {}) {
  Options o;
  o.rows = rows;
  std::string row_list;
  for (const std::string& r : rows) row_list += (row_list.empty() ? "" : ",") + r;
  auto usage = [&](FILE* f) {
    std::fprintf(f,
                 "usage: %s [--tiny] [--reps N] [--gap-ms N] [--csv-only]%s\n%s%s"
                 "  --tiny      very small sizes, no warm-up, 1 repetition (CI smoke run)\n"
                 "  --reps N    measured repetitions per contender (default 7)\n"
                 "  --gap-ms N  sleep N ms between two contender runs (lets spinning threads of\n"
                 "              the previous contender go to sleep first)\n"
                 "  --csv-only  print only the csv,<scenario>,<contender>,<metric>,<median>,"
                 "<p99>,<reps> lines\n%s%s%s",
                 argc > 0 ? argv[0] : "bench", rows.empty() ? "" : " [--only ROWS]", what,
                 *what != '\0' ? "\n" : "",
                 rows.empty() ? "" : "  --only ROWS run only these rows, comma-separated, of: ",
                 row_list.c_str(), rows.empty() ? "" : "\n");
  };
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const bool takes_value = std::strcmp(a, "--reps") == 0 || std::strcmp(a, "--gap-ms") == 0 ||
                             (std::strcmp(a, "--only") == 0 && !rows.empty());
    if (takes_value && i + 1 == argc) {  // so the branches below may read argv[i + 1]
      std::fprintf(stderr, "%s wants a value after it\n", a);
      usage(stderr);
      std::exit(2);
    }
    if (std::strcmp(a, "--tiny") == 0) {
      o.tiny = true;
    } else if (std::strcmp(a, "--csv-only") == 0) {
      o.csv_only = true;
    } else if (std::strcmp(a, "--reps") == 0) {
      char* end = nullptr;
      const long n = std::strtol(argv[++i], &end, 10);
      if (end == nullptr || *end != '\0' || n < 1 || n > 100000) {
        std::fprintf(stderr, "--reps wants a positive integer, got '%s'\n", argv[i]);
        std::exit(2);
      }
      o.reps = static_cast<int>(n);
      o.reps_given = true;
    } else if (std::strcmp(a, "--gap-ms") == 0) {
      char* end = nullptr;
      const long n = std::strtol(argv[++i], &end, 10);
      if (end == nullptr || *end != '\0' || n < 0 || n > 10000) {
        std::fprintf(stderr, "--gap-ms wants an integer in 0..10000, got '%s'\n", argv[i]);
        std::exit(2);
      }
      o.gap_ms = static_cast<int>(n);
    } else if (std::strcmp(a, "--only") == 0 && !rows.empty()) {
      const std::string list = argv[++i];
      std::size_t from = 0;
      while (from <= list.size()) {
        const std::size_t comma = std::min(list.find(',', from), list.size());
        std::string tag = list.substr(from, comma - from);
        if (std::find(rows.begin(), rows.end(), tag) == rows.end()) {
          std::fprintf(stderr, "--only: no row '%s'; the rows are %s\n", tag.c_str(),
                       row_list.c_str());
          std::exit(2);
        }
        o.only.push_back(std::move(tag));
        from = comma + 1;
      }
    } else if (std::strcmp(a, "--help") == 0 || std::strcmp(a, "-h") == 0) {
      usage(stdout);
      std::exit(0);
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", a);
      usage(stderr);
      std::exit(2);
    }
  }
  if (o.tiny) {
    o.warmup = 0;
    if (!o.reps_given) o.reps = 1;
  }
  return o;
}

/// The first three fields of /proc/loadavg ("" where unavailable): printed with the results so
/// a run disturbed by other work on the machine can be recognised.
inline std::string load_average() {
  std::string out;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[128] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr) out = buf;
    std::fclose(f);
  }
  int fields = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == ' ' && ++fields == 3) {
      out.resize(i);
      break;
    }
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

struct Stats {
  double median = 0;
  double p99 = 0;  ///< nearest-rank 99th percentile (the maximum for fewer than 100 samples)
  double min = 0;
  int reps = 0;
};

inline Stats summarise(std::vector<double> v) {
  Stats s;
  s.reps = static_cast<int>(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  s.median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  const auto rank = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(n)));
  s.p99 = v[std::min(n - 1, rank == 0 ? 0 : rank - 1)];
  s.min = v.front();
  return s;
}

/// One contender of a scenario: `run` performs one repetition and returns its elapsed ns.
/// `units` is the number of units (tasks, hops) one repetition processes: the reported figure
/// is ns / units. Contenders signal a wrong result by throwing. A contender that runs in another
/// process sets `probe` to take the cross-core probe there (called once, before the warm-up);
/// the others' rows carry the Report's last probe.
struct Contender {
  std::string name;
  std::function<double()> run;
  double units = 1;
  std::function<double()> probe = {};
  /// When > 0: runs in the first max_reps measured rounds only, after at most one warm-up
  /// round (for a contender too slow for the full count; its row shows the reps it got).
  int max_reps = 0;
};

struct Row {
  std::string scenario;
  std::string contender;
  std::string metric;
  Stats stats;
  double probe_ns = 0;  ///< the cross-core probe that goes with this figure
};

/// Collects rows and prints them as they arrive (table and csv).
class Report {
 public:
  explicit Report(const Options& o) : opt_(o) {}

  /// Measures and records the cross-core round trip (csv row "probe,cross_core_rtt"); rows
  /// added afterwards carry it. Call while no runtime's threads spin (before any exists, or
  /// after a gap): it spins two threads for a few milliseconds.
  double probe() {
    probe_ns_ = cross_core_round_trip_ns(probe_rounds());
    if (!opt_.csv_only) std::printf("  # cross-core spin round trip (probe): %.0f ns\n", probe_ns_);
    std::printf("csv,probe,cross_core_rtt,ns,%.3f,,5,%.3f\n", probe_ns_, probe_ns_);
    // Each CPU's speed too: a slow vCPU does not show in the round trip (probe.hpp).
    const std::vector<CpuSpeed> speeds = per_cpu_speed(opt_.tiny ? 20'000 : 200'000);
    if (!speeds.empty()) {
      double lo = speeds[0].ns_per_iter, hi = lo;
      std::string line;
      for (const CpuSpeed& c : speeds) {
        lo = std::min(lo, c.ns_per_iter);
        hi = std::max(hi, c.ns_per_iter);
        char one[48];
        std::snprintf(one, sizeof one, " cpu%d %.2f", c.cpu, c.ns_per_iter);
        line += one;
        std::printf("csv,probe,cpu%d_speed,ns/iter,%.3f,,5,%.3f\n", c.cpu, c.ns_per_iter,
                    probe_ns_);
      }
      if (!opt_.csv_only) {
        std::printf("  # per-CPU speed (ns/iter, slowest/fastest %.2f):%s\n", hi / lo,
                    line.c_str());
      }
    }
    std::fflush(stdout);
    return probe_ns_;
  }

  /// Rounds per probe trial: fewer in --tiny runs.
  [[nodiscard]] int probe_rounds() const noexcept { return opt_.tiny ? 2'000 : 20'000; }

  /// The last probe taken in this process (0 before the first).
  [[nodiscard]] double last_probe() const noexcept { return probe_ns_; }

  /// Prints a section header (not in --csv-only mode).
  void section(const std::string& title) const {
    if (opt_.csv_only) return;
    std::printf("\n== %s\n", title.c_str());
    std::printf("  %-26s %-20s %-9s %12s %12s %5s %7s\n", "scenario", "contender", "metric",
                "median", "p99", "reps", "probe");
    std::fflush(stdout);
  }

  /// A free-form note line (not in --csv-only mode).
  void note(const std::string& text) const {
    if (opt_.csv_only) return;
    std::printf("  # %s\n", text.c_str());
    std::fflush(stdout);
  }

  /// Records a row. `probe_ns` < 0 means this process's last probe (last_probe()); a figure
  /// measured in another process passes that process's probe.
  const Row& add(std::string scenario, std::string contender, std::string metric, Stats s,
                 double probe_ns = -1) {
    rows_.push_back(Row{std::move(scenario), std::move(contender), std::move(metric), s,
                        probe_ns < 0 ? probe_ns_ : probe_ns});
    const Row& r = rows_.back();
    if (!opt_.csv_only) {
      std::printf("  %-26s %-20s %-9s %12.2f %12.2f %5d %7.0f\n", r.scenario.c_str(),
                  r.contender.c_str(), r.metric.c_str(), s.median, s.p99, s.reps, r.probe_ns);
    }
    std::printf("csv,%s,%s,%s,%.3f,%.3f,%d,%.3f\n", r.scenario.c_str(), r.contender.c_str(),
                r.metric.c_str(), s.median, s.p99, s.reps, r.probe_ns);
    std::fflush(stdout);
    return r;
  }

  [[nodiscard]] const Row* find(const std::string& scenario, const std::string& contender) const {
    for (const Row& r : rows_) {
      if (r.scenario == scenario && r.contender == contender) return &r;
    }
    return nullptr;
  }

  /// Prints "<scenario>: <num>/<den> = X.XX" (medians) and a csv line with metric "ratio".
  void ratio(const std::string& scenario, const std::string& num, const std::string& den) const {
    const Row* a = find(scenario, num);
    const Row* b = find(scenario, den);
    if (a == nullptr || b == nullptr || b->stats.median <= 0) return;
    ratio_value(scenario, num + "/" + den, a->stats.median / b->stats.median,
                std::min(a->stats.reps, b->stats.reps));
  }

  /// Prints an arbitrary ratio in the same format.
  void ratio_value(const std::string& scenario, const std::string& label, double value,
                   int reps) const {
    if (!opt_.csv_only) {
      std::printf("  %s: %s = %.2f\n", scenario.c_str(), label.c_str(), value);
    }
    std::printf("csv,%s,%s,ratio,%.3f,,%d,%.3f\n", scenario.c_str(), label.c_str(), value, reps,
                probe_ns_);
    std::fflush(stdout);
  }

  [[nodiscard]] const Options& options() const noexcept { return opt_; }

 private:
  Options opt_;
  std::vector<Row> rows_;
  double probe_ns_ = 0;
};

/// Runs the contenders of one scenario: `warmup` rounds, then `reps` measured rounds, each
/// round running every contender once in order (A B A B ...). Adds one row per contender.
inline void run_scenario(Report& rep, const std::string& scenario, const std::string& metric,
                         std::vector<Contender>& contenders) {
  const Options& o = rep.options();
  auto gap = [&] {
    if (o.gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.gap_ms));
  };
  std::vector<double> probes(contenders.size(), -1.0);
  for (std::size_t k = 0; k < contenders.size(); ++k) {
    if (contenders[k].probe) {
      gap();
      probes[k] = contenders[k].probe();
    }
  }
  for (int i = 0; i < o.warmup; ++i) {
    for (Contender& c : contenders) {
      if (c.max_reps > 0 && i > 0) continue;
      gap();
      static_cast<void>(c.run());
    }
  }
  std::vector<std::vector<double>> samples(contenders.size());
  for (auto& s : samples) s.reserve(static_cast<std::size_t>(o.reps));
  for (int i = 0; i < o.reps; ++i) {
    for (std::size_t k = 0; k < contenders.size(); ++k) {
      if (contenders[k].max_reps > 0 && i >= contenders[k].max_reps) continue;
      gap();
      samples[k].push_back(contenders[k].run() / contenders[k].units);
    }
  }
  for (std::size_t k = 0; k < contenders.size(); ++k) {
    rep.add(scenario, contenders[k].name, metric, summarise(std::move(samples[k])), probes[k]);
  }
}

/// Nanoseconds on a CPU of every thread of `pids` so far: each process's CPU-time clock
/// (clock_getcpuclockid), which counts a thread running right now up to now; where that clock
/// cannot be read, the threads' /proc/<pid>/task/<tid>/schedstat (updated at ticks and switches,
/// so a thread on a CPU is behind by up to a tick).
inline double cpu_ns(const std::vector<int>& pids) {
  double sum = 0;
  for (const int pid : pids) {
    clockid_t clock{};
    timespec ts{};
    if (::clock_getcpuclockid(static_cast<pid_t>(pid), &clock) == 0 &&
        ::clock_gettime(clock, &ts) == 0) {
      sum += static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
      continue;
    }
    std::error_code ec;
    for (const auto& t :
         std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
      if (FILE* f = std::fopen((t.path() / "schedstat").c_str(), "r")) {
        unsigned long long ns = 0;
        if (std::fscanf(f, "%llu", &ns) == 1) sum += static_cast<double>(ns);
        std::fclose(f);
      }
    }
  }
  return sum;
}

/// This process and the children its threads forked (/proc/self/task/<tid>/children).
inline std::vector<int> self_and_children() {
  std::vector<int> pids{static_cast<int>(::getpid())};
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    if (FILE* f = std::fopen((t.path() / "children").c_str(), "r")) {
      int pid = 0;
      while (std::fscanf(f, "%d", &pid) == 1) pids.push_back(pid);
      std::fclose(f);
    }
  }
  return pids;
}

/// CPU time against wall time over a contender's repetitions: whether a figure is bound by the
/// cores (cores_busy near their count) or by hand-offs (cores left idle).
struct CpuMeter {
  double cpu = 0, wall = 0, units = 0;
  void add(double c, double w, double n) {
    cpu += c;
    wall += w;
    units += n;
  }
  /// Adds "cpu ns/<unit>" and "cores busy" for `contender` to scenario `scenario`_cpu.
  void report(Report& rep, const std::string& scenario, const std::string& contender) const {
    if (units <= 0 || wall <= 0) return;
    rep.ratio_value(scenario + "_cpu", contender + "_cpu_ns_per_task", cpu / units, 1);
    rep.ratio_value(scenario + "_cpu", contender + "_cores_busy", cpu / wall, 1);
  }
};

/// "1M" for 1000000, "100k" for 100000, "1234" otherwise: the size part of a scenario name.
inline std::string count_label(std::uint32_t n) {
  if (n >= 1'000'000 && n % 1'000'000 == 0) return fmt::format("{}M", n / 1'000'000);
  if (n >= 1000 && n % 1000 == 0) return fmt::format("{}k", n / 1000);
  return fmt::format("{}", n);
}

/// Ends the bench with an error (guarded_main prints it and exits 1).
[[noreturn]] inline void fail(const std::string& what) {
  throw std::runtime_error(what);
}

/// main() of a bench program: runs `run(argc, argv)` and turns an escaping exception into an
/// error line and exit code 1.
inline int guarded_main(const char* name, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& ex) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", name, ex.what());
    return 1;
  }
}

}  // namespace simpler_bench
