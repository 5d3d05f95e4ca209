// simpler::detail::OrderedIndex — an ordered map of unique keys to small values, as a B+ tree.
//
// For the TensorMap's range walks at a million live segments: a red-black tree there costs one
// cache miss per level (~20 levels), a B+ tree with leaves of kLeafCap keys a handful, most of
// them in inner nodes small enough to stay cached. Keys and values are trivially copyable and
// stored in the nodes; leaves are linked both ways for in-order walks.
//
// Iterators are (leaf, position) and, unlike std::map's, every insert() or erase() invalidates
// them all, except the one each returns. A full leaf splits in half, except the last one when the
// key goes after all others: keys inserted in order then leave full leaves behind (and a key past
// the last one is found without a walk, as is one in the leaf of the last insert or just past
// it: keys inserted in order below older ones). Erasure removes a leaf once it is empty and
// merges a leaf under a quarter full into a sibling of the same parent that has room, so the
// leaves stay proportional to the keys; inner nodes are dropped only when empty. Nodes come from
// pools that keep freed nodes, so a map that reached its working size allocates nothing more. An
// insert whose split cannot get its nodes throws with the index unchanged (it takes them all before
// it changes anything); erasure never allocates. Single-owner: not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <vector>

#include "simpler/detail/big_array.hpp"

namespace simpler::detail {

/// Records of one type, handed out and taken back without freeing (all freed with the pool).
/// A record handed out again keeps what it held: the caller sets every field. Records come in
/// chunks of a quarter of those made so far, 64 at least (so past 256 records at most a
/// quarter of them stands unused; below, at most 63), up to a huge page's worth (big_alloc: a
/// pool of a million records, walked at random, then takes few TLB misses).
template <class T>
class RecordPool {
  static_assert(alignof(T) <= 64, "big_alloc aligns to 64 bytes");

 public:
  RecordPool() = default;
  RecordPool(const RecordPool&) = delete;
  RecordPool& operator=(const RecordPool&) = delete;
  ~RecordPool() {
    for (const Chunk& c : chunks_) {
      for (std::size_t i = 0; i < c.n; ++i) c.p[i].~T();
      big_free(c.p, bytes_for(c.n));
    }
  }

  T* get() {
    if (free_.empty()) grow();
    T* p = free_.back();
    free_.pop_back();
    return p;
  }
  void put(T* p) noexcept { free_.push_back(p); }  // never reallocates: see grow()
  /// Makes the next n get() calls unable to throw (grows now if fewer records are free).
  void reserve(std::size_t n) {
    while (free_.size() < n) grow();
  }

 private:
  struct Chunk {
    T* p;
    std::size_t n;
  };
  static constexpr std::size_t kFirstChunk = 64;
  static constexpr std::size_t kMaxChunk = kHugePage / sizeof(T) > kFirstChunk
                                               ? kHugePage / sizeof(T)
                                               : kFirstChunk;
  // The block for n records: a whole huge page for the largest chunk (kMaxChunk records fill
  // it up to less than one record), so it gets one.
  static constexpr std::size_t bytes_for(std::size_t n) noexcept {
    return n == kMaxChunk && kMaxChunk * sizeof(T) <= kHugePage ? kHugePage : n * sizeof(T);
  }

  void grow() {
    const std::size_t n = std::clamp(records_ / 4, kFirstChunk, kMaxChunk);
    // Room for every record there will be, so put() never allocates.
    free_.reserve(records_ + n);
    chunks_.reserve(chunks_.size() + 1);
    auto* p = static_cast<T*>(big_alloc(bytes_for(n)));
    std::size_t made = 0;
    try {
      for (; made < n; ++made) new (p + made) T();
    } catch (...) {
      for (std::size_t i = 0; i < made; ++i) p[i].~T();
      big_free(p, bytes_for(n));
      throw;
    }
    chunks_.push_back(Chunk{p, n});
    records_ += n;
    for (std::size_t i = n; i-- > 0;) free_.push_back(p + i);
  }
  std::vector<Chunk> chunks_;
  std::vector<T*> free_;
  std::size_t records_ = 0;  // in every chunk
};

template <class K, class V, std::uint32_t kLeafCap = 30, std::uint32_t kInnerCap = 30>
class OrderedIndex {
  static_assert(std::is_trivially_copyable_v<K> && std::is_trivially_copyable_v<V>);
  static_assert(kLeafCap >= 8 && kInnerCap >= 3);

