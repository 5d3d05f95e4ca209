// Tests for the detail containers: SmallVec (inline-storage vector), RingBuffer (FIFO),
// OrderedIndex (B+ tree) and the RecordPool and huge-page blocks (big_alloc, BigArray) under it,
// and ReadyRing (the Orchestrator's bounded hand-off to the scheduler).
#include <catch2/catch.hpp>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "simpler/detail/asymmetric_fence.hpp"
#include "simpler/detail/big_array.hpp"
#include "simpler/detail/event_count.hpp"
#include "simpler/detail/ordered_index.hpp"
#include "simpler/detail/ready_ring.hpp"
#include "simpler/detail/ring_buffer.hpp"
#include "simpler/detail/slot.hpp"
#include "simpler/detail/small_vec.hpp"
#include "support/child_wait.hpp"
#include "support/gate.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_containers {

using simpler::detail::big_bytes_mapped;
using simpler::detail::BigArray;
using simpler::detail::kHugePage;
using simpler::detail::OrderedIndex;
using simpler::detail::ReadyRecord;
using simpler::detail::ReadyRing;
using simpler::detail::RecordPool;
using simpler::detail::RingBuffer;
using simpler::detail::SmallVec;

namespace {

// True when v's elements live inside the SmallVec object itself (inline storage).
template <class V>
bool is_inline(const V& v) {
  const auto obj = reinterpret_cast<std::uintptr_t>(&v);
  const auto p = reinterpret_cast<std::uintptr_t>(v.data());
  return p >= obj && p < obj + sizeof(V);
}

template <class V>
std::vector<int> contents(const V& v) {
  return std::vector<int>(v.begin(), v.end());
}

std::vector<int> iota(int n, int base = 0) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(base + i);
  return out;
}

template <std::size_t N>
SmallVec<int, N> filled(int n, int base = 0) {
  SmallVec<int, N> v;
  for (int i = 0; i < n; ++i) v.push_back(base + i);
  return v;
}

