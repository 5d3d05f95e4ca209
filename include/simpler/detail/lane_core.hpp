// simpler::detail::LaneCore — the scheduler-facing half of a lane (a WorkerThread): the post
// ring, the result ring, the wake word and the deadline watch. Not a template, so the scheduler's
// hot path touches no lane-type-specific code.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "simpler/callable.hpp"
#include "simpler/detail/cache_line.hpp"
#include "simpler/detail/event_count.hpp"
#include "simpler/detail/intrusive_stack.hpp"
#include "simpler/detail/slot.hpp"
#include "simpler/detail/stat_counter.hpp"
#include "simpler/detail/trace.hpp"
#include "simpler/error.hpp"
#include "simpler/task_args.hpp"

namespace simpler::detail {

/// What a lane with a restricted view of the Worker offers, checked at submit (off the hot path):
/// the callables it serves (a remote serves what its program registered) and the memory its
/// child sees (a remote sees only its own buffers).
struct LaneRestrictions {
  virtual ~LaneRestrictions() = default;
  [[nodiscard]] virtual bool serves(std::uint64_t digest) const = 0;
  [[nodiscard]] virtual std::string served_names() const = 0;
  /// Where the child is ("127.0.0.1:7000"), for messages.
  [[nodiscard]] virtual std::string where() const = 0;
  /// True when tensors for it must lie in its remote buffers.
  [[nodiscard]] virtual bool remote_memory() const = 0;
  /// Whether [address, address + bytes) lies in one of its live remote buffers.
  [[nodiscard]] virtual bool holds(std::uint64_t address, std::uint64_t bytes) const = 0;
};

/// The scheduler-facing half of a lane (a WorkerThread). Not a template, so the scheduler's hot
/// path touches no lane-type-specific code.
///
/// A lane holds up to kDepth posted tasks (an SPSC ring: the scheduler produces, the lane thread
/// consumes), so a lane that finishes a task usually finds the next one already there instead of
/// waiting for a round trip through the scheduler. Results go back through a second ring indexed
/// the same way; the lane puts itself on the scheduler's done stack once per batch.
struct LaneCore {
  /// Deep enough for a forked child's whole window (ForkShmTransport::kWindow): the scheduler
  /// fills a ring this deep only with a backlog (SchedulerCore::dispatch_shared).
  static constexpr std::uint32_t kDepth = 32;

  LaneCore(Role r, WorkerId i, std::string n) : role(r), id(i), name(std::move(n)) {}
  LaneCore(const LaneCore&) = delete;
  LaneCore& operator=(const LaneCore&) = delete;

  const Role role;
  const WorkerId id;
  const std::string name;  ///< "sub worker 0", used in error messages
  /// The callable kinds its leaf runs (kind_bit mask): the Orchestrator refuses a task directed
  /// at a lane that cannot run it, and the scheduler gives shared work only to lanes that can.
  std::uint8_t runs = kAllCallableKinds;
  /// Set for lanes that serve only some callables or see only remote memory (see
  /// LaneRestrictions); null for the others.
  const LaneRestrictions* restrictions = nullptr;
  /// Lanes whose tasks the run's thread may run at submit (a thread child's SubWorker): when the
  /// sub workers have a backlog, a submit runs a task that is ready at once itself, through this
  /// lane's leaf, instead of queueing it behind the backlog (OrchestratorBase::publish, "Running
  /// tasks at submit" in docs/engine.md). `run_here` runs it (callable digest and registry
  /// index, its arguments, its config) and returns how it ended, recording a failure as the
  /// run's error; the caller completes the task, if it made a slot for it at all. Set at
  /// construction for such lanes, null otherwise. It sits with the read-only fields: the submit
  /// reads it per task, and on the `helper` line below it would miss every time the lane's
  /// thread takes a batch.
  /// `sub_fn`: the sub callable as the submit's registry check found it, or null.
  using RunHereFn = Outcome (*)(LaneCore&, std::uint64_t digest, std::uint32_t index,
                                const TaskArgsView& args, const CallConfig* config,
                                const std::function<void(TaskArgsView)>* sub_fn) noexcept;
  RunHereFn run_here = nullptr;

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

