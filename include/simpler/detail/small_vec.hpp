// simpler::detail::SmallVec — a vector of trivially copyable values with inline storage.
//
// Used for task arguments and per-slot bookkeeping so that building and storing a task with a few
// tensors allocates nothing, and a recycled slot keeps whatever capacity it grew to. Not
// thread-safe; the usual single-owner rules of std::vector apply.
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
    size_ = n;
  }
  void push_back(const T& v) {
    if (size_ == cap_) {
      const T copy = v;  // v may live inside this vector
      grow(cap_ * 2);
      ptr()[size_++] = copy;
      return;
    }
    ptr()[size_++] = v;
  }
  void pop_back() noexcept { --size_; }
  void assign(const T* src, std::size_t n) {
    reserve(n);
    if (n != 0) std::memmove(ptr(), src, n * sizeof(T));
    size_ = n;
  }

 private:
  T* ptr() noexcept { return heap_ ? heap_ : reinterpret_cast<T*>(inline_); }
  const T* ptr() const noexcept { return heap_ ? heap_ : reinterpret_cast<const T*>(inline_); }
  void grow(std::size_t n) {
    if (n < 2 * N) n = 2 * N;
    T* fresh = static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignof(T)}));
    if (size_ != 0) std::memcpy(fresh, ptr(), size_ * sizeof(T));
    release();
    heap_ = fresh;
    cap_ = n;
  }
  void release() noexcept {
    if (heap_ != nullptr) ::operator delete (heap_, std::align_val_t{alignof(T)});
    heap_ = nullptr;
    cap_ = N;
  }
  void steal(SmallVec& o) noexcept {
    if (o.heap_ != nullptr) {
      heap_ = std::exchange(o.heap_, nullptr);
      cap_ = std::exchange(o.cap_, N);
    } else if (o.size_ != 0) {
      std::memcpy(inline_, o.inline_, o.size_ * sizeof(T));
    }
    size_ = std::exchange(o.size_, 0);
  }

  T* heap_ = nullptr;
  std::size_t size_ = 0;
  std::size_t cap_ = N;
  alignas(T) unsigned char inline_[N * sizeof(T)];
};

/// No inline storage and a 16-byte header: for fields of records kept by the thousand (a task's
/// slot), where most hold nothing or keep the capacity they grew to across reuse, so a compact
/// record matters more than saving the first allocation.
template <class T>
class SmallVec<T, 0> {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVec holds trivially copyable values");

 public:
  SmallVec() noexcept = default;
  SmallVec(const SmallVec& o) { assign(o.data(), o.size()); }
  SmallVec(SmallVec&& o) noexcept
      : heap_(std::exchange(o.heap_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        cap_(std::exchange(o.cap_, 0)) {}
  SmallVec& operator=(const SmallVec& o) {
    if (this != &o) assign(o.data(), o.size());
    return *this;
  }
  SmallVec& operator=(SmallVec&& o) noexcept {
    if (this != &o) {
      release();
      heap_ = std::exchange(o.heap_, nullptr);
      size_ = std::exchange(o.size_, 0);
      cap_ = std::exchange(o.cap_, 0);
    }
    return *this;
  }
  ~SmallVec() { release(); }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return cap_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] T* data() noexcept { return heap_; }
  [[nodiscard]] const T* data() const noexcept { return heap_; }
  T& operator[](std::size_t i) noexcept { return heap_[i]; }
  const T& operator[](std::size_t i) const noexcept { return heap_[i]; }
  T* begin() noexcept { return heap_; }
  T* end() noexcept { return heap_ + size_; }
  const T* begin() const noexcept { return heap_; }
  const T* end() const noexcept { return heap_ + size_; }
  T& back() noexcept { return heap_[size_ - 1]; }

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
      heap_[size_++] = copy;
      return;
    }
    heap_[size_++] = v;
  }
  void pop_back() noexcept { --size_; }
  void assign(const T* src, std::size_t n) {
    reserve(n);
    if (n != 0) std::memmove(heap_, src, n * sizeof(T));
    size_ = static_cast<std::uint32_t>(n);
  }

 private:
  static constexpr std::size_t kFirst = 64 / sizeof(T) > 2 ? 64 / sizeof(T) : 2;
  void grow(std::size_t n) {
    if (n < kFirst) n = kFirst;  // a cache line's worth at first
    if (n > UINT32_MAX) throw std::bad_alloc();
    T* fresh = static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignof(T)}));
    if (size_ != 0) std::memcpy(fresh, heap_, size_ * sizeof(T));
    release();
    heap_ = fresh;
    cap_ = static_cast<std::uint32_t>(n);
  }
  void release() noexcept {
    if (heap_ != nullptr) ::operator delete (heap_, std::align_val_t{alignof(T)});
    heap_ = nullptr;
    cap_ = 0;
  }

  T* heap_ = nullptr;
  std::uint32_t size_ = 0;
  std::uint32_t cap_ = 0;
};

}  // namespace simpler::detail