struct alignas(32) Wide {
  std::uint64_t a;
  std::uint64_t b;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// SmallVec
// ---------------------------------------------------------------------------------------------

TEST_CASE("a default SmallVec is empty with its inline capacity", "[containers]") {
  const SmallVec<int, 4> v;
  CHECK(v.empty());
  CHECK(v.size() == 0);
  CHECK(v.capacity() == 4);
  CHECK(v.begin() == v.end());
  CHECK(is_inline(v));
}

TEST_CASE("a SmallVec stays inline up to N and keeps its values when it spills", "[containers]") {
  SmallVec<int, 4> v;
  for (int i = 0; i < 4; ++i) v.push_back(i * 10);
  CHECK(is_inline(v));
  CHECK(v.capacity() == 4);
  v.push_back(40);
  CHECK_FALSE(is_inline(v));
  CHECK(v.capacity() >= 5);
  for (int i = 5; i < 100; ++i) v.push_back(i * 10);
  REQUIRE(v.size() == 100);
  CHECK(v.capacity() >= 100);
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(v[i] == static_cast<int>(i) * 10);
  CHECK(v.back() == 990);
  v.pop_back();
  CHECK(v.size() == 99);
  CHECK(v.back() == 980);
}

TEST_CASE("a SmallVec of an over-aligned type keeps its alignment inline and spilled",
          "[containers]") {
  SmallVec<Wide, 2> v;
  v.push_back(Wide{1, 2});
  CHECK(reinterpret_cast<std::uintptr_t>(v.data()) % 32 == 0);
  for (std::uint64_t i = 1; i < 9; ++i) v.push_back(Wide{i * 3, i * 5});
  CHECK(reinterpret_cast<std::uintptr_t>(v.data()) % 32 == 0);
  CHECK(v[0].a == 1);
  CHECK(v[0].b == 2);
  CHECK(v[8].a == 24);
  CHECK(v[8].b == 40);
}

TEST_CASE("copying a SmallVec copies its elements, inline and spilled", "[containers]") {
  for (int n : {0, 3, 4, 5, 17}) {
    INFO(n << " elements");
    const auto src = filled<4>(n);
    SmallVec<int, 4> copy(src);
    CHECK(contents(copy) == iota(n));
    if (n > 0) CHECK(copy.data() != src.data());
    copy.push_back(-1);  // independent of the source
    CHECK(contents(src) == iota(n));
  }
}

TEST_CASE("copy-assigning a SmallVec replaces the contents", "[containers]") {
  for (int from : {0, 2, 6, 20}) {
    for (int to : {0, 3, 9}) {
      INFO("assign " << from << " elements over " << to);
      const auto src = filled<4>(from, 100);
      auto dst = filled<4>(to, 500);
      dst = src;
      CHECK(contents(dst) == iota(from, 100));
      CHECK(contents(src) == iota(from, 100));
    }
  }
}

TEST_CASE("self-assigning a SmallVec keeps its contents", "[containers]") {
  auto inline_v = filled<4>(3);
  const auto& inline_alias = inline_v;
  inline_v = inline_alias;
  CHECK(contents(inline_v) == iota(3));

  auto heap_v = filled<4>(12);
  const auto& heap_alias = heap_v;
  heap_v = heap_alias;
  CHECK(contents(heap_v) == iota(12));

  auto& move_alias = heap_v;
  heap_v = std::move(move_alias);
  CHECK(contents(heap_v) == iota(12));
}

TEST_CASE("moving a SmallVec transfers its elements, inline and spilled", "[containers]") {
  for (int n : {0, 4, 5, 30}) {
    INFO(n << " elements");
    auto src = filled<4>(n);
    const int* heap_data = n > 4 ? src.data() : nullptr;
    SmallVec<int, 4> moved(std::move(src));
    CHECK(contents(moved) == iota(n));
    if (heap_data != nullptr) CHECK(moved.data() == heap_data);  // spilled storage is stolen
    // A moved-from SmallVec is empty, owns no heap storage (its capacity is the inline one)
    // and is reusable past that capacity.
    CHECK(src.empty());
    CHECK(is_inline(src));
    CHECK(src.capacity() == 4);
    for (int i = 0; i < 9; ++i) src.push_back(70 + i);
    CHECK(contents(src) == iota(9, 70));
    CHECK(contents(moved) == iota(n));
  }
}

TEST_CASE("move-assigning a SmallVec replaces the contents", "[containers]") {
  for (int from : {0, 3, 8}) {
    for (int to : {0, 2, 11}) {
      INFO("move " << from << " elements over " << to);
      auto src = filled<4>(from, 100);
      auto dst = filled<4>(to, 500);
      dst = std::move(src);
      CHECK(contents(dst) == iota(from, 100));
      src.clear();  // a moved-from SmallVec is reusable
      src.push_back(1);
      src.push_back(2);
      CHECK(contents(src) == (std::vector<int>{1, 2}));
      CHECK(contents(dst) == iota(from, 100));
    }
  }
}

TEST_CASE("pushing an element of a full SmallVec onto itself copies it before growing",
          "[containers]") {
  auto v = filled<4>(4, 11);  // full inline
  REQUIRE(v.size() == v.capacity());
  v.push_back(v[0]);
  CHECK(contents(v) == (std::vector<int>{11, 12, 13, 14, 11}));

  while (v.size() < v.capacity()) v.push_back(static_cast<int>(v.size()));
  const std::size_t full = v.size();  // full on the heap
  v.push_back(v[2]);
  REQUIRE(v.size() == full + 1);
  CHECK(v[full] == 13);
  v.push_back(v.back());
  CHECK(v[full + 1] == 13);
}

TEST_CASE("resize_uninit grows and shrinks the size and keeps existing elements", "[containers]") {
  auto v = filled<4>(3);
  v.resize_uninit(20);
  REQUIRE(v.size() == 20);
  CHECK(v.capacity() >= 20);
  CHECK(v[0] == 0);
  CHECK(v[1] == 1);
  CHECK(v[2] == 2);
  for (std::size_t i = 3; i < 20; ++i) v[i] = static_cast<int>(i);
  CHECK(contents(v) == iota(20));
  const std::size_t cap = v.capacity();
  v.resize_uninit(5);
  CHECK(v.size() == 5);
  CHECK(v.capacity() == cap);
  CHECK(contents(v) == iota(5));
  v.resize_uninit(0);
  CHECK(v.empty());
}

TEST_CASE("clear keeps a SmallVec's capacity and storage", "[containers]") {
  auto v = filled<4>(40);
  const std::size_t cap = v.capacity();
  const int* data = v.data();
  v.clear();
  CHECK(v.empty());
  CHECK(v.capacity() == cap);
  for (int i = 0; i < 40; ++i) v.push_back(i + 1);
  CHECK(v.data() == data);  // refilling to the old size did not reallocate
  CHECK(v.capacity() == cap);
  CHECK(contents(v) == iota(40, 1));
}

TEST_CASE("reserve and assign size a SmallVec as asked", "[containers]") {
  SmallVec<int, 4> v;
  v.reserve(2);
  CHECK(v.capacity() == 4);
  CHECK(is_inline(v));
  v.reserve(50);
  CHECK(v.capacity() >= 50);
  CHECK(v.empty());

  const std::vector<int> src = iota(33, 7);
  SmallVec<int, 4> w;
  w.assign(src.data(), src.size());
  CHECK(contents(w) == src);
  w.assign(src.data() + 30, 3);
  CHECK(contents(w) == (std::vector<int>{37, 38, 39}));
  w.assign(w.data() + 1, 2);  // from its own elements
  CHECK(contents(w) == (std::vector<int>{38, 39}));
}

TEST_CASE("a SmallVec without inline storage is a 16-byte header that grows on the heap",
          "[containers]") {
  static_assert(sizeof(SmallVec<Wide, 0>) == 16);
  static_assert(sizeof(SmallVec<int, 0>) == 16);
  SmallVec<int, 0> v;
  CHECK(v.empty());
  CHECK(v.capacity() == 0);
  CHECK(v.data() == nullptr);
  CHECK(v.begin() == v.end());
  for (int i = 0; i < 1000; ++i) v.push_back(i * 3);
  REQUIRE(v.size() == 1000);
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(v[i] == static_cast<int>(i) * 3);
  CHECK(v.back() == 2997);
  // A cleared (reused) one keeps its storage: refilling it up to that size allocates nothing.
  const int* storage = v.data();
  const std::size_t cap = v.capacity();
  v.clear();
  for (int i = 0; i < static_cast<int>(cap); ++i) v.push_back(-i);
  CHECK(v.data() == storage);
  v.resize_uninit(3);
  CHECK(contents(v) == std::vector<int>{0, -1, -2});
  v.pop_back();
  CHECK(contents(v) == std::vector<int>{0, -1});
  // Pushing its own element while full copies it first.
  SmallVec<int, 0> w;
  w.push_back(7);
  while (w.size() < w.capacity()) w.push_back(1);
  w.push_back(w[0]);
  CHECK(w.back() == 7);
}

TEST_CASE("a SmallVec without inline storage copies, moves and keeps alignment", "[containers]") {
  for (int n : {0, 1, 17}) {
    INFO(n << " elements");
    const auto src = filled<0>(n);
    SmallVec<int, 0> copy(src);
    CHECK(contents(copy) == iota(n));
    if (n > 0) CHECK(copy.data() != src.data());
    auto assigned = filled<0>(5, 900);
    assigned = src;
    CHECK(contents(assigned) == iota(n));
    const auto& alias = assigned;
    assigned = alias;
    CHECK(contents(assigned) == iota(n));

    auto from = filled<0>(n);
    const int* storage = from.data();
    SmallVec<int, 0> moved(std::move(from));
    CHECK(contents(moved) == iota(n));
    CHECK(moved.data() == storage);  // stolen, not copied
    CHECK(from.empty());
    CHECK(from.capacity() == 0);
    from.push_back(4);  // reusable
    CHECK(contents(from) == std::vector<int>{4});
    auto target = filled<0>(3, 50);
    target = std::move(moved);
    CHECK(contents(target) == iota(n));
    CHECK(moved.empty());
  }
  SmallVec<Wide, 0> wide;
  for (std::uint64_t i = 0; i < 9; ++i) wide.push_back(Wide{i, i * 2});
  CHECK(reinterpret_cast<std::uintptr_t>(wide.data()) % 32 == 0);
  CHECK(wide[8].b == 16);
  SmallVec<int, 0> sized;
  sized.assign(iota(40).data(), 40);
  CHECK(contents(sized) == iota(40));
  sized.reserve(100);
  CHECK(sized.capacity() >= 100);
  CHECK(contents(sized) == iota(40));
}

// ---------------------------------------------------------------------------------------------
// RingBuffer
// ---------------------------------------------------------------------------------------------

TEST_CASE("a RingBuffer pops values in the order they were pushed", "[containers]") {
  RingBuffer<int> q;
  CHECK(q.empty());
  CHECK(q.size() == 0);
  for (int i = 0; i < 5; ++i) q.push_back(i);
  CHECK(q.size() == 5);
  CHECK(q.front() == 0);
  CHECK(q[4] == 4);
  for (int i = 0; i < 5; ++i) CHECK(q.pop_front() == i);
  CHECK(q.empty());
}

TEST_CASE("push_front puts a value ahead of the queue", "[containers]") {
  RingBuffer<int> q;
  q.push_front(1);  // onto a buffer that has no storage yet
  CHECK(q.size() == 1);
  CHECK(q.front() == 1);
  q.push_back(2);
  q.push_back(3);
  q.push_front(0);
  CHECK(q.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(q.pop_front() == i);
  CHECK(q.empty());

  q.push_back(5);
  const int returned = q.pop_front();
  q.push_front(returned);  // the "could not place it yet" pattern
  CHECK(q.front() == 5);
  CHECK(q.size() == 1);
}

TEST_CASE("a RingBuffer that grows while wrapped keeps its order", "[containers]") {
  RingBuffer<int> q;
  int next = 0;
  int expect = 0;
  for (int i = 0; i < 16; ++i) q.push_back(next++);
  for (int i = 0; i < 10; ++i) CHECK(q.pop_front() == expect++);
  for (int i = 0; i < 10; ++i) q.push_back(next++);  // wraps around the 16-slot buffer
  REQUIRE(q.size() == 16);
  for (int i = 0; i < 40; ++i) q.push_back(next++);  // grows from a wrapped state, twice
  REQUIRE(q.size() == 56);
  for (std::size_t i = 0; i < q.size(); ++i) CHECK(q[i] == expect + static_cast<int>(i));
  while (!q.empty()) CHECK(q.pop_front() == expect++);
  CHECK(expect == next);
}

TEST_CASE("a RingBuffer that grows on push_front while wrapped keeps its order", "[containers]") {
  RingBuffer<int> q;
  for (int i = 0; i < 16; ++i) q.push_back(i);
  for (int i = 0; i < 6; ++i) q.pop_front();     // 6..15
  for (int i = 16; i < 22; ++i) q.push_back(i);  // 6..21, wrapped and full
  REQUIRE(q.size() == 16);
  for (int i = 5; i >= -10; --i) q.push_front(i);  // grows on the first push_front
  REQUIRE(q.size() == 32);
  for (int i = -10; i < 22; ++i) CHECK(q.pop_front() == i);
  CHECK(q.empty());
}

TEST_CASE("a RingBuffer with an initial capacity and clear behaves like a fresh one",
          "[containers]") {
  RingBuffer<std::uint64_t> q(100);
  CHECK(q.empty());
  for (std::uint64_t i = 0; i < 300; ++i) q.push_back(i * 7);
  CHECK(q.size() == 300);
  CHECK(q[299] == 299 * 7);
  q.clear();
  CHECK(q.empty());
  q.push_back(42);
  q.push_front(41);
  CHECK(q.pop_front() == 41);
  CHECK(q.pop_front() == 42);
  CHECK(q.empty());
}

TEST_CASE("a RingBuffer matches std::deque over random pushes and pops", "[containers]") {
  std::mt19937_64 rng(20240917);
  RingBuffer<std::uint32_t> q;
  std::deque<std::uint32_t> ref;
  std::uint32_t next = 0;
  std::size_t max_size = 0;
  for (int step = 0; step < 50000; ++step) {
    const auto op = rng() % 100;
    // Drift the size up and down so the buffer grows, wraps and drains repeatedly.
    const bool growing = (step / 5000) % 2 == 0;
    if (op < (growing ? 45u : 30u)) {
      q.push_back(next);
      ref.push_back(next);
      ++next;
    } else if (op < (growing ? 60u : 40u)) {
      q.push_front(next);
      ref.push_front(next);
      ++next;
    } else if (!ref.empty()) {
      REQUIRE(q.front() == ref.front());
      REQUIRE(q.pop_front() == ref.front());
      ref.pop_front();
    }
    REQUIRE(q.size() == ref.size());
    REQUIRE(q.empty() == ref.empty());
    if (!ref.empty()) REQUIRE(q.front() == ref.front());
    if (step % 997 == 0) {
      for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(q[i] == ref[i]);
    }
    max_size = std::max(max_size, ref.size());
  }
  CHECK(max_size > 64);
  while (!ref.empty()) {
    REQUIRE(q.pop_front() == ref.front());
    ref.pop_front();
  }
  CHECK(q.empty());
}

namespace {

// Checks every way of reading an OrderedIndex against the std::map holding the same entries:
// forward and backward walks, and lower_bound / find of present, absent and outside keys.
template <class Index>
void check_same(const Index& ix, const std::map<std::uint64_t, std::uint64_t>& ref,
                std::mt19937_64& rng) {
  REQUIRE(ix.size() == ref.size());
  REQUIRE(ix.empty() == ref.empty());
  auto it = ix.begin();
  for (const auto& [k, v] : ref) {
    REQUIRE(it != ix.end());
    REQUIRE(it.key() == k);
    REQUIRE(it.value() == v);
    ++it;
  }
  REQUIRE(it == ix.end());
  auto back = ix.end();
  for (auto r = ref.rbegin(); r != ref.rend(); ++r) {
    REQUIRE(ix.prev(back));
    REQUIRE(back.key() == r->first);
  }
  REQUIRE_FALSE(ix.prev(back));
  for (int i = 0; i < 64; ++i) {
    const std::uint64_t k = rng() % 5000;
    const auto want = ref.lower_bound(k);
    const auto got = ix.lower_bound(k);
    if (want == ref.end()) {
      REQUIRE(got == ix.end());
    } else {
      REQUIRE(got != ix.end());
      REQUIRE(got.key() == want->first);
    }
    REQUIRE((ix.find(k) != ix.end()) == ref.contains(k));
  }
}

template <class Index>
void random_against_map(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Index ix;
  std::map<std::uint64_t, std::uint64_t> ref;
  // lower_bound of keys at and just past `k`, the last key inserted or erased: where the
  // index looks first (the leaf of its last insert), inside it, past it and in the next leaf.
  const auto check_near = [&](std::uint64_t k) {
    for (const std::uint64_t q : {k, k + 1, k + 1 + rng() % 16, k + 1 + rng() % 256}) {
      const auto want = ref.lower_bound(q);
      const auto got = ix.lower_bound(q);
      INFO("lower_bound(" << q << ") after a change at " << k);
      if (want == ref.end()) {
        REQUIRE(got == ix.end());
      } else {
        REQUIRE(got != ix.end());
        REQUIRE(got.key() == want->first);
      }
    }
  };
  // Phases: grow to ~2000 keys, shrink to a few, grow again, empty completely; clustered and
  // scattered keys, so leaves split, empty out and merge at both ends and in the middle.
  const int phases[] = {3000, -2900, 2500, -100000, 500};
  for (int phase : phases) {
    const bool grow = phase > 0;
    const int steps = grow ? phase : -phase;
    for (int s = 0; s < steps; ++s) {
      if (grow || rng() % 8 == 0) {
        const std::uint64_t k = rng() % 4 == 0 ? rng() % 5000 : (s * 7) % 5000;
        if (ref.contains(k)) continue;
        const std::uint64_t v = rng();
        // Plain; near an entry that may or may not be next to the key (any place is valid);
        // before the entry after it; after the entry before it.
        auto it = ix.end();
        switch (s % 4) {
          case 0:
            it = ix.insert(k, v);
            break;
          case 1:
            it = ix.insert(ix.lower_bound(rng() % 5000), k, v);
            break;
          case 2:
            it = ix.insert_before(ix.lower_bound(k), k, v);
            break;
          default: {
            auto before = ix.lower_bound(k);
            it = ix.prev(before) ? ix.insert_after(before, k, v)
                                 : ix.insert_before(ix.lower_bound(k), k, v);
          }
        }
        REQUIRE(it.key() == k);
        REQUIRE(it.value() == v);
        ref.emplace(k, v);
        auto next = ref.upper_bound(k);
        ++it;
        if (next == ref.end()) {
          REQUIRE(it == ix.end());
        } else {
          REQUIRE(it.key() == next->first);
        }
        check_near(k);
      } else {
        if (ref.empty()) break;
        auto r = ref.lower_bound(rng() % 5000);
        if (r == ref.end()) r = ref.begin();
        auto it = ix.find(r->first);
        REQUIRE(it != ix.end());
        REQUIRE(it.key() == r->first);
        REQUIRE(ix.find(5000 + rng() % 10) == ix.end());
        const std::uint64_t gone = r->first;
        r = ref.erase(r);
        it = ix.erase(it);
        if (r == ref.end()) {
          REQUIRE(it == ix.end());
        } else {
          REQUIRE(it != ix.end());
          REQUIRE(it.key() == r->first);
        }
        check_near(gone);
      }
      if (s % 97 == 0) check_same(ix, ref, rng);
    }
    check_same(ix, ref, rng);
  }
  // Cleared with entries in it, then refilled from the pooled nodes (which still hold their
  // old keys until reused).
  for (int s = 0; s < 1500; ++s) {
    const std::uint64_t k = rng() % 5000;
    if (ref.emplace(k, s).second) ix.insert(k, static_cast<std::uint64_t>(s));
  }
  ix.clear();
  ref.clear();
  check_same(ix, ref, rng);
  REQUIRE(ix.find(17) == ix.end());
  for (int s = 0; s < 2000; ++s) {
    const std::uint64_t k = rng() % 5000;
    if (ref.emplace(k, s).second) ix.insert(k, static_cast<std::uint64_t>(s));
  }
  check_same(ix, ref, rng);
}

}  // namespace

TEST_CASE("an OrderedIndex matches std::map over random inserts and erasures", "[containers]") {
  // Small nodes make a deep tree: every split, merge and root change happens many times.
  for (std::uint64_t seed = 1; seed <= 6; ++seed)
    random_against_map<OrderedIndex<std::uint64_t, std::uint64_t, 8, 3>>(seed);
  random_against_map<OrderedIndex<std::uint64_t, std::uint64_t>>(7);
}

namespace {

// A key whose default constructor throws once a countdown runs out: the tree's pools make their
// nodes' keys that way (RecordPool::grow), so a failing node allocation can be injected
// anywhere in a split. Trivially copyable, as OrderedIndex requires.
struct FragileKey {
  std::uint64_t v = 0;
  static inline int countdown = -1;  // default constructions left before one throws; < 0: never
  FragileKey() {
    if (countdown >= 0 && countdown-- == 0) throw std::bad_alloc();
  }
  FragileKey(std::uint64_t x) : v(x) {}  // NOLINT(google-explicit-constructor): keys as numbers
  operator std::uint64_t() const noexcept { return v; }  // NOLINT(google-explicit-constructor)
  bool operator<(const FragileKey& o) const noexcept { return v < o.v; }
};
static_assert(std::is_trivially_copyable_v<FragileKey>);

}  // namespace

TEST_CASE("an OrderedIndex insert whose split cannot get a node throws and changes nothing",
          "[containers]") {
  // Small nodes: a deep tree whose inserts split leaves and inner nodes up to a new root often,
  // so failures land with a leaf taken but no inner node, halfway up, and at the root.
  using Index = OrderedIndex<FragileKey, std::uint64_t, 8, 3>;
  std::mt19937_64 rng(41);
  int failures = 0;
  struct Disarm {
    ~Disarm() { FragileKey::countdown = -1; }
  } disarm;
  for (int round = 0; round < 200; ++round) {
    // A fresh index each round, so its pools grow (a chunk of nodes at a time) all along and the
    // countdown runs out in a leaf's chunk or in an inner node's, wherever the split then is.
    Index ix;
    std::map<std::uint64_t, std::uint64_t> ref;
    FragileKey::countdown = static_cast<int>(rng() % 4000);
    for (int s = 0; s < 3000; ++s) {
      const std::uint64_t k = rng() % 100'000;
      if (ref.contains(k)) continue;
      bool threw = false;
      try {
        ix.insert(FragileKey(k), k * 3);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      if (threw) {
        ++failures;
        FragileKey::countdown = -1;
        check_same(ix, ref, rng);  // the key is absent and everything else is intact
        break;
      }
      ref.emplace(k, k * 3);
    }
    FragileKey::countdown = -1;
    // The index goes on working: more inserts and some erasures.
    for (int s = 0; s < 500; ++s) {
      const std::uint64_t k = rng() % 100'000;
      if (!ref.contains(k)) {
        ix.insert(FragileKey(k), k * 3);
        ref.emplace(k, k * 3);
      }
      if (s % 3 == 0) {
        auto r = ref.lower_bound(rng() % 100'000);
        if (r == ref.end()) r = ref.begin();
        ix.erase(ix.find(FragileKey(r->first)));
        ref.erase(r);
      }
    }
    check_same(ix, ref, rng);
  }
  CHECK(failures >= 100);
}

TEST_CASE("an OrderedIndex filled in key order leaves its leaves full", "[containers]") {
  // Keys that only grow (tensors allocated in address order): each append to a full last leaf
  // starts a new one instead of splitting it in half, whichever insert is used.
  OrderedIndex<std::uint64_t, std::uint64_t, 8, 3> a;
  OrderedIndex<std::uint64_t, std::uint64_t, 8, 3> b;
  for (std::uint64_t k = 0; k < 2000; k += 2) {
    a.insert(k, k);
    const auto it = b.insert_before(b.lower_bound(k), k, k);  // lower_bound: end()
    REQUIRE(it.key() == k);
  }
  CHECK(a.leaf_count() == 125);
  CHECK(b.leaf_count() == 125);
  REQUIRE(b.lower_bound(1998).key() == 1998);
  REQUIRE(b.lower_bound(1999) == b.end());
  // Keys between them still go where they belong: into the full leaves, which split.
  std::uint64_t added = 0;
  for (std::uint64_t k = 1; k < 2000; k += 14, ++added) {
    const auto it = b.insert_before(b.lower_bound(k), k, k);
    REQUIRE(it.key() == k);
  }
  REQUIRE(b.size() == 1000 + added);
  std::uint64_t n = 0;
  std::uint64_t last = 0;
  for (auto it = b.begin(); it != b.end(); ++it, ++n) {
    if (n > 0) REQUIRE(last < it.key());
    last = it.key();
    REQUIRE(it.value() == it.key());
    REQUIRE(b.find(it.key()) == it);
  }
  REQUIRE(n == b.size());
}

TEST_CASE("an OrderedIndex erased in walks keeps what follows and empties fully", "[containers]") {
  OrderedIndex<std::uint64_t, std::uint64_t, 8, 3> ix;
  for (std::uint64_t k = 0; k < 1000; ++k) ix.insert(k * 2, k);
  // Erase every other entry in one walk: each erase returns the entry after it.
  std::uint64_t seen = 0;
  for (auto it = ix.begin(); it != ix.end(); ++seen) {
    REQUIRE(it.key() == seen * 2);
    if (seen % 2 == 0) {
      it = ix.erase(it);
    } else {
      ++it;
    }
  }
  REQUIRE(seen == 1000);
  REQUIRE(ix.size() == 500);
  REQUIRE(ix.begin().key() == 2);
  // Then everything, walking from the back.
  auto it = ix.end();
  while (ix.prev(it)) {
    it = ix.erase(it);
    REQUIRE(it == ix.end());
    it = ix.end();
  }
  REQUIRE(ix.empty());
  REQUIRE(ix.begin() == ix.end());
  REQUIRE(ix.leaf_count() == 1);
}

TEST_CASE("an OrderedIndex erase_if drops what its predicate picks and keeps the rest in order",
          "[containers]") {
  // Small nodes: the walk meets merges, emptied leaves and a shrinking root.
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    OrderedIndex<std::uint64_t, std::uint64_t, 8, 3> ix;
    std::map<std::uint64_t, std::uint64_t> model;
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 3000; ++i) {
      const std::uint64_t k = rng() % 100000;
      if (model.emplace(k, k * 3).second) ix.insert(k, k * 3);
    }
    // Drop a random share: none, some, most, then all.
    for (const unsigned keep_one_in : {1U, 4U, 3U, 7U, 0U}) {
      std::size_t ahead_calls = 0;
      const std::size_t before = model.size();
      std::uint64_t last_visited = 0;
      std::size_t visited = 0;
      const auto drop = [&](const std::uint64_t& k, const std::uint64_t& v) {
        REQUIRE(v == k * 3);
        if (visited++ != 0) REQUIRE(last_visited < k);  // in key order, each entry once
        last_visited = k;
        return keep_one_in == 0 || (k / 5) % keep_one_in != 0;
      };
      const auto ahead = [&](const std::uint64_t& k, const std::uint64_t& v) {
        REQUIRE(model.count(k) == 1);  // only entries there are (the model is not erased yet)
        REQUIRE(v == k * 3);
        ++ahead_calls;
      };
      if (keep_one_in % 2 == 1) {
        // In one walk.
        REQUIRE(ix.erase_if(ix.begin(), SIZE_MAX, drop, ahead) == ix.end());
      } else {
        // In walks of 5 entries, each going on where the last stopped.
        std::size_t walks = 0;
        for (auto it = ix.begin(); it != ix.end(); ++walks) {
          const std::size_t before_walk = visited;
          it = ix.erase_if(it, 5, drop, ahead);
          if (it != ix.end()) REQUIRE(visited - before_walk == 5);
        }
        CHECK(walks == (before + 4) / 5);
      }
      REQUIRE(visited == before);
      // More than one leaf: the hook heard of the leaves ahead of the walk.
      if (before > 8) CHECK(ahead_calls > 0);
      std::erase_if(model, [&](const auto& kv) {
        return keep_one_in == 0 || (kv.first / 5) % keep_one_in != 0;
      });
      check_same(ix, model, rng);
    }
    REQUIRE(ix.empty());
    REQUIRE(ix.leaf_count() == 1);
    // Still usable after emptying in a walk.
    for (std::uint64_t k = 0; k < 100; ++k) ix.insert(k, k);
    REQUIRE(ix.size() == 100);
  }
}

TEST_CASE("an OrderedIndex thinned out merges its sparse leaves", "[containers]") {
  OrderedIndex<std::uint64_t, std::uint64_t, 32, 8> ix;
  std::mt19937_64 rng(11);
  std::vector<std::uint64_t> keys(20000);
  std::iota(keys.begin(), keys.end(), 0);
  std::shuffle(keys.begin(), keys.end(), rng);
  for (std::uint64_t k : keys) ix.insert(k, k);
  const std::size_t full = ix.leaf_count();
  CHECK(full <= 20000 / 16 + 1);  // splits leave leaves at least half full
  // Keep one key in 16: without merging every leaf would stay, each holding one or two.
  for (std::uint64_t k : keys) {
    if (k % 16 != 0) ix.erase(ix.find(k));
  }
  REQUIRE(ix.size() == 20000 / 16);
  CHECK(ix.leaf_count() * 4 <= full);
}

// ---------------------------------------------------------------------------------------------
// big_alloc, BigArray, RecordPool
// ---------------------------------------------------------------------------------------------

TEST_CASE("big_alloc hands out zeroed blocks, huge-page aligned and counted from 2 MiB up",
          "[containers][big-alloc]") {
  const std::size_t before = big_bytes_mapped();
  {
    // Below a huge page: ordinary memory, aligned to a cache line, not counted.
    void* small = simpler::detail::big_alloc(1000);
    CHECK(reinterpret_cast<std::uintptr_t>(small) % 64 == 0);
    const auto* b = static_cast<const unsigned char*>(small);
    CHECK(std::all_of(b, b + 1000, [](unsigned char c) { return c == 0; }));
    CHECK(big_bytes_mapped() == before);
    simpler::detail::big_free(small, 1000);
  }
  // 2 MiB and more: mapped on a 2 MiB boundary, rounded up to whole huge pages.
  const std::size_t bytes = kHugePage + 4096;
  void* big = simpler::detail::big_alloc(bytes);
  CHECK(reinterpret_cast<std::uintptr_t>(big) % kHugePage == 0);
  CHECK(big_bytes_mapped() == before + 2 * kHugePage);
  auto* b = static_cast<unsigned char*>(big);
  CHECK(std::all_of(b, b + bytes, [](unsigned char c) { return c == 0; }));
  b[bytes - 1] = 7;  // all of it is writable
  simpler::detail::big_free(big, bytes);
  CHECK(big_bytes_mapped() == before);
}

TEST_CASE("a BigArray starts zeroed and moves its block", "[containers][big-alloc]") {
  struct Pair {
    std::uint64_t a;
    void* p;
  };
  const std::size_t before = big_bytes_mapped();
  const std::size_t n = kHugePage / sizeof(Pair) * 2;  // two huge pages
  BigArray<Pair> a(n);
  REQUIRE(a.size() == n);
  CHECK(big_bytes_mapped() == before + 2 * kHugePage);
  bool zero = true;
  for (std::size_t i = 0; i < n; ++i) zero = zero && a[i].a == 0 && a[i].p == nullptr;
  CHECK(zero);
  a[n - 1].a = 42;
  BigArray<Pair> b(std::move(a));
  CHECK(a.empty());  // NOLINT(bugprone-use-after-move): a moved-from BigArray is empty
  CHECK(b[n - 1].a == 42);
  BigArray<Pair> c(16);  // small: ordinary memory
  c = std::move(b);      // frees c's block, takes b's
  CHECK(c.size() == n);
  CHECK(c[n - 1].a == 42);
  c = BigArray<Pair>();
  CHECK(c.empty());
  CHECK(big_bytes_mapped() == before);
}

TEST_CASE("big_alloc and BigArray refuse sizes that cannot be mapped, and leak nothing",
          "[containers][big-alloc]") {
  const std::size_t before = big_bytes_mapped();
  // Rounding up to whole huge pages, plus the page mapped on top for alignment, would wrap.
  CHECK_THROWS_AS(simpler::detail::big_alloc(SIZE_MAX), std::bad_alloc);
  CHECK_THROWS_AS(simpler::detail::big_alloc(SIZE_MAX - kHugePage), std::bad_alloc);
  // Representable but far more than the address space: mmap refuses it.
  CHECK_THROWS_AS(simpler::detail::big_alloc(std::size_t{1} << 62U), std::bad_alloc);
  // n * sizeof(T) would wrap to a small block that the array would then overrun.
  struct Pair {
    std::uint64_t a, b;
  };
  CHECK_THROWS_AS(BigArray<Pair>(SIZE_MAX / sizeof(Pair) + 2), std::bad_alloc);
  CHECK_THROWS_AS(BigArray<Pair>((SIZE_MAX / 2) / sizeof(Pair)), std::bad_alloc);
  CHECK(big_bytes_mapped() == before);
}

namespace {

// A pooled record that counts its constructions and destructions.
struct PoolRec {
  static inline int alive = 0;
  PoolRec() { ++alive; }
  PoolRec(const PoolRec&) = delete;
  PoolRec& operator=(const PoolRec&) = delete;
  ~PoolRec() { --alive; }
  std::uint64_t payload[9] = {};
};

}  // namespace

TEST_CASE("a RecordPool hands out distinct records, reuses them, and frees them once",
          "[containers][big-alloc]") {
  const std::size_t mapped = big_bytes_mapped();
  PoolRec::alive = 0;
  {
    RecordPool<PoolRec> pool;
    // Enough records for several chunks of a huge page's worth (a chunk is a quarter of the
    // records made so far: huge from four huge pages' worth on).
    const std::size_t n = 8 * (kHugePage / sizeof(PoolRec));
    std::vector<PoolRec*> got;
    std::set<PoolRec*> distinct;
    for (std::size_t i = 0; i < n; ++i) {
      PoolRec* r = pool.get();
      r->payload[0] = i;
      got.push_back(r);
      distinct.insert(r);
    }
    CHECK(distinct.size() == n);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i]->payload[0] == i);  // none overlap
    // Every record was made once, in chunks; the largest ones are huge-page blocks.
    const int made = PoolRec::alive;
    CHECK(made >= static_cast<int>(n));
    CHECK(made <= static_cast<int>(n + n / 4));  // at most a quarter unused
    CHECK(big_bytes_mapped() >= mapped + 2 * kHugePage);
    // Put back and taken again: the same records, nothing new made or mapped.
    const std::size_t mapped_full = big_bytes_mapped();
    for (PoolRec* r : got) pool.put(r);
    std::set<PoolRec*> again;
    for (std::size_t i = 0; i < n; ++i) again.insert(pool.get());
    CHECK(again == distinct);
    CHECK(PoolRec::alive == made);
    CHECK(big_bytes_mapped() == mapped_full);
  }
  CHECK(PoolRec::alive == 0);  // destroyed once each with the pool
  CHECK(big_bytes_mapped() == mapped);
}

