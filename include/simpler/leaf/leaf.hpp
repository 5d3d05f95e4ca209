// simpler — the Leaf concept: what finally runs a task (a host function, a chip callable, an
// inner Worker). A lane owns one leaf; the transport decides where it runs (this thread, a
// forked child, a remote host).
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <string>

#include "simpler/call_config.hpp"
#include "simpler/callable.hpp"
#include "simpler/task_args.hpp"

namespace simpler {

namespace detail {
struct TraceReply;
}

/// What a leaf is asked to run: the callable's identity, its arguments and its config. The
/// pointed-to data lives until the leaf returns.
struct LeafRequest {
  std::uint64_t digest = 0;
  std::uint32_t index_hint = 0;  ///< the parent's registry index; a hint, the digest decides
  TaskArgsView args;
  const CallConfig* config = nullptr;
  /// When the task must have finished (max() = never). A transport that can stop its child
  /// (EnforcesDeadlines) ends the task there itself; for the others the scheduler watches it.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::uint32_t deadline_ms = 0;  ///< the deadline's length, for messages
  bool run_deadline = false;      ///< the deadline is the run's (else the task's own timeout)
  /// Set when the task is traced (detail/trace.hpp): a transport whose child times the task
  /// reports the times there, a leaf with a trace of its own (a nested Worker) appends it.
  detail::TraceReply* trace = nullptr;

  /// The task has a deadline (someone must end or watch it).
  [[nodiscard]] bool timed() const noexcept {
    return deadline != std::chrono::steady_clock::time_point::max();
  }
};

/// Runs one task; reports failure by throwing (the lane turns it into a TaskFailure outcome).
template <class L>
concept RunsTasks = requires(L& leaf, const LeafRequest& request) {
  leaf.run(request);
};

/// Names the callable of a request, for error messages.
template <class L>
concept NamesCallables = requires(const L& leaf, const LeafRequest& request) {
  { leaf.callable_name(request) } -> std::convertible_to<std::string>;
};

template <class L>
concept Leaf = std::move_constructible<L> && RunsTasks<L> && NamesCallables<L>;

// ---- Optional capabilities. A lane checks for each with `if constexpr`; none is required.

/// Says which callable kinds it runs (a kind_bit mask). The Orchestrator refuses a task directed
/// at a lane whose leaf cannot run it, and the scheduler routes shared work only to lanes that
/// can. A leaf without it is taken to run every kind.
template <class L>
concept DeclaresKinds = requires {
  { L::kRuns } -> std::convertible_to<std::uint8_t>;
};

/// Has a lifecycle: start() where the leaf runs (in the forked child, for a process transport),
/// before its first task; stop() at shutdown, never throwing.
template <class L>
concept Starts = requires(L& leaf) {
  leaf.start();
  { leaf.stop() }
  noexcept;
};

/// Answers control commands between tasks (ChipWorker: late chip registration); a transport
/// that reaches it in another process forwards them.
template <class L>
concept Controllable = requires(L& leaf, std::uint64_t command, std::uint64_t arg) {
  leaf.control(command, arg);
};

/// The kinds a leaf of type L runs (see DeclaresKinds).
template <class L>
constexpr std::uint8_t leaf_kinds() noexcept {
  if constexpr (DeclaresKinds<L>) {
    return static_cast<std::uint8_t>(L::kRuns);
  } else {
    return kAllCallableKinds;
  }
}

}  // namespace simpler
