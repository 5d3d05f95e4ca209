// bench_tensormap — the host TensorMap's operations at 1k, 10k, 100k and 1M live segments
// (PERFORMANCE.md scenario h: <= 60 ns per operation at 1M, flat from 1k).
//
// Each size builds one map per contender holding N disjoint segments (256 bytes every 512),
// then times, per operation, over a random order of the segments (the cache-unfriendly case):
//   write_repeat    insert() of an existing segment's exact range, with the WAR callbacks
//                   (an InOut of a tensor seen before)
//   read_repeat     add_reader() of an existing segment's exact range (an Input, Hazards::All)
//   lookup_repeat   lookup() of an existing segment's exact range (an Input, Hazards::Raw)
//   new_insert      insert() of a range in a gap nothing covers (a tensor never seen)
//   append          insert() of new ranges past every segment, in address order (tensors
//                   allocated in turn, as a heap ring hands them out), then untimed erasure
//   erase           erase_owned() of those new ranges (their tasks retire)
//   retire_rewrite  erase_owned() then insert() of an existing range (a chain: a task retires,
//                   the next writes the same buffer)
//   worst_erase     the slowest single erase_owned() (us) of 2 x (1024 + N/4) new ranges, each
//                   inserted and erased at once: a retirement that drops the map's holes
// Contenders, interleaved in one run: `simpler` (detail::TensorMap), `legacy` (the std::pmr::map
// TensorMap it replaced, tests/support/legacy_tensor_map.hpp) and `unordered_map` (std::
// unordered_map keyed by begin address: find/update, emplace, erase of the same keys; a hash
// table's cost with no ordering at all). Ratio lines compare simpler to both, and simpler at
// each size to simpler at 1k (flatness).
#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "../tests/support/legacy_tensor_map.hpp"
#include "harness.hpp"
#include "simpler/detail/tensor_map.hpp"