// ---------------------------------------------------------------------------------------------
// ReadyRing
// ---------------------------------------------------------------------------------------------
namespace {

ReadyRecord record(std::uint32_t i) {
  return {i, static_cast<simpler::WorkerId>(i % 3) - 1,
          i % 2 == 0 ? simpler::detail::Role::Sub : simpler::detail::Role::NextLevel,
          i % 2 == 0 ? simpler::CallableKind::Sub : simpler::CallableKind::Chip};
}

std::vector<std::uint32_t> drained(ReadyRing& r) {
  std::vector<std::uint32_t> out;
  r.drain([&](const ReadyRecord& x) {
    CHECK(x.target == record(x.slot).target);
    CHECK(x.role == record(x.slot).role);
    CHECK(x.kind == record(x.slot).kind);
    out.push_back(x.slot);
  });
  return out;
}

}  // namespace

TEST_CASE("a ReadyRing hands records over in push order, with their fields", "[containers]") {
  auto r = std::make_unique<ReadyRing>();
  CHECK(r->empty());
  for (std::uint32_t i = 0; i < 10; ++i) REQUIRE(r->push(record(i), false));
  CHECK_FALSE(r->empty());
  CHECK(drained(*r) == std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(r->empty());
  CHECK(drained(*r).empty());
}

TEST_CASE("a full ReadyRing refuses a push until a drain frees its places, and wraps",
          "[containers]") {
  auto r = std::make_unique<ReadyRing>();
  std::uint32_t next = 0;
  std::uint32_t expect = 0;
  for (int round = 0; round < 3; ++round) {  // 3 fills: the positions wrap twice
    while (r->push(record(next), false)) ++next;
    CHECK(next - expect == ReadyRing::kCapacity);
    CHECK_FALSE(r->push(record(next), false));  // still full: refused again, nothing overwritten
    const auto got = drained(*r);
    REQUIRE(got.size() == ReadyRing::kCapacity);
    for (std::uint32_t v : got) CHECK(v == expect++);
  }
  // Part-full: only the free places are taken.
  for (std::uint32_t i = 0; i < 10; ++i) REQUIRE(r->push(record(next++), false));
  CHECK(drained(*r).size() == 10);
}

TEST_CASE("a drain that throws hands out the record it was on only once", "[containers]") {
  auto r = std::make_unique<ReadyRing>();
  for (std::uint32_t i = 0; i < 5; ++i) REQUIRE(r->push(record(i), false));
  std::vector<std::uint32_t> seen;
  CHECK_THROWS_AS(r->drain([&](const ReadyRecord& x) {
    seen.push_back(x.slot);
    if (x.slot == 2) throw std::runtime_error("out of memory");
  }),
                  std::runtime_error);
  CHECK(seen == std::vector<std::uint32_t>{0, 1, 2});
  CHECK(drained(*r) == std::vector<std::uint32_t>{3, 4});
}

TEST_CASE("a ReadyRing passes every record once from one producer thread to a consumer thread",
          "[containers]") {
  // Light pushes (a release store) publish the records as the seq_cst ones do.
  const bool light = GENERATE(false, true);
  auto r = std::make_unique<ReadyRing>();
  constexpr std::uint32_t kCount = 200'000;
  std::vector<std::uint32_t> got;
  got.reserve(kCount);
  std::thread consumer([&] {
    while (got.size() < kCount) {
      r->drain([&](const ReadyRecord& x) { got.push_back(x.slot); });
      std::this_thread::yield();
    }
  });
  std::uint64_t refused = 0;
  for (std::uint32_t i = 0; i < kCount;) {
    if (r->push(record(i), light)) {
      ++i;
    } else {
      ++refused;
      std::this_thread::yield();
    }
  }
  consumer.join();
  INFO("pushes refused while full: " << refused);
  REQUIRE(got.size() == kCount);
  std::uint32_t first_wrong = 0;  // the first position not holding its own index
  while (first_wrong < kCount && got[first_wrong] == first_wrong) ++first_wrong;
  CHECK(first_wrong == kCount);
  CHECK(r->empty());
}

// ------------------------------------------------------------------------------------------
// EventCount
// ------------------------------------------------------------------------------------------

TEST_CASE(
    "EventCount::await_for returns at once when the condition holds, and times out when it "
    "never does",
    "[containers][event-count]") {
  simpler::detail::EventCount ev;
  int calls = 0;
  CHECK(ev.await_for(
      [&] {
        ++calls;
        return true;
      },
      std::chrono::microseconds(50), std::chrono::seconds(10)));
  CHECK(calls == 1);  // no spin and no sleep once it holds
  CHECK_FALSE(ev.has_waiters());

  // Never true: the spin ends, then the sleep ends at its deadline (a timeout, not a hang), and
  // the waiter is unregistered again. Both with and without a spin first.
  for (const auto spin : {std::chrono::nanoseconds(0), std::chrono::nanoseconds(20'000)}) {
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_FALSE(ev.await_for([] { return false; }, spin, std::chrono::milliseconds(20)));
    CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(20));
    CHECK_FALSE(ev.has_waiters());
  }

  // A timeout of zero: the predicate is asked once by the (empty) spin and once after the
  // registration, never a third time (an idle lane passing through here must not re-check its
  // rings once more for nothing).
  calls = 0;
  CHECK_FALSE(ev.await_for(
      [&] {
        ++calls;
        return false;
      },
      std::chrono::nanoseconds(0), std::chrono::nanoseconds(0)));
  CHECK(calls == 2);
  CHECK_FALSE(ev.has_waiters());
}

TEST_CASE("EventCount loses no wake-up between two threads that only sleep",
          "[containers][event-count]") {
  // Ping-pong with no spin, so every hand-off goes through the registration and the re-check. A
  // lost wake-up leaves one side asleep until its deadline (the wait then sees the ball and
  // returns true), so a wait that took close to the deadline counts as a miss; the first miss
  // ends the test. Asymmetric: the throws are release stores with only a light fence; a throw the
  // sleeper's check missed must still end its sleep (the first nap, then the heavy fence).
  const bool asymmetric = GENERATE(false, true);
  if (asymmetric) REQUIRE(simpler::detail::heavy_fence_available());
  simpler::detail::EventCount to_b(false, asymmetric);
  simpler::detail::EventCount to_a(false, asymmetric);
  std::atomic<std::uint32_t> ball{0};  // odd: b's turn, even: a's
  const auto throw_ball = [&](std::uint32_t v) {
    if (asymmetric) {
      ball.store(v, std::memory_order_release);
      simpler::detail::light_fence();
    } else {
      ball.store(v, std::memory_order_seq_cst);
    }
  };
  std::atomic<bool> missed{false};
  constexpr std::uint32_t kRounds = 2000;
  constexpr auto kDeadline = std::chrono::milliseconds(2000);
  // Waits on `ev` for the ball to reach `want`; on a miss, wakes the other side (waiting on
  // `other`) so it ends too.
  const auto wait_for_ball = [&](simpler::detail::EventCount& ev,
                                 simpler::detail::EventCount& other, std::uint32_t want) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool got =
        ev.await_for([&] { return ball.load(std::memory_order_seq_cst) == want || missed.load(); },
                     std::chrono::nanoseconds(0), kDeadline);
    if (!got || std::chrono::steady_clock::now() - t0 >= kDeadline) {
      missed.store(true);
      other.notify_all();
    }
    return !missed.load();
  };
  std::thread b([&] {
    for (std::uint32_t i = 0; i < kRounds && wait_for_ball(to_b, to_a, 2 * i + 1); ++i) {
      throw_ball(2 * i + 2);
      to_a.notify_all();
    }
  });
  for (std::uint32_t i = 0; i < kRounds; ++i) {
    throw_ball(2 * i + 1);
    to_b.notify_all();
    if (!wait_for_ball(to_a, to_b, 2 * i + 2)) break;
  }
  b.join();
  CHECK_FALSE(missed.load());
  CHECK(ball.load() == 2 * kRounds);
}

// AwakeThreads: the count spin_until asks whether every awake engine thread has a core. A thread
// counts its weight while it runs and none of it while it sleeps in EventCount::await; however the
// sleep ends (an in-process notify, whose notifier counts the woken thread at once; a shared
// EventCount's notify; a timeout), the count comes back to what it was, so it cannot drift.
TEST_CASE("AwakeThreads counts a member's weight except while it sleeps, and never drifts",
          "[containers][event-count]") {
  using simpler::detail::AwakeThreads;
  enum class End { Notify, SharedNotify, Timeout };
  const End end = GENERATE(End::Notify, End::SharedNotify, End::Timeout);
  CAPTURE(static_cast<int>(end));
  simpler::detail::EventCount ev(end == End::SharedNotify);
  std::atomic<bool> go{false};
  const int before = AwakeThreads::count();
  constexpr int kWeight = 3;
  std::atomic<int> inside{0};     // the count seen by the member before it sleeps
  std::atomic<int> woke{0};       // and right after its wait returned
  std::atomic<int> own{0};        // its own weight while a member
  std::atomic<int> own_after{0};  // and after
  std::thread t([&] {
    {
      const AwakeThreads::Member member(kWeight);
      own = AwakeThreads::own_weight();
      inside = AwakeThreads::count();
      const auto timeout =
          end == End::Timeout ? std::chrono::milliseconds(50) : std::chrono::milliseconds(10'000);
      const bool got = ev.await_for([&] { return go.load(std::memory_order_seq_cst); },
                                    std::chrono::nanoseconds(0), timeout);
      woke = AwakeThreads::count();
      CHECK(got == (end != End::Timeout));
    }
    own_after = AwakeThreads::own_weight();
  });
  if (end != End::Timeout) {
    // Asleep: registered, and its whole weight off the count.
    CHECK(simpler::testing::eventually(
        [&] { return ev.has_waiters() && AwakeThreads::count() == before; }));
    go.store(true, std::memory_order_seq_cst);
    ev.notify_all();
  }
  t.join();
  CHECK(own == kWeight);
  CHECK(own_after == 1);
  CHECK(inside == before + kWeight);
  // Its weight is back once its wait returns, but for the 1 an in-process notifier adds for it
  // right after futex_wake returns, which the woken thread may beat.
  if (end == End::Notify) {
    CHECK(woke >= before + kWeight - 1);
    CHECK(woke <= before + kWeight);
  } else {
    CHECK(woke == before + kWeight);
  }
  CHECK(AwakeThreads::count() == before);
}

TEST_CASE("AwakeThreads is crowded while its members outnumber the cores",
          "[containers][event-count]") {
  using simpler::detail::AwakeThreads;
  REQUIRE(AwakeThreads::cores() >= 1);
  const bool crowded_before = AwakeThreads::crowded();
  CHECK(crowded_before == (AwakeThreads::count() > AwakeThreads::cores()));
  {
    const AwakeThreads::Member crowd(AwakeThreads::kCrowd);
    CHECK(AwakeThreads::crowded());
  }
  CHECK(AwakeThreads::crowded() == crowded_before);
}

// Both ways of spinning end when the condition turns true on another thread, and end at their
// budget when it never does (the polling-on way reads the clock every round; the yielding way
// every 4 yields).
TEST_CASE("spin_until returns once its condition holds and gives up at its budget, crowded or not",
          "[containers][event-count]") {
  using simpler::detail::AwakeThreads;
  using simpler::detail::EventCount;
  const bool crowd = GENERATE(false, true);
  const EventCount::Yield yield = GENERATE(EventCount::Yield::Adaptive, EventCount::Yield::Early);
  CAPTURE(crowd, static_cast<int>(yield));
  std::optional<AwakeThreads::Member> crowding;
  if (crowd) crowding.emplace(AwakeThreads::kCrowd);

  std::atomic<bool> flag{false};
  const auto ready = [&] { return flag.load(std::memory_order_seq_cst); };
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    flag.store(true, std::memory_order_seq_cst);
  });
  CHECK(EventCount::spin_until(ready, std::chrono::seconds(30), yield));
  setter.join();

  const auto never = [] { return false; };
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(EventCount::spin_until(never, std::chrono::milliseconds(5), yield));
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= std::chrono::milliseconds(5));
  CHECK(took < std::chrono::seconds(5));  // a bound, not a timing: a lost budget spins forever
}

