// Remote L3 Workers over loopback (SocketTransport, RemoteServer): one DAG across remote and local
// workers, remote buffers and copies, dependencies over their byte ranges, what submit refuses,
// how remote errors come back, pipelining (against a fake server that can hold completions
// back), and what init() and close() say when a remote cannot be reached or died.
//
// Each RemoteServer runs in a process of its own (ServerProcess), forked before the test's Worker
// starts a thread. Memory a test shares with a remote session (to watch it, or to hold it at a
// gate) is a SharedArena mapped before that fork: the server's sessions inherit it.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <simpler/simpler.hpp>

// After simpler.hpp: Asio comes in through the library's headers first.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "support/chip_modules.hpp"
#include "support/fake_remote.hpp"
#include "support/gate.hpp"
#include "support/matchers.hpp"
#include "support/recording_leaf.hpp"
#include "support/remote_server.hpp"
#include "support/shared_arena.hpp"
#include "support/thread_states.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_remote {

using namespace simpler;
using namespace simpler::testing;
using Catch::Matchers::Contains;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

/// The parent's registration of an orchestration function a remote serves: its body runs there.
void served_remotely(Orchestrator&, TaskArgsView, const CallConfig&) {
  throw std::logic_error("this orchestration function runs on a remote worker, not here");
}

WorkerOptions l4_options() {
  WorkerOptions o = thread_options(0);
  o.level = 4;
  return o;
}

/// A server whose sessions' inner L3 is built from `inner`; quiet, with a 256 MiB buffer pool.
RemoteServerOptions server_options(WorkerOptions inner = thread_options(0)) {
  RemoteServerOptions o;
  o.worker = std::move(inner);
  o.buffer_pool_bytes = std::uint64_t{256} << 20;
  o.log = false;
  return o;
}

/// An inner L3 with two forked sub workers (the session's buffers are shared with them).
WorkerOptions forked_l3(std::vector<int> devices = {}) {
  WorkerOptions o = thread_options(2);
  o.child_mode = ChildMode::Process;
  o.device_ids = std::move(devices);
  return o;
}

// ---- Sub callables the DAG test runs (on the remote L3s and on the local L3).

/// x = a * x + b over tensor 0 (int64); scalars a, b.
void affine(TaskArgsView v) {
  const auto a = static_cast<std::int64_t>(v.scalar(0));
  const auto b = static_cast<std::int64_t>(v.scalar(1));
  const ContinuousTensor& t = v.tensor(0);
  auto* x = t.as<std::int64_t>();
  for (std::uint64_t i = 0; i < t.numel(); ++i) x[i] = a * x[i] + b;
}
/// tensor 1 [0] = the sum of tensor 0.
void sum(TaskArgsView v) {
  const ContinuousTensor& t = v.tensor(0);
  const auto* x = t.as<const std::int64_t>();
  *v.tensor(1).as<std::int64_t>() = std::accumulate(x, x + t.numel(), std::int64_t{0});
}

/// An orchestration function that runs `affine_sub` over tensor 0 in two halves, one sub task
/// each (the L3's two sub workers), passing the scalars on.
auto affine_in_halves(CallableHandle affine_sub) {
  return [affine_sub](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    const ContinuousTensor& t = v.tensor(0);
    const std::uint32_t n = t.shapes[0];
    auto* x = t.as<std::int64_t>();
    for (const auto& [first, count] : {std::pair{0U, n / 2}, std::pair{n / 2, n - n / 2}}) {
      TaskArgs a;
      a.add_tensor(make_tensor(x + first, {count}, DataType::Int64), TensorArgType::InOut)
          .add_scalar(v.scalar(0))
          .add_scalar(v.scalar(1));
      o.submit_sub(affine_sub, std::move(a));
    }
  };
}
auto sum_task(CallableHandle sum_sub) {
  return [sum_sub](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    o.submit_sub(sum_sub, TaskArgs()
                              .add_tensor(v.tensor(0), TensorArgType::Input)
                              .add_tensor(v.tensor(1), TensorArgType::OutputExisting));
  };
}

/// A session serving "affine" and "sum" on its inner L3's sub workers.
void serve_affine_and_sum(RemoteSession& s) {
  s.serve_orch("affine", affine_in_halves(s.worker().register_sub("affine", affine)));
  s.serve_orch("sum", sum_task(s.worker().register_sub("sum", sum)));
}

std::vector<std::int64_t> iota(std::size_t n, std::int64_t first) {
  std::vector<std::int64_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

/// n bytes that differ with `seed` and with their position: a tile of an odd length (no
/// chunk size is a multiple of it), stamped with the offset every 4 KiB. Cheap to make for
/// tens of MiB in sanitizer builds too.
std::vector<std::uint8_t> pattern(std::size_t n, std::uint64_t seed) {
  constexpr std::size_t kTile = 65521;
  std::vector<std::uint8_t> tile(kTile);
  for (std::size_t i = 0; i < kTile; ++i) tile[i] = static_cast<std::uint8_t>(seed * 31 + i * 131);
  std::vector<std::uint8_t> out(n);
  for (std::size_t at = 0; at < n; at += kTile) {
    std::memcpy(out.data() + at, tile.data(), std::min(kTile, n - at));
  }
  for (std::size_t at = 0; at + 8 <= n; at += 4096) {
    const std::uint64_t stamp = (seed << 48) ^ at;
    std::memcpy(out.data() + at, &stamp, 8);
  }
  return out;
}

template <class T>
std::vector<T> copy_back(Worker& w, const RemoteBuffer& b, std::size_t first, std::size_t n) {
  std::vector<T> out(n);
  w.copy_from_remote(b, first * sizeof(T), out.data(), n * sizeof(T));
  return out;
}

/// A loopback port nothing listens on (it was free a moment ago).
std::uint16_t unused_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(
      io, boost::asio::ip::tcp::endpoint(boost::asio::ip::address_v4::loopback(), 0));
  return a.local_endpoint().port();
}

