// The simulated chip runs the bundled workloads (vector example, batched GEMM, paged attention,
// a graph of every core shape) to the reference results, reuses what it loaded and built across
// runs, and keeps two device contexts in one process apart.
#include <catch2/catch.hpp>

#include <array>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/chip_workloads.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_chip_workloads {

using namespace simpler;
using namespace simpler::testing;

namespace {

/// A ChipWorker on `device_id`, initialised, with `callable` registered as `id`.
struct Chip {
  explicit Chip(const ChipCallable& callable, std::int32_t device_id = 0) : chip(device_id) {
    chip.init();
    id = chip.register_callable(callable);
  }
  ~Chip() {
    try {
      chip.finalize();
    } catch (...) {  // a destructor must not throw; the test has failed already if this does
    }
  }
  ChipWorker chip;
  int id = -1;
};

// The mixed graph's record layout: [iteration, task, lane, field].
constexpr int kMixedTasks = 5;
constexpr int kLanes = 3;  // AIC, AIV0, AIV1
constexpr int kRecordRowInts = 8;
enum Field { kRuns = 0, kCoreType = 1, kCluster = 2, kSubBlock = 3 };

}  // namespace

TEST_CASE("the vector example computes 47 everywhere for a = 2 and b = 3", "[chip][workload]") {
  Chip c(vector_callable());
  VectorCase v(2.0F, 3.0F);
  c.chip.run(c.id, v.args());
  REQUIRE(VectorCase::want(2.0F, 3.0F) == 47.0F);
  CHECK(v.mismatches() == 0);
  CHECK(v.f.front() == 47.0F);
  CHECK(v.f.back() == 47.0F);
  CHECK(c.chip.stats().tasks_completed >= 5);
}

TEST_CASE("batched GEMM with 1000 tasks matches the reference", "[chip][workload]") {
  Chip c(bgemm_callable());
  BgemmCase g(/*tile=*/16, /*grid_k=*/2, /*groups=*/250, /*loop=*/4);
  REQUIRE(g.tasks() == 1000);
  c.chip.run(c.id, g.args());
  CHECK(g.max_error() <= 1e-3F);
}

TEST_CASE("batched GEMM accumulates over a longer k chain", "[chip][workload]") {
  Chip c(bgemm_callable());
  BgemmCase g(/*tile=*/32, /*grid_k=*/6, /*groups=*/8, /*loop=*/2, /*seed=*/5);
  c.chip.run(c.id, g.args());
  CHECK(g.max_error() <= 1e-3F);
}

TEST_CASE("paged attention over ragged context lengths matches softmax attention",
          "[chip][workload]") {
  Chip c(paged_attention_callable());
  SECTION("batch 3, lengths 33, 128 and 7, block size 16") {
    PagedAttentionCase pa({33, 128, 7}, /*heads=*/16, /*dim=*/16, /*block_size=*/16);
    c.chip.run(c.id, pa.args());
    CHECK(pa.max_error() <= 1e-4F);
  }
  SECTION("lengths on and off block boundaries, one and many blocks") {
    PagedAttentionCase pa({1, 16, 17, 64, 100}, /*heads=*/8, /*dim=*/32, /*block_size=*/16, 11);
    c.chip.run(c.id, pa.args());
    CHECK(pa.max_error() <= 1e-4F);
  }
  SECTION("more heads than one head tile") {
    PagedAttentionCase pa({40, 9}, /*heads=*/160, /*dim=*/8, /*block_size=*/8, 3);
    c.chip.run(c.id, pa.args());
    CHECK(pa.max_error() <= 1e-4F);
  }
}

TEST_CASE("paged attention with a block index outside the cache fails the run naming it",
          "[chip][workload][failure]") {
  Chip c(paged_attention_callable());
  PagedAttentionCase pa({20, 5}, 4, 8, 16);
  pa.block_table[1] = static_cast<std::int32_t>(pa.num_blocks);  // batch 0, block 1
  try {
    c.chip.run(c.id, pa.args());
    FAIL("the run succeeded");
  } catch (const DeviceError& e) {
    CHECK(e.status() == SIMPLER_ERR_ORCH_FATAL);
    CHECK_THAT(std::string(e.what()), Catch::Contains("block_table[0][1]"));
  }
  // The context stays usable.
  PagedAttentionCase ok({20, 5}, 4, 8, 16);
  c.chip.run(c.id, ok.args());
  CHECK(ok.max_error() <= 1e-4F);
}