// Makes every membarrier(2) call of this process fail with EPERM from now on (seccomp: no way
// back). Only in a forked child. The filter looks at the call's ABI first: a syscall number
// names membarrier only in this build's own ABI (a 32-bit call on x86-64 numbers differently).
namespace {
#if defined(__x86_64__)
constexpr std::uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr std::uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
#error "refuse_membarrier: add this architecture's AUDIT_ARCH_ constant"
#endif
bool refuse_membarrier() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),  // another ABI: its numbers mean other calls
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_membarrier, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}
}  // namespace

// When the kernel refuses the heavy fence, an asymmetric sleeper cannot rely on its check after
// registering, so it never sleeps longer than a short nap: a publish it did not see (here one with
// no notify at all) is taken within milliseconds, never at the deadline. The sleeper is a forked
// child whose membarrier calls fail; the publisher is this process, through a shared page. Both
// kinds: in-process (heavy_fence) and shared (global_heavy_fence, a ForkShmTransport child's).
TEST_CASE("an asymmetric EventCount whose heavy fence fails still takes a publish within a nap",
          "[containers][fence]") {
  const bool shared = GENERATE(false, true);
  CAPTURE(shared);
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(page != MAP_FAILED);
  auto* flag = new (page) std::atomic<std::uint32_t>(0);
  auto* waiting = new (flag + 1) std::atomic<std::uint32_t>(0);  // the child is about to wait
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Exit codes: 0 taken within 2 s; 2 no seccomp; 3 the fence still worked; 4 taken late or
    // not at all.
    simpler::detail::EventCount ev(shared, true);
    if (!refuse_membarrier()) ::_exit(2);
    if (shared ? simpler::detail::global_heavy_fence() : simpler::detail::heavy_fence()) {
      ::_exit(3);
    }
    waiting->store(1, std::memory_order_release);
    const auto t0 = std::chrono::steady_clock::now();
    const bool got = ev.await_for([&] { return flag->load(std::memory_order_acquire) == 1; },
                                  std::chrono::nanoseconds(0), std::chrono::seconds(10));
    ::_exit(got && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2) ? 0 : 4);
  }
  // Once the child is about to wait, it registers and sleeps well before this store (else the
  // test would pass without testing); nothing wakes it.
  const bool child_waits = simpler::testing::eventually([&] { return waiting->load() == 1; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  flag->store(1, std::memory_order_release);
  const simpler::testing::ChildExit exit =
      simpler::testing::wait_child(pid, std::chrono::seconds(20));
  ::munmap(page, 4096);
  CHECK(child_waits);
  INFO("the child " << exit.describe());
  CHECK(exit.exited_with(0));
}

// The store-buffering litmus test: each side stores its flag, then loads the other's. One side
// has only a compiler fence; the other's heavy fence must make the two never both read the old
// value. (With a compiler fence on both sides, x86 shows that outcome within a few thousand
// rounds: the store waits in the store buffer while the load completes.) In-process the light
// side is a thread and the fence heavy_fence(); across processes (ForkShmTransport's sends) it is
// a forked child that registered itself as a light publisher, and the fence global_heavy_fence().
namespace {
struct Litmus {
  static constexpr std::uint32_t kRounds = 20'000;
  std::atomic<std::uint32_t> x{0};
  std::atomic<std::uint32_t> y{0};
  std::atomic<std::uint32_t> go{0};    // the round both may start
  std::atomic<std::uint32_t> done{0};  // rounds the light side finished
  std::atomic<bool> stuck{false};
  std::uint32_t light_saw[kRounds] = {};
  std::uint32_t heavy_saw[kRounds] = {};

  // eventually() (support/gate.hpp) with a yield only every 256 polls: a yield per poll keeps
  // the two sides from ever running their rounds at the same time, and the test from testing.
  template <class Pred>
  bool until(const Pred& pred) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (std::uint32_t n = 0; !pred(); ++n) {
      if ((n & 255U) == 255U) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::yield();
      }
    }
    return true;
  }
  void light_side() {
    for (std::uint32_t r = 1; r <= kRounds; ++r) {
      if (!until([&] { return go.load(std::memory_order_acquire) >= r || stuck.load(); })) {
        stuck.store(true);
      }
      if (stuck.load()) return;
      x.store(r, std::memory_order_release);
      simpler::detail::light_fence();
      light_saw[r - 1] = y.load(std::memory_order_relaxed);
      done.store(r, std::memory_order_release);
    }
  }
  /// The heavy side's rounds; returns how many fences the kernel refused.
  template <class Fence>
  std::uint32_t heavy_side(const Fence& fence) {
    std::uint32_t failed = 0;
    for (std::uint32_t r = 1; r <= kRounds && !stuck.load(); ++r) {
      go.store(r, std::memory_order_release);
      // The light side sees `go` about a cross-core hop later: a delay that varies over that
      // range makes the two sides' stores and loads overlap in some rounds.
      for (std::uint32_t spin = (r * 37U) % 512U; spin != 0; --spin) asm volatile("");
      y.store(r, std::memory_order_seq_cst);
      if (!fence()) ++failed;
      heavy_saw[r - 1] = x.load(std::memory_order_relaxed);
      if (!until([&] { return done.load(std::memory_order_acquire) >= r || stuck.load(); })) {
        stuck.store(true);
      }
    }
    return failed;
  }
  /// Rounds where neither side saw the other's store of that round.
  [[nodiscard]] std::uint32_t both_old() const {
    std::uint32_t n = 0;
    for (std::uint32_t r = 1; r <= kRounds; ++r) n += light_saw[r - 1] < r && heavy_saw[r - 1] < r;
    return n;
  }
};
}  // namespace

