// simpler — NestedWorker<W>: the leaf that makes a Worker the child of another Worker.
//
// It owns the inner Worker (by pointer, so Worker can list this leaf among its own lane types
// without becoming a recursive type). start() initialises the inner Worker where the leaf runs:
// in a forked child its own children are forked from there, so the process tree is parent ->
// child -> grandchildren. A task names an orchestration function registered on the OUTER Worker
// (register_orch); the leaf resolves the digest and runs that function on the inner Worker. An
// inner failure propagates with the inner context, so a failure two levels down reaches the top
// with every level it crossed.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>

#include "simpler/detail/engine_core.hpp"
#include "simpler/error.hpp"
#include "simpler/leaf/leaf.hpp"

namespace simpler {

template <class W>
class NestedWorker {
 public:
  /// Runs orchestration functions from Worker::register_orch on the inner Worker.
  static constexpr std::uint8_t kRuns = kind_bit(CallableKind::Orch);
  using worker_type = W;

  NestedWorker(std::unique_ptr<W> inner, const detail::CallableRegistry& outer_registry) noexcept
      : inner_(std::move(inner)), registry_(&outer_registry) {}
  NestedWorker(NestedWorker&&) noexcept = default;
  NestedWorker& operator=(NestedWorker&&) noexcept = default;
  ~NestedWorker() = default;

  void start() { inner_->init(); }
  void stop() noexcept { inner_->shutdown_quietly(); }

  void run(const LeafRequest& r) {
    const auto* e = registry_->find(r.digest, r.index_hint);
    if (e == nullptr) {
      throw Error(fmt::format("no orchestration function with digest {:#018x} is registered here",
                              r.digest));
    }
    if (e->kind != CallableKind::Orch) {
      throw Error(
          fmt::format("'{}' is a {} callable; a nested Worker runs only orchestration "
                      "functions (Worker::register_orch){}",
                      e->name, to_string(e->kind),
                      e->kind == CallableKind::Chip ? "; submit it to a chip worker" : ""));
    }
    if (r.trace != nullptr && r.trace->level != 0) {
      inner_->run_traced(e->orch, r.args, *r.config, *r.trace);  // the inner trace comes back
    } else {
      inner_->run_registered(e->orch, r.args, *r.config);
    }
  }
  [[nodiscard]] std::string callable_name(const LeafRequest& r) const {
    return registry_->name_of(r.digest, r.index_hint);
  }
  [[nodiscard]] W& inner() noexcept { return *inner_; }

 private:
  std::unique_ptr<W> inner_;
  const detail::CallableRegistry* registry_;
};

}  // namespace simpler
