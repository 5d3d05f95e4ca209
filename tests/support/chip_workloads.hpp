// Test support: the bundled chip workloads (device/orchestration/*, device/kernels/*) as
// ChipCallables, with their inputs and plain C++ reference results.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <simpler/simpler.hpp>

namespace simpler::testing {

/// A device module built next to the tests ("kernel_add" -> <dir>/kernel_add.so).
inline std::string workload_module(std::string_view name) {
  return std::string(SIMPLER_DEVICE_MODULE_DIR) + "/" + std::string(name) + ".so";
}

/// A float scalar as the device reads it (from_u64<float>: the low 32 bits).
inline std::uint64_t float_scalar(float v) {
  return std::bit_cast<std::uint32_t>(v);
}

inline ChipCallable vector_callable() {
  return ChipCallable{.name = "vector",
                      .orchestration = workload_module("orch_vector_example"),
                      .kernels = {{0, workload_module("kernel_add")},
                                  {1, workload_module("kernel_add_scalar")},
                                  {2, workload_module("kernel_mul")}}};
}
inline ChipCallable bgemm_callable() {
  return ChipCallable{
      .name = "bgemm",
      .orchestration = workload_module("orch_bgemm"),
      .kernels = {{0, workload_module("kernel_gemm")}, {1, workload_module("kernel_tile_add")}}};
}
inline ChipCallable paged_attention_callable() {
  return ChipCallable{.name = "paged_attention",
                      .orchestration = workload_module("orch_paged_attention"),
                      .kernels = {{0, workload_module("kernel_pa_qk_matmul")},
                                  {1, workload_module("kernel_pa_softmax_prepare")},
                                  {2, workload_module("kernel_pa_pv_matmul")},
                                  {3, workload_module("kernel_pa_online_update")}}};
}
inline ChipCallable mixed_callable() {
  return ChipCallable{.name = "mixed",
                      .orchestration = workload_module("orch_mixed"),
                      .kernels = {{0, workload_module("kernel_record_core")}}};
}

/// A benchmark graph of N empty-kernel tasks: "chain" (one inout chain) or "independent".
inline ChipCallable noop_graph_callable(std::string_view graph) {
  return ChipCallable{.name = std::string(graph),
                      .orchestration = workload_module("orch_" + std::string(graph)),
                      .kernels = {{0, workload_module("kernel_noop")}}};
}

/// vector_example: f = (a + b + 1)(a + b + 2) + (a + b) over 128 x 128 floats.
struct VectorCase {
  static constexpr std::uint32_t kSide = 128;
  std::vector<float> a, b, f;
  VectorCase(float av, float bv)
      : a(kSide * kSide, av), b(kSide * kSide, bv), f(kSide * kSide, -1.0F) {}
  [[nodiscard]] TaskArgs args() {
    TaskArgs t;
    t.add_tensor(make_tensor(a.data(), {kSide, kSide}, DataType::Float32), TensorArgType::Input);
    t.add_tensor(make_tensor(b.data(), {kSide, kSide}, DataType::Float32), TensorArgType::Input);
    t.add_tensor(make_tensor(f.data(), {kSide, kSide}, DataType::Float32),
                 TensorArgType::OutputExisting);
    return t;
  }
  [[nodiscard]] static float want(float av, float bv) {
    const float c = av + bv;
    return (c + 1.0F) * (c + 2.0F) + c;
  }
  /// How many elements of f differ from want(a[i], b[i]).
  [[nodiscard]] std::size_t mismatches() const {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < f.size(); ++i) bad += f[i] != want(a[i], b[i]) ? 1 : 0;
    return bad;
  }
};

/// benchmark_bgemm: C[g * loop + i] += sum_k A[g, k, i] @ B[g, k, i]; 2 * groups * grid_k tasks.
struct BgemmCase {
  std::uint32_t tile, grid_k, groups, loop;
  std::vector<float> a, b, c, want;
  BgemmCase(std::uint32_t tile_, std::uint32_t grid_k_, std::uint32_t groups_, std::uint32_t loop_,
            std::uint32_t seed = 1)
      : tile(tile_), grid_k(grid_k_), groups(groups_), loop(loop_) {
    const std::size_t t2 = std::size_t{tile} * tile;
    a.resize(std::size_t{groups} * grid_k * loop * t2);
    b.resize(a.size());
    c.resize(std::size_t{groups} * loop * t2);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
    for (auto& v : a) v = dist(rng);
    for (auto& v : b) v = dist(rng);
    for (auto& v : c) v = dist(rng);  // C is inout: the GEMMs accumulate onto it
    want = c;
    for (std::uint32_t g = 0; g < groups; ++g) {
      for (std::uint32_t k = 0; k < grid_k; ++k) {
        for (std::uint32_t i = 0; i < loop; ++i) {
          const float* pa = a.data() + ((std::size_t{g} * grid_k + k) * loop + i) * t2;
          const float* pb = b.data() + ((std::size_t{g} * grid_k + k) * loop + i) * t2;
          float* pc = want.data() + (std::size_t{g} * loop + i) * t2;
          for (std::uint32_t r = 0; r < tile; ++r) {
            for (std::uint32_t col = 0; col < tile; ++col) {
              double acc = 0;
              for (std::uint32_t p = 0; p < tile; ++p) {
                acc += double{pa[r * tile + p]} * double{pb[p * tile + col]};
              }
              pc[r * tile + col] += static_cast<float>(acc);
            }
          }
        }
      }
    }
  }
  [[nodiscard]] std::uint64_t tasks() const { return 2ULL * groups * grid_k; }
  [[nodiscard]] TaskArgs args() {
    TaskArgs t;
    t.add_tensor(make_tensor(a.data(), {groups, grid_k, loop, tile, tile}, DataType::Float32),
                 TensorArgType::Input);
    t.add_tensor(make_tensor(b.data(), {groups, grid_k, loop, tile, tile}, DataType::Float32),
                 TensorArgType::Input);
    t.add_tensor(make_tensor(c.data(), {groups * loop, tile, tile}, DataType::Float32),
                 TensorArgType::InOut);
    t.add_scalar(tile).add_scalar(grid_k).add_scalar(groups).add_scalar(loop);
    return t;
  }
  /// The largest |c - want|.
  [[nodiscard]] float max_error() const {
    float e = 0;
    for (std::size_t i = 0; i < c.size(); ++i) e = std::max(e, std::fabs(c[i] - want[i]));
    return e;
  }
};

