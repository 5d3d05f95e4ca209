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
__extension__ using u128 = unsigned __int128;

// Why `t` is malformed, or nullptr when it is fine. Shared by validate() and the blob decoder so
// both reject exactly the same tensors.
inline std::string tensor_defect(const ContinuousTensor& t) {
  if (t.ndims == 0 || t.ndims > kMaxTensorDims) {
    return fmt::format("ndims is {}; a tensor has 1 to {} dimensions", t.ndims, kMaxTensorDims);
  }
  if (!is_valid(t.dtype)) {
    return fmt::format("dtype value {} is not a DataType (0..{})", static_cast<unsigned>(t.dtype),
                       kDataTypeCount - 1);
  }
  for (std::uint32_t i = t.ndims; i < kMaxTensorDims; ++i) {
    if (t.shapes[i] != 0) {
      return fmt::format("shapes[{}] is {} but ndims is {}; extents past ndims must be 0", i,
                         t.shapes[i], t.ndims);
    }
  }
  u128 bytes = element_size(t.dtype);
  for (std::uint32_t i = 0; i < t.ndims; ++i) {
    bytes *= t.shapes[i];
    if (bytes > std::numeric_limits<std::uint64_t>::max()) {
      return "its byte size does not fit in 64 bits";
    }
  }
  if (t.data != 0 && static_cast<u128>(t.data) + bytes >
                         static_cast<u128>(std::numeric_limits<std::uint64_t>::max())) {
    return "its byte range wraps past the end of the address space";
  }
  return {};
}
}  // namespace detail

inline void validate(const ContinuousTensor& t) {
  if (auto why = detail::tensor_defect(t); !why.empty()) {
    throw UsageError(fmt::format("invalid tensor: {}", why));
  }
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

inline ContinuousTensor make_tensor(void* data, std::span<const std::uint32_t> shape,
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