TEST_CASE("a heavy fence orders a light side's store before its load", "[containers][fence]") {
  const bool across = GENERATE(false, true);
  CAPTURE(across);
  // Shared memory in both cases, so that the forked light side writes where this process reads.
  void* mem =
      ::mmap(nullptr, sizeof(Litmus), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  auto* t = new (mem) Litmus();
  std::uint32_t failed_fences = 0;
  if (!across) {
    REQUIRE(simpler::detail::heavy_fence_available());
    std::thread light([t] { t->light_side(); });
    failed_fences = t->heavy_side([] { return simpler::detail::heavy_fence(); });
    light.join();
  } else {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // Exit codes: 0 done; 2 the kernel would not register this process.
      if (!simpler::detail::register_global_light_publisher()) ::_exit(2);
      t->light_side();
      ::_exit(0);
    }
    failed_fences = t->heavy_side([] { return simpler::detail::global_heavy_fence(); });
    t->stuck.store(true);  // a child still waiting for a round ends (and one that failed did)
    const simpler::testing::ChildExit exit =
        simpler::testing::wait_child(pid, std::chrono::seconds(20));
    INFO("the light side's child " << exit.describe());
    CHECK(exit.exited_with(0));
  }
  const bool stuck = t->stuck.load() && t->done.load() != Litmus::kRounds;
  const std::uint32_t both_old = t->both_old();
  t->~Litmus();
  ::munmap(mem, sizeof(Litmus));
  REQUIRE_FALSE(stuck);
  CHECK(failed_fences == 0);
  CHECK(both_old == 0);
}

