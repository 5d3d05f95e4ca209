// chip_paged_attention — decode attention over a paged KV cache on one simulated chip (L2),
// one KV block at a time with an online softmax.
//
//   ChipWorker (L2, device 0)
//   ├── AICPU: orchestrator (runs orch_paged_attention.so; reads context_lens and the block
//   │          table on the device) + schedulers
//   └── AICore clusters, each 1 AIC (QK and PV matmuls) + 2 AIV (softmax, online update)
//
//   per sequence, per KV block:  QK ──► SF ──► PV ──► UP ──► (next block's UP) ... ──► out
#include <simpler/simpler.hpp>

#include <bit>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

int main() {
  using namespace simpler;
  const std::string dir = SIMPLER_DEVICE_MODULE_DIR;
  ChipCallable paged_attention{.name = "paged_attention",
                               .orchestration = dir + "/orch_paged_attention.so",
                               .kernels = {{0, dir + "/kernel_pa_qk_matmul.so"},
                                           {1, dir + "/kernel_pa_softmax_prepare.so"},
                                           {2, dir + "/kernel_pa_pv_matmul.so"},
                                           {3, dir + "/kernel_pa_online_update.so"}}};
  ChipWorker chip(/*device_id=*/0);
  chip.init();
  const int id = chip.register_callable(paged_attention);

  // Two sequences of 33 and 128 tokens, 16 heads of dimension 16, KV blocks of 16 tokens. The
  // cache holds 3 + 8 blocks, handed out back to front so each sequence's pages are not in order.
  constexpr std::uint32_t batch = 2, heads = 16, dim = 16, bs = 16, max_blocks = 8;
  constexpr std::uint32_t num_blocks = 11;
  std::vector<std::int32_t> lens = {33, 128};
  std::vector<std::int32_t> block_table(batch * max_blocks, -1);
  std::int32_t next = num_blocks;
  for (std::uint32_t b = 0; b < batch; ++b) {
    for (std::uint32_t j = 0; j * bs < static_cast<std::uint32_t>(lens[b]); ++j) {
      block_table[b * max_blocks + j] = --next;
    }
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> query(batch * heads * dim), key(num_blocks * bs * dim), value(key.size());
  for (auto& v : query) v = dist(rng);
  for (auto& v : key) v = dist(rng);
  for (auto& v : value) v = dist(rng);
  std::vector<float> out(query.size(), 0.0F);
  const float scale = 1.0F / std::sqrt(static_cast<float>(dim));

  TaskArgs args;
  args.add_tensor(make_tensor(query.data(), {batch, heads, dim}, DataType::Float32));
  args.add_tensor(make_tensor(key.data(), {num_blocks, bs, dim}, DataType::Float32));
  args.add_tensor(make_tensor(value.data(), {num_blocks, bs, dim}, DataType::Float32));
  args.add_tensor(make_tensor(block_table.data(), {batch, max_blocks}, DataType::Int32));
  args.add_tensor(make_tensor(lens.data(), {batch}, DataType::Int32));
  args.add_tensor(make_tensor(out.data(), {batch, heads, dim}, DataType::Float32),
                  TensorArgType::OutputExisting);
  args.add_scalar(std::bit_cast<std::uint32_t>(scale));
  chip.run(id, args);
  const auto stats = chip.stats();
  chip.finalize();

  // Reference: out[b, h] = softmax(scale * q k^T) v over the sequence's first lens[b] tokens.
  double worst = 0;
  for (std::uint32_t b = 0; b < batch; ++b) {
    const auto len = static_cast<std::uint32_t>(lens[b]);
    auto token = [&](const std::vector<float>& cache, std::uint32_t p) {
      return cache.data() + (block_table[b * max_blocks + p / bs] * bs + p % bs) * dim;
    };
    for (std::uint32_t h = 0; h < heads; ++h) {
      const float* q = query.data() + (b * heads + h) * dim;
      std::vector<double> w(len);
      double mx = -INFINITY, sum = 0;
      for (std::uint32_t p = 0; p < len; ++p) {
        double dot = 0;
        for (std::uint32_t d = 0; d < dim; ++d) dot += double{q[d]} * token(key, p)[d];
        w[p] = scale * dot;
        mx = std::fmax(mx, w[p]);
      }
      for (auto& x : w) sum += (x = std::exp(x - mx));
      for (std::uint32_t d = 0; d < dim; ++d) {
        double want = 0;
        for (std::uint32_t p = 0; p < len; ++p) want += w[p] * token(value, p)[d] / sum;
        worst = std::fmax(worst, std::fabs(out[(b * heads + h) * dim + d] - want));
      }
    }
  }
  if (!(worst <= 1e-4)) {
    std::printf("chip_paged_attention: max |out - reference| = %g, above the 1e-4 tolerance\n",
                worst);
    return 1;
  }
  std::printf(
      "chip_paged_attention: %u sequences (33 and 128 tokens), %u heads: %llu tasks, "
      "max error %.2g\n",
      batch, heads, static_cast<unsigned long long>(stats.tasks_completed), worst);
  return 0;
}
