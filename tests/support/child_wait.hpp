// Test support: waits for a forked child with a deadline, and never leaves it behind.
//
// The wait sleeps on a pidfd (poll wakes when the child exits), so it costs no polling loop and
// sees the exit at once; where pidfd_open is refused, it falls back to WNOHANG polls every
// millisecond. A child still running at the deadline is killed and reaped: the result then says
// so, and a test that expected an exit fails instead of hanging or leaking the process.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

namespace simpler::testing {

struct ChildExit {
  bool timed_out = false;  ///< still running at the deadline: killed and reaped
  int status = 0;          ///< waitpid's status

  /// Exited normally with `code` (not killed, and not at the deadline).
  [[nodiscard]] bool exited_with(int code) const noexcept {
    return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == code;
  }
};

/// Waits until `pid` (a child of this process) ends or `timeout` passes; kills it then.
inline ChildExit wait_child(pid_t pid, std::chrono::milliseconds timeout) {
  ChildExit r;
  const auto end = std::chrono::steady_clock::now() + timeout;
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  for (;;) {
    const pid_t got = ::waitpid(pid, &r.status, WNOHANG);
    if (got == pid) break;
    if (got < 0 && errno != EINTR) {  // not our child, or already reaped: nothing to wait for
      r.timed_out = true;
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
      }
      r.timed_out = true;
      break;
    }
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left.count()) + 1);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (fd >= 0) ::close(fd);
  return r;
}

}  // namespace simpler::testing
