// ForkShmTransport: forked children, the mailbox, and what happens when a child dies.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <new>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/matchers.hpp"
#include "support/recording_leaf.hpp"
#include "support/shared_arena.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_fork_shm {

using namespace simpler;
using namespace simpler::testing;
using Catch::Matchers::Contains;

namespace {

WorkerOptions process_options(int subs) {
  WorkerOptions o = thread_options(subs);
  o.child_mode = ChildMode::Process;
  return o;
}

/// A sub leaf over a private registry, for driving one endpoint directly.
struct EndpointFixture {
  detail::CallableRegistry registry{detail::next_worker_token()};
  CallableHandle echo;
  SubWorker leaf{registry};
  EndpointFixture() {
    echo = registry.add(CallableKind::Sub, "echo",
                        [](TaskArgsView v) {
                          if (v.scalar_count > 0 && v.scalar(0) == 13)
                            throw std::runtime_error("unlucky");
                        },
                        {});
  }
};

}  // namespace

TEST_CASE("a forked sub worker runs tasks and reports their failures", "[fork-shm]") {
  EndpointFixture f;
  ForkShmTransport::Endpoint<SubWorker> ep(f.leaf);
  ep.launch();
  REQUIRE(ep.alive());
  REQUIRE(ep.pid() != ::getpid());
  // This kernel lets the child's sleep fence for the sender, so every task here goes out with a
  // light send (a forked child's fence test is in test_containers.cpp).
  CHECK(ep.light_sends());
  TaskArgs a;
  a.add_scalar(1);
  LeafRequest r{f.echo.digest, f.echo.index, a.view(), &default_call_config()};
  Fault err;
  CHECK(ep.execute(r, err) == Outcome::Success);
  TaskArgs bad;
  bad.add_scalar(13);
  r.args = bad.view();
  CHECK(ep.execute(r, err) == Outcome::TaskFailure);
  CHECK(err.message == "unlucky");
  // An unknown digest is a task failure with a clear message, not a crash.
  r.digest = 0x1234;
  r.index_hint = 77;
  CHECK(ep.execute(r, err) == Outcome::TaskFailure);
  CHECK_THAT(err.message, Contains("no sub callable with digest 0x0000000000001234"));
  // And the child is still there to run the next task.
  r.digest = f.echo.digest;
  r.args = a.view();
  CHECK(ep.execute(r, err) == Outcome::Success);
  ep.shutdown();
  CHECK_FALSE(ep.alive());
  CHECK(ep.death().empty());  // it exited cleanly when asked
}

TEST_CASE("an endpoint enforces a task's deadline and leaves a late task unsent",
          "[fork-shm][deadline]") {
  EndpointFixture f;
  const auto hang = f.registry.add(CallableKind::Sub, "hangs", [](TaskArgsView) { ::pause(); }, {});
  ForkShmTransport::Endpoint<SubWorker> ep(f.leaf);
  ep.launch();
  Fault err;
  // A deadline that passed before the task was sent: not sent, and the child stays usable.
  LeafRequest late{f.echo.digest, f.echo.index, TaskArgsView{}, &default_call_config()};
  late.deadline = std::chrono::steady_clock::now() - std::chrono::milliseconds(1);
  late.deadline_ms = 5;
  CHECK(ep.execute(late, err) == Outcome::EndpointFailure);
  CHECK_THAT(err.message, Contains("its deadline of 5 ms") && Contains("not sent"));
  CHECK(ep.alive());
  // A task that overruns: the child is killed and the endpoint is dead.
  LeafRequest slow{hang.digest, hang.index, TaskArgsView{}, &default_call_config()};
  slow.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  slow.deadline_ms = 50;
  const pid_t pid = ep.pid();
  CHECK(ep.execute(slow, err) == Outcome::EndpointFailure);
  CHECK_THAT(err.message, Contains("did not finish within its deadline of 50 ms") &&
                              Contains(std::to_string(pid)) && Contains("killed"));
  CHECK_FALSE(ep.alive());
  CHECK_THAT(ep.death(), Contains("deadline"));
  CHECK(::waitpid(pid, nullptr, WNOHANG) == -1);  // reaped
}

