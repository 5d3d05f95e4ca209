// simpler — WorkerThread<Transport, Leaf>: one lane, i.e. one child of a Worker.
//
// Owns the leaf, the transport endpoint that reaches it, and one thread. The Scheduler posts
// tasks (slot id + group member) into the lane's LaneCore ring; the thread builds each leaf
// request from the slot, runs it through the endpoint, and publishes the outcome. The thread spins
// briefly after a task, then sleeps on a futex: an idle lane uses no CPU.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>

#include "simpler/detail/deadline.hpp"
#include "simpler/detail/engine_core.hpp"
#include "simpler/detail/scheduler_core.hpp"
#include "simpler/detail/short_slice.hpp"
#include "simpler/detail/thread_name.hpp"
#include "simpler/fwd.hpp"
#include "simpler/leaf/leaf.hpp"
#include "simpler/log.hpp"
#include "simpler/orchestrator.hpp"
#include "simpler/transport/transport.hpp"

namespace simpler {

template <Transport T, Leaf L>
class WorkerThread : public detail::LaneCore {
 public:
  using transport_type = T;
  using leaf_type = L;
  /// How this lane reaches its child.
  using Endpoint = typename T::template Endpoint<L>;
  /// The run's thread may drive this lane's endpoint (see "Driven lanes").
  static constexpr bool kDriven = DrivenInline<Endpoint>;
  /// The run's fence may run this lane's posts itself (see "Helped lanes"): a leaf that runs in
  /// this process on whichever thread calls it. Not a chip: its device context belongs to
  /// the lane's thread.
  static constexpr bool kHelped =
      std::is_same_v<T, ThreadTransport> && !std::is_same_v<L, ChipWorker> && !Pipelines<Endpoint>;
  /// A submit may run this lane's tasks on the run's thread while the sub workers have a
  /// backlog (see "Running tasks at submit"): a SubWorker on a thread, whose leaf is stateless
  /// and runs on any number of threads at once (a nested Worker runs one run at a time).
  static constexpr bool kRunsAtSubmit = kHelped && std::is_same_v<L, SubWorker>;

  WorkerThread(detail::EngineCore& core, detail::Role role, WorkerId id, std::string name, L leaf)
      : LaneCore(role, id, std::move(name)), core_(core), leaf_(std::move(leaf)), endpoint_(leaf_) {
    watched = !EnforcesDeadlines<T>;
    runs = leaf_kinds<L>();
    if constexpr (ServesSubset<Endpoint> || HoldsRemoteMemory<Endpoint>) {
      restrictions = &restricted_;
    }
    if constexpr (kDriven) {
      // Before any thread exists: whoever drives the lane reads it.
      pl_window_ = pipeline_window();
      drive = &drive_thunk;
    }
    if constexpr (kHelped) help = &help_thunk;
    if constexpr (kRunsAtSubmit) run_here = &run_here_thunk;
    // An endpoint that logs its child's life (a fork, its death) names it after this lane.
    if constexpr (requires { endpoint_.log_as(core.level, this->name); }) {
      endpoint_.log_as(core.level, this->name);
    }
  }
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;
  ~WorkerThread() { stop(); }

  /// Starts the child (before any engine thread exists: a process transport forks here).
  void launch() {
    if constexpr (Launches<Endpoint>) {
      endpoint_.launch();
      if constexpr (ServesSubset<Endpoint>) {
        detail::log_worker(LogLevel::Info, core_.level, "{} attached ({})", name,
                           std::string(endpoint_.where()));
      }
    }
  }
  /// What this lane's thread adds to the process's awake threads (detail::AwakeThreads): itself,
  /// and its child when that is another process (it spins for its tasks too); a simulated chip
  /// counts as every core (its AICPU and AICore threads spin beside ours, counted only in the
  /// device runtime's own copy of the count, which this one may not be).
  static constexpr int kAwakeWeight = std::is_same_v<L, ChipWorker> ? detail::AwakeThreads::kCrowd
                                      : std::is_same_v<T, ThreadTransport> ? 1
                                                                           : 2;

  /// Starts the lane thread.
  void start() {
    thread_ = std::thread([this] {
      // Woken on a busy CPU, it gets it soon (not a chip's lane: the simulated device's threads
      // it starts would inherit the slice, and the chip rows did not gain).
      if constexpr (!std::is_same_v<L, ChipWorker>) {
        (void)detail::request_slice(core_.timing.slice);
      }
      const detail::AwakeThreads::Member awake(kAwakeWeight);
      if constexpr (kDriven) {
        driven_loop();
      } else if constexpr (Pipelines<Endpoint>) {
        pipelined_loop();
      } else {
        loop();
      }
    });
    detail::name_thread(thread_, core_.level, role == detail::Role::Sub ? "sub" : "next",
                        static_cast<int>(id));
  }
  /// Stops the thread (after its current task) and the child. A lost lane's thread may never
  /// return: it is detached instead, and the caller must keep this lane alive (keep_forever).
  void stop() noexcept {
    if (lost.load(std::memory_order_seq_cst)) {
      detach_once();
      shut_ = true;  // its leaf may still be running: no shutdown under its feet
      return;
    }
    if (thread_.joinable()) {
      stopping.store(true, std::memory_order_seq_cst);
      wake.notify_all();
      if (detail::EventCount* also = also_wake.load(std::memory_order_seq_cst)) also->notify_all();
      thread_.join();
    }
    if (!shut_) {
      shut_ = true;
      if constexpr (ShutsDown<Endpoint>) endpoint_.shutdown();
      if constexpr (Launches<Endpoint> && ServesSubset<Endpoint>) {
        detail::log_worker(LogLevel::Info, core_.level, "{} detached", name);
      }
    }
  }

  [[nodiscard]] L& leaf() noexcept { return leaf_; }

  /// Detaches the lane's thread, once: from the thread itself when it finds it was abandoned
  /// (its Worker may never stop it: a lost nested Worker is kept, not closed), or from stop().
  void detach_once() noexcept {
    std::lock_guard lk(detach_mu_);
    if (!detached_ && thread_.joinable()) thread_.detach();
    detached_ = true;
  }
  /// The transport endpoint (for diagnostics and tests: a child's pid, its death).
  [[nodiscard]] const auto& endpoint() const noexcept { return endpoint_; }
  /// For control commands between runs (never while the lane runs a task).
  [[nodiscard]] auto& endpoint() noexcept { return endpoint_; }