std::set<pid_t> my_children() {
  const auto v = children_of(::getpid());
  return {v.begin(), v.end()};
}

/// The RemoteLane endpoint of next-level worker `id`.
template <class F>
void with_remote_lane(Worker& w, WorkerId id, F&& fn) {
  w.scheduler().for_each_lane([&](auto& lane) {
    using L = std::remove_cvref_t<decltype(lane)>;
    if constexpr (std::is_same_v<L, RemoteLane>) {
      if (lane.id == id) fn(lane.endpoint());
    }
  });
}

}  // namespace

// =================================================================================================
// One DAG across two remote L3s and a local L3

TEST_CASE("an L4 runs one DAG across two remote L3s and a local L3, with the host's results",
          "[remote][l4]") {
  // L4 (this process)
  //  ├── remote 0: L3 in a server process; two forked sub workers
  //  ├── remote 1: L3 in another; two forked sub workers and a forked simulated chip
  //  └── local L3 (nested, threads); two sub workers
  ServerProcess server0(server_options(forked_l3()), serve_affine_and_sum);
  ServerProcess server1(server_options(forked_l3({0})), [](RemoteSession& s) {
    serve_affine_and_sum(s);
    const CallableHandle fill = s.worker().register_chip(chipw_callable("fill", "fill"));
    // Writes its scalar into every element of tensor 0, on chip 0 of the inner L3.
    s.serve_orch("chip_fill", [fill](Orchestrator& o, TaskArgsView v, const CallConfig&) {
      TaskArgs a;
      a.add_tensor(v.tensor(0), TensorArgType::OutputExisting).add_scalar(v.scalar(0));
      o.submit_next_level(fill, std::move(a), default_call_config(), 0);
    });
  });

  constexpr std::uint32_t n = 4096;
  Worker w(l4_options());
  // The local L3 runs the same callable names as the remotes, with its own sub callables.
  Worker l3(thread_options(2));
  const CallableHandle l3_affine = l3.register_sub("affine", affine);
  const CallableHandle l3_sum = l3.register_sub("sum", sum);
  const WorkerId remote0 = w.add_remote_worker(server0.spec());
  const WorkerId remote1 = w.add_remote_worker(server1.spec());
  const WorkerId local = w.add_worker(std::move(l3));
  const auto affine_h = w.register_orch("affine", affine_in_halves(l3_affine));
  const auto sum_h = w.register_orch("sum", sum_task(l3_sum));
  const auto chip_fill_h = w.register_orch("chip_fill", served_remotely);
  w.init();

  const RemoteBuffer b0 = w.remote_alloc(remote0, (n + 1) * sizeof(std::int64_t));
  const RemoteBuffer b1 = w.remote_alloc(remote1, (n + 1) * sizeof(std::int64_t));
  std::vector<std::int64_t> host(n + 1);
  for (std::int64_t rep = 0; rep < 2; ++rep) {
    INFO("rep " << rep);
    const auto x0 = iota(n, 10 * rep);
    const auto x1 = std::vector<std::int64_t>(n + 1, -1);  // the chip overwrites it
    const auto xl = iota(n, 1000 + rep);
    w.copy_to_remote(b0, 0, x0.data(), n * sizeof(std::int64_t));
    w.copy_to_remote(b1, 0, x1.data(), (n + 1) * sizeof(std::int64_t));
    std::copy(xl.begin(), xl.end(), host.begin());
    const std::int64_t fill_value = 5 + rep;

    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      const CallConfig& cfg = default_call_config();
      // Stage by stage across the three workers; within each, every stage depends on the last
      // (the two affine steps do not commute, the chip's fill overwrites, the sum reads all).
      struct Chain {
        WorkerId worker;
        ContinuousTensor x, total;
      };
      const Chain chains[] = {
          {remote0, b0.tensor_of<std::int64_t>(0, n), b0.tensor_of<std::int64_t>(n, 1)},
          {remote1, b1.tensor_of<std::int64_t>(0, n), b1.tensor_of<std::int64_t>(n, 1)},
          {local, make_tensor(host.data(), {n}, DataType::Int64),
           make_tensor(host.data() + n, {1}, DataType::Int64)},
      };
      o.submit_next_level(chip_fill_h,
                          TaskArgs()
                              .add_tensor(chains[1].x, TensorArgType::OutputExisting)
                              .add_scalar(static_cast<std::uint64_t>(fill_value)),
                          cfg, remote1);
      for (const auto& [a, b] : {std::pair{3, 1}, std::pair{2, 7}}) {
        for (const Chain& c : chains) {
          o.submit_next_level(affine_h,
                              TaskArgs()
                                  .add_tensor(c.x, TensorArgType::InOut)
                                  .add_scalar(static_cast<std::uint64_t>(a))
                                  .add_scalar(static_cast<std::uint64_t>(b)),
                              cfg, c.worker);
        }
      }
      for (const Chain& c : chains) {
        o.submit_next_level(sum_h,
                            TaskArgs()
                                .add_tensor(c.x, TensorArgType::Input)
                                .add_tensor(c.total, TensorArgType::OutputExisting),
                            cfg, c.worker);
      }
    });

    // The host's own computation of the same DAG: 2 * (3x + 1) + 7 = 6x + 9 everywhere.
    auto expect = [](const std::vector<std::int64_t>& x) {
      std::vector<std::int64_t> out;
      for (std::int64_t v : x) out.push_back(6 * v + 9);
      out.push_back(std::accumulate(out.begin(), out.end(), std::int64_t{0}));
      return out;
    };
    CHECK(copy_back<std::int64_t>(w, b0, 0, n + 1) == expect(x0));
    CHECK(copy_back<std::int64_t>(w, b1, 0, n + 1) ==
          expect(std::vector<std::int64_t>(n, fill_value)));
    CHECK(host == expect(xl));
  }
  w.close();
}

