// simpler — MpiTransport: a lane whose child is the L3 Worker of another rank of an MPI job
// (`mpirun -np N ./app`: rank 0 is the L4, ranks 1..N-1 its L3s; see simpler/mpi/mpi.hpp).
//
// This header does not include <mpi.h>: the lane reaches its rank through detail::RankLink, which
// simpler/mpi/mpi.hpp implements over the MPI C API. So the default Worker carries MPI lanes in
// every program, and only a program that adds them (Worker::add_mpi_workers) links MPI.
//
// The endpoint pipelines like SocketTransport's (several TASKs in flight), serves only what its
// rank registered, and holds remote memory (RemoteBuffer tensors only). MPI is fail-stop: a
// deadline that passes, a broken transport or a lost rank ends the whole job (MPI_Abort, after a
// message naming the rank, the callable and the reason), so the endpoint enforces deadlines itself
// and never reports a dead link to the engine: a job that goes on has every rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "simpler/detail/registry.hpp"
#include "simpler/detail/remote_info.hpp"
#include "simpler/error.hpp"
#include "simpler/leaf/leaf.hpp"
#include "simpler/remote/remote.hpp"
#include "simpler/transport/transport.hpp"

namespace simpler {

namespace detail {

/// Rank 0's end of one serving rank. Implemented in simpler/mpi/mpi.hpp.
class RankLink {
 public:
  RankLink() = default;
  RankLink(const RankLink&) = delete;
  RankLink& operator=(const RankLink&) = delete;
  virtual ~RankLink() = default;

  /// Attaches to the rank (a fresh session: the rank's HELLO says what it serves), starting MPI
  /// first if it is not started yet. `worker` is the parent's WorkerId of the rank.
  virtual void attach(std::uint32_t worker) = 0;
  /// Detaches (when attached: the rank frees this session's buffers and waits for the next) and
  /// gives the rank up: another Worker may claim it. Never throws.
  virtual void detach() noexcept = 0;
  /// Whether detach() ran: the Worker holding this link is closed.
  [[nodiscard]] virtual bool released() const noexcept = 0;

  [[nodiscard]] virtual int rank() const noexcept = 0;
  [[nodiscard]] virtual std::uint32_t window() const noexcept = 0;
  /// Sends a TASK (false: not sent; `fault` says why, a usage error).
  virtual bool send(const LeafRequest& r, Fault& fault) noexcept = 0;
  /// Waits for the oldest TASK's COMPLETION, up to its deadline (past it the job is aborted).
  virtual Outcome receive(Fault& fault) noexcept = 0;

  [[nodiscard]] virtual const RemoteInfo& info() const noexcept = 0;
  [[nodiscard]] virtual const std::string& where() const noexcept = 0;
  [[nodiscard]] virtual std::uint64_t session() const noexcept = 0;

  virtual RemoteBuffer alloc(WorkerId self, std::uint64_t bytes) = 0;
  virtual void free(const RemoteBuffer& b) = 0;
  virtual void copy_to(const RemoteBuffer& b, std::uint64_t offset, const void* src,
                       std::uint64_t n) = 0;
  virtual void copy_from(const RemoteBuffer& b, std::uint64_t offset, void* dst,
                         std::uint64_t n) = 0;
  [[nodiscard]] virtual bool holds(std::uint64_t address, std::uint64_t bytes) const = 0;
  [[nodiscard]] virtual bool owns(const RemoteBuffer& b) const = 0;
};

}  // namespace detail

/// The leaf of an MPI lane: which rank, and the parent's registry to name callables with. Its
/// tasks run on that rank, so run() is never called here.
class MpiL3 {
 public:
  static constexpr std::uint8_t kRuns = kind_bit(CallableKind::Orch);

  MpiL3(std::shared_ptr<detail::RankLink> link, const detail::CallableRegistry& registry,
        WorkerId id)
      : link_(std::move(link)), registry_(&registry), id_(id) {}