TEST_CASE("close kills and reports a child stopped while idle", "[fork-shm][lifecycle]") {
  Worker w(process_options(1));
  w.register_sub("noop", [](TaskArgsView) {});
  w.init();
  pid_t pid = -1;
  w.scheduler().for_each_lane([&](auto& lane) {
    if constexpr (requires { lane.endpoint().pid(); }) pid = lane.endpoint().pid();
  });
  REQUIRE(pid > 0);
  REQUIRE(::kill(pid, SIGSTOP) == 0);
  // A stopped child cannot act on the Shutdown request: it is killed instead of waited for.
  CHECK_THROWS_WITH(w.close(), Contains("sub worker 0") && Contains("stopped"));
  CHECK(::waitpid(pid, nullptr, WNOHANG) == -1);  // reaped
}

TEST_CASE("an args blob larger than the mailbox fails that task only", "[fork-shm][bad-input]") {
  EndpointFixture f;
  ForkShmTransport::Endpoint<SubWorker> ep(f.leaf);
  ep.launch();
  std::vector<std::int64_t> x(1);
  TaskArgs big;
  for (int i = 0; i < 2000; ++i) big.add_tensor(make_tensor(x.data(), {1}, DataType::Int64));
  LeafRequest r{f.echo.digest, f.echo.index, big.view(), &default_call_config()};
  Fault err;
  CHECK(ep.execute(r, err) == Outcome::TaskFailure);
  CHECK_THAT(err.message, Contains("exceeds the mailbox capacity"));
  TaskArgs small;
  r.args = small.view();
  CHECK(ep.execute(r, err) == Outcome::Success);  // the lane stays usable
}

TEST_CASE("a sub worker killed mid-task fails its task and leaves the Worker working",
          "[fork-shm][failure]") {
  SharedArena arena;
  auto& ran = arena.one<std::atomic<int>>(0);
  auto& after_ran = arena.one<std::atomic<int>>(0);
  auto x = arena.make<std::int64_t>(2, 0);
  Worker w(process_options(2));
  auto die = w.register_sub("dies", [](TaskArgsView) { ::kill(::getpid(), SIGKILL); });
  auto after = w.register_sub("after", [&after_ran](TaskArgsView) { ++after_ran; });
  auto count = w.register_sub("count", [&ran](TaskArgsView) { ++ran; });
  w.init();
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_sub(die, TaskArgs().add_tensor(make_tensor(&x[0], {1}, DataType::Int64),
                                              TensorArgType::OutputExisting));
      o.submit_sub(after, TaskArgs().add_tensor(make_tensor(&x[0], {1}, DataType::Int64)));
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    INFO(e.what());
    CHECK(e.outcome() == Outcome::EndpointFailure);
    CHECK_THAT(std::string(e.what()), Contains("killed by signal 9"));
    CHECK_THAT(std::string(e.what()), Contains("sub worker"));
  }
  CHECK(after_ran == 0);
  // The surviving sub worker takes every shared task from now on.
  for (int rep = 0; rep < 3; ++rep) {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (int i = 0; i < 20; ++i) o.submit_sub(count);
    });
  }
  CHECK(ran == 60);
  CHECK_NOTHROW(w.close());
}

TEST_CASE("registering after init with forked children is refused", "[fork-shm][bad-input]") {
  Worker w(process_options(1));
  w.register_sub("early", [](TaskArgsView) {});
  w.init();
  CHECK_THROWS_WITH(w.register_sub("late", [](TaskArgsView) {}),
                    Contains("register every callable before init()"));
}

TEST_CASE("close reaps every forked child", "[fork-shm][lifecycle]") {
  std::vector<pid_t> pids;
  {
    Worker w(process_options(3));
    w.register_sub("noop", [](TaskArgsView) {});
    w.init();
    w.scheduler().for_each_lane([&](auto& lane) {
      if constexpr (requires { lane.endpoint().pid(); }) pids.push_back(lane.endpoint().pid());
    });
    REQUIRE(pids.size() == 3);
    for (pid_t p : pids) CHECK(::kill(p, 0) == 0);
    w.close();
  }
  // Reaped: the pids no longer name our children.
  for (pid_t p : pids) CHECK(::waitpid(p, nullptr, WNOHANG) == -1);
}

