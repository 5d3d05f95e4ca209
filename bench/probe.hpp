// simpler benchmarks — the clock and the cross-core floor probe, standard C++ only.
//
// Split from harness.hpp so that programs built without fmt or simpler (the libomp helper,
// bench/libomp/) time and probe exactly as the harness does.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace simpler_bench {

/// Nanoseconds on the steady clock.
inline std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Elapsed nanoseconds of one call of f().
template <class F>
double time_ns(F&& f) {
  const std::int64_t t0 = now_ns();
  std::forward<F>(f)();
  const std::int64_t t1 = now_ns();
  return static_cast<double>(t1 - t0);
}

/// The machine's cross-core floor (PERFORMANCE.md): two threads bounce a counter through one
/// cache line `rounds` times, spinning; returns the median round trip over 5 trials, in ns. These
/// VMs switch between latency modes, so every bench records this next to its results. A trial
/// stops early after `budget_ms` (on a machine busy with other work a round trip can take a
/// scheduler time slice), and the figure is over the rounds it did.
inline double cross_core_round_trip_ns(int rounds = 20'000, int budget_ms = 50) {
  constexpr int kStop = -1;
  const std::int64_t budget_ns = std::int64_t{budget_ms} * 1'000'000;
  std::vector<double> trials;
  for (int t = 0; t < 5; ++t) {
    alignas(64) std::atomic<int> ball{0};
    std::thread echo([&] {
      for (int i = 0;; ++i) {
        int v = 0;
        while ((v = ball.load(std::memory_order_acquire)) != 2 * i + 1 && v != kStop) {
        }
        if (v == kStop) return;
        ball.store(2 * i + 2, std::memory_order_release);
      }
    });
    // Round 0 is not timed: it waits for the echo thread to start.
    ball.store(1, std::memory_order_release);
    while (ball.load(std::memory_order_acquire) != 2) {
    }
    const std::int64_t t0 = now_ns();
    int done = 0;
    bool late = false;
    while (done < rounds && !late) {
      const int i = done + 1;
      ball.store(2 * i + 1, std::memory_order_release);
      // The clock is read only while a round is slow (every 1024 spins) and every 64 rounds, so
      // it does not add to a fast round trip; a late trial still finishes its round.
      for (int spins = 1; ball.load(std::memory_order_acquire) != 2 * i + 2; ++spins) {
        if (spins % 1024 == 0 && now_ns() - t0 > budget_ns) late = true;
      }
      done = i;
      if (done % 64 == 0 && now_ns() - t0 > budget_ns) late = true;
    }
    const std::int64_t t1 = now_ns();
    ball.store(kStop, std::memory_order_release);
    echo.join();
    trials.push_back(static_cast<double>(t1 - t0) / done);
  }
  std::sort(trials.begin(), trials.end());
  return trials[trials.size() / 2];
}

/// Keeps the compiler from dropping an otherwise empty body.
inline void clobber() noexcept {
  __asm__ __volatile__("" ::: "memory");
}

}  // namespace simpler_bench
