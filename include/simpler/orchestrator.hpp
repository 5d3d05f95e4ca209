// simpler — Orchestrator: the DAG builder an orchestration function receives.
//
// Thread-safety: used only on the thread running Worker::run, only inside the orchestration
// function; a submit, alloc or scope call from any other thread is a UsageError. Every submit
// infers dependencies from the tensor tags (see TensorArgType), stores the task in a slot and hands
// it to the Scheduler once its producers are done; it never waits for the task itself. It blocks
// only when a heap ring is full (up to WorkerOptions::heap_wait).
//
// The type an orchestration function receives is BasicOrchestrator<Lanes...> (below), the one of
// its Worker's lane set; simpler::Orchestrator is the default Worker's. The API lives in
// OrchestratorBase, which does not depend on the lane types: code meant for any Worker takes
// OrchestratorBase&.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "simpler/call_config.hpp"
#include "simpler/callable.hpp"
#include "simpler/detail/engine_core.hpp"
#include "simpler/detail/heap_ring.hpp"
#include "simpler/detail/small_vec.hpp"
#include "simpler/detail/tensor_map.hpp"
#include "simpler/leaf/leaf.hpp"
#include "simpler/task_args.hpp"
#include "simpler/transport/transport.hpp"

namespace simpler {

namespace detail {
/// Tests' way to the engine behind an Orchestrator (defined in tests/support/engine_access.hpp),
/// to hold back what they cannot make happen reliably by timing alone.
struct EngineTestAccess;
}  // namespace detail

/// What a submit returns: the task's slot, and the tensors it auto-allocated (its Output
/// arguments with data == 0, in argument order, across members for groups).
struct SubmitResult {
  // User-provided, so `return {}` only runs the members' initialisers: as an aggregate GCC
  // cleared all its bytes first (a `rep stos` of 104 bytes, about 8 % of a chain step run at
  // its submit).
  SubmitResult() noexcept {}  // NOLINT(modernize-use-equals-default)

  TaskSlot slot_id = kInvalidSlot;
  detail::SmallVec<ContinuousTensor, 2> outputs;

  /// Auto-allocated output i; throws UsageError when there is no such output.
  [[nodiscard]] const ContinuousTensor& output(std::size_t i = 0) const;
};

inline constexpr int kMaxScopeDepth = 64;

/// The lane-independent part of every Orchestrator (see BasicOrchestrator): the API an
/// orchestration function uses.
class OrchestratorBase {
 public:
  /// RAII scope: scope_begin() now, scope_end() when destroyed.
  class Scope {
   public:
    explicit Scope(OrchestratorBase& o) : o_(&o) { o_->scope_begin(); }
    Scope(Scope&& other) noexcept : o_(std::exchange(other.o_, nullptr)) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    ~Scope() noexcept(false) {
      if (o_ != nullptr && std::uncaught_exceptions() == 0) o_->scope_end();
      // During unwinding the run closes every open scope itself.
    }

   private:
    OrchestratorBase* o_;
  };

  /// Submits a task for a next-level worker: `worker`, or any idle one with any_worker.
  /// The arguments are copied into the task's slot; `args` is only read (by reference, so a
  /// chained `TaskArgs().add_tensor(...)` is not copied a second time on the way in).
  SubmitResult submit_next_level(const CallableHandle& callable, const TaskArgs& args,
                                 const CallConfig& config = default_call_config(),
                                 WorkerId worker = any_worker);
  /// One task run by args.size() next-level workers at once (member i on workers[i], or on any
  /// idle workers when `workers` is empty); complete when every member is.
  SubmitResult submit_next_level_group(const CallableHandle& callable, std::vector<TaskArgs> args,
                                       const CallConfig& config = default_call_config(),
                                       std::vector<WorkerId> workers = {});
  /// Submits a host task for a sub worker: `worker`, or any idle one.
  SubmitResult submit_sub(const CallableHandle& callable, const TaskArgs& args = {},
                          WorkerId worker = any_worker);
  /// submit_sub with a CallConfig; sub workers use only its `timeout` (the task's deadline).
  SubmitResult submit_sub(const CallableHandle& callable, const TaskArgs& args,
                          const CallConfig& config, WorkerId worker = any_worker);
  /// One host task run by args.size() sub workers at once.
  SubmitResult submit_sub_group(const CallableHandle& callable, std::vector<TaskArgs> args,
                                std::vector<WorkerId> workers = {},
                                const CallConfig& config = default_call_config());

