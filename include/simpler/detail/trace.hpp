// simpler::detail — host-level tracing (L3 and up) and the inferred dependency graph.
//
// Recording: every engine thread (the Orchestrator, the Scheduler, each lane) owns one
// TraceBuffer, a preallocated array written only by that thread: no lock, no allocation, and a
// full buffer counts what it drops instead of growing. Whether anything is recorded is decided by
// one word, EngineCore::trace_level (0 = off), that each thread reads with a relaxed load where
// it would record: the only cost when tracing is off. The run's thread sets it (and the buffers)
// before the run's first submit and clears it after the run's fence, so the task hand-offs order
// it for every other thread. Readers collect a buffer only after the fence, when every event of
// the run's tasks was recorded (each is recorded before its task completes).
//
// Output (off the hot path, in trace.ipp): a run's events become TraceProcess records (one per
// Worker; a nested Worker's come back to its parent serialized, see TraceReply), rendered as one
// Chrome trace-event JSON; the dependency graph (DagRecord) as Graphviz DOT and JSON. The file
// layout and the levels are described in docs/diagnostics.md.
#pragma once

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "simpler/error.hpp"
#include "simpler/types.hpp"

namespace simpler::detail {

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of the host, so forked
/// children's timestamps line up with their parent's.
inline std::int64_t trace_now() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// Trace levels (CallConfig::enable_l2_swimlane, WorkerOptions::trace_level).
inline constexpr int kTraceTasks = 1;     ///< task slices and submits
inline constexpr int kTraceDeps = 2;      ///< + ready/dispatch instants, dependency flows
inline constexpr int kTraceSched = 3;     ///< + scheduler passes and ready-queue depth
inline constexpr int kTraceAll = 4;       ///< + each task's tensors
inline constexpr int kTraceMaxLevel = 4;  ///< highest level

enum class TraceKind : std::uint8_t {
  Submit,    ///< t0; task; arg = callable index; arg2 = role (0 next-level, 1 sub) | members << 1
  Edge,      ///< task = consumer; arg = producer; t1 = bytes that caused it
  Ready,     ///< t0; task
  Dispatch,  ///< t0; task; arg = lane track it was posted to
  Run,       ///< t0 start, t1 end; task; arg = member; outcome
  Skip,      ///< t0; task; outcome: ended without running (skipped, or its worker was lost)
  Pass,      ///< t0 start, t1 end of a scheduler pass; arg = tasks routed; arg2 = queued after
  Tensor,    ///< level 4: task; t0 = data; t1 = bytes; arg = tag
  /// A chip's event (device ABI simpler_trace_event): t0/t1 begin/end; task = chip task + 1;
  /// arg = flow_from + 1 (0 = none); arg2 = func_id + 1; outcome = simpler_trace_kind.
  Chip,
};

/// One record, 32 bytes. `track` is the recording thread (0 Orchestrator, 1 Scheduler, 2 + i
/// lane i in the Worker's lane order) except for Run, where it is the lane that ran the task.
struct TraceEvent {
  std::int64_t t0 = 0;
  std::int64_t t1 = 0;
  std::uint32_t task = 0;  ///< 1-based per run, in submission order
  std::uint32_t arg = 0;
  TraceKind kind = TraceKind::Submit;
  std::uint8_t outcome = 0;  ///< an Outcome
  std::uint16_t track = 0;
  std::uint32_t arg2 = 0;
};
static_assert(sizeof(TraceEvent) == 32);

inline constexpr std::uint16_t kOrchTrack = 0;
inline constexpr std::uint16_t kSchedTrack = 1;
inline constexpr std::uint16_t kFirstLaneTrack = 2;

/// A bounded single-writer event buffer. record() is called only by the owning thread; the
/// count is published with a release store so a reader after the run's fence sees every event.
class TraceBuffer {
 public:
  explicit TraceBuffer(std::size_t capacity)
      : events_(std::make_unique<TraceEvent[]>(capacity)), capacity_(capacity) {}

