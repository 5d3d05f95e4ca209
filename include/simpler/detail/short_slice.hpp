// simpler::detail::request_short_slice — engine threads ask the kernel for a short time slice.
//
// On two vCPUs the engine's threads often share one with the thread running the orchestration:
// the kernel wakes a lane on its waker's CPU (this VM's kernel packs threads onto vCPUs, and
// waking a thread on the idle one took ~140 us when it had to), and a woken thread that ran much
// before it slept is not eligible at once under EEVDF, so it waited for the waker's slice to end:
// a fan-out's head ran 0.6-3 ms into its run, after the orchestration had submitted everything
// behind it (docs/engine.md, "Waiting"). Since Linux 6.12 a SCHED_OTHER thread may ask for a
// shorter slice (sched_attr::sched_runtime, clamped by the kernel to 0.1-100 ms, no privilege
// needed): its deadline comes sooner and its lag is bounded by a smaller slice, so a woken lane
// preempts the busy thread within a tick's fraction instead. Each engine thread asks for
// kEngineSlice for itself at its start. Best effort: a kernel without it, a policy other than
// SCHED_OTHER (left alone) or a refusal keeps the default slice.
#pragma once

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace simpler::detail {

/// The slice engine threads ask for: the least the kernel grants.
inline constexpr std::chrono::microseconds kEngineSlice{100};

/// sched_attr as the kernel's ABI defines it (glibc declares no wrapper for these calls).
struct SchedAttr {
  std::uint32_t size = sizeof(SchedAttr);
  std::uint32_t sched_policy = 0;
  std::uint64_t sched_flags = 0;
  std::int32_t sched_nice = 0;
  std::uint32_t sched_priority = 0;
  std::uint64_t sched_runtime = 0;
  std::uint64_t sched_deadline = 0;
  std::uint64_t sched_period = 0;
  std::uint32_t sched_util_min = 0;
  std::uint32_t sched_util_max = 0;
};

/// The calling thread's scheduling attributes, or false.
inline bool current_sched_attr(SchedAttr& out) noexcept {
  out = SchedAttr{};
  return ::syscall(SYS_sched_getattr, 0, &out, sizeof out, 0) == 0;
}

/// Whether engine threads started from now on ask for kEngineSlice (on by default). Tests of
/// the race between a woken lane and the run's fence turn it off: with the short slice the lane
/// usually wins it, and they need the fence to win some.
inline std::atomic<bool>& short_slices_enabled() noexcept {
  static std::atomic<bool> on{true};
  return on;
}

/// Asks for kEngineSlice for the calling thread (see above). True when the kernel took it.
inline bool request_short_slice() noexcept {
  if (!short_slices_enabled().load(std::memory_order_relaxed)) return false;
  SchedAttr a;
  if (!current_sched_attr(a) || a.sched_policy != SCHED_OTHER) return false;
  a.size = sizeof a;
  a.sched_flags = 0;  // its nice value (read above) stays; no utilization clamps
  a.sched_runtime = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(kEngineSlice).count());
  return ::syscall(SYS_sched_setattr, 0, &a, 0) == 0;
}

}  // namespace simpler::detail
