// simpler::detail::EventCount — block a thread until another one announces progress.
//
// The waiter registers, re-checks its condition, then sleeps on a futex; the notifier publishes
// its change and wakes only if someone is registered, so a notify with no sleeper costs one load.
// Usable across processes when placed in shared memory with `shared = true`.
//
// Ordering (why it cannot lose a wakeup): the waiter does waiters_.fetch_add (seq_cst), then reads
// epoch_ and its condition with seq_cst loads. The notifier publishes its condition with a seq_cst
// store/RMW, then loads waiters_ (seq_cst). In the single total order S, either the notifier's
// load sees the registration (and bumps epoch_, so futex_wait returns at once if the waiter
// already read the old epoch), or the registration comes later in S and the waiter's condition
// check sees the published change.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace simpler::detail {

/// futex(2) wrappers (futex.ipp). wait returns false on timeout; spurious wakeups are
/// possible, callers re-check. A negative timeout waits without limit.
bool futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::chrono::nanoseconds timeout, bool shared) noexcept;
void futex_wake(std::atomic<std::uint32_t>* word, int count, bool shared) noexcept;

/// Spin-wait hint for the CPU.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

class EventCount {
 public:
  explicit EventCount(bool shared = false) noexcept : shared_(shared) {}

  /// Wakes every registered waiter. Call after publishing the change with a seq_cst operation.
  void notify_all() noexcept {
    if (waiters_.load(std::memory_order_seq_cst) != 0) {
      epoch_.fetch_add(1, std::memory_order_seq_cst);
      futex_wake(&epoch_, 0x7fffffff, shared_);
    }
  }

  /// Spins for up to `spin` checking `ready()`, then sleeps until it holds or `deadline` passes.
  /// Returns ready(). `ready` must read the published state with seq_cst loads.
  template <class Ready>
  bool await(Ready&& ready, std::chrono::nanoseconds spin,
             std::chrono::steady_clock::time_point deadline) {
    if (spin_until(ready, spin)) return true;
    for (;;) {
      waiters_.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t key = epoch_.load(std::memory_order_seq_cst);
      if (ready()) {
        waiters_.fetch_sub(1, std::memory_order_relaxed);
        return true;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        waiters_.fetch_sub(1, std::memory_order_relaxed);
        return false;
      }
      futex_wait(&epoch_, key, deadline - now, shared_);
      waiters_.fetch_sub(1, std::memory_order_relaxed);
      if (ready()) return true;
    }
  }

  /// Polls `ready()` for up to `spin`: kPollsBeforeYield polls, then a yield every
  /// kPollsPerYield polls. On a 2-core machine the engine runs more threads than cores (the
  /// orchestration, the scheduler, the lanes), so the thread we wait for is often runnable on
  /// this very core: waiting 256 polls (~8 us) per yield made such hand-offs cost ~17 us, and
  /// 64 pure polls before the first yield still cost a one-task run() 4.5 us against 2.7 us with
  /// 16 (and 100k independent tasks 605-644 against 435-555 ns/task). A partner on another core
  /// answers within a few polls (a cross-core round trip is ~120 ns), so 16 keeps that case
  /// free of syscalls. The clock is read every 4 yields only (reading it every 32 polls was 8 %
  /// of a profile).
  static constexpr int kPollsBeforeYield = 16;
  static constexpr int kPollsPerYield = 32;

  template <class Ready>
  static bool spin_until(Ready& ready, std::chrono::nanoseconds spin) {
    if (ready()) return true;
    if (spin.count() <= 0) return false;
    const auto end = std::chrono::steady_clock::now() + spin;
    // First a short pure spin (~0.5 us): a partner on another core answers within it, and a
    // yield (a syscall, ~1 us or more on this VM) would only slow that case down.
    for (int i = 0; i < kPollsBeforeYield; ++i) {
      cpu_relax();
      if (ready()) return true;
    }
    for (unsigned round = 1;; ++round) {
      for (int i = 0; i < kPollsPerYield; ++i) {
        cpu_relax();
        if (ready()) return true;
      }
      // Give the core away often: the thread we wait for may be queued behind us on it.
      std::this_thread::yield();
      if (round % 4 == 0 && std::chrono::steady_clock::now() >= end) return false;
    }
  }

 private:
  std::atomic<std::uint32_t> epoch_{0};
  std::atomic<std::uint32_t> waiters_{0};
  bool shared_;
};

}  // namespace simpler::detail

#include "simpler/detail/futex.ipp"