  struct Inner;
  struct Node {
    Inner* parent = nullptr;
    std::uint32_t n = 0;  // keys held
    bool leaf = true;
  };
  struct Leaf : Node {
    Leaf* prev = nullptr;
    Leaf* next = nullptr;
    K keys[kLeafCap];
    V vals[kLeafCap];
  };
  // kids[c] holds the keys k with keys[c-1] <= k < keys[c]: n keys, n + 1 kids.
  struct Inner : Node {
    K keys[kInnerCap];
    Node* kids[kInnerCap + 1];
  };

 public:
  class iterator {
   public:
    iterator() = default;
    [[nodiscard]] const K& key() const noexcept { return leaf_->keys[i_]; }
    [[nodiscard]] V& value() const noexcept { return leaf_->vals[i_]; }
    iterator& operator++() noexcept {
      if (++i_ == leaf_->n) {
        leaf_ = leaf_->next;
        i_ = 0;
      }
      return *this;
    }
    bool operator==(const iterator&) const = default;

   private:
    friend class OrderedIndex;
    iterator(Leaf* l, std::uint32_t i) noexcept : leaf_(l), i_(i) {}
    Leaf* leaf_ = nullptr;  // nullptr: end()
    std::uint32_t i_ = 0;
  };

  OrderedIndex() { reset(); }
  OrderedIndex(const OrderedIndex&) = delete;
  OrderedIndex& operator=(const OrderedIndex&) = delete;

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] iterator begin() const noexcept { return size_ == 0 ? end() : iterator(first_, 0); }
  [[nodiscard]] iterator end() const noexcept { return {}; }

  /// The first key not less than `k`.
  [[nodiscard]] iterator lower_bound(const K& k) const noexcept {
    // Past the last key (an append: keys that grow, as tensors allocated in address order do):
    // no walk from the root.
    if (last_->n != 0 && last_->keys[last_->n - 1] < k) return end();
    // Near the last insert (keys that grow inside the map, as a run's new tensors do below
    // older ones): the finger's leaf or the first key after it answers without a walk.
    if (Leaf* f = finger_; f != nullptr && f->n != 0 && !(k < f->keys[0])) {
      if (!(f->keys[f->n - 1] < k)) return {f, lower(f->keys, f->n, k)};
      Leaf* nx = f->next;  // not empty: only a root leaf may be
      if (nx == nullptr) return end();
      if (!(nx->keys[0] < k)) return {nx, 0};
    }
    Leaf* l = leaf_for(k);
    const std::uint32_t i = lower(l->keys, l->n, k);
    if (i == l->n) return l->next != nullptr ? iterator(l->next, 0) : end();
    return {l, i};
  }
  [[nodiscard]] iterator find(const K& k) const noexcept {
    const iterator it = lower_bound(k);
    return it != end() && !(k < it.key()) ? it : end();
  }
  /// Moves `it` to the key before it (from end(): the last). False when there is none.
  bool prev(iterator& it) const noexcept {
    if (it.leaf_ == nullptr) {
      if (size_ == 0) return false;
      it = iterator(last_, last_->n - 1);
      return true;
    }
    if (it.i_ != 0) {
      --it.i_;
      return true;
    }
    if (it.leaf_->prev == nullptr) return false;
    it = iterator(it.leaf_->prev, it.leaf_->prev->n - 1);
    return true;
  }