  /// An intermediate buffer from the heap ring of the current scope, live until the scope ends
  /// and its last reader finishes. Readers and writers order against it like any output.
  ContinuousTensor alloc(std::span<const std::uint32_t> shape, DataType dtype);
  ContinuousTensor alloc(std::initializer_list<std::uint32_t> shape, DataType dtype) {
    return alloc(std::span<const std::uint32_t>(shape.begin(), shape.size()), dtype);
  }

  void scope_begin();
  void scope_end();
  [[nodiscard]] Scope scope() { return Scope(*this); }

  /// The level of the Worker running this orchestration (3 for a host, 4 for a pod, ...).
  [[nodiscard]] int level() const noexcept { return core_.level; }
  /// Current scope depth, counting the scope the run opens (1 at the top of a run).
  [[nodiscard]] int scope_depth() const noexcept { return depth_; }

  // ---- Introspection, for tests and diagnostics.
  /// The state of the task in slot `s`; Free for kInvalidSlot (a task that ran at its submit
  /// without a slot: SubmitResult::slot_id) and for a slot given back.
  [[nodiscard]] TaskState state_of(TaskSlot s) const noexcept {
    if (s == kInvalidSlot) return TaskState::Free;
    return core_.pool.at(s).state.load(std::memory_order_acquire);
  }
  [[nodiscard]] std::uint32_t live_tasks() const noexcept { return core_.pool.live(); }
  /// True once a task of the current run failed (later submits throw).
  [[nodiscard]] bool run_failed() const noexcept { return core_.run.failed(); }
  /// True once the current run was cancelled (the orchestration function threw).
  [[nodiscard]] bool run_cancelled() const noexcept { return core_.run.cancelled(); }
  [[nodiscard]] std::uint32_t slot_capacity() const noexcept { return core_.pool.capacity(); }
  [[nodiscard]] std::size_t tensor_map_size() const noexcept { return tmap_.size(); }
  [[nodiscard]] const detail::HeapRing& heap_ring(int i) const { return heaps_.at(i); }

  // ---- Worker-facing. Not for orchestration functions.
  OrchestratorBase(detail::EngineCore& core, const detail::CallableRegistry& registry,
                   std::size_t heap_ring_size);
  ~OrchestratorBase();
  OrchestratorBase(const OrchestratorBase&) = delete;
  OrchestratorBase& operator=(const OrchestratorBase&) = delete;

  /// Opens a run on the calling thread (which then owns this Orchestrator): the outermost scope.
  void begin_run();
  /// Closes every open scope and waits until every task of the run retired. Returns how many
  /// scopes the orchestration left open (besides the run's own).
  int finish_run() noexcept;
  /// True from begin_run() until finish_run() has drained the run. Any thread.
  [[nodiscard]] bool in_run() const noexcept { return in_run_.load(std::memory_order_acquire); }
  /// Tasks a run's fence gave up on: they neither finished nor were given back while the whole
  /// engine stood idle for kLostTaskGrace (the engine lost them: a defect). Their slots never
  /// come back, so the Worker refuses further runs. 0 normally.
  [[nodiscard]] std::uint32_t lost_tasks() const noexcept { return lost_tasks_; }
  /// How long a run's fence waits with the engine idle (no lane busy, nothing queued or being
  /// handed back) and tasks of the run unretired before it gives them up as lost.
  static constexpr std::chrono::milliseconds kLostTaskGrace{1000};
  /// Records, at Worker::init, which roles have children in another address space and the
  /// shared mappings they can see (from /proc/self/maps): submits for those roles then refuse
  /// tensors outside them.
  void record_shared_memory(bool sub_separate, bool next_level_separate);
  [[nodiscard]] std::byte* heap_base(int ring) const noexcept { return heaps_[ring].base(); }
  /// Which orderings tags imply (WorkerOptions::hazards); set before the first run.
  void set_hazards(Hazards h) noexcept { hazards_ = h; }
  /// The next run's tracing (before begin_run): its trace level (0 = off) and where to record
  /// its dependency graph (null = not recorded). Task ids restart at 1.
  void set_trace(int level, detail::DagRecord* dag) noexcept {
    trace_level_ = level;
    dag_ = dag;
    trace_next_ = 0;
  }

