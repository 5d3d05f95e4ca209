// Logging (SIMPLER_LOG levels, lifecycle lines with level and worker prefix) and
// BasicWorker::stats() (exact counts between runs, a consistent-enough snapshot during one).
#include <catch2/catch.hpp>

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <regex>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/child_modes.hpp"
#include "support/gate.hpp"
#include "support/recording_leaf.hpp"
#include "support/remote_server.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_log_stats {

using namespace simpler;
using namespace simpler::testing;

namespace {

/// Captures every log line of this process while alive, at `level`; restores stderr and the
/// previous level after.
class CapturedLog {
 public:
  explicit CapturedLog(LogLevel level) : before_(log_level()) {
    set_log_level(level);
    set_log_sink(&CapturedLog::sink, this);
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  ~CapturedLog() {
    set_log_sink(nullptr);
    set_log_level(before_);
  }
  [[nodiscard]] std::vector<std::string> lines() {
    std::lock_guard lk(mu_);
    return lines_;
  }
  /// The captured lines that contain `text`.
  [[nodiscard]] std::vector<std::string> with(const std::string& text) {
    std::vector<std::string> out;
    for (auto& l : lines()) {
      if (l.find(text) != std::string::npos) out.push_back(l);
    }
    return out;
  }
  [[nodiscard]] std::string all() {
    std::string out;
    for (auto& l : lines()) out += l;
    return out;
  }

 private:
  static void sink(LogLevel, std::string_view line, void* self) {
    auto* c = static_cast<CapturedLog*>(self);
    std::lock_guard lk(c->mu_);
    c->lines_.emplace_back(line);
  }
  LogLevel before_;
  std::mutex mu_;
  std::vector<std::string> lines_;
};

ContinuousTensor one(std::int64_t& x) {
  return make_tensor(&x, {1}, DataType::Int64);
}

std::string prefix(const char* level, int worker_level) {
  return fmt::format("simpler [{}] L{} pid {}: ", level, worker_level, ::getpid());
}

}  // namespace

TEST_CASE("SIMPLER_LOG names a level, anything else warns naming the value and the valid ones",
          "[log]") {
  std::string warning;
  CHECK(detail::level_from_env(nullptr, &warning) == LogLevel::Warn);
  CHECK(detail::level_from_env("", &warning) == LogLevel::Warn);
  CHECK(detail::level_from_env("error", &warning) == LogLevel::Error);
  CHECK(detail::level_from_env("warn", &warning) == LogLevel::Warn);
  CHECK(detail::level_from_env("Warning", &warning) == LogLevel::Warn);
  CHECK(detail::level_from_env("INFO", &warning) == LogLevel::Info);
  CHECK(detail::level_from_env("debug", &warning) == LogLevel::Debug);
  CHECK(warning.empty());
  CHECK(detail::level_from_env("verbose", &warning) == LogLevel::Warn);
  CHECK_THAT(warning, Catch::Contains("'verbose'") && Catch::Contains("error, warn, info, debug") &&
                          Catch::Contains("logging at warn"));
  CHECK_FALSE(parse_log_level("3").has_value());
  CHECK(std::string(to_string(LogLevel::Debug)) == "debug");
}

TEST_CASE("a line below the level is not written, one at or above it is, with its prefix",
          "[log]") {
  CapturedLog log(LogLevel::Warn);
  detail::log_worker(LogLevel::Info, 4, "quiet {}", 1);
  detail::log_worker(LogLevel::Warn, 4, "loud {}", 2);
  detail::log_as(LogLevel::Error, "remote server", "bad {}", 3);
  const auto lines = log.lines();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == prefix("warn", 4) + "loud 2\n");
  CHECK(lines[1] == fmt::format("simpler [error] remote server pid {}: bad 3\n", ::getpid()));
}

