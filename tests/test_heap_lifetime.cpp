// Heap buffers (orch.alloc, auto-allocated outputs) live as long as any task that uses them, not
// only as long as their scope: a scope may end while its tasks still run, and the ring must not
// hand their bytes to the next allocation meanwhile. A heap buffer used after its scope ended is
// refused at submit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include <simpler/simpler.hpp>

#include "support/gate.hpp"
#include "support/matchers.hpp"
#include "support/recording_leaf.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_heap_lifetime {

using namespace simpler;
using namespace simpler::testing;

namespace {

constexpr std::uint32_t kN = 512;

/// Sub callables around a gate: "writer" waits for it, then writes 1s into tensor 0; "sum"
/// writes the sum of tensor 0 into tensor 1; "fill" writes 5s into tensor 0; "clobber" writes 100s
/// into tensor 0 and opens the gate (so nothing waits forever whatever the engine does).
struct Gated {
  Worker w{thread_options(2)};
  std::atomic<bool> gate{false};
  CallableHandle writer = w.register_sub("writer", [this](TaskArgsView v) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!gate.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto* x = v.tensor(0).as<std::int64_t>();
    for (std::uint32_t i = 0; i < kN; ++i) x[i] = 1;
  });
  CallableHandle sum = w.register_sub("sum", [](TaskArgsView v) {
    const auto* x = v.tensor(0).as<const std::int64_t>();
    std::int64_t s = 0;
    for (std::uint32_t i = 0; i < kN; ++i) s += x[i];
    *v.tensor(1).as<std::int64_t>() = s;
  });
  CallableHandle fill = w.register_sub("fill", [](TaskArgsView v) {
    auto* x = v.tensor(0).as<std::int64_t>();
    for (std::uint32_t i = 0; i < kN; ++i) x[i] = 5;
  });
  CallableHandle clobber = w.register_sub("clobber", [this](TaskArgsView v) {
    auto* x = v.tensor(0).as<std::int64_t>();
    for (std::uint32_t i = 0; i < kN; ++i) x[i] = 100;
    gate.store(true);
  });
  Gated() { w.init(); }

  /// In the open scope: a gated writer of x, then the sum of x into `total`; ends the scope while
  /// the writer waits, then allocates y in a new scope and clobbers it (opening the gate).
  /// Returns y: its bytes must not be x's.
  ContinuousTensor write_sum_then_clobber(Orchestrator& o, const ContinuousTensor& x,
                                          std::int64_t& total) {
    o.submit_sub(writer, TaskArgs().add_tensor(x, TensorArgType::OutputExisting));
    o.submit_sub(sum, TaskArgs()
                          .add_tensor(x, TensorArgType::Input)
                          .add_tensor(make_tensor(&total, {1}, DataType::Int64),
                                      TensorArgType::OutputExisting));
    o.scope_end();  // the writer is still at its gate
    o.scope_begin();
    const ContinuousTensor y = o.alloc({kN}, DataType::Int64);
    o.submit_sub(clobber, TaskArgs().add_tensor(y, TensorArgType::OutputExisting));
    o.scope_end();
    return y;
  }
};

bool overlap(const ContinuousTensor& a, const ContinuousTensor& b) {
  return a.data < b.data + b.nbytes() && b.data < a.data + a.nbytes();
}

}  // namespace

TEST_CASE("an orch.alloc buffer outlives its scope while its writer and reader still run",
          "[heap-lifetime][scope]") {
  Gated g;
  std::int64_t total = -1;
  ContinuousTensor x{}, y{};
  g.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.scope_begin();
    x = o.alloc({kN}, DataType::Int64);
    // Neither task looks x's allocation up as a producer: the writer only writes it, the reader
    // depends on the writer.
    y = g.write_sum_then_clobber(o, x, total);
  });
  INFO("x at " << x.data << ", y at " << y.data);
  CHECK_FALSE(overlap(x, y));
  CHECK(total == kN);                          // the writer's 1s, not the clobber's 100s
  CHECK(g.w.stats().heap_rings[1].used == 0);  // all of it came back after the run
  g.w.close();
}

