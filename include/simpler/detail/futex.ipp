// futex(2) plumbing for detail::EventCount.
// Included once, at the end of its header; every function is inline (the library is header-only).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "simpler/detail/event_count.hpp"

namespace simpler::detail {

inline bool futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
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
  return !(rc != 0 && errno == ETIMEDOUT);
}

inline void futex_wake(std::atomic<std::uint32_t>* word, int count, bool shared) noexcept {
  const int op = shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE;
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, count, nullptr, nullptr, 0);
}

}  // namespace simpler::detail
