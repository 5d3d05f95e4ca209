// The device threads: the orchestrator (runs the user's orchestration), the schedulers (complete
// finished tasks, dispatch ready ones to idle cores of the right shape, watch for no progress),
// and the AICore cores (run one kernel per DMB token, answer through COND). Also the fault
// handler that turns a faulting kernel into a failed run.

#include <fmt/format.h>
#include <pthread.h>

#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>

#include "sim.hpp"

namespace simpler::sim {

namespace {

// ---- kernel fault containment ----------------------------------------------------------------
// A core thread arms t_jmp around each kernel call. A synchronous fault on that thread jumps back
// to the core loop, which reports it; a fault anywhere else gets the previous disposition back
// and re-raises when the faulting instruction runs again. initial-exec TLS: no allocation can
// happen inside the handler.
__attribute__((tls_model("initial-exec"))) thread_local sigjmp_buf* t_jmp = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local int t_sig = 0;
__attribute__((tls_model("initial-exec"))) thread_local void* t_addr = nullptr;

constexpr int kFaultSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
struct sigaction g_previous[std::size(kFaultSignals)];

void on_fault(int sig, siginfo_t* info, void*) {
  if (t_jmp != nullptr) {
    t_sig = sig;
    t_addr = info != nullptr ? info->si_addr : nullptr;
    sigjmp_buf* j = t_jmp;
    t_jmp = nullptr;
    siglongjmp(*j, 1);
  }
  for (std::size_t k = 0; k < std::size(kFaultSignals); ++k) {
    if (kFaultSignals[k] == sig) ::sigaction(sig, &g_previous[k], nullptr);
  }
}

/// Runs the kernel; returns the signal number if it faulted, else 0.
int run_guarded(Core& c) noexcept {
  sigjmp_buf jb;
  // No signal mask saved (a syscall per kernel); after a fault the handler's mask (the signal
  // blocked) is still in force, so unblock it here.
  if (sigsetjmp(jb, 0) == 0) {
    t_jmp = &jb;
    c.fn(c.args);
    t_jmp = nullptr;
    return 0;
  }
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, t_sig);
  ::pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);
  c.fault_addr = reinterpret_cast<std::uintptr_t>(t_addr);
  return t_sig;
}

const char* core_kind(const Core& c) noexcept {
  return c.global.core_type == 0 ? "AIC" : "AIV";
}

/// Claims the next SPMD block of task `id`, just popped from `q`: before its first block the
/// task's inputs are dumped (when on), and while blocks remain it goes back into `q` (setting
/// `pushed`, so the schedulers are woken for them if the caller leaves any).
std::int32_t claim_block(Context& ctx, ReadyQueue& q, std::uint64_t id, bool& pushed) {
  Payload& p = ctx.payload_of(id);
  const std::int32_t b = p.next_block++;
  if (b == 0 && ctx.run.dump_tensor) ctx.dump_task(id, false);
  if (p.next_block < p.block_num) {
    q.push(id);  // cannot fail: the task held this entry until the pop
    pushed = true;
  }
  return b;
}

/// The kernel an AIV lane runs for a task popped from the AIV queue.
std::int32_t aiv_kernel(const Payload& p) noexcept {
  return p.kernels[1] >= 0 ? p.kernels[1] : p.kernels[2];
}

/// The kernel a lane of type AIC (`aic`) or AIV runs for a task of its own queue's shape.
std::int32_t kernel_for(bool aic, const Payload& p) noexcept {
  return aic ? p.kernels[0] : aiv_kernel(p);
}

bool any_queued(const ArenaHeader& h) noexcept {
  for (const auto& q : h.queues) {
    if (!q.empty()) return true;
  }
  return false;
}

Clock::time_point far_future() noexcept {
  return Clock::now() + std::chrono::hours(24 * 365);
}

// ---- the function table the orchestration calls -------------------------------------------
Context& ctx_of(simpler_orch_runtime* rt) noexcept {
  return *reinterpret_cast<OrchRuntime*>(rt)->ctx;
}
simpler_task_id op_submit(simpler_orch_runtime* rt, simpler_mixed_kernels k,
                          const simpler_task_builder* b, simpler_chip_tensor* out) {
  return ctx_of(rt).submit(k, b, out);
}
void op_scope_begin(simpler_orch_runtime* rt) {
  ctx_of(rt).scope_begin();
}
void op_scope_end(simpler_orch_runtime* rt) {
  ctx_of(rt).scope_end();
}
int32_t op_alloc(simpler_orch_runtime* rt, const uint32_t* shapes, uint32_t ndims, uint8_t dtype,
                 simpler_chip_tensor* out) {
  return ctx_of(rt).alloc_tensor(shapes, ndims, dtype, out);
}
int32_t op_read(simpler_orch_runtime* rt, const simpler_chip_tensor* t, uint64_t off, void* dst,
                uint64_t n) {
  return ctx_of(rt).read_tensor(t, off, dst, n);
}
int32_t op_is_fatal(simpler_orch_runtime* rt) {
  return ctx_of(rt).fatal() ? 1 : 0;
}
void op_report_fatal(simpler_orch_runtime* rt, const char* message) {
  ctx_of(rt).latch(SIMPLER_ERR_ORCH_FATAL,
                   fmt::format("the orchestration reported a fatal error: {}",
                               message != nullptr ? message : "(no message)"));
}
// The clusters (and AIV cores) this run may use: the run config's block_dim caps them.
uint32_t op_clusters(simpler_orch_runtime* rt) {
  return ctx_of(rt).run.clusters;
}
uint32_t op_aivs(simpler_orch_runtime* rt) {
  return 2 * ctx_of(rt).run.clusters;
}

