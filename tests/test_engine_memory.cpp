// A run's memory is bounded by the tasks still in flight, not by the tasks it submitted: a task
// that finished successfully and owns no heap bytes gives its slot back before its scope ends, so
// a flat run (no inner scope) of any length stays in a few slot chunks. A task whose heap bytes
// may still be used keeps its slot until its scope ends. (So does a failed task, for readers
// submitted before the Orchestrator saw the failure; once it has, submits throw, so no test can
// tell.)
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/gate.hpp"
#include "support/recording_leaf.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_engine_memory {

using namespace simpler;
using namespace simpler::testing;

namespace {

/// Counts the tasks that ran, so the orchestration can wait for the workers to catch up.
struct Counted {
  Worker w{thread_options(2)};
  std::atomic<std::uint64_t> done{0};
  CallableHandle empty = w.register_sub("empty", [this](TaskArgsView) { done.fetch_add(1); });
  // Writes scalar 0 into tensor 0, then counts.
  CallableHandle set = w.register_sub("set", [this](TaskArgsView v) {
    *v.tensor(0).as<std::int64_t>() = static_cast<std::int64_t>(v.scalar(0));
    done.fetch_add(1);
  });
  // Copies tensor 0 into tensor 1, then counts.
  CallableHandle copy = w.register_sub("copy", [this](TaskArgsView v) {
    *v.tensor(1).as<std::int64_t>() = *v.tensor(0).as<const std::int64_t>();
    done.fetch_add(1);
  });
  Counted() { w.init(); }

  /// Waits (10 s at most) until `n` tasks ran.
  void wait_done(std::uint64_t n) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (done.load() < n && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    REQUIRE(done.load() >= n);
  }
  /// Batches of empty tasks until the slots of every finished task that could give its slot back
  /// have done so: at most `kept` tasks besides the last batch are still live.
  void fillers(Orchestrator& o, std::uint64_t& submitted, std::uint32_t kept) {
    constexpr std::uint32_t kBatch = 1000;
    for (int round = 0; round < 64; ++round) {
      for (std::uint32_t i = 0; i < kBatch; ++i) o.submit_sub(empty, TaskArgs());
      submitted += kBatch;
      wait_done(submitted);
      // A few rounds first: a scope compacts once its frame reached a thousand or so tasks.
      if (round >= 3 && o.live_tasks() <= kept + kBatch) return;
    }
    FAIL("a flat run still holds " << o.live_tasks() << " slots after 64k finished tasks");
  }
};

}  // namespace

TEST_CASE("a flat run gives the slots of finished tasks back before it ends", "[engine][memory]") {
  Counted c;
  std::vector<std::int64_t> words(64, 0);
  std::uint32_t most_live = 0;
  c.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    std::uint64_t submitted = 0;
    for (std::uint32_t batch = 0; batch < 100; ++batch) {
      // Half empty tasks, half writers and readers of a few words (TensorMap entries).
      for (std::uint32_t i = 0; i < 1000; ++i) {
        std::int64_t* word = &words[i % words.size()];
        if (i % 2 == 0) {
          o.submit_sub(c.empty, TaskArgs());
        } else {
          o.submit_sub(c.set, TaskArgs()
                                  .add_tensor(make_tensor(word, {1}, DataType::Int64),
                                              TensorArgType::OutputExisting)
                                  .add_scalar(batch));
        }
      }
      submitted += 1000;
      c.wait_done(submitted);
      most_live = std::max(most_live, o.live_tasks());
    }
  });
  INFO("most live tasks " << most_live);
  // 100k tasks went through the run's one scope; without early release all would be live.
  CHECK(most_live <= 4096);
  CHECK(c.w.orchestrator().slot_capacity() <= 8192);
  CHECK(c.w.orchestrator().live_tasks() == 0);
  CHECK(c.w.orchestrator().tensor_map_size() == 0);
  CHECK(words[1] == 99);
}

