// simpler::detail::HeapRing — FIFO-reclaimed bump allocator over one shared mapping.
//
// The Worker constructor maps four of these (detail::map_shared_region: anonymous shared memory,
// see shared_memory.hpp) before any child is forked, so a child sees every allocation at the same
// address. Allocations are 1024-byte aligned and carved in order; bytes come back only when the
// oldest live allocation is released (first-in, first-out), which is what scopes give: inner
// scopes use their own ring and reclaim independently of outer ones. Single-owner (the Orchestrator
// thread); not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "simpler/detail/ring_buffer.hpp"
#include "simpler/detail/shared_memory.hpp"
#include "simpler/detail/stat_counter.hpp"

namespace simpler::detail {

inline constexpr std::size_t kHeapAlign = 1024;
inline constexpr int kHeapRingCount = 4;

class HeapRing {
 public:
  struct Allocation {
    std::uint64_t offset;
    std::uint64_t seq;
  };

  HeapRing() = default;
  HeapRing(void* base, std::size_t size) : base_(static_cast<std::byte*>(base)), size_(size) {}

  [[nodiscard]] std::byte* base() const noexcept { return base_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t live_allocations() const noexcept { return records_.size(); }
  /// Bytes of live allocations. Any thread (for WorkerStats; a recent value while the owner
  /// allocates).
  [[nodiscard]] std::size_t used_bytes() const noexcept {
    return static_cast<std::size_t>(used_.get());
  }
  /// Sequence number the next allocation will get.
  [[nodiscard]] std::uint64_t next_seq() const noexcept { return next_seq_; }
  /// Sequence number of the oldest allocation not reclaimed yet (== next_seq() when none).
  [[nodiscard]] std::uint64_t oldest_seq() const noexcept { return next_seq_ - records_.size(); }

  static constexpr std::size_t round_up(std::size_t n) noexcept {
    return (n + kHeapAlign - 1) & ~(kHeapAlign - 1);
  }

  /// Carves `bytes` (already rounded) if they fit now; nullopt when the ring is full.
  std::optional<Allocation> try_alloc(std::size_t bytes) {
    std::uint64_t at = 0;
    if (records_.empty()) {
      top_ = 0;
      at = 0;
      if (bytes > size_) return std::nullopt;
    } else {
      const std::uint64_t tail = records_.front().begin;
      if (top_ > tail) {  // live bytes are [tail, top_): free space is above top_ and below tail
        if (top_ + bytes <= size_) {
          at = top_;
        } else if (bytes <= tail) {
          at = 0;  // wrap: the oldest live allocation starts at or after `bytes`
        } else {
          return std::nullopt;
        }
      } else {
        // top_ <= tail with live records: free space is [top_, tail).
        if (tail - top_ < bytes) return std::nullopt;
        at = top_;
      }
    }
    const std::uint64_t seq = next_seq_++;
    records_.push_back(Record{at, at + bytes, false, kNoOwner});
    top_ = at + bytes;
    used_.add(bytes);
    return Allocation{at, seq};
  }

  /// Names the slot that owns allocation `seq` (the orch.alloc buffer's slot, or the task whose
  /// auto-allocated outputs it holds): what a task using its bytes keeps alive.
  void set_owner(std::uint64_t seq, std::uint32_t owner) noexcept {
    records_[static_cast<std::size_t>(seq - oldest_seq())].owner = owner;
  }

  enum class Lookup { None, Released, Live };
  /// The live allocation holding bytes [offset, offset + n) of the ring: Live with its owner, or
  /// Released (its scope ended; it awaits reclaiming), or None (no allocation holds them all).
  /// O(log live): allocations are laid out in sequence order, wrapping at most once.
  [[nodiscard]] Lookup find(std::uint64_t offset, std::uint64_t n,
                            std::uint32_t& owner) const noexcept {
    const std::size_t live = records_.size();
    if (live == 0) return Lookup::None;
    const std::uint64_t first = records_[0].begin;
    // Order key: allocations before the wrap (begin >= first) come first.
    const auto key = [first](std::uint64_t begin) {
      return std::pair<bool, std::uint64_t>{begin < first, begin};
    };
    const auto want = key(offset);
    std::size_t lo = 0, hi = live;  // first record whose key is > want
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (key(records_[mid].begin) <= want) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo == 0) return Lookup::None;
    const Record& r = records_[lo - 1];
    if (offset < r.begin || offset + n > r.end) return Lookup::None;
    if (r.released) return Lookup::Released;
    owner = r.owner;
    return Lookup::Live;
  }

  /// Marks allocation `seq` released and reclaims every released allocation at the FIFO head.
  void release(std::uint64_t seq) noexcept {
    const std::uint64_t first = next_seq_ - records_.size();
    records_[static_cast<std::size_t>(seq - first)].released = true;
    while (!records_.empty() && records_.front().released) {
      used_.sub(records_.front().end - records_.front().begin);
      records_.pop_front();
    }
  }

 private:
  static constexpr std::uint32_t kNoOwner = ~std::uint32_t{0};
  struct Record {
    std::uint64_t begin;
    std::uint64_t end;
    bool released;
    std::uint32_t owner;  ///< slot id (set_owner)
  };
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  std::uint64_t top_ = 0;
  std::uint64_t next_seq_ = 0;
  RingBuffer<Record> records_;
  StatCounter used_;  ///< written by the owner only
};

}  // namespace simpler::detail