  /// Adds `k` -> `v`; `k` must not be present. Returns the new entry.
  iterator insert(const K& k, V v) { return insert(end(), k, v); }
  /// As insert(k, v), starting from the leaf of `near` (any valid iterator, or end()) when `k`
  /// falls strictly inside that leaf's keys: an entry next to one just visited goes in without
  /// a second walk from the root.
  iterator insert(iterator near, const K& k, V v) {
    Leaf* l = near.leaf_;
    if (l == nullptr || l->n == 0 || !(l->keys[0] < k) || !(k < l->keys[l->n - 1])) {
      l = leaf_for(k);
    }
    return insert_at(l, lower(l->keys, l->n, k), k, v);
  }

  /// As insert(k, v) where `next` is the first entry greater than `k` (end(): none is), which is
  /// what a lower_bound(k) that missed returns. When `k` goes into next's leaf just before it, or
  /// after the last entry (an append), its position is known: no walk from the root and no search
  /// of the leaf. Else as insert(next, k, v).
  iterator insert_before(iterator next, const K& k, V v) {
    Leaf* l = next.leaf_;
    if (l == nullptr) return insert_at(last_, last_->n, k, v);  // after every key (or empty)
    if (next.i_ > 0 || l->prev == nullptr) return insert_at(l, next.i_, k, v);
    return insert(next, k, v);  // between two leaves: the parent's separator decides which
  }
  /// As insert(k, v) where `prev` is the last entry less than `k`: when `k` goes into prev's leaf
  /// just after it (before the leaf's next entry, or at the end of the last leaf), without a walk
  /// or a search. Else as insert(prev, k, v).
  iterator insert_after(iterator prev, const K& k, V v) {
    Leaf* l = prev.leaf_;
    if (l != nullptr && (prev.i_ + 1 < l->n || l->next == nullptr))
      return insert_at(l, prev.i_ + 1, k, v);
    return insert(prev, k, v);
  }

  /// Takes from the pools now what one insert may need (a leaf, and an inner node per level plus
  /// a new root): the next insert cannot throw, even after erasures in between (which never
  /// deepen the tree).
  void reserve_insert() {
    leaves_.reserve(1);
    inners_.reserve(inner_levels() + 1);
  }

  /// Removes the entry at `it`; returns the entry after it. Erasing end() does nothing.
  iterator erase(iterator it) noexcept {
    Leaf* l = it.leaf_;
    if (l == nullptr) return end();
    const std::uint32_t i = it.i_;
    for (std::uint32_t j = i + 1; j < l->n; ++j) {
      l->keys[j - 1] = l->keys[j];
      l->vals[j - 1] = l->vals[j];
    }
    --l->n;
    --size_;
    if (l->n == 0) {
      if (l == root_) return end();  // the tree is empty: its root leaf stays
      Leaf* after = l->next;
      drop_leaf(l);
      return after != nullptr ? iterator(after, 0) : end();
    }
    if (l->n < kLeafCap / 4) {
      // Sparse: merge it into a sibling of the same parent with room, keeping what follows `i`.
      Leaf* nx = l->next;
      Leaf* pv = l->prev;
      if (nx != nullptr && nx->parent == l->parent && l->n + nx->n <= kLeafCap * 3 / 4) {
        absorb(l, nx);
      } else if (pv != nullptr && pv->parent == l->parent && pv->n + l->n <= kLeafCap * 3 / 4) {
        const std::uint32_t at = pv->n + i;
        const bool more = i < l->n;
        absorb(pv, l);
        if (more) return {pv, at};
        return pv->next != nullptr ? iterator(pv->next, 0) : end();
      }
    }
    if (i < l->n) return {l, i};
    return l->next != nullptr ? iterator(l->next, 0) : end();
  }

  /// Erases every entry for which drop(key, value) is true among at most `visits` entries from
  /// `from` on, in key order; returns the first entry not visited (end(): the walk reached the
  /// end). Before the walk enters a leaf it asks the CPU for the leaf after next and calls
  /// ahead(key, value) for each entry of the next one (by then in cache), so a `drop` that reads
  /// what a value points at can have it asked for a leaf in advance: the misses of a whole leaf
  /// overlap instead of coming one entry at a time.
  template <class Drop, class Ahead>
  iterator erase_if(iterator from, std::size_t visits, Drop&& drop, Ahead&& ahead) {
    const Leaf* entered = nullptr;
    iterator it = from;
    for (; it != end() && visits != 0; --visits) {
      if (it.leaf_ != entered) {
        entered = it.leaf_;
        if (const Leaf* nx = entered->next) {
          if (nx->next != nullptr) prefetch<sizeof(Leaf)>(nx->next);
          for (std::uint32_t i = 0; i < nx->n; ++i) ahead(nx->keys[i], nx->vals[i]);
        }
      }
      if (drop(it.key(), it.value())) {
        it = erase(it);
      } else {
        ++it;
      }
    }
    return it;
  }

