// Remote buffers on MPI ranks, what submit and the buffer calls refuse, and a rank passing from
// one rank-0 Worker to the next.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpi/mpi_app.hpp"
#include "support/matchers.hpp"

using namespace simpler;
using namespace simpler::testing;
using namespace simpler::testing::mpi_app;

namespace {

/// An L4 over the job's ranks, with "whoami" and a callable no rank serves.
struct OnRanks {
  Worker w{l4_options()};
  CallableHandle whoami = w.register_orch("whoami", served_remotely);
  CallableHandle not_served = w.register_orch("not_served_here", served_remotely);
  std::vector<WorkerId> ranks = w.add_mpi_workers(session());

  OnRanks() { w.init(); }
  /// Copies to and from `b` and its free (and, with `alloc`, an allocation on its rank) each
  /// throw UsageError naming `why`.
  void each_memory_call_is_refused(const RemoteBuffer& b, const std::string& why, bool alloc) {
    std::vector<std::int64_t> v(4);
    const std::vector<std::pair<const char*, std::function<void()>>> calls = {
        {"copy_to_remote", [&] { w.copy_to_remote(b, 0, v.data(), 32); }},
        {"copy_from_remote", [&] { w.copy_from_remote(b, 0, v.data(), 32); }},
        {"remote_free", [&] { w.remote_free(b); }},
        {"remote_alloc", [&] { w.remote_alloc(b.worker(), 64); }},
    };
    for (const auto& [api, call] : calls) {
      if (!alloc && std::string_view(api) == "remote_alloc") continue;
      INFO(api);
      CHECK_THROWS_MATCHES(call(), UsageError, WhatContains(why));
    }
  }
  /// Runs one task of `h` on `rank`.
  void run_one(const CallableHandle& h, TaskArgs a, WorkerId rank) {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(h, std::move(a), default_call_config(), rank);
    });
  }
};

/// `n` bytes no two chunks of which are alike.
std::vector<std::uint8_t> pattern(std::size_t n) {
  std::vector<std::uint8_t> out(n);
  std::uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (std::size_t i = 0; i < n; i += sizeof x) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out.data() + i, &x, std::min(sizeof x, n - i));
  }
  return out;
}

/// Over half of a rank's buffer pool: a second allocation this large fits only once the first
/// is freed.
std::size_t over_half_a_pool() {
  return static_cast<std::size_t>(session().options().buffer_pool_bytes / 2 + (1U << 20));
}

/// A new Worker attaches to both ranks afresh: the buffers of `old` (its predecessor's, over
/// half of each rank's pool) are gone there, so it allocates as much again; it cannot use them;
/// and it runs.
void a_new_worker_attaches_afresh(const std::vector<RemoteBuffer>& old) {
  OnRanks next;
  for (const WorkerId r : next.ranks) CHECK(next.w.remote_alloc(r, over_half_a_pool()).size() > 0);
  std::int64_t x = 0;
  CHECK_THROWS_MATCHES(next.w.copy_to_remote(old.at(0), 0, &x, sizeof x), UsageError,
                       WhatContains("allocated by another Worker or session"));
  const std::vector<RemoteBuffer> words = word_per_rank(next.w, next.ranks);
  next.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (std::size_t i = 0; i < 2; ++i) {
      o.submit_next_level(next.whoami, word_output(words[i]), default_call_config(), next.ranks[i]);
    }
  });
  CHECK(read_word(next.w, words[0]) == 1);
  CHECK(read_word(next.w, words[1]) == 2);
}

}  // namespace

TEST_CASE("a copy spanning several MPI messages round-trips exactly", "[buffers]") {
  OnRanks on;
  constexpr std::size_t kBig = std::size_t{150} << 20;
  static_assert(kBig > 2 * simpler::mpi::kChunkBytes);
  constexpr std::size_t kAt = 5;  // aligned to nothing
  const RemoteBuffer b = on.w.remote_alloc(on.ranks.at(1), kAt + kBig + 3);
  const std::vector<std::uint8_t> data = pattern(kBig);
  on.w.copy_to_remote(b, kAt, data.data(), kBig);
  std::vector<std::uint8_t> back(kBig, 0xEE);
  on.w.copy_from_remote(b, kAt, back.data(), kBig);
  // (Not CHECK(back == data): a failure would print 150 MiB.)
  const auto diff = std::mismatch(data.begin(), data.end(), back.begin());
  CHECK(static_cast<std::size_t>(diff.first - data.begin()) == kBig);
  // A range across the first chunk's end, read from an offset of its own.
  const std::size_t from = simpler::mpi::kChunkBytes - 1000;
  std::vector<std::uint8_t> part(std::size_t{1} << 20);
  on.w.copy_from_remote(b, kAt + from, part.data(), part.size());
  CHECK(std::equal(part.begin(), part.end(), data.begin() + static_cast<std::ptrdiff_t>(from)));
  on.w.remote_free(b);
}

