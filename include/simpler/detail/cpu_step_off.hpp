// simpler::detail::CpuStepOff — a forked child that keeps finding itself on the CPU of the
// parent thread that sends it tasks steps off that CPU.
//
// Parent and child spin (with yields) while each waits for the other, so two of them on one CPU
// hand it back and forth at a context switch per task: a one-task forked run took 3.5-5.3 us
// that way against 0.7-1.4 us with the two on different CPUs (AMD EPYC VM, 2 vCPUs; 20 ms
// between batches of 2000 runs), and the kernel often places a woken child on its waker's CPU
// and leaves it there for longer than such a batch lasts. The parent writes the CPU it sends
// from into each frame (sched_getcpu reads the rseq area: ~1 ns, no syscall); the child
// compares it with its own. After kStreak batches in a row on the sender's CPU it narrows its
// affinity to the other CPUs it may use, which makes the kernel migrate it at once, and then
// restores the mask it had, so the kernel stays free to place it afterwards. A process allowed
// on one CPU never steps.
//
// Steps are rate-limited: at most one per kMinInterval, and when a step does not hold (the two
// share a CPU again within kHeld while the child stayed awake, as they must with more spinning
// threads than cores) the interval doubles up to kMaxInterval. Sharing again after the child
// slept is the kernel's wake-up placement once more, not a contest for cores: the interval goes
// back to kMinInterval. A failing affinity call ends stepping for the child's
// life: its mask is then whatever the kernel left, never wider than the one it had.
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "simpler/detail/event_count.hpp"

namespace simpler::detail {

class CpuStepOff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kStreak = 2;
  static constexpr std::chrono::milliseconds kMinInterval{1};
  static constexpr std::chrono::milliseconds kMaxInterval{256};
  static constexpr std::chrono::milliseconds kHeld{64};

  /// The OS calls, replaceable for tests (a fake scheduler, failing calls).
  struct Ops {
    int (*current_cpu)() noexcept;
    bool (*get_affinity)(cpu_set_t& out) noexcept;
    bool (*set_affinity)(const cpu_set_t& mask) noexcept;
    Clock::time_point (*now)() noexcept;
  };

  static constexpr Ops kSystemOps{
      []() noexcept { return ::sched_getcpu(); },
      [](cpu_set_t& out) noexcept { return ::sched_getaffinity(0, sizeof out, &out) == 0; },
      [](const cpu_set_t& mask) noexcept {
        return ::sched_setaffinity(0, sizeof mask, &mask) == 0;
      },
      []() noexcept { return Clock::now(); },
  };

  explicit CpuStepOff(const Ops& ops = kSystemOps) noexcept : ops_(ops) {}

  /// Where a step is announced: `flag` holds 1 from before the first affinity call until after
  /// the last (MailboxHeader::stepping), so the parent can tell a late answer from a slow task.
  void announce_to(std::atomic<std::uint32_t>* flag) noexcept { flag_ = flag; }

  /// What a sender writes into its frame: the CPU it runs on, or -1 (do not step) while this
  /// process has as many threads awake as cores (AwakeThreads), since the child would then
  /// only trade one thread it shares a CPU with for another: with a stream of tasks the
  /// scheduler thread is awake too, and moving the child onto its CPU made 100k forked tasks
  /// slower, not faster.
  static int sender_cpu() noexcept {
    return AwakeThreads::count() < AwakeThreads::cores() ? ::sched_getcpu() : -1;
  }

  /// At each task picked up: `sender_cpu` is the CPU its frame was sent from (-1: unknown).
  void picked(int sender_cpu) noexcept {
    shared_ = sender_cpu >= 0 && !off_ && ops_.current_cpu() == sender_cpu;
  }

  /// When the child goes to sleep: its wake-up places it anew, so sharing a CPU after it says
  /// nothing about the last step (the next one comes at kMinInterval; the wait already set
  /// stands).
  void sleeping() noexcept { slept_ = true; }

  /// After the tasks of a batch were answered (so the step delays no answer): steps off the
  /// sender's CPU when the policy above says so. True when it stepped.
  bool batch_done() noexcept {
    if (!shared_) {
      streak_ = 0;
      return false;
    }
    shared_ = false;
    if (streak_++ == 0) first_shared_ = ops_.now();
    if (streak_ < kStreak) return false;
    const Clock::time_point now = ops_.now();
    if (now < next_) return false;
    streak_ = 0;
    // The interval after this step: kMinInterval unless the last step did not hold (sharing
    // began again within kHeld of it while the child stayed awake). A step that could not be
    // taken (one CPU allowed) counts as one that did not hold.
    const bool held = steps_ + refused_ == 0 || slept_ || first_shared_ - last_ >= kHeld;
    interval_ = held ? Clock::duration(kMinInterval)
                     : std::min<Clock::duration>(interval_ * 2, kMaxInterval);
    last_ = now;
    next_ = now + interval_;
    slept_ = false;
    return step();
  }

  /// Steps taken so far.
  [[nodiscard]] std::uint32_t steps() const noexcept { return steps_; }
  /// True once an affinity call failed (stepping is over for this process).
  [[nodiscard]] bool off() const noexcept { return off_; }

 private:
  bool step() noexcept {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (!ops_.get_affinity(mask)) {
      off_ = true;
      return false;
    }
    const int me = ops_.current_cpu();
    cpu_set_t away = mask;
    if (me >= 0 && me < CPU_SETSIZE) CPU_CLR(me, &away);
    if (CPU_COUNT(&away) == 0 || CPU_COUNT(&away) == CPU_COUNT(&mask)) {
      ++refused_;  // nowhere else to go, or this CPU is not in the mask: nothing to step off
      return false;
    }
    if (flag_ != nullptr) flag_->store(1, std::memory_order_seq_cst);
    const bool moved = ops_.set_affinity(away);
    // Restored at once: the narrow mask only moved this thread; it must not keep it away.
    if (!moved || !ops_.set_affinity(mask)) off_ = true;
    if (flag_ != nullptr) flag_->store(0, std::memory_order_release);
    if (!moved) return false;
    ++steps_;
    return true;
  }

  Ops ops_;
  std::atomic<std::uint32_t>* flag_ = nullptr;
  bool shared_ = false;
  bool slept_ = false;
  bool off_ = false;
  int streak_ = 0;
  std::uint32_t steps_ = 0;
  std::uint32_t refused_ = 0;
  Clock::time_point next_{};          ///< no step before this
  Clock::time_point last_{};          ///< the last step (or attempt)
  Clock::time_point first_shared_{};  ///< the first batch of the current streak
  Clock::duration interval_ = kMinInterval;
};

}  // namespace simpler::detail
