// Test seam: what a test may hold of the engine behind an Orchestrator, to make a state happen
// that timing alone makes only likely (OrchestratorBase befriends detail::EngineTestAccess).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>

#include <simpler/simpler.hpp>

namespace simpler::detail {

struct EngineTestAccess {
  static EngineCore& core(OrchestratorBase& o) noexcept { return o.core_; }
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
      : token_(detail::EngineTestAccess::core(o).pass_owner) {
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
      std::uint32_t free = 0;
      if (token_.compare_exchange_strong(free, 1, std::memory_order_seq_cst)) return;
      if (std::chrono::steady_clock::now() > until) {
        throw std::runtime_error(
            "PassTokenHold: the pass token stayed taken (a pass never ended?)");
      }
      std::this_thread::yield();
    }
  }
  ~PassTokenHold() { token_.store(0, std::memory_order_seq_cst); }
  PassTokenHold(const PassTokenHold&) = delete;
  PassTokenHold& operator=(const PassTokenHold&) = delete;

 private:
  std::atomic<std::uint32_t>& token_;
};

}  // namespace simpler::testing