/// paged_attention: per batch b and head h, softmax(scale * q k^T) v over the first
/// context_lens[b] positions of b's paged KV cache (one KV head shared by all query heads).
struct PagedAttentionCase {
  std::uint32_t batch, heads, dim, block_size, max_blocks, num_blocks;
  float scale;
  std::vector<std::int32_t> lens, block_table;
  std::vector<float> query, key_cache, value_cache, out;

  PagedAttentionCase(std::vector<std::int32_t> lens_, std::uint32_t heads_, std::uint32_t dim_,
                     std::uint32_t block_size_, std::uint32_t seed = 7)
      : batch(static_cast<std::uint32_t>(lens_.size())),
        heads(heads_),
        dim(dim_),
        block_size(block_size_),
        max_blocks(0),
        num_blocks(0),
        scale(1.0F / std::sqrt(static_cast<float>(dim_))),
        lens(std::move(lens_)) {
    for (auto len : lens) {
      const auto blocks = (static_cast<std::uint32_t>(len) + block_size - 1) / block_size;
      max_blocks = std::max(max_blocks, blocks);
      num_blocks += blocks;
    }
    num_blocks += 2;  // blocks no sequence uses
    // Hand the blocks out in a shuffled order so each sequence's pages are scattered.
    std::mt19937 rng(seed);
    std::vector<std::int32_t> order(num_blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    block_table.assign(std::size_t{batch} * max_blocks, -1);
    std::size_t next = 0;
    for (std::uint32_t b = 0; b < batch; ++b) {
      const auto blocks = (static_cast<std::uint32_t>(lens[b]) + block_size - 1) / block_size;
      for (std::uint32_t j = 0; j < blocks; ++j) block_table[b * max_blocks + j] = order[next++];
    }
    std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
    query.resize(std::size_t{batch} * heads * dim);
    key_cache.resize(std::size_t{num_blocks} * block_size * dim);
    value_cache.resize(key_cache.size());
    for (auto& v : query) v = dist(rng);
    for (auto& v : key_cache) v = dist(rng);
    for (auto& v : value_cache) v = dist(rng);
    out.assign(query.size(), std::nanf(""));
  }

  [[nodiscard]] TaskArgs args() {
    TaskArgs t;
    t.add_tensor(make_tensor(query.data(), {batch, heads, dim}, DataType::Float32));
    t.add_tensor(make_tensor(key_cache.data(), {num_blocks, block_size, dim}, DataType::Float32));
    t.add_tensor(make_tensor(value_cache.data(), {num_blocks, block_size, dim}, DataType::Float32));
    t.add_tensor(make_tensor(block_table.data(), {batch, max_blocks}, DataType::Int32));
    t.add_tensor(make_tensor(lens.data(), {batch}, DataType::Int32));
    t.add_tensor(make_tensor(out.data(), {batch, heads, dim}, DataType::Float32),
                 TensorArgType::OutputExisting);
    t.add_scalar(float_scalar(scale));
    return t;
  }

  /// The plain softmax-attention result (double precision).
  [[nodiscard]] std::vector<float> reference() const {
    std::vector<float> ref(query.size());
    for (std::uint32_t b = 0; b < batch; ++b) {
      const auto len = static_cast<std::uint32_t>(lens[b]);
      std::vector<double> s(len);
      for (std::uint32_t h = 0; h < heads; ++h) {
        const float* q = query.data() + (std::size_t{b} * heads + h) * dim;
        auto row = [&](const std::vector<float>& cache, std::uint32_t pos) {
          const auto blk = static_cast<std::size_t>(block_table[b * max_blocks + pos / block_size]);
          return cache.data() + (blk * block_size + pos % block_size) * dim;
        };
        double mx = -INFINITY;
        for (std::uint32_t p = 0; p < len; ++p) {
          const float* k = row(key_cache, p);
          double dot = 0;
          for (std::uint32_t d = 0; d < dim; ++d) dot += double{q[d]} * double{k[d]};
          s[p] = double{scale} * dot;
          mx = std::max(mx, s[p]);
        }
        double sum = 0;
        for (auto& v : s) sum += (v = std::exp(v - mx));
        for (std::uint32_t d = 0; d < dim; ++d) {
          double acc = 0;
          for (std::uint32_t p = 0; p < len; ++p) acc += s[p] * double{row(value_cache, p)[d]};
          ref[(std::size_t{b} * heads + h) * dim + d] = static_cast<float>(acc / sum);
        }
      }
    }
    return ref;
  }
  /// The largest |out - reference()|; infinity if out holds a NaN (an element never written).
  [[nodiscard]] float max_error() const {
    const auto ref = reference();
    float e = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (std::isnan(out[i])) return INFINITY;
      e = std::max(e, std::fabs(out[i] - ref[i]));
    }
    return e;
  }
};

}  // namespace simpler::testing
