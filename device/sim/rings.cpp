// A task's slot over its life on a ring. The orchestrator allocates it with back-pressure (slot,
// heap bytes, dependency-list entries; see rings.hpp); a completion readies its consumers and
// drops references; the last reference consumes it; the ring advance retires consumed slots in
// order and frees their heap bytes and dependency-list entries.
//
// Threads: allocation runs on the orchestrator thread only, so ring `current`, `heap_top` and
// `dep_top` are orchestrator-private. Schedulers (and the orchestrator, when a scope ends) touch
// slots under the slot lock, `last_alive`/`dep_tail` (ring advance) and the ready queues.

#include "rings.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace simpler::sim {

namespace {

const char* shape_name(Shape s) noexcept {
  switch (s) {
    case Shape::Aic:
      return "AIC";
    case Shape::Aiv:
      return "AIV";
    case Shape::Mix:
      return "MIX";
  }
  return "?";
}

}  // namespace

void Context::push_ready(std::uint64_t id, bool* pushed) noexcept {
  // A failed run runs nothing more: in particular not the consumers of the task that failed,
  // which its completion readies right after the failure was latched (on this thread, or on the
  // one whose lane's acq_rel lanes_left step ordered it after the latch). A thread that checked
  // fatal() before that latch could otherwise still pop and run them.
  if (fatal()) return;
  const auto shape = static_cast<Shape>(slot_of(id).shape);
  if (!header().queues[static_cast<int>(shape)].push(id)) {
    // Cannot happen: each queue holds as many entries as all windows together.
    latch(SIMPLER_ERR_SYSTEM,
          fmt::format("internal: the {} ready queue is full", shape_name(shape)));
    return;
  }
  if (pushed != nullptr) {
    *pushed = true;
    return;
  }
  notify_schedulers();
}

void Context::release_ref(std::uint64_t id) noexcept {
  SlotState& s = slot_of(id);
  bool consumed = false;
  {
    SlotLock lk(s);
    // relaxed: refs only changes under the slot lock, whose acquire/release orders it.
    if (s.refs.fetch_sub(1, std::memory_order_relaxed) == 1) {
      s.state.store(kSlotConsumed, std::memory_order_seq_cst);
      consumed = true;
    }
  }
  if (consumed) advance_ring(ring_of(id));
}

void Context::complete_task(std::uint64_t id, bool* pushed) noexcept {
  SlotState& s = slot_of(id);
  std::uint64_t head = 0;
  {
    SlotLock lk(s);
    s.state.store(kSlotCompleted, std::memory_order_seq_cst);
    head = s.fanout_head;
    s.fanout_head = 0;
  }
  ArenaHeader& h = header();
  while (head != 0) {
    RingControl& rc = h.rings[dep_link_ring(head)];
    const DepEntry& e = rc.deps[dep_link_linear(head) % rc.dep_capacity];
    // Read the link before releasing the consumer: once it may run, it may retire and its
    // entries may be reused.
    head = e.next;
    const std::uint64_t consumer = e.consumer;
    // acq_rel: the thread that takes the count to zero dispatches the consumer and must see
    // every producer's completion (whose outputs the kernel then reads).
    if (slot_of(consumer).fanin_remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      push_ready(consumer, pushed);
    }
  }
  const std::uint64_t done = sched.completed.fetch_add(1, std::memory_order_seq_cst) + 1;
  sched.progress.fetch_add(1, std::memory_order_relaxed);  // relaxed: a watchdog heuristic
  // The last task of the run: every scheduler may leave now.
  if (orch.done.load(std::memory_order_seq_cst) != 0 &&
      done == orch.submitted.load(std::memory_order_seq_cst)) {
    notify_schedulers();
  }
  // The producers this task held (its inputs' writers and allocators) may now be consumed.
  const Payload& p = payload_of(id);
  for (int i = 0; i < p.fanin_count; ++i) release_ref(p.fanin[i]);
  release_ref(id);  // the task's own completion reference
  if (orch.wants_completion.load(std::memory_order_seq_cst) != 0) notify_progress();
}

void Context::advance_ring(std::uint32_t ring) noexcept {
  RingControl& rc = header().rings[ring];
  // seq_cst throughout: a thread that finds the lock taken leaves `pending` set, and the holder
  // re-checks `pending` after unlocking, so no consumed slot is left behind (see docs/device.md).
  rc.advance_pending.store(1, std::memory_order_seq_cst);
  for (;;) {
    if (rc.advance_lock.exchange(1, std::memory_order_seq_cst) != 0) return;
    rc.advance_pending.store(0, std::memory_order_seq_cst);
    std::uint64_t alive = rc.last_alive.load(std::memory_order_seq_cst);
    const std::uint64_t cur = rc.current.load(std::memory_order_seq_cst);
    const std::uint64_t start = alive;
    while (alive < cur) {
      SlotState& s = rc.slots[alive & rc.mask];
      if (s.task_id != make_task_id(ring, alive) ||
          s.state.load(std::memory_order_seq_cst) != kSlotConsumed) {
        break;
      }
      // release: the orchestrator (acquire) reuses entries up to the tail only after the
      // completion walks that read them (they happened before this task was consumed).
      rc.dep_tail.store(s.dep_pool_mark, std::memory_order_release);
      ++alive;
    }
    if (alive != start) rc.last_alive.store(alive, std::memory_order_seq_cst);
    rc.advance_lock.store(0, std::memory_order_seq_cst);
    if (alive != start && alive >= orch.wants_alive[ring].load(std::memory_order_seq_cst)) {
      notify_progress();
    }
    if (rc.advance_pending.load(std::memory_order_seq_cst) == 0) return;
  }
}

