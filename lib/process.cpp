// Forked children: parent-death signal, liveness polling, reaping.
#include "simpler/detail/process.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace simpler::detail {

void become_child_of(pid_t parent) noexcept {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died between fork and prctl: then nobody will send the signal.
  if (::getppid() != parent) ::_exit(1);
}

bool parent_alive(pid_t parent) noexcept {
  return ::getppid() == parent;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return fmt::format("killed by signal {} ({})", sig, name != nullptr ? name : "?");
  }
  return fmt::format("ended with wait status {:#x}", status);
}

std::optional<std::string> poll_exit(pid_t pid) noexcept {
  int status = 0;
  const pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == 0) return std::nullopt;
  try {
    if (r == pid) return describe_status(status);
    return fmt::format("cannot be waited for ({})", std::strerror(errno));
  } catch (...) {
    return std::string("ended");
  }
}

ReapResult reap(pid_t pid, std::chrono::milliseconds grace) noexcept {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      try {
        return {describe_status(status), WIFEXITED(status) && WEXITSTATUS(status) == 0};
      } catch (...) {
        return {"ended", false};
      }
    }
    if (r < 0) return {"was already reaped", false};
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return {"did not exit within its shutdown deadline and was killed", false};
}

}  // namespace simpler::detail
