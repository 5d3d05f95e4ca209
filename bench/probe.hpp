// simpler benchmarks — the clock and the cross-core floor probe, standard C++ only.
//
// Split from harness.hpp so that programs built without fmt or simpler (the libomp helper,
// bench/libomp/) time and probe exactly as the harness does.
#pragma once

#ifdef __linux__
#include <sched.h>
#endif

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

/// One CPU's speed at code that keeps its core busy (the per-CPU probe).
struct CpuSpeed {
  int cpu;
  double ns_per_iter;
};

/// The speed of every CPU this process may run on, one after another with the calling thread
/// pinned to it (its affinity is restored after): the best of 5 runs of `iters` iterations of
/// a loop of two independent xorshift chains with L1 loads and stores (several instructions per
/// cycle when the core is the thread's alone). On these VMs one vCPU sometimes runs such code
/// 15-20 % slower than the other for many minutes, and the engine's IPC-heavy hot paths up to
/// 1.7x slower there (a chain run at submit: 28 against 50 ns/hop), while the cross-core probe
/// reads the same on both: a figure taken on the slow vCPU then looks like a regression. Empty
/// where the affinity cannot be read or set (not Linux).
inline std::vector<CpuSpeed> per_cpu_speed(int iters = 200'000) {
  std::vector<CpuSpeed> out;
#ifdef __linux__
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (::sched_getaffinity(0, sizeof mine, &mine) != 0) return out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &mine)) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (::sched_setaffinity(0, sizeof one, &one) != 0) continue;
    alignas(64) static std::uint64_t buf[512];
    std::uint64_t a = 0x9E3779B97F4A7C15ULL, b = 0xC2B2AE3D27D4EB4FULL, c = 0, d = 0;
    double best = 0;
    for (int r = 0; r < 5; ++r) {
      const std::int64_t t0 = now_ns();
      for (int i = 0; i < iters; ++i) {
        a ^= a << 13U;
        a ^= a >> 7U;
        a ^= a << 17U;
        b ^= b << 13U;
        b ^= b >> 7U;
        b ^= b << 17U;
        c += buf[(a >> 3U) & 511U];
        d += buf[(b >> 5U) & 511U];
        buf[static_cast<unsigned>(i) & 511U] = c ^ d;
      }
      const double ns = static_cast<double>(now_ns() - t0) / iters;
      if (r == 0 || ns < best) best = ns;
    }
    const std::uint64_t result = c ^ d;
    __asm__ __volatile__("" : : "r"(result));  // the loop's result is used
    out.push_back({cpu, best});
  }
  (void)::sched_setaffinity(0, sizeof mine, &mine);
#else
  (void)iters;
#endif
  return out;
}

/// Keeps the compiler from dropping an otherwise empty body.
inline void clobber() noexcept {
  __asm__ __volatile__("" ::: "memory");
}

}  // namespace simpler_bench
