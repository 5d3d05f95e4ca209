// Trace and dependency-graph output: serialization across processes, Chrome trace-event JSON,
// Graphviz DOT, files. Off the hot path. Included once, at the end of its header; every function
// is inline (the library is header-only).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <map>
#include <string_view>
#include <tuple>

#include "simpler/detail/trace.hpp"

namespace simpler::detail {

namespace trace_wire {
inline void put_u32(std::vector<std::byte>& out, std::uint32_t v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}
inline void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}
inline void put_str(std::vector<std::byte>& out, const std::string& s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  out.insert(out.end(), p, p + s.size());
}
struct Reader {
  const std::byte* p;
  std::size_t n;
  bool ok = true;
  bool take(void* dst, std::size_t k) {
    if (!ok || k > n) return ok = false;
    if (k != 0) std::memcpy(dst, p, k);
    p += k;
    n -= k;
    return true;
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    take(&v, sizeof v);
    return v;
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    take(&v, sizeof v);
    return v;
  }
  std::string str() {
    const std::uint32_t k = u32();
    if (!ok || k > n) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p), k);
    p += k;
    n -= k;
    return s;
  }
};
inline constexpr std::uint32_t kMagic = 0x53545231;  // "STR1"
}  // namespace trace_wire

inline void serialize_trace(const std::vector<TraceProcess>& in, std::vector<std::byte>& out) {
  using namespace trace_wire;
  put_u32(out, kMagic);
  put_u32(out, static_cast<std::uint32_t>(in.size()));
  for (const TraceProcess& p : in) {
    put_str(out, p.name);
    put_u32(out, p.run);
    put_u32(out, static_cast<std::uint32_t>(p.level));
    put_u64(out, p.dropped);
    put_u32(out, static_cast<std::uint32_t>(p.tracks.size()));
    for (const auto& t : p.tracks) put_str(out, t);
    put_u32(out, static_cast<std::uint32_t>(p.callables.size()));
    for (const auto& c : p.callables) put_str(out, c);
    put_u32(out, static_cast<std::uint32_t>(p.events.size()));
    const auto* e = reinterpret_cast<const std::byte*>(p.events.data());
    out.insert(out.end(), e, e + p.events.size() * sizeof(TraceEvent));
  }
}

inline bool deserialize_trace(const std::byte* in, std::size_t n, std::vector<TraceProcess>& out) {
  using namespace trace_wire;
  Reader r{in, n};
  if (r.u32() != kMagic || !r.ok) return false;
  const std::uint32_t count = r.u32();
  std::vector<TraceProcess> got;
  for (std::uint32_t i = 0; i < count && r.ok; ++i) {
    TraceProcess p;
    p.name = r.str();
    p.run = r.u32();
    p.level = static_cast<std::int32_t>(r.u32());
    p.dropped = r.u64();
    const std::uint32_t tracks = r.u32();
    for (std::uint32_t k = 0; k < tracks && r.ok; ++k) p.tracks.push_back(r.str());
    const std::uint32_t calls = r.u32();
    for (std::uint32_t k = 0; k < calls && r.ok; ++k) p.callables.push_back(r.str());
    const std::uint32_t events = r.u32();
    if (!r.ok || events > r.n / sizeof(TraceEvent)) return false;
    p.events.resize(events);
    r.take(p.events.data(), events * sizeof(TraceEvent));
    got.push_back(std::move(p));
  }
  if (!r.ok) return false;
  for (auto& p : got) out.push_back(std::move(p));
  return true;
}

inline bool shift_trace_records(std::vector<std::byte>& blob, std::int64_t delta_ns) {
  std::vector<TraceProcess> procs;
  if (!deserialize_trace(blob.data(), blob.size(), procs)) return false;
  for (TraceProcess& p : procs) {
    for (TraceEvent& e : p.events) {
      switch (e.kind) {
        case TraceKind::Edge:    // t1 = bytes
        case TraceKind::Tensor:  // t0 = address, t1 = bytes
          break;
        case TraceKind::Run:
        case TraceKind::Pass:
        case TraceKind::Chip:
          e.t0 += delta_ns;
          e.t1 += delta_ns;
          break;
        default:  // instants: t0
          e.t0 += delta_ns;
          break;
      }
    }
  }
  std::vector<std::byte> out;
  out.reserve(blob.size());
  serialize_trace(procs, out);
  blob.swap(out);
  return true;
}

