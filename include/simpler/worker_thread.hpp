// simpler — WorkerThread<Transport, Leaf>: one lane, i.e. one child of a Worker.
//
// Owns the leaf, the transport endpoint that reaches it, and one thread. The Scheduler posts a
// task (slot id + group member) into the lane's LaneCore; the thread builds the leaf request
// from the slot, runs it through the endpoint, and pushes the outcome back. The thread spins
// briefly after a task, then sleeps on a futex: an idle lane uses no CPU.
#pragma once

#include <chrono>
#include <string>
#include <thread>

#include "simpler/detail/engine.hpp"
#include "simpler/leaf/leaf.hpp"
#include "simpler/orchestrator.hpp"
#include "simpler/transport/transport.hpp"

namespace simpler {

template <Transport T, Leaf L>
class WorkerThread : public detail::LaneCore {
 public:
  using transport_type = T;
  using leaf_type = L;

  WorkerThread(detail::EngineCore& core, detail::Role role, WorkerId id, std::string name, L leaf)
      : LaneCore(role, id, std::move(name)), core_(core), leaf_(std::move(leaf)), endpoint_(leaf_) {}
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;
  ~WorkerThread() { stop(); }

  /// Starts the child (before any engine thread exists: a process transport forks here).
  void launch() { endpoint_.launch(); }
  /// Starts the lane thread.
  void start() { thread_ = std::thread([this] { loop(); }); }
  /// Stops the thread (after its current task) and the child.
  void stop() noexcept {
    if (thread_.joinable()) {
      stopping.store(true, std::memory_order_seq_cst);
      wake.notify_all();
      thread_.join();
    }
    if (!shut_) {
      shut_ = true;
      endpoint_.shutdown();
    }
  }

  [[nodiscard]] L& leaf() noexcept { return leaf_; }

 private:
  void loop() noexcept {
    std::uint32_t seen = 0;
    for (;;) {
      const bool got = wake.await(
          [&] {
            return posted.load(std::memory_order_seq_cst) != seen ||
                   stopping.load(std::memory_order_seq_cst);
          },
          core_.timing.spin, std::chrono::steady_clock::now() + std::chrono::seconds(1));
      if (!got) continue;
      if (posted.load(std::memory_order_seq_cst) == seen) return;  // stopping, nothing posted
      ++seen;
      run_posted();
      core_.done.push(this);
      core_.notify_scheduler();
    }
  }

  void run_posted() noexcept {
    const detail::Slot& s = core_.pool.at(task_slot);
    const detail::MemberArgs& a = s.members[task_member];
    const detail::MemberArgs& b = s.members[task_member + 1];
    LeafRequest r;
    r.digest = s.digest;
    r.index_hint = s.callable_index;
    r.args.tensor_count = static_cast<std::int32_t>(b.tensor_begin - a.tensor_begin);
    r.args.scalar_count = static_cast<std::int32_t>(b.scalar_begin - a.scalar_begin);
    r.args.tensors = s.tensors.data() + a.tensor_begin;
    r.args.scalars = s.scalars.data() + a.scalar_begin;
    r.config = s.has_config ? s.config.get() : &default_call_config();
    outcome = endpoint_.execute(r, message);
    if (outcome != Outcome::Success) {
      try {
        callable = leaf_.callable_name(r);
      } catch (...) {
        callable.clear();
      }
    }
  }

  detail::EngineCore& core_;
  L leaf_;
  typename T::template Endpoint<L> endpoint_;
  std::thread thread_;
  bool shut_ = false;
};

}  // namespace simpler
