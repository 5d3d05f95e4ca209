// The device TensorMap: which live task writes (or reads) which bytes of which buffer, so that a
// submit can find the tasks it waits for.
//
// A hash of buffer addresses to chains of entries "task T writes (reads) bytes [begin, end) of
// buffer A", with per-ring FIFOs in insertion order so that entries of retired tasks are
// reclaimed from the front. Write entries give readers their producers (read after write);
// read entries, recorded only with all hazards on, give writers the readers they must not
// overtake (write after read). Emptied at boot by bumping the epoch (a bucket of an older epoch
// is empty).
//
// What every submit does (look up, insert, check for room) is inline here, so that it compiles
// into submit as it did when it lived in the same file; reclaiming, waiting for room and the
// lookup of a read are in tensor_map.cpp.
//
// Threads: the orchestrator thread only (submit, read_tensor). It reads `last_alive` of the
// rings (seq_cst) to tell retired tasks apart, and the slot state of live readers (a slot is
// reallocated only by this thread, so a live task's slot stays its own while it looks).
#pragma once

#include <cstdint>

#include "sim.hpp"

namespace simpler::sim {

/// The distinct task ids a task or a read waits for: at most kMaxFanin, `overflow` once more
/// were added.
struct Candidates {
  std::uint64_t ids[kMaxFanin + 1];
  int n = 0;
  bool overflow = false;
  void add(std::uint64_t id) noexcept {
    for (int i = 0; i < n; ++i) {
      if (ids[i] == id) return;
    }
    if (n == kMaxFanin) {
      overflow = true;
      return;
    }
    ids[n++] = id;
  }
};

// ---- out of line (tensor_map.cpp) ----------------------------------------------------------

/// Frees entries at the front of each ring's FIFO whose task retired, that were superseded, or,
/// with `done_readers`, that record a read whose task is done (its kernels no longer read the
/// bytes). The DAG keeps done readers: its edges must not depend on when kernels finished.
void tm_reclaim(ArenaHeader& h, bool done_readers) noexcept;

/// Waits until `n` entries are free (reclaiming those of retired tasks and done readers). False
/// when the run failed (this wait latched SIMPLER_ERR_TENSORMAP_OVERFLOW, or another failure).
bool tm_wait_for_room(Context& ctx, std::uint32_t n);

/// Adds to `out` every recorded writer of bytes [begin, end) of the buffer at `addr`, retired or
/// not (a read on the orchestrator thread waits for each to be done). Readers are not added.
void tm_find_writers(const ArenaHeader& h, std::uint64_t addr, std::uint64_t begin,
                     std::uint64_t end, Candidates& out) noexcept;

// ---- inline: on every submit ---------------------------------------------------------------

[[nodiscard]] inline bool tm_overlaps(std::uint64_t b1, std::uint64_t e1, std::uint64_t b2,
                                      std::uint64_t e2) noexcept {
  return b1 < e2 && b2 < e1;
}

[[nodiscard]] inline std::uint32_t tm_bucket_of(const TensorMap& m, std::uint64_t addr) noexcept {
  return static_cast<std::uint32_t>((addr * 0x9E3779B97F4A7C15ULL) >> 40) & m.bucket_mask;
}

/// The first entry (index + 1) of bucket `b`; 0 when empty or of an older epoch.
[[nodiscard]] inline std::uint32_t tm_bucket_head(const TensorMap& m, std::uint32_t b) noexcept {
  const TmBucket& bk = m.buckets[b];
  return bk.epoch == m.epoch ? bk.head : 0;
}

/// Takes entry `idx` out of its bucket chain (it stays in its FIFO until reclaimed).
inline void tm_unlink(TensorMap& m, std::uint32_t idx) noexcept {
  TmEntry& e = m.entries[idx];
  if (e.linked == 0) return;
  if (e.bucket_prev != 0)
    m.entries[e.bucket_prev - 1].bucket_next = e.bucket_next;
  else
    m.buckets[e.bucket].head = e.bucket_next;
  if (e.bucket_next != 0) m.entries[e.bucket_next - 1].bucket_prev = e.bucket_prev;
  e.linked = 0;
}

/// Makes room for `n` TensorMap entries, waiting for producers to retire if needed. False when
/// the run failed.
inline bool tm_ensure(Context& ctx, std::uint32_t n) {
  const TensorMap& m = ctx.header().tmap;
  if (m.capacity - m.live >= n) return true;
  return tm_wait_for_room(ctx, n);
}

/// True while task `id`, not retired, has not completed: its kernels may still touch its bytes.
[[nodiscard]] inline bool tm_task_pending(const ArenaHeader& h, std::uint64_t id) noexcept {
  const RingControl& rc = h.rings[ring_of(id)];
  const SlotState& s = rc.slots[local_of(id) & rc.mask];
  return s.task_id == id && s.state.load(std::memory_order_seq_cst) == kSlotPending;
}

/// Records that task `task` writes (kTmWrite) or reads (kTmRead) bytes [begin, end) of the buffer
/// at `addr`.
inline void tm_insert(ArenaHeader& h, std::uint64_t addr, std::uint64_t begin, std::uint64_t end,
                      std::uint64_t task, TmKind kind) noexcept {
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
  e.task = task;
  e.kind = kind;
  e.bucket = tm_bucket_of(m, addr);
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
  const std::uint32_t ring = ring_of(task);
  e.fifo_next = 0;
  if (m.fifo_tail[ring] != 0)
    m.entries[m.fifo_tail[ring] - 1].fifo_next = idx + 1;
  else
    m.fifo_head[ring] = idx + 1;
  m.fifo_tail[ring] = idx + 1;
}

/// True when entry `idx`'s task is done (retired, or completed): nothing needs to wait for it
/// any more. A reader of bytes a done task wrote holds their memory through the tensor's
/// owner_task (the allocating task), not through the writer, so when no DAG is being recorded
/// (`drop_done`) the walks below take such entries out of their bucket chain as they pass them:
/// a buffer written view by view then keeps a chain as long as its tasks in flight, not as long
/// as its tasks since the enclosing scope began. (The entry stays in its FIFO until reclaimed.)
[[nodiscard]] inline bool tm_drop_if_done(ArenaHeader& h, bool drop_done,
                                          std::uint32_t idx) noexcept {
  if (!drop_done) return false;
  const TmEntry& en = h.tmap.entries[idx];
  if (!retired(h, en.task) && tm_task_pending(h, en.task)) return false;
  tm_unlink(h.tmap, idx);
  return true;
}

/// Adds to `out` the live (not retired) writers of bytes [begin, end) of the buffer at `addr`:
/// the producers a task reading them waits for (read after write). With `drop_done`, writers
/// already completed are dropped (tm_drop_if_done) rather than added.
inline void tm_find_producers(ArenaHeader& h, std::uint64_t addr, std::uint64_t begin,
                              std::uint64_t end, bool drop_done, Candidates& out) noexcept {
  for (std::uint32_t e = tm_bucket_head(h.tmap, tm_bucket_of(h.tmap, addr)); e != 0;) {
    const TmEntry& en = h.tmap.entries[e - 1];
    const std::uint32_t next = en.bucket_next;
    if (!tm_drop_if_done(h, drop_done, e - 1) && en.kind == kTmWrite && en.addr == addr &&
        tm_overlaps(begin, end, en.begin, en.end) && !retired(h, en.task)) {
      out.add(en.task);
    }
    e = next;
  }
}

/// Adds to `out` the tasks a writer of bytes [begin, end) of the buffer at `addr` must not
/// overtake, with all hazards on: every pending reader of overlapping bytes (write after read)
/// and, with `writers` (the writer does not read the bytes, so its read-after-write lookup did
/// not find them), every pending writer (write after write). Only the order matters, so tasks
/// already completed are skipped: they no longer touch the bytes.
inline void tm_find_overtaken(ArenaHeader& h, std::uint64_t addr, std::uint64_t begin,
                              std::uint64_t end, bool writers, bool drop_done,
                              Candidates& out) noexcept {
  for (std::uint32_t e = tm_bucket_head(h.tmap, tm_bucket_of(h.tmap, addr)); e != 0;) {
    const TmEntry& en = h.tmap.entries[e - 1];
    const std::uint32_t next = en.bucket_next;
    if (!tm_drop_if_done(h, drop_done, e - 1) && (en.kind == kTmRead || writers) &&
        en.addr == addr && tm_overlaps(begin, end, en.begin, en.end) && !retired(h, en.task) &&
        tm_task_pending(h, en.task)) {
      out.add(en.task);
    }
    e = next;
  }
}

/// A new writer of bytes [begin, end) of the buffer at `addr` takes over the entries whose bytes
/// it covers: the writers' (`writers`) and the readers' (`readers`). It waits for each of them
/// (or they are done), so a later task that waits for the new writer waits for them too.
inline void tm_supersede(ArenaHeader& h, std::uint64_t addr, std::uint64_t begin, std::uint64_t end,
                         bool writers, bool readers) noexcept {
  if (begin >= end) return;  // an empty view covers nothing
  for (std::uint32_t e = tm_bucket_head(h.tmap, tm_bucket_of(h.tmap, addr)); e != 0;) {
    const TmEntry& en = h.tmap.entries[e - 1];
    const std::uint32_t next = en.bucket_next;
    if (en.addr == addr && begin <= en.begin && en.end <= end &&
        (en.kind == kTmWrite ? writers : readers)) {
      tm_unlink(h.tmap, e - 1);
    }
    e = next;
  }
}

}  // namespace simpler::sim
