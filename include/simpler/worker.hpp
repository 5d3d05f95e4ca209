// simpler — BasicWorker<Lanes...> and Worker: the facade that composes Orchestrator, Scheduler
// and lanes.
//
// Lifecycle: construct (maps the heap rings) -> register callables, add children -> init()
// (starts children, then threads) -> run() any number of times -> close() (or the destructor).
// Thread-safety: a Worker is driven from one thread at a time; run() is not re-entrant.
#pragma once

#include <fmt/format.h>

#include <unistd.h>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>

#include "simpler/call_config.hpp"
#include "simpler/callable.hpp"
#include "simpler/detail/engine.hpp"
#include "simpler/error.hpp"
#include "simpler/leaf/sub_worker.hpp"
#include "simpler/options.hpp"
#include "simpler/orchestrator.hpp"
#include "simpler/scheduler.hpp"
#include "simpler/task_args.hpp"
#include "simpler/transport/thread_transport.hpp"
#include "simpler/worker_thread.hpp"

namespace simpler {

namespace detail {
/// A process-unique, non-zero token naming one Worker instance (for handle ownership checks).
std::uint64_t next_worker_token() noexcept;

template <class L, class... Lanes>
struct LaneFor;  // the first lane type in Lanes whose leaf is L
template <class L>
struct LaneFor<L> {
  using type = void;
};
template <class L, class First, class... Rest>
struct LaneFor<L, First, Rest...> {
  using type = std::conditional_t<std::is_same_v<typename First::leaf_type, L>, First,
                                  typename LaneFor<L, Rest...>::type>;
};
}  // namespace detail

template <class... Lanes>
class BasicWorker {
 public:
  using OrchFunction = detail::OrchFn;
  using SubFunction = detail::SubFn;

  explicit BasicWorker(WorkerOptions options)
      : options_(std::move(options)),
        registry_(detail::next_worker_token()),
        core_(std::make_unique<detail::EngineCore>()) {
    if (options_.num_sub_workers < 0) {
      throw UsageError(fmt::format("WorkerOptions::num_sub_workers is {}; it must be >= 0",
                                   options_.num_sub_workers));
    }
    if (options_.child_mode == ChildMode::Process) {
      throw UsageError(
          "WorkerOptions::child_mode = Process needs ForkShmTransport, which this build does not "
          "have yet; use ChildMode::Thread");
    }
    if (!options_.device_ids.empty()) {
      throw UsageError("WorkerOptions::device_ids: chip children are not available in this build");
    }
    core_->level = options_.level;
    core_->timing.spin = options_.spin;
    core_->timing.heap_wait = options_.heap_wait;
    orch_ = std::make_unique<Orchestrator>(*core_, registry_, options_.heap_ring_size);
    sched_ = std::make_unique<Scheduler<Lanes...>>(*core_);
  }
  BasicWorker(const BasicWorker&) = delete;
  BasicWorker& operator=(const BasicWorker&) = delete;
  ~BasicWorker() { shutdown(); }

  /// Registers a host function for sub workers. Throws UsageError for a duplicate name or
  /// during a run.
  CallableHandle register_sub(std::string name, SubFunction fn) {
    check_can_register("register_sub");
    return registry_.add(CallableKind::Sub, std::move(name), std::move(fn), {});
  }
  /// Registers an orchestration function for next-level workers (nested Workers).
  CallableHandle register_orch(std::string name, OrchFunction fn) {
    check_can_register("register_orch");
    return registry_.add(CallableKind::Orch, std::move(name), {}, std::move(fn));
  }

  /// Adds an in-process next-level child running `leaf`. Before init() only.
  template <Leaf L>
  WorkerId add_next_level(L leaf, std::string name = {}) {
    using Lane = typename detail::LaneFor<L, Lanes...>::type;
    static_assert(!std::is_void_v<Lane>, "no lane type in this Worker runs this leaf type");
    check_state(State::New, "add_next_level", "before init()");
    const auto id = static_cast<WorkerId>(core_->next_level.size());
    if (name.empty()) name = fmt::format("next-level worker {}", id);
    sched_->template add<Lane>(detail::Role::NextLevel, std::move(name), std::move(leaf));
    return id;
  }