  /// Leaves in use (walks them: for tests and diagnostics).
  [[nodiscard]] std::size_t leaf_count() const noexcept {
    std::size_t n = 0;
    for (const Leaf* l = first_; l != nullptr; l = l->next) ++n;
    return n;
  }

  /// Drops every entry. The nodes go back to the pools (a map refilled to the same size
  /// allocates nothing); the pools free them with the map.
  void clear() noexcept {
    finger_ = nullptr;
    recycle(root_);
    reset();  // takes a leaf back from the pool: no allocation
  }

 private:
  // The first of the n keys for which `before(key)` is false (`before` holds for a prefix), by a
  // binary search without a data-dependent branch: each step keeps one half by a conditional
  // move, so a key that lands anywhere costs no mispredictions (a branchy search over random
  // keys mispredicts about every other step: most of a walk's time in a cached tree).
  template <class Before>
  static std::uint32_t first_not(const K* keys, std::uint32_t n, Before before) noexcept {
    if (n == 0) return 0;
    const K* base = keys;
    while (n > 1) {
      const std::uint32_t half = n / 2;
      base = before(base[half]) ? base + half : base;
      n -= half;
    }
    return static_cast<std::uint32_t>(base - keys) + static_cast<std::uint32_t>(before(*base));
  }
  // The first position whose key is not less than `k`.
  static std::uint32_t lower(const K* keys, std::uint32_t n, const K& k) noexcept {
    return first_not(keys, n, [&k](const K& x) { return x < k; });
  }
  // The first position whose key is greater than `k`.
  static std::uint32_t upper(const K* keys, std::uint32_t n, const K& k) noexcept {
    return first_not(keys, n, [&k](const K& x) { return !(k < x); });
  }

  // Asks for every cache line of a node's keys at once: a binary search over a cold node would
  // otherwise miss on each probe in turn, one line after another.
  template <std::size_t Bytes>
  static void prefetch(const void* p) noexcept {
    const auto* c = static_cast<const char*>(p);
    for (std::size_t off = 0; off < Bytes; off += 64) __builtin_prefetch(c + off);
  }

  Leaf* leaf_for(const K& k) const noexcept {
    Node* x = root_;
    while (!x->leaf) {
      auto* in = static_cast<Inner*>(x);
      prefetch<sizeof(Inner)>(in);
      x = in->kids[upper(in->keys, in->n, k)];
    }
    auto* l = static_cast<Leaf*>(x);
    prefetch<sizeof(Leaf)>(l);
    return l;
  }

  // Puts k -> v at position i of leaf l, where it belongs in the order; a full leaf splits.
  iterator insert_at(Leaf* l, std::uint32_t i, const K& k, V v) {
    if (l->n < kLeafCap) {
      put(l, i, k, v);
      ++size_;
      finger_ = l;
      return {l, i};
    }
    // Everything the split may take from the pools first: nothing after this can throw, so a
    // failed allocation leaves the tree as it was (a throw from add_child's new_inner() used to
    // leave a leaf split but unparented).
    reserve_insert();
    Leaf* r = new_leaf();
    ++size_;
    if (i == l->n && l->next == nullptr) {
      // An append to a full last leaf: a new last leaf of one key, so that keys inserted in
      // order leave full leaves behind (half-full ones with the split below).
      r->prev = l;
      l->next = r;
      last_ = r;
      put(r, 0, k, v);
      add_child(l, k, r);
      finger_ = r;
      return {r, 0};
    }
    // Full: the upper half moves to a new leaf after it, which the parent then separates.
    constexpr std::uint32_t h = kLeafCap / 2;
    r->n = kLeafCap - h;
    for (std::uint32_t j = 0; j < r->n; ++j) {
      r->keys[j] = l->keys[h + j];
      r->vals[j] = l->vals[h + j];
    }
    l->n = h;
    r->prev = l;
    r->next = l->next;
    (l->next != nullptr ? l->next->prev : last_) = r;
    l->next = r;
    add_child(l, r->keys[0], r);
    if (i <= h) {
      put(l, i, k, v);
      finger_ = l;
      return {l, i};
    }
    put(r, i - h, k, v);
    finger_ = r;
    return {r, i - h};
  }

