// The C ABI of the simulated device runtime (include/simpler/device/device_abi.h). Every entry
// point checks its context pointer and turns C++ exceptions into status codes: nothing thrown
// inside the runtime crosses into the host.

#include <fmt/format.h>

#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "sim.hpp"

#define SIMPLER_EXPORT extern "C" __attribute__((visibility("default")))

namespace simpler::sim {
namespace {

template <class F>
int guarded(Context* ctx, F&& f) noexcept {
  if (ctx == nullptr) return SIMPLER_ERR_INVALID_ARGUMENT;
  try {
    return f();
  } catch (const std::bad_alloc&) {
    try {
      return ctx->fail(SIMPLER_ERR_OUT_OF_MEMORY, "out of host memory inside the device runtime");
    } catch (...) {
      return SIMPLER_ERR_OUT_OF_MEMORY;
    }
  } catch (const std::exception& e) {
    try {
      return ctx->fail(SIMPLER_ERR_SYSTEM, fmt::format("device runtime error: {}", e.what()));
    } catch (...) {
      return SIMPLER_ERR_SYSTEM;
    }
  }
}

Context* as_ctx(simpler_device_context* c) noexcept {
  return reinterpret_cast<Context*>(c);
}
const Context* as_ctx(const simpler_device_context* c) noexcept {
  return reinterpret_cast<const Context*>(c);
}

}  // namespace

// Both from the one table of status_codes.h.
const char* status_name(int status) noexcept {
  return status_code_name(status);  // "SIMPLER_ERR_UNKNOWN" for a code not in the table
}
const char* status_meaning(int status) noexcept {
  return is_status_code(status) ? status_code_meaning(status)
                                : "an unknown status code (is the host newer than the runtime?)";
}

}  // namespace simpler::sim

using simpler::sim::as_ctx;
using simpler::sim::Context;
using simpler::sim::guarded;

SIMPLER_EXPORT uint32_t simpler_device_abi_version(void) {
  return SIMPLER_DEVICE_ABI_VERSION;
}
SIMPLER_EXPORT const char* simpler_status_name(int status) {
  return simpler::sim::status_name(status);
}
SIMPLER_EXPORT const char* simpler_status_meaning(int status) {
  return simpler::sim::status_meaning(status);
}

SIMPLER_EXPORT simpler_device_context* simpler_create_context(void) {
  try {
    return reinterpret_cast<simpler_device_context*>(new Context());
  } catch (...) {
    return nullptr;
  }
}

SIMPLER_EXPORT void simpler_destroy_context(simpler_device_context* ctx) {
  Context* c = as_ctx(ctx);
  if (c == nullptr) return;
  static_cast<void>(c->finalize());
  // A broken context still has a thread inside user code that will touch it when it returns:
  // leave it allocated (documented in device_abi.h).
  if (!c->outcome.broken.load()) {
    delete c;
    return;
  }
  // Kept reachable on purpose (it is not a leak to hide from leak checkers: it is still in use).
  static std::mutex mu;
  static std::vector<Context*>* kept = new std::vector<Context*>();
  std::lock_guard lk(mu);
  kept->push_back(c);
}

SIMPLER_EXPORT int simpler_init(simpler_device_context* ctx, int32_t device_id,
                                const simpler_init_options* opts) {
  return guarded(as_ctx(ctx), [&] { return as_ctx(ctx)->init(device_id, opts); });
}

SIMPLER_EXPORT int simpler_finalize(simpler_device_context* ctx) {
  return guarded(as_ctx(ctx), [&] { return as_ctx(ctx)->finalize(); });
}

SIMPLER_EXPORT const char* simpler_last_error(const simpler_device_context* ctx) {
  return ctx == nullptr ? "NULL device context" : as_ctx(ctx)->life.last_error.c_str();
}

SIMPLER_EXPORT int simpler_get_stats(const simpler_device_context* ctx,
                                     simpler_context_stats* out) {
  if (ctx == nullptr || out == nullptr) return SIMPLER_ERR_INVALID_ARGUMENT;
  // A caller built against an older header passes a smaller struct: fill only what it has.
  simpler_context_stats s{};
  as_ctx(ctx)->stats(&s);
  const std::size_t n =
      out->struct_size != 0 && out->struct_size < sizeof s ? out->struct_size : sizeof s;
  std::memcpy(out, &s, n);
  if (n >= sizeof(std::uint32_t)) out->struct_size = static_cast<std::uint32_t>(n);
  return SIMPLER_OK;
}

