// The TRB orchestrator side: submit (slot + heap allocation with back-pressure, dependency
// discovery through the TensorMap, wiring), scopes, runtime-allocated tensors, tensor reads, and
// the task lifecycle helpers the schedulers share (complete, release, ring advance).
//
// Threads: submit/scope/alloc/read run on the orchestrator thread only, so ring `current`,
// `heap_top`, `dep_top`, the TensorMap and the scope stack are orchestrator-private. Schedulers
// touch slots (under the slot lock), `last_alive`/`dep_tail` (ring advance) and the ready queues.

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <thread>

#include "sim.hpp"

namespace simpler::sim {

namespace {

/// The slot lock: held for a handful of instructions (state change, list splice, ref count).
class SlotLock {
 public:
  explicit SlotLock(SlotState& s) noexcept : s_(s) {
    for (int spins = 0; s_.lock.exchange(1, std::memory_order_acquire) != 0; ++spins) {
      if (spins < 64)
        detail::cpu_relax();
      else
        std::this_thread::yield();
    }
  }
  SlotLock(const SlotLock&) = delete;
  SlotLock& operator=(const SlotLock&) = delete;
  ~SlotLock() { s_.lock.store(0, std::memory_order_release); }

 private:
  SlotState& s_;
};

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) noexcept {
  return (v + a - 1) / a * a;
}

std::string task_name(std::uint64_t id) {
  return fmt::format("task {}:{}", ring_of(id), local_of(id));
}

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

std::uint64_t dep_link(std::uint32_t ring, std::uint64_t linear) noexcept {
  return (std::uint64_t{ring} << 56) | (linear + 1);
}

bool overlaps(std::uint64_t b1, std::uint64_t e1, std::uint64_t b2, std::uint64_t e2) noexcept {
  return b1 < e2 && b2 < e1;
}

}  // namespace

std::string shape_text(const std::uint32_t* shapes, std::uint32_t ndims, std::uint8_t dtype) {
  std::string s = "[";
  for (std::uint32_t i = 0; i < ndims && i < 5; ++i)  // ndims may be invalid: never past 5
    s += fmt::format("{}{}", i == 0 ? "" : ", ", shapes[i]);
  return s + fmt::format("] of dtype {}", dtype);
}

bool Context::created_in_run(std::uint64_t id) const noexcept {
  const std::uint32_t ring = ring_of(id);
  return ring < static_cast<std::uint32_t>(kRings) &&
         local_of(id) < header().rings[ring].current.load(std::memory_order_relaxed);
}

SlotState& Context::slot_of(std::uint64_t id) noexcept {
  RingControl& rc = header().rings[ring_of(id)];
  return rc.slots[local_of(id) & rc.mask];
}

Payload& Context::payload_of(std::uint64_t id) noexcept {
  RingControl& rc = header().rings[ring_of(id)];
  return rc.payloads[local_of(id) & rc.mask];
}

void Context::notify_schedulers() noexcept {
  for (auto& w : sched_wake) w.notify_all();
}

void Context::notify_progress() noexcept {
  progress_event.notify_all();
}

void Context::latch(int status, std::string message) {
  int expected = 0;
  if (run_status_.compare_exchange_strong(expected, status, std::memory_order_seq_cst)) {
    std::lock_guard lk(msg_mu);
    run_message = std::move(message);
  }
  notify_schedulers();
  notify_progress();
  done_event.notify_all();
}

