// Test kernel for random hazard programs: one step of a program over int32 views.
//   tensors: dst, src (ignored by modes 0 and 1).  scalars: mode, value, spin.
//   mode 0: dst = value            (dst OutputExisting)
//   mode 1: dst += value           (dst InOut)
//   mode 2: dst = src + value      (src Input, dst OutputExisting; as many elements as dst)
//   mode 3: dst += src             (src Input, dst InOut)
// `spin` x 64 iterations of busy work first shake the schedule (no synchronisation depends on it).
#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  volatile std::uint64_t busy = 0;
  for (std::uint64_t i = 0; i < args.scalar<std::uint64_t>(4) * 64; ++i) busy = busy + i;
  auto* dst = args.data<std::int32_t>(0);
  const auto* src = args.data<std::int32_t>(1);
  const auto n = simpler_tensor_numel(&args.tensor(0));
  const auto mode = args.scalar<std::int32_t>(2);
  const auto value = args.scalar<std::int32_t>(3);
  for (std::uint64_t i = 0; i < n; ++i) {
    switch (mode) {
      case 0:
        dst[i] = value;
        break;
      case 1:
        dst[i] += value;
        break;
      case 2:
        dst[i] = src[i] + value;
        break;
      default:
        dst[i] += src[i];
        break;
    }
  }
}
