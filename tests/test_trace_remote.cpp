// Traces across remote links (SocketTransport): a traced L4 run shows what its remote L3s (and
// their chips) did, on the L4's clock even when the remote's clock is far off, and loses nothing
// silently when the remote's records do not fit what the L4 reads back. The same over
// MpiTransport is in tests/mpi/test_mpi_trace.cpp.
//
// Servers run in processes of their own (support/remote_server.hpp), forked before the test's
// Worker starts a thread; SIMPLER_REMOTE_TRACE_SKEW_NS, set before the fork, moves the clock a
// server reports in (detail/remote_trace.hpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/chip_modules.hpp"
#include "support/recording_leaf.hpp"
#include "support/remote_server.hpp"
#include "support/trace_files.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_trace_remote {

using namespace simpler;
using namespace simpler::testing;

namespace {

/// The parent's registration of an orchestration function a remote serves: its body runs there.
void served_remotely(Orchestrator&, TaskArgsView, const CallConfig&) {
  throw std::logic_error("this orchestration function runs on a remote worker, not here");
}

/// Sets SIMPLER_REMOTE_TRACE_SKEW_NS for the servers forked in its scope.
struct Skew {
  explicit Skew(std::int64_t ns) {
    ::setenv("SIMPLER_REMOTE_TRACE_SKEW_NS", std::to_string(ns).c_str(), 1);
  }
  ~Skew() { ::unsetenv("SIMPLER_REMOTE_TRACE_SKEW_NS"); }
  Skew(const Skew&) = delete;
  Skew& operator=(const Skew&) = delete;
};

RemoteServerOptions server_options(WorkerOptions inner) {
  RemoteServerOptions o;
  o.worker = std::move(inner);
  o.buffer_pool_bytes = std::uint64_t{64} << 20;
  o.log = false;
  return o;
}

/// x += scalar 0 over tensor 0 (int64).
void add_scalar(TaskArgsView v) {
  const ContinuousTensor& t = v.tensor(0);
  auto* x = t.as<std::int64_t>();
  for (std::uint64_t i = 0; i < t.numel(); ++i) x[i] += static_cast<std::int64_t>(v.scalar(0));
}

/// "add": add_scalar over tensor 0 in two halves, one sub task each.
void serve_add(RemoteSession& s) {
  const CallableHandle sub = s.worker().register_sub("add_half", add_scalar);
  s.serve_orch("add", [sub](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    const ContinuousTensor& t = v.tensor(0);
    const std::uint32_t n = t.shapes[0];
    auto* x = t.as<std::int64_t>();
    for (const auto& [first, count] : {std::pair{0U, n / 2}, std::pair{n / 2, n - n / 2}}) {
      o.submit_sub(sub, TaskArgs()
                            .add_tensor(make_tensor(x + first, {count}, DataType::Int64),
                                        TensorArgType::InOut)
                            .add_scalar(v.scalar(0)));
    }
  });
}

/// "chip_fill": chip 0 of the inner L3 writes scalar 0 into every element of tensor 0.
void serve_chip_fill(RemoteSession& s) {
  const CallableHandle fill = s.worker().register_chip(chipw_callable("fill", "fill"));
  s.serve_orch("chip_fill", [fill](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    o.submit_next_level(
        fill,
        TaskArgs().add_tensor(v.tensor(0), TensorArgType::OutputExisting).add_scalar(v.scalar(0)),
        default_call_config(), 0);
  });
}

/// Slack for where a remote event may land against its task's slice: the clock-sync error on
/// loopback is the round trip (microseconds; milliseconds under sanitizers on a loaded machine).
/// The skews the tests use are an hour.
constexpr double kSlackUs = 50'000;

}  // namespace

