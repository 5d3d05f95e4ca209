// simpler — Scheduler<Lanes...>: owns a Worker's lanes and the scheduler thread.
//
// Lanes is the set of lane types the Worker may hold (WorkerThread<Transport, Leaf>
// instantiations); each type gets its own pool, so starting and stopping is static per type.
// Dispatch itself goes through the lanes' common LaneCore, so the per-task path has no virtual
// call and no type switch (see detail::SchedulerCore).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "simpler/detail/engine_core.hpp"
#include "simpler/detail/scheduler_core.hpp"
#include "simpler/detail/short_slice.hpp"
#include "simpler/detail/thread_name.hpp"

namespace simpler {

template <class... Lanes>
class Scheduler {
 public:
  explicit Scheduler(detail::EngineCore& core) : core_(core), loop_(core) {}
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler() { stop(); }

  /// Adds a lane of type Lane; its WorkerId is its position among lanes of the same role.
  template <class Lane, class... Args>
  Lane& add(detail::Role role, std::string name, Args&&... args) {
    static_assert((std::is_same_v<Lane, Lanes> || ...), "Lane is not in this Scheduler's lane set");
    auto& table = role == detail::Role::Sub ? core_.subs : core_.next_level;
    const auto id = static_cast<WorkerId>(table.size());
    auto lane =
        std::make_unique<Lane>(core_, role, id, std::move(name), std::forward<Args>(args)...);
    Lane& ref = *lane;
    table.reserve(table.size() + 1);
    std::get<std::vector<std::unique_ptr<Lane>>>(pools_).push_back(std::move(lane));
    table.push_back(&ref);
    if (ref.restrictions != nullptr) core_.restricted_lanes = true;
    if (ref.drive != nullptr) core_.driven_lanes.push_back(&ref);
    if (ref.help != nullptr) core_.helped_lanes.push_back(&ref);
    if (ref.run_here != nullptr && role == detail::Role::Sub) core_.submit_lanes.push_back(&ref);
    return ref;
  }

  /// Launches every child first (forks happen before any thread exists), then starts the lane
  /// threads and the scheduler thread. On failure everything started is stopped again.
  void start() {
    try {
      (void)detail::AwakeThreads::cores();  // on this thread, whose mask the engine's inherit
      for_each_lane([](auto& l) { l.launch(); });
      loop_.prepare();
      for_each_lane([](auto& l) { l.start(); });
      thread_ = std::thread([this] {
        (void)detail::request_slice(core_.timing.slice);
        const detail::AwakeThreads::Member awake(1);
        loop_.run_loop();
      });
      detail::name_thread(thread_, core_.level, "sched");
      core_.driver.store(&loop_, std::memory_order_release);
    } catch (...) {
      stop();
      throw;
    }
  }

  /// Stops the scheduler thread, then every lane. Call when no run is in progress. A lane lost
  /// at a deadline is not joined (its thread may never return): it is detached and the lane
  /// kept alive for the rest of the process (see lost_lanes()).
  void stop() noexcept {
    core_.driver.store(nullptr, std::memory_order_release);
    if (thread_.joinable()) {
      core_.stop.store(true, std::memory_order_seq_cst);
      core_.notify_scheduler();
      thread_.join();
    }
    for_each_lane([](auto& l) { l.stop(); });
    std::apply([this](auto&... pool) { (keep_lost(pool), ...); }, pools_);
  }

  /// Whether the scheduler thread is asleep, or about to sleep, waiting for work: then a task the
  /// Orchestrator publishes while few are alive is dispatched on the Orchestrator's thread
  /// (docs/engine.md, "The Orchestrator runs passes"). Diagnostics and tests; any thread.
  [[nodiscard]] bool asleep() const noexcept { return core_.sched_wake.has_waiters(); }
  /// Whether the thread running the Orchestrator is asleep, or about to sleep, waiting on the
  /// engine (the end of a run, a full task window or heap). Diagnostics and tests; any thread.
  [[nodiscard]] bool orchestrator_asleep() const noexcept { return core_.orch_wake.has_waiters(); }

  /// How many times something woke the sleeping scheduler thread (wrapping; a notify that
  /// found it awake does not count). Diagnostics and tests; any thread.
  [[nodiscard]] std::uint32_t wakes() const noexcept { return core_.sched_wake.wakes(); }

  /// Lanes abandoned at a deadline whose threads were detached at stop().
  [[nodiscard]] std::size_t lost_lanes() const noexcept { return lost_; }

  template <class F>
  void for_each_lane(F&& f) {
    std::apply([&](auto&... pool) { (for_pool(pool, f), ...); }, pools_);
  }

 private:
  template <class Pool, class F>
  static void for_pool(Pool& pool, F& f) {
    for (auto& l : pool) f(*l);
  }
  template <class Pool>
  void keep_lost(Pool& pool) noexcept {
    for (auto& l : pool) {
      if (l->lost.load(std::memory_order_seq_cst)) {
        ++lost_;
        detail::keep_forever(std::shared_ptr<void>(std::move(l)));
      }
    }
    std::erase(pool, nullptr);
  }

  detail::EngineCore& core_;
  detail::SchedulerCore loop_;
  std::tuple<std::vector<std::unique_ptr<Lanes>>...> pools_;
  std::thread thread_;
  std::size_t lost_ = 0;
};

}  // namespace simpler