TEST_CASE("a finished task whose heap bytes are still in scope keeps them", "[engine][memory]") {
  Counted c;
  std::int64_t seen = 0;
  std::int64_t other = 0;
  c.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    std::uint64_t submitted = 0;
    // 42 into an auto-allocated output; thousands of tasks later, a second output is allocated
    // and written, then the first is read: it must still hold 42 (not share the second's bytes).
    const SubmitResult a = o.submit_sub(
        c.set, TaskArgs()
                   .add_tensor(make_tensor(nullptr, {1}, DataType::Int64), TensorArgType::Output)
                   .add_scalar(42));
    ++submitted;
    c.fillers(o, submitted, 1);  // every filler gave its slot back, the heap owner did not
    const SubmitResult b = o.submit_sub(
        c.set, TaskArgs()
                   .add_tensor(make_tensor(nullptr, {1}, DataType::Int64), TensorArgType::Output)
                   .add_scalar(7));
    ++submitted;
    c.wait_done(submitted);
    CHECK(b.output(0).data != a.output(0).data);
    o.submit_sub(c.copy, TaskArgs()
                             .add_tensor(a.output(0))
                             .add_tensor(make_tensor(&seen, {1}, DataType::Int64),
                                         TensorArgType::OutputExisting));
    o.submit_sub(c.copy, TaskArgs()
                             .add_tensor(b.output(0))
                             .add_tensor(make_tensor(&other, {1}, DataType::Int64),
                                         TensorArgType::OutputExisting));
  });
  CHECK(seen == 42);
  CHECK(other == 7);
}

TEST_CASE("the TensorMap of a flat run of readers stays bounded by the live tasks",
          "[engine][memory][hazards]") {
  // Each task reads its own word that nobody writes: a writer-less segment per read, stale once
  // the reader retired. The map is swept as they pile up.
  Counted c;
  std::vector<std::int64_t> words(50'000, 0);
  std::size_t most = 0;
  c.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    std::uint64_t submitted = 0;
    for (std::size_t i = 0; i < words.size(); ++i) {
      o.submit_sub(c.empty, TaskArgs().add_tensor(make_tensor(&words[i], {1}, DataType::Int64)));
      if (++submitted % 1000 == 0) {
        c.wait_done(submitted);
        most = std::max(most, o.tensor_map_size());
      }
    }
  });
  INFO("largest TensorMap " << most);
  CHECK(most <= 12'000);
  CHECK(c.w.orchestrator().tensor_map_size() == 0);
}

TEST_CASE("a run after tasks that finished out of order gets its slots in id order again",
          "[engine][memory]") {
  // Tasks finishing out of order scatter the free slots; a chain in a later run would then walk
  // slots at random addresses (a miss per hop that no prefetcher predicts). The end of a run
  // puts them back in order. Tasks run at submit would retire at once and hand their slot to
  // the next submit (ids 0, 1, 1, 1, ...): kept on the lanes here.
  WorkerOptions options = thread_options(2);
  options.caller_runs_tasks = false;
  Worker w(options);
  Gate gate;
  std::atomic<int> ran{0};
  const CallableHandle hold = w.register_sub("hold", [&](TaskArgsView) { gate.wait(); });
  const CallableHandle count = w.register_sub("count", [&](TaskArgsView) { ran.fetch_add(1); });
  w.init();
  std::int64_t word = 0;
  const auto held = [&] { return make_tensor(&word, {1}, DataType::Int64); };
  // One task holds a lane and every other task reads what it writes, so those wait for it,
  // while the tasks in between run and retire: every other slot comes back first, then the
  // rest in whatever order the two lanes finish them.
  constexpr int kPairs = 1500;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    {
      auto scope = o.scope();
      o.submit_sub(hold, TaskArgs().add_tensor(held(), TensorArgType::OutputExisting));
      for (int i = 0; i < kPairs; ++i) {
        o.submit_sub(count, TaskArgs().add_tensor(held(), TensorArgType::Input));
        o.submit_sub(count, TaskArgs());
      }
    }
    gate.open();
  });
  REQUIRE(ran.load() == 2 * kPairs);
  std::vector<TaskSlot> ids;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (int i = 0; i < 1000; ++i)
      ids.push_back(
          o.submit_sub(count, TaskArgs().add_tensor(held(), TensorArgType::InOut)).slot_id);
  });
  CHECK(ran.load() == 2 * kPairs + 1000);
  std::size_t out_of_order = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) out_of_order += ids[i] != i;
  INFO("the first ids: " << ids[0] << " " << ids[1] << " " << ids[2] << " " << ids[3]);
  CHECK(out_of_order == 0);
}

}  // namespace simpler_test_engine_memory
