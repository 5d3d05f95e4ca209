// simpler::detail::BufferPool — the memory a remote L3 session hands out to its parent
// (remote_alloc): one shared anonymous mapping, reserved (MAP_NORESERVE) and mapped before the
// session's inner Worker forks, so its forked children see every buffer.
#pragma once

#include <fmt/format.h>

#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

#include "simpler/error.hpp"

namespace simpler::detail {

/// A session's buffers: a first-fit allocator over one shared anonymous mapping.
class BufferPool {
 public:
  static constexpr std::uint64_t kAlign = 256;

  explicit BufferPool(std::uint64_t bytes) : bytes_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      throw SystemError(fmt::format("remote session: mapping a {}-byte buffer pool", bytes), errno);
    }
    base_ = static_cast<std::byte*>(p);
    free_[0] = bytes;
  }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  ~BufferPool() { ::munmap(base_, bytes_); }

  /// Allocates buffer `id`; returns an error text, empty on success.
  std::string alloc(std::uint64_t id, std::uint64_t n, std::uint64_t max_buffer) {
    std::lock_guard lk(mu_);
    if (n == 0) return "a buffer of 0 bytes";
    if (n > max_buffer) {
      return fmt::format("{} bytes is over this server's largest buffer ({} bytes)", n, max_buffer);
    }
    if (live_.count(id) != 0) return fmt::format("buffer id {} is already live", id);
    const std::uint64_t want = (n + kAlign - 1) / kAlign * kAlign;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < want) continue;
      const std::uint64_t at = it->first;
      const std::uint64_t left = it->second - want;
      free_.erase(it);
      if (left != 0) free_[at + want] = left;
      live_[id] = Live{at, n, want};
      used_ += want;
      return {};
    }
    return fmt::format("no room for {} bytes: {} of the {}-byte pool are in use", n, used_, bytes_);
  }
  /// Frees buffer `id`; false if it is not live.
  bool free(std::uint64_t id) {
    std::lock_guard lk(mu_);
    auto it = live_.find(id);
    if (it == live_.end()) return false;
    std::uint64_t at = it->second.at;
    std::uint64_t len = it->second.reserved;
    used_ -= len;
    live_.erase(it);
    // Coalesce with the neighbours.
    auto next = free_.lower_bound(at);
    if (next != free_.end() && next->first == at + len) {
      len += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == at) {
        at = prev->first;
        len += prev->second;
        free_.erase(prev);
      }
    }
    free_[at] = len;
    return true;
  }
  /// The memory of [offset, offset + n) of buffer `id`, or nullptr with `why` set.
  std::byte* resolve(std::uint64_t id, std::uint64_t offset, std::uint64_t n,
                     std::string& why) const {
    std::lock_guard lk(mu_);
    auto it = live_.find(id);
    if (it == live_.end()) {
      why = fmt::format("buffer {} is not a live buffer of this session", id);
      return nullptr;
    }
    if (offset > it->second.n || n > it->second.n - offset) {
      why = fmt::format("bytes [{}, {}) are outside buffer {} ({} bytes)", offset, offset + n, id,
                        it->second.n);
      return nullptr;
    }
    return base_ + it->second.at + offset;
  }
  [[nodiscard]] std::size_t live() const {
    std::lock_guard lk(mu_);
    return live_.size();
  }

 private:
  struct Live {
    std::uint64_t at, n, reserved;
  };
  std::uint64_t bytes_;
  std::byte* base_ = nullptr;
  mutable std::mutex mu_;
  std::map<std::uint64_t, std::uint64_t> free_;  ///< offset -> bytes
  std::map<std::uint64_t, Live> live_;           ///< id -> where
  std::uint64_t used_ = 0;
};

}  // namespace simpler::detail