constexpr simpler_orch_ops kOps = {SIMPLER_TASK_ABI_VERSION,
                                   op_submit,
                                   op_scope_begin,
                                   op_scope_end,
                                   op_alloc,
                                   op_read,
                                   op_is_fatal,
                                   op_report_fatal,
                                   op_clusters,
                                   op_aivs};

}  // namespace

const simpler_orch_ops* orch_ops() noexcept {
  return &kOps;
}

void install_fault_handler() {
  // Called at every launch: a host (or a test framework) may have installed its own handler
  // since the last run. Ours goes on top and hands foreign faults to the one it replaced.
  static std::mutex mu;
  std::lock_guard lk(mu);
  for (std::size_t k = 0; k < std::size(kFaultSignals); ++k) {
    struct sigaction current {};
    if (::sigaction(kFaultSignals[k], nullptr, &current) != 0) continue;
    if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == on_fault) continue;
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(kFaultSignals[k], &sa, &g_previous[k]);
  }
}

// ---- threads ------------------------------------------------------------------------------------

namespace {

/// Names device thread `t` "d<device> <role><index>" (index < 0: none), cut to the 15
/// characters Linux keeps. Called by the thread that started it, so the name is there once
/// init() returns, whether or not the thread has run yet. Best effort: a name is a diagnostic,
/// never a reason to fail.
void name_thread(std::thread& t, std::int32_t device, const char* role,
                 std::int64_t index) noexcept {
  char name[16] = {};
  try {
    if (index < 0)
      fmt::format_to_n(name, sizeof name - 1, "d{} {}", device, role);
    else
      fmt::format_to_n(name, sizeof name - 1, "d{} {}{}", device, role, index);
  } catch (...) {
    return;
  }
  static_cast<void>(::pthread_setname_np(t.native_handle(), name));
}

}  // namespace

int Context::start_threads() {
  try {
    // Each device thread counts itself awake (detail::AwakeThreads): their spins then yield
    // while they outnumber the cores, as they always did. Each is named after its device and
    // role ("d0 aic0", "d0 aiv3", "d0 sched1", "d0 orch"), so top, perf and gdb tell them apart.
    const std::uint32_t C = config.num_clusters;
    const std::int32_t dev = config.device_id;
    for (std::uint32_t i = 0; i < threads.core_count; ++i) {
      threads.cores[i].thread = std::thread([this, i] {
        const detail::AwakeThreads::Member awake(1);
        core_main(static_cast<int>(i));
      });
      name_thread(threads.cores[i].thread, dev, i < C ? "aic" : "aiv", i < C ? i : i - C);
    }
    for (int s = 0; s < kMaxAicpuThreads - 1; ++s) {
      threads.sched_threads[s] = std::thread([this, s] {
        const detail::AwakeThreads::Member awake(1);
        scheduler_main(s);
      });
      name_thread(threads.sched_threads[s], dev, "sched", s);
    }
    threads.orch_thread = std::thread([this] {
      const detail::AwakeThreads::Member awake(1);
      orchestrator_main();
    });
    name_thread(threads.orch_thread, dev, "orch", -1);
  } catch (const std::system_error& e) {
    stop_threads();
    return fail(SIMPLER_ERR_SYSTEM, fmt::format("cannot start the device threads: {}", e.what()));
  }
  return SIMPLER_OK;
}

void Context::stop_threads() noexcept {
  threads.stopping.store(1, std::memory_order_seq_cst);
  threads.launch_event.notify_all();
  for (auto& w : sched.wake) w.notify_all();
  for (std::uint32_t i = 0; i < threads.core_count; ++i) threads.cores[i].wake.notify_all();
  if (threads.orch_thread.joinable()) {
    if (outcome.broken && outcome.orch_stuck)
      threads.orch_thread.detach();
    else
      threads.orch_thread.join();
  }
  for (auto& t : threads.sched_threads) {
    if (t.joinable()) t.join();
  }
  for (std::uint32_t i = 0; i < threads.core_count; ++i) {
    if (!threads.cores[i].thread.joinable()) continue;
    if (outcome.broken && threads.cores[i].running != SIMPLER_INVALID_TASK_ID) {
      // Still inside a kernel that never returned; the context (and so the core array) is
      // kept alive for it by simpler_destroy_context.
      threads.cores[i].thread.detach();
    } else {
      threads.cores[i].thread.join();
    }
  }
}

