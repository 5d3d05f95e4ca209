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
// Segments are ordered in a B+ tree (OrderedIndex: a few cache misses per walk at a million
// segments, where a red-black tree took one per level), and segments and tree nodes come from
// pools that keep freed records, so a map that reached its working size allocates nothing more.
//
// Almost every access repeats a range seen before (the same tensor again), so besides the ordered
// index a hash index finds the segment starting at a given address in O(1): a segment with exactly
// the range asked for is the only one overlapping it (segments never overlap), so lookups,
// reads, writes and erasures of an exact range need neither a tree walk nor an allocation; any
// other range takes the ordered walk. erase_owned() of an exact range with no readers leaves the
// segment as a hole (no writer, no reader, invisible to every query, size() and
// for_each_segment()) that a later write or read of the same range revives in place: a chain of
// tasks writing one buffer re-creates nothing. The ordered walks drop the holes they meet, sweep()
// drops them all, and past 1024 plus a quarter of the live segments erase_owned() drops older
// ones in bounded walks of the tree, so memory stays proportional to the live segments. Out of
// memory, a segment is in both indexes or in neither, and erase_owned() and sweep() never throw
// (the hash index then stays larger instead of shrinking). An insert() or add_reader() that throws
// has changed only what it walked before: an insert may have dropped the segments it was replacing.
// Single-owner (the Orchestrator thread): not thread-safe.
#pragma once

#include <cstdint>
#include <new>
#include <span>
#include <type_traits>