namespace trace_json {
/// Appends `s` as a JSON string body (no quotes): runs of plain characters in one append.
inline void escape_body(std::string& out, std::string_view s) {
  std::size_t plain = 0;  // start of the run not yet appended
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
    }
  }
  out.append(s.data() + plain, s.size() - plain);
}
inline void escape(std::string& out, std::string_view s) {
  out += '"';
  escape_body(out, s);
  out += '"';
}
/// Microseconds with nanosecond precision, as Chrome's "ts" and "dur" want them (a format
/// argument: fmt::formatter<trace_json::Us> below).
struct Us {
  std::int64_t ns;
};
inline const char* outcome_name(std::uint8_t o) {
  switch (static_cast<Outcome>(o)) {
    case Outcome::Success:
      return "ok";
    case Outcome::TaskFailure:
      return "failed";
    case Outcome::EndpointFailure:
      return "endpoint failure";
    case Outcome::Skipped:
      return "skipped";
  }
  return "unknown";
}
/// Per-task state of one process's records, indexed by task id: a dense array when the ids are
/// (they are 1..n per run), sorted ids otherwise (records from a child are not trusted to be).
template <class T>
class TaskTable {
 public:
  explicit TaskTable(const std::vector<TraceEvent>& events) {
    std::uint64_t top = 0;
    for (const TraceEvent& e : events) {
      top = std::max<std::uint64_t>(top, std::max(e.task, e.kind == TraceKind::Edge ? e.arg : 0));
    }
    if (top < 2 * events.size() + 64) {
      dense_ = true;
      rows_.resize(top + 1);
      return;
    }
    for (const TraceEvent& e : events) ids_.push_back(e.task);
    std::sort(ids_.begin(), ids_.end());
    ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
    rows_.resize(ids_.size());
  }
  /// The row of a task some event names as its task (every such id has one).
  T& at(std::uint32_t task) {
    if (dense_) return rows_[task];
    return rows_[static_cast<std::size_t>(std::lower_bound(ids_.begin(), ids_.end(), task) -
                                          ids_.begin())];
  }
  /// The task's row, or null for an id no event names as its task.
  T* find(std::uint32_t task) {
    if (dense_) return task < rows_.size() ? &rows_[task] : nullptr;
    const auto it = std::lower_bound(ids_.begin(), ids_.end(), task);
    return it != ids_.end() && *it == task ? &rows_[static_cast<std::size_t>(it - ids_.begin())]
                                           : nullptr;
  }

 private:
  bool dense_ = false;
  std::vector<std::uint32_t> ids_;
  std::vector<T> rows_;
};
}  // namespace trace_json

}  // namespace simpler::detail

template <>
struct fmt::formatter<simpler::detail::trace_json::Us> {
  constexpr auto parse(fmt::format_parse_context& ctx) { return ctx.begin(); }
  template <class Ctx>
  auto format(simpler::detail::trace_json::Us v, Ctx& ctx) const {
    const bool neg = v.ns < 0;
    const std::uint64_t a = neg ? std::uint64_t{0} - static_cast<std::uint64_t>(v.ns)
                                : static_cast<std::uint64_t>(v.ns);
    return fmt::format_to(ctx.out(), FMT_COMPILE("{}{}.{:03}"), neg ? "-" : "", a / 1000, a % 1000);
  }
};

namespace simpler::detail {

inline std::string render_chrome_trace(const std::vector<TraceProcess>& processes) {
  using trace_json::escape;
  using trace_json::escape_body;
  using Us = trace_json::Us;
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  {
    std::size_t events = 0;
    for (const TraceProcess& p : processes) events += p.events.size();
    out.reserve(events * 160 + 4096);  // ~150 bytes per rendered event
  }
  const auto to = std::back_inserter(out);
  bool first = true;
  const auto begin_event = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  // One pid per process name (a nested Worker's runs share its track); tids per track name.
  std::map<std::string, int> pids;
  std::map<std::pair<int, std::string>, int> tids;
  std::map<int, int> next_tid;
  const auto pid_of = [&](const std::string& name) {
    auto [it, fresh] = pids.emplace(name, static_cast<int>(pids.size()) + 1);
    if (fresh) {
      begin_event();
      fmt::format_to(
          to, FMT_COMPILE(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":)"),
          it->second);
      escape(out, name);
      out += "}}";
      begin_event();
      fmt::format_to(
          to,
          FMT_COMPILE(
              R"({{"ph":"M","name":"process_sort_index","pid":{},"tid":0,"args":{{"sort_index":{}}}}})"),
          it->second, it->second);
    }
    return it->second;
  };
  const auto tid_of = [&](int pid, const std::string& name) {
    auto [it, fresh] = tids.emplace(std::make_pair(pid, name), 0);
    if (fresh) {
      it->second = ++next_tid[pid];
      begin_event();
      fmt::format_to(
          to, FMT_COMPILE(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":)"),
          pid, it->second);
      escape(out, name);
      out += "}}";
      begin_event();
      fmt::format_to(
          to,
          FMT_COMPILE(
              R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})"),
          pid, it->second, it->second);
    }
    return it->second;
  };

