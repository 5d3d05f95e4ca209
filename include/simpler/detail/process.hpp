// simpler::detail — process plumbing for forked children: parent-death signal, fork hygiene,
// liveness polling, reaping.
#pragma once

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>

namespace simpler::detail {

/// In a freshly forked child: die with the parent (PR_SET_PDEATHSIG = SIGKILL), and exit at once
/// if the parent is already gone. Async-signal-safe calls only.
inline void become_child_of(pid_t parent) noexcept {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died between fork and prctl: then nobody will send the signal.
  if (::getppid() != parent) ::_exit(1);
}

/// The thread-count variables of the common kernel libraries (OpenMP, OpenBLAS, MKL, BLIS).
inline constexpr const char* kThreadCountVariables[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                        "MKL_NUM_THREADS", "BLIS_NUM_THREADS"};

/// In a freshly forked child of a process Worker, before its leaf starts: sets every variable of
/// kThreadCountVariables the user did not set to "1", so a kernel library in each child starts
/// one thread instead of one per core (N children x N cores threads on N cores). A value the
/// user set, in the environment or with setenv before init(), is kept. Changes only this
/// process's environment (and what its own children inherit).
inline void limit_library_threads() noexcept {
  for (const char* name : kThreadCountVariables) ::setenv(name, "1", /*overwrite=*/0);
}

/// Whether `parent` is still this process's parent.
[[nodiscard]] inline bool parent_alive(pid_t parent) noexcept {
  return ::getppid() == parent;
}

/// Set once MPI started in this process (mpi::Session::start). Open MPI runs threads of its own
/// from then on, so a Worker that would fork children refuses to (every fork precedes every
/// thread).
inline std::atomic<bool>& mpi_started_flag() noexcept {
  static std::atomic<bool> started{false};
  return started;
}

/// The counter behind fork_generation(), bumped in every forked child.
inline std::atomic<std::uint64_t>& fork_generation_counter() noexcept {
  static std::atomic<std::uint64_t> generation{0};
  return generation;
}

/// A pthread_atfork child handler: the child's counter differs from its parent's.
inline void bump_fork_generation() noexcept {
  // Relaxed: the handler runs in the new process on its only thread, before fork() returns there.
  fork_generation_counter().fetch_add(1, std::memory_order_relaxed);
}

/// A number that changes in a process's forked children (a pthread_atfork handler bumps it in
/// every child): a Worker records it at init() and refuses to run in a child that forked since.
inline std::uint64_t fork_generation() noexcept {
  // Registered once per process, on first use (before the first Worker forks anything).
  static const bool registered = ::pthread_atfork(nullptr, nullptr, &bump_fork_generation) == 0;
  (void)registered;
  // Relaxed: the value changes only in a child's atfork handler, before that process has a second
  // thread; every thread of a process therefore reads that process's value.
  return fork_generation_counter().load(std::memory_order_relaxed);
}

/// Describes a waitpid status.
inline std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return fmt::format("killed by signal {} ({})", sig, name != nullptr ? name : "?");
  }
  return fmt::format("ended with wait status {:#x}", status);
}

/// Whether /proc says `pid` is stopped right now ('T' stopped, 't' tracing stop). True when it
/// cannot tell (trust the stop report then).
inline bool stopped_now(pid_t pid) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return true;
  char buf[512];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'.
  const char* close = std::strrchr(buf, ')');
  if (close == nullptr || close[1] == '\0' || close[2] == '\0') return true;
  return close[2] == 'T' || close[2] == 't';
}

/// Kills `pid` with SIGKILL and reaps it (a child that must not go on).
inline void kill_and_reap(pid_t pid) noexcept {
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

/// Non-blocking check: if `pid` has exited, reaps it and describes how ("exited with code 3",
/// "killed by signal 9 (Killed)"); nullopt while it runs. A child that is stopped (SIGSTOP,
/// SIGTSTP, ...) counts as gone: it is killed, reaped, and described as "stopped by signal 19
/// (...) and was killed". (A stop reported for a child that has already been continued, as after
/// a shell's Ctrl-Z and fg, is ignored.)
inline std::optional<std::string> poll_exit(pid_t pid) noexcept {
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

/// How reap() found a child.
struct ReapResult {
  std::string how;
  bool clean = false;  ///< exited with code 0 within the grace period
};

/// Waits up to `grace` for `pid` to exit, then SIGKILLs and reaps it. Returns how it ended, and
/// whether it ended by itself (false when it had to be killed).
inline ReapResult reap(pid_t pid, std::chrono::milliseconds grace) noexcept {
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