// =================================================================================================
// Remote buffers

TEST_CASE("copies to and from a remote buffer round-trip at every size and offset",
          "[remote][buffer]") {
  ServerProcess server(server_options(), [](RemoteSession&) {});
  Worker w(l4_options());
  const WorkerId r = w.add_remote_worker(server.spec());
  w.init();
  constexpr std::size_t kChunk = (std::size_t{8} << 20) - 256;  // the largest copy frame's data
  constexpr std::size_t kSize = (std::size_t{16} << 20) + 64;
  const RemoteBuffer buf = w.remote_alloc(r, kSize);
  CHECK(buf.size() == kSize);
  CHECK(buf.worker() == r);

  // The buffer's content as the host expects it; every copy goes to it too.
  std::vector<std::uint8_t> mirror = pattern(kSize, 0);
  w.copy_to_remote(buf, 0, mirror.data(), kSize);
  std::uint64_t seed = 1;
  const std::vector<std::pair<std::size_t, std::vector<std::size_t>>> cases = {
      {0, {0, 7, kSize}},
      {1, {0, 7, kSize - 1}},
      {4095, {0, 7, 64}},
      {kChunk + 1, {0, 7}},
      {(std::size_t{8} << 20) + 1, {0, 64}},
  };
  for (const auto& [n, offsets] : cases) {
    for (const std::size_t offset : offsets) {
      INFO("n " << n << " at offset " << offset);
      const std::vector<std::uint8_t> data = pattern(n, seed++);
      w.copy_to_remote(buf, offset, data.data(), n);
      std::copy(data.begin(), data.end(), mirror.begin() + static_cast<std::ptrdiff_t>(offset));
      std::vector<std::uint8_t> back(n, 0xEE);
      w.copy_from_remote(buf, offset, back.data(), n);
      REQUIRE(back == data);
    }
  }
  // Nothing outside the copied ranges moved.
  std::vector<std::uint8_t> all(kSize);
  w.copy_from_remote(buf, 0, all.data(), kSize);
  CHECK(all == mirror);
  // A range that starts in one chunk and ends in the next reads back too.
  std::vector<std::uint8_t> middle(1000);
  w.copy_from_remote(buf, kChunk - 500, middle.data(), middle.size());
  CHECK(std::equal(middle.begin(), middle.end(), mirror.begin() + (kChunk - 500)));
  w.remote_free(buf);

  // 40 MiB (five chunks) at an odd offset.
  const std::size_t big = std::size_t{40} << 20;
  const RemoteBuffer large = w.remote_alloc(r, big + 7);
  const std::vector<std::uint8_t> data = pattern(big, seed);
  w.copy_to_remote(large, 7, data.data(), big);
  std::vector<std::uint8_t> back(big, 0xEE);
  w.copy_from_remote(large, 7, back.data(), big);
  CHECK(back == data);
  w.close();
}

