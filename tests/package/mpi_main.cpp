// Downstream consumer of simpler::mpi (see tests/package/CMakeLists.txt): the target brings MPI's
// headers and libraries, simpler's headers and SIMPLER_WITH_MPI.
#include <mpi.h>

#include <simpler/fwd.hpp>
#if __has_include(<simpler/mpi/mpi.hpp>)
#include <simpler/mpi/mpi.hpp>
#endif

#ifndef SIMPLER_WITH_MPI
#error "simpler::mpi must define SIMPLER_WITH_MPI"
#endif

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    return 1;
  }
  MPI_Finalize();
  return 0;
}