 private:
  void loop() noexcept {
    for (;;) {
      // A helped lane's taken_ belongs to whoever holds `helper`: its wait reads taken_pub.
      if (!await_post(kHelped ? 0U : taken_, std::chrono::seconds(1))) continue;
      if constexpr (kHelped) {
        std::uint32_t free = 0;
        // Lost to the run's fence: it wakes this thread if it leaves posts behind.
        if (!helper.compare_exchange_strong(free, kHelperLane, std::memory_order_seq_cst)) continue;
      }
      const std::uint32_t avail = posted.load(std::memory_order_seq_cst);
      if (avail == taken_) {
        release_helper();
        if (stopping.load(std::memory_order_seq_cst)) return;  // nothing posted
        continue;                                              // the fence took them first
      }
      if (!run_posts(avail, true)) {
        return detach_once();  // abandoned at a deadline: the scheduler ended its posts
      }
      // About to wait: take what this lane pushed with a pass of its own, which leaves the
      // scheduler thread asleep. Without a running scheduler (stopping), wake its thread.
      settle_before_wait();
      release_helper();
    }
  }

  /// Runs the ring entries from taken_ up to `avail`, and with `more` whatever is posted
  /// meanwhile, each followed by the successors it lets this lane keep. False when the lane
  /// was abandoned at a deadline (then nothing may be touched any more).
  bool run_posts(std::uint32_t avail, bool more) noexcept {
    while (taken_ != avail) {
      const Posted p = ring[taken_ % kDepth];
      Result& out = results[taken_ % kDepth];
      detail::Slot& s = core_.pool.at(p.slot);
      if (core_.run.cancelled()) {
        out.outcome = Outcome::Skipped;  // posted but not started when the run was cancelled
        if (core_.trace_level.load(std::memory_order_relaxed) != 0) [[unlikely]] {
          trace_event(detail::TraceKind::Skip, s, 0, Outcome::Skipped);
        }
      } else {
        s.state.store(TaskState::Running, std::memory_order_relaxed);  // for observation
        if (!run_task(s, p.member, out)) return false;
      }
      detail::Slot* next = publish_outcome(s, out, taken_);
      if (more) avail = posted.load(std::memory_order_seq_cst);
      // Going idle: the pass before the wait takes what this task pushed. Anything else keeps
      // the lane busy for a while, so the scheduler thread takes it now.
      if (next != nullptr || avail != taken_) settle_signal();
      if (next != nullptr) {
        if (!run_successors(next)) return false;
        if (more) avail = posted.load(std::memory_order_seq_cst);
      }
    }
    return true;
  }

  /// Before the lane waits: a pass for what it pushed (see loop()).
  void settle_before_wait() noexcept {
    if (!owe_signal_) return;
    owe_signal_ = false;
    if (detail::SchedulerCore* d = core_.driving()) {
      d->try_pass(stat_passes, this);
    } else {
      core_.signal_scheduler();
    }
  }

  // ---- Helped lanes (kHelped: a SubWorker or nested Worker on a thread).
  //
  // A one-task run handed its task to the lane's thread and waited in its fence for the answer:
  // two hand-offs, each a handful of cache lines crossing cores, about 2 us in this VM's common
  // latency mode, and a nesting level paid that twice more. The fence has nothing else to do, so
  // it runs what is posted to such a lane itself when the lane's thread has not taken it yet
  // (OrchestratorBase::help_lanes): the slot it just wrote is still in its cache, and nothing
  // crosses back. A nested Worker's run then happens on the run's thread too, and its own fence
  // helps its lanes in turn.
  //
  // - Whoever holds `helper` owns the ring's consumer side (taken_, owe_signal_, local_); the
  //   lane's thread takes it per batch (one uncontended CAS on a line it owns), the fence only
  //   when the lane's thread does not hold it.
  // - The fence runs untimed single tasks only: a task the scheduler watches for a deadline
  //   stays on the lane's thread (the scheduler abandons that thread at the deadline; the run's
  //   thread cannot be abandoned), and so do group members, which must run at the same time as
  //   their siblings. It helps one lane at a time, so the tasks keep as many threads as lanes:
  //   a task that waits for another one still finds that one running on its own lane.
  // - While it runs a task the fence is not polling (orch_polling is clear: pushes wake the
  //   scheduler thread) and the Orchestrator refuses submits (the task runs on the run's thread,
  //   but it is not the orchestration function).
  // - Letting go publishes taken_pub, then wakes the lane's thread if posts are left: it may
  //   have looked while the fence held them and gone to sleep.

  static bool help_thunk(detail::LaneCore& lane) noexcept {
    return static_cast<WorkerThread&>(lane).help_here();
  }

  bool help_here() noexcept {
    if constexpr (kHelped) {
      if (lost.load(std::memory_order_relaxed)) return false;
      std::uint32_t free = 0;
      if (!helper.compare_exchange_strong(free, kHelperRun, std::memory_order_seq_cst)) {
        return false;
      }
      bool ran = false;
      for (;;) {
        const std::uint32_t avail = posted.load(std::memory_order_seq_cst);
        const std::uint32_t upto = helpable_until(avail);
        if (upto == taken_) break;
        const std::uint32_t from = taken_;
        // Untimed singles: run_task arms no watch, so it cannot lose the lane.
        (void)run_posts(upto, false);
        stat_helped.add(upto - from);
        ran = true;
        if (upto != avail) break;  // the rest is the lane thread's
      }
      settle_before_wait();
      const std::uint32_t taken = taken_;  // not ours once released
      release_helper();
      if (posted.load(std::memory_order_seq_cst) != taken) wake.notify_all();
      return ran;
    }
    return false;
  }

  // ---- Running tasks at submit (kRunsAtSubmit). The run's thread, inside a submit, runs a
  // ready untimed single task through this lane's leaf while the lane's own thread may be
  // running another: a SubWorker only looks its callable up in the registry, which no run
  // changes. Nothing of the lane's consumer side is touched; what ran is counted in
  // stat_at_submit, which only the run's thread writes.
  static Outcome run_here_thunk(detail::LaneCore& lane, std::uint64_t digest, std::uint32_t index,
                                const TaskArgsView& args, const CallConfig* config,
                                const std::function<void(TaskArgsView)>* sub_fn) noexcept {
    return static_cast<WorkerThread&>(lane).run_at_submit(digest, index, args, config, sub_fn);
  }

