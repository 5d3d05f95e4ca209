// simpler — SocketTransport: a lane whose child is an L3 Worker on another host, reached over TCP
// (Boost.Asio) through a RemoteServer there. Its leaf, RemoteL3, names the remote; the tasks run
// there, in the session the RemoteServer forked for this link.
//
// The endpoint pipelines: the lane sends up to RemoteWorkerSpec::window TASK frames before it
// waits for the oldest COMPLETION (see the Pipelines concept in transport.hpp). It enforces task
// deadlines itself (a task past its deadline ends the session), reports liveness (a dead link
// fails every task given to it), and ticks while idle to exchange heartbeats.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <string>
#include <type_traits>

#include "simpler/detail/registry.hpp"
#include "simpler/detail/remote_link.hpp"
#include "simpler/error.hpp"
#include "simpler/leaf/leaf.hpp"
#include "simpler/remote/remote.hpp"
#include "simpler/transport/transport.hpp"

namespace simpler {

/// The leaf of a remote lane: which remote, and the parent's registry to name callables with.
/// Its tasks run on the remote host, so run() is never called here.
class RemoteL3 {
 public:
  /// Runs orchestration functions (the remote serves them with RemoteSession::serve_orch).
  static constexpr std::uint8_t kRuns = kind_bit(CallableKind::Orch);

  RemoteL3(RemoteWorkerSpec spec, const detail::CallableRegistry& registry, WorkerId id)
      : spec_(std::move(spec)), registry_(&registry), id_(id) {}

  void run(const LeafRequest&) {
    throw Error("RemoteL3::run: a remote worker's tasks run on its host (through SocketTransport)");
  }
  [[nodiscard]] std::string callable_name(const LeafRequest& r) const {
    return registry_->name_of(r.digest, r.index_hint);
  }
  [[nodiscard]] const RemoteWorkerSpec& spec() const noexcept { return spec_; }
  [[nodiscard]] WorkerId id() const noexcept { return id_; }

 private:
  RemoteWorkerSpec spec_;
  const detail::CallableRegistry* registry_;
  WorkerId id_;
};

struct SocketTransport {
  /// Ends a task at its deadline itself (by ending the session).
  static constexpr bool kEnforcesDeadlines = true;

  template <class L>
  class Endpoint {
   public:
    explicit Endpoint(L& leaf) : link_(spec_of(leaf), id_of(leaf)) {}

    /// Connects, authenticates and waits for the remote's HELLO (RemoteWorkerSpec deadlines).
    void launch() { link_.connect(); }
    void shutdown() noexcept { link_.shutdown(); }

    /// One task, unpipelined (Executes): send it and wait for its completion.
    Outcome execute(const LeafRequest& r, Fault& fault) noexcept {
      if (!link_.send(r, fault)) return outcome_of_refusal(fault);
      return link_.receive(fault);
    }

    // Pipelines.
    [[nodiscard]] std::uint32_t window() const noexcept { return link_.window(); }
    bool send(const LeafRequest& r, Outcome& refused, Fault& fault) noexcept {
      if (link_.send(r, fault)) return true;
      refused = outcome_of_refusal(fault);
      return false;
    }
    Outcome receive(Fault& fault) noexcept { return link_.receive(fault); }

    // Ticks.
    [[nodiscard]] std::chrono::milliseconds tick_period() const noexcept {
      return link_.tick_period();
    }
    void tick() noexcept { link_.tick(); }

    // ReportsLiveness.
    [[nodiscard]] bool alive() const noexcept { return link_.alive(); }
    [[nodiscard]] std::string death() const { return link_.death(); }
    [[nodiscard]] bool death_unreported() const noexcept { return link_.death_unreported(); }

    // ServesSubset: what the remote serves (known after launch()).
    [[nodiscard]] bool serves(std::uint64_t digest) const noexcept {
      return link_.info().serves(digest);
    }
    [[nodiscard]] std::string served_names() const { return link_.info().served_names(); }
    [[nodiscard]] const std::string& where() const noexcept { return link_.where(); }

    // HoldsRemoteMemory (Worker::remote_alloc and the copies; between runs).
    RemoteBuffer remote_alloc(WorkerId self, std::uint64_t bytes) {
      return link_.alloc(self, bytes);
    }
    void remote_free(const RemoteBuffer& b) { link_.free(b); }
    void copy_to_remote(const RemoteBuffer& b, std::uint64_t offset, const void* src,
                        std::uint64_t n) {
      link_.copy_to(b, offset, src, n);
    }
    void copy_from_remote(const RemoteBuffer& b, std::uint64_t offset, void* dst, std::uint64_t n) {
      link_.copy_from(b, offset, dst, n);
    }
    [[nodiscard]] std::uint64_t session() const noexcept { return link_.session(); }
    [[nodiscard]] bool holds_remote(std::uint64_t address, std::uint64_t bytes) const {
      return link_.holds(address, bytes);
    }
    [[nodiscard]] bool owns(const RemoteBuffer& b) const { return link_.owns(b); }
    [[nodiscard]] detail::RemoteLink& link() noexcept { return link_; }

   private:
    static RemoteWorkerSpec spec_of(L& leaf) {
      if constexpr (requires { leaf.spec(); }) {
        return leaf.spec();
      } else {
        return {};
      }
    }
    static std::uint32_t id_of(L& leaf) {
      if constexpr (requires { leaf.id(); }) {
        return static_cast<std::uint32_t>(leaf.id());
      } else {
        return 0;
      }
    }
    static Outcome outcome_of_refusal(const Fault& f) noexcept {
      return f.kind == ErrorKind::Transport ? Outcome::EndpointFailure : Outcome::TaskFailure;
    }
    detail::RemoteLink link_;
  };
};

static_assert(Transport<SocketTransport>);
static_assert(Pipelines<SocketTransport::Endpoint<RemoteL3>>);
static_assert(Ticks<SocketTransport::Endpoint<RemoteL3>>);
static_assert(ReportsLiveness<SocketTransport::Endpoint<RemoteL3>>);
static_assert(ServesSubset<SocketTransport::Endpoint<RemoteL3>>);
static_assert(HoldsRemoteMemory<SocketTransport::Endpoint<RemoteL3>>);

}  // namespace simpler