TEST_CASE("malformed and truncated mailbox frames fail their task in the child",
          "[fork-shm][bad-input]") {
  // serve_frame is the child's side of a frame; run it in-process on hand-made frames.
  EndpointFixture f;
  auto* mem = static_cast<std::byte*>(::operator new (detail::kMailboxBytes, std::align_val_t{64}));
  auto* box = new (mem) detail::MailboxHeader();
  std::byte* blob = mem + detail::kMailboxBlobOffset;
  box->digest = f.echo.digest;
  box->index_hint = f.echo.index;
  auto message = [&] { return std::string(box->message); };

  TaskArgs ok;
  ok.add_scalar(1);
  box->blob_bytes = static_cast<std::uint32_t>(
      encode_args_blob(ok.view(), std::span<std::byte>(blob, detail::kMailboxBlobCapacity)));
  detail::serve_frame(*box, blob, f.leaf);
  CHECK(box->error == 0);

  box->blob_bytes -= 4;  // truncated: the scalar is cut
  detail::serve_frame(*box, blob, f.leaf);
  CHECK(box->error == 1);
  CHECK_THAT(message(), Contains("holds only"));
  Fault fault;
  CHECK(detail::read_frame_error(*box, fault));
  CHECK(fault.kind == ErrorKind::Transport);  // a malformed frame, not the leaf's failure

  box->blob_bytes = static_cast<std::uint32_t>(detail::kMailboxBlobCapacity + 1);  // past the box
  detail::serve_frame(*box, blob, f.leaf);
  CHECK(box->error == 1);
  CHECK_THAT(message(), Contains("capacity"));

  const std::int32_t negative = -5;  // a corrupt header
  std::memcpy(blob, &negative, 4);
  box->blob_bytes = 16;
  detail::serve_frame(*box, blob, f.leaf);
  CHECK(box->error == 1);
  CHECK_THAT(message(), Contains("negative count"));

  // The parent's side never trusts the child's answer: an error kind this build does not know
  // (a corrupt frame) is a TransportError saying so, and a message without its NUL is cut at the
  // end of its field.
  box->error = 1;
  box->error_kind = 200;
  box->error_code = 9;
  std::memset(box->message, 'x', sizeof(box->message));
  CHECK_FALSE(detail::read_frame_error(*box, fault));
  CHECK(fault.kind == ErrorKind::Transport);
  CHECK(fault.code == 0);
  CHECK_THAT(fault.message, Contains("error kind 200 is not one this build knows (code 9)"));
  CHECK(fault.message.size() < sizeof(box->message) + 100);
  // serve_frame clears what a previous answer left.
  box->blob_bytes = static_cast<std::uint32_t>(
      encode_args_blob(ok.view(), std::span<std::byte>(blob, detail::kMailboxBlobCapacity)));
  detail::serve_frame(*box, blob, f.leaf);
  CHECK(box->error == 0);
  CHECK(box->error_kind == 0);
  CHECK(box->error_code == 0);

  box->~MailboxHeader();
  ::operator delete (mem, std::align_val_t{64});
}

TEST_CASE("the control channel answers between tasks and rejects unknown commands",
          "[fork-shm][control]") {
  EndpointFixture f;
  ForkShmTransport::Endpoint<SubWorker> ep(f.leaf);
  ep.launch();
  CHECK(ep.control(static_cast<std::uint64_t>(detail::ControlCommand::Ping), 41) == 42);
  CHECK_THROWS_WITH(ep.control(99, 0), Contains("unknown control command 99"));
  // Still serving tasks and commands afterwards.
  TaskArgs a;
  LeafRequest r{f.echo.digest, f.echo.index, a.view(), &default_call_config()};
  Fault err;
  CHECK(ep.execute(r, err) == Outcome::Success);
  CHECK(ep.control(static_cast<std::uint64_t>(detail::ControlCommand::Ping), 1) == 2);
}

namespace {
/// A next-level leaf whose child exits with code 3 when told to shut down.
struct ExitsBadly {
  void stop() noexcept { ::_exit(3); }
  void run(const LeafRequest&) {}
  [[nodiscard]] std::string callable_name(const LeafRequest&) const { return "none"; }
};
}  // namespace

TEST_CASE("close reports a child that ended abnormally at shutdown", "[fork-shm][lifecycle]") {
  using W = BasicWorker<WorkerThread<ForkShmTransport, ExitsBadly>>;
  W w(process_options(0));
  w.add_next_level(ExitsBadly{});
  w.init();
  CHECK_THROWS_WITH(w.close(), Contains("next-level worker 0: its child exited with code 3"));
  CHECK_NOTHROW(w.close());  // reported once; the Worker is closed
}

