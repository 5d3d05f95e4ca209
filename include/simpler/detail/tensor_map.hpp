// simpler::detail::TensorMap — which live task last wrote each byte, and which tasks read it since.
//
// Keys are byte ranges [begin, end) inside an address space (0 = host memory; next-level child
// memory is keyed per child, because the same device address recurs on every chip). Segments
// never overlap: a new writer trims or splits the segments under it, so a reader depends on
// exactly the writers of the bytes it reads (the seeds match exact base pointers; ranges make
// sub-views and tiles order correctly). With write-after-read ordering (Hazards::All) a segment
// also lists the readers of its bytes since its writer; a read splits segments at its bounds and
// creates writer-less segments over bytes nobody wrote, so a later writer finds every reader of
// the bytes it overwrites. A writer drops the reader lists under it (it waited for them; later
// tasks wait for it). Readers are not removed when they retire: an entry names the slot and its
// generation, a stale one (the slot was reused) is skipped, and sweep() drops them in bulk.
// Nodes come from a pool that keeps freed nodes, so a map that reached its working size
// allocates nothing more.
//
// Almost every access repeats a range seen before (the same tensor again), so besides the ordered
// map a hash index finds the segment starting at a given address in O(1): a segment with exactly
// the range asked for is the only one overlapping it (segments never overlap), so lookups,
// reads, writes and erasures of an exact range need neither a tree walk nor an allocation; any
// other range takes the ordered walk. erase_owned() of an exact range with no readers leaves the
// segment as a hole (no writer, no reader, invisible to every query, size() and
// for_each_segment()) that a later write or read of the same range revives in place: a chain of
// tasks writing one buffer re-creates nothing. The ordered walks drop the holes they meet, sweep()
// drops them all, and past 1024 plus a quarter of the live segments erase_owned() drops an older
// hole for each one it makes, so memory stays proportional to the live segments. Single-owner (the
// Orchestrator thread): not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory_resource>
#include <span>
#include <vector>

#include "simpler/detail/slot.hpp"

namespace simpler::detail {

/// A task that read a segment's bytes: its slot and the slot's generation at the time (a slot is
/// reused after it retired; the generation tells the reader apart from the slot's later tasks).
struct TensorReader {
  TaskSlot slot;
  std::uint32_t gen;
  bool operator==(const TensorReader&) const = default;
};

class TensorMap {
 public:
  TensorMap() : map_(&pool_) {}

  /// Calls f(producer) for every writer of bytes overlapping [begin, end), in address order.
  template <class F>
  void lookup(std::uint64_t space, std::uint64_t begin, std::uint64_t end, F&& f) const {
    if (const IndexSlot* x = exact(space, begin, end)) {
      if (x->it->second.producer != kInvalidSlot) f(x->it->second.producer);
      return;
    }
    for (auto it = first_overlap(space, begin);
         it != map_.end() && it->first.space == space && it->first.begin < end; ++it) {
      if (it->second.producer != kInvalidSlot) f(it->second.producer);  // holes have none
    }
  }

