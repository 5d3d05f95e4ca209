// Test support: temporary output directories, and a reader of the Chrome trace-event JSON and
// dependency-graph files a Worker writes (docs/diagnostics.md).
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/json.hpp"

namespace simpler::testing {

/// A fresh directory under $TMPDIR (or /tmp), removed with its files at the end of the scope.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/simpler-trace-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (std::getenv("SIMPLER_TEST_KEEP_TRACES") != nullptr) return;  // to look at them
    for (const auto& f : files()) ::unlink((path_ + "/" + f).c_str());
    ::rmdir(path_.c_str());
  }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] std::string file(const std::string& name) const { return path_ + "/" + name; }
  /// The names of the files in it.
  [[nodiscard]] std::set<std::string> files() const {
    std::set<std::string> out;
    if (DIR* d = ::opendir(path_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (n != "." && n != "..") out.insert(n);
      }
      ::closedir(d);
    }
    return out;
  }

 private:
  std::string path_;
};

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// A CallConfig asking for a trace at `level` and/or the dependency graph, under `dir`.
inline CallConfig diagnostics_config(const std::string& dir, int level, bool dep_gen) {
  CallConfig c;
  c.enable_l2_swimlane = level;
  c.enable_dep_gen = dep_gen ? 1 : 0;
  if (dir.size() >= c.output_prefix.size()) throw std::runtime_error("prefix too long");
  dir.copy(c.output_prefix.data(), dir.size());
  c.output_prefix[dir.size()] = '\0';
  return c;
}

/// A parsed Chrome trace: its process and thread names, task slices and dependency flows.
struct TraceIndex {
  struct Slice {
    int pid;
    int tid;
    double ts;
    double dur;
    std::string name;
    std::string outcome;
  };
  using TaskKey = std::tuple<int, long long, long long>;  // pid, run, task
  Json doc;
  std::map<int, std::string> processes;                // pid -> name
  std::map<std::pair<int, int>, std::string> threads;  // (pid, tid) -> name
  std::map<TaskKey, std::vector<Slice>> tasks;         // every "X" of cat "task"
  std::vector<Json> others;                            // every other event
  struct Flow {
    int pid;
    long long run;
    long long from;
    long long to;
    const Json* s = nullptr;
    const Json* f = nullptr;
  };
  std::map<long long, Flow> flows;  // by id

  explicit TraceIndex(const std::string& text) : doc(parse_json(text)) {
    for (const Json& e : doc["traceEvents"].arr) {
      const std::string ph = e["ph"].str;
      const int pid = static_cast<int>(e["pid"].integer());
      if (ph == "M" && e["name"].str == "process_name") {
        processes[pid] = e["args"]["name"].str;
      } else if (ph == "M" && e["name"].str == "thread_name") {
        threads[{pid, static_cast<int>(e["tid"].integer())}] = e["args"]["name"].str;
      } else if (ph == "X" && e["cat"].str == "task") {
        const Json& a = e["args"];
        tasks[{pid, a["run"].integer(), a["task"].integer()}].push_back(
            {pid, static_cast<int>(e["tid"].integer()), e["ts"].num, e["dur"].num, e["name"].str,
             a["outcome"].str});
      } else if ((ph == "s" || ph == "f") && e["cat"].str == "dep") {
        Flow& fl = flows[e["id"].integer()];
        fl.pid = pid;
        fl.run = e["args"]["run"].integer();
        fl.from = e["args"]["from"].integer();
        fl.to = e["args"]["to"].integer();
        (ph == "s" ? fl.s : fl.f) = &e;
      } else {
        others.push_back(e);
      }
    }
  }
  /// The pid of the process named `name`, or -1.
  [[nodiscard]] int pid_of(const std::string& name) const {
    for (const auto& [pid, n] : processes) {
      if (n == name) return pid;
    }
    return -1;
  }
  [[nodiscard]] std::set<std::string> thread_names(int pid) const {
    std::set<std::string> out;
    for (const auto& [k, n] : threads) {
      if (k.first == pid) out.insert(n);
    }
    return out;
  }
  /// The tasks of process `pid` in run `run` (-1 = every run).
  [[nodiscard]] std::vector<TaskKey> tasks_of(int pid, long long run = -1) const {
    std::vector<TaskKey> out;
    for (const auto& [k, v] : tasks) {
      if (std::get<0>(k) == pid && (run < 0 || std::get<1>(k) == run)) out.push_back(k);
    }
    return out;
  }
  /// (from, to) of the dependency flows of process `pid` in run `run`.
  [[nodiscard]] std::set<std::pair<long long, long long>> flow_edges(int pid, long long run) const {
    std::set<std::pair<long long, long long>> out;
    for (const auto& [id, f] : flows) {
      if (f.pid == pid && f.run == run) out.insert({f.from, f.to});
    }
    return out;
  }
  /// True when every flow has both ends, each inside its task's slice on the slice's thread
  /// (what "bind to the enclosing slice" needs).
  [[nodiscard]] bool flows_bound() const {
    for (const auto& [id, f] : flows) {
      if (f.s == nullptr || f.f == nullptr) return false;
      const auto inside = [&](const Json& e, long long task) {
        auto it = tasks.find({f.pid, f.run, task});
        if (it == tasks.end()) return false;
        const Slice& sl = it->second.front();
        const double ts = e["ts"].num;
        return sl.tid == e["tid"].integer() && ts >= sl.ts && ts <= sl.ts + sl.dur;
      };
      if (!inside(*f.s, f.from) || !inside(*f.f, f.to)) return false;
    }
    return true;
  }
};

