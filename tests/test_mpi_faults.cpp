// The MPI transport's faults seen from outside the job: each test runs one scenario of
// tests/mpi/mpi_faults.cpp as `timeout -k 5 20 mpirun ... -np 3 mpi_faults <scenario>` with a
// marker unique to the test in the environment (the ranks and their forked subs inherit it), then
// checks the exit code, the output, and /proc: no live process may carry the marker afterwards.
// The watchdog is the deadline: a job that is cut off exits 124 and fails the test.
// Only in builds with the MPI transport and Open MPI's mpirun (tests/CMakeLists.txt defines
// SIMPLER_MPI_FAULTS); elsewhere this file is empty.
#ifdef SIMPLER_MPI_FAULTS

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "support/commands.hpp"
#include "support/remote_probes.hpp"

using namespace simpler::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

/// The watchdog of every job: it ends within this or the test fails (each takes ~0.5-1.5 s).
constexpr int kJobSeconds = 20;
/// The processes of a job besides mpirun and timeout: 3 ranks, 2 forked subs on each serving rank.
constexpr int kRanksAndSubs = 3 + 2 * 2;

/// One mpi_faults job, run to its end by the constructor; the destructor kills whatever carries
/// its marker still (only after a failed check) and removes its scratch directory.
class FaultJob {
 public:
  explicit FaultJob(const std::string& scenario) {
    std::random_device rd;
    marker_ = fmt::format("mpi-faults-{}-{:08x}{:08x}", ::getpid(), rd(), rd());
    char dir[] = "/tmp/simpler-mpi-faults-XXXXXX";
    if (::mkdtemp(dir) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = dir;
    std::vector<std::string> argv{SIMPLER_MPIRUN_ARGV, "-np", "3", SIMPLER_MPI_FAULTS, scenario};
    CommandOptions o;
    o.seconds = kJobSeconds;
    o.kill_after = 5;
    o.env = {"SIMPLER_TEST_MARKER=" + marker_};
    result_ = run_command(std::move(argv), dir_ + "/job.log", o);
  }
  FaultJob(const FaultJob&) = delete;
  FaultJob& operator=(const FaultJob&) = delete;
  ~FaultJob() {
    for (const auto& p : processes_with_env("SIMPLER_TEST_MARKER", marker_)) ::kill(p.pid, SIGKILL);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  [[nodiscard]] int code() const noexcept { return result_.code; }
  [[nodiscard]] const std::string& output() const noexcept { return result_.output; }
  [[nodiscard]] std::string summary() const {
    return fmt::format("mpirun exited with {} after {} ms; its output:\n{}", result_.code,
                       result_.elapsed.count(), result_.output);
  }

  /// The live processes that carry the marker once the job's dead have had up to 5 s to go
  /// (a rank killed by mpirun is gone a little after mpirun itself returns).
  [[nodiscard]] std::vector<ProcessInfo> left_behind() const {
    std::vector<ProcessInfo> left;
    poll_until(
        [&] {
          left = processes_with_env("SIMPLER_TEST_MARKER", marker_);
          return left.empty();
        },
        5s);
    return left;
  }

  /// What rank 0 printed after init(): how many live processes carried the marker then.
  [[nodiscard]] int marked_while_running() const {
    std::smatch m;
    static const std::regex re("mpi_faults: ([0-9]+) live processes carry the marker");
    return std::regex_search(result_.output, m, re) ? std::stoi(m[1]) : -1;
  }

 private:
  std::string marker_;
  std::string dir_;
  CommandResult result_;
};

/// The checks every scenario shares: the job ended by itself, the marker reached the ranks and
/// their forked subs (at least `min_marked` processes carried it while rank 0 ran, when it
/// counted: else "nothing left" would prove nothing), and nothing is left.
void check_ended_and_clean(const FaultJob& job, int min_marked) {
  CHECK(job.code() != 124);  // the watchdog did not have to end it
  if (min_marked > 0) CHECK(job.marked_while_running() >= min_marked);
  const auto left = job.left_behind();
  INFO("processes left behind:" << describe(left));
  CHECK(left.empty());
}

}  // namespace

TEST_CASE("an MPI rank killed by SIGKILL inside a task ends the whole job, leaving no process",
          "[mpi][faults]") {
  FaultJob job("kill");
  INFO(job.summary());
  CHECK(job.code() != 0);
  CHECK_THAT(job.output(), Contains("mpi_faults: rank 2 (pid"));
  // mpirun names the rank and the signal.
  CHECK_THAT(job.output(), Contains("process rank 2") && Contains("exited on signal 9"));
  check_ended_and_clean(job, kRanksAndSubs);
}

TEST_CASE("an MPI task past its deadline ends the job with MPI_Abort naming rank and callable",
          "[mpi][faults]") {
  FaultJob job("deadline");
  INFO(job.summary());
  CHECK(job.code() == 1);  // MPI_Abort's code
  CHECK_THAT(job.output(), Contains("simpler mpi: rank 0 (") &&
                               Contains("the task 'stall' on MPI rank 2 passed its deadline of "
                                        "300 ms; ending the job (MPI is fail-stop)"));
  check_ended_and_clean(job, kRanksAndSubs);
}

TEST_CASE("a callable that throws on an MPI rank is an ordinary task failure and the job goes on",
          "[mpi][faults]") {
  FaultJob job("throw");
  INFO(job.summary());
  CHECK(job.code() == 0);
  CHECK_THAT(job.output(),
             Contains("mpi_faults: run() threw TaskError: outcome TaskFailure, level 4, worker "
                      "'MPI rank 2 (worker 1)', callable 'fail'"));
  CHECK_THAT(job.output(), Contains("on MPI rank 2: 'fail' on the L3 Worker of MPI rank 2") &&
                               Contains("mpi_faults: 'fail' failed as asked on rank 2"));
  CHECK_THAT(job.output(), Contains("mpi_faults: the next run works"));
  check_ended_and_clean(job, kRanksAndSubs);
}

TEST_CASE("an MPI rank whose setup throws fails rank 0's init() with its message and the job ends",
          "[mpi][faults]") {
  FaultJob job("setup");
  INFO(job.summary());
  CHECK(job.code() == 0);
  CHECK_THAT(job.output(), Contains("mpi_faults: init() threw RemoteError: MPI rank 2:") &&
                               Contains("mpi_faults: rank 2's setup failed as asked"));
  // 3 ranks and rank 1's 2 subs (rank 2's setup threw before its Worker forked).
  check_ended_and_clean(job, 3 + 2);
}

TEST_CASE("an MPI rank that sends rank 0 a frame of another session ends the job",
          "[mpi][faults]") {
  FaultJob job("bad_frame");
  INFO(job.summary());
  CHECK(job.code() == 2);  // the protocol's abort code
  CHECK_THAT(job.output(), Contains("simpler mpi: rank 0 (") &&
                               Contains("MPI rank 2 broke the protocol: HELLO frame: session id "
                                        "is 0xbad5e55") &&
                               Contains("ending the job (MPI is fail-stop)"));
  // Rank 0 ends the job inside init(), before it counts.
  check_ended_and_clean(job, 0);
}

TEST_CASE("a message with a tag the protocol does not use ends the job on the rank that got it",
          "[mpi][faults]") {
  FaultJob job("stray_tag");
  INFO(job.summary());
  CHECK(job.code() == 2);
  CHECK_THAT(job.output(), Contains("simpler mpi: rank 2 (") &&
                               Contains("rank 0 broke the protocol: a message with tag 7 between "
                                        "frames; ending the job (MPI is fail-stop)"));
  check_ended_and_clean(job, kRanksAndSubs);
}

#endif  // SIMPLER_MPI_FAULTS
