// Context lifecycle: init (threads), device memory, callable registration (dlopen once), and
// the phases of a run (prepare, launch, wait, finalize).

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>

#include "run_files.hpp"
#include "sim.hpp"

namespace simpler::sim {

namespace {

bool is_pow2(std::uint64_t v) noexcept {
  return v != 0 && (v & (v - 1)) == 0;
}

std::uint64_t pow2_at_least(std::uint64_t v) noexcept {
  std::uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

std::string dl_error() {
  const char* e = ::dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

}  // namespace

Context::Context() = default;

Context::~Context() {
  if (life.initialised && !life.finalised) static_cast<void>(finalize());
}

int Context::fail(int status, std::string message) {
  life.last_error = std::move(message);
  return status;
}

void Context::latch(int status, std::string message) {
  int expected = 0;
  if (outcome.status.compare_exchange_strong(expected, status, std::memory_order_seq_cst)) {
    std::lock_guard lk(outcome.mu);
    outcome.message = std::move(message);
  }
  notify_schedulers();
  notify_progress();
  outcome.done_event.notify_all();
}

int Context::init(std::int32_t id, const simpler_init_options* opts) {
  if (life.finalised)
    return fail(SIMPLER_ERR_FINALISED, "the context was finalised; create a new one");
  if (life.initialised) {
    return fail(SIMPLER_ERR_ALREADY_INITIALISED,
                fmt::format("the context is already initialised on device {}", config.device_id));
  }
  if (id < 0) {
    return fail(SIMPLER_ERR_INVALID_ARGUMENT,
                fmt::format("device id {} is negative; device ids start at 0", id));
  }
  simpler_init_options o{};
  if (opts != nullptr && opts->struct_size != 0) {
    // ABI 2's options end before `hazards`: such a caller gets the default for it.
    constexpr std::size_t kAbi2Size = offsetof(simpler_init_options, hazards);
    if (opts->struct_size < kAbi2Size) {
      return fail(SIMPLER_ERR_INVALID_ARGUMENT,
                  fmt::format("simpler_init_options.struct_size is {}; expected {} (or {} from a "
                              "host built against device ABI 2)",
                              opts->struct_size, sizeof(simpler_init_options), kAbi2Size));
    }
    std::memcpy(&o, opts, std::min<std::size_t>(opts->struct_size, sizeof o));
  }
  if (o.hazards != SIMPLER_HAZARDS_ALL && o.hazards != SIMPLER_HAZARDS_READ_AFTER_WRITE) {
    return fail(SIMPLER_ERR_INVALID_ARGUMENT,
                fmt::format("simpler_init_options.hazards is {}; expected {} (all hazards) or {} "
                            "(read after write only)",
                            o.hazards, SIMPLER_HAZARDS_ALL, SIMPLER_HAZARDS_READ_AFTER_WRITE));
  }
  if (o.num_clusters > static_cast<std::uint32_t>(kMaxClusters)) {
    return fail(SIMPLER_ERR_INVALID_ARGUMENT,
                fmt::format("num_clusters {} is more than this simulator's {}", o.num_clusters,
                            kMaxClusters));
  }
  if (o.aicpu_thread_num != 0 &&
      (o.aicpu_thread_num < 2 || o.aicpu_thread_num > kMaxAicpuThreads)) {
    return fail(SIMPLER_ERR_INVALID_ARGUMENT,
                fmt::format("aicpu_thread_num {} must be 0 (default) or 2..{} (one orchestrator "
                            "plus schedulers)",
                            o.aicpu_thread_num, kMaxAicpuThreads));
  }
  config.device_id = id;
  if (o.num_clusters != 0) config.num_clusters = o.num_clusters;
  if (o.aicpu_thread_num != 0) config.default_aicpu_threads = o.aicpu_thread_num;
  if (o.scheduler_timeout_ms != 0)
    config.scheduler_timeout = std::chrono::milliseconds(o.scheduler_timeout_ms);
  if (o.resource_wait_ms != 0) config.resource_wait = std::chrono::milliseconds(o.resource_wait_ms);
  if (o.tensor_wait_ms != 0) config.tensor_wait = std::chrono::milliseconds(o.tensor_wait_ms);
  config.all_hazards = o.hazards == SIMPLER_HAZARDS_ALL;

  install_fault_handler();
  threads.core_count = 3 * config.num_clusters;
  threads.cores = std::make_unique<Core[]>(threads.core_count);
  for (std::uint32_t k = 0; k < config.num_clusters; ++k) {
    Core& aic = threads.cores[k];
    aic.global = {0, static_cast<std::int32_t>(k), 0, static_cast<std::int32_t>(k)};
    for (std::uint32_t sub = 0; sub < 2; ++sub) {
      const std::uint32_t idx = config.num_clusters + 2 * k + sub;
      threads.cores[idx].global = {static_cast<std::int32_t>(sub), static_cast<std::int32_t>(idx),
                                   1, static_cast<std::int32_t>(k)};
    }
  }
  run.orch_rt.base.ops = orch_ops();
  run.orch_rt.ctx = this;
  if (const int rc = start_threads(); rc != SIMPLER_OK) return rc;
  life.initialised = true;
  return SIMPLER_OK;
}

int Context::finalize() {
  if (life.finalised) return SIMPLER_OK;
  drain();
  if (!life.initialised) {
    life.finalised = true;
    return SIMPLER_OK;
  }
  if (life.phase == Phase::Running) static_cast<void>(wait_run());
  if (life.phase != Phase::Idle) static_cast<void>(finalize_run());
  stop_threads();
  for (int id = 0; id < kMaxCallables; ++id) {
    if (life.callables[id].registered) static_cast<void>(unregister_callable(id));
  }
  life.finalised = true;
  // A thread stuck in user code still reads the arena, task memory and device buffers when it
  // returns: a broken context keeps them (and itself, see simpler_destroy_context).
  if (outcome.broken.load()) return SIMPLER_OK;
  release_arena();
  std::lock_guard lk(memory.mu);
  for (auto& [p, n] : memory.blocks) std::free(p);
  memory.blocks.clear();
  memory.committed = 0;
  return SIMPLER_OK;
}

void* Context::device_malloc(std::size_t bytes) {
  if (!life.initialised || life.finalised) {
    fail(life.finalised ? SIMPLER_ERR_FINALISED : SIMPLER_ERR_NOT_INITIALISED,
         "device_malloc needs an initialised context");
    return nullptr;
  }
  // Rounding up to the 1024-byte alignment must not wrap (it once turned a request for nearly
  // SIZE_MAX bytes into a 1024-byte block).
  void* p = nullptr;
  std::size_t rounded = 0;
  if (bytes <= std::numeric_limits<std::size_t>::max() - 1023) {
    rounded = std::max<std::size_t>((bytes + 1023) / 1024 * 1024, 1024);
    p = std::aligned_alloc(1024, rounded);
  }
  if (p == nullptr) {
    fail(SIMPLER_ERR_OUT_OF_MEMORY,
         fmt::format("cannot allocate {} bytes of device memory", bytes));
    return nullptr;
  }
  std::lock_guard lk(memory.mu);
  memory.blocks.emplace_back(p, rounded);
  memory.committed += rounded;
  return p;
}

int Context::device_free(void* p) {
  if (p == nullptr) return SIMPLER_OK;
  std::lock_guard lk(memory.mu);
  const auto it = std::find_if(memory.blocks.begin(), memory.blocks.end(),
                               [p](const auto& b) { return b.first == p; });
  if (it == memory.blocks.end()) {
    return fail(
        SIMPLER_ERR_INVALID_ARGUMENT,
        fmt::format("device_free: {} was not returned by device_malloc on this context", p));
  }
  memory.committed -= it->second;
  std::free(it->first);
  memory.blocks.erase(it);
  return SIMPLER_OK;
}

namespace {

/// The context can take a registration under `id`.
int check_can_register(Context& ctx, std::int32_t id) {
  if (ctx.life.finalised) return ctx.fail(SIMPLER_ERR_FINALISED, "the context was finalised");
  if (!ctx.life.initialised)
    return ctx.fail(SIMPLER_ERR_NOT_INITIALISED, "call simpler_init before registering");
  if (ctx.life.phase != Phase::Idle) {
    return ctx.fail(SIMPLER_ERR_RUN_ACTIVE,
                    "cannot register a callable while a run is in progress");
  }
  if (id < 0 || id >= kMaxCallables) {
    return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                    fmt::format("callable id {} is outside 0..{}", id, kMaxCallables - 1));
  }
  if (ctx.life.callables[id].registered) {
    return ctx.fail(
        SIMPLER_ERR_DUPLICATE_CALLABLE,
        fmt::format("callable id {} is already registered (from {}); unregister it first or "
                    "use another id",
                    id, ctx.life.callables[id].orch_path));
  }
  return SIMPLER_OK;
}

/// The descriptor names an orchestration and a valid kernel table (func_ids in range and
/// distinct, every kernel with a path).
int check_callable_desc(Context& ctx, const simpler_chip_callable_desc* d) {
  if (d == nullptr || d->orch_path == nullptr || d->orch_path[0] == '\0') {
    return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT, "the chip callable has no orchestration path");
  }
  if (d->struct_size < sizeof(simpler_chip_callable_desc)) {
    return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                    fmt::format("simpler_chip_callable_desc.struct_size is {}; expected {}",
                                d->struct_size, sizeof(simpler_chip_callable_desc)));
  }
  if (d->kernel_count > 0 && d->kernels == nullptr) {
    return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT, "kernel_count is set but kernels is NULL");
  }
  for (std::uint32_t i = 0; i < d->kernel_count; ++i) {
    const simpler_kernel_desc& k = d->kernels[i];
    if (k.func_id < 0 || k.func_id >= SIMPLER_MAX_FUNC_ID) {
      return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                      fmt::format("kernel {} has func_id {}; func_ids are 0..{}", i, k.func_id,
                                  SIMPLER_MAX_FUNC_ID - 1));
    }
    if (k.path == nullptr || k.path[0] == '\0') {
      return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                      fmt::format("kernel func_id {} has no path", k.func_id));
    }
    for (std::uint32_t j = 0; j < i; ++j) {
      if (d->kernels[j].func_id == k.func_id) {
        return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                        fmt::format("func_id {} appears twice in the kernel table", k.func_id));
      }
    }
  }
  return SIMPLER_OK;
}