TEST_CASE("a remote buffer refuses ranges outside it and uses after its free",
          "[remote][buffer][usage]") {
  ServerProcess server(server_options(), [](RemoteSession&) {});
  Worker w(l4_options());
  const WorkerId r = w.add_remote_worker(server.spec());
  w.init();
  const RemoteBuffer buf = w.remote_alloc(r, 1000);
  std::vector<std::uint8_t> bytes(2000, 1);

  SECTION("copies past its end") {
    CHECK_THROWS_MATCHES(w.copy_to_remote(buf, 999, bytes.data(), 2), UsageError,
                         WhatContains("bytes [999, 1001) are outside buffer"));
    CHECK_THROWS_MATCHES(w.copy_from_remote(buf, 0, bytes.data(), 1001), UsageError,
                         WhatContains("[0, 1001) are outside"));
    CHECK_THROWS_MATCHES(w.copy_from_remote(buf, 1001, bytes.data(), 0), UsageError,
                         WhatContains("outside buffer"));
    CHECK_THROWS_MATCHES(w.copy_to_remote(buf, 0, nullptr, 4), UsageError,
                         WhatContains("null pointer"));
    // The whole buffer and an empty copy at its end are fine.
    CHECK_NOTHROW(w.copy_to_remote(buf, 0, bytes.data(), 1000));
    CHECK_NOTHROW(w.copy_from_remote(buf, 1000, bytes.data(), 0));
  }
  SECTION("tensors past its end") {
    CHECK_THROWS_MATCHES(buf.tensor(992, {4}, DataType::Int32), UsageError,
                         WhatContains("[992, 1008) is outside the buffer's 1000 bytes"));
    CHECK_THROWS_MATCHES(buf.tensor_of<std::int64_t>(125, 1), UsageError, WhatContains("outside"));
    CHECK_THROWS_MATCHES(RemoteBuffer().tensor(0, {1}, DataType::Int8), UsageError,
                         WhatContains("an empty RemoteBuffer"));
    CHECK(buf.tensor_of<std::int64_t>(124, 1).nbytes() == 8);
  }
  SECTION("copies and frees after its free") {
    w.remote_free(buf);
    CHECK_THROWS_MATCHES(w.copy_to_remote(buf, 0, bytes.data(), 8), UsageError,
                         WhatContains("is not a live buffer of remote worker 0"));
    CHECK_THROWS_MATCHES(w.copy_from_remote(buf, 0, bytes.data(), 8), UsageError,
                         WhatContains("freed already"));
    CHECK_THROWS_MATCHES(w.remote_free(buf), UsageError, WhatContains("not a live buffer"));
  }
  SECTION("allocations that cannot be made") {
    CHECK_THROWS_MATCHES(w.remote_alloc(r, 0), UsageError, WhatContains("0 bytes"));
    CHECK_THROWS_MATCHES(w.remote_alloc(r + 1, 64), UsageError,
                         WhatContains("next-level worker 1 is not a remote worker"));
  }
  // The link is as good as before.
  const RemoteBuffer again = w.remote_alloc(r, 64);
  const auto v = iota(8, 40);
  w.copy_to_remote(again, 0, v.data(), 64);
  CHECK(copy_back<std::int64_t>(w, again, 0, 8) == v);
  w.close();
}

TEST_CASE("an allocation over the server's largest buffer is a RemoteError, and the link lives on",
          "[remote][buffer]") {
  RemoteServerOptions o = server_options();
  o.max_buffer_bytes = std::uint64_t{1} << 20;
  ServerProcess server(o, [](RemoteSession&) {});
  Worker w(l4_options());
  const WorkerId r = w.add_remote_worker(server.spec());
  w.init();
  CHECK_THROWS_MATCHES(w.remote_alloc(r, (std::size_t{1} << 20) + 1), RemoteError,
                       WhatContains("refused ALLOC: 1048577 bytes is over this server's largest "
                                    "buffer (1048576 bytes)"));
  CHECK_THROWS_MATCHES(w.remote_alloc(r, std::size_t{1} << 40), RemoteError,
                       WhatContains(server.endpoint()));
  const RemoteBuffer ok = w.remote_alloc(r, std::size_t{1} << 20);
  const auto v = iota(16, 3);
  w.copy_to_remote(ok, 4096, v.data(), 128);
  CHECK(copy_back<std::int64_t>(w, ok, 512, 16) == v);
  w.close();  // nothing died: nothing to report
}

TEST_CASE("tensors of a freed buffer or of another remote's buffer are refused at submit",
          "[remote][buffer][usage]") {
  // One server, two sessions: two remote workers.
  ServerProcess server(server_options(), [](RemoteSession& s) {
    s.serve_orch("work", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
  });
  Worker w(l4_options());
  const WorkerId r0 = w.add_remote_worker(server.spec());
  const WorkerId r1 = w.add_remote_worker(server.spec());
  const auto work = w.register_orch("work", served_remotely);
  w.init();
  const RemoteBuffer mine = w.remote_alloc(r0, 256);
  const RemoteBuffer theirs = w.remote_alloc(r1, 256);
  const RemoteBuffer freed = w.remote_alloc(r0, 256);
  w.remote_free(freed);
  CHECK(mine.id() != theirs.id());
  auto submit_to_r0 = [&](const ContinuousTensor& t) {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(work, TaskArgs().add_tensor(t, TensorArgType::InOut),
                          default_call_config(), r0);
    });
  };
  CHECK_THROWS_MATCHES(submit_to_r0(theirs.tensor_of<std::int64_t>(0, 4)), UsageError,
                       WhatContains("lies in no live buffer of next-level worker 0"));
  CHECK_THROWS_MATCHES(submit_to_r0(freed.tensor_of<std::int64_t>(0, 4)), UsageError,
                       WhatContains("a buffer of another worker, one that was freed"));
  CHECK_NOTHROW(submit_to_r0(mine.tensor_of<std::int64_t>(0, 4)));

  SECTION("remote memory calls during a run are refused") {
    std::vector<std::int64_t> v(4);
    w.run([&](Orchestrator&, TaskArgsView, const CallConfig&) {
      CHECK_THROWS_MATCHES(w.remote_alloc(r0, 64), UsageError, WhatContains("not during a run"));
      CHECK_THROWS_MATCHES(w.copy_to_remote(mine, 0, v.data(), 32), UsageError,
                           WhatContains("call it between runs"));
      CHECK_THROWS_MATCHES(w.copy_from_remote(mine, 0, v.data(), 32), UsageError,
                           WhatContains("not during a run"));
      CHECK_THROWS_MATCHES(w.remote_free(mine), UsageError, WhatContains("not during a run"));
    });
    CHECK(w.remote_alloc(r0, 64).size() == 64);
  }
  w.close();
}

