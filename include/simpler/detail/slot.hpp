// simpler::detail::Slot — the parent-side record of one task, and the pool that recycles them.
//
// Ownership: the Orchestrator (on the thread that called Worker::run) fills a slot while it is
// Building and owns recycling. After publication the Scheduler and lanes read the task data
// read-only; the dependency words below are the only fields several threads write, and they are
// atomics. Slots live in fixed chunks that never move, so a slot's address is stable for the
// Worker's lifetime; a slot is reused only after it was retired (consumed), which is what bounds
// memory by live tasks rather than by tasks submitted.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "simpler/call_config.hpp"
#include "simpler/callable.hpp"
#include "simpler/detail/cache_line.hpp"
#include "simpler/detail/intrusive_stack.hpp"
#include "simpler/detail/small_vec.hpp"
#include "simpler/error.hpp"
#include "simpler/task.hpp"
#include "simpler/task_args.hpp"
#include "simpler/types.hpp"

namespace simpler {

namespace detail {

/// Which of a Worker's two lane tables a task or lane belongs to: next-level children (chips,
/// nested Workers) or host sub workers.
enum class Role : std::uint8_t { NextLevel, Sub };

/// One dependency edge, stored in the consumer; linked into the producer's consumer list.
struct Edge {
  Edge* next = nullptr;
  TaskSlot consumer = kInvalidSlot;
  /// Orders only (the consumer overwrites bytes the producer reads): a failed producer does not
  /// poison the consumer, which never sees its data.
  bool order_only = false;
};

/// A byte range this task registered as its output in the TensorMap (for erasure at retire).
struct OutputRange {
  std::uint64_t space;
  std::uint64_t begin;
  std::uint64_t end;
};

/// One member of a task: the worker it goes to, and where its arguments start inside the slot's
/// concatenated argument arrays.
struct MemberArgs {
  std::uint32_t tensor_begin;
  std::uint32_t scalar_begin;
  WorkerId target;  ///< any_worker = the scheduler picks (unused in the closing entry)
};

/// Sentinel closing a producer's consumer list: the producer has finished, late consumers must
/// not wait for it.
inline Edge* closed_list() noexcept {
  static Edge sentinel;
  return &sentinel;
}

/// Where one member's arguments lie in its slot's tensors and scalars: [tensor_begin,
/// tensor_end) and [scalar_begin, scalar_end).
struct MemberSpan {
  std::uint32_t tensor_begin;
  std::uint32_t tensor_end;
  std::uint32_t scalar_begin;
  std::uint32_t scalar_end;
};

/// A pending task's record. Kept small (three cache lines; a task's tensors, scalars and edges
/// live in arrays that a reused slot keeps), since a run holds one per task in flight: fields are
/// ordered so that none needs padding. Cache-line aligned: slots are recycled LIFO, so neighbours
/// are in flight together on different threads, and a line shared between two of them would
/// bounce between the cores filling and finishing them.
struct alignas(kCacheLine) Slot {
  // ---- task data: written by the Orchestrator while Building, read-only after publication.
  std::uint64_t digest = 0;
  std::unique_ptr<CallConfig> config;  // kept across reuse; valid when has_config
  /// A group's members: group_size + 1 entries (the last one closes). Empty for a single task,
  /// whose target is `target0` and whose arguments are all of tensors and scalars: the common
  /// task then touches no storage outside the slot.
  SmallVec<MemberArgs, 0> members;
  SmallVec<ContinuousTensor, 0> tensors;  // all members' tensors, concatenated
  SmallVec<std::uint64_t, 0> scalars;     // all members' scalars, concatenated
  std::uint32_t callable_index = 0;
  std::uint32_t run_id = 0;
  std::uint32_t group_size = 1;
  std::uint32_t timeout_ms = 0;   // deadline from the task's start; 0 = none (routing field)
  std::uint32_t trace_id = 0;     // 1-based id in its run when traced (or dep_gen), else 0
  WorkerId target0 = any_worker;  // a single task's target (routing field)
  Role role = Role::Sub;
  CallableKind callable_kind = CallableKind::Sub;  // what runs it (routing field)
  bool has_config = false;

