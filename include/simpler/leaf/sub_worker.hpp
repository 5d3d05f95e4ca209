// simpler — SubWorker: the leaf that runs host callables registered with Worker::register_sub.
#pragma once

#include <fmt/format.h>

#include <string>

#include "simpler/detail/engine_core.hpp"
#include "simpler/error.hpp"
#include "simpler/leaf/leaf.hpp"

namespace simpler {

/// Resolves a request's digest in the Worker's registry and calls the function with the task's
/// arguments. Holds the registry by pointer: the Worker outlives its lanes. Fork-safe (a forked
/// child uses its inherited copy of the registry).
class SubWorker {
 public:
  /// Runs host functions from Worker::register_sub.
  static constexpr std::uint8_t kRuns = kind_bit(CallableKind::Sub);

  explicit SubWorker(const detail::CallableRegistry& registry) noexcept : registry_(&registry) {}

  void run(const LeafRequest& r) const {
    const auto* e = registry_->find(r.digest, r.index_hint);
    if (e == nullptr || e->kind != CallableKind::Sub) {
      throw Error(fmt::format("no sub callable with digest {:#018x} is registered here", r.digest));
    }
    e->sub(r.args);
  }
  [[nodiscard]] std::string callable_name(const LeafRequest& r) const {
    return registry_->name_of(r.digest, r.index_hint);
  }

 private:
  const detail::CallableRegistry* registry_;
};

static_assert(Leaf<SubWorker>);

}  // namespace simpler