// =================================================================================================
// Dependencies over byte ranges of a remote buffer

TEST_CASE("InOut chains over ranges of a remote buffer give the sequential result",
          "[remote][deps]") {
  // x = 3x + k over tensor 0: the result depends on the order of every step.
  ServerProcess server(server_options(), [](RemoteSession& s) {
    s.serve_orch("step", [](Orchestrator&, TaskArgsView v, const CallConfig&) {
      const ContinuousTensor& t = v.tensor(0);
      auto* x = t.as<std::int64_t>();
      for (std::uint64_t i = 0; i < t.numel(); ++i)
        x[i] = 3 * x[i] + static_cast<std::int64_t>(v.scalar(0));
    });
  });
  Worker w(l4_options());
  const WorkerId r = w.add_remote_worker(server.spec());
  const auto step = w.register_orch("step", served_remotely);
  w.init();
  const RemoteBuffer buf = w.remote_alloc(r, 64 * sizeof(std::int64_t));
  std::vector<std::int64_t> host = iota(64, 0);
  w.copy_to_remote(buf, 0, host.data(), 64 * sizeof(std::int64_t));
  // Two chains on words [0, 16) and [16, 32), interleaved, and every fifth step over [8, 24),
  // which overlaps both; words [32, 64) are never touched.
  struct Step {
    std::size_t first, count;
    std::int64_t k;
  };
  std::vector<Step> steps;
  for (std::int64_t i = 0; i < 30; ++i) {
    steps.push_back({static_cast<std::size_t>(i % 2 == 0 ? 0 : 16), 16, i});
    if (i % 5 == 4) steps.push_back({8, 16, 100 + i});
  }
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    for (const Step& s : steps) {
      o.submit_next_level(
          step,
          TaskArgs()
              .add_tensor(buf.tensor_of<std::int64_t>(s.first, static_cast<std::uint32_t>(s.count)),
                          TensorArgType::InOut)
              .add_scalar(static_cast<std::uint64_t>(s.k)),
          default_call_config(), r);
    }
  });
  for (const Step& s : steps) {
    for (std::size_t i = s.first; i < s.first + s.count; ++i) host[i] = 3 * host[i] + s.k;
  }
  CHECK(copy_back<std::int64_t>(w, buf, 0, 64) == host);
  w.close();
}

TEST_CASE("tasks on a remote buffer's ranges wait for the writers of those bytes only",
          "[remote][deps]") {
  // The remote runs its tasks one at a time, in the order they arrive; the parent sends a task
  // when the writers of the bytes it touches have finished. A log in memory shared with the
  // session (mapped before the server forks) records the order.
  SharedArena arena;
  auto* gate = &arena.one<std::atomic<int>>(0);
  auto* count = &arena.one<std::atomic<int>>(0);
  auto log = arena.make<std::int64_t>(8, 0);
  ServerProcess server(server_options(), [=](RemoteSession& s) {
    // Appends its id (scalar 0) to the log; with scalar 1 set, first waits for the gate.
    s.serve_orch("logged", [=](Orchestrator&, TaskArgsView v, const CallConfig&) {
      if (v.scalar(1) != 0 && !eventually([=] { return gate->load() == 1; }, seconds(10))) {
        throw std::runtime_error("the gate stayed shut");
      }
      log[static_cast<std::size_t>(count->fetch_add(1))] = static_cast<std::int64_t>(v.scalar(0));
    });
  });
  Worker w(l4_options());
  const WorkerId r = w.add_remote_worker(server.spec());
  const auto logged = w.register_orch("logged", served_remotely);
  w.init();
  const RemoteBuffer buf = w.remote_alloc(r, 256);
  const CallConfig& cfg = default_call_config();
  auto task = [&](Orchestrator& o, std::size_t offset, std::uint32_t bytes, TensorArgType tag,
                  std::uint64_t id, bool waits = false) {
    o.submit_next_level(logged,
                        TaskArgs()
                            .add_tensor(buf.tensor(offset, {bytes}, DataType::UInt8), tag)
                            .add_scalar(id)
                            .add_scalar(waits ? 1 : 0),
                        cfg, r);
  };
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    task(o, 0, 64, TensorArgType::OutputExisting, 1, /*waits=*/true);  // writes [0, 64)
    task(o, 0, 64, TensorArgType::Input, 2);                           // reads all of it: after 1
    task(o, 64, 64, TensorArgType::OutputExisting, 3);                 // disjoint: goes ahead of 2
    task(o, 56, 16, TensorArgType::Input, 4);   // 8 bytes of 1's range, 8 of 3's
    task(o, 128, 64, TensorArgType::InOut, 5);  // disjoint from everything
    // 1 finishes only once every engine thread here sleeps: the scheduler has then posted 3 and
    // 5 to the remote lane, so they are in its ring (or on the wire) before 2 becomes ready.
    const bool quiet = other_threads_fall_asleep(seconds(5));
    gate->store(1);
    if (!quiet) throw std::runtime_error("the engine threads did not fall asleep");
  });
  REQUIRE(count->load() == 5);
  auto at = [&](std::int64_t id) {
    return std::find(log.begin(), log.begin() + 5, id) - log.begin();
  };
  // The dependencies: 2 after 1, 4 after 1 and 3.
  CHECK(at(1) == 0);
  CHECK(at(2) > at(1));
  CHECK(at(4) > at(1));
  CHECK(at(4) > at(3));
  // And that they held 2 and 4 back while the tasks of other bytes went ahead: a remote that
  // received the tasks as submitted (dependencies not tracked) would log 1, 2, 3, 4, 5, which
  // the checks above accept. 2 was readied by 1's completion behind 3 and 5 (the lane had them
  // posted, so it kept no successor), and 4 by 3's, later.
  CHECK(std::vector<std::int64_t>(log.begin(), log.begin() + 5) ==
        std::vector<std::int64_t>{1, 3, 5, 2, 4});
  w.close();
}

