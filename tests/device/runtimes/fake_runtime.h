/* Test double: a fake device runtime implementing <simpler/device/device_abi.h> in plain C, for
 * the ChipWorker tests. Each tests/device/runtimes/<stem>.c sets the knobs below and includes
 * this file; it is built as test_runtime_<stem>.so. Being C, it also checks that the device ABI
 * headers (device_abi.h and task_abi.h) compile as C.
 *
 * What the working fake does: it keeps per-context state (initialised, finalised, registered
 * callable ids, device memory blocks) and checks the ABI's conventions (NULL context, ids in
 * range, ...). A run "executes" a callable by writing scalar 0 into every element of tensor 0 when
 * that tensor is int64, and fails with SIMPLER_ERR_KERNEL_FAILED when scalar 1 is
 * FAKE_FAIL_MAGIC. Every call is recorded (fake_runtime_record.h).
 *
 * Knobs (define before including):
 *   FAKE_ABI_VERSION   what simpler_device_abi_version() returns (default: the right one)
 *   FAKE_OMIT_RUN      leave simpler_run and simpler_wait_run out (a runtime missing symbols)
 *   FAKE_INIT_FAILS    simpler_init fails with SIMPLER_ERR_SYSTEM and a message */
#ifndef SIMPLER_TESTS_FAKE_RUNTIME_H
#define SIMPLER_TESTS_FAKE_RUNTIME_H

#ifdef __cplusplus
#error "fake runtimes are compiled as C: they check that the device ABI headers are valid C"
#endif
#if !defined(__STDC_VERSION__) || __STDC_VERSION__ < 199901L
#error "fake runtimes need C99 or later"
#endif

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* posix_memalign under -std=c99 */
#endif

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <simpler/device/device_abi.h>
#include <simpler/device/task_abi.h>

#include "fake_runtime_record.h"

#ifndef FAKE_ABI_VERSION
#define FAKE_ABI_VERSION SIMPLER_DEVICE_ABI_VERSION
#endif

#define FAKE_API __attribute__((visibility("default")))
#define FAKE_MAX_CALLABLES 64
#define FAKE_MAX_BLOCKS 64

struct simpler_device_context {
  int initialised;
  int finalised;
  int32_t device_id;
  uint64_t registered; /* bit i: callable id i */
  void* blocks[FAKE_MAX_BLOCKS];
  size_t block_sizes[FAKE_MAX_BLOCKS];
  uint64_t committed;
  uint64_t runs;
  char last_error[512];
};

static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;
static fake_record fake_rec;

FAKE_API const fake_record* fake_runtime_record(void) {
  return &fake_rec;
}
FAKE_API void fake_runtime_reset(void) {
  pthread_mutex_lock(&fake_mu);
  memset(&fake_rec, 0, sizeof fake_rec);
  pthread_mutex_unlock(&fake_mu);
}

static void fake_copy(char* dst, size_t cap, const char* src) {
  size_t n = src != NULL ? strlen(src) : 0;
  if (n >= cap) n = cap - 1;
  if (n > 0) memcpy(dst, src, n);
  dst[n] = '\0';
}

static int fake_fail(simpler_device_context* ctx, int status, const char* message) {
  fake_copy(ctx->last_error, sizeof ctx->last_error, message);
  return status;
}

/* A usable context: initialised and not finalised. Returns 0 or the status to return. */
static int fake_check(simpler_device_context* ctx) {
  if (ctx->finalised)
    return fake_fail(ctx, SIMPLER_ERR_FINALISED, "fake: the context was finalised");
  if (!ctx->initialised)
    return fake_fail(ctx, SIMPLER_ERR_NOT_INITIALISED, "fake: simpler_init was not called");
  ctx->last_error[0] = '\0';
  return SIMPLER_OK;
}

FAKE_API uint32_t simpler_device_abi_version(void) {
  return FAKE_ABI_VERSION;
}

/* Names and meanings from the one table of status_codes.h; the fallbacks are the fake's own. */
FAKE_API const char* simpler_status_name(int status) {
  switch (status) {
#define FAKE_STATUS_NAME(name, value, meaning) \
  case name:                                   \
    return #name;
    SIMPLER_STATUS_CODES(FAKE_STATUS_NAME)
#undef FAKE_STATUS_NAME
    default:
      return "SIMPLER_ERR_UNKNOWN_STATUS";
  }
}

