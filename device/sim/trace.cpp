// The swimlane trace of a run (see trace.hpp): settings and buffers, the merged trace that
// simpler_get_run_trace hands out, the run's output directory, and trace.json.

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "sim.hpp"

namespace simpler::sim {

namespace {

/// Default events per thread buffer: 16384 x 48 B = 768 KiB per AICPU thread and core.
constexpr std::uint64_t kDefaultTraceEvents = 16384;
constexpr std::uint64_t kMaxTraceEvents = std::uint64_t{1} << 24;
constexpr std::uint64_t kDefaultDagNodes = std::uint64_t{1} << 20;
constexpr std::uint64_t kMaxDagNodes = std::uint64_t{1} << 26;

/// A positive integer from the environment variable `name`, clamped to [1, max]; `fallback` when
/// it is unset or not a number.
std::uint64_t env_count(const char* name, std::uint64_t fallback, std::uint64_t max) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0' || n == 0) return fallback;
  return std::min<std::uint64_t>(n, max);
}

}  // namespace

std::string json_quoted(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string task_label(std::uint64_t id) {
  return fmt::format("{}:{}", ring_of(id), local_of(id));
}

std::string kernel_label(const Context& ctx, std::int32_t func_id) {
  if (ctx.run.callable >= 0 && func_id >= 0 && func_id < SIMPLER_MAX_FUNC_ID) {
    const Callable& c = ctx.life.callables[ctx.run.callable];
    if (static_cast<std::size_t>(func_id) < c.kernel_names.size() &&
        !c.kernel_names[static_cast<std::size_t>(func_id)].empty())
      return c.kernel_names[static_cast<std::size_t>(func_id)];
  }
  return fmt::format("func {}", func_id);
}

int diag_prepare(Context& ctx, const simpler_run_config* cfg) {
  Diag& d = ctx.diag;
  std::int32_t swimlane = 0;
  bool dep_gen = false;
  std::string prefix;
  if (cfg != nullptr && cfg->struct_size != 0) {
    swimlane = cfg->swimlane;
    dep_gen = cfg->dep_gen != 0;
    if (swimlane < 0 || swimlane > 4) {
      return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                      fmt::format("swimlane {} must be 0 (off) or 1..4 (1 tasks, 2 + "
                                  "dependencies, 3 + scheduler internals, 4 + everything)",
                                  swimlane));
    }
    const void* nul = std::memchr(cfg->output_prefix, '\0', sizeof cfg->output_prefix);
    if (nul == nullptr) {
      return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                      fmt::format("output_prefix has no terminating NUL within its {} bytes",
                                  sizeof cfg->output_prefix));
    }
    prefix = cfg->output_prefix;
  }
  if (swimlane > 0) {
    const std::uint64_t cap =
        env_count("SIMPLER_SIM_TRACE_EVENTS", kDefaultTraceEvents, kMaxTraceEvents);
    const std::size_t n = static_cast<std::size_t>(kCoreTraceBuffer) + ctx.threads.core_count;
    if (d.buffers.size() != n) d.buffers = std::vector<TraceBuffer>(n);
    for (TraceBuffer& b : d.buffers) {
      if (b.capacity == cap) continue;
      b.events.reset(new simpler_trace_event[cap]);  // not zeroed: only written events are read
      b.capacity = static_cast<std::uint32_t>(cap);
    }
  } else {
    d.buffers.clear();  // tracing off holds no memory
  }
  d.dag.max_nodes = env_count("SIMPLER_SIM_DAG_MAX_NODES", kDefaultDagNodes, kMaxDagNodes);
  d.swimlane = swimlane;
  d.dep_gen = dep_gen;
  d.find_edges = dep_gen || swimlane >= 2;
  d.output_prefix = std::move(prefix);
  return SIMPLER_OK;
}

void diag_launch(Context& ctx) noexcept {
  Diag& d = ctx.diag;
  d.run_index = ctx.counters.runs;
  for (TraceBuffer& b : d.buffers) {
    b.count = 0;
    b.dropped = 0;
  }
  d.dag.clear();
  d.pending.n = 0;
  d.merged.clear();
  d.track_names.clear();
  d.track_ptrs.clear();
  d.dropped = 0;
}

