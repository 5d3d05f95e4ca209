// Test support: PumpedTransport, a transport that lives outside the library and that the test
// drives. A lane's execute() parks the request; it runs only when someone pumps it, on the
// pumping thread. It proves the lane set is open (nothing in the library names it) and makes
// dispatch observable: a test can submit, look, and then let tasks run one at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>

#include <simpler/simpler.hpp>

namespace simpler::testing {

/// Where parked requests wait for a pump.
class Pump {
 public:
  /// Longest a lane waits for a pump before it gives the task up as an EndpointFailure.
  static constexpr std::chrono::seconds kParkDeadline{30};

  /// Runs `job` on whichever thread pumps next; returns once it ran (or the deadline passed:
  /// then false, and the job will never run).
  bool park(std::function<void()> job) {
    auto entry = std::make_shared<Entry>();
    entry->job = std::move(job);
    std::unique_lock lk(mu_);
    queue_.push_back(entry);
    ++parked_total_;
    arrived_.notify_all();
    if (finished_.wait_for(lk, kParkDeadline, [&] { return entry->done; })) return true;
    // Not pumped in time: withdrawn if still queued; if a pump already took it, it is running
    // on the caller's data, so wait for it to end.
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (*it == entry) {
        queue_.erase(it);
        return false;
      }
    }
    finished_.wait(lk, [&] { return entry->done; });
    return true;
  }

  /// Runs one parked request on this thread; false when none arrived within `wait`.
  bool run_one(std::chrono::milliseconds wait) {
    std::shared_ptr<Entry> e;
    {
      std::unique_lock lk(mu_);
      if (!arrived_.wait_for(lk, wait, [&] { return !queue_.empty(); })) return false;
      e = queue_.front();
      queue_.pop_front();
    }
    e->job();
    std::lock_guard lk(mu_);
    e->done = true;
    finished_.notify_all();
    return true;
  }

  /// Requests parked and not yet pumped.
  [[nodiscard]] std::size_t waiting() const {
    std::lock_guard lk(mu_);
    return queue_.size();
  }
  /// Requests parked since the pump was made.
  [[nodiscard]] std::size_t parked_total() const {
    std::lock_guard lk(mu_);
    return parked_total_;
  }

 private:
  struct Entry {
    std::function<void()> job;
    bool done = false;
  };
  mutable std::mutex mu_;
  std::condition_variable arrived_;
  std::condition_variable finished_;
  std::deque<std::shared_ptr<Entry>> queue_;
  std::size_t parked_total_ = 0;
};

/// A Transport whose children run wherever the test pumps Pump `pump()`. `Tag` separates the
/// pumps of independent tests. It declares itself the default for ChildMode::Thread, so a lane
/// set built on it takes num_sub_workers and add_next_level like the library's transports.
template <int Tag>
struct PumpedTransport {
  static constexpr ChildMode kChildMode = ChildMode::Thread;

  static Pump& pump() {
    static Pump p;
    return p;
  }

  template <class L>
  class Endpoint {
   public:
    explicit Endpoint(L& leaf) noexcept : leaf_(&leaf) {}

    Outcome execute(const LeafRequest& r, Fault& fault) noexcept {
      Outcome outcome = Outcome::Success;
      try {
        const bool ran = pump().park([&] {
          try {
            leaf_->run(r);
          } catch (...) {
            fault_from_current_exception(fault);
            outcome = Outcome::TaskFailure;
          }
        });
        if (!ran) {
          fault.set(ErrorKind::Timeout, 0, "nobody pumped the task within 30 s");
          return Outcome::EndpointFailure;
        }
      } catch (...) {
        fault_from_current_exception(fault);
        return Outcome::EndpointFailure;
      }
      return outcome;
    }

   private:
    L* leaf_;
  };
};

/// Pumps Pump `p` on a background thread until destroyed (for suites that do not care when
/// tasks run, only that they do).
class Pumper {
 public:
  explicit Pumper(Pump& p)
      : thread_([&p](std::stop_token stop) {
          while (!stop.stop_requested()) p.run_one(std::chrono::milliseconds(20));
        }) {}

 private:
  std::jthread thread_;
};

}  // namespace simpler::testing
