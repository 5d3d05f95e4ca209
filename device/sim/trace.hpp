// Chip diagnostics of the simulated runtime: the swimlane trace (simpler_run_config.swimlane)
// and the dependency graph (dep_gen) of a run. docs/device.md describes what they record and the
// files they write.
//
// Threads. Every recording thread (the orchestrator, each scheduler, each AICore core) owns one
// TraceBuffer and is the only one writing it during a run; the host allocates the buffers in
// prepare_run, resets them in launch_run (the device threads sleep), and reads them in
// finalize_run after every device thread counted itself done (seq_cst threads_done), so no
// event needs a lock or an atomic. The DAG is written by the orchestrator thread only. With
// tracing off, each hook costs one predictable branch on a field the host wrote before launch.
#pragma once

#include <time.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "simpler/device/device_abi.h"
#include "simpler/device/task_abi.h"

namespace simpler::sim {

class Context;
struct Core;

/// CLOCK_MONOTONIC in nanoseconds: the clock of every trace event (the host's trace uses it too).
[[nodiscard]] inline std::uint64_t trace_now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

/// One thread's events of a run: a fixed array filled front to back; once full, later events are
/// counted in `dropped` and lost. Written only by its thread during a run (see above).
struct alignas(64) TraceBuffer {
  std::unique_ptr<simpler_trace_event[]> events;
  std::uint32_t capacity = 0;
  std::uint32_t count = 0;
  std::uint64_t dropped = 0;

  void push(std::uint64_t begin, std::uint64_t end, std::uint64_t task, std::int64_t flow_from,
            std::uint32_t kind, std::int32_t func_id, std::int32_t block_idx = 0) noexcept {
    if (count == capacity) {
      ++dropped;
      return;
    }
    simpler_trace_event& e = events[count++];
    e.begin_ns = begin;
    e.end_ns = end;
    e.task_id = task == SIMPLER_INVALID_TASK_ID ? -1 : static_cast<std::int64_t>(task);
    e.flow_from = flow_from;
    e.track = 0;  // set when the run's buffers are merged
    e.kind = kind;
    e.func_id = func_id;
    e.block_idx = block_idx;
  }
};

/// Scheduler internals recorded at swimlane >= 3 (a SIMPLER_TRACE_SCHEDULER event's func_id).
enum SchedulerOp : std::int32_t { kSchedIdleWait = 0, kSchedQueuePop = 1 };

/// One tensor of a DAG node, as the task was submitted.
struct DagTensor {
  std::uint64_t addr;
  std::uint64_t offset;
  std::uint64_t bytes;
  std::uint32_t shapes[5];
  std::uint8_t ndims;
  std::uint8_t dtype;
  std::uint8_t tag;
};

/// A submitted task: its kernels per lane (AIC, AIV0, AIV1; -1 unused) and its tensors
/// (tensors[first_tensor, first_tensor + tensor_count)).
struct DagNode {
  std::uint64_t task;
  std::int32_t kernels[3];
  std::uint32_t first_tensor;
  std::uint32_t tensor_count;
};

/// Why an edge exists: one bit per consumer tag that touches the bytes (1 << SIMPLER_TAG_*), how
/// the producer was found, and whether the consumer reads what the producer wrote.
inline constexpr std::uint32_t kEdgeViaOwner = 1U << 8;  ///< it allocated the buffer (Output)
inline constexpr std::uint32_t kEdgeViaWrite = 1U << 9;  ///< TensorMap: it wrote the bytes in place
inline constexpr std::uint32_t kEdgeViaRead = 1U << 10;  ///< TensorMap: it read bytes the consumer
                                                         ///< overwrites (write after read)
/// The consumer reads bytes the producer wrote (a data edge). Without it the edge only orders:
/// write after read, write after write, or an OutputExisting into another task's Output.
inline constexpr std::uint32_t kEdgeData = 1U << 11;

struct DagEdge {
  std::uint64_t producer;
  std::uint64_t consumer;
  std::uint64_t bytes;  ///< bytes of the consumer's tensors that overlap what the producer
                        ///< wrote (or, via read, read)
  std::uint32_t why;    ///< kEdgeVia* | kEdgeData | 1 << consumer tag
};

/// The dependencies one submit found (orchestrator-private scratch, no allocation).
struct PendingEdges {
  struct Item {
    std::uint64_t producer, bytes;
    std::uint32_t why;
  };
  /// kMaxFanin + 1: a submit with more producers fails the run. A writer may follow more
  /// readers: those past the array are counted in `omitted` (the DAG's omitted edges).
  Item items[65];
  int n = 0;
  std::uint64_t omitted = 0;
  void add(std::uint64_t producer, std::uint64_t bytes, std::uint32_t why) noexcept;
};

/// The dependency graph of a run, bounded by `max_nodes` (edges by 16 x max_nodes): past the
/// bounds, nodes and edges are counted, not kept, and the files say so.
struct DepGraph {
  std::vector<DagNode> nodes;
  std::vector<DagTensor> tensors;
  std::vector<DagEdge> edges;
  std::uint64_t max_nodes = 0;
  std::uint64_t omitted_nodes = 0;
  std::uint64_t omitted_edges = 0;
  void clear() noexcept;
};

/// The diagnostics state of a context: the settings of the current run (host-written in
/// prepare_run, read-only for the device threads), the per-thread buffers, the DAG, and the
/// merged trace of the last finished run that simpler_get_run_trace hands out.
struct Diag {
  // Settings of the run (read per task by the device threads).
  std::int32_t swimlane = 0;
  bool dep_gen = false;
  bool find_edges = false;  ///< dep_gen || swimlane >= 2: submits record their producers
  std::string output_prefix;
  std::uint64_t run_index = 0;  ///< the run's 0-based index on the context (its run<N> dir)

