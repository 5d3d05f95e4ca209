// The program format of the fuzz_program test orchestration (fuzz_program.cpp), shared with the
// tests that write programs by hand (tests/test_device_bounds.cpp) and the device fuzzer
// (tests/fuzz/fuzz_device.cpp). Header-only and free of link dependencies (the orchestration .so
// includes it).
//
// The orchestration runs a program of byte-coded operations against the runtime, each one's
// fields taken from the program as given: submits with any kernels, tags and tensor descriptors,
// alloc_tensor with any shapes, read_tensor with any offset and size, scopes. It keeps a list of
// buffers whose real extent it knows (the run's tensors, runtime-allocated outputs and allocs)
// and aborts the process when the runtime accepts what it must refuse: a read outside the view,
// a view whose offset and size wrap, an output or alloc whose byte size overflows. Every other
// outcome (an accepted call, a run failed with a named status) is fine.
//
// Run arguments: tensor 0 is the program (UINT8, 1-D), the other tensors are buffers (honest:
// their descriptor matches their memory); scalars are ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <simpler/device/task_abi.h>

namespace fuzz_program {

enum Op : std::uint8_t {
  kSubmit = 0,      ///< kernels, tensors, scalars
  kRead = 1,        ///< read_tensor of a view of a known buffer
  kAlloc = 2,       ///< alloc_tensor
  kScopeBegin = 3,  ///< scope_begin
  kScopeEnd = 4,    ///< scope_end
  kReadNull = 5,    ///< read_tensor with a NULL tensor or destination
  kOps = 6,
};

/// How a submit's tensor is made (the `source` byte).
enum Source : std::uint8_t {
  kKnown = 0,     ///< a known buffer as it is
  kRawView = 1,   ///< a known buffer's address with any offset, shapes, ndims and dtype
  kDescribe = 2,  ///< shapes/ndims/dtype only, address 0 (what an Output describes)
  kRawAddr = 3,   ///< any address too (kernels are no-ops: nothing dereferences it)
  kSources = 4,
};

/// How a read's view is made (the `mode` byte).
enum ViewMode : std::uint8_t {
  kInside = 0,  ///< inside the buffer: offset and length clamped to its extent
  kWraps = 1,   ///< offset + size wraps past 2^64 (the runtime must refuse the read)
  kOwner = 2,   ///< as kInside, with any owner_task (one the run never created is refused)
  kModes = 3,
};

/// Compact numbers: a byte b < 0xf0 is b itself; 0xf0 is followed by the raw little-endian value;
/// 0xf1..0xff are the largest values (max, max - 1, ...).
inline constexpr std::uint8_t kRawFollows = 0xf0;

/// Reads the program (or any fuzz input) front to back; past the end everything reads 0.
class Reader {
 public:
  Reader(const std::uint8_t* p, std::size_t n) noexcept : p_(p), n_(n) {}
  [[nodiscard]] bool done() const noexcept { return at_ >= n_; }
  [[nodiscard]] std::size_t left() const noexcept { return done() ? 0 : n_ - at_; }
  [[nodiscard]] const std::uint8_t* rest() const noexcept { return p_ + at_; }
  std::uint8_t u8() noexcept { return done() ? 0 : p_[at_++]; }
  template <class T>
  T raw() noexcept {
    T v{};
    const std::size_t k = left() < sizeof(T) ? left() : sizeof(T);
    if (k > 0) std::memcpy(&v, p_ + at_, k);
    at_ += k;
    return v;
  }
  template <class T>
  T compact() noexcept {
    const std::uint8_t b = u8();
    if (b < kRawFollows) return static_cast<T>(b);
    if (b == kRawFollows) return raw<T>();
    return static_cast<T>(static_cast<T>(~T{0}) - static_cast<T>(b - 0xf1));
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
  std::size_t at_ = 0;
};

/// Writes programs (the counterpart of Reader), for hand-written cases.
class Writer {
 public:
  Writer& u8(std::uint8_t v) {
    bytes.push_back(v);
    return *this;
  }
  template <class T>
  Writer& raw(T v) {
    const auto* b = reinterpret_cast<const std::uint8_t*>(&v);
    bytes.insert(bytes.end(), b, b + sizeof(T));
    return *this;
  }
  /// A compact number, always in its raw form (exact for any value).
  template <class T>
  Writer& compact(T v) {
    u8(kRawFollows);
    return raw(v);
  }
  std::vector<std::uint8_t> bytes;
};

/// Byte size of a descriptor's elements, or false when it overflows 64 bits or exceeds
/// SIMPLER_MAX_TENSOR_BYTES (the runtime must refuse such a tensor). Written independently of
/// simpler_tensor_nbytes_checked, which it checks.
inline bool checked_nbytes(const std::uint32_t* shapes, std::uint32_t ndims, std::uint32_t dsize,
                           std::uint64_t& out) noexcept {
  std::uint64_t n = dsize;
  bool overflow = false, zero = false;
  for (std::uint32_t i = 0; i < ndims && i < 5; ++i) {
    overflow = __builtin_mul_overflow(n, std::uint64_t{shapes[i]}, &n) || overflow;
    zero = zero || shapes[i] == 0;
  }
  if (zero) {  // a zero extent makes the size 0 whatever the others are
    out = 0;
    return true;
  }
  if (overflow || n > SIMPLER_MAX_TENSOR_BYTES) return false;
  out = n;
  return true;
}

}  // namespace fuzz_program