  void record(const TraceEvent& e) noexcept {
    const std::size_t n = count_.load(std::memory_order_relaxed);
    if (n == capacity_) {
      // Relaxed: read only after the run's fence, which orders it like the events.
      dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return;
    }
    events_[n] = e;
    count_.store(n + 1, std::memory_order_release);
  }
  [[nodiscard]] std::size_t size() const noexcept { return count_.load(std::memory_order_acquire); }
  [[nodiscard]] const TraceEvent& operator[](std::size_t i) const noexcept { return events_[i]; }
  [[nodiscard]] std::uint64_t dropped() const noexcept {
    return dropped_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  /// Empties the buffer. Only while its owner records nothing (between runs).
  void reset() noexcept {
    count_.store(0, std::memory_order_relaxed);
    dropped_.store(0, std::memory_order_relaxed);
  }

 private:
  std::unique_ptr<TraceEvent[]> events_;
  std::size_t capacity_;
  std::atomic<std::size_t> count_{0};
  std::atomic<std::uint64_t> dropped_{0};
};

/// What a lane hands a leaf with a traced task (LeafRequest::trace), and what comes back: a
/// transport whose child timed the task itself fills begin/end (else the lane's own clock
/// reads count); a leaf that traces work of its own (a nested Worker) appends its serialized
/// TraceProcess records to `nested`. Owned by the lane; reused per task.
struct TraceReply {
  int level = 0;
  std::int64_t begin_ns = 0;
  std::int64_t end_ns = 0;
  std::vector<std::byte> nested;
  std::uint64_t nested_dropped = 0;  ///< bytes of nested traces that did not fit the way back
  void reset(int l) noexcept {
    level = l;
    begin_ns = 0;
    end_ns = 0;
    nested.clear();
    nested_dropped = 0;
  }
};

/// The lane-side trace state (part of LaneCore): its buffer, the reply it hands its leaf, and
/// the nested traces its leaf returned during the run. Lane thread only during a run.
struct LaneTrace {
  std::unique_ptr<TraceBuffer> buffer;
  TraceReply reply;
  std::vector<std::vector<std::byte>> nested;
  std::uint64_t nested_dropped = 0;
};

/// The buffers of the Orchestrator and Scheduler threads (lanes hold theirs in LaneTrace).
struct EngineTrace {
  std::unique_ptr<TraceBuffer> orch;
  std::unique_ptr<TraceBuffer> sched;
};

/// One Worker's events of one run, with what is needed to name them: the unit that crosses
/// process boundaries (serialize/deserialize) and is rendered.
struct TraceProcess {
  std::string name;                    ///< "L4", "L3 worker 1"
  std::uint32_t run = 0;               ///< the Worker's run number
  std::int32_t level = 0;              ///< trace level of the run
  std::vector<std::string> tracks;     ///< 0 orchestrator, 1 scheduler, 2.. lanes
  std::vector<std::string> callables;  ///< by callable index
  std::vector<TraceEvent> events;
  std::uint64_t dropped = 0;  ///< events lost to full buffers (and nested traces lost)
};

/// Serialized TraceProcess lists (how a nested Worker's trace returns to its parent).
void serialize_trace(const std::vector<TraceProcess>& in, std::vector<std::byte>& out);
/// Appends the records in `in` to `out`; false (appending nothing) when `in` is malformed.
bool deserialize_trace(const std::byte* in, std::size_t n, std::vector<TraceProcess>& out);

/// Moves every timestamp of the serialized records in `blob` by `delta_ns` (rewriting the blob):
/// how a remote Worker's records, taken in its own clock, are put on this process's. False
/// (leaving `blob` as it was) when it is malformed.
bool shift_trace_records(std::vector<std::byte>& blob, std::int64_t delta_ns);

/// How far a remote peer's CLOCK_MONOTONIC is ahead of this process's, estimated from traced
/// request/answer exchanges the way NTP does: an exchange sent at c0 and answered at c1 (here),
/// received at rx and answered at tx (there) puts the offset at ((rx - c0) + (tx - c1)) / 2,
/// wrong by at most half of its network delay (c1 - c0) - (tx - rx). The exchange with the
/// least delay wins, its delay aged by 100 ppm of the time since (clocks drift), so a later
/// exchange replaces it when a slow network had made the first ones poor.
class ClockSync {
 public:
  void sample(std::int64_t c0, std::int64_t c1, std::int64_t rx, std::int64_t tx) noexcept {
    if (c1 < c0 || tx < rx) return;
    const std::int64_t delay = std::max<std::int64_t>(0, (c1 - c0) - (tx - rx));
    const std::int64_t aged = best_delay_ + (c1 - best_at_) / 10'000;
    if (known_ && delay > aged) return;
    known_ = true;
    best_delay_ = delay;
    best_at_ = c1;
    offset_ = ((rx - c0) + (tx - c1)) / 2;
  }
  /// The peer's clock minus this one's (0 before the first exchange).
  [[nodiscard]] std::int64_t offset() const noexcept { return offset_; }
  /// The network delay of the exchange the offset comes from: twice its worst error.
  [[nodiscard]] std::int64_t error_bound() const noexcept { return best_delay_ / 2; }
  [[nodiscard]] bool known() const noexcept { return known_; }

 private:
  bool known_ = false;
  std::int64_t offset_ = 0;
  std::int64_t best_delay_ = 0;
  std::int64_t best_at_ = 0;
};

/// Renders processes as one Chrome trace-event JSON document.
std::string render_chrome_trace(const std::vector<TraceProcess>& processes);

/// The dependency graph of one run, recorded by the Orchestrator (enable_dep_gen).
struct DagRecord {
  struct Tensor {
    std::uint64_t data;
    std::uint64_t bytes;
    TensorArgType tag;
  };
  struct Node {
    std::uint32_t id;
    std::string callable;
    bool sub;
    std::uint32_t members;
    std::vector<Tensor> tensors;
  };
  struct Edge {
    std::uint32_t from;
    std::uint32_t to;
    std::uint64_t bytes;      ///< bytes `to` reads of what `from` wrote (0 for an order edge)
    bool order_only = false;  ///< `to` overwrites bytes `from` read or wrote, reads none of them
  };
  std::uint32_t run = 0;
  int level = 3;
  std::vector<Node> nodes;
  std::vector<Edge> edges;
  void clear() {
    nodes.clear();
    edges.clear();
  }
};
std::string render_dag_dot(const DagRecord& dag);
std::string render_dag_json(const DagRecord& dag);

/// Throws UsageError naming `what`, the directory and errno when `dir` is not an existing,
/// writable directory.
void check_output_dir(const std::string& dir, const char* what);
/// Writes `text` to `path` (replacing it); throws SystemError naming the path.
void write_text_file(const std::string& path, const std::string& text, const char* what);

}  // namespace simpler::detail

#include "simpler/detail/trace.ipp"
