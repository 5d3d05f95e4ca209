// The runtime arena: layout, host-side initialisation, pointer wiring, upload and boot.
//
// ensure_arena() runs on the host when a run's sizing differs from the cached arena's: it lays
// the arena out (reserve_layout), writes every data field into a host image (init_arena_data:
// zeroes, ready-queue sequence ramps), wires the image's pointers, and uploads it to device
// memory with one copy. boot() runs once per launched run on the device copy: it re-wires the
// pointers and resets the shared state (ring counters, the TensorMap epoch, the scope stack).
// Nothing in boot() depends on the window size: task slots are initialised when allocated.

#include <sys/mman.h>

#include <cstring>
#include <new>

#include "sim.hpp"

namespace simpler::sim {

namespace {

std::size_t align_up(std::size_t v, std::size_t a) noexcept {
  return (v + a - 1) / a * a;
}

std::uint64_t pow2_at_least(std::uint64_t v) noexcept {
  std::uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

std::uint64_t queue_capacity(const Sizing& s) noexcept {
  std::uint64_t total = 0;
  for (int r = 0; r < kRings; ++r) total += s.window[r];
  return pow2_at_least(total);
}

template <class T>
T* at(std::byte* base, std::size_t off) noexcept {
  return std::launder(reinterpret_cast<T*>(base + off));
}

void* map_lazily(std::size_t bytes) noexcept {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

bool ReadyQueue::push(std::uint64_t item) noexcept {
  // Positions are only claimed (relaxed is enough to read them); the cell's `seq` carries the
  // item from producer (release) to consumer (acquire).
  std::uint64_t pos = enqueue_pos.load(std::memory_order_relaxed);
  for (;;) {
    QueueCell& c = cells[pos & mask];
    const std::uint64_t seq = c.seq.load(std::memory_order_acquire);
    if (seq == pos) {
      // seq_cst: a consumer deciding to sleep reads enqueue_pos with seq_cst after registering.
      if (enqueue_pos.compare_exchange_weak(pos, pos + 1, std::memory_order_seq_cst,
                                            std::memory_order_relaxed)) {
        c.item = item;
        c.seq.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (seq < pos) {
      return false;  // full
    } else {
      pos = enqueue_pos.load(std::memory_order_relaxed);
    }
  }
}

bool ReadyQueue::pop(std::uint64_t& item) noexcept {
  std::uint64_t pos = dequeue_pos.load(std::memory_order_relaxed);
  for (;;) {
    QueueCell& c = cells[pos & mask];
    const std::uint64_t seq = c.seq.load(std::memory_order_acquire);
    if (seq == pos + 1) {
      if (dequeue_pos.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed,
                                            std::memory_order_relaxed)) {
        item = c.item;
        c.seq.store(pos + mask + 1, std::memory_order_release);
        return true;
      }
    } else if (seq < pos + 1) {
      return false;  // empty (or the producer has not finished writing the cell yet)
    } else {
      pos = dequeue_pos.load(std::memory_order_relaxed);
    }
  }
}

ArenaLayout reserve_layout(const Sizing& s) {
  ArenaLayout l;
  std::size_t off = 0;
  auto reserve = [&off](std::size_t bytes, std::size_t align) {
    off = align_up(off, align);
    const std::size_t at = off;
    off += bytes;
    return at;
  };
  l.off_header = reserve(sizeof(ArenaHeader), alignof(ArenaHeader));
  const std::uint64_t qcap = queue_capacity(s);
  for (int q = 0; q < kShapes; ++q) l.off_queue_cells[q] = reserve(qcap * sizeof(QueueCell), 64);
  for (int r = 0; r < kRings; ++r) l.off_deps[r] = reserve(s.dep_pool[r] * sizeof(DepEntry), 64);
  l.off_tm_buckets = reserve(s.tensormap_buckets * sizeof(TmBucket), 64);
  l.off_tm_entries = reserve(s.tensormap_entries * sizeof(TmEntry), 64);
  std::uint64_t scope_cap = 0;
  for (int r = 0; r < kRings; ++r) scope_cap += s.window[r];
  l.off_scope_tasks = reserve(scope_cap * sizeof(std::uint64_t), 64);
  l.size = align_up(off, 1024);
  return l;
}

void init_arena_data(std::byte* base, const ArenaLayout& l, const Sizing& s) {
  std::memset(base, 0, l.size);
  auto* h = new (base + l.off_header) ArenaHeader();
  h->magic = 0x534d504c4152454eULL;  // "SMPLAREN"
  h->sizing = s;
  h->layout = l;
  const std::uint64_t qcap = queue_capacity(s);
  for (int q = 0; q < kShapes; ++q) {
    h->queues[q].mask = qcap - 1;
    auto* cells = at<QueueCell>(base, l.off_queue_cells[q]);
    for (std::uint64_t i = 0; i < qcap; ++i) {
      new (&cells[i]) QueueCell();
      cells[i].seq.store(i, std::memory_order_relaxed);
      cells[i].item = 0;
    }
  }
  for (int r = 0; r < kRings; ++r) {
    RingControl& rc = h->rings[r];
    rc.window = s.window[r];
    rc.mask = s.window[r] - 1;
    rc.heap_size = s.heap[r];
    rc.dep_capacity = s.dep_pool[r];
  }
  h->tmap.bucket_mask = static_cast<std::uint32_t>(s.tensormap_buckets - 1);
  h->tmap.capacity = static_cast<std::uint32_t>(s.tensormap_entries);
  h->tmap.epoch = 1;
  std::uint64_t scope_cap = 0;
  for (int r = 0; r < kRings; ++r) scope_cap += s.window[r];
  h->scopes.capacity = scope_cap;
}

void wire_arena_pointers(std::byte* base) {
  auto* h = std::launder(reinterpret_cast<ArenaHeader*>(base));
  const ArenaLayout& l = h->layout;
  for (int q = 0; q < kShapes; ++q) h->queues[q].cells = at<QueueCell>(base, l.off_queue_cells[q]);
  for (int r = 0; r < kRings; ++r) h->rings[r].deps = at<DepEntry>(base, l.off_deps[r]);
  h->tmap.buckets = at<TmBucket>(base, l.off_tm_buckets);
  h->tmap.entries = at<TmEntry>(base, l.off_tm_entries);
  h->scopes.tasks = at<std::uint64_t>(base, l.off_scope_tasks);
}

int Context::ensure_arena(const Sizing& s) {
  if (arena.built && arena.sizing == s) return SIMPLER_OK;
  release_arena();

  // Host side: lay out, initialise, wire (the host image is complete and self-consistent).
  const ArenaLayout layout = reserve_layout(s);
  try {
    arena.host_image.assign(layout.size, std::byte{0});
  } catch (const std::bad_alloc&) {
    return fail(SIMPLER_ERR_OUT_OF_MEMORY,
                "the runtime arena (" + std::to_string(layout.size) +
                    " bytes) does not fit in host memory; reduce runtime_env ring sizes");
  }
  init_arena_data(arena.host_image.data(), layout, s);
  wire_arena_pointers(arena.host_image.data());
  ++counters.arena_builds;

  // Device side: one allocation for the arena, one (lazily committed) for task memory, one for
  // the heaps. The arena is uploaded with one copy.
  arena.base = static_cast<std::byte*>(device_malloc(layout.size));
  if (arena.base == nullptr) return SIMPLER_ERR_OUT_OF_MEMORY;
  arena.size = layout.size;
  std::memcpy(arena.base, arena.host_image.data(), layout.size);
  ++counters.arena_uploads;

  std::size_t tm_bytes = 0;
  for (int r = 0; r < kRings; ++r) {
    tm_bytes += align_up(s.window[r] * sizeof(SlotState), 4096) +
                align_up(s.window[r] * sizeof(Payload), 4096);
  }
  std::size_t heap_bytes = 0;
  for (int r = 0; r < kRings; ++r) heap_bytes += align_up(s.heap[r], 4096);
  arena.task_memory = map_lazily(tm_bytes);
  arena.heap_memory = map_lazily(heap_bytes);
  if (arena.task_memory == nullptr || arena.heap_memory == nullptr) {
    release_arena();
    return fail(SIMPLER_ERR_OUT_OF_MEMORY,
                "cannot reserve task memory (" + std::to_string(tm_bytes) + " bytes) and heaps (" +
                    std::to_string(heap_bytes) + " bytes); reduce runtime_env ring sizes");
  }
  arena.task_memory_size = tm_bytes;
  arena.heap_memory_size = heap_bytes;
  arena.sizing = s;
  arena.built = true;
  arena.dirty = false;
  return SIMPLER_OK;
}

void Context::release_arena() noexcept {
  if (arena.base != nullptr) device_free(arena.base);
  arena.base = nullptr;
  arena.size = 0;
  if (arena.task_memory != nullptr) ::munmap(arena.task_memory, arena.task_memory_size);
  if (arena.heap_memory != nullptr) ::munmap(arena.heap_memory, arena.heap_memory_size);
  arena.task_memory = arena.heap_memory = nullptr;
  arena.task_memory_size = arena.heap_memory_size = 0;
  arena.built = false;
  arena.host_image.clear();
  arena.host_image.shrink_to_fit();
}

void Context::boot() {
  const auto t0 = Clock::now();
  if (arena.dirty) {
    // A failed run may have left tasks in the ready queues and slots mid-flight; start from the
    // host image again (one copy) instead of walking the queues.
    std::memcpy(arena.base, arena.host_image.data(), arena.size);
    ++counters.arena_uploads;
    arena.dirty = false;
  }
  wire_arena_pointers(arena.base);
  ArenaHeader& h = header();
  const Sizing& s = h.sizing;
  // Task memory and heaps: fixed addresses per ring, assigned by offset arithmetic.
  std::byte* tm = static_cast<std::byte*>(arena.task_memory);
  std::byte* heap = static_cast<std::byte*>(arena.heap_memory);
  for (int r = 0; r < kRings; ++r) {
    RingControl& rc = h.rings[r];
    rc.slots = std::launder(reinterpret_cast<SlotState*>(tm));
    tm += align_up(s.window[r] * sizeof(SlotState), 4096);
    rc.payloads = std::launder(reinterpret_cast<Payload*>(tm));
    tm += align_up(s.window[r] * sizeof(Payload), 4096);
    rc.heap = heap;
    heap += align_up(s.heap[r], 4096);
    // Shared state reset: the window and heap start empty.
    // relaxed: no device thread runs during a boot; the launch word's seq_cst store
    // publishes all of this.
    rc.current.store(0, std::memory_order_relaxed);
    rc.last_alive.store(0, std::memory_order_relaxed);
    rc.advance_lock.store(0, std::memory_order_relaxed);
    rc.advance_pending.store(0, std::memory_order_relaxed);
    rc.heap_top = 0;
    rc.dep_top = 0;
    rc.dep_tail.store(0, std::memory_order_relaxed);
  }
  // TensorMap: a new epoch empties every bucket without touching them.
  TensorMap& tmap = h.tmap;
  if (++tmap.epoch == 0) {
    // Wrapped after 2^32 boots: buckets could carry any old epoch, so clear them once.
    std::memset(static_cast<void*>(tmap.buckets), 0,
                (std::size_t{tmap.bucket_mask} + 1) * sizeof(TmBucket));
    tmap.epoch = 1;
  }
  tmap.bump = 0;
  tmap.free_head = 0;
  tmap.live = 0;
  for (int r = 0; r < kRings; ++r) tmap.fifo_head[r] = tmap.fifo_tail[r] = 0;
  h.scopes.depth = 0;
  h.scopes.top = 0;
  ++counters.boots;
  counters.last_boot_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

}  // namespace simpler::sim