  /// No deadline applies (OrchestratorBase::submit_runner lets only untimed tasks of runs
  /// without a deadline run at submit). With `sub_fn` (the callable the submit's registry check
  /// found; this lane's SubWorker reads the same registry, which no run changes) the task is
  /// called directly, as ThreadTransport::execute would through the leaf: no request, no second
  /// lookup.
  Outcome run_at_submit(std::uint64_t digest, std::uint32_t index, const TaskArgsView& args,
                        const CallConfig* config,
                        const std::function<void(TaskArgsView)>* sub_fn) noexcept {
    Outcome o = Outcome::Success;
    if (sub_fn != nullptr) {
      try {
        // Field by field: the view was just built in pieces (two 4-byte counts, two pointers),
        // and a copy of it as one 16-byte load spans those stores, which the CPU cannot forward
        // to it; the task's first loads of its arguments then waited for them to drain (a chain
        // step run at submit, p50: 27-28 ns with the lookup, which hid the wait, 31-32 without
        // it but with the copy, 26-27.7 with neither).
        TaskArgsView v;
        v.tensor_count = args.tensor_count;
        v.scalar_count = args.scalar_count;
        v.tensors = args.tensors;
        v.scalars = args.scalars;
        (*sub_fn)(v);
      } catch (...) {
        fault_from_current_exception(at_submit_fault_);
        o = Outcome::TaskFailure;
      }
    } else {
      // No Result per task: its two strings cost a construction and a destruction each, a few
      // ns of a step that takes ~30. The fault is written only when the task fails.
      o = endpoint_.execute(request_at_submit(digest, index, args, config), at_submit_fault_);
    }
    if (o != Outcome::Success) [[unlikely]]
      fail_at_submit(request_at_submit(digest, index, args, config), o);
    stat_at_submit.count(o);
    return o;
  }

  static LeafRequest request_at_submit(std::uint64_t digest, std::uint32_t index,
                                       const TaskArgsView& args,
                                       const CallConfig* config) noexcept {
    LeafRequest r;
    r.digest = digest;
    r.index_hint = index;
    r.args = args;
    r.config = config;
    return r;
  }

  [[gnu::cold]] void fail_at_submit(const LeafRequest& r, Outcome o) noexcept {
    Result out;
    out.outcome = o;
    out.fault = std::move(at_submit_fault_);
    at_submit_fault_.clear();
    name_callable(r, out);
    core_.fail_run(out.outcome, name, out.callable, out.fault.message, out.fault.kind,
                   out.fault.code);
  }

  /// How far from taken_ towards `avail` the entries may run on the fence's thread: untimed
  /// singles, in ring order (the first other entry stops it).
  [[nodiscard]] std::uint32_t helpable_until(std::uint32_t avail) const noexcept {
    std::uint32_t i = taken_;
    while (i != avail) {
      const Posted p = ring[i % kDepth];
      if (p.watched != 0 || core_.pool.at(p.slot).is_group()) break;
      ++i;
    }
    return i;
  }

  /// Lets go of `helper` (helped lanes), publishing how far the consumer side got.
  void release_helper() noexcept {
    if constexpr (kHelped) {
      taken_pub.store(taken_, std::memory_order_seq_cst);
      helper.store(0, std::memory_order_seq_cst);
    }
  }

  /// Waits until the scheduler posts past what this lane took or the lane stops (true), or for
  /// `timeout` after its spin (false). Meanwhile the idle lane runs the scheduler's pass itself
  /// when it has input (taking the same token the scheduler thread and the Orchestrator take): a
  /// task it posts to this lane starts without a hop through the scheduler thread. A helped lane
  /// waits for posts nobody holds (see "Helped lanes").
  bool await_post(std::uint32_t seen, std::chrono::nanoseconds timeout) noexcept {
    const auto posted_or_stopping = [&] {
      if constexpr (kHelped) {
        // seq_cst: a helper letting go stores `helper`, then looks at `posted` (help_here).
        if (helper.load(std::memory_order_seq_cst) == 0 &&
            posted.load(std::memory_order_seq_cst) != taken_pub.load(std::memory_order_seq_cst)) {
          return true;
        }
      } else {
        if (posted.load(std::memory_order_seq_cst) != seen) return true;
      }
      return stopping.load(std::memory_order_seq_cst);
    };
    return wake.await_for(
        [&] {
          if (posted_or_stopping()) return true;
          if (detail::SchedulerCore* d = core_.driving()) d->try_pass(stat_passes, this);
          return posted_or_stopping();
        },
        core_.timing.spin, timeout);
  }

  /// Wakes the scheduler thread for what this lane pushed to done or ready_inbox. loop() skips
  /// that for the last task it had posted, since it does a pass itself before it waits; every
  /// other path settles at once.
  void settle_signal() noexcept {
    if (owe_signal_) core_.signal_scheduler();
    owe_signal_ = false;
  }

  /// The loop of a lane whose endpoint keeps several tasks in flight (Pipelines): it sends what
  /// is posted, up to the endpoint's window, before it waits for the oldest outcome; outcomes
  /// come back in the order the tasks were sent. Successors always go through the scheduler.
  /// An idle lane whose endpoint Ticks wakes every tick period to call tick().
  void pipelined_loop() noexcept {
    pl_window_ = pipeline_window();
    if constexpr (AwaitsAnswerOr<Endpoint>) {
      also_wake.store(&endpoint_.answer_event(), std::memory_order_seq_cst);
    }
    for (;;) {
      if (pl_sent_ == pl_taken_) {
        auto wait = std::chrono::milliseconds(1000);
        if constexpr (Ticks<Endpoint>) wait = std::min(wait, endpoint_.tick_period());
        if (!await_post(pl_sent_, wait)) {
          if constexpr (Ticks<Endpoint>) endpoint_.tick();
          continue;
        }
        if (posted.load(std::memory_order_seq_cst) == pl_sent_) return;  // stopping
      }
      pl_send(posted.load(std::memory_order_seq_cst), false);
      if (!pl_settle_oldest(true)) continue;  // more was posted meanwhile: send it first
      detail::Slot* next = pl_publish();
      // A successor kept here (nothing else was in flight): sent at once, no scheduler hop.
      if (next != nullptr && !run_successors(next)) return detach_once();
    }
  }

  /// Tasks the pipeline keeps in flight: the endpoint's window, at most the post ring's depth.
  [[nodiscard]] std::uint32_t pipeline_window() const noexcept {
    return std::max<std::uint32_t>(1, std::min<std::uint32_t>(endpoint_.window(), kDepth));
  }

