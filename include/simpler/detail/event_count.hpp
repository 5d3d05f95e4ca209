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

/// futex(2) wrappers (futex.ipp). wait returns 0 when a futex_wake woke it, else the errno
/// (ETIMEDOUT, EAGAIN: the word had changed, EINTR); spurious wakeups are possible, callers
/// re-check. A negative timeout waits without limit. wake returns how many waiters it woke.
int futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
               std::chrono::nanoseconds timeout, bool shared) noexcept;
int futex_wake(std::atomic<std::uint32_t>* word, int count, bool shared) noexcept;

/// Spin-wait hint for the CPU.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// How many threads of this process the engine counts as on a CPU, against the cores it may run
/// on: spin_until() yields between polls only when there are more such threads than cores (then
/// the thread it waits for may be queued behind it on its core). With no more than one per core,
/// a yield finds nothing else to run and only costs a syscall (~1.2 us here), which a hand-off
/// pays whenever its answer comes in after the first few polls: a one-task run() with a thread
/// child took 2.1 us p50 with yields after 4 polls, against 0.9-1.0 us polling on (fast mode).
///
/// The count starts at 1 (the thread that drives runs) and follows the threads the engine starts
/// (AwakeThreads::Member, with a weight: a lane whose child is another process counts that child
/// too; a lane with a simulated chip counts as every core, since the device runtime's threads
/// count themselves in the runtime's own copy of this class, which the host's may not be), minus
/// the threads asleep in EventCount::await. It is a hint: the user's other threads and other
/// processes are not in it. spin_until() notices when the guess is wrong (a yield that ran
/// another thread) and yields early for a while.
class AwakeThreads {
 public:
  /// A weight that makes the process count as crowded while it is held.
  static constexpr int kCrowd = 1 << 16;

  /// Counts the calling thread as `weight` threads awake from construction to destruction (a
  /// thread's whole life); while it sleeps in EventCount::await, all of its weight is off.
  class Member {
   public:
    explicit Member(int weight) noexcept : weight_(weight) {
      own_weight_ = weight;
      add(weight_);
    }
    ~Member() {
      add(-weight_);
      own_weight_ = 1;
    }
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

   private:
    int weight_;
  };

  static void add(int n) noexcept { count_.fetch_add(n, std::memory_order_relaxed); }
  /// What the calling thread counts for (1 unless it is a Member).
  [[nodiscard]] static int own_weight() noexcept { return own_weight_; }
  /// More threads awake than cores (one relaxed load; the cores are counted once).
  [[nodiscard]] static bool crowded() noexcept {
    return count_.load(std::memory_order_relaxed) > cores();
  }
  [[nodiscard]] static int count() noexcept { return count_.load(std::memory_order_relaxed); }
  /// The CPUs this process may run on: the affinity mask of the first thread that asked. The
  /// Scheduler asks before it starts the engine's threads, so they count from the mask they
  /// inherit, not from a run's thread the user pins to one CPU afterwards (a count of one
  /// would make the process look crowded for good, and its senders name no CPU to step off:
  /// CpuStepOff).
  [[nodiscard]] static int cores() noexcept {
    int n = cores_.load(std::memory_order_relaxed);
    if (n == 0) {
      n = count_cores();
      cores_.store(n, std::memory_order_relaxed);
    }
    return n;
  }

 private:
  static int count_cores() noexcept;
  static inline std::atomic<int> count_{1};
  static inline std::atomic<int> cores_{0};
  static inline thread_local int own_weight_ = 1;
};

class EventCount {
 public:
  /// How spin_until() gives its core away: Adaptive yields only while AwakeThreads::crowded();
  /// Early always yields after a few polls.
  enum class Yield { Adaptive, Early };

  /// `asymmetric`: notifiers publish with a release store and a light_fence() (no store-load
  /// fence of their own) before notify_all(); the waiter then issues a heavy fence between its
  /// registration and its last check (asymmetric_fence.hpp): heavy_fence() in-process, and
  /// global_heavy_fence() when `shared`, which reaches the notifiers only if their process is
  /// registered (register_global_light_publisher() returned true there).
  explicit EventCount(bool shared = false, bool asymmetric = false) noexcept
      : shared_(shared), asymmetric_(asymmetric) {}

  /// Whether notifiers may publish with light_fence() (see the constructor).
  [[nodiscard]] bool asymmetric() const noexcept { return asymmetric_; }

