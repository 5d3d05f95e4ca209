// Task data: tensor validation, TaskArgs, CallConfig, callable digests and the args blob codec.
#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "simpler/args_blob.hpp"
#include "simpler/call_config.hpp"
#include "simpler/callable.hpp"
#include "simpler/error.hpp"
#include "simpler/task_args.hpp"
#include "simpler/types.hpp"

namespace simpler {

const char* to_string(TensorArgType t) noexcept {
  switch (t) {
    case TensorArgType::Input:
      return "Input";
    case TensorArgType::Output:
      return "Output";
    case TensorArgType::InOut:
      return "InOut";
    case TensorArgType::OutputExisting:
      return "OutputExisting";
    case TensorArgType::NoDep:
      return "NoDep";
  }
  return "?";
}

const char* to_string(DataType t) noexcept {
  switch (t) {
    case DataType::Float32:
      return "Float32";
    case DataType::Float16:
      return "Float16";
    case DataType::Int32:
      return "Int32";
    case DataType::Int16:
      return "Int16";
    case DataType::Int8:
      return "Int8";
    case DataType::UInt8:
      return "UInt8";
    case DataType::BFloat16:
      return "BFloat16";
    case DataType::Int64:
      return "Int64";
    case DataType::UInt64:
      return "UInt64";
  }
  return "unknown";
}

const char* to_string(CallableKind k) noexcept {
  switch (k) {
    case CallableKind::Sub:
      return "sub";
    case CallableKind::Orch:
      return "orch";
    case CallableKind::Chip:
      return "chip";
  }
  return "unknown";
}

namespace {
__extension__ using u128 = unsigned __int128;

// Why `t` is malformed, or nullptr when it is fine. Shared by validate() and the blob decoder so
// both reject exactly the same tensors.
std::string tensor_defect(const ContinuousTensor& t) {
  if (t.ndims == 0 || t.ndims > kMaxTensorDims) {
    return fmt::format("ndims is {}; a tensor has 1 to {} dimensions", t.ndims, kMaxTensorDims);
  }
  if (!is_valid(t.dtype)) {
    return fmt::format("dtype value {} is not a DataType (0..{})", static_cast<unsigned>(t.dtype),
                       kDataTypeCount - 1);
  }
  for (std::uint32_t i = t.ndims; i < kMaxTensorDims; ++i) {
    if (t.shapes[i] != 0) {
      return fmt::format("shapes[{}] is {} but ndims is {}; extents past ndims must be 0", i,
                         t.shapes[i], t.ndims);
    }
  }
  u128 bytes = element_size(t.dtype);
  for (std::uint32_t i = 0; i < t.ndims; ++i) {
    bytes *= t.shapes[i];
    if (bytes > std::numeric_limits<std::uint64_t>::max()) {
      return "its byte size does not fit in 64 bits";
    }
  }
  if (t.data != 0 && static_cast<u128>(t.data) + bytes >
                         static_cast<u128>(std::numeric_limits<std::uint64_t>::max())) {
    return "its byte range wraps past the end of the address space";
  }
  return {};
}
}  // namespace

void validate(const ContinuousTensor& t) {
  if (auto why = tensor_defect(t); !why.empty()) {
    throw UsageError(fmt::format("invalid tensor: {}", why));
  }
}

namespace detail {
std::uint32_t checked_extent(std::size_t n) {
  if (n > std::numeric_limits<std::uint32_t>::max()) {
    throw UsageError(fmt::format(
        "make_tensor: {} elements do not fit one extent (at most {}); give a multi-dimensional "
        "shape",
        n, std::numeric_limits<std::uint32_t>::max()));
  }
  return static_cast<std::uint32_t>(n);
}
}  // namespace detail

ContinuousTensor make_tensor(void* data, std::span<const std::uint32_t> shape, DataType dtype) {
  if (shape.empty() || shape.size() > kMaxTensorDims) {
    throw UsageError(fmt::format("make_tensor: {} dimensions given; a tensor has 1 to {}",
                                 shape.size(), kMaxTensorDims));
  }
  ContinuousTensor t;
  t.data = reinterpret_cast<std::uintptr_t>(data);
  t.ndims = static_cast<std::uint32_t>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) t.shapes[i] = shape[i];
  t.dtype = dtype;
  validate(t);
  return t;
}