/// Closes every module `c` has open.
void unload(Callable& c) noexcept {
  for (void* h : c.kernel_handles) ::dlclose(h);
  if (c.orch_handle != nullptr) ::dlclose(c.orch_handle);
}

/// Loads the orchestration of `d` and resolves its entry point (and expected argument count).
int load_orchestration(Context& ctx, const simpler_chip_callable_desc& d, Callable& c) {
  c.orch_path = d.orch_path;
  c.orch_handle = ::dlopen(d.orch_path, RTLD_NOW | RTLD_LOCAL);
  if (c.orch_handle == nullptr) {
    return ctx.fail(SIMPLER_ERR_LOAD_FAILED,
                    fmt::format("cannot load the orchestration {}: {}", d.orch_path, dl_error()));
  }
  const char* entry = d.orch_entry != nullptr ? d.orch_entry : "aicpu_orchestration_entry";
  c.entry = reinterpret_cast<simpler_orch_entry_fn>(::dlsym(c.orch_handle, entry));
  if (c.entry == nullptr) {
    unload(c);
    return ctx.fail(SIMPLER_ERR_LOAD_FAILED,
                    fmt::format("the orchestration {} does not export {}", d.orch_path, entry));
  }
  if (auto* f = reinterpret_cast<simpler_orch_expected_args_fn>(
          ::dlsym(c.orch_handle, "aicpu_orchestration_expected_args"))) {
    c.expected_args = f();
  }
  return SIMPLER_OK;
}