  /// Wakes every registered waiter. Call after publishing the change with a seq_cst operation.
  void notify_all() noexcept {
    if (waiters_.load(std::memory_order_seq_cst) != 0) {
      epoch_.fetch_add(1, std::memory_order_seq_cst);
      const int woken = futex_wake(&epoch_, 0x7fffffff, shared_);
      // In-process, the threads woken count as awake from now, before they get a core: a
      // spinner that sees them yields to them (AwakeThreads). Each returns 0 from its wait and
      // does not count itself again.
      if (!shared_ && woken > 0) AwakeThreads::add(woken);
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
    return spin_until(ready, spin, spin_yield()) || sleep_until(ready, deadline);
  }

  /// As above, with the deadline `timeout` after the spin ends: the clock is read only if the
  /// spin ends without ready(), so a waiter whose condition already holds (a lane finding its
  /// next task posted) pays no clock read at all.
  template <class Ready>
  bool await_for(Ready&& ready, std::chrono::nanoseconds spin, std::chrono::nanoseconds timeout) {
    return spin_until(ready, spin, spin_yield()) ||
           sleep_until(ready, std::chrono::steady_clock::now() + timeout);
  }

  /// Polls `ready()` for up to `spin`, in one of two ways, chosen per round:
  ///
  /// - Yielding (Yield::Early, AwakeThreads::crowded(), or this thread saw contention lately):
  ///   kPollsBeforeYield polls, then a yield every kPollsPerYield polls. With more threads than
  ///   cores, the thread we wait for may be runnable on this very core, queued behind us: every
  ///   poll before a yield is time it cannot run. Measured on a one-task run() with a thread child
  ///   (p50), before this count existed: 64 polls before the first yield and 256 per
  ///   yield cost ~17 us, 16 and 32 3.2-3.6 us, 4 and 8 2.3 us, 2 and 4 2.1 us; 100k independent
  ///   tasks with private outputs went from 830-1200 to 500-625 ns/task at 4 and 8; 2 and 4 lost
  ///   on the 1M-buffer DAG (1030-1100 against 940-990 ns/task). The clock is read every 4 yields
  ///   only (reading it every 32 polls was 8 % of a profile).
  /// - Polling on (otherwise): kPollsAlone polls between looks at the clock, a yield every
  ///   kAloneRoundsPerYield rounds. Each thread then has a core, so a yield finds nothing to run
  ///   and costs a syscall (~1.2 us here) that delays the answer it waits for. A yield that took
  ///   longer than kSwitchedYield ran another thread on this core after all (the kernel placed
  ///   two of ours on one core, or another process is there): the thread then yields early for
  ///   kContendedFor.
  ///
  /// The first kPollsBeforeYield polls come before any clock read: a partner on another core
  /// often answers within them.
  static constexpr int kPollsBeforeYield = 4;
  static constexpr int kPollsPerYield = 8;
  static constexpr int kPollsAlone = 64;  // ~1.3 us of polls (a pause is ~20 ns here)
  static constexpr unsigned kAloneRoundsPerYield = 2;
  static constexpr std::chrono::microseconds kSwitchedYield{3};
  static constexpr std::chrono::milliseconds kContendedFor{1};

  template <class Ready>
  static bool spin_until(Ready& ready, std::chrono::nanoseconds spin,
                         Yield yield = Yield::Adaptive) {
    using Clock = std::chrono::steady_clock;
    if (ready()) return true;
    if (spin.count() <= 0) return false;
    for (int i = 0; i < kPollsBeforeYield; ++i) {
      cpu_relax();
      if (ready()) return true;
    }
    Clock::time_point now = Clock::now();
    const Clock::time_point end = now + spin;
    bool early = yield == Yield::Early || now < contended_until_;
    for (unsigned round = 1;; ++round) {
      if (early || AwakeThreads::crowded()) {
        for (int i = 0; i < kPollsPerYield; ++i) {
          cpu_relax();
          if (ready()) return true;
        }
        std::this_thread::yield();
        if (round % 4 == 0 && Clock::now() >= end) return false;
        continue;
      }
      for (int i = 0; i < kPollsAlone; ++i) {
        cpu_relax();
        if (ready()) return true;
      }
      now = Clock::now();
      if (now >= end) return false;
      if (round % kAloneRoundsPerYield == 0) {
        std::this_thread::yield();
        const Clock::time_point back = Clock::now();
        if (back - now > kSwitchedYield) {
          contended_until_ = back + kContendedFor;
          early = true;
        }
      }
    }
  }

 private:
  /// How await() spins: across processes as early as ever (AwakeThreads counts this process's
  /// threads only, and the partner may be queued behind us on our core).
  [[nodiscard]] Yield spin_yield() const noexcept {
    return shared_ ? Yield::Early : Yield::Adaptive;
  }

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
      if (!fenced && napped) {  // retried before each nap while it fails
        fenced = shared_ ? global_heavy_fence() : heavy_fence();
      }
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
      // Asleep, the thread (and what its weight stands for: a lane's idle child) leaves the
      // count. An in-process notify_all that woke it has counted 1 for it already.
      const int weight = AwakeThreads::own_weight();
      AwakeThreads::add(-weight);
      const int woke = futex_wait(&epoch_, key, fenced ? left : std::min(left, nap), shared_);
      AwakeThreads::add(shared_ || woke != 0 ? weight : weight - 1);
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
  /// Until when this thread's spins yield early (see spin_until).
  static inline thread_local std::chrono::steady_clock::time_point contended_until_{};

  std::atomic<std::uint32_t> epoch_{0};
  std::atomic<std::uint32_t> waiters_{0};
  bool shared_;
  bool asymmetric_;
};

}  // namespace simpler::detail

#include "simpler/detail/futex.ipp"