  // ---- Driven lanes (DrivenInline endpoints: a forked child).
  //
  // On a 2-core machine a one-task run through a forked child had three threads spinning: the
  // run's thread in its fence, this lane's thread waiting for the answer, and the child. Two
  // shared a core and handed it back and forth with yields, each switch ~6 us in this VM's slow
  // mode, and the run took 12-22 us against 2.5 us for the mailbox alone. So the run's thread
  // drives such a lane itself when it can:
  //
  // - A scheduler pass on the run's thread that posts here takes `driver` *before* it publishes
  //   the posts, then sends them to the child itself (drive_other, DriveStep::Post). This lane's
  //   thread, spinning or asleep, finds them already sent and is not woken. Only tasks without a
  //   deadline go out this way (this thread kills a child at a deadline, so it sends those).
  // - The run's fence takes the child's answers in (DriveStep::Collect) as it polls, and
  //   completes the tasks in its own scheduler passes.
  // - Whoever holds `driver` owns the pipeline state below (pl_*), the endpoint and the result
  //   ring; the lane's thread takes it only for work it must do: posts nobody sent, answers
  //   nobody took, or a liveness check. It waits for answers only to what it sent itself, and
  //   of those only while nobody else will come for them (others_collect): a task with a
  //   deadline it waits for always, since the waiter kills the child at that deadline.
  // - Progress does not depend on the run's thread coming back (it may be in the user's code
  //   for a long time): a child about to sleep with answers nobody took wakes this thread
  //   (ForkShmTransport), and while tasks are in flight this thread sleeps at most a liveness
  //   tick, then checks that the child lives (a dead child ends them).

  /// The driven lane's thread: sleeps on the endpoint's answer event until there is work only
  /// it does (see above), then does it holding `driver`.
  void driven_loop() noexcept {
    detail::EventCount& ev = endpoint_.answer_event();
    also_wake.store(&ev, std::memory_order_seq_cst);
    bool ticking = false;  // sleep at most a liveness tick: something may be in flight
    for (;;) {
      // Published by every holder of `driver` when it lets go (seq_cst both ways: a sender that
      // does not see long_sleep_ set has its sends seen here).
      long_sleep_.store(true, std::memory_order_seq_cst);
      const bool in_flight =
          sent_pub_.load(std::memory_order_seq_cst) != taken_pub_.load(std::memory_order_seq_cst);
      const bool short_sleep = in_flight || ticking;
      if (short_sleep) long_sleep_.store(false, std::memory_order_seq_cst);
      bool rearm = false;
      const auto work = [&] {
        if (stopping.load(std::memory_order_seq_cst)) return true;
        if (driver_.load(std::memory_order_seq_cst) != 0) return false;  // its holder does it
        if (posted.load(std::memory_order_seq_cst) != sent_pub_.load(std::memory_order_seq_cst)) {
          return true;
        }
        // Answers nobody took, unless the run's fence or the scheduler thread is polling: they
        // take them themselves. A lane thread that raced the fence for them stayed awake from
        // one run to the next, and its weight (itself and the child) kept the process crowded:
        // three threads spun on two CPUs, the child shared one with the fence, and no sender
        // could name a CPU to step off (CpuStepOff); racing the scheduler thread kept one more
        // thread spinning per child through every long run. Both stop polling before they
        // sleep; answers that come after that wake this thread through the child.
        if (!core_.orch_polling.load(std::memory_order_seq_cst) &&
            !core_.sched_polling.load(std::memory_order_seq_cst) && endpoint_.answers_waiting()) {
          return true;
        }
        // Sent by another thread while this one meant to sleep long: sleep short instead.
        rearm = !short_sleep && sent_pub_.load(std::memory_order_seq_cst) !=
                                    taken_pub_.load(std::memory_order_seq_cst);
        return rearm;
      };
      const bool woke = ev.await_for(
          [&] {
            if (work()) return true;
            // Idle: run the scheduler's pass when it has input, as await_post does.
            if (detail::SchedulerCore* d = core_.driving()) d->try_pass(stat_passes, this);
            return work();
          },
          core_.timing.spin,
          short_sleep ? Endpoint::liveness_tick() : std::chrono::milliseconds(1000));
      long_sleep_.store(false, std::memory_order_relaxed);
      if (stopping.load(std::memory_order_seq_cst) &&
          posted.load(std::memory_order_seq_cst) == sent_pub_.load(std::memory_order_seq_cst)) {
        return;  // nothing of a run is in flight when the lane stops
      }
      if (rearm) {
        ticking = true;
        continue;
      }
      if (!woke) ticking = in_flight;  // a quiet tick: keep ticking while work was in flight
      std::uint32_t idle = 0;
      if (!driver_.compare_exchange_strong(idle, kDriverLane, std::memory_order_seq_cst)) {
        continue;  // another thread drives it now
      }
      const bool kept = drive_here(!woke);
      release_driver(false);
      if (!kept) return detach_once();
    }
  }

  /// The lane's thread, holding `driver`: sends what is posted and waits for those answers, as
  /// pipelined_loop does; answers to what other threads sent it takes only when they are in
  /// (on a tick, after checking that the child lives). False when the lane was abandoned.
  bool drive_here(bool tick) noexcept {
    bool waits = false;  // sent something: waits for every answer ahead of it too
    for (;;) {
      const std::uint32_t before = pl_sent_;
      pl_send(posted.load(std::memory_order_seq_cst), false);
      waits = waits || pl_sent_ != before;
      if (pl_taken_ == pl_sent_) return true;
      if (!waits && pl_in_flight_[pl_taken_ % kDepth] && !endpoint_.answer_ready()) {
        if (!tick) return true;
        tick = false;
        if (endpoint_.poll_child()) return true;  // alive: the answers come
      }
      // Sent here, not answered yet: wait for it only if nobody else comes for the answers. A
      // lane thread that waited while the scheduler thread was up kept `driver` from one post
      // to the next, so the scheduler's passes could not send and left their posts to it: it
      // took over a whole burst, and spun beside the scheduler thread and the child.
      if (waits && pl_timed_ == 0 && pl_in_flight_[pl_taken_ % kDepth] &&
          !endpoint_.answer_ready() && others_collect()) {
        return true;
      }
      if (!pl_settle_oldest(waits)) continue;
      detail::Slot* next = pl_publish();
      if (next != nullptr && !run_successors(next)) return false;
    }
  }

