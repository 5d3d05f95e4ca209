/* simpler — the device runtime C ABI (L2).
 *
 * A device runtime is a shared library implementing the functions below with C linkage. The
 * host side (simpler::ChipWorker) loads it with dlopen(RTLD_LOCAL), resolves every symbol once,
 * and refuses a library whose simpler_device_abi_version() differs from
 * SIMPLER_DEVICE_ABI_VERSION. This header compiles as C99 and as C++.
 *
 * Conventions
 *  - Every function taking a context accepts NULL and returns SIMPLER_ERR_INVALID_ARGUMENT (or
 *    NULL / 0 for functions that return pointers or sizes).
 *  - Status codes: 0 is success, negative values are the SIMPLER_ERR_* codes below (listed with
 *    their meanings in status_codes.h). After a failing call, simpler_last_error(ctx) holds a
 *    message naming the cause and what to do. simpler_status_name()/simpler_status_meaning()
 *    describe a code without a context.
 *  - One thread drives a context at a time (the caller serialises calls on one context). Distinct
 *    contexts are independent and may be driven from different threads at the same time.
 *  - The simulated device shares the host's address space: "device" memory is host memory, and
 *    host tensors are used in place (no staging copies).
 */
#ifndef SIMPLER_DEVICE_DEVICE_ABI_H
#define SIMPLER_DEVICE_DEVICE_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "simpler/device/status_codes.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Bumped whenever a struct layout or a function signature below changes. */
#define SIMPLER_DEVICE_ABI_VERSION 4u

/* ---- status codes ---------------------------------------------------------------------- */
/* 0 is SIMPLER_OK; the SIMPLER_ERR_* codes are negative: host API misuse from -1, the failures
 * of a run, found on the device, from -101. status_codes.h lists every code with its value and
 * meaning; the enumerators below are generated from it. In C they are int constants; in C++
 * they have this enum's type and convert to int, so a lambda returning both a code and an int
 * needs `-> int`. Functions take and return statuses as int. */
enum simpler_status_code {
#define SIMPLER_STATUS_ENUMERATOR(name, value, meaning) name = (value),
  SIMPLER_STATUS_CODES(SIMPLER_STATUS_ENUMERATOR)
#undef SIMPLER_STATUS_ENUMERATOR
};

/* ---- plain data ------------------------------------------------------------------------ */
typedef struct simpler_device_context simpler_device_context;

/** A host tensor as the host passes it: the 40-byte layout of simpler::ContinuousTensor. */
typedef struct simpler_tensor {
  uint64_t data;
  uint32_t shapes[5];
  uint32_t ndims;
  uint8_t dtype; /* simpler::DataType */
  uint8_t child_memory;
  uint8_t reserved[6];
} simpler_tensor;

/** A run's arguments: the layout of simpler::TaskArgsView (tensors first, then scalars). */
typedef struct simpler_task_args {
  int32_t tensor_count;
  int32_t scalar_count;
  const simpler_tensor* tensors;
  const uint64_t* scalars;
} simpler_task_args;

/** Which orderings the device TensorMap infers between tasks touching the same bytes
 *  (simpler_init_options.hazards; simpler::Hazards on the host). ALL: a reader waits for the
 *  earlier writer of its bytes, a writer for the earlier writer and for the readers since.
 *  READ_AFTER_WRITE: only readers wait. */
#define SIMPLER_HAZARDS_ALL 0u
#define SIMPLER_HAZARDS_READ_AFTER_WRITE 1u

/** Context-wide settings, fixed at simpler_init(). Zero fields take the default. A caller built
 *  against an older header passes a smaller struct_size: fields past it take their default. */
typedef struct simpler_init_options {
  uint32_t struct_size;          /* sizeof(simpler_init_options); 0 = defaults for everything */
  uint32_t num_clusters;         /* AICore clusters (1 AIC + 2 AIV each); default 2, max 16 */
  int32_t aicpu_thread_num;      /* default AICPU threads per run (2..4); default 3 */
  uint32_t scheduler_timeout_ms; /* no-progress watchdog; default 10000 */
  uint32_t resource_wait_ms;     /* back-pressure backstop (window, heap, pools); default 2000 */
  uint32_t tensor_wait_ms;       /* get_tensor_data deadline; default 15000 */
  /* ABI 3 (a struct_size of 24 is ABI 2's: everything below takes its default). */
  uint32_t hazards; /* SIMPLER_HAZARDS_ALL (default) or SIMPLER_HAZARDS_READ_AFTER_WRITE */
} simpler_init_options;

