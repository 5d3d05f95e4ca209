// Tests for detail::TensorMap: the last live writer of every byte range, per address space.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "simpler/detail/tensor_map.hpp"
#include "support/child_wait.hpp"
#include "support/legacy_tensor_map.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_tensor_map {

using simpler::TaskSlot;
using simpler::detail::TensorMap;

// The longest random runs are shorter without optimisation (the asan preset is a Debug build,
// where they took 76-78 s against the 60 s limit of a test); optimised builds (dev, tsan) run
// them in full.
#ifdef __OPTIMIZE__
constexpr int kTensorMapRandomScale = 1;
#else
constexpr int kTensorMapRandomScale = 4;
#endif

namespace {

using Producers = std::vector<TaskSlot>;

Producers lookup(const TensorMap& m, std::uint64_t space, std::uint64_t begin, std::uint64_t end) {
  Producers out;
  m.lookup(space, begin, end, [&out](TaskSlot p) { out.push_back(p); });
  return out;
}

}  // namespace

TEST_CASE("a lookup in an empty tensor map finds nothing", "[tensor-map]") {
  const TensorMap m;
  CHECK(m.size() == 0);
  CHECK(lookup(m, 0, 0, 4096).empty());
  CHECK(lookup(m, 3, 0x1000, 0x2000).empty());
}

TEST_CASE("an inserted writer is found by lookups that touch its range", "[tensor-map]") {
  TensorMap m;
  m.insert(0, 0x1000, 0x1100, 7);
  CHECK(m.size() == 1);
  CHECK(lookup(m, 0, 0x1000, 0x1100) == Producers{7});
  CHECK(lookup(m, 0, 0x1040, 0x1041) == Producers{7});
  CHECK(lookup(m, 0, 0x0F00, 0x2000) == Producers{7});
  CHECK(lookup(m, 0, 0x0F00, 0x1000).empty());
  CHECK(lookup(m, 0, 0x1100, 0x1200).empty());
}

TEST_CASE("a second writer of the whole range replaces the first", "[tensor-map]") {
  TensorMap m;
  m.insert(0, 0, 128, 1);
  m.insert(0, 0, 128, 2);
  CHECK(m.size() == 1);
  CHECK(lookup(m, 0, 0, 128) == Producers{2});
  CHECK(lookup(m, 0, 100, 101) == Producers{2});
}

TEST_CASE("disjoint ranges are tracked independently", "[tensor-map]") {
  TensorMap m;
  m.insert(0, 0, 64, 1);
  m.insert(0, 64, 128, 2);
  CHECK(m.size() == 2);
  CHECK(lookup(m, 0, 0, 64) == Producers{1});
  CHECK(lookup(m, 0, 64, 128) == Producers{2});
  CHECK(lookup(m, 0, 0, 128) == (Producers{1, 2}));
  m.insert(0, 64, 128, 3);  // rewriting one leaves the other alone
  CHECK(lookup(m, 0, 0, 64) == Producers{1});
  CHECK(lookup(m, 0, 0, 128) == (Producers{1, 3}));
}

TEST_CASE("an overlapping reader finds every producer it touches in address order",
          "[tensor-map]") {
  TensorMap m;
  m.insert(0, 256, 320, 4);
  m.insert(0, 64, 128, 2);
  m.insert(0, 128, 192, 3);
  m.insert(0, 0, 64, 1);
  m.insert(0, 400, 500, 5);
  CHECK(lookup(m, 0, 32, 300) == (Producers{1, 2, 3, 4}));
  CHECK(lookup(m, 0, 0, 1000) == (Producers{1, 2, 3, 4, 5}));
  CHECK(lookup(m, 0, 192, 256).empty());  // the gap between 3 and 4
  CHECK(lookup(m, 0, 100, 130) == (Producers{2, 3}));
}

TEST_CASE("touching half-open ranges do not overlap", "[tensor-map]") {
  TensorMap m;
  m.insert(0, 0, 64, 1);
  CHECK(lookup(m, 0, 64, 128).empty());
  CHECK(lookup(m, 0, 63, 128) == Producers{1});

  TensorMap n;
  n.insert(0, 64, 128, 2);
  CHECK(lookup(n, 0, 0, 64).empty());
  CHECK(lookup(n, 0, 0, 65) == Producers{2});
  CHECK(lookup(n, 0, 127, 200) == Producers{2});
  CHECK(lookup(n, 0, 128, 200).empty());

  // A writer right after another does not trim it.
  m.insert(0, 64, 128, 3);
  CHECK(lookup(m, 0, 0, 64) == Producers{1});
  CHECK(lookup(m, 0, 63, 65) == (Producers{1, 3}));
  CHECK(m.size() == 2);
}

TEST_CASE("a covering write supersedes every entry under it", "[tensor-map]") {
  TensorMap m;
  m.insert(0, 0, 64, 1);
  m.insert(0, 64, 128, 2);
  m.insert(0, 200, 210, 3);
  m.insert(0, 250, 256, 4);
  m.insert(0, 0, 256, 9);
  CHECK(m.size() == 1);
  CHECK(lookup(m, 0, 0, 256) == Producers{9});
  CHECK(lookup(m, 0, 0, 1000) == Producers{9});
}

TEST_CASE("a covering write that starts and ends inside entries trims both", "[tensor-map]") {
  TensorMap m;
  m.insert(0, 0, 100, 1);
  m.insert(0, 100, 200, 2);
  m.insert(0, 200, 300, 3);
  m.insert(0, 50, 250, 9);
  CHECK(m.size() == 3);
  CHECK(lookup(m, 0, 0, 50) == Producers{1});
  CHECK(lookup(m, 0, 50, 250) == Producers{9});
  CHECK(lookup(m, 0, 250, 300) == Producers{3});
  CHECK(lookup(m, 0, 0, 300) == (Producers{1, 9, 3}));
}

TEST_CASE("a partially covered producer keeps its uncovered bytes", "[tensor-map]") {
  TensorMap m;
  m.insert(0, 0, 128, 1);
  m.insert(0, 0, 64, 2);
  CHECK(m.size() == 2);
  CHECK(lookup(m, 0, 64, 128) == Producers{1});
  CHECK(lookup(m, 0, 0, 64) == Producers{2});
  CHECK(lookup(m, 0, 0, 128) == (Producers{2, 1}));

  TensorMap t;  // the same with the tail rewritten
  t.insert(0, 0, 128, 1);
  t.insert(0, 64, 128, 2);
  CHECK(lookup(t, 0, 0, 64) == Producers{1});
  CHECK(lookup(t, 0, 64, 128) == Producers{2});
  CHECK(t.size() == 2);
}

