// The Scheduler thread: ready routing, dispatch to lanes, completion and failure propagation.
// Included once, at the end of its header; every function is inline (the library is header-only).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <new>
#include <thread>

#include "simpler/detail/scheduler_core.hpp"

namespace simpler::detail {

inline void SchedulerCore::prepare() {
  next_.lanes = &core_.next_level;
  sub_.lanes = &core_.subs;
  touched_.reserve(core_.next_level.size() + core_.subs.size());
  for (RoleQueues* q : {&next_, &sub_}) {
    q->directed.clear();
    q->directed.resize(q->lanes->size());
    for (std::size_t i = 0; i < q->lanes->size(); ++i) {
      (*q->lanes)[i]->index = static_cast<std::uint32_t>(i);
    }
  }
  // Trace tracks: the next-level lanes, then the sub lanes, after the Orchestrator and Scheduler.
  std::uint16_t track = kFirstLaneTrack;
  for (LaneCore* l : core_.next_level) l->trace_track = track++;
  for (LaneCore* l : core_.subs) l->trace_track = track++;
}

inline bool SchedulerCore::any_busy() const noexcept {
  return busy_lanes_ != 0;
}

inline bool SchedulerCore::pass() {
  // Deadlines cost a clock read per pass, and only while some are pending.
  const std::int64_t run_dl = core_.run_deadline_ns.load(std::memory_order_relaxed);
  if (timed_total_ != 0 || run_dl != 0) {
    if (run_dl != 0 && run_dl != expired_run_deadline_) {
      next_check_ = std::min(next_check_, steady_from_ns(run_dl));
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_check_) check_deadlines(now);
  }
  const bool arrived = !core_.ready_empty();
  const bool finished = !core_.done.empty();
  if (arrived || finished) {
    // Cleared before taking work, so an Orchestrator that sees the inbox empty also sees this.
    core_.sched_idle.store(false, std::memory_order_seq_cst);
    const bool pass_traced =
        arrived && core_.trace_level.load(std::memory_order_relaxed) >= kTraceSched;
    const std::int64_t pass_begin = pass_traced ? trace_now() : 0;
    const std::uint64_t routed_before = routed_;
    if (finished) take_done();
    if (arrived) take_inbox();
    std::uint64_t before = 0;
    do {
      before = routed_;
      dispatch(next_);
      dispatch(sub_);
    } while (routed_ != before);
    core_.stats.ready_queued.set(queued_);
    if (pass_traced) [[unlikely]]
      trace_pass(pass_begin, routed_ - routed_before);
  }
  // Nothing queued and no lane busy: every published task has finished (the run's fence).
  if (!any_busy() && !core_.sched_idle.load(std::memory_order_relaxed) && core_.ready_empty()) {
    core_.sched_idle.store(true, std::memory_order_seq_cst);
    core_.orch_wake.notify_all();
  }
  return arrived || finished;
}

inline void SchedulerCore::try_pass(StatCounter& passes, LaneCore* self, bool run_thread) noexcept {
  // The holder looks for input again after it lets go (both sides: pushes and the token are
  // seq_cst), so giving up when the token is taken cannot strand a task.
  while (has_input() && core_.take_pass()) {
    const auto check_before = next_check_;
    self_ = self;
    run_thread_ = run_thread;
    if (pass()) passes.add();
    self_ = nullptr;
    run_thread_ = false;
    // A deadline this pass started watching may come before the one the scheduler thread
    // sleeps towards: wake it to look (only with deadlines in play).
    const bool earlier = next_check_ < check_before;
    core_.give_pass();
    if (earlier) [[unlikely]] {
      core_.deadline_moved.store(true, std::memory_order_seq_cst);
      core_.notify_scheduler();
    }
  }
}

inline void SchedulerCore::run_loop() noexcept {
  for (;;) {
    if (!core_.take_pass()) {
      // The Orchestrator is in a pass (a short one); it looks for input again after it.
      std::this_thread::yield();
      continue;
    }
    if (core_.deadline_moved.load(std::memory_order_relaxed)) {
      core_.deadline_moved.store(false, std::memory_order_relaxed);  // next_check_ is read below
    }
    const bool took = pass();
    const bool exit = core_.stop.load(std::memory_order_seq_cst) && !any_busy();
    const auto wake_at =
        std::min(std::chrono::steady_clock::now() + core_.timing.idle_tick, next_check_);
    core_.give_pass();
    if (exit) return;
    if (took) continue;
    // While the Orchestrator polls (its run's fence), it does the passes: lanes do not wake
    // this thread then, and it stays out of the way. Pushes it may miss when the polling ends
    // are taken by the Orchestrator's last look (see EngineCore::orch_polling).
    const auto input = [this] {
      return (has_input() && !core_.orch_polling.load(std::memory_order_seq_cst)) ||
             core_.stop.load(std::memory_order_seq_cst) ||
             core_.deadline_moved.load(std::memory_order_seq_cst);
    };
    if (core_.driven_lanes.empty()) {
      core_.sched_wake.await(input, core_.timing.spin, wake_at);
      continue;
    }
    // With forked children, the spin also takes their answers in (unless the fence polls),
    // so what completes is in this thread's next pass and no lane thread wakes to take it.
    core_.sched_polling.store(true, std::memory_order_seq_cst);
    const auto poll = [&] {
      collect_driven();
      return input();
    };
    const bool got = EventCount::spin_until(poll, core_.timing.spin);
    collect_driven();  // still polling: answers that came meanwhile need no lane thread
    core_.sched_polling.store(false, std::memory_order_seq_cst);
    if (got || input()) continue;
    core_.sched_wake.await(input, std::chrono::nanoseconds(0), wake_at);  // spun already
  }
}

// Level 3: one scheduler pass that took new work, with the tasks it routed and what it left queued.
inline void SchedulerCore::collect_driven() noexcept {
  if (core_.orch_polling.load(std::memory_order_relaxed)) return;  // the fence takes them
  for (LaneCore* l : core_.driven_lanes) l->drive(*l, LaneCore::DriveStep::PassCollect);
}

inline void SchedulerCore::trace_pass(std::int64_t begin, std::uint64_t routed) noexcept {
  std::size_t queued = 0;
  for (const RoleQueues* q : {&next_, &sub_}) {
    queued += q->groups.size();
    for (const auto& a : q->any) queued += a.size();
    for (const auto& d : q->directed) queued += d.size();
  }
  TraceEvent e;
  e.kind = TraceKind::Pass;
  e.t0 = begin;
  e.t1 = trace_now();
  e.arg = static_cast<std::uint32_t>(routed);
  e.arg2 = static_cast<std::uint32_t>(queued);
  e.track = kSchedTrack;
  core_.trace.sched->record(e);
}

inline void SchedulerCore::trace_event(TraceKind kind, const Slot& s, std::uint32_t arg,
                                       Outcome o) noexcept {
  TraceEvent e;
  e.kind = kind;
  e.t0 = trace_now();
  e.task = s.trace_id;
  e.arg = arg;
  e.outcome = static_cast<std::uint8_t>(o);
  e.track = kSchedTrack;
  core_.trace.sched->record(e);
}

inline bool SchedulerCore::has_queued_work() const noexcept {
  for (const RoleQueues* q : {&next_, &sub_}) {
    if (!q->groups.empty()) return true;
    for (const auto& a : q->any) {
      if (!a.empty()) return true;
    }
    for (const auto& d : q->directed) {
      if (!d.empty()) return true;
    }
  }
  return false;
}

inline void SchedulerCore::check_deadlines(std::chrono::steady_clock::time_point now) {
  next_check_ = std::chrono::steady_clock::time_point::max();
  const std::int64_t run_dl = core_.run_deadline_ns.load(std::memory_order_relaxed);
  if (run_dl != 0 && run_dl != expired_run_deadline_) {
    const auto at = steady_from_ns(run_dl);
    if (now < at) {
      next_check_ = at;
    } else {
      // Handled once: later submits find the deadline passed themselves.
      expired_run_deadline_ = run_dl;
      if (!core_.run.cancelled() && (busy_lanes_ != 0 || has_queued_work())) {
        core_.fail_run_deadline();  // lanes stop their running tasks at the same deadline
      }
    }
  }
  if (timed_total_ != 0) {
    for (RoleQueues* q : {&next_, &sub_}) {
      for (LaneCore* l : *q->lanes) {
        if (l->timed == 0) continue;
        const std::uint64_t w = l->watch.load(std::memory_order_acquire);
        if ((w & LaneCore::kWatchRunning) != 0) {
          const auto d = steady_from_ns(l->watch_deadline_ns.load(std::memory_order_relaxed));
          if (d > now) {
            next_check_ = std::min(next_check_, d);
            continue;
          }
          std::uint64_t expected = w;
          // acq_rel: winning means the lane has not completed the task and never will.
          if (l->watch.compare_exchange_strong(expected, w | LaneCore::kWatchAbandoned,
                                               std::memory_order_acq_rel)) {
            abandon(*l);
            continue;
          }
        }
        // Posted but not started yet (or it just finished): its deadline cannot pass before its
        // timeout has elapsed from now.
        const auto wait = l->timed_min_ms != 0 ? std::chrono::milliseconds(l->timed_min_ms)
                                               : core_.timing.idle_tick;
        next_check_ = std::min(next_check_, now + std::max(wait, std::chrono::milliseconds(1)));
      }
    }
  }
  if (core_.run.cancelled()) {
    dispatch(next_);  // skips what is queued
    dispatch(sub_);
  }
}

inline void SchedulerCore::abandon(LaneCore& l) {
  // Results the lane published before it got stuck (they may not be on the done stack yet).
  collect_results(l);
  l.lost.store(true, std::memory_order_seq_cst);
  l.dead.store(true, std::memory_order_relaxed);
  // The lane was running its oldest ring entry (only ring entries are watched); its deadline
  // was the run's exactly when it equals the run's.
  Slot& running = core_.pool.at(l.ring[l.collected % LaneCore::kDepth].slot);
  const std::int64_t deadline = l.watch_deadline_ns.load(std::memory_order_relaxed);
  const bool run_deadline = deadline == core_.run_deadline_ns.load(std::memory_order_relaxed);
  if (run_deadline) core_.fail_run_deadline();
  std::string why;
  try {
    why = fmt::format(
        "the task did not finish within {}; the thread running it cannot be stopped, so it was "
        "abandoned (it may still be running) and this worker is lost",
        describe_deadline(run_deadline ? core_.run_timeout_ms.load(std::memory_order_relaxed)
                                       : running.timeout_ms,
                          run_deadline));
  } catch (...) {
    why.clear();
  }
  core_.fail_run(Outcome::EndpointFailure, l.name, core_.callable_name(running), why);
  log_worker(LogLevel::Warn, core_.level, "{}: task '{}' passed its deadline; {}", l.name,
             core_.callable_name(running), why);
  // Every posted entry ends: the running one failed, the others never started.
  bool first = true;
  while (l.collected != l.staged) {
    const LaneCore::Posted p = l.ring[l.collected % LaneCore::kDepth];
    ++l.collected;
    if (--l.inflight == 0) --busy_lanes_;
    // The lane's thread never counts these: it lost the task it runs and touches nothing more.
    l.stat_lane.count(first ? Outcome::EndpointFailure : Outcome::Skipped);
    end_member(core_.pool.at(p.slot), first ? Outcome::EndpointFailure : Outcome::Skipped);
    first = false;
  }
  timed_total_ -= l.timed;
  l.timed = 0;
  drain_worklist();
}

// A posted task (or group member) ended with `o`: a single task is finished; a group is once
// every member has ended, with its first failure.
inline void SchedulerCore::end_member(Slot& s, Outcome o) {
  if (!s.is_group()) {
    finish(s, o);
    return;
  }
  if (o != Outcome::Success && s.group_outcome == Outcome::Success) s.group_outcome = o;
  if (++s.members_done == s.group_size) finish(s, s.group_outcome);
}

inline void SchedulerCore::fail_lost(Slot& s, const LaneCore& lane) {
  core_.fail_run(Outcome::EndpointFailure, lane.name, core_.callable_name(s),
                 "this worker is lost: an earlier task on it passed its deadline and its thread "
                 "did not return");
  finish(s, Outcome::EndpointFailure);
}

inline void SchedulerCore::take_inbox() {
  core_.ready_ring.drain([this](const ReadyRecord& r) { became_ready(r); });
  for (Slot* s = core_.ready_inbox.take_fifo(); s != nullptr;) {
    Slot* n = s->next;
    became_ready(*s);
    s = n;
  }
  drain_worklist();
}

inline void SchedulerCore::take_done() {
  for (LaneCore* l = core_.done.take_fifo(); l != nullptr;) {
    LaneCore* n = l->next_done;
    l->queued.store(false, std::memory_order_seq_cst);
    // A lost lane's posts were all ended when it was abandoned.
    if (!l->lost.load(std::memory_order_relaxed)) collect_results(*l);
    l = n;
  }
  drain_worklist();
}

inline void SchedulerCore::collect_results(LaneCore& l) {
  const std::uint32_t upto = l.completed.load(std::memory_order_seq_cst);
  while (l.collected != upto) {
    const std::uint32_t i = l.collected % LaneCore::kDepth;
    const LaneCore::Result& r = l.results[i];
    Slot& s = core_.pool.at(l.ring[i].slot);
    ++l.collected;
    if (--l.inflight == 0) --busy_lanes_;
    if (l.ring[i].watched) {
      --l.timed;
      --timed_total_;
    }
    if (r.completed_by_lane) continue;  // the lane already completed it (a single task)
    if (r.outcome == Outcome::TaskFailure || r.outcome == Outcome::EndpointFailure) {
      core_.fail_run(r.outcome, l.name, r.callable, r.fault.message, r.fault.kind, r.fault.code);
    }
    end_member(s, r.outcome);
  }
  drain_worklist();
}

inline void SchedulerCore::became_ready(Slot& s) {
  s.state.store(TaskState::Ready, std::memory_order_relaxed);
  if (s.poisoned.load(std::memory_order_relaxed) || core_.run.cancelled()) {
    finish(s, Outcome::Skipped);
    return;
  }
  route(s);
}

// The Orchestrator stored Ready already, and the slot is not read: see ReadyRing.
inline void SchedulerCore::became_ready(const ReadyRecord& r) {
  if (core_.run.cancelled()) {
    finish(core_.pool.at(r.slot), Outcome::Skipped);
    return;
  }
  route_single(r.slot, r.role, r.kind, r.target);
}

inline void SchedulerCore::route(Slot& s) {
  if (!s.is_group()) {
    route_single(s.id, s.role, s.callable_kind, s.target(0));
    return;
  }
  RoleQueues& q = s.role == Role::Sub ? sub_ : next_;
  try {
    q.groups.push_back(s.id);
  } catch (const std::bad_alloc&) {
    unqueueable(s.id);
    return;
  }
  ++routed_;
  ++queued_;
}

inline void SchedulerCore::route_single(TaskSlot slot, Role role, CallableKind kind,
                                        WorkerId target) {
  RoleQueues& q = role == Role::Sub ? sub_ : next_;
  // Queues grow by doubling and never shrink: only a run with more ready tasks than ever before
  // allocates here.
  try {
    if (target == any_worker) {
      q.any[static_cast<std::size_t>(kind)].push_back(slot);
    } else {
      q.directed[static_cast<std::size_t>(target)].push_back(slot);
    }
  } catch (const std::bad_alloc&) {
    unqueueable(slot);
    return;
  }
  ++routed_;
  ++queued_;
}

inline void SchedulerCore::unqueueable(TaskSlot slot) noexcept {
  core_.run.fail(std::current_exception());
  if (oom_warned_run_ != core_.run.id()) {
    oom_warned_run_ = core_.run.id();
    log_worker(LogLevel::Warn, core_.level,
               "scheduler: out of memory queueing a ready task; it is skipped and the run fails "
               "(later tasks of this run that cannot be queued are skipped without another "
               "warning; WorkerStats::tasks_skipped counts them)");
  }
  finish(core_.pool.at(slot), Outcome::Skipped);
}

// Completes tasks iteratively (a failure can skip a long chain; recursion would overflow the
// stack).
inline void SchedulerCore::drain_worklist() {
  while (work_head_ != nullptr) {
    Slot& s = *work_head_;
    work_head_ = s.next;
    if (work_head_ == nullptr) work_tail_ = nullptr;
    const Outcome outcome = s.group_outcome;
    const std::int32_t traced = core_.trace_level.load(std::memory_order_relaxed);
    core_.stats.sched.count(outcome);
    // A single task completed here never ran on a lane (those complete themselves).
    if (traced != 0 && !s.is_group()) [[unlikely]]
      trace_event(TraceKind::Skip, s, 0, outcome);
    core_.complete(s, outcome != Outcome::Success, [this, traced](Slot& c) {
      if (traced >= kTraceDeps) [[unlikely]]
        trace_event(TraceKind::Ready, c, 0, Outcome::Success);
      became_ready(c);
    });
  }
}

inline void SchedulerCore::fail_unplaceable(Slot& s, Role role) {
  const bool sub = role == Role::Sub;
  core_.fail_run(Outcome::EndpointFailure, sub ? "sub workers" : "next-level workers",
                 core_.callable_name(s),
                 sub ? "no sub worker is left alive to run it (their children died)"
                     : "no next-level worker is left alive to run it (their children died)");
  finish(s, Outcome::EndpointFailure);
}

inline bool SchedulerCore::skip_if_cancelled(Slot& s) {
  if (!core_.run.cancelled()) return false;
  finish(s, Outcome::Skipped);
  return true;
}

inline void SchedulerCore::post(LaneCore& lane, TaskSlot id, std::uint32_t member) {
  Slot& s = core_.pool.at(id);  // an address: nothing of the slot is loaded unless used below
  // The slot is read only for deadlines and tracing: the lane marks the task Running when it
  // starts it (the slot was last written on the Orchestrator's core; see ReadyRing).
  if (lane.inflight++ == 0) ++busy_lanes_;
  if (lane.staged == lane.posted.load(std::memory_order_relaxed)) touched_.push_back(&lane);
  bool watched = false;
  if (lane.watched) {
    const std::int64_t run_dl = core_.run_deadline_ns.load(std::memory_order_relaxed);
    if (run_dl != 0 ||
        (core_.task_timeouts_seen.load(std::memory_order_relaxed) && s.timeout_ms != 0)) {
      watched = true;
      if (lane.timed++ == 0) lane.timed_min_ms = 0;
      if (s.timeout_ms != 0 && (lane.timed_min_ms == 0 || s.timeout_ms < lane.timed_min_ms)) {
        lane.timed_min_ms = s.timeout_ms;
      }
      ++timed_total_;
      // The earliest it can overrun: it cannot start before now.
      const auto first = s.timeout_ms != 0 ? std::chrono::steady_clock::now() +
                                                 std::chrono::milliseconds(s.timeout_ms)
                                           : steady_from_ns(run_dl);
      next_check_ = std::min(next_check_, first);
    }
  }
  if (core_.trace_level.load(std::memory_order_relaxed) >= kTraceDeps) [[unlikely]] {
    trace_event(TraceKind::Dispatch, s, lane.trace_track, Outcome::Success);
  }
  lane.ring[lane.staged % LaneCore::kDepth] = {id, member, watched ? 1U : 0U};
  ++lane.staged;
  // A driven lane's posts are sent by this very thread at the end of the pass (publish_posts),
  // and building each request reads the slot's lines, last written on the Orchestrator's core.
  // Asked for now, the misses of all the pass's posts overlap instead of stalling one by one.
  if (lane.drive != nullptr) s.prefetch_lines();
}

// One publication and one wake check per lane per dispatch pass, not per task. A driven lane's
// posts are sent to its child right here, on whichever thread runs the pass (WorkerThread,
// "Driven lanes"): its thread is not woken, and the run's fence or the spinning scheduler
// thread takes the answers in.
inline void SchedulerCore::publish_posts() {
  for (LaneCore* l : touched_) {
    l->stat_posted.add(l->staged - l->posted.load(std::memory_order_relaxed));
    if (l->drive != nullptr &&
        l->drive(*l, run_thread_ ? LaneCore::DriveStep::Post : LaneCore::DriveStep::PassPost)) {
      continue;
    }
    l->posted.store(l->staged, std::memory_order_seq_cst);  // publishes the ring entries
    l->wake.notify_all();
    if (EventCount* also = l->also_wake.load(std::memory_order_seq_cst)) also->notify_all();
  }
  touched_.clear();
}

inline void SchedulerCore::dispatch(RoleQueues& q) {
  auto& lanes = *q.lanes;
  if (lanes.empty()) return;
  for (LaneCore* l : lanes) l->reserved = false;

  // Groups first, in FIFO order, on idle lanes only (members start together). A group whose
  // named workers are not all idle waits at the head and reserves them, so singles cannot
  // starve it.
  while (!q.groups.empty()) {
    Slot& s = core_.pool.at(q.groups.front());
    if (skip_if_cancelled(s)) {
      pop(q.groups);
      continue;
    }
    const std::uint32_t n = s.group_size;
    if (s.target(0) != any_worker) {
      const LaneCore* lost = nullptr;
      for (std::uint32_t m = 0; m < n && lost == nullptr; ++m) {
        const LaneCore* l = lanes[static_cast<std::size_t>(s.target(m))];
        if (l->lost.load(std::memory_order_relaxed)) lost = l;
      }
      if (lost != nullptr) {
        pop(q.groups);
        fail_lost(s, *lost);
        continue;
      }
      bool all_idle = true;
      for (std::uint32_t m = 0; m < n; ++m) {
        all_idle = all_idle && lanes[static_cast<std::size_t>(s.target(m))]->idle();
      }
      if (!all_idle) {
        for (std::uint32_t m = 0; m < n; ++m) {
          lanes[static_cast<std::size_t>(s.target(m))]->reserved = true;
        }
        break;
      }
      pop(q.groups);
      for (std::uint32_t m = 0; m < n; ++m) {
        post(*lanes[static_cast<std::size_t>(s.target(m))], s.id, m);
      }
      continue;
    }
    const std::uint8_t bit = kind_bit(s.callable_kind);
    std::uint32_t idle = 0;
    std::uint32_t live = 0;
    for (LaneCore* l : lanes) {
      const bool dead = l->dead.load(std::memory_order_relaxed) || (l->runs & bit) == 0;
      live += dead ? 0U : 1U;
      idle += (l->idle() && !l->reserved && !dead) ? 1U : 0U;
    }
    if (live < n) {  // can never run: too few workers left alive
      pop(q.groups);
      fail_unplaceable(s, lanes.front()->role);
      continue;
    }
    if (idle < n) break;
    pop(q.groups);
    std::uint32_t m = 0;
    for (LaneCore* l : lanes) {
      if (m == n) break;
      if (l->idle() && !l->reserved && !l->dead.load(std::memory_order_relaxed) &&
          (l->runs & bit) != 0) {
        post(*l, s.id, m++);
      }
    }
  }

  // Singles. A lane's own queue may fill its whole ring (those tasks run there anyway); the
  // shared queue goes first to idle lanes, then tops lanes up to kAnyDepth, so a long task holds
  // back at most one queued behind it.
  for (LaneCore* l : lanes) {
    auto& own = q.directed[l->index];
    if (l->lost.load(std::memory_order_relaxed)) {
      while (!own.empty()) fail_lost(core_.pool.at(pop(own)), *l);
      continue;
    }
    if (l->reserved) continue;
    while (!own.empty() && l->inflight < LaneCore::kDepth) {
      const TaskSlot id = pop(own);
      if (!skip_if_cancelled(core_.pool.at(id))) post(*l, id, 0);
    }
  }
  for (CallableKind k : {CallableKind::Sub, CallableKind::Orch, CallableKind::Chip}) {
    if (!q.any[static_cast<std::size_t>(k)].empty()) dispatch_shared(q, k);
  }
  publish_posts();
  drain_worklist();
}

// The shared queue of one callable kind goes to the lanes that run it: first to idle ones, then
// topping lanes up to kAnyDepth, so a long task holds back at most one queued behind it.
inline void SchedulerCore::dispatch_shared(RoleQueues& q, CallableKind kind) {
  auto& any = q.any[static_cast<std::size_t>(kind)];
  const std::uint8_t bit = kind_bit(kind);
  std::size_t capable = 0;
  for (const LaneCore* l : *q.lanes) {
    if ((l->runs & bit) != 0 && !l->dead.load(std::memory_order_relaxed)) ++capable;
  }
  while (capable == 0 && !any.empty()) {
    fail_unplaceable(core_.pool.at(pop(any)), q.lanes->front()->role);
  }
  if (any.empty()) return;
  // With a long shared queue every lane stays busy for a while anyway: prefetch deeper, a
  // quarter of each lane's share of the backlog (from 8 at a share of 32, up to kDepth).
  const std::size_t deep = any.size() / capable / 4;
  const std::uint32_t max_depth =
      deep >= kDeepFrom ? static_cast<std::uint32_t>(std::min<std::size_t>(LaneCore::kDepth, deep))
                        : kAnyDepth;
  const auto top_up = [&](LaneCore* l, std::uint32_t depth) {
    if (l->reserved || (l->runs & bit) == 0 || l->dead.load(std::memory_order_relaxed)) return;
    while (l->inflight < depth && !any.empty()) {
      const TaskSlot id = pop(any);
      if (!skip_if_cancelled(core_.pool.at(id))) post(*l, id, 0);
    }
  };
  // A lane doing this pass is awake and on a core: it goes first (no wake-up, no cache lines
  // moving to another core for a task it can start now).
  LaneCore* const first =
      self_ != nullptr && self_->index < q.lanes->size() && (*q.lanes)[self_->index] == self_
          ? self_
          : nullptr;
  for (std::uint32_t depth = 1; depth <= max_depth && !any.empty(); ++depth) {
    if (first != nullptr) top_up(first, depth);
    for (LaneCore* l : *q.lanes) {
      if (l != first) top_up(l, depth);
    }
  }
}

}  // namespace simpler::detail