bool Context::wait_for_launch(detail::EventCount& event, int aicpu, std::uint64_t& seen,
                              LaunchPacing& pace) {
  std::uint64_t word = 0;
  event.await(
      [&] {
        if (threads.stopping.load(std::memory_order_seq_cst) != 0) return true;
        word = threads.launch_word.load(std::memory_order_seq_cst);
        return launch_count(word) != seen && aicpu < launch_threads(word);
      },
      pace.spin ? std::chrono::nanoseconds(kLaunchSpin) : std::chrono::nanoseconds(0),
      far_future());
  if (threads.stopping.load(std::memory_order_seq_cst) != 0) return false;
  // The word the predicate accepted: the host does not launch again before this thread checked
  // in (threads_done), so it is still the current one.
  seen = launch_count(word);
  // Relaxed: written before the seq_cst launch-word store just read.
  const std::uint64_t launched = threads.launched_ns.load(std::memory_order_relaxed);
  const auto spin_ns = static_cast<std::uint64_t>(std::chrono::nanoseconds(kLaunchSpin).count());
  pace.spin = pace.ended_ns != 0 && launched - pace.ended_ns < spin_ns;
  return true;
}

void Context::orchestrator_main() {
  std::uint64_t seen = 0;
  LaunchPacing pace;
  for (;;) {
    if (!wait_for_launch(threads.launch_event, 0, seen, pace)) return;

    scope_begin();  // the run's own scope (ring 0)
    const Callable& c = life.callables[run.callable];
    const simpler_orch_args args{static_cast<std::int32_t>(run.tensors.size()),
                                 static_cast<std::int32_t>(run.scalars.size()), run.tensors.data(),
                                 run.scalars.data()};
    try {
      c.entry(&run.orch_rt.base, &args);
    } catch (const std::exception& e) {
      latch(SIMPLER_ERR_ORCH_FATAL,
            fmt::format("the orchestration threw an exception: {}", e.what()));
    } catch (...) {
      latch(SIMPLER_ERR_ORCH_FATAL, "the orchestration threw a non-standard exception");
    }
    const std::uint32_t depth = header().scopes.depth;
    if (depth > 1 && !fatal()) {
      latch(SIMPLER_ERR_SCOPE_OVERFLOW,
            fmt::format("the orchestration left {} scope(s) open; every scope_begin needs a "
                        "scope_end",
                        depth - 1));
    }
    while (header().scopes.depth > 0) end_scope(true);
    orch.done.store(1, std::memory_order_seq_cst);
    notify_schedulers();
    pace.ended_ns = trace_now_ns();
    outcome.threads_done.fetch_add(1, std::memory_order_seq_cst);
    outcome.done_event.notify_all();
  }
}

void Context::core_main(int index) {
  Core& c = threads.cores[static_cast<std::size_t>(index)];
  // 0 is the register's reset value; a scheduler may already have written a token by the time
  // this thread runs, so do not read the register here.
  std::uint32_t last = 0;
  for (;;) {
    std::uint32_t token = last;
    c.wake.await(
        [&] {
          if (threads.stopping.load(std::memory_order_seq_cst) != 0) return true;
          token = c.dmb.load(std::memory_order_seq_cst);
          return token != last;
        },
        std::chrono::microseconds(20), far_future());
    if (threads.stopping.load(std::memory_order_seq_cst) != 0) return;
    last = token;
    const bool run_on = run.cores_run_on;
    for (;;) {  // one kernel per pass; more than one only when running on
      const std::uint64_t t0 = diag.swimlane != 0 ? trace_now_ns() : 0;
      PmuSample sample;
      const bool pmu = run.pmu != 0;
      if (pmu) pmu_start(index, sample);
      c.fault_signal = run_guarded(c);
      if (pmu) pmu_stop(index, c.func_id.load(std::memory_order_relaxed), sample);
      if (diag.swimlane != 0) {
        diag.buffers[static_cast<std::size_t>(kCoreTraceBuffer + index)].push(
            t0, trace_now_ns(), c.running.load(std::memory_order_relaxed), -1, SIMPLER_TRACE_KERNEL,
            c.func_id.load(std::memory_order_relaxed), c.local.block_idx);
      }
      if (!run_on) break;
      // Running on: retire the task here, and run the next ready one of this core's shape (in a
      // chain, the successor this completion just made ready) without a hand-off. Tasks left in
      // the queues (other shapes, more than this core takes) wake the schedulers, once per pass.
      bool pushed = false;
      retire_lane(c, c.running.load(std::memory_order_relaxed), pushed);
      const bool more = take_next(c, pushed);
      if (pushed && any_queued(header())) notify_schedulers();
      if (!more) break;
    }
    const int owner = c.scheduler;
    if (run_on) {
      // Running on, the core retired its tasks itself: it goes idle itself too, so neither its
      // scheduler nor the end of the run waits for a hand-off. Release: whoever dispatches to it
      // next (a CAS on `running`) or sees the run over sees every write of its tasks. After this
      // store the core touches no run state (`owner` was read before it).
      sched.cores_busy.fetch_sub(1, std::memory_order_relaxed);
      c.running.store(SIMPLER_INVALID_TASK_ID, std::memory_order_release);
    }
    // seq_cst: the scheduler's sleep check reads COND with seq_cst after registering.
    c.cond.store(kCondFin | token, std::memory_order_seq_cst);
    sched.wake[owner].notify_all();
  }
}

