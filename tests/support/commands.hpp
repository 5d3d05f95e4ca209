// Test support: running other programs from a test (ip, mpirun, the examples) under a watchdog
// with their output captured, and finding the processes they leave behind. Process-wide, not
// thread-safe: call from the test's main thread.
#pragma once

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "support/child_wait.hpp"

extern char** environ;

namespace simpler::testing {

struct CommandResult {
  int code = -1;  ///< exit code; 124 when `timeout` cut it off; -1 when it did not exit
  std::string output;
  std::chrono::milliseconds elapsed{0};  ///< from spawn to exit, for messages (never a check)
  /// What CommandOptions::before_watchdog said, when the command was still running then; else
  /// empty.
  std::string overdue;
};

struct CommandOptions {
  /// The watchdog (coreutils timeout): SIGTERM after `seconds`, SIGKILL `kill_after` later.
  int seconds = 10;
  int kill_after = 2;
  /// NAME=value entries added to (or replacing those in) this process's environment.
  std::vector<std::string> env;
  /// Called once when the command still runs a second before the watchdog's SIGTERM; what it
  /// returns goes to CommandResult::overdue. A hang leaves nothing to look at once the watchdog
  /// has struck, so this is where a test describes what its command was stuck in.
  std::function<std::string()> before_watchdog;
};

/// This process's environment with `extra` (NAME=value) added or replacing; the pointers live as
/// long as `extra` and the environment do.
inline std::vector<char*> environment_with(const std::vector<std::string>& extra) {
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool replaced = false;
    for (const auto& x : extra) {
      const auto eq = x.find('=');
      if (eq != std::string::npos &&
          entry.substr(0, eq + 1) == std::string_view(x).substr(0, eq + 1))
        replaced = true;
    }
    if (!replaced) env.push_back(*e);
  }
  for (const auto& x : extra) env.push_back(const_cast<char*>(x.c_str()));
  env.push_back(nullptr);
  return env;
}

/// Spawns argv with stdout and stderr to `log` and `extra_env` added to the environment; returns
/// the pid (throws when it cannot spawn).
inline pid_t spawn(const std::vector<std::string>& argv, const std::string& log,
                   const std::vector<std::string>& extra_env = {}) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env = environment_with(extra_env);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    throw std::runtime_error(fmt::format("cannot spawn {}: {}", argv[0], std::strerror(rc)));
  return pid;
}

/// spawn() for a long-lived program that must die with the test even when the test is killed
/// (PR_SET_PDEATHSIG survives the execs of `ip netns exec`, `unshare` and `sh -c 'exec ...'`).
/// Forks: call it while this process has no threads of its own.
inline pid_t spawn_tied(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(126);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// Runs a command to its end under the watchdog of `options`, with its output (in `log`).
inline CommandResult run_command(std::vector<std::string> argv, const std::string& log,
                                 const CommandOptions& options = {}) {
  argv.insert(argv.begin(), {"timeout", "-k", std::to_string(options.kill_after),
                             std::to_string(options.seconds)});
  CommandResult r;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = spawn(argv, log, options.env);
  int status = 0;
  int wait_error = 0;  // errno of a waitpid that failed for another reason than a signal
  bool ended = false;
  if (options.before_watchdog) {
    // Sleeps on the child's exit until a second before the watchdog (the command's own timer).
    const auto snapshot_at = start + std::chrono::seconds(std::max(options.seconds - 1, 0));
    ended = await_exit(pid, snapshot_at, status, wait_error);
    if (!ended) r.overdue = options.before_watchdog();
  }
  while (!ended) {
    if (::waitpid(pid, &status, 0) == pid) break;
    if (errno != EINTR) {
      wait_error = errno;
      break;
    }
  }
  r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  // A command that could not be waited for did not succeed, whatever `status` holds.
  r.code = wait_error == 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.output = slurp(log);
  if (wait_error != 0)
    r.output +=
        fmt::format("\n[run_command: waitpid({}) failed: {}]\n", pid, std::strerror(wait_error));
  return r;
}

inline std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

/// A process found in /proc.
struct ProcessInfo {
  pid_t pid = 0;
  char state = '?';     ///< from /proc/<pid>/stat: R, S, D, Z, ...
  pid_t parent = 0;     ///< from /proc/<pid>/stat
  std::string wchan;    ///< /proc/<pid>/wchan: the kernel function it sleeps in ("0": none)
  std::string command;  ///< /proc/<pid>/cmdline, arguments joined by spaces
};

/// Every process but this one whose initial environment holds the entry `name=value` exactly,
/// zombies ('Z', 'X') left out: what a test that tagged its commands' environment with a unique
/// marker left behind. Needs the right to read the processes' environ (root, or the same user).
inline std::vector<ProcessInfo> processes_with_env(const std::string& name,
                                                   const std::string& value) {
  const std::string entry = name + "=" + value;
  std::vector<ProcessInfo> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid == ::getpid()) continue;
    const std::string environ_text = slurp(fmt::format("/proc/{}/environ", pid));
    bool tagged = false;
    for (std::size_t at = 0; at < environ_text.size();) {
      const std::size_t nul = std::min(environ_text.find('\0', at), environ_text.size());
      if (std::string_view(environ_text).substr(at, nul - at) == entry) tagged = true;
      at = nul + 1;
    }
    if (!tagged) continue;
    // "pid (comm) S ...": the state follows the last ')' (comm may hold spaces and parentheses).
    const std::string stat = slurp(fmt::format("/proc/{}/stat", pid));
    const auto close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size()) continue;  // gone meanwhile
    ProcessInfo p;
    p.pid = static_cast<pid_t>(pid);
    p.state = stat[close + 2];
    if (p.state == 'Z' || p.state == 'X') continue;
    p.parent = static_cast<pid_t>(std::strtol(stat.c_str() + close + 3, nullptr, 10));
    p.wchan = slurp(fmt::format("/proc/{}/wchan", pid));
    p.command = slurp(fmt::format("/proc/{}/cmdline", pid));
    for (char& c : p.command) {
      if (c == '\0') c = ' ';
    }
    out.push_back(std::move(p));
  }
  ::closedir(d);
  return out;
}

inline std::string describe(const std::vector<ProcessInfo>& ps) {
  std::string s;
  for (const auto& p : ps) {
    s += fmt::format("\n  pid {} (parent {}, {}, in {}): {}", p.pid, p.parent, p.state,
                     p.wchan.empty() ? "?" : p.wchan, p.command);
  }
  return s;
}

}  // namespace simpler::testing
