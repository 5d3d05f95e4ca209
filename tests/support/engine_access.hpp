// Test seam: what a test may hold of the engine behind an Orchestrator, to make a state happen
// that timing alone makes only likely (OrchestratorBase befriends detail::EngineTestAccess).
#pragma once

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <thread>

#include <simpler/simpler.hpp>

namespace simpler::detail {

struct EngineTestAccess {
  static EngineCore& core(OrchestratorBase& o) noexcept { return o.core_; }
  /// Loses every task waiting in the ready ring and the ready inbox, as an engine defect that
  /// dropped them between two queues would: they never run, finish or retire. Call it holding
  /// the pass token (testing::PassTokenHold), so no pass takes them first. Returns how many.
  static std::size_t lose_ready_tasks(OrchestratorBase& o) noexcept {
    std::size_t n = 0;
    o.core_.ready_ring.drain([&](const ReadyRecord&) { ++n; });
    for (Slot* s = o.core_.ready_inbox.take_fifo(); s != nullptr; s = s->next) ++n;
    return n;
  }
};

}  // namespace simpler::detail

namespace simpler::testing {

/// Holds the scheduler's pass token (EngineCore::pass_owner) for its lifetime: no pass runs,
/// so nothing published is taken from the ready ring or the inbox and nothing is posted to a
/// lane. Whoever looks for input next after it is released takes what arrived (a run's fence
/// does passes itself). Throws std::runtime_error when the token stays taken for `limit`.
class PassTokenHold {
 public:
  explicit PassTokenHold(OrchestratorBase& o,
                         std::chrono::milliseconds limit = std::chrono::seconds(10))
      : core_(detail::EngineTestAccess::core(o)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (core_.take_pass()) return;
      if (std::chrono::steady_clock::now() > until) {
        throw std::runtime_error(
            "PassTokenHold: the pass token stayed taken (a pass never ended?)");
      }
      std::this_thread::yield();
    }
  }
  ~PassTokenHold() { core_.give_pass(); }
  PassTokenHold(const PassTokenHold&) = delete;
  PassTokenHold& operator=(const PassTokenHold&) = delete;

 private:
  detail::EngineCore& core_;
};

}  // namespace simpler::testing
