// simpler::detail — state shared by the Orchestrator, the Scheduler and the lanes of one Worker.
//
// None of this depends on the lane types, so it is compiled once in lib/. The hand-offs:
//   Orchestrator --ready_inbox--> Scheduler --LaneCore::post--> lane thread
//   lane thread --done stack--> Scheduler --retire_inbox--> Orchestrator
// Each arrow is a lock-free stack plus an EventCount, so an idle receiver sleeps and a busy one
// is never woken by a syscall.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "simpler/callable.hpp"
#include "simpler/detail/event_count.hpp"
#include "simpler/detail/slot.hpp"
#include "simpler/error.hpp"
#include "simpler/task_args.hpp"

namespace simpler {
class Orchestrator;
struct ChipCallable;

/// What a leaf is asked to run: the callable's identity, its arguments and its config. The
/// pointed-to data lives until the leaf returns.
struct LeafRequest {
  std::uint64_t digest = 0;
  std::uint32_t index_hint = 0;  ///< the parent's registry index; a hint, the digest decides
  TaskArgsView args;
  const CallConfig* config = nullptr;
  /// When the task must have finished (max() = never). A transport that can stop its child
  /// (EnforcesDeadlines) ends the task there itself; for the others the scheduler watches it.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::uint32_t deadline_ms = 0;  ///< the deadline's length, for messages
  bool run_deadline = false;      ///< the deadline is the run's (else the task's own timeout)
};

namespace detail {
/// "its deadline of 200 ms (...)" or "the run's deadline of 250 ms (...)", for messages.
std::string describe_deadline(std::uint32_t ms, bool run_deadline);
inline std::string describe_deadline(const LeafRequest& r) {
  return describe_deadline(r.deadline_ms, r.run_deadline);
}
/// Nanoseconds on the steady clock (the unit of the engine's atomic deadlines).
inline std::int64_t steady_ns(std::chrono::steady_clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
inline std::chrono::steady_clock::time_point steady_from_ns(std::int64_t ns) noexcept {
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::nanoseconds(ns)));
}
/// A timeout as the engine stores it: whole milliseconds, saturated at ~49.7 days (a longer
/// one is as good as none, and the sum with the clock must not overflow).
inline std::uint32_t clamp_ms(std::chrono::milliseconds t) noexcept {
  if (t.count() <= 0) return 0;
  return t.count() >= 0xffffffffLL ? 0xffffffffU : static_cast<std::uint32_t>(t.count());
}
/// `now + t`, saturated at time_point::max() instead of overflowing.
inline std::chrono::steady_clock::time_point deadline_after(
    std::chrono::steady_clock::time_point now, std::chrono::milliseconds t) noexcept {
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::time_point::max() - now);
  return t >= room ? std::chrono::steady_clock::time_point::max() : now + t;
}
/// Keeps `p` alive until the process exits (never destroyed, still reachable for leak
/// checkers). For what an abandoned thread may still touch.
void keep_forever(std::shared_ptr<void> p) noexcept;
}  // namespace detail

namespace detail {

enum class Role : std::uint8_t { NextLevel, Sub };

/// The scheduler-facing half of a lane (a WorkerThread). Not a template, so the scheduler's hot
/// path touches no lane-type-specific code.
///
/// A lane holds up to kDepth posted tasks (an SPSC ring: the scheduler produces, the lane thread
/// consumes), so a lane that finishes a task usually finds the next one already there instead of
/// waiting for a round trip through the scheduler. Results go back through a second ring indexed
/// the same way; the lane puts itself on the scheduler's done stack once per batch.
struct LaneCore {
  static constexpr std::uint32_t kDepth = 8;

  LaneCore(Role r, WorkerId i, std::string n) : role(r), id(i), name(std::move(n)) {}
  LaneCore(const LaneCore&) = delete;
  LaneCore& operator=(const LaneCore&) = delete;

  const Role role;
  const WorkerId id;
  const std::string name;  ///< "sub worker 0", used in error messages

  struct Posted {  // 8 bytes: eight fit one cache line
    TaskSlot slot;
    std::uint32_t member : 31;
    std::uint32_t watched : 1;  ///< the scheduler watches its deadline (counted in `timed`)
  };
  struct Result {
    Outcome outcome = Outcome::Success;
    Fault fault;                     ///< what failed (message buffer reused)
    std::string callable;            ///< failing callable's name
    bool completed_by_lane = false;  ///< the lane completed the task itself (singles)
  };