  // Each group below is written by one side per task and starts a cache line of its own, so a
  // write by one thread does not invalidate what the other reads per task (kCacheLine).

  // ---- Scheduler-private.
  alignas(kCacheLine) std::uint32_t inflight = 0;  ///< posted and not yet collected
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
  StatCounter stat_posted;  ///< ring entries published, in all (scheduler)
  /// The lane thread sleeps here. The scheduler reads it right after publishing `posted`, and
  /// the lane writes it only when it runs dry, so it shares the scheduler's lines.
  EventCount wake;
  /// A lane whose endpoint AwaitsAnswerOr sleeps on the endpoint's answer event, not on `wake`,
  /// while tasks are in flight: the scheduler notifies this one too after publishing `posted`
  /// (seq_cst on both sides, as with `wake`), so a post ends that wait. Set by the lane thread
  /// when it starts (the event never moves); null for other lanes. No waiter there costs one load.
  std::atomic<EventCount*> also_wake{nullptr};

  // ---- Driven lanes (DrivenInline endpoints: a forked child). Another thread may run such a
  // lane's endpoint while holding `driver` (WorkerThread, "Driven lanes"): a scheduler pass on
  // any thread but this lane's sends what it posts there itself (Post on the run's thread,
  // PassPost on the scheduler thread or an idle lane, instead of waking the lane's thread), and
  // the run's fence (Collect) or the spinning scheduler thread (PassCollect) takes the child's
  // answers in. Each returns false when it did nothing (the lane's own thread holds it, or there
  // was nothing to take); a post then leaves the posts to the caller to publish as usual.
  // Stepping takes nothing: true while the child is moving off a CPU (CpuStepOff), so its
  // answer is late by a migration and the fence spins on (OrchestratorBase::finish_run).
  enum class DriveStep : std::uint8_t { Post, Collect, PassPost, PassCollect, Stepping };
  using DriveFn = bool (*)(LaneCore&, DriveStep) noexcept;
  DriveFn drive = nullptr;  ///< set at construction for driven lanes, null for the others

  // ---- Helped lanes (a thread child's SubWorker or nested Worker): the run's fence, which
  // would only wait, runs what is posted here itself when the lane's thread has not taken it
  // yet (WorkerThread, "Helped lanes"). Whoever holds `helper` owns the ring's consumer side;
  // `taken_pub` is how far it got, published when it lets go. `help` runs the posts (false when
  // it did nothing: the lane's thread holds them, or one of them must stay on that thread).
  using HelpFn = bool (*)(LaneCore&) noexcept;
  HelpFn help = nullptr;  ///< set at construction for lanes the fence may help, null otherwise
  static constexpr std::uint32_t kHelperLane = 1;
  static constexpr std::uint32_t kHelperRun = 2;
  alignas(kCacheLine) std::atomic<std::uint32_t> helper{0};
  std::atomic<std::uint32_t> taken_pub{0};
  /// Something is posted that nobody has taken: the cheap look before help(). Any thread.
  [[nodiscard]] bool help_wanted() const noexcept {
    return helper.load(std::memory_order_relaxed) == 0 &&
           posted.load(std::memory_order_relaxed) != taken_pub.load(std::memory_order_relaxed);
  }

  // ---- Rarely written, read by both sides.
  alignas(kCacheLine) std::atomic<bool> stopping{false};
  /// Set by the lane when its child is gone for good; the scheduler then stops giving it shared
  /// work (tasks directed at it still go there and fail at once).
  std::atomic<bool> dead{false};
  /// Set by the scheduler when it abandoned the lane (its thread overran a deadline): nothing
  /// is posted to it again; its thread is detached, not joined, at shutdown.
  std::atomic<bool> lost{false};

  // ---- Deadline watch, for lanes whose transport cannot stop its child (a thread). Before such
  // a lane runs a task with a deadline (always its oldest ring entry: see runnable_here) it
  // stores watch_deadline_ns, then `watch` = (seq << 2) | kWatchRunning (release); afterwards it
  // CASes that word back to (seq << 2). The scheduler, past the deadline, CASes kWatchAbandoned
  // into the running word: whichever CAS wins decides whether the lane or the scheduler
  // completes the task. A lane that loses exits its thread without touching the engine again
  // (the lane is `lost`). What ran and why is derived from the ring entry and the deadline.
  static constexpr std::uint64_t kWatchRunning = 1;
  static constexpr std::uint64_t kWatchAbandoned = 2;
  alignas(kCacheLine) std::atomic<std::uint64_t> watch{0};
  // Relaxed: written before the release store of `watch`, read after its acquire load and
  // validated by the scheduler's CAS on it (a lane moves on only after its own CAS).
  std::atomic<std::int64_t> watch_deadline_ns{0};