  /// Calls f(producer, bytes) for every writer of bytes overlapping [begin, end), with the bytes
  /// of the overlap, in address order.
  template <class F>
  void lookup_overlaps(std::uint64_t space, std::uint64_t begin, std::uint64_t end, F&& f) const {
    if (const IndexSlot* x = exact(space, begin, end)) {
      if (x->it->second.producer != kInvalidSlot) f(x->it->second.producer, end - begin);
      return;
    }
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
    if (const IndexSlot* x = exact(space, begin, end)) {
      // The segment of exactly these bytes is the only one under the write: take it over.
      Entry& en = x->it->second;
      if (en.producer != kInvalidSlot) on_writer(en.producer);
      for (const TensorReader& r : en.readers) on_reader(r);
      if (en.hole()) unhole(en);
      en.producer = producer;
      en.readers.clear();
      return;
    }
    auto it = first_overlap(space, begin);
    auto hint = it;  // where the new segment goes: before the first one past it
    while (it != map_.end() && it->first.space == space && it->first.begin < end) {
      if (it->second.hole()) {  // owns nothing: drop it whole
        it = erase_segment(it);
        hint = it;
        continue;
      }
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
          hint = emplace_segment(std::next(it), Key{space, end}, std::move(tail));
          break;
        }
        en.end = begin;  // keep the head [eb, begin)
        hint = ++it;
        continue;
      }
      if (ee > end) {
        // Keep the tail [end, ee): re-key the segment (the key is const: move it to a new node).
        Entry tail{ee, en.producer, std::move(en.readers)};
        it = erase_segment(it);
        hint = emplace_segment(it, Key{space, end}, std::move(tail));
        break;
      }
      it = erase_segment(it);
      hint = it;
    }
    emplace_segment(hint, Key{space, begin}, Entry{end, producer, {}});
  }

  /// Records `reader` as a reader of [begin, end), calling on_writer(w) for each writer of those
  /// bytes. Splits segments at the bounds and fills bytes nobody wrote with writer-less
  /// segments. `live(r)` tells whether an earlier reader still matters; a segment's list drops
  /// the others before it grows.
  template <class OnWriter, class Live>
  void add_reader(std::uint64_t space, std::uint64_t begin, std::uint64_t end, TensorReader reader,
                  OnWriter&& on_writer, Live&& live) {
    if (begin >= end) return;
    if (const IndexSlot* x = exact(space, begin, end)) {
      Entry& en = x->it->second;
      if (en.hole()) {
        // Bytes nobody owns: the hole becomes the writer-less segment a gap would get.
        unhole(en);
        ++writerless_made_;
      } else if (en.producer != kInvalidSlot) {
        on_writer(en.producer);
      }
      add_to(en.readers, reader, live);
      return;
    }
    auto it = first_overlap(space, begin);
    std::uint64_t cursor = begin;  // bytes before it are recorded
    while (cursor < end) {
      if (it == map_.end() || it->first.space != space || it->first.begin >= end) {
        it = emplace_segment(it, Key{space, cursor}, Entry{end, kInvalidSlot, {}});
        ++writerless_made_;
        add_to(it->second.readers, reader, live);
        break;
      }
      if (it->second.hole()) {  // bytes nobody owns, like a gap: drop it and look again
        it = erase_segment(it);
        continue;
      }
      if (it->first.begin > cursor) {
        // A gap nobody wrote: a writer-less segment up to the next one.
        auto gap =
            emplace_segment(it, Key{space, cursor}, Entry{it->first.begin, kInvalidSlot, {}});
        ++writerless_made_;
        add_to(gap->second.readers, reader, live);
        cursor = it->first.begin;
        continue;
      }
      Entry& en = it->second;
      if (it->first.begin < begin) {
        // Starts before the read: split off the part inside it and go on from there.
        auto inner = emplace_segment(std::next(it), Key{space, begin},
                                     Entry{en.end, en.producer, en.readers});
        en.end = begin;
        it = inner;
        continue;
      }
      if (en.end > end) {
        // Ends after the read: split off the part after it.
        emplace_segment(std::next(it), Key{space, end}, Entry{en.end, en.producer, en.readers});
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
    if (const IndexSlot* x = exact(space, begin, end)) {
      const Map::iterator it = x->it;
      Entry& en = it->second;
      if (en.hole() || en.producer != producer) return;
      en.producer = kInvalidSlot;
      if (!en.readers.empty()) {
        ++writerless_made_;
        return;
      }
      make_hole(it);  // for the next task that writes these bytes
      return;
    }
    auto it = first_overlap(space, begin);
    while (it != map_.end() && it->first.space == space && it->first.begin < end) {
      if (!it->second.hole() && it->second.producer == producer) {
        if (it->second.readers.empty()) {
          it = erase_segment(it);
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
        it = erase_segment(it);  // holes too
      } else {
        ++it;
      }
    }
  }

  /// Segments (holes are not segments).
  [[nodiscard]] std::size_t size() const noexcept { return map_.size() - holes_.size(); }
  /// Writer-less segments made since the last sweep (by reads of bytes nobody wrote, or by a
  /// writer leaving bytes that have readers): the only segments that can go stale, so what
  /// tells whether a sweep would find anything.
  [[nodiscard]] std::size_t writerless_made() const noexcept { return writerless_made_; }
  void clear() noexcept {
    map_.clear();
    index_.clear();
    index_.shrink_to_fit();
    index_count_ = 0;
    holes_.clear();
    holes_.shrink_to_fit();
    hole_cursor_ = 0;
    writerless_made_ = 0;
  }

  /// Calls f(space, begin, end, writer, readers) for every segment in order (for tests and
  /// diagnostics; writer is kInvalidSlot for a read-only segment).
  template <class F>
  void for_each_segment(F&& f) const {
    for (const auto& [k, en] : map_) {
      if (en.hole()) continue;
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
  static constexpr std::uint32_t kNotHole = ~0U;
  struct Entry {
    std::uint64_t end;
    TaskSlot producer;                  // the writer, or kInvalidSlot (read only, or a hole)
    SmallVec<TensorReader, 2> readers;  // readers since the writer (Hazards::All)
    std::uint32_t hole_at = kNotHole;   // a hole (see the header comment): where in holes_
    [[nodiscard]] bool hole() const noexcept { return hole_at != kNotHole; }
  };
  using Map = std::pmr::map<Key, Entry>;

  /// Holes kept whatever the map's size (plus a quarter of the segments).
  static constexpr std::size_t kHolesKept = 1024;

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
    if (rs.size() == rs.capacity()) compact(rs, live);
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
    return const_cast<TensorMap*>(this)->first_overlap(space, begin);
  }

  // Every segment (holes included) goes in and out of the map through these two, which keep
  // the index in step.
  Map::iterator emplace_segment(Map::iterator hint, Key k, Entry&& e) {
    auto it = map_.emplace_hint(hint, k, std::move(e));
    index_insert(it);
    return it;
  }
  Map::iterator erase_segment(Map::iterator it) {
    if (it->second.hole()) unhole(it->second);
    index_erase(it);
    return map_.erase(it);
  }

  // A writer-less segment without readers becomes a hole; past the limit an older hole goes
  // (never the newest: the next writer of a chain is about to revive it), in O(1).
  void make_hole(Map::iterator it) {
    it->second.hole_at = static_cast<std::uint32_t>(holes_.size());
    holes_.push_back(it);
    if (holes_.size() > kHolesKept + (map_.size() - holes_.size()) / 4) {
      hole_cursor_ = (hole_cursor_ + 1) % (holes_.size() - 1);
      erase_segment(holes_[hole_cursor_]);
    }
  }
  // Takes a hole off holes_ (it is revived or leaves the map).
  void unhole(Entry& en) noexcept {
    const std::uint32_t i = en.hole_at;
    holes_[i] = holes_.back();
    holes_[i]->second.hole_at = i;
    holes_.pop_back();
    en.hole_at = kNotHole;
  }

  // The index: open addressing with linear probing over a power-of-two table, at most half
  // full (a quarter after growing or shrinking); an entry is a segment's node and the hash of
  // its key, so probing compares hashes and looks at the node only on a match, and an erasure
  // shifts the entries after it back without looking at any node.
  struct IndexSlot {
    std::uint64_t hash;  // 0: empty
    Map::iterator it;
  };
  static std::uint64_t hash_of(std::uint64_t space, std::uint64_t begin) noexcept {
    // Addresses are aligned: mix every bit into the low ones the table uses (murmur3's final
    // mix).
    std::uint64_t x = begin ^ (space * 0x9E3779B97F4A7C15ULL);
    x ^= x >> 33U;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33U;
    x *= 0xC4CEB9FE1A85EC53ULL;
    x ^= x >> 33U;
    return x != 0 ? x : 1;  // 0 marks an empty slot
  }
  // The index slot of the segment of exactly [begin, end) in `space` (maybe a hole), or nullptr.
  const IndexSlot* exact(std::uint64_t space, std::uint64_t begin,
                         std::uint64_t end) const noexcept {
    if (index_.empty()) return nullptr;
    const std::uint64_t h = hash_of(space, begin);
    const std::size_t mask = index_.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const IndexSlot& sl = index_[i];
      if (sl.hash == 0) return nullptr;
      if (sl.hash == h && sl.it->first.begin == begin && sl.it->first.space == space)
        return sl.it->second.end == end ? &sl : nullptr;
    }
  }
  void index_insert(Map::iterator it) {
    if ((index_count_ + 1) * 2 > index_.size()) rehash(index_.empty() ? 16 : index_.size() * 2);
    place(IndexSlot{hash_of(it->first.space, it->first.begin), it});
    ++index_count_;
  }
  void place(IndexSlot s) noexcept {
    const std::size_t mask = index_.size() - 1;
    std::size_t i = s.hash & mask;
    while (index_[i].hash != 0) i = (i + 1) & mask;
    index_[i] = s;
  }
  void index_erase(Map::iterator it) {
    const std::size_t mask = index_.size() - 1;
    const std::uint64_t h = hash_of(it->first.space, it->first.begin);
    std::size_t i = h & mask;
    while (index_[i].hash != h || index_[i].it != it) i = (i + 1) & mask;
    // Backward shift: move up each later entry of the run whose home is not in (i, j].
    for (std::size_t j = (i + 1) & mask; index_[j].hash != 0; j = (j + 1) & mask) {
      const std::size_t home = index_[j].hash & mask;
      const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
      if (!stays) {
        index_[i] = index_[j];
        i = j;
      }
    }
    index_[i] = IndexSlot{0, {}};
    --index_count_;
    if (index_.size() > 64 && index_count_ * 8 < index_.size()) rehash(index_.size() / 2);
  }
  void rehash(std::size_t slots) {
    std::vector<IndexSlot> old(slots, IndexSlot{0, {}});
    old.swap(index_);
    for (const IndexSlot& s : old) {
      if (s.hash != 0) place(s);
    }
  }

  std::pmr::unsynchronized_pool_resource pool_;
  Map map_;
  std::vector<IndexSlot> index_;      // empty until the first segment
  std::size_t index_count_ = 0;       // segments in index_: map_.size()
  std::vector<Map::iterator> holes_;  // the segments of map_ that are holes
  std::size_t hole_cursor_ = 0;       // where make_hole() last dropped one
  std::size_t writerless_made_ = 0;
};

}  // namespace simpler::detail
