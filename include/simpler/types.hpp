// simpler — tensor descriptors and their tags.
//
// ContinuousTensor is the 40-byte POD every level passes around: a contiguous buffer described by
// its address, shape and element type. It is trivially copyable and carries no ownership.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

namespace simpler {

/// Element types. The values are ABI: they travel in args blobs and reach device runtimes.
enum class DataType : std::uint8_t {
  Float32 = 0,
  Float16 = 1,
  Int32 = 2,
  Int16 = 3,
  Int8 = 4,
  UInt8 = 5,
  BFloat16 = 6,
  Int64 = 7,
  UInt64 = 8,
};

inline constexpr std::uint8_t kDataTypeCount = 9;
inline constexpr std::uint32_t kMaxTensorDims = 5;

/// Bytes per element, or 0 for a value outside the enum.
constexpr std::size_t element_size(DataType t) noexcept {
  switch (t) {
    case DataType::Float32:
    case DataType::Int32:
      return 4;
    case DataType::Float16:
    case DataType::Int16:
    case DataType::BFloat16:
      return 2;
    case DataType::Int8:
    case DataType::UInt8:
      return 1;
    case DataType::Int64:
    case DataType::UInt64:
      return 8;
  }
  return 0;
}

constexpr bool is_valid(DataType t) noexcept {
  return static_cast<std::uint8_t>(t) < kDataTypeCount;
}

const char* to_string(DataType t) noexcept;

/// How a task uses a tensor. Read by the Orchestrator at submit to infer dependencies, then
/// dropped: slots, lanes, mailboxes and children never see tags.
enum class TensorArgType : std::int32_t {
  Input = 0,           ///< read: depends on live writers of the bytes it covers
  Output = 1,          ///< written; data == 0 means "allocate from the heap ring at submit"
  InOut = 2,           ///< read and written: depends on writers, then becomes the writer
  OutputExisting = 3,  ///< written into caller-owned memory; never auto-allocated
  NoDep = 4,           ///< passed through, no dependency tracking
};

/// "Input", "Output", ... ("?" for a value outside the enum).
const char* to_string(TensorArgType t) noexcept;

/// Which orderings tags imply between tasks that touch the same bytes (WorkerOptions::hazards,
/// ChipOptions::hazards). A writer is an InOut, an OutputExisting, or an Output over existing
/// bytes (data != 0); a reader is an Input or an InOut.
enum class Hazards : std::uint8_t {
  /// Every conflicting pair in submit order: a reader waits for the earlier writer of its bytes,
  /// a writer for the earlier writer and for the readers since (write after read), so tags alone
  /// are race-free. The default.
  All = 0,
  /// The seeds' exact semantics: only readers wait (for the earlier writer). A writer neither
  /// waits for the readers before it nor for the earlier writer, so it may overwrite bytes a
  /// running task still reads; order such pairs yourself.
  ReadAfterWrite = 1,
};

/// A contiguous tensor: 40 bytes, the same layout at every level and on every wire.
struct ContinuousTensor {
  std::uint64_t data = 0;  ///< address; 0 = no buffer yet (Output auto-alloc)
  std::array<std::uint32_t, kMaxTensorDims> shapes{};  ///< extents; slots past ndims are 0
  std::uint32_t ndims = 0;                             ///< 1..5
  DataType dtype = DataType::Float32;
  std::uint8_t child_memory = 0;  ///< 1 = memory owned by the next-level child (device memory)
  std::array<std::uint8_t, 6> reserved_{};

  /// Element count (product of the active extents).
  [[nodiscard]] std::uint64_t numel() const noexcept {
    std::uint64_t n = 1;
    for (std::uint32_t i = 0; i < ndims && i < kMaxTensorDims; ++i) n *= shapes[i];
    return n;
  }
  /// Bytes covered: numel * element_size(dtype). Valid for tensors that passed validate().
  [[nodiscard]] std::uint64_t nbytes() const noexcept { return numel() * element_size(dtype); }
  [[nodiscard]] void* ptr() const noexcept {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(data));
  }
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(ptr());
  }
};

static_assert(sizeof(ContinuousTensor) == 40, "ContinuousTensor is a 40-byte ABI type");
static_assert(std::is_trivially_copyable_v<ContinuousTensor>);
static_assert(std::is_standard_layout_v<ContinuousTensor>);

/// Throws UsageError naming the problem if `t` is not a well-formed tensor: ndims outside 1..5,
/// a non-zero extent past ndims, an unknown dtype, or a byte size that does not fit in 64 bits.
void validate(const ContinuousTensor& t);

/// A tensor over `data` with the given extents. Throws UsageError on too many dimensions or an
/// unknown dtype.
///
/// The make_tensor overloads and TaskArgs::add_tensor are always inlined: called apart, a tensor
/// went back through memory in pieces of 4, 8 and 16 bytes, and add_tensor's wide copy of it then
/// waited for those stores to drain (no store forwarding across pieces); a 3-tensor TaskArgs took
/// 73 ns to build that way against 42 inlined (docs/engine.md, "Known costs").
[[gnu::always_inline]] inline ContinuousTensor make_tensor(void* data,
                                                           std::span<const std::uint32_t> shape,
                                                           DataType dtype);
[[gnu::always_inline]] inline ContinuousTensor make_tensor(
    void* data, std::initializer_list<std::uint32_t> shape, DataType dtype) {
  return make_tensor(data, std::span<const std::uint32_t>(shape.begin(), shape.size()), dtype);
}

namespace detail {
/// The extent of a 1-D tensor over `n` elements; throws UsageError past 2^32 - 1.
std::uint32_t checked_extent(std::size_t n);

template <class T>
constexpr DataType data_type_of() noexcept {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>)
    return DataType::Float32;
  else if constexpr (std::is_same_v<U, std::int32_t>)
    return DataType::Int32;
  else if constexpr (std::is_same_v<U, std::int16_t>)
    return DataType::Int16;
  else if constexpr (std::is_same_v<U, std::int8_t>)
    return DataType::Int8;
  else if constexpr (std::is_same_v<U, std::uint8_t>)
    return DataType::UInt8;
  else if constexpr (std::is_same_v<U, std::int64_t>)
    return DataType::Int64;
  else if constexpr (std::is_same_v<U, std::uint64_t>)
    return DataType::UInt64;
  else
    static_assert(sizeof(T) == 0, "make_tensor<T>: no DataType for this element type");
}
}  // namespace detail

/// A 1-D tensor over a span; the dtype follows T.
template <class T>
[[gnu::always_inline]] inline ContinuousTensor make_tensor(std::span<T> data) {
  const std::uint32_t n = detail::checked_extent(data.size());
  return make_tensor(const_cast<std::remove_cv_t<T>*>(data.data()), {n}, detail::data_type_of<T>());
}

}  // namespace simpler

#include "simpler/detail/types.ipp"
