// Test support for remote fault tests: a one-byte signal that crosses processes (Beacon), a
// forked child that dies with the test (ChildProcess), process liveness from /proc, and a raw TCP
// client with deadlines that sends what a real client never would (RawClient).
#pragma once

#include <fmt/format.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/poll.hpp"
#include "support/remote_server.hpp"

namespace simpler::testing {

using Millis = std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

/// Milliseconds left until `end` (0 when past), for poll().
inline int millis_until(SteadyClock::time_point end) {
  const auto left = std::chrono::duration_cast<Millis>(end - SteadyClock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left);
}

/// A pipe a process forked after it (a server, its sessions, their forked subs) writes a byte
/// into, and the test waits on: "the remote task has started". Fork-safe: signal() is one write.
class Beacon {
 public:
  Beacon() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) throw std::runtime_error("Beacon: pipe2 failed");
  }
  Beacon(const Beacon&) = delete;
  Beacon& operator=(const Beacon&) = delete;
  ~Beacon() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  /// The write end, for a callable to capture by value.
  [[nodiscard]] int write_fd() const noexcept { return fds_[1]; }
  static void signal(int write_fd) noexcept {
    const char c = 1;
    static_cast<void>(::write(write_fd, &c, 1));
  }
  /// Takes one signal; false when none came within `limit`.
  bool wait(Millis limit = std::chrono::seconds(10)) {
    const auto end = SteadyClock::now() + limit;
    for (;;) {
      pollfd p{fds_[0], POLLIN, 0};
      const int r = ::poll(&p, 1, millis_until(end));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      char c = 0;
      return ::read(fds_[0], &c, 1) == 1;
    }
  }

 private:
  int fds_[2] = {-1, -1};
};

/// Whether `pid` has ended: no such process, or a zombie nobody reaped yet.
inline bool process_gone(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!f || !std::getline(f, stat)) return true;
  // "pid (comm) S ...": the state follows the last ')' (comm may hold spaces and parentheses).
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return true;
  const char state = stat[close + 2];
  return state == 'Z' || state == 'X';
}

/// The children of `pid`, their children, and so on.
inline std::vector<pid_t> descendants_of(pid_t pid) {
  std::vector<pid_t> out = children_of(pid);
  for (std::size_t i = 0; i < out.size(); ++i) {
    for (pid_t c : children_of(out[i])) out.push_back(c);
  }
  return out;
}

/// A forked child running `body` (its return value is the exit code; an exception is code 1).
/// It dies with the test (PR_SET_PDEATHSIG); the destructor kills and reaps it. Fork it while the
/// test process has no threads (before any Worker::init there).
class ChildProcess {
 public:
  template <class Body>
  explicit ChildProcess(Body body) {
    const pid_t parent = ::getpid();
    std::fflush(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("ChildProcess: fork failed");
    if (pid_ == 0) {
      detail::become_child_of(parent);
      detail::bump_fork_generation();
      int code = 1;
      try {
        code = body();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ChildProcess %d: %s\n", ::getpid(), e.what());
      } catch (...) {
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { stop(SIGKILL); }

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  /// Sends `sig`, reaps the child and returns its wait status (-1 if it was reaped already).
  int stop(int sig) noexcept {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
};

/// A TCP client that speaks raw bytes to a RemoteServer, every wait bounded.
class RawClient {
 public:
  /// Connects to `ip:port` (numeric IPv4).
  RawClient(const std::string& ip, std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("RawClient: socket failed");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (::inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) {
      throw std::runtime_error("RawClient: bad address " + ip);
    }
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
      const int err = errno;
      ::close(fd_);
      throw std::runtime_error(
          fmt::format("RawClient: connect to {}:{} failed: {}", ip, port, std::strerror(err)));
    }
  }
  explicit RawClient(std::uint16_t port) : RawClient("127.0.0.1", port) {}
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  ~RawClient() { close(); }

  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  /// Sends every byte; false when the peer is gone.
  bool send(std::span<const std::byte> b) {
    std::size_t done = 0;
    while (done < b.size()) {
      const ssize_t n = ::send(fd_, b.data() + done, b.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }
  /// Reads exactly `b.size()` bytes within `limit`; false on EOF, error or the deadline.
  bool read_exact(std::span<std::byte> b, Millis limit = std::chrono::seconds(10)) {
    const auto end = SteadyClock::now() + limit;
    std::size_t done = 0;
    while (done < b.size()) {
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, millis_until(end));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      const ssize_t n = ::recv(fd_, b.data() + done, b.size() - done, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }
  /// Reads one frame (header, then payload) within `limit`.
  std::optional<std::pair<wire::FrameHeader, std::vector<std::byte>>> read_frame(
      Millis limit = std::chrono::seconds(10)) {
    const auto end = SteadyClock::now() + limit;
    std::array<std::byte, wire::kHeaderBytes> head{};
    if (!read_exact(head, Millis(millis_until(end)))) return std::nullopt;
    const wire::FrameHeader h = wire::decode_header(head);
    std::vector<std::byte> payload(h.length);
    if (!read_exact(payload, Millis(millis_until(end)))) return std::nullopt;
    return std::make_pair(h, std::move(payload));
  }
  /// Discards what arrives until the peer closes the connection (EOF or reset); false when it
  /// is still open after `limit`.
  bool closed_by_peer(Millis limit = std::chrono::seconds(10)) {
    const auto end = SteadyClock::now() + limit;
    std::byte sink[4096];
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, millis_until(end));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) return false;
      if (r < 0) return true;
      const ssize_t n = ::recv(fd_, sink, sizeof sink, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return true;  // EOF, or reset
    }
  }

 private:
  int fd_ = -1;
};

/// One frame's bytes: header then payload.
inline std::vector<std::byte> frame_bytes(wire::FrameType type, std::uint64_t session,
                                          std::uint32_t worker, std::uint64_t sequence,
                                          std::span<const std::byte> payload = {}) {
  std::vector<std::byte> out(wire::kHeaderBytes + payload.size());
  wire::FrameHeader h;
  h.type = type;
  h.session = session;
  h.worker = worker;
  h.sequence = sequence;
  h.length = static_cast<std::uint32_t>(payload.size());
  wire::encode_header(h, out.data());
  // memcpy into a sized vector, not insert(): GCC 12 -O3 reports a false array-bounds error on
  // the inlined range insert.
  if (!payload.empty())
    std::memcpy(out.data() + wire::kHeaderBytes, payload.data(), payload.size());
  return out;
}

}  // namespace simpler::testing
