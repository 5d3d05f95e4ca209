// An L4 on rank 0 over the L3s of ranks 1 and 2: tasks on both at once, chips and forked sub
// workers on each, data moved between them through remote buffers, a rank's failure.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <semaphore.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpi/mpi_app.hpp"
#include "support/chip_workloads.hpp"

using namespace simpler;
using namespace simpler::testing;
using namespace simpler::testing::mpi_app;
using Catch::Matchers::Contains;

namespace {

// ---- The rendezvous: two tasks that can only both succeed when they run at the same time.

/// How long a task waits for its peer: long past any scheduling delay, short of the watchdog.
constexpr int kMeetSeconds = 20;

/// The POSIX named semaphore by which `rank` announces itself in rendezvous `token`.
std::string meet_name(std::uint64_t token, std::uint64_t rank) {
  return fmt::format("/simpler-rv-{:016x}-{}", token, rank);
}

/// "meet": scalars token and peer rank. Announces this rank (posts its semaphore), then waits up
/// to kMeetSeconds for the peer's announcement; writes this rank into tensor 0. Were the two
/// tasks run one after the other, the first would wait in vain and throw.
void meet(int me, TaskArgsView v) {
  const std::uint64_t token = v.scalar(0);
  const std::uint64_t peer = v.scalar(1);
  const std::string mine_name = meet_name(token, static_cast<std::uint64_t>(me));
  const std::string theirs_name = meet_name(token, peer);
  sem_t* mine = ::sem_open(mine_name.c_str(), O_CREAT, 0600, 0);
  if (mine == SEM_FAILED) throw SystemError("meet: sem_open " + mine_name, errno);
  sem_t* theirs = ::sem_open(theirs_name.c_str(), O_CREAT, 0600, 0);
  if (theirs == SEM_FAILED) {
    const int err = errno;
    ::sem_close(mine);
    throw SystemError("meet: sem_open " + theirs_name, err);
  }
  ::sem_post(mine);
  timespec deadline{};
  ::clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += kMeetSeconds;
  int rc = 0;
  while ((rc = ::sem_timedwait(theirs, &deadline)) != 0 && errno == EINTR) {
  }
  const int err = rc == 0 ? 0 : errno;
  ::sem_close(mine);
  ::sem_close(theirs);
  if (rc != 0) {
    throw std::runtime_error(
        fmt::format("meet: MPI rank {} waited {} s for rank {} to run at the same time ({})", me,
                    kMeetSeconds, peer, err == ETIMEDOUT ? "it did not" : std::strerror(err)));
  }
  *v.tensor(0).as<std::int64_t>() = me;
}

/// Removes a rendezvous' semaphores (rank 0, after the run, whatever happened: all ranks of the
/// test job share this host's /dev/shm).
struct MeetCleanup {
  std::uint64_t token;
  ~MeetCleanup() {
    for (std::uint64_t rank : {1, 2}) ::sem_unlink(meet_name(token, rank).c_str());
  }
};

bool semaphore_exists(const std::string& name) {
  sem_t* s = ::sem_open(name.c_str(), 0);
  if (s == SEM_FAILED) return false;
  ::sem_close(s);
  return true;
}

// ---- The chip DAG: vector_example on each rank's chip, axpy on its forked sub workers.

constexpr std::uint32_t kN = 4096;  ///< floats per tensor

/// Each rank's buffer holds these tensors of kN floats, in this order.
enum TensorSlot : std::uint32_t { kA, kB, kF, kY, kX, kG, kSlots };

/// vector_example's f = (a + b + 1)(a + b + 2) + (a + b), as its kernels compute it.
float vector_f(float a, float b) {
  const float c = a + b;
  const float d = c + 1.0F;
  const float e = c + 2.0F;
  const float g = d * e;
  return g + c;
}

/// One rank's tensors on rank 0: what goes in, and the sequential reference of what comes out.
struct RankValues {
  std::vector<float> a, b, f, y, x, g;
};

/// Inputs of rank index r (0 or 1) in repetition `rep`: small integers, so every value the DAG
/// computes (below 2^21) is exact in float and the reference equals the result bit for bit.
RankValues inputs(std::uint32_t r, std::uint32_t rep) {
  RankValues v;
  v.a.resize(kN);
  v.b.resize(kN);
  v.y.resize(kN);
  for (std::uint32_t i = 0; i < kN; ++i) {
    v.a[i] = static_cast<float>((i + 3 * r + rep) % 8);
    v.b[i] = static_cast<float>((5 * i + r) % 7);
    v.y[i] = static_cast<float>((i + rep) % 5);
  }
  return v;
}

/// How many elements differ (a CHECK of two vectors would print all of them).
std::size_t mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) bad += got.at(i) != want[i] ? 1 : 0;
  return bad;
}

