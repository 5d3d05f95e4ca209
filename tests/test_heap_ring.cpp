// Tests for detail::HeapRing (FIFO-reclaimed bump allocator) and its shared mapping.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <vector>

#include "simpler/detail/heap_ring.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_heap_ring {

using simpler::detail::HeapRing;
using simpler::detail::kHeapAlign;

namespace {

constexpr std::size_t kSlab = 1024;

// A HeapRing over a shared mapping of `size` bytes, unmapped on scope exit.
class MappedRing {
 public:
  explicit MappedRing(std::size_t size)
      : size_(size), base_(simpler::detail::map_shared_region(size)), ring_(base_, size) {}
  ~MappedRing() { simpler::detail::unmap_region(base_, size_); }
  MappedRing(const MappedRing&) = delete;
  MappedRing& operator=(const MappedRing&) = delete;
  HeapRing& ring() noexcept { return ring_; }
  void* base() const noexcept { return base_; }

 private:
  std::size_t size_;
  void* base_;
  HeapRing ring_;
};

// Allocates `bytes` and requires success.
HeapRing::Allocation must_alloc(HeapRing& r, std::size_t bytes) {
  const std::optional<HeapRing::Allocation> a = r.try_alloc(bytes);
  REQUIRE(a.has_value());
  return *a;
}

}  // namespace

TEST_CASE("round_up rounds to a multiple of 1024", "[heap-ring]") {
  STATIC_REQUIRE(kHeapAlign == 1024);
  STATIC_REQUIRE(HeapRing::round_up(0) == 0);
  STATIC_REQUIRE(HeapRing::round_up(1) == 1024);
  STATIC_REQUIRE(HeapRing::round_up(1023) == 1024);
  STATIC_REQUIRE(HeapRing::round_up(1024) == 1024);
  STATIC_REQUIRE(HeapRing::round_up(1025) == 2048);
  STATIC_REQUIRE(HeapRing::round_up(5000) == 5120);
  STATIC_REQUIRE(HeapRing::round_up(std::size_t{1} << 40) == std::size_t{1} << 40);
}

TEST_CASE("a heap ring reports its base and size and starts empty", "[heap-ring]") {
  MappedRing m(8 * kSlab);
  HeapRing& r = m.ring();
  CHECK(static_cast<void*>(r.base()) == m.base());
  CHECK(r.size() == 8 * kSlab);
  CHECK(r.live_allocations() == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(r.base()) % kHeapAlign == 0);
  const HeapRing empty;
  CHECK(empty.base() == nullptr);
  CHECK(empty.size() == 0);
}

TEST_CASE("two 1024-byte allocations are adjacent and aligned", "[heap-ring]") {
  MappedRing m(8 * kSlab);
  HeapRing& r = m.ring();
  const auto a = must_alloc(r, kSlab);
  const auto b = must_alloc(r, kSlab);
  CHECK(a.offset == 0);
  CHECK(b.offset == a.offset + 1024);
  CHECK(a.offset % kHeapAlign == 0);
  CHECK(b.offset % kHeapAlign == 0);
  CHECK(b.seq == a.seq + 1);
  CHECK(reinterpret_cast<std::uintptr_t>(r.base() + b.offset) % kHeapAlign == 0);
  CHECK(r.live_allocations() == 2);
}

TEST_CASE("an allocation larger than the ring fails", "[heap-ring]") {
  MappedRing m(4 * kSlab);
  HeapRing& r = m.ring();
  CHECK_FALSE(r.try_alloc(5 * kSlab).has_value());
  CHECK(r.live_allocations() == 0);
  const auto whole = must_alloc(r, 4 * kSlab);  // exactly the ring still fits
  CHECK(whole.offset == 0);
  CHECK(whole.seq == 0);  // the failed attempt consumed no sequence number
}

TEST_CASE("a full heap ring reclaims only from its oldest allocation", "[heap-ring]") {
  MappedRing m(4 * kSlab);
  HeapRing& r = m.ring();
  HeapRing::Allocation s[4];
  for (std::size_t i = 0; i < 4; ++i) {
    s[i] = must_alloc(r, kSlab);
    CHECK(s[i].offset == i * kSlab);
  }
  CHECK_FALSE(r.try_alloc(kSlab).has_value());

  r.release(s[2].seq);  // not the oldest: nothing comes back
  CHECK(r.live_allocations() == 4);
  CHECK_FALSE(r.try_alloc(kSlab).has_value());

  r.release(s[0].seq);  // reclaims slab 0 only (slab 1 is still live)
  CHECK(r.live_allocations() == 3);
  r.release(s[1].seq);  // reclaims slabs 1 and 2
  CHECK(r.live_allocations() == 1);

  const auto again = must_alloc(r, kSlab);
  CHECK(again.offset == 0);  // wrapped to the start
}

