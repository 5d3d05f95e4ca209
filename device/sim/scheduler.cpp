// The device threads: the orchestrator (runs the user's orchestration), the schedulers (complete
// finished tasks, dispatch ready ones to idle cores of the right shape, watch for no progress),
// and the AICore cores (run one kernel per DMB token, answer through COND). Also the fault
// handler that turns a faulting kernel into a failed run.

#include <fmt/format.h>

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
uint32_t op_clusters(simpler_orch_runtime* rt) {
  return ctx_of(rt).config.num_clusters;
}
uint32_t op_aivs(simpler_orch_runtime* rt) {
  return 2 * ctx_of(rt).config.num_clusters;
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

int Context::start_threads() {
  try {
    for (std::uint32_t i = 0; i < threads.core_count; ++i)
      threads.cores[i].thread = std::thread([this, i] { core_main(static_cast<int>(i)); });
    for (int s = 0; s < kMaxAicpuThreads - 1; ++s)
      threads.sched_threads[s] = std::thread([this, s] { scheduler_main(s); });
    threads.orch_thread = std::thread([this] { orchestrator_main(); });
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

bool Context::wait_for_launch(std::uint32_t& seen) {
  threads.launch_event.await(
      [&] {
        return threads.stopping.load(std::memory_order_seq_cst) != 0 ||
               threads.generation.load(std::memory_order_seq_cst) != seen;
      },
      std::chrono::nanoseconds(0), far_future());
  if (threads.stopping.load(std::memory_order_seq_cst) != 0) return false;
  seen = threads.generation.load(std::memory_order_seq_cst);
  return true;
}

void Context::orchestrator_main() {
  std::uint32_t seen = 0;
  for (;;) {
    if (!wait_for_launch(seen)) return;

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
    c.fault_signal = run_guarded(c);
    const int owner = c.scheduler;
    // seq_cst: the scheduler's sleep check reads COND with seq_cst after registering.
    c.cond.store(kCondFin | token, std::memory_order_seq_cst);
    sched.wake[owner].notify_all();
  }
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
  std::uint32_t seen = 0;
  for (;;) {
    if (!wait_for_launch(seen)) return;
    if (index < run.threads - 1) run_scheduler(index);
    outcome.threads_done.fetch_add(1, std::memory_order_seq_cst);
    outcome.done_event.notify_all();
  }
}

void Context::dispatch_lane(Core& c, std::uint64_t id, std::int32_t func_id) {
  const Payload& p = payload_of(id);
  for (int i = 0; i < p.tensor_count; ++i) {
    c.args[i] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&p.tensors[i]));
  }
  for (int j = 0; j < p.scalar_count; ++j) {
    c.args[p.tensor_count + j] = static_cast<std::int64_t>(p.scalars[j]);
  }
  c.args[SIMPLER_KERNEL_LOCAL_ARG] =
      static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&c.local));
  c.args[SIMPLER_KERNEL_GLOBAL_ARG] =
      static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&c.global));
  c.local.block_idx = 0;
  c.local.block_num = 1;
  c.local.failed = 0;
  c.local.message[0] = '\0';
  c.fn = life.callables[run.callable].kernels[static_cast<std::size_t>(func_id)];
  c.fault_signal = 0;
  c.func_id = func_id;
  c.running = id;
  c.started = Clock::now();
  c.token = next_token(c);
  // relaxed (cores_busy, progress): watchdog heuristics; no data is published through them.
  sched.cores_busy.fetch_add(1, std::memory_order_relaxed);
  // seq_cst: pairs with the core's sleep check (EventCount protocol); also publishes args.
  c.dmb.store(c.token, std::memory_order_seq_cst);
  c.wake.notify_all();
  sched.progress.fetch_add(1, std::memory_order_relaxed);
}

