// Write-after-read and write-after-write ordering (Hazards::All, the default): a writer waits for
// the earlier readers and the earlier writer of the bytes it overwrites, so tags alone are
// race-free; Hazards::ReadAfterWrite keeps the seeds' semantics, where it does not.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/gate.hpp"
#include "support/matchers.hpp"
#include "support/recording_leaf.hpp"
#include "support/shared_arena.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_engine_hazards {

using namespace simpler;
using namespace simpler::testing;

namespace {

using Clock = std::chrono::steady_clock;

/// A reader that holds its bytes until the writer has finished or 300 ms passed, and a writer
/// that says when it finished. With write-after-read ordering the writer cannot start while the
/// reader runs, so the reader always waits the whole 300 ms and copies the old bytes; without
/// it the writer runs beside the reader and the reader copies the new bytes.
struct ReadWriteRace {
  explicit ReadWriteRace(Hazards h) : w(options(h)) { w.init(); }
  static WorkerOptions options(Hazards h) {
    WorkerOptions o = thread_options(2);
    o.hazards = h;
    return o;
  }

  Worker w;
  std::atomic<bool> written{false};
  std::atomic<std::int64_t> writer_start_ns{0};
  std::atomic<std::int64_t> reader_end_ns{0};
  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
  }
  CallableHandle reader = w.register_sub("reader", [this](TaskArgsView v) {
    const auto until = Clock::now() + std::chrono::milliseconds(300);
    while (!written.load() && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    *v.tensor(1).as<std::int64_t>() = *v.tensor(0).as<const std::int64_t>();
    reader_end_ns.store(now_ns());
  });
  // Writes scalar 0 into tensor 0.
  CallableHandle writer = w.register_sub("writer", [this](TaskArgsView v) {
    writer_start_ns.store(now_ns());
    *v.tensor(0).as<std::int64_t>() = static_cast<std::int64_t>(v.scalar(0));
    written.store(true);
  });

  /// One run: the reader copies x into `copy`, then a writer tagged `tag` stores 2 into x.
  void reader_then_writer(std::int64_t& x, std::int64_t& copy, TensorArgType tag) {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_sub(reader, TaskArgs()
                               .add_tensor(make_tensor(&x, {1}, DataType::Int64))
                               .add_tensor(make_tensor(&copy, {1}, DataType::Int64),
                                           TensorArgType::OutputExisting));
      o.submit_sub(writer,
                   TaskArgs().add_tensor(make_tensor(&x, {1}, DataType::Int64), tag).add_scalar(2));
    });
  }
};

}  // namespace

TEST_CASE("a writer waits for the earlier reader of the bytes it overwrites", "[engine][hazards]") {
  const auto tag =
      GENERATE(TensorArgType::OutputExisting, TensorArgType::InOut, TensorArgType::Output);
  INFO("writer tag " << to_string(tag));
  ReadWriteRace r(Hazards::All);
  std::int64_t x = 1, copy = 0;
  r.reader_then_writer(x, copy, tag);
  CHECK(copy == 1);  // the reader saw the bytes from before the writer
  CHECK(x == 2);
  CHECK(r.writer_start_ns.load() >= r.reader_end_ns.load());
}

TEST_CASE("with Hazards::ReadAfterWrite a writer does not wait for earlier readers",
          "[engine][hazards]") {
  ReadWriteRace r(Hazards::ReadAfterWrite);
  std::int64_t x = 1, copy = 0;
  r.reader_then_writer(x, copy, TensorArgType::OutputExisting);
  // The seeds' semantics: the writer ran while the reader still held the bytes.
  CHECK(copy == 2);
  CHECK(r.writer_start_ns.load() < r.reader_end_ns.load());
}

TEST_CASE("a writer of a sub-range waits only for readers of the bytes it overwrites",
          "[engine][hazards]") {
  ReadWriteRace r(Hazards::All);
  std::int64_t xs[2] = {1, 1};
  std::int64_t copy = 0;
  r.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    // The reader reads word 0; the writer overwrites word 1: no hazard, it runs beside it.
    o.submit_sub(r.reader, TaskArgs()
                               .add_tensor(make_tensor(&xs[0], {1}, DataType::Int64))
                               .add_tensor(make_tensor(&copy, {1}, DataType::Int64),
                                           TensorArgType::OutputExisting));
    o.submit_sub(r.writer, TaskArgs()
                               .add_tensor(make_tensor(&xs[1], {1}, DataType::Int64),
                                           TensorArgType::OutputExisting)
                               .add_scalar(2));
  });
  CHECK(r.writer_start_ns.load() < r.reader_end_ns.load());
  CHECK(xs[1] == 2);
  CHECK(copy == 1);
}