  // ---- dependency state, shared between threads.
  /// Set when a producer failed; the task is then skipped instead of run.
  std::atomic<bool> poisoned{false};
  /// Set (before closing `consumers`) when this task did not succeed.
  std::atomic<bool> failed{false};
  /// For observation (tests, diagnostics); transitions are driven by the words below.
  std::atomic<TaskState> state{TaskState::Free};

  std::int8_t heap_ring = -1;  // Orchestrator: ring of its auto-allocated bytes
  /// Scheduler: a group's outcome so far; any task's outcome while on its worklist.
  Outcome group_outcome = Outcome::Success;

  /// Producers still to finish + 1 while the Orchestrator is wiring. Whoever takes it to 0 makes
  /// the task ready (exactly one thread does).
  std::atomic<std::int32_t> pending{0};
  /// References keeping this slot (and its heap bytes) alive: its own (until terminal), its
  /// scope's, and one per later task whose tensors lie in its heap bytes (not its consumers: a
  /// wired consumer needs nothing from it). Whoever takes it to 0 retires the slot. Only the
  /// Orchestrator's thread adds references (OrchestratorBase::release_ref relies on it); any
  /// thread may drop one.
  std::atomic<std::int32_t> refs{0};
  TaskSlot id = kInvalidSlot;
  /// Consumers waiting on this task; closed_list() once the task finished.
  std::atomic<Edge*> consumers{nullptr};

  // ---- Orchestrator-private bookkeeping.
  SmallVec<Edge, 0> edges;           // this task's edges as a consumer
  SmallVec<TaskSlot, 0> holds;       // heap owners it holds a reference on
  SmallVec<OutputRange, 0> outputs;  // TensorMap entries to erase at retire
  std::uint64_t heap_seq = 0;        // allocation record in heap ring `heap_ring`
  std::uint32_t gen = 0;             // bumped at each retire: tells TensorMap readers apart

  std::uint32_t members_done = 0;  // Scheduler: a group's members that ended

  /// Intrusive link for the lock-free hand-off stacks (ready inbox, retire inbox) and the
  /// scheduler's worklist: a task is on one of them at a time.
  Slot* next = nullptr;

  [[nodiscard]] bool is_group() const noexcept { return group_size > 1; }
  /// The worker member `m` goes to (any_worker: the scheduler picks).
  [[nodiscard]] WorkerId target(std::size_t m) const noexcept {
    return is_group() ? members[m].target : target0;
  }
  /// Where member `m`'s arguments lie.
  [[nodiscard]] MemberSpan member_args(std::size_t m) const noexcept {
    if (!is_group()) {
      return {0, static_cast<std::uint32_t>(tensors.size()), 0,
              static_cast<std::uint32_t>(scalars.size())};
    }
    const MemberArgs& a = members[m];
    const MemberArgs& b = members[m + 1];
    return {a.tensor_begin, b.tensor_begin, a.scalar_begin, b.scalar_begin};
  }
  /// Member `m`'s arguments as its callable sees them (valid while the slot holds this task).
  [[nodiscard]] TaskArgsView member_view(std::size_t m) const noexcept {
    const MemberSpan a = member_args(m);
    return {static_cast<std::int32_t>(a.tensor_end - a.tensor_begin),
            static_cast<std::int32_t>(a.scalar_end - a.scalar_begin),
            tensors.data() + a.tensor_begin, scalars.data() + a.scalar_begin};
  }
  /// The task's CallConfig (the default one when it was submitted without).
  [[nodiscard]] const CallConfig* call_config() const noexcept {
    return has_config ? config.get() : &default_call_config();
  }
  /// Asks the CPU to bring this slot's lines towards this core for writing: ahead of reuse (the
  /// thread that finished its last task has them), or of sending a task to a forked child (the
  /// Orchestrator's core wrote them; SchedulerCore::post), so that the misses of several slots
  /// overlap instead of stalling one after another.
  void prefetch_lines() const noexcept {
    const char* p = reinterpret_cast<const char*>(this);
    for (std::size_t off = 0; off < sizeof(Slot); off += kCacheLine)
      __builtin_prefetch(p + off, 1, 3);
  }
};
static_assert(sizeof(Slot) <= 192, "a pending task's record must stay within 192 bytes");

/// Fixed-capacity table of stable slot chunks plus a free list. alloc/free are called by the
/// Orchestrator thread only; at() may be called by any thread for a slot id it received through
/// a synchronising hand-off (the chunk pointer was written before that hand-off).
class SlotPool {
 public:
  static constexpr std::uint32_t kChunkBits = 10;
  static constexpr std::uint32_t kChunkSize = 1U << kChunkBits;
  static constexpr std::uint32_t kMaxChunks = 1U << 14;  // 16M live slots

