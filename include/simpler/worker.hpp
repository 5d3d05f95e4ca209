// simpler — BasicWorker<Lanes...> and Worker: the facade that composes Orchestrator, Scheduler
// and lanes.
//
// Lifecycle: construct (maps the heap rings) -> register callables, add children -> init()
// (starts children, then threads) -> run() any number of times -> close() (or the destructor).
// Thread-safety: a Worker is driven from one thread at a time; run() is not re-entrant.
#pragma once

#include <fmt/format.h>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "simpler/call_config.hpp"
#include "simpler/callable.hpp"
#include "simpler/detail/engine_core.hpp"
#include "simpler/detail/mailbox.hpp"
#include "simpler/detail/process.hpp"
#include "simpler/detail/registry.hpp"
#include "simpler/detail/short_slice.hpp"
#include "simpler/device/chip_callable.hpp"
#include "simpler/error.hpp"
#include "simpler/leaf/chip_worker.hpp"
#include "simpler/leaf/nested_worker.hpp"
#include "simpler/leaf/sub_worker.hpp"
#include "simpler/log.hpp"
#include "simpler/options.hpp"
#include "simpler/orchestrator.hpp"
#include "simpler/remote/remote.hpp"
#include "simpler/scheduler.hpp"
#include "simpler/stats.hpp"
#include "simpler/task_args.hpp"
#include "simpler/transport/fork_shm_transport.hpp"
#include "simpler/transport/mpi_transport.hpp"
#include "simpler/transport/socket_transport.hpp"
#include "simpler/transport/thread_transport.hpp"
#include "simpler/worker_thread.hpp"

namespace simpler {

namespace detail {
/// The lane type in Lanes whose leaf is L and whose transport is the default one for `mode`
/// (DefaultForChildMode), or void.
template <ChildMode mode, class L, class... Lanes>
struct LaneForMode {
  using type = void;
};
template <ChildMode mode, class L, class First, class... Rest>
struct LaneForMode<mode, L, First, Rest...> {
  static constexpr bool match = [] {
    if constexpr (DefaultForChildMode<typename First::transport_type>) {
      return std::is_same_v<typename First::leaf_type, L> &&
             First::transport_type::kChildMode == mode;
    } else {
      return false;
    }
  }();
  using type = std::conditional_t<match, First, typename LaneForMode<mode, L, Rest...>::type>;
};
template <class L, class... Lanes>
inline constexpr bool has_leaf = (std::is_same_v<typename Lanes::leaf_type, L> || ...);
/// The first lane type in Lanes whose leaf is L, or void.
template <class L, class... Lanes>
struct LaneWithLeaf {
  using type = void;
};
template <class L, class First, class... Rest>
struct LaneWithLeaf<L, First, Rest...> {
  using type = std::conditional_t<std::is_same_v<typename First::leaf_type, L>, First,
                                  typename LaneWithLeaf<L, Rest...>::type>;
};

/// The Orchestrator type the nested Workers of a lane set run their orchestration functions
/// on (void when the set has no nested Worker lane).
template <class... Lanes>
struct ChildOrchestrator {
  using type = void;
};
template <class First, class... Rest>
struct ChildOrchestrator<First, Rest...> {
  using type = typename ChildOrchestrator<Rest...>::type;
};
template <class W, class T, class... Rest>
struct ChildOrchestrator<WorkerThread<T, NestedWorker<W>>, Rest...> {
  using type = typename W::Orchestrator;
  using rest = typename ChildOrchestrator<Rest...>::type;
  static_assert(
      std::is_void_v<rest> || std::is_same_v<rest, type>,
      "the nested Workers of one lane set must share one Orchestrator type (register_orch "
      "registers functions for all of them)");
};
}  // namespace detail

template <class... Lanes>
class BasicWorker {
 public:
  /// What an orchestration function run by this Worker receives.
  using Orchestrator = BasicOrchestrator<Lanes...>;
  using OrchFunction = std::function<void(Orchestrator&, TaskArgsView, const CallConfig&)>;
  using SubFunction = detail::SubFn;
  /// The lane types this Worker can hold.
  using lanes = std::tuple<Lanes...>;

  explicit BasicWorker(WorkerOptions options)
      : options_(std::move(options)),
        registry_(std::make_unique<detail::CallableRegistry>(detail::next_worker_token())),
        core_(std::make_unique<detail::EngineCore>()) {
    validate_options(options_);
    detail::report_bad_env_once();
    fork_generation_ = detail::fork_generation();
    core_->level = options_.level;
    core_->registry = registry_.get();
    core_->timing.spin = options_.spin;
    core_->timing.slice = options_.engine_slice;
    core_->timing.heap_wait = options_.heap_wait;
    core_->task_window = options_.task_window;
    core_->timing.task_timeout = options_.task_timeout;
    core_->caller_runs_tasks = options_.caller_runs_tasks;
    orch_ = std::make_unique<Orchestrator>(*core_, *registry_, options_.heap_ring_size);
    orch_->set_hazards(options_.hazards);
    sched_ = std::make_unique<Scheduler<Lanes...>>(*core_);
    if (!options_.device_ids.empty()) add_chip_lanes();
  }
  BasicWorker(const BasicWorker&) = delete;
  BasicWorker& operator=(const BasicWorker&) = delete;
  /// Moves a Worker that was not initialised yet (to hand it to add_worker).
  BasicWorker(BasicWorker&& o) noexcept
      : options_(std::move(o.options_)),
        registry_(std::move(o.registry_)),
        core_(std::move(o.core_)),
        orch_(std::move(o.orch_)),
        sched_(std::move(o.sched_)),
        process_chips_(o.process_chips_),
        state_(std::exchange(o.state_, State::Closed)),
        run_id_(o.run_id_),
        fork_generation_(o.fork_generation_),
        has_process_children_(o.has_process_children_),
        nested_(o.nested_) {}
  BasicWorker& operator=(BasicWorker&&) = delete;
  ~BasicWorker() {
    shutdown();
    // A lane abandoned at a deadline has a thread that may still be inside a leaf: keep what
    // it can touch (the registry's functions, the slots holding its arguments, the heap rings)
    // for the rest of the process.
    if (sched_ && sched_->lost_lanes() != 0) {
      detail::keep_forever(std::shared_ptr<void>(std::move(registry_)));
      detail::keep_forever(std::shared_ptr<void>(std::move(orch_)));
      detail::keep_forever(std::shared_ptr<void>(std::move(core_)));
    }
  }