namespace {

/// The run's trace from every thread's buffer into diag.merged, sorted by begin, with its tracks.
void merge_trace(Context& ctx) {
  Diag& d = ctx.diag;
  const int nsched = ctx.run.threads - 1;
  const std::uint32_t C = ctx.config.num_clusters;
  // Buffer index -> track; buffers of schedulers this run did not use have no track.
  std::vector<std::int64_t> track_of(d.buffers.size(), -1);
  d.track_names.emplace_back("AICPU 0 (orchestrator)");
  track_of[0] = 0;
  for (int s = 0; s < nsched; ++s) {
    track_of[static_cast<std::size_t>(1 + s)] = static_cast<std::int64_t>(d.track_names.size());
    d.track_names.push_back(fmt::format("AICPU {}", 1 + s));
  }
  for (std::uint32_t i = 0; i < ctx.threads.core_count; ++i) {
    track_of[kCoreTraceBuffer + i] = static_cast<std::int64_t>(d.track_names.size());
    d.track_names.push_back(i < C ? fmt::format("AICore AIC {}", i)
                                  : fmt::format("AICore AIV {}", i - C));
  }
  std::size_t total = 0;
  for (const TraceBuffer& b : d.buffers) total += b.count;
  d.merged.reserve(total);
  for (std::size_t k = 0; k < d.buffers.size(); ++k) {
    const TraceBuffer& b = d.buffers[k];
    d.dropped += b.dropped;
    if (track_of[k] < 0) continue;
    for (std::uint32_t i = 0; i < b.count; ++i) {
      simpler_trace_event e = b.events[i];
      e.track = static_cast<std::uint32_t>(track_of[k]);
      d.merged.push_back(e);
    }
  }
  std::stable_sort(d.merged.begin(), d.merged.end(),
                   [](const simpler_trace_event& a, const simpler_trace_event& b) {
                     return a.begin_ns < b.begin_ns;
                   });
  d.track_ptrs.reserve(d.track_names.size());
  for (const std::string& n : d.track_names) d.track_ptrs.push_back(n.c_str());
}

/// Microseconds with three decimals (Chrome trace-event JSON timestamps) from nanoseconds.
std::string us(std::uint64_t ns) {
  return fmt::format("{}.{:03}", ns / 1000, ns % 1000);
}

const char* event_name(const simpler_trace_event& e) noexcept {
  switch (e.kind) {
    case SIMPLER_TRACE_DISPATCH:
      return "dispatch";
    case SIMPLER_TRACE_COMPLETE:
      return "complete";
    case SIMPLER_TRACE_SUBMIT:
      return "submit";
    case SIMPLER_TRACE_SCHEDULER:
      return e.func_id == kSchedIdleWait ? "idle wait" : "queue pop";
    default:
      return "event";
  }
}

const char* event_category(std::uint32_t kind) noexcept {
  switch (kind) {
    case SIMPLER_TRACE_KERNEL:
      return "kernel";
    case SIMPLER_TRACE_SUBMIT:
      return "orchestrator";
    default:
      return "scheduler";
  }
}

int write_trace_json(Context& ctx, const std::string& path) {
  const Diag& d = ctx.diag;
  std::FILE* f = std::fopen(path.c_str(), "w");
  const auto failed = [&] {
    return ctx.fail(SIMPLER_ERR_SYSTEM, fmt::format("cannot write the run's trace to {}: {}", path,
                                                    std::strerror(errno)));
  };
  if (f == nullptr) return failed();
  const int pid = ctx.config.device_id + 1;  // pid 0 is avoided: some viewers treat it as idle
  fmt::print(f,
             "{{\"displayTimeUnit\":\"ns\",\"otherData\":{{\"device_id\":{},\"run\":{},"
             "\"swimlane\":{},\"dropped\":{}}},\n\"traceEvents\":[\n",
             ctx.config.device_id, d.run_index, d.swimlane, d.dropped);
  fmt::print(f, "{{\"ph\":\"M\",\"pid\":{},\"name\":\"process_name\",\"args\":{{\"name\":{}}}}}",
             pid, json_quoted(fmt::format("chip {}", ctx.config.device_id)));
  for (std::size_t t = 0; t < d.track_names.size(); ++t) {
    fmt::print(f,
               ",\n{{\"ph\":\"M\",\"pid\":{0},\"tid\":{1},\"name\":\"thread_name\",\"args\":{{"
               "\"name\":{2}}}}},\n{{\"ph\":\"M\",\"pid\":{0},\"tid\":{1},\"name\":"
               "\"thread_sort_index\",\"args\":{{\"sort_index\":{1}}}}}",
               pid, t + 1, json_quoted(d.track_names[t]));
  }
  // The first kernel slice of each task: dependency arrows start and end on them.
  std::unordered_map<std::int64_t, const simpler_trace_event*> kernel_of;
  for (const simpler_trace_event& e : d.merged) {
    if (e.kind == SIMPLER_TRACE_KERNEL) kernel_of.emplace(e.task_id, &e);
  }
  std::uint64_t flow_id = 0;
  for (const simpler_trace_event& e : d.merged) {
    const auto task = static_cast<std::uint64_t>(e.task_id);
    if (e.kind == SIMPLER_TRACE_DEPENDENCY) {
      const auto from = kernel_of.find(e.flow_from);
      const auto to = kernel_of.find(e.task_id);
      if (from == kernel_of.end() || to == kernel_of.end()) continue;  // a slice was dropped
      const simpler_trace_event& p = *from->second;
      const simpler_trace_event& c = *to->second;
      ++flow_id;
      fmt::print(f,
                 ",\n{{\"ph\":\"s\",\"pid\":{},\"tid\":{},\"ts\":{},\"id\":{},\"name\":"
                 "\"dependency\",\"cat\":\"dependency\",\"args\":{{\"from\":\"{}\",\"to\":\"{}\","
                 "\"order_only\":{}}}}}"
                 ",\n{{\"ph\":\"f\",\"bp\":\"e\",\"pid\":{},\"tid\":{},\"ts\":{},\"id\":{},"
                 "\"name\":\"dependency\",\"cat\":\"dependency\"}}",
                 pid, p.track + 1, us(p.begin_ns + (p.end_ns - p.begin_ns) / 2), flow_id,
                 task_label(static_cast<std::uint64_t>(e.flow_from)), task_label(task),
                 e.block_idx != 0 ? "true" : "false", pid, c.track + 1, us(c.begin_ns), flow_id);
      continue;
    }
    const std::string name =
        e.kind == SIMPLER_TRACE_KERNEL ? kernel_label(ctx, e.func_id) : event_name(e);
    std::string args;
    if (e.task_id >= 0)
      args = fmt::format("\"task\":\"{}\",\"task_id\":{}", task_label(task), task);
    if (e.kind == SIMPLER_TRACE_KERNEL || e.kind == SIMPLER_TRACE_DISPATCH) {
      args += fmt::format(",\"func_id\":{},\"block_idx\":{}", e.func_id, e.block_idx);
    }
    fmt::print(f,
               ",\n{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},\"name\":{},\"cat\":"
               "\"{}\",\"args\":{{{}}}}}",
               pid, e.track + 1, us(e.begin_ns), us(e.end_ns - e.begin_ns), json_quoted(name),
               event_category(e.kind), args);
  }
  fmt::print(f, "\n]}}\n");
  const bool good = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !good) return failed();
  return SIMPLER_OK;
}

}  // namespace

