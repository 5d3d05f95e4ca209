// Chip diagnostics of the simulated device: the swimlane trace (simpler_get_run_trace and
// <run dir>/trace.json) and the dependency graph (<run dir>/dag.json and dag.dot). Programs run
// through the fuzz_program test orchestration with no-op kernels; the expected dependencies are
// derived in the test from the program by the device's documented rules (docs/device.md).
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <simpler/simpler.hpp>

#include "device/orchestration/fuzz_program.hpp"
#include "support/chip_modules.hpp"
#include "support/json.hpp"
#include "support/program_device.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_chip_trace {

namespace {

using namespace fuzz_program;
using simpler_test::ProgramDevice;
using TraceEdge = std::pair<std::int64_t, std::int64_t>;  // producer task id -> consumer task id
using simpler::testing::Json;
using simpler::testing::parse_json;

/// A fresh directory under /tmp, removed with everything in it at scope exit.
class TraceTempDir {
 public:
  TraceTempDir() {
    char tmpl[] = "/tmp/simpler_chiptrace_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  TraceTempDir(const TraceTempDir&) = delete;
  TraceTempDir& operator=(const TraceTempDir&) = delete;
  ~TraceTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

/// Sets an environment variable for the scope (the runtime reads it at prepare_run).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

simpler_run_config diag_config(int swimlane, bool dep_gen, const std::string& prefix) {
  simpler_run_config c{};
  c.struct_size = sizeof c;
  c.swimlane = swimlane;
  c.dep_gen = dep_gen ? 1 : 0;
  std::strncpy(c.output_prefix, prefix.c_str(), sizeof c.output_prefix - 1);
  return c;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- programs -----------------------------------------------------------------------------

/// One tensor of a submit: a known buffer as it is (`known` indexes the orchestration's list:
/// run tensors 1.. first, then each Output in submit order), a view of bytes [offset, offset +
/// len) of a known buffer, or a new Output of `len` bytes.
struct Arg {
  int tag;
  std::uint8_t known = 0;
  bool view = false;
  bool output = false;
  std::uint64_t offset = 0;
  std::uint32_t len = 0;
};

Arg whole(int tag, std::uint8_t known) {
  return Arg{tag, known};
}
Arg view(int tag, std::uint8_t known, std::uint64_t offset, std::uint32_t len) {
  return Arg{tag, known, true, false, offset, len};
}
Arg output(std::uint32_t len) {
  return Arg{SIMPLER_TAG_OUTPUT, 0, false, true, 0, len};
}

/// A submit of an AIV task running func_id 0 (a no-op) with `args`.
void submit(Writer& w, const std::vector<Arg>& args) {
  w.u8(kSubmit).u8(0xff).u8(0).u8(0xff).u8(static_cast<std::uint8_t>(args.size()));
  for (const Arg& a : args) {
    w.u8(static_cast<std::uint8_t>(a.tag));
    if (a.output) {
      w.u8(kDescribe);
    } else if (a.view) {
      w.u8(kRawView).u8(a.known).compact(a.offset).compact(std::uint64_t{SIMPLER_INVALID_TASK_ID});
    } else {
      w.u8(kKnown).u8(a.known);
      continue;
    }
    w.u8(1).u8(SIMPLER_UINT8);
    w.compact(a.len);
    for (int i = 0; i < 4; ++i) w.compact(std::uint32_t{0});
  }
  w.u8(0);  // no scalars
}

/// The dependencies the device infers for a program of submits (all in the run's own scope, so
/// no task retires before the run ends), by the rules of docs/device.md: a tensor whose buffer a
/// live task allocated (an Output) depends on that task; an Input or InOut depends on every
/// recorded writer of bytes it overlaps; with all hazards (the default) an InOut or
/// OutputExisting also depends on every recorded reader of bytes it overlaps, and an
/// OutputExisting on every recorded writer. Then a writer replaces the entries whose bytes it
/// covers (with all hazards every writer, readers' and writers' entries; else an InOut, writers'
/// only), and InOut and OutputExisting record the task as the writer of their bytes, Input (with
/// all hazards) as a reader. Task k's id is k.
class Oracle {
 public:
  explicit Oracle(std::vector<std::uint32_t> host_sizes, bool all_hazards = true)
      : all_(all_hazards) {
    for (std::uint32_t s : host_sizes) known_.push_back({-1, s});
  }

  void submit(const std::vector<Arg>& args) {
    const std::int64_t task = next_++;
    std::vector<std::int64_t> found;
    for (const Arg& a : args) {
      if (a.output) continue;
      const Buffer buf = buffer_of(a);
      if (known_[a.known].owner >= 0 && !a.view) found.push_back(known_[a.known].owner);
      const bool reads = a.tag == SIMPLER_TAG_INPUT || a.tag == SIMPLER_TAG_INOUT;
      const bool writes = a.tag == SIMPLER_TAG_INOUT || a.tag == SIMPLER_TAG_OUTPUT_EXISTING;
      for (const Access& ac : accesses_) {
        if (!ac.linked || ac.id != buf.id || !(buf.begin < ac.end && ac.begin < buf.end)) continue;
        if ((ac.write && (reads || (writes && all_))) || (!ac.write && writes && all_))
          found.push_back(ac.task);
      }
    }
    for (const Arg& a : args) {
      if (a.tag != SIMPLER_TAG_INOUT && a.tag != SIMPLER_TAG_OUTPUT_EXISTING) continue;
      const Buffer buf = buffer_of(a);
      if (buf.begin >= buf.end) continue;
      for (Access& ac : accesses_) {
        if (ac.id == buf.id && buf.begin <= ac.begin && ac.end <= buf.end &&
            (all_ || (ac.write && a.tag == SIMPLER_TAG_INOUT)))
          ac.linked = false;
      }
    }
    for (const Arg& a : args) {
      const bool write = a.tag == SIMPLER_TAG_INOUT || a.tag == SIMPLER_TAG_OUTPUT_EXISTING;
      if (write || (all_ && a.tag == SIMPLER_TAG_INPUT)) {
        const Buffer buf = buffer_of(a);
        accesses_.push_back({buf.id, buf.begin, buf.end, task, write, true});
      }
    }
    for (const Arg& a : args) {
      if (a.output && known_.size() < 64) known_.push_back({task, a.len});
    }
    for (std::int64_t p : found) edges_.insert({p, task});
  }

  [[nodiscard]] const std::set<TraceEdge>& edges() const noexcept { return edges_; }
  [[nodiscard]] std::int64_t tasks() const noexcept { return next_; }
  [[nodiscard]] std::size_t known() const noexcept { return known_.size(); }
  [[nodiscard]] std::uint32_t size_of(std::size_t k) const { return known_[k].size; }
  [[nodiscard]] bool is_output(std::size_t k) const { return known_[k].owner >= 0; }

 private:
  struct Known {
    std::int64_t owner;  ///< the task whose Output it is; -1 for a run tensor
    std::uint32_t size;
  };
  struct Buffer {
    std::size_t id;
    std::uint64_t begin, end;
  };
  struct Access {
    std::size_t id;
    std::uint64_t begin, end;
    std::int64_t task;
    bool write;
    bool linked;
  };
  Buffer buffer_of(const Arg& a) const {
    if (a.view) return {a.known, a.offset, a.offset + a.len};
    return {a.known, 0, known_[a.known].size};
  }

  bool all_;
  std::vector<Known> known_;
  std::vector<Access> accesses_;
  std::set<TraceEdge> edges_;
  std::int64_t next_ = 0;
};

/// Host buffers for run tensors 1.. (UINT8).
struct HostBuffers {
  explicit HostBuffers(const std::vector<std::uint32_t>& sizes) {
    for (std::uint32_t s : sizes) bytes.emplace_back(s, 0);
    for (auto& b : bytes) tensors.push_back(simpler_test::host_bytes(b));
  }
  std::vector<std::vector<std::uint8_t>> bytes;
  std::vector<simpler_tensor> tensors;
};

/// A program and its oracle, built together.
struct Program {
  explicit Program(const std::vector<std::uint32_t>& host_sizes)
      : oracle(host_sizes), host(host_sizes) {}
  void task(const std::vector<Arg>& args) {
    submit(w, args);
    oracle.submit(args);
  }
  Writer w;
  Oracle oracle;
  HostBuffers host;
};

/// A random program of `n` tasks over four host buffers of 256 bytes: each task has one to
/// three tensors with random tags, whole buffers or byte views, and Outputs that later tasks
/// read, update or overwrite.
Program random_trace_program(std::uint32_t seed, int n) {
  Program p({256, 256, 256, 256});
  std::mt19937 rng(seed);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int t = 0; t < n; ++t) {
    std::vector<Arg> args;
    const int nt = pick(1, 3);
    for (int i = 0; i < nt; ++i) {
      static constexpr int kTags[] = {SIMPLER_TAG_INPUT,  SIMPLER_TAG_INPUT,
                                      SIMPLER_TAG_INOUT,  SIMPLER_TAG_OUTPUT_EXISTING,
                                      SIMPLER_TAG_NO_DEP, SIMPLER_TAG_OUTPUT};
      const int tag = kTags[pick(0, 5)];
      if (tag == SIMPLER_TAG_OUTPUT) {
        args.push_back(output(static_cast<std::uint32_t>(pick(1, 64))));
        continue;
      }
      const auto k = static_cast<std::uint8_t>(pick(0, static_cast<int>(p.oracle.known()) - 1));
      if (p.oracle.is_output(k) || pick(0, 2) == 0) {
        args.push_back(whole(tag, k));
      } else {
        const auto off = static_cast<std::uint64_t>(pick(0, 255));
        const auto len = static_cast<std::uint32_t>(pick(1, static_cast<int>(256 - off)));
        args.push_back(view(tag, k, off, len));
      }
    }
    p.task(args);
  }
  return p;
}

// ---- reading what the runtime wrote ---------------------------------------------------------

std::string run_dir(const std::string& prefix, int device, int run) {
  return prefix + "/chip" + std::to_string(device) + "/run" + std::to_string(run);
}

std::set<TraceEdge> dag_json_edges(const Json& dag) {
  std::set<TraceEdge> out;
  for (const Json& e : dag["edges"].arr) out.insert({e["from"].integer(), e["to"].integer()});
  return out;
}

/// "0:5" -> task id 5 of ring 0.
std::int64_t task_of_label(const std::string& label) {
  const auto colon = label.find(':');
  return (std::stoll(label.substr(0, colon)) << 32) | std::stoll(label.substr(colon + 1));
}

/// The edges of a DOT file: every line `"a" -> "b" ...`.
std::set<TraceEdge> dag_dot_edges(const std::string& dot) {
  std::set<TraceEdge> out;
  std::istringstream in(dot);
  for (std::string line; std::getline(in, line);) {
    const auto arrow = line.find("\" -> \"");
    if (arrow == std::string::npos) continue;
    const auto a0 = line.find('"');
    const auto b1 = line.find('"', arrow + 6);
    out.insert({task_of_label(line.substr(a0 + 1, arrow - a0 - 1)),
                task_of_label(line.substr(arrow + 6, b1 - arrow - 6))});
  }
  return out;
}

/// What a trace.json holds, checked for well-formedness on the way: thread names by tid, kernel
/// slices per task, and dependency arrows (each "s" matched by one "f" with its id).
struct ChromeTrace {
  std::map<std::int64_t, std::string> threads;
  std::map<std::int64_t, int> kernel_slices;
  std::set<TraceEdge> flows;
  std::int64_t dropped = 0;
};

ChromeTrace read_chrome_trace(const std::string& path) {
  const Json doc = parse_json(read_file(path));
  ChromeTrace out;
  out.dropped = doc["otherData"]["dropped"].integer();
  std::map<std::int64_t, TraceEdge> starts;
  std::map<std::int64_t, int> finishes;
  for (const Json& e : doc["traceEvents"].arr) {
    const std::string& ph = e["ph"].str;
    if (ph == "M" && e["name"].str == "thread_name") {
      out.threads[e["tid"].integer()] = e["args"]["name"].str;
    } else if (ph == "X") {
      REQUIRE(e["dur"].num >= 0);
      REQUIRE(e["ts"].num > 0);
      if (e["cat"].str == "kernel") ++out.kernel_slices[e["args"]["task_id"].integer()];
    } else if (ph == "s") {
      const TraceEdge edge{task_of_label(e["args"]["from"].str),
                           task_of_label(e["args"]["to"].str)};
      REQUIRE(starts.emplace(e["id"].integer(), edge).second);
      out.flows.insert(edge);
    } else if (ph == "f") {
      REQUIRE(e["bp"].str == "e");
      ++finishes[e["id"].integer()];
    }
  }
  REQUIRE(starts.size() == finishes.size());
  for (const auto& [id, edge] : starts) CHECK(finishes[id] == 1);
  return out;
}

/// The run's trace through the C API, checked: sorted by begin, begin <= end, tracks in range.
struct ApiTrace {
  std::vector<std::string> tracks;
  std::vector<simpler_trace_event> events;
  std::uint64_t dropped = 0;
};

ApiTrace api_trace(ProgramDevice& d) {
  simpler_trace_info info{};
  info.struct_size = sizeof info;
  REQUIRE(d.api().get_run_trace(d.ctx(), &info) == SIMPLER_OK);
  ApiTrace out;
  for (std::uint32_t t = 0; t < info.track_count; ++t) out.tracks.emplace_back(info.track_names[t]);
  out.events.assign(info.events, info.events + info.event_count);
  out.dropped = info.dropped;
  for (std::size_t i = 0; i < out.events.size(); ++i) {
    const simpler_trace_event& e = out.events[i];
    REQUIRE(e.begin_ns <= e.end_ns);
    REQUIRE(e.track < info.track_count);
    if (i > 0) REQUIRE(out.events[i - 1].begin_ns <= e.begin_ns);
  }
  return out;
}

std::map<std::int64_t, int> kernels_per_task(const ApiTrace& t) {
  std::map<std::int64_t, int> out;
  for (const auto& e : t.events) {
    if (e.kind == SIMPLER_TRACE_KERNEL) ++out[e.task_id];
  }
  return out;
}

std::set<TraceEdge> dependency_events(const ApiTrace& t) {
  std::set<TraceEdge> out;
  for (const auto& e : t.events) {
    if (e.kind == SIMPLER_TRACE_DEPENDENCY) out.insert({e.flow_from, e.task_id});
  }
  return out;
}

int count_kind(const ApiTrace& t, std::uint32_t kind) {
  return static_cast<int>(std::count_if(t.events.begin(), t.events.end(),
                                        [kind](const auto& e) { return e.kind == kind; }));
}

/// Every task 0..n-1 exactly once.
void check_each_task_once(const std::map<std::int64_t, int>& per_task, std::int64_t n) {
  CHECK(static_cast<std::int64_t>(per_task.size()) == n);
  for (std::int64_t k = 0; k < n; ++k) {
    INFO("task " << k);
    CHECK(per_task.count(k) == 1);
    if (per_task.count(k) == 1) CHECK(per_task.at(k) == 1);
  }
}

int run_program(ProgramDevice& d, Program& p, const simpler_run_config& cfg) {
  const int rc = d.run(p.w.bytes, &cfg, p.host.tensors);
  INFO(d.error());
  REQUIRE(rc == SIMPLER_OK);
  return rc;
}

}  // namespace

TEST_CASE("a chip chain's DAG has one edge per link with the bytes that caused it",
          "[chip][trace][dag]") {
  TraceTempDir dir;
  ProgramDevice d;
  Program p({64});
  // Task 0 writes the buffer; 1..4 update it in turn (each InOut replaces the previous writer).
  p.task({whole(SIMPLER_TAG_OUTPUT_EXISTING, 0)});
  for (int i = 0; i < 4; ++i) p.task({whole(SIMPLER_TAG_INOUT, 0)});
  run_program(d, p, diag_config(0, true, dir.path()));

  const std::set<TraceEdge> expected{{0, 1}, {1, 2}, {2, 3}, {3, 4}};
  REQUIRE(p.oracle.edges() == expected);
  const Json dag = parse_json(read_file(run_dir(dir.path(), 0, 0) + "/dag.json"));
  CHECK(dag_json_edges(dag) == expected);
  CHECK(dag_dot_edges(read_file(run_dir(dir.path(), 0, 0) + "/dag.dot")) == expected);
  CHECK(dag["truncated"].b == false);
  REQUIRE(dag["nodes"].arr.size() == 5);
  for (const Json& e : dag["edges"].arr) {
    CHECK(e["bytes"].integer() == 64);
    CHECK(e["tags"].arr.size() == 1);
    CHECK(e["tags"].arr[0].str == "inout");
    CHECK(e["via"].arr[0].str == "write");
  }
  const Json& n1 = dag["nodes"].arr[1];
  CHECK(n1["task"].str == "0:1");
  CHECK(n1["kernels"].arr[0]["name"].str == "kernel_noop");
  CHECK(n1["kernels"].arr[0]["lane"].str == "aiv0");
  CHECK(n1["tensors"].arr[0]["tag"].str == "inout");
  CHECK(n1["tensors"].arr[0]["dtype"].str == "uint8");
  CHECK(n1["tensors"].arr[0]["shape"].arr[0].integer() == 64);
  // dep_gen alone writes no trace.
  CHECK_FALSE(std::filesystem::exists(run_dir(dir.path(), 0, 0) + "/trace.json"));
}

TEST_CASE("a chip fan-out/fan-in DAG has the edges of its views and outputs",
          "[chip][trace][dag]") {
  TraceTempDir dir;
  ProgramDevice d;
  Program p({64, 64});
  // 0 writes bytes [0, 32) of buffer 0; 1 and 2 each read half of that and make an Output;
  // 3 writes bytes [32, 64) (nobody reads them); 4 reads both Outputs (known 2 and 3).
  p.task({view(SIMPLER_TAG_OUTPUT_EXISTING, 0, 0, 32)});
  p.task({view(SIMPLER_TAG_INPUT, 0, 0, 16), output(8)});
  p.task({view(SIMPLER_TAG_INPUT, 0, 8, 16), output(8)});
  p.task({view(SIMPLER_TAG_OUTPUT_EXISTING, 0, 32, 32)});
  p.task({whole(SIMPLER_TAG_INPUT, 2), whole(SIMPLER_TAG_INPUT, 3),
          whole(SIMPLER_TAG_OUTPUT_EXISTING, 1)});
  run_program(d, p, diag_config(0, true, dir.path()));

  const std::set<TraceEdge> expected{{0, 1}, {0, 2}, {1, 4}, {2, 4}};
  REQUIRE(p.oracle.edges() == expected);
  const Json dag = parse_json(read_file(run_dir(dir.path(), 0, 0) + "/dag.json"));
  CHECK(dag_json_edges(dag) == expected);
  CHECK(dag_dot_edges(read_file(run_dir(dir.path(), 0, 0) + "/dag.dot")) == expected);
  for (const Json& e : dag["edges"].arr) {
    if (e["to"].integer() == 4) {
      CHECK(e["bytes"].integer() == 8);  // the whole Output
      CHECK(e["via"].arr[0].str == "owner");
    } else {
      CHECK(e["bytes"].integer() == 16);  // the overlap of the read view with [0, 32)
      CHECK(e["via"].arr[0].str == "write");
    }
  }
}

TEST_CASE("a chip writer's DAG edges from the readers and writer before it only order",
          "[chip][trace][dag][hazards]") {
  TraceTempDir dir;
  ProgramDevice d;
  Program p({64});
  // 0 writes the buffer; 1 and 2 read overlapping halves; 3 overwrites it all: it waits for 1
  // and 2 (write after read) and for 0 (write after write), and reads nothing they wrote.
  p.task({whole(SIMPLER_TAG_OUTPUT_EXISTING, 0)});
  p.task({view(SIMPLER_TAG_INPUT, 0, 0, 32)});
  p.task({view(SIMPLER_TAG_INPUT, 0, 16, 32)});
  p.task({whole(SIMPLER_TAG_OUTPUT_EXISTING, 0)});
  run_program(d, p, diag_config(2, true, dir.path()));

  const std::set<TraceEdge> expected{{0, 1}, {0, 2}, {0, 3}, {1, 3}, {2, 3}};
  REQUIRE(p.oracle.edges() == expected);
  const std::string rd = run_dir(dir.path(), 0, 0);
  const Json dag = parse_json(read_file(rd + "/dag.json"));
  CHECK(dag_json_edges(dag) == expected);
  for (const Json& e : dag["edges"].arr) {
    INFO(e["from"].integer() << " -> " << e["to"].integer());
    const bool waw = e["from"].integer() == 0 && e["to"].integer() == 3;
    CHECK(e["bytes"].integer() == (waw ? 64 : 32));
    if (e["to"].integer() != 3) {
      CHECK(e["via"].arr[0].str == "write");
      CHECK(e["tags"].arr[0].str == "input");
      CHECK(e["order_only"].b == false);
    } else {
      CHECK(e["via"].arr[0].str == (waw ? "write" : "read"));
      CHECK(e["tags"].arr[0].str == "output_existing");
      CHECK(e["order_only"].b == true);
    }
  }
  const std::string dot = read_file(rd + "/dag.dot");
  CHECK(dag_dot_edges(dot) == expected);
  CHECK(dot.find("\"0:1\" -> \"0:3\" [label=\"32 B output_existing after read\", style=dashed]") !=
        std::string::npos);

  // The trace's dependency events and flows say the same: only the edges into 3 only order.
  const ApiTrace api = api_trace(d);
  CHECK(dependency_events(api) == expected);
  for (const auto& e : api.events) {
    if (e.kind == SIMPLER_TRACE_DEPENDENCY) CHECK(e.block_idx == (e.task_id == 3 ? 1 : 0));
  }
  const Json trace = parse_json(read_file(rd + "/trace.json"));
  int flows = 0;
  for (const Json& e : trace["traceEvents"].arr) {
    if (e["ph"].str != "s") continue;
    ++flows;
    CHECK(e["args"]["order_only"].b == (e["args"]["to"].str == "0:3"));
  }
  CHECK(flows == 5);
}

TEST_CASE("with read-after-write hazards only, a chip DAG has no edges into writers",
          "[chip][trace][dag][hazards]") {
  TraceTempDir dir;
  simpler_init_options o = ProgramDevice::default_options();
  o.hazards = SIMPLER_HAZARDS_READ_AFTER_WRITE;
  ProgramDevice d(o);
  Program p({64});
  p.oracle = Oracle({64}, false);
  p.task({whole(SIMPLER_TAG_OUTPUT_EXISTING, 0)});
  p.task({view(SIMPLER_TAG_INPUT, 0, 0, 32)});
  p.task({whole(SIMPLER_TAG_OUTPUT_EXISTING, 0)});
  run_program(d, p, diag_config(0, true, dir.path()));
  const std::set<TraceEdge> expected{{0, 1}};
  REQUIRE(p.oracle.edges() == expected);
  CHECK(dag_json_edges(parse_json(read_file(run_dir(dir.path(), 0, 0) + "/dag.json"))) == expected);
}

TEST_CASE("random tagged chip DAGs: the DAG files and the trace's flows equal the oracle's edges",
          "[chip][trace][dag]") {
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    INFO("seed " << seed);
    TraceTempDir dir;
    ProgramDevice d;
    Program p = random_trace_program(seed, 40);
    run_program(d, p, diag_config(2, true, dir.path()));
    const std::string rd = run_dir(dir.path(), 0, 0);
    const std::set<TraceEdge>& expected = p.oracle.edges();
    CHECK(!expected.empty());

    const Json dag = parse_json(read_file(rd + "/dag.json"));
    CHECK(static_cast<std::int64_t>(dag["nodes"].arr.size()) == p.oracle.tasks());
    CHECK(dag_json_edges(dag) == expected);
    CHECK(dag_dot_edges(read_file(rd + "/dag.dot")) == expected);

    const ApiTrace api = api_trace(d);
    CHECK(dependency_events(api) == expected);
    check_each_task_once(kernels_per_task(api), p.oracle.tasks());

    const ChromeTrace chrome = read_chrome_trace(rd + "/trace.json");
    CHECK(chrome.flows == expected);
    check_each_task_once(chrome.kernel_slices, p.oracle.tasks());
  }
}

TEST_CASE("a chip trace names its tracks and holds each task's kernel once, per level",
          "[chip][trace]") {
  TraceTempDir dir;
  simpler_init_options o = ProgramDevice::default_options();
  o.num_clusters = 2;
  o.aicpu_thread_num = 3;
  ProgramDevice d(o);
  Program p = random_trace_program(42, 30);
  const std::int64_t n = p.oracle.tasks();

  for (int level = 1; level <= 4; ++level) {
    INFO("swimlane " << level);
    run_program(d, p, diag_config(level, false, dir.path()));
    const ApiTrace t = api_trace(d);
    CHECK(t.tracks == std::vector<std::string>{"AICPU 0 (orchestrator)", "AICPU 1", "AICPU 2",
                                               "AICore AIC 0", "AICore AIC 1", "AICore AIV 0",
                                               "AICore AIV 1", "AICore AIV 2", "AICore AIV 3"});
    CHECK(t.dropped == 0);
    check_each_task_once(kernels_per_task(t), n);
    CHECK(count_kind(t, SIMPLER_TRACE_DISPATCH) == n);
    CHECK(count_kind(t, SIMPLER_TRACE_COMPLETE) == n);
    for (const auto& e : t.events) {
      if (e.kind == SIMPLER_TRACE_KERNEL) {
        CHECK(t.tracks[e.track].rfind("AICore", 0) == 0);
        CHECK(e.func_id == 0);
      } else if (e.kind == SIMPLER_TRACE_DISPATCH || e.kind == SIMPLER_TRACE_COMPLETE) {
        CHECK((t.tracks[e.track] == "AICPU 1" || t.tracks[e.track] == "AICPU 2"));
      }
    }
    CHECK((count_kind(t, SIMPLER_TRACE_DEPENDENCY) > 0) == (level >= 2));
    // Every dispatched task was popped from a ready queue.
    CHECK((count_kind(t, SIMPLER_TRACE_SCHEDULER) >= n) == (level >= 3));
    CHECK(count_kind(t, SIMPLER_TRACE_SUBMIT) == (level >= 4 ? n : 0));

    // The run's own directory (run<N>, N counting this context's runs) and its trace.
    const ChromeTrace chrome = read_chrome_trace(run_dir(dir.path(), 0, level - 1) + "/trace.json");
    std::set<std::string> names;
    for (const auto& [tid, name] : chrome.threads) names.insert(name);
    CHECK(names == std::set<std::string>(t.tracks.begin(), t.tracks.end()));
    check_each_task_once(chrome.kernel_slices, n);
    CHECK_FALSE(std::filesystem::exists(run_dir(dir.path(), 0, level - 1) + "/dag.json"));
  }
}

TEST_CASE("with diagnostics off a chip run writes no file and its trace is empty",
          "[chip][trace]") {
  TraceTempDir dir;
  ProgramDevice d;
  Program p = random_trace_program(7, 10);
  // A traced run first: its trace must not survive into the next run.
  run_program(d, p, diag_config(1, false, dir.path()));
  CHECK_FALSE(api_trace(d).events.empty());
  std::filesystem::remove_all(dir.path() + "/chip0");

  run_program(d, p, diag_config(0, false, dir.path()));
  const ApiTrace t = api_trace(d);
  CHECK(t.events.empty());
  CHECK(t.tracks.empty());
  CHECK(t.dropped == 0);
  CHECK(std::filesystem::is_empty(dir.path()));
  // No config at all is off too.
  REQUIRE(d.run(p.w.bytes, nullptr, p.host.tensors) == SIMPLER_OK);
  CHECK(api_trace(d).events.empty());
  CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("a full chip trace buffer counts dropped events and the run still succeeds",
          "[chip][trace]") {
  TraceTempDir dir;
  ScopedEnv small("SIMPLER_SIM_TRACE_EVENTS", "4");
  ProgramDevice d;
  Program p = random_trace_program(3, 40);
  run_program(d, p, diag_config(4, false, dir.path()));
  const ApiTrace t = api_trace(d);
  CHECK(t.dropped > 0);
  // Four events per recording thread at most: the orchestrator, one scheduler, three cores.
  CHECK(t.events.size() <= 4 * 5);
  const ChromeTrace chrome = read_chrome_trace(run_dir(dir.path(), 0, 0) + "/trace.json");
  CHECK(chrome.dropped == static_cast<std::int64_t>(t.dropped));
}

TEST_CASE("a chip DAG past its node limit is cut and says so", "[chip][trace][dag]") {
  TraceTempDir dir;
  ScopedEnv small("SIMPLER_SIM_DAG_MAX_NODES", "3");
  ProgramDevice d;
  Program p({64});
  for (int i = 0; i < 6; ++i) p.task({whole(SIMPLER_TAG_INOUT, 0)});
  run_program(d, p, diag_config(0, true, dir.path()));
  const Json dag = parse_json(read_file(run_dir(dir.path(), 0, 0) + "/dag.json"));
  CHECK(dag["truncated"].b);
  CHECK(dag["nodes"].arr.size() == 3);
  CHECK(dag["omitted_nodes"].integer() == 3);
  CHECK(dag["omitted_edges"].integer() == 3);
  CHECK(dag_json_edges(dag) == std::set<TraceEdge>{{0, 1}, {1, 2}});
  CHECK_THAT(read_file(run_dir(dir.path(), 0, 0) + "/dag.dot"), Catch::Contains("truncated"));
}

TEST_CASE("a chip run refuses a swimlane level outside 0..4", "[chip][trace]") {
  ProgramDevice d;
  Program p({64});
  p.task({whole(SIMPLER_TAG_INPUT, 0)});
  const simpler_run_config cfg = diag_config(5, false, "");
  CHECK(d.run(p.w.bytes, &cfg, p.host.tensors) == SIMPLER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(d.error(), Catch::Contains("swimlane 5") && Catch::Contains("1..4"));
}

TEST_CASE("a chip trace without an output_prefix is read back and writes nothing",
          "[chip][trace]") {
  ProgramDevice d;
  Program p = random_trace_program(9, 12);
  run_program(d, p, diag_config(1, false, ""));
  check_each_task_once(kernels_per_task(api_trace(d)), p.oracle.tasks());
}

TEST_CASE("ChipWorker::last_run_trace returns the chip's trace of its last run", "[chip][trace]") {
  using namespace simpler;
  TraceTempDir dir;
  ChipWorker chip(1);
  chip.init();
  const int id = chip.register_callable(testing::chipw_callable("fill", "fill"));
  std::vector<std::int64_t> out(8, 0);
  TaskArgs args;
  args.add_tensor(make_tensor(std::span(out)), TensorArgType::OutputExisting).add_scalar(5);
  CHECK(chip.last_run_trace().event_count == 0);  // no run yet

  CallConfig config;
  config.enable_l2_swimlane = 1;
  std::strncpy(config.output_prefix.data(), dir.path().c_str(), config.output_prefix.size() - 1);
  chip.run(id, args, config);
  const simpler_trace_info t = chip.last_run_trace();
  int kernels = 0;
  for (std::uint64_t i = 0; i < t.event_count; ++i) {
    if (t.events[i].kind == SIMPLER_TRACE_KERNEL) {
      ++kernels;
      CHECK(std::string(t.track_names[t.events[i].track]).rfind("AICore AIV", 0) == 0);
    }
  }
  CHECK(kernels == 1);
  CHECK(out[3] == 5);
  CHECK(std::filesystem::exists(run_dir(dir.path(), 1, 0) + "/trace.json"));

  chip.run(id, args);  // diagnostics off
  CHECK(chip.last_run_trace().event_count == 0);
  CHECK_FALSE(std::filesystem::exists(run_dir(dir.path(), 1, 1)));
}

}  // namespace simpler_test_chip_trace
