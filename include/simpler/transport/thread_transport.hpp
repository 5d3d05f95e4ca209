// simpler — ThreadTransport: the leaf runs in this process, on the lane's own thread.
#pragma once

#include <exception>
#include <string>

#include "simpler/transport/transport.hpp"

namespace simpler {

struct ThreadTransport {
  /// Calls the leaf directly. An exception from the leaf becomes a TaskFailure carrying its
  /// message; it never leaves the lane thread.
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
    Outcome execute(const LeafRequest& request, std::string& error) noexcept {
      try {
        leaf_->run(request);
        return Outcome::Success;
      } catch (const std::exception& e) {
        assign(error, e.what());
      } catch (...) {
        assign(error, "a non-std::exception was thrown");
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
    static void assign(std::string& out, const char* text) noexcept {
      try {
        out = text;
      } catch (...) {
        out.clear();  // out of memory: the outcome still says it failed
      }
    }
    L* leaf_;
    bool started_ = false;
  };
};

static_assert(Transport<ThreadTransport>);

}  // namespace simpler
