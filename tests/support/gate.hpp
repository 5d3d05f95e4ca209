// Test double: a one-shot gate a task can block on until the test opens it. Every wait has a
// deadline, so a missing dependency shows up as a clear failure instead of a hung test.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace simpler::testing {

class Gate {
 public:
  void open() {
    {
      std::lock_guard lk(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  /// Blocks until open(); throws std::runtime_error after `limit`.
  void wait(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, limit, [this] { return open_; })) {
      throw std::runtime_error("Gate::wait: the gate was never opened (missing dependency?)");
    }
  }
  /// Closes the gate again (nobody may be waiting).
  void reset() {
    std::lock_guard lk(mu_);
    open_ = false;
  }
  [[nodiscard]] bool is_open() {
    std::lock_guard lk(mu_);
    return open_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

/// A barrier for `n` parties with a deadline: proves that n tasks run at the same time.
class Rendezvous {
 public:
  explicit Rendezvous(int n) : n_(n) {}
  void arrive_and_wait(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::unique_lock lk(mu_);
    if (++arrived_ == n_) {
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lk, limit, [this] { return arrived_ >= n_; })) {
      throw std::runtime_error("Rendezvous: not every party arrived (tasks did not run together)");
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
  int arrived_ = 0;
};

/// Polls `pred` until it holds or `limit` passes; returns pred(). For observing engine state
/// from the orchestration thread (never used to order work).
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return pred();
    std::this_thread::yield();
  }
  return true;
}

}  // namespace simpler::testing
