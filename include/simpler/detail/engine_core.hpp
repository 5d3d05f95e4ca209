// simpler::detail::EngineCore — state shared by the Orchestrator, the Scheduler and the lanes of
// one Worker.
//
// None of this depends on the lane types. The hand-offs:
//   Orchestrator --ready_ring/ready_inbox--> Scheduler --LaneCore::post--> lane thread
//   lane thread --done stack--> Scheduler --retire_inbox--> Orchestrator
// Each arrow is a lock-free stack plus an EventCount, so an idle receiver sleeps and a busy one
// is never woken by a syscall.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "simpler/detail/cache_line.hpp"
#include "simpler/detail/deadline.hpp"
#include "simpler/detail/event_count.hpp"
#include "simpler/detail/lane_core.hpp"
#include "simpler/detail/ready_ring.hpp"
#include "simpler/detail/registry.hpp"
#include "simpler/detail/slot.hpp"
#include "simpler/detail/stat_counter.hpp"
#include "simpler/detail/trace.hpp"
#include "simpler/error.hpp"
#include "simpler/log.hpp"

namespace simpler::detail {

class SchedulerCore;

/// Tunables shared by the engine's threads.
struct EngineTiming {
  std::chrono::nanoseconds spin{std::chrono::microseconds(20)};  ///< spin before sleeping
  std::chrono::microseconds slice{100};         ///< engine threads' time slice; 0 = kernel default
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

/// Slots whose last reference one thread dropped, linked through Slot::next, to be handed to
/// the Orchestrator together: one CAS on retire_inbox per batch instead of one per slot. The
/// Orchestrator drains that inbox while it runs its passes, so each push took the line from its
/// core; in a lane's streak of kept successors (a chain) that push was a quarter of the lane's
/// samples. Owned by one thread; whoever fills one flushes it before anything could wait for
/// what it holds (EngineCore::flush_retired).
struct RetireBatch {
  Slot* first = nullptr;
  Slot* last = nullptr;
  std::uint32_t count = 0;
};

/// Everything the three components share.
///
/// Laid out by writer: each field written per task sits on cache lines of its own, away from the
/// fields other threads read per task, so one thread's hand-off does not invalidate the line the
/// next one reads (with everything packed, a submit missed on the line the lanes' completions
/// dirtied). kCacheLine-aligned groups, top to bottom: read-mostly configuration; the run's
/// deadline and trace level; the run state; the slot pool (its chunk table read-mostly, its free
/// list the Orchestrator's); then one group per hand-off.
struct EngineCore {
  // ---- Read-mostly: set before the threads start or between runs.
  int level = 3;
  EngineTiming timing;
  const CallableRegistry* registry = nullptr;  ///< for naming callables in messages
  /// Some next-level lane has LaneRestrictions: submit checks them (set when lanes are added).
  bool restricted_lanes = false;
  /// The task window (WorkerOptions::task_window): live slots the Orchestrator allows at once.
  std::uint32_t task_window = std::uint32_t{1} << 16;
  /// Next-level and sub lanes by WorkerId (ids are positions).
  std::vector<LaneCore*> next_level;
  std::vector<LaneCore*> subs;
  /// The lanes of both roles whose endpoint the run's thread may drive (LaneCore::drive).
  std::vector<LaneCore*> driven_lanes;
  /// The lanes whose posts the run's fence may run itself (LaneCore::help), when
  /// WorkerOptions::caller_runs_tasks lets it.
  std::vector<LaneCore*> helped_lanes;
  /// The sub lanes whose tasks a submit may run on the run's thread (LaneCore::run_here), when
  /// WorkerOptions::caller_runs_tasks lets it.
  std::vector<LaneCore*> submit_lanes;
  bool caller_runs_tasks = true;