/// A kernel's name in traces and the DAG: its file name without "lib" and ".so" (.../kernel_add.so
/// is "kernel_add"), with ":symbol" when the symbol is not kernel_entry.
std::string kernel_name(const char* path, const char* symbol) {
  std::string n = path;
  if (const auto slash = n.rfind('/'); slash != std::string::npos) n.erase(0, slash + 1);
  if (n.rfind("lib", 0) == 0) n.erase(0, 3);
  if (const auto dot = n.find(".so"); dot != std::string::npos) n.erase(dot);
  if (std::strcmp(symbol, "kernel_entry") != 0) n += std::string(":") + symbol;
  return n;
}

/// Loads every kernel of `d` into `c.kernels` (by func_id). On failure, unloads everything `c`
/// loaded, the orchestration included.
int load_kernels(Context& ctx, const simpler_chip_callable_desc& d, Callable& c) {
  for (std::uint32_t i = 0; i < d.kernel_count; ++i) {
    const simpler_kernel_desc& k = d.kernels[i];
    void* h = ::dlopen(k.path, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const std::string why = dl_error();
      unload(c);
      return ctx.fail(
          SIMPLER_ERR_LOAD_FAILED,
          fmt::format("cannot load kernel func_id {} from {}: {}", k.func_id, k.path, why));
    }
    c.kernel_handles.push_back(h);
    const char* sym = k.symbol != nullptr ? k.symbol : "kernel_entry";
    auto* fn = reinterpret_cast<simpler_kernel_fn>(::dlsym(h, sym));
    if (fn == nullptr) {
      unload(c);
      return ctx.fail(
          SIMPLER_ERR_LOAD_FAILED,
          fmt::format("kernel func_id {} ({}) does not export {}", k.func_id, k.path, sym));
    }
    c.kernels[static_cast<std::size_t>(k.func_id)] = fn;
    c.kernel_names[static_cast<std::size_t>(k.func_id)] = kernel_name(k.path, sym);
  }
  return SIMPLER_OK;
}

}  // namespace