SIMPLER_EXPORT void* simpler_device_malloc(simpler_device_context* ctx, size_t bytes) {
  if (ctx == nullptr) return nullptr;
  try {
    return as_ctx(ctx)->device_malloc(bytes);
  } catch (...) {
    return nullptr;
  }
}

SIMPLER_EXPORT int simpler_device_free(simpler_device_context* ctx, void* ptr) {
  return guarded(as_ctx(ctx), [&] { return as_ctx(ctx)->device_free(ptr); });
}

SIMPLER_EXPORT int simpler_copy_to_device(simpler_device_context* ctx, void* dev, const void* host,
                                          size_t bytes) {
  return guarded(as_ctx(ctx), [&]() -> int {
    if ((dev == nullptr || host == nullptr) && bytes > 0) {
      return as_ctx(ctx)->fail(SIMPLER_ERR_INVALID_ARGUMENT, "copy_to_device: NULL pointer");
    }
    if (bytes > 0) std::memcpy(dev, host, bytes);
    return SIMPLER_OK;
  });
}

SIMPLER_EXPORT int simpler_copy_from_device(simpler_device_context* ctx, void* host,
                                            const void* dev, size_t bytes) {
  return guarded(as_ctx(ctx), [&]() -> int {
    if ((dev == nullptr || host == nullptr) && bytes > 0) {
      return as_ctx(ctx)->fail(SIMPLER_ERR_INVALID_ARGUMENT, "copy_from_device: NULL pointer");
    }
    if (bytes > 0) std::memcpy(host, dev, bytes);
    return SIMPLER_OK;
  });
}

SIMPLER_EXPORT int simpler_register_callable(simpler_device_context* ctx, int32_t callable_id,
                                             const simpler_chip_callable_desc* callable) {
  return guarded(as_ctx(ctx),
                 [&] { return as_ctx(ctx)->register_callable(callable_id, callable); });
}

SIMPLER_EXPORT int simpler_unregister_callable(simpler_device_context* ctx, int32_t callable_id) {
  return guarded(as_ctx(ctx), [&] { return as_ctx(ctx)->unregister_callable(callable_id); });
}

SIMPLER_EXPORT int simpler_prepare_run(simpler_device_context* ctx, int32_t callable_id,
                                       const simpler_task_args* args,
                                       const simpler_run_config* config) {
  return guarded(as_ctx(ctx), [&] { return as_ctx(ctx)->prepare_run(callable_id, args, config); });
}

SIMPLER_EXPORT int simpler_launch_run(simpler_device_context* ctx) {
  return guarded(as_ctx(ctx), [&] { return as_ctx(ctx)->launch_run(); });
}

SIMPLER_EXPORT int simpler_wait_run(simpler_device_context* ctx) {
  return guarded(as_ctx(ctx), [&] { return as_ctx(ctx)->wait_run(); });
}

SIMPLER_EXPORT int simpler_finalize_run(simpler_device_context* ctx) {
  return guarded(as_ctx(ctx), [&] { return as_ctx(ctx)->finalize_run(); });
}

SIMPLER_EXPORT int simpler_run(simpler_device_context* ctx, int32_t callable_id,
                               const simpler_task_args* args, const simpler_run_config* config) {
  return guarded(as_ctx(ctx), [&] {
    Context& c = *as_ctx(ctx);
    if (const int rc = c.prepare_run(callable_id, args, config); rc != SIMPLER_OK) return rc;
    if (const int rc = c.launch_run(); rc != SIMPLER_OK) {
      static_cast<void>(c.finalize_run());
      return rc;
    }
    static_cast<void>(c.wait_run());
    return c.finalize_run();
  });
}

SIMPLER_EXPORT int simpler_get_run_trace(const simpler_device_context* ctx,
                                         simpler_trace_info* out) {
  if (ctx == nullptr) return SIMPLER_ERR_INVALID_ARGUMENT;
  return simpler::sim::diag_get_trace(*as_ctx(ctx), out);
}