/// "axpy": y (tensor 1, InOut) += scalar 0 * x (tensor 0), float32, on one sub task.
void axpy_f32(TaskArgsView v) {
  const ContinuousTensor& x = v.tensor(0);
  const ContinuousTensor& y = v.tensor(1);
  const auto alpha = static_cast<float>(v.scalar(0));
  for (std::uint64_t i = 0; i < y.numel(); ++i) y.as<float>()[i] += alpha * x.as<const float>()[i];
}

}  // namespace

namespace simpler::testing::mpi_app {

void serve_cluster(RemoteSession& rs, simpler::mpi::Session& s) {
  const int me = s.rank();
  Worker& w = rs.worker();
  rs.serve_orch("meet", [me](Orchestrator&, TaskArgsView v, const CallConfig&) { meet(me, v); });
  rs.serve_orch("fails_here", [me](Orchestrator&, TaskArgsView, const CallConfig&) {
    throw std::runtime_error(fmt::format("the flux capacitor of rank {} is cold", me));
  });
  // "vector": the chip's vector_example, tensors a, b (Input), f (OutputExisting).
  const CallableHandle chip = w.register_chip(vector_callable());
  rs.serve_orch("vector", [chip](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    o.submit_next_level(chip,
                        TaskArgs()
                            .add_tensor(v.tensor(0), TensorArgType::Input)
                            .add_tensor(v.tensor(1), TensorArgType::Input)
                            .add_tensor(v.tensor(2), TensorArgType::OutputExisting),
                        default_call_config(), 0);
  });
  // "axpy": y += alpha x, split in two halves over the forked sub workers.
  const CallableHandle axpy = w.register_sub("axpy_f32", axpy_f32);
  rs.serve_orch("axpy", [axpy](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    const ContinuousTensor& x = v.tensor(0);
    const ContinuousTensor& y = v.tensor(1);
    const auto half = static_cast<std::uint32_t>(y.numel() / 2);
    const auto rest = static_cast<std::uint32_t>(y.numel() - half);
    for (const auto& [at, n] : {std::pair{0U, half}, std::pair{half, rest}}) {
      o.submit_sub(axpy, TaskArgs()
                             .add_tensor(make_tensor(x.as<float>() + at, {n}, DataType::Float32))
                             .add_tensor(make_tensor(y.as<float>() + at, {n}, DataType::Float32),
                                         TensorArgType::InOut)
                             .add_scalar(v.scalar(0)));
    }
  });
}

}  // namespace simpler::testing::mpi_app

TEST_CASE("two tasks directed at ranks 1 and 2 run at the same time", "[cluster][concurrency]") {
  Worker w(l4_options());
  const auto meet_h = w.register_orch("meet", served_remotely);
  const auto ranks = w.add_mpi_workers(session());
  REQUIRE(ranks.size() == 2);
  w.init();
  const std::vector<RemoteBuffer> out = word_per_rank(w, ranks);
  const MeetCleanup cleanup{std::random_device{}() ^
                            (static_cast<std::uint64_t>(::getpid()) << 32)};
  // No dependency between the two: the L4 hands them to the two rank lanes at once.
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (std::size_t i = 0; i < 2; ++i) {
      o.submit_next_level(meet_h,
                          word_output(out[i])
                              .add_scalar(cleanup.token)
                              .add_scalar(2 - i),  // the peer: rank 2 for rank 1, and back
                          default_call_config(), ranks[i]);
    }
  });
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(read_word(w, out[i]) == static_cast<std::int64_t>(i + 1));  // each ran where directed
  }
  w.close();
  for (std::uint64_t rank : {1, 2}) {
    ::sem_unlink(meet_name(cleanup.token, rank).c_str());
    CHECK_FALSE(semaphore_exists(meet_name(cleanup.token, rank)));
  }
}