std::string diag_run_dir(Context& ctx) {
  const std::string dir = fmt::format("{}/chip{}/run{}", ctx.diag.output_prefix,
                                      ctx.config.device_id, ctx.diag.run_index);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    ctx.fail(SIMPLER_ERR_SYSTEM,
             fmt::format("cannot create the run's output directory {}: {} (is output_prefix a "
                         "writable directory?)",
                         dir, ec.message()));
    return {};
  }
  return dir;
}

int diag_finish(Context& ctx, int run_status) {
  Diag& d = ctx.diag;
  if (d.swimlane == 0 && !d.dep_gen) return run_status;
  // A thread stuck in user code may still write its buffer: a broken context reports no trace.
  if (ctx.outcome.broken.load()) return run_status;
  if (d.swimlane > 0) merge_trace(ctx);
  if (d.output_prefix.empty()) return run_status;
  // A failed run keeps its own status and message; a failed write fails a run that succeeded.
  const std::string run_error = ctx.life.last_error;
  int rc = SIMPLER_OK;
  const std::string dir = diag_run_dir(ctx);
  if (dir.empty()) {
    rc = SIMPLER_ERR_SYSTEM;
  } else {
    if (d.swimlane > 0) rc = write_trace_json(ctx, dir + "/trace.json");
    if (rc == SIMPLER_OK && d.dep_gen) rc = write_dag_files(ctx, dir);
  }
  if (run_status == SIMPLER_OK) return rc;
  if (rc != SIMPLER_OK) ctx.life.last_error = run_error + " (and " + ctx.life.last_error + ")";
  return run_status;
}

int diag_get_trace(const Context& ctx, simpler_trace_info* out) {
  if (out == nullptr || out->struct_size < sizeof(simpler_trace_info))
    return SIMPLER_ERR_INVALID_ARGUMENT;
  const Diag& d = ctx.diag;
  simpler_trace_info t{};
  t.struct_size = sizeof t;
  if (ctx.life.phase == Phase::Idle) {  // during a run the last run's trace is gone
    t.track_count = static_cast<std::uint32_t>(d.track_ptrs.size());
    t.track_names = d.track_ptrs.empty() ? nullptr : d.track_ptrs.data();
    t.event_count = d.merged.size();
    t.events = d.merged.empty() ? nullptr : d.merged.data();
    t.dropped = d.dropped;
  }
  *out = t;
  return SIMPLER_OK;
}

}  // namespace simpler::sim