TEST_CASE("a Worker logs its registrations, forks, ready children, a child's death and close",
          "[log][process]") {
  CapturedLog log(LogLevel::Info);
  WorkerOptions o = thread_options(2);
  o.child_mode = ChildMode::Process;
  {
    Worker w(o);
    auto die = w.register_sub("dies", [](TaskArgsView) { ::kill(::getpid(), SIGKILL); });
    w.init();
    CHECK_THROWS_AS(
        w.run([&](Orchestrator& orch, TaskArgsView, const CallConfig&) { orch.submit_sub(die); }),
        TaskError);
    w.close();
  }
  INFO(log.all());
  const std::string info = prefix("info", 3);
  CHECK(log.with(info + "registered sub callable 'dies'").size() == 1);
  for (int i = 0; i < 2; ++i) {
    const auto forked = log.with(fmt::format("{}forked sub worker {} (pid ", info, i));
    REQUIRE(forked.size() == 1);
    const auto ready = log.with(fmt::format("{}sub worker {} is ready (pid ", info, i));
    CHECK(ready.size() == 1);
  }
  CHECK(log.with(info + "initialised: 2 sub worker(s), 0 next-level worker(s) (forked children)")
            .size() == 1);
  const auto died = log.with(prefix("warn", 3) + "the child of sub worker ");
  REQUIRE(died.size() == 1);
  CHECK_THAT(died[0], Catch::Contains(") died: killed by signal 9"));
  CHECK(log.with(info + "closed\n").size() == 1);
  // The death was logged once: the child that died is not reported again at close.
  CHECK(log.with("died").size() == 1);
}

TEST_CASE("every process of a forked Worker tree logs to stderr with its own level and pid",
          "[log][process][nested]") {
  // stderr goes to a file for the Worker's lifetime; the forked children inherit it and the level.
  const LogLevel before = log_level();
  set_log_level(LogLevel::Info);
  char path[] = "/tmp/simpler_test_log_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::unlink(path);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  {
    Worker w4(options_for<InProcesses>(0, 4));
    Worker l3(options_for<InProcesses>(1, 3));
    l3.register_sub("noop", [](TaskArgsView) {});
    w4.add_worker(std::move(l3));
    w4.init();
    w4.close();
  }
  ::dup2(saved, 2);
  ::close(saved);
  set_log_level(before);
  std::string text;
  char buf[4096];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  ::close(fd);
  INFO(text);
  std::smatch m;
  const std::string me = std::to_string(::getpid());
  REQUIRE(std::regex_search(text, m,
                            std::regex("simpler \\[info\\] L4 pid " + me +
                                       ": forked next-level worker 0 \\(L3\\) \\(pid (\\d+)\\)")));
  const std::string child = m[1];
  CHECK(child != me);
  // The L3 runs in its own process and says so.
  CHECK_THAT(text,
             Catch::Contains("simpler [info] L3 pid " + child + ": forked sub worker 0 (pid "));
  CHECK_THAT(text, Catch::Contains("simpler [info] L3 pid " + child +
                                   ": initialised: 1 sub worker(s), 0 next-level worker(s)"));
  CHECK_THAT(text, Catch::Contains("simpler [info] L3 pid " + child + ": closed\n"));
  CHECK_THAT(text, Catch::Contains("simpler [info] L4 pid " + me + ": closed\n"));
}

TEST_CASE("a remote worker's lane logs its attach and detach", "[log][remote]") {
  RemoteServerOptions so;
  so.worker = thread_options(0);
  so.buffer_pool_bytes = std::uint64_t{64} << 20;
  so.log = false;
  ServerProcess server(so, [](RemoteSession&) {});
  CapturedLog log(LogLevel::Info);
  {
    WorkerOptions o = thread_options(0);
    o.level = 4;
    Worker w(o);
    w.add_remote_worker(server.spec());
    w.init();
    w.close();
  }
  INFO(log.all());
  const std::string lane = fmt::format("remote worker 0 ({})", server.endpoint());
  CHECK(log.with(prefix("info", 4) + lane + " attached (" + server.endpoint() + ")\n").size() == 1);
  CHECK(log.with(prefix("info", 4) + lane + " detached\n").size() == 1);
}

