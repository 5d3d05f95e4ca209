// The device TensorMap's slow paths (see tensor_map.hpp): reclaiming the entries of retired
// tasks and done readers, waiting for room, and the lookup of a read.

#include "tensor_map.hpp"

#include <fmt/format.h>

namespace simpler::sim {

void tm_reclaim(ArenaHeader& h, bool done_readers) noexcept {
  TensorMap& m = h.tmap;
  for (int r = 0; r < kRings; ++r) {
    while (m.fifo_head[r] != 0) {
      const std::uint32_t idx = m.fifo_head[r] - 1;
      TmEntry& e = m.entries[idx];
      // A read entry is dead once its task completed: writers no longer wait for it.
      if (e.linked != 0 && !retired(h, e.task) &&
          (e.kind == kTmWrite || !done_readers || tm_task_pending(h, e.task))) {
        break;
      }
      tm_unlink(m, idx);
      m.fifo_head[r] = e.fifo_next;
      if (m.fifo_head[r] == 0) m.fifo_tail[r] = 0;
      e.fifo_next = m.free_head;  // the free list reuses fifo_next
      m.free_head = idx + 1;
      --m.live;
    }
  }
}

bool tm_wait_for_room(Context& ctx, std::uint32_t n) {
  ArenaHeader& h = ctx.header();
  TensorMap& m = h.tmap;
  auto free_entries = [&m] { return m.capacity - m.live; };
  const bool done_readers = !ctx.diag.find_edges;
  tm_reclaim(h, done_readers);
  if (free_entries() >= n) return true;
  // Completions free read entries: have them wake this thread too while it waits.
  WantsCompletion wants(ctx);
  Backstop<std::uint32_t> backstop(free_entries(), ctx.config.resource_wait);
  while (free_entries() < n) {
    if (ctx.fatal()) return false;
    if (backstop.expired(free_entries())) {
      ctx.latch(SIMPLER_ERR_TENSORMAP_OVERFLOW,
                fmt::format("the TensorMap holds {} entries (its capacity: writers, and readers "
                            "not yet done) and none was freed for {} ms; fewer live writers and "
                            "readers or larger scopes' windows",
                            m.capacity, ctx.config.resource_wait.count()));
      return false;
    }
    std::uint64_t alive[kRings];
    for (int r = 0; r < kRings; ++r)
      alive[r] = h.rings[r].last_alive.load(std::memory_order_seq_cst);
    const std::uint64_t completed = ctx.sched.completed.load(std::memory_order_seq_cst);
    ctx.orch.progress_event.await(
        [&] {
          if (ctx.fatal()) return true;
          if (ctx.sched.completed.load(std::memory_order_seq_cst) != completed) return true;
          for (int r = 0; r < kRings; ++r) {
            if (h.rings[r].last_alive.load(std::memory_order_seq_cst) != alive[r]) return true;
          }
          return false;
        },
        std::chrono::microseconds(20), backstop.deadline());
    tm_reclaim(h, done_readers);
  }
  return true;
}

void tm_find_writers(const ArenaHeader& h, std::uint64_t addr, std::uint64_t begin,
                     std::uint64_t end, Candidates& out) noexcept {
  for (std::uint32_t e = tm_bucket_head(h.tmap, tm_bucket_of(h.tmap, addr)); e != 0;) {
    const TmEntry& en = h.tmap.entries[e - 1];
    if (en.kind == kTmWrite && en.addr == addr && tm_overlaps(begin, end, en.begin, en.end))
      out.add(en.task);
    e = en.bucket_next;
  }
}

}  // namespace simpler::sim