  /// The current run's deadline on the steady clock (ns), 0 = none. Written by the run's thread
  /// before its first submit and after its fence (relaxed: the inbox hand-off orders it). Read
  /// per task by every engine thread, so it has a cache line of its own: nothing written per
  /// task (the slot pool's counters, the hand-off stacks) may share it.
  alignas(kCacheLine) std::atomic<std::int64_t> run_deadline_ns{0};
  /// Its length, for messages (relaxed: read only for messages, by any engine thread).
  std::atomic<std::uint32_t> run_timeout_ms{0};
  /// The run's trace level (0 = off; see detail/trace.hpp). Set by the run's thread before its
  /// first submit and cleared after its fence (relaxed: ordered like run_deadline_ns); read
  /// wherever an event would be recorded, so it shares this read-mostly line.
  std::atomic<std::int32_t> trace_level{0};
  /// Set (relaxed, before the task is published) once some task of this Worker had a deadline
  /// of its own (CallConfig::timeout or WorkerOptions::task_timeout); never cleared. Until then
  /// the scheduler posts a task without looking at its slot. Read per task: on this line.
  std::atomic<bool> task_timeouts_seen{false};
  /// Set by the Orchestrator while it waits for heap space: only then is each retirement worth
  /// a wakeup. Otherwise it collects retirements when it next submits. Read per retirement.
  std::atomic<bool> heap_waiting{false};
  /// Set by the Orchestrator while its task window is full: finished tasks are then counted,
  /// and the one that brings the count to window_wake_at wakes it (it gives their slots back in
  /// one pass rather than one wakeup per task). Read per completion.
  std::atomic<bool> window_waiting{false};
  std::atomic<std::uint32_t> window_wake_at{1};
  EngineTrace trace;  ///< the Orchestrator's and the Scheduler's trace buffers

  /// Written per run (and on a failure); its flags are read per task.
  alignas(kCacheLine) RunState run;
  alignas(kCacheLine) SlotPool pool;

  // ---- Hand-offs: a stack and the EventCount its receiver sleeps on, each on its own line.
  /// Orchestrator -> Scheduler: tasks whose producers are all done. Single tasks the
  /// Orchestrator publishes go through ready_ring, with their routing fields; groups, a full
  /// ring's overflow and the successors lanes make ready go through the stack.
  alignas(kCacheLine) SlotStack ready_inbox;
  ReadyRing ready_ring;
  alignas(kCacheLine) LaneStack done;  ///< lanes -> Scheduler: finished tasks
  /// Scheduler sleeps here. Asymmetric when membarrier allows: the Orchestrator's ready-ring
  /// pushes (one per task) then carry no store-load fence; the scheduler pays a heavy fence
  /// before any sleep longer than a first 100 us nap instead (OrchestratorBase::dispatch_published,
  /// EventCount::sleep_until).
  alignas(kCacheLine) EventCount sched_wake{false, heavy_fence_available()};
  std::atomic<bool> stop{false};
  /// Set by the Orchestrator while it polls for its run's fence, doing the scheduler's passes
  /// itself (SchedulerCore::try_pass): lanes then push without waking the scheduler thread (see
  /// signal_scheduler). It clears the flag before it sleeps and then looks once more, so a push
  /// that skipped the wake-up is taken by that look. Read with the wake-up, so on its line.
  std::atomic<bool> orch_polling{false};
  /// Set by the scheduler thread while it spins with driven lanes to poll (SchedulerCore::
  /// run_loop): it takes their children's answers in, so their lane threads leave them and
  /// sleep. Cleared before it sleeps; answers after that wake the lane's thread (the child does).
  std::atomic<bool> sched_polling{false};
  /// Set by the Orchestrator when its pass made a deadline due earlier than the one the scheduler
  /// thread may be sleeping towards; the scheduler thread clears it when it takes the pass.
  std::atomic<bool> deadline_moved{false};