TEST_CASE("per-run lines are debug lines: absent at info, present at debug", "[log]") {
  auto run_once = [](LogLevel level) {
    CapturedLog log(level);
    Worker w(thread_options(1));
    auto noop = w.register_sub("noop", [](TaskArgsView) {});
    w.init();
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) { o.submit_sub(noop); });
    w.close();
    return log.all();
  };
  const std::string at_info = run_once(LogLevel::Info);
  CHECK_THAT(at_info, Catch::Contains("initialised"));
  CHECK_THAT(at_info, !Catch::Contains("[debug]"));
  const std::string at_debug = run_once(LogLevel::Debug);
  CHECK_THAT(at_debug, Catch::Contains(prefix("debug", 3) + "run 1 begins"));
  CHECK_THAT(at_debug, Catch::Contains(prefix("debug", 3) + "run 1 ended\n"));
  CapturedLog quiet(LogLevel::Warn);
  Worker w(thread_options(1));
  w.register_sub("noop", [](TaskArgsView) {});
  w.init();
  w.close();
  CHECK(quiet.lines().empty());
}

TEST_CASE("a thread lane past its task deadline logs a warning naming it", "[log][deadline]") {
  CapturedLog log(LogLevel::Warn);
  WorkerOptions o = thread_options(1);
  o.task_timeout = std::chrono::milliseconds(50);
  // Static: the abandoned thread may still be inside wait() when this test returns.
  static Gate gate;
  Gate* release = &gate;
  {
    Worker w(o);
    auto stuck = w.register_sub("stuck", [release](TaskArgsView) { release->wait(); });
    w.init();
    CHECK_THROWS(w.run(
        [&](Orchestrator& orch, TaskArgsView, const CallConfig&) { orch.submit_sub(stuck); }));
    release->open();  // the abandoned thread may finish now
    w.close();
  }
  INFO(log.all());
  CHECK(log.with(prefix("warn", 3) + "sub worker 0: task 'stuck' passed its deadline").size() == 1);
}

TEST_CASE("stats count tasks, failures and skips exactly, per lane and in all", "[stats]") {
  Worker w(thread_options(2));
  Gate submitted;
  auto boom = w.register_sub("boom", [&](TaskArgsView) {
    submitted.wait();
    throw std::runtime_error("no");
  });
  auto after = w.register_sub("after", [](TaskArgsView) {});
  auto other = w.register_sub("other", [](TaskArgsView) {});
  w.init();
  WorkerStats s0 = w.stats();
  CHECK(s0.tasks_submitted == 0);
  REQUIRE(s0.lanes.size() == 2);
  CHECK(s0.lanes[0].name == "sub worker 0");
  CHECK(s0.lanes[0].sub);
  CHECK(s0.lanes[0].kinds == "sub");
  REQUIRE(s0.heap_rings.size() == 4);
  CHECK(s0.heap_rings[0].size == (std::size_t{16} << 20));

  std::int64_t a = 0, b = 0, c = 0, z = 0;
  CHECK_THROWS_AS(w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_sub(boom, TaskArgs().add_tensor(one(a), TensorArgType::OutputExisting));
    o.submit_sub(after,
                 TaskArgs().add_tensor(one(a)).add_tensor(one(b), TensorArgType::OutputExisting));
    o.submit_sub(after,
                 TaskArgs().add_tensor(one(b)).add_tensor(one(c), TensorArgType::OutputExisting));
    o.submit_sub(after, TaskArgs().add_tensor(one(a), TensorArgType::InOut));
    for (int i = 0; i < 10; ++i) {
      o.submit_sub(other, TaskArgs().add_tensor(one(z), TensorArgType::InOut));
    }
    submitted.open();
  }),
                  TaskError);
  WorkerStats s = w.stats();
  CHECK(s.runs_completed == 1);
  CHECK(s.runs_failed == 1);
  CHECK(s.tasks_submitted == 14);
  CHECK(s.tasks_completed == 10);
  CHECK(s.tasks_failed == 1);
  CHECK(s.tasks_skipped == 3);  // boom's consumers, never handed to a lane
  CHECK(s.tasks_in_flight == 0);
  CHECK(s.ready_queued == 0);
  CHECK(s.window_waits == 0);  // 14 tasks in a window of 65536
  std::uint64_t submitted_to_lanes = 0, completed = 0, failed = 0, skipped = 0, in_flight = 0;
  for (const LaneStats& l : s.lanes) {
    submitted_to_lanes += l.submitted;
    completed += l.completed;
    failed += l.failed;
    skipped += l.skipped;
    in_flight += l.in_flight;
    CHECK_FALSE(l.dead);
  }
  CHECK(submitted_to_lanes == 11);
  CHECK(completed == 10);
  CHECK(failed == 1);
  CHECK(skipped == 0);
  CHECK(in_flight == 0);

  // An orch.alloc buffer shows in the outermost scope's ring while the run holds it.
  std::size_t used_in_run = 0;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    const std::uint32_t shape[] = {1000};
    o.alloc(shape, DataType::Float32);
    used_in_run = w.stats().heap_rings[0].used;
    for (int i = 0; i < 5; ++i) {
      o.submit_sub(other, TaskArgs().add_tensor(one(z), TensorArgType::InOut));
    }
  });
  CHECK(used_in_run == 4096);  // 4000 bytes, 1024-aligned
  s = w.stats();
  CHECK(s.heap_rings[0].used == 0);
  CHECK(s.runs_completed == 2);
  CHECK(s.runs_failed == 1);
  CHECK(s.tasks_submitted == 19);
  CHECK(s.tasks_completed == 15);
  CHECK(s.tasks_in_flight == 0);
}