// ---- SlotPool: the free list's order

using simpler::TaskSlot;

namespace {

/// The ids of the next n slots alloc() hands out (they stay allocated).
std::vector<TaskSlot> take(simpler::detail::SlotPool& pool, std::size_t n) {
  std::vector<TaskSlot> ids;
  for (std::size_t i = 0; i < n; ++i) ids.push_back(pool.alloc().id);
  return ids;
}

std::vector<TaskSlot> ascending(std::size_t n) {
  std::vector<TaskSlot> ids(n);
  std::iota(ids.begin(), ids.end(), TaskSlot{0});
  return ids;
}

}  // namespace

TEST_CASE("a fresh SlotPool hands out slots in id order", "[containers][slots]") {
  simpler::detail::SlotPool pool;
  CHECK(take(pool, 300) == ascending(300));
}

TEST_CASE("a SlotPool scattered by frees out of order is put back in id order once all are free",
          "[containers][slots]") {
  simpler::detail::SlotPool pool;
  const std::vector<TaskSlot> first = take(pool, 1024);
  REQUIRE(first == ascending(1024));
  std::vector<TaskSlot> order = first;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  // All but one go back out of order: with a slot live, the order is left alone.
  for (std::size_t i = 0; i + 1 < order.size(); ++i) pool.free(pool.at(order[i]));
  pool.restore_order();
  const std::vector<TaskSlot> mid = take(pool, 8);
  CHECK(mid != ascending(8));
  for (const TaskSlot id : mid) pool.free(pool.at(id));
  pool.free(pool.at(order.back()));
  REQUIRE(pool.live() == 0);
  pool.restore_order();
  CHECK(take(pool, 1024) == ascending(1024));
  CHECK(pool.capacity() == 1024);
}

TEST_CASE("a SlotPool freed in id order keeps its list as it is", "[containers][slots]") {
  simpler::detail::SlotPool pool;
  const std::vector<TaskSlot> ids = take(pool, 512);
  // Freed in id order, the list hands the same slots out again from the last one down (a LIFO
  // of neighbours: no jump, no restore).
  for (const TaskSlot id : ids) pool.free(pool.at(id));
  pool.restore_order();
  std::vector<TaskSlot> down(ids.rbegin(), ids.rend());
  CHECK(take(pool, 512) == down);
}

}  // namespace simpler_test_containers