  /// Who runs the scheduler's pass (SchedulerCore): 0 = nobody, 1 = someone (the scheduler
  /// thread or, for one pass, the Orchestrator's). Whoever lets go looks for input again.
  alignas(kCacheLine) std::atomic<std::uint32_t> pass_owner{0};
  /// Takes pass_owner when nobody holds it (seq_cst, as its pushes are); true when taken.
  bool take_pass() noexcept {
    std::uint32_t free = 0;
    return pass_owner.load(std::memory_order_relaxed) == 0 &&
           pass_owner.compare_exchange_strong(free, 1, std::memory_order_seq_cst);
  }
  void give_pass() noexcept { pass_owner.store(0, std::memory_order_seq_cst); }
  /// The scheduler's body while its thread runs (set by Scheduler::start, cleared at stop), so
  /// the Orchestrator and idle lanes can do a pass themselves; null otherwise. Atomic: lane
  /// threads read it while Scheduler::start and stop write it (see driving()).
  std::atomic<SchedulerCore*> driver{nullptr};

  alignas(kCacheLine) SlotStack
      retire_inbox;  ///< Scheduler -> Orchestrator: last reference dropped
  alignas(kCacheLine)
      EventCount orch_wake;  ///< the Orchestrator sleeps here (heap full, run drain)

  // ---- Written only while the Orchestrator waits (heap space, the task window).
  static constexpr std::uint32_t kRetireBatch = 32;
  /// Slots a lane's streak of kept successors holds before it hands them over (RetireBatch).
  static constexpr std::uint32_t kLaneRetireBatch = 16;
  alignas(kCacheLine) std::atomic<std::uint32_t> retired_since_wake{0};
  std::atomic<std::uint32_t> window_done{0};

  /// Set by the Scheduler when it has nothing queued and no lane busy (then every published
  /// task has finished); cleared before it takes new work. The run's fence waits for it.
  alignas(kCacheLine) std::atomic<bool> sched_idle{false};
  /// Lanes currently running a task the scheduler did not post (a successor they made ready
  /// themselves). The run's fence waits for this to be 0 as well.
  alignas(kCacheLine) std::atomic<std::uint32_t> lane_local{0};

  EngineStats stats;  ///< counters for BasicWorker::stats()

  /// The scheduler's body, if its thread runs (acquire: pairs with Scheduler::start's store).
  /// The SchedulerCore outlives every lane thread, so a pointer read before stop() cleared it
  /// stays usable.
  [[nodiscard]] SchedulerCore* driving() const noexcept {
    return driver.load(std::memory_order_acquire);
  }
  /// Nothing published is waiting for the scheduler's pass to take it. Any thread.
  [[nodiscard]] bool ready_empty() const noexcept {
    return ready_ring.empty() && ready_inbox.empty();
  }

  void notify_scheduler() noexcept { sched_wake.notify_all(); }
  /// After a push to ready_inbox or done (seq_cst): wakes the scheduler thread unless the
  /// Orchestrator is polling and will take the push itself.
  void signal_scheduler() noexcept {
    if (!orch_polling.load(std::memory_order_seq_cst)) sched_wake.notify_all();
  }

  /// Drops one reference on `s`; when it was the last, hands the slot to the Orchestrator to
  /// retire (it owns the TensorMap, the heap rings and the free list), or adds it to `batch`
  /// when one is given (see RetireBatch). Any thread but the Orchestrator's.
  void release_ref(Slot& s, RetireBatch* batch = nullptr) noexcept {
    if (s.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      s.state.store(TaskState::Consumed, std::memory_order_relaxed);
      if (batch == nullptr) {
        hand_retired(&s, &s, 1);
        return;
      }
      s.next = batch->first;
      batch->first = &s;
      if (batch->last == nullptr) batch->last = &s;
      if (++batch->count == kLaneRetireBatch) flush_retired(*batch);
    }
  }
  /// Hands what `batch` holds to the Orchestrator and empties it.
  void flush_retired(RetireBatch& batch) noexcept {
    if (batch.count == 0) return;
    hand_retired(batch.first, batch.last, batch.count);
    batch = RetireBatch{};
  }
  /// Pushes the retired slots first -> ... -> last (`count` of them) to retire_inbox.
  void hand_retired(Slot* first, Slot* last, std::uint32_t count) noexcept {
    retire_inbox.push_chain(first, last);
    // Batched: waking the Orchestrator for every freed slot would make it ping-pong one
    // allocation at a time. The scheduler also wakes it when it goes idle.
    if (heap_waiting.load(std::memory_order_seq_cst) &&
        retired_since_wake.fetch_add(count, std::memory_order_relaxed) + count >= kRetireBatch) {
      retired_since_wake.store(0, std::memory_order_relaxed);
      orch_wake.notify_all();
    }
  }