  static void put(Leaf* l, std::uint32_t i, const K& k, V v) noexcept {
    for (std::uint32_t j = l->n; j > i; --j) {
      l->keys[j] = l->keys[j - 1];
      l->vals[j] = l->vals[j - 1];
    }
    l->keys[i] = k;
    l->vals[i] = v;
    ++l->n;
  }

  Leaf* new_leaf() {
    Leaf* l = leaves_.get();
    l->parent = nullptr;
    l->n = 0;
    l->leaf = true;
    l->prev = l->next = nullptr;
    return l;
  }
  Inner* new_inner() {
    Inner* in = inners_.get();
    in->parent = nullptr;
    in->n = 0;
    in->leaf = false;
    return in;
  }
  void reset() {
    Leaf* l = new_leaf();
    root_ = first_ = last_ = l;
    size_ = 0;
  }
  // Puts `x` and everything under it back in the pools, emptied.
  void recycle(Node* x) noexcept {
    if (!x->leaf) {
      auto* in = static_cast<Inner*>(x);
      for (std::uint32_t c = 0; c <= in->n; ++c) recycle(in->kids[c]);
      in->n = 0;
      inners_.put(in);
      return;
    }
    x->n = 0;
    leaves_.put(static_cast<Leaf*>(x));
  }

  // Levels of inner nodes above the leaves (0: the root is a leaf).
  [[nodiscard]] std::size_t inner_levels() const noexcept {
    std::size_t n = 0;
    for (const Node* x = root_; !x->leaf; x = static_cast<const Inner*>(x)->kids[0]) ++n;
    return n;
  }

  static std::uint32_t child_index(const Inner* p, const Node* child) noexcept {
    std::uint32_t c = 0;
    while (p->kids[c] != child) ++c;
    return c;
  }

  // Makes `right` the child after `left` in left's parent, separated by `sep`; splits the
  // parent when full (upwards as far as needed; a new root when the root splits).
  void add_child(Node* left, const K& sep, Node* right) {
    Inner* p = left->parent;
    if (p == nullptr) {
      p = new_inner();
      p->n = 1;
      p->keys[0] = sep;
      p->kids[0] = left;
      p->kids[1] = right;
      left->parent = right->parent = p;
      root_ = p;
      return;
    }
    const std::uint32_t c = child_index(p, left);
    if (p->n < kInnerCap) {
      for (std::uint32_t j = p->n; j > c; --j) p->keys[j] = p->keys[j - 1];
      for (std::uint32_t j = p->n + 1; j > c + 1; --j) p->kids[j] = p->kids[j - 1];
      p->keys[c] = sep;
      p->kids[c + 1] = right;
      right->parent = p;
      ++p->n;
      return;
    }
    // Full: lay out the kInnerCap + 1 keys and kInnerCap + 2 kids, keep the lower half here, move
    // the upper half to a new node, and pass the middle key up. The keys' buffer is a union so
    // that no key is default-made: K's default constructor may do anything (a test's throws), and
    // the split must not throw once it has begun. (Reading p in place instead, without the
    // buffer, measured bench_tensormap's 1M rows 1.5-2x slower, lookups included; why is open.)
    union KeyBuf {
      KeyBuf() {}  // NOLINT(modernize-use-equals-default): must not construct `keys`
      K keys[kInnerCap + 1];
    } buf;
    K* keys = buf.keys;
    Node* kids[kInnerCap + 2];
    for (std::uint32_t j = 0, s = 0; j < kInnerCap + 1; ++j) keys[j] = j == c ? sep : p->keys[s++];
    for (std::uint32_t j = 0, s = 0; j < kInnerCap + 2; ++j)
      kids[j] = j == c + 1 ? right : p->kids[s++];
    constexpr std::uint32_t mid = (kInnerCap + 1) / 2;
    Inner* q = new_inner();
    p->n = mid;
    for (std::uint32_t j = 0; j < mid; ++j) p->keys[j] = keys[j];
    for (std::uint32_t j = 0; j <= mid; ++j) {
      p->kids[j] = kids[j];
      kids[j]->parent = p;
    }
    q->n = kInnerCap - mid;
    for (std::uint32_t j = 0; j < q->n; ++j) q->keys[j] = keys[mid + 1 + j];
    for (std::uint32_t j = 0; j <= q->n; ++j) {
      q->kids[j] = kids[mid + 1 + j];
      q->kids[j]->parent = q;
    }
    add_child(p, keys[mid], q);
  }