TEST_CASE("after the first two slabs of a full ring are released the next alloc wraps to 0",
          "[heap-ring]") {
  MappedRing m(4 * kSlab);
  HeapRing& r = m.ring();
  HeapRing::Allocation s[4];
  for (auto& a : s) a = must_alloc(r, kSlab);
  r.release(s[0].seq);
  r.release(s[1].seq);
  CHECK(r.live_allocations() == 2);

  const auto w = must_alloc(r, 2 * kSlab);
  CHECK(w.offset == 0);
  // The ring is full again: top met the tail.
  CHECK_FALSE(r.try_alloc(kSlab).has_value());
}

TEST_CASE("a wrapped ring whose top meets its tail stays full", "[heap-ring]") {
  MappedRing m(4 * kSlab);
  HeapRing& r = m.ring();
  HeapRing::Allocation s[4];
  for (auto& a : s) a = must_alloc(r, kSlab);
  r.release(s[0].seq);
  r.release(s[1].seq);
  const auto w0 = must_alloc(r, kSlab);
  const auto w1 = must_alloc(r, kSlab);
  CHECK(w0.offset == 0);
  CHECK(w1.offset == kSlab);  // top == tail == 2048 now
  CHECK_FALSE(r.try_alloc(kSlab).has_value());
  CHECK_FALSE(r.try_alloc(2 * kSlab).has_value());
  CHECK(r.live_allocations() == 4);

  r.release(s[2].seq);  // frees [2048, 3072): room between top and the new tail
  const auto x = must_alloc(r, kSlab);
  CHECK(x.offset == 2 * kSlab);
  CHECK_FALSE(r.try_alloc(kSlab).has_value());
}

TEST_CASE("a ring that wraps does not hand out bytes of its oldest allocation", "[heap-ring]") {
  MappedRing m(4 * kSlab);
  HeapRing& r = m.ring();
  HeapRing::Allocation s[4];
  for (auto& a : s) a = must_alloc(r, kSlab);
  r.release(s[0].seq);  // free: [0, 1024); live: [1024, 4096)
  CHECK_FALSE(r.try_alloc(2 * kSlab).has_value());
  const auto w = must_alloc(r, kSlab);
  CHECK(w.offset == 0);
  CHECK_FALSE(r.try_alloc(kSlab).has_value());
}

TEST_CASE("a partly used ring skips the tail gap too small for the request", "[heap-ring]") {
  MappedRing m(4 * kSlab);
  HeapRing& r = m.ring();
  const auto a = must_alloc(r, kSlab);      // [0, 1024)
  const auto b = must_alloc(r, 2 * kSlab);  // [1024, 3072)
  r.release(a.seq);                         // live: [1024, 3072); free above 3072 is 1 slab
  const auto c = must_alloc(r, kSlab);      // fits above top
  CHECK(c.offset == 3 * kSlab);
  CHECK_FALSE(r.try_alloc(2 * kSlab).has_value());  // neither above top nor below tail
  const auto d = must_alloc(r, kSlab);              // wraps to [0, 1024)
  CHECK(d.offset == 0);
  (void)b;
}

TEST_CASE("releasing every allocation resets the ring to empty", "[heap-ring]") {
  MappedRing m(4 * kSlab);
  HeapRing& r = m.ring();
  const auto a = must_alloc(r, kSlab);
  const auto b = must_alloc(r, 2 * kSlab);
  CHECK(r.live_allocations() == 2);
  r.release(b.seq);  // out of order: b waits for a
  CHECK(r.live_allocations() == 2);
  r.release(a.seq);
  CHECK(r.live_allocations() == 0);

  const auto c = must_alloc(r, kSlab);
  CHECK(c.offset == 0);
  CHECK(c.seq == b.seq + 1);
  r.release(c.seq);
  const auto whole = must_alloc(r, 4 * kSlab);  // the whole ring is available again
  CHECK(whole.offset == 0);
}

TEST_CASE("live_allocations counts allocations not yet reclaimed", "[heap-ring]") {
  MappedRing m(16 * kSlab);
  HeapRing& r = m.ring();
  std::vector<HeapRing::Allocation> v;
  for (std::size_t i = 0; i < 10; ++i) {
    v.push_back(must_alloc(r, kSlab));
    CHECK(r.live_allocations() == i + 1);
  }
  for (std::size_t i = 0; i < 10; ++i) {
    r.release(v[i].seq);
    CHECK(r.live_allocations() == 9 - i);
  }
}