TEST_CASE(
    "a traced L4 run shows its remote L3s' tasks and chips inside their slices, whatever "
    "the remote's clock",
    "[trace][remote]") {
  std::int64_t skew = 0;
  SECTION("the same clock") {
    skew = 0;
  }
  SECTION("a remote clock an hour ahead") {
    skew = 3'600'000'000'000;
  }
  SECTION("a remote clock an hour behind") {
    skew = -3'600'000'000'000;
  }
  INFO("skew " << skew << " ns");
  const Skew env(skew);
  ServerProcess adds(server_options(thread_options(2)), serve_add);
  WorkerOptions chip_l3 = thread_options(0);
  chip_l3.child_mode = ChildMode::Process;
  chip_l3.device_ids = {0};
  ServerProcess chips(server_options(chip_l3), serve_chip_fill);

  WorkerOptions top = thread_options(0);
  top.level = 4;
  Worker w(top);
  RemoteWorkerSpec spec0 = adds.spec();
  spec0.window = 4;  // independent tasks go out together: several traced TASKs in flight
  const WorkerId r0 = w.add_remote_worker(spec0);
  const WorkerId r1 = w.add_remote_worker(chips.spec());
  const auto add_h = w.register_orch("add", served_remotely);
  const auto fill_h = w.register_orch("chip_fill", served_remotely);
  w.init();

  constexpr std::uint32_t kN = 64;
  constexpr int kIndependent = 6;
  const RemoteBuffer b0 = w.remote_alloc(r0, (kIndependent + 1) * kN * sizeof(std::int64_t));
  const RemoteBuffer b1 = w.remote_alloc(r1, kN * sizeof(std::int64_t));
  const std::vector<std::int64_t> zeros((kIndependent + 1) * kN, 0);
  w.copy_to_remote(b0, 0, zeros.data(), zeros.size() * sizeof(std::int64_t));

  TempDir dir;
  w.run(
      [&](Orchestrator& o, TaskArgsView, const CallConfig&) {
        const CallConfig& cfg = default_call_config();
        o.submit_next_level(
            fill_h,
            TaskArgs()
                .add_tensor(b1.tensor_of<std::int64_t>(0, kN), TensorArgType::OutputExisting)
                .add_scalar(25),
            cfg, r1);
        // A chain of two on the first block, then independent tasks on the others.
        for (std::uint64_t a : {3, 4}) {
          o.submit_next_level(
              add_h,
              TaskArgs()
                  .add_tensor(b0.tensor_of<std::int64_t>(0, kN), TensorArgType::InOut)
                  .add_scalar(a),
              cfg, r0);
        }
        for (std::uint32_t i = 1; i <= kIndependent; ++i) {
          o.submit_next_level(
              add_h,
              TaskArgs()
                  .add_tensor(b0.tensor_of<std::int64_t>(i * kN, kN), TensorArgType::InOut)
                  .add_scalar(i),
              cfg, r0);
        }
      },
      {}, diagnostics_config(dir.path(), 2, false));

  // The results first: tracing changed nothing.
  std::vector<std::int64_t> got((kIndependent + 1) * kN);
  w.copy_from_remote(b0, 0, got.data(), got.size() * sizeof(std::int64_t));
  for (std::uint32_t i = 0; i < got.size(); ++i) {
    const std::int64_t want = i < kN ? 7 : static_cast<std::int64_t>(i / kN);
    if (got[i] != want) FAIL("element " << i << " is " << got[i] << ", not " << want);
  }
  std::vector<std::int64_t> filled(kN);
  w.copy_from_remote(b1, 0, filled.data(), kN * sizeof(std::int64_t));
  CHECK(filled == std::vector<std::int64_t>(kN, 25));

  const TraceIndex t(read_text(dir.file("trace.json")));
  CHECK(t.doc["otherData"]["dropped_events"].integer() == 0);
  const int l4 = t.pid_of("L4");
  const int adds_pid = t.pid_of("L3 worker 0");
  const int chips_pid = t.pid_of("L3 worker 1");
  const int chip_pid = t.pid_of("L3 worker 1 / chip 0");
  REQUIRE(l4 > 0);
  REQUIRE(adds_pid > 0);
  REQUIRE(chips_pid > 0);
  REQUIRE(chip_pid > 0);
  CHECK(t.thread_names(adds_pid).count("sub worker 1") == 1);

  // The L4's tasks: one slice each, ok; the chip task is task 1, the adds 2..9.
  const auto l4_tasks = t.tasks_of(l4, 1);
  REQUIRE(l4_tasks.size() == 1 + 2 + kIndependent);
  std::vector<Span> add_slices;
  Span fill_slice{};
  for (const auto& k : l4_tasks) {
    const auto& s = t.tasks.at(k);
    REQUIRE(s.size() == 1);
    CHECK(s.front().outcome == "ok");
    CHECK(s.front().dur >= 0);
    const Span span{s.front().ts, s.front().ts + s.front().dur};
    if (std::get<2>(k) == 1) {
      fill_slice = span;
    } else {
      add_slices.push_back(span);
    }
  }

  // Each remote task was one run of the remote's Worker: its sub tasks lie inside one of the
  // L4's slices of that remote, on the L4's clock (an hour off when the skew was not undone).
  const auto add_runs = runs_of(t, adds_pid);
  CHECK(add_runs.size() == add_slices.size());
  for (long long run : add_runs) {
    CHECK(t.tasks_of(adds_pid, run).size() == 2);
    const Span all = run_span(t, adds_pid, run);
    INFO("remote run " << run << " spans " << all.begin << ".." << all.end << " us");
    bool found = false;
    for (const Span& outer : add_slices) found = found || inside(all, outer, kSlackUs);
    CHECK(found);
  }
  // The chip's remote: one run, whose chip task and the chip's kernels lie in the fill slice.
  CHECK(runs_of(t, chips_pid).size() == 1);
  for (const Span& s : task_spans(t, chips_pid, *runs_of(t, chips_pid).begin())) {
    CHECK(inside(s, fill_slice, kSlackUs));
  }
  const auto kernels = kernel_spans(t, chip_pid);
  CHECK_FALSE(kernels.empty());
  for (const Span& k : kernels) {
    INFO("kernel " << k.begin << ".." << k.end << " us; fill " << fill_slice.begin << ".."
                   << fill_slice.end);
    CHECK(inside(k, fill_slice, kSlackUs));
  }

  // An untraced run after it: no trace asked of the remotes, none written.
  TempDir quiet;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(add_h,
                        TaskArgs()
                            .add_tensor(b0.tensor_of<std::int64_t>(0, kN), TensorArgType::InOut)
                            .add_scalar(1),
                        default_call_config(), r0);
  });
  CHECK(quiet.files().empty());
  w.copy_from_remote(b0, 0, got.data(), kN * sizeof(std::int64_t));
  CHECK(got[0] == 8);
  w.close();
}

