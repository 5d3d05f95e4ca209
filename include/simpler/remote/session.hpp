// simpler — RemoteSession: what the setup function of a remote L3 sees (a RemoteServer session
// process, or an MPI rank serving its parent): the inner L3 Worker, not yet initialised, and the
// orchestration functions the parent's TASK frames may run on it.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <utility>

#include "simpler/detail/served_task.hpp"
#include "simpler/error.hpp"
#include "simpler/worker.hpp"

namespace simpler {

class RemoteServer;
namespace mpi {
class Session;
}

/// What `setup` sees: the inner L3 Worker, not yet initialised, and the orchestration functions
/// the parent's TASK frames may run on it.
class RemoteSession {
 public:
  using OrchFunction = Worker::OrchFunction;

  /// The inner L3 Worker: register its subs and chips, add its children (before init()).
  [[nodiscard]] Worker& worker() noexcept { return *worker_; }
  /// Serves `fn` to the parent under `name`: the parent registers an orchestration function under
  /// the same name (register_orch) and submits it to this remote worker.
  CallableHandle serve_orch(std::string name, OrchFunction fn) {
    if (name.empty()) throw UsageError("RemoteSession::serve_orch: the name is empty");
    if (!fn) throw UsageError(fmt::format("RemoteSession::serve_orch('{}'): empty function", name));
    const std::uint64_t digest = callable_digest(CallableKind::Orch, name);
    if (served_.count(digest) != 0) {
      throw UsageError(fmt::format("RemoteSession::serve_orch: '{}' is served twice", name));
    }
    served_.emplace(digest, detail::ServedOrch{name, std::move(fn)});
    CallableHandle h;
    h.digest = digest;
    return h;
  }
  [[nodiscard]] std::uint64_t session_id() const noexcept { return session_; }
  /// The parent's WorkerId of this remote.
  [[nodiscard]] std::uint32_t worker_id() const noexcept { return worker_id_; }

 private:
  friend class RemoteServer;
  friend class mpi::Session;
  RemoteSession(Worker& w, std::uint64_t session, std::uint32_t worker)
      : worker_(&w), session_(session), worker_id_(worker) {}
  Worker* worker_;
  std::uint64_t session_;
  std::uint32_t worker_id_;
  detail::ServedOrchs served_;
};

}  // namespace simpler