FAKE_API const char* simpler_status_meaning(int status) {
  switch (status) {
#define FAKE_STATUS_MEANING(name, value, meaning) \
  case name:                                      \
    return meaning;
    SIMPLER_STATUS_CODES(FAKE_STATUS_MEANING)
#undef FAKE_STATUS_MEANING
    default:
      return "a fake runtime status";
  }
}

FAKE_API simpler_device_context* simpler_create_context(void) {
  simpler_device_context* ctx = (simpler_device_context*)calloc(1, sizeof *ctx);
  pthread_mutex_lock(&fake_mu);
  ++fake_rec.creates;
  pthread_mutex_unlock(&fake_mu);
  return ctx;
}

static void fake_free_blocks(simpler_device_context* ctx) {
  for (int i = 0; i < FAKE_MAX_BLOCKS; ++i) {
    free(ctx->blocks[i]);
    ctx->blocks[i] = NULL;
  }
  ctx->committed = 0;
}

FAKE_API void simpler_destroy_context(simpler_device_context* ctx) {
  if (ctx == NULL) return;
  fake_free_blocks(ctx);
  free(ctx);
  pthread_mutex_lock(&fake_mu);
  ++fake_rec.destroys;
  pthread_mutex_unlock(&fake_mu);
}

FAKE_API int simpler_init(simpler_device_context* ctx, int32_t device_id,
                          const simpler_init_options* opts) {
  if (ctx == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&fake_mu);
  ++fake_rec.inits;
  fake_rec.init_device_id = device_id;
  fake_rec.init_had_options = opts != NULL;
  if (opts != NULL) fake_rec.init_options = *opts;
  pthread_mutex_unlock(&fake_mu);
  if (ctx->initialised)
    return fake_fail(ctx, SIMPLER_ERR_ALREADY_INITIALISED, "fake: simpler_init called twice");
#ifdef FAKE_INIT_FAILS
  {
    char text[256];
    snprintf(text, sizeof text,
             "fake: could not start the AICPU threads of device %d (this runtime always fails "
             "here)",
             (int)device_id);
    return fake_fail(ctx, SIMPLER_ERR_SYSTEM, text);
  }
#else
  ctx->initialised = 1;
  ctx->device_id = device_id;
  return SIMPLER_OK;
#endif
}

FAKE_API int simpler_finalize(simpler_device_context* ctx) {
  if (ctx == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&fake_mu);
  ++fake_rec.finalizes;
  pthread_mutex_unlock(&fake_mu);
  ctx->registered = 0;
  fake_free_blocks(ctx);
  ctx->finalised = 1;
  return SIMPLER_OK;
}

FAKE_API const char* simpler_last_error(const simpler_device_context* ctx) {
  return ctx != NULL ? ctx->last_error : "";
}