int Context::register_callable(std::int32_t id, const simpler_chip_callable_desc* d) {
  drain();
  if (const int rc = check_can_register(*this, id); rc != SIMPLER_OK) return rc;
  if (const int rc = check_callable_desc(*this, d); rc != SIMPLER_OK) return rc;
  Callable c;
  c.kernels.assign(SIMPLER_MAX_FUNC_ID, nullptr);
  c.kernel_names.assign(SIMPLER_MAX_FUNC_ID, std::string());
  if (const int rc = load_orchestration(*this, *d, c); rc != SIMPLER_OK) return rc;
  if (const int rc = load_kernels(*this, *d, c); rc != SIMPLER_OK) return rc;
  c.registered = true;
  ++counters.orch_loads;
  counters.kernel_loads += d->kernel_count;
  life.callables[id] = std::move(c);
  return SIMPLER_OK;
}

int Context::unregister_callable(std::int32_t id) {
  drain();
  if (!life.initialised) return fail(SIMPLER_ERR_NOT_INITIALISED, "call simpler_init first");
  if (life.phase != Phase::Idle) {
    return fail(SIMPLER_ERR_RUN_ACTIVE, "cannot unregister a callable while a run is in progress");
  }
  if (id < 0 || id >= kMaxCallables || !life.callables[id].registered) {
    return fail(SIMPLER_ERR_UNKNOWN_CALLABLE, fmt::format("callable id {} is not registered", id));
  }
  Callable& c = life.callables[id];
  // After a kernel got stuck its code may still be running: keep every module mapped.
  if (!outcome.broken.load()) {
    for (void* h : c.kernel_handles) ::dlclose(h);
    ::dlclose(c.orch_handle);
  }
  c = Callable{};
  return SIMPLER_OK;
}