  std::uint64_t dropped = 0;
  std::uint64_t flow_id = 0;
  for (const TraceProcess& p : processes) {
    dropped += p.dropped;
    const int pid = pid_of(p.name);
    std::vector<int> tid(p.tracks.size());
    for (std::size_t t = 0; t < p.tracks.size(); ++t) tid[t] = tid_of(pid, p.tracks[t]);
    const auto track_tid = [&](std::uint16_t t) {
      return t < tid.size() ? tid[t] : tid_of(pid, fmt::format("track {}", t));
    };
    // Per task: its callable, where its slice is (for flows), its tensors (level 4).
    static constexpr std::uint32_t kNoCallable = ~std::uint32_t{0};
    struct TaskInfo {
      std::uint32_t callable = kNoCallable;  ///< the Submit's callable index
      bool submitted = false;
      int tid = 0;
      std::int64_t t0 = 0;
      std::int64_t t1 = -1;  // -1: no slice
      std::string tensors;
    };
    trace_json::TaskTable<TaskInfo> tasks(p.events);
    for (const TraceEvent& e : p.events) {
      if (e.kind == TraceKind::Submit) {
        TaskInfo& info = tasks.at(e.task);
        info.submitted = true;
        info.callable = e.arg;
      }
    }
    // The task's name as a JSON string body: its callable, else "task <id>" (also for a
    // callable index the records do not name, or an empty name: as before).
    const auto name_body = [&](std::uint32_t task) {
      const TaskInfo* info = tasks.find(task);
      if (info != nullptr && info->submitted) {
        if (info->callable < p.callables.size()) {
          if (!p.callables[info->callable].empty()) {
            escape_body(out, p.callables[info->callable]);
            return;
          }
        } else {
          fmt::format_to(to, FMT_COMPILE("callable {}"), info->callable);
          return;
        }
      }
      fmt::format_to(to, FMT_COMPILE("task {}"), task);
    };
    bool any_tensor = false;
    for (const TraceEvent& e : p.events) {
      if (e.kind != TraceKind::Tensor) continue;
      any_tensor = true;
      std::string& s = tasks.at(e.task).tensors;
      fmt::format_to(std::back_inserter(s), FMT_COMPILE("{}{} {:#x} {} B"), s.empty() ? "" : ", ",
                     to_string(static_cast<TensorArgType>(e.arg)), e.t0, e.t1);
    }
    // A chip's kernel slices by chip task (for its flows).
    std::map<std::uint32_t, TaskInfo> kernels;
    for (const TraceEvent& e : p.events) {
      const int t = track_tid(e.track);
      switch (e.kind) {
        case TraceKind::Chip: {
          static constexpr const char* kChipKinds[] = {
              "event", "kernel", "dispatch", "complete", "submit", "dependency", "scheduler"};
          const char* what = e.outcome < 7 ? kChipKinds[e.outcome] : "event";
          if (e.outcome == 5) break;  // dependencies: flows, below
          const std::string name =
              e.arg2 != 0 ? fmt::format("{} func {}", what, e.arg2 - 1) : std::string(what);
          begin_event();
          if (e.outcome == 1) {  // a kernel: a slice on its core
            TaskInfo& k = kernels[e.task];
            if (k.t1 < 0) {
              k.tid = t;
              k.t0 = e.t0;
              k.t1 = e.t1;
            }
            fmt::format_to(
                to,
                FMT_COMPILE(
                    R"({{"ph":"X","cat":"kernel","name":"{}","pid":{},"tid":{},"ts":{},"dur":{},"args":{{"task":{}}}}})"),
                name, pid, t, Us{e.t0}, Us{e.t1 - e.t0}, static_cast<std::int64_t>(e.task) - 1);
          } else if (e.t1 > e.t0) {
            fmt::format_to(
                to,
                FMT_COMPILE(
                    R"({{"ph":"X","cat":"chip","name":"{}","pid":{},"tid":{},"ts":{},"dur":{},"args":{{"task":{}}}}})"),
                name, pid, t, Us{e.t0}, Us{e.t1 - e.t0}, static_cast<std::int64_t>(e.task) - 1);
          } else {
            fmt::format_to(
                to,
                FMT_COMPILE(
                    R"({{"ph":"i","s":"t","cat":"chip","name":"{}","pid":{},"tid":{},"ts":{},"args":{{"task":{}}}}})"),
                name, pid, t, Us{e.t0}, static_cast<std::int64_t>(e.task) - 1);
          }
          break;
        }
        case TraceKind::Submit:
          begin_event();
          out += R"({"ph":"i","s":"t","cat":"submit","name":"submit )";
          name_body(e.task);
          fmt::format_to(
              to, FMT_COMPILE(R"(","pid":{},"tid":{},"ts":{},"args":{{"task":{},"run":{}}}}})"),
              pid, t, Us{e.t0}, e.task, p.run);
          break;
        case TraceKind::Ready:
        case TraceKind::Dispatch: {
          const char* what = e.kind == TraceKind::Ready ? "ready" : "dispatch";
          begin_event();
          fmt::format_to(to, FMT_COMPILE(R"({{"ph":"i","s":"t","cat":"{}","name":"{} )"), what,
                         what);
          name_body(e.task);
          fmt::format_to(to,
                         FMT_COMPILE(R"(","pid":{},"tid":{},"ts":{},"args":{{"task":{},"run":{})"),
                         pid, t, Us{e.t0}, e.task, p.run);
          if (e.kind == TraceKind::Dispatch) {
            out += ",\"to\":";
            escape(out, e.arg < p.tracks.size() ? std::string_view(p.tracks[e.arg]) : "?");
          }
          out += "}}";
          break;
        }
        case TraceKind::Run:
        case TraceKind::Skip: {
          const std::int64_t end = e.kind == TraceKind::Run ? e.t1 : e.t0;
          TaskInfo& info = tasks.at(e.task);
          if (info.t1 < 0) {
            info.tid = t;
            info.t0 = e.t0;
            info.t1 = end;
          }
          begin_event();
          out += R"({"ph":"X","cat":"task","name":")";
          name_body(e.task);
          fmt::format_to(
              to,
              FMT_COMPILE(
                  R"(","pid":{},"tid":{},"ts":{},"dur":{},"args":{{"task":{},"run":{},"outcome":"{}")"),
              pid, t, Us{e.t0}, Us{end - e.t0}, e.task, p.run, trace_json::outcome_name(e.outcome));
          if (e.kind == TraceKind::Run && e.arg != 0)
            fmt::format_to(to, FMT_COMPILE(",\"member\":{}"), e.arg);
          if (any_tensor && !info.tensors.empty()) {
            out += ",\"tensors\":";
            escape(out, info.tensors);
          }
          out += "}}";
          break;
        }
        case TraceKind::Pass:
          begin_event();
          fmt::format_to(
              to,
              FMT_COMPILE(
                  R"({{"ph":"X","cat":"scheduler","name":"dispatch pass","pid":{},"tid":{},"ts":{},"dur":{},"args":{{"routed":{},"queued":{}}}}})"),
              pid, t, Us{e.t0}, Us{e.t1 - e.t0}, e.arg, e.arg2);
          begin_event();
          fmt::format_to(
              to,
              FMT_COMPILE(
                  R"({{"ph":"C","cat":"scheduler","name":"ready queue","pid":{},"tid":{},"ts":{},"args":{{"queued":{}}}}})"),
              pid, t, Us{e.t1}, e.arg2);
          break;
        case TraceKind::Edge:
        case TraceKind::Tensor:
          break;
      }
    }
    // A chip's dependency flows, between its tasks' first kernel slices.
    for (const TraceEvent& e : p.events) {
      if (e.kind != TraceKind::Chip || e.outcome != 5 || e.arg == 0) continue;
      auto from = kernels.find(e.arg);
      auto to_k = kernels.find(e.task);
      if (from == kernels.end() || to_k == kernels.end()) continue;
      const TaskInfo& a = from->second;
      const TaskInfo& b = to_k->second;
      ++flow_id;
      begin_event();
      fmt::format_to(
          to,
          FMT_COMPILE(
              R"({{"ph":"s","cat":"chip_dep","name":"dep","id":{},"pid":{},"tid":{},"ts":{}}})"),
          flow_id, pid, a.tid, Us{a.t1 > a.t0 ? a.t1 - 1 : a.t0});
      begin_event();
      fmt::format_to(
          to,
          FMT_COMPILE(
              R"({{"ph":"f","bp":"e","cat":"chip_dep","name":"dep","id":{},"pid":{},"tid":{},"ts":{}}})"),
          flow_id, pid, b.tid, Us{b.t0});
    }
    // Dependency flows: from inside the producer's slice to the start of the consumer's.
    for (const TraceEvent& e : p.events) {
      if (e.kind != TraceKind::Edge) continue;
      const TaskInfo* a = tasks.find(e.arg);
      const TaskInfo* b = tasks.find(e.task);
      if (a == nullptr || b == nullptr || a->t1 < 0 || b->t1 < 0) continue;
      const std::int64_t at = a->t1 > a->t0 ? a->t1 - 1 : a->t0;
      ++flow_id;
      begin_event();
      fmt::format_to(
          to,
          FMT_COMPILE(
              R"({{"ph":"s","cat":"dep","name":"dep","id":{},"pid":{},"tid":{},"ts":{},"args":{{"from":{},"to":{},"run":{},"bytes":{}}}}})"),
          flow_id, pid, a->tid, Us{at}, e.arg, e.task, p.run, e.t1);
      begin_event();
      fmt::format_to(
          to,
          FMT_COMPILE(
              R"({{"ph":"f","bp":"e","cat":"dep","name":"dep","id":{},"pid":{},"tid":{},"ts":{},"args":{{"from":{},"to":{},"run":{}}}}})"),
          flow_id, pid, b->tid, Us{b->t0}, e.arg, e.task, p.run);
    }
  }
  fmt::format_to(to, FMT_COMPILE("\n],\"otherData\":{{\"dropped_events\":{}}}}}\n"), dropped);
  return out;
}

