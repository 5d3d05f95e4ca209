// simpler::detail::ReadyRing — the Orchestrator's ready single tasks on their way to the scheduler
// pass, with what routing them needs.
//
// A bounded single-producer ring (the Orchestrator's thread) with one consumer at a time (whoever
// holds the scheduler's pass token: EngineCore::pass_owner, taken and given back seq_cst). Each
// record carries a task's routing fields, so the pass queues and posts it without reading the
// task's slot: that slot was just written on the Orchestrator's core, and reading it on the
// scheduler's cost a cache miss per task (two, with the linked stack it replaces on this path,
// whose links are chased one miss after another). A full ring refuses the push; the Orchestrator
// then uses the ready inbox stack, which is unbounded.
#pragma once

#include <atomic>
#include <cstdint>

#include "simpler/callable.hpp"
#include "simpler/detail/asymmetric_fence.hpp"
#include "simpler/detail/cache_line.hpp"
#include "simpler/detail/slot.hpp"
#include "simpler/task.hpp"

namespace simpler::detail {

/// A ready single task (not a group, not poisoned) and its routing fields, copied from its slot.
struct ReadyRecord {
  TaskSlot slot;
  WorkerId target;  ///< any_worker = the scheduler picks
  Role role;
  CallableKind kind;
};

class ReadyRing {
 public:
  static constexpr std::uint32_t kCapacity = 1024;

  /// Producer only. The tail store publishes the task data written before it. `light` (the
  /// consumer's EventCount is asymmetric): a release store and a light_fence(); the producer must
  /// then issue a seq_cst fence before anything but that EventCount's has_waiters() relies on the
  /// push being seen (the sleeper's heavy_fence() covers the has_waiters() check itself).
  /// Otherwise seq_cst, like the stack's push, so an EventCount notify after it cannot miss a
  /// sleeping consumer. The seq_cst store (an xchg) waits for the tail's line, which the
  /// consumer's last look took: most of an empty task's submit (docs/engine.md, the ready ring).
  [[nodiscard]] bool push(const ReadyRecord& r, bool light) noexcept {
    const std::uint32_t t = tail_.load(std::memory_order_relaxed);
    if (t - head_seen_ == kCapacity) {
      head_seen_ = head_.load(std::memory_order_acquire);
      if (t - head_seen_ == kCapacity) return false;
    }
    records_[t % kCapacity] = r;
    if (light) {
      tail_.store(t + 1, std::memory_order_release);
      light_fence();
    } else {
      tail_.store(t + 1, std::memory_order_seq_cst);
    }
    return true;
  }
  /// Producer only: records pushed and not yet taken by a pass (a relaxed look at the
  /// consumer's head, so a moment old).
  [[nodiscard]] std::uint32_t waiting() const noexcept {
    return tail_.load(std::memory_order_relaxed) - head_.load(std::memory_order_relaxed);
  }
  /// Any thread.
  [[nodiscard]] bool empty() const noexcept {
    return head_.load(std::memory_order_seq_cst) == tail_.load(std::memory_order_seq_cst);
  }
  /// Consumer only (the pass token's holder): calls f(record) for everything pushed so far, in
  /// push order, and frees their places.
  /// A record is taken before f sees it: if f throws, that record is not handed out again.
  template <class F>
  void drain(F&& f) {
    struct Taken {
      std::atomic<std::uint32_t>& head;
      std::uint32_t h;
      // seq_cst: a fence check that sees the ring empty (EngineCore::ready_empty) is ordered
      // with the pass's own flags, as the stack's exchange was.
      ~Taken() { head.store(h, std::memory_order_seq_cst); }
    };
    const std::uint32_t t = tail_.load(std::memory_order_acquire);
    Taken taken{head_, head_.load(std::memory_order_relaxed)};
    while (taken.h != t) {
      const ReadyRecord r = records_[taken.h % kCapacity];
      ++taken.h;
      f(r);
    }
  }

 private:
  alignas(kCacheLine) std::atomic<std::uint32_t> tail_{0};
  std::uint32_t head_seen_ = 0;  ///< the producer's last look at head_
  alignas(kCacheLine) std::atomic<std::uint32_t> head_{0};
  alignas(kCacheLine) ReadyRecord records_[kCapacity];
};

}  // namespace simpler::detail
