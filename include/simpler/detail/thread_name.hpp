// simpler::detail::name_thread — names the engine's threads after their level and role
// ("L3 sched", "L3 sub 0", "L4 next 1"), so top -H, perf, gdb and /proc tell them apart.
#pragma once

#include <pthread.h>

#include <string_view>
#include <thread>

#include <fmt/format.h>

namespace simpler::detail {

/// Names `thread` "L<level> <what>", or "L<level> <what> <index>" for index >= 0, cut to the 15
/// characters the kernel keeps. Called by the thread that started it, so the name is there when
/// start-up returns. Best effort: a refusal leaves the inherited name.
inline void name_thread(std::thread& thread, int level, std::string_view what,
                        int index = -1) noexcept {
  char name[16] = {};
  try {
    const auto r = index >= 0
                       ? fmt::format_to_n(name, sizeof name - 1, "L{} {} {}", level, what, index)
                       : fmt::format_to_n(name, sizeof name - 1, "L{} {}", level, what);
    *r.out = '\0';
  } catch (...) {
    return;
  }
  static_cast<void>(::pthread_setname_np(thread.native_handle(), name));
}

}  // namespace simpler::detail