  /// Whether another thread will take this lane's answers in without this one waiting for them:
  /// the run's fence polls (DriveStep::Collect), or the scheduler thread is up (its passes take
  /// what is in as they post, and its spin before it sleeps takes the rest). Answers that come
  /// once both are asleep wake this thread through the child, and it ticks while any are out.
  [[nodiscard]] bool others_collect() const noexcept {
    return core_.orch_polling.load(std::memory_order_seq_cst) || !core_.sched_wake.has_waiters();
  }

  /// LaneCore::drive for this lane (the scheduler and the Orchestrator call it).
  static bool drive_thunk(detail::LaneCore& lane, detail::LaneCore::DriveStep step) noexcept {
    return static_cast<WorkerThread&>(lane).drive_other(step);
  }

  /// Another thread drives the lane (see "Driven lanes"): Post / PassPost publish the posts the
  /// caller's pass staged and send them; Collect / PassCollect take the answers in. All publish
  /// every outcome that is settled and send what fits the window, and never wait. False when it
  /// did nothing. Stepping only asks whether the child is stepping off a CPU (it takes nothing).
  bool drive_other(detail::LaneCore::DriveStep step) noexcept {
    using Step = detail::LaneCore::DriveStep;
    if (step == Step::Stepping) {
      if constexpr (requires { endpoint_.child_stepping(); }) return endpoint_.child_stepping();
      return false;
    }
    const bool post = step == Step::Post || step == Step::PassPost;
    if (!post && !endpoint_.answers_waiting()) return false;  // the pollers look at this
    std::uint32_t idle = 0;
    if (!driver_.compare_exchange_strong(idle, kDriverOther, std::memory_order_seq_cst)) {
      return false;
    }
    // The token came first: this lane's thread cannot take these posts from under us.
    if (post) posted.store(staged, std::memory_order_seq_cst);
    pl_foreign_ = true;
    pl_by_run_ = step == Step::Post || step == Step::Collect;
    for (;;) {
      while (pl_taken_ != pl_sent_ &&
             (!pl_in_flight_[pl_taken_ % kDepth] || endpoint_.answer_ready())) {
        pl_settle_oldest(false);
        pl_publish();  // keeps no successor (pl_foreign_): they go to the scheduler
      }
      const std::uint32_t before = pl_sent_;
      pl_send(posted.load(std::memory_order_seq_cst), true);
      if (pl_sent_ == before) break;
    }
    pl_foreign_ = false;
    release_driver(true);
    return true;
  }

  /// Lets go of `driver`, publishing what the pipeline holds for the lane thread's checks. A
  /// thread other than the lane's wakes it when it leaves posts unsent (they have a deadline, or
  /// the window is full) or sent something while it sleeps long (it must tick now).
  ///
  /// The posts are looked at after letting go: a post published before that look is seen here;
  /// one published after it comes with its poster's notify, which finds `driver` free (the lane
  /// thread's check skips work while someone holds it, so a notify seen before the release
  /// would be lost).
  void release_driver(bool other) noexcept {
    const std::uint32_t sent = pl_sent_;  // the pipeline is not ours after the store below
    const bool in_flight = sent != pl_taken_;
    sent_pub_.store(sent, std::memory_order_seq_cst);
    taken_pub_.store(pl_taken_, std::memory_order_seq_cst);
    driver_.store(0, std::memory_order_seq_cst);
    if (!other) return;  // the lane's thread looks again before it sleeps
    const bool unsent = posted.load(std::memory_order_seq_cst) != sent;
    if (unsent || (in_flight && long_sleep_.load(std::memory_order_seq_cst))) {
      wake.notify_all();
      if constexpr (AwaitsAnswerOr<Endpoint>) endpoint_.answer_event().notify_all();
    }
  }

  // ---- The pipeline (pipelined and driven lanes). Owned by the lane's thread, or for a
  // driven lane by whoever holds `driver`.

  /// Hands ring entries posted before `avail` to the endpoint, up to the window (an entry of a
  /// cancelled run, or one the endpoint refuses, is settled without it). `untimed_only` stops at
  /// the first task with a deadline: only the lane's thread sends those.
  void pl_send(std::uint32_t avail, bool untimed_only) noexcept {
    while (pl_sent_ != avail && pl_sent_ - pl_taken_ < pl_window_) {
      const std::uint32_t i = pl_sent_ % kDepth;
      const Posted p = ring[i];
      Result& out = results[i];
      detail::Slot& s = core_.pool.at(p.slot);
      if (untimed_only &&
          (s.timeout_ms != 0 || core_.run_deadline_ns.load(std::memory_order_relaxed) != 0)) {
        return;
      }
      pl_in_flight_[i] = false;
      if (core_.run.cancelled()) {
        out.outcome = Outcome::Skipped;
      } else {
        LeafRequest& r = pl_requests_[i];
        s.state.store(TaskState::Running, std::memory_order_relaxed);  // for observation
        build_request(s, p.member, r);
        const std::int32_t traced = core_.trace_level.load(std::memory_order_relaxed);
        if (traced != 0) [[unlikely]] {
          pl_trace_replies_[i].reset(traced);
          r.trace = &pl_trace_replies_[i];
          pl_trace_t0_[i] = detail::trace_now();
        }
        Outcome refused = Outcome::EndpointFailure;
        if (endpoint_.send(r, refused, out.fault)) {
          pl_in_flight_[i] = true;
          if (r.timed()) ++pl_timed_;
          if (pl_foreign_) (pl_by_run_ ? stat_driven : stat_driven_pass).add();
        } else {
          out.outcome = refused;
          name_callable(r, out);
          if (r.trace != nullptr) [[unlikely]]
            trace_ran(s, p.member, pl_trace_t0_[i], out.outcome, *r.trace);
        }
      }
      ++pl_sent_;
    }
  }

