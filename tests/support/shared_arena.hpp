// Test support: memory visible to forked children. Tasks run by ForkShmTransport lanes write in
// another process, so every buffer and counter a test checks lives in a MAP_SHARED mapping made
// before the Worker forks (Worker::init): then it is at the same address in parent and child.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <new>
#include <span>
#include <stdexcept>

namespace simpler::testing {

class SharedArena {
 public:
  explicit SharedArena(std::size_t bytes = std::size_t{8} << 20) : size_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("SharedArena: mmap failed");
    base_ = static_cast<std::byte*>(p);
  }
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;
  ~SharedArena() { ::munmap(base_, size_); }

  /// n values initialised to `init`, 64-byte aligned.
  template <class T>
  std::span<T> make(std::size_t n, const T& init = T{}) {
    top_ = (top_ + 63) & ~std::size_t{63};
    if (top_ + n * sizeof(T) > size_) throw std::runtime_error("SharedArena: out of space");
    T* p = reinterpret_cast<T*>(base_ + top_);
    for (std::size_t i = 0; i < n; ++i) new (p + i) T(init);
    top_ += n * sizeof(T);
    return {p, n};
  }
  /// Forgets every allocation (trivially destructible contents only); the mapping stays.
  void reset() noexcept { top_ = 0; }

  /// One object constructed in shared memory (e.g. a std::atomic counter).
  template <class T, class... A>
  T& one(A&&... a) {
    top_ = (top_ + 63) & ~std::size_t{63};
    if (top_ + sizeof(T) > size_) throw std::runtime_error("SharedArena: out of space");
    T* p = new (base_ + top_) T(std::forward<A>(a)...);
    top_ += sizeof(T);
    return *p;
  }

 private:
  std::byte* base_ = nullptr;
  std::size_t size_;
  std::size_t top_ = 0;
};

}  // namespace simpler::testing