TEST_CASE("a write in the middle splits an entry into a head and a tail", "[tensor-map]") {
  TensorMap m;
  m.insert(0, 0, 128, 1);
  m.insert(0, 32, 96, 2);
  CHECK(m.size() == 3);
  CHECK(lookup(m, 0, 0, 128) == (Producers{1, 2, 1}));
  CHECK(lookup(m, 0, 0, 32) == Producers{1});
  CHECK(lookup(m, 0, 32, 96) == Producers{2});
  CHECK(lookup(m, 0, 96, 128) == Producers{1});
  CHECK(lookup(m, 0, 31, 33) == (Producers{1, 2}));
  CHECK(lookup(m, 0, 95, 97) == (Producers{2, 1}));
}

TEST_CASE("erase_owned removes only the entries still owned by that producer", "[tensor-map]") {
  TensorMap m;
  m.insert(0, 0, 128, 1);
  m.insert(0, 32, 96, 2);    // newer writer in the middle of 1
  m.insert(0, 200, 300, 3);  // unrelated
  m.erase_owned(0, 0, 128, 1);
  CHECK(m.size() == 2);
  CHECK(lookup(m, 0, 0, 128) == Producers{2});
  CHECK(lookup(m, 0, 0, 1000) == (Producers{2, 3}));

  m.erase_owned(0, 0, 128, 3);  // 3 owns nothing in this range
  CHECK(lookup(m, 0, 200, 300) == Producers{3});
  m.erase_owned(0, 200, 300, 2);  // 2 owns nothing in this range
  CHECK(lookup(m, 0, 32, 96) == Producers{2});
  CHECK(m.size() == 2);

  m.erase_owned(0, 32, 96, 2);
  m.erase_owned(0, 200, 300, 3);
  CHECK(m.size() == 0);
  CHECK(lookup(m, 0, 0, 1000).empty());
}

TEST_CASE("erase_owned of a superseded producer leaves the newer writer", "[tensor-map]") {
  TensorMap m;
  m.insert(0, 0, 128, 1);
  m.insert(0, 0, 128, 2);
  m.erase_owned(0, 0, 128, 1);
  CHECK(lookup(m, 0, 0, 128) == Producers{2});
  CHECK(m.size() == 1);
}

TEST_CASE("address spaces with the same addresses are independent", "[tensor-map]") {
  TensorMap m;
  m.insert(0, 0, 128, 1);
  m.insert(1, 0, 128, 2);
  m.insert(2, 32, 64, 3);
  CHECK(m.size() == 3);
  CHECK(lookup(m, 0, 0, 128) == Producers{1});
  CHECK(lookup(m, 1, 0, 128) == Producers{2});
  CHECK(lookup(m, 2, 0, 128) == Producers{3});
  CHECK(lookup(m, 7, 0, 128).empty());

  m.insert(1, 0, 64, 4);  // trims only space 1
  CHECK(lookup(m, 0, 0, 128) == Producers{1});
  CHECK(lookup(m, 1, 0, 128) == (Producers{4, 2}));

  m.erase_owned(0, 0, 128, 2);  // 2 lives in space 1, not 0
  CHECK(lookup(m, 1, 64, 128) == Producers{2});
  m.erase_owned(1, 0, 128, 1);  // 1 lives in space 0, not 1
  CHECK(lookup(m, 0, 0, 128) == Producers{1});
  CHECK(m.size() == 4);
}

TEST_CASE("an entry of a lower space that reaches past an address does not leak into the next",
          "[tensor-map]") {
  TensorMap m;
  m.insert(0, 1000, 5000, 1);
  CHECK(lookup(m, 1, 2000, 3000).empty());
  m.insert(1, 2000, 3000, 2);  // must not trim the space-0 entry
  CHECK(lookup(m, 0, 1000, 5000) == Producers{1});
  CHECK(lookup(m, 1, 0, 10000) == Producers{2});
  m.erase_owned(1, 0, 10000, 1);
  CHECK(lookup(m, 0, 2500, 2501) == Producers{1});
  CHECK(m.size() == 2);
}

TEST_CASE("clear empties the tensor map", "[tensor-map]") {
  TensorMap m;
  for (TaskSlot p = 0; p < 50; ++p) m.insert(p % 3, p * 10, p * 10 + 10, p);
  CHECK(m.size() == 50);
  m.clear();
  CHECK(m.size() == 0);
  CHECK(lookup(m, 0, 0, 1000).empty());
  m.insert(0, 0, 8, 1);
  CHECK(lookup(m, 0, 0, 8) == Producers{1});
}

