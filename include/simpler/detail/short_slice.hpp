// simpler::detail::request_slice — engine threads ask the kernel for a short time slice.
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
// WorkerOptions::engine_slice (100 us by default) for itself at its start. Best effort: a kernel
// without it, a policy other than SCHED_OTHER (left alone) or a refusal keeps the default slice.
#pragma once

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>

namespace simpler::detail {

/// The slices the kernel grants (it clamps sched_runtime to this range).
inline constexpr std::chrono::microseconds kMinSlice{100};
inline constexpr std::chrono::microseconds kMaxSlice{100'000};

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

/// Asks for `slice` for the calling thread (see above); 0 asks nothing. True when the kernel
/// took it.
inline bool request_slice(std::chrono::microseconds slice) noexcept {
  if (slice.count() <= 0) return false;
  SchedAttr a;
  if (!current_sched_attr(a) || a.sched_policy != SCHED_OTHER) return false;
  a.size = sizeof a;
  a.sched_flags = 0;  // its nice value (read above) stays; no utilization clamps
  a.sched_runtime = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count());
  return ::syscall(SYS_sched_setattr, 0, &a, 0) == 0;
}

}  // namespace simpler::detail