namespace {

/// The context can prepare a run: initialised, not finalised or broken, no run in progress.
int check_can_prepare(Context& ctx) {
  if (ctx.life.finalised)
    return ctx.fail(SIMPLER_ERR_FINALISED, "the context was finalised; create a new one");
  if (!ctx.life.initialised)
    return ctx.fail(SIMPLER_ERR_NOT_INITIALISED, "call simpler_init before running");
  if (ctx.outcome.broken.load()) {
    std::lock_guard lk(ctx.outcome.mu);
    return ctx.fail(SIMPLER_ERR_CONTEXT_BROKEN,
                    fmt::format("the context is unusable: {}; destroy it and create a new one",
                                ctx.outcome.broken_reason));
  }
  if (ctx.life.phase != Phase::Idle) {
    return ctx.fail(SIMPLER_ERR_RUN_ACTIVE,
                    "a run is already prepared or in progress on this context");
  }
  return SIMPLER_OK;
}

/// Callable `id` is registered; the message of a failure lists those that are.
int check_registered(Context& ctx, std::int32_t id) {
  if (id >= 0 && id < kMaxCallables && ctx.life.callables[id].registered) return SIMPLER_OK;
  std::string known;
  for (int i = 0; i < kMaxCallables; ++i) {
    if (ctx.life.callables[i].registered)
      known += fmt::format("{}{}", known.empty() ? "" : ", ", i);
  }
  return ctx.fail(SIMPLER_ERR_UNKNOWN_CALLABLE,
                  fmt::format("callable id {} is not registered (registered: {})", id,
                              known.empty() ? "none" : known));
}

/// The run passes `tc` tensors and `sc` scalars within the limits, with arrays, and at least
/// as many as callable `id` expects.
int check_arg_counts(Context& ctx, std::int32_t id, const simpler_task_args* args, std::int32_t tc,
                     std::int32_t sc) {
  if (tc < 0 || sc < 0 || tc > 256 || sc > 128 || (tc > 0 && args->tensors == nullptr) ||
      (sc > 0 && args->scalars == nullptr)) {
    return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                    fmt::format("the run has {} tensors and {} scalars; a run takes 0..256 "
                                "tensors and 0..128 scalars (with non-NULL arrays)",
                                tc, sc));
  }
  const std::int32_t expected = ctx.life.callables[id].expected_args;
  if (expected > 0 && tc + sc < expected) {
    return ctx.fail(SIMPLER_ERR_ARG_COUNT,
                    fmt::format("callable {} expects {} arguments (tensors + scalars) but the "
                                "run passes {}",
                                id, expected, tc + sc));
  }
  return SIMPLER_OK;
}

/// The run's `tc` host tensors as the chip tensors the orchestration receives, each checked.
int convert_run_tensors(Context& ctx, const simpler_task_args* args, std::int32_t tc,
                        std::vector<simpler_chip_tensor>& out) {
  out.resize(static_cast<std::size_t>(tc));
  for (std::int32_t i = 0; i < tc; ++i) {
    const simpler_tensor& t = args->tensors[i];
    if (t.ndims < 1 || t.ndims > 5 || simpler_dtype_size(t.dtype) == 0 || t.data == 0) {
      return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                      fmt::format("run tensor {} is invalid (ndims {}, dtype {}, data {:#x})", i,
                                  t.ndims, t.dtype, t.data));
    }
    simpler_chip_tensor& c = out[static_cast<std::size_t>(i)];
    c = simpler_chip_tensor{};
    c.addr = t.data;
    c.offset = 0;
    c.owner_task = SIMPLER_INVALID_TASK_ID;
    std::memcpy(c.shapes, t.shapes, sizeof c.shapes);
    c.ndims = t.ndims;
    c.dtype = t.dtype;
    // Orchestrations compute views and reads of run tensors from their size: it must not wrap.
    std::uint64_t bytes = 0;
    if (!tensor_bytes(c, bytes) || !fits(c.addr, bytes)) {
      return ctx.fail(
          SIMPLER_ERR_INVALID_ARGUMENT,
          fmt::format("run tensor {} (shape {}) is invalid, more than "
                      "SIMPLER_MAX_TENSOR_BYTES ({}) bytes, or runs past the end of "
                      "the address space",
                      i, shape_text(t.shapes, t.ndims, t.dtype), SIMPLER_MAX_TENSOR_BYTES));
    }
  }
  return SIMPLER_OK;
}