TEST_CASE("random inserts, erases and lookups agree with a per-byte last-writer model",
          "[tensor-map]") {
  constexpr std::size_t kBytes = 4096;
  constexpr std::size_t kSpaces = 2;
  constexpr std::int64_t kNone = -1;
  std::mt19937_64 rng(0xC0FFEE);

  struct Range {
    std::uint64_t space;
    std::uint64_t begin;
    std::uint64_t end;
  };
  // The oracle: the last writer of every byte, or kNone.
  std::array<std::array<std::int64_t, kBytes>, kSpaces> last{};
  for (auto& s : last) s.fill(kNone);
  // Live producers (each wrote one range, like a task with one output); ids are recycled after
  // their range is erased, like retired task slots.
  std::vector<std::pair<TaskSlot, Range>> live;
  std::vector<TaskSlot> free_ids;
  TaskSlot next_id = 0;

  TensorMap m;
  const auto random_range = [&rng](std::uint64_t max_len) {
    const std::uint64_t len = 1 + rng() % max_len;
    const std::uint64_t begin = rng() % (kBytes - len + 1);
    return Range{rng() % kSpaces, begin, begin + len};
  };
  // The producers of [begin, end) in address order: one per run of equal owners, gaps skipped.
  const auto expected = [&last](const Range& r) {
    Producers out;
    std::int64_t prev = kNone;
    for (std::uint64_t b = r.begin; b < r.end; ++b) {
      const std::int64_t w = last[r.space][b];
      if (w != kNone && w != prev) out.push_back(static_cast<TaskSlot>(w));
      prev = w;
    }
    return out;
  };
  // Entries in the map: runs of equal owners over every space.
  const auto expected_size = [&last] {
    std::size_t runs = 0;
    for (const auto& s : last) {
      std::int64_t prev = kNone;
      for (std::int64_t w : s) {
        if (w != kNone && w != prev) ++runs;
        prev = w;
      }
    }
    return runs;
  };

  std::size_t lookups = 0;
  std::size_t multi_hits = 0;
  std::size_t erases = 0;
  for (int step = 0; step < 4000; ++step) {
    const std::uint64_t op = rng() % 100;
    if (op < 45) {
      TaskSlot id = 0;
      if (!free_ids.empty() && rng() % 2 == 0) {
        id = free_ids.back();
        free_ids.pop_back();
      } else {
        id = next_id++;
      }
      const Range r = random_range(160);
      m.insert(r.space, r.begin, r.end, id);
      for (std::uint64_t b = r.begin; b < r.end; ++b) last[r.space][b] = id;
      live.emplace_back(id, r);
    } else if (op < 65) {
      if (live.empty()) continue;
      const std::size_t i = rng() % live.size();
      const auto [id, r] = live[i];
      m.erase_owned(r.space, r.begin, r.end, id);
      for (std::uint64_t b = r.begin; b < r.end; ++b) {
        if (last[r.space][b] == static_cast<std::int64_t>(id)) last[r.space][b] = kNone;
      }
      live[i] = live.back();
      live.pop_back();
      free_ids.push_back(id);
      ++erases;
    } else {
      const Range r = random_range(300);
      const Producers got = lookup(m, r.space, r.begin, r.end);
      const Producers want = expected(r);
      ++lookups;
      if (std::set<TaskSlot>(want.begin(), want.end()).size() > 1) ++multi_hits;
      INFO("step " << step << ": lookup space " << r.space << " [" << r.begin << ", " << r.end
                   << ")");
      REQUIRE(std::set<TaskSlot>(got.begin(), got.end()) ==
              std::set<TaskSlot>(want.begin(), want.end()));
      REQUIRE(got == want);
    }
    INFO("step " << step);
    REQUIRE(m.size() == expected_size());
  }
  CHECK(lookups > 1000);
  CHECK(multi_hits > 100);
  CHECK(erases > 400);
}

TEST_CASE("an empty write leaves the map unchanged", "[tensor-map]") {
  simpler::detail::TensorMap m;
  m.insert(0, 0, 128, 1);
  m.insert(0, 64, 64, 2);  // zero bytes inside an entry: no split, no entry
  m.insert(0, 500, 500, 3);
  REQUIRE(m.size() == 1);
  std::vector<simpler::TaskSlot> found;
  m.lookup(0, 0, 1000, [&](simpler::TaskSlot p) { found.push_back(p); });
  REQUIRE(found == std::vector<simpler::TaskSlot>{1});
}

// ---- Readers (write-after-read ordering) -------------------------------------------------

namespace {
using simpler::detail::TensorReader;
using SlotSet = std::set<TaskSlot>;
}  // namespace

TEST_CASE("a writer finds the readers since the last writer, and only those", "[tensor-map]") {
  TensorMap m;
  const auto live = [](const TensorReader&) { return true; };
  SlotSet writers;
  m.add_reader(
      0, 0, 64, {1, 0}, [&](TaskSlot w) { writers.insert(w); }, live);
  CHECK(writers.empty());  // nobody wrote these bytes
  m.add_reader(
      0, 32, 96, {2, 0}, [&](TaskSlot w) { writers.insert(w); }, live);
  SlotSet found_w, found_r;
  const auto write = [&](std::uint64_t b, std::uint64_t e, TaskSlot id) {
    found_w.clear();
    found_r.clear();
    m.insert(
        0, b, e, id, [&](TaskSlot w) { found_w.insert(w); },
        [&](const TensorReader& r) { found_r.insert(r.slot); });
  };
  write(80, 128, 3);  // overlaps reader 2 only
  CHECK(found_w.empty());
  CHECK(found_r == SlotSet{2});
  write(0, 128, 4);  // readers 1 and 2 of [0, 80), writer 3 of [80, 128)
  CHECK(found_w == SlotSet{3});
  CHECK(found_r == SlotSet{1, 2});
  write(0, 128, 5);  // the readers were superseded by writer 4
  CHECK(found_w == SlotSet{4});
  CHECK(found_r.empty());
  // A reader of part of writer 5's bytes finds it; a writer of the rest does not find that
  // reader.
  m.add_reader(
      0, 0, 16, {6, 0}, [&](TaskSlot w) { writers.insert(w); }, live);
  CHECK(writers == SlotSet{5});
  write(16, 128, 7);
  CHECK(found_r.empty());
  write(8, 9, 8);
  CHECK(found_r == SlotSet{6});
}

TEST_CASE("erase_owned keeps the readers of a retired writer's bytes", "[tensor-map]") {
  TensorMap m;
  const auto live = [](const TensorReader&) { return true; };
  m.insert(0, 0, 64, 1);
  m.add_reader(
      0, 0, 64, {2, 0}, [](TaskSlot) {}, live);
  m.erase_owned(0, 0, 64, 1);
  REQUIRE(m.size() == 1);
  CHECK(lookup(m, 0, 0, 64).empty());
  SlotSet found_r;
  m.insert(
      0, 0, 64, 3, [](TaskSlot) {}, [&](const TensorReader& r) { found_r.insert(r.slot); });
  CHECK(found_r == SlotSet{2});
}

TEST_CASE("sweep drops stale readers and the segments they leave empty", "[tensor-map]") {
  TensorMap m;
  std::set<std::uint32_t> dead_gens = {0};  // generation 0 of every slot is over
  const auto live = [&](const TensorReader& r) { return dead_gens.count(r.gen) == 0; };
  m.add_reader(
      0, 0, 64, {1, 0}, [](TaskSlot) {}, live);
  m.add_reader(
      0, 100, 164, {2, 1}, [](TaskSlot) {}, live);
  m.insert(0, 200, 264, 3);
  REQUIRE(m.size() == 3);
  m.sweep(live);
  CHECK(m.size() == 2);  // reader 1 (gen 0) and its segment are gone
  // A reader list compacts before it grows: stale entries do not pile up.
  for (std::uint32_t i = 0; i < 1000; ++i) {
    m.add_reader(
        0, 300, 364, {i, i % 2 == 0 ? 0U : 1U}, [](TaskSlot) {}, live);
  }
  std::size_t listed = 0;
  m.for_each_segment([&](std::uint64_t, std::uint64_t b, std::uint64_t, TaskSlot,
                         std::span<const TensorReader> rs) {
    if (b == 300) listed = rs.size();
  });
  CHECK(listed >= 500);   // every live one is kept
  CHECK(listed <= 1000);  // and the list never holds twice the live ones plus its inline room
}

