// simpler — the Transport concept: how a lane reaches the child that runs its leaf.
//
// A transport T provides, for any leaf type L, an endpoint type `T::Endpoint<L>` constructed from
// the leaf. The lane calls, in order: launch() once before any engine thread starts (a process
// transport forks here), execute() once per task on the lane's thread, shutdown() once at the end.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "simpler/options.hpp"

#include "simpler/detail/event_count.hpp"
#include "simpler/error.hpp"
#include "simpler/leaf/leaf.hpp"
#include "simpler/remote/remote.hpp"

namespace simpler {

namespace detail {
/// A leaf with nothing but the required operations, used to check transports.
struct ProbeLeaf {
  void run(const LeafRequest&) {}
  [[nodiscard]] std::string callable_name(const LeafRequest&) const { return {}; }
};
}  // namespace detail

/// Starts its child (fork, connect, or nothing) before any engine thread exists.
template <class E>
concept Launches = requires(E& e) {
  e.launch();
};

/// Runs one task to its end and says how it ended, filling `fault` on failure. Never throws:
/// every way a dispatch can end is an Outcome.
template <class E>
concept Executes = requires(E& e, const LeafRequest& request, Fault& fault) {
  { e.execute(request, fault) }
  noexcept->std::same_as<Outcome>;
};

/// Stops the child and releases what launch() took. Never throws.
template <class E>
concept ShutsDown = requires(E& e) {
  { e.shutdown() }
  noexcept;
};

/// What every endpoint must do: run a task. launch() and shutdown() are optional (a transport
/// with nothing to start, a test double the test pumps).
template <class E>
concept Endpoint = Executes<E>;

// ---- Optional capabilities. The lane and the facade check for each with `if constexpr`.

/// Knows whether its child is still there: alive() after an EndpointFailure says whether the
/// lane is dead for good (the scheduler then stops giving it shared work); death() says how it
/// ended, death_unreported() whether no task failure reported it yet (close() reports those).
template <class E>
concept ReportsLiveness = requires(const E& e) {
  { e.alive() } -> std::convertible_to<bool>;
  { e.death() } -> std::convertible_to<std::string>;
  { e.death_unreported() } -> std::convertible_to<bool>;
};

/// Forwards a control command, with a payload, to its leaf between tasks (the child may be
/// another process) and says how it ended like execute() does: Worker::register_chip after
/// init() reaches chips this way.
template <class E>
concept ForwardsControl = requires(E& e, std::uint64_t command, std::uint64_t arg,
                                   std::span<const std::byte> payload, std::uint64_t& result,
                                   Fault& fault) {
  { e.control(command, arg, payload, result, fault) }
  noexcept->std::same_as<Outcome>;
};

/// Optional: the lane set's default transport for WorkerOptions::child_mode == T::kChildMode
/// (add_next_level, num_sub_workers and device_ids pick their lane type by it). A transport
/// without it is reached only through BasicWorker::add_child<Lane>.
template <class T>
concept DefaultForChildMode = requires {
  { T::kChildMode } -> std::convertible_to<ChildMode>;
};

/// Optional: the endpoint ends a task at LeafRequest::deadline by itself (it can stop its
/// child: a process transport kills it). For a transport without it the scheduler watches the
/// deadline and, when it passes, abandons the lane (its thread cannot be stopped).
template <class T>
concept EnforcesDeadlines = requires {
  requires T::kEnforcesDeadlines;
};

/// Optional: the children run in another address space that sees only memory shared before
/// they were started (MAP_SHARED mappings made before Worker::init, and the heap rings). The
/// Orchestrator refuses, at submit, a tensor for such a child that lies anywhere else.
template <class T>
concept SeparateAddressSpace = requires {
  requires T::kSeparateAddressSpace;
};

/// Optional: keeps several tasks in flight. The lane sends up to window() tasks with send()
/// (false: that task did not go out; `refused` and `fault` say how it ended) before it waits
/// with receive() for the oldest one's outcome, in the order they were sent.
template <class E>
concept Pipelines = requires(E& e, const E& ce, const LeafRequest& r, Outcome& o, Fault& f) {
  { ce.window() } -> std::convertible_to<std::uint32_t>;
  { e.send(r, o, f) }
  noexcept->std::same_as<bool>;
  { e.receive(f) }
  noexcept->std::same_as<Outcome>;
};

/// Optional, with Pipelines: the lane can wait for the oldest outcome *or* for more work to
/// send. await_answer_or(more) returns true once receive() would not wait (the oldest task was
/// answered, or its child died or was killed at its deadline: receive() says which), false as
/// soon as `more()` holds; it sleeps on answer_event(), which whoever makes `more()` true
/// notifies (the scheduler, through LaneCore::also_wake). So a task posted while the child runs
/// an earlier one goes out at once, and the child finds it when it finishes, instead of the lane
/// sending it only after it received the earlier answer.
template <class E>
concept AwaitsAnswerOr = requires(E& e, bool (*more)()) {
  { e.await_answer_or(more) }
  noexcept->std::same_as<bool>;
  { e.answer_event() }
  noexcept->std::same_as<detail::EventCount&>;
};

/// Optional, with AwaitsAnswerOr: the endpoint may be driven by another thread than its lane's,
/// one thread at a time, and that thread need not wait for answers. answer_ready() says, without
/// waiting, whether receive() would return at once; answers_waiting() (any thread) whether the
/// child answered a task nobody received yet; poll_child() checks, without waiting, that the
/// child lives (a dead one settles every task in flight), every liveness_tick() while tasks are
/// in flight and nobody waits for them. The child wakes answer_event()'s sleeper when it is
/// about to sleep with answers nobody took. See WorkerThread, "Driven lanes".
template <class E>
concept DrivenInline = AwaitsAnswerOr<E> && requires(E& e, const E& ce) {
  { ce.answer_ready() }
  noexcept->std::same_as<bool>;
  { ce.answers_waiting() }
  noexcept->std::same_as<bool>;
  { e.poll_child() }
  noexcept->std::same_as<bool>;
  { E::liveness_tick() } -> std::convertible_to<std::chrono::milliseconds>;
};

/// Optional: has work to do while its lane is idle (heartbeats): the idle lane wakes every
/// tick_period() and calls tick().
template <class E>
concept Ticks = requires(E& e, const E& ce) {
  { ce.tick_period() } -> std::convertible_to<std::chrono::milliseconds>;
  { e.tick() }
  noexcept;
};

/// Optional: runs only some of the registered callables (a remote serves what its program
/// registered). Known after launch(); the Orchestrator refuses, at submit, a task naming a
/// callable the lane does not serve.
template <class E>
concept ServesSubset = requires(const E& e, std::uint64_t digest) {
  { e.serves(digest) } -> std::convertible_to<bool>;
  { e.served_names() } -> std::convertible_to<std::string>;
  { e.where() } -> std::convertible_to<std::string>;
};

/// Optional: its child is on another host and sees only memory allocated there; tensors for it
/// are RemoteBuffer tensors (the Orchestrator refuses any other at submit), and the facade's
/// remote_alloc / remote_free / copy_to_remote / copy_from_remote reach it through these.
template <class E>
concept HoldsRemoteMemory = requires(E& e, WorkerId w, std::uint64_t n, const RemoteBuffer& b,
                                     const void* src, void* dst) {
  { e.remote_alloc(w, n) } -> std::same_as<RemoteBuffer>;
  e.remote_free(b);
  e.copy_to_remote(b, n, src, n);
  e.copy_from_remote(b, n, dst, n);
  { e.session() } -> std::convertible_to<std::uint64_t>;
  { std::as_const(e).holds_remote(n, n) } -> std::convertible_to<bool>;
  { std::as_const(e).owns(b) } -> std::convertible_to<bool>;
};

template <class T>
concept Transport = requires {
  typename T::template Endpoint<detail::ProbeLeaf>;
}
&&Endpoint<typename T::template Endpoint<detail::ProbeLeaf>>&&
    std::constructible_from<typename T::template Endpoint<detail::ProbeLeaf>, detail::ProbeLeaf&>;

}  // namespace simpler