  // ---- Scheduler-private.
  std::uint32_t inflight = 0;   ///< posted and not yet collected
  std::uint32_t staged = 0;     ///< ring entries written; published to `posted` per dispatch pass
  std::uint32_t collected = 0;  ///< results taken so far
  bool reserved = false;
  std::uint32_t index = 0;         ///< position in the scheduler's lane table of this role
  std::uint32_t timed = 0;         ///< posted tasks whose deadline the scheduler watches
  std::uint32_t timed_min_ms = 0;  ///< smallest timeout among them (0 = only the run's)
  [[nodiscard]] bool idle() const noexcept { return inflight == 0; }
  /// Set at construction: the transport does not enforce deadlines, the scheduler watches them.
  bool watched = false;

  // ---- Scheduler -> lane: ring[i % kDepth] is written, then `posted` (seq_cst) publishes it.
  std::array<Posted, kDepth> ring{};
  std::atomic<std::uint32_t> posted{0};
  std::atomic<bool> stopping{false};
  /// Set by the lane when its child is gone for good; the scheduler then stops giving it shared
  /// work (tasks directed at it still go there and fail at once).
  std::atomic<bool> dead{false};
  /// Set by the scheduler when it abandoned the lane (its thread overran a deadline): nothing
  /// is posted to it again; its thread is detached, not joined, at shutdown.
  std::atomic<bool> lost{false};
  EventCount wake;

  // ---- Deadline watch, for lanes whose transport cannot stop its child (a thread). Before such
  // a lane runs a task with a deadline (always its oldest ring entry: see runnable_here) it
  // stores watch_deadline_ns, then `watch` = (seq << 2) | kWatchRunning (release); afterwards it
  // CASes that word back to (seq << 2). The scheduler, past the deadline, CASes kWatchAbandoned
  // into the running word: whichever CAS wins decides whether the lane or the scheduler
  // completes the task. A lane that loses exits its thread without touching the engine again
  // (the lane is `lost`). What ran and why is derived from the ring entry and the deadline.
  static constexpr std::uint64_t kWatchRunning = 1;
  static constexpr std::uint64_t kWatchAbandoned = 2;
  std::atomic<std::uint64_t> watch{0};
  // Relaxed: written before the release store of `watch`, read after its acquire load and
  // validated by the scheduler's CAS on it (a lane moves on only after its own CAS).
  std::atomic<std::int64_t> watch_deadline_ns{0};

  // ---- Lane -> scheduler: results[i % kDepth] is written, then `completed` (seq_cst) publishes
  // it. `queued` says the lane is on the done stack; the lane pushes itself only when it flips
  // queued false -> true, the scheduler clears it before reading `completed` (both seq_cst, so a
  // completion published after the clear is either seen or re-pushes the lane).
  std::array<Result, kDepth> results;
  std::atomic<std::uint32_t> completed{0};
  std::atomic<bool> queued{false};
  LaneCore* next_done = nullptr;
};

/// Lanes with results to collect (each lane is on it at most once: see LaneCore::queued).
using LaneStack = IntrusiveStack<LaneCore, &LaneCore::next_done>;

using SubFn = std::function<void(TaskArgsView)>;
using OrchFn = std::function<void(Orchestrator&, TaskArgsView, const CallConfig&)>;

/// Callables registered on one Worker. Appended to only outside runs; read by lanes during runs
/// (the run's hand-offs order the two). Forked children inherit it.
class CallableRegistry {
 public:
  struct Entry {
    CallableKind kind;
    std::string name;
    std::uint64_t digest;
    SubFn sub;
    OrchFn orch;
    std::shared_ptr<const ChipCallable> chip;  ///< CallableKind::Chip: what the chips load
  };
  static constexpr std::uint32_t npos = ~std::uint32_t{0};

  explicit CallableRegistry(std::uint64_t owner) : owner_(owner) {}