TEST_CASE("settled asks every writer, and a write's readers, of the bytes a range touches",
          "[tensor-map]") {
  TensorMap m;
  SlotSet unfinished;  // writers `done` rejects
  std::set<TaskSlot> live_readers;
  const auto done = [&](TaskSlot w) { return unfinished.count(w) == 0; };
  const auto live = [&](const TensorReader& r) { return live_readers.count(r.slot) != 0; };
  const auto settled = [&](std::uint64_t b, std::uint64_t e, bool readers) {
    return m.settled(0, b, e, readers, done, live);
  };
  CHECK(settled(0, 4096, true));  // an empty map
  m.insert(0, 100, 200, 5);
  m.add_reader(
      0, 300, 310, {6, 0}, [](TaskSlot) {}, live);
  unfinished = {5};
  live_readers = {6};
  CHECK_FALSE(settled(100, 200, false));  // the exact range
  CHECK_FALSE(settled(150, 160, false));  // inside it
  CHECK_FALSE(settled(0, 101, false));    // its first byte
  CHECK(settled(0, 100, true));           // up to it
  CHECK(settled(200, 300, true));         // between the two
  CHECK(settled(305, 306, false));        // a reader's bytes, for a reader
  CHECK_FALSE(settled(305, 306, true));   // and for a writer
  CHECK_FALSE(settled(250, 350, true));   // across it
  CHECK_FALSE(settled(0, 4096, false));   // everything, for a reader: writer 5
  CHECK(settled(1, 1, true));             // an empty range
  unfinished.clear();
  CHECK(settled(0, 4096, false));
  CHECK_FALSE(settled(0, 4096, true));  // reader 6 is live
  live_readers.clear();
  CHECK(settled(0, 4096, true));
  // A hole (the writer retired, nobody read) counts as settled.
  m.erase_owned(0, 100, 200, 5);
  unfinished = {5};
  CHECK(settled(100, 200, true));
  CHECK(m.size() == 1);
}

TEST_CASE("a sweep with a settled-writer test drops those writers as if they had retired",
          "[tensor-map]") {
  TensorMap m;
  std::set<TaskSlot> live_readers = {3};
  const auto live = [&](const TensorReader& r) { return live_readers.count(r.slot) != 0; };
  m.insert(0, 0, 64, 1);     // settled writer, no readers: dropped
  m.insert(0, 100, 164, 2);  // settled writer with a live reader: stays, writer-less
  m.add_reader(
      0, 100, 164, {3, 0}, [](TaskSlot) {}, live);
  m.insert(0, 200, 264, 4);  // unfinished writer: stays
  REQUIRE(m.size() == 3);
  m.sweep(live, [](TaskSlot w) { return w != 4; });
  CHECK(m.size() == 2);
  CHECK(lookup(m, 0, 0, 64).empty());
  CHECK(lookup(m, 0, 100, 164).empty());
  CHECK(lookup(m, 0, 200, 264) == Producers{4});
  SlotSet found_r;
  m.insert(
      0, 100, 164, 5, [](TaskSlot) {}, [&](const TensorReader& r) { found_r.insert(r.slot); });
  CHECK(found_r == SlotSet{3});  // the live reader is still there for the next writer
  // A plain sweep never drops a writer.
  m.sweep(live);
  CHECK(lookup(m, 0, 200, 264) == Producers{4});
  CHECK(lookup(m, 0, 100, 164) == Producers{5});
}

TEST_CASE("the hash index keeps its size while the segments swing, and shrinks once they stay few",
          "[tensor-map]") {
  // A DAG over many buffers: tasks make segments, a sweep drops them in bulk, the next tasks
  // make as many again. Shrinking at each erasure halved the index down to nothing and doubled
  // it back at every such swing; it shrinks at a sweep, to what the period before needed.
  TensorMap m;
  const auto live = [](const TensorReader&) { return false; };  // every reader has finished
  const auto swing = [&](std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) {
      m.add_reader(
          0, i * 64, i * 64 + 8, {static_cast<TaskSlot>(i), 0}, [](TaskSlot) {}, live);
    }
    m.sweep(live);  // every segment of the swing is writer-less and stale
    REQUIRE(m.size() == 0);
  };
  swing(8192);
  const std::size_t full = m.index_slots();
  INFO("index slots after the first swing: " << full);
  CHECK(full >= 2 * 8192);
  for (int k = 0; k < 5; ++k) {
    swing(8192);
    CHECK(m.index_slots() == full);  // neither shrunk at the sweep nor grown by the next swing
  }
  // A small swing: its sweep fits the index to what it needed.
  swing(100);
  CHECK(m.index_slots() <= 1024);
  CHECK(m.index_slots() >= 64);
  swing(3000);  // and it grows again as needed, every segment findable
  for (std::uint64_t i = 0; i < 3000; ++i) {
    m.add_reader(
        0, i * 64, i * 64 + 8, {1, 1}, [](TaskSlot) {}, live);
  }
  CHECK(m.size() == 3000);
  for (std::uint64_t i = 0; i < 3000; i += 7) {
    std::size_t readers = 0;
    m.for_each_segment([&](std::uint64_t, std::uint64_t b, std::uint64_t, TaskSlot,
                           std::span<const TensorReader> rs) {
      if (b == i * 64) readers = rs.size();
    });
    REQUIRE(readers == 1);
  }
}

TEST_CASE("a reader list of mostly live readers is not walked whole at every add", "[tensor-map]") {
  // A fan-out: readers of one range pile up faster than they finish, one finishing between two
  // adds. Compacting the full list at each add (it frees one entry, the add fills it again)
  // made the adds quadratic; each compaction must be paid by as many adds as it walked.
  TensorMap m;
  std::set<std::uint32_t> finished;
  std::uint64_t looked = 0;
  const auto live = [&](const TensorReader& r) {
    ++looked;
    return finished.count(r.slot) == 0;
  };
  constexpr std::uint32_t kReaders = 20'000;
  for (std::uint32_t i = 0; i < kReaders; ++i) {
    if (i >= 4) finished.insert(i / 4);  // the oldest readers finish, one in four adds
    m.add_reader(
        0, 0, 64, {i, 0}, [](TaskSlot) {}, live);
  }
  INFO("live() calls for " << kReaders << " adds: " << looked);
  CHECK(looked <= 4 * std::uint64_t{kReaders});
  std::size_t listed = 0;
  m.for_each_segment([&](std::uint64_t, std::uint64_t, std::uint64_t, TaskSlot,
                         std::span<const TensorReader> rs) { listed = rs.size(); });
  CHECK(listed >= kReaders - kReaders / 4);  // every live one is kept
  CHECK(listed <= kReaders);
}

