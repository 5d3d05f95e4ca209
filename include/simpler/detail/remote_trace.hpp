// simpler::detail — traces across a remote link (SocketTransport, MpiTransport).
//
// A task of a traced run goes out as a traced TASK (wire::Task::trace_level). The remote L3 runs
// it as a traced nested run and answers with a COMPLETION whose trace section holds, in its own
// CLOCK_MONOTONIC, when the TASK arrived, when the run began and ended, when the answer left, and
// its Worker's serialized records. The parent maps those times onto its own clock (ClockSync:
// the remote may be another host) and hands them to its lane like a forked child's.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "simpler/detail/trace.hpp"
#include "simpler/remote/wire.hpp"

namespace simpler::detail {

/// The serving side's clock skew, for tests only: SIMPLER_REMOTE_TRACE_SKEW_NS (a signed
/// integer of ns, default 0) moves every time a remote L3 reports by that much, as if its host's
/// clock were that far off. Read at each traced task (a forked test server sees its own value).
inline std::int64_t served_trace_skew() noexcept {
  const char* v = std::getenv("SIMPLER_REMOTE_TRACE_SKEW_NS");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return end != nullptr && *end == '\0' ? static_cast<std::int64_t>(n) : 0;
}
/// The clock a remote L3 reports its trace times in.
inline std::int64_t served_trace_now() noexcept {
  return trace_now() + served_trace_skew();
}

/// Events in serialized records (0 when they are malformed).
inline std::uint64_t trace_record_events(const std::vector<std::byte>& records) {
  std::vector<TraceProcess> procs;
  if (!deserialize_trace(records.data(), records.size(), procs)) return 0;
  std::uint64_t n = 0;
  for (const auto& p : procs) n += p.events.size();
  return n;
}

/// The serving side: puts a traced run's records (in trace_now's clock) into `c`'s trace
/// section, within what the parent takes back (the TASK's trace_limit, counting the rest of
/// the COMPLETION): records that do not fit are dropped whole and counted as lost events.
inline void put_served_trace(const wire::Task& task, TraceReply& reply, wire::Completion& c) {
  c.trace.lost += reply.nested_dropped;
  if (reply.nested.empty()) return;
  const std::size_t head = wire::kCompletionTraceHeadBytes + c.message.size();
  const std::size_t budget = task.trace_limit > head ? task.trace_limit - head : 0;
  if (reply.nested.size() > budget) {
    c.trace.lost += std::max<std::uint64_t>(1, trace_record_events(reply.nested));
    return;
  }
  if (const std::int64_t skew = served_trace_skew();
      skew != 0 && !shift_trace_records(reply.nested, skew)) {
    ++c.trace.lost;
    return;
  }
  c.trace.records = std::move(reply.nested);
}

/// The parent's side: a traced TASK's COMPLETION, sent at c0 and read at c1 (trace_now), put into
/// the lane's `reply` on this process's clock. The run's times are kept inside [c0, c1] (where
/// the run must have been), the records moved by the estimated offset.
inline void take_remote_trace(ClockSync& sync, std::int64_t c0, std::int64_t c1,
                              wire::CompletionTrace& t, TraceReply& reply) noexcept {
  sync.sample(c0, c1, t.rx_ns, t.tx_ns);
  const std::int64_t off = sync.offset();
  reply.begin_ns = std::clamp(t.begin_ns - off, c0, c1);
  reply.end_ns = std::clamp(t.end_ns - off, reply.begin_ns, c1);
  reply.nested_dropped += t.lost;
  if (t.records.empty()) return;
  try {
    if (!shift_trace_records(t.records, -off)) {
      ++reply.nested_dropped;  // malformed records: counted, not rendered
      return;
    }
    reply.nested = std::move(t.records);
  } catch (...) {
    ++reply.nested_dropped;  // out of memory
  }
}

}  // namespace simpler::detail