void Context::finish_core(Core& c, bool& pushed) {
  const std::uint64_t id = c.running;
  c.running = SIMPLER_INVALID_TASK_ID;
  sched.cores_busy.fetch_sub(1, std::memory_order_relaxed);
  if (c.fault_signal != 0) {
    latch(SIMPLER_ERR_KERNEL_FAULT,
          fmt::format("kernel func_id {} of task {}:{} faulted with signal {} ({}) at address "
                      "{:#x} on {} core {} (cluster {})",
                      c.func_id, ring_of(id), local_of(id), c.fault_signal,
                      ::strsignal(c.fault_signal), c.fault_addr, core_kind(c), c.global.core_id,
                      c.global.cluster_id));
  } else if (c.local.failed != 0) {
    c.local.message[SIMPLER_KERNEL_MESSAGE_MAX - 1] = '\0';
    latch(SIMPLER_ERR_KERNEL_FAILED,
          fmt::format("kernel func_id {} of task {}:{} on {} core {} (cluster {}) reported "
                      "failure: {}",
                      c.func_id, ring_of(id), local_of(id), core_kind(c), c.global.core_id,
                      c.global.cluster_id, c.local.message));
  }
  if (slot_of(id).lanes_left.fetch_sub(1, std::memory_order_acq_rel) == 1)
    complete_task(id, &pushed);
}

