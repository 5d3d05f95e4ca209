// Test support: a RemoteServer in a forked process of its own (as on another host), on a free
// loopback port. The server dies with the test process (PR_SET_PDEATHSIG) and its sessions die
// with it, so a failing test leaves nothing behind. Fork it while the test has no threads of its
// own running (before any Worker::init in the test).
#pragma once

#include <fmt/format.h>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <simpler/simpler.hpp>

namespace simpler::testing {

class ServerProcess {
 public:
  ServerProcess(RemoteServerOptions options, RemoteServer::Setup setup) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("ServerProcess: pipe failed");
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("ServerProcess: fork failed");
    if (pid_ == 0) {
      ::close(fds[0]);
      detail::become_child_of(parent);
      detail::bump_fork_generation();
      int code = 0;
      try {
        RemoteServer server(std::move(options), std::move(setup));
        const std::uint16_t port = server.port();
        if (::write(fds[1], &port, sizeof port) != sizeof port) ::_exit(5);
        ::close(fds[1]);
        server.serve();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ServerProcess: %s\n", e.what());
        std::uint16_t zero = 0;
        static_cast<void>(::write(fds[1], &zero, sizeof zero));
        code = 6;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    ::close(fds[1]);
    std::uint16_t port = 0;
    const auto n = ::read(fds[0], &port, sizeof port);
    ::close(fds[0]);
    if (n != sizeof port || port == 0) {
      stop(SIGKILL);
      throw std::runtime_error("ServerProcess: the server did not start (see stderr)");
    }
    port_ = port;
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess() { stop(SIGKILL); }

  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  [[nodiscard]] std::string endpoint() const { return fmt::format("127.0.0.1:{}", port_); }
  /// A spec for this server with short deadlines (tests fail fast).
  [[nodiscard]] RemoteWorkerSpec spec(std::string token = {}) const {
    RemoteWorkerSpec s;
    s.endpoint = endpoint();
    s.token = std::move(token);
    s.connect_timeout = std::chrono::seconds(5);
    s.attach_timeout = std::chrono::seconds(20);
    s.heartbeat_period = std::chrono::milliseconds(100);
    s.heartbeat_timeout = std::chrono::seconds(2);
    s.control_timeout = std::chrono::seconds(20);
    return s;
  }
  /// Sends `sig` to the server and reaps it (its sessions die with it).
  void stop(int sig) noexcept {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

/// Pids of the live children of `pid` (from /proc/<pid>/task/*/children).
inline std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  const std::string dir = fmt::format("/proc/{}/task", pid);
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      FILE* f = std::fopen(fmt::format("{}/{}/children", dir, e->d_name).c_str(), "r");
      if (f == nullptr) continue;
      long c = 0;
      while (std::fscanf(f, "%ld", &c) == 1) out.push_back(static_cast<pid_t>(c));
      std::fclose(f);
    }
    ::closedir(d);
  }
  return out;
}

}  // namespace simpler::testing