TEST_CASE("the vector example with mismatched tensor sizes fails the run with a message",
          "[chip][workload][failure]") {
  Chip c(vector_callable());
  std::vector<float> a(64, 1.0F), b(32, 1.0F), f(64);
  TaskArgs args;
  args.add_tensor(make_tensor(std::span<float>(a)), TensorArgType::Input);
  args.add_tensor(make_tensor(std::span<float>(b)), TensorArgType::Input);
  args.add_tensor(make_tensor(std::span<float>(f)), TensorArgType::OutputExisting);
  try {
    c.chip.run(c.id, args);
    FAIL("the run succeeded");
  } catch (const DeviceError& e) {
    CHECK(e.status() == SIMPLER_ERR_ORCH_FATAL);
    CHECK_THAT(std::string(e.what()), Catch::Contains("vector_example"));
  }
}

TEST_CASE("every task of the mixed graph runs only on cores of its shape", "[chip][workload]") {
  Chip c(mixed_callable());
  constexpr int kIterations = 64;
  std::vector<std::int32_t> record(std::size_t{kIterations} * kMixedTasks * kLanes * kRecordRowInts,
                                   0);
  TaskArgs args;
  args.add_tensor(make_tensor(record.data(), {kIterations, kMixedTasks, kLanes, kRecordRowInts},
                              DataType::Int32),
                  TensorArgType::OutputExisting);
  c.chip.run(c.id, args);
  const auto clusters = static_cast<std::int32_t>(c.chip.stats().num_clusters);
  REQUIRE(clusters >= 1);

  // The lanes each task uses (bit 0 AIC, bit 1 AIV0, bit 2 AIV1); the AIV-only task may run on
  // either AIV core of a cluster.
  constexpr std::array<int, kMixedTasks> kLaneMasks = {0b111, 0b001, 0, 0b110, 0b011};
  constexpr std::array<const char*, kMixedTasks> kNames = {"MIX AIC+AIV0+AIV1", "AIC only",
                                                           "AIV only", "AIV0+AIV1", "AIC+AIV0"};
  int aiv_only_on_aiv1 = 0;
  for (int i = 0; i < kIterations; ++i) {
    for (int t = 0; t < kMixedTasks; ++t) {
      const std::int32_t* rec =
          record.data() + (static_cast<std::size_t>(i) * kMixedTasks + t) * kLanes * kRecordRowInts;
      auto at = [&](int lane, Field f) { return rec[lane * kRecordRowInts + f]; };
      INFO("iteration " << i << ", task " << t << " (" << kNames[t] << ")");
      int mask = 0;
      for (int lane = 0; lane < kLanes; ++lane) {
        if (at(lane, kRuns) == 0) continue;
        mask |= 1 << lane;
        INFO("lane " << lane);
        CHECK(at(lane, kRuns) == 1);
        CHECK(at(lane, kCoreType) == (lane == 0 ? 0 : 1));
        CHECK(at(lane, kSubBlock) == (lane == 0 ? 0 : lane - 1));
        CHECK(at(lane, kCluster) >= 0);
        CHECK(at(lane, kCluster) < clusters);
      }
      if (t == 2) {
        CHECK((mask == 0b010 || mask == 0b100));
        aiv_only_on_aiv1 += mask == 0b100 ? 1 : 0;
        continue;
      }
      CHECK(mask == kLaneMasks[t]);
      // The lanes of a multi-lane task share one cluster.
      int cluster = -1;
      for (int lane = 0; lane < kLanes; ++lane) {
        if ((mask & (1 << lane)) == 0) continue;
        if (cluster < 0) cluster = at(lane, kCluster);
        CHECK(at(lane, kCluster) == cluster);
      }
    }
  }
  // Not a pass condition (scheduling decides): how the AIV-only tasks spread.
  UNSCOPED_INFO("AIV-only tasks that ran on an AIV1 core: " << aiv_only_on_aiv1 << " of "
                                                            << kIterations);
}

