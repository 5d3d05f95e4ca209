// Test support: the local transports, as types for TEMPLATE_TEST_CASE, and options for them.
#pragma once

#include <simpler/simpler.hpp>

#include "support/recording_leaf.hpp"

namespace simpler::testing {

struct InThreads {
  static constexpr ChildMode mode = ChildMode::Thread;
};
struct InProcesses {
  static constexpr ChildMode mode = ChildMode::Process;
};

/// Options for a Worker of `level` with `subs` sub workers whose children run per Mode.
template <class Mode>
WorkerOptions options_for(int subs, int level = 3) {
  WorkerOptions o = thread_options(subs);
  o.level = level;
  o.child_mode = Mode::mode;
  return o;
}

}  // namespace simpler::testing
