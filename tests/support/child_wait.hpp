// Test support: waits for a forked child with a deadline, and never leaves it behind.
//
// The wait sleeps on a pidfd (poll wakes when the child exits), so it costs no polling loop and
// sees the exit at once; where pidfd_open is refused, it falls back to WNOHANG polls every
// millisecond. A child still running at the deadline is killed and reaped: the result then says
// so, and a test that expected an exit fails instead of hanging or leaking the process. A waitpid
// that fails (the child is not ours, or was reaped elsewhere) is reported as that, not as a
// timeout.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include <fmt/format.h>

namespace simpler::testing {

struct ChildExit {
  bool timed_out = false;  ///< still running at the deadline: killed and reaped
  int wait_error = 0;      ///< errno of a waitpid that failed (not our child, reaped elsewhere)
  int status = 0;          ///< waitpid's status (valid when neither of the above)

  /// Exited normally with `code` (not killed, not at the deadline, and waited for).
  [[nodiscard]] bool exited_with(int code) const noexcept {
    return !timed_out && wait_error == 0 && WIFEXITED(status) && WEXITSTATUS(status) == code;
  }
  /// How it ended, for a failing test's message.
  [[nodiscard]] std::string describe() const {
    if (wait_error != 0) {
      return fmt::format("could not wait for the child: waitpid failed: {}",
                         std::strerror(wait_error));
    }
    if (timed_out) return "still running at the deadline: killed";
    if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
    return fmt::format("ended with wait status {:#x}", status);
  }
};

/// Waits until `pid` (a child of this process) ends or `deadline` passes, and leaves it running
/// then. True when the wait is over: the child was reaped (`status` holds how it ended) or cannot
/// be waited for (`wait_error` holds waitpid's errno); false at the deadline.
inline bool await_exit(pid_t pid, std::chrono::steady_clock::time_point deadline, int& status,
                       int& wait_error) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  bool over = false;
  for (;;) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) {
      over = true;
      break;
    }
    if (got < 0 && errno != EINTR) {  // not our child, or already reaped: nothing to wait for
      wait_error = errno;
      over = true;
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left.count()) + 1);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (fd >= 0) ::close(fd);
  return over;
}

/// Waits until `pid` (a child of this process) ends or `timeout` passes; kills it then.
inline ChildExit wait_child(pid_t pid, std::chrono::milliseconds timeout) {
  ChildExit r;
  if (!await_exit(pid, std::chrono::steady_clock::now() + timeout, r.status, r.wait_error)) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
    }
    r.timed_out = true;
  }
  return r;
}

}  // namespace simpler::testing
