// The simulated device runtime: internal types shared by its translation units.
//
// One Context per simpler_device_context. A Context owns persistent threads: AICPU threads (the
// orchestrator and up to three schedulers) and AICore threads (per cluster one AIC and two AIV
// cores). Between runs every thread sleeps on a futex; a launch wakes those the run uses by
// storing a new launch word. Nothing here is global: two contexts in one process share no state
// (the fault handler is process-wide but only routes a signal to the thread that raised it).
//
// The tensormap_and_ringbuffer runtime ("TRB") lives in three kinds of memory:
//  - the runtime arena (arena.cpp): ring control blocks, ready queues, the TensorMap, the
//    dependency-list pools and the scope stack. Laid out and initialised once on the host for a
//    sizing, uploaded with one copy, and at every boot only re-wired and reset (O(1) in the
//    window size);
//  - task memory: per ring a window of SlotState (hot, 64 B) and Payload (cold) records,
//    initialised when a slot is allocated, never in bulk;
//  - heap rings: per ring the bytes runtime-allocated outputs live in.
//
// Files: abi.cpp (the C ABI), context.cpp (lifecycle, device memory, callables, the phases of a
// run), arena.cpp (the runtime arena), scheduler.cpp (the device threads: orchestrator loop,
// schedulers, cores, fault handler), orchestrator.cpp (submit, scopes, alloc/read tensor),
// rings.cpp/.hpp (a task slot's life on its ring) and tensor_map.cpp/.hpp (the TensorMap).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "simpler/detail/event_count.hpp"
#include "simpler/device/device_abi.h"
#include "simpler/device/task_abi.h"
#include "trace.hpp"

