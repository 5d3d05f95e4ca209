// simpler::detail::StatCounter — a counter with one writer thread and any number of readers.
#pragma once

#include <atomic>
#include <cstdint>

#include "simpler/detail/cache_line.hpp"
#include "simpler/error.hpp"

namespace simpler::detail {

/// Written by one thread only (add/set: a plain load and store, no read-modify-write, so no
/// locked instruction and no cache-line ping-pong beyond what readers cause), read by any thread
/// (get). Relaxed throughout: a reader wants a recent value, not an ordering with other data.
class StatCounter {
 public:
  StatCounter() = default;
  StatCounter(const StatCounter& o) noexcept : v_(o.get()) {}
  StatCounter& operator=(const StatCounter& o) noexcept {
    set(o.get());
    return *this;
  }
  // Always inlined: GCC called it out of line from submit, for a load and a store.
  [[gnu::always_inline]] void add(std::uint64_t n = 1) noexcept {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void sub(std::uint64_t n) noexcept {
    v_.store(v_.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
  }
  void set(std::uint64_t n) noexcept { v_.store(n, std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> v_{0};
};

/// Task outcomes counted by one thread.
struct OutcomeCounters {
  StatCounter completed;
  StatCounter failed;
  StatCounter skipped;
  /// Counts one task that ended with `o`.
  [[gnu::always_inline]] void count(Outcome o) noexcept {
    if (o == Outcome::Success) {
      completed.add();
    } else if (o == Outcome::Skipped) {
      skipped.add();
    } else {
      failed.add();
    }
  }
};

/// A Worker's engine-wide counters (see WorkerStats), grouped by writer, each group on cache
/// lines of its own.
struct EngineStats {
  // The orchestration thread (submits) and the thread that calls run().
  alignas(kCacheLine) StatCounter submitted;
  StatCounter runs_completed;
  StatCounter runs_failed;
  StatCounter window_waits;     ///< submits/allocs that waited for the task window
  StatCounter orch_passes;      ///< scheduler passes (that took work) run on this thread
  StatCounter ready_overflows;  ///< ready tasks handed over through the inbox: the ring was full
  // The scheduler thread: tasks it ended itself (groups, tasks skipped before reaching a lane,
  // tasks of lost lanes), and how many tasks wait in its queues.
  alignas(kCacheLine) OutcomeCounters sched;
  StatCounter ready_queued;
};

}  // namespace simpler::detail