  /// Settles the oldest entry (there is one): receives its answer if it went out. With `wait`
  /// the endpoint waits for the answer, or (AwaitsAnswerOr) returns false as soon as more was
  /// posted than is in flight, to send that first; without, the answer must be ready.
  bool pl_settle_oldest(bool wait) noexcept {
    const std::uint32_t i = pl_taken_ % kDepth;
    if (!pl_in_flight_[i]) return true;
    if constexpr (AwaitsAnswerOr<Endpoint>) {
      if (wait) {
        // While the child runs it, send what the scheduler posts meanwhile (it notifies the
        // event this sleeps on): the child then finds the next task when it finishes this one.
        const auto more = [&] {
          return pl_sent_ - pl_taken_ < pl_window_ &&
                 posted.load(std::memory_order_seq_cst) != pl_sent_;
        };
        if (!endpoint_.await_answer_or(more)) return false;
      }
    }
    Result& out = results[i];
    const LeafRequest& r = pl_requests_[i];
    out.outcome = endpoint_.receive(out.fault);
    if (r.timed()) --pl_timed_;
    if constexpr (kDriven) {
      if (!pl_foreign_) stat_lane_took.add();
    }
    if constexpr (requires { endpoint_.cpu_steps(); }) {
      stat_cpu_steps.set(endpoint_.cpu_steps());  // the line `answered` was just read from
    }
    if (r.trace != nullptr) [[unlikely]] {
      trace_ran(core_.pool.at(ring[i].slot), ring[i].member, pl_trace_t0_[i], out.outcome,
                *r.trace);
    }
    finish_outcome(r, out);
    return true;
  }

  /// Publishes the oldest entry's outcome (settled) to the scheduler, completing a single task
  /// here. Returns a successor this lane may run itself (see runnable_here), or null.
  detail::Slot* pl_publish() noexcept {
    Result& out = results[pl_taken_ % kDepth];
    detail::Slot& s = core_.pool.at(ring[pl_taken_ % kDepth].slot);
    detail::Slot* next = publish_outcome(s, out, pl_taken_);
    settle_signal();
    return next;
  }

  /// Publishes the outcome `out` of task number `taken` (slot `s`) and advances `taken`: a single
  /// task is completed here, on the lane; a group member goes back to the scheduler, which waits
  /// for every member. The lane goes on the done list when it is not on it, and then owes the
  /// scheduler a signal (owe_signal_; the caller settles it). Returns a successor this lane may
  /// run itself (see runnable_here), or null.
  detail::Slot* publish_outcome(detail::Slot& s, Result& out, std::uint32_t& taken) noexcept {
    stat_lane.count(out.outcome);
    out.completed_by_lane = !s.is_group();
    detail::Slot* next = out.completed_by_lane ? complete_here(s, out) : nullptr;
    ++taken;
    completed.store(taken, std::memory_order_seq_cst);
    if (!queued.exchange(true, std::memory_order_seq_cst)) {
      core_.done.push(this);
      owe_signal_ = true;
    }
    return next;
  }

  /// Runs, on this lane, successors that this lane's completions made ready (the chain case:
  /// no round trip through the scheduler per hop). The first was counted in lane_local when it
  /// was kept; each one kept after it inherits that count (see complete_here), which is given
  /// back when the streak ends. Returns false when the lane was abandoned at a deadline
  /// meanwhile.
  ///
  /// The slots the streak frees go to the Orchestrator in batches (detail::RetireBatch), the
  /// last one before lane_local is given back, so the run's fence never sees an idle engine
  /// with a retirement still held here. Otherwise a batch waits at most 15 tasks of the
  /// streak, and none while the Orchestrator waits for heap bytes or its task window:
  /// complete() then flushes at each completion (a wait that starts while a task of the streak
  /// runs gets the batch when that task ends; test_engine_window.cpp and test_hardening.cpp
  /// have the cases where nothing else could end the wait). (A kept successor carries no deadline
  /// this lane is watched for, see runnable_here, so run_task does not abandon the lane in a
  /// streak; were it to, the batch is still handed over first: those tasks ended.)
  bool run_successors(detail::Slot* s) noexcept {
    detail::RetireBatch retired;
    while (s != nullptr) {
      stat_kept.add();
      s->state.store(TaskState::Running, std::memory_order_relaxed);
      if (core_.trace_level.load(std::memory_order_relaxed) >= detail::kTraceDeps) [[unlikely]] {
        trace_event(detail::TraceKind::Dispatch, *s, trace_track, Outcome::Success);
      }
      prefetch_consumer(*s);
      if (!run_task(*s, 0, local_)) {
        core_.flush_retired(retired);
        return false;
      }
      stat_lane.count(local_.outcome);
      detail::Slot* next = complete_here(*s, local_, true, &retired);
      settle_signal();
      if (next == nullptr) {
        core_.flush_retired(retired);
        if (core_.lane_local.fetch_sub(1, std::memory_order_seq_cst) == 1)
          core_.orch_wake.notify_all();
      }
      s = next;
    }
    return true;
  }

  /// Asks the CPU to bring the `pending` line of `s`'s first consumer here for writing while `s`
  /// runs: completing `s` decrements it, and that line was last written on the Orchestrator's
  /// core. Once slots are reused out of order (after any large run) a chain's next slot is
  /// nowhere near the last, so no hardware prefetcher finds it: that one miss was over half of
  /// a chain lane's samples. A hint only: a list that is empty or gets a consumer later costs
  /// nothing. The edge is safe to read: it lives in the consumer, which waits for `s`. (Also
  /// tried: a `last_consumer` id in the producer's line 1, set at each link, so the lane need
  /// not load the edge first, and prefetching the consumer's line 0 and the edge: no gain over
  /// six alternations.)
  void prefetch_consumer(const detail::Slot& s) const noexcept {
    const detail::Edge* e = s.consumers.load(std::memory_order_acquire);
    if (e == nullptr || e == detail::closed_list()) return;
    __builtin_prefetch(&core_.pool.at(e->consumer).pending, 1, 3);
  }

  /// Completes a single task on this lane. Returns one successor it made ready that this lane
  /// may run itself (same role, not a group, any worker or this one, not poisoned, run not
  /// cancelled); every other ready successor goes to the scheduler's inbox. `counted`: `s` is a
  /// successor this lane kept, counted in lane_local; a successor kept now takes over its count
  /// instead of adding one: two locked RMWs on a shared line less per hop of a chain. A chain
  /// of 50k tasks submitted before its first task runs (bench_engine's engine_run_only shape)
  /// went from 116-128 to 104-118 ns/hop over 8 alternations.
  detail::Slot* complete_here(detail::Slot& s, const Result& r, bool counted = false,
                              detail::RetireBatch* retired = nullptr) noexcept {
    stat_tasks.count(r.outcome);
    if (r.outcome == Outcome::TaskFailure || r.outcome == Outcome::EndpointFailure) {
      core_.fail_run(r.outcome, name, r.callable, r.fault.message, r.fault.kind, r.fault.code);
    }
    detail::Slot* keep = nullptr;
    bool handed_over = false;
    const bool traced = core_.trace_level.load(std::memory_order_relaxed) >= detail::kTraceDeps;
    core_.complete(
        s, r.outcome != Outcome::Success,
        [&](detail::Slot& c) {
          if (traced) [[unlikely]]
            trace_event(detail::TraceKind::Ready, c, 0, Outcome::Success);
          if (keep == nullptr && runnable_here(c)) {
            keep = &c;
            // Counted before this task's completion is published, so the run's fence cannot see
            // an idle engine while the successor is about to run. A kept `s` is still counted
            // until run_successors gives the count back, after this.
            if (!counted) core_.lane_local.fetch_add(1, std::memory_order_seq_cst);
          } else {
            c.state.store(TaskState::Ready, std::memory_order_relaxed);
            core_.ready_inbox.push(&c);
            handed_over = true;
          }
        },
        retired);
    if (handed_over) owe_signal_ = true;
    return keep;
  }