  /// At most this many tasks alive: a task published into a sleeping scheduler is dispatched on
  /// the Orchestrator's thread (dispatch_published) instead of waking the scheduler thread.
  static constexpr std::uint32_t kInlineDispatchLive = 8;

 private:
  friend struct detail::EngineTestAccess;

  SubmitResult submit(detail::Role role, const CallableHandle& callable,
                      std::span<const TaskArgs> members, const CallConfig& config,
                      std::span<const WorkerId> targets, const char* api);
  // The parts of a submit after its slot is taken; each may throw (see abandon_submit).
  /// The task's callable, arguments, targets and config into its slot.
  void fill_slot(detail::Slot& s, detail::Role role, const detail::CallableRegistry::Entry& entry,
                 const CallableHandle& callable, std::span<const TaskArgs> members,
                 const CallConfig& config, bool custom_config, std::span<const WorkerId> targets);
  /// Addresses in `heap` for the task's auto-allocated outputs, in argument order, also
  /// returned in `result`.
  void place_outputs(detail::Slot& s, std::span<const TaskArgs> members, int ring,
                     const detail::HeapRing::Allocation& heap, SubmitResult& result);
  /// The task's tensors through the TensorMap: the producers it waits for (scratch_producers_,
  /// for infer_and_wire) and the ranges it writes (s.outputs). `auto_outputs`: it has some.
  void track_tensors(detail::Slot& s, std::span<const TaskArgs> members, bool auto_outputs,
                     bool traced);
  void check_open(const char* api) const;
  /// A submit threw after taking its slot: gives the slot back, or (once it is in the frame)
  /// fails the run and publishes the task poisoned. In the submit's catch.
  void abandon_submit(detail::Slot& s, bool in_frame, const detail::HeapRing::Allocation* heap,
                      int ring, const char* api) noexcept;
  /// Throws unless called inside a run, on the thread running it. Inline fast path.
  void check_owner(const char* api) const {
    if (in_run_.load(std::memory_order_acquire) &&
        owner_.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
      return;
    }
    throw_not_owner(api);
  }
  [[noreturn]] void throw_not_owner(const char* api) const;
  /// Past the run's deadline: fails the run and rethrows its error.
  void check_run_deadline() {
    if (core_.run_deadline_ns.load(std::memory_order_relaxed) != 0) run_deadline_slow();
  }
  void run_deadline_slow();
  /// Null data (for tags but Output) and, for children in another address space, memory they
  /// cannot see. Inline fast path.
  void check_tensor(const char* api, detail::Role role, std::int32_t index,
                    const ContinuousTensor& t, TensorArgType tag) const {
    if (t.data != 0 && !separate_[static_cast<std::size_t>(role)]) return;
    check_tensor_slow(api, role, index, t, tag);
  }
  void check_tensor_slow(const char* api, detail::Role role, std::int32_t index,
                         const ContinuousTensor& t, TensorArgType tag) const;
  [[noreturn]] void throw_not_shared(const char* api, detail::Role role, std::int32_t index,
                                     const ContinuousTensor& t, bool starts_shared) const;
  /// Next-level lanes that serve only some callables or see only remote memory (remote workers):
  /// the callable must be served, and tensors must lie in the target's live remote buffers.
  void check_restricted(const detail::CallableRegistry::Entry& entry,
                        std::span<const TaskArgs> members, std::span<const WorkerId> targets,
                        const char* api) const;
  void check_targets(detail::Role role, const detail::CallableRegistry::Entry& entry,
                     std::size_t members, std::span<const WorkerId> targets, const char* api) const;
  detail::HeapRing::Allocation heap_alloc(int ring, std::size_t bytes, const char* api);
  /// A tensor inside a heap ring: takes a reference on the slot owning its allocation (into
  /// scratch_holds_), so the bytes outlive the task using them even after their scope ended.
  /// UsageError when no live allocation holds it (its scope ended, or a stray pointer).
  void hold_heap_owner(const char* api, std::int32_t index, const ContinuousTensor& t) {
    // One compare for the usual tensor, outside every ring (the rings' addresses span
    // [heap_lo_, heap_lo_ + heap_span_), usually back to back).
    if (t.data - heap_lo_ >= heap_span_) return;
    for (std::size_t k = 0; k < heaps_.size(); ++k) {
      const auto off = t.data - reinterpret_cast<std::uintptr_t>(heaps_[k].base());
      if (off < heaps_[k].size()) [[unlikely]] {
        hold_heap_owner_slow(api, index, t, k, off);
        return;
      }
    }
  }
  void hold_heap_owner_slow(const char* api, std::int32_t index, const ContinuousTensor& t,
                            std::size_t ring, std::uint64_t offset);
  void release_scratch_holds() noexcept;
  /// Whether a TensorMap reader still matters to a writer: its slot was not reused and the
  /// task has not finished.
  [[nodiscard]] bool reader_live(const detail::TensorReader& r) const noexcept;
  /// Drops stale readers and empty segments (once as many writer-less segments were made as the
  /// map held after the last sweep), so the map stays bounded by live tasks.
  void sweep_tensor_map();
  /// finish_run's liveness check failed: records the run's unretired tasks as lost and fails
  /// the run with an Error saying so.
  void give_up_lost_tasks() noexcept;
  /// sweep_tensor_map, also dropping the entries of writers that finished and succeeded
  /// (writer_settled): for a stretch of tasks run settled, which record nothing, so the map's
  /// older entries would only make each of their looks walk further.
  void sweep_settled() noexcept;
  /// Whether the writer in slot `p` finished and succeeded: no later task needs its entries.
  [[nodiscard]] bool writer_settled(TaskSlot p) const noexcept;
  void infer_and_wire(detail::Slot& s);
  /// Makes the wired task `s` known: ready (no producer left), it runs through `runner` when
  /// one was picked (hand_over_or_run); otherwise it waits for its producers.
  void publish(detail::Slot& s, detail::LaneCore* runner = nullptr);
  /// A task that is ready at its submit: runs it here through `runner` (the lane submit_runner
  /// picked before wiring; run_at_submit) unless a failed producer poisoned it, else hands it
  /// to the scheduler.
  void hand_over_or_run(detail::Slot& s, detail::LaneCore* runner) noexcept;
  /// The lane whose leaf may run task `s` on this thread if it is ready at its submit
  /// (LaneCore::run_here), or null: untimed single sub tasks, untraced runs,
  /// WorkerOptions::caller_runs_tasks, and only while the sub workers have a backlog or their
  /// tasks are cheap (sub_backlogged). Asked once per single sub submit, before its slot.
  [[nodiscard]] detail::LaneCore* submit_runner(detail::Role role, const CallConfig& config,
                                                std::uint32_t callable_index,
                                                WorkerId target) noexcept;
  /// Whether single task `s`, about to run at submit (submit_runner), touches only settled
  /// bytes (TensorMap::settled): every writer of what it reads or writes finished and
  /// succeeded, and with Hazards::All every reader of what it writes finished. Such a task is
  /// ready, and since it finishes before the submit returns no later task can wait for it, so
  /// it is neither recorded in the TensorMap nor wired: a later task touching its bytes finds a
  /// finished writer or none, as it would once the task retired. Saves a run of tasks at submit
  /// (bench_engine's d rows) the map's inserts and erasures, and the map its growth. Read-only:
  /// false leaves everything to track_tensors. `placed`: the slot's tensors, whose outputs
  /// the submit allocated (auto outputs), else null.
  [[nodiscard]] bool settled_at_submit(const TaskArgs& a, WorkerId target,
                                       const ContinuousTensor* placed) const noexcept;
  /// Whether ready sub tasks wait for a lane: at least kBacklogPerLane per sub worker in the
  /// ready ring and the scheduler's queues, looked at every kBacklogLookEvery calls (and known
  /// at once when the ready ring overflows). Once there is a backlog and the tasks run at submit
  /// are cheap (cheap_at_submit_), it lasts until nothing waits, looked at less often.
  [[nodiscard]] bool sub_backlogged() noexcept;
  /// Whether the lanes' timed tasks of this run say its tasks are cheaper than a hand-over
  /// (LaneCore::cheap_run, at least kCheapStreak in a row on some lane, the last one of every
  /// lane cheap), unless a task timed at submit took long less than kCostlyPauseLooks ago.
  [[nodiscard]] bool lanes_find_tasks_cheap() noexcept;
  /// Runs ready task `s` on this thread through `lane`'s leaf and completes it; a task that
  /// succeeded and holds no heap bytes retires at once (its slot is reused by the next submit).
  void run_at_submit(detail::Slot& s, detail::LaneCore& lane) noexcept;
  /// The deadline a task submitted with `config` gets, in whole ms (0 = none).
  [[nodiscard]] std::uint32_t task_timeout_ms(const CallConfig& config) const noexcept;
  /// Counts a task run settled at submit; sweeps the TensorMap's settled entries now and then.
  void note_settled_run() noexcept;
  /// Every submit's end: collects the retirements every kDrainEvery submits.
  void count_submit() noexcept;
  /// Runs a task on this thread through `lane`'s leaf (LaneCore::run_here) as the task of no
  /// run: a submit from it is refused. Times it when a look asked for it (time_at_submit_).
  /// True when it failed (the run's error is set).
  /// `sub_fn`: the callable the submit's registry check found, or null (the lane looks it up).
  [[gnu::always_inline]] bool run_here(detail::LaneCore& lane, std::uint64_t digest,
                                       std::uint32_t index, const TaskArgsView& args,
                                       const CallConfig* config,
                                       const detail::SubFn* sub_fn = nullptr) noexcept;
  static constexpr std::uint64_t kBacklogPerLane = 16;
  static constexpr std::uint32_t kBacklogLookEvery = 32;
  /// A task run at submit in less than this costs the orchestration's thread about what handing
  /// it over does (a ready ring push, its slot's lines crossing to a lane and back, a lane's
  /// wake-up now and then): with such tasks the backlog does not end when it falls below the
  /// limit, only when the lanes have nothing left, so the lanes do not spin and sleep around
  /// every look while the orchestration runs tasks (bench_engine's a1 row).
  static constexpr std::chrono::nanoseconds kCheapAtSubmit = detail::LaneCore::kCheapTask;
  static constexpr std::uint32_t kCheapStayLooks = 8;
  std::uint32_t backlog_countdown_ = 1;
  bool backlogged_ = false;
  static constexpr std::uint64_t kCheapStreak = 2;
  static constexpr std::uint32_t kCostlyPauseLooks = 16;
  std::uint32_t costly_pause_ = 0;  ///< looks left before lanes_find_tasks_cheap listens again
  static constexpr std::uint32_t kAnyCallable = 0xffff'ffffU;
  /// Set when the backlog rule holds on an earlier run's samples alone: only tasks of this
  /// callable (registry index) run at submit until the next look.
  std::uint32_t carried_callable_ = kAnyCallable;
  bool cheap_at_submit_ = false;   ///< the last timed task run at submit was cheap
  bool time_at_submit_ = false;    ///< time the next task run at submit
  bool slow_sample_ = false;       ///< the last timed task was slow, the next one decides
  std::uint32_t submit_pick_ = 0;  ///< rotates any-worker tasks run at submit over the lanes
  /// Hands a ready task to the scheduler's pass: a single one through the ready ring, with its
  /// routing fields (the pass then need not read its slot); a group, a poisoned task, or any
  /// task when the ring is full, through the ready inbox.
  void hand_over_ready(detail::Slot& s) noexcept;
  /// Drains the retire inbox when the slot pool has no free slot left (before alloc grows it).
  void reclaim_before_growing() noexcept;
  void dispatch_published() noexcept;
  /// Drops the reference of the scope at depth `d` + 1 on each of its tasks that finished,
  /// succeeded and owns no heap bytes (a flat run stays bounded by the tasks in flight).
  void compact_frame(std::size_t d) noexcept;
  /// Drops the scope's reference on every task of `frame` and empties it.
  void release_frame(std::vector<TaskSlot>& frame) noexcept;
  /// Walking n tasks that may retire (at(k) is the k-th) at position i: prefetches what retiring
  /// the tasks a little further on touches (their slots, outputs and TensorMap entries), so the
  /// walk's cache misses overlap instead of following one another.
  template <class SlotAt>
  void prefetch_retiring(SlotAt&& at, std::size_t n, std::size_t i) const noexcept;
  /// compact_frame on every open scope, collecting what retires.
  void compact_open_frames() noexcept;
  /// Live tasks that have not finished, counted over the whole slot pool (for error messages:
  /// tasks of scopes that already ended are in no frame).
  [[nodiscard]] std::uint32_t count_unfinished() const noexcept;
  /// Blocks until the task window has room (WorkerOptions::task_window): wakes after a quarter
  /// of the window finished, or when the workers go idle. Throws UsageError when only ending a
  /// scope could make room, TimeoutError past heap_wait (or the run's deadline).
  void wait_for_window(const char* api);
  /// When a submit's wait for room ends: heap_wait from now, or the run's deadline if sooner
  /// (then `run_bound`).
  [[nodiscard]] std::chrono::steady_clock::time_point submit_wait_deadline(bool& run_bound) const;
  /// The scheduler is idle with nothing queued and no lane running a task: every published task
  /// has finished.
  [[nodiscard]] bool workers_idle() const noexcept;
  /// Takes in the answers to tasks this thread sent to driven lanes (LaneCore::drive).
  void collect_driven() noexcept;
  /// Whether a driven lane's child is stepping off a CPU now (LaneCore::DriveStep::Stepping).
  [[nodiscard]] bool driven_child_stepping() const noexcept;
  /// The fence runs what is posted to helped lanes and not taken yet (LaneCore::help), one lane
  /// at a time. True when it ran something.
  bool help_lanes() noexcept;
  void release_ref(detail::Slot& s) noexcept;
  void retire(detail::Slot& s) noexcept;
  /// A submit collects the retire inbox once per this many submits.
  static constexpr std::uint32_t kDrainEvery = 32;
  std::uint32_t submits_since_drain_ = 0;
  void drain_retired() noexcept;
  [[nodiscard]] int ring_for_depth() const noexcept {
    return depth_ - 1 < detail::kHeapRingCount - 1 ? (depth_ > 0 ? depth_ - 1 : 0)
                                                   : detail::kHeapRingCount - 1;
  }

