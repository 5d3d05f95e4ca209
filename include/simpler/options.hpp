// simpler — WorkerOptions: how a Worker is built.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "simpler/device/chip_callable.hpp"

namespace simpler {

/// Where a Worker's local children run.
enum class ChildMode {
  Thread,   ///< in this process, one thread per child (ThreadTransport)
  Process,  ///< a forked process per child, reached through shared memory (ForkShmTransport)
};

struct WorkerOptions {
  int level = 3;            ///< a label for messages; behaviour never branches on it
  int num_sub_workers = 0;  ///< host sub workers (SubWorker leaves)
  /// One chip child (a ChipWorker) per id, named "chip <id>"; they are the next-level workers
  /// 0 .. n-1 in this order, before any add_worker/add_next_level child. Ids are unique, >= 0.
  std::vector<int> device_ids;
  std::size_t heap_ring_size = std::size_t{256} << 20;  ///< bytes per heap ring; 4 rings
  /// Local children's transport. With Process, tasks run in other processes: tensors they touch
  /// must live in shared memory mapped before init() (orch.alloc, auto-allocated outputs, or the
  /// caller's own MAP_SHARED memory).
  ChildMode child_mode = ChildMode::Process;
  /// Device runtime .so of the chips; empty = chip.device_runtime, else the bundled simulator
  /// (default_device_runtime()). When both are set they must agree.
  std::string device_runtime;
  /// Context-wide settings of every chip child (clusters, default AICPU threads, timeouts).
  ChipOptions chip;
  /// How long engine threads poll before sleeping after their last piece of work.
  std::chrono::microseconds spin{20};
  /// The time slice the engine's threads ask the kernel for (the scheduler thread and the lanes
  /// of sub workers and nested Workers; not chip lanes, whose device threads would inherit it):
  /// 100 us .. 100 ms, or 0 to keep the kernel's default. A short slice lets a lane woken on the
  /// busy CPU of the thread running the orchestration run soon instead of after that thread's
  /// slice (docs/engine.md, "Waiting"). Linux 6.12+ takes it for SCHED_OTHER threads without
  /// privilege; elsewhere, or for threads of another policy, it is ignored. The caller's
  /// threads and the threads of forked children are never changed.
  std::chrono::microseconds engine_slice{100};
  /// Longest time a submit waits for heap ring space, or for a place in the task window, before
  /// throwing TimeoutError.
  std::chrono::milliseconds heap_wait{10'000};
  /// Most tasks (and orch.alloc buffers) alive at once in a run: submitted and not yet given
  /// back. An orchestration that outruns its workers waits in submit (and alloc) once this many
  /// are alive, until they catch up (up to heap_wait), so memory stays bounded whatever the run's
  /// length. A finished task gives its place back when its scope ends, or before if it owns no
  /// heap bytes. 1 .. 16M (about 500 bytes per task at the limit).
  std::uint32_t task_window = std::uint32_t{1} << 16;
  /// Deadline of every task from the moment its worker starts it; 0 = none (the default).
  /// CallConfig::timeout overrides it per submit. A task past its deadline fails as an
  /// EndpointFailure naming the callable, the worker and the deadline: a forked child is killed
  /// and its lane is lost; a thread child cannot be stopped, so its lane is lost and its thread
  /// abandoned (it may keep running; close() still returns). The rest of the Worker works on.
  /// Timeouts are whole milliseconds; one past ~49.7 days is cut to that (as good as none).
  std::chrono::milliseconds task_timeout{0};
  /// Deadline of every run() from its start; 0 = none (the default). The CallConfig given to
  /// run() overrides it (CallConfig::timeout). At the deadline run() fails with a TimeoutError:
  /// tasks not started are skipped, running ones end as at their own deadline.
  std::chrono::milliseconds run_timeout{0};
  /// While run() waits for its tasks at its end, the calling thread runs tasks posted to a
  /// thread child (ChildMode::Thread sub workers and nested Workers, not chips) itself when
  /// that child's thread has not started them yet, instead of waiting for a hand-off there and
  /// back. Only tasks without a deadline and not in a group, one child at a time.
  /// Likewise, while the sub workers have a backlog of ready tasks (16 per sub worker), or
  /// their timed tasks took less than a hand-off (500 ns; this run's samples, or at a run's
  /// start the last run's, for the callable they timed last), a submit of a sub task that is
  /// ready at once runs it on the orchestration's thread before it returns, through a thread
  /// sub worker (as an OpenMP runtime runs tasks undeferred past its queue limit): such a task
  /// must not wait for work the orchestration submits after it. Such a task's callable may then
  /// run on the thread that called run(); false keeps every task on its child's own thread.
  bool caller_runs_tasks = true;
  /// Trace of the Worker's whole lifetime: every run's task events (and those of its nested
  /// Workers) as one Chrome trace-event JSON written to this path at close(). Empty = the
  /// SIMPLER_TRACE environment variable, else off; a nested Worker (add_worker) never reads the
  /// variable, its events go to its parent's trace. "%p" in the path becomes the process id.
  /// The directory must exist and be writable: init() checks it. See docs/diagnostics.md.
  std::string trace_path;
  /// Detail of that trace, 1-4 (as CallConfig::enable_l2_swimlane).
  int trace_level = 2;
  /// Events each engine thread (Orchestrator, Scheduler, every lane) can record per run; more
  /// are dropped and counted in the trace ("dropped_events"). 32 bytes each, allocated only
  /// when a run is traced.
  std::size_t trace_buffer_events = std::size_t{1} << 16;
  /// Which orderings tags imply, on this Worker's TensorMap and on its chips' (Hazards::All: a
  /// writer also waits for the earlier readers and writer of the bytes it overwrites). Its chips
  /// take this value; a chip.hazards set to something else is a UsageError at init.
  Hazards hazards = Hazards::All;
};

}  // namespace simpler