  /// Registers a host function for sub workers. Throws UsageError for a duplicate name or
  /// during a run.
  CallableHandle register_sub(std::string name, SubFunction fn) {
    check_can_register("register_sub");
    return logged(registry_->add(CallableKind::Sub, std::move(name), std::move(fn), {}));
  }
  /// Registers an orchestration function for next-level workers (nested Workers). `fn` is
  /// called as fn(orchestrator, args, config) with the nested Worker's Orchestrator (for the
  /// default Worker, simpler::Orchestrator).
  template <class F>
  CallableHandle register_orch(std::string name, F fn) {
    using Child = typename detail::ChildOrchestrator<Lanes...>::type;
    using Target = std::conditional_t<std::is_void_v<Child>, Orchestrator, Child>;
    check_can_register("register_orch");
    std::function<void(Target&, TaskArgsView, const CallConfig&)> typed(std::move(fn));
    detail::OrchFn erased;
    if (typed) {
      // The nested lanes run it on their inner Worker's Orchestrator, which is a Target.
      erased = [f = std::move(typed)](OrchestratorBase& o, TaskArgsView a, const CallConfig& c) {
        f(static_cast<Target&>(o), a, c);
      };
    }
    return logged(registry_->add(CallableKind::Orch, std::move(name), {}, std::move(erased)));
  }

  /// Registers a chip callable (an orchestration .so and its kernels) for the chip children
  /// (WorkerOptions::device_ids). Checks it now: throws UsageError naming the field for an empty
  /// name, a missing orchestration or kernel file, a func_id outside 0..1023 or used twice (see
  /// validate(ChipCallable)), a duplicate name, or during a run. Paths are made absolute. With
  /// ChildMode::Process, register before init() (the chips are started in their children then).
  /// With forked chips after init(), the callable is sent to every chip child in a control
  /// command's mailbox payload and registered there; if one refuses (say its kernel .so lacks
  /// the entry symbol), it is unregistered from the others and this throws naming the chip and
  /// its error (a DeviceError with the chip's status when the device refused it).
  CallableHandle register_chip(ChipCallable callable) {
    const bool broadcast = state_ == State::Ready && process_chips_;
    if (broadcast) {
      if (running_.load(std::memory_order_acquire))
        throw UsageError("Worker::register_chip: cannot register during a run");
    } else {
      check_can_register("register_chip");
    }
    validate(callable);
    auto chip = std::make_shared<const ChipCallable>(with_absolute_paths(std::move(callable)));
    std::string name = chip->name;
    const CallableHandle h = registry_->add(CallableKind::Chip, std::move(name), {}, {}, chip);
    if (broadcast) {
      try {
        broadcast_chip(*chip, h.digest);
      } catch (...) {
        registry_->remove_last();
        throw;
      }
    }
    return logged(h);
  }

  /// Adds a child on lane type `Lane` (one of this Worker's Lanes): any transport, any leaf.
  /// A leaf that runs only sub callables becomes a sub worker, any other a next-level worker;
  /// returns its id among those. Before init() only.
  template <class Lane>
  WorkerId add_child(typename Lane::leaf_type leaf, std::string name = {}) {
    static_assert((std::is_same_v<Lane, Lanes> || ...),
                  "Lane is not one of this Worker's lane types");
    check_state(State::New, "add_child", "before init()");
    constexpr bool sub = leaf_kinds<typename Lane::leaf_type>() == kind_bit(CallableKind::Sub);
    const auto role = sub ? detail::Role::Sub : detail::Role::NextLevel;
    const auto id = static_cast<WorkerId>((sub ? core_->subs : core_->next_level).size());
    if (name.empty()) name = fmt::format("{} {}", sub ? "sub worker" : "next-level worker", id);
    sched_->template add<Lane>(role, std::move(name), std::move(leaf));
    if constexpr (SeparateAddressSpace<typename Lane::transport_type>) has_process_children_ = true;
    return id;
  }

  /// Adds a next-level child running `leaf`, in this process or in a forked child according to
  /// WorkerOptions::child_mode. Before init() only.
  template <Leaf L>
  WorkerId add_next_level(L leaf, std::string name = {}) {
    check_state(State::New, "add_next_level", "before init()");
    const auto id = static_cast<WorkerId>(core_->next_level.size());
    if (name.empty()) name = fmt::format("next-level worker {}", id);
    add_lane<L>(detail::Role::NextLevel, std::move(name), std::move(leaf));
    return id;
  }

  /// Adds a Worker as a next-level child (L4 over L3s, L5 over L4s, ...). The child must not be
  /// initialised: this Worker initialises it at init(), in the child process when child_mode is
  /// Process. Tasks submitted to it name orchestration functions registered on THIS Worker.
  template <class W>
  requires std::derived_from<std::remove_cvref_t<W>, BasicWorker> WorkerId
  add_worker(W&& child, std::string name = {}) {
    using Child = std::remove_cvref_t<W>;
    check_state(State::New, "add_worker", "before init()");
    if (!child.is_new()) {
      throw UsageError(
          "Worker::add_worker: the child Worker was already initialised (or closed); hand it over "
          "before calling init() on it");
    }
    const auto id = static_cast<WorkerId>(core_->next_level.size());
    if (name.empty()) name = fmt::format("next-level worker {} (L{})", id, child.level());
    static_cast<BasicWorker&>(child).nested_ = true;  // its trace goes to this Worker's
    add_lane<NestedWorker<Child>>(
        detail::Role::NextLevel, std::move(name),
        NestedWorker<Child>(std::make_unique<Child>(std::move(child)), *registry_));
    return id;
  }

  /// Adds an L3 Worker on another host, served there by a RemoteServer, as a next-level child
  /// (SocketTransport). init() connects, authenticates and waits for the remote's HELLO; a remote
  /// that cannot be reached or refuses makes init() throw. Tasks for it name orchestration
  /// functions registered here (register_orch) that the remote serves under the same name
  /// (RemoteSession::serve_orch); their tensors lie in its buffers (remote_alloc). Before init()
  /// only; throws UsageError for a bad spec (endpoint, deadlines, window).
  WorkerId add_remote_worker(RemoteWorkerSpec spec, std::string name = {}) {
    using Lane = typename detail::LaneWithLeaf<RemoteL3, Lanes...>::type;
    static_assert(!std::is_void_v<Lane>,
                  "this Worker's lane set has no RemoteL3 lane (WorkerThread<SocketTransport, "
                  "RemoteL3>)");
    check_state(State::New, "add_remote_worker", "before init()");
    detail::validate(spec);
    const auto id = static_cast<WorkerId>(core_->next_level.size());
    if (name.empty()) name = fmt::format("remote worker {} ({})", id, spec.endpoint);
    return add_child<Lane>(RemoteL3(std::move(spec), *registry_, id), std::move(name));
  }