TEST_CASE(
    "random reads, writes, retires and sweeps agree with a per-byte model of writers and "
    "readers",
    "[tensor-map]") {
  constexpr std::size_t kBytes = 2048;
  constexpr std::size_t kSpaces = 2;
  constexpr std::int64_t kNone = -1;
  std::mt19937_64 rng(0xBEEF);

  struct Range {
    std::uint64_t space;
    std::uint64_t begin;
    std::uint64_t end;
  };
  struct Byte {
    std::int64_t writer = kNone;
    SlotSet readers;  // live readers since the writer
  };
  std::array<std::array<Byte, kBytes>, kSpaces> model{};
  // Tasks: slot ids are recycled with a new generation after retire, like the slot pool's.
  std::vector<std::uint32_t> gen;  // current generation per slot
  std::vector<bool> alive;
  std::vector<std::vector<Range>> written;
  std::vector<TaskSlot> free_ids;
  const auto live = [&](const TensorReader& r) { return alive[r.slot] && gen[r.slot] == r.gen; };
  const auto new_task = [&] {
    TaskSlot id = 0;
    if (!free_ids.empty() && rng() % 2 == 0) {
      id = free_ids.back();
      free_ids.pop_back();
    } else {
      id = static_cast<TaskSlot>(gen.size());
      gen.push_back(0);
      alive.push_back(false);
      written.emplace_back();
    }
    alive[id] = true;
    return id;
  };
  const auto random_range = [&rng](std::uint64_t max_len) {
    const std::uint64_t len = 1 + rng() % max_len;
    const std::uint64_t begin = rng() % (kBytes - len + 1);
    return Range{rng() % kSpaces, begin, begin + len};
  };
  std::vector<TaskSlot> live_ids;

  TensorMap m;
  std::size_t reads = 0, writes = 0, war_hits = 0, retires = 0, sweeps = 0;
  for (int step = 0; step < 6000 / kTensorMapRandomScale; ++step) {
    const std::uint64_t op = rng() % 100;
    INFO("step " << step << " op " << op);
    if (op < 35) {  // a read
      const TaskSlot id = new_task();
      const Range r = random_range(200);
      SlotSet want, got;
      for (std::uint64_t b = r.begin; b < r.end; ++b) {
        Byte& by = model[r.space][b];
        if (by.writer != kNone) want.insert(static_cast<TaskSlot>(by.writer));
        by.readers.insert(id);
      }
      m.add_reader(
          r.space, r.begin, r.end, {id, gen[id]}, [&](TaskSlot w) { got.insert(w); }, live);
      REQUIRE(got == want);
      live_ids.push_back(id);
      ++reads;
    } else if (op < 65) {  // a write
      const TaskSlot id = new_task();
      const Range r = random_range(160);
      SlotSet want_w, want_r, got_w, got_r;
      for (std::uint64_t b = r.begin; b < r.end; ++b) {
        Byte& by = model[r.space][b];
        if (by.writer != kNone) want_w.insert(static_cast<TaskSlot>(by.writer));
        want_r.insert(by.readers.begin(), by.readers.end());
        by.writer = id;
        by.readers.clear();
      }
      m.insert(
          r.space, r.begin, r.end, id, [&](TaskSlot w) { got_w.insert(w); },
          [&](const TensorReader& rd) {
            if (live(rd)) got_r.insert(rd.slot);
          });
      REQUIRE(got_w == want_w);
      REQUIRE(got_r == want_r);
      if (!want_r.empty()) ++war_hits;
      written[id].push_back(r);
      live_ids.push_back(id);
      ++writes;
    } else if (op < 92) {  // a retire
      if (live_ids.empty()) continue;
      const std::size_t i = rng() % live_ids.size();
      const TaskSlot id = live_ids[i];
      live_ids[i] = live_ids.back();
      live_ids.pop_back();
      for (const Range& r : written[id]) {
        m.erase_owned(r.space, r.begin, r.end, id);
        for (std::uint64_t b = r.begin; b < r.end; ++b) {
          if (model[r.space][b].writer == static_cast<std::int64_t>(id))
            model[r.space][b].writer = kNone;
        }
      }
      written[id].clear();
      for (auto& sp : model) {
        for (Byte& by : sp) by.readers.erase(id);
      }
      alive[id] = false;
      ++gen[id];
      free_ids.push_back(id);
      ++retires;
    } else {
      m.sweep(live);
      ++sweeps;
    }
    // The whole map against the model: segments are disjoint and ordered, each byte's writer
    // and live readers match; after a sweep no segment is empty.
    std::array<std::vector<bool>, kSpaces> covered;
    for (auto& c : covered) c.assign(kBytes, false);
    std::uint64_t prev_space = 0, prev_end = 0;
    const bool swept = op >= 92;
    m.for_each_segment([&](std::uint64_t space, std::uint64_t b, std::uint64_t e, TaskSlot w,
                           std::span<const TensorReader> rs) {
      REQUIRE(b < e);
      REQUIRE(e <= kBytes);
      if (space == prev_space) REQUIRE(b >= prev_end);
      prev_space = space;
      prev_end = e;
      SlotSet rl;
      for (const TensorReader& rd : rs) {
        if (live(rd)) rl.insert(rd.slot);
      }
      if (swept) REQUIRE((w != simpler::kInvalidSlot || !rl.empty()));
      const std::int64_t writer = w == simpler::kInvalidSlot ? kNone : static_cast<std::int64_t>(w);
      // Compared plainly and asserted only on a mismatch: ~50M assertions otherwise, which
      // took the tsan preset past a test's 60 s limit.
      for (std::uint64_t x = b; x < e; ++x) {
        const Byte& by = model[space][x];
        if (by.writer != writer || by.readers != rl) {
          INFO("space " << space << " byte " << x);
          REQUIRE(by.writer == writer);
          REQUIRE(by.readers == rl);
        }
        covered[space][x] = true;
      }
    });
    for (std::size_t sp = 0; sp < kSpaces; ++sp) {
      for (std::size_t x = 0; x < kBytes; ++x) {
        const Byte& by = model[sp][x];
        if (covered[sp][x] || (by.writer == kNone && by.readers.empty())) continue;
        INFO("space " << sp << " byte " << x << ", outside every segment");
        REQUIRE(by.writer == kNone);
        REQUIRE(by.readers.empty());
      }
    }
  }
  // Each kind of step was taken often enough to count (fewer steps without optimisation).
  CHECK(reads > 1000 / kTensorMapRandomScale);
  CHECK(writes > 1000 / kTensorMapRandomScale);
  CHECK(war_hits > 300 / kTensorMapRandomScale);
  CHECK(retires > 1000 / kTensorMapRandomScale);
  CHECK(sweeps > 100 / kTensorMapRandomScale);
}

