// simpler::detail — deadlines as the engine stores them, the messages that name them, and the
// keep-alive list for threads abandoned at a deadline.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "simpler/leaf/leaf.hpp"

namespace simpler::detail {

/// "its deadline of 200 ms (...)" or "the run's deadline of 250 ms (...)", for messages.
inline std::string describe_deadline(std::uint32_t ms, bool run_deadline) {
  if (run_deadline) {
    return fmt::format(
        "the run's deadline of {} ms (the CallConfig::timeout given to run(), else "
        "WorkerOptions::run_timeout)",
        ms);
  }
  return fmt::format(
      "its deadline of {} ms (the submit's CallConfig::timeout, else "
      "WorkerOptions::task_timeout)",
      ms);
}

/// Keeps `p` alive until the process exits (never destroyed, still reachable for leak
/// checkers). For what an abandoned thread may still touch.
inline void keep_forever(std::shared_ptr<void> p) noexcept {
  // Deliberately never destroyed: what an abandoned thread may still touch must outlive every
  // destructor, including static ones at exit. Reachable from a static, so leak checkers do not
  // report it.
  // noexcept: running out of memory here ends the process, which must not destroy `p`.
  static std::mutex* mu = new std::mutex;
  static auto* kept = new std::vector<std::shared_ptr<void>>;
  std::lock_guard lk(*mu);
  kept->push_back(std::move(p));
}

inline std::string describe_deadline(const LeafRequest& r) {
  return describe_deadline(r.deadline_ms, r.run_deadline);
}
/// Nanoseconds on the steady clock (the unit of the engine's atomic deadlines).
inline std::int64_t steady_ns(std::chrono::steady_clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
inline std::chrono::steady_clock::time_point steady_from_ns(std::int64_t ns) noexcept {
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::nanoseconds(ns)));
}
/// A timeout as the engine stores it: whole milliseconds, saturated at ~49.7 days (a longer
/// one is as good as none, and the sum with the clock must not overflow).
inline std::uint32_t clamp_ms(std::chrono::milliseconds t) noexcept {
  if (t.count() <= 0) return 0;
  return t.count() >= 0xffffffffLL ? 0xffffffffU : static_cast<std::uint32_t>(t.count());
}
/// `now + t`, saturated at time_point::max() instead of overflowing.
inline std::chrono::steady_clock::time_point deadline_after(
    std::chrono::steady_clock::time_point now, std::chrono::milliseconds t) noexcept {
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::time_point::max() - now);
  return t >= room ? std::chrono::steady_clock::time_point::max() : now + t;
}
}  // namespace simpler::detail