/// Ring `r`'s window, heap and dependency pool from the config (0 or no config: the default),
/// each checked against its bounds.
int ring_sizing(Context& ctx, const simpler_run_config* cfg, int r, Sizing& s) {
  const bool have_cfg = cfg != nullptr;
  s.window[r] =
      have_cfg && cfg->ring_task_window[r] != 0 ? cfg->ring_task_window[r] : kDefaultWindow;
  s.heap[r] = have_cfg && cfg->ring_heap[r] != 0 ? cfg->ring_heap[r] : kDefaultHeap;
  s.dep_pool[r] = have_cfg && cfg->ring_dep_pool[r] != 0 ? cfg->ring_dep_pool[r] : 4 * s.window[r];
  if (!is_pow2(s.window[r]) || s.window[r] < 4 || s.window[r] > (std::uint64_t{1} << 20)) {
    return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                    fmt::format("ring_task_window[{}] is {}; it must be a power of two in [4, "
                                "1048576]",
                                r, s.window[r]));
  }
  // Upper bounds too: the arena and heap sizes are products and sums of these, and a value
  // near 2^64 once wrapped them to a few bytes while the ring still believed its own size.
  if (s.heap[r] < 1024 || s.heap[r] > kMaxRingHeap) {
    return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                    fmt::format("ring_heap[{}] is {} bytes; it must be in [1024, {}]", r, s.heap[r],
                                kMaxRingHeap));
  }
  if (s.dep_pool[r] < 4 || s.dep_pool[r] > kMaxDepPool) {
    return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                    fmt::format("ring_dep_pool[{}] is {}; it must be in [4, {}]", r, s.dep_pool[r],
                                kMaxDepPool));
  }
  return SIMPLER_OK;
}

/// What the run config resolves to: the AICPU threads of the run (`threads` holds the context
/// default on entry) and the arena sizing.
int resolve_run_config(Context& ctx, const simpler_run_config* cfg, int& threads, Sizing& s) {
  if (cfg != nullptr && cfg->struct_size != 0 && cfg->struct_size < sizeof(simpler_run_config)) {
    return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                    fmt::format("simpler_run_config.struct_size is {}; expected {}",
                                cfg->struct_size, sizeof(simpler_run_config)));
  }
  if (cfg != nullptr && cfg->struct_size == 0) cfg = nullptr;  // all defaults
  if (cfg != nullptr && cfg->aicpu_thread_num != 0) {
    if (cfg->aicpu_thread_num < 2 || cfg->aicpu_thread_num > kMaxAicpuThreads) {
      return ctx.fail(SIMPLER_ERR_INVALID_ARGUMENT,
                      fmt::format("aicpu_thread_num {} must be 0 (default) or 2..{}",
                                  cfg->aicpu_thread_num, kMaxAicpuThreads));
    }
    threads = cfg->aicpu_thread_num;
  }
  std::uint64_t total_window = 0;
  for (int r = 0; r < kRings; ++r) {
    if (const int rc = ring_sizing(ctx, cfg, r, s); rc != SIMPLER_OK) return rc;
    total_window += s.window[r];
  }
  s.tensormap_entries = std::max<std::uint64_t>(4096, 2 * total_window);
  s.tensormap_buckets = std::max<std::uint64_t>(1024, pow2_at_least(total_window));
  return SIMPLER_OK;
}

}  // namespace

int Context::prepare_run(std::int32_t id, const simpler_task_args* args,
                         const simpler_run_config* cfg) {
  drain();
  if (const int rc = check_can_prepare(*this); rc != SIMPLER_OK) return rc;
  if (const int rc = check_registered(*this, id); rc != SIMPLER_OK) return rc;
  const std::int32_t tc = args != nullptr ? args->tensor_count : 0;
  const std::int32_t sc = args != nullptr ? args->scalar_count : 0;
  if (const int rc = check_arg_counts(*this, id, args, tc, sc); rc != SIMPLER_OK) return rc;
  std::vector<simpler_chip_tensor> tensors;
  if (const int rc = convert_run_tensors(*this, args, tc, tensors); rc != SIMPLER_OK) return rc;
  int aicpu_threads = config.default_aicpu_threads;
  Sizing s{};
  if (const int rc = resolve_run_config(*this, cfg, aicpu_threads, s); rc != SIMPLER_OK) return rc;
  if (const int rc = diag_prepare(*this, cfg); rc != SIMPLER_OK) return rc;
  if (const int rc = ensure_arena(s); rc != SIMPLER_OK) return rc;

  const std::int32_t block_dim = cfg != nullptr && cfg->struct_size != 0 ? cfg->block_dim : 0;
  if (block_dim < 0 || static_cast<std::uint32_t>(block_dim) > config.num_clusters) {
    return fail(SIMPLER_ERR_INVALID_ARGUMENT,
                fmt::format("block_dim {} is outside 0..{}: it is the number of clusters the run "
                            "may use (0 = all {} clusters of device {})",
                            block_dim, config.num_clusters, config.num_clusters, config.device_id));
  }
  run.callable = id;
  if (const int rc = prepare_diagnostics(cfg); rc != SIMPLER_OK) return rc;
  run.clusters = block_dim == 0 ? config.num_clusters : static_cast<std::uint32_t>(block_dim);
  run.threads = aicpu_threads;
  run.tensors = std::move(tensors);
  run.scalars.assign(args != nullptr && sc > 0 ? args->scalars : nullptr,
                     args != nullptr && sc > 0 ? args->scalars + sc : nullptr);
  life.phase = Phase::Prepared;
  return SIMPLER_OK;
}

