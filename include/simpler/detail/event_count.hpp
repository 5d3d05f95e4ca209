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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "simpler/detail/asymmetric_fence.hpp"

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
  /// `asymmetric`: notifiers publish with a release store and a light_fence() (no store-load
  /// fence of their own) before notify_all(); the waiter then issues heavy_fence() between its
  /// registration and its last check (asymmetric_fence.hpp). Only in-process: membarrier reaches
  /// this process's threads only.
  explicit EventCount(bool shared = false, bool asymmetric = false) noexcept
      : shared_(shared), asymmetric_(asymmetric && !shared) {}

  /// Whether notifiers may publish with light_fence() (see the constructor).
  [[nodiscard]] bool asymmetric() const noexcept { return asymmetric_; }

  /// Wakes every registered waiter. Call after publishing the change with a seq_cst operation.
  void notify_all() noexcept {
    if (waiters_.load(std::memory_order_seq_cst) != 0) {
      epoch_.fetch_add(1, std::memory_order_seq_cst);
      futex_wake(&epoch_, 0x7fffffff, shared_);
    }
  }

  /// How many notify_all() calls found a waiter to wake (wrapping). Diagnostics and tests.
  [[nodiscard]] std::uint32_t wakes() const noexcept {
    return epoch_.load(std::memory_order_relaxed);  // a count to compare, orders nothing
  }

  /// Whether a waiter is registered (asleep, or about to re-check and sleep). A notifier that
  /// finds none after publishing (seq_cst) may skip notify_all: a later waiter sees the change.
  [[nodiscard]] bool has_waiters() const noexcept {
    return waiters_.load(std::memory_order_seq_cst) != 0;
  }

  /// Spins for up to `spin` checking `ready()`, then sleeps until it holds or `deadline` passes.
  /// Returns ready(). `ready` must read the published state with seq_cst loads.
  template <class Ready>
  bool await(Ready&& ready, std::chrono::nanoseconds spin,
             std::chrono::steady_clock::time_point deadline) {
    return spin_until(ready, spin) || sleep_until(ready, deadline);
  }

  /// As above, with the deadline `timeout` after the spin ends: the clock is read only if the
  /// spin ends without ready(), so a waiter whose condition already holds (a lane finding its
  /// next task posted) pays no clock read at all.
  template <class Ready>
  bool await_for(Ready&& ready, std::chrono::nanoseconds spin, std::chrono::nanoseconds timeout) {
    return spin_until(ready, spin) ||
           sleep_until(ready, std::chrono::steady_clock::now() + timeout);
  }

  /// Polls `ready()` for up to `spin`: kPollsBeforeYield polls, then a yield every
  /// kPollsPerYield polls. On a 2-core machine the engine runs more threads than cores (the
  /// orchestration, the scheduler, the lanes), so the thread we wait for is often runnable on
  /// this very core, queued behind us: every poll before a yield is time it cannot run. Measured
  /// on a one-task run() with a thread child (p50): 64 polls before the first yield and 256 per
  /// yield cost ~17 us, 16 and 32 3.2-3.6 us, 4 and 8 2.3 us, 2 and 4 2.1 us; 100k independent
  /// tasks with private outputs went from 830-1200 to 500-625 ns/task at 4 and 8. A partner on
  /// another core answers within a cross-core round trip (~120 ns, a few polls), so 4 keeps most
  /// of that case free of syscalls; 2 and 4 lost on the 1M-buffer DAG (1030-1100 against
  /// 940-990 ns/task). The clock is read every 4 yields only (reading it every 32 polls was 8 %
  /// of a profile). The spin's end is taken at the first yield: a partner that answers within
  /// the pure spin costs no clock read.
  static constexpr int kPollsBeforeYield = 4;
  static constexpr int kPollsPerYield = 8;

  template <class Ready>
  static bool spin_until(Ready& ready, std::chrono::nanoseconds spin) {
    if (ready()) return true;
    if (spin.count() <= 0) return false;
    // First a short pure spin (~0.1 us): a partner on another core often answers within it, and a
    // yield (a syscall, ~1 us or more on this VM) would only slow that case down.
    for (int i = 0; i < kPollsBeforeYield; ++i) {
      cpu_relax();
      if (ready()) return true;
    }
    const auto end = std::chrono::steady_clock::now() + spin;
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
  // The sleeping half of await(), entered once the spin found `ready()` false: register, check
  // `ready()` again (a notifier that published before the registration skipped the wake-up),
  // sleep. No check before the registration: the spin has just made it.
  template <class Ready>
  bool sleep_until(Ready& ready, std::chrono::steady_clock::time_point deadline) {
    // Asymmetric: a light notifier's publish may still sit in its core's store buffer, unseen by
    // the check after the registration. The first sleep is a short nap with no fence: most sleeps
    // end with a notify within it, and a publish that raced the registration has long been
    // visible when it ends. Any longer sleep follows a heavy fence, which makes such a publish
    // visible to the check or the registration visible to its notifier. The fence is not paid up
    // front because it costs 50-60 us when another thread of ours is on a CPU (an interrupt
    // there; docs/engine.md). If the kernel refuses it, every sleep stays a short nap.
    bool fenced = !asymmetric_;
    bool napped = false;  // the first, unfenced nap is over
    for (;;) {
      waiters_.fetch_add(1, std::memory_order_seq_cst);
      if (!fenced && napped) fenced = heavy_fence();  // retried before each nap while it fails
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
      const std::chrono::nanoseconds left = deadline - now;
      const std::chrono::nanoseconds nap = napped ? kUnfencedNap : kFirstNap;
      futex_wait(&epoch_, key, fenced ? left : std::min(left, nap), shared_);
      napped = true;
      waiters_.fetch_sub(1, std::memory_order_relaxed);
      if (ready()) return true;
    }
  }

  /// Asymmetric only: the first sleep, without a heavy fence. How late a publish that raced the
  /// registration can be taken (in practice it is visible within a microsecond).
  static constexpr std::chrono::microseconds kFirstNap{100};
  /// The longest sleep when heavy_fence() failed.
  static constexpr std::chrono::microseconds kUnfencedNap{1000};

  std::atomic<std::uint32_t> epoch_{0};
  std::atomic<std::uint32_t> waiters_{0};
  bool shared_;
  bool asymmetric_;
};

}  // namespace simpler::detail

#include "simpler/detail/futex.ipp"
