// simpler — the args blob: how TaskArgs travel on any wire (mailbox, socket).
//
// Layout, little-endian, memcpy only, no tags:
//   [int32 T][int32 S][T x 40-byte ContinuousTensor][S x uint64]
// A blob starts 8-byte aligned, so scalars are aligned by construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "simpler/task_args.hpp"

namespace simpler {

inline constexpr std::size_t kArgsBlobHeaderBytes = 8;

/// Bytes the blob of `v` takes.
constexpr std::size_t args_blob_size(const TaskArgsView& v) noexcept {
  return kArgsBlobHeaderBytes +
         static_cast<std::size_t>(v.tensor_count) * sizeof(ContinuousTensor) +
         static_cast<std::size_t>(v.scalar_count) * sizeof(std::uint64_t);
}

/// Writes the blob of `v` into `out` and returns the bytes written. Throws UsageError, writing
/// nothing, when `out` is smaller than args_blob_size(v).
std::size_t encode_args_blob(const TaskArgsView& v, std::span<std::byte> out);

/// A view over the blob in `in` (pointing into `in`, which must stay alive and 8-byte aligned).
/// Rejects every malformed blob with TransportError naming the defect: fewer than 8 bytes, a
/// misaligned buffer, a negative count, counts whose size runs past the buffer, or a tensor
/// that fails validate().
TaskArgsView decode_args_blob(std::span<const std::byte> in);

}  // namespace simpler

#include "simpler/detail/args_blob.ipp"