TEST_CASE("submit refuses a callable the ranks do not serve, and tensors not in its buffers",
          "[buffers][usage]") {
  OnRanks on;
  const std::vector<RemoteBuffer> words = word_per_rank(on.w, on.ranks);
  const WorkerId rank2 = on.ranks.at(1);
  CHECK_THROWS_MATCHES(
      on.run_one(on.not_served, TaskArgs(), rank2), UsageError,
      WhatContains("MPI rank 2") && WhatContains("does not serve 'not_served_here' (it serves "));
  std::int64_t host = 0;
  CHECK_THROWS_MATCHES(
      on.run_one(on.whoami,
                 TaskArgs().add_tensor(make_tensor(&host, {1}, DataType::Int64),
                                       TensorArgType::OutputExisting),
                 rank2),
      UsageError, WhatContains("is host memory") && WhatContains("pointers never cross hosts"));
  CHECK_THROWS_MATCHES(on.run_one(on.whoami,
                                  TaskArgs().add_tensor(make_tensor(nullptr, {1}, DataType::Int64),
                                                        TensorArgType::Output),
                                  rank2),
                       UsageError, WhatContains("Output with data == 0"));
  CHECK_THROWS_MATCHES(on.run_one(on.whoami, word_output(words[0]), rank2), UsageError,
                       WhatContains("lies in no live buffer of next-level worker 1"));
  // None of that reached the rank: it runs the next task.
  on.run_one(on.whoami, word_output(words[1]), rank2);
  CHECK(read_word(on.w, words[1]) == 2);
}

TEST_CASE("remote memory calls during a run are refused", "[buffers][usage]") {
  OnRanks on;
  const RemoteBuffer b = on.w.remote_alloc(on.ranks.at(0), 64);
  on.w.run([&](Orchestrator&, TaskArgsView, const CallConfig&) {
    on.each_memory_call_is_refused(b, "not during a run", true);
  });
  // Between runs they work again, on the same buffer.
  CHECK(on.w.remote_alloc(on.ranks.at(0), 64).size() == 64);
  std::vector<std::int64_t> v{1, 2, 3, 4};
  on.w.copy_to_remote(b, 0, v.data(), 32);
  CHECK(read_word(on.w, b) == 1);
  on.w.remote_free(b);
}

TEST_CASE("a freed buffer is refused by copies, frees and submits", "[buffers][usage]") {
  OnRanks on;
  const RemoteBuffer b = on.w.remote_alloc(on.ranks.at(0), 256);
  on.w.remote_free(b);
  on.each_memory_call_is_refused(b, "is not a live buffer of remote worker 0 (freed already",
                                 false);
  CHECK_THROWS_MATCHES(on.run_one(on.whoami, word_output(b), on.ranks.at(0)), UsageError,
                       WhatContains("lies in no live buffer of next-level worker 0"));
}

TEST_CASE("a rank serves one Worker at a time, a new one attaches once the holder is destroyed",
          "[session]") {
  std::vector<RemoteBuffer> old;
  {
    OnRanks first;
    for (const WorkerId r : first.ranks) old.push_back(first.w.remote_alloc(r, over_half_a_pool()));
    Worker second(l4_options());
    CHECK_THROWS_MATCHES(second.add_mpi_workers(session()), UsageError,
                         WhatContains("MPI rank 1 already serves another Worker"));
  }
  a_new_worker_attaches_afresh(old);
}

TEST_CASE("a rank serves one Worker at a time, a new one attaches once the holder is closed",
          "[session]") {
  OnRanks first;
  std::vector<RemoteBuffer> old;
  for (const WorkerId r : first.ranks) old.push_back(first.w.remote_alloc(r, over_half_a_pool()));
  first.w.close();  // detached: each rank frees this session's buffers
  a_new_worker_attaches_afresh(old);
}
