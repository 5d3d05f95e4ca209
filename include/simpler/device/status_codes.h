/* simpler — the device status codes, defined once.
 *
 * SIMPLER_STATUS_CODES(X) expands X(NAME, value, "meaning") once per status code: SIMPLER_OK and
 * every SIMPLER_ERR_*. Everything that names or explains a code is generated from this table:
 * the enumerators of device_abi.h, simpler_status_name() and simpler_status_meaning() in the
 * device runtimes, and simpler::status_code_name() / status_code_meaning() below, with which
 * host code names a status without a loaded runtime. A meaning is one sentence, lower case, with
 * no final period.
 *
 * The values are part of the device ABI (SIMPLER_DEVICE_ABI_VERSION): never change or reuse one
 * (a value listed twice does not compile: the functions below switch on them). 0 is success;
 * host API misuse counts down from -1, the failures of a run from -101. This header compiles as
 * C99 and as C++.
 */
#ifndef SIMPLER_DEVICE_STATUS_CODES_H
#define SIMPLER_DEVICE_STATUS_CODES_H

/* clang-format off */
#define SIMPLER_STATUS_CODES(X)                                                                    \
  X(SIMPLER_OK, 0, "success")                                                                      \
  /* Host API misuse. */                                                                           \
  X(SIMPLER_ERR_INVALID_ARGUMENT, -1, "an argument is NULL or out of range")                       \
  X(SIMPLER_ERR_NOT_INITIALISED, -2, "the context is not initialised (call simpler_init)")         \
  X(SIMPLER_ERR_FINALISED, -3, "the context was finalised")                                        \
  X(SIMPLER_ERR_RUN_ACTIVE, -4, "a run is in progress on the context")                             \
  X(SIMPLER_ERR_NO_RUN, -5, "there is no prepared or launched run")                                \
  X(SIMPLER_ERR_UNKNOWN_CALLABLE, -6, "the callable id is not registered")                         \
  X(SIMPLER_ERR_DUPLICATE_CALLABLE, -7, "the callable id is already registered")                   \
  X(SIMPLER_ERR_LOAD_FAILED, -8, "an orchestration or kernel shared object could not be loaded")   \
  X(SIMPLER_ERR_OUT_OF_MEMORY, -9, "device memory is exhausted")                                   \
  X(SIMPLER_ERR_SYSTEM, -10, "an OS call failed")                                                  \
  X(SIMPLER_ERR_ALREADY_INITIALISED, -11, "the context is already initialised")                    \
  X(SIMPLER_ERR_CONTEXT_BROKEN, -12,                                                               \
    "a device thread is stuck in user code; the context cannot run again")                         \
  /* Failures of a run, found on the device. */                                                    \
  X(SIMPLER_ERR_SCOPE_DEADLOCK, -101, "a scope holds more tasks than its ring's task window")      \
  X(SIMPLER_ERR_HEAP_RING_DEADLOCK, -102,                                                          \
    "a heap ring is too small for the live outputs of the graph")                                  \
  X(SIMPLER_ERR_FLOW_CONTROL_DEADLOCK, -103,                                                       \
    "a task window is too small for the live tasks of the graph")                                  \
  X(SIMPLER_ERR_DEP_POOL_OVERFLOW, -104, "a dependency-list pool is exhausted")                    \
  X(SIMPLER_ERR_INVALID_TASK_ARGS, -105,                                                           \
    "the orchestration submitted a task with invalid arguments")                                   \
  X(SIMPLER_ERR_UNKNOWN_FUNC_ID, -106, "the orchestration named a func_id with no kernel")         \
  X(SIMPLER_ERR_TOO_MANY_PRODUCERS, -107,                                                          \
    "a task depends on more producer tasks than the runtime tracks")                               \
  X(SIMPLER_ERR_TENSOR_WAIT_TIMEOUT, -108,                                                         \
    "reading a tensor on the device waited too long for its writers")                              \
  X(SIMPLER_ERR_ORCH_FATAL, -109, "the orchestration failed")                                      \
  X(SIMPLER_ERR_SCOPE_OVERFLOW, -110, "scopes are unbalanced or nested too deep")                  \
  X(SIMPLER_ERR_TENSORMAP_OVERFLOW, -111, "too many live tensor writers for the TensorMap")        \
  X(SIMPLER_ERR_ARG_COUNT, -112, "the run's arguments do not match what the callable expects")     \
  X(SIMPLER_ERR_KERNEL_FAILED, -120, "a kernel reported failure")                                  \
  X(SIMPLER_ERR_KERNEL_FAULT, -121,                                                                \
    "a kernel faulted (invalid memory access, arithmetic error, illegal instruction)")             \
  X(SIMPLER_ERR_SCHEDULER_TIMEOUT, -200,                                                           \
    "the device made no progress within the watchdog period (stuck kernel or deadlock)")
/* clang-format on */

#ifdef __cplusplus
namespace simpler {

/// True when `status` is one of the codes of SIMPLER_STATUS_CODES.
constexpr bool is_status_code(int status) noexcept {
  switch (status) {
#define SIMPLER_DETAIL_STATUS_KNOWN(name, value, meaning) case (value):
    SIMPLER_STATUS_CODES(SIMPLER_DETAIL_STATUS_KNOWN)
#undef SIMPLER_DETAIL_STATUS_KNOWN
    return true;
    default:
      return false;
  }
}

/// The name of a status code ("SIMPLER_ERR_LOAD_FAILED"), or "SIMPLER_ERR_UNKNOWN" for a value
/// not in SIMPLER_STATUS_CODES. Never null.
constexpr const char* status_code_name(int status) noexcept {
  switch (status) {
#define SIMPLER_DETAIL_STATUS_NAME(name, value, meaning) \
  case (value):                                          \
    return #name;
    SIMPLER_STATUS_CODES(SIMPLER_DETAIL_STATUS_NAME)
#undef SIMPLER_DETAIL_STATUS_NAME
    default:
      return "SIMPLER_ERR_UNKNOWN";
  }
}

/// What a status code means, in one sentence ("device memory is exhausted"), or "an unknown
/// status code" for a value not in SIMPLER_STATUS_CODES. Never null.
constexpr const char* status_code_meaning(int status) noexcept {
  switch (status) {
#define SIMPLER_DETAIL_STATUS_MEANING(name, value, meaning) \
  case (value):                                             \
    return meaning;
    SIMPLER_STATUS_CODES(SIMPLER_DETAIL_STATUS_MEANING)
#undef SIMPLER_DETAIL_STATUS_MEANING
    default:
      return "an unknown status code";
  }
}

}  // namespace simpler
#endif /* __cplusplus */

#endif /* SIMPLER_DEVICE_STATUS_CODES_H */