// =================================================================================================
// Submit-time refusals

TEST_CASE("submit refuses what a remote worker cannot run, naming the callable and the remote",
          "[remote][usage]") {
  ServerProcess server(server_options(), [](RemoteSession& s) {
    s.serve_orch("work", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
  });
  Worker w(l4_options());
  const WorkerId r = w.add_remote_worker(server.spec());
  const auto work = w.register_orch("work", served_remotely);
  const auto not_served = w.register_orch("not_served_here", served_remotely);
  w.init();
  const RemoteBuffer buf = w.remote_alloc(r, 64);
  std::int64_t host = 0;
  const CallConfig& cfg = default_call_config();
  auto submit = [&](const CallableHandle& h, TaskArgs a, WorkerId to) {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(h, std::move(a), cfg, to);
    });
  };

  CHECK_THROWS_MATCHES(submit(not_served, TaskArgs(), r), UsageError,
                       WhatContains("does not serve 'not_served_here' (it serves 'work')"));
  CHECK_THROWS_MATCHES(submit(not_served, TaskArgs(), r), UsageError,
                       WhatContains(server.endpoint()));
  CHECK_THROWS_MATCHES(
      submit(work,
             TaskArgs().add_tensor(make_tensor(&host, {1}, DataType::Int64), TensorArgType::InOut),
             r),
      UsageError, WhatContains("is host memory, and next-level worker 0"));
  CHECK_THROWS_MATCHES(
      submit(work, TaskArgs().add_tensor(make_tensor(&host, {1}, DataType::Int64)), r), UsageError,
      WhatContains("pointers never cross hosts"));
  CHECK_THROWS_MATCHES(submit(work,
                              TaskArgs().add_tensor(make_tensor(nullptr, {8}, DataType::Int64),
                                                    TensorArgType::Output),
                              r),
                       UsageError, WhatContains("tensor 0 is an Output with data == 0"));
  // A task for any worker may go to the remote, so its host tensors are refused too.
  CHECK_THROWS_MATCHES(
      submit(work, TaskArgs().add_tensor(make_tensor(&host, {1}, DataType::Int64)), any_worker),
      UsageError, WhatContains("direct it (worker=)"));
  // And a buffer's tensor must name its worker.
  CHECK_THROWS_MATCHES(
      submit(work, TaskArgs().add_tensor(buf.tensor_of<std::int64_t>(0, 8)), any_worker),
      UsageError, WhatContains("it can only go to a named next-level worker"));
  // None of that reached the remote: the Worker runs on.
  CHECK_NOTHROW(submit(
      work, TaskArgs().add_tensor(buf.tensor_of<std::int64_t>(0, 8), TensorArgType::InOut), r));
  w.close();
}

// =================================================================================================
// Remote errors

TEST_CASE("a remote failure comes back as a TaskError with the remote's context",
          "[remote][failure]") {
  ServerProcess server(server_options(forked_l3()), [](RemoteSession& s) {
    s.serve_orch("boom", [](Orchestrator&, TaskArgsView, const CallConfig&) {
      throw std::runtime_error("calibration drifted");
    });
    const auto inner = s.worker().register_sub(
        "inner_boom", [](TaskArgsView) { throw std::runtime_error("disk on fire"); });
    s.serve_orch("boom_inside", [inner](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_sub(inner);
    });
    s.serve_orch("ok", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
  });
  Worker w(l4_options());
  const WorkerId r = w.add_remote_worker(server.spec());
  const auto boom = w.register_orch("boom", served_remotely);
  const auto boom_inside = w.register_orch("boom_inside", served_remotely);
  const auto ok = w.register_orch("ok", served_remotely);
  w.init();
  auto run_one = [&](const CallableHandle& h) {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(h, TaskArgs(), default_call_config(), r);
    });
  };

  try {
    run_one(boom);
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK(e.outcome() == Outcome::TaskFailure);
    CHECK(e.level() == 4);
    CHECK(e.callable() == "boom");
    CHECK_THAT(e.worker(), Contains("remote worker 0"));
    CHECK_THAT(e.message(), Contains("on remote worker " + server.endpoint()) &&
                                Contains("'boom' on the remote L3 Worker (pid ") &&
                                Contains("calibration drifted"));
  }
  CHECK_NOTHROW(run_one(ok));

  try {
    run_one(boom_inside);
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK(e.outcome() == Outcome::TaskFailure);
    CHECK(e.callable() == "boom_inside");
    // Every level's context: the remote session, the inner L3's sub worker and its callable.
    CHECK_THAT(e.message(), Contains("'boom_inside' on the remote L3 Worker") &&
                                Contains("L3 sub worker") &&
                                Contains("callable 'inner_boom' failed: disk on fire"));
    CHECK_THAT(e.what(), Contains("L4 remote worker 0"));
  }
  CHECK_NOTHROW(run_one(ok));
  w.close();
}

