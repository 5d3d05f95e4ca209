// simpler — ThreadTransport: the leaf runs in this process, on the lane's own thread.
#pragma once

#include <exception>
#include <string>

#include "simpler/transport/transport.hpp"

namespace simpler {

struct ThreadTransport {
  /// The default transport of ChildMode::Thread (DefaultForChildMode).
  static constexpr ChildMode kChildMode = ChildMode::Thread;

  /// Calls the leaf directly. An exception from the leaf becomes a TaskFailure carrying its
  /// kind, code and message (a Fault); it never leaves the lane thread.
  template <class L>
  class Endpoint {
   public:
    explicit Endpoint(L& leaf) noexcept : leaf_(&leaf) {}
    /// Starts the leaf in this process (a nested Worker initialises itself here).
    void launch() {
      if constexpr (requires { leaf_->start(); }) {
        leaf_->start();
        started_ = true;
      }
    }
    Outcome execute(const LeafRequest& request, Fault& fault) noexcept {
      try {
        leaf_->run(request);
        return Outcome::Success;
      } catch (...) {
        fault_from_current_exception(fault);
      }
      return Outcome::TaskFailure;
    }
    void shutdown() noexcept {
      if constexpr (requires { leaf_->stop(); }) {
        if (started_) leaf_->stop();
      }
      started_ = false;
    }

   private:
    L* leaf_;
    bool started_ = false;
  };
};

static_assert(Transport<ThreadTransport>);

}  // namespace simpler
