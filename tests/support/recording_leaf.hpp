// Test double: a next-level leaf that records every request and can be told what to do per
// callable (block, throw, check arguments). Shared state lives in a Log owned by the test, so a
// leaf can be moved into a Worker and still be observed.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <simpler/simpler.hpp>

namespace simpler::testing {

struct Recorded {
  std::uint64_t digest;
  std::vector<ContinuousTensor> tensors;
  std::vector<std::uint64_t> scalars;
  CallConfig config;
  int leaf;  // which leaf ran it
};

class RecordLog {
 public:
  void add(Recorded r) {
    std::lock_guard lk(mu_);
    entries_.push_back(std::move(r));
  }
  std::vector<Recorded> entries() const {
    std::lock_guard lk(mu_);
    return entries_;
  }
  std::size_t size() const {
    std::lock_guard lk(mu_);
    return entries_.size();
  }
  /// What to do when a callable with this digest runs (after it was recorded).
  void on(std::uint64_t digest, std::function<void(const LeafRequest&, int leaf)> f) {
    std::lock_guard lk(mu_);
    actions_[digest] = std::move(f);
  }
  std::function<void(const LeafRequest&, int)> action(std::uint64_t digest) const {
    std::lock_guard lk(mu_);
    auto it = actions_.find(digest);
    return it == actions_.end() ? nullptr : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Recorded> entries_;
  std::map<std::uint64_t, std::function<void(const LeafRequest&, int)>> actions_;
};

class RecordingLeaf {
 public:
  RecordingLeaf(RecordLog& log, int id) : log_(&log), id_(id) {}
  void run(const LeafRequest& r) {
    Recorded rec{r.digest,
                 {r.args.tensors, r.args.tensors + r.args.tensor_count},
                 {r.args.scalars, r.args.scalars + r.args.scalar_count},
                 *r.config,
                 id_};
    log_->add(std::move(rec));
    if (auto f = log_->action(r.digest)) f(r, id_);
  }
  [[nodiscard]] std::string callable_name(const LeafRequest& r) const {
    return "recorded-" + std::to_string(r.digest % 1000);
  }

 private:
  RecordLog* log_;
  int id_;
};
static_assert(Leaf<RecordingLeaf>);

using RecordingLane = WorkerThread<ThreadTransport, RecordingLeaf>;
/// A Worker with in-process sub workers and in-process recording next-level children.
using TestWorker = BasicWorker<SubLane, RecordingLane>;

inline WorkerOptions thread_options(int subs) {
  WorkerOptions o;
  o.num_sub_workers = subs;
  o.child_mode = ChildMode::Thread;
  o.heap_ring_size = std::size_t{16} << 20;
  return o;
}

}  // namespace simpler::testing
