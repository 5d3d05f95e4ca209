/* simpler — the on-device ABI: what an orchestration .so and a kernel .so see (L2).
 *
 * Orchestration: a shared object exporting
 *     void aicpu_orchestration_entry(simpler_orch_runtime* rt, const simpler_orch_args* args);
 * and optionally
 *     int32_t aicpu_orchestration_expected_args(void);   (tensor + scalar count the entry needs)
 * It runs on the device's orchestrator thread and calls the runtime only through rt->ops (no
 * link dependency on the runtime, no global state: two devices may run one .so at once).
 *
 * Kernel: a shared object exporting  void kernel_entry(int64_t* args);
 *   args[0 .. T-1]        pointers to the task's simpler_chip_tensor descriptors, in the order
 *                         they were added to the task;
 *   args[T .. T+S-1]      the scalars (bit patterns);
 *   args[48]              a simpler_local_context* (per dispatch);
 *   args[49]              a simpler_global_context* (per core).
 * A kernel reports failure with simpler_kernel_fail(); a kernel that faults (SIGSEGV, SIGBUS,
 * SIGFPE, SIGILL) fails the run with SIMPLER_ERR_KERNEL_FAULT instead of killing the process.
 *
 * Compiles as C99 and as C++. */
#ifndef SIMPLER_DEVICE_TASK_ABI_H
#define SIMPLER_DEVICE_TASK_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
/* C casts are the only casts C has; Clang flags them under -Wold-style-cast in C++. */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#endif
extern "C" {
#endif

#define SIMPLER_TASK_ABI_VERSION 2u
#define SIMPLER_MAX_TASK_TENSORS 16
#define SIMPLER_MAX_TASK_SCALARS 16
#define SIMPLER_MAX_FUNC_ID 1024
#define SIMPLER_KERNEL_ARGS 50
#define SIMPLER_KERNEL_LOCAL_ARG 48
#define SIMPLER_KERNEL_GLOBAL_ARG 49
#define SIMPLER_INVALID_TASK_ID UINT64_MAX
/** The most SPMD blocks one task may run as (simpler_task_builder.block_num). */
#define SIMPLER_MAX_BLOCK_NUM 65535
/** simpler_task_builder.block_num: as many blocks as the run has cores of the task's shape. */
#define SIMPLER_BLOCK_NUM_ALL (-1)
/** The largest byte size of one tensor (256 TiB, past any buffer a process can map). The runtime
 *  refuses larger descriptors, so offset and size arithmetic on a tensor never wraps. */
#define SIMPLER_MAX_TENSOR_BYTES (UINT64_C(1) << 48)

/** Element types, numbered as simpler::DataType. */
enum {
  SIMPLER_FLOAT32 = 0,
  SIMPLER_FLOAT16 = 1,
  SIMPLER_INT32 = 2,
  SIMPLER_INT16 = 3,
  SIMPLER_INT8 = 4,
  SIMPLER_UINT8 = 5,
  SIMPLER_BFLOAT16 = 6,
  SIMPLER_INT64 = 7,
  SIMPLER_UINT64 = 8
};

static inline uint32_t simpler_dtype_size(uint8_t dtype) {
  static const uint8_t sizes[9] = {4, 2, 4, 2, 1, 1, 2, 8, 8};
  return dtype < 9 ? sizes[dtype] : 0;
}

/** A tensor on the device: a contiguous view `offset` bytes into the buffer at `addr`. 64 B. */
typedef struct simpler_chip_tensor {
  uint64_t addr;       /* base address of the buffer (the dependency key) */
  uint64_t offset;     /* bytes from addr to the first element of this view */
  uint64_t owner_task; /* the task that allocated the buffer; SIMPLER_INVALID_TASK_ID if none */
  uint32_t shapes[5];
  uint32_t ndims; /* 1..5 */
  uint8_t dtype;
  uint8_t reserved[15];
} simpler_chip_tensor;

static inline uint64_t simpler_tensor_numel(const simpler_chip_tensor* t) {
  uint64_t n = 1;
  for (uint32_t i = 0; i < t->ndims && i < 5; ++i) n *= t->shapes[i];
  return n;
}
static inline uint64_t simpler_tensor_nbytes(const simpler_chip_tensor* t) {
  return simpler_tensor_numel(t) * simpler_dtype_size(t->dtype);
}
/** The byte size of `t` in *out, or 0 (false) when ndims or dtype is invalid or the size exceeds
 *  SIMPLER_MAX_TENSOR_BYTES (including a product that would overflow 64 bits). */
static inline int simpler_tensor_nbytes_checked(const simpler_chip_tensor* t, uint64_t* out) {
  uint64_t n = simpler_dtype_size(t->dtype);
  uint32_t i;
  if (t->ndims < 1 || t->ndims > 5 || n == 0) return 0;
  for (i = 0; i < t->ndims; ++i) {
    if (t->shapes[i] == 0) {
      *out = 0;
      return 1;
    }
  }
  for (i = 0; i < t->ndims; ++i) {
    if (n > SIMPLER_MAX_TENSOR_BYTES / t->shapes[i]) return 0;
    n *= t->shapes[i];
  }
  *out = n;
  return 1;
}
static inline void* simpler_tensor_data(const simpler_chip_tensor* t) {
  return (void*)(uintptr_t)(t->addr + t->offset);
}

/** How a task uses a tensor; the runtime infers dependencies from it. */
enum {
  SIMPLER_TAG_INPUT = 0,           /* read: waits for the buffer's earlier writers */
  SIMPLER_TAG_OUTPUT = 1,          /* written into a new buffer the runtime allocates */
  SIMPLER_TAG_INOUT = 2,           /* read and written: waits, then becomes the writer */
  SIMPLER_TAG_OUTPUT_EXISTING = 3, /* written into an existing buffer: becomes the writer */
  SIMPLER_TAG_NO_DEP = 4           /* passed through, no dependency tracking */
};

/** A task's arguments as the orchestration builds them (copied by submit). For
 *  SIMPLER_TAG_OUTPUT, only shapes/ndims/dtype of the tensor are read. Overflowing the fixed
 *  arrays or adding a tensor after a scalar sets `error`, and the submit then fails the run with
 *  SIMPLER_ERR_INVALID_TASK_ARGS. */
typedef struct simpler_task_builder {
  int32_t tensor_count;
  int32_t scalar_count;
  int32_t error;     /* 0, or the first SIMPLER_BUILD_* problem */
  int32_t requested; /* with error: how many tensors/scalars were asked for */
  int32_t tags[SIMPLER_MAX_TASK_TENSORS];
  simpler_chip_tensor tensors[SIMPLER_MAX_TASK_TENSORS];
  uint64_t scalars[SIMPLER_MAX_TASK_SCALARS];
  /** SPMD blocks the kernel runs as: 0 (unset) = 1 block; SIMPLER_BLOCK_NUM_ALL = one per core
   *  of the task's shape the run may use (clusters for AIC and MIX tasks, 2 x clusters for AIV);
   *  else 1..SIMPLER_MAX_BLOCK_NUM. Each block is one dispatch seeing its block_idx and
   *  block_num; the task completes when every block finished. A MIX task's block occupies one
   *  cluster: each of its lanes sees the same block_idx. */
  int32_t block_num;
  int32_t reserved_block;
} simpler_task_builder;

enum {
  SIMPLER_BUILD_OK = 0,
  SIMPLER_BUILD_TOO_MANY_TENSORS = 1,
  SIMPLER_BUILD_TOO_MANY_SCALARS = 2,
  SIMPLER_BUILD_TENSOR_AFTER_SCALAR = 3,
  SIMPLER_BUILD_BAD_TAG = 4,
  SIMPLER_BUILD_BAD_BLOCK_NUM = 5
};

static inline void simpler_builder_add_tensor(simpler_task_builder* b, const simpler_chip_tensor* t,
                                              int32_t tag) {
  if (b->error != 0) return;
  if (b->scalar_count > 0) {
    b->error = SIMPLER_BUILD_TENSOR_AFTER_SCALAR;
    return;
  }
  if (tag < SIMPLER_TAG_INPUT || tag > SIMPLER_TAG_NO_DEP) {
    b->error = SIMPLER_BUILD_BAD_TAG;
    b->requested = tag;
    return;
  }
  if (b->tensor_count >= SIMPLER_MAX_TASK_TENSORS) {
    b->error = SIMPLER_BUILD_TOO_MANY_TENSORS;
    b->requested = b->tensor_count + 1;
    return;
  }
  b->tensors[b->tensor_count] = *t;
  b->tags[b->tensor_count] = tag;
  ++b->tensor_count;
}
static inline void simpler_builder_add_scalar(simpler_task_builder* b, uint64_t v) {
  if (b->error != 0) return;
  if (b->scalar_count >= SIMPLER_MAX_TASK_SCALARS) {
    b->error = SIMPLER_BUILD_TOO_MANY_SCALARS;
    b->requested = b->scalar_count + 1;
    return;
  }
  b->scalars[b->scalar_count++] = v;
}

/** Sets the SPMD block count: 0 = one block per core of the task's shape (SIMPLER_BLOCK_NUM_ALL),
 *  n > 0 = n blocks (more than SIMPLER_MAX_BLOCK_NUM fails the submit). A negative n sets
 *  SIMPLER_BUILD_BAD_BLOCK_NUM. */
static inline void simpler_builder_set_blocks(simpler_task_builder* b, int64_t n) {
  if (b->error != 0) return;
  if (n < 0) {
    b->error = SIMPLER_BUILD_BAD_BLOCK_NUM;
    b->requested = n < INT32_MIN ? INT32_MIN : (int32_t)n;
    return;
  }
  if (n == 0) {
    b->block_num = SIMPLER_BLOCK_NUM_ALL;
    return;
  }
  b->block_num = n > INT32_MAX ? INT32_MAX : (int32_t)n;
}

/** The kernels of one task: a func_id per lane of a cluster, -1 = lane unused. One lane is an
 *  AIC or an AIV task; two or three lanes make a MIX task that occupies one cluster. */
typedef struct simpler_mixed_kernels {
  int32_t aic;
  int32_t aiv0;
  int32_t aiv1;
} simpler_mixed_kernels;

/** A task id: ring << 32 | per-ring sequence number. */
typedef uint64_t simpler_task_id;

typedef struct simpler_orch_runtime simpler_orch_runtime;

/** The runtime's function table. After a fatal error every call is a no-op returning an empty
 *  result (check `is_fatal`); the run then fails with the first error. */
typedef struct simpler_orch_ops {
  uint32_t abi_version; /* SIMPLER_TASK_ABI_VERSION */
  /** Submits a task. `outputs`, when not NULL, receives the task's tensor_count tensors as its
   *  kernels will see them (runtime-allocated outputs filled in). Returns the task id, or
   *  SIMPLER_INVALID_TASK_ID after a fatal error. */
  simpler_task_id (*submit)(simpler_orch_runtime* rt, simpler_mixed_kernels kernels,
                            const simpler_task_builder* args, simpler_chip_tensor* outputs);
  void (*scope_begin)(simpler_orch_runtime* rt);
  void (*scope_end)(simpler_orch_runtime* rt);
  /** Allocates a buffer from the current scope's heap ring (as a kernel-less task that completes
   *  at once; readers depend on it through owner_task). Returns 0 on success. */
  int32_t (*alloc_tensor)(simpler_orch_runtime* rt, const uint32_t* shapes, uint32_t ndims,
                          uint8_t dtype, simpler_chip_tensor* out);
  /** Waits until every task writing the bytes of `t` submitted so far has completed, then copies
   *  `bytes` bytes from offset `byte_offset` of the view into dst. Returns 0 on success. */
  int32_t (*read_tensor)(simpler_orch_runtime* rt, const simpler_chip_tensor* t,
                         uint64_t byte_offset, void* dst, uint64_t bytes);
  int32_t (*is_fatal)(simpler_orch_runtime* rt);
  /** Fails the run with SIMPLER_ERR_ORCH_FATAL and this message. */
  void (*report_fatal)(simpler_orch_runtime* rt, const char* message);
  uint32_t (*cluster_count)(simpler_orch_runtime* rt);
  uint32_t (*aiv_count)(simpler_orch_runtime* rt);
} simpler_orch_ops;

struct simpler_orch_runtime {
  const simpler_orch_ops* ops;
};

/** The run's arguments as the orchestration sees them (host tensors converted). */
typedef struct simpler_orch_args {
  int32_t tensor_count;
  int32_t scalar_count;
  const simpler_chip_tensor* tensors;
  const uint64_t* scalars;
} simpler_orch_args;

typedef void (*simpler_orch_entry_fn)(simpler_orch_runtime* rt, const simpler_orch_args* args);
typedef int32_t (*simpler_orch_expected_args_fn)(void);
typedef void (*simpler_kernel_fn)(int64_t* args);

/* ---- kernel side ---------------------------------------------------------------------- */
#define SIMPLER_KERNEL_MESSAGE_MAX 256

/** Per dispatch. A kernel sets `failed` (through simpler_kernel_fail) to fail the run. */
typedef struct simpler_local_context {
  int32_t block_idx;
  int32_t block_num;
  int32_t failed;
  int32_t reserved;
  char message[SIMPLER_KERNEL_MESSAGE_MAX];
} simpler_local_context;

/** Per core, fixed for the context's lifetime. */
typedef struct simpler_global_context {
  int32_t sub_block_id; /* 0 for AIC and AIV0, 1 for AIV1 */
  int32_t core_id;
  int32_t core_type; /* 0 = AIC, 1 = AIV */
  int32_t cluster_id;
} simpler_global_context;

static inline const simpler_chip_tensor* simpler_kernel_tensor(const int64_t* args, int i) {
  return (const simpler_chip_tensor*)(uintptr_t)args[i];
}
static inline simpler_local_context* simpler_kernel_local(const int64_t* args) {
  return (simpler_local_context*)(uintptr_t)args[SIMPLER_KERNEL_LOCAL_ARG];
}
static inline const simpler_global_context* simpler_kernel_global(const int64_t* args) {
  return (const simpler_global_context*)(uintptr_t)args[SIMPLER_KERNEL_GLOBAL_ARG];
}
/** Marks the running task failed; the run ends with SIMPLER_ERR_KERNEL_FAILED and `message`. */
static inline void simpler_kernel_fail(const int64_t* args, const char* message) {
  simpler_local_context* l = simpler_kernel_local(args);
  l->failed = 1;
  size_t n = message ? strlen(message) : 0;
  if (n >= SIMPLER_KERNEL_MESSAGE_MAX) n = SIMPLER_KERNEL_MESSAGE_MAX - 1;
  if (n > 0) memcpy(l->message, message, n);
  l->message[n] = '\0';
}

#ifdef __cplusplus
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#endif

#endif /* SIMPLER_DEVICE_TASK_ABI_H */