TEST_CASE("an auto-allocated output outlives its scope while a later writer of it still runs",
          "[heap-lifetime][scope]") {
  Gated g;
  std::int64_t total = -1;
  ContinuousTensor x{}, y{};
  g.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.scope_begin();
    const SubmitResult filled = o.submit_sub(
        g.fill,
        TaskArgs().add_tensor(make_tensor(nullptr, {kN}, DataType::Int64), TensorArgType::Output));
    x = filled.output(0);
    // The owner has finished before its scope ends: only the later tasks' holds keep x (a
    // consumer holds no reference on its producer as such).
    REQUIRE(eventually([&] { return o.state_of(filled.slot_id) == TaskState::Completed; }));
    y = g.write_sum_then_clobber(o, x, total);
  });
  INFO("x at " << x.data << ", y at " << y.data);
  CHECK_FALSE(overlap(x, y));
  CHECK(total == kN);
  g.w.close();
}

TEST_CASE("a heap buffer used after its scope ended is refused, and the run's tasks still run",
          "[heap-lifetime][scope][usage]") {
  Worker w(thread_options(1));
  std::atomic<int> ran{0};
  const auto count = w.register_sub("count", [&](TaskArgsView) { ran.fetch_add(1); });
  w.init();
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_sub(count);
    o.scope_begin();
    const ContinuousTensor x = o.alloc({kN}, DataType::Int64);
    o.scope_end();
    CHECK_THROWS_MATCHES(o.submit_sub(count, TaskArgs().add_tensor(x, TensorArgType::Input)),
                         UsageError, WhatContains("tensor 0") && WhatContains("heap"));
    // A pointer into the ring that no allocation holds is refused the same way.
    const ContinuousTensor live = o.alloc({kN}, DataType::Int64);
    ContinuousTensor past = live;
    past.data += live.nbytes();
    CHECK_THROWS_MATCHES(o.submit_sub(count, TaskArgs().add_tensor(past, TensorArgType::Input)),
                         UsageError, WhatContains("not within one live allocation"));
    o.submit_sub(count, TaskArgs().add_tensor(live, TensorArgType::Input));
  });
  CHECK(ran.load() == 2);
  CHECK(w.stats().heap_rings[0].used == 0);
  w.close();
}

TEST_CASE("a heap buffer in every ring is held while live and refused once its scope ended",
          "[heap-lifetime][scope][usage]") {
  // The submit checks a tensor against all rings' addresses with one compare before it looks for
  // its ring (OrchestratorBase::hold_heap_owner): each ring, wherever the kernel mapped it, must
  // still be looked at. Scope depth d allocates from ring min(d - 1, 3); the run is depth 1.
  Worker w(thread_options(1));
  std::atomic<int> ran{0};
  const auto count = w.register_sub("count", [&](TaskArgsView) { ran.fetch_add(1); });
  w.init();
  constexpr int kExtraScopes = detail::kHeapRingCount;  // one past the last ring: it is reused
  int submitted = 0;
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (int extra = 1; extra <= kExtraScopes; ++extra) {
      INFO("scopes opened inside the run: " << extra);
      for (int k = 0; k < extra; ++k) o.scope_begin();
      const int ring = std::min(extra, detail::kHeapRingCount - 1);
      const ContinuousTensor x = o.alloc({kN}, DataType::Int64);
      const ContinuousTensor unused = o.alloc({kN}, DataType::Int64);
      CHECK(w.stats().heap_rings[static_cast<std::size_t>(ring)].used >= 2 * x.nbytes());
      // Accepted while its scope is open, whole and in part.
      o.submit_sub(count, TaskArgs().add_tensor(x, TensorArgType::Input));
      ContinuousTensor part = x;
      part.shapes[0] = kN / 2;
      part.data += part.nbytes();
      o.submit_sub(count, TaskArgs().add_tensor(part, TensorArgType::Input));
      submitted += 2;
      ContinuousTensor past = unused;  // the last allocation of the ring: nothing lies past it
      past.data += unused.nbytes();
      CHECK_THROWS_MATCHES(o.submit_sub(count, TaskArgs().add_tensor(past, TensorArgType::Input)),
                           UsageError,
                           WhatContains("heap ring " + std::to_string(ring)) &&
                               WhatContains("not within one live allocation"));
      o.scope_end();
      // unused has no task to hold it past its scope (x's tasks may: they may still run). The
      // ring may already have taken its bytes back, so the message is either of the two.
      CHECK_THROWS_MATCHES(
          o.submit_sub(count, TaskArgs().add_tensor(unused, TensorArgType::Input)), UsageError,
          WhatContains("tensor 0") &&
              (WhatContains("scope has ended") || WhatContains("not within one live allocation")));
      for (int k = 1; k < extra; ++k) o.scope_end();
    }
  });
  CHECK(ran.load() == submitted);
  for (const auto& h : w.stats().heap_rings) CHECK(h.used == 0);
  w.close();
}

}  // namespace simpler_test_heap_lifetime