  /// Records that the run passed its deadline (a TimeoutError, unless the run already failed)
  /// and cancels it: tasks not started are skipped. Any thread.
  void fail_run_deadline() noexcept {
    if (!run.cancelled()) {  // once per run, give or take a race between two noticing threads
      log_worker(LogLevel::Warn, level, "run {} passed its deadline of {} ms", run.id(),
                 run_timeout_ms.load(std::memory_order_relaxed));
    }
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

  /// Records a failed task as the run's error (the first one wins). Any thread. Views, so a
  /// caller passing a literal allocates nothing: every copy is made here, where running out of
  /// memory still fails the run.
  void fail_run(Outcome outcome, std::string_view worker, std::string_view callable,
                std::string_view message, ErrorKind kind = ErrorKind::Other,
                std::int32_t code = 0) noexcept {
    try {
      run.fail(std::make_exception_ptr(TaskError(outcome, level, std::string(worker),
                                                 std::string(callable), std::string(message), kind,
                                                 code)));
    } catch (...) {
      // Building the error ran out of memory: still fail the run, with what we have.
      run.fail(std::current_exception());
    }
  }

  /// Ends a task: publishes its outcome, closes its consumer list (poisoning the consumers when
  /// it did not succeed), then drops the references it held and its own. Calls
  /// `on_ready(consumer)` for each consumer this made ready. Safe on any engine thread (the
  /// Orchestrator's too, in a scheduler pass: see SchedulerCore::try_pass); `s` must not be
  /// touched afterwards.
  /// `batch`: where slots whose last reference this drops go (release_ref); null hands each
  /// over at once.
  template <class OnReady>
  void complete(Slot& s, bool failed, OnReady&& on_ready, RetireBatch* batch = nullptr) noexcept {
    s.state.store(failed ? TaskState::Failed : TaskState::Completed, std::memory_order_relaxed);
    s.failed.store(failed, std::memory_order_relaxed);  // published by the exchange below
    // seq_cst, like the window_waiting load below: an Orchestrator that starts waiting after
    // that load sees this task finished when it next looks.
    Edge* e = s.consumers.exchange(closed_list(), std::memory_order_seq_cst);
    while (e != nullptr) {
      Edge* next = e->next;  // read before the consumer may move on
      Slot& c = pool.at(e->consumer);
      if (failed && !e->order_only) c.poisoned.store(true, std::memory_order_relaxed);
      // acq_rel: release publishes `poisoned`; acquire sees the other releasers' flags.
      if (c.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) on_ready(c);
      e = next;
    }
    for (TaskSlot h : s.holds) release_ref(pool.at(h), batch);
    release_ref(s, batch);  // last touch of `s`
    // An Orchestrator waiting for its task window or for heap bytes gets the slots a lane's
    // streak holds (and their bytes) now, not when the batch fills or the streak ends (after a
    // successor that may run for long, or wait for that very submit).
    const bool window_wait = window_waiting.load(std::memory_order_seq_cst);
    if (batch != nullptr && (window_wait || heap_waiting.load(std::memory_order_relaxed)))
        [[unlikely]] {
      flush_retired(*batch);
    }
    // Counted after its own reference went, so the Orchestrator's pass retires it at once.
    if (window_wait) [[unlikely]] {
      if (window_done.fetch_add(1, std::memory_order_seq_cst) + 1 ==
          window_wake_at.load(std::memory_order_relaxed))
        orch_wake.notify_all();
    }
  }
};

}  // namespace simpler::detail

namespace simpler::detail {

inline std::string EngineCore::callable_name(const Slot& s) const noexcept {
  try {
    if (registry != nullptr) return registry->name_of(s.digest, s.callable_index);
    return fmt::format("<callable {:#018x}>", s.digest);
  } catch (...) {
    return {};
  }
}

}  // namespace simpler::detail