  SlotPool() : chunks_(std::make_unique<std::unique_ptr<Slot[]>[]>(kMaxChunks)) {}

  Slot& at(TaskSlot id) noexcept { return chunks_[id >> kChunkBits][id & (kChunkSize - 1)]; }
  const Slot& at(TaskSlot id) const noexcept {
    return chunks_[id >> kChunkBits][id & (kChunkSize - 1)];
  }

  /// A free slot, growing by one chunk when none is free. Prefetches the slot the next call
  /// will return, whose lines are usually in another core's cache: the miss then overlaps with
  /// filling this one instead of stalling the next submit.
  Slot& alloc() {
    if (free_.empty()) add_chunk();
    const TaskSlot id = free_.back();
    free_.pop_back();
    ++live_;
    if (!free_.empty()) at(free_.back()).prefetch_lines();
    return at(id);
  }
  void free(Slot& s) noexcept {
    // A slot freed next to the one freed before it (either way) keeps the list in runs that
    // alloc() hands out at neighbouring addresses; any other is a jump.
    if (!free_.empty() && s.id + 1 != free_.back() && s.id != free_.back() + 1) ++jumps_;
    free_.push_back(s.id);  // capacity reserved for every slot ever created: cannot throw
    --live_;
  }
  /// With every slot free, puts the free list back in id order (alloc() then hands out ids
  /// 0, 1, 2, ...: neighbouring addresses) once 64 slots, and one in 64 of all, were freed out
  /// of order since the last time (where in the list they went is not known: a few may be what
  /// the next run takes first). Tasks that finish out of order scatter the list, and a
  /// later chain then walks its slots at random: the lane's miss on each consumer's line is one
  /// no hardware prefetcher predicts (a 10k InOut chain ran 100 -> 200 ns/hop after 8 runs of
  /// 100k independent tasks). O(capacity), at most 64 entries per jump. Orchestrator only,
  /// between runs.
  void restore_order() noexcept {
    if (live_ != 0 || jumps_ < 64 || jumps_ * 64 < free_.size()) return;
    const auto n = static_cast<TaskSlot>(free_.size());
    for (TaskSlot i = 0; i < n; ++i) free_[i] = n - 1 - i;
    jumps_ = 0;
  }
  [[nodiscard]] std::uint32_t live() const noexcept { return live_; }
  /// No free slot left: the next alloc() adds a chunk.
  [[nodiscard]] bool exhausted() const noexcept { return free_.empty(); }
  [[nodiscard]] std::uint32_t capacity() const noexcept { return chunk_count_ * kChunkSize; }

 private:
  void add_chunk() {
    if (chunk_count_ == kMaxChunks) {
      throw UsageError("too many live tasks (16M): close scopes so finished tasks can be consumed");
    }
    free_.reserve(static_cast<std::size_t>(chunk_count_ + 1) * kChunkSize);
    auto chunk = std::make_unique<Slot[]>(kChunkSize);
    const TaskSlot base = chunk_count_ * kChunkSize;
    for (std::uint32_t i = 0; i < kChunkSize; ++i) chunk[i].id = base + i;
    chunks_[chunk_count_++] = std::move(chunk);
    for (std::uint32_t i = kChunkSize; i-- > 0;) free_.push_back(base + i);
  }

  // The chunk table is read by every engine thread per task; the free list and the count are
  // written by the Orchestrator per task, so they get a cache line of their own.
  std::unique_ptr<std::unique_ptr<Slot[]>[]> chunks_;
  std::uint32_t chunk_count_ = 0;
  alignas(kCacheLine) std::uint32_t live_ = 0;
  std::vector<TaskSlot> free_;
  std::size_t jumps_ = 0;  // frees out of order since the last restore_order()
};

/// Slots handed between threads (ready inbox, retire inbox).
using SlotStack = IntrusiveStack<Slot, &Slot::next>;

}  // namespace detail
}  // namespace simpler