TEST_CASE("remote trace records over what the L4 reads back are dropped whole and counted",
          "[trace][remote]") {
  constexpr int kTasks = 3000;  // some 10000 events at level 2: far over 64 KiB of records
  ServerProcess server(server_options(thread_options(1)), [](RemoteSession& s) {
    const CallableHandle noop = s.worker().register_sub("noop", [](TaskArgsView) {});
    s.serve_orch("many", [noop](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (int i = 0; i < kTasks; ++i) o.submit_sub(noop);
    });
  });
  WorkerOptions top = thread_options(0);
  top.level = 4;
  Worker w(top);
  RemoteWorkerSpec spec = server.spec();
  spec.max_payload = 65536;  // the smallest a link reads
  const WorkerId r = w.add_remote_worker(spec);
  const auto many = w.register_orch("many", served_remotely);
  w.init();
  TempDir dir;
  w.run([&](Orchestrator& o, TaskArgsView,
            const CallConfig&) { o.submit_next_level(many, TaskArgs(), default_call_config(), r); },
        {}, diagnostics_config(dir.path(), 2, false));
  const TraceIndex t(read_text(dir.file("trace.json")));
  const int l4 = t.pid_of("L4");
  REQUIRE(l4 > 0);
  // The remote task itself is there, ok; its Worker's records are not, and are counted.
  const auto tasks = t.tasks_of(l4, 1);
  REQUIRE(tasks.size() == 1);
  CHECK(t.tasks.at(tasks.front()).front().outcome == "ok");
  CHECK(t.pid_of("L3 worker 0") == -1);
  CHECK(t.doc["otherData"]["dropped_events"].integer() >= kTasks);
  w.close();
}