TEST_CASE("work for a role whose every child died fails instead of waiting forever",
          "[fork-shm][failure]") {
  SharedArena arena;
  auto& ran = arena.one<std::atomic<int>>(0);
  Worker w(process_options(1));
  auto die = w.register_sub("dies", [](TaskArgsView) { ::kill(::getpid(), SIGKILL); });
  auto count = w.register_sub("count", [&ran](TaskArgsView) { ++ran; });
  w.init();
  CHECK_THROWS_AS(
      w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) { o.submit_sub(die); }),
      TaskError);
  // Shared work: no live sub worker can take it.
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) { o.submit_sub(count); });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK(e.outcome() == Outcome::EndpointFailure);
    CHECK_THAT(std::string(e.what()), Contains("no sub worker is left alive"));
    CHECK(e.callable() == "count");  // the callable, not its slot number
  }
  // Work named for the dead worker fails at once, naming how its child ended.
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_sub(count, TaskArgs(), 0);
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK(e.outcome() == Outcome::EndpointFailure);
    CHECK_THAT(std::string(e.what()), Contains("killed by signal 9"));
  }
  CHECK(ran == 0);
  CHECK_NOTHROW(w.close());
}

TEST_CASE("a forked child's failure reaches the parent as its kind, code and message",
          "[fork-shm][failure]") {
  EndpointFixture f;
  const auto raise = f.registry.add(CallableKind::Sub, "raises",
                                    [](TaskArgsView v) {
                                      switch (v.scalar(0)) {
                                        case 1:
                                          throw DeviceError("the device said no", 507018);
                                        case 2:
                                          throw SystemError("open of /nowhere", ENOENT);
                                        case 3:
                                          throw UsageError("wrong use");
                                        default:
                                          throw 7;  // not a std::exception
                                      }
                                    },
                                    {});
  ForkShmTransport::Endpoint<SubWorker> ep(f.leaf);
  ep.launch();
  const auto run = [&](std::uint64_t which, Fault& fault) {
    TaskArgs a;
    a.add_scalar(which);
    LeafRequest r{raise.digest, raise.index, a.view(), &default_call_config()};
    return ep.execute(r, fault);
  };
  Fault fault;
  CHECK(run(1, fault) == Outcome::TaskFailure);
  CHECK(fault.kind == ErrorKind::Device);
  CHECK(fault.code == 507018);
  CHECK(fault.message == "the device said no");
  CHECK(run(2, fault) == Outcome::TaskFailure);
  CHECK(fault.kind == ErrorKind::System);
  CHECK(fault.code == ENOENT);
  CHECK_THAT(fault.message, Contains("open of /nowhere"));
  CHECK(run(3, fault) == Outcome::TaskFailure);
  CHECK(fault.kind == ErrorKind::Usage);
  CHECK(fault.code == 0);
  CHECK(run(4, fault) == Outcome::TaskFailure);
  CHECK(fault.kind == ErrorKind::Other);
  CHECK(fault.message == "a non-std::exception was thrown");
  // A success after a failure carries no stale fault fields.
  TaskArgs a;
  LeafRequest ok{f.echo.digest, f.echo.index, a.view(), &default_call_config()};
  CHECK(ep.execute(ok, fault) == Outcome::Success);
}

namespace {
/// A next-level leaf with a control hook: command 10 answers arg plus the sum of the payload's
/// bytes, command 11 fails as a device would, anything else is not its command.
struct ControlLeaf {
  void run(const LeafRequest&) {}
  [[nodiscard]] std::string callable_name(const LeafRequest&) const { return "none"; }
  std::optional<std::uint64_t> control(std::uint64_t command, std::uint64_t arg,
                                       std::span<const std::byte> payload) {
    if (command == 10) {
      std::uint64_t sum = arg;
      for (std::byte b : payload) sum += static_cast<std::uint64_t>(b);
      return sum;
    }
    if (command == 11) throw DeviceError("refused by the device", 42);
    return std::nullopt;
  }
};
}  // namespace