  /// Adds every serving rank of an MPI job (ranks 1..N-1 of `session`, a simpler::mpi::Session on
  /// rank 0) as next-level children, in rank order; returns their WorkerIds (the first is rank
  /// 1's). init() starts MPI (after every local fork: MPI lanes launch last) and attaches to each
  /// rank: its HELLO says what it serves. Tasks, buffers and copies work as for
  /// add_remote_worker. Before init() only; a rank serves one Worker at a time.
  template <class MpiSession>
  std::vector<WorkerId> add_mpi_workers(MpiSession& session) {
    using Lane = typename detail::LaneWithLeaf<MpiL3, Lanes...>::type;
    static_assert(!std::is_void_v<Lane>,
                  "this Worker's lane set has no MpiL3 lane (WorkerThread<MpiTransport, MpiL3>)");
    check_state(State::New, "add_mpi_workers", "before init()");
    if (session.rank() != 0) {
      throw UsageError(fmt::format(
          "Worker::add_mpi_workers: this is MPI rank {}; only rank 0 drives the other ranks (the "
          "others call Session::serve)",
          session.rank()));
    }
    std::vector<std::shared_ptr<detail::RankLink>> links;
    for (int r = 1; r < session.size(); ++r) links.push_back(session.claim(r));
    std::vector<WorkerId> ids;
    for (auto& link : links) {
      const auto id = static_cast<WorkerId>(core_->next_level.size());
      const int rank = link->rank();
      ids.push_back(add_child<Lane>(MpiL3(std::move(link), *registry_, id),
                                    fmt::format("MPI rank {} (worker {})", rank, id)));
    }
    return ids;
  }

  /// Allocates `bytes` in remote worker `remote`'s memory. Between runs only. Throws UsageError
  /// (not a remote worker, 0 bytes, during a run), RemoteError (the remote refused: no room, over
  /// its largest buffer) or TransportError (the link is down).
  RemoteBuffer remote_alloc(WorkerId remote, std::size_t bytes) {
    check_remote_call("remote_alloc");
    if (bytes == 0) throw UsageError("Worker::remote_alloc: 0 bytes");
    RemoteBuffer out;
    with_remote(remote, "remote_alloc", [&](auto& ep) { out = ep.remote_alloc(remote, bytes); });
    return out;
  }
  /// Copies n bytes from `src` into `buffer` at `offset` (in chunks, several in flight).
  void copy_to_remote(const RemoteBuffer& buffer, std::size_t offset, const void* src,
                      std::size_t n) {
    check_remote_call("copy_to_remote");
    check_range("copy_to_remote", buffer, offset, n, src);
    if (n == 0) return;
    with_owner(buffer, "copy_to_remote",
               [&](auto& ep) { ep.copy_to_remote(buffer, offset, src, n); });
  }
  /// Copies n bytes of `buffer` from `offset` into `dst`.
  void copy_from_remote(const RemoteBuffer& buffer, std::size_t offset, void* dst, std::size_t n) {
    check_remote_call("copy_from_remote");
    check_range("copy_from_remote", buffer, offset, n, dst);
    if (n == 0) return;
    with_owner(buffer, "copy_from_remote",
               [&](auto& ep) { ep.copy_from_remote(buffer, offset, dst, n); });
  }
  /// Releases `buffer` on its remote worker. Between runs only.
  void remote_free(const RemoteBuffer& buffer) {
    check_remote_call("remote_free");
    with_owner(buffer, "remote_free", [&](auto& ep) { ep.remote_free(buffer); });
  }

  /// Starts the children (forked first, when child_mode is Process) and then the engine threads.
  /// Throws UsageError when called twice; a child that fails to start makes init() throw and
  /// leaves no child behind.
  void init() {
    check_state(State::New, "init", "once, on a new Worker");
    resolve_trace_path();
    if constexpr (detail::has_leaf<SubWorker, Lanes...>) {
      for (int i = 0; i < options_.num_sub_workers; ++i) {
        add_lane<SubWorker>(detail::Role::Sub, fmt::format("sub worker {}", i),
                            SubWorker(*registry_));
      }
    } else if (options_.num_sub_workers > 0) {
      throw UsageError(
          "Worker::init: num_sub_workers is set but this Worker's lane set has no SubWorker lane");
    }
    fork_generation_ = detail::fork_generation();
    try {
      if constexpr (Orchestrator::kSeparateAddressSpace) {
        // The shared mappings as the children will see them: recorded before they are forked.
        bool separate[2] = {false, false};
        sched_->for_each_lane([&](auto& lane) {
          using Lane = std::remove_cvref_t<decltype(lane)>;
          if constexpr (SeparateAddressSpace<typename Lane::transport_type>) {
            separate[static_cast<std::size_t>(lane.role)] = true;
          }
        });
        if ((separate[0] || separate[1]) &&
            detail::mpi_started_flag().load(std::memory_order_acquire)) {
          throw UsageError(
              "Worker::init: this Worker forks its children (child_mode Process), but MPI is "
              "started in this process and runs threads of its own: init() every Worker with "
              "forked children before the first one with MPI workers (or before "
              "mpi::Session::start), or use child_mode Thread");
        }
        orch_->record_shared_memory(separate[static_cast<std::size_t>(detail::Role::Sub)],
                                    separate[static_cast<std::size_t>(detail::Role::NextLevel)]);
      }
      sched_->start();  // on failure it has stopped every child it started
    } catch (const std::exception& e) {
      state_ = State::Failed;
      detail::log_worker(LogLevel::Warn, options_.level, "init failed: {}", e.what());
      throw;
    } catch (...) {
      state_ = State::Failed;
      throw;
    }
    state_ = State::Ready;
    detail::log_worker(LogLevel::Info, options_.level,
                       "initialised: {} sub worker(s), {} next-level worker(s) ({} children)",
                       core_->subs.size(), core_->next_level.size(),
                       options_.child_mode == ChildMode::Process ? "forked" : "threaded");
  }

  /// Runs `orch` on this thread with a fresh Orchestrator scope, then waits until every task it
  /// submitted finished. Rethrows the run's first failure (a TaskError naming level, worker,
  /// callable and message), a TimeoutError when the run passed its deadline (config.timeout,
  /// else WorkerOptions::run_timeout), or the exception `orch` threw; the Worker stays usable.
  /// One run at a time: a run() from inside a task of this Worker, from another thread during a
  /// run, or in a forked child of this Worker is a UsageError. `config` is validated.
  void run(const OrchFunction& orch, const TaskArgs& args = {},
           const CallConfig& config = default_call_config()) {
    run_view(orch, args.view(), config);
  }

  /// run() over arguments that are already a view.
  void run_view(const OrchFunction& orch, TaskArgsView args, const CallConfig& config) {
    run_impl(orch, args, config);
  }
  /// Runs an orchestration function registered on a parent Worker (what a NestedWorker leaf
  /// does for each of its tasks).
  void run_registered(const detail::OrchFn& orch, TaskArgsView args, const CallConfig& config) {
    run_impl(orch, args, config);
  }
  /// run_registered() for a traced task of the parent: this run is traced at the parent's level
  /// and its trace is appended, serialized, to `trace.nested` (even when the run fails).
  /// (A remote L3 runs its parent's traced TASKs with its own OrchFunction the same way.)
  template <class F>
  void run_traced(const F& orch, TaskArgsView args, const CallConfig& config,
                  detail::TraceReply& trace) {
    run_impl(orch, args, config, &trace);
  }

