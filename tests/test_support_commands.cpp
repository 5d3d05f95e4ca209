// The helpers the process tests run commands and forked children with: run_command's watchdog
// snapshot, and what it and wait_child report when the OS will not let them wait.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "support/child_wait.hpp"
#include "support/commands.hpp"
#include "support/trace_files.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_support_commands {

using namespace simpler::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

/// SIGCHLD ignored while it lives: the kernel reaps children itself, so waitpid fails (ECHILD).
struct ChildrenReapedByKernel {
  struct sigaction old {};
  ChildrenReapedByKernel() {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    REQUIRE(::sigaction(SIGCHLD, &ign, &old) == 0);
  }
  ~ChildrenReapedByKernel() { ::sigaction(SIGCHLD, &old, nullptr); }
};

}  // namespace

// A command its watchdog is about to end is described while it still runs (after the watchdog
// there is nothing to look at), and one that ends in time is not.
TEST_CASE("run_command describes a command its watchdog is about to end and no other",
          "[hardening]") {
  const TempDir dir;
  const std::string log = dir.file("cmd.log");
  const std::string marker = fmt::format("run-command-{}", ::getpid());
  CommandOptions o;
  o.seconds = 2;
  o.kill_after = 1;
  o.env = {"SIMPLER_TEST_MARKER=" + marker};
  int asked = 0;
  o.before_watchdog = [&] {
    ++asked;
    return describe(processes_with_env("SIMPLER_TEST_MARKER", marker));
  };
  const CommandResult stuck = run_command({"sleep", "30"}, log, o);
  CHECK(stuck.code == 124);
  CHECK(asked == 1);
  INFO(stuck.overdue);
  // The snapshot names the sleeping command and where the kernel holds it.
  CHECK_THAT(stuck.overdue, Contains("sleep 30") && Contains("(parent "));
  CHECK(stuck.elapsed >= 1500ms);

  const CommandResult quick = run_command({"true"}, log, o);
  CHECK(quick.code == 0);
  CHECK(asked == 1);
  CHECK(quick.overdue.empty());
  CHECK(quick.elapsed < 1s);
}

// A waitpid that fails (here ECHILD: the kernel already reaped the command) is a failed command
// with the reason in its output, never exit 0; with the snapshot poll and without it.
TEST_CASE("run_command reports a command it could not wait for as failed", "[hardening]") {
  const TempDir dir;
  const std::string log = dir.file("cmd.log");
  const ChildrenReapedByKernel reaped;
  const CommandResult plain = run_command({"true"}, log);
  CHECK(plain.code == -1);
  CHECK_THAT(plain.output, Contains("waitpid(") && Contains("No child processes"));

  CommandOptions o;
  o.seconds = 5;
  int asked = 0;
  o.before_watchdog = [&] {
    ++asked;
    return std::string("snapshot");
  };
  const CommandResult polled = run_command({"true"}, log, o);
  CHECK(polled.code == -1);
  CHECK_THAT(polled.output, Contains("No child processes"));
  CHECK(asked == 0);  // it ended long before the watchdog
  CHECK(polled.elapsed < 4s);
}

namespace {

/// A forked child that runs `body` and exits with what it returns.
template <class Body>
pid_t fork_child(Body body) {
  std::fflush(nullptr);  // nothing buffered here is written twice
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(body());
  return pid;
}

}  // namespace

TEST_CASE("wait_child tells an exit, a signal, a deadline and a failed wait apart", "[hardening]") {
  const ChildExit three = wait_child(fork_child([] { return 3; }), 20s);
  CHECK(three.exited_with(3));
  CHECK_FALSE(three.exited_with(0));
  CHECK(three.describe() == "exited with code 3");

  // SIGKILL: Catch2 handles SIGTERM in this process, and the child inherits its handlers.
  const auto kill_self = [] {
    ::raise(SIGKILL);
    return 0;
  };
  const ChildExit killed = wait_child(fork_child(kill_self), 20s);
  CHECK_FALSE(killed.timed_out);
  CHECK_FALSE(killed.exited_with(0));
  CHECK(killed.describe() == fmt::format("killed by signal {}", SIGKILL));

  const auto t0 = std::chrono::steady_clock::now();
  const auto wait_forever = [] {
    ::pause();  // until the deadline's SIGKILL
    return 0;
  };
  const ChildExit late = wait_child(fork_child(wait_forever), 200ms);
  CHECK(late.timed_out);
  CHECK(late.wait_error == 0);
  CHECK_FALSE(late.exited_with(0));
  CHECK(late.describe() == "still running at the deadline: killed");
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);

  // Reaped by the kernel (SIGCHLD ignored): waitpid fails with ECHILD. That is not a timeout,
  // and it returns at once instead of waiting out the deadline.
  const ChildrenReapedByKernel reaped;
  const auto t1 = std::chrono::steady_clock::now();
  const ChildExit lost = wait_child(fork_child([] { return 0; }), 20s);
  CHECK(lost.wait_error == ECHILD);
  CHECK_FALSE(lost.timed_out);
  CHECK_FALSE(lost.exited_with(0));
  CHECK_THAT(lost.describe(), Contains("waitpid failed") && Contains("No child processes"));
  CHECK(std::chrono::steady_clock::now() - t1 < 10s);
}

}  // namespace simpler_test_support_commands
