// simpler::detail::TensorMap — which live task last wrote each byte.
//
// Keys are byte ranges [begin, end) inside an address space (0 = host memory; next-level child
// memory is keyed per child, because the same device address recurs on every chip). Entries never
// overlap: a new writer trims or splits the entries under it, so a reader depends on exactly the
// writers of the bytes it reads (the seeds match exact base pointers; ranges make sub-views and
// tiles order correctly). Nodes come from a pool that keeps freed nodes, so a map that reached its
// working size allocates nothing more. Single-owner (the Orchestrator thread): not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory_resource>

#include "simpler/detail/slot.hpp"

namespace simpler::detail {

class TensorMap {
 public:
  TensorMap() : map_(&pool_) {}

  /// Calls f(producer) for every entry overlapping [begin, end), in address order.
  template <class F>
  void lookup(std::uint64_t space, std::uint64_t begin, std::uint64_t end, F&& f) const {
    for (auto it = first_overlap(space, begin);
         it != map_.end() && it->first.space == space && it->first.begin < end; ++it) {
      f(it->second.producer);
    }
  }

  /// Calls f(producer, bytes) for every entry overlapping [begin, end), with the bytes of the
  /// overlap, in address order.
  template <class F>
  void lookup_overlaps(std::uint64_t space, std::uint64_t begin, std::uint64_t end, F&& f) const {
    for (auto it = first_overlap(space, begin);
         it != map_.end() && it->first.space == space && it->first.begin < end; ++it) {
      const std::uint64_t b = it->first.begin > begin ? it->first.begin : begin;
      const std::uint64_t e = it->second.end < end ? it->second.end : end;
      if (e > b) f(it->second.producer, e - b);
    }
  }

  /// Makes `producer` the writer of [begin, end); entries it covers are dropped, entries it
  /// covers partly keep their uncovered bytes.
  void insert(std::uint64_t space, std::uint64_t begin, std::uint64_t end, TaskSlot producer) {
    if (begin >= end) return;  // an empty write owns no bytes
    auto it = first_overlap(space, begin);
    while (it != map_.end() && it->first.space == space && it->first.begin < end) {
      const std::uint64_t eb = it->first.begin;
      const std::uint64_t ee = it->second.end;
      const TaskSlot owner = it->second.producer;
      if (eb < begin) {
        it->second.end = begin;  // keep the head [eb, begin)
        if (ee > end) {
          map_.emplace(Key{space, end}, Entry{ee, owner});  // and the tail [end, ee)
          break;
        }
        ++it;
        continue;
      }
      it = map_.erase(it);
      if (ee > end) {
        map_.emplace(Key{space, end}, Entry{ee, owner});
        break;
      }
    }
    map_.emplace(Key{space, begin}, Entry{end, producer});
  }

  /// Removes every entry overlapping [begin, end) that is still owned by `producer` (a newer
  /// writer's entries are left alone). Callers pass a range the producer wrote, and a producer's
  /// entries never extend past what it wrote, so nothing outside the range is lost.
  void erase_owned(std::uint64_t space, std::uint64_t begin, std::uint64_t end, TaskSlot producer) {
    auto it = first_overlap(space, begin);
    while (it != map_.end() && it->first.space == space && it->first.begin < end) {
      if (it->second.producer == producer) {
        it = map_.erase(it);
      } else {
        ++it;
      }
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return map_.size(); }
  void clear() noexcept { map_.clear(); }

 private:
  struct Key {
    std::uint64_t space;
    std::uint64_t begin;
    bool operator<(const Key& o) const noexcept {
      return space != o.space ? space < o.space : begin < o.begin;
    }
  };
  struct Entry {
    std::uint64_t end;
    TaskSlot producer;
  };
  using Map = std::pmr::map<Key, Entry>;

  // The first entry that may overlap [begin, ...): the one starting before `begin` if it reaches
  // past it, else the first starting at or after `begin`.
  Map::iterator first_overlap(std::uint64_t space, std::uint64_t begin) {
    auto it = map_.lower_bound(Key{space, begin});
    if (it != map_.begin()) {
      auto prev = std::prev(it);
      if (prev->first.space == space && prev->second.end > begin) return prev;
    }
    return it;
  }
  Map::const_iterator first_overlap(std::uint64_t space, std::uint64_t begin) const {
    return const_cast<TensorMap*>(this)->first_overlap(space, begin);
  }

  std::pmr::unsynchronized_pool_resource pool_;
  Map map_;
};

}  // namespace simpler::detail