  /// Stops the engine threads and children, reaping every child within a deadline. Idempotent;
  /// also done by the destructor. Throws TransportError, after everything was shut down, naming
  /// the children that ended abnormally at shutdown (a child that died during a task already
  /// failed that task and is not reported again).
  void close() {
    if (running_.load(std::memory_order_acquire)) {
      throw UsageError(
          "Worker::close: cannot close from inside a run, or while another thread runs one; "
          "close after run() returned");
    }
    if (state_ == State::Closed) return;
    check_process("close");
    shutdown();
    std::string report;
    sched_->for_each_lane([&](auto& lane) {
      using Lane = std::remove_cvref_t<decltype(lane)>;
      if constexpr (ReportsLiveness<typename Lane::Endpoint>) {
        if (lane.endpoint().death_unreported()) {
          report += fmt::format("{}{}: its child {}", report.empty() ? "" : "; ", lane.name,
                                lane.endpoint().death());
        }
      }
    });
    if (!report.empty()) {
      detail::log_worker(LogLevel::Warn, options_.level, "children ended abnormally: {}", report);
      throw TransportError(fmt::format("Worker::close: children ended abnormally: {}", report));
    }
    if (auto e = std::exchange(trace_error_, nullptr)) std::rethrow_exception(e);
  }
  /// The trace file this Worker writes at close() (WorkerOptions::trace_path or SIMPLER_TRACE,
  /// "%p" replaced), empty when none; known after init().
  [[nodiscard]] const std::string& trace_path() const noexcept { return trace_path_; }
  /// close() for teardown paths: never throws.
  void shutdown_quietly() noexcept { shutdown(); }

  [[nodiscard]] const WorkerOptions& options() const noexcept { return options_; }
  /// True until init() (or close()) is called.
  [[nodiscard]] bool is_new() const noexcept { return state_ == State::New; }
  [[nodiscard]] int level() const noexcept { return options_.level; }
  /// Runs started so far; the number of the last run (traces and graphs name runs by it).
  [[nodiscard]] std::uint32_t run_count() const noexcept { return run_id_; }
  [[nodiscard]] std::size_t next_level_count() const noexcept { return core_->next_level.size(); }
  [[nodiscard]] std::size_t sub_count() const noexcept { return core_->subs.size(); }
  /// The Orchestrator, for introspection between runs (live_tasks(), tensor_map_size()).
  [[nodiscard]] const Orchestrator& orchestrator() const noexcept { return *orch_; }
  [[nodiscard]] Scheduler<Lanes...>& scheduler() noexcept { return *sched_; }

  /// What this Worker has done so far: tasks per lane and in all, the scheduler's queue, the
  /// heap rings, runs (see WorkerStats). After init(), from any thread, during a run too (before
  /// init(), from the thread that calls init()): a snapshot of counters the engine keeps without
  /// locks, so fields may disagree slightly while tasks move; exact between runs. Costs the engine
  /// nothing (it only reads).
  [[nodiscard]] WorkerStats stats() const {
    WorkerStats out;
    out.level = options_.level;
    const detail::EngineStats& es = core_->stats;
    out.runs_completed = es.runs_completed.get();
    out.runs_failed = es.runs_failed.get();
    out.ready_queued = es.ready_queued.get();
    out.window_waits = es.window_waits.get();
    out.orchestrator_passes = es.orch_passes.get();
    out.ready_overflows = es.ready_overflows.get();
    std::uint64_t done[3] = {es.sched.completed.get(), es.sched.failed.get(),
                             es.sched.skipped.get()};
    for (const auto* table : {&core_->subs, &core_->next_level}) {
      for (const detail::LaneCore* l : *table) {
        LaneStats ls;
        ls.name = l->name;
        ls.sub = l->role == detail::Role::Sub;
        ls.id = l->id;
        for (CallableKind k : {CallableKind::Sub, CallableKind::Orch, CallableKind::Chip}) {
          if ((l->runs & kind_bit(k)) == 0) continue;
          if (!ls.kinds.empty()) ls.kinds += '+';
          ls.kinds += to_string(k);
        }
        ls.dead = l->dead.load(std::memory_order_relaxed);
        // Outcomes first, then what was handed over: both only grow, so in_flight >= 0 holds
        // unless a count moved in between (clamped).
        const detail::OutcomeCounters& at = l->stat_at_submit;
        const std::uint64_t at_submit[3] = {at.completed.get(), at.failed.get(), at.skipped.get()};
        ls.completed = l->stat_lane.completed.get() + at_submit[0];
        ls.failed = l->stat_lane.failed.get() + at_submit[1];
        ls.skipped = l->stat_lane.skipped.get() + at_submit[2];
        ls.ran_at_submit = at_submit[0] + at_submit[1] + at_submit[2];
        ls.submitted = l->stat_posted.get() + l->stat_kept.get() + ls.ran_at_submit;
        ls.passes = l->stat_passes.get();
        ls.sent_by_run_thread = l->stat_driven.get();
        ls.sent_by_passes = l->stat_driven_pass.get();
        ls.taken_by_lane_thread = l->stat_lane_took.get();
        ls.ran_by_run_thread = l->stat_helped.get() + ls.ran_at_submit;
        ls.child_cpu_steps = l->stat_cpu_steps.get();
        const std::uint64_t ended = ls.completed + ls.failed + ls.skipped;
        ls.in_flight = ls.submitted > ended ? ls.submitted - ended : 0;
        done[0] += l->stat_tasks.completed.get() + at_submit[0];
        done[1] += l->stat_tasks.failed.get() + at_submit[1];
        done[2] += l->stat_tasks.skipped.get() + at_submit[2];
        out.lanes.push_back(std::move(ls));
      }
    }
    out.tasks_completed = done[0];
    out.tasks_failed = done[1];
    out.tasks_skipped = done[2];
    out.tasks_submitted = es.submitted.get();
    const std::uint64_t ended = done[0] + done[1] + done[2];
    out.tasks_in_flight = out.tasks_submitted > ended ? out.tasks_submitted - ended : 0;
    for (int i = 0; i < detail::kHeapRingCount; ++i) {
      const detail::HeapRing& h = orch_->heap_ring(i);
      out.heap_rings.push_back({h.used_bytes(), h.size()});
    }
    return out;
  }

 private:
  enum class State { New, Ready, Failed, Closed };