void Context::push_ready(std::uint64_t id, bool* pushed) noexcept {
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
    const auto ring = static_cast<std::uint32_t>(head >> 56);
    const std::uint64_t linear = (head & ((std::uint64_t{1} << 56) - 1)) - 1;
    RingControl& rc = h.rings[ring];
    const DepEntry& e = rc.deps[linear % rc.dep_capacity];
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
  const std::uint64_t done = completed.fetch_add(1, std::memory_order_seq_cst) + 1;
  progress.fetch_add(1, std::memory_order_relaxed);  // relaxed: a watchdog heuristic
  // The last task of the run: every scheduler may leave now.
  if (orch_done.load(std::memory_order_seq_cst) != 0 &&
      done == submitted.load(std::memory_order_seq_cst)) {
    notify_schedulers();
  }
  // The producers this task held (its inputs' writers and allocators) may now be consumed.
  const Payload& p = payload_of(id);
  for (int i = 0; i < p.fanin_count; ++i) release_ref(p.fanin[i]);
  release_ref(id);  // the task's own completion reference
  if (orch_wants_completion.load(std::memory_order_seq_cst) != 0) notify_progress();
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
    if (alive != start && alive >= orch_wants_alive[ring].load(std::memory_order_seq_cst)) {
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

/// The wall-clock backstop of a resource wait: it expires `limit` after the watched value (a
/// retirement counter, a pool tail) last moved.
template <class T>
class Backstop {
 public:
  Backstop(T initial, std::chrono::milliseconds limit)
      : seen_(initial), last_change_(Clock::now()), limit_(limit) {}
  /// Records the value's current state; true once it has not moved for `limit`.
  bool expired(T now_value) {
    if (now_value != seen_) {
      seen_ = now_value;
      last_change_ = Clock::now();
      return false;
    }
    return Clock::now() >= deadline();
  }
  [[nodiscard]] Clock::time_point deadline() const { return last_change_ + limit_; }

 private:
  T seen_;
  Clock::time_point last_change_;
  std::chrono::milliseconds limit_;
};

enum class Blocker { None, Window, Heap };

}  // namespace

/// Allocates a slot on `ring` and `bytes` of its heap. Blocks while the window or heap is full;
/// fails the run (and returns false) when that wait can never end or passes its backstop.
static bool alloc_task(Context& ctx, std::uint32_t ring, std::uint64_t bytes,
                       std::uint64_t& local_out, std::uint64_t& heap_off) {
  RingControl& rc = ctx.header().rings[ring];
  if (bytes > rc.heap_size) {
    ctx.latch(SIMPLER_ERR_HEAP_RING_DEADLOCK,
              fmt::format("a task needs {} bytes of outputs but heap ring {} holds {} bytes; raise "
                          "runtime_env.ring_heap[{}]",
                          bytes, ring, rc.heap_size, ring));
    return false;
  }
  Backstop<std::uint64_t> backstop(rc.last_alive.load(std::memory_order_seq_cst),
                                   ctx.resource_wait);
  std::uint64_t batch_limit = kWakeBatch;
  for (;;) {
    // relaxed: this thread is the only writer of `current`.
    const std::uint64_t cur = rc.current.load(std::memory_order_relaxed);
    const std::uint64_t alive = rc.last_alive.load(std::memory_order_seq_cst);
    Blocker blocker = Blocker::None;
    std::uint64_t at = 0;
    if (cur - alive >= rc.window) {
      blocker = Blocker::Window;
    } else if (bytes > 0) {
      if (alive == cur) {
        rc.heap_top = 0;  // empty ring: start again at the base
        at = 0;
      } else {
        const std::uint64_t tail = rc.slots[alive & rc.mask].heap_begin;
        const std::uint64_t top = rc.heap_top;
        if (top >= tail) {
          if (rc.heap_size - top >= bytes)
            at = top;
          else if (tail >= bytes)
            at = 0;  // wrap; the end space is skipped
          else
            blocker = Blocker::Heap;
        } else if (tail - top >= bytes) {
          at = top;
        } else {
          blocker = Blocker::Heap;
        }
      }
    } else {
      at = rc.heap_top;
    }
    if (blocker == Blocker::None) {
      local_out = cur;
      heap_off = at;
      if (bytes > 0) rc.heap_top = at + bytes;
      return true;
    }
    if (ctx.fatal()) return false;

    // Can the wait ever end? The oldest task of this ring retires only once its scope released
    // it; if that scope is still open, only this (blocked) thread could end it.
    SlotState& oldest = rc.slots[alive & rc.mask];
    // relaxed: scope_open is written and read by the orchestrator thread only.
    if (oldest.scope_open.load(std::memory_order_relaxed) != 0) {
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
      return false;
    }
    if (backstop.expired(alive)) {
      const bool heap = blocker == Blocker::Heap;
      ctx.latch(heap ? SIMPLER_ERR_HEAP_RING_DEADLOCK : SIMPLER_ERR_FLOW_CONTROL_DEADLOCK,
                fmt::format("{} of ring {} stayed full for {} ms without a task retiring; raise "
                            "runtime_env.{}[{}] or look for a task that never finishes",
                            heap ? "the heap" : "the task window", ring, ctx.resource_wait.count(),
                            heap ? "ring_heap" : "ring_task_window", ring));
      return false;
    }
    // Wait for a batch of retirements, not for each one: a window that drains one task at a
    // time would otherwise wake this thread per task. If fewer can retire (the rest held by a
    // scope), the 1 ms cap bounds the delay and the loop takes whatever did retire.
    // After a capped wait in which nothing retired, wait for any single retirement (no cap):
    // a long-running task must not make this thread poll.
    const std::uint64_t batch = std::max<std::uint64_t>(
        1, std::min<std::uint64_t>({batch_limit, rc.window / 4, cur - alive}));
    ctx.orch_wants_alive[ring].store(alive + batch, std::memory_order_seq_cst);
    ctx.progress_event.await(
        [&] {
          return ctx.fatal() || rc.last_alive.load(std::memory_order_seq_cst) >= alive + batch;
        },
        std::chrono::microseconds(20),
        batch > 1 ? std::min(backstop.deadline(), Clock::now() + std::chrono::milliseconds(1))
                  : backstop.deadline());
    ctx.orch_wants_alive[ring].store(0, std::memory_order_seq_cst);
    batch_limit = rc.last_alive.load(std::memory_order_seq_cst) == alive ? 1 : kWakeBatch;
  }
}

/// Makes room for `n` dependency-list entries in `ring`'s pool.
static bool ensure_dep_space(Context& ctx, std::uint32_t ring, std::uint64_t n) {
  RingControl& rc = ctx.header().rings[ring];
  if (n > rc.dep_capacity) {
    ctx.latch(SIMPLER_ERR_DEP_POOL_OVERFLOW,
              fmt::format("a task needs {} dependency-list entries but the pool of ring {} holds "
                          "{}; raise runtime_env.ring_dep_pool[{}]",
                          n, ring, rc.dep_capacity, ring));
    return false;
  }
  Backstop<std::uint64_t> backstop(rc.dep_tail.load(std::memory_order_relaxed), ctx.resource_wait);
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
                            ring, rc.dep_capacity, ctx.resource_wait.count(), ring));
      return false;
    }
    ctx.progress_event.await(
        [&] {
          return ctx.fatal() || rc.dep_tail.load(std::memory_order_acquire) != tail ||
                 rc.last_alive.load(std::memory_order_seq_cst) != alive;
        },
        std::chrono::microseconds(20), backstop.deadline());
  }
}

