/* Test double: what a fake device runtime (a tests/device/runtimes .c file) records about calls it
 * received, so a test can check what ChipWorker passed through the device ABI. C and C++.
 *
 * Each fake exports `const fake_record* fake_runtime_record(void)` and
 * `void fake_runtime_reset(void)`. A test reaches them by dlopen-ing the same path the
 * ChipWorker loads (the dynamic loader hands out the same instance). The record is per process:
 * a forked child's calls are not seen by its parent. */
#ifndef SIMPLER_TESTS_FAKE_RUNTIME_RECORD_H
#define SIMPLER_TESTS_FAKE_RUNTIME_RECORD_H

#include <stdint.h>

#include <simpler/device/device_abi.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKE_PATH_MAX 512
#define FAKE_MAX_KERNELS 4

/* A scalar the fake treats as "fail this run": when scalar 1 of a run equals it, the run fails
 * with SIMPLER_ERR_KERNEL_FAILED. */
#define FAKE_FAIL_MAGIC 0xFA11EDull

typedef struct fake_record {
  /* Counters over the process lifetime (since the last fake_runtime_reset). */
  int creates;
  int destroys;
  int inits;
  int finalizes;
  int registers;
  int unregisters;
  int runs;
  int mallocs;
  int frees;
  int copies_to;
  int copies_from;
  /* The last simpler_init. */
  int32_t init_device_id;
  int init_had_options;
  simpler_init_options init_options;
  /* The last simpler_register_callable. */
  int32_t reg_callable_id;
  char reg_orch_path[FAKE_PATH_MAX];
  char reg_orch_entry[FAKE_PATH_MAX];
  uint32_t reg_kernel_count;
  int32_t reg_func_ids[FAKE_MAX_KERNELS];
  char reg_kernel_paths[FAKE_MAX_KERNELS][FAKE_PATH_MAX];
  char reg_kernel_symbols[FAKE_MAX_KERNELS][64];
  /* The last simpler_run. */
  int32_t run_callable_id;
  int32_t run_tensor_count;
  int32_t run_scalar_count;
  simpler_tensor run_tensor0;
  uint64_t run_scalars[4];
  simpler_run_config run_config;
} fake_record;

#ifdef __cplusplus
}
#endif

#endif /* SIMPLER_TESTS_FAKE_RUNTIME_RECORD_H */