  // ---- Lane -> scheduler: results[i % kDepth] is written, then `completed` (seq_cst) publishes
  // it. `queued` says the lane is on the done stack; the lane pushes itself only when it flips
  // queued false -> true, the scheduler clears it before reading `completed` (both seq_cst, so a
  // completion published after the clear is either seen or re-pushes the lane).
  alignas(kCacheLine) std::array<Result, kDepth> results;
  alignas(kCacheLine) std::atomic<std::uint32_t> completed{0};
  std::atomic<bool> queued{false};
  LaneCore* next_done = nullptr;
  /// Lanes that may run at submit (run_here): what the lane's thread saw its tasks cost, for the
  /// run's thread to read at its backlog looks (OrchestratorBase::sub_backlogged). One task in
  /// kCostSampleEvery is timed; the word is (run id << 32) | the count of timed tasks in a row
  /// that took less than kCheapTask (0 after one that did not), saturating. Relaxed: a hint.
  std::atomic<std::uint64_t> cheap_run{0};
  /// The callable (registry index) of the last timed task: an earlier run's word speaks for
  /// that callable alone (OrchestratorBase::lanes_find_tasks_cheap). Relaxed, a hint like
  /// `cheap_run`: the pair an earlier run left is ordered by its fence; one read while the lane
  /// times a task of this run may mix the two, which misleads one look at most.
  std::atomic<std::uint32_t> cheap_callable{0};
  static constexpr std::uint32_t kCostSampleEvery = 16;
  static constexpr std::uint32_t kCheapSaturate = 255;
  /// Cheaper than handing a task over (a ready ring push, its slot's lines crossing to a lane
  /// and back, a lane's wake-up now and then): a task that runs in less may as well run on the
  /// orchestration's thread when it is ready at submit.
  static constexpr std::chrono::nanoseconds kCheapTask{500};

  // ---- Tracing: the lane thread records during a run; the run's thread reads after its fence.
  LaneTrace trace;
  std::uint16_t trace_track = 0;  ///< this lane's track in its Worker's trace (set at start)

  // Statistics (BasicWorker::stats()), written by the lane's thread next to what it writes per
  // task anyway. stat_lane: how each ring entry or kept successor ended on this lane (written by
  // the scheduler instead for the entries of a lane it abandoned); stat_tasks: the single tasks
  // this lane completed (the Worker's totals); stat_kept: successors it kept (run_successors).
  alignas(kCacheLine) OutcomeCounters stat_lane;
  OutcomeCounters stat_tasks;
  StatCounter stat_kept;
  StatCounter stat_passes;  ///< scheduler passes (that took work) this lane ran while idle
  /// Driven lanes: tasks the run's thread sent to the child itself (written under `driver`).
  StatCounter stat_driven;
  /// Driven lanes: tasks another thread's pass (the scheduler thread, an idle lane) sent.
  StatCounter stat_driven_pass;
  /// Driven lanes: answers the lane's own thread took in (written under `driver`).
  StatCounter stat_lane_took;
  /// Helped lanes: tasks the run's thread ran itself in its fence (written under `helper`).
  StatCounter stat_helped;
  /// Forked lanes: times the child stepped off its sender's CPU (copied at each answer taken).
  StatCounter stat_cpu_steps;
  /// Tasks of this lane the run's thread ran at submit (run_here), and how they ended: written
  /// by the run's thread per such task, so on a line of their own.
  alignas(kCacheLine) OutcomeCounters stat_at_submit;
};

/// Lanes with results to collect (each lane is on it at most once: see LaneCore::queued).
using LaneStack = IntrusiveStack<LaneCore, &LaneCore::next_done>;

}  // namespace simpler::detail
