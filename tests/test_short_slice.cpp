// Engine threads ask for a short time slice (detail::request_short_slice): a lane woken on the
// busy CPU of the thread running the orchestration then gets it soon instead of after that
// thread's slice. Checked on the threads themselves through sched_getattr.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/gate.hpp"
#include "support/recording_leaf.hpp"

// The file's own namespace: the unity build compiles several test files as one unit.
namespace simpler_test_short_slice {

using namespace simpler;
using namespace simpler::testing;

namespace {

constexpr std::uint64_t kSliceNs = 100'000;

/// sched_getattr of thread `tid` of this process, or false.
bool attr_of(pid_t tid, detail::SchedAttr& out) {
  out = detail::SchedAttr{};
  return ::syscall(SYS_sched_getattr, tid, &out, sizeof out, 0) == 0;
}

/// The ids of this process's threads whose name starts with `prefix`.
std::vector<pid_t> threads_named(const std::string& prefix) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name.rfind(prefix, 0) == 0) out.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  }
  ::closedir(d);
  return out;
}

/// Whether this kernel takes a slice request from a SCHED_OTHER thread (Linux 6.12+).
bool kernel_takes_slices() {
  bool took = false;
  std::thread([&] {
    detail::SchedAttr a;
    took = detail::request_short_slice() && detail::current_sched_attr(a) &&
           a.sched_runtime == kSliceNs;
  }).join();
  return took;
}

}  // namespace

TEST_CASE("request_short_slice sets the calling thread's slice and nothing else",
          "[engine][slice]") {
  std::thread([] {
    detail::SchedAttr before;
    REQUIRE(detail::current_sched_attr(before));
    const bool took = detail::request_short_slice();
    detail::SchedAttr after;
    REQUIRE(detail::current_sched_attr(after));
    CHECK(after.sched_policy == before.sched_policy);
    CHECK(after.sched_nice == before.sched_nice);
    if (took) CHECK(after.sched_runtime == kSliceNs);
  }).join();
  // The calling thread is left alone.
  detail::SchedAttr mine;
  REQUIRE(attr_of(0, mine));
  CHECK(mine.sched_runtime != kSliceNs);
}

TEST_CASE("a Worker's lane threads and scheduler thread run with the short slice",
          "[engine][slice]") {
  if (!kernel_takes_slices()) {
    WARN("this kernel keeps its default slice for SCHED_OTHER threads (before Linux 6.12)");
    return;
  }
  // Threads of Workers before this one (a lane lost at a deadline lives on) are not counted.
  const auto old_lanes = threads_named("L3 sub");
  const auto old_sched = threads_named("L3 sched");
  const auto fresh = [](std::vector<pid_t> now, const std::vector<pid_t>& before) {
    std::erase_if(
        now, [&](pid_t t) { return std::find(before.begin(), before.end(), t) != before.end(); });
    return now;
  };
  WorkerOptions o = thread_options(2);
  Worker w(o);
  w.init();
  const auto lanes = fresh(threads_named("L3 sub"), old_lanes);
  const auto sched = fresh(threads_named("L3 sched"), old_sched);
  REQUIRE(lanes.size() == 2);
  REQUIRE(sched.size() == 1);
  // Each thread asks for itself as it starts, which may be just after init() returned.
  const auto sliced = [](pid_t t) {
    detail::SchedAttr a;
    return attr_of(t, a) && a.sched_runtime == kSliceNs;
  };
  for (pid_t t : lanes) CHECK(eventually([&] { return sliced(t); }));
  CHECK(eventually([&] { return sliced(sched[0]); }));
}

}  // namespace simpler_test_short_slice
