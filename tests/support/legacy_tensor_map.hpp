// LegacyTensorMap — the std::pmr::map-only TensorMap as it was before the hash index (kept as
// the oracle of the differential test in tests/test_tensor_map.cpp and as the baseline of
// bench/bench_tensormap.cpp). Same contract as simpler::detail::TensorMap; not used by the library.
#pragma once

#include <cstdint>
#include <map>
#include <memory_resource>
#include <span>

#include "simpler/detail/tensor_map.hpp"

namespace simpler::legacy {

using simpler::kInvalidSlot;
using simpler::TaskSlot;
using simpler::detail::SmallVec;
using simpler::detail::TensorReader;

class LegacyTensorMap {
 public:
  LegacyTensorMap() : map_(&pool_) {}

  /// Calls f(producer) for every writer of bytes overlapping [begin, end), in address order.
  template <class F>
  void lookup(std::uint64_t space, std::uint64_t begin, std::uint64_t end, F&& f) const {
    for (auto it = first_overlap(space, begin);
         it != map_.end() && it->first.space == space && it->first.begin < end; ++it) {
      if (it->second.producer != kInvalidSlot) f(it->second.producer);
    }
  }

  /// Calls f(producer, bytes) for every writer of bytes overlapping [begin, end), with the bytes
  /// of the overlap, in address order.
  template <class F>
  void lookup_overlaps(std::uint64_t space, std::uint64_t begin, std::uint64_t end, F&& f) const {
    for (auto it = first_overlap(space, begin);
         it != map_.end() && it->first.space == space && it->first.begin < end; ++it) {
      if (it->second.producer == kInvalidSlot) continue;
      const std::uint64_t b = it->first.begin > begin ? it->first.begin : begin;
      const std::uint64_t e = it->second.end < end ? it->second.end : end;
      if (e > b) f(it->second.producer, e - b);
    }
  }

  /// Makes `producer` the writer of [begin, end) with no readers; segments it covers are
  /// dropped, segments it covers partly keep their uncovered bytes.
  void insert(std::uint64_t space, std::uint64_t begin, std::uint64_t end, TaskSlot producer) {
    insert(
        space, begin, end, producer, [](TaskSlot) {}, [](const TensorReader&) {});
  }

  /// As insert(), first calling on_writer(w) for each earlier writer and on_reader(r) for each
  /// reader recorded over the bytes it overwrites (stale readers included: the caller filters).
  template <class OnWriter, class OnReader>
  void insert(std::uint64_t space, std::uint64_t begin, std::uint64_t end, TaskSlot producer,
              OnWriter&& on_writer, OnReader&& on_reader) {
    if (begin >= end) return;  // an empty write owns no bytes
    auto it = first_overlap(space, begin);
    auto hint = it;  // where the new segment goes: before the first one past it
    while (it != map_.end() && it->first.space == space && it->first.begin < end) {
      const std::uint64_t eb = it->first.begin;
      const std::uint64_t ee = it->second.end;
      Entry& en = it->second;
      if (en.producer != kInvalidSlot) on_writer(en.producer);
      for (const TensorReader& r : en.readers) on_reader(r);
      if (eb < begin) {
        if (ee > end) {
          // The write lies inside this segment: keep its head and tail.
          Entry tail{ee, en.producer, en.readers};
          en.end = begin;
          hint = map_.emplace_hint(std::next(it), Key{space, end}, std::move(tail));
          break;
        }
        en.end = begin;  // keep the head [eb, begin)
        hint = ++it;
        continue;
      }
      if (ee > end) {
        // Keep the tail [end, ee): re-key the segment (the key is const: move it to a new node).
        Entry tail{ee, en.producer, std::move(en.readers)};
        it = map_.erase(it);
        hint = map_.emplace_hint(it, Key{space, end}, std::move(tail));
        break;
      }
      it = map_.erase(it);
      hint = it;
    }
    map_.emplace_hint(hint, Key{space, begin}, Entry{end, producer, {}});
  }

