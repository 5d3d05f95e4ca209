// paged_attention — decode attention over a paged KV cache, one KV block at a time with an
// online softmax. float32 throughout; one KV head shared by all query heads.
//   args:    tensors query [B, H, D], key_cache [NB, bs, D], value_cache [NB, bs, D] (float32),
//            block_table [B, max_blocks] (int32), context_lens [B] (int32), out [B, H, D]
//            (float32, written); scalar scale (float).
//   kernels: 0 pa_qk_matmul (AIC), 1 pa_softmax_prepare (AIV), 2 pa_pv_matmul (AIC),
//            3 pa_online_update (AIV).
//
//   per batch b (context length read on the device), per head tile (<= 128 heads), in a scope:
//     oi, li, mi = alloc                    the running softmax accumulators
//     per KV block bn (block index read from block_table), in an inner scope:
//       QK: s = q @ k^T  ->  SF: p, m, l  ->  PV: o = p @ v  ->  UP: merge into oi/li/mi
//     UP_{bn-1} -> UP_bn through the inout accumulators; the last UP writes out = oi / li.
//   Head tiles and batches are independent.
#include <simpler/device/orchestration.hpp>

#include <algorithm>
#include <cstdio>

using namespace simpler::device;

namespace {
constexpr std::int32_t kQk = 0;
constexpr std::int32_t kSoftmaxPrepare = 1;
constexpr std::int32_t kPv = 2;
constexpr std::int32_t kOnlineUpdate = 3;
constexpr std::uint32_t kMaxHeadTile = 128;
}  // namespace

extern "C" __attribute__((visibility("default"))) std::int32_t aicpu_orchestration_expected_args() {
  return 7;
}

SIMPLER_ORCHESTRATION(orch, args) {
  if (args.tensor_count != 6 || args.scalar_count != 1) {
    orch.report_fatal(
        "paged_attention: expects tensors query, key_cache, value_cache, block_table, "
        "context_lens, out and scalar scale");
    return;
  }
  const ChipTensor& query = args.tensors[0];
  const ChipTensor& key_cache = args.tensors[1];
  const ChipTensor& value_cache = args.tensors[2];
  const ChipTensor& block_table = args.tensors[3];
  const ChipTensor& context_lens = args.tensors[4];
  const ChipTensor& out = args.tensors[5];
  const float scale = from_u64<float>(args.scalars[0]);

  if (query.ndims != 3 || key_cache.ndims != 3 || value_cache.ndims != 3 ||
      block_table.ndims != 2 || out.ndims != 3 || query.dtype != SIMPLER_FLOAT32 ||
      key_cache.dtype != SIMPLER_FLOAT32 || value_cache.dtype != SIMPLER_FLOAT32 ||
      out.dtype != SIMPLER_FLOAT32 || block_table.dtype != SIMPLER_INT32 ||
      context_lens.dtype != SIMPLER_INT32) {
    orch.report_fatal(
        "paged_attention: needs float32 query [B, H, D], key_cache and value_cache [NB, bs, D], "
        "out [B, H, D]; int32 block_table [B, max_blocks] and context_lens [B]");
    return;
  }
  const std::uint32_t batch = query.shapes[0], heads = query.shapes[1], dim = query.shapes[2];
  const std::uint32_t num_blocks = key_cache.shapes[0], block_size = key_cache.shapes[1];
  const std::uint32_t max_blocks = block_table.shapes[1];
  const bool shapes_ok = key_cache.shapes[2] == dim && value_cache.shapes[0] == num_blocks &&
                         value_cache.shapes[1] == block_size && value_cache.shapes[2] == dim &&
                         block_table.shapes[0] == batch &&
                         simpler_tensor_numel(&context_lens) == batch && out.shapes[0] == batch &&
                         out.shapes[1] == heads && out.shapes[2] == dim;
  if (!shapes_ok || batch == 0 || heads == 0 || dim == 0 || block_size == 0 || max_blocks == 0) {
    orch.report_fatal("paged_attention: the tensor shapes do not agree (B, H, D, NB, bs)");
    return;
  }
  const std::uint32_t head_tile = std::min(heads, kMaxHeadTile);

  for (std::uint32_t b = 0; b < batch && !orch.fatal(); ++b) {
    const auto ctx_len = orch.read<std::int32_t>(context_lens, b);
    if (orch.fatal()) return;
    if (ctx_len <= 0 ||
        static_cast<std::uint64_t>(ctx_len) > static_cast<std::uint64_t>(max_blocks) * block_size) {
      char msg[160];
      std::snprintf(
          msg, sizeof msg,
          "paged_attention: context_lens[%u] = %d; it must be in 1..max_blocks * "
          "block_size = %llu",
          b, ctx_len,
          static_cast<unsigned long long>(static_cast<std::uint64_t>(max_blocks) * block_size));
      orch.report_fatal(msg);
      return;
    }
    const auto len = static_cast<std::uint32_t>(ctx_len);
    const std::uint32_t blocks = (len + block_size - 1) / block_size;

    for (std::uint32_t h0 = 0; h0 < heads; h0 += head_tile) {
      auto scope = orch.scope();
      const std::uint32_t qt = std::min(head_tile, heads - h0);
      const std::uint64_t row = (static_cast<std::uint64_t>(b) * heads + h0) * dim;
      const ChipTensor qi = view(query, row, {qt, dim});
      const ChipTensor out_view = view(out, row, {qt, dim});
      const ChipTensor oi = orch.alloc({qt, dim});
      const ChipTensor li = orch.alloc({qt});
      const ChipTensor mi = orch.alloc({qt});

      for (std::uint32_t bn = 0; bn < blocks; ++bn) {
        const auto blk =
            orch.read<std::int32_t>(block_table, static_cast<std::uint64_t>(b) * max_blocks + bn);
        if (orch.fatal()) return;
        if (blk < 0 || static_cast<std::uint32_t>(blk) >= num_blocks) {
          char msg[128];
          std::snprintf(msg, sizeof msg,
                        "paged_attention: block_table[%u][%u] = %d is not a block of the cache "
                        "(0..%u)",
                        b, bn, blk, num_blocks - 1);
          orch.report_fatal(msg);
          return;
        }
        const std::uint64_t kv_at = static_cast<std::uint64_t>(blk) * block_size * dim;
        const ChipTensor kj = view(key_cache, kv_at, {block_size, dim});
        const ChipTensor vj = view(value_cache, kv_at, {block_size, dim});
        const std::uint32_t valid = std::min(block_size, len - bn * block_size);

        auto inner = orch.scope();
        const ChipTensor sij =
            orch.aic(kQk, Task().input(qi).input(kj).output({qt, block_size})).tensor(2);
        const Submitted sf = orch.aiv(kSoftmaxPrepare, Task()
                                                           .input(sij)
                                                           .output({qt, block_size})
                                                           .output({qt})
                                                           .output({qt})
                                                           .scalar(scale)
                                                           .scalar(std::int64_t{valid}));
        const ChipTensor oij =
            orch.aic(kPv, Task().input(sf.tensor(1)).input(vj).output({qt, dim})).tensor(2);
        orch.aiv(kOnlineUpdate, Task()
                                    .input(sf.tensor(2))
                                    .input(sf.tensor(3))
                                    .input(oij)
                                    .inout(mi)
                                    .inout(li)
                                    .inout(oi)
                                    .output(out_view)
                                    .scalar(std::int64_t{bn == 0})
                                    .scalar(std::int64_t{bn + 1 == blocks}));
      }
    }
  }
}
