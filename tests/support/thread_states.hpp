// Test support: the scheduling states of this process's threads, read from /proc, to check that
// idle runtimes block instead of spinning.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

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

}  // namespace simpler::testing