namespace simpler::sim {

using Clock = std::chrono::steady_clock;

inline constexpr int kRings = 4;
inline constexpr int kMaxScopeDepth = 64;
inline constexpr int kMaxFanin = 64;
inline constexpr int kMaxCallables = 64;
inline constexpr int kMaxClusters = 16;
inline constexpr int kMaxAicpuThreads = 4;
inline constexpr std::uint64_t kDefaultWindow = 4096;
inline constexpr std::uint64_t kDefaultHeap = std::uint64_t{64} << 20;
inline constexpr std::uint64_t kHeapAlign = 1024;
/// The largest ring heap and dependency-list pool a run config may ask for. prepare_run refuses
/// more, so the arena's size arithmetic (entries x entry size, rounded up, summed over the rings)
/// cannot overflow.
inline constexpr std::uint64_t kMaxRingHeap = std::uint64_t{1} << 40;
inline constexpr std::uint64_t kMaxDepPool = std::uint64_t{1} << 24;
/// Retirements an orchestrator blocked on a full ring waits for before it is woken.
inline constexpr std::uint64_t kWakeBatch = 64;
/// How long the host spins (yielding often) in wait_run before it sleeps. A short run ends
/// within it, so its end costs no wake-up (10-60 us on these VMs); a long run costs the host this
/// much CPU once, while the device threads it yields to do the work.
inline constexpr std::chrono::microseconds kHostWaitSpin{200};
/// How long a scheduler spins (yielding often) before it sleeps: while a core of its own runs a
/// kernel, and while none does.
inline constexpr std::chrono::microseconds kSchedulerBusySpin{100};
inline constexpr std::chrono::microseconds kSchedulerIdleSpin{20};
/// How long an AICPU thread that finished its part of a run spins for the next launch before it
/// sleeps, when the run it finished was launched within this long of its previous part (runs
/// back to back, as a lane running chip tasks makes them). A launch then costs no wake-up
/// (10-60 us each on these VMs, and a run wakes every AICPU thread). After a pause it sleeps at
/// once, so sporadic runs cost no spinning.
inline constexpr std::chrono::microseconds kLaunchSpin{50};
/// After a run failed, how much longer than the watchdog period a kernel may take to return
/// before the context is declared broken.
inline constexpr std::chrono::seconds kStuckGrace{5};

enum class Shape : std::uint8_t { Aic = 0, Aiv = 1, Mix = 2 };
inline constexpr int kShapes = 3;

[[nodiscard]] inline std::uint64_t make_task_id(std::uint32_t ring, std::uint64_t local) noexcept {
  return (std::uint64_t{ring} << 32) | (local & 0xffffffffULL);
}
[[nodiscard]] inline std::uint32_t ring_of(std::uint64_t id) noexcept {
  return static_cast<std::uint32_t>(id >> 32);
}
[[nodiscard]] inline std::uint32_t local_of(std::uint64_t id) noexcept {
  return static_cast<std::uint32_t>(id);
}

/// The per-ring sizes of one runtime arena (what a run's config resolves to).
struct Sizing {
  std::uint64_t window[kRings];
  std::uint64_t heap[kRings];
  std::uint64_t dep_pool[kRings];
  std::uint64_t tensormap_entries;
  std::uint64_t tensormap_buckets;
  bool operator==(const Sizing&) const = default;
};

/// The byte size of `t`, or false when its ndims or dtype is invalid or the size exceeds
/// SIMPLER_MAX_TENSOR_BYTES (so offset + size checks on a valid tensor cannot overflow).
[[nodiscard]] inline bool tensor_bytes(const simpler_chip_tensor& t, std::uint64_t& out) noexcept {
  return simpler_tensor_nbytes_checked(&t, &out) != 0;
}

/// True when [begin, begin + n) fits below 2^64 (n bytes from begin do not wrap).
[[nodiscard]] inline bool fits(std::uint64_t begin, std::uint64_t n) noexcept {
  return begin <= ~std::uint64_t{0} - n;
}

/// True when the view `t` of `bytes` bytes (offset + bytes from addr) does not wrap past 2^64.
[[nodiscard]] inline bool view_fits(const simpler_chip_tensor& t, std::uint64_t bytes) noexcept {
  return fits(t.offset, bytes) && fits(t.addr, t.offset + bytes);
}

/// "[a, b, c] of dtype d" for a message about a tensor's size (at most 5 extents are read).
std::string shape_text(const std::uint32_t* shapes, std::uint32_t ndims, std::uint8_t dtype);

// ---- task memory ----------------------------------------------------------------------------

enum SlotStateValue : std::uint32_t { kSlotPending = 0, kSlotCompleted = 1, kSlotConsumed = 2 };

/// The hot record of a task. `lock` guards `state`'s transitions, `fanout_head` and the
/// claim of new references; `refs` counts the holders that keep the slot from being consumed:
/// the enclosing scope, the task's own completion, and one per consumer that read it.
struct alignas(64) SlotState {
  std::atomic<std::uint32_t> lock{0};
  std::atomic<std::uint32_t> state{kSlotConsumed};
  std::uint64_t task_id = SIMPLER_INVALID_TASK_ID;
  std::atomic<std::int32_t> fanin_remaining{0};
  std::atomic<std::int32_t> refs{0};
  std::uint64_t fanout_head = 0;  ///< dependency-list link (0 = empty); guarded by lock
  std::atomic<std::int32_t> lanes_left{0};
  std::atomic<std::uint8_t> scope_open{0};
  std::uint8_t shape = 0;
  std::uint8_t lane_mask = 0;  ///< bit 0 AIC, bit 1 AIV0, bit 2 AIV1
  std::uint64_t heap_begin = 0;
  std::uint64_t heap_end = 0;
  std::uint64_t dep_pool_mark = 0;
};

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

/// The cold record of a task: what its kernels receive, and the producers it holds.
struct Payload {
  std::int32_t tensor_count = 0;
  std::int32_t scalar_count = 0;
  std::int32_t fanin_count = 0;
  std::int32_t kernels[3] = {-1, -1, -1};
  /// SPMD: the blocks the task runs as (>= 1), and the next block to dispatch. The task sits in
  /// its ready queue at most once; the scheduler that popped it claims `next_block` and pushes
  /// it back while blocks remain, so the queue's release/acquire orders every claim.
  std::int32_t block_num = 1;
  std::int32_t next_block = 0;
  std::int8_t tags[SIMPLER_MAX_TASK_TENSORS] = {};  ///< filled only when tensors are dumped
  std::uint64_t fanin[kMaxFanin];
  simpler_chip_tensor tensors[SIMPLER_MAX_TASK_TENSORS];
  std::uint64_t scalars[SIMPLER_MAX_TASK_SCALARS];
};

// ---- arena components ------------------------------------------------------------------------

/// A bounded MPMC queue of task ids (Vyukov): one sequence number per cell, no locks.
struct QueueCell {
  std::atomic<std::uint64_t> seq;
  std::uint64_t item;
};
struct alignas(64) ReadyQueue {
  alignas(64) std::atomic<std::uint64_t> enqueue_pos{0};
  alignas(64) std::atomic<std::uint64_t> dequeue_pos{0};
  alignas(64) std::uint64_t mask = 0;
  QueueCell* cells = nullptr;  ///< wired