TEST_CASE("a writer after a fan of readers waits for all of them", "[engine][hazards]") {
  constexpr int kReaders = 200;
  Worker w(thread_options(3));
  std::atomic<int> reads_done{0};
  std::atomic<int> seen_at_write{-1};
  auto reader = w.register_sub("reader", [&](TaskArgsView v) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    *v.tensor(1).as<std::int64_t>() = *v.tensor(0).as<const std::int64_t>();
    reads_done.fetch_add(1);
  });
  auto bump = w.register_sub("bump", [&](TaskArgsView v) {
    seen_at_write.store(reads_done.load());
    *v.tensor(0).as<std::int64_t>() += 1;
  });
  w.init();
  std::int64_t x = 7;
  std::vector<std::int64_t> copies(kReaders, 0);
  for (int rep = 0; rep < 5; ++rep) {
    x = 7;
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (int i = 0; i < kReaders; ++i) {
        o.submit_sub(reader, TaskArgs()
                                 .add_tensor(make_tensor(&x, {1}, DataType::Int64))
                                 .add_tensor(make_tensor(&copies[static_cast<std::size_t>(i)], {1},
                                                         DataType::Int64),
                                             TensorArgType::OutputExisting));
      }
      o.submit_sub(
          bump, TaskArgs().add_tensor(make_tensor(&x, {1}, DataType::Int64), TensorArgType::InOut));
    });
    INFO("rep " << rep);
    CHECK(seen_at_write.load() == (rep + 1) * kReaders);
    CHECK(x == 8);
    for (auto c : copies) REQUIRE(c == 7);
    reads_done.store((rep + 1) * kReaders);
  }
  CHECK(w.orchestrator().tensor_map_size() == 0);
}

TEST_CASE("a second writer of the same bytes runs after the first", "[engine][hazards]") {
  Worker w(thread_options(2));
  std::atomic<bool> second_started{false};
  // The first writer holds on until the second started or 300 ms passed.
  auto slow = w.register_sub("slow", [&](TaskArgsView v) {
    const auto until = Clock::now() + std::chrono::milliseconds(300);
    while (!second_started.load() && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    *v.tensor(0).as<std::int64_t>() = 1;
  });
  auto fast = w.register_sub("fast", [&](TaskArgsView v) {
    second_started.store(true);
    *v.tensor(0).as<std::int64_t>() = 2;
  });
  w.init();
  std::int64_t x = 0;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_sub(slow, TaskArgs().add_tensor(make_tensor(&x, {1}, DataType::Int64),
                                             TensorArgType::OutputExisting));
    o.submit_sub(fast, TaskArgs().add_tensor(make_tensor(&x, {1}, DataType::Int64),
                                             TensorArgType::OutputExisting));
  });
  CHECK(x == 2);  // the later writer's bytes are what is left
}

TEST_CASE("a failed reader does not poison the writer after it, a failed producer still does",
          "[engine][hazards][failure]") {
  Worker w(thread_options(2));
  // The reader fails only once every submit is in: later submits in a failed run throw at once,
  // so an early failure would keep the writer from being submitted at all.
  Gate submitted;
  auto bad_reader = w.register_sub("bad_reader", [&](TaskArgsView) {
    submitted.wait();
    throw std::runtime_error("reader broke");
  });
  auto set = w.register_sub("set", [](TaskArgsView v) {
    *v.tensor(0).as<std::int64_t>() = static_cast<std::int64_t>(v.scalar(0));
  });
  auto copy = w.register_sub("copy", [](TaskArgsView v) {
    *v.tensor(1).as<std::int64_t>() = *v.tensor(0).as<const std::int64_t>();
  });
  w.init();
  std::int64_t x = 1, y = 0, z = 0;
  const auto tx = make_tensor(&x, {1}, DataType::Int64);
  const auto ty = make_tensor(&y, {1}, DataType::Int64);
  const auto tz = make_tensor(&z, {1}, DataType::Int64);
  REQUIRE_THROWS_MATCHES(w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    // Reads x and writes y: a writer of x only orders after it; a reader of y consumes it.
    o.submit_sub(bad_reader,
                 TaskArgs().add_tensor(tx).add_tensor(ty, TensorArgType::OutputExisting));
    o.submit_sub(set, TaskArgs().add_tensor(tx, TensorArgType::OutputExisting).add_scalar(5));
    o.submit_sub(copy, TaskArgs().add_tensor(ty).add_tensor(tz, TensorArgType::OutputExisting));
    submitted.open();
  }),
                         TaskError, WhatContains("reader broke"));
  CHECK(x == 5);  // the writer ran
  CHECK(z == 0);  // the consumer of the failed task's output was skipped
}

