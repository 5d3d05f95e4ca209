// Engine threads ask for a short time slice (WorkerOptions::engine_slice, detail::request_slice):
// a lane woken on the busy CPU of the thread running the orchestration then gets it soon instead
// of after that thread's slice. Checked on the threads themselves through sched_getattr.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/gate.hpp"
#include "support/matchers.hpp"
#include "support/recording_leaf.hpp"

// The file's own namespace: the unity build compiles several test files as one unit.
namespace simpler_test_short_slice {

using namespace simpler;
using namespace simpler::testing;
using namespace std::chrono_literals;

namespace {

/// sched_getattr of thread `tid` of this process (0: the calling thread), or false.
bool attr_of(pid_t tid, detail::SchedAttr& out) {
  out = detail::SchedAttr{};
  return ::syscall(SYS_sched_getattr, tid, &out, sizeof out, 0) == 0;
}

std::uint64_t ns(std::chrono::microseconds us) {
  return static_cast<std::uint64_t>(std::chrono::nanoseconds(us).count());
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
    took = detail::request_slice(detail::kMinSlice) && detail::current_sched_attr(a) &&
           a.sched_runtime == ns(detail::kMinSlice);
  }).join();
  return took;
}

/// The lane and scheduler threads of a Worker with two thread sub workers and `slice`, checked
/// once they started (each asks for itself as it starts, maybe just after init() returned):
/// whether each runs with `want` ns of slice and the caller's policy and nice value.
void check_engine_threads(std::chrono::microseconds slice, std::uint64_t want) {
  // Threads of Workers before this one (a lane lost at a deadline lives on) are not counted.
  const auto old_lanes = threads_named("L3 sub");
  const auto old_sched = threads_named("L3 sched");
  const auto fresh = [](std::vector<pid_t> now, const std::vector<pid_t>& before) {
    std::erase_if(
        now, [&](pid_t t) { return std::find(before.begin(), before.end(), t) != before.end(); });
    return now;
  };
  detail::SchedAttr mine;
  REQUIRE(attr_of(0, mine));
  WorkerOptions o = thread_options(2);
  o.engine_slice = slice;
  Worker w(o);
  w.init();
  auto threads = fresh(threads_named("L3 sub"), old_lanes);
  REQUIRE(threads.size() == 2);
  const auto sched = fresh(threads_named("L3 sched"), old_sched);
  REQUIRE(sched.size() == 1);
  threads.push_back(sched[0]);
  for (pid_t t : threads) {
    INFO("thread " << t << ", slice " << slice.count() << " us");
    CHECK(eventually([&] {
      detail::SchedAttr a;
      return attr_of(t, a) && a.sched_runtime == want;
    }));
    detail::SchedAttr a;
    REQUIRE(attr_of(t, a));
    CHECK(a.sched_policy == mine.sched_policy);
    CHECK(a.sched_nice == mine.sched_nice);
  }
  // The caller's own thread is left alone.
  detail::SchedAttr after;
  REQUIRE(attr_of(0, after));
  CHECK(after.sched_runtime == mine.sched_runtime);
}

}  // namespace

TEST_CASE("request_slice sets the calling thread's slice and nothing else", "[engine][slice]") {
  std::thread([] {
    detail::SchedAttr before;
    REQUIRE(detail::current_sched_attr(before));
    // 0 asks for nothing.
    CHECK_FALSE(detail::request_slice(std::chrono::microseconds(0)));
    detail::SchedAttr same;
    REQUIRE(detail::current_sched_attr(same));
    CHECK(same.sched_runtime == before.sched_runtime);
    const bool took = detail::request_slice(std::chrono::microseconds(300));
    detail::SchedAttr after;
    REQUIRE(detail::current_sched_attr(after));
    CHECK(after.sched_policy == before.sched_policy);
    CHECK(after.sched_nice == before.sched_nice);
    CHECK(after.sched_runtime ==
          (took ? ns(std::chrono::microseconds(300)) : before.sched_runtime));
  }).join();
  // The calling thread is left alone.
  detail::SchedAttr mine;
  REQUIRE(attr_of(0, mine));
  CHECK(mine.sched_runtime != ns(std::chrono::microseconds(300)));
}

TEST_CASE("a Worker's lane threads and scheduler thread run with WorkerOptions::engine_slice",
          "[engine][slice]") {
  detail::SchedAttr mine;
  REQUIRE(attr_of(0, mine));
  // Where the kernel takes no request, every thread keeps what it inherited from the caller.
  const bool takes = kernel_takes_slices();
  INFO("the kernel takes slice requests: " << takes);
  SECTION("the default, 100 us") {
    check_engine_threads(WorkerOptions{}.engine_slice, takes ? ns(100us) : mine.sched_runtime);
  }
  SECTION("another slice") {
    check_engine_threads(2000us, takes ? ns(2000us) : mine.sched_runtime);
  }
  SECTION("0 keeps the kernel's default") {
    check_engine_threads(0us, mine.sched_runtime);
  }
}

TEST_CASE("an engine_slice the kernel would not grant is refused at construction",
          "[engine][slice][bad-input]") {
  for (const std::chrono::microseconds bad : {99us, 100'001us, -5us}) {
    WorkerOptions o = thread_options(1);
    o.engine_slice = bad;
    INFO(bad.count() << " us");
    CHECK_THROWS_MATCHES(
        Worker(o), UsageError,
        WhatContains("WorkerOptions::engine_slice is " + std::to_string(bad.count()) + " us"));
  }
  // The bounds themselves are fine.
  for (const std::chrono::microseconds good : {100us, 100'000us}) {
    WorkerOptions o = thread_options(1);
    o.engine_slice = good;
    CHECK_NOTHROW(Worker(o));
  }
}

}  // namespace simpler_test_short_slice