// =================================================================================================
// Pipelining and protocol breaches, against a fake server

namespace {
/// An L4 with one fake remote and a local L3, and 8 tasks for the remote that read a word the
/// remote's member of a two-member group writes first. The fake holds that member's completion
/// until the 8 are submitted; the scheduler then completes the group, readies the 8 and posts
/// them to the remote lane in one pass (the group's slot on the lane is free by then), and the
/// lane may send up to its window of them before it waits for one.
struct EightAtOnce {
  EightAtOnce(FakeRemote& f, std::uint32_t window) : fake(f), w(l4_options()) {
    remote = w.add_remote_worker(fake.spec(window));
    local = w.add_worker(Worker(thread_options(0)));
    // The fake answers it on the remote; on the local L3 it does nothing.
    work = w.register_orch("work", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
    w.init();
    buf = w.remote_alloc(remote, 64);
  }
  void run() {
    const CallConfig& cfg = default_call_config();
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      const ContinuousTensor t = buf.tensor_of<std::int64_t>(0, 1);
      std::vector<TaskArgs> members(2);
      members[0].add_tensor(t, TensorArgType::OutputExisting);
      o.submit_next_level_group(work, std::move(members), cfg, {remote, local});
      for (std::uint64_t i = 0; i < 8; ++i) {
        o.submit_next_level(work, TaskArgs().add_tensor(t).add_scalar(i), cfg, remote);
      }
      fake.release_first();
    });
  }
  FakeRemote& fake;
  Worker w;
  WorkerId remote = 0, local = 0;
  CallableHandle work;
  RemoteBuffer buf;
};
}  // namespace

TEST_CASE("a remote lane keeps its window of tasks in flight before the first completion",
          "[remote][pipelining]") {
  FakeRemote::Script s;
  s.hold_first = true;
  s.hold_until = 8;           // then answers nothing until 8 are in flight ...
  s.hold_grace = seconds(5);  // ... or 5 s passed without a new one (then the check fails)
  FakeRemote fake(s);
  EightAtOnce t(fake, 8);
  t.run();
  t.w.close();
  REQUIRE(fake.finished());
  CHECK(fake.error().empty());
  CHECK(fake.tasks() == 9);
  CHECK(fake.max_in_flight() == 8);
}

TEST_CASE("a remote lane with a window of 1 has one task in flight at a time",
          "[remote][pipelining]") {
  FakeRemote::Script s;
  s.hold_first = true;
  s.hold_until = 8;
  s.hold_grace = milliseconds(50);  // time for a second task to arrive if the lane sent one
  FakeRemote fake(s);
  EightAtOnce t(fake, 1);
  t.run();
  t.w.close();
  REQUIRE(fake.finished());
  CHECK(fake.error().empty());
  CHECK(fake.tasks() == 9);
  CHECK(fake.max_in_flight() == 1);
}

TEST_CASE("a COMPLETION that answers the wrong task fails the run as an endpoint failure",
          "[remote][protocol]") {
  FakeRemote::Script s;
  s.answer_skew = 1;
  FakeRemote fake(s);
  Worker w(l4_options());
  const WorkerId r = w.add_remote_worker(fake.spec());
  const auto work = w.register_orch("work", served_remotely);
  w.init();
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(work, TaskArgs(), default_call_config(), r);
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK(e.outcome() == Outcome::EndpointFailure);
    CHECK(e.error_kind() == ErrorKind::Transport);
    CHECK(e.callable() == "work");
    CHECK_THAT(e.message(), Contains("the link to remote worker " + fake.endpoint() + " is down") &&
                                Contains("COMPLETION answers sequence"));
  }
  // The link is down for good: the next task fails the same way, without reaching the fake.
  CHECK_THROWS_MATCHES(w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(work, TaskArgs(), default_call_config(), r);
  }),
                       Error, WhatContains(fake.endpoint()));
  w.close();  // the death was reported by the task: close() does not repeat it
  CHECK(fake.finished());
  CHECK(fake.tasks() == 1);
}

TEST_CASE("init() fails with the server's message when its HELLO says the session failed",
          "[remote][protocol]") {
  FakeRemote::Script s;
  s.hello_failure = "setup or init() of the inner Worker failed: no chip 3 on this host";
  FakeRemote fake(s);
  Worker w(l4_options());
  w.add_remote_worker(fake.spec());
  CHECK_THROWS_MATCHES(w.init(), RemoteError,
                       WhatContains("remote worker " + fake.endpoint() +
                                    ": its session could not start: setup or init() of the inner "
                                    "Worker failed: no chip 3 on this host"));
  CHECK(fake.finished());
  CHECK(fake.error().empty());  // the client proved the token right
}

TEST_CASE("init() fails naming the token when the server cannot prove it holds it",
          "[remote][protocol]") {
  FakeRemote::Script s;
  s.token = "the right token";
  s.wrong_proof = true;
  FakeRemote fake(s);
  Worker w(l4_options());
  w.add_remote_worker(fake.spec());
  CHECK_THROWS_MATCHES(w.init(), TransportError,
                       WhatContains("the server could not prove it holds this worker's token"));
  CHECK(fake.finished());
}

