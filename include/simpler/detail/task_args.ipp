// TaskArgsView and TaskArgs accessors.
// Included once, at the end of its header; every function is inline (the library is header-only).
#pragma once

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <string>

#include "simpler/error.hpp"
#include "simpler/task_args.hpp"

namespace simpler {

namespace detail {
// The throws of the accessors below, out of line, so that the accessors (per tensor on the
// submit path) stay small enough to inline. Says "<what>(<i>): <has> <count> <items>".
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_bad_index(const char* what, std::int32_t i,
                                                                   const char* has,
                                                                   std::int32_t count,
                                                                   const char* items) {
  throw UsageError(fmt::format("{}({}): {} {} {}", what, i, has, count, items));
}

[[noreturn, gnu::cold, gnu::noinline]] inline void throw_bad_tag(std::int32_t v) {
  throw UsageError(fmt::format("TaskArgs: tag value {} is not a TensorArgType (0..4)", v));
}

[[noreturn, gnu::cold, gnu::noinline]] inline void throw_tensor_after_scalar() {
  throw UsageError(
      "TaskArgs::add_tensor: a tensor cannot follow a scalar; add every tensor before the first "
      "scalar");
}

inline void check_tag(TensorArgType tag) {
  const auto v = static_cast<std::int32_t>(tag);
  if (v < 0 || v > static_cast<std::int32_t>(TensorArgType::NoDep)) [[unlikely]]
    throw_bad_tag(v);
}
}  // namespace detail

inline const ContinuousTensor& TaskArgsView::tensor(std::int32_t i) const {
  if (i < 0 || i >= tensor_count) [[unlikely]]
    detail::throw_bad_index("TaskArgsView::tensor", i, "the task has", tensor_count, "tensors");
  return tensors[i];
}

inline std::uint64_t TaskArgsView::scalar(std::int32_t i) const {
  if (i < 0 || i >= scalar_count) [[unlikely]]
    detail::throw_bad_index("TaskArgsView::scalar", i, "the task has", scalar_count, "scalars");
  return scalars[i];
}

inline TaskArgs& TaskArgs::add_tensor(const ContinuousTensor& t, TensorArgType tag) {
  if (!scalars_.empty()) [[unlikely]]
    detail::throw_tensor_after_scalar();
  detail::check_tag(tag);
  validate(t);
  tensors_.push_back(t);
  tags_.push_back(tag);
  return *this;
}

inline void TaskArgs::set_tag(std::int32_t i, TensorArgType tag) {
  detail::check_tag(tag);
  if (i < 0 || i >= tensor_count()) [[unlikely]]
    detail::throw_bad_index("TaskArgs::set_tag", i, "there are", tensor_count(), "tensors");
  tags_[static_cast<std::size_t>(i)] = tag;
}

inline const ContinuousTensor& TaskArgs::tensor(std::int32_t i) const {
  return view().tensor(i);
}
inline std::uint64_t TaskArgs::scalar(std::int32_t i) const {
  return view().scalar(i);
}
inline TensorArgType TaskArgs::tag(std::int32_t i) const {
  if (i < 0 || i >= tensor_count()) [[unlikely]]
    detail::throw_bad_index("TaskArgs::tag", i, "there are", tensor_count(), "tensors");
  return tags_[static_cast<std::size_t>(i)];
}

}  // namespace simpler
