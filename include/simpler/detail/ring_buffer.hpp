// simpler::detail::RingBuffer — a growable FIFO of trivially copyable values.
//
// Backs the scheduler's ready queues and the heap rings' allocation records. Grows by doubling and
// never shrinks, so a queue that reached its working size allocates nothing afterwards (unlike
// std::deque, which allocates and frees blocks as it churns). Single-owner, not thread-safe.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <type_traits>

namespace simpler::detail {

template <class T>
class RingBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  RingBuffer() = default;
  explicit RingBuffer(std::size_t initial) { reserve_pow2(initial); }

  [[nodiscard]] bool empty() const noexcept { return head_ == tail_; }
  [[nodiscard]] std::size_t size() const noexcept { return tail_ - head_; }
  void clear() noexcept { head_ = tail_ = 0; }

  void push_back(const T& v) {
    if (size() == cap_) grow();
    buf_[tail_++ & (cap_ - 1)] = v;
  }
  /// Puts `v` at the front (used to return an item that could not be placed yet).
  void push_front(const T& v) {
    if (size() == cap_) grow();
    buf_[--head_ & (cap_ - 1)] = v;
  }
  T& front() noexcept { return buf_[head_ & (cap_ - 1)]; }
  const T& front() const noexcept { return buf_[head_ & (cap_ - 1)]; }
  T& operator[](std::size_t i) noexcept { return buf_[(head_ + i) & (cap_ - 1)]; }
  const T& operator[](std::size_t i) const noexcept { return buf_[(head_ + i) & (cap_ - 1)]; }
  T pop_front() noexcept { return buf_[head_++ & (cap_ - 1)]; }

 private:
  void reserve_pow2(std::size_t n) {
    std::size_t c = 16;
    while (c < n) c *= 2;
    buf_ = std::make_unique<T[]>(c);
    cap_ = c;
  }
  void grow() {
    const std::size_t n = size();
    const std::size_t c = cap_ == 0 ? 16 : cap_ * 2;
    auto fresh = std::make_unique<T[]>(c);
    for (std::size_t i = 0; i < n; ++i) fresh[i] = (*this)[i];
    buf_ = std::move(fresh);
    cap_ = c;
    head_ = 0;
    tail_ = n;
  }

  std::unique_ptr<T[]> buf_;
  std::size_t cap_ = 0;
  std::size_t head_ = 0;  // monotonically increasing (wraps harmlessly); index = pos & (cap-1)
  std::size_t tail_ = 0;
};

}  // namespace simpler::detail
