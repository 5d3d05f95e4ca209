// simpler — ChipWorker's definitions; included at the end of <simpler/leaf/chip_worker.hpp>.
#pragma once

#include <bit>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "simpler/detail/device_runtime.hpp"
#include "simpler/device/task_abi.h"
#include "simpler/error.hpp"
#include "simpler/leaf/chip_worker.hpp"
#include "simpler/log.hpp"

namespace simpler {

// The host's argument types are passed to the device runtime as they are: check that the
// layouts the ABI promises really match.
static_assert(sizeof(ContinuousTensor) == sizeof(simpler_tensor));
static_assert(offsetof(ContinuousTensor, data) == offsetof(simpler_tensor, data));
static_assert(offsetof(ContinuousTensor, shapes) == offsetof(simpler_tensor, shapes));
static_assert(offsetof(ContinuousTensor, ndims) == offsetof(simpler_tensor, ndims));
static_assert(offsetof(ContinuousTensor, dtype) == offsetof(simpler_tensor, dtype));
static_assert(offsetof(ContinuousTensor, child_memory) == offsetof(simpler_tensor, child_memory));
static_assert(sizeof(TaskArgsView) == sizeof(simpler_task_args));
static_assert(offsetof(TaskArgsView, tensor_count) == offsetof(simpler_task_args, tensor_count));
static_assert(offsetof(TaskArgsView, scalar_count) == offsetof(simpler_task_args, scalar_count));
static_assert(offsetof(TaskArgsView, tensors) == offsetof(simpler_task_args, tensors));
static_assert(offsetof(TaskArgsView, scalars) == offsetof(simpler_task_args, scalars));
static_assert(static_cast<int>(DataType::Float32) == SIMPLER_FLOAT32);
static_assert(static_cast<int>(DataType::Float16) == SIMPLER_FLOAT16);
static_assert(static_cast<int>(DataType::Int32) == SIMPLER_INT32);
static_assert(static_cast<int>(DataType::Int16) == SIMPLER_INT16);
static_assert(static_cast<int>(DataType::Int8) == SIMPLER_INT8);
static_assert(static_cast<int>(DataType::UInt8) == SIMPLER_UINT8);
static_assert(static_cast<int>(DataType::BFloat16) == SIMPLER_BFLOAT16);
static_assert(static_cast<int>(DataType::Int64) == SIMPLER_INT64);
static_assert(static_cast<int>(DataType::UInt64) == SIMPLER_UINT64);
static_assert(static_cast<int>(TensorArgType::Input) == SIMPLER_TAG_INPUT);
static_assert(static_cast<int>(TensorArgType::Output) == SIMPLER_TAG_OUTPUT);
static_assert(static_cast<int>(TensorArgType::InOut) == SIMPLER_TAG_INOUT);
static_assert(static_cast<int>(TensorArgType::OutputExisting) == SIMPLER_TAG_OUTPUT_EXISTING);
static_assert(static_cast<int>(TensorArgType::NoDep) == SIMPLER_TAG_NO_DEP);
static_assert(ChipWorker::kMaxCallables <= 64, "used_ids_ is a 64-bit mask");

// ---- ChipWorker -----------------------------------------------------------------------------

namespace detail {
/// A ChipOptions duration as the device ABI's milliseconds; UsageError naming `field` when it
/// does not fit.
inline std::uint32_t chip_option_ms(std::chrono::milliseconds d, const char* field) {
  if (d.count() < 0 || d.count() > std::numeric_limits<std::uint32_t>::max()) {
    throw UsageError(
        fmt::format("ChipOptions::{} is {} ms; it must be in 0..{} ms (0 = the "
                    "device default)",
                    field, d.count(), std::numeric_limits<std::uint32_t>::max()));
  }
  return static_cast<std::uint32_t>(d.count());
}

/// The device ABI's run configuration for a CallConfig.
inline simpler_run_config run_config_of(const CallConfig& c) noexcept {
  simpler_run_config r{};
  r.struct_size = sizeof(simpler_run_config);
  r.aicpu_thread_num = c.aicpu_thread_num;
  for (std::size_t i = 0; i < 4; ++i) {
    r.ring_task_window[i] = c.runtime_env.ring_task_window[i];
    r.ring_heap[i] = c.runtime_env.ring_heap[i];
    r.ring_dep_pool[i] = c.runtime_env.ring_dep_pool[i];
  }
  r.block_dim = c.block_dim;
  r.swimlane = c.enable_l2_swimlane;
  r.dump_tensor = c.enable_dump_tensor;
  r.pmu = c.enable_pmu;
  r.dep_gen = c.enable_dep_gen;
  static_assert(sizeof r.output_prefix == sizeof c.output_prefix);
  std::memcpy(r.output_prefix, c.output_prefix.data(), sizeof r.output_prefix);
  return r;
}
}  // namespace detail

inline ChipWorker::ChipWorker(int device_id, ChipOptions options)
    : device_id_(device_id), options_(std::move(options)) {
  if (device_id_ < 0) {
    throw UsageError(fmt::format("ChipWorker: device id {} is negative", device_id_));
  }
  if (options_.aicpu_thread_num < 0) {
    throw UsageError(
        fmt::format("ChipOptions::aicpu_thread_num is {}; it must be >= 0 (0 = the "
                    "device default)",
                    options_.aicpu_thread_num));
  }
  detail::chip_option_ms(options_.scheduler_timeout, "scheduler_timeout");
  detail::chip_option_ms(options_.resource_wait, "resource_wait");
  detail::chip_option_ms(options_.tensor_wait, "tensor_wait");
  if (options_.hazards != Hazards::All && options_.hazards != Hazards::ReadAfterWrite) {
    throw UsageError(
        fmt::format("ChipOptions::hazards is {}; it must be Hazards::All or "
                    "Hazards::ReadAfterWrite",
                    static_cast<unsigned>(options_.hazards)));
  }
}

inline ChipWorker::ChipWorker(int device_id, ChipOptions options,
                              const detail::CallableRegistry& registry)
    : ChipWorker(device_id, std::move(options)) {
  registry_ = &registry;
}

inline ChipWorker::ChipWorker(ChipWorker&& o) noexcept
    : device_id_(o.device_id_),
      options_(std::move(o.options_)),
      registry_(o.registry_),
      rt_(o.rt_),
      ctx_(std::exchange(o.ctx_, nullptr)),
      state_(std::exchange(o.state_, State::Finalised)),
      used_ids_(std::exchange(o.used_ids_, 0)),
      names_(std::move(o.names_)),
      id_by_index_(std::move(o.id_by_index_)),
      late_(std::move(o.late_)) {}

inline ChipWorker& ChipWorker::operator=(ChipWorker&& o) noexcept {
  if (this != &o) {
    release();
    device_id_ = o.device_id_;
    options_ = std::move(o.options_);
    registry_ = o.registry_;
    rt_ = o.rt_;
    ctx_ = std::exchange(o.ctx_, nullptr);
    state_ = std::exchange(o.state_, State::Finalised);
    used_ids_ = std::exchange(o.used_ids_, 0);
    names_ = std::move(o.names_);
    id_by_index_ = std::move(o.id_by_index_);
    late_ = std::move(o.late_);
  }
  return *this;
}

inline ChipWorker::~ChipWorker() {
  release();
}

inline void ChipWorker::release() noexcept {
  try {
    finalize();
  } catch (...) {
    // The context is destroyed anyway; a destructor has nobody to report to.
  }
}

inline std::string ChipWorker::runtime_path() const {
  if (rt_ != nullptr) return rt_->path;
  return options_.device_runtime.empty() ? default_device_runtime() : options_.device_runtime;
}

inline void ChipWorker::check_ready(const char* api) const {
  if (state_ == State::Ready) return;
  if (state_ == State::New) {
    throw UsageError(
        fmt::format("ChipWorker::{} on device {}: the chip is not initialised; call init() first",
                    api, device_id_));
  }
  throw UsageError(
      fmt::format("ChipWorker::{} on device {}: the chip was finalised; create a new ChipWorker",
                  api, device_id_));
}

inline void ChipWorker::throw_status(const std::string& api, int status) const {
  const char* detail = ctx_ != nullptr ? rt_->last_error(ctx_) : nullptr;
  throw DeviceError(fmt::format("{} on device {}: {}", api, device_id_,
                                detail::describe_status(*rt_, status, detail)),
                    status);
}

inline void ChipWorker::init() {
  if (state_ == State::Ready) {
    throw UsageError(fmt::format("ChipWorker::init on device {}: already initialised", device_id_));
  }
  if (state_ == State::Finalised) {
    throw UsageError(fmt::format(
        "ChipWorker::init on device {}: the chip was finalised; create a new ChipWorker",
        device_id_));
  }
  const std::string path = runtime_path();
  try {
    rt_ = &detail::load_device_runtime(path);
  } catch (const DeviceError& e) {
    throw DeviceError(fmt::format("ChipWorker::init on device {}: {}", device_id_, e.what()),
                      e.status());
  }
  ctx_ = rt_->create_context();
  if (ctx_ == nullptr) {
    throw DeviceError(fmt::format("ChipWorker::init on device {}: simpler_create_context of '{}' "
                                  "returned NULL (out of memory?)",
                                  device_id_, rt_->path),
                      SIMPLER_ERR_OUT_OF_MEMORY);
  }
  simpler_init_options o{};
  o.struct_size = sizeof(simpler_init_options);
  o.num_clusters = options_.num_clusters;
  o.aicpu_thread_num = options_.aicpu_thread_num;
  o.scheduler_timeout_ms = detail::chip_option_ms(options_.scheduler_timeout, "scheduler_timeout");
  o.resource_wait_ms = detail::chip_option_ms(options_.resource_wait, "resource_wait");
  o.tensor_wait_ms = detail::chip_option_ms(options_.tensor_wait, "tensor_wait");
  o.hazards = options_.hazards == Hazards::ReadAfterWrite ? SIMPLER_HAZARDS_READ_AFTER_WRITE
                                                          : SIMPLER_HAZARDS_ALL;  // checked
  const int status = rt_->init(ctx_, device_id_, &o);
  if (status != SIMPLER_OK) {
    std::string text = fmt::format("ChipWorker::init on device {} ({}): {}", device_id_, rt_->path,
                                   detail::describe_status(*rt_, status, rt_->last_error(ctx_)));
    rt_->destroy_context(ctx_);
    ctx_ = nullptr;
    throw DeviceError(text, status);
  }
  names_.assign(kMaxCallables, std::string());
  used_ids_ = 0;
  state_ = State::Ready;
}

inline int ChipWorker::register_callable(const ChipCallable& c, int callable_id) {
  check_ready("register_callable");
  validate(c);
  if (callable_id < -1 || callable_id >= kMaxCallables) {
    throw UsageError(
        fmt::format("ChipWorker::register_callable('{}') on device {}: callable id {} "
                    "is out of range; use 0..{} or -1 for the lowest free id",
                    c.name, device_id_, callable_id, kMaxCallables - 1));
  }
  if (callable_id == -1) {
    if (~used_ids_ == 0) {
      throw UsageError(
          fmt::format("ChipWorker::register_callable('{}') on device {}: all {} "
                      "callable ids are in use; unregister one first",
                      c.name, device_id_, kMaxCallables));
    }
    callable_id = std::countr_one(used_ids_);
  } else if ((used_ids_ >> callable_id) & 1U) {
    throw UsageError(fmt::format(
        "ChipWorker::register_callable('{}') on device {}: callable id "
        "{} is already taken by '{}'; unregister it first or pass -1",
        c.name, device_id_, callable_id, names_[static_cast<std::size_t>(callable_id)]));
  }
  const ChipCallable abs = with_absolute_paths(c);
  std::vector<simpler_kernel_desc> kernels;
  kernels.reserve(abs.kernels.size());
  for (const ChipKernel& k : abs.kernels) {
    kernels.push_back(simpler_kernel_desc{k.func_id, k.path.c_str(), k.symbol.c_str()});
  }
  simpler_chip_callable_desc d{};
  d.struct_size = sizeof(simpler_chip_callable_desc);
  d.orch_path = abs.orchestration.c_str();
  d.orch_entry = abs.entry.c_str();
  d.kernel_count = static_cast<std::uint32_t>(kernels.size());
  d.kernels = kernels.data();
  const int status = rt_->register_callable(ctx_, callable_id, &d);
  if (status != SIMPLER_OK) {
    throw_status(
        fmt::format("ChipWorker::register_callable('{}' as callable {})", c.name, callable_id),
        status);
  }
  used_ids_ |= std::uint64_t{1} << callable_id;
  names_[static_cast<std::size_t>(callable_id)] = c.name;
  return callable_id;
}

inline void ChipWorker::unregister_callable(int callable_id) {
  check_ready("unregister_callable");
  if (callable_id < 0 || callable_id >= kMaxCallables || ((used_ids_ >> callable_id) & 1U) == 0) {
    throw UsageError(
        fmt::format("ChipWorker::unregister_callable on device {}: callable id {} is "
                    "not registered",
                    device_id_, callable_id));
  }
  const int status = rt_->unregister_callable(ctx_, callable_id);
  if (status != SIMPLER_OK) {
    throw_status(fmt::format("ChipWorker::unregister_callable('{}' as callable {})",
                             names_[static_cast<std::size_t>(callable_id)], callable_id),
                 status);
  }
  used_ids_ &= ~(std::uint64_t{1} << callable_id);
  names_[static_cast<std::size_t>(callable_id)].clear();
  for (int& id : id_by_index_) {
    if (id == callable_id) id = -1;
  }
}

inline void ChipWorker::run(int callable_id, const TaskArgs& args, const CallConfig& config) {
  run(callable_id, args.view(), config);
}

inline void ChipWorker::run(int callable_id, TaskArgsView args, const CallConfig& config) {
  check_ready("run");
  if (callable_id < 0 || callable_id >= kMaxCallables || ((used_ids_ >> callable_id) & 1U) == 0) {
    throw UsageError(
        fmt::format("ChipWorker::run on device {}: callable id {} is not registered; "
                    "register_callable() returns the ids",
                    device_id_, callable_id));
  }
  if (&config != &default_call_config()) config.validate();
  run_raw(callable_id, args, config, "run");
}

inline void ChipWorker::run_raw(int callable_id, TaskArgsView args, const CallConfig& config,
                                const char* api) {
  const simpler_run_config cfg = detail::run_config_of(config);
  // TaskArgsView and simpler_task_args have one layout (checked above).
  simpler_task_args a{};
  a.tensor_count = args.tensor_count;
  a.scalar_count = args.scalar_count;
  a.tensors = reinterpret_cast<const simpler_tensor*>(args.tensors);
  a.scalars = args.scalars;
  const int status = rt_->run(ctx_, callable_id, &a, &cfg);
  if (status != SIMPLER_OK) {
    throw_status(fmt::format("ChipWorker::{}('{}' as callable {})", api,
                             names_[static_cast<std::size_t>(callable_id)], callable_id),
                 status);
  }
}

inline void* ChipWorker::device_malloc(std::size_t bytes) {
  check_ready("device_malloc");
  if (bytes == 0) {
    throw UsageError(
        fmt::format("ChipWorker::device_malloc on device {}: 0 bytes requested", device_id_));
  }
  void* p = rt_->device_malloc(ctx_, bytes);
  if (p == nullptr) {
    throw_status(fmt::format("ChipWorker::device_malloc({} bytes)", bytes),
                 SIMPLER_ERR_OUT_OF_MEMORY);
  }
  return p;
}

inline void ChipWorker::device_free(void* p) {
  check_ready("device_free");
  if (p == nullptr) return;
  if (const int status = rt_->device_free(ctx_, p); status != SIMPLER_OK) {
    throw_status(fmt::format("ChipWorker::device_free({})", p), status);
  }
}

inline void ChipWorker::copy_to_device(void* dev, const void* host, std::size_t n) {
  check_ready("copy_to_device");
  if (const int status = rt_->copy_to_device(ctx_, dev, host, n); status != SIMPLER_OK) {
    throw_status(fmt::format("ChipWorker::copy_to_device({} bytes to {})", n, dev), status);
  }
}

inline void ChipWorker::copy_from_device(void* host, const void* dev, std::size_t n) {
  check_ready("copy_from_device");
  if (const int status = rt_->copy_from_device(ctx_, host, dev, n); status != SIMPLER_OK) {
    throw_status(fmt::format("ChipWorker::copy_from_device({} bytes from {})", n, dev), status);
  }
}

inline simpler_context_stats ChipWorker::stats() const {
  check_ready("stats");
  simpler_context_stats s{};
  s.struct_size = sizeof(simpler_context_stats);
  if (const int status = rt_->get_stats(ctx_, &s); status != SIMPLER_OK) {
    throw_status("ChipWorker::stats", status);
  }
  return s;
}

inline simpler_trace_info ChipWorker::last_run_trace() const {
  check_ready("last_run_trace");
  simpler_trace_info t{};
  t.struct_size = sizeof(simpler_trace_info);
  if (const int status = rt_->get_run_trace(ctx_, &t); status != SIMPLER_OK) {
    throw_status("ChipWorker::last_run_trace", status);
  }
  return t;
}

inline void ChipWorker::finalize() {
  if (ctx_ == nullptr) {
    state_ = State::Finalised;
    return;
  }
  const int status = rt_->finalize(ctx_);
  std::string text;
  if (status != SIMPLER_OK) {
    text = fmt::format("ChipWorker::finalize on device {}: {}", device_id_,
                       detail::describe_status(*rt_, status, rt_->last_error(ctx_)));
  }
  rt_->destroy_context(ctx_);
  ctx_ = nullptr;
  state_ = State::Finalised;
  used_ids_ = 0;
  id_by_index_.clear();
  if (status != SIMPLER_OK) throw DeviceError(text, status);
}

// ---- Leaf side --------------------------------------------------------------------------------

inline void ChipWorker::start() {
  if (registry_ == nullptr) {
    throw UsageError(
        fmt::format("ChipWorker::start on device {}: this ChipWorker was not built "
                    "over a Worker's registry; call init() for standalone use",
                    device_id_));
  }
  init();
  try {
    id_by_index_.assign(registry_->size(), -1);
    for (std::uint32_t i = 0; i < registry_->size(); ++i) {
      const auto& e = registry_->at(i);
      if (e.kind != CallableKind::Chip) continue;
      id_by_index_[i] = register_callable(*e.chip);
    }
  } catch (...) {
    release();
    throw;
  }
}

inline void ChipWorker::stop() noexcept {
  try {
    finalize();
  } catch (const std::exception& e) {
    detail::log_as(LogLevel::Error, "ChipWorker", "stop on device {}: {}", device_id_, e.what());
  } catch (...) {
    detail::log_as(LogLevel::Error, "ChipWorker", "stop on device {}: unknown error", device_id_);
  }
}

inline int ChipWorker::leaf_callable_id(const LeafRequest& r) {
  if (registry_ == nullptr) {
    throw UsageError(
        fmt::format("ChipWorker::run on device {}: this ChipWorker was not built "
                    "over a Worker's registry; run callables by id instead",
                    device_id_));
  }
  for (const auto& [digest, id] : late_) {
    if (digest == r.digest) return id;
  }
  const std::uint32_t index = registry_->index_of(r.digest, r.index_hint);
  if (index == detail::CallableRegistry::npos) {
    throw Error(
        fmt::format("chip worker on device {}: no chip callable with digest {:#018x} is "
                    "registered here",
                    device_id_, r.digest));
  }
  const auto& e = registry_->at(index);
  if (e.kind != CallableKind::Chip) {
    throw Error(
        fmt::format("chip worker on device {}: '{}' is not a chip callable (it came from "
                    "Worker::register_{}); a chip runs only callables from "
                    "Worker::register_chip",
                    device_id_, e.name, to_string(e.kind)));
  }
  if (index < id_by_index_.size() && id_by_index_[index] >= 0) return id_by_index_[index];
  // Registered on the Worker after start() (its children are threads): load it now, once.
  const int id = register_callable(*e.chip);
  if (index >= id_by_index_.size()) id_by_index_.resize(index + 1, -1);
  id_by_index_[index] = id;
  return id;
}

inline void ChipWorker::run(const LeafRequest& r) {
  check_ready("run");
  const int id = leaf_callable_id(r);
  if (r.trace == nullptr || r.trace->level == 0) {
    run_raw(id, r.args, *r.config, "run");
    return;
  }
  // A traced host task: the chip records at least at the host's level, and its events join the
  // host trace (its own files, if the task asked for them, are written as well).
  if (r.config->enable_l2_swimlane < r.trace->level) {
    CallConfig c = *r.config;
    c.enable_l2_swimlane = r.trace->level;
    run_raw(id, r.args, c, "run");
  } else {
    run_raw(id, r.args, *r.config, "run");
  }
  append_trace(*r.trace);
}

inline void ChipWorker::append_trace(detail::TraceReply& reply) const {
  const simpler_trace_info info = last_run_trace();
  std::vector<detail::TraceProcess> procs(1);
  detail::TraceProcess& p = procs[0];
  p.name = fmt::format("chip {}", device_id_);
  p.level = reply.level;
  p.dropped = info.dropped;
  for (std::uint32_t t = 0; t < info.track_count; ++t) {
    p.tracks.emplace_back(info.track_names[t] != nullptr ? info.track_names[t] : "?");
  }
  p.events.reserve(static_cast<std::size_t>(info.event_count));
  for (std::uint64_t i = 0; i < info.event_count; ++i) {
    const simpler_trace_event& c = info.events[i];
    detail::TraceEvent e;
    e.kind = detail::TraceKind::Chip;
    e.t0 = static_cast<std::int64_t>(c.begin_ns);
    e.t1 = static_cast<std::int64_t>(c.end_ns);
    e.task = static_cast<std::uint32_t>(c.task_id + 1);
    e.arg = static_cast<std::uint32_t>(c.flow_from + 1);
    e.arg2 = static_cast<std::uint32_t>(c.func_id + 1);
    e.outcome = static_cast<std::uint8_t>(c.kind);
    e.track = static_cast<std::uint16_t>(c.track);
    p.events.push_back(e);
  }
  detail::serialize_trace(procs, reply.nested);
}

inline std::string ChipWorker::callable_name(const LeafRequest& r) const {
  if (registry_ == nullptr) return fmt::format("<chip callable {:#018x}>", r.digest);
  return registry_->name_of(r.digest, r.index_hint);
}

inline std::optional<std::uint64_t> ChipWorker::control(std::uint64_t command, std::uint64_t arg,
                                                        std::span<const std::byte> payload) {
  if (command == kControlRegisterChip && registry_ != nullptr) {
    check_ready("control");
    const ChipCallable callable = detail::decode_chip_callable(payload);
    const int id = register_callable(callable);
    late_.emplace_back(arg, id);
    return static_cast<std::uint64_t>(id);
  }
  if (command == kControlUnregisterChip && registry_ != nullptr) {
    for (auto it = late_.begin(); it != late_.end(); ++it) {
      if (it->first == arg) {
        unregister_callable(it->second);
        late_.erase(it);
        return 0;
      }
    }
    throw Error(fmt::format("chip worker on device {}: no late chip callable with digest {:#018x}",
                            device_id_, arg));
  }
  return std::nullopt;
}

// ---- A chip callable in a control payload ----------------------------------------------------

namespace detail {

inline std::string encode_chip_callable(const ChipCallable& c) {
  std::string out;
  const auto field = [&](const std::string& s, const char* what) {
    if (s.find('\0') != std::string::npos) {
      std::string name = c.name;  // printable: a NUL would end the message
      for (std::size_t at; (at = name.find('\0')) != std::string::npos;) name.replace(at, 1, "\\0");
      throw UsageError(
          fmt::format("ChipCallable '{}': {} holds a NUL byte; it cannot be sent to a forked chip",
                      name, what));
    }
    out += s;
    out += '\0';
  };
  field(c.name, "name");
  field(c.orchestration, "orchestration");
  field(c.entry, "entry");
  for (const ChipKernel& k : c.kernels) {
    out += std::to_string(k.func_id);
    out += '\0';
    field(k.path, "a kernel path");
    field(k.symbol, "a kernel symbol");
  }
  return out;
}

inline ChipCallable decode_chip_callable(std::span<const std::byte> payload) {
  const std::string_view text(reinterpret_cast<const char*>(payload.data()), payload.size());
  if (text.empty() || text.back() != '\0') {
    throw Error(
        fmt::format("chip callable payload: {} bytes that do not end with a NUL; it is truncated",
                    payload.size()));
  }
  std::vector<std::string_view> fields;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = text.find('\0', at);
    fields.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  if (fields.size() < 3 || (fields.size() - 3) % 3 != 0) {
    throw Error(fmt::format("chip callable payload: {} fields; a callable has 3 plus 3 per kernel",
                            fields.size()));
  }
  ChipCallable c;
  c.name = fields[0];
  c.orchestration = fields[1];
  c.entry = fields[2];
  for (std::size_t i = 3; i < fields.size(); i += 3) {
    ChipKernel k;
    const std::string_view id = fields[i];
    const auto r = std::from_chars(id.data(), id.data() + id.size(), k.func_id);
    if (id.empty() || r.ec != std::errc() || r.ptr != id.data() + id.size()) {
      throw Error(fmt::format("chip callable payload: kernel func_id '{}' is not a number", id));
    }
    k.path = fields[i + 1];
    k.symbol = fields[i + 2];
    c.kernels.push_back(std::move(k));
  }
  return c;
}

}  // namespace detail
}  // namespace simpler
