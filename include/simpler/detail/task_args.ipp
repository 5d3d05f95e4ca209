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

inline const ContinuousTensor& TaskArgsView::tensor(std::int32_t i) const {
  if (i < 0 || i >= tensor_count) {
    throw UsageError(
        fmt::format("TaskArgsView::tensor({}): the task has {} tensors", i, tensor_count));
  }
  return tensors[i];
}

inline std::uint64_t TaskArgsView::scalar(std::int32_t i) const {
  if (i < 0 || i >= scalar_count) {
    throw UsageError(
        fmt::format("TaskArgsView::scalar({}): the task has {} scalars", i, scalar_count));
  }
  return scalars[i];
}

namespace detail {
inline void check_tag(TensorArgType tag) {
  const auto v = static_cast<std::int32_t>(tag);
  if (v < 0 || v > static_cast<std::int32_t>(TensorArgType::NoDep)) {
    throw UsageError(fmt::format("TaskArgs: tag value {} is not a TensorArgType (0..4)", v));
  }
}
}  // namespace detail

inline TaskArgs& TaskArgs::add_tensor(const ContinuousTensor& t, TensorArgType tag) {
  if (!scalars_.empty()) {
    throw UsageError(
        "TaskArgs::add_tensor: a tensor cannot follow a scalar; add every tensor before the first "
        "scalar");
  }
  detail::check_tag(tag);
  validate(t);
  tensors_.push_back(t);
  tags_.push_back(tag);
  return *this;
}

inline void TaskArgs::set_tag(std::int32_t i, TensorArgType tag) {
  detail::check_tag(tag);
  if (i < 0 || i >= tensor_count()) {
    throw UsageError(fmt::format("TaskArgs::set_tag({}): there are {} tensors", i, tensor_count()));
  }
  tags_[static_cast<std::size_t>(i)] = tag;
}

inline const ContinuousTensor& TaskArgs::tensor(std::int32_t i) const {
  return view().tensor(i);
}
inline std::uint64_t TaskArgs::scalar(std::int32_t i) const {
  return view().scalar(i);
}
inline TensorArgType TaskArgs::tag(std::int32_t i) const {
  if (i < 0 || i >= tensor_count()) {
    throw UsageError(fmt::format("TaskArgs::tag({}): there are {} tensors", i, tensor_count()));
  }
  return tags_[static_cast<std::size_t>(i)];
}

}  // namespace simpler