  template <class F>
  void run_impl(const F& orch, TaskArgsView args, const CallConfig& config,
                detail::TraceReply* parent_trace = nullptr) {
    check_process("run");
    check_state(State::Ready, "run", "between init() and close()");
    if (const std::uint32_t lost = orch_->lost_tasks(); lost != 0) {
      throw UsageError(fmt::format(
          "Worker::run: an earlier run of this Worker lost {} task(s) inside the engine (its "
          "error said so) and their slots never came back; close this Worker and create a new one",
          lost));
    }
    if (running_.exchange(true, std::memory_order_acq_rel)) {
      throw UsageError(
          "Worker::run: a run is already in progress on this Worker (a re-entrant run from "
          "inside one of its tasks or its orchestration function, or a concurrent run from "
          "another thread); runs of one Worker are sequential");
    }
    struct Running {
      std::atomic<bool>& flag;
      ~Running() { flag.store(false, std::memory_order_release); }
    } running{running_};
    if (!orch) throw UsageError("Worker::run: the orchestration function is empty");
    if (&config != &default_call_config()) config.validate();
    const std::uint32_t timeout_ms =
        detail::clamp_ms(config.timeout.count() > 0 ? config.timeout : options_.run_timeout);
    core_->run.begin(++run_id_);
    const RunTrace traced = begin_trace(config, parent_trace);
    // Counts the run once it has drained (after finish_run), whichever way it ends.
    struct CountRun {
      detail::EngineCore& core;
      std::uint32_t id;
      bool ok = false;
      ~CountRun() {
        core.stats.runs_completed.add();
        if (!ok) core.stats.runs_failed.add();
        detail::log_worker(LogLevel::Debug, core.level, "run {} ended{}", id,
                           ok ? "" : " with an error");
      }
    } count_run{*core_, run_id_};
    detail::log_worker(LogLevel::Debug, options_.level, "run {} begins", run_id_);
    if (timeout_ms != 0) {
      core_->run_timeout_ms.store(timeout_ms, std::memory_order_relaxed);
      core_->run_deadline_ns.store(
          detail::steady_ns(detail::deadline_after(std::chrono::steady_clock::now(),
                                                   std::chrono::milliseconds(timeout_ms))),
          std::memory_order_relaxed);
    }
    struct ClearDeadline {
      detail::EngineCore& core;
      ~ClearDeadline() { core.run_deadline_ns.store(0, std::memory_order_relaxed); }
    } clear_deadline{*core_};
    orch_->begin_run();
    std::exception_ptr thrown;
    try {
      orch(*orch_, args, config);
    } catch (...) {
      thrown = std::current_exception();
      // Tasks not yet dispatched are skipped; the ones running finish.
      if (!core_->run.failed()) core_->run.cancel();
    }
    const int left_open = orch_->finish_run();
    const std::exception_ptr not_written = end_trace(traced, config, parent_trace);
    if (thrown) std::rethrow_exception(thrown);
    if (auto e = core_->run.first_error()) std::rethrow_exception(e);
    if (not_written) std::rethrow_exception(not_written);
    if (left_open > 0) {
      throw UsageError(fmt::format(
          "Worker::run: the orchestration function left {} scope(s) open; every scope_begin needs "
          "a scope_end (the run closed them)",
          left_open));
    }
    count_run.ok = true;
  }