namespace {

using simpler::TaskSlot;
using simpler::detail::TensorReader;
namespace sb = simpler_bench;

constexpr std::uint64_t kBase = 1ULL << 32;
constexpr std::uint64_t kStride = 512;
constexpr std::uint64_t kLen = 256;

std::uint64_t seg_begin(std::uint64_t i) {
  return kBase + i * kStride;
}
// The gap after segment i: a range nothing covers (offset by `round` so every round is new).
std::uint64_t gap_begin(std::uint64_t i, std::uint64_t round) {
  return seg_begin(i) + kLen + (round % 31) * 8;
}

// The slowest single erase (ns) of `ops` new ranges in the gaps, each inserted and erased at once
// (a task that wrote a tensor nobody saw retires): what a retirement that drops the map's holes
// costs. insert(b, producer) and erase(b, producer) act on the 8 bytes at b; `round` moves on so
// the next call's ranges are new too.
template <class Insert, class Erase>
double slowest_erase(const std::vector<std::uint32_t>& order, std::uint64_t ops,
                     std::uint64_t& round, Insert&& insert, Erase&& erase) {
  double worst = 0;
  const std::uint64_t r = round;
  round += ops / order.size() + 1;
  for (std::uint64_t j = 0; j < ops; ++j) {
    const std::uint32_t i = order[j % order.size()];
    const std::uint64_t b = gap_begin(i, r + j / order.size());
    insert(b, i & 0xFFFF);
    worst = std::max(worst, sb::time_ns([&] { erase(b, i & 0xFFFF); }));
  }
  return worst;
}

// Keeps a value alive past the optimiser.
volatile std::uint64_t g_sink = 0;

// One contender's map and the operations of each scenario on it.
template <class Map>
struct TmapContender {
  Map m;
  std::uint64_t round = 0;
  explicit TmapContender(std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i)
      m.insert(0, seg_begin(i), seg_begin(i) + kLen, static_cast<TaskSlot>(i & 0xFFFF));
  }
  double write_repeat(const std::vector<std::uint32_t>& order) {
    std::uint64_t acc = 0;
    const double ns = sb::time_ns([&] {
      for (std::uint32_t i : order) {
        m.insert(
            0, seg_begin(i), seg_begin(i) + kLen, static_cast<TaskSlot>(i & 0xFFFF),
            [&](TaskSlot p) { acc += p; }, [&](const TensorReader& r) { acc += r.gen; });
      }
    });
    g_sink = acc;
    return ns;
  }
  double read_repeat(const std::vector<std::uint32_t>& order) {
    std::uint64_t acc = 0;
    std::uint32_t gen = static_cast<std::uint32_t>(++round);
    const double ns = sb::time_ns([&] {
      for (std::uint32_t i : order) {
        m.add_reader(
            0, seg_begin(i), seg_begin(i) + kLen, TensorReader{i & 0xFFFF, gen},
            [&](TaskSlot p) { acc += p; }, [](const TensorReader&) { return false; });
      }
    });
    g_sink = acc;
    return ns;
  }
  double lookup_repeat(const std::vector<std::uint32_t>& order) {
    std::uint64_t acc = 0;
    const double ns = sb::time_ns([&] {
      for (std::uint32_t i : order)
        m.lookup(0, seg_begin(i), seg_begin(i) + kLen, [&](TaskSlot p) { acc += p; });
    });
    g_sink = acc;
    return ns;
  }
  // Inserts new ranges (timed or not), then erases them (the other one timed).
  double new_then_erase(const std::vector<std::uint32_t>& order, bool time_insert) {
    const std::uint64_t r = ++round;
    auto ins = [&] {
      for (std::uint32_t i : order) {
        const std::uint64_t b = gap_begin(i, r);
        m.insert(0, b, b + 8, static_cast<TaskSlot>(i & 0xFFFF));
      }
    };
    auto era = [&] {
      for (std::uint32_t i : order) {
        const std::uint64_t b = gap_begin(i, r);
        m.erase_owned(0, b, b + 8, static_cast<TaskSlot>(i & 0xFFFF));
      }
    };
    if (time_insert) {
      const double ns = sb::time_ns(ins);
      era();
      return ns;
    }
    ins();
    return sb::time_ns(era);
  }
  double retire_rewrite(const std::vector<std::uint32_t>& order) {
    return sb::time_ns([&] {
      for (std::uint32_t i : order) {
        const auto p = static_cast<TaskSlot>(i & 0xFFFF);
        m.erase_owned(0, seg_begin(i), seg_begin(i) + kLen, p);
        m.insert(0, seg_begin(i), seg_begin(i) + kLen, p);
      }
    });
  }
  double worst_erase(const std::vector<std::uint32_t>& order, std::uint64_t ops) {
    return slowest_erase(
        order, ops, round,
        [&](std::uint64_t b, std::uint32_t i) { m.insert(0, b, b + 8, static_cast<TaskSlot>(i)); },
        [&](std::uint64_t b, std::uint32_t i) {
          m.erase_owned(0, b, b + 8, static_cast<TaskSlot>(i));
        });
  }
  // Inserts k new segments past every one there is, in address order (timed), then erases them.
  // Each round goes further up, so it never meets what an earlier one left (holes).
  double append(std::uint64_t n, std::uint64_t k) {
    const std::uint64_t first = n + (++round) * k;
    const double ns = sb::time_ns([&] {
      for (std::uint64_t i = first; i < first + k; ++i)
        m.insert(0, seg_begin(i), seg_begin(i) + kLen, static_cast<TaskSlot>(i & 0xFFFF));
    });
    for (std::uint64_t i = first; i < first + k; ++i)
      m.erase_owned(0, seg_begin(i), seg_begin(i) + kLen, static_cast<TaskSlot>(i & 0xFFFF));
    return ns;
  }
};