  /// Records `reader` as a reader of [begin, end), calling on_writer(w) for each writer of those
  /// bytes. Splits segments at the bounds and fills bytes nobody wrote with writer-less
  /// segments. `live(r)` tells whether an earlier reader still matters; a segment's list drops
  /// the others before it grows.
  template <class OnWriter, class Live>
  void add_reader(std::uint64_t space, std::uint64_t begin, std::uint64_t end, TensorReader reader,
                  OnWriter&& on_writer, Live&& live) {
    if (begin >= end) return;
    auto it = first_overlap(space, begin);
    std::uint64_t cursor = begin;  // bytes before it are recorded
    while (cursor < end) {
      if (it == map_.end() || it->first.space != space || it->first.begin >= end) {
        it = map_.emplace_hint(it, Key{space, cursor}, Entry{end, kInvalidSlot, {}});
        ++writerless_made_;
        add_to(it->second.readers, reader, live);
        break;
      }
      if (it->first.begin > cursor) {
        // A gap nobody wrote: a writer-less segment up to the next one.
        auto gap =
            map_.emplace_hint(it, Key{space, cursor}, Entry{it->first.begin, kInvalidSlot, {}});
        ++writerless_made_;
        add_to(gap->second.readers, reader, live);
        cursor = it->first.begin;
        continue;
      }
      Entry& en = it->second;
      if (it->first.begin < begin) {
        // Starts before the read: split off the part inside it and go on from there.
        auto inner = map_.emplace_hint(std::next(it), Key{space, begin},
                                       Entry{en.end, en.producer, en.readers});
        en.end = begin;
        it = inner;
        continue;
      }
      if (en.end > end) {
        // Ends after the read: split off the part after it.
        map_.emplace_hint(std::next(it), Key{space, end}, Entry{en.end, en.producer, en.readers});
        en.end = end;
      }
      if (en.producer != kInvalidSlot) on_writer(en.producer);
      add_to(en.readers, reader, live);
      cursor = en.end;
      ++it;
    }
  }

  /// Removes `producer` as the writer of every segment overlapping [begin, end) it still owns
  /// (a newer writer's segments are left alone); a segment that has readers stays, writer-less.
  /// Callers pass a range the producer wrote, and a producer's segments never extend past what
  /// it wrote, so nothing outside the range is lost.
  void erase_owned(std::uint64_t space, std::uint64_t begin, std::uint64_t end, TaskSlot producer) {
    auto it = first_overlap(space, begin);
    while (it != map_.end() && it->first.space == space && it->first.begin < end) {
      if (it->second.producer == producer) {
        if (it->second.readers.empty()) {
          it = map_.erase(it);
          continue;
        }
        it->second.producer = kInvalidSlot;
        ++writerless_made_;
      }
      ++it;
    }
  }

  /// Drops every reader `live` rejects and every segment left with neither writer nor reader.
  template <class Live>
  void sweep(Live&& live) {
    writerless_made_ = 0;
    for (auto it = map_.begin(); it != map_.end();) {
      compact(it->second.readers, live);
      if (it->second.producer == kInvalidSlot && it->second.readers.empty()) {
        it = map_.erase(it);
      } else {
        ++it;
      }
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return map_.size(); }
  /// Writer-less segments made since the last sweep (by reads of bytes nobody wrote, or by a
  /// writer leaving bytes that have readers): the only segments that can go stale, so what
  /// tells whether a sweep would find anything.
  [[nodiscard]] std::size_t writerless_made() const noexcept { return writerless_made_; }
  void clear() noexcept {
    map_.clear();
    writerless_made_ = 0;
  }

  /// Calls f(space, begin, end, writer, readers) for every segment in order (for tests and
  /// diagnostics; writer is kInvalidSlot for a read-only segment).
  template <class F>
  void for_each_segment(F&& f) const {
    for (const auto& [k, en] : map_) {
      f(k.space, k.begin, en.end, en.producer,
        std::span<const TensorReader>(en.readers.data(), en.readers.size()));
    }
  }

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
    TaskSlot producer;                  // the writer, or kInvalidSlot (read only)
    SmallVec<TensorReader, 2> readers;  // readers since the writer (Hazards::All)
  };
  using Map = std::pmr::map<Key, Entry>;

  template <class Live>
  static void compact(SmallVec<TensorReader, 2>& rs, Live& live) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      if (live(rs[i])) rs[kept++] = rs[i];
    }
    rs.resize_uninit(kept);
  }
  template <class Live>
  static void add_to(SmallVec<TensorReader, 2>& rs, TensorReader r, Live& live) {
    if (!rs.empty() && rs.back() == r) return;  // the same task reads these bytes twice
    if (rs.size() == rs.capacity()) {  // as TensorMap::add_to: the same lists, same moments
      compact(rs, live);
      if (2 * rs.size() > rs.capacity()) rs.reserve(2 * rs.capacity());
    }
    rs.push_back(r);
  }

  // The first segment that may overlap [begin, ...): the one starting before `begin` if it
  // reaches past it, else the first starting at or after `begin`.
  Map::iterator first_overlap(std::uint64_t space, std::uint64_t begin) {
    auto it = map_.lower_bound(Key{space, begin});
    if (it != map_.begin()) {
      auto prev = std::prev(it);
      if (prev->first.space == space && prev->second.end > begin) return prev;
    }
    return it;
  }
  Map::const_iterator first_overlap(std::uint64_t space, std::uint64_t begin) const {
    return const_cast<LegacyTensorMap*>(this)->first_overlap(space, begin);
  }

  std::pmr::unsynchronized_pool_resource pool_;
  Map map_;
  std::size_t writerless_made_ = 0;
};

}  // namespace simpler::legacy