#include "simpler/detail/big_array.hpp"
#include "simpler/detail/ordered_index.hpp"
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
  /// Readers a segment holds without a heap block.
  static constexpr std::size_t kInlineReaders = 2;

 public:
  TensorMap() = default;
  TensorMap(const TensorMap&) = delete;
  TensorMap& operator=(const TensorMap&) = delete;

  /// Calls f(producer) for every writer of bytes overlapping [begin, end), in address order.
  template <class F>
  void lookup(std::uint64_t space, std::uint64_t begin, std::uint64_t end, F&& f) const {
    if (const Seg* x = exact(space, begin, end)) {
      if (x->producer != kInvalidSlot) f(x->producer);
      return;
    }
    for (auto it = first_overlap(space, begin); within(it, space, end); ++it) {
      const Seg& en = *it.value().seg;
      if (en.producer != kInvalidSlot) f(en.producer);  // holes have none
    }
  }

  /// Calls f(producer, bytes) for every writer of bytes overlapping [begin, end), with the bytes
  /// of the overlap, in address order.
  template <class F>
  void lookup_overlaps(std::uint64_t space, std::uint64_t begin, std::uint64_t end, F&& f) const {
    if (const Seg* x = exact(space, begin, end)) {
      if (x->producer != kInvalidSlot) f(x->producer, end - begin);
      return;
    }
    for (auto it = first_overlap(space, begin); within(it, space, end); ++it) {
      const Seg& en = *it.value().seg;
      if (en.producer == kInvalidSlot) continue;
      const std::uint64_t b = en.key.begin > begin ? en.key.begin : begin;
      const std::uint64_t e = en.end < end ? en.end : end;
      if (e > b) f(en.producer, e - b);
    }
  }

  /// Whether the bytes [begin, end) are settled: every writer of bytes overlapping them passes
  /// done(w) and, with `readers`, no reader recorded over them passes live(r). Holes pass. Only
  /// reads the map (a walk drops no hole), so a caller that finds them unsettled can go on to
  /// insert() or add_reader() as if it had not looked.
  template <class Done, class Live>
  [[nodiscard]] bool settled(std::uint64_t space, std::uint64_t begin, std::uint64_t end,
                             bool readers, Done&& done, Live&& live) const {
    if (tree_.empty()) return true;
    const auto ok = [&](const Seg& x) {
      if (x.producer != kInvalidSlot && !done(x.producer)) return false;
      if (readers) {
        for (const TensorReader& r : x.readers) {
          if (live(r)) return false;
        }
      }
      return true;
    };
    if (const Seg* x = exact(space, begin, end)) return ok(*x);
    for (auto it = first_overlap(space, begin); within(it, space, end); ++it) {
      if (!ok(*it.value().seg)) return false;
    }
    return true;
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
    if (Seg* x = exact(space, begin, end)) {
      // The segment of exactly these bytes is the only one under the write: take it over.
      if (x->producer != kInvalidSlot) on_writer(x->producer);
      for (const TensorReader& r : x->readers) on_reader(r);
      if (x->hole()) unhole(*x);
      x->producer = producer;
      x->readers.clear();
      return;
    }
    auto it = first_overlap(space, begin);
    while (within(it, space, end)) {
      Seg& en = *it.value().seg;
      if (en.hole()) {  // owns nothing: drop it whole
        it = erase_segment(it);
        continue;
      }
      const std::uint64_t eb = en.key.begin;
      const std::uint64_t ee = en.end;
      if (en.producer != kInvalidSlot) on_writer(en.producer);
      for (const TensorReader& r : en.readers) on_reader(r);
      if (eb < begin) {
        if (ee > end) {
          // The write lies inside this segment: keep its head and tail.
          set_end(it, begin);
          it = add_segment(space, end, ee, en.producer, &en.readers, After{it});
          break;
        }
        set_end(it, begin);  // keep the head [eb, begin)
        ++it;
        continue;
      }
      if (ee > end) {
        // Keep the tail [end, ee): the segment is re-keyed (out of both indexes and back in).
        it = rekey(it, end);
        break;
      }
      it = erase_segment(it);
    }
    add_segment(space, begin, end, producer, nullptr, Before{it});
  }

  /// Records `reader` as a reader of [begin, end), calling on_writer(w) for each writer of those
  /// bytes. Splits segments at the bounds and fills bytes nobody wrote with writer-less
  /// segments. `live(r)` tells whether an earlier reader still matters; a segment's list drops
  /// the others before it grows.
  template <class OnWriter, class Live>
  void add_reader(std::uint64_t space, std::uint64_t begin, std::uint64_t end, TensorReader reader,
                  OnWriter&& on_writer, Live&& live) {
    if (begin >= end) return;
    if (Seg* x = exact(space, begin, end)) {
      if (x->hole()) {
        // Bytes nobody owns: the hole becomes the writer-less segment a gap would get.
        unhole(*x);
        ++writerless_made_;
      } else if (x->producer != kInvalidSlot) {
        on_writer(x->producer);
      }
      add_to(x->readers, reader, live);
      return;
    }
    auto it = first_overlap(space, begin);
    std::uint64_t cursor = begin;  // bytes before it are recorded
    while (cursor < end) {
      if (!within(it, space, end)) {
        Seg* gap = add_segment(space, cursor, end, kInvalidSlot, nullptr, Before{it}).value().seg;
        ++writerless_made_;
        add_to(gap->readers, reader, live);
        break;
      }
      Seg* en = it.value().seg;
      if (en->hole()) {  // bytes nobody owns, like a gap: drop it and look again
        it = erase_segment(it);
        continue;
      }
      if (en->key.begin > cursor) {
        // A gap nobody wrote: a writer-less segment up to the next one, which is then the next
        // to visit (the one after the gap: the insertion invalidated `it`).
        const std::uint64_t next_begin = en->key.begin;
        it = add_segment(space, cursor, next_begin, kInvalidSlot, nullptr, Before{it});
        ++writerless_made_;
        add_to(it.value().seg->readers, reader, live);
        cursor = next_begin;
        ++it;
        continue;
      }
      if (en->key.begin < begin) {
        // Starts before the read: split off the part inside it and go on from there.
        const std::uint64_t ee = en->end;
        set_end(it, begin);
        it = add_segment(space, begin, ee, en->producer, &en->readers, After{it});
        continue;
      }
      if (en->end > end) {
        // Ends after the read: split off the part after it (the last segment of the read).
        const std::uint64_t ee = en->end;
        set_end(it, end);
        add_segment(space, end, ee, en->producer, &en->readers, After{it});  // `it` is stale after
      }
      if (en->producer != kInvalidSlot) on_writer(en->producer);
      add_to(en->readers, reader, live);
      cursor = en->end;
      if (cursor < end) {
        ++it;
      }
    }
  }

  /// Removes `producer` as the writer of every segment overlapping [begin, end) it still owns
  /// (a newer writer's segments are left alone); a segment that has readers stays, writer-less.
  /// Callers pass a range the producer wrote, and a producer's segments never extend past what
  /// it wrote, so nothing outside the range is lost.
  void erase_owned(std::uint64_t space, std::uint64_t begin, std::uint64_t end, TaskSlot producer) {
    if (Seg* x = exact(space, begin, end)) {
      if (x->hole() || x->producer != producer) return;
      x->producer = kInvalidSlot;
      if (!x->readers.empty()) {
        ++writerless_made_;
        return;
      }
      make_hole(*x);  // for the next task that writes these bytes
      return;
    }
    auto it = first_overlap(space, begin);
    while (within(it, space, end)) {
      Seg& en = *it.value().seg;
      if (!en.hole() && en.producer == producer) {
        if (en.readers.empty()) {
          it = erase_segment(it);
          continue;
        }
        en.producer = kInvalidSlot;
        ++writerless_made_;
      }
      ++it;
    }
  }

  /// Asks the CPU for the index entry an exact lookup of a range starting at `begin` probes
  /// first (a retirement loop calls it a few tasks ahead, so the misses overlap). Then, on a
  /// second call for the same range, for the segment that entry names when it matches.
  void prefetch(std::uint64_t space, std::uint64_t begin) const noexcept {
    if (index_.empty()) return;
    const std::uint64_t h = hash_of(space, begin);
    __builtin_prefetch(&index_[h & (index_.size() - 1)], 0, 3);
  }
  void prefetch_segment(std::uint64_t space, std::uint64_t begin) const noexcept {
    if (index_.empty()) return;
    const std::uint64_t h = hash_of(space, begin);
    const IndexSlot& sl = index_[h & (index_.size() - 1)];
    if (sl.hash == h) __builtin_prefetch(sl.seg, 1, 3);
  }

  /// Drops every reader `live` rejects and every segment left with neither writer nor reader.
  template <class Live>
  void sweep(Live&& live) {
    sweep(live, [](TaskSlot) { return false; });
  }
  /// As sweep(live), also dropping every writer `settled(w)` accepts (one whose entries no
  /// later task needs: it finished and succeeded), as if it had retired.
  template <class Live, class Settled>
  void sweep(Live&& live, Settled&& settled) {
    writerless_made_ = 0;
    for (auto it = tree_.begin(); it != tree_.end();) {
      Seg& en = *it.value().seg;
      compact(en.readers, live);
      if (en.producer != kInvalidSlot && settled(en.producer)) en.producer = kInvalidSlot;
      if (en.producer == kInvalidSlot && en.readers.empty()) {
        it = erase_segment(it);  // holes too
      } else {
        ++it;
      }
    }
    // The index shrinks here, to what the period since the last sweep needed at its peak, not
    // at each erasure: a map whose segments a sweep drops in bulk and the next tasks make again
    // halved its index down to nothing and doubled it back up at every sweep (about 7000
    // rehashes per run of bench_engine's d2 row). A shrink costs O(index), and the index is at
    // most 4x the peak, which the segments made since the last sweep paid for.
    shrink_index_to_fit(index_peak_ > index_count_ ? index_peak_ : index_count_);
    index_peak_ = index_count_;
  }

  /// Segments (holes are not segments).
  [[nodiscard]] std::size_t size() const noexcept { return tree_.size() - holes(); }
  /// Entries of the ordered index: segments and holes (what a sweep walks).
  [[nodiscard]] std::size_t entries() const noexcept { return tree_.size(); }
  /// Holes kept for a later writer of their range (for tests and diagnostics).
  [[nodiscard]] std::size_t holes() const noexcept { return holes_; }
  /// Slots of the hash index (for tests and diagnostics).
  [[nodiscard]] std::size_t index_slots() const noexcept { return index_.size(); }
  /// Writer-less segments made since the last sweep (by reads of bytes nobody wrote, or by a
  /// writer leaving bytes that have readers): the only segments that can go stale, so what
  /// tells whether a sweep would find anything.
  [[nodiscard]] std::size_t writerless_made() const noexcept { return writerless_made_; }
  /// Drops every segment; their records and the tree's nodes stay pooled for the next run
  /// (freed with the map), the hash index and the hole list are freed.
  void clear() noexcept {
    for (auto it = tree_.begin(); it != tree_.end(); ++it) release(it.value().seg);
    tree_.clear();
    index_ = BigArray<IndexSlot>();
    index_count_ = 0;
    index_peak_ = 0;
    holes_ = 0;
    hole_walk_at_ = TreeKey{};
    writerless_made_ = 0;
  }

  /// Calls f(space, begin, end, writer, readers) for every segment in order (for tests and
  /// diagnostics; writer is kInvalidSlot for a read-only segment).
  template <class F>
  void for_each_segment(F&& f) const {
    for (auto it = tree_.begin(); it != tree_.end(); ++it) {
      const Seg& en = *it.value().seg;
      if (en.hole()) continue;
      f(en.key.space, en.key.begin, en.end, en.producer,
        std::span<const TensorReader>(en.readers.data(), en.readers.size()));
    }
  }

 private:
  struct TreeKey {
    std::uint64_t space;
    std::uint64_t begin;
    // As one 128-bit number (space high): a compare without a branch, which the tree's searches
    // rely on to stay branch-free.
    bool operator<(const TreeKey& o) const noexcept {
      __extension__ using U128 = unsigned __int128;
      return ((static_cast<U128>(space) << 64U) | begin) <
             ((static_cast<U128>(o.space) << 64U) | o.begin);
    }
  };
  /// A segment: its bytes [key.begin, end) of key.space, its writer and its readers. Kept at a
  /// fixed address while it lives (the tree and the hash index point at it).
  struct alignas(64) Seg {
    TreeKey key{};
    std::uint64_t end = 0;
    TaskSlot producer = kInvalidSlot;  // the writer, or kInvalidSlot (read only, or a hole)
    bool is_hole = false;              // a hole (see the header comment)
    SmallVec<TensorReader, kInlineReaders> readers;  // readers since the writer (Hazards::All)
    [[nodiscard]] bool hole() const noexcept { return is_hole; }
  };
  /// A tree entry: the segment and a copy of its end, so a walk tells where a segment ends
  /// without a cache miss on the segment itself (set_end keeps the two equal).
  struct Ref {
    Seg* seg;
    std::uint64_t end;
  };
  // One cache line, on a line of its own (the pool aligns records to their alignment): an
  // exact operation at a million segments misses once on the segment, not twice (at 72 bytes
  // most records straddled two lines).
  static_assert(sizeof(Seg) == 64);
  using Tree = OrderedIndex<TreeKey, Ref>;
  using Iter = Tree::iterator;

  /// Holes kept whatever the map's size (plus a quarter of the segments).
  static constexpr std::size_t kHolesKept = 1024;
  /// Entries one walk of drop_holes_but visits: the slowest erase_owned of bench_tensormap's
  /// worst_erase row took ~2 us at 1k-10k segments with 64 (6-11 us with 256; 0.5 us when each
  /// new hole dropped one old one), and the mean erase was the same with either.
  static constexpr std::size_t kHoleWalk = 64;

  template <class Live>
  static void compact(SmallVec<TensorReader, kInlineReaders>& rs, Live& live) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      if (live(rs[i])) rs[kept++] = rs[i];
    }
    rs.resize_uninit(kept);
  }
  // A full list compacts before it grows. When that frees less than half of it, the list
  // doubles at once: otherwise a list of mostly live readers (a fan-out whose readers have not
  // run yet), losing one finished reader between two adds, would be walked whole at every add.
  // So a compaction over n readers comes at most once per n/2 adds.
  template <class Live>
  static void add_to(SmallVec<TensorReader, kInlineReaders>& rs, TensorReader r, Live& live) {
    if (!rs.empty() && rs.back() == r) return;  // the same task reads these bytes twice
    if (rs.size() == rs.capacity()) {
      compact(rs, live);
      if (2 * rs.size() > rs.capacity()) rs.reserve(2 * rs.capacity());
    }
    rs.push_back(r);
  }

  // Moves the end of the segment at `it` (a trim: its place in the order does not change).
  static void set_end(Iter it, std::uint64_t end) noexcept {
    it.value().end = end;
    it.value().seg->end = end;
  }

  // Whether `it` is a segment of `space` starting before `end` (the walks' loop condition;
  // reads only the tree's key, not the segment).
  [[nodiscard]] bool within(Iter it, std::uint64_t space, std::uint64_t end) const noexcept {
    return it != tree_.end() && it.key().space == space && it.key().begin < end;
  }

  // The first segment that may overlap [begin, ...): the one starting before `begin` if it
  // reaches past it, else the first starting at or after `begin`.
  [[nodiscard]] Iter first_overlap(std::uint64_t space, std::uint64_t begin) const noexcept {
    const Iter it = tree_.lower_bound(TreeKey{space, begin});
    Iter prev = it;
    if (tree_.prev(prev) && prev.key().space == space && prev.value().end > begin) return prev;
    return it;
  }

  // Where a new segment goes in the tree: before `next`, the first entry after it (end(): none),
  // or after `prev`, the last entry before it. The walks always hold one of the two, so an
  // insertion mostly needs neither a walk from the root nor a search of the leaf
  // (OrderedIndex::insert_before/insert_after).
  struct Before {
    Iter next;
  };
  struct After {
    Iter prev;
  };

  // Every segment (holes included) goes in and out of the tree through these, which keep the
  // hash index in step. add_segment copies `readers` when given.
  // Whatever may throw (the index growing, a record, the readers' copy, a tree split) comes
  // before the segment is in both indexes or neither: a bad_alloc leaves the map as it was.
  template <class Where>
  Iter add_segment(std::uint64_t space, std::uint64_t begin, std::uint64_t end, TaskSlot producer,
                   const SmallVec<TensorReader, kInlineReaders>* readers, Where where) {
    index_make_room();
    Seg* s = segs_.get();
    s->key = TreeKey{space, begin};
    s->end = end;
    s->producer = producer;
    s->is_hole = false;
    Iter it;
    try {
      if (readers != nullptr) {
        s->readers = *readers;
      } else {
        s->readers.clear();
      }
      if constexpr (std::is_same_v<Where, Before>) {
        it = tree_.insert_before(where.next, s->key, Ref{s, end});
      } else {
        it = tree_.insert_after(where.prev, s->key, Ref{s, end});
      }
    } catch (...) {
      release(s);
      throw;
    }
    index_place(s);
    return it;
  }
  Iter erase_segment(Iter it) {
    Seg* s = it.value().seg;
    if (s->hole()) unhole(*s);
    index_erase(s);
    release(s);
    return tree_.erase(it);
  }
  // Gives a segment's record back to the pool.
  void release(Seg* s) noexcept {
    // Back to inline storage: a segment made later starts like a new one (its list compacts
    // at the same sizes), and a freed segment keeps no heap block.
    if (s->readers.capacity() > kInlineReaders) {
      s->readers = SmallVec<TensorReader, kInlineReaders>();
    } else {
      s->readers.clear();
    }
    segs_.put(s);
  }
  // Moves the segment at `it` to start at `begin` (inside it); returns it at its new place. What
  // may throw comes first: the segment is then out of both indexes only while nothing can fail.
  // (Inserting the new key before erasing the old one needs no reservation, but splits the leaf
  // when it is full: bench_tensormap's 1M rows lost 40-150 % to the half-empty leaves.)
  Iter rekey(Iter it, std::uint64_t begin) {
    Seg* s = it.value().seg;
    index_make_room();
    tree_.reserve_insert();
    index_erase(s);
    const Iter after = tree_.erase(it);
    s->key.begin = begin;
    index_place(s);
    return tree_.insert_before(after, s->key, Ref{s, s->end});
  }

  // A writer-less segment without readers becomes a hole. Past the limit, older holes go by a
  // walk of the tree in address order over the next kHoleWalk entries, from where the last walk
  // stopped (never the newest hole: the next writer of a chain is about to revive it). Holes
  // are then at least a fifth of the entries, so a walk drops about kHoleWalk / 5 of them for
  // one root walk, reading the entries' segments a leaf ahead: O(1) per hole dropped, and a
  // retirement pays for at most one walk. Dropping one older hole per new one (before) took a
  // walk from the root and a cache miss on each of the hole, its leaf and its index entry, at
  // random (bench_tensormap erase at 1M: most of its 330-400 ns).
  // Holes made while walks go round the tree can outnumber the limit by one per walk, at most
  // (entries / kHoleWalk), which keeps memory proportional to the segments.
  // Holes are counted, not listed: nothing walks them but drop_holes_but, which finds them in
  // the tree. (A list of them, each hole knowing its place in it, cost a dropped hole two more
  // cache misses at random: its entry of the list, and the record of the hole moved into it.)
  // Runs at retirement (erase_owned), where nothing may throw; nothing here allocates.
  void make_hole(Seg& s) noexcept {
    s.is_hole = true;
    ++holes_;
    if (holes() > kHolesKept + size() / 4) drop_holes_but(s);
  }
  // The walk takes the holes out of the tree, then out of the hash index all together: their
  // index entries are asked for first, so their cache misses overlap instead of coming one
  // hole after another.
  void drop_holes_but(const Seg& keep) noexcept {
    Iter from = tree_.lower_bound(hole_walk_at_);
    if (from == tree_.end()) from = tree_.begin();
    Seg* dropped[kHoleWalk];
    std::size_t n = 0;
    const Iter stop = tree_.erase_if(
        from, kHoleWalk,
        [&](const TreeKey&, const Ref& r) {
          Seg* x = r.seg;
          if (!x->hole() || x == &keep) return false;
          unhole(*x);
          dropped[n++] = x;
          return true;
        },
        [](const TreeKey&, const Ref& r) { __builtin_prefetch(r.seg, 0, 3); });
    hole_walk_at_ = stop == tree_.end() ? TreeKey{} : stop.key();
    std::uint64_t hashes[kHoleWalk];
    for (std::size_t i = 0; i < n; ++i) {
      hashes[i] = hash_of(dropped[i]->key.space, dropped[i]->key.begin);
      __builtin_prefetch(&index_[hashes[i] & (index_.size() - 1)], 1, 3);
    }
    for (std::size_t i = 0; i < n; ++i) {
      index_erase(dropped[i], hashes[i]);
      release(dropped[i]);
    }
  }
  // A hole is no longer one (it is revived or leaves the map).
  void unhole(Seg& s) noexcept {
    s.is_hole = false;
    --holes_;
  }

  // The index: open addressing with linear probing over a power-of-two table, at most half
  // full (a quarter after growing or shrinking); an entry is a segment and the hash of its key,
  // so probing compares hashes and looks at the segment only on a match, and an erasure shifts
  // the entries after it back without looking at any segment.
  struct IndexSlot {
    std::uint64_t hash;  // 0: empty
    Seg* seg;
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
  // The segment of exactly [begin, end) in `space` (maybe a hole), or nullptr. Always inlined:
  // it is the whole of a repeated lookup, and a call in its place (GCC's choice once the map's
  // inserts grew) cost 20-25 % on bench_tensormap's lookup_repeat rows.
  [[nodiscard, gnu::always_inline]] Seg* exact(std::uint64_t space, std::uint64_t begin,
                                               std::uint64_t end) const noexcept {
    if (index_.empty()) return nullptr;
    const std::uint64_t h = hash_of(space, begin);
    const std::size_t mask = index_.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const IndexSlot& sl = index_[i];
      if (sl.hash == 0) return nullptr;
      if (sl.hash == h && sl.seg->key.begin == begin && sl.seg->key.space == space)
        return sl.seg->end == end ? sl.seg : nullptr;
    }
  }
  // Grows the index, when full enough, so that one more index_place() fits.
  void index_make_room() {
    if ((index_count_ + 1) * 2 > index_.size()) rehash(index_.empty() ? 16 : index_.size() * 2);
  }
  // Adds `s` to the index (after index_make_room(): cannot throw).
  void index_place(Seg* s) noexcept {
    place(IndexSlot{hash_of(s->key.space, s->key.begin), s});
    if (++index_count_ > index_peak_) index_peak_ = index_count_;
  }
  void place(IndexSlot s) noexcept {
    const std::size_t mask = index_.size() - 1;
    std::size_t i = s.hash & mask;
    while (index_[i].hash != 0) i = (i + 1) & mask;
    index_[i] = s;
  }
  void index_erase(const Seg* s) noexcept { index_erase(s, hash_of(s->key.space, s->key.begin)); }
  void index_erase(const Seg* s, std::uint64_t h) noexcept {
    const std::size_t mask = index_.size() - 1;
    std::size_t i = h & mask;
    while (index_[i].hash != h || index_[i].seg != s) i = (i + 1) & mask;
    // Backward shift: move up each later entry of the run whose home is not in (i, j].
    for (std::size_t j = (i + 1) & mask; index_[j].hash != 0; j = (j + 1) & mask) {
      const std::size_t home = index_[j].hash & mask;
      const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
      if (!stays) {
        index_[i] = index_[j];
        i = j;
      }
    }
    index_[i] = IndexSlot{0, nullptr};
    --index_count_;  // the index shrinks only at a sweep (sweep())
  }
  // Halves the index while `need` entries would fill less than an eighth of it (64 slots at
  // least), in one rehash. Shrinking saves memory but must not fail a sweep (the Orchestrator
  // sweeps as tasks retire, where nothing may throw): without the memory, the table stays.
  void shrink_index_to_fit(std::size_t need) noexcept {
    std::size_t slots = index_.size();
    while (slots > 64 && need * 8 < slots) slots /= 2;
    if (slots == index_.size()) return;
    try {
      rehash(slots);
    } catch (const std::bad_alloc&) {
    }
  }
  void rehash(std::size_t slots) {
    BigArray<IndexSlot> old(slots);  // zero bytes: every slot empty
    old.swap(index_);
    for (std::size_t i = 0; i < old.size(); ++i) {
      if (old[i].hash != 0) place(old[i]);
    }
  }

  Tree tree_;                    // every segment (holes included), by (space, begin)
  RecordPool<Seg> segs_;         // the segments' storage
  BigArray<IndexSlot> index_;    // empty until the first segment
  std::size_t index_count_ = 0;  // segments in index_: tree_.size()
  std::size_t index_peak_ = 0;   // the most index_count_ was since the last sweep (or clear)
  std::size_t holes_ = 0;        // the segments of tree_ that are holes
  TreeKey hole_walk_at_{};       // where drop_holes_but's next walk starts
  std::size_t writerless_made_ = 0;
};

}  // namespace simpler::detail