TEST_CASE("a control command carries a payload and its failure's kind and code",
          "[fork-shm][control]") {
  ControlLeaf leaf;
  ForkShmTransport::Endpoint<ControlLeaf> ep(leaf);
  ep.launch();
  std::vector<std::byte> payload(detail::kMailboxBlobCapacity, std::byte{1});
  CHECK(ep.control(10, 5, payload) == 5 + detail::kMailboxBlobCapacity);
  std::uint64_t result = 0;
  Fault fault;
  CHECK(ep.control(11, 0, {}, result, fault) == Outcome::TaskFailure);
  CHECK(fault.kind == ErrorKind::Device);
  CHECK(fault.code == 42);
  CHECK(fault.message == "refused by the device");
  CHECK_THROWS_MATCHES(ep.control(11, 0), TransportError,
                       Catch::Matchers::Message("control command 11 failed in the child: "
                                                "refused by the device"));
  CHECK_THROWS_WITH(ep.control(12, 0), Contains("unknown control command 12"));
  // A payload larger than the mailbox is refused before anything is sent.
  payload.push_back(std::byte{1});
  CHECK_THROWS_MATCHES(ep.control(10, 0, payload), UsageError, WhatContains("nothing was sent"));
  CHECK(ep.control(10, 0, payload, result, fault) == Outcome::TaskFailure);
  CHECK(fault.kind == ErrorKind::Usage);
  CHECK(ep.control(static_cast<std::uint64_t>(detail::ControlCommand::Ping), 1) == 2);
  CHECK(ep.control(10, 1, std::span(payload).first(3)) == 4);
}

namespace {
/// Sets or unsets an environment variable for one test and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};
}  // namespace

TEST_CASE("a forked child runs kernel libraries on one thread unless the user said otherwise",
          "[fork-shm][lifecycle]") {
  ScopedEnv omp("OMP_NUM_THREADS", nullptr);
  ScopedEnv openblas("OPENBLAS_NUM_THREADS", "7");  // the user's choice survives
  ScopedEnv mkl("MKL_NUM_THREADS", nullptr);
  ScopedEnv blis("BLIS_NUM_THREADS", "");  // set, if empty: still the user's
  SharedArena arena;
  constexpr std::size_t kWidth = 16;
  auto seen = arena.make<char>(4 * kWidth, '\0');
  Worker w(process_options(1));
  const auto report = w.register_sub("report", [seen](TaskArgsView) {
    const char* names[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                           "BLIS_NUM_THREADS"};
    for (std::size_t i = 0; i < 4; ++i) {
      const char* v = std::getenv(names[i]);
      std::snprintf(seen.data() + i * kWidth, kWidth, "%s", v != nullptr ? v : "<unset>");
    }
  });
  w.init();
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) { o.submit_sub(report); });
  const auto value = [&](std::size_t i) { return std::string(seen.data() + i * kWidth); };
  CHECK(value(0) == "1");
  CHECK(value(1) == "7");
  CHECK(value(2) == "1");
  CHECK(value(3) == "");
  // Only the children's environment changed.
  CHECK(std::getenv("OMP_NUM_THREADS") == nullptr);
  CHECK(std::getenv("MKL_NUM_THREADS") == nullptr);
  w.close();
}

// A forked child cannot see its parent's engine threads, which compete with it for the same
// cores, so it counts itself crowded: its spins yield (detail::AwakeThreads).
TEST_CASE("a forked child's spins count the parent's threads as crowding it",
          "[fork-shm][lifecycle]") {
  using detail::AwakeThreads;
  const int before = AwakeThreads::count();
  SharedArena arena;
  auto seen = arena.make<int>(2, -1);
  Worker w(process_options(1));
  const auto report = w.register_sub("report", [seen](TaskArgsView) {
    seen[0] = AwakeThreads::crowded() ? 1 : 0;
    seen[1] = AwakeThreads::count();
  });
  w.init();
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) { o.submit_sub(report); });
  CHECK(seen[0] == 1);
  CHECK(seen[1] > AwakeThreads::kCrowd);
  // Only the child counts itself so: the parent's count comes back when its threads are gone.
  w.close();
  CHECK(AwakeThreads::count() == before);
}

