// The args blob codec.
// Included once, at the end of its header; every function is inline (the library is header-only).
#pragma once

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <string>

#include "simpler/args_blob.hpp"
#include "simpler/error.hpp"
#include "simpler/task_args.hpp"
#include "simpler/types.hpp"

namespace simpler {

inline std::size_t encode_args_blob(const TaskArgsView& v, std::span<std::byte> out) {
  if (v.tensor_count < 0 || v.scalar_count < 0) {
    throw UsageError(fmt::format("args blob: negative count in the view (tensors {}, scalars {})",
                                 v.tensor_count, v.scalar_count));
  }
  const std::size_t need = args_blob_size(v);
  if (out.size() < need) {
    throw UsageError(
        fmt::format("args blob needs {} bytes ({} tensors, {} scalars) but only {} are available",
                    need, v.tensor_count, v.scalar_count, out.size()));
  }
  std::byte* p = out.data();
  std::memcpy(p, &v.tensor_count, 4);
  std::memcpy(p + 4, &v.scalar_count, 4);
  p += kArgsBlobHeaderBytes;
  const std::size_t tbytes = static_cast<std::size_t>(v.tensor_count) * sizeof(ContinuousTensor);
  if (tbytes != 0) std::memcpy(p, v.tensors, tbytes);
  p += tbytes;
  const std::size_t sbytes = static_cast<std::size_t>(v.scalar_count) * sizeof(std::uint64_t);
  if (sbytes != 0) std::memcpy(p, v.scalars, sbytes);
  return need;
}

inline TaskArgsView decode_args_blob(std::span<const std::byte> in) {
  if (in.size() < kArgsBlobHeaderBytes) {
    throw TransportError(
        fmt::format("args blob of {} bytes is shorter than its 8-byte header", in.size()));
  }
  if (reinterpret_cast<std::uintptr_t>(in.data()) % 8 != 0) {
    throw TransportError("args blob is not 8-byte aligned");
  }
  std::int32_t t = 0;
  std::int32_t s = 0;
  std::memcpy(&t, in.data(), 4);
  std::memcpy(&s, in.data() + 4, 4);
  if (t < 0 || s < 0) {
    throw TransportError(
        fmt::format("args blob has a negative count (tensors {}, scalars {})", t, s));
  }
  const std::uint64_t need = kArgsBlobHeaderBytes +
                             static_cast<std::uint64_t>(t) * sizeof(ContinuousTensor) +
                             static_cast<std::uint64_t>(s) * sizeof(std::uint64_t);
  if (need > in.size()) {
    throw TransportError(
        fmt::format("args blob claims {} tensors and {} scalars ({} bytes) but holds only {} bytes",
                    t, s, need, in.size()));
  }
  TaskArgsView v;
  v.tensor_count = t;
  v.scalar_count = s;
  v.tensors = reinterpret_cast<const ContinuousTensor*>(in.data() + kArgsBlobHeaderBytes);
  v.scalars = reinterpret_cast<const std::uint64_t*>(
      in.data() + kArgsBlobHeaderBytes + static_cast<std::size_t>(t) * sizeof(ContinuousTensor));
  for (std::int32_t i = 0; i < t; ++i) {
    if (auto why = detail::tensor_defect(v.tensors[i]); !why.empty()) {
      throw TransportError(fmt::format("args blob tensor {} is malformed: {}", i, why));
    }
  }
  return v;
}

}  // namespace simpler
