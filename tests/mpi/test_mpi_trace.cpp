// Traces across MpiTransport: a traced L4 run on rank 0 shows what the ranks' L3s, their forked
// sub workers and their chips did, on rank 0's clock although the ranks report in a clock an
// hour off (ctest sets SIMPLER_REMOTE_TRACE_SKEW_NS for the job; the ranks say what they read).
// The same over SocketTransport is in tests/test_trace_remote.cpp.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "mpi/mpi_app.hpp"
#include "support/trace_files.hpp"

using namespace simpler;
using namespace simpler::testing;
using namespace simpler::testing::mpi_app;

namespace {

/// The skew tests/mpi/CMakeLists.txt gives the mpi.suite.trace job.
constexpr std::int64_t kRankSkew = 3'600'000'000'000;
/// Slack for where a rank's event may land against its task's slice (the clock-sync error over
/// loopback TCP; milliseconds under sanitizers).
constexpr double kSlackUs = 50'000;
constexpr std::uint32_t kTraceN = 256;  ///< floats per tensor

}  // namespace

namespace simpler::testing::mpi_app {

void serve_trace(RemoteSession& rs) {
  // "trace_skew": tensor 0 = the skew this rank reports its trace times with.
  rs.serve_orch("trace_skew", [](Orchestrator&, TaskArgsView v, const CallConfig&) {
    *v.tensor(0).as<std::int64_t>() = simpler::detail::served_trace_skew();
  });
}

}  // namespace simpler::testing::mpi_app

TEST_CASE("a traced run over MPI ranks shows their L3s, subs and chips inside their slices",
          "[mpitrace]") {
  Worker w(l4_options());
  const auto skew_h = w.register_orch("trace_skew", served_remotely);
  const auto vector_h = w.register_orch("vector", served_remotely);
  const auto axpy_h = w.register_orch("axpy", served_remotely);
  const auto ranks = w.add_mpi_workers(session());
  REQUIRE(ranks.size() == 2);
  w.init();

  // The ranks' clocks really are an hour off (else this test would prove nothing about mapping).
  const auto words = word_per_rank(w, ranks);
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (std::size_t r = 0; r < 2; ++r)
      o.submit_next_level(skew_h, word_output(words[r]), default_call_config(), ranks[r]);
  });
  for (std::size_t r = 0; r < 2; ++r) REQUIRE(read_word(w, words[r]) == kRankSkew);

  // Per rank: a, b, f, y, z of kTraceN floats. f = vector(a, b) on the chip; y += 3 f then z += 1 f
  // on the forked subs (both read f; y and z are independent: two TASKs in flight at once).
  const std::size_t bytes = std::size_t{kTraceN} * sizeof(float);
  std::vector<RemoteBuffer> buf;
  for (const WorkerId r : ranks) {
    buf.push_back(w.remote_alloc(r, 5 * bytes));
    const std::vector<float> zeros(5 * kTraceN, 0.0F);
    w.copy_to_remote(buf.back(), 0, zeros.data(), 5 * bytes);
  }
  auto t = [&](std::size_t r, std::uint32_t slot) {
    return buf[r].tensor(slot * bytes, {kTraceN}, DataType::Float32);
  };
  TempDir dir;
  std::array<std::vector<long long>, 2> tasks_of_rank;  // L4 task ids, submission order from 1
  w.run(
      [&](Orchestrator& o, TaskArgsView, const CallConfig&) {
        long long id = 0;
        for (std::size_t r = 0; r < 2; ++r) {
          o.submit_next_level(vector_h,
                              TaskArgs().add_tensor(t(r, 0)).add_tensor(t(r, 1)).add_tensor(
                                  t(r, 2), TensorArgType::OutputExisting),
                              default_call_config(), ranks[r]);
          tasks_of_rank[r].push_back(++id);
          for (const auto& [slot, alpha] : {std::pair{3U, 3U}, std::pair{4U, 1U}}) {
            o.submit_next_level(axpy_h,
                                TaskArgs()
                                    .add_tensor(t(r, 2))
                                    .add_tensor(t(r, slot), TensorArgType::InOut)
                                    .add_scalar(alpha),
                                default_call_config(), ranks[r]);
            tasks_of_rank[r].push_back(++id);
          }
        }
      },
      {}, diagnostics_config(dir.path(), 2, false));

  // The results: f = (0 + 0 + 1)(0 + 0 + 2) + 0 = 2, y = 6, z = 2.
  for (std::size_t r = 0; r < 2; ++r) {
    std::vector<float> got(5 * kTraceN);
    w.copy_from_remote(buf[r], 0, got.data(), 5 * bytes);
    CHECK(std::vector<float>(got.begin() + 2 * kTraceN, got.begin() + 3 * kTraceN) ==
          std::vector<float>(kTraceN, 2.0F));
    CHECK(std::vector<float>(got.begin() + 3 * kTraceN, got.begin() + 4 * kTraceN) ==
          std::vector<float>(kTraceN, 6.0F));
    CHECK(std::vector<float>(got.begin() + 4 * kTraceN, got.end()) ==
          std::vector<float>(kTraceN, 2.0F));
  }

  const TraceIndex tr(read_text(dir.file("trace.json")));
  CHECK(tr.doc["otherData"]["dropped_events"].integer() == 0);
  const int l4 = tr.pid_of("L4");
  REQUIRE(l4 > 0);
  REQUIRE(tr.tasks_of(l4, 2).size() == 6);  // run 1 asked the ranks for their skew
  for (std::size_t r = 0; r < 2; ++r) {
    const std::string name = fmt::format("L3 worker {}", ranks[r]);
    INFO(name);
    const int pid = tr.pid_of(name);
    const int chip = tr.pid_of(name + " / chip 0");
    REQUIRE(pid > 0);
    REQUIRE(chip > 0);
    std::vector<Span> outer;
    for (long long id : tasks_of_rank[r]) {
      const auto& s = tr.tasks.at({l4, 2, id});
      REQUIRE(s.size() == 1);
      CHECK(s.front().outcome == "ok");
      outer.push_back({s.front().ts, s.front().ts + s.front().dur});
    }
    // One remote run per L4 task; each inside one of this rank's L4 slices, on rank 0's clock.
    const auto runs = runs_of(tr, pid);
    CHECK(runs.size() == tasks_of_rank[r].size());
    for (long long run : runs) {
      const Span all = run_span(tr, pid, run);
      INFO("run " << run << " at " << all.begin << ".." << all.end << " us");
      bool found = false;
      for (const Span& o : outer) found = found || inside(all, o, kSlackUs);
      CHECK(found);
    }
    // The chip's kernels inside the vector task's slice (the rank's first).
    const auto kernels = kernel_spans(tr, chip);
    CHECK_FALSE(kernels.empty());
    for (const Span& k : kernels) CHECK(inside(k, outer.front(), kSlackUs));
  }
  w.close();
}