// The parent skips a notify only while the child must still answer an earlier frame and then
// re-read `sent`. The lost wake this guards against: a send found the child already caught up
// (it answered that very frame between the parent's store of `sent` and its load of
// `answered`), and the next send, seeing no new answer, skipped the notify the now sleeping
// child needed: it slept out its 100 ms liveness timeout.
TEST_CASE("a send skips the child's wake-up only while the child is behind", "[fork-shm][wake]") {
  detail::ChildWake w;
  SECTION("a child that answered everything, even the frame just sent, is woken next time") {
    CHECK(w.needed(1, 0));        // first frame: the child is behind
    CHECK(w.needed(2, 2));        // it answered 0 and 1 already: caught up
    CHECK(w.needed(3, 2));        // the lost wake: no new answer, yet the child may sleep now
    CHECK_FALSE(w.needed(4, 2));  // that send found frame 2 unanswered: this one is seen
  }
  SECTION("frames sent while the child is behind with no answer since are not woken for") {
    CHECK(w.needed(1, 0));
    CHECK_FALSE(w.needed(2, 0));  // it has frame 0 to answer, then reads `sent` again
    CHECK_FALSE(w.needed(3, 0));
    CHECK(w.needed(4, 1));  // an answer came: where it is now is unknown, wake it
    CHECK_FALSE(w.needed(5, 1));
    CHECK(w.needed(6, 6));  // caught up
    CHECK(w.needed(7, 6));
  }
  SECTION("the counters wrap") {
    constexpr std::uint32_t kTop = 0xffffffffU;
    CHECK(w.needed(kTop, kTop - 1));
    CHECK_FALSE(w.needed(0, kTop - 1));
    CHECK(w.needed(1, 1));
    CHECK(w.needed(2, 1));
  }
}

namespace {
/// The shared ("rw-s") mappings of a process, one per line of /proc/<pid>/maps (not merged), as
/// "begin-end" strings with their path.
std::map<std::string, std::string> shared_mappings_of(const std::string& pid) {
  std::map<std::string, std::string> out;
  std::istringstream maps(detail::read_maps(pid.c_str()));
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode;
    std::getline(fields >> std::ws, path);
    if (perms.size() == 4 && perms[3] == 's') out[range] = path;
  }
  return out;
}
}  // namespace

TEST_CASE(
    "a Worker's mailboxes and heap rings are anonymous shared mappings its children see, "
    "and they are gone after close and destruction",
    "[fork-shm][lifecycle]") {
  const auto before = shared_mappings_of("self");
  std::map<std::string, std::string> heap_rings, mailboxes;
  {
    Worker w(process_options(2));
    w.register_sub("noop", [](TaskArgsView) {});
    for (const auto& [range, path] : shared_mappings_of("self")) {
      if (!before.contains(range)) heap_rings[range] = path;
    }
    CHECK(heap_rings.size() == detail::kHeapRingCount);
    w.init();
    for (const auto& [range, path] : shared_mappings_of("self")) {
      if (!before.contains(range) && !heap_rings.contains(range)) mailboxes[range] = path;
    }
    CHECK(mailboxes.size() == 2);  // one per forked sub worker
    // Anonymous: no name that could outlive the processes (nothing in /dev/shm).
    for (const auto& m : {heap_rings, mailboxes}) {
      for (const auto& [range, path] : m) CHECK(path == "/dev/zero (deleted)");
    }
    // Every child sees the heap rings and its own mailbox at the same addresses (a child forked
    // before the next lane mapped its mailbox does not see that one).
    std::vector<pid_t> pids;
    w.scheduler().for_each_lane([&](auto& lane) {
      if constexpr (requires { lane.endpoint().pid(); }) pids.push_back(lane.endpoint().pid());
    });
    REQUIRE(pids.size() == 2);
    for (pid_t pid : pids) {
      const auto child = shared_mappings_of(std::to_string(pid));
      for (const auto& [range, path] : heap_rings) CHECK(child.contains(range));
      std::size_t seen = 0;
      for (const auto& [range, path] : mailboxes) seen += child.contains(range) ? 1 : 0;
      CHECK(seen >= 1);
    }
    w.close();
    const auto closed = shared_mappings_of("self");
    for (const auto& [range, path] : mailboxes) CHECK_FALSE(closed.contains(range));
    for (const auto& [range, path] : heap_rings) CHECK(closed.contains(range));  // the Worker's
  }
  CHECK(shared_mappings_of("self") == before);
}

}  // namespace simpler_test_fork_shm