bool Context::take_next(Core& c, bool& pushed) {
  if (fatal()) return false;
  const bool aic = c.global.core_type == 0;
  ReadyQueue& q = header().queues[static_cast<int>(aic ? Shape::Aic : Shape::Aiv)];
  std::uint64_t id;
  if (!q.pop(id)) return false;
  const std::int32_t b = claim_block(*this, q, id, pushed);
  load_task(c, id, kernel_for(aic, payload_of(id)), b);
  sched.progress.fetch_add(1, std::memory_order_relaxed);  // relaxed: a watchdog heuristic
  return true;
}

void Context::load_task(Core& c, std::uint64_t id, std::int32_t func_id, std::int32_t block_idx) {
  const Payload& p = payload_of(id);
  for (int i = 0; i < p.tensor_count; ++i) {
    c.args[i] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&p.tensors[i]));
  }
  for (int j = 0; j < p.scalar_count; ++j) {
    c.args[p.tensor_count + j] = static_cast<std::int64_t>(p.scalars[j]);
  }
  c.local.block_idx = block_idx;
  c.local.block_num = p.block_num;
  c.local.failed = 0;
  c.local.message[0] = '\0';
  c.fn = life.callables[run.callable].kernels[static_cast<std::size_t>(func_id)];
  c.fault_signal = 0;
  c.func_id.store(func_id, std::memory_order_relaxed);
  c.running.store(id, std::memory_order_relaxed);
  c.started.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

namespace {

/// The next dispatch token of a core: never 0, never one of the reserved register values.
std::uint32_t next_token(Core& c) noexcept {
  for (;;) {
    const std::uint32_t t = ++c.seq & 0x7fffffffU;
    if (t != 0 && t < kRegExit) return t;
  }
}

}  // namespace

void Context::scheduler_main(int index) {
  std::uint64_t seen = 0;
  LaunchPacing pace;
  for (;;) {
    if (!wait_for_launch(sched.wake[index], 1 + index, seen, pace)) return;
    run_scheduler(index);
    pace.ended_ns = trace_now_ns();
    outcome.threads_done.fetch_add(1, std::memory_order_seq_cst);
    outcome.done_event.notify_all();
  }
}

bool Context::claim_core(Core& c, std::uint64_t id) noexcept {
  std::uint64_t idle = SIMPLER_INVALID_TASK_ID;
  // acquire: the core's release store that made it idle (its last task's writes); a failed
  // claim leaves the core to whoever won.
  return c.running.compare_exchange_strong(idle, id, std::memory_order_acquire,
                                           std::memory_order_relaxed);
}

bool Context::dispatch_direct(std::uint64_t id) {
  // Cheapest test first: this runs on every submit whose task is ready at once, and with any
  // core busy the schedulers (or a core running on) will take the task from its queue.
  if (!run.cores_run_on || sched.cores_busy.load(std::memory_order_relaxed) != 0) return false;
  const auto shape = static_cast<Shape>(slot_of(id).shape);
  if (shape == Shape::Mix || fatal()) return false;
  ReadyQueue& q = header().queues[static_cast<int>(shape)];
  if (payload_of(id).block_num != 1 || !q.empty()) return false;
  const std::uint32_t C = config.num_clusters;
  const bool aic = shape == Shape::Aic;
  const std::uint32_t first = aic ? 0 : C;
  const std::uint32_t count = aic ? run.clusters : 2 * run.clusters;
  for (std::uint32_t i = first; i < first + count; ++i) {
    Core& c = threads.cores[i];
    if (c.running.load(std::memory_order_relaxed) != SIMPLER_INVALID_TASK_ID) continue;
    if (!claim_core(c, id)) continue;
    bool pushed = false;  // stays false: the task has one block
    const std::int32_t b = claim_block(*this, q, id, pushed);
    dispatch_lane(c, id, kernel_for(aic, payload_of(id)), b);
    orch.direct.store(orch.direct.load(std::memory_order_relaxed) + 1,
                      std::memory_order_relaxed);  // its only writer
    return true;
  }
  return false;
}