TEST_CASE("the benchmark graphs run N empty tasks across several inner scopes",
          "[chip][workload][bench]") {
  const char* graph = GENERATE("chain", "independent");
  INFO(graph);
  Chip c(noop_graph_callable(graph));
  for (const std::uint64_t n : {std::uint64_t{1}, std::uint64_t{1024}, std::uint64_t{2500}}) {
    INFO("N = " << n);
    const auto before = c.chip.stats().tasks_completed;
    TaskArgs args;
    args.add_scalar(n);
    c.chip.run(c.id, args);
    CHECK(c.chip.stats().tasks_completed - before >= n);
  }
}

TEST_CASE("repeated runs of one callable reuse the loaded orchestration and the built arena",
          "[chip][workload][reuse]") {
  Chip c(vector_callable());
  const auto before = c.chip.stats();
  CHECK(before.orch_so_loads == 1);
  CHECK(before.kernel_so_loads == 3);
  constexpr int kRuns = 20;
  for (int r = 0; r < kRuns; ++r) {
    const float a = static_cast<float>(r) * 0.5F;
    VectorCase v(a, 1.0F);
    c.chip.run(c.id, v.args());
    INFO("run " << r);
    REQUIRE(v.mismatches() == 0);
  }
  const auto after = c.chip.stats();
  CHECK(after.orch_so_loads == 1);
  CHECK(after.kernel_so_loads == 3);
  CHECK(after.arena_builds == 1);
  CHECK(after.arena_uploads == 1);
  CHECK(after.boots == before.boots + kRuns);
  CHECK(after.runs == before.runs + kRuns);
  CHECK(after.tasks_completed >= before.tasks_completed + 5 * kRuns);
}

TEST_CASE("two chip contexts in one process run at the same time with their own data",
          "[chip][workload][devices]") {
  Chip c0(vector_callable(), 0);
  Chip c1(vector_callable(), 1);
  struct Outcome {
    int bad_runs = 0;
    std::string error;
  };
  std::array<Outcome, 2> outcomes;
  constexpr int kRuns = 10;
  auto drive = [&](Chip& c, float base, Outcome& out) {
    try {
      for (int r = 0; r < kRuns; ++r) {
        VectorCase v(base + static_cast<float>(r), 2.0F * base);
        c.chip.run(c.id, v.args());
        if (v.mismatches() != 0) ++out.bad_runs;
      }
    } catch (const std::exception& e) {
      out.error = e.what();
    }
  };
  std::thread t0(drive, std::ref(c0), 1.0F, std::ref(outcomes[0]));
  std::thread t1(drive, std::ref(c1), -3.0F, std::ref(outcomes[1]));
  t0.join();
  t1.join();
  for (int d = 0; d < 2; ++d) {
    INFO("device " << d);
    CHECK(outcomes[d].error.empty());
    CHECK(outcomes[d].bad_runs == 0);
  }
  CHECK(c0.chip.stats().runs == kRuns);
  CHECK(c1.chip.stats().runs == kRuns);
}

TEST_CASE("TensorMap entries of retired writers are reclaimed within a run",
          "[chip][workload][tensormap]") {
  // Windows of 2048 give a TensorMap of 16384 entries; 20000 writers (OutputExisting views)
  // only fit if entries of retired writers are reused. Without reclamation the run would end in
  // SIMPLER_ERR_TENSORMAP_OVERFLOW.
  Chip c(noop_graph_callable("independent"));
  CallConfig cfg = default_call_config();
  for (auto& w : cfg.runtime_env.ring_task_window) w = 2048;
  TaskArgs args;
  args.add_scalar(std::uint64_t{20000});
  CHECK_NOTHROW(c.chip.run(c.id, args, cfg));
  CHECK(c.chip.stats().tasks_completed >= 20000);
}

}  // namespace simpler_test_chip_workloads