  detail::EngineCore& core_;
  /// core_.sched_wake.asymmetric(), copied: read on every ready push, and the EventCount's line
  /// is the one the scheduler writes when it registers to sleep.
  const bool light_ready_push_;
  const detail::CallableRegistry& registry_;
  detail::TensorMap tmap_;
  Hazards hazards_ = Hazards::All;
  static constexpr std::size_t kTensorMapSweepMin = 4096;
  std::size_t tmap_sweep_at_ = kTensorMapSweepMin;  ///< sweep past this many writer-less made
  /// Tasks run settled (settled_at_submit) since the last sweep_settled: one comes once they
  /// outnumber the map's entries by this many.
  static constexpr std::size_t kSettledSweepMin = 256;
  std::size_t settled_since_sweep_ = 0;
  std::array<detail::HeapRing, detail::kHeapRingCount> heaps_;
  std::size_t heap_ring_size_;
  /// The lowest ring's base and the bytes from it to the highest ring's end (0: no rings).
  std::uintptr_t heap_lo_ = 0;
  std::uintptr_t heap_span_ = 0;
  std::array<std::vector<TaskSlot>, kMaxScopeDepth> frames_;
  /// A frame is compacted (its finished tasks give their slots back) when it reaches this size.
  static constexpr std::size_t kFrameCompactMin = 1024;
  /// How often a submit waiting for a quarter of the task window looks for any free slot, and
  /// one waiting for heap bytes looks for retirements it was not woken for.
  static constexpr std::chrono::milliseconds kWindowTick{10};
  std::array<std::size_t, kMaxScopeDepth> frame_compact_at_{};
  /// Per heap ring, its next allocation sequence when the outermost scope still open that uses
  /// it began: a live allocation at or past it can only come back when that scope ends.
  std::array<std::uint64_t, detail::kHeapRingCount> ring_scope_seq_{};
  int depth_ = 0;
  std::atomic<bool> in_run_{false};
  std::uint32_t lost_tasks_ = 0;  // see lost_tasks()
  /// The thread running the orchestration function (relaxed: written before in_run_'s release).
  std::atomic<std::thread::id> owner_{};
  /// The run's thread while it runs a task in its fence (help_lanes; owner_ is cleared then),
  /// else none: for throw_not_owner's message.
  std::atomic<std::thread::id> helping_{};
  /// Roles whose children see only shared mappings (index: Role), and those mappings, sorted and
  /// merged, as [begin, end) pairs.
  std::array<bool, 2> separate_{};
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> shared_ranges_;
  detail::SmallVec<TaskSlot, 16> scratch_producers_;
  detail::SmallVec<TaskSlot, 4> scratch_holds_;  ///< heap owners the current submit holds
  // Tracing and the dependency graph (detail/trace.hpp); off when trace_level_ == 0 and dag_ is
  // null. trace_reads_: the producers and overlapping bytes the current submit's reads found;
  // trace_orders_: the earlier readers and writers its writes are ordered after.
  void trace_reads(std::uint64_t space, std::uint64_t begin, std::uint64_t end, TaskSlot self);
  void trace_submitted(const detail::Slot& s, const detail::CallableRegistry::Entry& entry,
                       std::span<const TaskArgs> members);
  int trace_level_ = 0;
  detail::DagRecord* dag_ = nullptr;
  std::uint32_t trace_next_ = 0;
  std::vector<std::pair<TaskSlot, std::uint64_t>> trace_reads_;
  std::vector<TaskSlot> trace_orders_;
};

}  // namespace simpler