void Context::dispatch_lane(Core& c, std::uint64_t id, std::int32_t func_id,
                            std::int32_t block_idx) {
  const std::uint64_t t0 = diag.swimlane != 0 ? trace_now_ns() : 0;
  c.args[SIMPLER_KERNEL_LOCAL_ARG] =
      static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&c.local));
  c.args[SIMPLER_KERNEL_GLOBAL_ARG] =
      static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&c.global));
  load_task(c, id, func_id, block_idx);
  c.token = next_token(c);
  // relaxed (cores_busy, progress): watchdog heuristics; no data is published through them.
  sched.cores_busy.fetch_add(1, std::memory_order_relaxed);
  // seq_cst: pairs with the core's sleep check (EventCount protocol); also publishes args.
  c.dmb.store(c.token, std::memory_order_seq_cst);
  c.wake.notify_all();
  sched.progress.fetch_add(1, std::memory_order_relaxed);
  if (diag.swimlane != 0) {
    diag.buffers[static_cast<std::size_t>(1 + c.scheduler)].push(
        t0, trace_now_ns(), id, -1, SIMPLER_TRACE_DISPATCH, func_id, block_idx);
  }
}

void Context::finish_core(Core& c, bool& pushed) {
  const std::uint64_t id = c.running.load(std::memory_order_relaxed);
  c.running.store(SIMPLER_INVALID_TASK_ID, std::memory_order_release);
  sched.cores_busy.fetch_sub(1, std::memory_order_relaxed);
  // Running on, the core retired its tasks itself before it answered FIN.
  if (!run.cores_run_on) retire_lane(c, id, pushed);
}

void Context::retire_lane(Core& c, std::uint64_t id, bool& pushed) {
  if (c.fault_signal != 0) {
    latch(SIMPLER_ERR_KERNEL_FAULT,
          fmt::format("kernel func_id {} of task {}:{} faulted with signal {} ({}) at address "
                      "{:#x} on {} core {} (cluster {})",
                      c.func_id.load(), ring_of(id), local_of(id), c.fault_signal,
                      ::strsignal(c.fault_signal), c.fault_addr, core_kind(c), c.global.core_id,
                      c.global.cluster_id));
  } else if (c.local.failed != 0) {
    c.local.message[SIMPLER_KERNEL_MESSAGE_MAX - 1] = '\0';
    latch(SIMPLER_ERR_KERNEL_FAILED,
          fmt::format("kernel func_id {} of task {}:{} on {} core {} (cluster {}) reported "
                      "failure: {}",
                      c.func_id.load(), ring_of(id), local_of(id), core_kind(c), c.global.core_id,
                      c.global.cluster_id, c.local.message));
  }
  if (slot_of(id).lanes_left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (run.dump_tensor && !fatal()) dump_task(id, true);
    const std::uint64_t t0 = diag.swimlane != 0 ? trace_now_ns() : 0;
    complete_task(id, &pushed);
    if (diag.swimlane != 0) {
      diag.buffers[static_cast<std::size_t>(1 + c.scheduler)].push(t0, trace_now_ns(), id, -1,
                                                                   SIMPLER_TRACE_COMPLETE, -1);
    }
  }
}

namespace {

/// One scheduler's run, on its thread: the cores it owns (those of the clusters k with
/// k % schedulers == index), the passes that complete their finished tasks and dispatch ready
/// ones to them, the watchdog, and the sleep between passes.
class SchedulerRun {
 public:
  SchedulerRun(Context& ctx, int index)
      : ctx_(ctx),
        index_(index),
        clusters_total_(ctx.config.num_clusters),
        cores_(ctx.threads.cores.get()),
        q_aic_(ctx.header().queues[static_cast<int>(Shape::Aic)]),
        q_aiv_(ctx.header().queues[static_cast<int>(Shape::Aiv)]),
        q_mix_(ctx.header().queues[static_cast<int>(Shape::Mix)]),
        seen_progress_(ctx.sched.progress.load(std::memory_order_relaxed)),
        last_change_(Clock::now()) {
    const std::uint32_t C = clusters_total_;
    const int nsched = ctx.run.threads - 1;
    for (std::uint32_t k = 0; k < ctx.run.clusters; ++k) {  // block_dim caps the clusters
      if (static_cast<int>(k % static_cast<std::uint32_t>(nsched)) != index) continue;
      clusters_.push_back(k);
      aic_.push_back(k);
      aiv_.push_back(C + 2 * k);
      aiv_.push_back(C + 2 * k + 1);
      all_.insert(all_.end(), {k, C + 2 * k, C + 2 * k + 1});
    }
  }