int Context::launch_run() {
  if (life.phase != Phase::Prepared) {
    return fail(SIMPLER_ERR_NO_RUN, life.phase == Phase::Idle
                                        ? "launch_run needs a prepared run (call prepare_run)"
                                        : "the run was already launched");
  }
  install_fault_handler();
  boot();
  diag_launch(*this);
  // relaxed: the device threads are asleep; the seq_cst launch-word store below publishes these.
  outcome.status.store(0, std::memory_order_relaxed);
  {
    std::lock_guard lk(outcome.mu);
    outcome.message.clear();
  }
  orch.done.store(0, std::memory_order_relaxed);
  orch.submitted.store(0, std::memory_order_relaxed);
  orch.direct.store(0, std::memory_order_relaxed);
  sched.completed.store(0, std::memory_order_relaxed);
  outcome.threads_done.store(0, std::memory_order_relaxed);
  sched.cores_busy.store(0, std::memory_order_relaxed);
  const int nsched = run.threads - 1;
  for (std::uint32_t k = 0; k < config.num_clusters; ++k) {
    const int s = static_cast<int>(k % static_cast<std::uint32_t>(nsched));
    threads.cores[k].scheduler = s;
    threads.cores[config.num_clusters + 2 * k].scheduler = s;
    threads.cores[config.num_clusters + 2 * k + 1].scheduler = s;
  }
  // Traces, dumps and counters record per scheduler: with any of them on, cores hand every
  // finished task back to their scheduler.
  run.cores_run_on = diag.swimlane == 0 && !run.dump_tensor && run.pmu == 0;
  threads.launched_ns.store(trace_now_ns(), std::memory_order_relaxed);
  // seq_cst: the device threads' launch check reads the word with seq_cst after registering.
  // Only this thread writes it. The schedulers the run does not use are not woken.
  const std::uint64_t runs = launch_count(threads.launch_word.load(std::memory_order_relaxed));
  threads.launch_word.store(
      ((runs + 1) << kLaunchThreadBits) | static_cast<std::uint64_t>(run.threads),
      std::memory_order_seq_cst);
  threads.launch_event.notify_all();
  notify_schedulers();
  life.phase = Phase::Running;
  return SIMPLER_OK;
}

int Context::wait_run() {
  if (life.phase == Phase::Finished) return SIMPLER_OK;
  if (life.phase != Phase::Running) {
    return fail(SIMPLER_ERR_NO_RUN, "wait_run needs a launched run (prepare_run, launch_run)");
  }
  // The orchestrator and the run's schedulers (the others sit the run out).
  const auto in_run = static_cast<std::uint32_t>(run.threads);
  // A run without diagnostics (the schedulers and cores record those after the tasks) has its
  // result once the orchestration returned and every task completed without an error: return
  // then, while the device threads still leave the run (drain() waits for them before anything
  // they read changes). The host's own work after a run (a lane's reply, the caller's next
  // step) then overlaps the hand-offs from the last core to every scheduler and back, ~5 us on
  // a one-task run; runs called back to back with nothing in between pay them in the drain.
  const bool early = run.cores_run_on && !diag.dep_gen;
  auto all_done = [this, early, in_run] {
    if (outcome.threads_done.load(std::memory_order_seq_cst) == in_run) return true;
    // seq_cst, in this order: submitted is final once done is set; every error is latched
    // before the completion of the task it concerns (retire_lane), and the orchestration's
    // before done, so a status read after the counts sees every latch they imply.
    return early && orch.done.load(std::memory_order_seq_cst) != 0 &&
           sched.completed.load(std::memory_order_seq_cst) ==
               orch.submitted.load(std::memory_order_seq_cst) &&
           outcome.status.load(std::memory_order_seq_cst) == 0;
  };
  // The watchdog ends every run whose device threads are alive; only an orchestration stuck in
  // its own code can keep the orchestrator thread from finishing. Give it the watchdog period
  // after the run failed, then declare the context broken.
  std::optional<Clock::time_point> failed_at;
  while (!outcome.done_event.await(all_done, kHostWaitSpin,
                                   Clock::now() + std::chrono::milliseconds(100))) {
    if (!fatal()) continue;
    if (!failed_at) failed_at = Clock::now();
    if (Clock::now() - *failed_at > config.scheduler_timeout + kStuckGrace &&
        outcome.threads_done.load(std::memory_order_seq_cst) == in_run - 1 &&
        orch.done.load(std::memory_order_seq_cst) == 0) {
      std::lock_guard lk(outcome.mu);
      outcome.broken.store(true);
      outcome.orch_stuck = true;
      outcome.broken_reason = "the orchestration function never returned";
      break;
    }
  }
  life.draining = outcome.threads_done.load(std::memory_order_seq_cst) != in_run;
  if (life.draining) ++counters.early_returns;
  life.phase = Phase::Finished;
  return outcome.status.load(std::memory_order_seq_cst);
}