const ContinuousTensor& TaskArgsView::tensor(std::int32_t i) const {
  if (i < 0 || i >= tensor_count) {
    throw UsageError(
        fmt::format("TaskArgsView::tensor({}): the task has {} tensors", i, tensor_count));
  }
  return tensors[i];
}

std::uint64_t TaskArgsView::scalar(std::int32_t i) const {
  if (i < 0 || i >= scalar_count) {
    throw UsageError(
        fmt::format("TaskArgsView::scalar({}): the task has {} scalars", i, scalar_count));
  }
  return scalars[i];
}

namespace {
void check_tag(TensorArgType tag) {
  const auto v = static_cast<std::int32_t>(tag);
  if (v < 0 || v > static_cast<std::int32_t>(TensorArgType::NoDep)) {
    throw UsageError(fmt::format("TaskArgs: tag value {} is not a TensorArgType (0..4)", v));
  }
}
}  // namespace

TaskArgs& TaskArgs::add_tensor(const ContinuousTensor& t, TensorArgType tag) {
  if (!scalars_.empty()) {
    throw UsageError(
        "TaskArgs::add_tensor: a tensor cannot follow a scalar; add every tensor before the first "
        "scalar");
  }
  check_tag(tag);
  validate(t);
  tensors_.push_back(t);
  tags_.push_back(tag);
  return *this;
}

void TaskArgs::set_tag(std::int32_t i, TensorArgType tag) {
  check_tag(tag);
  if (i < 0 || i >= tensor_count()) {
    throw UsageError(fmt::format("TaskArgs::set_tag({}): there are {} tensors", i, tensor_count()));
  }
  tags_[static_cast<std::size_t>(i)] = tag;
}

const ContinuousTensor& TaskArgs::tensor(std::int32_t i) const {
  return view().tensor(i);
}
std::uint64_t TaskArgs::scalar(std::int32_t i) const {
  return view().scalar(i);
}
TensorArgType TaskArgs::tag(std::int32_t i) const {
  if (i < 0 || i >= tensor_count()) {
    throw UsageError(fmt::format("TaskArgs::tag({}): there are {} tensors", i, tensor_count()));
  }
  return tags_[static_cast<std::size_t>(i)];
}

void CallConfig::validate() const {
  if (block_dim < 0)
    throw UsageError(fmt::format("CallConfig: block_dim is {}; it must be >= 0", block_dim));
  if (aicpu_thread_num < 0) {
    throw UsageError(
        fmt::format("CallConfig: aicpu_thread_num is {}; it must be >= 0", aicpu_thread_num));
  }
  if (timeout.count() < 0) {
    throw UsageError(
        fmt::format("CallConfig: timeout is {} ms; it must be >= 0 (0 = the Worker's default)",
                    timeout.count()));
  }
  if (enable_l2_swimlane < 0 || enable_l2_swimlane > 4) {
    throw UsageError(
        fmt::format("CallConfig: enable_l2_swimlane is {}; it must be 0..4", enable_l2_swimlane));
  }
  if (std::memchr(output_prefix.data(), '\0', output_prefix.size()) == nullptr) {
    throw UsageError("CallConfig: output_prefix is not NUL-terminated");
  }
  if (wants_diagnostics() && output_prefix[0] == '\0') {
    throw UsageError(
        "CallConfig: diagnostics are enabled but output_prefix is empty; set the directory to "
        "write them to");
  }
  for (std::size_t r = 0; r < 4; ++r) {
    const auto w = runtime_env.ring_task_window[r];
    if (w != 0 && (w < 4 || w > (std::uint64_t{1} << 20) || (w & (w - 1)) != 0)) {
      throw UsageError(fmt::format(
          "CallConfig: runtime_env.ring_task_window[{}] is {}; it must be 0 (default) or a power "
          "of two in [4, 1048576]",
          r, w));
    }
    const auto h = runtime_env.ring_heap[r];
    if (h != 0 && h < 1024) {
      throw UsageError(fmt::format(
          "CallConfig: runtime_env.ring_heap[{}] is {} bytes; it must be 0 (default) or >= 1024", r,
          h));
    }
    const auto d = runtime_env.ring_dep_pool[r];
    if (d != 0 && d < 4) {
      throw UsageError(fmt::format(
          "CallConfig: runtime_env.ring_dep_pool[{}] is {}; it must be 0 (default) or >= 4", r, d));
    }
  }
}