  /// Passes until the run is over for this scheduler: every task completed, or the run failed
  /// and none of its cores still runs a kernel (or one never returns).
  void run() {
    for (;;) {
      // Tasks this pass made ready are queued without waking anyone: this scheduler dispatches
      // what its idle cores can take and wakes the others only for what is left (in a chain, no
      // wake-up at all).
      bool pushed = false;
      bool did = finish_reported(pushed);
      if (!ctx_.fatal()) did |= dispatch_ready(pushed);
      if (pushed && any_queued()) ctx_.notify_schedulers();
      const bool own_running = any_running();
      if (run_over(own_running)) return;
      if (did) continue;

      const auto now = Clock::now();
      switch (watchdog(now, own_running)) {
        case Watch::Quiet:
          break;
        case Watch::Reported:
          continue;
        case Watch::Broken:
          return;
      }
      // Sleep until there is something to do; wake every 100 ms for the watchdog.
      const std::uint64_t t0 = ctx_.diag.swimlane >= 3 ? trace_now_ns() : 0;
      // While a core of ours runs, spin longer: its FIN (a short kernel, or a short run's
      // last task) then costs no wake-up. Yielding, so the core gets the CPU it needs.
      ctx_.sched.wake[index_].await([this] { return has_work(); },
                                    own_running ? kSchedulerBusySpin : kSchedulerIdleSpin,
                                    now + std::chrono::milliseconds(100));
      if (ctx_.diag.swimlane >= 3) trace_internal(t0, SIMPLER_INVALID_TASK_ID, kSchedIdleWait);
    }
  }

 private:
  enum class Watch { Quiet, Reported, Broken };

  // Core indices: [0, C) AIC, C + 2k and C + 2k + 1 the AIVs of cluster k.
  std::uint32_t aiv0_of(std::uint32_t k) const noexcept { return clusters_total_ + 2 * k; }
  std::uint32_t aiv1_of(std::uint32_t k) const noexcept { return clusters_total_ + 2 * k + 1; }

  // acquire (running): pairs with the release store that made the core idle (see Core).
  bool idle(std::uint32_t core) const noexcept {
    return cores_[core].running.load(std::memory_order_acquire) == SIMPLER_INVALID_TASK_ID;
  }
  /// A core of ours answered FIN and waits for us to finish its task. Never when cores run on:
  /// they go idle themselves (and the orchestrator may be dispatching to one, writing `token`).
  bool finished(std::uint32_t core) const noexcept {
    if (run_on_) return false;
    const Core& c = cores_[core];
    return !idle(core) && c.cond.load(std::memory_order_seq_cst) == (kCondFin | c.token);
  }
  bool any_running() const noexcept {
    bool running = false;
    for (std::uint32_t core : all_) running |= !idle(core);
    return running;
  }
  bool any_queued() const noexcept { return !q_aic_.empty() || !q_aiv_.empty() || !q_mix_.empty(); }
  bool all_completed() const noexcept {
    return ctx_.orch.done.load(std::memory_order_seq_cst) != 0 &&
           ctx_.sched.completed.load(std::memory_order_seq_cst) ==
               ctx_.orch.submitted.load(std::memory_order_seq_cst);
  }
  /// Running on, a core retires its last task before it answers FIN: the run is over for this
  /// scheduler only once its cores answered too (they touch run state until then).
  bool run_over(bool own_running) const noexcept {
    if (ctx_.fatal()) return !own_running;
    return all_completed() && !own_running;
  }

  /// Completes the tasks of the cores that reported FIN. True when there were any.
  bool finish_reported(bool& pushed) {
    bool did = false;
    for (std::uint32_t core : all_) {
      if (finished(core)) {
        ctx_.finish_core(cores_[core], pushed);
        did = true;
      }
    }
    return did;
  }

  /// Dispatches ready tasks to idle cores: MIX first (a MIX task needs every lane it names idle
  /// in one cluster), then AIC, then AIV. True when anything was dispatched.
  bool dispatch_ready(bool& pushed) {
    bool did = dispatch_mix(pushed);
    did |= dispatch_aic(pushed);
    did |= dispatch_aiv(pushed);
    return did;
  }

  std::int32_t claim_block(ReadyQueue& q, std::uint64_t id, bool& pushed) {
    return sim::claim_block(ctx_, q, id, pushed);
  }

  /// A cluster of ours with at least two idle lanes: only then can a MIX task fit.
  bool mix_may_fit() const noexcept {
    for (std::uint32_t k : clusters_) {
      if ((idle(k) ? 1 : 0) + (idle(aiv0_of(k)) ? 1 : 0) + (idle(aiv1_of(k)) ? 1 : 0) >= 2)
        return true;
    }
    return false;
  }
  /// The first cluster of ours whose lanes in `lane_mask` are all idle, or C if none.
  std::uint32_t cluster_for(std::uint8_t lane_mask) const noexcept {
    for (std::uint32_t k : clusters_) {
      if (((lane_mask & 1) == 0 || idle(k)) && ((lane_mask & 2) == 0 || idle(aiv0_of(k))) &&
          ((lane_mask & 4) == 0 || idle(aiv1_of(k)))) {
        return k;
      }
    }
    return clusters_total_;
  }