/// A stretch of a trace, in its microseconds.
struct Span {
  double begin = 0;
  double end = 0;
};
/// `inner` lies within `outer`, give or take `slack_us` at either end.
inline bool inside(const Span& inner, const Span& outer, double slack_us) {
  return inner.begin >= outer.begin - slack_us && inner.end <= outer.end + slack_us;
}
/// The task slices of process `pid` in run `run`.
inline std::vector<Span> task_spans(const TraceIndex& t, int pid, long long run) {
  std::vector<Span> out;
  for (const auto& k : t.tasks_of(pid, run)) {
    const auto& s = t.tasks.at(k).front();
    out.push_back({s.ts, s.ts + s.dur});
  }
  return out;
}
/// From the first start to the last end of the task slices of `pid`'s run `run`.
inline Span run_span(const TraceIndex& t, int pid, long long run) {
  const auto spans = task_spans(t, pid, run);
  if (spans.empty()) return {};
  Span all = spans.front();
  for (const Span& s : spans) {
    all.begin = std::min(all.begin, s.begin);
    all.end = std::max(all.end, s.end);
  }
  return all;
}
/// The runs process `pid` has tasks in (a nested or remote Worker: one per parent task).
inline std::set<long long> runs_of(const TraceIndex& t, int pid) {
  std::set<long long> out;
  for (const auto& k : t.tasks_of(pid)) out.insert(std::get<1>(k));
  return out;
}
/// The kernel slices of (chip) process `pid`.
inline std::vector<Span> kernel_spans(const TraceIndex& t, int pid) {
  std::vector<Span> out;
  for (const Json& e : t.others) {
    if (e["ph"].str == "X" && e["cat"].str == "kernel" && e["pid"].integer() == pid) {
      out.push_back({e["ts"].num, e["ts"].num + e["dur"].num});
    }
  }
  return out;
}

/// The data edges of a dag.json file ("via":"data"), as (from, to, bytes).
inline std::set<std::tuple<long long, long long, long long>> dag_json_edges(const Json& dag) {
  std::set<std::tuple<long long, long long, long long>> out;
  for (const Json& e : dag["edges"].arr) {
    if (e["via"].str == "data")
      out.insert({e["from"].integer(), e["to"].integer(), e["bytes"].integer()});
  }
  return out;
}

/// The order edges of a dag.json file ("via":"order"), as (from, to).
inline std::set<std::pair<long long, long long>> dag_json_order_edges(const Json& dag) {
  std::set<std::pair<long long, long long>> out;
  for (const Json& e : dag["edges"].arr) {
    if (e["via"].str == "order") out.insert({e["from"].integer(), e["to"].integer()});
  }
  return out;
}

/// The order edges of a dag.dot file (dashed, "tA -> tB [label="order", style=dashed];").
inline std::set<std::pair<long long, long long>> dag_dot_order_edges(const std::string& dot) {
  std::set<std::pair<long long, long long>> out;
  std::istringstream in(dot);
  std::string line;
  while (std::getline(in, line)) {
    long long a = 0;
    long long b = 0;
    if (line.find("style=dashed") != std::string::npos &&
        std::sscanf(line.c_str(), " t%lld -> t%lld", &a, &b) == 2) {
      out.insert({a, b});
    }
  }
  return out;
}

/// The edges of a dag.dot file ("tA -> tB [label="N B"];" lines), as (from, to, bytes).
inline std::set<std::tuple<long long, long long, long long>> dag_dot_edges(const std::string& dot) {
  std::set<std::tuple<long long, long long, long long>> out;
  std::istringstream in(dot);
  std::string line;
  while (std::getline(in, line)) {
    long long a = 0;
    long long b = 0;
    long long n = 0;
    if (std::sscanf(line.c_str(), " t%lld -> t%lld [label=\"%lld B\"];", &a, &b, &n) == 3) {
      out.insert({a, b, n});
    }
  }
  return out;
}

}  // namespace simpler::testing