std::uint64_t callable_digest(CallableKind kind, std::string_view name) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a offset basis
  auto mix = [&h](unsigned char c) {
    h ^= c;
    h *= 0x100000001b3ULL;
  };
  mix(static_cast<unsigned char>(kind));
  for (char c : name) mix(static_cast<unsigned char>(c));
  // splitmix64 finaliser: spreads FNV's weak low bits over the whole word.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h == 0 ? 1 : h;
}

std::size_t encode_args_blob(const TaskArgsView& v, std::span<std::byte> out) {
  if (v.tensor_count < 0 || v.scalar_count < 0) {
    throw UsageError(fmt::format("args blob: negative count in the view (tensors {}, scalars {})",
                                 v.tensor_count, v.scalar_count));
  }
  const std::size_t need = args_blob_size(v);
  if (out.size() < need) {
    throw UsageError(
        fmt::format("args blob needs {} bytes ({} tensors, {} scalars) but only {} are available",
                    need, v.tensor_count, v.scalar_count, out.size()));
  }
  std::byte* p = out.data();
  std::memcpy(p, &v.tensor_count, 4);
  std::memcpy(p + 4, &v.scalar_count, 4);
  p += kArgsBlobHeaderBytes;
  const std::size_t tbytes = static_cast<std::size_t>(v.tensor_count) * sizeof(ContinuousTensor);
  if (tbytes != 0) std::memcpy(p, v.tensors, tbytes);
  p += tbytes;
  const std::size_t sbytes = static_cast<std::size_t>(v.scalar_count) * sizeof(std::uint64_t);
  if (sbytes != 0) std::memcpy(p, v.scalars, sbytes);
  return need;
}

TaskArgsView decode_args_blob(std::span<const std::byte> in) {
  if (in.size() < kArgsBlobHeaderBytes) {
    throw TransportError(
        fmt::format("args blob of {} bytes is shorter than its 8-byte header", in.size()));
  }
  if (reinterpret_cast<std::uintptr_t>(in.data()) % 8 != 0) {
    throw TransportError("args blob is not 8-byte aligned");
  }
  std::int32_t t = 0;
  std::int32_t s = 0;
  std::memcpy(&t, in.data(), 4);
  std::memcpy(&s, in.data() + 4, 4);
  if (t < 0 || s < 0) {
    throw TransportError(
        fmt::format("args blob has a negative count (tensors {}, scalars {})", t, s));
  }
  const std::uint64_t need = kArgsBlobHeaderBytes +
                             static_cast<std::uint64_t>(t) * sizeof(ContinuousTensor) +
                             static_cast<std::uint64_t>(s) * sizeof(std::uint64_t);
  if (need > in.size()) {
    throw TransportError(
        fmt::format("args blob claims {} tensors and {} scalars ({} bytes) but holds only {} bytes",
                    t, s, need, in.size()));
  }
  TaskArgsView v;
  v.tensor_count = t;
  v.scalar_count = s;
  v.tensors = reinterpret_cast<const ContinuousTensor*>(in.data() + kArgsBlobHeaderBytes);
  v.scalars = reinterpret_cast<const std::uint64_t*>(
      in.data() + kArgsBlobHeaderBytes + static_cast<std::size_t>(t) * sizeof(ContinuousTensor));
  for (std::int32_t i = 0; i < t; ++i) {
    if (auto why = tensor_defect(v.tensors[i]); !why.empty()) {
      throw TransportError(fmt::format("args blob tensor {} is malformed: {}", i, why));
    }
  }
  return v;
}

}  // namespace simpler
