// Engine helpers that do not depend on the lane types: deadline messages, callable names for
// the scheduler's messages, and the keep-alive list for abandoned threads.
#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "simpler/detail/engine.hpp"

namespace simpler::detail {

std::string describe_deadline(std::uint32_t ms, bool run_deadline) {
  if (run_deadline) {
    return fmt::format(
        "the run's deadline of {} ms (the CallConfig::timeout given to run(), else "
        "WorkerOptions::run_timeout)",
        ms);
  }
  return fmt::format(
      "its deadline of {} ms (the submit's CallConfig::timeout, else "
      "WorkerOptions::task_timeout)",
      ms);
}

void keep_forever(std::shared_ptr<void> p) noexcept {
  // Deliberately never destroyed: what an abandoned thread may still touch must outlive every
  // destructor, including static ones at exit. Reachable from a static, so leak checkers do not
  // report it.
  // noexcept: running out of memory here ends the process, which must not destroy `p`.
  static std::mutex* mu = new std::mutex;
  static auto* kept = new std::vector<std::shared_ptr<void>>;
  std::lock_guard lk(*mu);
  kept->push_back(std::move(p));
}

std::string EngineCore::callable_name(const Slot& s) const noexcept {
  try {
    if (registry != nullptr) return registry->name_of(s.digest, s.callable_index);
    return fmt::format("<callable {:#018x}>", s.digest);
  } catch (...) {
    return {};
  }
}

}  // namespace simpler::detail