// ---- TensorMap ----------------------------------------------------------------------------

namespace {

std::uint32_t bucket_of(const TensorMap& m, std::uint64_t addr) noexcept {
  return static_cast<std::uint32_t>((addr * 0x9E3779B97F4A7C15ULL) >> 40) & m.bucket_mask;
}

std::uint32_t bucket_head(TensorMap& m, std::uint32_t b) noexcept {
  TmBucket& bk = m.buckets[b];
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

bool retired(const ArenaHeader& h, std::uint64_t id) noexcept {
  return local_of(id) < h.rings[ring_of(id)].last_alive.load(std::memory_order_seq_cst);
}

/// Frees entries at the front of each ring's FIFO whose producer retired (or that were removed).
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

}  // namespace

/// Makes room for `n` TensorMap entries, waiting for producers to retire if needed.
static bool tm_ensure(Context& ctx, std::uint32_t n) {
  ArenaHeader& h = ctx.header();
  TensorMap& m = h.tmap;
  auto free_entries = [&m] { return m.capacity - m.live; };
  if (free_entries() >= n) return true;
  tm_reclaim(h);
  Backstop<std::uint32_t> backstop(free_entries(), ctx.resource_wait);
  while (free_entries() < n) {
    if (ctx.fatal()) return false;
    if (backstop.expired(free_entries())) {
      ctx.latch(SIMPLER_ERR_TENSORMAP_OVERFLOW,
                fmt::format("the TensorMap holds {} live tensor writers (its capacity) and none "
                            "retired for {} ms; fewer live writers or larger scopes' windows",
                            m.capacity, ctx.resource_wait.count()));
      return false;
    }
    std::uint64_t alive[kRings];
    for (int r = 0; r < kRings; ++r)
      alive[r] = h.rings[r].last_alive.load(std::memory_order_seq_cst);
    ctx.progress_event.await(
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

static void tm_insert(ArenaHeader& h, std::uint64_t addr, std::uint64_t begin, std::uint64_t end,
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

// ---- submit ------------------------------------------------------------------------------------

namespace {

struct SlotInit {
  std::int32_t fanin_hold;
  std::int32_t refs;
  std::int32_t lanes;
  std::uint8_t shape;
  std::uint8_t lane_mask;
  std::uint64_t heap_begin, heap_end;
  std::uint32_t state;
};

/// Init-on-write of a newly allocated slot: nothing else references it (its previous task was
/// consumed and retired). relaxed: the slot is published by the seq_cst store of `state` here
/// and of the ring's `current` after the payload is written.
void bind_slot(SlotState& s, std::uint64_t id, const SlotInit& in) noexcept {
  s.lock.store(0, std::memory_order_relaxed);
  s.task_id = id;
  s.fanin_remaining.store(in.fanin_hold, std::memory_order_relaxed);
  s.refs.store(in.refs, std::memory_order_relaxed);
  s.fanout_head = 0;
  s.lanes_left.store(in.lanes, std::memory_order_relaxed);
  s.scope_open.store(1, std::memory_order_relaxed);
  s.shape = in.shape;
  s.lane_mask = in.lane_mask;
  s.heap_begin = in.heap_begin;
  s.heap_end = in.heap_end;
  s.state.store(in.state, std::memory_order_seq_cst);
}

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

const char* build_error(int e) noexcept {
  switch (e) {
    case SIMPLER_BUILD_TOO_MANY_TENSORS:
      return "too many tensor args";
    case SIMPLER_BUILD_TOO_MANY_SCALARS:
      return "too many scalar args";
    case SIMPLER_BUILD_TENSOR_AFTER_SCALAR:
      return "a tensor was added after a scalar";
    case SIMPLER_BUILD_BAD_TAG:
      return "an unknown tensor tag";
    default:
      return "an unknown builder error";
  }
}

}  // namespace

std::uint64_t Context::submit(simpler_mixed_kernels k, const simpler_task_builder* b,
                              simpler_chip_tensor* outputs) {
  if (fatal()) return SIMPLER_INVALID_TASK_ID;
  const std::uint64_t nth = submitted.load(std::memory_order_relaxed);
  if (b == nullptr) {
    latch(SIMPLER_ERR_INVALID_TASK_ARGS, fmt::format("submit #{}: the task args are NULL", nth));
    return SIMPLER_INVALID_TASK_ID;
  }
  if (b->error != 0) {
    latch(SIMPLER_ERR_INVALID_TASK_ARGS,
          fmt::format("submit #{}: {} ({} requested; a task takes at most {} tensors and {} "
                      "scalars, tensors first)",
                      nth, build_error(b->error), b->requested, SIMPLER_MAX_TASK_TENSORS,
                      SIMPLER_MAX_TASK_SCALARS));
    return SIMPLER_INVALID_TASK_ID;
  }
  if (b->tensor_count < 0 || b->tensor_count > SIMPLER_MAX_TASK_TENSORS || b->scalar_count < 0 ||
      b->scalar_count > SIMPLER_MAX_TASK_SCALARS) {
    latch(SIMPLER_ERR_INVALID_TASK_ARGS,
          fmt::format("submit #{}: {} tensors and {} scalars; a task takes 0..{} and 0..{}", nth,
                      b->tensor_count, b->scalar_count, SIMPLER_MAX_TASK_TENSORS,
                      SIMPLER_MAX_TASK_SCALARS));
    return SIMPLER_INVALID_TASK_ID;
  }
  // Kernels: which lanes, and does every func_id have a kernel?
  const Callable& c = callables[run_callable];
  const std::int32_t lanes[3] = {k.aic, k.aiv0, k.aiv1};
  std::uint8_t mask = 0;
  for (int l = 0; l < 3; ++l) {
    if (lanes[l] == -1) continue;
    if (lanes[l] < 0) {
      latch(SIMPLER_ERR_UNKNOWN_FUNC_ID,
            fmt::format("submit #{}: func_id {} is negative; func_ids are 0..{} and -1 marks an "
                        "unused lane",
                        nth, lanes[l], SIMPLER_MAX_FUNC_ID - 1));
      return SIMPLER_INVALID_TASK_ID;
    }
    if (lanes[l] >= SIMPLER_MAX_FUNC_ID || static_cast<std::size_t>(lanes[l]) >= c.kernels.size() ||
        c.kernels[lanes[l]] == nullptr) {
      latch(SIMPLER_ERR_UNKNOWN_FUNC_ID,
            fmt::format("submit #{}: func_id {} has no kernel in callable {} (register a kernel "
                        "with that func_id in the ChipCallable)",
                        nth, lanes[l], run_callable));
      return SIMPLER_INVALID_TASK_ID;
    }
    mask = static_cast<std::uint8_t>(mask | (1U << l));
  }
  if (mask == 0) {
    latch(SIMPLER_ERR_INVALID_TASK_ARGS,
          fmt::format("submit #{}: the task names no kernel (aic, aiv0 and aiv1 are all -1)", nth));
    return SIMPLER_INVALID_TASK_ID;
  }
  const int lanes_used = std::popcount(static_cast<unsigned>(mask));
  const Shape shape = lanes_used > 1 ? Shape::Mix : (mask == 1 ? Shape::Aic : Shape::Aiv);

  // Tensors: valid descriptors, and the heap bytes their runtime-allocated outputs need.
  std::uint64_t out_bytes = 0;
  for (int i = 0; i < b->tensor_count; ++i) {
    const simpler_chip_tensor& t = b->tensors[i];
    if (t.ndims < 1 || t.ndims > 5 || simpler_dtype_size(t.dtype) == 0) {
      latch(SIMPLER_ERR_INVALID_TASK_ARGS,
            fmt::format("submit #{}: tensor {} has ndims {} and dtype {}; ndims must be 1..5 and "
                        "dtype a simpler DataType",
                        nth, i, t.ndims, t.dtype));
      return SIMPLER_INVALID_TASK_ID;
    }
    std::uint64_t bytes = 0;
    if (!tensor_bytes(t, bytes)) {
      latch(SIMPLER_ERR_INVALID_TASK_ARGS,
            fmt::format("submit #{}: tensor {} has shape {}: more than SIMPLER_MAX_TENSOR_BYTES "
                        "({}) bytes",
                        nth, i, shape_text(t.shapes, t.ndims, t.dtype), SIMPLER_MAX_TENSOR_BYTES));
      return SIMPLER_INVALID_TASK_ID;
    }
    if (b->tags[i] == SIMPLER_TAG_OUTPUT) {
      // At most 16 x 2^48 bytes: the sum cannot overflow.
      out_bytes += align_up(bytes, kHeapAlign);
      continue;
    }
    if (t.addr == 0) {
      latch(SIMPLER_ERR_INVALID_TASK_ARGS,
            fmt::format("submit #{}: tensor {} has no buffer (addr 0); only Output tensors are "
                        "allocated by the runtime",
                        nth, i));
      return SIMPLER_INVALID_TASK_ID;
    }
    if (!view_fits(t, bytes)) {
      latch(SIMPLER_ERR_INVALID_TASK_ARGS,
            fmt::format("submit #{}: tensor {} is a view of {} bytes at offset {} of buffer {:#x}: "
                        "its end wraps past 2^64 (a negative or corrupt offset?)",
                        nth, i, bytes, t.offset, t.addr));
      return SIMPLER_INVALID_TASK_ID;
    }
    if (t.owner_task != SIMPLER_INVALID_TASK_ID && !created_in_run(t.owner_task)) {
      latch(SIMPLER_ERR_INVALID_TASK_ARGS,
            fmt::format("submit #{}: tensor {} names owner {}, which this run never created (a "
                        "descriptor from another run, or a corrupt one)",
                        nth, i, task_name(t.owner_task)));
      return SIMPLER_INVALID_TASK_ID;
    }
  }

  ArenaHeader& h = header();
  ScopeStack& st = h.scopes;
  const std::uint32_t ring = std::min<std::uint32_t>(st.depth - 1, kRings - 1);

  // Drop TensorMap entries of retired writers first: it keeps bucket chains short (a lookup
  // walks every entry of its buffer) and costs four checks when nothing retired.
  tm_reclaim(h);
  // Dependencies first (they do not depend on the new slot), so a failure leaves nothing behind.
  Candidates cand;
  for (int i = 0; i < b->tensor_count; ++i) {
    const simpler_chip_tensor& t = b->tensors[i];
    const int tag = b->tags[i];
    if (tag == SIMPLER_TAG_OUTPUT) continue;
    if (t.owner_task != SIMPLER_INVALID_TASK_ID && !retired(h, t.owner_task))
      cand.add(t.owner_task);
    if (tag != SIMPLER_TAG_INPUT && tag != SIMPLER_TAG_INOUT) continue;
    const std::uint64_t begin = t.offset;
    const std::uint64_t end = t.offset + simpler_tensor_nbytes(&t);
    for (std::uint32_t e = bucket_head(h.tmap, bucket_of(h.tmap, t.addr)); e != 0;) {
      TmEntry& en = h.tmap.entries[e - 1];
      const std::uint32_t next = en.bucket_next;
      if (en.addr == t.addr && overlaps(begin, end, en.begin, en.end) && !retired(h, en.producer)) {
        cand.add(en.producer);
        // An InOut that covers an earlier writer's bytes supersedes it: later readers wait for
        // this task, which waits for that writer.
        if (tag == SIMPLER_TAG_INOUT && begin <= en.begin && en.end <= end)
          unlink_entry(h.tmap, e - 1);
      }
      e = next;
    }
  }
  if (cand.overflow) {
    latch(SIMPLER_ERR_TOO_MANY_PRODUCERS,
          fmt::format("submit #{}: the task depends on more than {} producer tasks; merge inputs "
                      "or add an intermediate task",
                      nth, kMaxFanin));
    return SIMPLER_INVALID_TASK_ID;
  }
  std::uint32_t inserts = 0;
  for (int i = 0; i < b->tensor_count; ++i) {
    if (b->tags[i] == SIMPLER_TAG_INOUT || b->tags[i] == SIMPLER_TAG_OUTPUT_EXISTING) ++inserts;
  }
  if (!tm_ensure(*this, inserts)) return SIMPLER_INVALID_TASK_ID;
  if (!ensure_dep_space(*this, ring, static_cast<std::uint64_t>(cand.n))) {
    return SIMPLER_INVALID_TASK_ID;
  }

  // Slot and heap.
  std::uint64_t local = 0, heap_off = 0;
  if (!alloc_task(*this, ring, out_bytes, local, heap_off)) return SIMPLER_INVALID_TASK_ID;
  RingControl& rc = h.rings[ring];
  const std::uint64_t id = make_task_id(ring, local);
  SlotState& s = rc.slots[local & rc.mask];
  Payload& p = rc.payloads[local & rc.mask];
  // The wiring hold on the fanin; references of the scope and of the completion.
  bind_slot(s, id,
            {1, 2, lanes_used, static_cast<std::uint8_t>(shape), mask, heap_off,
             heap_off + out_bytes, kSlotPending});
  p.tensor_count = b->tensor_count;
  p.scalar_count = b->scalar_count;
  p.fanin_count = 0;
  for (int l = 0; l < 3; ++l) p.kernels[l] = lanes[l];
  std::uint64_t cursor = heap_off;
  for (int i = 0; i < b->tensor_count; ++i) {
    p.tensors[i] = b->tensors[i];
    if (b->tags[i] == SIMPLER_TAG_OUTPUT) {
      simpler_chip_tensor& t = p.tensors[i];
      t.addr = reinterpret_cast<std::uintptr_t>(rc.heap + cursor);
      t.offset = 0;
      t.owner_task = id;
      cursor += align_up(simpler_tensor_nbytes(&t), kHeapAlign);
    }
  }
  std::memcpy(p.scalars, b->scalars,
              sizeof(std::uint64_t) * static_cast<std::size_t>(b->scalar_count));
  // Publish the slot: schedulers read `current` (acquire) before looking at slots of this ring.
  rc.current.store(local + 1, std::memory_order_seq_cst);
  st.tasks[st.top++] = id;

  // Writers into the TensorMap.
  for (int i = 0; i < b->tensor_count; ++i) {
    const int tag = b->tags[i];
    if (tag != SIMPLER_TAG_INOUT && tag != SIMPLER_TAG_OUTPUT_EXISTING) continue;
    const simpler_chip_tensor& t = p.tensors[i];
    tm_insert(h, t.addr, t.offset, t.offset + simpler_tensor_nbytes(&t), id);
  }

  // Wiring: claim each producer under its lock; wait only for those not yet completed.
  for (int i = 0; i < cand.n; ++i) {
    const std::uint64_t pid = cand.ids[i];
    SlotState& ps = slot_of(pid);
    SlotLock lk(ps);
    const std::uint32_t st_now = ps.state.load(std::memory_order_seq_cst);
    if (ps.task_id != pid || st_now == kSlotConsumed) continue;  // gone: its bytes are final
    ps.refs.fetch_add(1, std::memory_order_relaxed);             // under the slot lock
    p.fanin[p.fanin_count++] = pid;
    if (st_now == kSlotPending) {
      const std::uint64_t linear = rc.dep_top++;
      DepEntry& de = rc.deps[linear % rc.dep_capacity];
      de.consumer = id;
      de.next = ps.fanout_head;
      ps.fanout_head = dep_link(ring, linear);
      // relaxed: the wiring hold keeps the count above zero until the acq_rel release below.
      s.fanin_remaining.fetch_add(1, std::memory_order_relaxed);
    }
  }
  s.dep_pool_mark = rc.dep_top;
  submitted.fetch_add(1, std::memory_order_seq_cst);
  progress.fetch_add(1, std::memory_order_relaxed);
  if (outputs != nullptr) {
    std::memcpy(outputs, p.tensors,
                sizeof(simpler_chip_tensor) * static_cast<std::size_t>(p.tensor_count));
  }
  if (s.fanin_remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) push_ready(id);
  return id;
}

void Context::scope_begin() {
  if (fatal()) return;
  ScopeStack& st = header().scopes;
  if (st.depth >= static_cast<std::uint32_t>(kMaxScopeDepth)) {
    latch(SIMPLER_ERR_SCOPE_OVERFLOW,
          fmt::format("scope_begin: scopes nest at most {} deep (the run opens the outermost)",
                      kMaxScopeDepth));
    return;
  }
  st.begin[st.depth++] = st.top;
}

void Context::scope_end() {
  end_scope(false);
}

void Context::end_scope(bool by_runtime) {
  ScopeStack& st = header().scopes;
  if (st.depth == 0) return;
  if (st.depth == 1 && !by_runtime) {
    // Depth 1 is the run's own scope: only the runtime closes it.
    if (!fatal()) {
      latch(SIMPLER_ERR_SCOPE_OVERFLOW,
            "scope_end without a matching scope_begin in the orchestration");
    }
    return;
  }
  const std::uint64_t from = st.begin[st.depth - 1];
  for (std::uint64_t i = from; i < st.top; ++i) {
    const std::uint64_t id = st.tasks[i];
    slot_of(id).scope_open.store(0, std::memory_order_relaxed);
    release_ref(id);
  }
  st.top = from;
  --st.depth;
}

int Context::alloc_tensor(const std::uint32_t* shapes, std::uint32_t ndims, std::uint8_t dtype,
                          simpler_chip_tensor* out) {
  if (fatal()) return SIMPLER_ERR_ORCH_FATAL;
  if (out == nullptr || shapes == nullptr || ndims < 1 || ndims > 5 ||
      simpler_dtype_size(dtype) == 0) {
    latch(SIMPLER_ERR_INVALID_TASK_ARGS,
          fmt::format("alloc_tensor: ndims {} dtype {} (out {}); ndims must be 1..5 and dtype a "
                      "simpler DataType",
                      ndims, dtype, out == nullptr ? "NULL" : "set"));
    return SIMPLER_ERR_INVALID_TASK_ARGS;
  }
  simpler_chip_tensor t{};
  t.ndims = ndims;
  t.dtype = dtype;
  for (std::uint32_t i = 0; i < ndims; ++i) t.shapes[i] = shapes[i];
  std::uint64_t nbytes = 0;
  if (!tensor_bytes(t, nbytes)) {
    latch(SIMPLER_ERR_INVALID_TASK_ARGS,
          fmt::format("alloc_tensor: shape {} is more than SIMPLER_MAX_TENSOR_BYTES ({}) bytes",
                      shape_text(shapes, ndims, dtype), SIMPLER_MAX_TENSOR_BYTES));
    return SIMPLER_ERR_INVALID_TASK_ARGS;
  }
  const std::uint64_t bytes = align_up(nbytes, kHeapAlign);
  ArenaHeader& h = header();
  ScopeStack& st = h.scopes;
  const std::uint32_t ring = std::min<std::uint32_t>(st.depth - 1, kRings - 1);
  std::uint64_t local = 0, heap_off = 0;
  if (!alloc_task(*this, ring, bytes, local, heap_off)) return run_status_.load();
  RingControl& rc = h.rings[ring];
  const std::uint64_t id = make_task_id(ring, local);
  SlotState& s = rc.slots[local & rc.mask];
  Payload& p = rc.payloads[local & rc.mask];
  // Only the scope holds it: it completed at birth.
  bind_slot(s, id, {0, 1, 0, 0, 0, heap_off, heap_off + bytes, kSlotCompleted});
  s.dep_pool_mark = rc.dep_top;
  p.tensor_count = 0;
  p.scalar_count = 0;
  p.fanin_count = 0;
  rc.current.store(local + 1, std::memory_order_seq_cst);
  st.tasks[st.top++] = id;
  submitted.fetch_add(1, std::memory_order_seq_cst);
  completed.fetch_add(1, std::memory_order_seq_cst);
  t.addr = reinterpret_cast<std::uintptr_t>(rc.heap + heap_off);
  t.offset = 0;
  t.owner_task = id;
  *out = t;
  return SIMPLER_OK;
}

int Context::read_tensor(const simpler_chip_tensor* t, std::uint64_t off, void* dst,
                         std::uint64_t n) {
  if (fatal()) return SIMPLER_ERR_ORCH_FATAL;
  auto refuse = [this](std::string message) {
    latch(SIMPLER_ERR_INVALID_TASK_ARGS, "read_tensor: " + std::move(message));
    return SIMPLER_ERR_INVALID_TASK_ARGS;
  };
  if (t == nullptr || dst == nullptr) {
    return refuse(fmt::format("the {} is NULL", t == nullptr ? "tensor" : "destination"));
  }
  std::uint64_t bytes = 0;
  if (!tensor_bytes(*t, bytes)) {
    return refuse(
        fmt::format("the tensor has shape {}: invalid, or more than "
                    "SIMPLER_MAX_TENSOR_BYTES ({}) bytes",
                    shape_text(t->shapes, t->ndims, t->dtype), SIMPLER_MAX_TENSOR_BYTES));
  }
  if (t->addr == 0) return refuse("the tensor has no buffer (addr 0)");
  // Each comparison is made so that it cannot overflow: a sum that wraps would let a huge
  // offset pass and read before the buffer.
  if (!view_fits(*t, bytes)) {
    return refuse(fmt::format("the view of {} bytes at offset {} of buffer {:#x} wraps past 2^64",
                              bytes, t->offset, t->addr));
  }
  if (n > bytes || off > bytes - n) {
    return refuse(
        fmt::format("{} bytes from byte {} are outside the tensor ({} bytes)", n, off, bytes));
  }
  if (t->owner_task != SIMPLER_INVALID_TASK_ID && !created_in_run(t->owner_task)) {
    return refuse(fmt::format("the tensor names owner {}, which this run never created",
                              task_name(t->owner_task)));
  }
  ArenaHeader& h = header();
  const std::uint64_t begin = t->offset + off, end = begin + n;
  Candidates writers;
  if (t->owner_task != SIMPLER_INVALID_TASK_ID) writers.add(t->owner_task);
  for (std::uint32_t e = bucket_head(h.tmap, bucket_of(h.tmap, t->addr)); e != 0;) {
    const TmEntry& en = h.tmap.entries[e - 1];
    if (en.addr == t->addr && overlaps(begin, end, en.begin, en.end)) writers.add(en.producer);
    e = en.bucket_next;
  }
  if (writers.overflow) {
    // Waiting for only some of them would read bytes that are still being written.
    latch(SIMPLER_ERR_TOO_MANY_PRODUCERS,
          fmt::format("read_tensor: more than {} live tasks write the bytes read; read a smaller "
                      "view or after a task that depends on them",
                      kMaxFanin));
    return SIMPLER_ERR_TOO_MANY_PRODUCERS;
  }
  const auto deadline = Clock::now() + tensor_wait;
  // Completions wake this thread only while it waits here (see orch_wants_completion).
  orch_wants_completion.store(1, std::memory_order_seq_cst);
  struct Reset {
    std::atomic<std::uint32_t>& flag;
    ~Reset() { flag.store(0, std::memory_order_seq_cst); }
  } reset{orch_wants_completion};
  for (int i = 0; i < writers.n; ++i) {
    const std::uint64_t w = writers.ids[i];
    auto done = [&] {
      if (fatal() || retired(h, w)) return true;
      SlotState& s = slot_of(w);
      return s.task_id != w || s.state.load(std::memory_order_seq_cst) != kSlotPending;
    };
    if (!progress_event.await(done, std::chrono::microseconds(20), deadline)) {
      latch(SIMPLER_ERR_TENSOR_WAIT_TIMEOUT,
            fmt::format("read_tensor waited {} ms for {} (which writes the tensor) to complete; it "
                        "has not (is it waiting on something the orchestration has yet to do?)",
                        tensor_wait.count(), task_name(w)));
      return SIMPLER_ERR_TENSOR_WAIT_TIMEOUT;
    }
    if (fatal()) return run_status_.load();
  }
  std::memcpy(dst, reinterpret_cast<const std::byte*>(static_cast<std::uintptr_t>(t->addr)) + begin,
              n);
  return SIMPLER_OK;
}

}  // namespace simpler::sim