TEST_CASE("random allocations and releases never overlap and stay aligned inside the ring",
          "[heap-ring]") {
  constexpr std::size_t kSize = 64 * kSlab;
  MappedRing m(kSize);
  HeapRing& r = m.ring();
  std::mt19937_64 rng(0x5EED1234);

  struct Model {
    std::uint64_t seq;
    std::uint64_t begin;
    std::uint64_t end;
    bool released;
  };
  std::deque<Model> model;  // allocations not yet reclaimed, oldest first
  std::uint64_t next_seq = 0;
  std::size_t successes = 0;
  std::size_t failures = 0;
  std::size_t wraps = 0;

  for (int step = 0; step < 20000; ++step) {
    const bool do_alloc = model.empty() || rng() % 100 < 55;
    if (do_alloc) {
      const std::size_t bytes = HeapRing::round_up(1 + rng() % (9 * kSlab));
      const auto a = r.try_alloc(bytes);
      if (!a) {
        ++failures;
        // Only a ring holding something may refuse a request that fits its size.
        REQUIRE_FALSE(model.empty());
        continue;
      }
      ++successes;
      REQUIRE(a->seq == next_seq);
      ++next_seq;
      REQUIRE(a->offset % kHeapAlign == 0);
      REQUIRE(a->offset + bytes <= kSize);
      if (!model.empty() && a->offset < model.back().begin) ++wraps;
      for (const Model& live : model) {
        const bool overlap = a->offset < live.end && live.begin < a->offset + bytes;
        if (overlap) {
          FAIL("allocation [" << a->offset << ", " << a->offset + bytes
                              << ") overlaps unreclaimed [" << live.begin << ", " << live.end
                              << ") at step " << step);
        }
      }
      // Writing the whole allocation must be safe.
      std::memset(r.base() + a->offset, static_cast<int>(a->seq & 0xFF), bytes);
      r.set_owner(a->seq, static_cast<std::uint32_t>(a->seq * 7));
      model.push_back(Model{a->seq, a->offset, a->offset + bytes, false});
    } else {
      // Release a random not-yet-released allocation, biased towards the oldest ones.
      std::vector<std::size_t> candidates;
      for (std::size_t i = 0; i < model.size(); ++i) {
        if (!model[i].released) candidates.push_back(i);
      }
      if (candidates.empty()) continue;
      const std::size_t pick =
          rng() % 4 == 0 ? candidates[rng() % candidates.size()]
                         : candidates[rng() % std::min<std::size_t>(candidates.size(), 2)];
      model[pick].released = true;
      r.release(model[pick].seq);
      while (!model.empty() && model.front().released) model.pop_front();
    }
    REQUIRE(r.live_allocations() == model.size());
    // find() names the allocation holding a range, from anywhere in it, as the model does.
    if (!model.empty()) {
      const Model& pick = model[rng() % model.size()];
      const std::uint64_t at = pick.begin + rng() % (pick.end - pick.begin);
      std::uint32_t owner = 0;
      const auto got = r.find(at, 1 + rng() % (pick.end - at), owner);
      if (pick.released) {
        REQUIRE(got == HeapRing::Lookup::Released);
      } else {
        REQUIRE(got == HeapRing::Lookup::Live);
        REQUIRE(owner == static_cast<std::uint32_t>(pick.seq * 7));
      }
      // A range running past its allocation's end is held by no one allocation.
      REQUIRE(r.find(at, pick.end - at + 1, owner) == HeapRing::Lookup::None);
    }
    {
      const std::uint64_t at = rng() % kSize;
      const bool live = std::any_of(model.begin(), model.end(),
                                    [&](const Model& m) { return at >= m.begin && at < m.end; });
      std::uint32_t owner = 0;
      if (!live) REQUIRE(r.find(at, 1, owner) == HeapRing::Lookup::None);
    }
  }
  CHECK(successes > 1000);
  CHECK(failures > 0);
  CHECK(wraps > 10);
}

TEST_CASE("a shared region written by a forked child is visible to the parent", "[heap-ring]") {
  constexpr std::size_t kBytes = 64 * 1024;
  void* region = simpler::detail::map_shared_region(kBytes);
  REQUIRE(region != nullptr);
  auto* bytes = static_cast<unsigned char*>(region);
  std::memset(bytes, 0, kBytes);

  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (std::size_t i = 0; i < kBytes; i += 4096)
      bytes[i] = static_cast<unsigned char>(1 + i / 4096);
    bytes[kBytes - 1] = 0xEE;
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);

  bool all_seen = true;
  for (std::size_t i = 0; i < kBytes; i += 4096) {
    if (bytes[i] != static_cast<unsigned char>(1 + i / 4096)) all_seen = false;
  }
  CHECK(all_seen);
  CHECK(bytes[kBytes - 1] == 0xEE);
  CHECK(bytes[1] == 0);  // bytes the child did not touch are unchanged
  simpler::detail::unmap_region(region, kBytes);
}

}  // namespace simpler_test_heap_ring
