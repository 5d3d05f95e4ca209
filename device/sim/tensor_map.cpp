// The device TensorMap (see tensor_map.hpp): lookups, insertion, reclaiming the entries of
// retired writers, and waiting for room.

#include "tensor_map.hpp"

#include <fmt/format.h>

namespace simpler::sim {

namespace {

bool overlaps(std::uint64_t b1, std::uint64_t e1, std::uint64_t b2, std::uint64_t e2) noexcept {
  return b1 < e2 && b2 < e1;
}

std::uint32_t bucket_of(const TensorMap& m, std::uint64_t addr) noexcept {
  return static_cast<std::uint32_t>((addr * 0x9E3779B97F4A7C15ULL) >> 40) & m.bucket_mask;
}

std::uint32_t bucket_head(const TensorMap& m, std::uint32_t b) noexcept {
  const TmBucket& bk = m.buckets[b];
  return bk.epoch == m.epoch ? bk.head : 0;
}

void unlink_entry(TensorMap& m, std::uint32_t idx) noexcept {
  TmEntry& e = m.entries[idx];
  if (e.linked == 0) return;
  if (e.bucket_prev != 0)
    m.entries[e.bucket_prev - 1].bucket_next = e.bucket_next;
  else
    m.buckets[e.bucket].head = e.bucket_next;
  if (e.bucket_next != 0) m.entries[e.bucket_next - 1].bucket_prev = e.bucket_prev;
  e.linked = 0;
}

}  // namespace

void tm_reclaim(ArenaHeader& h) noexcept {
  TensorMap& m = h.tmap;
  for (int r = 0; r < kRings; ++r) {
    while (m.fifo_head[r] != 0) {
      const std::uint32_t idx = m.fifo_head[r] - 1;
      TmEntry& e = m.entries[idx];
      if (e.linked != 0 && !retired(h, e.producer)) break;
      unlink_entry(m, idx);
      m.fifo_head[r] = e.fifo_next;
      if (m.fifo_head[r] == 0) m.fifo_tail[r] = 0;
      e.fifo_next = m.free_head;  // the free list reuses fifo_next
      m.free_head = idx + 1;
      --m.live;
    }
  }
}

bool tm_ensure(Context& ctx, std::uint32_t n) {
  ArenaHeader& h = ctx.header();
  TensorMap& m = h.tmap;
  auto free_entries = [&m] { return m.capacity - m.live; };
  if (free_entries() >= n) return true;
  tm_reclaim(h);
  Backstop<std::uint32_t> backstop(free_entries(), ctx.config.resource_wait);
  while (free_entries() < n) {
    if (ctx.fatal()) return false;
    if (backstop.expired(free_entries())) {
      ctx.latch(SIMPLER_ERR_TENSORMAP_OVERFLOW,
                fmt::format("the TensorMap holds {} live tensor writers (its capacity) and none "
                            "retired for {} ms; fewer live writers or larger scopes' windows",
                            m.capacity, ctx.config.resource_wait.count()));
      return false;
    }
    std::uint64_t alive[kRings];
    for (int r = 0; r < kRings; ++r)
      alive[r] = h.rings[r].last_alive.load(std::memory_order_seq_cst);
    ctx.orch.progress_event.await(
        [&] {
          if (ctx.fatal()) return true;
          for (int r = 0; r < kRings; ++r) {
            if (h.rings[r].last_alive.load(std::memory_order_seq_cst) != alive[r]) return true;
          }
          return false;
        },
        std::chrono::microseconds(20), backstop.deadline());
    tm_reclaim(h);
  }
  return true;
}

void tm_insert(ArenaHeader& h, std::uint64_t addr, std::uint64_t begin, std::uint64_t end,
               std::uint64_t producer) noexcept {
  TensorMap& m = h.tmap;
  std::uint32_t idx;
  if (m.free_head != 0) {
    idx = m.free_head - 1;
    m.free_head = m.entries[idx].fifo_next;
  } else {
    idx = m.bump++;
  }
  ++m.live;
  TmEntry& e = m.entries[idx];
  e.addr = addr;
  e.begin = begin;
  e.end = end;
  e.producer = producer;
  e.bucket = bucket_of(m, addr);
  TmBucket& bk = m.buckets[e.bucket];
  if (bk.epoch != m.epoch) {
    bk.epoch = m.epoch;
    bk.head = 0;
  }
  e.bucket_prev = 0;
  e.bucket_next = bk.head;
  if (bk.head != 0) m.entries[bk.head - 1].bucket_prev = idx + 1;
  bk.head = idx + 1;
  e.linked = 1;
  const std::uint32_t ring = ring_of(producer);
  e.fifo_next = 0;
  if (m.fifo_tail[ring] != 0)
    m.entries[m.fifo_tail[ring] - 1].fifo_next = idx + 1;
  else
    m.fifo_head[ring] = idx + 1;
  m.fifo_tail[ring] = idx + 1;
}

void tm_find_producers(ArenaHeader& h, std::uint64_t addr, std::uint64_t begin, std::uint64_t end,
                       bool supersede, Candidates& out) noexcept {
  for (std::uint32_t e = bucket_head(h.tmap, bucket_of(h.tmap, addr)); e != 0;) {
    TmEntry& en = h.tmap.entries[e - 1];
    const std::uint32_t next = en.bucket_next;
    if (en.addr == addr && overlaps(begin, end, en.begin, en.end) && !retired(h, en.producer)) {
      out.add(en.producer);
      if (supersede && begin <= en.begin && en.end <= end) unlink_entry(h.tmap, e - 1);
    }
    e = next;
  }
}

void tm_find_writers(const ArenaHeader& h, std::uint64_t addr, std::uint64_t begin,
                     std::uint64_t end, Candidates& out) noexcept {
  for (std::uint32_t e = bucket_head(h.tmap, bucket_of(h.tmap, addr)); e != 0;) {
    const TmEntry& en = h.tmap.entries[e - 1];
    if (en.addr == addr && overlaps(begin, end, en.begin, en.end)) out.add(en.producer);
    e = en.bucket_next;
  }
}

}  // namespace simpler::sim