// The baseline: a hash table of the same keys, no ordering, no ranges.
struct HashContender {
  struct Rec {
    std::uint64_t end;
    TaskSlot producer;
    TensorReader readers[2];
    std::uint32_t nreaders;
  };
  std::unordered_map<std::uint64_t, Rec> m;
  std::uint64_t round = 0;
  explicit HashContender(std::uint64_t n) {
    m.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i)
      m.emplace(seg_begin(i), Rec{seg_begin(i) + kLen, static_cast<TaskSlot>(i), {}, 0});
  }
  double write_repeat(const std::vector<std::uint32_t>& order) {
    std::uint64_t acc = 0;
    const double ns = sb::time_ns([&] {
      for (std::uint32_t i : order) {
        Rec& r = m.find(seg_begin(i))->second;
        acc += r.producer + r.nreaders;
        r.producer = i & 0xFFFF;
        r.nreaders = 0;
      }
    });
    g_sink = acc;
    return ns;
  }
  double read_repeat(const std::vector<std::uint32_t>& order) {
    std::uint64_t acc = 0;
    const auto gen = static_cast<std::uint32_t>(++round);
    const double ns = sb::time_ns([&] {
      for (std::uint32_t i : order) {
        Rec& r = m.find(seg_begin(i))->second;
        acc += r.producer;
        r.readers[r.nreaders++ & 1U] = TensorReader{i & 0xFFFF, gen};
      }
    });
    g_sink = acc;
    return ns;
  }
  double lookup_repeat(const std::vector<std::uint32_t>& order) {
    std::uint64_t acc = 0;
    const double ns = sb::time_ns([&] {
      for (std::uint32_t i : order) acc += m.find(seg_begin(i))->second.producer;
    });
    g_sink = acc;
    return ns;
  }
  double new_then_erase(const std::vector<std::uint32_t>& order, bool time_insert) {
    const std::uint64_t r = ++round;
    auto ins = [&] {
      for (std::uint32_t i : order) {
        const std::uint64_t b = gap_begin(i, r);
        m.emplace(b, Rec{b + 8, i & 0xFFFF, {}, 0});
      }
    };
    auto era = [&] {
      for (std::uint32_t i : order) m.erase(gap_begin(i, r));
    };
    if (time_insert) {
      const double ns = sb::time_ns(ins);
      era();
      return ns;
    }
    ins();
    return sb::time_ns(era);
  }
  double retire_rewrite(const std::vector<std::uint32_t>& order) {
    return sb::time_ns([&] {
      for (std::uint32_t i : order) {
        m.erase(seg_begin(i));
        m.emplace(seg_begin(i), Rec{seg_begin(i) + kLen, i & 0xFFFF, {}, 0});
      }
    });
  }
  double worst_erase(const std::vector<std::uint32_t>& order, std::uint64_t ops) {
    return slowest_erase(
        order, ops, round,
        [&](std::uint64_t b, std::uint32_t i) {
          m.emplace(b, Rec{b + 8, i, {}, 0});
        },
        [&](std::uint64_t b, std::uint32_t) { m.erase(b); });
  }
  double append(std::uint64_t n, std::uint64_t k) {
    const std::uint64_t first = n + (++round) * k;
    const double ns = sb::time_ns([&] {
      for (std::uint64_t i = first; i < first + k; ++i)
        m.emplace(seg_begin(i), Rec{seg_begin(i) + kLen, static_cast<TaskSlot>(i & 0xFFFF), {}, 0});
    });
    for (std::uint64_t i = first; i < first + k; ++i) m.erase(seg_begin(i));
    return ns;
  }
};

std::size_t heap_in_use() {
  const struct mallinfo2 mi = mallinfo2();
  // Small blocks and malloc's mmap()ed ones, and what the TensorMap maps itself (big_alloc:
  // its index and pools in huge-page blocks, which malloc does not see).
  return mi.uordblks + mi.hblkhd + simpler::detail::big_bytes_mapped();
}

