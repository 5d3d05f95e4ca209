// simpler — remote L3 workers: what the parent names (RemoteWorkerSpec) and the memory it keeps on
// them (RemoteBuffer). Pointers never cross hosts: a tensor for a remote worker lies in a buffer
// allocated there (Worker::remote_alloc) and is named by (buffer id, offset).
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "simpler/error.hpp"
#include "simpler/remote/wire.hpp"
#include "simpler/task.hpp"
#include "simpler/types.hpp"

namespace simpler {

/// An L3 Worker on another host, served by a RemoteServer (Worker::add_remote_worker).
struct RemoteWorkerSpec {
  /// "host:port": a numeric IPv4 address, a bracketed IPv6 address ("[::1]:7000") or
  /// "localhost". Host names are refused: a DNS lookup cannot be bounded by a deadline.
  std::string endpoint;
  /// The server's shared token (RemoteServerOptions::token); it never travels on the wire.
  std::string token;
  /// TCP connect, then the whole attach: authentication and the remote's setup and init(),
  /// until its HELLO. Worker::init() fails past them.
  std::chrono::milliseconds connect_timeout{5'000};
  std::chrono::milliseconds attach_timeout{30'000};
  /// Each side sends a HEARTBEAT when it sent nothing for a period, and gives the link up when
  /// it heard nothing for heartbeat_timeout: in-flight tasks then fail as endpoint failures.
  std::chrono::milliseconds heartbeat_period{500};
  std::chrono::milliseconds heartbeat_timeout{5'000};
  /// A remote_alloc/remote_free round trip, or one chunk of a copy.
  std::chrono::milliseconds control_timeout{60'000};
  /// TASK frames in flight on the link at once (1..8): the next tasks travel while one runs.
  std::uint32_t window = 8;
  /// The largest frame this side accepts from the server, and the chunk size of copies (the
  /// smaller of this and the server's limit).
  std::uint32_t max_payload = 16U << 20;
};

/// A buffer in a remote worker's memory, from Worker::remote_alloc. A value: copying it copies
/// the name, not the memory; Worker::remote_free releases the memory.
class RemoteBuffer {
 public:
  RemoteBuffer() = default;
  RemoteBuffer(WorkerId worker, std::uint64_t session, std::uint64_t id, std::uint64_t bytes)
      : worker_(worker), session_(session), id_(id), bytes_(bytes) {}

  /// A tensor over [offset, offset + its bytes) of this buffer, for tasks on its worker
  /// (submit_next_level(..., worker())). Throws UsageError when it does not fit in the buffer.
  [[nodiscard]] ContinuousTensor tensor(std::size_t offset, std::span<const std::uint32_t> shape,
                                        DataType dtype) const {
    if (id_ == 0) throw UsageError("RemoteBuffer::tensor: an empty RemoteBuffer (never allocated)");
    // A placeholder address first, so make_tensor checks shape and dtype.
    ContinuousTensor t = make_tensor(reinterpret_cast<void*>(std::uintptr_t{1}), shape, dtype);
    const std::uint64_t n = t.nbytes();
    if (offset > bytes_ || n > bytes_ - offset) {
      throw UsageError(fmt::format(
          "RemoteBuffer::tensor: [{}, {}) is outside the buffer's {} bytes (buffer {} on remote "
          "worker {})",
          offset, offset + n, bytes_, id_, worker_));
    }
    t.data = wire::buffer_address(id_) + offset;
    t.child_memory = 1;
    return t;
  }
  [[nodiscard]] ContinuousTensor tensor(std::size_t offset,
                                        std::initializer_list<std::uint32_t> shape,
                                        DataType dtype) const {
    return tensor(offset, std::span<const std::uint32_t>(shape.begin(), shape.size()), dtype);
  }
  /// A 1-D tensor of `count` elements of T from element `first`.
  template <class T>
  [[nodiscard]] ContinuousTensor tensor_of(std::size_t first, std::uint32_t count) const {
    return tensor(first * sizeof(T), {count}, detail::data_type_of<T>());
  }

  [[nodiscard]] WorkerId worker() const noexcept { return worker_; }
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  [[nodiscard]] std::uint64_t session() const noexcept { return session_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  [[nodiscard]] bool empty() const noexcept { return id_ == 0; }

 private:
  WorkerId worker_ = any_worker;
  std::uint64_t session_ = 0;
  std::uint64_t id_ = 0;
  std::uint64_t bytes_ = 0;
};

}  // namespace simpler
