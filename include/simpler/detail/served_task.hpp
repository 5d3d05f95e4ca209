// simpler::detail — how a remote L3 (a RemoteServer session, an MPI rank) runs one TASK its
// parent sent: resolve the callable among those it serves, turn each tensor's buffer address into
// memory of its buffer pool (refusing any outside a live buffer), run the orchestration function
// on the inner Worker, and say how it ended as a COMPLETION.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "simpler/detail/buffer_pool.hpp"
#include "simpler/detail/remote_trace.hpp"
#include "simpler/error.hpp"
#include "simpler/remote/wire.hpp"
#include "simpler/worker.hpp"

namespace simpler::detail {

/// An orchestration function a remote L3 serves to its parent, under the name the parent
/// registered it with.
struct ServedOrch {
  std::string name;
  Worker::OrchFunction fn;
};
using ServedOrchs = std::map<std::uint64_t, ServedOrch>;  ///< by digest

/// The served callables as a HELLO lists them.
inline std::vector<wire::ServedCallable> served_list(const ServedOrchs& served) {
  std::vector<wire::ServedCallable> out;
  out.reserve(served.size());
  for (const auto& [digest, s] : served) out.push_back({digest, s.name});
  return out;
}

/// Runs `task` (the TASK numbered `sequence`, received at `rx_ns` of served_trace_now) on
/// `inner`. Never throws: a failure is the completion's status, its message naming the callable
/// and `where` ("the remote L3 Worker (pid 42)"). A traced TASK runs as a traced nested run and
/// its completion carries the trace section (its tx_ns is set by the caller as it sends).
inline wire::Completion run_served_task(Worker& inner, const ServedOrchs& served,
                                        const BufferPool& pool, std::uint64_t sequence,
                                        wire::Task& task, std::string_view where,
                                        std::int64_t rx_ns = 0) noexcept {
  wire::Completion c;
  c.answers = sequence;
  TraceReply reply;
  if (task.trace_level != 0) [[unlikely]] {
    c.traced = true;
    c.trace.begin_ns = served_trace_now();
    c.trace.rx_ns = rx_ns != 0 ? std::min(rx_ns, c.trace.begin_ns) : c.trace.begin_ns;
    reply.reset(task.trace_level);
  }
  try {
    std::string name = fmt::format("{:#018x}", task.digest);
    try {
      const auto it = served.find(task.digest);
      if (it == served.end()) {
        std::string names;
        for (const auto& [d, s] : served)
          names += fmt::format("{}'{}'", names.empty() ? "" : ", ", s.name);
        throw UsageError(
            fmt::format("this {} serves no callable with digest {:#018x} (it serves {})", where,
                        task.digest, names.empty() ? "nothing" : names));
      }
      name = it->second.name;
      for (std::size_t i = 0; i < task.tensors.size(); ++i) {
        ContinuousTensor& t = task.tensors[i];
        std::string why;
        std::byte* p =
            pool.resolve(wire::buffer_of(t.data), wire::offset_of(t.data), t.nbytes(), why);
        if (p == nullptr) {
          throw UsageError(
              fmt::format("tensor {} is not inside a live buffer of this session: {}", i, why));
        }
        t.data = reinterpret_cast<std::uintptr_t>(p);
        t.child_memory = 0;
      }
      TaskArgsView v;
      v.tensor_count = static_cast<std::int32_t>(task.tensors.size());
      v.scalar_count = static_cast<std::int32_t>(task.scalars.size());
      v.tensors = task.tensors.data();
      v.scalars = task.scalars.data();
      if (c.traced) [[unlikely]] {
        inner.run_traced(it->second.fn, v, task.config, reply);
      } else {
        inner.run_view(it->second.fn, v, task.config);
      }
    } catch (...) {
      Fault f;
      fault_from_current_exception(f);
      c.status = wire::Status::Failed;
      c.kind = f.kind;
      c.code = f.code;
      c.message = fmt::format("'{}' on the {}: {}", name, where, f.message);
      if (c.kind == ErrorKind::Other && c.code == 0 && c.message.empty()) c.kind = ErrorKind::Error;
    }
  } catch (...) {
    // Formatting the failure ran out of memory: say so without formatting.
    c.status = wire::Status::Failed;
    c.kind = ErrorKind::Error;
    c.message.clear();
  }
  if (c.traced) [[unlikely]] {
    c.trace.end_ns = served_trace_now();
    try {
      put_served_trace(task, reply, c);
    } catch (...) {
      ++c.trace.lost;  // out of memory: the records are lost, and counted
    }
  }
  return c;
}

}  // namespace simpler::detail