  [[nodiscard]] bool runnable_here(const detail::Slot& c) const noexcept {
    if constexpr (Pipelines<Endpoint>) {
      // Keep a successor only when nothing else is in flight or posted: it then goes out at
      // once (a chain needs no scheduler hop); otherwise the window is busy anyway. Another
      // thread driving the lane keeps none: it is not the lane's thread, which runs them.
      if (pl_foreign_ || pl_sent_ - pl_taken_ > 1 ||
          posted.load(std::memory_order_seq_cst) != pl_sent_) {
        return false;
      }
    }
    const bool same_role = c.role == role;
    // A task with a deadline on a lane the scheduler must watch goes through the scheduler: it
    // watches only what it posted.
    const bool needs_watch =
        watched &&
        (c.timeout_ms != 0 || core_.run_deadline_ns.load(std::memory_order_relaxed) != 0);
    return same_role && (runs & kind_bit(c.callable_kind)) != 0 && !needs_watch && !c.is_group() &&
           (c.target(0) == any_worker || c.target(0) == id) &&
           !c.poisoned.load(std::memory_order_relaxed) && !core_.run.cancelled();
  }

  /// Runs one task through the endpoint. Returns false when the scheduler abandoned this lane
  /// while the task ran (its deadline passed first): then nothing may be touched any more.
  bool run_task(const detail::Slot& s, std::uint32_t member, Result& out) noexcept {
    LeafRequest r;
    build_request(s, member, r);
    const std::int32_t traced = core_.trace_level.load(std::memory_order_relaxed);
    std::int64_t t0 = 0;
    if (traced != 0) [[unlikely]] {
      trace.reply.reset(traced);
      r.trace = &trace.reply;
      t0 = detail::trace_now();
    }
    std::uint64_t word = 0;
    if constexpr (!EnforcesDeadlines<T>) {
      // Only ring entries carry a deadline here (runnable_here keeps the others off this lane).
      if (r.timed()) word = arm_watch(r);
    }
    if constexpr (kRunsAtSubmit) {
      if (++cost_sample_ % kCostSampleEvery == 0 && word == 0 && traced == 0) {
        const auto t0_cost = std::chrono::steady_clock::now();
        out.outcome = endpoint_.execute(r, out.fault);
        note_cost(s.run_id, s.callable_index, std::chrono::steady_clock::now() - t0_cost);
      } else {
        out.outcome = endpoint_.execute(r, out.fault);
      }
    } else {
      out.outcome = endpoint_.execute(r, out.fault);
    }
    if constexpr (!EnforcesDeadlines<T>) {
      if (word != 0) {
        std::uint64_t expected = word;
        // acq_rel: a lost CAS (the scheduler's came first) must see that it owns the task now.
        if (!watch.compare_exchange_strong(expected, word & ~kWatchRunning,
                                           std::memory_order_acq_rel)) {
          return false;
        }
      }
    }
    if (traced != 0) [[unlikely]]
      trace_ran(s, member, t0, out.outcome, trace.reply);
    finish_outcome(r, out);
    return true;
  }