TEST_CASE("ClockSync keeps the offset of the exchange with the least network delay",
          "[trace][remote]") {
  detail::ClockSync sync;
  CHECK_FALSE(sync.known());
  // The peer's clock is 1'000'000 ns ahead. An exchange with 100 ns out and 300 ns back
  // (asymmetric): the estimate is off by (100 - 300) / 2 = -100 ns.
  constexpr std::int64_t kAhead = 1'000'000;
  sync.sample(10'000, 10'000 + 100 + 5'000 + 300, 10'000 + 100 + kAhead,
              10'000 + 100 + 5'000 + kAhead);
  REQUIRE(sync.known());
  CHECK(sync.offset() == kAhead - 100);
  CHECK(sync.error_bound() == 200);
  // A slower exchange (10 us each way) right after does not replace it...
  sync.sample(20'000, 20'000 + 10'000 + 1'000 + 10'000, 20'000 + 10'000 + kAhead,
              20'000 + 10'000 + 1'000 + kAhead);
  CHECK(sync.offset() == kAhead - 100);
  // ...a faster, symmetric one does, and is exact.
  sync.sample(30'000, 30'000 + 50 + 2'000 + 50, 30'000 + 50 + kAhead, 30'000 + 50 + 2'000 + kAhead);
  CHECK(sync.offset() == kAhead);
  CHECK(sync.error_bound() == 50);
  // Long after (100 ppm of 10 s = 1 ms of ageing), a slower exchange wins again: drift.
  const std::int64_t later = 10'000'000'000;
  sync.sample(later, later + 500 + 500 + 500, later + 500 + kAhead + 7,
              later + 500 + 500 + kAhead + 7);
  CHECK(sync.offset() == kAhead + 7);
  // Impossible exchanges (time running backwards) are ignored.
  sync.sample(5, 4, 0, 0);
  sync.sample(5, 6, 10, 9);
  CHECK(sync.offset() == kAhead + 7);
}

TEST_CASE("shifting trace records moves times, never addresses or byte counts", "[trace]") {
  detail::TraceProcess p;
  p.name = "L3";
  p.tracks = {"orchestrator", "scheduler", "sub worker 0"};
  p.callables = {"f"};
  auto ev = [](detail::TraceKind k, std::int64_t t0, std::int64_t t1) {
    detail::TraceEvent e;
    e.kind = k;
    e.t0 = t0;
    e.t1 = t1;
    return e;
  };
  using K = detail::TraceKind;
  p.events = {ev(K::Submit, 100, 0),   ev(K::Edge, 0, 4096),      ev(K::Ready, 110, 0),
              ev(K::Dispatch, 120, 0), ev(K::Run, 130, 180),      ev(K::Skip, 190, 0),
              ev(K::Pass, 200, 210),   ev(K::Tensor, 0x7000, 64), ev(K::Chip, 140, 150)};
  std::vector<std::byte> blob;
  detail::serialize_trace({p}, blob);
  REQUIRE(detail::shift_trace_records(blob, -100));
  std::vector<detail::TraceProcess> back;
  REQUIRE(detail::deserialize_trace(blob.data(), blob.size(), back));
  REQUIRE(back.size() == 1);
  const auto& e = back[0].events;
  REQUIRE(e.size() == p.events.size());
  CHECK(e[0].t0 == 0);
  CHECK((e[1].t0 == 0 && e[1].t1 == 4096));  // an edge: t1 is bytes
  CHECK(e[2].t0 == 10);
  CHECK(e[3].t0 == 20);
  CHECK((e[4].t0 == 30 && e[4].t1 == 80));
  CHECK(e[5].t0 == 90);
  CHECK((e[6].t0 == 100 && e[6].t1 == 110));
  CHECK((e[7].t0 == 0x7000 && e[7].t1 == 64));  // a tensor: address and bytes
  CHECK((e[8].t0 == 40 && e[8].t1 == 50));
  CHECK(back[0].name == "L3");
  CHECK(back[0].tracks == p.tracks);

  std::vector<std::byte> junk(40, std::byte{7});
  const auto before = junk;
  CHECK_FALSE(detail::shift_trace_records(junk, 5));
  CHECK(junk == before);
}

}  // namespace simpler_test_trace_remote
