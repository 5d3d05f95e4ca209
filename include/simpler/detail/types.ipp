// Tensor names, validation and construction.
// Included once, at the end of its header; every function is inline (the library is header-only).
#pragma once

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <string>

#include "simpler/error.hpp"
#include "simpler/types.hpp"

namespace simpler {

inline const char* to_string(TensorArgType t) noexcept {
  switch (t) {
    case TensorArgType::Input:
      return "Input";
    case TensorArgType::Output:
      return "Output";
    case TensorArgType::InOut:
      return "InOut";
    case TensorArgType::OutputExisting:
      return "OutputExisting";
    case TensorArgType::NoDep:
      return "NoDep";
  }
  return "?";
}

inline const char* to_string(DataType t) noexcept {
  switch (t) {
    case DataType::Float32:
      return "Float32";
    case DataType::Float16:
      return "Float16";
    case DataType::Int32:
      return "Int32";
    case DataType::Int16:
      return "Int16";
    case DataType::Int8:
      return "Int8";
    case DataType::UInt8:
      return "UInt8";
    case DataType::BFloat16:
      return "BFloat16";
    case DataType::Int64:
      return "Int64";
    case DataType::UInt64:
      return "UInt64";
  }
  return "unknown";
}

namespace detail {
// What is wrong with a tensor, checked without building a message (per tensor on the submit
// path); tensor_defect() turns it into one.
enum class TensorDefect : std::uint8_t { None, Ndims, Dtype, ShapePastNdims, BytesOverflow, Wraps };

// Every submitted tensor passes here (TaskArgs::add_tensor), so the loops run over all
// kMaxTensorDims extents with the active ones selected, not up to ndims: fully unrolled and
// without branches, where the loops bounded by ndims cost ~50 instructions per tensor.
inline TensorDefect find_tensor_defect(const ContinuousTensor& t) noexcept {
  if (t.ndims == 0 || t.ndims > kMaxTensorDims) return TensorDefect::Ndims;
  if (!is_valid(t.dtype)) return TensorDefect::Dtype;
  std::uint32_t past = 0;  // any bit of an extent past ndims
  std::uint64_t bytes = element_size(t.dtype);
  bool overflow = false;
  for (std::uint32_t i = 0; i < kMaxTensorDims; ++i) {
    const bool active = i < t.ndims;
    past |= active ? 0U : t.shapes[i];
    overflow |= __builtin_mul_overflow(bytes, active ? t.shapes[i] : 1U, &bytes);
  }
  if (past != 0) return TensorDefect::ShapePastNdims;
  if (overflow) return TensorDefect::BytesOverflow;
  std::uint64_t last = 0;
  if (t.data != 0 && __builtin_add_overflow(t.data, bytes, &last)) return TensorDefect::Wraps;
  return TensorDefect::None;
}

// Why `t` is malformed, or "" when it is fine. Shared by validate() and the blob decoder so both
// reject exactly the same tensors.
inline std::string tensor_defect(const ContinuousTensor& t) {
  switch (find_tensor_defect(t)) {
    case TensorDefect::None:
      return {};
    case TensorDefect::Ndims:
      return fmt::format("ndims is {}; a tensor has 1 to {} dimensions", t.ndims, kMaxTensorDims);
    case TensorDefect::Dtype:
      return fmt::format("dtype value {} is not a DataType (0..{})", static_cast<unsigned>(t.dtype),
                         kDataTypeCount - 1);
    case TensorDefect::ShapePastNdims:
      for (std::uint32_t i = t.ndims; i < kMaxTensorDims; ++i) {
        if (t.shapes[i] != 0) {
          return fmt::format("shapes[{}] is {} but ndims is {}; extents past ndims must be 0", i,
                             t.shapes[i], t.ndims);
        }
      }
      break;
    case TensorDefect::BytesOverflow:
      return "its byte size does not fit in 64 bits";
    case TensorDefect::Wraps:
      return "its byte range wraps past the end of the address space";
  }
  return "malformed";
}

[[noreturn, gnu::cold, gnu::noinline]] inline void throw_invalid_tensor(const ContinuousTensor& t) {
  throw UsageError(fmt::format("invalid tensor: {}", tensor_defect(t)));
}
}  // namespace detail

inline void validate(const ContinuousTensor& t) {
  if (detail::find_tensor_defect(t) != detail::TensorDefect::None) [[unlikely]]
    detail::throw_invalid_tensor(t);
}

namespace detail {
inline std::uint32_t checked_extent(std::size_t n) {
  if (n > std::numeric_limits<std::uint32_t>::max()) {
    throw UsageError(fmt::format(
        "make_tensor: {} elements do not fit one extent (at most {}); give a multi-dimensional "
        "shape",
        n, std::numeric_limits<std::uint32_t>::max()));
  }
  return static_cast<std::uint32_t>(n);
}
}  // namespace detail

[[gnu::always_inline]] inline ContinuousTensor make_tensor(void* data,
                                                           std::span<const std::uint32_t> shape,
                                                           DataType dtype) {
  if (shape.empty() || shape.size() > kMaxTensorDims) {
    throw UsageError(fmt::format("make_tensor: {} dimensions given; a tensor has 1 to {}",
                                 shape.size(), kMaxTensorDims));
  }
  ContinuousTensor t;
  t.data = reinterpret_cast<std::uintptr_t>(data);
  t.ndims = static_cast<std::uint32_t>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) t.shapes[i] = shape[i];
  t.dtype = dtype;
  validate(t);
  return t;
}

}  // namespace simpler
