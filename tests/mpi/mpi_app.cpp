// The entry of tests/mpi/mpi_app (see mpi_app.hpp): ranks 1..N-1 serve, rank 0 runs Catch2 with
// the command line's test filter. The Session on rank 0 ends the job for the serving ranks when
// main returns, whatever the tests did.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>

#include "mpi/mpi_app.hpp"
#include "support/recording_leaf.hpp"

namespace simpler::testing::mpi_app {

namespace {

simpler::mpi::Session* g_session = nullptr;

/// Each rank's inner L3: forked sub workers and a forked chip on the simulated device 0.
WorkerOptions inner_options() {
  WorkerOptions o = thread_options(2);
  o.child_mode = ChildMode::Process;  // the rank's buffer pool is shared with its children
  o.device_ids = {0};
  return o;
}

/// Short deadlines: a test that hangs ends the job with a message, well before the watchdog.
simpler::mpi::SessionOptions session_options() {
  simpler::mpi::SessionOptions o;
  o.attach_timeout = std::chrono::seconds(30);
  o.control_timeout = std::chrono::seconds(60);
  return o;
}

}  // namespace

simpler::mpi::Session& session() {
  if (g_session == nullptr) throw UsageError("mpi_app: no Session (rank 0 only, inside main)");
  return *g_session;
}

WorkerOptions l4_options() {
  WorkerOptions o = thread_options(0);
  o.level = 4;
  return o;
}

}  // namespace simpler::testing::mpi_app

int main(int argc, char** argv) {
  using namespace simpler::testing::mpi_app;
  try {
    simpler::mpi::Session s(argc, argv, session_options());
    if (s.rank() != 0) {
      return s.serve(
          [&s](simpler::RemoteSession& rs) {
            // "whoami" (any test): tensor 0 = this rank.
            rs.serve_orch("whoami", [&s](simpler::Orchestrator&, simpler::TaskArgsView v,
                                         const simpler::CallConfig&) {
              *v.tensor(0).as<std::int64_t>() = s.rank();
            });
            serve_conformance(rs);
            serve_cluster(rs, s);
            serve_trace(rs);
          },
          inner_options());
    }
    g_session = &s;
    const int failed = Catch::Session().run(argc, argv);
    g_session = nullptr;
    return failed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_app: %s\n", e.what());
    return 1;
  }
}
