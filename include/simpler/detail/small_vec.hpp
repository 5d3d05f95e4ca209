// simpler::detail::SmallVec — a vector of trivially copyable values with inline storage.
//
// Used for task arguments and per-slot bookkeeping so that building and storing a task with a few
// tensors allocates nothing, and a recycled slot keeps whatever capacity it grew to. N = 0 gives
// no inline storage and a 16-byte object: for fields of records kept by the thousand (a task's
// slot), where a small record matters more than saving the first allocation, since a reused
// record keeps its storage. Not thread-safe; the usual single-owner rules of std::vector apply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace simpler::detail {

template <class T, std::size_t N>
class SmallVec {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVec holds trivially copyable values");

 public:
  SmallVec() noexcept {}  // user-provided: `const TaskArgs a;` must compile
  SmallVec(const SmallVec& o) { assign(o.data(), o.size()); }
  SmallVec(SmallVec&& o) noexcept { steal(o); }
  SmallVec& operator=(const SmallVec& o) {
    if (this != &o) assign(o.data(), o.size());
    return *this;
  }
  SmallVec& operator=(SmallVec&& o) noexcept {
    if (this != &o) {
      release();
      steal(o);
    }
    return *this;
  }
  ~SmallVec() { release(); }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return cap_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] T* data() noexcept { return ptr(); }
  [[nodiscard]] const T* data() const noexcept { return ptr(); }
  T& operator[](std::size_t i) noexcept { return ptr()[i]; }
  const T& operator[](std::size_t i) const noexcept { return ptr()[i]; }
  T* begin() noexcept { return ptr(); }
  T* end() noexcept { return ptr() + size_; }
  const T* begin() const noexcept { return ptr(); }
  const T* end() const noexcept { return ptr() + size_; }
  T& back() noexcept { return ptr()[size_ - 1]; }

  void clear() noexcept { size_ = 0; }
  void reserve(std::size_t n) {
    if (n > cap_) grow(n);
  }
  /// Resizes without initialising new elements.
  void resize_uninit(std::size_t n) {
    reserve(n);
    size_ = static_cast<std::uint32_t>(n);
  }
  void push_back(const T& v) {
    if (size_ == cap_) {
      const T copy = v;  // v may live inside this vector
      grow(std::size_t{cap_} * 2);
      ptr()[size_++] = copy;
      return;
    }
    ptr()[size_++] = v;
  }
  void pop_back() noexcept { --size_; }
  void assign(const T* src, std::size_t n) {
    reserve(n);
    if (n != 0) std::memmove(ptr(), src, n * sizeof(T));
    size_ = static_cast<std::uint32_t>(n);
  }

 private:
  // With inline storage, heap_ is null until the values spill; without, it is the storage.
  T* ptr() noexcept { return N == 0 || heap_ != nullptr ? heap_ : inline_.get(); }
  const T* ptr() const noexcept { return N == 0 || heap_ != nullptr ? heap_ : inline_.get(); }
  // The first heap storage: twice the inline capacity, or a cache line's worth without one.
  static constexpr std::size_t kFirst = N != 0 ? 2 * N : (64 / sizeof(T) > 2 ? 64 / sizeof(T) : 2);
  void grow(std::size_t n) {
    if (n < kFirst) n = kFirst;
    if (n > UINT32_MAX) throw std::bad_alloc();
    T* fresh = static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignof(T)}));
    if (size_ != 0) std::memcpy(fresh, ptr(), size_ * sizeof(T));
    release();
    heap_ = fresh;
    cap_ = static_cast<std::uint32_t>(n);
  }
  void release() noexcept {
    if (heap_ != nullptr) ::operator delete (heap_, std::align_val_t{alignof(T)});
    heap_ = nullptr;
    cap_ = N;
  }
  void steal(SmallVec& o) noexcept {
    if (o.heap_ != nullptr) {
      heap_ = std::exchange(o.heap_, nullptr);
      cap_ = std::exchange(o.cap_, static_cast<std::uint32_t>(N));
    } else if (o.size_ != 0) {
      std::memcpy(inline_.get(), o.inline_.get(), o.size_ * sizeof(T));
    }
    size_ = std::exchange(o.size_, 0);
  }

  template <std::size_t M, class = void>
  struct Inline {
    alignas(T) unsigned char bytes[M * sizeof(T)];
    T* get() noexcept { return reinterpret_cast<T*>(bytes); }
    const T* get() const noexcept { return reinterpret_cast<const T*>(bytes); }
  };
  template <class V>
  struct Inline<0, V> {
    T* get() noexcept { return nullptr; }
    const T* get() const noexcept { return nullptr; }
  };

  T* heap_ = nullptr;
  std::uint32_t size_ = 0;
  std::uint32_t cap_ = N;
  [[no_unique_address]] Inline<N> inline_;
};

}  // namespace simpler::detail
