// simpler::detail::SchedulerCore — the body of the Scheduler thread.
//
// Moves slot ids between the ready queues, the lanes and completion; never reads task data
// beyond the routing fields (kind, targets, group size). Everything here runs under one token,
// EngineCore::pass_owner, held by the scheduler thread or by the Orchestrator's thread for one
// pass at a time, so the queues and the lanes' busy flags need no further synchronisation.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "simpler/detail/engine_core.hpp"
#include "simpler/detail/ring_buffer.hpp"

namespace simpler::detail {

class SchedulerCore {
 public:
  explicit SchedulerCore(EngineCore& core) : core_(core) {}
  /// Sizes the per-lane queues; call after every lane was registered, before run_loop.
  void prepare();
  /// The scheduler thread's body: returns once EngineCore::stop is set and no lane is busy.
  void run_loop() noexcept;
  /// The Orchestrator's thread, or an idle lane's, does the scheduler's work itself when nobody
  /// else is doing it: takes what arrived and dispatches it. Returns at once when another thread
  /// holds the pass (it looks again after its pass, so nothing is left behind). Saves a hand-off
  /// per task and leaves the scheduler thread asleep (see EngineCore::pass_owner). `passes`
  /// counts the passes that took work (the caller's own counter: one writer each). An idle lane
  /// passes itself as `self`: shared-queue tasks go to it first (it is awake and on a core).
  void try_pass(StatCounter& passes, LaneCore* self = nullptr, bool run_thread = false) noexcept;

 private:
  struct RoleQueues {
    std::vector<LaneCore*>* lanes = nullptr;
    std::vector<RingBuffer<TaskSlot>> directed;  // per lane
    /// Shared work, one queue per CallableKind (indexed by its value): a lane takes only the
    /// kinds its leaf runs, so in a mixed pool a chip callable never lands on a nested Worker.
    std::array<RingBuffer<TaskSlot>, 4> any;
    RingBuffer<TaskSlot> groups;
  };

  /// One pass, by whoever holds EngineCore::pass_owner: deadlines, then what arrived, then the
  /// idle mark. Returns true when something had arrived.
  bool pass();
  [[nodiscard]] bool has_input() const noexcept {
    return !core_.ready_empty() || !core_.done.empty();
  }
  void take_inbox();
  void take_done();
  void became_ready(Slot& s);
  /// became_ready for a task the Orchestrator handed over through the ready ring.
  void became_ready(const ReadyRecord& r);
  void route(Slot& s);
  void route_single(TaskSlot slot, Role role, CallableKind kind, WorkerId target);
  void drain_worklist();
  void dispatch(RoleQueues& q);
  void dispatch_shared(RoleQueues& q, CallableKind kind);
  void trace_pass(std::int64_t begin, std::uint64_t routed) noexcept;
  /// The scheduler thread's spin: takes driven lanes' answers in (DriveStep::PassCollect),
  /// unless the run's fence polls and takes them itself.
  void collect_driven() noexcept;
  void trace_event(TraceKind kind, const Slot& s, std::uint32_t arg, Outcome o) noexcept;
  bool skip_if_cancelled(Slot& s);
  void fail_unplaceable(Slot& s, Role role);
  /// Fails a task directed at a lost lane (one abandoned at a deadline) without posting it.
  void fail_lost(Slot& s, const LaneCore& lane);
  /// Deadlines (only while some are pending): the run's, and those of tasks on watched lanes.
  /// Abandons a watched lane whose task overran; fails and cancels a run past its deadline.
  void check_deadlines(std::chrono::steady_clock::time_point now);
  void abandon(LaneCore& lane);
  void collect_results(LaneCore& lane);
  void end_member(Slot& s, Outcome o);
  [[nodiscard]] bool has_queued_work() const noexcept;
  void post(LaneCore& lane, TaskSlot id, std::uint32_t member);
  void publish_posts();
  /// Tasks a lane may hold from the shared queue before an idle lane would be better (unless
  /// the queue holds enough to keep every lane busy for a while).
  static constexpr std::uint32_t kAnyDepth = 2;
  /// The least depth a backlog prefetches to (see dispatch_shared).
  static constexpr std::uint32_t kDeepFrom = 8;
  [[nodiscard]] bool any_busy() const noexcept;

  EngineCore& core_;
  RoleQueues next_;
  RoleQueues sub_;
  /// Tasks that ended here (skipped, failed before they ran, a group's last member), to be
  /// completed by drain_worklist: a FIFO linked through Slot::next, with each task's outcome in
  /// Slot::group_outcome. Intrusive, so ending a task never allocates: a pass cannot fail.
  Slot* work_head_ = nullptr;
  Slot* work_tail_ = nullptr;
  void finish(Slot& s, Outcome o) noexcept {
    s.group_outcome = o;
    s.next = nullptr;
    (work_tail_ != nullptr ? work_tail_->next : work_head_) = &s;
    work_tail_ = &s;
  }
  /// A ready task that no queue could take (out of memory growing it): the run fails with that
  /// bad_alloc, as when a submit fails after placing its task, and the task is skipped. Call
  /// from the catch block. Warns once per run: a queue that cannot grow refuses every task that
  /// becomes ready after it, and one line each would bury the log (and cost an allocation each
  /// while memory is short).
  void unqueueable(TaskSlot slot) noexcept;
  std::uint32_t oom_warned_run_ = 0;  ///< the run unqueueable() last warned about (ids start at 1)
  std::uint32_t busy_lanes_ = 0;
  std::uint32_t timed_total_ = 0;  ///< watched posted tasks, over all lanes
  std::chrono::steady_clock::time_point next_check_ = std::chrono::steady_clock::time_point::max();
  std::int64_t expired_run_deadline_ = 0;  ///< the run deadline already acted on
  std::uint64_t routed_ = 0;
  std::uint64_t queued_ = 0;  ///< tasks in the queues (published as EngineStats::ready_queued)
  TaskSlot pop(RingBuffer<TaskSlot>& q) noexcept {
    --queued_;
    return q.pop_front();
  }
  LaneCore* self_ = nullptr;        // the lane doing this pass, if a lane does (try_pass)
  bool run_thread_ = false;         // the run's thread does this pass: it drives driven lanes
  std::vector<LaneCore*> touched_;  // lanes with staged, unpublished posts  // bumped by route();
                                    // dispatch repeats while it moves
};

}  // namespace simpler::detail

#include "simpler/detail/scheduler_core.ipp"