  /// Starts the children and the engine threads. Throws UsageError when called twice.
  void init() {
    check_state(State::New, "init", "once, on a new Worker");
    using SubLane = typename detail::LaneFor<SubWorker, Lanes...>::type;
    if constexpr (!std::is_void_v<SubLane>) {
      for (int i = 0; i < options_.num_sub_workers; ++i) {
        sched_->template add<SubLane>(detail::Role::Sub, fmt::format("sub worker {}", i),
                                      SubWorker(registry_));
      }
    } else if (options_.num_sub_workers > 0) {
      throw UsageError("this Worker's lane set has no SubWorker lane; num_sub_workers must be 0");
    }
    sched_->start();
    state_ = State::Ready;
  }

  /// Runs `orch` on this thread with a fresh Orchestrator scope, then waits until every task it
  /// submitted finished. Rethrows the run's first failure (a TaskError naming level, worker,
  /// callable and message) or the exception `orch` threw; either way the Worker stays usable.
  void run(const OrchFunction& orch, const TaskArgs& args = {},
           const CallConfig& config = default_call_config()) {
    check_state(State::Ready, "run", "between init() and close()");
    if (orch_->in_run())
      throw UsageError("Worker::run: a run is already in progress (re-entrant run)");
    if (!orch) throw UsageError("Worker::run: the orchestration function is empty");
    core_->run.begin(++run_id_);
    orch_->begin_run();
    std::exception_ptr thrown;
    try {
      orch(*orch_, args.view(), config);
    } catch (...) {
      thrown = std::current_exception();
      // Tasks not yet dispatched are skipped; the ones running finish.
      if (!core_->run.failed()) core_->run.cancel();
    }
    const int left_open = orch_->finish_run();
    if (thrown) std::rethrow_exception(thrown);
    if (auto e = core_->run.first_error()) std::rethrow_exception(e);
    if (left_open > 0) {
      throw UsageError(fmt::format(
          "Worker::run: the orchestration function left {} scope(s) open; every scope_begin needs "
          "a scope_end (the run closed them)",
          left_open));
    }
  }

  /// Stops the engine threads and children. Idempotent; also done by the destructor.
  void close() {
    if (orch_->in_run()) throw UsageError("Worker::close: cannot close from inside a run");
    shutdown();
  }

  [[nodiscard]] const WorkerOptions& options() const noexcept { return options_; }
  [[nodiscard]] int level() const noexcept { return options_.level; }
  [[nodiscard]] std::size_t next_level_count() const noexcept { return core_->next_level.size(); }
  [[nodiscard]] std::size_t sub_count() const noexcept { return core_->subs.size(); }
  /// The Orchestrator, for introspection between runs (live_tasks(), tensor_map_size()).
  [[nodiscard]] const Orchestrator& orchestrator() const noexcept { return *orch_; }
  [[nodiscard]] Scheduler<Lanes...>& scheduler() noexcept { return *sched_; }

 private:
  enum class State { New, Ready, Closed };

  void check_state(State want, const char* api, const char* when) const {
    if (state_ == want) return;
    if (state_ == State::Closed) {
      throw UsageError(fmt::format("Worker::{}: the Worker is closed; create a new one", api));
    }
    throw UsageError(
        fmt::format("Worker::{}: only valid {} (the Worker is {})", api, when,
                    state_ == State::New ? "not initialised yet" : "already initialised"));
  }
  void check_can_register(const char* api) const {
    if (state_ == State::Closed) {
      throw UsageError(fmt::format("Worker::{}: the Worker is closed", api));
    }
    if (orch_->in_run()) {
      throw UsageError(fmt::format("Worker::{}: cannot register during a run", api));
    }
  }
  void shutdown() noexcept {
    if (state_ == State::Closed) return;
    sched_->stop();
    state_ = State::Closed;
  }

  WorkerOptions options_;
  detail::CallableRegistry registry_;
  std::unique_ptr<detail::EngineCore> core_;
  std::unique_ptr<Orchestrator> orch_;
  std::unique_ptr<Scheduler<Lanes...>> sched_;
  State state_ = State::New;
  std::uint32_t run_id_ = 0;
};

/// The default lane set: host sub workers in this process.
using SubLane = WorkerThread<ThreadTransport, SubWorker>;
using Worker = BasicWorker<SubLane>;

}  // namespace simpler