  /// Claims the lanes in `lane_mask` of cluster k for task `id`, all or none.
  bool claim_lanes(std::uint32_t k, std::uint8_t lane_mask, std::uint64_t id) noexcept {
    const std::uint32_t lanes[3] = {k, aiv0_of(k), aiv1_of(k)};
    for (int l = 0; l < 3; ++l) {
      if ((lane_mask & (1U << l)) == 0) continue;
      if (ctx_.claim_core(cores_[lanes[l]], id)) continue;
      for (int u = 0; u < l; ++u) {  // undo: nothing was dispatched to them yet
        if ((lane_mask & (1U << u)) != 0)
          cores_[lanes[u]].running.store(SIMPLER_INVALID_TASK_ID, std::memory_order_release);
      }
      return false;
    }
    return true;
  }

  bool dispatch_mix(bool& pushed) {
    bool did = false;
    std::uint64_t id;
    while (!q_mix_.empty()) {
      if (!mix_may_fit() || !q_mix_.pop(id)) break;
      trace_pop(id);
      const SlotState& st = ctx_.slot_of(id);
      const std::uint32_t k = cluster_for(st.lane_mask);
      if (k == clusters_total_) {
        q_mix_.push(id);  // no cluster of ours fits it now; another scheduler or a later pass
        break;
      }
      if (!claim_lanes(k, st.lane_mask, id)) {  // the orchestrator took one meanwhile
        q_mix_.push(id);
        break;
      }
      const Payload& p = ctx_.payload_of(id);
      const std::int32_t b = claim_block(q_mix_, id, pushed);  // one cluster per block
      if (st.lane_mask & 1) ctx_.dispatch_lane(cores_[k], id, p.kernels[0], b);
      if (st.lane_mask & 2) ctx_.dispatch_lane(cores_[aiv0_of(k)], id, p.kernels[1], b);
      if (st.lane_mask & 4) ctx_.dispatch_lane(cores_[aiv1_of(k)], id, p.kernels[2], b);
      did = true;
    }
    return did;
  }

  bool dispatch_aic(bool& pushed) {
    bool did = false;
    std::uint64_t id;
    for (std::uint32_t core : aic_) {
      if (!idle(core)) continue;
      if (!q_aic_.pop(id)) break;
      if (!ctx_.claim_core(cores_[core], id)) {  // the orchestrator took it meanwhile
        q_aic_.push(id);
        continue;
      }
      trace_pop(id);
      const std::int32_t b = claim_block(q_aic_, id, pushed);
      ctx_.dispatch_lane(cores_[core], id, ctx_.payload_of(id).kernels[0], b);
      did = true;
    }
    return did;
  }

  bool dispatch_aiv(bool& pushed) {
    bool did = false;
    std::uint64_t id;
    for (std::uint32_t core : aiv_) {
      if (!idle(core)) continue;
      if (!q_aiv_.pop(id)) break;
      if (!ctx_.claim_core(cores_[core], id)) {  // the orchestrator took it meanwhile
        q_aiv_.push(id);
        continue;
      }
      trace_pop(id);
      const Payload& p = ctx_.payload_of(id);
      const std::int32_t b = claim_block(q_aiv_, id, pushed);
      ctx_.dispatch_lane(cores_[core], id, aiv_kernel(p), b);
      did = true;
    }
    return did;
  }

  /// Nothing completed, dispatched or submitted anywhere for scheduler_timeout: one scheduler
  /// reports the stall (the one with a stalled core, else scheduler 0). After a failure, running
  /// kernels get kStuckGrace more to return; one that does not breaks the context.
  Watch watchdog(Clock::time_point now, bool own_running) {
    const auto timeout = ctx_.config.scheduler_timeout;
    const std::uint64_t pv = ctx_.sched.progress.load(std::memory_order_relaxed);
    if (pv != seen_progress_) {
      seen_progress_ = pv;
      last_change_ = now;
      return Watch::Quiet;
    }
    if (now - last_change_ < timeout) return Watch::Quiet;
    // The run already failed; give running kernels a grace period to return.
    if (ctx_.fatal() && now - last_change_ < timeout + kStuckGrace) return Watch::Quiet;
    if (ctx_.fatal()) {
      declare_broken();
      return Watch::Broken;
    }
    if (!ctx_.fatal() && (own_running || (index_ == 0 && ctx_.sched.cores_busy.load(
                                                             std::memory_order_relaxed) == 0))) {
      ctx_.latch(SIMPLER_ERR_SCHEDULER_TIMEOUT, ctx_.stall_report(all_, now));
      last_change_ = now;
      return Watch::Reported;
    }
    return Watch::Quiet;
  }

