// simpler::detail::SmallVec — a vector of trivially copyable values with inline storage.
//
// Used for task arguments and per-slot bookkeeping so that building and storing a task with a few
// tensors allocates nothing, and a recycled slot keeps whatever capacity it grew to. With inline
// storage the object points into itself, so it is moved and copied only through its members. N = 0
// gives no inline storage and a 16-byte object: for fields of records kept by the thousand (a
// task's slot), where a small record matters more than saving the first allocation, since a reused
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
  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  T* begin() noexcept { return data_; }
  T* end() noexcept { return data_ + size_; }
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }
  T& back() noexcept { return data_[size_ - 1]; }

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
      data_[size_++] = copy;
      return;
    }
    data_[size_++] = v;
  }
  void pop_back() noexcept { --size_; }
  void assign(const T* src, std::size_t n) {
    reserve(n);
    if (n != 0) std::memmove(data_, src, n * sizeof(T));
    size_ = static_cast<std::uint32_t>(n);
  }

 private:
  [[nodiscard]] bool on_heap() const noexcept {
    return N == 0 ? data_ != nullptr : data_ != inline_.get();
  }
  // The first heap storage: twice the inline capacity, or a cache line's worth without one.
  static constexpr std::size_t kFirst = N != 0 ? 2 * N : (64 / sizeof(T) > 2 ? 64 / sizeof(T) : 2);
  void grow(std::size_t n) {
    if (n < kFirst) n = kFirst;
    if (n > UINT32_MAX) throw std::bad_alloc();
    T* fresh = static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignof(T)}));
    if (size_ != 0) std::memcpy(fresh, data_, size_ * sizeof(T));
    release();
    data_ = fresh;
    cap_ = static_cast<std::uint32_t>(n);
  }
  void release() noexcept {
    if (on_heap()) ::operator delete (data_, std::align_val_t{alignof(T)});
    data_ = inline_.get();
    cap_ = N;
  }
  void steal(SmallVec& o) noexcept {
    if (o.on_heap()) {
      data_ = std::exchange(o.data_, o.inline_.get());
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

  [[no_unique_address]] Inline<N> inline_;  // first: data_'s initialiser takes its address
  // The storage in use: the inline bytes until the values spill (null without them), then the
  // heap block. One load per access: the submit path indexes these vectors often, and choosing
  // between a heap pointer and the inline bytes at each access cost a compare and a conditional
  // move every time.
  T* data_ = inline_.get();
  std::uint32_t size_ = 0;
  std::uint32_t cap_ = N;
};

}  // namespace simpler::detail