  /// Adds an entry; the one of `sub`, `orch`, `chip` that matches `kind` must be set. Throws
  /// UsageError for an empty name or function, or a name (digest) already registered.
  CallableHandle add(CallableKind kind, std::string name, SubFn sub, OrchFn orch,
                     std::shared_ptr<const ChipCallable> chip = {});
  /// The entry `h` names; throws UsageError for a foreign, unknown or stale handle.
  const Entry& check(const CallableHandle& h) const;
  /// The entry with this digest (index_hint tried first), or nullptr.
  const Entry* find(std::uint64_t digest, std::uint32_t index_hint) const noexcept;
  /// The index of the entry with this digest (index_hint tried first), or npos.
  std::uint32_t index_of(std::uint64_t digest, std::uint32_t index_hint) const noexcept;
  /// Entry `index` (< size()).
  [[nodiscard]] const Entry& at(std::uint32_t index) const noexcept { return entries_[index]; }
  /// Name for messages; "<unknown callable 0x...>" when the digest is not registered.
  std::string name_of(std::uint64_t digest, std::uint32_t index_hint) const;
  [[nodiscard]] std::uint64_t owner() const noexcept { return owner_; }
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  /// Drops the entry added last (a registration that had to be rolled back).
  void remove_last() noexcept;

 private:
  std::uint64_t owner_;
  std::vector<Entry> entries_;
  std::unordered_map<std::uint64_t, std::uint32_t> by_digest_;
};

/// Tunables shared by the engine's threads.
struct EngineTiming {
  std::chrono::nanoseconds spin{std::chrono::microseconds(20)};  ///< spin before sleeping
  std::chrono::milliseconds heap_wait{10'000};  ///< longest wait for heap ring space
  std::chrono::milliseconds idle_tick{200};     ///< scheduler's liveness-check period
  std::chrono::milliseconds task_timeout{0};    ///< default task deadline; 0 = none
};

/// Per-run state: the first error and the cancellation flag.
class RunState {
 public:
  void begin(std::uint32_t id) {
    std::lock_guard lk(mu_);
    id_ = id;
    first_error_ = nullptr;
    failed_.store(false, std::memory_order_relaxed);
    cancelled_.store(false, std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint32_t id() const noexcept { return id_; }
  /// Records `e` if it is the run's first error (thread-safe).
  void fail(std::exception_ptr e) {
    std::lock_guard lk(mu_);
    if (!first_error_) first_error_ = std::move(e);
    failed_.store(true, std::memory_order_release);
  }
  [[nodiscard]] bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  [[nodiscard]] std::exception_ptr first_error() const {
    std::lock_guard lk(mu_);
    return first_error_;
  }
  void cancel() noexcept { cancelled_.store(true, std::memory_order_release); }
  [[nodiscard]] bool cancelled() const noexcept {
    return cancelled_.load(std::memory_order_acquire);
  }

 private:
  mutable std::mutex mu_;
  std::uint32_t id_ = 0;
  std::exception_ptr first_error_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> cancelled_{false};
};

/// Everything the three components share.
struct EngineCore {
  int level = 3;
  EngineTiming timing;
  const CallableRegistry* registry = nullptr;  ///< for naming callables in messages
  /// The current run's deadline on the steady clock (ns), 0 = none. Written by the run's thread
  /// before its first submit and after its fence (relaxed: the inbox hand-off orders it). Read
  /// per task by every engine thread, so it has a cache line of its own: nothing written per
  /// task (the slot pool's counters, the hand-off stacks) may share it.
  alignas(64) std::atomic<std::int64_t> run_deadline_ns{0};
  /// Its length, for messages (relaxed: read only for messages, by any engine thread).
  std::atomic<std::uint32_t> run_timeout_ms{0};
  alignas(64) SlotPool pool;
  RunState run;

  SlotStack ready_inbox;  ///< Orchestrator -> Scheduler: slots whose producers are all done
  LaneStack done;         ///< lanes -> Scheduler: finished tasks
  EventCount sched_wake;  ///< Scheduler sleeps here
  std::atomic<bool> stop{false};

  SlotStack retire_inbox;  ///< Scheduler -> Orchestrator: slots whose last reference dropped
  EventCount orch_wake;    ///< the Orchestrator sleeps here (heap full, run drain)
  /// Set by the Orchestrator while it waits for heap space: only then is each retirement worth
  /// a wakeup. Otherwise it collects retirements when it next submits.
  std::atomic<bool> heap_waiting{false};
  /// Set by the Scheduler when it has nothing queued and no lane busy (then every published
  /// task has finished); cleared before it takes new work. The run's fence waits for it.
  std::atomic<bool> sched_idle{false};
  static constexpr std::uint32_t kRetireBatch = 32;
  std::atomic<std::uint32_t> retired_since_wake{0};
  /// Lanes currently running a task the scheduler did not post (a successor they made ready
  /// themselves). The run's fence waits for this to be 0 as well.
  std::atomic<std::uint32_t> lane_local{0};

  /// Next-level and sub lanes by WorkerId (ids are positions).
  std::vector<LaneCore*> next_level;
  std::vector<LaneCore*> subs;

  void notify_scheduler() noexcept { sched_wake.notify_all(); }

  /// Drops one reference on `s`; when it was the last, hands the slot to the Orchestrator to
  /// retire (it owns the TensorMap, the heap rings and the free list). Any thread but the
  /// Orchestrator's.
  void release_ref(Slot& s) noexcept {
    if (s.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      s.state.store(SlotState::Consumed, std::memory_order_relaxed);
      retire_inbox.push(&s);
      // Batched: waking the Orchestrator for every freed slot would make it ping-pong one
      // allocation at a time. The scheduler also wakes it when it goes idle.
      if (heap_waiting.load(std::memory_order_seq_cst) &&
          retired_since_wake.fetch_add(1, std::memory_order_relaxed) + 1 >= kRetireBatch) {
        retired_since_wake.store(0, std::memory_order_relaxed);
        orch_wake.notify_all();
      }
    }
  }

  /// Records that the run passed its deadline (a TimeoutError, unless the run already failed)
  /// and cancels it: tasks not started are skipped. Any thread.
  void fail_run_deadline() noexcept {
    try {
      run.fail(std::make_exception_ptr(TimeoutError(fmt::format(
          "L{} Worker::run: the run passed its deadline of {} ms (the CallConfig::timeout given "
          "to run(), else WorkerOptions::run_timeout); tasks not started were skipped and running "
          "ones were stopped",
          level, run_timeout_ms.load(std::memory_order_relaxed)))));
    } catch (...) {
      run.fail(std::current_exception());
    }
    run.cancel();
  }
  /// The name of a task's callable, for messages ("<unknown callable>" when it cannot say).
  std::string callable_name(const Slot& s) const noexcept;

  /// Records a failed task as the run's error (the first one wins). Any thread.
  void fail_run(Outcome outcome, const std::string& worker, const std::string& callable,
                const std::string& message, ErrorKind kind = ErrorKind::Other,
                std::int32_t code = 0) noexcept {
    try {
      run.fail(std::make_exception_ptr(
          TaskError(outcome, level, worker, callable, message, kind, code)));
    } catch (...) {
      // Building the error ran out of memory: still fail the run, with what we have.
      run.fail(std::current_exception());
    }
  }

  /// Ends a task: publishes its outcome, closes its consumer list (poisoning the consumers when
  /// it did not succeed), then drops the references it held and its own. Calls
  /// `on_ready(consumer)` for each consumer this made ready. Safe on any engine thread except
  /// the Orchestrator's; `s` must not be touched afterwards.
  template <class OnReady>
  void complete(Slot& s, bool failed, OnReady&& on_ready) noexcept {
    s.state.store(failed ? SlotState::Failed : SlotState::Completed, std::memory_order_relaxed);
    s.failed.store(failed, std::memory_order_relaxed);  // published by the exchange below
    Edge* e = s.consumers.exchange(closed_list(), std::memory_order_acq_rel);
    while (e != nullptr) {
      Edge* next = e->next;  // read before the consumer may move on
      Slot& c = pool.at(e->consumer);
      if (failed) c.poisoned.store(true, std::memory_order_relaxed);
      // acq_rel: release publishes `poisoned`; acquire sees the other releasers' flags.
      if (c.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) on_ready(c);
      e = next;
    }
    for (TaskSlot p : s.producers) release_ref(pool.at(p));
    release_ref(s);  // last touch of `s`
  }
};

}  // namespace detail
}  // namespace simpler
