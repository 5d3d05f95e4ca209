// simpler — the Leaf concept: what finally runs a task (a host function, a chip callable, an
// inner Worker). A lane owns one leaf; the transport decides where it runs (this thread, a
// forked child, a remote host).
#pragma once

#include <concepts>
#include <string>

#include "simpler/detail/engine.hpp"

namespace simpler {

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

}  // namespace simpler
