// Test support: polling a condition with a deadline, for what a test cannot wake on (another
// process's exit, a counter an engine thread bumps, a file a child writes).
#pragma once

#include <chrono>
#include <thread>

namespace simpler::testing {

/// Evaluates `pred` every `step` until it holds or `limit` has passed; returns its last value (so
/// a condition that came true at the deadline still counts). Never for ordering work inside a
/// test: a wait that depends on a step's length is a flaky test.
template <class Pred, class Rep, class Period, class StepRep = long, class StepPeriod = std::milli>
bool poll_until(Pred pred, std::chrono::duration<Rep, Period> limit,
                std::chrono::duration<StepRep, StepPeriod> step = std::chrono::milliseconds(5)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return pred();
    std::this_thread::sleep_for(step);
  }
  return true;
}

}  // namespace simpler::testing
