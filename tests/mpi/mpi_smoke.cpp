// Canary for the MPI installation, independent of simpler: if this fails, the tests in this
// directory fail for reasons that are not ours. Plain MPI C API, run by ctest as `mpi.smoke` with
// 3 ranks. It asks for MPI_THREAD_MULTIPLE (what MpiTransport needs) and checks that rank 0 can
// ping-pong a message with every other rank.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "unknown";
  }
}

int fail(const char* what, int rank) {
  std::fprintf(stderr, "mpi_smoke: rank %d: %s\n", rank, what);
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = -1;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "mpi_smoke: MPI_Init_thread failed\n");
    return 1;
  }
  int rank = -1;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0) {
    std::printf("mpi_smoke: %d ranks, asked for MPI_THREAD_MULTIPLE, provided %s\n", size,
                thread_level_name(provided));
    std::fflush(stdout);
  }
  if (size < 2) {
    return fail("needs at least 2 ranks", rank);
  }

  constexpr int kTag = 7;
  constexpr int kRounds = 100;
  if (rank == 0) {
    for (int peer = 1; peer < size; ++peer) {
      for (int i = 0; i < kRounds; ++i) {
        int value = peer * 1000 + i;
        MPI_Send(&value, 1, MPI_INT, peer, kTag, MPI_COMM_WORLD);
        int echoed = -1;
        MPI_Recv(&echoed, 1, MPI_INT, peer, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (echoed != value + 1) {
          return fail("wrong echo", rank);
        }
      }
    }
    std::printf("mpi_smoke: ping-pong with %d peers OK\n", size - 1);
  } else {
    for (int i = 0; i < kRounds; ++i) {
      int value = -1;
      MPI_Recv(&value, 1, MPI_INT, 0, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      ++value;
      MPI_Send(&value, 1, MPI_INT, 0, kTag, MPI_COMM_WORLD);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return EXIT_SUCCESS;
}