// =================================================================================================
// Specs, connections, deaths

TEST_CASE("add_remote_worker refuses a spec it cannot use", "[remote][usage]") {
  Worker w(l4_options());
  auto spec = [](std::string endpoint) {
    RemoteWorkerSpec s;
    s.endpoint = std::move(endpoint);
    return s;
  };
  CHECK_THROWS_MATCHES(w.add_remote_worker(spec("example.com:1")), UsageError,
                       WhatContains("host names are refused"));
  CHECK_THROWS_MATCHES(w.add_remote_worker(spec("127.0.0.1:65536")), UsageError,
                       WhatContains("over 65535"));
  CHECK_THROWS_MATCHES(w.add_remote_worker(spec("127.0.0.1:http")), UsageError,
                       WhatContains("port 'http'"));
  CHECK_THROWS_MATCHES(w.add_remote_worker(spec("127.0.0.1")), UsageError,
                       WhatContains("'127.0.0.1' is not host:port"));
  CHECK_THROWS_MATCHES(w.add_remote_worker(spec(":7000")), UsageError, WhatContains("host:port"));
  auto with = [&](auto change) {
    RemoteWorkerSpec s = spec("127.0.0.1:7000");
    change(s);
    return s;
  };
  CHECK_THROWS_MATCHES(
      w.add_remote_worker(with([](RemoteWorkerSpec& s) { s.connect_timeout = milliseconds(0); })),
      UsageError, WhatContains("connect_timeout is 0 ms; it must be > 0"));
  CHECK_THROWS_MATCHES(
      w.add_remote_worker(with([](RemoteWorkerSpec& s) { s.attach_timeout = milliseconds(-1); })),
      UsageError, WhatContains("attach_timeout is -1 ms"));
  CHECK_THROWS_MATCHES(
      w.add_remote_worker(with([](RemoteWorkerSpec& s) { s.heartbeat_period = milliseconds(0); })),
      UsageError, WhatContains("heartbeat_period"));
  CHECK_THROWS_MATCHES(
      w.add_remote_worker(with([](RemoteWorkerSpec& s) { s.control_timeout = milliseconds(-5); })),
      UsageError, WhatContains("control_timeout is -5 ms"));
  CHECK_THROWS_MATCHES(w.add_remote_worker(with(
                           [](RemoteWorkerSpec& s) { s.heartbeat_timeout = s.heartbeat_period; })),
                       UsageError, WhatContains("must be longer than heartbeat_period"));
  CHECK_THROWS_MATCHES(w.add_remote_worker(with([](RemoteWorkerSpec& s) { s.window = 0; })),
                       UsageError, WhatContains("window is 0; it must be 1..8"));
  CHECK_THROWS_MATCHES(w.add_remote_worker(with([](RemoteWorkerSpec& s) { s.window = 9; })),
                       UsageError, WhatContains("window is 9"));
  CHECK(w.next_level_count() == 0);
  // Numeric IPv4, bracketed IPv6 and localhost are accepted (nothing connects before init()).
  CHECK(w.add_remote_worker(spec("localhost:7000")) == 0);
  CHECK(w.add_remote_worker(spec("[::1]:7000")) == 1);
}

TEST_CASE("init() names the endpoint nothing listens on and leaves no child behind",
          "[remote][connect]") {
  const std::uint16_t port = unused_port();
  const auto before = my_children();
  WorkerOptions o = l4_options();
  o.num_sub_workers = 1;
  o.child_mode = ChildMode::Process;  // forked before the remote lane connects
  Worker w(o);
  RemoteWorkerSpec s;
  s.endpoint = "127.0.0.1:" + std::to_string(port);
  s.connect_timeout = seconds(5);
  w.add_remote_worker(s);
  CHECK_THROWS_MATCHES(w.init(), TransportError,
                       WhatContains("remote worker " + s.endpoint + ": TCP connect failed"));
  CHECK(my_children() == before);
}

TEST_CASE("close() reports a remote session that died between runs", "[remote][death]") {
  ServerProcess server(server_options(), [](RemoteSession& s) {
    s.serve_orch("work", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
  });
  Worker w(l4_options());
  RemoteWorkerSpec spec = server.spec();
  spec.heartbeat_period = milliseconds(20);
  spec.heartbeat_timeout = milliseconds(400);
  const WorkerId r = w.add_remote_worker(spec);
  const auto work = w.register_orch("work", served_remotely);
  w.init();
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(work, TaskArgs(), default_call_config(), r);
  });
  // The session is the server's one child; it dies while the lane is idle.
  const auto sessions = children_of(server.pid());
  REQUIRE(sessions.size() == 1);
  ::kill(sessions[0], SIGKILL);
  bool alive = true;
  CHECK(eventually(
      [&] {
        with_remote_lane(w, r, [&](auto& ep) { alive = ep.alive(); });
        return !alive;
      },
      seconds(10)));
  CHECK_THROWS_MATCHES(
      w.close(), TransportError,
      WhatContains("children ended abnormally: remote worker 0 (" + server.endpoint() + ")"));
}

}  // namespace simpler_test_remote
