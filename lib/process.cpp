// Forked children: parent-death signal, liveness polling, reaping.
#include "simpler/detail/process.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

namespace simpler::detail {

void become_child_of(pid_t parent) noexcept {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died between fork and prctl: then nobody will send the signal.
  if (::getppid() != parent) ::_exit(1);
}

namespace {
std::atomic<std::uint64_t> g_fork_generation{0};
void bump_fork_generation() noexcept {
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

std::uint64_t fork_generation() noexcept {
  // Registered once, on first use (before the first Worker forks anything).
  static const bool registered = ::pthread_atfork(nullptr, nullptr, &bump_fork_generation) == 0;
  (void)registered;
  return g_fork_generation.load(std::memory_order_relaxed);
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

namespace {
// Whether /proc says `pid` is stopped right now ('T' stopped, 't' tracing stop).
bool stopped_now(pid_t pid) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return true;  // cannot tell: trust the stop report
  char buf[512];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'.
  const char* close = std::strrchr(buf, ')');
  if (close == nullptr || close[1] == '\0' || close[2] == '\0') return true;
  return close[2] == 'T' || close[2] == 't';
}
}  // namespace

void kill_and_reap(pid_t pid) noexcept {
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

std::optional<std::string> poll_exit(pid_t pid) noexcept {
  int status = 0;
  const pid_t r = ::waitpid(pid, &status, WNOHANG | WUNTRACED);
  if (r == 0) return std::nullopt;
  if (r == pid && WIFSTOPPED(status)) {
    if (!stopped_now(pid)) return std::nullopt;  // continued since (job control): still alive
    kill_and_reap(pid);
    try {
      const int sig = WSTOPSIG(status);
      const char* name = ::strsignal(sig);
      return fmt::format("stopped by signal {} ({}) and was killed", sig,
                         name != nullptr ? name : "?");
    } catch (...) {
      return std::string("stopped and was killed");
    }
  }
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
    const pid_t r = ::waitpid(pid, &status, WNOHANG | WUNTRACED);
    if (r == pid && WIFSTOPPED(status)) {
      if (!stopped_now(pid)) continue;
      kill_and_reap(pid);  // a stopped child would sit out the whole grace period
      return {"was stopped and had to be killed", false};
    }
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