namespace {

// One call a TensorMap made back: which callback, and its argument.
struct Event {
  char kind;  // 'w' writer, 'r' reader, 'p' lookup producer, 'o' lookup_overlaps
  std::uint64_t a;
  std::uint64_t b;
  bool operator==(const Event&) const = default;
};

struct SegmentRow {
  std::uint64_t space, begin, end;
  TaskSlot writer;
  std::vector<simpler::detail::TensorReader> readers;
  bool operator==(const SegmentRow&) const = default;
};

template <class M>
std::vector<SegmentRow> segments_of(const M& m) {
  std::vector<SegmentRow> out;
  m.for_each_segment([&](std::uint64_t s, std::uint64_t b, std::uint64_t e, TaskSlot w,
                         std::span<const simpler::detail::TensorReader> rs) {
    out.push_back({s, b, e, w, {rs.begin(), rs.end()}});
  });
  return out;
}

// Runs `steps` random operations on a TensorMap and on the std::map-only implementation it
// replaced (the oracle), comparing every callback, size() and writerless_made() after each
// operation, and every segment each `full_every` operations. Ranges repeat earlier ones exactly
// most of the time (as tensors do), else are new, sub-ranges, shifted or spanning several.
void run_differential(std::uint64_t seed, std::uint64_t bytes, std::uint64_t max_len, int steps,
                      int full_every, TaskSlot slots) {
  using simpler::detail::TensorReader;
  std::mt19937_64 rng(seed);
  TensorMap m;
  simpler::legacy::LegacyTensorMap oracle;
  std::vector<std::uint32_t> gen(slots, 0);
  struct Range {
    std::uint64_t space, begin, end;
  };
  std::vector<std::vector<Range>> outputs(slots);  // ranges each slot wrote since its retire
  std::vector<Range> seen;                         // ranges used so far (repeat candidates)
  const auto live = [&gen](const TensorReader& r) { return gen[r.slot] == r.gen; };

  const auto fresh = [&] {
    const std::uint64_t len = 1 + rng() % max_len;
    const std::uint64_t b = rng() % (bytes - len + 1);
    return Range{rng() % 2, b, b + len};
  };
  const auto pick_range = [&]() -> Range {
    const std::uint64_t k = rng() % 100;
    if (seen.empty() || k < 15) return fresh();
    const Range r = seen[rng() % seen.size()];
    if (k < 75) return r;  // an exact repeat
    const std::uint64_t len = r.end - r.begin;
    if (k < 85) {  // a sub-range
      const std::uint64_t b = r.begin + rng() % len;
      return Range{r.space, b, b + 1 + rng() % (r.end - b)};
    }
    if (k < 95) {  // shifted: overlaps partly
      const std::uint64_t shift = 1 + rng() % len;
      if (rng() % 2 == 0 && r.begin >= shift) return Range{r.space, r.begin - shift, r.end - shift};
      if (r.end + shift <= bytes) return Range{r.space, r.begin + shift, r.end + shift};
      return r;
    }
    const std::uint64_t b = r.begin >= len ? r.begin - len : 0;  // spanning neighbours
    return Range{r.space, b, std::min(bytes, r.end + len + rng() % (4 * max_len))};
  };

  std::vector<Event> got, want;
  std::size_t exact_ops = 0;
  for (int step = 0; step < steps; ++step) {
    got.clear();
    want.clear();
    const std::uint64_t op = rng() % 1000;
    const Range r = pick_range();
    if (seen.size() < 4096) {
      seen.push_back(r);
    } else {
      seen[rng() % seen.size()] = r;
    }
    const auto slot = static_cast<TaskSlot>(rng() % slots);
    const auto log = [](std::vector<Event>& to) {
      return std::pair{[&to](TaskSlot p) {
                         to.push_back({'w', p, 0});
                       },
                       [&to](const TensorReader& rd) {
                         to.push_back({'r', rd.slot, rd.gen});
                       }};
    };
    if (op < 350) {  // a writer (Hazards::All)
      auto [gw, gr] = log(got);
      auto [ww, wr] = log(want);
      m.insert(r.space, r.begin, r.end, slot, gw, gr);
      oracle.insert(r.space, r.begin, r.end, slot, ww, wr);
      outputs[slot].push_back(r);
    } else if (op < 400) {  // a writer without write-after-read tracking
      m.insert(r.space, r.begin, r.end, slot);
      oracle.insert(r.space, r.begin, r.end, slot);
      outputs[slot].push_back(r);
    } else if (op < 700) {  // a reader
      const TensorReader rd{slot, gen[slot]};
      auto [gw, gr] = log(got);
      auto [ww, wr] = log(want);
      m.add_reader(r.space, r.begin, r.end, rd, gw, live);
      oracle.add_reader(r.space, r.begin, r.end, rd, ww, live);
    } else if (op < 750) {
      m.lookup(r.space, r.begin, r.end, [&](TaskSlot p) { got.push_back({'p', p, 0}); });
      oracle.lookup(r.space, r.begin, r.end, [&](TaskSlot p) { want.push_back({'p', p, 0}); });
    } else if (op < 800) {
      m.lookup_overlaps(r.space, r.begin, r.end, [&](TaskSlot p, std::uint64_t n) {
        got.push_back({'o', p, n});
      });
      oracle.lookup_overlaps(r.space, r.begin, r.end, [&](TaskSlot p, std::uint64_t n) {
        want.push_back({'o', p, n});
      });
    } else if (op < 850) {  // erase_owned of any range (usually not what the slot wrote)
      m.erase_owned(r.space, r.begin, r.end, slot);
      oracle.erase_owned(r.space, r.begin, r.end, slot);
    } else if (op < 990) {  // a task retires: its outputs go, its reader entries go stale
      for (const Range& o : outputs[slot]) {
        m.erase_owned(o.space, o.begin, o.end, slot);
        oracle.erase_owned(o.space, o.begin, o.end, slot);
      }
      outputs[slot].clear();
      ++gen[slot];
    } else if (op < 997) {
      m.sweep(live);
      oracle.sweep(live);
    } else if (op < 999) {  // every task retires (the end of a run)
      for (TaskSlot t = 0; t < slots; ++t) {
        for (const Range& o : outputs[t]) {
          m.erase_owned(o.space, o.begin, o.end, t);
          oracle.erase_owned(o.space, o.begin, o.end, t);
        }
        outputs[t].clear();
        ++gen[t];
      }
    } else {
      m.clear();
      oracle.clear();
    }
    if (got.size() == 1 || op >= 850) ++exact_ops;
    INFO("seed " << seed << " step " << step << " op " << op << " space " << r.space << " ["
                 << r.begin << ", " << r.end << ") slot " << slot);
    REQUIRE(got == want);
    REQUIRE(m.size() == oracle.size());
    REQUIRE(m.writerless_made() == oracle.writerless_made());
    if (step % full_every == 0 || step + 1 == steps) REQUIRE(segments_of(m) == segments_of(oracle));
  }
  CHECK(exact_ops > 0);
}

}  // namespace

