// Counters of a run (run config pmu = 1): per kernel (func_id) and per core, invocations, wall
// time (CLOCK_MONOTONIC), CPU time of the core thread (CLOCK_THREAD_CPUTIME_ID) and, where the
// kernel allows perf_event_open, user-space cycles and instructions of the core thread. Written
// as pmu.json and pmu.csv in the run's directory.
//
// Whether hardware counters work is probed once per context on the host thread; when they do
// not (EACCES/EPERM under perf_event_paranoid, ENOENT or EOPNOTSUPP in a VM without a PMU, ...)
// the reason is printed once per context and written to pmu.json, and wall and CPU time are
// still recorded. SIMPLER_SIM_PMU_FAIL=<errno number or name> makes the probe fail with that
// errno (a test seam). Each core thread opens its own counters at its first measured kernel.

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "run_files.hpp"

namespace simpler::sim {

namespace {

std::uint64_t clock_ns(clockid_t id) noexcept {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

/// A user-space hardware counter of the calling thread, in `group` (-1: a new group leader).
int open_counter(std::uint64_t config, int group) noexcept {
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_HARDWARE;
  a.config = config;
  a.exclude_kernel = 1;  // allowed up to perf_event_paranoid 2
  a.exclude_hv = 1;
  a.read_format = PERF_FORMAT_GROUP;
  return static_cast<int>(::syscall(SYS_perf_event_open, &a, 0, -1, group,
                                    static_cast<unsigned long>(PERF_FLAG_FD_CLOEXEC)));
}

/// The errno SIMPLER_SIM_PMU_FAIL asks the probe to fail with (a number or a name), or 0.
int injected_errno() noexcept {
  const char* v = std::getenv("SIMPLER_SIM_PMU_FAIL");
  if (v == nullptr || v[0] == '\0') return 0;
  struct Named {
    const char* name;
    int value;
  };
  static constexpr Named kNames[] = {{"EACCES", EACCES},
                                     {"EPERM", EPERM},
                                     {"ENOENT", ENOENT},
                                     {"EOPNOTSUPP", EOPNOTSUPP},
                                     {"ENODEV", ENODEV}};
  for (const auto& n : kNames) {
    if (std::strcmp(v, n.name) == 0) return n.value;
  }
  const int e = std::atoi(v);
  return e > 0 ? e : EPERM;
}

std::string paranoid_level() {
  std::FILE* f = std::fopen("/proc/sys/kernel/perf_event_paranoid", "r");
  if (f == nullptr) return "unreadable";
  int v = 0;
  const bool ok = std::fscanf(f, "%d", &v) == 1;
  std::fclose(f);
  return ok ? std::to_string(v) : "unreadable";
}

/// Opens cycles (leader) and instructions for the calling thread; "" or why not.
std::string open_pair(int& fd_cycles, int& fd_instructions) {
  fd_cycles = open_counter(PERF_COUNT_HW_CPU_CYCLES, -1);
  if (fd_cycles < 0) return fmt::format("perf_event_open(cycles): {}", std::strerror(errno));
  fd_instructions = open_counter(PERF_COUNT_HW_INSTRUCTIONS, fd_cycles);
  if (fd_instructions < 0) {
    const int e = errno;
    ::close(fd_cycles);
    fd_cycles = -1;
    return fmt::format("perf_event_open(instructions): {}", std::strerror(e));
  }
  return {};
}

/// Reads the group {cycles, instructions}; false on failure.
bool read_pair(int fd, std::uint64_t& cycles, std::uint64_t& instructions) noexcept {
  std::uint64_t buf[3] = {};
  if (::read(fd, buf, sizeof buf) != static_cast<ssize_t>(sizeof buf) || buf[0] != 2) return false;
  cycles = buf[1];
  instructions = buf[2];
  return true;
}

const char* core_type_name(const Core& c) noexcept {
  return c.global.core_type == 0 ? "AIC" : "AIV";
}

}  // namespace

RunFiles::~RunFiles() {
  for (auto& c : cores) {
    if (c.fd_instructions >= 0) ::close(c.fd_instructions);
    if (c.fd_cycles >= 0) ::close(c.fd_cycles);
  }
}

void pmu_prepare(Context& ctx) {
  RunFiles& d = *ctx.run_files;
  if (!d.probed) {
    d.probed = true;
    int fc = -1, fi = -1;
    if (const int e = injected_errno(); e != 0) {
      d.hw_reason = fmt::format("perf_event_open(cycles): {} (injected by SIMPLER_SIM_PMU_FAIL)",
                                std::strerror(e));
    } else {
      d.hw_reason = open_pair(fc, fi);
    }
    if (fi >= 0) ::close(fi);
    if (fc >= 0) ::close(fc);
    d.hardware = d.hw_reason.empty();
    if (!d.hardware) {
      d.hw_reason += fmt::format("; /proc/sys/kernel/perf_event_paranoid is {}", paranoid_level());
      std::fprintf(stderr,
                   "simpler chip %d: hardware counters unavailable: %s; wall and CPU time are "
                   "still recorded\n",
                   ctx.config.device_id, d.hw_reason.c_str());
    }
  }
  std::size_t funcs = 0;
  const Callable& c = ctx.life.callables[ctx.run.callable];
  for (std::size_t f = 0; f < c.kernels.size(); ++f) {
    if (c.kernels[f] != nullptr) funcs = f + 1;
  }
  if (d.cores.size() != ctx.threads.core_count)
    d.cores = std::vector<PmuCore>(ctx.threads.core_count);
  for (auto& core : d.cores) core.cells.assign(funcs, PmuCell{});
}

void Context::pmu_start(int core, PmuSample& s) noexcept {
  RunFiles& d = *run_files;
  PmuCore& pc = d.cores[static_cast<std::size_t>(core)];
  s.hw = false;
  if (d.hardware && !pc.tried) {
    pc.tried = true;
    try {
      pc.error = open_pair(pc.fd_cycles, pc.fd_instructions);
    } catch (...) {
      pc.error = "out of memory";
    }
  }
  s.wall_ns = clock_ns(CLOCK_MONOTONIC);
  s.cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  if (pc.fd_cycles >= 0) s.hw = read_pair(pc.fd_cycles, s.cycles, s.instructions);
}

void Context::pmu_stop(int core, std::int32_t func_id, const PmuSample& s) noexcept {
  RunFiles& d = *run_files;
  PmuCore& pc = d.cores[static_cast<std::size_t>(core)];
  std::uint64_t cycles = 0, instructions = 0;
  const bool hw = s.hw && read_pair(pc.fd_cycles, cycles, instructions);
  const std::uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  const std::uint64_t wall = clock_ns(CLOCK_MONOTONIC);
  if (func_id < 0 || static_cast<std::size_t>(func_id) >= pc.cells.size()) return;
  PmuCell& cell = pc.cells[static_cast<std::size_t>(func_id)];
  ++cell.invocations;
  cell.wall_ns += wall - s.wall_ns;
  cell.cpu_ns += cpu - s.cpu_ns;
  if (hw) {
    cell.cycles += cycles - s.cycles;
    cell.instructions += instructions - s.instructions;
  }
}

std::string pmu_write(Context& ctx) {
  const RunFiles& d = *ctx.run_files;
  const Callable& c = ctx.life.callables[ctx.run.callable];
  const std::size_t funcs = d.cores.empty() ? 0 : d.cores[0].cells.size();
  auto hw_of = [&](const PmuCore& pc) { return d.hardware && pc.fd_cycles >= 0; };
  auto fields = [&](std::int32_t f, const PmuCell& cell, bool hw) {
    const std::string& name = c.kernel_names[static_cast<std::size_t>(f)];
    return fmt::format(
        "\"func_id\": {}, \"kernel\": {}, \"invocations\": {}, \"wall_ns\": {}, \"cpu_ns\": {}, "
        "\"cycles\": {}, \"instructions\": {}",
        f, name.empty() ? std::string("null") : json_string(name), cell.invocations, cell.wall_ns,
        cell.cpu_ns, hw ? std::to_string(cell.cycles) : "null",
        hw ? std::to_string(cell.instructions) : "null");
  };
  // Per kernel: the sums over cores (hardware fields only when every core that ran it had them).
  std::string kernels;
  for (std::size_t f = 0; f < funcs; ++f) {
    PmuCell sum;
    bool hw = d.hardware;
    for (const auto& pc : d.cores) {
      const PmuCell& cell = pc.cells[f];
      if (cell.invocations == 0) continue;
      sum.invocations += cell.invocations;
      sum.wall_ns += cell.wall_ns;
      sum.cpu_ns += cell.cpu_ns;
      sum.cycles += cell.cycles;
      sum.instructions += cell.instructions;
      hw = hw && hw_of(pc);
    }
    if (sum.invocations == 0) continue;
    kernels += fmt::format("{}\n    {{{}}}", kernels.empty() ? "" : ",",
                           fields(static_cast<std::int32_t>(f), sum, hw));
  }
  std::string cores, csv =
                         "core,type,cluster,func_id,kernel,invocations,wall_ns,cpu_ns,cycles,"
                         "instructions\n";
  for (std::size_t i = 0; i < d.cores.size(); ++i) {
    const PmuCore& pc = d.cores[i];
    const Core& core = ctx.threads.cores[i];
    std::string rows;
    for (std::size_t f = 0; f < funcs; ++f) {
      const PmuCell& cell = pc.cells[f];
      if (cell.invocations == 0) continue;
      rows += fmt::format("{}{{{}}}", rows.empty() ? "" : ", ",
                          fields(static_cast<std::int32_t>(f), cell, hw_of(pc)));
      csv +=
          fmt::format("{},{},{},{},{},{},{},{},{},{}\n", core.global.core_id, core_type_name(core),
                      core.global.cluster_id, f, c.kernel_names[f], cell.invocations, cell.wall_ns,
                      cell.cpu_ns, hw_of(pc) ? std::to_string(cell.cycles) : "",
                      hw_of(pc) ? std::to_string(cell.instructions) : "");
    }
    cores += fmt::format(
        "{}\n    {{\"core\": {}, \"type\": \"{}\", \"cluster\": {}, \"hardware_error\": {}, "
        "\"kernels\": [{}]}}",
        i == 0 ? "" : ",", core.global.core_id, core_type_name(core), core.global.cluster_id,
        pc.error.empty() ? std::string("null") : json_string(pc.error), rows);
  }
  const std::string json = fmt::format(
      "{{\n  \"device_id\": {},\n  \"run\": {},\n  \"pmu\": {},\n  \"hardware_counters\": {},\n"
      "  \"unavailable_reason\": {},\n  \"kernels\": [{}\n  ],\n  \"cores\": [{}\n  ]\n}}\n",
      ctx.config.device_id, d.run_index, ctx.run.pmu, d.hardware ? "true" : "false",
      d.hardware ? std::string("null") : json_string(d.hw_reason), kernels, cores);
  std::string err = write_text_file(d.run_dir + "/pmu.json", json);
  const std::string e2 = write_text_file(d.run_dir + "/pmu.csv", csv);
  return err.empty() ? e2 : err;
}

}  // namespace simpler::sim
