// simpler — WorkerStats: what a Worker has done so far, for progress lines and monitoring.
//
// BasicWorker::stats() fills one from counters that the engine's threads keep as they go: each
// counter has one writer (the orchestration thread, the scheduler thread, or a lane's thread),
// is written with relaxed atomics in memory that thread writes anyway, and is only read by
// stats(). So stats() may run on any thread, during a run too, and costs the engine nothing; what
// it returns is a snapshot whose fields are read one after the other, so two fields may disagree
// slightly while tasks move (a task already counted as completed on its lane but not yet in the
// Worker's totals, say). Between runs every field is exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "simpler/task.hpp"

namespace simpler {

/// One lane (one child) of a Worker. Counts are of tasks handed to the lane, a member of a group
/// task counting as one task on each lane it runs on.
struct LaneStats {
  std::string name;   ///< the lane's name ("sub worker 0", "chip 1", "MPI rank 2 (worker 1)")
  bool sub = false;   ///< a sub worker (submit_sub); else a next-level worker
  WorkerId id = 0;    ///< its WorkerId among the sub workers or among the next-level workers
  std::string kinds;  ///< the callable kinds it runs: "sub", "orch", "chip", joined by '+'
  bool dead = false;  ///< its child is gone (died, killed at a deadline, or its thread abandoned)
  std::uint64_t submitted = 0;  ///< handed to the lane
  std::uint64_t completed = 0;  ///< ... that succeeded
  std::uint64_t failed = 0;   ///< ... that failed (the callable threw, the child died, a deadline)
  std::uint64_t skipped = 0;  ///< ... skipped there (the run was cancelled before they started)
  std::uint64_t in_flight = 0;  ///< ... not finished yet (queued on the lane or running)
  /// Scheduler passes (ones that found work) this lane's thread ran while it was idle, instead
  /// of waiting for the scheduler thread to post its next task. Diagnostics.
  std::uint64_t passes = 0;
  /// Tasks the thread running the orchestration sent to this lane's forked child itself, with
  /// the lane's thread left asleep (a driven lane: docs/processes.md). Diagnostics.
  std::uint64_t sent_by_run_thread = 0;
  /// Tasks a scheduler pass on another thread (the scheduler thread, or an idle lane) sent to
  /// this lane's forked child itself, with the lane's thread left asleep. Diagnostics.
  std::uint64_t sent_by_passes = 0;
  /// Answers of this lane's forked child (a driven lane) that the lane's own thread took in; the
  /// rest the run's thread or other threads' passes took, with it asleep. Diagnostics.
  std::uint64_t taken_by_lane_thread = 0;
  /// Tasks of this lane (a thread child) that the thread running the orchestration ran itself,
  /// while it waited at the end of the run or at their submit (WorkerOptions::
  /// caller_runs_tasks). Diagnostics.
  std::uint64_t ran_by_run_thread = 0;
  /// ... of which it ran at their submit, the sub workers having a backlog of ready tasks (a
  /// thread sub worker's lane; counted in submitted and in how they ended). Diagnostics.
  std::uint64_t ran_at_submit = 0;
  /// Times this lane's forked child moved itself off the CPU its tasks were sent from, having
  /// found itself sharing it with the sender (docs/processes.md, "Sharing a CPU"). Diagnostics.
  std::uint64_t child_cpu_steps = 0;
};

/// One heap ring (orch.alloc and auto-allocated outputs; one ring per scope depth).
struct HeapRingStats {
  std::size_t used = 0;  ///< bytes of live allocations
  std::size_t size = 0;  ///< the ring's size (WorkerOptions::heap_ring_size)
};

/// A Worker's counters since it was constructed (see BasicWorker::stats()).
struct WorkerStats {
  int level = 3;
  std::uint64_t runs_completed = 0;  ///< runs that returned (successfully or with an error)
  std::uint64_t runs_failed = 0;     ///< ... of which threw
  /// Tasks submitted by orchestration functions, and how they ended: completed + failed + skipped
  /// + in_flight == submitted. A failed task's consumers are skipped, never run.
  std::uint64_t tasks_submitted = 0;
  std::uint64_t tasks_completed = 0;
  std::uint64_t tasks_failed = 0;
  std::uint64_t tasks_skipped = 0;
  std::uint64_t tasks_in_flight = 0;
  /// Tasks ready to run and waiting in the scheduler's queues for a lane (not yet handed to one).
  std::uint64_t ready_queued = 0;
  /// Times a submit or alloc found the task window (WorkerOptions::task_window) full and waited
  /// for tasks to finish: the orchestration outran its workers (back-pressure). Each wait lasts
  /// until a quarter of the window is free.
  std::uint64_t window_waits = 0;
  /// Scheduler passes (ones that found work) the orchestration thread ran itself rather than
  /// wake a sleeping scheduler thread: for a task it submitted while that thread slept, and for
  /// the lanes' results while the run's fence waits. Diagnostics: high on runs of a few tasks.
  std::uint64_t orchestrator_passes = 0;
  /// Ready tasks the Orchestrator handed to the scheduler through its unbounded inbox because
  /// the ready ring (1024 tasks) was full: the scheduler thread was behind. Diagnostics.
  std::uint64_t ready_overflows = 0;
  std::vector<LaneStats> lanes;  ///< sub workers first, then next-level workers, by WorkerId
  std::vector<HeapRingStats> heap_rings;
};

}  // namespace simpler