  // ---- Tracing and the dependency graph (detail/trace.hpp, docs/diagnostics.md).
  struct RunTrace {
    int level = 0;      ///< the run's trace level, 0 = untraced
    bool file = false;  ///< write <output_prefix>/trace.json
    bool dag = false;   ///< write <output_prefix>/dag.{dot,json}
  };
  /// init(): the lifetime trace's path (option, else SIMPLER_TRACE for a top-level Worker), and
  /// its directory checked.
  void resolve_trace_path() {
    trace_path_ = options_.trace_path;
    if (trace_path_.empty() && !nested_) {
      if (const char* env = std::getenv("SIMPLER_TRACE"); env != nullptr) trace_path_ = env;
    }
    if (trace_path_.empty()) return;
    for (std::size_t at = trace_path_.find("%p"); at != std::string::npos;
         at = trace_path_.find("%p", at)) {
      const std::string pid = std::to_string(::getpid());
      trace_path_.replace(at, 2, pid);
      at += pid.size();
    }
    const std::size_t slash = trace_path_.rfind('/');
    const std::string dir = slash == std::string::npos
                                ? std::string(".")
                                : trace_path_.substr(0, slash == 0 ? 1 : slash);
    detail::check_output_dir(
        dir, fmt::format("Worker::init: trace file '{}' (WorkerOptions::trace_path or "
                         "SIMPLER_TRACE)",
                         trace_path_)
                 .c_str());
  }
  /// Before a run's first submit: its level (the lifetime trace's, the run's
  /// enable_l2_swimlane, the parent's for a nested run: the highest), buffers and graph.
  RunTrace begin_trace(const CallConfig& c, detail::TraceReply* parent) {
    RunTrace t;
    t.file = c.enable_l2_swimlane > 0;
    t.dag = c.enable_dep_gen != 0;
    if (t.file || t.dag) {
      detail::check_output_dir(c.output_prefix.data(), "Worker::run: CallConfig::output_prefix");
    }
    t.level = std::max({trace_path_.empty() ? 0 : options_.trace_level, c.enable_l2_swimlane,
                        parent != nullptr ? parent->level : 0});
    t.level = std::min(t.level, detail::kTraceMaxLevel);
    if (t.level > 0) {
      const std::size_t cap = options_.trace_buffer_events;
      const auto ready = [cap](std::unique_ptr<detail::TraceBuffer>& b) {
        if (!b || b->capacity() != cap) {
          b = std::make_unique<detail::TraceBuffer>(cap);
        } else {
          b->reset();
        }
      };
      ready(core_->trace.orch);
      ready(core_->trace.sched);
      for (auto* table : {&core_->next_level, &core_->subs}) {
        for (detail::LaneCore* l : *table) {
          ready(l->trace.buffer);
          l->trace.nested.clear();
          l->trace.nested_dropped = 0;
        }
      }
      // Relaxed: the ready inbox's push publishes it with the run's first task.
      core_->trace_level.store(t.level, std::memory_order_relaxed);
    }
    if (t.dag) {
      dag_.clear();
      dag_.run = run_id_;
      dag_.level = options_.level;
    }
    orch_->set_trace(t.level, t.dag ? &dag_ : nullptr);
    return t;
  }
  /// After the run's fence: collects the run's trace and writes what was asked. Returns what
  /// failed (run() throws it after the run's own error).
  std::exception_ptr end_trace(const RunTrace& t, const CallConfig& c,
                               detail::TraceReply* parent) noexcept {
    orch_->set_trace(0, nullptr);
    core_->trace_level.store(0, std::memory_order_relaxed);
    if (t.level == 0 && !t.dag) return nullptr;
    try {
      const std::string prefix(c.output_prefix.data());
      if (t.level > 0) {
        std::vector<detail::TraceProcess> procs = collect_trace(t.level);
        if (parent != nullptr) detail::serialize_trace(procs, parent->nested);
        if (!trace_path_.empty()) keep_for_lifetime(procs);
        if (t.file) {
          detail::write_text_file(prefix + "/trace.json", detail::render_chrome_trace(procs),
                                  "Worker::run: trace");
        }
      }
      if (t.dag) {
        detail::write_text_file(prefix + "/dag.dot", detail::render_dag_dot(dag_),
                                "Worker::run: dependency graph");
        detail::write_text_file(prefix + "/dag.json", detail::render_dag_json(dag_),
                                "Worker::run: dependency graph");
        dag_.clear();
      }
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }
  /// This run's events as TraceProcess records: this Worker's first, then its nested Workers'
  /// (named "L<level> worker <id>" after the lane that ran them).
  std::vector<detail::TraceProcess> collect_trace(int level) {
    std::vector<detail::TraceProcess> out(1);
    detail::TraceProcess& p = out[0];
    p.name = fmt::format("L{}", options_.level);
    p.run = run_id_;
    p.level = level;
    p.tracks = {"orchestrator", "scheduler"};
    for (const detail::LaneCore* l : core_->next_level) p.tracks.push_back(l->name);
    for (const detail::LaneCore* l : core_->subs) p.tracks.push_back(l->name);
    for (std::size_t i = 0; i < registry_->size(); ++i) {
      p.callables.push_back(registry_->at(static_cast<std::uint32_t>(i)).name);
    }
    const auto take = [&p](const detail::TraceBuffer* b) {
      if (b == nullptr) return;
      const std::size_t n = b->size();
      for (std::size_t i = 0; i < n; ++i) p.events.push_back((*b)[i]);
      p.dropped += b->dropped();
    };
    take(core_->trace.orch.get());
    take(core_->trace.sched.get());
    std::vector<detail::TraceProcess> nested;
    for (auto* table : {&core_->next_level, &core_->subs}) {
      for (detail::LaneCore* l : *table) {
        take(l->trace.buffer.get());
        p.dropped += l->trace.nested_dropped;
        for (const auto& blob : l->trace.nested) {
          const std::size_t first = nested.size();
          if (!detail::deserialize_trace(blob.data(), blob.size(), nested) ||
              first == nested.size()) {
            ++p.dropped;
            continue;
          }
          // A nested Worker ("L3") is named after this lane; a chip's trace keeps its name.
          const std::string& inner = nested[first].name;
          const bool worker = inner.size() > 1 && inner[0] == 'L' &&
                              inner.find_first_not_of("0123456789", 1) == std::string::npos;
          const std::string own = worker ? fmt::format("{} worker {}", inner, l->id) : inner;
          nested[first].name = own;
          for (std::size_t i = first + 1; i < nested.size(); ++i) {
            nested[i].name = fmt::format("{} / {}", own, nested[i].name);
          }
        }
        l->trace.nested.clear();
      }
    }
    for (auto& n : nested) out.push_back(std::move(n));
    return out;
  }
  /// Adds a run's records to the lifetime trace, up to 64 runs' worth of full buffers per
  /// thread; past that, runs are dropped and counted.
  void keep_for_lifetime(const std::vector<detail::TraceProcess>& procs) {
    std::size_t events = 0;
    for (const auto& p : procs) events += p.events.size();
    const std::size_t cap =
        options_.trace_buffer_events * 64 * (2 + sub_count() + next_level_count());
    if (lifetime_events_ + events > cap) {
      if (lifetime_trace_.empty())
        lifetime_trace_.emplace_back().name = fmt::format("L{}", options_.level);
      lifetime_trace_.front().dropped += events;
      return;
    }
    lifetime_events_ += events;
    lifetime_trace_.insert(lifetime_trace_.end(), procs.begin(), procs.end());
  }
  /// Writes the lifetime trace (at close, or in the destructor); a failure is kept for close().
  void write_lifetime_trace() noexcept {
    if (trace_path_.empty() || lifetime_written_) return;
    lifetime_written_ = true;
    try {
      detail::write_text_file(trace_path_, detail::render_chrome_trace(lifetime_trace_),
                              "Worker::close: trace (WorkerOptions::trace_path or SIMPLER_TRACE)");
    } catch (...) {
      trace_error_ = std::current_exception();
    }
    lifetime_trace_.clear();
  }

  void check_remote_call(const char* api) const {
    check_process(api);
    check_state(State::Ready, api, "between init() and close()");
    if (running_.load(std::memory_order_acquire)) {
      throw UsageError(fmt::format(
          "Worker::{}: not during a run (tasks in flight may use the buffer); call it between runs",
          api));
    }
  }
  static void check_range(const char* api, const RemoteBuffer& b, std::size_t offset, std::size_t n,
                          const void* p) {
    if (b.empty()) throw UsageError(fmt::format("Worker::{}: an empty RemoteBuffer", api));
    if (offset > b.size() || n > b.size() - offset) {
      throw UsageError(fmt::format(
          "Worker::{}: bytes [{}, {}) are outside buffer {} ({} bytes) of remote worker {}", api,
          offset, offset + n, b.id(), b.size(), b.worker()));
    }
    if (n != 0 && p == nullptr) {
      throw UsageError(fmt::format("Worker::{}: {} bytes to or from a null pointer", api, n));
    }
  }
  /// Calls fn(endpoint) for next-level worker `id` if it holds remote memory.
  template <class F>
  void with_remote(WorkerId id, const char* api, F&& fn) {
    bool found = false;
    sched_->for_each_lane([&](auto& lane) {
      using Lane = std::remove_cvref_t<decltype(lane)>;
      if constexpr (HoldsRemoteMemory<typename Lane::Endpoint>) {
        if (!found && lane.role == detail::Role::NextLevel && lane.id == id) {
          found = true;
          fn(lane.endpoint());
        }
      }
    });
    if (!found) {
      throw UsageError(
          fmt::format("Worker::{}: next-level worker {} is not a remote worker (add one with "
                      "add_remote_worker)",
                      api, id));
    }
  }
  template <class F>
  void with_owner(const RemoteBuffer& b, const char* api, F&& fn) {
    if (b.empty()) throw UsageError(fmt::format("Worker::{}: an empty RemoteBuffer", api));
    with_remote(b.worker(), api, [&](auto& ep) {
      if (!ep.owns(b)) {
        throw UsageError(fmt::format(
            "Worker::{}: buffer {} is not a live buffer of remote worker {} (freed already, or "
            "allocated by another Worker or session)",
            api, b.id(), b.worker()));
      }
      fn(ep);
    });
  }

  /// The slot pool's limit: the largest task window there can be.
  static constexpr std::uint32_t kMaxTaskWindow =
      detail::SlotPool::kMaxChunks * detail::SlotPool::kChunkSize;

  static void validate_options(const WorkerOptions& o) {
    if (o.num_sub_workers < 0) {
      throw UsageError(
          fmt::format("WorkerOptions::num_sub_workers is {}; it must be >= 0", o.num_sub_workers));
    }
    auto non_negative = [](auto value, const char* field, const char* unit) {
      if (value.count() < 0) {
        throw UsageError(
            fmt::format("WorkerOptions::{} is {} {}; it must be >= 0{}", field, value.count(), unit,
                        std::string_view(field).ends_with("timeout") ? " (0 = none)" : ""));
      }
    };
    non_negative(o.spin, "spin", "us");
    non_negative(o.heap_wait, "heap_wait", "ms");
    non_negative(o.task_timeout, "task_timeout", "ms");
    non_negative(o.run_timeout, "run_timeout", "ms");
    if (o.engine_slice.count() != 0 &&
        (o.engine_slice < detail::kMinSlice || o.engine_slice > detail::kMaxSlice)) {
      throw UsageError(fmt::format(
          "WorkerOptions::engine_slice is {} us; it must be {}..{} us (what the kernel grants), "
          "or 0 to keep the kernel's default",
          o.engine_slice.count(), detail::kMinSlice.count(), detail::kMaxSlice.count()));
    }
    if (o.trace_level < 1 || o.trace_level > detail::kTraceMaxLevel) {
      throw UsageError(fmt::format("WorkerOptions::trace_level is {}; it must be 1..{}",
                                   o.trace_level, detail::kTraceMaxLevel));
    }
    if (o.task_window == 0 || o.task_window > kMaxTaskWindow) {
      throw UsageError(fmt::format(
          "WorkerOptions::task_window is {}; it must be 1..{} (tasks alive at once in a run)",
          o.task_window, kMaxTaskWindow));
    }
    if (o.trace_buffer_events == 0) {
      throw UsageError("WorkerOptions::trace_buffer_events is 0; it must be >= 1");
    }
    if (o.hazards != Hazards::All && o.hazards != Hazards::ReadAfterWrite) {
      throw UsageError(fmt::format(
          "WorkerOptions::hazards is {}; it must be Hazards::All or Hazards::ReadAfterWrite",
          static_cast<int>(o.hazards)));
    }
  }
  /// A forked child inherits a copy of this Worker whose threads do not exist there.
  void check_process(const char* api) const {
    if (fork_generation_ == detail::fork_generation()) return;
    throw UsageError(fmt::format(
        "Worker::{}: called in a forked child of the process that initialised this Worker (from "
        "a task running in a forked child, say); its engine threads live only in that process, "
        "so use the Worker there",
        api));
  }
  void check_state(State want, const char* api, const char* when) const {
    if (state_ == want) return;
    if (state_ == State::Closed) {
      throw UsageError(fmt::format("Worker::{}: the Worker is closed; create a new one", api));
    }
    if (state_ == State::Failed) {
      throw UsageError(fmt::format(
          "Worker::{}: init() failed on this Worker; close it and create a new one", api));
    }
    throw UsageError(
        fmt::format("Worker::{}: only valid {} (the Worker is {})", api, when,
                    state_ == State::New ? "not initialised yet" : "already initialised"));
  }
  template <class L>
  void add_lane(detail::Role role, std::string name, L leaf) {
    using ThreadLane = typename detail::LaneForMode<ChildMode::Thread, L, Lanes...>::type;
    using ProcessLane = typename detail::LaneForMode<ChildMode::Process, L, Lanes...>::type;
    static_assert(!std::is_void_v<ThreadLane> || !std::is_void_v<ProcessLane>,
                  "no lane type in this Worker runs this leaf type");
    if (options_.child_mode == ChildMode::Process) {
      if constexpr (!std::is_void_v<ProcessLane>) {
        sched_->template add<ProcessLane>(role, std::move(name), std::move(leaf));
        has_process_children_ = true;
        return;
      } else {
        throw UsageError(
            "WorkerOptions::child_mode is Process but this Worker's lane set has no "
            "ChildMode::Process lane (ForkShmTransport) for this leaf; use ChildMode::Thread");
      }
    }
    if constexpr (!std::is_void_v<ThreadLane>) {
      sched_->template add<ThreadLane>(role, std::move(name), std::move(leaf));
    } else {
      throw UsageError(
          "WorkerOptions::child_mode is Thread but this Worker's lane set has no "
          "ChildMode::Thread lane (ThreadTransport) for this leaf; use ChildMode::Process");
    }
  }

  /// One chip lane per WorkerOptions::device_ids entry, named "chip <id>": next-level worker ids
  /// 0 .. n-1 in device_ids order (children added later with add_worker/add_next_level follow).
  void add_chip_lanes() {
    if constexpr (detail::has_leaf<ChipWorker, Lanes...>) {
      ChipOptions chip = options_.chip;
      if (chip.hazards != options_.hazards) {
        if (chip.hazards != Hazards::All) {
          throw UsageError(
              "WorkerOptions: hazards and chip.hazards differ; set WorkerOptions::hazards, which "
              "the Worker's chips follow");
        }
        chip.hazards = options_.hazards;
      }
      if (!options_.device_runtime.empty()) {
        if (chip.device_runtime.empty()) {
          chip.device_runtime = options_.device_runtime;
        } else if (chip.device_runtime != options_.device_runtime) {
          throw UsageError(fmt::format(
              "WorkerOptions: device_runtime ('{}') and chip.device_runtime ('{}') differ; set "
              "one of them",
              options_.device_runtime, chip.device_runtime));
        }
      }
      const auto& ids = options_.device_ids;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0) {
          throw UsageError(
              fmt::format("WorkerOptions::device_ids[{}] is {}; device ids are >= 0", i, ids[i]));
        }
        for (std::size_t j = 0; j < i; ++j) {
          if (ids[j] == ids[i]) {
            throw UsageError(fmt::format(
                "WorkerOptions::device_ids: device {} appears twice (at {} and {}); one chip "
                "child per device",
                ids[i], j, i));
          }
        }
      }
      // Forked chips learn of callables registered after init() over their mailboxes.
      process_chips_ = options_.child_mode == ChildMode::Process && !ids.empty();
      for (int id : ids) {
        add_lane<ChipWorker>(detail::Role::NextLevel, fmt::format("chip {}", id),
                             ChipWorker(id, chip, *registry_));
      }
    } else {
      throw UsageError(
          "WorkerOptions::device_ids is set but this Worker's lane set has no ChipWorker lane");
    }
  }