  /// [0] the orchestrator, [1, kMaxAicpuThreads) the schedulers, then one per core.
  std::vector<TraceBuffer> buffers;
  DepGraph dag;
  alignas(64) PendingEdges pending;  ///< the submit in progress (orchestrator thread)

  // The last finished run's trace (host only).
  std::vector<simpler_trace_event> merged;
  std::vector<std::string> track_names;
  std::vector<const char*> track_ptrs;
  std::uint64_t dropped = 0;
};

/// Index of the first core's TraceBuffer in Diag::buffers.
inline constexpr int kCoreTraceBuffer = 4;

// ---- host side (trace.cpp, dep_graph.cpp) ----------------------------------------------------

/// `s` as a quoted JSON (and Graphviz) string: quotes, backslashes and control characters escaped.
std::string json_quoted(std::string_view s);
/// "ring:local" of a task id.
std::string task_label(std::uint64_t id);
/// The name of kernel `func_id` of the run's callable ("func <id>" when it has none).
std::string kernel_label(const Context& ctx, std::int32_t func_id);

/// Checks and takes the diagnostics fields of `cfg` (NULL = all off); allocates the trace
/// buffers. Fails (life.last_error) for a swimlane outside 0..4 or an unterminated prefix.
int diag_prepare(Context& ctx, const simpler_run_config* cfg);
/// Resets the buffers and the DAG and drops the last run's trace (the device threads sleep).
void diag_launch(Context& ctx) noexcept;
/// After the run: merges the trace and writes trace.json / dag.{dot,json} under
/// <output_prefix>/chip<device_id>/run<N>/. Returns SIMPLER_OK or the status of a failed write.
int diag_finish(Context& ctx, int run_status);
int diag_get_trace(const Context& ctx, simpler_trace_info* out);
/// <output_prefix>/chip<device_id>/run<N>, created (with its parents); "" and a failure
/// recorded on the context when it cannot be.
std::string diag_run_dir(Context& ctx);
int write_dag_files(Context& ctx, const std::string& dir);

// ---- device side hooks (trace.cpp, dep_graph.cpp) ----------------------------------------------

/// Before the submit's TensorMap lookup: the tasks `b` is ordered after, with their overlapping
/// bytes, into diag.pending: its producers and, with all hazards on, every live earlier reader
/// (and for an OutputExisting, writer) of bytes it writes in place, done or not. (The submit
/// itself skips those already done: they need no wait.)
void diag_find_edges(Context& ctx, const simpler_task_builder& b) noexcept;
/// After the submit of task `id` (began at `t0`): DAG node and edges, dependency flows and the
/// submit event, as the run's settings ask.
void diag_submitted(Context& ctx, std::uint64_t id, const simpler_task_builder& b,
                    const simpler_chip_tensor* tensors, const std::int32_t lanes[3],
                    std::uint64_t t0) noexcept;

}  // namespace simpler::sim
