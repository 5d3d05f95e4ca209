// The device TensorMap: which live task writes which bytes of which buffer, so that a submit can
// find the producers its inputs wait for (tensor_map.cpp).
//
// A hash of buffer addresses to chains of entries "task P writes bytes [begin, end) of buffer A",
// with per-ring FIFOs in insertion order so that entries of retired writers are reclaimed from
// the front. Emptied at boot by bumping the epoch (a bucket of an older epoch is empty).
//
// Threads: the orchestrator thread only (submit, read_tensor). It reads `last_alive` of the
// rings (seq_cst) to tell retired writers apart.
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

/// Frees entries at the front of each ring's FIFO whose producer retired (or that were removed).
void tm_reclaim(ArenaHeader& h) noexcept;

/// Makes room for `n` TensorMap entries, waiting for producers to retire if needed. False when
/// the run failed (this wait latched SIMPLER_ERR_TENSORMAP_OVERFLOW, or another failure).
bool tm_ensure(Context& ctx, std::uint32_t n);

/// Records that task `producer` writes bytes [begin, end) of the buffer at `addr`.
void tm_insert(ArenaHeader& h, std::uint64_t addr, std::uint64_t begin, std::uint64_t end,
               std::uint64_t producer) noexcept;

/// Adds to `out` the live (not retired) writers of bytes [begin, end) of the buffer at `addr`: the
/// producers a task reading them waits for. With `supersede` (the task is an InOut of those
/// bytes) each writer whose bytes the range covers leaves the map: later readers wait for the
/// new task, which waits for that writer.
void tm_find_producers(ArenaHeader& h, std::uint64_t addr, std::uint64_t begin, std::uint64_t end,
                       bool supersede, Candidates& out) noexcept;

/// Adds to `out` every recorded writer of bytes [begin, end) of the buffer at `addr`, retired or
/// not (a read on the orchestrator thread waits for each to be done).
void tm_find_writers(const ArenaHeader& h, std::uint64_t addr, std::uint64_t begin,
                     std::uint64_t end, Candidates& out) noexcept;

}  // namespace simpler::sim
