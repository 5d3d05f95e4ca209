// futex(2) plumbing for detail::EventCount.
// Included once, at the end of its header; every function is inline (the library is header-only).
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "simpler/detail/event_count.hpp"

namespace simpler::detail {

inline int futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                      std::chrono::nanoseconds timeout, bool shared) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  timespec ts{};
  timespec* tsp = nullptr;
  if (timeout.count() >= 0) {
    ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
    tsp = &ts;
  }
  const int op = shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE;
  const long rc =
      syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, expected, tsp, nullptr, 0);
  return rc == 0 ? 0 : errno;
}

inline int AwakeThreads::count_cores() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

inline int futex_wake(std::atomic<std::uint32_t>* word, int count, bool shared) noexcept {
  const int op = shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE;
  const long rc =
      syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, count, nullptr, nullptr, 0);
  return rc > 0 ? static_cast<int>(rc) : 0;
}

}  // namespace simpler::detail