namespace simpler {

/// The Orchestrator of a Worker over the lane set `Lanes...` (WorkerThread<Transport, Leaf>
/// types): what an orchestration function run by such a Worker receives. `simpler::Orchestrator`
/// is the one of the default lane set.
///
/// Everything that depends on the lane set is known at compile time and kept here: which callable
/// kinds the lane set can run and whether any lane type reaches its child in another address
/// space. The submit path itself does not depend on the lane types (it validates worker ids and
/// capabilities against the lane table and pushes slot ids), so it lives in OrchestratorBase,
/// compiled once per program rather than once per lane set.
template <class... Lanes>
class BasicOrchestrator final : public OrchestratorBase {
 public:
  /// The callable kinds some lane type of the set runs (a kind_bit mask).
  static constexpr std::uint8_t kRuns =
      (std::uint8_t{0} | ... | leaf_kinds<typename Lanes::leaf_type>());
  /// True when some lane type's transport runs its child in another address space: then submits
  /// check that tensors lie in memory that child can see.
  static constexpr bool kSeparateAddressSpace =
      (false || ... || SeparateAddressSpace<typename Lanes::transport_type>);

  using OrchestratorBase::OrchestratorBase;
};

}  // namespace simpler

#include "simpler/detail/orchestrator.ipp"