  void run(const LeafRequest&) {
    throw Error("MpiL3::run: an MPI rank's tasks run on that rank (through MpiTransport)");
  }
  [[nodiscard]] std::string callable_name(const LeafRequest& r) const {
    return registry_->name_of(r.digest, r.index_hint);
  }
  [[nodiscard]] const std::shared_ptr<detail::RankLink>& link() const noexcept { return link_; }
  [[nodiscard]] WorkerId id() const noexcept { return id_; }

 private:
  std::shared_ptr<detail::RankLink> link_;
  const detail::CallableRegistry* registry_;
  WorkerId id_;
};

struct MpiTransport {
  /// Ends a task at its deadline itself (by aborting the job: MPI is fail-stop).
  static constexpr bool kEnforcesDeadlines = true;

  template <class L>
  class Endpoint {
   public:
    explicit Endpoint(L& leaf) : link_(link_of(leaf)), id_(id_of(leaf)) {}

    void launch() {
      if (!link_) throw UsageError("MpiTransport: this lane has no MPI rank (add_mpi_workers)");
      link_->attach(static_cast<std::uint32_t>(id_));
      attached_ = true;
    }
    void shutdown() noexcept {
      if (link_) link_->detach();
      attached_ = false;
    }

    Outcome execute(const LeafRequest& r, Fault& fault) noexcept {
      if (!link_->send(r, fault)) return Outcome::TaskFailure;
      return link_->receive(fault);
    }

    // Pipelines.
    [[nodiscard]] std::uint32_t window() const noexcept { return link_->window(); }
    bool send(const LeafRequest& r, Outcome& refused, Fault& fault) noexcept {
      if (link_->send(r, fault)) return true;
      refused = Outcome::TaskFailure;
      return false;
    }
    Outcome receive(Fault& fault) noexcept { return link_->receive(fault); }

    // ServesSubset.
    [[nodiscard]] bool serves(std::uint64_t digest) const noexcept {
      return link_->info().serves(digest);
    }
    [[nodiscard]] std::string served_names() const { return link_->info().served_names(); }
    [[nodiscard]] const std::string& where() const noexcept { return link_->where(); }

    // HoldsRemoteMemory.
    RemoteBuffer remote_alloc(WorkerId self, std::uint64_t bytes) {
      return link_->alloc(self, bytes);
    }
    void remote_free(const RemoteBuffer& b) { link_->free(b); }
    void copy_to_remote(const RemoteBuffer& b, std::uint64_t offset, const void* src,
                        std::uint64_t n) {
      link_->copy_to(b, offset, src, n);
    }
    void copy_from_remote(const RemoteBuffer& b, std::uint64_t offset, void* dst, std::uint64_t n) {
      link_->copy_from(b, offset, dst, n);
    }
    [[nodiscard]] std::uint64_t session() const noexcept { return link_->session(); }
    [[nodiscard]] bool holds_remote(std::uint64_t address, std::uint64_t bytes) const {
      return link_->holds(address, bytes);
    }
    [[nodiscard]] bool owns(const RemoteBuffer& b) const { return link_->owns(b); }

   private:
    static std::shared_ptr<detail::RankLink> link_of(L& leaf) {
      if constexpr (requires { leaf.link(); }) {
        return leaf.link();
      } else {
        return {};
      }
    }
    static WorkerId id_of(L& leaf) {
      if constexpr (requires { leaf.id(); }) {
        return leaf.id();
      } else {
        return 0;
      }
    }
    std::shared_ptr<detail::RankLink> link_;
    WorkerId id_;
    bool attached_ = false;
  };
};

static_assert(Transport<MpiTransport>);
static_assert(Pipelines<MpiTransport::Endpoint<MpiL3>>);
static_assert(ServesSubset<MpiTransport::Endpoint<MpiL3>>);
static_assert(HoldsRemoteMemory<MpiTransport::Endpoint<MpiL3>>);

}  // namespace simpler
