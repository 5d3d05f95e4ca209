// The transport conformance suite (support/conformance_suite.hpp) over MpiTransport: the same
// bodies as tests/test_conformance.cpp runs over the local and socket transports.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "mpi/mpi_app.hpp"
#include "support/conformance_suite.hpp"

using namespace simpler;
using namespace simpler::testing;
using namespace simpler::testing::conformance;
using Catch::Matchers::Contains;

namespace simpler::testing::mpi_app {

void serve_conformance(RemoteSession& rs) {
  serve_callables(rs);
}

}  // namespace simpler::testing::mpi_app

namespace {

/// An L4 Worker over the job's serving ranks; the suite's tasks go to rank 1, its words live in
/// one RemoteBuffer there.
class OnMpi : public RemoteWords<Worker> {
 public:
  static constexpr const char* kWorkerKind = "MPI rank 1";

  OnMpi() : w_(mpi_app::l4_options()) {
    register_callables(w_);
    const std::vector<WorkerId> ranks = w_.add_mpi_workers(mpi_app::session());
    w_.init();
    allocate(ranks.at(0));
  }

  /// The rank's failure travels as text: the rank names itself, the served function and its L3
  /// Worker, the inner L3 names its sub worker, and the original message comes last.
  static void check_message(const TaskError& e, const std::string& original) {
    CHECK_THAT(e.message(),
               Contains("on MPI rank 1: '" + e.callable() + "' on the L3 Worker of MPI rank 1 (") &&
                   Contains("sub worker") && Contains(": " + original));
  }

 private:
  Worker w_;
};

}  // namespace

TEST_CASE("random tagged DAGs match the oracle over MPI", "[conformance][dag]") {
  OnMpi fx;
  random_dags_match_the_oracle(fx);
}

TEST_CASE("a failing task skips its cone and names itself over MPI", "[conformance][failure]") {
  OnMpi fx;
  a_failing_task_skips_its_cone(fx);
}

TEST_CASE("outputs written by a task are read by the next over MPI", "[conformance][alloc]") {
  OnMpi fx;
  outputs_written_are_read_by_the_next(fx);
}
