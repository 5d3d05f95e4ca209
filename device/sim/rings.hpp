// Task slots on the rings, the orchestrator's side (rings.cpp): a slot and its heap bytes, and
// room in the dependency-list pool, with back-pressure. A wait that can never end (the ring is
// full of tasks an open scope holds) or that passes the resource_wait backstop fails the run.
//
// Threads: the orchestrator thread only; it alone writes `current`, `heap_top` and `dep_top`.
#pragma once

#include <cstdint>

#include "sim.hpp"

namespace simpler::sim {

/// Allocates a slot on `ring` and `bytes` of its heap: the slot's local id and the heap offset.
/// Blocks while the window or heap is full; fails the run (and returns false) when that wait can
/// never end or passes its backstop. The caller binds the slot, then publishes it by storing
/// `local_out + 1` to the ring's `current`.
bool alloc_task(Context& ctx, std::uint32_t ring, std::uint64_t bytes, std::uint64_t& local_out,
                std::uint64_t& heap_off);

/// Makes room for `n` dependency-list entries in `ring`'s pool.
bool ensure_dep_space(Context& ctx, std::uint32_t ring, std::uint64_t n);

/// What a newly allocated slot starts with.
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
inline void bind_slot(SlotState& s, std::uint64_t id, const SlotInit& in) noexcept {
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

}  // namespace simpler::sim
