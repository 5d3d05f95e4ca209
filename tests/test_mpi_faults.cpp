// The MPI transport's faults seen from outside the job: each test runs one scenario of
// tests/mpi/mpi_faults.cpp as `timeout -k 5 20 mpirun ... -np 3 mpi_faults <scenario>` with a
// marker unique to the test in the environment (the ranks and their forked subs inherit it), then
// checks the exit code, the output, and /proc: no live process may carry the marker afterwards.
// The watchdog is the deadline: a job that is cut off exits 124 and fails the test. One test puts
// each rank on a fake host of its own (a network namespace with a private /dev/shm, launched by
// mpirun's rsh agent); it needs root and `ip netns` and fails elsewhere unless
// SIMPLER_ALLOW_NETNS_SKIP is set (then it passes with a warning: Catch2 2 has no SKIP).
// Only in builds with the MPI transport and Open MPI's mpirun (tests/CMakeLists.txt defines
// SIMPLER_MPI_FAULTS); elsewhere this file is empty.
#ifdef SIMPLER_MPI_FAULTS

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/commands.hpp"
#include "support/remote_probes.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_mpi_faults {

using namespace simpler::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

/// The watchdog of every job: it ends within this or the test fails (each takes ~0.5-1.5 s on a
/// quiet machine; sanitized ranks in namespaces on a loaded one took over 20 s). A test case runs
/// one job, so the watchdog stays under the test's 60 s timeout.
constexpr int kJobSeconds = 40;
/// The processes of a job besides mpirun and timeout: 3 ranks, 2 forked subs on each serving rank.
constexpr int kRanksAndSubs = 3 + 2 * 2;

/// mpirun and the flags of every job on this host (cmake/SimplerMpi.cmake), without -np.
std::vector<std::string> local_mpirun() {
  return {SIMPLER_MPIRUN_ARGV};
}

