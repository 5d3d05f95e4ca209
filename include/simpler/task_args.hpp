// simpler — TaskArgs (the builder a user fills) and TaskArgsView (what a callable receives).
#pragma once

#include <cstdint>

#include "simpler/detail/small_vec.hpp"
#include "simpler/types.hpp"

namespace simpler {

namespace detail {
struct TaskArgsAccess;
}

/// A non-owning view of a task's tensors and scalars, as a callable sees them. 24 bytes, POD.
/// Tags are not part of it: they were consumed by the Orchestrator at submit. Valid for the
/// duration of the callable invocation it was passed to.
struct TaskArgsView {
  std::int32_t tensor_count = 0;
  std::int32_t scalar_count = 0;
  const ContinuousTensor* tensors = nullptr;
  const std::uint64_t* scalars = nullptr;

  /// Tensor i; throws UsageError when i is out of range.
  [[nodiscard]] const ContinuousTensor& tensor(std::int32_t i) const;
  /// Scalar i; throws UsageError when i is out of range.
  [[nodiscard]] std::uint64_t scalar(std::int32_t i) const;
};
static_assert(sizeof(TaskArgsView) == 24);

/// The arguments of one task: tensors with a tag each, then scalars. Tensors must all be added
/// before the first scalar (the wire order). Holds up to 4 tensors and 4 scalars without
/// allocating. Not thread-safe.
class TaskArgs {
 public:
  TaskArgs() noexcept {}

  /// Appends a tensor. Throws UsageError if a scalar was already added, if the tag is not one of
  /// the five TensorArgType values, or if `t` is malformed (see validate(ContinuousTensor)).
  /// Always inlined (see make_tensor in types.hpp).
  [[gnu::always_inline]] TaskArgs& add_tensor(const ContinuousTensor& t,
                                              TensorArgType tag = TensorArgType::Input);
  /// Appends a 64-bit scalar.
  TaskArgs& add_scalar(std::uint64_t v) {
    scalars_.push_back(v);
    return *this;
  }
  /// Changes the tag of tensor i. Throws UsageError on a bad index or tag.
  void set_tag(std::int32_t i, TensorArgType tag);

  [[nodiscard]] std::int32_t tensor_count() const noexcept {
    return static_cast<std::int32_t>(tensors_.size());
  }
  [[nodiscard]] std::int32_t scalar_count() const noexcept {
    return static_cast<std::int32_t>(scalars_.size());
  }
  [[nodiscard]] const ContinuousTensor& tensor(std::int32_t i) const;
  [[nodiscard]] std::uint64_t scalar(std::int32_t i) const;
  [[nodiscard]] TensorArgType tag(std::int32_t i) const;
  [[nodiscard]] TaskArgsView view() const noexcept {
    return {tensor_count(), scalar_count(), tensors_.data(), scalars_.data()};
  }
  void clear() noexcept {
    tensors_.clear();
    tags_.clear();
    scalars_.clear();
  }

 private:
  friend struct detail::TaskArgsAccess;
  detail::SmallVec<ContinuousTensor, 4> tensors_;
  detail::SmallVec<TensorArgType, 4> tags_;
  detail::SmallVec<std::uint64_t, 4> scalars_;
};

}  // namespace simpler

#include "simpler/detail/task_args.ipp"
