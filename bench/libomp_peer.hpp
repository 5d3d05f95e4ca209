// simpler benchmarks — bench_engine's side of the libomp peer: spawns bench_engine_libomp (see
// bench/libomp/bench_engine_libomp.cpp) with a pipe each way and sends it one request at a time.
//
// The child measures its own ns around the OpenMP region, so the pipe's round trip is not in the
// figures; its rows carry the cross-core probe it takes itself (`probe` request). It is started
// with KMP_BLOCKTIME=10 (ms) unless the environment sets KMP_BLOCKTIME: libomp's default lets its
// idle threads spin 200 ms after a region, which on two cores would take a core from the next
// contender well past the harness's gap; within a region its threads are never idle that long,
// so its own figures are unchanged. Not thread-safe: one caller at a time.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "harness.hpp"

extern char** environ;

namespace simpler_bench {

class LibompChild {
 public:
  /// Starts `path`; nullptr and `why` set when it cannot run or is not on libomp.
  static std::unique_ptr<LibompChild> start(const std::string& path, std::string& why) {
    if (::access(path.c_str(), X_OK) != 0) {
      why = fmt::format("helper {} not found or not executable", path);
      return nullptr;
    }
    int to_child[2];
    int from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0) {
      why = fmt::format("pipe: {}", std::strerror(errno));
      return nullptr;
    }
    if (::pipe2(from_child, O_CLOEXEC) != 0) {
      why = fmt::format("pipe: {}", std::strerror(errno));
      ::close(to_child[0]);
      ::close(to_child[1]);
      return nullptr;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    if (std::getenv("KMP_BLOCKTIME") == nullptr) env_strings.emplace_back("KMP_BLOCKTIME=10");
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string arg0 = path;
    char* argv[] = {arg0.data(), nullptr};
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, path.c_str(), &fa, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(to_child[0]);
    ::close(from_child[1]);
    if (rc != 0) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      why = fmt::format("posix_spawn {}: {}", path, std::strerror(rc));
      return nullptr;
    }
    std::unique_ptr<LibompChild> c(new LibompChild(pid, to_child[1], from_child[0]));
    const std::string hello = c->read_line();
    if (hello != "hello libomp") {
      why = fmt::format("helper {} said '{}' instead of 'hello libomp'", path, hello);
      return nullptr;
    }
    return c;
  }

  LibompChild(const LibompChild&) = delete;
  LibompChild& operator=(const LibompChild&) = delete;

  ~LibompChild() {
    static const char kQuit[] = "quit\n";
    [[maybe_unused]] const auto n = ::write(to_, kQuit, sizeof kQuit - 1);
    ::close(to_);
    ::close(from_);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }

  /// Sends one request line and returns the number in its "ok <number>" reply; throws (fail)
  /// with the child's text on "err <text>" or when the child is gone.
  double request(const std::string& line) {
    const std::string out = line + "\n";
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::write(to_, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(fmt::format("libomp helper: write failed ({})", std::strerror(errno)));
      done += static_cast<std::size_t>(n);
    }
    const std::string reply = read_line();
    if (reply.rfind("ok ", 0) == 0) return std::strtod(reply.c_str() + 3, nullptr);
    if (reply.rfind("err ", 0) == 0) fail(fmt::format("libomp ({}): {}", line, reply.substr(4)));
    fail(fmt::format("libomp helper: unexpected reply '{}' to '{}'", reply, line));
  }

 private:
  LibompChild(pid_t pid, int to, int from) : pid_(pid), to_(to), from_(from) {}

  std::string read_line() {
    while (true) {
      const auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      char chunk[256];
      const ssize_t n = ::read(from_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return "(helper exited)";
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  pid_t pid_;
  int to_;
  int from_;
  std::string buf_;
};

}  // namespace simpler_bench
