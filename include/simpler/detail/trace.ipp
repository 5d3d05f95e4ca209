// Trace and dependency-graph output: serialization across processes, Chrome trace-event JSON,
// Graphviz DOT, files. Off the hot path. Included once, at the end of its header; every function
// is inline (the library is header-only).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
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
inline void escape(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
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
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}
/// Microseconds with nanosecond precision, as Chrome's "ts" and "dur" want them.
inline std::string us(std::int64_t ns) {
  const bool neg = ns < 0;
  const std::uint64_t a = neg ? static_cast<std::uint64_t>(-ns) : static_cast<std::uint64_t>(ns);
  return fmt::format("{}{}.{:03}", neg ? "-" : "", a / 1000, a % 1000);
}
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
}  // namespace trace_json

inline std::string render_chrome_trace(const std::vector<TraceProcess>& processes) {
  using trace_json::escape;
  using trace_json::us;
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
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
      out += fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":)",
                         it->second);
      escape(out, name);
      out += "}}";
      begin_event();
      out += fmt::format(
          R"({{"ph":"M","name":"process_sort_index","pid":{},"tid":0,"args":{{"sort_index":{}}}}})",
          it->second, it->second);
    }
    return it->second;
  };
  const auto tid_of = [&](int pid, const std::string& name) {
    auto [it, fresh] = tids.emplace(std::make_pair(pid, name), 0);
    if (fresh) {
      it->second = ++next_tid[pid];
      begin_event();
      out += fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":)",
                         pid, it->second);
      escape(out, name);
      out += "}}";
      begin_event();
      out += fmt::format(
          R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
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
    // Per task: its callable, and where its slice is (for flows).
    struct TaskInfo {
      std::string callable;
      int tid = 0;
      std::int64_t t0 = 0;
      std::int64_t t1 = -1;  // -1: no slice
    };
    std::map<std::uint32_t, TaskInfo> tasks;
    for (const TraceEvent& e : p.events) {
      if (e.kind == TraceKind::Submit) {
        tasks[e.task].callable =
            e.arg < p.callables.size() ? p.callables[e.arg] : fmt::format("callable {}", e.arg);
      }
    }
    const auto name_of = [&](std::uint32_t task) -> std::string {
      auto it = tasks.find(task);
      return it != tasks.end() && !it->second.callable.empty() ? it->second.callable
                                                               : fmt::format("task {}", task);
    };
    std::map<std::uint32_t, std::string> tensors;  // level 4
    for (const TraceEvent& e : p.events) {
      if (e.kind != TraceKind::Tensor) continue;
      std::string& s = tensors[e.task];
      s += fmt::format("{}{} {:#x} {} B", s.empty() ? "" : ", ",
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
            if (k.t1 < 0) k = {name, t, e.t0, e.t1};
            out += fmt::format(
                R"({{"ph":"X","cat":"kernel","name":"{}","pid":{},"tid":{},"ts":{},"dur":{},"args":{{"task":{}}}}})",
                name, pid, t, us(e.t0), us(e.t1 - e.t0), static_cast<std::int64_t>(e.task) - 1);
          } else if (e.t1 > e.t0) {
            out += fmt::format(
                R"({{"ph":"X","cat":"chip","name":"{}","pid":{},"tid":{},"ts":{},"dur":{},"args":{{"task":{}}}}})",
                name, pid, t, us(e.t0), us(e.t1 - e.t0), static_cast<std::int64_t>(e.task) - 1);
          } else {
            out += fmt::format(
                R"({{"ph":"i","s":"t","cat":"chip","name":"{}","pid":{},"tid":{},"ts":{},"args":{{"task":{}}}}})",
                name, pid, t, us(e.t0), static_cast<std::int64_t>(e.task) - 1);
          }
          break;
        }
        case TraceKind::Submit:
          begin_event();
          out += fmt::format(R"({{"ph":"i","s":"t","cat":"submit","name":)");
          escape(out, "submit " + name_of(e.task));
          out += fmt::format(R"(,"pid":{},"tid":{},"ts":{},"args":{{"task":{},"run":{}}}}})", pid,
                             t, us(e.t0), e.task, p.run);
          break;
        case TraceKind::Ready:
        case TraceKind::Dispatch:
          begin_event();
          out += fmt::format(R"({{"ph":"i","s":"t","cat":"{}","name":)",
                             e.kind == TraceKind::Ready ? "ready" : "dispatch");
          escape(out, fmt::format("{} {}", e.kind == TraceKind::Ready ? "ready" : "dispatch",
                                  name_of(e.task)));
          out += fmt::format(R"(,"pid":{},"tid":{},"ts":{},"args":{{"task":{},"run":{})", pid, t,
                             us(e.t0), e.task, p.run);
          if (e.kind == TraceKind::Dispatch) {
            out += ",\"to\":";
            escape(out, e.arg < p.tracks.size() ? p.tracks[e.arg] : "?");
          }
          out += "}}";
          break;
        case TraceKind::Run:
        case TraceKind::Skip: {
          const std::int64_t end = e.kind == TraceKind::Run ? e.t1 : e.t0;
          TaskInfo& info = tasks[e.task];
          if (info.t1 < 0) {
            info.tid = t;
            info.t0 = e.t0;
            info.t1 = end;
          }
          begin_event();
          out += R"({"ph":"X","cat":"task","name":)";
          escape(out, name_of(e.task));
          out += fmt::format(
              R"(,"pid":{},"tid":{},"ts":{},"dur":{},"args":{{"task":{},"run":{},"outcome":"{}")",
              pid, t, us(e.t0), us(end - e.t0), e.task, p.run, trace_json::outcome_name(e.outcome));
          if (e.kind == TraceKind::Run && e.arg != 0) out += fmt::format(",\"member\":{}", e.arg);
          if (auto it = tensors.find(e.task); it != tensors.end()) {
            out += ",\"tensors\":";
            escape(out, it->second);
          }
          out += "}}";
          break;
        }
        case TraceKind::Pass:
          begin_event();
          out += fmt::format(
              R"({{"ph":"X","cat":"scheduler","name":"dispatch pass","pid":{},"tid":{},"ts":{},"dur":{},"args":{{"routed":{},"queued":{}}}}})",
              pid, t, us(e.t0), us(e.t1 - e.t0), e.arg, e.arg2);
          begin_event();
          out += fmt::format(
              R"({{"ph":"C","cat":"scheduler","name":"ready queue","pid":{},"tid":{},"ts":{},"args":{{"queued":{}}}}})",
              pid, t, us(e.t1), e.arg2);
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
      auto to = kernels.find(e.task);
      if (from == kernels.end() || to == kernels.end()) continue;
      const TaskInfo& a = from->second;
      const TaskInfo& b = to->second;
      ++flow_id;
      begin_event();
      out += fmt::format(
          R"({{"ph":"s","cat":"chip_dep","name":"dep","id":{},"pid":{},"tid":{},"ts":{}}})",
          flow_id, pid, a.tid, us(a.t1 > a.t0 ? a.t1 - 1 : a.t0));
      begin_event();
      out += fmt::format(
          R"({{"ph":"f","bp":"e","cat":"chip_dep","name":"dep","id":{},"pid":{},"tid":{},"ts":{}}})",
          flow_id, pid, b.tid, us(b.t0));
    }
    // Dependency flows: from inside the producer's slice to the start of the consumer's.
    for (const TraceEvent& e : p.events) {
      if (e.kind != TraceKind::Edge) continue;
      auto from = tasks.find(e.arg);
      auto to = tasks.find(e.task);
      if (from == tasks.end() || to == tasks.end() || from->second.t1 < 0 || to->second.t1 < 0) {
        continue;
      }
      const TaskInfo& a = from->second;
      const TaskInfo& b = to->second;
      const std::int64_t at = a.t1 > a.t0 ? a.t1 - 1 : a.t0;
      ++flow_id;
      begin_event();
      out += fmt::format(
          R"({{"ph":"s","cat":"dep","name":"dep","id":{},"pid":{},"tid":{},"ts":{},"args":{{"from":{},"to":{},"run":{},"bytes":{}}}}})",
          flow_id, pid, a.tid, us(at), e.arg, e.task, p.run, e.t1);
      begin_event();
      out += fmt::format(
          R"({{"ph":"f","bp":"e","cat":"dep","name":"dep","id":{},"pid":{},"tid":{},"ts":{},"args":{{"from":{},"to":{},"run":{}}}}})",
          flow_id, pid, b.tid, us(b.t0), e.arg, e.task, p.run);
    }
  }
  out += fmt::format("\n],\"otherData\":{{\"dropped_events\":{}}}}}\n", dropped);
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
