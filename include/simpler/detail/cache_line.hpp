// simpler::detail::kCacheLine — the cache line size the engine lays shared state out by.
//
// Fields written per task by different threads start lines of their own (alignas(kCacheLine)),
// so one thread's write does not invalidate what another reads. 64 bytes on the x86-64 and
// AArch64 hosts this runs on; std::hardware_destructive_interference_size is not used because
// GCC warns that its value may differ between compilers, and this layout is shared by headers
// that every translation unit of a program must see alike.
#pragma once

#include <cstddef>

namespace simpler::detail {

inline constexpr std::size_t kCacheLine = 64;

}  // namespace simpler::detail
