// tests/mpi/mpi_app: one SPMD program, the MpiTransport tests. `mpirun -np 3 mpi_app [catch args]`:
//
//   rank 0: a Catch2 session; each test case builds an L4 Worker over the serving ranks
//   │       (Worker::add_mpi_workers(session())) and closes it at its end
//   ├── rank 1: L3 Worker (Session::serve) ─┬── sub worker 0, 1 (forked)
//   │                                       └── chip 0          (forked, simulated device)
//   └── rank 2: the same
//
// A serving rank serves every callable any test needs, for the whole job: "whoami" (tensor 0 =
// the rank, in mpi_app.cpp), and each test file's own (serve_conformance, serve_cluster). Rank 0
// registers each under the same name (register_orch with served_remotely as body) and submits it
// to a rank.
#pragma once

#include <simpler/mpi/mpi.hpp>
#include <simpler/simpler.hpp>

#include <cstdint>
#include <vector>

namespace simpler::testing::mpi_app {

/// The job's Session (rank 0: what the tests add the ranks from).
simpler::mpi::Session& session();

/// Rank 0's L4 Worker: no local children (the ranks are its only ones), so nothing forks after
/// MPI started and every test may build a new one.
WorkerOptions l4_options();

/// The body rank 0 registers a served callable with: it runs on the rank, never here.
inline void served_remotely(Orchestrator&, TaskArgsView, const CallConfig&) {}

/// One int64 word, 0, in a buffer of each of `ranks` (for "whoami" and "meet" to write).
inline std::vector<RemoteBuffer> word_per_rank(Worker& w, const std::vector<WorkerId>& ranks) {
  std::vector<RemoteBuffer> out;
  const std::int64_t zero = 0;
  for (const WorkerId r : ranks) {
    out.push_back(w.remote_alloc(r, sizeof zero));
    w.copy_to_remote(out.back(), 0, &zero, sizeof zero);
  }
  return out;
}
/// The word of `b` as a task's output.
inline TaskArgs word_output(const RemoteBuffer& b) {
  return TaskArgs().add_tensor(b.tensor_of<std::int64_t>(0, 1), TensorArgType::OutputExisting);
}
/// The word of `b`, between runs.
inline std::int64_t read_word(Worker& w, const RemoteBuffer& b) {
  std::int64_t v = 0;
  w.copy_from_remote(b, 0, &v, sizeof v);
  return v;
}

// What each test file serves (called on every serving rank, before its inner Worker's init()).
void serve_conformance(RemoteSession& rs);                        // test_mpi_conformance.cpp
void serve_cluster(RemoteSession& rs, simpler::mpi::Session& s);  // test_mpi_cluster.cpp
void serve_trace(RemoteSession& rs);                              // test_mpi_trace.cpp

}  // namespace simpler::testing::mpi_app
