// simpler — C++ helpers over the on-device ABI (task_abi.h) for orchestration and kernel .so
// files. Header-only and free of link dependencies: an orchestration or kernel .so includes it
// and links nothing from simpler.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "simpler/device/task_abi.h"

namespace simpler::device {

using TaskId = simpler_task_id;
using ChipTensor = simpler_chip_tensor;

/// A value as the 64-bit pattern scalars travel in (floats are bit-cast, integers widened).
template <class T>
[[nodiscard]] inline std::uint64_t to_u64(T v) noexcept {
  static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>);
  if constexpr (std::is_floating_point_v<T>) {
    if constexpr (sizeof(T) == 4)
      return std::bit_cast<std::uint32_t>(v);
    else
      return std::bit_cast<std::uint64_t>(v);
  } else {
    return static_cast<std::uint64_t>(v);
  }
}
template <class T>
[[nodiscard]] inline T from_u64(std::uint64_t v) noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    if constexpr (sizeof(T) == 4)
      return std::bit_cast<T>(static_cast<std::uint32_t>(v));
    else
      return std::bit_cast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

/// A tensor description with only shape and type (for runtime-allocated outputs).
[[nodiscard]] inline ChipTensor describe(std::initializer_list<std::uint32_t> shape,
                                         std::uint8_t dtype = SIMPLER_FLOAT32) noexcept {
  ChipTensor t{};
  t.owner_task = SIMPLER_INVALID_TASK_ID;
  t.dtype = dtype;
  for (auto e : shape) {
    if (t.ndims < 5) t.shapes[t.ndims++] = e;
  }
  return t;
}

/// A contiguous sub-view of `t` starting `element_offset` elements into it. The caller keeps it
/// inside the parent (the runtime tracks dependencies by the parent's buffer and byte range).
[[nodiscard]] inline ChipTensor view(const ChipTensor& t, std::uint64_t element_offset,
                                     std::initializer_list<std::uint32_t> shape) noexcept {
  ChipTensor v = t;
  v.offset = t.offset + element_offset * simpler_dtype_size(t.dtype);
  v.ndims = 0;
  for (auto e : shape) {
    if (v.ndims < 5) v.shapes[v.ndims++] = e;
  }
  for (std::uint32_t i = v.ndims; i < 5; ++i) v.shapes[i] = 0;
  return v;
}

/// Builds one task's arguments. Tensors come first, then scalars.
class Task {
 public:
  Task() noexcept { std::memset(&b_, 0, sizeof b_); }
  Task& input(const ChipTensor& t) noexcept { return add(t, SIMPLER_TAG_INPUT); }
  Task& inout(const ChipTensor& t) noexcept { return add(t, SIMPLER_TAG_INOUT); }
  Task& output(const ChipTensor& existing) noexcept {
    return add(existing, SIMPLER_TAG_OUTPUT_EXISTING);
  }
  /// A new buffer the runtime allocates from the current scope's heap ring.
  Task& output(std::initializer_list<std::uint32_t> shape,
               std::uint8_t dtype = SIMPLER_FLOAT32) noexcept {
    const ChipTensor t = describe(shape, dtype);
    return add(t, SIMPLER_TAG_OUTPUT);
  }
  Task& no_dep(const ChipTensor& t) noexcept { return add(t, SIMPLER_TAG_NO_DEP); }
  template <class T>
  Task& scalar(T v) noexcept {
    simpler_builder_add_scalar(&b_, to_u64(v));
    return *this;
  }
  /// Runs the kernel as `n` SPMD blocks (default 1); 0 = one block per core of the task's shape
  /// the run may use. Each block sees local().block_idx in 0..n-1 and local().block_num == n.
  Task& blocks(std::int64_t n) noexcept {
    simpler_builder_set_blocks(&b_, n);
    return *this;
  }
  Task& add(const ChipTensor& t, std::int32_t tag) noexcept {
    simpler_builder_add_tensor(&b_, &t, tag);
    return *this;
  }
  [[nodiscard]] const simpler_task_builder& raw() const noexcept { return b_; }

 private:
  simpler_task_builder b_;
};

/// What a submit returns: the task id and its tensors as the kernels see them.
struct Submitted {
  TaskId id = SIMPLER_INVALID_TASK_ID;
  std::array<ChipTensor, SIMPLER_MAX_TASK_TENSORS> tensors{};
  [[nodiscard]] const ChipTensor& tensor(int i) const noexcept {
    return tensors[static_cast<std::size_t>(i)];
  }
  [[nodiscard]] bool ok() const noexcept { return id != SIMPLER_INVALID_TASK_ID; }
};

/// The orchestration's view of the runtime. Thin: every call is one function-table call.
class Orch {
 public:
  explicit Orch(simpler_orch_runtime* rt) noexcept : rt_(rt) {}