inline std::string render_dag_dot(const DagRecord& dag) {
  std::string out =
      fmt::format("digraph \"L{} run {}\" {{\n  node [shape=box];\n", dag.level, dag.run);
  for (const auto& n : dag.nodes) {
    std::string label = fmt::format("{}: {}", n.id, n.callable);
    for (const auto& t : n.tensors) {
      label += fmt::format("\\n{} {:#x} {} B", to_string(t.tag), t.data, t.bytes);
    }
    std::string quoted;
    for (const char c : label) {
      if (c == '"') quoted += '\\';
      quoted += c;
    }
    out += fmt::format("  t{} [label=\"{}\"];\n", n.id, quoted);
  }
  for (const auto& e : dag.edges) {
    if (e.order_only) {
      out += fmt::format("  t{} -> t{} [label=\"order\", style=dashed];\n", e.from, e.to);
    } else {
      out += fmt::format("  t{} -> t{} [label=\"{} B\"];\n", e.from, e.to, e.bytes);
    }
  }
  out += "}\n";
  return out;
}

inline std::string render_dag_json(const DagRecord& dag) {
  using trace_json::escape;
  std::string out = fmt::format("{{\"level\":{},\"run\":{},\"nodes\":[", dag.level, dag.run);
  for (std::size_t i = 0; i < dag.nodes.size(); ++i) {
    const auto& n = dag.nodes[i];
    out += fmt::format("{}\n{{\"id\":{},\"callable\":", i == 0 ? "" : ",", n.id);
    escape(out, n.callable);
    out += fmt::format(",\"role\":\"{}\",\"members\":{},\"tensors\":[",
                       n.sub ? "sub" : "next_level", n.members);
    for (std::size_t k = 0; k < n.tensors.size(); ++k) {
      const auto& t = n.tensors[k];
      out += fmt::format("{}{{\"data\":{},\"bytes\":{},\"tag\":\"{}\"}}", k == 0 ? "" : ",", t.data,
                         t.bytes, to_string(t.tag));
    }
    out += "]}";
  }
  out += "],\n\"edges\":[";
  for (std::size_t i = 0; i < dag.edges.size(); ++i) {
    const auto& e = dag.edges[i];
    out += fmt::format("{}\n{{\"from\":{},\"to\":{},\"bytes\":{},\"via\":\"{}\"}}",
                       i == 0 ? "" : ",", e.from, e.to, e.bytes, e.order_only ? "order" : "data");
  }
  out += "]}\n";
  return out;
}

inline void check_output_dir(const std::string& dir, const char* what) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    throw UsageError(
        fmt::format("{}: directory '{}' cannot be used: {} (errno {}); create it first", what, dir,
                    std::strerror(err), err));
  }
  if (!S_ISDIR(st.st_mode)) {
    throw UsageError(fmt::format("{}: '{}' is not a directory", what, dir));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    const int err = errno;
    throw UsageError(fmt::format("{}: directory '{}' is not writable: {} (errno {})", what, dir,
                                 std::strerror(err), err));
  }
}

inline void write_text_file(const std::string& path, const std::string& text, const char* what) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw SystemError(fmt::format("{}: open '{}'", what, path), errno);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw SystemError(fmt::format("{}: write '{}'", what, path), err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) throw SystemError(fmt::format("{}: close '{}'", what, path), errno);
}

}  // namespace simpler::detail