TEST_CASE("stats of a group count one task in all and one member on each lane", "[stats][group]") {
  Worker w(thread_options(2));
  auto noop = w.register_sub("noop", [](TaskArgsView) {});
  w.init();
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_sub_group(noop, std::vector<TaskArgs>(2));
  });
  const WorkerStats s = w.stats();
  CHECK(s.tasks_submitted == 1);
  CHECK(s.tasks_completed == 1);
  REQUIRE(s.lanes.size() == 2);
  CHECK(s.lanes[0].submitted == 1);
  CHECK(s.lanes[0].completed == 1);
  CHECK(s.lanes[1].submitted == 1);
  CHECK(s.lanes[1].completed == 1);
}

TEST_CASE("stats read from another thread during a run show progress and never exceed totals",
          "[stats][concurrency]") {
  constexpr int kTasks = 2000;
  Worker w(thread_options(2));
  Gate seen_progress;
  auto work = w.register_sub("work", [](TaskArgsView) {});
  // Holds the run open until the watcher has seen tasks complete during it.
  auto hold = w.register_sub("hold", [&](TaskArgsView) { seen_progress.wait(); });
  w.init();
  std::atomic<bool> done{false};
  std::atomic<bool> saw_mid_run{false};
  std::atomic<int> violations{0};
  std::thread watcher([&] {
    std::uint64_t last_completed = 0;
    for (;;) {
      const bool finished = done.load();
      const WorkerStats s = w.stats();
      const std::uint64_t ended = s.tasks_completed + s.tasks_failed + s.tasks_skipped;
      if (s.tasks_submitted > kTasks + 1 || ended > s.tasks_submitted ||
          s.tasks_completed < last_completed || s.tasks_failed != 0) {
        ++violations;
      }
      for (const LaneStats& l : s.lanes) {
        if (l.completed + l.failed + l.skipped > l.submitted || l.submitted > kTasks + 1)
          ++violations;
      }
      last_completed = s.tasks_completed;
      if (!finished && s.tasks_completed >= 10 && !saw_mid_run.load()) {
        saw_mid_run = true;
        seen_progress.open();
      }
      if (finished) return;
      std::this_thread::yield();
    }
  });
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_sub(hold);
    for (int i = 0; i < kTasks; ++i) o.submit_sub(work);
  });
  done = true;
  watcher.join();
  CHECK(saw_mid_run);
  CHECK(violations == 0);
  const WorkerStats s = w.stats();
  CHECK(s.tasks_submitted == kTasks + 1);
  CHECK(s.tasks_completed == kTasks + 1);
}

}  // namespace simpler_test_log_stats