int run(int argc, char** argv) {
  const sb::Options opt = sb::parse_options(argc, argv);
  sb::Report rep(opt);
  rep.note("load average: " + sb::load_average());
  const std::vector<std::uint32_t> sizes =
      opt.tiny ? std::vector<std::uint32_t>{1000, 10'000}
               : std::vector<std::uint32_t>{1000, 10'000, 100'000, 1'000'000};
  const std::vector<std::string> ops = {"write_repeat", "read_repeat", "lookup_repeat",
                                        "new_insert",   "erase",       "retire_rewrite",
                                        "append"};
  std::mt19937_64 rng(42);
  for (std::uint32_t n : sizes) {
    rep.probe();
    const std::string size = sb::count_label(n);
    // Operations per repetition: every segment once, up to 200k (a random order of them).
    const std::uint32_t k = std::min<std::uint32_t>(n, opt.tiny ? 1000 : 200'000);
    std::vector<std::uint32_t> all(n);
    std::iota(all.begin(), all.end(), 0U);
    std::shuffle(all.begin(), all.end(), rng);
    const std::vector<std::uint32_t> order(all.begin(), all.begin() + k);

    const std::size_t heap0 = heap_in_use();
    auto simpler_map = std::make_unique<TmapContender<simpler::detail::TensorMap>>(n);
    const std::size_t heap1 = heap_in_use();
    auto legacy_map = std::make_unique<TmapContender<simpler::legacy::LegacyTensorMap>>(n);
    const std::size_t heap2 = heap_in_use();
    auto hash_map = std::make_unique<HashContender>(n);
    const std::size_t heap3 = heap_in_use();
    rep.note(fmt::format(
        "{} segments: heap bytes per segment: simpler {:.0f}, legacy {:.0f}, "
        "unordered_map {:.0f}",
        size, double(heap1 - heap0) / n, double(heap2 - heap1) / n, double(heap3 - heap2) / n));

    rep.section("TensorMap at " + size + " live segments (ns per operation)");
    for (const std::string& op : ops) {
      const auto call = [&](auto& c) -> double {
        if (op == "write_repeat") return c.write_repeat(order);
        if (op == "read_repeat") return c.read_repeat(order);
        if (op == "lookup_repeat") return c.lookup_repeat(order);
        if (op == "new_insert") return c.new_then_erase(order, true);
        if (op == "erase") return c.new_then_erase(order, false);
        if (op == "append") return c.append(n, k);
        return c.retire_rewrite(order) / 2;  // two operations each
      };
      std::vector<sb::Contender> cs;
      cs.push_back({"simpler", [&] { return call(*simpler_map); }, double(k)});
      cs.push_back({"legacy", [&] { return call(*legacy_map); }, double(k)});
      cs.push_back({"unordered_map", [&] { return call(*hash_map); }, double(k)});
      const std::string scenario = op + "_" + size;
      sb::run_scenario(rep, scenario, "ns/op", cs);
      rep.ratio(scenario, "simpler", "legacy");
      rep.ratio(scenario, "simpler", "unordered_map");
      if (n != sizes.front()) {
        const sb::Row* here = rep.find(scenario, "simpler");
        const sb::Row* first = rep.find(op + "_" + sb::count_label(sizes.front()), "simpler");
        if (here != nullptr && first != nullptr && first->stats.median > 0)
          rep.ratio_value(scenario,
                          "simpler_" + size + "/simpler_" + sb::count_label(sizes.front()),
                          here->stats.median / first->stats.median, here->stats.reps);
      }
    }
    {
      // The slowest retirement: enough new ranges erased for the map to drop its holes
      // (past 1024 plus a quarter of the segments) at least once per repetition.
      const std::uint64_t ops = 2 * (1024 + n / 4);
      std::vector<sb::Contender> cs;
      cs.push_back({"simpler", [&] { return simpler_map->worst_erase(order, ops); }, 1000.0});
      cs.push_back({"legacy", [&] { return legacy_map->worst_erase(order, ops); }, 1000.0});
      cs.push_back({"unordered_map", [&] { return hash_map->worst_erase(order, ops); }, 1000.0});
      const std::string scenario = "worst_erase_" + size;
      sb::run_scenario(rep, scenario, "us", cs);
      rep.ratio(scenario, "simpler", "legacy");
      rep.ratio(scenario, "simpler", "unordered_map");
    }
    if (simpler_map->m.size() != n || legacy_map->m.size() != n)
      sb::fail(fmt::format("a map lost segments: {} / {} of {}", simpler_map->m.size(),
                           legacy_map->m.size(), n));

    // Memory: erase every segment (every task retired), then sweep.
    const std::size_t before = heap_in_use();
    for (std::uint32_t i = 0; i < n; ++i)
      simpler_map->m.erase_owned(0, seg_begin(i), seg_begin(i) + kLen,
                                 static_cast<TaskSlot>(i & 0xFFFF));
    const std::size_t after_erase = heap_in_use();
    simpler_map->m.sweep([](const TensorReader&) { return false; });
    const std::size_t after_sweep = heap_in_use();
    rep.note(fmt::format(
        "simpler, {} segments erased: heap {:.1f} MB -> {:.1f} MB after "
        "erase_owned of all, {:.1f} MB after sweep (size {})",
        size, before / 1e6, after_erase / 1e6, after_sweep / 1e6, simpler_map->m.size()));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return sb::guarded_main("bench_tensormap", run, argc, argv);
}
