// Test support: the scheduling states of this process's threads, read from /proc, to check that
// idle runtimes block instead of spinning.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/gate.hpp"

namespace simpler::testing {

/// States ('R', 'S', ...) of every thread of this process but the calling one.
inline std::vector<char> other_thread_states() {
  std::vector<char> out;
  const std::string self = std::to_string(static_cast<long>(::gettid()));
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string tid = e->d_name;
    if (tid == "." || tid == ".." || tid == self) continue;
    std::ifstream f("/proc/self/task/" + tid + "/stat");
    std::string line;
    std::getline(f, line);
    const auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size()) out.push_back(line[close + 2]);
  }
  ::closedir(d);
  return out;
}

/// The state ('R', 'S', ...) of thread `tid` of this process ('?' when it cannot be read).
inline char thread_state(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(f, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

/// The ids of this process's threads whose name (/proc comm) is `name`.
inline std::vector<pid_t> threads_named(const std::string& name) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string tid = e->d_name;
    if (tid == "." || tid == "..") continue;
    std::ifstream f("/proc/self/task/" + tid + "/comm");
    std::string comm;
    std::getline(f, comm);
    if (comm == name) out.push_back(static_cast<pid_t>(std::stol(tid)));
  }
  ::closedir(d);
  return out;
}

/// How often thread `tid` of this process left its CPU (voluntary + involuntary context
/// switches, /proc status): a thread that stays asleep keeps it; one that wakes or spins with
/// yields adds to it. -1 when it cannot be read.
inline long context_switches(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/status");
  long total = 0;
  int found = 0;
  for (std::string line; std::getline(f, line);) {
    for (const char* key : {"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"}) {
      if (line.rfind(key, 0) == 0) {
        total += std::stol(line.substr(std::string(key).size()));
        ++found;
      }
    }
  }
  return found == 2 ? total : -1;
}

/// Returns once `armed()` holds and thread `tid` is then blocked in the kernel ('S'): for a
/// task that must end only while the orchestration sleeps in some wait (`armed` tells that the
/// orchestration got past every other sleep). Throws `what` after 10 s.
template <class Armed>
void await_asleep(const std::atomic<pid_t>& tid, Armed armed, const char* what) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!armed() || thread_state(tid.load()) != 'S') {
    if (std::chrono::steady_clock::now() > end) throw std::runtime_error(what);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

/// True once every other thread of this process is blocked in the kernel ('S') within
/// `limit`: a runtime whose threads kept spinning while idle fails it.
inline bool other_threads_fall_asleep(std::chrono::milliseconds limit) {
  return eventually(
      [] {
        const auto states = other_thread_states();
        return !states.empty() &&
               std::all_of(states.begin(), states.end(), [](char c) { return c == 'S'; });
      },
      limit);
}

}  // namespace simpler::testing
