// simpler — the Transport concept: how a lane reaches the child that runs its leaf.
//
// A transport T provides, for any leaf type L, an endpoint type `T::Endpoint<L>` constructed from
// the leaf. The lane calls, in order: launch() once before any engine thread starts (a process
// transport forks here), execute() once per task on the lane's thread, shutdown() once at the end.
#pragma once

#include <concepts>
#include <string>

#include "simpler/detail/engine.hpp"
#include "simpler/error.hpp"

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

template <class E>
concept Endpoint = Launches<E> && Executes<E> && ShutsDown<E>;

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

template <class T>
concept Transport = requires {
  typename T::template Endpoint<detail::ProbeLeaf>;
}
&&Endpoint<typename T::template Endpoint<detail::ProbeLeaf>>&&
    std::constructible_from<typename T::template Endpoint<detail::ProbeLeaf>, detail::ProbeLeaf&>;

}  // namespace simpler