void Context::drain() {
  if (!life.draining) return;
  life.draining = false;
  auto all_left = [this] {
    return outcome.threads_done.load(std::memory_order_seq_cst) ==
           static_cast<std::uint32_t>(run.threads);
  };
  // Every task completed, so the threads only have to notice and leave their loops. Bounded
  // anyway: a thread that never gets there must not hang the host.
  const auto deadline = Clock::now() + config.scheduler_timeout + kStuckGrace;
  while (!outcome.done_event.await(
      all_left, kHostWaitSpin, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)))) {
    if (Clock::now() < deadline) continue;
    std::lock_guard lk(outcome.mu);
    outcome.broken.store(true);
    outcome.broken_reason = "a device thread did not leave a finished run";
    return;
  }
  // Only a watchdog could latch after the last completion (a core slower than the scheduler
  // timeout to answer FIN). The run was reported as it ended; the next one starts clean.
  if (fatal()) arena.dirty = true;
}

int Context::finalize_run() {
  if (life.phase == Phase::Prepared) {  // abandoned before launch
    life.phase = Phase::Idle;
    return SIMPLER_OK;
  }
  if (life.phase == Phase::Running) static_cast<void>(wait_run());
  if (life.phase != Phase::Finished) {
    return fail(SIMPLER_ERR_NO_RUN, "finalize_run needs a prepared or launched run");
  }
  life.phase = Phase::Idle;
  if (run.dump_tensor || run.pmu != 0) finish_diagnostics();
  ++counters.runs;
  counters.tasks_completed += sched.completed.load(std::memory_order_seq_cst);
  counters.direct_dispatches += orch.direct.load(std::memory_order_seq_cst);
  const int status = outcome.status.load(std::memory_order_seq_cst);
  if (status != 0) {
    arena.dirty = true;
    std::lock_guard lk(outcome.mu);
    life.last_error = outcome.message;
    if (outcome.broken.load())
      life.last_error += fmt::format(" (the context is now unusable: {})", outcome.broken_reason);
  }
  return diag_finish(*this, status);
}

void Context::stats(simpler_context_stats* out) const {
  simpler_context_stats s{};
  s.struct_size = sizeof s;
  s.orch_so_loads = counters.orch_loads;
  s.kernel_so_loads = counters.kernel_loads;
  s.arena_builds = counters.arena_builds;
  s.arena_uploads = counters.arena_uploads;
  s.boots = counters.boots;
  s.runs = counters.runs;
  s.tasks_completed = counters.tasks_completed;
  s.last_boot_ns = counters.last_boot_ns;
  s.early_returns = counters.early_returns;
  s.direct_dispatches = counters.direct_dispatches;
  {
    std::lock_guard lk(memory.mu);
    s.committed_bytes = memory.committed;
  }
  s.num_clusters = config.num_clusters;
  s.aic_cores = config.num_clusters;
  s.aiv_cores = 2 * config.num_clusters;
  *out = s;
}

}  // namespace simpler::sim