/** Per-run settings. Zero fields take the default. */
typedef struct simpler_run_config {
  uint32_t struct_size;         /* sizeof(simpler_run_config) */
  int32_t aicpu_thread_num;     /* 0 = the context default; else 2..4 */
  uint64_t ring_task_window[4]; /* tasks per ring, power of two in [4, 1<<20]; default 4096 */
  uint64_t ring_heap[4];        /* heap bytes per ring, in [1024, 1<<40]; default 64 MiB */
  uint64_t ring_dep_pool[4];    /* dependency-list entries, in [4, 1<<24]; default 4 x window */
  /* Diagnostics and SPMD (ABI 2). All zero = off / defaults. */
  int32_t block_dim;   /* clusters the run may use; 0 = all of the context's clusters */
  int32_t swimlane;    /* 0 off, 1-4 trace detail (1 tasks, 2 + dependencies, 3 + scheduler
                          internals, 4 + everything); read back with simpler_get_run_trace */
  int32_t dump_tensor; /* != 0: write each task's tensors as .npy under output_prefix */
  int32_t pmu;         /* 0 off; > 0 selects the counter set (1 = cycles + instructions) */
  int32_t dep_gen;     /* != 0: write the run's dependency graph (DOT + JSON) */
  int32_t reserved;
  char output_prefix[1024]; /* NUL-terminated directory for diagnostic files; "" = none */
} simpler_run_config;

/** One recorded interval of a traced run (swimlane > 0), in CLOCK_MONOTONIC nanoseconds. */
typedef struct simpler_trace_event {
  uint64_t begin_ns;
  uint64_t end_ns;   /* == begin_ns for an instant */
  int64_t task_id;   /* the chip task, -1 for none */
  int64_t flow_from; /* a task this event's task depended on (flow arrow), -1 for none */
  uint32_t track;    /* index into simpler_trace_info.track_names */
  uint32_t kind;     /* simpler_trace_kind */
  int32_t func_id;   /* the kernel, -1 for none */
  int32_t block_idx; /* SPMD block, 0 when not SPMD; on a DEPENDENCY event 1 when the edge
                        only orders (task_id overwrites bytes flow_from read or wrote), else 0 */
} simpler_trace_event;

enum simpler_trace_kind {
  SIMPLER_TRACE_KERNEL = 1,     /* AICore track: a kernel (one block) ran [begin, end] */
  SIMPLER_TRACE_DISPATCH = 2,   /* AICPU track: the task was handed to a core */
  SIMPLER_TRACE_COMPLETE = 3,   /* AICPU track: the task's completion was processed */
  SIMPLER_TRACE_SUBMIT = 4,     /* orchestrator track: the task was submitted */
  SIMPLER_TRACE_DEPENDENCY = 5, /* a flow arrow flow_from -> task_id (swimlane >= 2) */
  SIMPLER_TRACE_SCHEDULER = 6   /* AICPU internals (swimlane >= 3) */
};

/** The trace of the last finished run; arrays owned by the context, valid until the next run. */
typedef struct simpler_trace_info {
  uint32_t struct_size;
  uint32_t track_count;
  const char* const*
      track_names; /* "AICPU 0" (orchestrator), "AICPU 1", "AICore AIC 0", "AICore AIV 3" */
  uint64_t event_count;
  const simpler_trace_event* events;
  uint64_t dropped; /* events lost because a per-thread buffer was full */
} simpler_trace_info;

/** One kernel of a chip callable: a shared object exporting `symbol` (default kernel_entry). */
typedef struct simpler_kernel_desc {
  int32_t func_id;    /* 0..1023, unique within the callable */
  const char* path;   /* the kernel .so */
  const char* symbol; /* NULL = "kernel_entry" */
} simpler_kernel_desc;

/** A chip callable: an orchestration shared object plus its kernel table. */
typedef struct simpler_chip_callable_desc {
  uint32_t struct_size;   /* sizeof(simpler_chip_callable_desc) */
  const char* orch_path;  /* the orchestration .so */
  const char* orch_entry; /* NULL = "aicpu_orchestration_entry" */
  uint32_t kernel_count;
  const simpler_kernel_desc* kernels;
} simpler_chip_callable_desc;