  /// Registers `c` on every chip child in another process: a kControlRegisterChip command,
  /// argument the digest, carrying the callable in its mailbox payload
  /// (detail::encode_chip_callable), one chip at a time in lane order. On a refusal, unregisters
  /// it from the chips that took it and throws the refusing chip's error, naming the chip: a
  /// DeviceError with the chip's status when the device refused it, else an Error.
  void broadcast_chip(const ChipCallable& c, std::uint64_t digest) {
    const std::string encoded = detail::encode_chip_callable(c);
    const auto payload = std::as_bytes(std::span(encoded));
    if (payload.size() > detail::kMailboxBlobCapacity) {
      throw UsageError(fmt::format(
          "Worker::register_chip('{}'): the chip callable takes {} bytes, more than the {}-byte "
          "mailbox payload that carries callables registered after init() to forked chips; "
          "register it before init()",
          c.name, payload.size(), detail::kMailboxBlobCapacity));
    }
    std::vector<const void*> took;  // the endpoints that registered it
    std::string refused;
    Fault why;
    const auto each_chip_endpoint = [&](auto&& fn) {
      sched_->for_each_lane([&](auto& lane) {
        using L = std::remove_cvref_t<decltype(lane)>;
        using E = typename L::Endpoint;
        if constexpr (std::is_same_v<typename L::leaf_type, ChipWorker> && ForwardsControl<E>) {
          fn(lane.name, lane.endpoint());
        }
      });
    };
    each_chip_endpoint([&](const std::string& name, auto& ep) {
      if (!refused.empty()) return;
      std::uint64_t id = 0;
      if (ep.control(ChipWorker::kControlRegisterChip, digest, payload, id, why) ==
          Outcome::Success) {
        took.push_back(&ep);
      } else {
        refused = name;
      }
    });
    if (refused.empty()) return;
    each_chip_endpoint([&](const std::string&, auto& ep) {
      if (std::find(took.begin(), took.end(), &ep) == took.end()) return;
      std::uint64_t ignored = 0;
      Fault lost;
      // A chip that cannot unregister keeps an unused callable; the refusal is what we report.
      static_cast<void>(ep.control(ChipWorker::kControlUnregisterChip, digest, {}, ignored, lost));
    });
    std::string text = fmt::format(
        "Worker::register_chip('{}'): {} refused it, so it was withdrawn from the other chips: {}",
        c.name, refused, why.message);
    if (why.kind == ErrorKind::Device) throw DeviceError(text, why.code);
    throw Error(text);
  }