  /// A kernel has not returned since the run failed: the context cannot be reused.
  void declare_broken() {
    std::lock_guard lk(ctx_.outcome.mu);
    ctx_.outcome.broken.store(true, std::memory_order_seq_cst);
    for (std::uint32_t core : all_) {
      if (!idle(core)) {
        const Core& c = cores_[core];
        ctx_.outcome.broken_reason = fmt::format(
            "kernel func_id {} of task {}:{} on {} core {} never returned [dmb {:#x} cond "
            "{:#x}]",
            c.func_id.load(), ring_of(c.running), local_of(c.running), core_kind(c),
            c.global.core_id, c.dmb.load(), c.cond.load());
      }
    }
  }

  /// The sleep's wake-up condition: a core of ours finished, a ready task fits an idle core of
  /// ours, or the run is over (after a failure: once none of our kernels still runs).
  bool has_work() const noexcept {
    for (std::uint32_t core : all_) {
      if (finished(core)) return true;
    }
    if (ctx_.fatal()) return !any_running();  // wait for our running kernels to return
    bool idle_aic = false, idle_aiv = false, idle_cluster = false;
    for (std::uint32_t core : aic_) idle_aic |= idle(core);
    for (std::uint32_t core : aiv_) idle_aiv |= idle(core);
    for (std::uint32_t k : clusters_) {
      idle_cluster |= idle(k) && idle(aiv0_of(k)) && idle(aiv1_of(k));
    }
    if ((idle_aic && !q_aic_.empty()) || (idle_aiv && !q_aiv_.empty()) ||
        (idle_cluster && !q_mix_.empty())) {
      return true;
    }
    return all_completed() && !any_running();
  }

  /// A scheduler-internals event (swimlane >= 3) on this scheduler's track.
  void trace_internal(std::uint64_t t0, std::uint64_t task, SchedulerOp op) noexcept {
    ctx_.diag.buffers[static_cast<std::size_t>(1 + index_)].push(t0, trace_now_ns(), task, -1,
                                                                 SIMPLER_TRACE_SCHEDULER, op);
  }
  void trace_pop(std::uint64_t task) noexcept {
    if (ctx_.diag.swimlane >= 3) trace_internal(trace_now_ns(), task, kSchedQueuePop);
  }

  Context& ctx_;
  const int index_;
  const bool run_on_ = ctx_.run.cores_run_on;
  const std::uint32_t clusters_total_;  ///< C
  Core* const cores_;
  ReadyQueue& q_aic_;
  ReadyQueue& q_aiv_;
  ReadyQueue& q_mix_;
  std::vector<std::uint32_t> clusters_, aic_, aiv_, all_;  ///< what this scheduler owns
  std::uint64_t seen_progress_;  ///< the watchdog's last look at sched.progress
  Clock::time_point last_change_;
};

}  // namespace

void Context::run_scheduler(int index) {
  SchedulerRun(*this, index).run();
}

std::string Context::stall_report(const std::vector<std::uint32_t>& owned, Clock::time_point now) {
  const auto ms = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  const std::uint64_t sub = orch.submitted.load(std::memory_order_seq_cst);
  const std::uint64_t done = sched.completed.load(std::memory_order_seq_cst);
  const bool orch_finished = orch.done.load(std::memory_order_seq_cst) != 0;
  std::string running;
  for (std::uint32_t core : owned) {
    const Core& c = threads.cores[core];
    if (c.running == SIMPLER_INVALID_TASK_ID) continue;
    running +=
        fmt::format("{}task {}:{} (func_id {}) on {} core {} for {} ms [dmb {:#x} cond {:#x}]",
                    running.empty() ? "" : "; ", ring_of(c.running), local_of(c.running),
                    c.func_id.load(), core_kind(c), c.global.core_id,
                    ms(now - Clock::time_point(Clock::duration(c.started.load()))), c.dmb.load(),
                    c.cond.load());
  }
  const auto head = fmt::format("no progress for {} ms ({} of {} submitted tasks completed{})",
                                config.scheduler_timeout.count(), done, sub,
                                orch_finished ? "" : ", orchestration still running");
  if (!running.empty()) return fmt::format("{}: a kernel does not return: {}", head, running);
  const ArenaHeader& h = header();
  for (const auto& q : h.queues) {
    if (!q.empty()) return fmt::format("{}: tasks are ready but no core takes them", head);
  }
  if (orch_finished) {
    return fmt::format("{}: {} tasks wait for producers that never complete (dependency deadlock)",
                       head, sub - done);
  }
  return fmt::format("{}: the orchestration neither submits nor finishes (blocked or looping?)",
                     head);
}

}  // namespace simpler::sim