FAKE_API int simpler_get_stats(const simpler_device_context* ctx, simpler_context_stats* out) {
  if (ctx == NULL || out == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->runs = ctx->runs;
  out->committed_bytes = ctx->committed;
  out->num_clusters = 2;
  out->aic_cores = 2;
  out->aiv_cores = 4;
  return SIMPLER_OK;
}

FAKE_API void* simpler_device_malloc(simpler_device_context* ctx, size_t bytes) {
  if (ctx == NULL || fake_check(ctx) != SIMPLER_OK) return NULL;
  if (bytes > ((size_t)1 << 30)) {
    fake_fail(ctx, SIMPLER_ERR_OUT_OF_MEMORY, "fake: the fake device holds at most 1 GiB");
    return NULL;
  }
  for (int i = 0; i < FAKE_MAX_BLOCKS; ++i) {
    if (ctx->blocks[i] == NULL) {
      size_t rounded = (bytes + 1023) / 1024 * 1024;
      void* p = NULL;
      if (posix_memalign(&p, 1024, rounded) != 0) {
        fake_fail(ctx, SIMPLER_ERR_OUT_OF_MEMORY, "fake: aligned_alloc failed");
        return NULL;
      }
      ctx->blocks[i] = p;
      ctx->block_sizes[i] = rounded;
      ctx->committed += rounded;
      pthread_mutex_lock(&fake_mu);
      ++fake_rec.mallocs;
      pthread_mutex_unlock(&fake_mu);
      return p;
    }
  }
  fake_fail(ctx, SIMPLER_ERR_OUT_OF_MEMORY, "fake: too many device blocks");
  return NULL;
}

FAKE_API int simpler_device_free(simpler_device_context* ctx, void* ptr) {
  if (ctx == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  int st = fake_check(ctx);
  if (st != SIMPLER_OK) return st;
  for (int i = 0; i < FAKE_MAX_BLOCKS; ++i) {
    if (ctx->blocks[i] != NULL && ctx->blocks[i] == ptr) {
      free(ptr);
      ctx->blocks[i] = NULL;
      ctx->committed -= ctx->block_sizes[i];
      pthread_mutex_lock(&fake_mu);
      ++fake_rec.frees;
      pthread_mutex_unlock(&fake_mu);
      return SIMPLER_OK;
    }
  }
  return fake_fail(ctx, SIMPLER_ERR_INVALID_ARGUMENT,
                   "fake: device_free of a pointer device_malloc did not return");
}

/* Whether [p, p + n) lies inside one device block. */
static int fake_in_block(const simpler_device_context* ctx, const void* p, size_t n) {
  for (int i = 0; i < FAKE_MAX_BLOCKS; ++i) {
    const char* b = (const char*)ctx->blocks[i];
    if (b != NULL && (const char*)p >= b && (const char*)p + n <= b + ctx->block_sizes[i]) return 1;
  }
  return 0;
}

FAKE_API int simpler_copy_to_device(simpler_device_context* ctx, void* dev, const void* host,
                                    size_t bytes) {
  if (ctx == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  int st = fake_check(ctx);
  if (st != SIMPLER_OK) return st;
  if (!fake_in_block(ctx, dev, bytes) || host == NULL)
    return fake_fail(ctx, SIMPLER_ERR_INVALID_ARGUMENT,
                     "fake: copy_to_device outside the device's memory");
  memcpy(dev, host, bytes);
  pthread_mutex_lock(&fake_mu);
  ++fake_rec.copies_to;
  pthread_mutex_unlock(&fake_mu);
  return SIMPLER_OK;
}

FAKE_API int simpler_copy_from_device(simpler_device_context* ctx, void* host, const void* dev,
                                      size_t bytes) {
  if (ctx == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  int st = fake_check(ctx);
  if (st != SIMPLER_OK) return st;
  if (!fake_in_block(ctx, dev, bytes) || host == NULL)
    return fake_fail(ctx, SIMPLER_ERR_INVALID_ARGUMENT,
                     "fake: copy_from_device outside the device's memory");
  memcpy(host, dev, bytes);
  pthread_mutex_lock(&fake_mu);
  ++fake_rec.copies_from;
  pthread_mutex_unlock(&fake_mu);
  return SIMPLER_OK;
}

FAKE_API int simpler_register_callable(simpler_device_context* ctx, int32_t callable_id,
                                       const simpler_chip_callable_desc* callable) {
  if (ctx == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  int st = fake_check(ctx);
  if (st != SIMPLER_OK) return st;
  if (callable_id < 0 || callable_id >= FAKE_MAX_CALLABLES || callable == NULL)
    return fake_fail(ctx, SIMPLER_ERR_INVALID_ARGUMENT, "fake: bad callable id or descriptor");
  if ((ctx->registered >> callable_id) & 1u)
    return fake_fail(ctx, SIMPLER_ERR_DUPLICATE_CALLABLE, "fake: callable id already registered");
  pthread_mutex_lock(&fake_mu);
  ++fake_rec.registers;
  fake_rec.reg_callable_id = callable_id;
  fake_copy(fake_rec.reg_orch_path, FAKE_PATH_MAX, callable->orch_path);
  fake_copy(fake_rec.reg_orch_entry, FAKE_PATH_MAX, callable->orch_entry);
  fake_rec.reg_kernel_count = callable->kernel_count;
  for (uint32_t i = 0; i < callable->kernel_count && i < FAKE_MAX_KERNELS; ++i) {
    fake_rec.reg_func_ids[i] = callable->kernels[i].func_id;
    fake_copy(fake_rec.reg_kernel_paths[i], FAKE_PATH_MAX, callable->kernels[i].path);
    fake_copy(fake_rec.reg_kernel_symbols[i], 64, callable->kernels[i].symbol);
  }
  pthread_mutex_unlock(&fake_mu);
  ctx->registered |= (uint64_t)1 << callable_id;
  return SIMPLER_OK;
}

FAKE_API int simpler_unregister_callable(simpler_device_context* ctx, int32_t callable_id) {
  if (ctx == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  int st = fake_check(ctx);
  if (st != SIMPLER_OK) return st;
  if (callable_id < 0 || callable_id >= FAKE_MAX_CALLABLES ||
      !((ctx->registered >> callable_id) & 1u))
    return fake_fail(ctx, SIMPLER_ERR_UNKNOWN_CALLABLE, "fake: callable id not registered");
  ctx->registered &= ~((uint64_t)1 << callable_id);
  pthread_mutex_lock(&fake_mu);
  ++fake_rec.unregisters;
  pthread_mutex_unlock(&fake_mu);
  return SIMPLER_OK;
}

/* The phased API is not used by ChipWorker; the fake only answers that no run is prepared. */
FAKE_API int simpler_prepare_run(simpler_device_context* ctx, int32_t callable_id,
                                 const simpler_task_args* args, const simpler_run_config* config) {
  (void)callable_id;
  (void)args;
  (void)config;
  if (ctx == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  return fake_fail(ctx, SIMPLER_ERR_INVALID_ARGUMENT, "fake: the phased run API is not faked");
}
FAKE_API int simpler_launch_run(simpler_device_context* ctx) {
  if (ctx == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  return fake_fail(ctx, SIMPLER_ERR_NO_RUN, "fake: no run was prepared");
}
FAKE_API int simpler_finalize_run(simpler_device_context* ctx) {
  if (ctx == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  return fake_fail(ctx, SIMPLER_ERR_NO_RUN, "fake: no run was prepared");
}

/* The fake records no trace: every run's trace is empty. */
FAKE_API int simpler_get_run_trace(const simpler_device_context* ctx, simpler_trace_info* out) {
  if (ctx == NULL || out == NULL || out->struct_size < sizeof(simpler_trace_info))
    return SIMPLER_ERR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  return SIMPLER_OK;
}

#ifndef FAKE_OMIT_RUN
FAKE_API int simpler_wait_run(simpler_device_context* ctx) {
  if (ctx == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  return fake_fail(ctx, SIMPLER_ERR_NO_RUN, "fake: no run was prepared");
}

FAKE_API int simpler_run(simpler_device_context* ctx, int32_t callable_id,
                         const simpler_task_args* args, const simpler_run_config* config) {
  if (ctx == NULL || args == NULL || config == NULL) return SIMPLER_ERR_INVALID_ARGUMENT;
  int st = fake_check(ctx);
  if (st != SIMPLER_OK) return st;
  if (callable_id < 0 || callable_id >= FAKE_MAX_CALLABLES ||
      !((ctx->registered >> callable_id) & 1u))
    return fake_fail(ctx, SIMPLER_ERR_UNKNOWN_CALLABLE, "fake: callable id not registered");
  pthread_mutex_lock(&fake_mu);
  ++fake_rec.runs;
  fake_rec.run_callable_id = callable_id;
  fake_rec.run_tensor_count = args->tensor_count;
  fake_rec.run_scalar_count = args->scalar_count;
  if (args->tensor_count > 0) fake_rec.run_tensor0 = args->tensors[0];
  for (int32_t i = 0; i < args->scalar_count && i < 4; ++i)
    fake_rec.run_scalars[i] = args->scalars[i];
  fake_rec.run_config = *config;
  pthread_mutex_unlock(&fake_mu);
  ++ctx->runs;
  if (args->scalar_count > 1 && args->scalars[1] == FAKE_FAIL_MAGIC) {
    char text[128];
    snprintf(text, sizeof text, "fake kernel of callable %d on device %d: told to fail",
             (int)callable_id, (int)ctx->device_id);
    return fake_fail(ctx, SIMPLER_ERR_KERNEL_FAILED, text);
  }
  if (args->tensor_count > 0 && args->scalar_count > 0 && args->tensors[0].dtype == SIMPLER_INT64) {
    const simpler_tensor* t = &args->tensors[0];
    uint64_t n = 1;
    for (uint32_t i = 0; i < t->ndims && i < 5; ++i) n *= t->shapes[i];
    int64_t* data = (int64_t*)(uintptr_t)t->data;
    for (uint64_t i = 0; i < n; ++i) data[i] = (int64_t)args->scalars[0];
  }
  return SIMPLER_OK;
}
#endif

#endif /* SIMPLER_TESTS_FAKE_RUNTIME_H */