TEST_CASE("a tensor map reports what the ordered-map implementation reports, in dense memory",
          "[tensor-map]") {
  // A few KiB: ranges overlap, split and merge all the time.
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    run_differential(seed, 4096, 160, 20'000 / kTensorMapRandomScale, 1, 64);
  }
}

TEST_CASE("a tensor map reports what the ordered-map implementation reports, in sparse memory",
          "[tensor-map]") {
  // Thousands of mostly disjoint ranges: the exact-range paths, and enough erased ranges that
  // their holes are dropped in bulk.
  for (std::uint64_t seed = 11; seed <= 13; ++seed)
    run_differential(seed, 1U << 24, 4096, 200'000, 997, 64);
  // Many tasks, each writing several ranges before it retires: thousands retire at once.
  run_differential(21, 1U << 26, 4096, 100'000, 9973, 4096);
}

TEST_CASE("ranges erased in bulk leave nothing behind and can be written again", "[tensor-map]") {
  // Each erased range is kept as a hole until holes outnumber the segments: check that
  // dropping them in bulk loses no segment and that their ranges read and write as new ones.
  TensorMap m;
  simpler::legacy::LegacyTensorMap oracle;
  constexpr std::uint64_t kRanges = 5000;
  const auto same = [&] {
    REQUIRE(m.size() == oracle.size());
    REQUIRE(m.writerless_made() == oracle.writerless_made());
    REQUIRE(segments_of(m) == segments_of(oracle));
  };
  for (int round = 0; round < 3; ++round) {
    for (std::uint64_t i = 0; i < kRanges; ++i) {
      m.insert(0, i * 64, i * 64 + 48, static_cast<TaskSlot>(i));
      oracle.insert(0, i * 64, i * 64 + 48, static_cast<TaskSlot>(i));
    }
    same();
    // Keep every tenth: the erased ones become holes, dropped once they outnumber these.
    for (std::uint64_t i = 0; i < kRanges; ++i) {
      if (i % 10 == 0) continue;
      m.erase_owned(0, i * 64, i * 64 + 48, static_cast<TaskSlot>(i));
      oracle.erase_owned(0, i * 64, i * 64 + 48, static_cast<TaskSlot>(i));
    }
    same();
    CHECK(m.size() == kRanges / 10);
    // Reads of erased, kept and straddling ranges.
    const auto never = [](const simpler::detail::TensorReader&) { return false; };
    for (std::uint64_t i = 0; i < kRanges; i += 7) {
      const std::uint64_t b = i * 64 + (i % 3 == 0 ? 0 : 40);
      const std::uint64_t e = i % 3 == 0 ? b + 48 : b + 100;
      Producers got, want;
      m.add_reader(
          0, b, e, {static_cast<TaskSlot>(i), 0}, [&](TaskSlot p) { got.push_back(p); }, never);
      oracle.add_reader(
          0, b, e, {static_cast<TaskSlot>(i), 0}, [&](TaskSlot p) { want.push_back(p); }, never);
      REQUIRE(got == want);
    }
    same();
    for (std::uint64_t i = 0; i < kRanges; ++i) {
      m.erase_owned(0, i * 64, i * 64 + 48, static_cast<TaskSlot>(i));
      oracle.erase_owned(0, i * 64, i * 64 + 48, static_cast<TaskSlot>(i));
    }
    same();
    m.sweep(never);
    oracle.sweep(never);
    same();
    CHECK(m.size() == 0);
  }
}

TEST_CASE("holes past their limit go a bounded walk at a time, never the newest", "[tensor-map]") {
  TensorMap m;
  constexpr std::uint64_t kLive = 2000;
  for (std::uint64_t i = 0; i < kLive; ++i) m.insert(0, i * 64, i * 64 + 32, TaskSlot(1));
  // New ranges in the gaps (a byte each, never the same twice), each erased at once: every one
  // becomes a hole.
  const std::size_t limit = 1024 + kLive / 4;
  std::size_t drops = 0;
  std::size_t dropped = 0;
  std::size_t most = 0;
  std::size_t prev = 0;
  for (std::uint64_t i = 0; i < 20 * limit; ++i) {
    const std::uint64_t b = (i % kLive) * 64 + 32 + i / kLive;
    m.insert(0, b, b + 1, TaskSlot(2));
    m.erase_owned(0, b, b + 1, TaskSlot(2));
    REQUIRE(m.size() == kLive);
    most = std::max(most, m.holes());
    // Bounded: past the limit by at most one hole per walk it takes to go round the map.
    REQUIRE(m.holes() <= limit + (kLive + limit) / 64 + 1);
    if (m.holes() <= prev) {
      // A walk dropped holes: a bounded number (it visits 64 entries), and not the one just
      // made, which writing its range again revives in place.
      ++drops;
      dropped += prev + 1 - m.holes();
      REQUIRE(prev >= limit);
      REQUIRE(prev + 1 - m.holes() <= 64);
      const std::size_t before = m.holes();
      m.insert(0, b, b + 1, TaskSlot(3));
      CHECK(m.holes() == before - 1);
      Producers got;
      m.lookup(0, b, b + 1, [&](TaskSlot p) { got.push_back(p); });
      CHECK(got == Producers{3});
      m.erase_owned(0, b, b + 1, TaskSlot(3));
      REQUIRE(m.holes() == before);
    } else {
      REQUIRE(m.holes() == prev + 1);
    }
    prev = m.holes();
  }
  CHECK(most >= limit);  // holes are kept up to the limit
  CHECK(drops > 10);
  CHECK(dropped > 15 * limit);  // every hole made past the limit went again
  // What was dropped is gone from both indexes: every live segment is found exactly.
  for (std::uint64_t i = 0; i < kLive; ++i) {
    Producers got;
    m.lookup(0, i * 64, i * 64 + 64, [&](TaskSlot p) { got.push_back(p); });
    REQUIRE(got == Producers{1});
  }
  std::size_t segs = 0;
  m.for_each_segment([&](auto...) { ++segs; });
  CHECK(segs == kLive);
  // A sweep drops the rest.
  m.sweep([](const simpler::detail::TensorReader&) { return false; });
  CHECK(m.holes() == 0);
  CHECK(m.size() == kLive);
}

TEST_CASE("a tensor map of 200k segments keeps them in huge-page blocks and finds each",
          "[tensor-map][big-alloc]") {
  // At this size the hash index and the segment and tree-node pools are big_alloc blocks: every
  // segment must still be found by an exact and by an overlapping lookup, and the blocks must
  // go when the map does.
  const std::size_t mapped = simpler::detail::big_bytes_mapped();
  {
    TensorMap m;
    constexpr std::uint64_t kSegs = 200'000;
    std::vector<std::uint64_t> order(kSegs);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(3));
    for (std::uint64_t i : order) m.insert(0, i * 128, i * 128 + 64, static_cast<TaskSlot>(i));
    REQUIRE(m.size() == kSegs);
    CHECK(simpler::detail::big_bytes_mapped() > mapped);
    for (std::uint64_t i = 0; i < kSegs; ++i) {
      const auto want = static_cast<TaskSlot>(i);
      REQUIRE(lookup(m, 0, i * 128, i * 128 + 64) == Producers{want});
      REQUIRE(lookup(m, 0, i * 128 + 8, i * 128 + 16) == Producers{want});  // the ordered walk
    }
    // Erase every other one, then read across pairs: only the kept writers are found.
    for (std::uint64_t i = 0; i < kSegs; i += 2)
      m.erase_owned(0, i * 128, i * 128 + 64, static_cast<TaskSlot>(i));
    REQUIRE(m.size() == kSegs / 2);
    for (std::uint64_t i = 0; i + 1 < kSegs; i += 2)
      REQUIRE(lookup(m, 0, i * 128, (i + 1) * 128 + 64) == Producers{static_cast<TaskSlot>(i + 1)});
    m.clear();
    CHECK(m.size() == 0);
    CHECK(lookup(m, 0, 0, kSegs * 128).empty());
  }
  CHECK(simpler::detail::big_bytes_mapped() == mapped);
}

namespace {

// The forked child of the out-of-memory test below; its exit code says what went wrong.
int out_of_memory_child() {
  TensorMap m;
  // 140k segments in random order, then 80k of them erased again (and their holes swept): the
  // pools keep the records and tree nodes for them, and the hash index shrinks to 2^18 slots
  // (at the second sweep: a sweep fits the index to the peak since the sweep before).
  // Re-inserting them then needs new memory only when the index grows, past 2^17 segments.
  constexpr std::uint64_t kAll = 140'000;
  constexpr std::uint64_t kBack = 80'000;
  std::vector<std::uint64_t> order(kAll);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(5));
  for (std::uint64_t i : order) m.insert(0, i * 128, i * 128 + 64, static_cast<TaskSlot>(i));
  for (std::uint64_t k = kAll - kBack; k < kAll; ++k) {
    const std::uint64_t i = order[k];
    m.erase_owned(0, i * 128, i * 128 + 64, static_cast<TaskSlot>(i));
  }
  m.sweep([](const simpler::detail::TensorReader&) { return true; });
  m.sweep([](const simpler::detail::TensorReader&) { return true; });
  if (m.size() != kAll - kBack) return 10;

  // No new address space from here on (a little for the stack and small allocations).
  std::uint64_t pages = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  if (pages == 0) return 11;
  const rlimit lim{pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) + (1U << 20U),
                   RLIM_INFINITY};
  if (::setrlimit(RLIMIT_AS, &lim) != 0) return 12;

  // Writes until one fails: it must leave no trace, and everything before it must be there.
  std::size_t added = 0;
  std::uint64_t failed = kAll;
  for (std::uint64_t k = kAll - kBack; k < kAll; ++k) {
    const std::uint64_t i = order[k];
    try {
      m.insert(0, i * 128, i * 128 + 64, static_cast<TaskSlot>(i));
    } catch (const std::bad_alloc&) {
      failed = i;
      break;
    }
    ++added;
  }
  if (failed == kAll) return 13;  // the index never had to grow: the test tests nothing
  if (m.size() != kAll - kBack + added) return 14;
  if (!lookup(m, 0, failed * 128, failed * 128 + 64).empty()) return 15;
  for (std::uint64_t k = 0; k < kAll - kBack + added; ++k) {
    const std::uint64_t i = order[k];
    if (lookup(m, 0, i * 128, i * 128 + 64) != Producers{static_cast<TaskSlot>(i)}) return 16;
  }
  // Erasing everything never throws, though the index cannot shrink without memory.
  try {
    for (std::uint64_t k = 0; k < kAll - kBack + added; ++k) {
      const std::uint64_t i = order[k];
      m.erase_owned(0, i * 128, i * 128 + 64, static_cast<TaskSlot>(i));
    }
    m.sweep([](const simpler::detail::TensorReader&) { return true; });
  } catch (...) {
    return 17;
  }
  if (m.size() != 0 || !lookup(m, 0, 0, kAll * 128).empty()) return 18;
  return 0;
}

}  // namespace

TEST_CASE("a tensor map out of memory loses no segment, and its erasures never throw",
          "[tensor-map][big-alloc]") {
  // In a forked child, whose address space is then capped (RLIMIT_AS) at what it holds.
  std::fflush(nullptr);  // nothing buffered here is written twice
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(out_of_memory_child());
  const simpler::testing::ChildExit exit =
      simpler::testing::wait_child(pid, std::chrono::seconds(60));
  // An index missing a segment once made an erasure spin forever (the deadline ends that);
  // out_of_memory_child exits 0 when everything it checks held.
  INFO("the child " << exit.describe());
  CHECK(exit.exited_with(0));
}

}  // namespace simpler_test_tensor_map