  // Takes `child` out of its parent `p`; an inner node left without children goes too, and a
  // root left with one child hands the root to it. Returns true when that emptied the tree (the
  // root itself went): the caller then makes a leaf the root again.
  [[nodiscard]] bool remove_child(Inner* p, Node* child) noexcept {
    if (p->n == 0) {  // its only child: the node goes
      inners_.put(p);
      // The root was an inner node with one child (a collapse can hand the root to one) and
      // that child's last leaf went: the tree is empty. The container test reaches this.
      if (p == root_) return true;
      Inner* g = p->parent;
      return remove_child(g, p);
    }
    const std::uint32_t c = child_index(p, child);
    // Drop the separator on the side that goes: keys[c - 1], or keys[0] for the first child
    // (the next child then inherits the bound above from the parent).
    const std::uint32_t k = c == 0 ? 0 : c - 1;
    for (std::uint32_t j = k + 1; j < p->n; ++j) p->keys[j - 1] = p->keys[j];
    for (std::uint32_t j = c + 1; j <= p->n; ++j) p->kids[j - 1] = p->kids[j];
    --p->n;
    if (p == root_ && p->n == 0) {
      root_ = p->kids[0];
      root_->parent = nullptr;
      inners_.put(p);
    }
    return false;
  }
  void unlink(Leaf* l) noexcept {
    (l->prev != nullptr ? l->prev->next : first_) = l->next;
    (l->next != nullptr ? l->next->prev : last_) = l->prev;
  }
  void drop_leaf(Leaf* l) noexcept {
    unlink(l);
    if (remove_child(l->parent, l)) {
      // The tree emptied: `l` itself becomes the root leaf again. Taking one from the pool
      // instead could allocate, and this is noexcept.
      l->parent = nullptr;
      l->n = 0;
      l->prev = l->next = nullptr;
      root_ = first_ = last_ = l;
      size_ = 0;
      finger_ = nullptr;
      return;
    }
    if (l == finger_) finger_ = nullptr;
    leaves_.put(l);
  }
  // Appends b (the leaf after a, same parent) to a and drops b.
  void absorb(Leaf* a, Leaf* b) noexcept {
    for (std::uint32_t j = 0; j < b->n; ++j) {
      a->keys[a->n + j] = b->keys[j];
      a->vals[a->n + j] = b->vals[j];
    }
    a->n += b->n;
    b->n = 0;
    drop_leaf(b);
  }

  Node* root_ = nullptr;
  Leaf* first_ = nullptr;
  Leaf* last_ = nullptr;
  // The leaf of the last insert, where lower_bound looks first; null when that leaf went back
  // to the pool (a pooled leaf's fields mean nothing) or the tree emptied. Any leaf in the tree
  // answers correctly: the finger only decides where to look.
  Leaf* finger_ = nullptr;
  std::size_t size_ = 0;
  RecordPool<Leaf> leaves_;
  RecordPool<Inner> inners_;
};

}  // namespace simpler::detail