  bool push(std::uint64_t item) noexcept;
  bool pop(std::uint64_t& item) noexcept;
  [[nodiscard]] bool empty() const noexcept {
    return dequeue_pos.load(std::memory_order_seq_cst) >=
           enqueue_pos.load(std::memory_order_seq_cst);
  }
};

/// A dependency-list node: "consumer waits on the producer whose list holds this node".
struct DepEntry {
  std::uint64_t consumer;
  std::uint64_t next;  ///< link: ring << 56 | (linear index + 1); 0 = end
};

/// The link to entry `linear` of `ring`'s dependency-list pool (never 0).
[[nodiscard]] inline std::uint64_t dep_link(std::uint32_t ring, std::uint64_t linear) noexcept {
  return (std::uint64_t{ring} << 56) | (linear + 1);
}
[[nodiscard]] inline std::uint32_t dep_link_ring(std::uint64_t link) noexcept {
  return static_cast<std::uint32_t>(link >> 56);
}
[[nodiscard]] inline std::uint64_t dep_link_linear(std::uint64_t link) noexcept {
  return (link & ((std::uint64_t{1} << 56) - 1)) - 1;
}

/// Per ring: the task window's counters, the heap bump pointer and the dependency-list pool.
struct alignas(64) RingControl {
  alignas(64) std::atomic<std::uint64_t> current{0};     ///< next local id (orchestrator)
  alignas(64) std::atomic<std::uint64_t> last_alive{0};  ///< oldest unretired local id
  std::atomic<std::uint32_t> advance_lock{0};
  std::atomic<std::uint32_t> advance_pending{0};
  alignas(64) std::uint64_t heap_top = 0;  ///< orchestrator-private
  std::uint64_t dep_top = 0;               ///< orchestrator-private
  std::atomic<std::uint64_t> dep_tail{0};  ///< advanced on retirement
  std::uint64_t window = 0, mask = 0, heap_size = 0, dep_capacity = 0;
  SlotState* slots = nullptr;  ///< task memory (wired)
  Payload* payloads = nullptr;
  std::byte* heap = nullptr;
  DepEntry* deps = nullptr;  ///< arena (wired)
};

/// What a TensorMap entry records a task doing to its bytes.
enum TmKind : std::uint32_t { kTmWrite = 0, kTmRead = 1 };

/// One TensorMap entry: "task `task` writes (or reads) bytes [begin, end) of the buffer at
/// `addr`". Read entries exist only with all hazards on: later writers of the bytes wait for them.
struct TmEntry {
  std::uint64_t addr;
  std::uint64_t begin, end;
  std::uint64_t task;
  std::uint32_t bucket_next, bucket_prev;  ///< index + 1; 0 = none
  std::uint32_t fifo_next;                 ///< index + 1; per-ring insertion order
  std::uint32_t bucket;
  std::uint32_t linked;  ///< 1 while in a bucket chain
  std::uint32_t kind;    ///< TmKind
};
struct TmBucket {
  std::uint32_t epoch;
  std::uint32_t head;  ///< index + 1
};
struct TensorMap {
  std::uint32_t epoch = 1;
  std::uint32_t bucket_mask = 0;
  std::uint32_t capacity = 0;
  std::uint32_t bump = 0;       ///< entries handed out so far by the bump allocator
  std::uint32_t free_head = 0;  ///< index + 1
  std::uint32_t live = 0;
  std::uint32_t fifo_head[kRings] = {};
  std::uint32_t fifo_tail[kRings] = {};
  TmBucket* buckets = nullptr;  ///< wired
  TmEntry* entries = nullptr;   ///< wired
};

/// The scope stack: the ids of the tasks each open scope holds.
struct ScopeStack {
  std::uint32_t depth = 0;
  std::uint64_t capacity = 0;
  std::uint64_t top = 0;
  std::uint64_t begin[kMaxScopeDepth] = {};
  std::uint64_t* tasks = nullptr;  ///< wired
};

/// Where each component lives in the arena (byte offsets from its base).
struct ArenaLayout {
  std::size_t off_header = 0;
  std::size_t off_queue_cells[kShapes] = {};
  std::size_t off_deps[kRings] = {};
  std::size_t off_tm_buckets = 0;
  std::size_t off_tm_entries = 0;
  std::size_t off_scope_tasks = 0;
  std::size_t size = 0;
};

/// The arena header: everything a boot resets lives here.
struct ArenaHeader {
  std::uint64_t magic = 0;
  Sizing sizing{};
  ArenaLayout layout{};
  RingControl rings[kRings];
  ReadyQueue queues[kShapes];
  TensorMap tmap;
  ScopeStack scopes;
};

/// True when task `id` retired: its ring's oldest live task is younger.
[[nodiscard]] inline bool retired(const ArenaHeader& h, std::uint64_t id) noexcept {
  return local_of(id) < h.rings[ring_of(id)].last_alive.load(std::memory_order_seq_cst);
}

ArenaLayout reserve_layout(const Sizing& s);
/// Writes every data field of a fresh arena image at `base` (zeroes, queue sequence ramps).
void init_arena_data(std::byte* base, const ArenaLayout& layout, const Sizing& s);
/// Points every arena-internal pointer at `base` + its offset. Idempotent.
void wire_arena_pointers(std::byte* base);

// ---- resource waits ---------------------------------------------------------------------------

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

// ---- cores --------------------------------------------------------------------------------------

inline constexpr std::uint32_t kRegIdle = 0x7ffffffdU;  ///< DMB: window open, no task
inline constexpr std::uint32_t kRegExit = 0x7ffffff0U;  ///< DMB: leave the run loop
inline constexpr std::uint32_t kCondFin = 0x80000000U;

/// One AICore's handshake registers and dispatch payload. Its dispatcher (the owning scheduler, or
/// the orchestrator for a task ready at submit) writes args and then the DMB token (release); the
/// core answers through COND (release) and wakes the scheduler.
///
/// When the run lets cores run on (RunSetup::cores_run_on), a core that finished a kernel retires
/// the task itself, and while a task of its shape is ready it takes one and runs it without going
/// back to the scheduler: it rewrites its own args, `running`, `func_id` and `started`, which the
/// scheduler then only reads (for its stall report). When nothing it can run is left it sets
/// `running` back to INVALID itself, then answers FIN; the scheduler sees it busy until then.
struct alignas(64) Core {
  std::atomic<std::uint32_t> dmb{0};
  std::atomic<std::uint32_t> cond{0};
  detail::EventCount wake;
  std::int64_t args[SIMPLER_KERNEL_ARGS] = {};
  simpler_local_context local{};
  simpler_global_context global{};
  simpler_kernel_fn fn = nullptr;
  // Written by the core for the scheduler to read after FIN.
  std::int32_t fault_signal = 0;
  std::uint64_t fault_addr = 0;
  // The task on the core (INVALID when idle), its kernel and when it started. A dispatcher (the
  // owning scheduler, or the orchestrator: dispatch_direct) takes an idle core with a CAS of
  // `running` from INVALID (acquire), and so owns the core's args, token and seq until it is idle
  // again; in between only the core writes these (running on). It goes idle by a release store
  // of INVALID: by the core itself when running on, else by its scheduler after FIN. The other
  // values are diagnostics (the stall report reads them meanwhile).
  std::atomic<std::uint64_t> running{SIMPLER_INVALID_TASK_ID};
  std::atomic<std::int32_t> func_id{-1};
  std::atomic<Clock::rep> started{0};
  // Owning scheduler's private view.
  std::uint32_t token = 0;
  std::uint32_t seq = 0;
  int scheduler = -1;
  std::thread thread;
};

// ---- callables ------------------------------------------------------------------------------

struct Callable {
  bool registered = false;
  std::string orch_path;
  void* orch_handle = nullptr;
  simpler_orch_entry_fn entry = nullptr;
  std::int32_t expected_args = 0;
  std::vector<simpler_kernel_fn> kernels;  ///< by func_id; nullptr = none
  std::vector<std::string> kernel_names;   ///< by func_id, for traces and the DAG ("" = none)
  std::vector<void*> kernel_handles;
};

// ---- the context ---------------------------------------------------------------------------
//
// The Context's state is split by the thread that writes it. "The host" is the thread driving
// the context through the C API (one at a time); "the device threads" are the orchestrator, the
// schedulers and the cores. Parts written by different threads per task live on cache lines of
// their own (alignas(64) below); the read-mostly parts the device threads read per task (config,
// run, threads, arena) are written only while the device threads sleep.

enum class Phase { Idle, Prepared, Running, Finished };

class Context;
class RunFiles;  // run_files.hpp: tensor dumps and counters of a run (dump.cpp, pmu.cpp)

/// The runtime handle an orchestration receives; `ops` must stay the first member.
struct OrchRuntime {
  simpler_orch_runtime base;
  Context* ctx;
};

/// An EventCount on a cache line of its own: the thread that sleeps on it writes its waiter
/// count, so it must not share a line with another thread's.
struct alignas(64) OwnLineEventCount : detail::EventCount {};

/// Context-wide settings. Written by the host in init() before the device threads start;
/// read-only afterwards.
struct Config {
  std::int32_t device_id = -1;
  std::uint32_t num_clusters = 2;
  std::int32_t default_aicpu_threads = 3;
  std::chrono::milliseconds scheduler_timeout{10'000};
  std::chrono::milliseconds resource_wait{2'000};
  std::chrono::milliseconds tensor_wait{15'000};
  /// SIMPLER_HAZARDS_ALL: a writer also waits for the earlier readers and writer of its bytes
  /// (order-only edges); else only readers wait, for the earlier writer.
  bool all_hazards = true;
};

/// Where the context is in its life, and what is registered on it. Written by the host only;
/// the device threads read `callables[run.callable]` during a run (registration needs Idle).
struct Lifecycle {
  bool initialised = false;
  bool finalised = false;
  Phase phase = Phase::Idle;
  /// wait_run returned on the run's last completion while device threads were still leaving
  /// it (Context::drain). The next call that touches run state waits for them first.
  bool draining = false;
  Callable callables[kMaxCallables];
  std::string last_error;  ///< the message of the last failing C API call
};

/// Device memory: 1024-aligned blocks from device_malloc. Written by the host; `mu` lets stats()
/// read `committed` from a const context.
struct DeviceMemory {
  mutable std::mutex mu;
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::size_t committed = 0;
};

/// The runtime arena of one sizing: its host image, the device copy, task memory and heaps.
/// Written by the host (ensure_arena, boot) while the device threads sleep; the device threads
/// read `base` per task (through Context::header()).
struct ArenaState {
  bool built = false;
  Sizing sizing{};
  std::vector<std::byte> host_image;
  std::byte* base = nullptr;
  std::size_t size = 0;
  void* task_memory = nullptr;
  std::size_t task_memory_size = 0;
  void* heap_memory = nullptr;
  std::size_t heap_memory_size = 0;
  bool dirty = false;  ///< a failed run left work in the queues
};

/// What simpler_get_stats reports. Written by the host only.
struct Counters {
  std::uint64_t orch_loads = 0, kernel_loads = 0, arena_builds = 0, arena_uploads = 0;
  std::uint64_t boots = 0, runs = 0, tasks_completed = 0, last_boot_ns = 0, early_returns = 0;
  std::uint64_t direct_dispatches = 0;
};

/// What the current run executes. Written by the host in prepare_run/launch_run (the device
/// threads sleep); read-only for the device threads during the run.
struct RunSetup {
  std::int32_t callable = -1;
  int threads = 3;  ///< AICPU threads of this run (1 orchestrator + threads - 1 schedulers)
  std::vector<simpler_chip_tensor> tensors;
  std::vector<std::uint64_t> scalars;
  OrchRuntime orch_rt{};       ///< set once by init()
  std::uint32_t clusters = 0;  ///< clusters the run may use (block_dim; 0 in the config = all)
  bool dump_tensor = false;    ///< dump each task's tensors (run_files.hpp, dump.cpp)
  std::int32_t pmu = 0;        ///< counter set (run_files.hpp, pmu.cpp); 0 = off
  /// A core that finished a kernel retires its task and runs the next ready task of its shape
  /// itself (Core). Off while traces, dumps or counters are on: those record per scheduler.
  bool cores_run_on = false;
};

/// How runs end. Any device thread latches the run's first failure into `status` and `message`;
/// each device thread counts itself into `threads_done` when its part of the run is over; the host
/// waits on `done_event`, reads the outcome, and resets it at the next launch. `broken` is set
/// (under `mu`) by a scheduler's watchdog or by the host's wait_run, and never cleared.
struct Outcome {
  /// Read by every device thread per task (Context::fatal()), written once per failed run: on
  /// a line of its own so that the writes below do not evict it.
  alignas(64) std::atomic<int> status{0};
  alignas(64) std::mutex mu;
  std::string message;              ///< guarded by mu
  std::atomic<bool> broken{false};  ///< a device thread is stuck in user code
  bool orch_stuck = false;          ///< ... and it is the orchestrator (host only)
  std::string broken_reason;        ///< guarded by mu
  std::atomic<std::uint32_t> threads_done{0};
  detail::EventCount done_event;  ///< the host waits on it (wait_run)
};

/// The orchestrator thread's shared state (reset by the host at launch).
struct OrchState {
  /// Tasks submitted (and allocs made) this run: written per submit, read by the schedulers only
  /// once `done` is set and by the watchdog.
  alignas(64) std::atomic<std::uint64_t> submitted{0};
  /// Tasks of this run the orchestrator dispatched itself (dispatch_direct); its line, its
  /// writes. Read by the host after the run.
  std::atomic<std::uint64_t> direct{0};
  /// Written once per run and when the orchestrator waits; read by the schedulers per task.
  alignas(64) std::atomic<std::uint32_t> done{0};  ///< the orchestration returned
  /// Wake-up filters for progress_event, so the orchestrator is not woken once per task while
  /// it waits for a window to drain: a ring advance notifies only once last_alive reaches
  /// wants_alive[ring] (0: every advance), a completion only while wants_completion.
  /// Both are stored (seq_cst) before the orchestrator checks its condition and read (seq_cst)
  /// after the notifier published its change, so a wake-up cannot be lost.
  std::atomic<std::uint64_t> wants_alive[kRings] = {};
  std::atomic<std::uint32_t> wants_completion{0};
  detail::EventCount progress_event;  ///< the orchestrator waits on it for resources
};

/// The schedulers' shared state (counters reset by the host at launch). Each counter is written
/// per task by several threads, so each has a cache line of its own.
struct SchedState {
  /// Tasks completed this run: by a scheduler per completion, by the orchestrator per alloc.
  alignas(64) std::atomic<std::uint64_t> completed{0};
  /// Cores running a kernel: by the owning scheduler per dispatch and per finish.
  alignas(64) std::atomic<int> cores_busy{0};
  /// Bumped on every completion, dispatch (schedulers) and submit (orchestrator); the watchdog
  /// reads it.
  alignas(64) std::atomic<std::uint64_t> progress{0};
  /// Scheduler s sleeps on wake[s]; the orchestrator (ready tasks), the cores (FIN) and the other
  /// schedulers notify it.
  OwnLineEventCount wake[kMaxAicpuThreads - 1];
};

/// The device threads and the AICore cores. Started by the host in init() and stopped in
/// finalize(); the host stores a new `launch_word` to launch a run. The cores' own handshake
/// state is in Core.
struct Threads {
  std::unique_ptr<Core[]> cores;  ///< [0, C) AIC, [C, 3C) AIV pairs
  std::uint32_t core_count = 0;
  std::thread orch_thread;
  std::thread sched_threads[kMaxAicpuThreads - 1];
  /// The launch word: the run count above kLaunchThreadBits, the run's AICPU threads (the
  /// orchestrator and its schedulers, run.threads) below. One word, so that a thread that sees a
  /// launch also sees whether it takes part: a scheduler the run does not use sleeps through it
  /// (it is neither woken nor waited for).
  std::atomic<std::uint64_t> launch_word{0};
  std::atomic<std::uint32_t> stopping{0};
  /// When the host launched the current run (trace_now_ns); written before the `launch_word`
  /// store that publishes it, read by the AICPU threads for their launch spin (kLaunchSpin).
  std::atomic<std::uint64_t> launched_ns{0};
  /// The orchestrator thread sleeps on it between runs; scheduler s on sched.wake[s], which a
  /// launch notifies only when the run uses s.
  detail::EventCount launch_event;
};

inline constexpr std::uint32_t kLaunchThreadBits = 3;
static_assert(kMaxAicpuThreads < (1 << kLaunchThreadBits));
[[nodiscard]] constexpr std::uint64_t launch_count(std::uint64_t word) noexcept {
  return word >> kLaunchThreadBits;
}
[[nodiscard]] constexpr int launch_threads(std::uint64_t word) noexcept {
  return static_cast<int>(word & ((1U << kLaunchThreadBits) - 1));
}

/// An AICPU thread's launch pacing: when it ended its part of the last run, and whether it
/// spins for the next launch (see kLaunchSpin).
struct LaunchPacing {
  std::uint64_t ended_ns = 0;  ///< trace_now_ns() then; 0: no run yet
  bool spin = false;
};

class Context {
 public:
  Context();
  ~Context();

  // C API, each returns a status and sets life.last_error on failure.
  int init(std::int32_t device_id, const simpler_init_options* opts);
  int finalize();
  void* device_malloc(std::size_t bytes);
  int device_free(void* p);
  int register_callable(std::int32_t id, const simpler_chip_callable_desc* desc);
  int unregister_callable(std::int32_t id);
  int prepare_run(std::int32_t id, const simpler_task_args* args, const simpler_run_config* cfg);
  int launch_run();
  int wait_run();
  int finalize_run();
  void stats(simpler_context_stats* out) const;
  /// Host: waits until every device thread left the last run, when wait_run returned before
  /// they did. Every call that changes what the device threads read (the arena, the run setup,
  /// the callables) or stops them calls it first.
  void drain();

  int fail(int status, std::string message);  ///< records life.last_error, returns status

  // ---- run state, shared by the device threads (context.cpp) -------------------------------
  /// Latches the run's first error (later ones are dropped). Wakes every waiter.
  void latch(int status, std::string message);
  [[nodiscard]] bool fatal() const noexcept {
    return outcome.status.load(std::memory_order_seq_cst) != 0;
  }
  /// Wakes the schedulers of the current run (device threads, during it). The others sleep
  /// through runs that do not use them.
  void notify_schedulers() noexcept {
    for (int s = 0; s < run.threads - 1; ++s) sched.wake[s].notify_all();
  }
  void notify_progress() noexcept { orch.progress_event.notify_all(); }

  // Orchestrator side (orchestrator.cpp; ring allocation in rings.cpp, the TensorMap in
  // tensor_map.cpp)
  std::uint64_t submit(simpler_mixed_kernels k, const simpler_task_builder* b,
                       simpler_chip_tensor* outputs);
  void scope_begin();
  void scope_end();
  void end_scope(bool by_runtime);
  int alloc_tensor(const std::uint32_t* shapes, std::uint32_t ndims, std::uint8_t dtype,
                   simpler_chip_tensor* out);
  int read_tensor(const simpler_chip_tensor* t, std::uint64_t off, void* dst, std::uint64_t n);
  /// The tasks the innermost open scope holds on `ring` (rings.cpp).
  std::uint64_t scope_tasks_on_ring(std::uint32_t ring) const noexcept;

  // Scheduler side (scheduler.cpp)
  void scheduler_main(int index);
  void run_scheduler(int index);
  void dispatch_lane(Core& c, std::uint64_t id, std::int32_t func_id, std::int32_t block_idx = 0);
  /// Takes idle core `c` for task `id` (running: INVALID -> id); false when it is not idle.
  bool claim_core(Core& c, std::uint64_t id) noexcept;
  /// Orchestrator: dispatches ready task `id` to an idle core itself, skipping the ready queue
  /// and the scheduler's hand-off; false when it cannot (see the definition).
  bool dispatch_direct(std::uint64_t id);
  /// Completes the task of a core that reported FIN; sets `pushed` when consumers became ready.
  void finish_core(Core& c, bool& pushed);
  /// Reports a failed kernel of `c` (task `id`) and completes the task once its last lane is
  /// done; sets `pushed` when consumers became ready (they are queued, nobody is woken).
  void retire_lane(Core& c, std::uint64_t id, bool& pushed);
  /// On core `c`'s own thread, running on: takes the next ready task of the core's shape and
  /// sets the core up to run it. False when none is ready (or the run failed).
  bool take_next(Core& c, bool& pushed);
  /// Points core `c` at block `block_idx` of task `id` with kernel `func_id`: its arguments, its
  /// local context and its running state (dispatch_lane, and take_next when running on).
  void load_task(Core& c, std::uint64_t id, std::int32_t func_id, std::int32_t block_idx);
  std::string stall_report(const std::vector<std::uint32_t>& owned, Clock::time_point now);
  void core_main(int index);
  void orchestrator_main();
  /// Waits on `event` for the next launch that uses the AICPU thread `aicpu` (0 the
  /// orchestrator, 1 + s scheduler s) (true), or until the context stops (false): spins first
  /// when the runs come back to back (`pace`, see kLaunchSpin), else sleeps at once. `seen` is
  /// the launch count of the last run the thread took part in.
  bool wait_for_launch(detail::EventCount& event, int aicpu, std::uint64_t& seen,
                       LaunchPacing& pace);
  int start_threads();
  void stop_threads() noexcept;

  // Diagnostic files of a run (dump.cpp, pmu.cpp), called only when the run turned them on.
  /// Host, in prepare_run: checks the run config's diagnostics and creates the run's output
  /// directory; fails (naming the path and errno) when a file cannot be created there.
  int prepare_diagnostics(const simpler_run_config* cfg);
  /// Host, in finalize_run: writes tensors/index.json and pmu.json. Never fails the run: a
  /// write error is printed to stderr.
  void finish_diagnostics() noexcept;
  /// A scheduler: task `id`'s tensors before its first dispatch (`after` false) or after its
  /// last block finished (`after` true).
  void dump_task(std::uint64_t id, bool after) noexcept;
  /// A core thread, around one kernel call: opaque start sample, then the accounting.
  struct PmuSample {
    std::uint64_t wall_ns, cpu_ns, cycles, instructions;
    bool hw;
  };
  void pmu_start(int core, PmuSample& s) noexcept;
  void pmu_stop(int core, std::int32_t func_id, const PmuSample& s) noexcept;

  // Task lifecycle, shared by the orchestrator and the schedulers (rings.cpp)
  /// True when `id` names a task (or alloc) this run created: a ring that exists and a local id
  /// below the ring's counter. Anything else (a forged or stale owner_task) must not be looked up.
  [[nodiscard]] bool created_in_run(std::uint64_t id) const noexcept {
    const std::uint32_t ring = ring_of(id);
    return ring < static_cast<std::uint32_t>(kRings) &&
           local_of(id) < header().rings[ring].current.load(std::memory_order_relaxed);
  }
  SlotState& slot_of(std::uint64_t id) noexcept {
    RingControl& rc = header().rings[ring_of(id)];
    return rc.slots[local_of(id) & rc.mask];
  }
  Payload& payload_of(std::uint64_t id) noexcept {
    RingControl& rc = header().rings[ring_of(id)];
    return rc.payloads[local_of(id) & rc.mask];
  }
  void release_ref(std::uint64_t id) noexcept;  ///< drop one reference; consume at zero
  /// COMPLETED, ready consumers, release fanin. With `pushed`, readied consumers are queued
  /// without waking the schedulers (the caller, a scheduler, dispatches or notifies after).
  void complete_task(std::uint64_t id, bool* pushed = nullptr) noexcept;
  void advance_ring(std::uint32_t ring) noexcept;
  void push_ready(std::uint64_t id, bool* pushed = nullptr) noexcept;

  // Runtime arena (arena.cpp)
  int ensure_arena(const Sizing& s);
  void release_arena() noexcept;
  void boot();
  [[nodiscard]] ArenaHeader& header() const noexcept {
    return *reinterpret_cast<ArenaHeader*>(arena.base);
  }

  // ---- state, by the thread that writes it (see above) --------------------------------------
  // Host-written; read-mostly for the device threads.
  Config config;
  Lifecycle life;
  DeviceMemory memory;
  ArenaState arena;
  Counters counters;
  RunSetup run;
  Diag diag;  ///< traces and the DAG (trace.hpp says who writes what)
  Threads threads;
  // Written by the device threads during a run.
  Outcome outcome;
  OrchState orch;
  SchedState sched;
  /// Dump and counter state; created at the first run that asks for either.
  std::unique_ptr<RunFiles> run_files;
};

/// While alive, every completion wakes the orchestrator (orch.progress_event; see
/// OrchState::wants_completion): for its waits that end when some task completes. Orchestrator
/// thread only; not nested.
class WantsCompletion {
 public:
  explicit WantsCompletion(Context& ctx) noexcept : flag_(ctx.orch.wants_completion) {
    flag_.store(1, std::memory_order_seq_cst);
  }
  WantsCompletion(const WantsCompletion&) = delete;
  WantsCompletion& operator=(const WantsCompletion&) = delete;
  ~WantsCompletion() { flag_.store(0, std::memory_order_seq_cst); }

 private:
  std::atomic<std::uint32_t>& flag_;
};

/// The function table every orchestration receives.
const simpler_orch_ops* orch_ops() noexcept;

/// Installs the process-wide fault handler once (SIGSEGV, SIGBUS, SIGFPE, SIGILL).
void install_fault_handler();

const char* status_name(int status) noexcept;
const char* status_meaning(int status) noexcept;

}  // namespace simpler::sim
