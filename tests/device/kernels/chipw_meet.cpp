// chipw_meet (any core) — a rendezvous across chips: proves that kernels of several chips run
// at the same time. Increments a shared counter, waits (futex, 10 s deadline) until it reaches
// the number of parties, then writes its value.
//   tensors: counter int32 [1] (shared by every party; MAP_SHARED memory across processes),
//            out int64 [1].
//   scalars: parties, value.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>

#include <simpler/device/orchestration.hpp>

SIMPLER_KERNEL(args) {
  if (args.tensor(0).dtype != SIMPLER_INT32 || args.tensor(1).dtype != SIMPLER_INT64) {
    args.fail("chipw_meet: expects an int32 counter and an int64 output");
    return;
  }
  auto* word = args.data<std::int32_t>(0);
  std::atomic_ref<std::int32_t> counter(*word);
  const auto parties = args.scalar<std::int32_t>(2);
  const auto value = args.scalar<std::int64_t>(3);
  counter.fetch_add(1, std::memory_order_seq_cst);
  // Shared (not private) futex: the other parties may be in other processes.
  ::syscall(SYS_futex, word, FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const std::int32_t seen = counter.load(std::memory_order_seq_cst);
    if (seen >= parties) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      args.fail("chipw_meet: the other chips never arrived (they did not run at the same time)");
      return;
    }
    const timespec tick{0, 50'000'000};
    ::syscall(SYS_futex, word, FUTEX_WAIT, seen, &tick, nullptr, 0);
  }
  *args.data<std::int64_t>(1) = value;
}