std::uint64_t Context::scope_tasks_on_ring(std::uint32_t ring) const noexcept {
  const ScopeStack& st = header().scopes;
  std::uint64_t n = 0;
  for (std::uint64_t i = st.depth == 0 ? 0 : st.begin[st.depth - 1]; i < st.top; ++i) {
    if (ring_of(st.tasks[i]) == ring) ++n;
  }
  return n;
}

// ---- allocation with back-pressure ---------------------------------------------------------

namespace {

enum class Blocker { None, Window, Heap };

/// Where a slot and `bytes` of heap fit on the ring right now (`at`: the heap offset), or what
/// is full. `cur` and `alive` are the ring's counters. An empty ring starts its heap again at
/// the base.
Blocker find_room(RingControl& rc, std::uint64_t cur, std::uint64_t alive, std::uint64_t bytes,
                  std::uint64_t& at) noexcept {
  if (cur - alive >= rc.window) return Blocker::Window;
  if (bytes == 0) {
    at = rc.heap_top;
    return Blocker::None;
  }
  if (alive == cur) {
    rc.heap_top = 0;  // empty ring: start again at the base
    at = 0;
    return Blocker::None;
  }
  const std::uint64_t tail = rc.slots[alive & rc.mask].heap_begin;
  const std::uint64_t top = rc.heap_top;
  if (top >= tail) {
    if (rc.heap_size - top >= bytes) {
      at = top;
      return Blocker::None;
    }
    if (tail >= bytes) {
      at = 0;  // wrap; the end space is skipped
      return Blocker::None;
    }
    return Blocker::Heap;
  }
  if (tail - top >= bytes) {
    at = top;
    return Blocker::None;
  }
  return Blocker::Heap;
}

/// Can the wait ever end? The oldest task of the ring retires only once its scope released it;
/// if that scope is still open, only this (blocked) thread could end it. Then this latches the
/// deadlock and returns true.
bool latch_if_held_by_scope(Context& ctx, std::uint32_t ring, Blocker blocker, std::uint64_t alive,
                            std::uint64_t bytes) {
  const RingControl& rc = ctx.header().rings[ring];
  const SlotState& oldest = rc.slots[alive & rc.mask];
  // relaxed: scope_open is written and read by the orchestrator thread only.
  if (oldest.scope_open.load(std::memory_order_relaxed) == 0) return false;
  const std::uint64_t in_scope = ctx.scope_tasks_on_ring(ring);
  if (blocker == Blocker::Window) {
    ctx.latch(
        in_scope >= rc.window ? SIMPLER_ERR_SCOPE_DEADLOCK : SIMPLER_ERR_FLOW_CONTROL_DEADLOCK,
        fmt::format("the task window of ring {} ({} tasks) is full of tasks held by open "
                    "scopes (the current scope holds {} on this ring): a scope keeps its "
                    "tasks until it ends, so this submit can never proceed. Split the "
                    "scope or raise runtime_env.ring_task_window[{}]",
                    ring, rc.window, in_scope, ring));
  } else {
    ctx.latch(SIMPLER_ERR_HEAP_RING_DEADLOCK,
              fmt::format("heap ring {} ({} bytes) cannot fit {} more bytes: its oldest live "
                          "task is held by an open scope, so no space can be freed while this "
                          "submit waits. Split the scope or raise runtime_env.ring_heap[{}]",
                          ring, rc.heap_size, bytes, ring));
  }
  return true;
}

/// The backstop expired: the window or heap stayed full with nothing retiring.
void latch_stayed_full(Context& ctx, std::uint32_t ring, Blocker blocker) {
  const bool heap = blocker == Blocker::Heap;
  ctx.latch(
      heap ? SIMPLER_ERR_HEAP_RING_DEADLOCK : SIMPLER_ERR_FLOW_CONTROL_DEADLOCK,
      fmt::format("{} of ring {} stayed full for {} ms without a task retiring; raise "
                  "runtime_env.{}[{}] or look for a task that never finishes",
                  heap ? "the heap" : "the task window", ring, ctx.config.resource_wait.count(),
                  heap ? "ring_heap" : "ring_task_window", ring));
}

/// Waits for a batch of retirements on `ring` (of at most `batch_limit`), or until `deadline`.
/// Returns the batch limit of the next wait.
///
/// A batch, not each one: a window that drains one task at a time would otherwise wake this
/// thread per task. If fewer can retire (the rest held by a scope), the 1 ms cap bounds the
/// delay and the caller takes whatever did retire. After a capped wait in which nothing
/// retired, wait for any single retirement (no cap): a long-running task must not make this
/// thread poll.
std::uint64_t wait_for_retirements(Context& ctx, std::uint32_t ring, std::uint64_t cur,
                                   std::uint64_t alive, std::uint64_t batch_limit,
                                   Clock::time_point deadline) {
  const RingControl& rc = ctx.header().rings[ring];
  const std::uint64_t batch = std::max<std::uint64_t>(
      1, std::min<std::uint64_t>({batch_limit, rc.window / 4, cur - alive}));
  ctx.orch.wants_alive[ring].store(alive + batch, std::memory_order_seq_cst);
  ctx.orch.progress_event.await(
      [&] { return ctx.fatal() || rc.last_alive.load(std::memory_order_seq_cst) >= alive + batch; },
      std::chrono::microseconds(20),
      batch > 1 ? std::min(deadline, Clock::now() + std::chrono::milliseconds(1)) : deadline);
  ctx.orch.wants_alive[ring].store(0, std::memory_order_seq_cst);
  return rc.last_alive.load(std::memory_order_seq_cst) == alive ? 1 : kWakeBatch;
}

}  // namespace

