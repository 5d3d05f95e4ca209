// simpler::detail — process plumbing for forked children (lib/process.cpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace simpler::detail {

/// In a freshly forked child: die with the parent (PR_SET_PDEATHSIG = SIGKILL), and exit at once
/// if the parent is already gone. Async-signal-safe calls only.
void become_child_of(pid_t parent) noexcept;

/// Whether `parent` is still this process's parent.
[[nodiscard]] bool parent_alive(pid_t parent) noexcept;

/// Non-blocking check: if `pid` has exited, reaps it and describes how ("exited with code 3",
/// "killed by signal 9 (Killed)"); nullopt while it runs. A child that is stopped (SIGSTOP,
/// SIGTSTP, ...) counts as gone: it is killed, reaped, and described as "stopped by signal 19
/// (...) and was killed". (A stop reported for a child that has already been continued, as after
/// a shell's Ctrl-Z and fg, is ignored.)
std::optional<std::string> poll_exit(pid_t pid) noexcept;

/// Kills `pid` with SIGKILL and reaps it (a child that must not go on).
void kill_and_reap(pid_t pid) noexcept;

/// Waits up to `grace` for `pid` to exit, then SIGKILLs and reaps it. Returns how it ended, and
/// whether it ended by itself (false when it had to be killed).
struct ReapResult {
  std::string how;
  bool clean = false;  ///< exited with code 0 within the grace period
};
ReapResult reap(pid_t pid, std::chrono::milliseconds grace) noexcept;

/// A number that changes in a process's forked children (a pthread_atfork handler bumps it in
/// every child): a Worker records it at init() and refuses to run in a child that forked since.
std::uint64_t fork_generation() noexcept;

/// Describes a waitpid status.
std::string describe_status(int status);

}  // namespace simpler::detail