/** Counters a context keeps; tests and benchmarks read them. */
typedef struct simpler_context_stats {
  uint32_t struct_size;
  uint32_t reserved;
  uint64_t orch_so_loads;   /* orchestration .so files loaded (at register time) */
  uint64_t kernel_so_loads; /* kernel .so files loaded */
  uint64_t arena_builds;    /* runtime arenas laid out and initialised on the host */
  uint64_t arena_uploads;   /* arena images copied to the device */
  uint64_t boots;           /* device boots (one per launched run) */
  uint64_t runs;            /* runs finished, successful or not */
  uint64_t tasks_completed; /* tasks completed over all runs */
  uint64_t last_boot_ns;    /* wall time of the last boot (re-wire + reset) */
  uint64_t committed_bytes; /* device memory held by simpler_device_malloc */
  uint32_t num_clusters;
  uint32_t aic_cores;
  uint32_t aiv_cores;
  uint32_t reserved2;
  uint64_t early_returns;     /* runs whose wait returned on their last completion, before every
                                 device thread left them (the next call waited for those) */
  uint64_t direct_dispatches; /* tasks the orchestrator handed to an idle core itself, ready at
                                 submit: no ready queue, no scheduler hand-off */
} simpler_context_stats;

/* ---- functions ------------------------------------------------------------------------- */
uint32_t simpler_device_abi_version(void);
const char* simpler_status_name(int status);    /* "SIMPLER_ERR_..."; never NULL */
const char* simpler_status_meaning(int status); /* one sentence; never NULL */

simpler_device_context* simpler_create_context(void);
/** Finalises if needed and frees the context. NULL is a no-op. A context left broken by a kernel
 *  or orchestration that never returned (SIMPLER_ERR_CONTEXT_BROKEN) is finalised but not freed:
 *  the stuck thread still refers to it. */
void simpler_destroy_context(simpler_device_context* ctx);
/** Attaches the context to a device id and starts its AICPU/AICore threads (they sleep until a
 *  run). `opts` may be NULL. Fails with SIMPLER_ERR_ALREADY_INITIALISED on a second call. */
int simpler_init(simpler_device_context* ctx, int32_t device_id, const simpler_init_options* opts);
/** Stops the threads, unregisters every callable and frees device memory. */
int simpler_finalize(simpler_device_context* ctx);
/** The message of the last failing call on this context ("" if none). Valid until the next call. */
const char* simpler_last_error(const simpler_device_context* ctx);
int simpler_get_stats(const simpler_device_context* ctx, simpler_context_stats* out);

void* simpler_device_malloc(simpler_device_context* ctx, size_t bytes); /* 1024-aligned */
int simpler_device_free(simpler_device_context* ctx, void* ptr);
int simpler_copy_to_device(simpler_device_context* ctx, void* dev, const void* host, size_t bytes);
int simpler_copy_from_device(simpler_device_context* ctx, void* host, const void* dev,
                             size_t bytes);

/** Loads the orchestration and kernel .so files once and files them under `callable_id`
 *  (0..63). Nothing is loaded again for later runs. */
int simpler_register_callable(simpler_device_context* ctx, int32_t callable_id,
                              const simpler_chip_callable_desc* callable);
int simpler_unregister_callable(simpler_device_context* ctx, int32_t callable_id);

/** The phases of one run: prepare (check arguments, bind the callable and the runtime arena),
 *  launch (boot the device: re-wire the arena, reset shared state, start orchestration and
 *  scheduling), wait (block until the device finishes; the watchdog bounds it), finalize (read
 *  the outcome, release the run). simpler_run() does all four. The args must stay valid until
 *  finalize. The status of a failed run is one of the run-failure codes above. */
int simpler_prepare_run(simpler_device_context* ctx, int32_t callable_id,
                        const simpler_task_args* args, const simpler_run_config* config);
int simpler_launch_run(simpler_device_context* ctx);
int simpler_wait_run(simpler_device_context* ctx);
int simpler_finalize_run(simpler_device_context* ctx);
int simpler_run(simpler_device_context* ctx, int32_t callable_id, const simpler_task_args* args,
                const simpler_run_config* config);
/** The trace recorded by the last finished run (its config's swimlane > 0); zero events when
 *  tracing was off. `out->struct_size` must be set by the caller. */
int simpler_get_run_trace(const simpler_device_context* ctx, simpler_trace_info* out);

#ifdef __cplusplus
}
#endif

#endif /* SIMPLER_DEVICE_DEVICE_ABI_H */