namespace {

/// A random program over `buffers` int64 words: each task reads two words and either updates a
/// third in place (InOut) or overwrites it (OutputExisting), with a little random work first so
/// the order in which ready tasks run varies. Any missing read-after-write, write-after-read
/// or write-after-write edge changes the final words.
struct HazardOp {
  std::uint32_t a, b, c;
  bool in_place;
  std::uint32_t spin;
};

std::vector<HazardOp> hazard_program(std::uint32_t seed, std::uint32_t tasks,
                                     std::uint32_t buffers) {
  std::mt19937 rng(seed);
  std::vector<HazardOp> ops(tasks);
  for (auto& op : ops) {
    op.a = static_cast<std::uint32_t>(rng() % buffers);
    op.b = static_cast<std::uint32_t>(rng() % buffers);
    op.c = static_cast<std::uint32_t>(rng() % buffers);
    op.in_place = rng() % 3 != 0;
    op.spin = static_cast<std::uint32_t>(rng() % 2000);
  }
  return ops;
}

std::int64_t mix(std::int64_t a, std::int64_t b, std::int64_t c, bool in_place) {
  const auto u =
      static_cast<std::uint64_t>(a) * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(b);
  const std::uint64_t base = in_place ? static_cast<std::uint64_t>(c) * 31U : 0U;
  return static_cast<std::int64_t>((u ^ (u >> 29)) + base);
}

void hazard_kernel(TaskArgsView v) {
  volatile std::uint64_t sink = 0;
  for (std::uint64_t i = 0; i < v.scalar(1); ++i) sink = sink + i;
  const auto a = *v.tensor(0).as<const std::int64_t>();
  const auto b = *v.tensor(1).as<const std::int64_t>();
  auto* c = v.tensor(2).as<std::int64_t>();
  *c = mix(a, b, *c, v.scalar(0) != 0);
}

void run_hazard_programs(Worker& w, CallableHandle k, std::span<std::int64_t> words, int seeds) {
  const auto n = static_cast<std::uint32_t>(words.size());
  for (int seed = 1; seed <= seeds; ++seed) {
    const auto ops = hazard_program(static_cast<std::uint32_t>(seed) * 104729U, 400, n);
    std::vector<std::int64_t> want(n);
    for (std::uint32_t i = 0; i < n; ++i) want[i] = i + 1;
    for (std::uint32_t i = 0; i < n; ++i) words[i] = want[i];
    for (const auto& op : ops) want[op.c] = mix(want[op.a], want[op.b], want[op.c], op.in_place);
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (const auto& op : ops) {
        o.submit_sub(
            k, TaskArgs()
                   .add_tensor(make_tensor(&words[op.a], {1}, DataType::Int64))
                   .add_tensor(make_tensor(&words[op.b], {1}, DataType::Int64))
                   .add_tensor(make_tensor(&words[op.c], {1}, DataType::Int64),
                               op.in_place ? TensorArgType::InOut : TensorArgType::OutputExisting)
                   .add_scalar(op.in_place ? 1 : 0)
                   .add_scalar(op.spin));
      }
    });
    INFO("seed " << seed);
    REQUIRE(std::vector<std::int64_t>(words.begin(), words.end()) == want);
  }
}

}  // namespace

TEST_CASE("random programs with write-after-read hazards match the sequential oracle",
          "[engine][hazards][random]") {
  const int subs = GENERATE(2, 3);
  const std::uint32_t buffers = GENERATE(4U, 16U);
  INFO("subs " << subs << " buffers " << buffers);
  Worker w(thread_options(subs));
  auto k = w.register_sub("mix", hazard_kernel);
  w.init();
  std::vector<std::int64_t> words(buffers);
  run_hazard_programs(w, k, words, 12);
  CHECK(w.orchestrator().live_tasks() == 0);
  CHECK(w.orchestrator().tensor_map_size() == 0);
}

TEST_CASE("random programs with hazards match the oracle under a small task window",
          "[engine][hazards][random][window]") {
  // Producers and readers retire while their consumers are still being submitted: a reused
  // slot must never be mistaken for the task that wrote or read a word before it.
  const std::uint32_t window = GENERATE(1U, 3U, 8U);
  INFO("task window " << window);
  WorkerOptions o = thread_options(2);
  o.task_window = window;
  Worker w(o);
  auto k = w.register_sub("mix", hazard_kernel);
  w.init();
  std::vector<std::int64_t> words(4);
  run_hazard_programs(w, k, words, 6);
  CHECK(w.orchestrator().live_tasks() == 0);
}

TEST_CASE("random programs with write-after-read hazards match the oracle over forked children",
          "[engine][hazards][random][process]") {
  SharedArena arena;  // mapped before the Worker forks its children
  WorkerOptions o = thread_options(2);
  o.child_mode = ChildMode::Process;
  Worker w(o);
  auto k = w.register_sub("mix", hazard_kernel);
  w.init();
  run_hazard_programs(w, k, arena.make<std::int64_t>(8), 6);
}

TEST_CASE("an invalid WorkerOptions::hazards is refused", "[engine][hazards][bad-input]") {
  WorkerOptions o = thread_options(1);
  o.hazards = static_cast<Hazards>(7);
  REQUIRE_THROWS_MATCHES(Worker(o), UsageError, WhatContains("WorkerOptions::hazards is 7"));
}

}  // namespace simpler_test_engine_hazards
