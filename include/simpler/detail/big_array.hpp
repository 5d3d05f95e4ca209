// simpler::detail::big_alloc, BigArray — memory for large tables read at random addresses (the
// TensorMap's hash index and its pools of segments and tree nodes at a million entries).
//
// At that size every access is a cache miss, and with 4 KiB pages also a TLB miss whose page
// walk misses again. A block of 2 MiB or more is mapped aligned to 2 MiB and marked
// MADV_HUGEPAGE, so where transparent huge pages are enabled for madvise (the Debian default)
// one TLB entry covers 2 MiB and the walk mostly goes. Where they are not, the hint does nothing
// and the block is ordinary memory. Smaller blocks come from operator new. Either way the memory
// starts zeroed. Thread-safe; big_bytes_mapped() counts what is mapped (malloc statistics do not
// see it).
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace simpler::detail {

/// The huge page size blocks are aligned to and rounded up to.
inline constexpr std::size_t kHugePage = std::size_t{2} << 20U;

inline std::atomic<std::size_t>& big_bytes_counter() noexcept {
  static std::atomic<std::size_t> bytes{0};
  return bytes;
}
/// Bytes currently mapped by big_alloc (blocks of kHugePage or more), for memory figures.
inline std::size_t big_bytes_mapped() noexcept {
  return big_bytes_counter().load(std::memory_order_relaxed);  // a statistic: no ordering
}

/// What a block of `bytes` (kHugePage or more) maps: `bytes` rounded up to whole huge pages.
/// Throws std::bad_alloc when that, with the huge page big_alloc maps on top to align it, would
/// not fit a size_t.
inline std::size_t huge_len(std::size_t bytes) {
  if (bytes > SIZE_MAX - 2 * kHugePage) throw std::bad_alloc();
  return (bytes + kHugePage - 1) & ~(kHugePage - 1);
}

/// `bytes` of zeroed memory aligned to 64 bytes (to kHugePage from kHugePage up). Throws
/// std::bad_alloc. Give it back with big_free(p, bytes), the same `bytes`.
inline void* big_alloc(std::size_t bytes) {
  if (bytes < kHugePage) {
    void* p = ::operator new (bytes == 0 ? 1 : bytes, std::align_val_t{64});
    std::memset(p, 0, bytes);
    return p;
  }
  const std::size_t len = huge_len(bytes);
  // Map one huge page more than needed, then unmap the slack on both sides so what stays
  // starts on a 2 MiB boundary (only an aligned 2 MiB range can be one huge page).
  void* raw =
      ::mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto base = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t start = (base + kHugePage - 1) & ~(kHugePage - 1);
  if (start > base) ::munmap(raw, start - base);
  const std::uintptr_t tail = base + len + kHugePage - (start + len);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(start + len), tail);
  auto* p = reinterpret_cast<void*>(start);
  // A hint: EINVAL where the kernel has no transparent huge pages; the memory works either way.
  (void)::madvise(p, len, MADV_HUGEPAGE);
  big_bytes_counter().fetch_add(len, std::memory_order_relaxed);
  return p;
}

inline void big_free(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kHugePage) {
    ::operator delete (p, std::align_val_t{64});
    return;
  }
  const std::size_t len = huge_len(bytes);  // cannot throw: big_alloc took the same bytes
  ::munmap(p, len);
  big_bytes_counter().fetch_sub(len, std::memory_order_relaxed);
}

/// A fixed-size array of trivial elements in big_alloc memory, every element's bytes zero at
/// the start. Move-only.
template <class T>
class BigArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  BigArray() = default;
  /// Throws std::bad_alloc when n elements do not fit memory (or a size_t).
  explicit BigArray(std::size_t n) : p_(static_cast<T*>(big_alloc(bytes_for(n)))), n_(n) {}
  BigArray(BigArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  BigArray& operator=(BigArray&& o) noexcept {
    BigArray(std::move(o)).swap(*this);
    return *this;
  }
  ~BigArray() { big_free(p_, n_ * sizeof(T)); }

  void swap(BigArray& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
  }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  [[nodiscard]] bool empty() const noexcept { return n_ == 0; }
  T& operator[](std::size_t i) noexcept { return p_[i]; }
  const T& operator[](std::size_t i) const noexcept { return p_[i]; }

 private:
  static std::size_t bytes_for(std::size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    return n * sizeof(T);
  }

  T* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace simpler::detail