void Context::run_scheduler(int s) {
  const int nsched = run.threads - 1;
  const std::uint32_t C = config.num_clusters;
  std::vector<std::uint32_t> clusters, aic, aiv, all;
  for (std::uint32_t k = 0; k < C; ++k) {
    if (static_cast<int>(k % static_cast<std::uint32_t>(nsched)) != s) continue;
    clusters.push_back(k);
    aic.push_back(k);
    aiv.push_back(C + 2 * k);
    aiv.push_back(C + 2 * k + 1);
    all.insert(all.end(), {k, C + 2 * k, C + 2 * k + 1});
  }
  ArenaHeader& h = header();
  ReadyQueue& q_aic = h.queues[static_cast<int>(Shape::Aic)];
  ReadyQueue& q_aiv = h.queues[static_cast<int>(Shape::Aiv)];
  ReadyQueue& q_mix = h.queues[static_cast<int>(Shape::Mix)];
  auto idle = [this](std::uint32_t core) {
    return threads.cores[core].running == SIMPLER_INVALID_TASK_ID;
  };
  auto finished = [this](std::uint32_t core) {
    const Core& c = threads.cores[core];
    return c.running != SIMPLER_INVALID_TASK_ID &&
           c.cond.load(std::memory_order_seq_cst) == (kCondFin | c.token);
  };

  std::uint64_t seen_progress = sched.progress.load(std::memory_order_relaxed);
  auto last_change = Clock::now();
  for (;;) {
    bool did = false;
    // Tasks this pass made ready are queued without waking anyone: this scheduler dispatches
    // what its idle cores can take and wakes the others only for what is left (in a chain, no
    // wake-up at all).
    bool pushed = false;
    for (std::uint32_t core : all) {
      if (finished(core)) {
        finish_core(threads.cores[core], pushed);
        did = true;
      }
    }
    if (!fatal()) {
      // MIX first: a MIX task needs every lane it names idle in one cluster.
      std::uint64_t id;
      while (!q_mix.empty()) {
        std::uint32_t free_cluster = C;
        bool any_candidate = false;
        for (std::uint32_t k : clusters) {
          if ((idle(k) ? 1 : 0) + (idle(C + 2 * k) ? 1 : 0) + (idle(C + 2 * k + 1) ? 1 : 0) >= 2) {
            any_candidate = true;
            break;
          }
        }
        if (!any_candidate || !q_mix.pop(id)) break;
        const SlotState& st = slot_of(id);
        for (std::uint32_t k : clusters) {
          const bool ok = ((st.lane_mask & 1) == 0 || idle(k)) &&
                          ((st.lane_mask & 2) == 0 || idle(C + 2 * k)) &&
                          ((st.lane_mask & 4) == 0 || idle(C + 2 * k + 1));
          if (ok) {
            free_cluster = k;
            break;
          }
        }
        if (free_cluster == C) {
          q_mix.push(id);  // no cluster of ours fits it now; another scheduler or a later pass
          break;
        }
        const Payload& p = payload_of(id);
        if (st.lane_mask & 1) dispatch_lane(threads.cores[free_cluster], id, p.kernels[0]);
        if (st.lane_mask & 2) dispatch_lane(threads.cores[C + 2 * free_cluster], id, p.kernels[1]);
        if (st.lane_mask & 4)
          dispatch_lane(threads.cores[C + 2 * free_cluster + 1], id, p.kernels[2]);
        did = true;
      }
      for (std::uint32_t core : aic) {
        if (!idle(core)) continue;
        if (!q_aic.pop(id)) break;
        dispatch_lane(threads.cores[core], id, payload_of(id).kernels[0]);
        did = true;
      }
      for (std::uint32_t core : aiv) {
        if (!idle(core)) continue;
        if (!q_aiv.pop(id)) break;
        const Payload& p = payload_of(id);
        dispatch_lane(threads.cores[core], id, p.kernels[1] >= 0 ? p.kernels[1] : p.kernels[2]);
        did = true;
      }
    }
    if (pushed && (!q_aic.empty() || !q_aiv.empty() || !q_mix.empty())) notify_schedulers();
    bool own_running = false;
    for (std::uint32_t core : all) own_running |= !idle(core);
    if (fatal()) {
      if (!own_running) break;
    } else if (orch.done.load(std::memory_order_seq_cst) != 0 &&
               sched.completed.load(std::memory_order_seq_cst) ==
                   orch.submitted.load(std::memory_order_seq_cst)) {
      break;
    }
    if (did) continue;

    // Watchdog: nothing completed, dispatched or submitted anywhere for scheduler_timeout.
    const auto now = Clock::now();
    const std::uint64_t pv = sched.progress.load(std::memory_order_relaxed);
    if (pv != seen_progress) {
      seen_progress = pv;
      last_change = now;
    } else if (now - last_change >= config.scheduler_timeout) {
      if (fatal() && now - last_change < config.scheduler_timeout + kStuckGrace) {
        // The run already failed; give running kernels a grace period to return.
      } else if (fatal()) {
        // A kernel has not returned since the run failed: the context cannot be reused.
        std::lock_guard lk(outcome.mu);
        outcome.broken.store(true, std::memory_order_seq_cst);
        for (std::uint32_t core : all) {
          if (!idle(core)) {
            const Core& c = threads.cores[core];
            outcome.broken_reason = fmt::format(
                "kernel func_id {} of task {}:{} on {} core {} never returned [dmb {:#x} cond "
                "{:#x}]",
                c.func_id, ring_of(c.running), local_of(c.running), core_kind(c), c.global.core_id,
                c.dmb.load(), c.cond.load());
          }
        }
        break;
      }
      // One scheduler reports: the one with a stalled core, else scheduler 0.
      if (!fatal() &&
          (own_running || (s == 0 && sched.cores_busy.load(std::memory_order_relaxed) == 0))) {
        latch(SIMPLER_ERR_SCHEDULER_TIMEOUT, stall_report(all, now));
        last_change = now;
        continue;
      }
    }
    // Sleep until there is something to do; wake every 100 ms for the watchdog.
    sched.wake[s].await(
        [&] {
          for (std::uint32_t core : all) {
            if (finished(core)) return true;
          }
          if (fatal()) {
            for (std::uint32_t core : all) {
              if (!idle(core)) return false;  // wait for our running kernels to return
            }
            return true;
          }
          bool idle_aic = false, idle_aiv = false, idle_cluster = false;
          for (std::uint32_t core : aic) idle_aic |= idle(core);
          for (std::uint32_t core : aiv) idle_aiv |= idle(core);
          for (std::uint32_t k : clusters) {
            idle_cluster |= idle(k) && idle(C + 2 * k) && idle(C + 2 * k + 1);
          }
          if ((idle_aic && !q_aic.empty()) || (idle_aiv && !q_aiv.empty()) ||
              (idle_cluster && !q_mix.empty())) {
            return true;
          }
          return orch.done.load(std::memory_order_seq_cst) != 0 &&
                 sched.completed.load(std::memory_order_seq_cst) ==
                     orch.submitted.load(std::memory_order_seq_cst);
        },
        std::chrono::microseconds(20), now + std::chrono::milliseconds(100));
  }
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
    running += fmt::format(
        "{}task {}:{} (func_id {}) on {} core {} for {} ms [dmb {:#x} cond {:#x}]",
        running.empty() ? "" : "; ", ring_of(c.running), local_of(c.running), c.func_id,
        core_kind(c), c.global.core_id, ms(now - c.started), c.dmb.load(), c.cond.load());
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