  /// Publishes what a timed task cost in `cheap_run` (LaneCore): one more cheap task in a row
  /// of run `run_id`, or none. Stores only when the word changes (a saturated streak does not).
  void note_cost(std::uint32_t run_id, std::uint32_t callable,
                 std::chrono::steady_clock::duration took) noexcept {
    if (cheap_callable.load(std::memory_order_relaxed) != callable) {
      cheap_callable.store(callable, std::memory_order_relaxed);
    }
    const std::uint64_t old = cheap_run.load(std::memory_order_relaxed);
    std::uint64_t streak = (old >> 32) == run_id ? (old & 0xffff'ffffU) : 0;
    streak = took < kCheapTask ? std::min<std::uint64_t>(streak + 1, kCheapSaturate) : 0;
    const std::uint64_t word = (std::uint64_t{run_id} << 32) | streak;
    if (word != old) cheap_run.store(word, std::memory_order_relaxed);
  }

  /// Records that this lane ran a task (the child's own times when its transport reported
  /// them) and keeps the trace its leaf returned.
  void trace_ran(const detail::Slot& s, std::uint32_t member, std::int64_t t0, Outcome o,
                 detail::TraceReply& reply) noexcept {
    detail::TraceEvent e;
    e.kind = detail::TraceKind::Run;
    e.t0 = t0;
    e.t1 = detail::trace_now();
    if (reply.begin_ns != 0 && reply.end_ns >= reply.begin_ns) {
      e.t0 = reply.begin_ns;
      e.t1 = reply.end_ns;
    }
    e.task = s.trace_id;
    e.arg = member;
    e.outcome = static_cast<std::uint8_t>(o);
    e.track = trace_track;
    trace.buffer->record(e);
    trace.nested_dropped += reply.nested_dropped;
    if (!reply.nested.empty()) {
      try {
        trace.nested.push_back(std::move(reply.nested));
      } catch (...) {
        ++trace.nested_dropped;  // out of memory: the nested trace is lost, and counted
      }
      reply.nested.clear();
    }
  }
  void trace_event(detail::TraceKind kind, const detail::Slot& s, std::uint32_t arg,
                   Outcome o) noexcept {
    detail::TraceEvent e;
    e.kind = kind;
    e.t0 = detail::trace_now();
    e.task = s.trace_id;
    e.arg = arg;
    e.outcome = static_cast<std::uint8_t>(o);
    e.track = trace_track;
    trace.buffer->record(e);
  }

  /// The leaf request of member `member` of slot `s`, with its deadline.
  void build_request(const detail::Slot& s, std::uint32_t member, LeafRequest& r) const noexcept {
    r = LeafRequest{};
    r.digest = s.digest;
    r.index_hint = s.callable_index;
    r.args = s.member_view(member);
    r.config = s.call_config();
    // Relaxed: the run's thread set it before publishing any task of the run.
    const std::int64_t run_dl = core_.run_deadline_ns.load(std::memory_order_relaxed);
    if (s.timeout_ms != 0 || run_dl != 0) set_deadline(r, s.timeout_ms, run_dl);
  }

  /// After the endpoint said how a task ended: the run's deadline, the lane's liveness, the
  /// callable's name for a failure.
  void finish_outcome(const LeafRequest& r, Result& out) noexcept {
    // Stopped at the run's deadline: the run's TimeoutError goes first, whichever thread
    // notices the deadline first (this lane, the scheduler, or the orchestration's next submit).
    if (out.outcome == Outcome::EndpointFailure && r.run_deadline &&
        std::chrono::steady_clock::now() >= r.deadline) {
      core_.fail_run_deadline();
    }
    if constexpr (ReportsLiveness<Endpoint>) {
      if (out.outcome == Outcome::EndpointFailure && !endpoint_.alive()) {
        dead.store(true, std::memory_order_relaxed);
      }
    }
    if (out.outcome != Outcome::Success) name_callable(r, out);
  }
  void name_callable(const LeafRequest& r, Result& out) noexcept {
    try {
      out.callable = leaf_.callable_name(r);
    } catch (...) {
      out.callable.clear();
    }
  }

  /// The task's deadline: its own timeout from now, or the run's deadline if that comes first.
  void set_deadline(LeafRequest& r, std::uint32_t timeout_ms, std::int64_t run_dl) const noexcept {
    if (timeout_ms != 0) {
      r.deadline = detail::deadline_after(std::chrono::steady_clock::now(),
                                          std::chrono::milliseconds(timeout_ms));
      r.deadline_ms = timeout_ms;
    }
    if (run_dl != 0 && detail::steady_from_ns(run_dl) < r.deadline) {
      r.deadline = detail::steady_from_ns(run_dl);
      r.deadline_ms = core_.run_timeout_ms.load(std::memory_order_relaxed);
      r.run_deadline = true;
    }
  }

  /// Publishes the running task's deadline for the scheduler's watch; returns the word.
  std::uint64_t arm_watch(const LeafRequest& r) noexcept {
    watch_deadline_ns.store(detail::steady_ns(r.deadline), std::memory_order_relaxed);
    const std::uint64_t word = ((++watch_seq_) << 2) | kWatchRunning;
    watch.store(word, std::memory_order_release);  // publishes the deadline
    return word;
  }

  /// The endpoint's ServesSubset / HoldsRemoteMemory answers, for submit-time checks.
  struct Restricted final : detail::LaneRestrictions {
    const Endpoint* e;
    explicit Restricted(const Endpoint* ep) : e(ep) {}
    [[nodiscard]] bool serves(std::uint64_t digest) const override {
      if constexpr (ServesSubset<Endpoint>) return e->serves(digest);
      return true;
    }
    [[nodiscard]] std::string served_names() const override {
      if constexpr (ServesSubset<Endpoint>) return e->served_names();
      return "every callable";
    }
    [[nodiscard]] std::string where() const override {
      if constexpr (ServesSubset<Endpoint>) return std::string(e->where());
      return {};
    }
    [[nodiscard]] bool remote_memory() const override { return HoldsRemoteMemory<Endpoint>; }
    [[nodiscard]] bool holds(std::uint64_t address, std::uint64_t bytes) const override {
      if constexpr (HoldsRemoteMemory<Endpoint>) return e->holds_remote(address, bytes);
      return true;
    }
  };

  detail::EngineCore& core_;
  L leaf_;
  Endpoint endpoint_;
  Restricted restricted_{&endpoint_};
  // kRunsAtSubmit lanes: what a task run at submit failed with (the run's thread only).
  Fault at_submit_fault_;
  // The pipeline (pipelined_loop, driven_loop): owned by the lane's thread, or for a driven
  // lane by whoever holds driver_.
  std::uint32_t pl_sent_ = 0;   // ring entries handed to the endpoint (or settled without it)
  std::uint32_t pl_taken_ = 0;  // outcomes published
  // kRunsAtSubmit lanes: tasks run by run_task, to time one in kCostSampleEvery (note_cost).
  // Whoever runs the lane's consumer side (its thread, or a fence helping it) counts.
  std::uint32_t cost_sample_ = 0;
  std::uint32_t pl_window_ = 1;
  bool pl_foreign_ = false;  // a thread other than the lane's holds driver_
  bool pl_by_run_ = false;   // ... and it is the run's thread (for the stats)
  std::array<bool, kDepth> pl_in_flight_{};
  std::uint32_t pl_timed_ = 0;  // entries in flight with a deadline (their sender waits for them)
  std::array<LeafRequest, kDepth> pl_requests_{};
  std::array<std::int64_t, kDepth> pl_trace_t0_{};  // a traced task: when it was handed over
  std::array<detail::TraceReply, kDepth> pl_trace_replies_{};  // and what its endpoint said
  // Driven lanes: who holds the pipeline, and what it held when let go (for the lane thread's
  // checks, which do not take driver_). Own line: the run's thread and the lane's write them.
  static constexpr std::uint32_t kDriverLane = 1;
  static constexpr std::uint32_t kDriverOther = 2;
  alignas(detail::kCacheLine) std::atomic<std::uint32_t> driver_{0};
  std::atomic<std::uint32_t> sent_pub_{0};
  std::atomic<std::uint32_t> taken_pub_{0};
  /// The lane's thread is about to sleep up to a second (nothing in flight when it looked).
  std::atomic<bool> long_sleep_{false};
  std::thread thread_;
  // Ring entries taken (loop(), help_here): owned by the lane's thread, or for a helped lane by
  // whoever holds `helper`.
  std::uint32_t taken_ = 0;
  Result local_;             // result of a successor run by run_successors
  bool owe_signal_ = false;  // pushed to done or ready_inbox without waking the scheduler yet
  std::uint64_t watch_seq_ = 0;
  bool shut_ = false;
  std::mutex detach_mu_;  ///< an abandoned lane's thread and stop() both may detach it
  bool detached_ = false;
};

}  // namespace simpler