  /// Logs a registration (info) and returns its handle.
  CallableHandle logged(CallableHandle h) const {
    if (log_enabled(LogLevel::Info)) {
      const auto& e = registry_->at(h.index);
      detail::log_worker(LogLevel::Info, options_.level, "registered {} callable '{}' ({:#018x})",
                         to_string(e.kind), e.name, h.digest);
    }
    return h;
  }

  void check_can_register(const char* api) const {
    if (state_ == State::Ready && has_process_children_) {
      throw UsageError(fmt::format(
          "Worker::{}: this Worker's children are forked processes that were started by init(); "
          "register every callable before init()",
          api));
    }
    if (state_ == State::Closed) {
      throw UsageError(fmt::format("Worker::{}: the Worker is closed", api));
    }
    if (running_.load(std::memory_order_acquire)) {
      throw UsageError(fmt::format("Worker::{}: cannot register during a run", api));
    }
  }
  void shutdown() noexcept {
    if (state_ == State::Closed) return;
    const bool started = state_ != State::New;
    if (sched_) sched_->stop();
    if (state_ == State::Ready && fork_generation_ == detail::fork_generation()) {
      write_lifetime_trace();
    }
    state_ = State::Closed;
    if (started) detail::log_worker(LogLevel::Info, options_.level, "closed");
  }

  WorkerOptions options_;
  std::unique_ptr<detail::CallableRegistry> registry_;  // by pointer: stable across moves
  std::unique_ptr<detail::EngineCore> core_;
  std::unique_ptr<Orchestrator> orch_;
  std::unique_ptr<Scheduler<Lanes...>> sched_;
  bool process_chips_ = false;  ///< chips in forked children: late register_chip goes to them
  State state_ = State::New;
  std::uint32_t run_id_ = 0;
  std::uint64_t fork_generation_ = 0;  ///< detail::fork_generation() at init()
  /// Set for the whole of run(), its fence included (re-entrant and concurrent runs are refused).
  std::atomic<bool> running_{false};
  bool has_process_children_ = false;
  // Tracing (see RunTrace): set by add_worker on a child; the lifetime trace's path and records.
  bool nested_ = false;
  std::string trace_path_;
  std::vector<detail::TraceProcess> lifetime_trace_;
  std::size_t lifetime_events_ = 0;
  bool lifetime_written_ = false;
  std::exception_ptr trace_error_;
  detail::DagRecord dag_;
};

class Worker;

/// Host sub workers in this process, and in forked children.
using SubLane = WorkerThread<ThreadTransport, SubWorker>;
using ProcessSubLane = WorkerThread<ForkShmTransport, SubWorker>;
/// Nested Workers (the next level down), in this process or in forked children.
using NestedLane = WorkerThread<ThreadTransport, NestedWorker<Worker>>;
using ProcessNestedLane = WorkerThread<ForkShmTransport, NestedWorker<Worker>>;
/// Chips (WorkerOptions::device_ids), driven from this process or from forked children.
using ChipLane = WorkerThread<ThreadTransport, ChipWorker>;
using ProcessChipLane = WorkerThread<ForkShmTransport, ChipWorker>;
/// L3 Workers on other hosts (add_remote_worker), and on the other ranks of an MPI job
/// (add_mpi_workers).
using RemoteLane = WorkerThread<SocketTransport, RemoteL3>;
using MpiLane = WorkerThread<MpiTransport, MpiL3>;
// Late chip registration reaches forked chips through this; a signature drift must not silently
// turn it off.
static_assert(ForwardsControl<ProcessChipLane::Endpoint>);

/// The default Worker: sub workers, nested Workers and chips on either transport, chosen by
/// WorkerOptions::child_mode, and remote L3 Workers (over TCP, over MPI). A class (not an alias)
/// so NestedWorker<Worker> can name it. The remote lanes come last: lanes launch in this order, so
/// every local child is forked before the first connection is opened and before MPI starts.
class Worker : public BasicWorker<SubLane, ProcessSubLane, NestedLane, ProcessNestedLane, ChipLane,
                                  ProcessChipLane, RemoteLane, MpiLane> {
 public:
  using BasicWorker::BasicWorker;
  Worker(Worker&&) noexcept = default;
};

/// What an orchestration function of the default Worker receives (at every level).
using Orchestrator = Worker::Orchestrator;

}  // namespace simpler
