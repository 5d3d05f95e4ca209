// simpler::detail — asymmetric fences: a frequent side that publishes with no fence of its own,
// and a rare side that pays for both with membarrier(2).
//
// A Dekker-style hand-off (A stores its data, then loads B's flag; B stores its flag, then loads
// A's data) needs a store-load fence on both sides, or each may read the other's old value and
// both move on: on x86 a store waits in the store buffer while later loads complete. The fence is
// an xchg or mfence that also waits for that store's cache line, which the other core holds: a
// cross-core miss paid as a stall on every publish. When one side runs per task and the other
// only when it is about to sleep, the sleeper can instead force the fence onto the publisher:
// MEMBARRIER_CMD_PRIVATE_EXPEDITED returns only after every thread of this process that is on a
// CPU has executed a full memory barrier (one that is not on a CPU has passed a context switch,
// which is one). So:
//   publisher: store (release); light_fence(); load the sleeper's flag
//   sleeper:   store its flag (seq_cst RMW); heavy_fence(); load the published data
// If the barrier lands in the publisher after its store, the store is visible before the
// sleeper's load; if before it, the publisher's load comes after the sleeper's RMW and sees the
// flag. Either way one side sees the other.
#pragma once

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace simpler::detail {

inline long membarrier_call(int cmd) noexcept {
  return ::syscall(__NR_membarrier, cmd, 0U, 0);
}

/// Whether heavy_fence() works here (the kernel has the private expedited command, and this
/// process registered for it). Decided once per process, at the first call.
inline bool heavy_fence_available() noexcept {
  static const bool available = [] {
    const long commands = membarrier_call(MEMBARRIER_CMD_QUERY);
    if (commands < 0 || (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
           membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
  }();
  return available;
}

/// The publisher's half: orders nothing at run time, only keeps the compiler from moving the
/// store past the load.
inline void light_fence() noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

/// The sleeper's half: a full barrier on every running thread of this process. A syscall and an
/// interrupt on each CPU that runs one of them: for paths about to sleep, never per task.
/// Returns false when the kernel refused: then the light side's stores may still be unseen.
/// On the calling thread the call is a full barrier too (the kernel fences around the command).
[[nodiscard]] inline bool heavy_fence() noexcept {
  if (membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return true;
  // EPERM: registration belongs to an address space, and a forked child starts unregistered.
  if (errno == EPERM && membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0) {
    return membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
  }
  return false;
}

// Across processes (a forked child asleep on a frame ring in shared memory, its parent sending):
// MEMBARRIER_CMD_GLOBAL_EXPEDITED is the same barrier on every running thread of every process
// that registered with MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED. The publishing process
// registers; the sleeping one only issues the command.

/// Registers this process as a light publisher to sleepers in other processes, so that their
/// global_heavy_fence() reaches its threads. False when the kernel lacks the command or refused
/// (then publish with seq_cst). Registration belongs to an address space: a forked child starts
/// unregistered, so call this in the process that will publish, where its channel is set up (a
/// syscall or two; never per message).
[[nodiscard]] inline bool register_global_light_publisher() noexcept {
  const long commands = membarrier_call(MEMBARRIER_CMD_QUERY);
  if (commands < 0 || (commands & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) return false;
  return membarrier_call(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
}

/// The sleeper's half across processes: a full barrier on every running thread of every
/// registered process (and on the calling thread). False when the kernel refused.
[[nodiscard]] inline bool global_heavy_fence() noexcept {
  return membarrier_call(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
}

}  // namespace simpler::detail