  Submitted submit(simpler_mixed_kernels k, const Task& t) const noexcept {
    Submitted s;
    s.id = rt_->ops->submit(rt_, k, &t.raw(), s.tensors.data());
    return s;
  }
  Submitted aic(std::int32_t func_id, const Task& t) const noexcept {
    return submit({func_id, -1, -1}, t);
  }
  Submitted aiv(std::int32_t func_id, const Task& t) const noexcept {
    return submit({-1, func_id, -1}, t);
  }
  ChipTensor alloc(std::initializer_list<std::uint32_t> shape,
                   std::uint8_t dtype = SIMPLER_FLOAT32) const noexcept {
    ChipTensor d = describe(shape, dtype);
    ChipTensor out{};
    out.owner_task = SIMPLER_INVALID_TASK_ID;
    rt_->ops->alloc_tensor(rt_, d.shapes, d.ndims, d.dtype, &out);
    return out;
  }
  /// Element `index` of `t` once its writers finished (T{} after a fatal error).
  template <class T>
  [[nodiscard]] T read(const ChipTensor& t, std::uint64_t index) const noexcept {
    T v{};
    rt_->ops->read_tensor(rt_, &t, index * sizeof(T), &v, sizeof(T));
    return v;
  }
  void scope_begin() const noexcept { rt_->ops->scope_begin(rt_); }
  void scope_end() const noexcept { rt_->ops->scope_end(rt_); }
  /// RAII scope: `auto s = orch.scope();`
  [[nodiscard]] auto scope() const noexcept {
    struct Guard {
      const Orch* o;
      explicit Guard(const Orch* p) noexcept : o(p) { o->scope_begin(); }
      Guard(const Guard&) = delete;
      Guard& operator=(const Guard&) = delete;
      ~Guard() { o->scope_end(); }
    };
    return Guard(this);
  }
  [[nodiscard]] bool fatal() const noexcept { return rt_->ops->is_fatal(rt_) != 0; }
  void report_fatal(const char* message) const noexcept { rt_->ops->report_fatal(rt_, message); }
  [[nodiscard]] std::uint32_t clusters() const noexcept { return rt_->ops->cluster_count(rt_); }
  [[nodiscard]] std::uint32_t aiv_cores() const noexcept { return rt_->ops->aiv_count(rt_); }
  [[nodiscard]] simpler_orch_runtime* raw() const noexcept { return rt_; }

 private:
  simpler_orch_runtime* rt_;
};

/// A kernel's view of its args[] array.
class KernelArgs {
 public:
  explicit KernelArgs(std::int64_t* args) noexcept : a_(args) {}
  [[nodiscard]] const ChipTensor& tensor(int i) const noexcept {
    return *simpler_kernel_tensor(a_, i);
  }
  template <class T>
  [[nodiscard]] T* data(int i) const noexcept {
    return static_cast<T*>(simpler_tensor_data(simpler_kernel_tensor(a_, i)));
  }
  /// args[index] as a scalar of type T (index counts tensors first).
  template <class T>
  [[nodiscard]] T scalar(int index) const noexcept {
    return from_u64<T>(static_cast<std::uint64_t>(a_[index]));
  }
  void fail(const char* message) const noexcept { simpler_kernel_fail(a_, message); }
  [[nodiscard]] const simpler_global_context& global() const noexcept {
    return *simpler_kernel_global(a_);
  }
  [[nodiscard]] simpler_local_context& local() const noexcept { return *simpler_kernel_local(a_); }
  /// This dispatch's SPMD block (0..block_num()-1) and the task's block count.
  [[nodiscard]] std::int32_t block_idx() const noexcept { return local().block_idx; }
  [[nodiscard]] std::int32_t block_num() const noexcept { return local().block_num; }

 private:
  std::int64_t* a_;
};

}  // namespace simpler::device

/// Declares a kernel entry: SIMPLER_KERNEL(args) { ... uses `args` (a KernelArgs) ... }
#define SIMPLER_KERNEL(name)                                                               \
  static void simpler_kernel_body_(::simpler::device::KernelArgs name);                    \
  extern "C" __attribute__((visibility("default"))) void kernel_entry(std::int64_t* raw) { \
    simpler_kernel_body_(::simpler::device::KernelArgs(raw));                              \
  }                                                                                        \
  static void simpler_kernel_body_(::simpler::device::KernelArgs name)

/// Declares an orchestration entry: SIMPLER_ORCHESTRATION(orch, args) { ... }
#define SIMPLER_ORCHESTRATION(orch, args)                                           \
  static void simpler_orch_body_(const ::simpler::device::Orch& orch,               \
                                 const simpler_orch_args& args);                    \
  extern "C" __attribute__((visibility("default"))) void aicpu_orchestration_entry( \
      simpler_orch_runtime* rt, const simpler_orch_args* a) {                       \
    simpler_orch_body_(::simpler::device::Orch(rt), *a);                            \
  }                                                                                 \
  static void simpler_orch_body_(const ::simpler::device::Orch& orch, const simpler_orch_args& args)