TEST_CASE("an L4 over two rank L3s with chips and forked subs runs a DAG across them",
          "[cluster][chip]") {
  Worker w(l4_options());
  const auto vector_h = w.register_orch("vector", served_remotely);
  const auto axpy_h = w.register_orch("axpy", served_remotely);
  const auto ranks = w.add_mpi_workers(session());
  REQUIRE(ranks.size() == 2);
  w.init();
  const std::size_t bytes = std::size_t{kN} * sizeof(float);
  std::vector<RemoteBuffer> buf;
  for (const WorkerId r : ranks) buf.push_back(w.remote_alloc(r, kSlots * bytes));
  auto t = [&](std::size_t r, TensorSlot s) {
    return buf[r].tensor(s * bytes, {kN}, DataType::Float32);
  };
  auto put = [&](std::size_t r, TensorSlot s, const std::vector<float>& v) {
    w.copy_to_remote(buf[r], s * bytes, v.data(), bytes);
  };
  auto get = [&](std::size_t r, TensorSlot s) {
    std::vector<float> v(kN);
    w.copy_from_remote(buf[r], s * bytes, v.data(), bytes);
    return v;
  };

  // One run on both ranks at once: on rank index r, vector(in[0], in[1]) into in[2] on the chip,
  // then axpy[1] += (alpha + r) axpy[0] on the subs.
  auto vector_then_axpy = [&](std::array<TensorSlot, 3> in, std::array<TensorSlot, 2> axpy,
                              std::uint64_t alpha) {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (std::size_t r = 0; r < 2; ++r) {
        o.submit_next_level(vector_h,
                            TaskArgs()
                                .add_tensor(t(r, in[0]))
                                .add_tensor(t(r, in[1]))
                                .add_tensor(t(r, in[2]), TensorArgType::OutputExisting),
                            default_call_config(), ranks[r]);
        o.submit_next_level(axpy_h,
                            TaskArgs()
                                .add_tensor(t(r, axpy[0]))
                                .add_tensor(t(r, axpy[1]), TensorArgType::InOut)
                                .add_scalar(alpha + r),
                            default_call_config(), ranks[r]);
      }
    });
  };

  // Twice over the same buffers: the second repetition's inputs overwrite the first's results.
  for (std::uint32_t rep = 0; rep < 2; ++rep) {
    INFO("repetition " << rep);
    RankValues want[2] = {inputs(0, rep), inputs(1, rep)};
    for (std::size_t r = 0; r < 2; ++r) {
      put(r, kA, want[r].a);
      put(r, kB, want[r].b);
      put(r, kY, want[r].y);
    }
    // Run 1, on both ranks at once: f = vector(a, b) on the chip, then y += (2 + r) f on the subs
    // (it reads f: the L4 orders it after the chip task).
    vector_then_axpy({kA, kB, kF}, {kF, kY}, 2);
    for (std::size_t r = 0; r < 2; ++r) {
      want[r].f.resize(kN);
      for (std::uint32_t i = 0; i < kN; ++i) {
        want[r].f[i] = vector_f(want[r].a[i], want[r].b[i]);
        want[r].y[i] += static_cast<float>(2 + r) * want[r].f[i];
      }
    }
    // Between the runs, each rank's f goes to the other rank's x, through rank 0.
    for (std::size_t r = 0; r < 2; ++r) {
      put(1 - r, kX, get(r, kF));
      want[1 - r].x = want[r].f;
    }
    // Run 2: g = vector(y, x) on the chip, then g += (1 + r) x on the subs.
    vector_then_axpy({kY, kX, kG}, {kX, kG}, 1);
    for (std::size_t r = 0; r < 2; ++r) {
      want[r].g.resize(kN);
      for (std::uint32_t i = 0; i < kN; ++i) {
        want[r].g[i] = vector_f(want[r].y[i], want[r].x[i]);
        want[r].g[i] += static_cast<float>(1 + r) * want[r].x[i];
      }
    }
    // The sequential reference, bit for bit (every value is a small integer).
    for (std::size_t r = 0; r < 2; ++r) {
      INFO("MPI rank " << r + 1);
      CHECK(mismatches(get(r, kF), want[r].f) == 0);
      CHECK(mismatches(get(r, kY), want[r].y) == 0);
      CHECK(mismatches(get(r, kG), want[r].g) == 0);
    }
  }
  w.close();
}

TEST_CASE("a callable that throws on rank 2 fails the run with the rank's context, the next runs",
          "[cluster][failure]") {
  Worker w(l4_options());
  const auto fails = w.register_orch("fails_here", served_remotely);
  const auto whoami = w.register_orch("whoami", served_remotely);
  const auto ranks = w.add_mpi_workers(session());
  REQUIRE(ranks.size() == 2);
  w.init();
  const std::vector<RemoteBuffer> out = word_per_rank(w, ranks);
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(whoami, word_output(out[0]), default_call_config(), ranks[0]);
      o.submit_next_level(fails, TaskArgs(), default_call_config(), ranks[1]);
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK(e.outcome() == Outcome::TaskFailure);
    CHECK(e.level() == 4);
    CHECK(e.callable() == "fails_here");
    CHECK_THAT(e.worker(), Contains("MPI rank 2"));
    CHECK_THAT(e.message(),
               Contains("on MPI rank 2: 'fails_here' on the L3 Worker of MPI rank 2 (") &&
                   Contains(": the flux capacitor of rank 2 is cold"));
    CHECK_THAT(e.what(), Contains("L4 MPI rank 2") && Contains("callable 'fails_here' failed"));
  }
  CHECK(read_word(w, out[0]) == 1);  // the independent task on rank 1 ran
  // The job goes on: both ranks run the next run (into fresh words).
  const std::vector<RemoteBuffer> again = word_per_rank(w, ranks);
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (std::size_t i = 0; i < 2; ++i)
      o.submit_next_level(whoami, word_output(again[i]), default_call_config(), ranks[i]);
  });
  CHECK(read_word(w, again[0]) == 1);
  CHECK(read_word(w, again[1]) == 2);
  w.close();
}