bool alloc_task(Context& ctx, std::uint32_t ring, std::uint64_t bytes, std::uint64_t& local_out,
                std::uint64_t& heap_off) {
  RingControl& rc = ctx.header().rings[ring];
  if (bytes > rc.heap_size) {
    ctx.latch(SIMPLER_ERR_HEAP_RING_DEADLOCK,
              fmt::format("a task needs {} bytes of outputs but heap ring {} holds {} bytes; raise "
                          "runtime_env.ring_heap[{}]",
                          bytes, ring, rc.heap_size, ring));
    return false;
  }
  Backstop<std::uint64_t> backstop(rc.last_alive.load(std::memory_order_seq_cst),
                                   ctx.config.resource_wait);
  std::uint64_t batch_limit = kWakeBatch;
  for (;;) {
    // relaxed: this thread is the only writer of `current`.
    const std::uint64_t cur = rc.current.load(std::memory_order_relaxed);
    const std::uint64_t alive = rc.last_alive.load(std::memory_order_seq_cst);
    std::uint64_t at = 0;
    const Blocker blocker = find_room(rc, cur, alive, bytes, at);
    if (blocker == Blocker::None) {
      local_out = cur;
      heap_off = at;
      if (bytes > 0) rc.heap_top = at + bytes;
      return true;
    }
    if (ctx.fatal()) return false;
    if (latch_if_held_by_scope(ctx, ring, blocker, alive, bytes)) return false;
    if (backstop.expired(alive)) {
      latch_stayed_full(ctx, ring, blocker);
      return false;
    }
    batch_limit = wait_for_retirements(ctx, ring, cur, alive, batch_limit, backstop.deadline());
  }
}

/// Makes room for `n` dependency-list entries in `ring`'s pool.
bool ensure_dep_space(Context& ctx, std::uint32_t ring, std::uint64_t n) {
  RingControl& rc = ctx.header().rings[ring];
  if (n > rc.dep_capacity) {
    ctx.latch(SIMPLER_ERR_DEP_POOL_OVERFLOW,
              fmt::format("a task needs {} dependency-list entries but the pool of ring {} holds "
                          "{}; raise runtime_env.ring_dep_pool[{}]",
                          n, ring, rc.dep_capacity, ring));
    return false;
  }
  Backstop<std::uint64_t> backstop(rc.dep_tail.load(std::memory_order_relaxed),
                                   ctx.config.resource_wait);
  for (;;) {
    const std::uint64_t tail = rc.dep_tail.load(std::memory_order_acquire);
    if (rc.dep_top - tail + n <= rc.dep_capacity) return true;
    if (ctx.fatal()) return false;
    const std::uint64_t alive = rc.last_alive.load(std::memory_order_seq_cst);
    if (alive < rc.current.load(std::memory_order_relaxed) &&
        rc.slots[alive & rc.mask].scope_open.load(std::memory_order_relaxed) != 0) {
      ctx.latch(SIMPLER_ERR_DEP_POOL_OVERFLOW,
                fmt::format("the dependency-list pool of ring {} ({} entries) is full and its "
                            "oldest task is held by an open scope; raise "
                            "runtime_env.ring_dep_pool[{}] or split the scope",
                            ring, rc.dep_capacity, ring));
      return false;
    }
    if (backstop.expired(tail)) {
      ctx.latch(SIMPLER_ERR_DEP_POOL_OVERFLOW,
                fmt::format("the dependency-list pool of ring {} ({} entries) stayed full for {} "
                            "ms; raise runtime_env.ring_dep_pool[{}]",
                            ring, rc.dep_capacity, ctx.config.resource_wait.count(), ring));
      return false;
    }
    ctx.orch.progress_event.await(
        [&] {
          return ctx.fatal() || rc.dep_tail.load(std::memory_order_acquire) != tail ||
                 rc.last_alive.load(std::memory_order_seq_cst) != alive;
        },
        std::chrono::microseconds(20), backstop.deadline());
  }
}

}  // namespace simpler::sim