/// One mpi_faults job, run to its end by the constructor (`mpirun` is the command line without
/// -np); the destructor kills whatever carries its marker still (only after a failed check) and
/// removes its scratch directory.
class FaultJob {
 public:
  /// `logs` (optional) lists more files whose text summary() shows.
  explicit FaultJob(const std::string& scenario, std::vector<std::string> mpirun = local_mpirun(),
                    std::function<std::vector<std::string>()> logs = {})
      : logs_(std::move(logs)) {
    std::random_device rd;
    marker_ = fmt::format("mpi-faults-{}-{:08x}{:08x}", ::getpid(), rd(), rd());
    char dir[] = "/tmp/simpler-mpi-faults-XXXXXX";
    if (::mkdtemp(dir) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = dir;
    std::vector<std::string> argv = std::move(mpirun);
    argv.insert(argv.end(), {"-np", "3", SIMPLER_MPI_FAULTS, scenario});
    CommandOptions o;
    o.seconds = kJobSeconds;
    o.kill_after = 5;
    // Open MPI leaks in its plugins at exit: under ASan the leak check would fail every rank's
    // exit (the mpirun-launched ctest entries set the same through SimplerMpi.cmake).
    const char* asan = std::getenv("ASAN_OPTIONS");
    // TMPDIR: Open MPI's session directory of this job's own, removed with its scratch
    // directory. Jobs of concurrent tests share the default one (/tmp/ompi.<host>.<uid>), and
    // Open MPI's cleanup of it races with another job's start (open-mpi/ompi#8510: "A call to
    // mkdir was unable to create the desired directory").
    o.env = {"SIMPLER_TEST_MARKER=" + marker_, "TMPDIR=" + dir_,
             fmt::format("ASAN_OPTIONS={}{}detect_leaks=0", asan != nullptr ? asan : "",
                         asan != nullptr && *asan != '\0' ? ":" : "")};
    // A job the watchdog has to end leaves nothing to look at afterwards: say where its
    // processes were stuck while they still are.
    o.before_watchdog = [this] {
      return "processes of the job a second before the watchdog:" +
             describe(processes_with_env("SIMPLER_TEST_MARKER", marker_));
    };
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
    std::string s = fmt::format("mpirun exited with {} after {} ms; {}{}its output:\n{}",
                                result_.code, result_.elapsed.count(), result_.overdue,
                                result_.overdue.empty() ? "" : "\n", result_.output);
    if (logs_) {
      for (const std::string& f : logs_()) s += fmt::format("\n{}:\n{}", f, slurp(f));
    }
    return s;
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
  std::function<std::vector<std::string>()> logs_;
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

/// Three fake hosts for mpirun: a network namespace each, joined by veth pairs to a bridge in this
/// namespace (198.19.<pid % 256>.0/24: the bridge .1, the hosts .10-.12). mpirun's rsh launcher
/// reaches them through an agent script that runs the daemon's command in the host's namespace
/// with a /dev/shm of its own (ip netns exec, unshare -m), so each rank and its forked subs share
/// neither network nor shared memory with the others, and with a TMPDIR of its own: the hosts
/// share the file system and a hostname, and daemons that take each other for the same host race
/// in Open MPI's session directory (seen: "mkdir ... jf.N: File exists", the daemon exits). The
/// destructor kills what is left in the namespaces and takes everything down, whatever happened.
class NamespacedHosts {
 public:
  NamespacedHosts() {
    const auto id = static_cast<unsigned>(::getpid());
    prefix_ = fmt::format("smf{}", id);
    subnet_ = fmt::format("198.19.{}", id % 256);
    char dir[] = "/tmp/simpler-mpi-netns-XXXXXX";
    if (::mkdtemp(dir) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = dir;
  }
  NamespacedHosts(const NamespacedHosts&) = delete;
  NamespacedHosts& operator=(const NamespacedHosts&) = delete;
  ~NamespacedHosts() {
    for (int i = 0; i < kHosts; ++i) {
      if (!ns_made_[i]) continue;
      // Anything still running in the namespace is this test's (after a failed check): kill it
      // by pid, or the namespace would outlive its name.
      const CommandResult r = quietly({"ip", "netns", "pids", ns(i)});
      std::istringstream pids(r.output);
      for (long pid = 0; pids >> pid;) ::kill(static_cast<pid_t>(pid), SIGKILL);
      quietly({"ip", "netns", "del", ns(i)});
    }
    // Deleting a namespace deletes its veth pair; these are for a half setup.
    for (int i = 0; i < kHosts; ++i) {
      if (link_made_[i]) quietly({"ip", "link", "del", host_if(i)});
    }
    if (bridge_made_) quietly({"ip", "link", "del", bridge()});
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  /// Why this host cannot make the namespaces, or empty.
  std::string unavailable() {
    if (::geteuid() != 0) return "it needs root (network namespaces, mounts)";
    const CommandResult r = quietly({"ip", "netns", "list"});
    if (r.code != 0) return fmt::format("`ip netns list` failed ({}): {}", r.code, r.output);
    return {};
  }

  void create() {
    must({"ip", "link", "add", bridge(), "type", "bridge"});
    bridge_made_ = true;
    must({"ip", "addr", "add", subnet_ + ".1/24", "dev", bridge()});
    must({"ip", "link", "set", bridge(), "up"});
    std::string agent_cases;
    for (int i = 0; i < kHosts; ++i) {
      must({"ip", "netns", "add", ns(i)});
      ns_made_[i] = true;
      must({"ip", "link", "add", host_if(i), "type", "veth", "peer", "name", ns_if(i)});
      link_made_[i] = true;
      must({"ip", "link", "set", ns_if(i), "netns", ns(i)});
      must({"ip", "link", "set", host_if(i), "master", bridge()});
      must({"ip", "link", "set", host_if(i), "up"});
      must({"ip", "netns", "exec", ns(i), "ip", "addr", "add", ip(i) + "/24", "dev", ns_if(i)});
      must({"ip", "netns", "exec", ns(i), "ip", "link", "set", ns_if(i), "up"});
      must({"ip", "netns", "exec", ns(i), "ip", "link", "set", "lo", "up"});
      agent_cases += fmt::format("  {}) ns={} ;;\n", ip(i), ns(i));
    }
    // mpirun calls it as ssh: `agent HOST COMMAND...`, the command to be run by a shell.
    std::ofstream(agent()) << fmt::format(
        "#!/bin/sh\n"
        "host=$1\n"
        "shift\n"
        "case \"$host\" in\n{1}"
        "  *) echo \"agent: unknown host $host\" >&2; exit 1 ;;\n"
        "esac\n"
        "log={0}/agent-$host.log\n"
        "export TMPDIR={0}/tmp-$host\n"
        "mkdir -p \"$TMPDIR\"\n"
        "echo \"agent: $(date +%T.%N) starts $*\" >>\"$log\"\n"
        "exec ip netns exec \"$ns\" unshare -m sh -c "
        "'mount -t tmpfs tmpfs /dev/shm && exec sh -c \"$0\"' \"$*\" 2>>\"$log\"\n",
        dir_, agent_cases);
    if (::chmod(agent().c_str(), 0755) != 0) throw std::runtime_error("chmod failed");
  }

  /// mpirun's command line (without -np) for one rank per host, rank i on host i: the flags of
  /// every job, with MPI traffic and mpirun's own channel on the bridge's subnet, not loopback.
  /// The daemons stay attached to their agents (not daemonized), so what they print on standard
  /// error reaches the agents' logs.
  [[nodiscard]] std::vector<std::string> mpirun() const {
    const std::vector<std::string> local = local_mpirun();
    std::vector<std::string> argv;
    for (std::size_t i = 0; i < local.size(); ++i) {
      if (local[i] == "--mca" && i + 1 < local.size() &&
          (local[i + 1] == "btl_tcp_if_include" || local[i + 1] == "oob_tcp_if_include")) {
        i += 2;  // the interface: set below
        continue;
      }
      argv.push_back(local[i]);
    }
    const std::string net = subnet_ + ".0/24";
    argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", net, "--mca", "oob_tcp_if_include", net,
                             "--mca", "plm_rsh_agent", agent(), "--mca", "plm_rsh_no_tree_spawn",
                             "1", "--leave-session-attached", "--host",
                             fmt::format("{},{},{}", ip(0), ip(1), ip(2))});
    return argv;
  }

  [[nodiscard]] std::string ip(int i) const { return fmt::format("{}.{}", subnet_, 10 + i); }

  /// The agent's log of each host that was launched: what it ran, and the standard error of
  /// `ip netns exec`, the mount and the daemon (mpirun keeps the daemons attached, so an error
  /// of theirs lands here instead of nowhere).
  [[nodiscard]] std::vector<std::string> agent_logs() const {
    std::vector<std::string> logs;
    for (int i = 0; i < kHosts; ++i) {
      const std::string f = fmt::format("{}/agent-{}.log", dir_, ip(i));
      if (std::filesystem::exists(f)) logs.push_back(f);
    }
    return logs;
  }

 private:
  static constexpr int kHosts = 3;

  [[nodiscard]] std::string ns(int i) const { return fmt::format("{}-{}", prefix_, i); }
  [[nodiscard]] std::string bridge() const { return prefix_ + "b"; }
  [[nodiscard]] std::string host_if(int i) const { return fmt::format("{}h{}", prefix_, i); }
  [[nodiscard]] std::string ns_if(int i) const { return fmt::format("{}n{}", prefix_, i); }
  [[nodiscard]] std::string agent() const { return dir_ + "/agent.sh"; }

  /// Runs a setup command; on failure the message names it and its output.
  void must(const std::vector<std::string>& argv) {
    const CommandResult r = run_command(argv, dir_ + "/cmd.log");
    if (r.code != 0) {
      throw std::runtime_error(
          fmt::format("`{}` exited with {}: {}", join(argv), r.code, r.output));
    }
  }
  CommandResult quietly(const std::vector<std::string>& argv) noexcept {
    try {
      CommandOptions quick;
      quick.seconds = 5;
      return run_command(argv, dir_ + "/quiet.log", quick);
    } catch (const std::exception& e) {
      CommandResult r;
      r.output = e.what();
      return r;
    }
  }

  std::string prefix_, subnet_, dir_;
  std::array<bool, kHosts> ns_made_{};
  std::array<bool, kHosts> link_made_{};
  bool bridge_made_ = false;
};

/// The namespaces each rank said it runs in: rank -> {"net:[...]", "mnt:[...]"}.
std::map<int, std::pair<std::string, std::string>> where_ranks_ran(const std::string& output) {
  std::map<int, std::pair<std::string, std::string>> out;
  static const std::regex re(
      R"(mpi_faults: rank ([0-9]+) runs in (net:\[[0-9]+\]) (mnt:\[[0-9]+\]))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
       it != std::sregex_iterator(); ++it) {
    out[std::stoi((*it)[1])] = {(*it)[2], (*it)[3]};
  }
  return out;
}

std::string own_namespace(const char* kind) {
  std::error_code ec;
  return std::filesystem::read_symlink(fmt::format("/proc/self/ns/{}", kind), ec).string();
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

TEST_CASE("rank 0 killed by SIGKILL during a run ends the whole MPI job, leaving no process",
          "[mpi][faults]") {
  FaultJob job("root_dies");
  INFO(job.summary());
  CHECK(job.code() != 0);
  CHECK_THAT(job.output(), Contains("mpi_faults: rank 0 (pid"));
  CHECK_THAT(job.output(), Contains("process rank 0") && Contains("exited on signal 9"));
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

// A rank stuck before MPI_Init (a setup or an inner init() that hangs) holds every other rank in
// MPI_Init_thread, whose start-up exchange needs all of them: rank 0 bounds its MPI start by the
// attach timeout (without it the job hangs until the test's watchdog: 124 after kJobSeconds).
TEST_CASE("an MPI rank stuck before it starts MPI ends the job at rank 0's attach deadline",
          "[mpi][stuck]") {
  FaultJob job("stuck_setup");
  INFO(job.summary());
  CHECK(job.code() != 0);
  CHECK_THAT(job.output(),
             Contains("simpler mpi: rank 0 (") && Contains("ending the job (MPI is fail-stop)"));
  check_ended_and_clean(job, 0);
}

/// Creates the namespaced hosts, or says why it cannot (false: the test is over).
bool create_hosts(NamespacedHosts& hosts) {
  if (const std::string why = hosts.unavailable(); !why.empty()) {
    if (std::getenv("SIMPLER_ALLOW_NETNS_SKIP") != nullptr) {
      WARN("skipped (SIMPLER_ALLOW_NETNS_SKIP is set): " << why);
      return false;
    }
    FAIL("this test puts MPI ranks in network namespaces, and "
         << why << "; run as root, or set SIMPLER_ALLOW_NETNS_SKIP to skip it");
  }
  hosts.create();
  return true;
}

// One job per test case: a job may take up to kJobSeconds (a loaded machine running sanitized
// ranks), and the test's own timeout is 60 s.
TEST_CASE("MPI ranks in separate network namespaces run tasks", "[mpi][netns]") {
  NamespacedHosts hosts;
  if (!create_hosts(hosts)) return;
  {
    FaultJob job("throw", hosts.mpirun(), [&hosts] { return hosts.agent_logs(); });
    INFO(job.summary());
    CHECK(job.code() == 0);
    CHECK_THAT(job.output(), Contains("mpi_faults: 'fail' failed as asked on rank 2") &&
                                 Contains("mpi_faults: the next run works"));
    // Each rank in a network and a mount namespace (its own /dev/shm) other than this test's,
    // and no two ranks in the same network namespace.
    const auto where = where_ranks_ran(job.output());
    REQUIRE(where.size() == 3);
    const std::string net = own_namespace("net");
    const std::string mnt = own_namespace("mnt");
    for (const auto& [rank, ns] : where) {
      INFO("rank " << rank << " ran in " << ns.first << " " << ns.second);
      CHECK(ns.first != net);
      CHECK(ns.second != mnt);
    }
    CHECK(where.at(0).first != where.at(1).first);
    CHECK(where.at(0).first != where.at(2).first);
    CHECK(where.at(1).first != where.at(2).first);
    check_ended_and_clean(job, kRanksAndSubs);
  }
}

TEST_CASE("MPI ranks in separate network namespaces: a killed one still ends the job",
          "[mpi][netns]") {
  NamespacedHosts hosts;
  if (!create_hosts(hosts)) return;
  {
    FaultJob job("kill", hosts.mpirun(), [&hosts] { return hosts.agent_logs(); });
    INFO(job.summary());
    CHECK(job.code() != 0);
    CHECK_THAT(job.output(), Contains("process rank 2") && Contains("on node " + hosts.ip(2)) &&
                                 Contains("exited on signal 9"));
    check_ended_and_clean(job, kRanksAndSubs);
  }
}

}  // namespace simpler_test_mpi_faults

#endif  // SIMPLER_MPI_FAULTS
