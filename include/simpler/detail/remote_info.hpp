// simpler::detail — what a parent knows of a remote L3 it reaches by messages (over TCP with
// SocketTransport, over MPI with MpiTransport): what the remote serves (from its HELLO), which of
// its buffers are live, and the process-wide buffer ids that make a tensor's address name its
// buffer across every remote.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "simpler/error.hpp"
#include "simpler/leaf/leaf.hpp"
#include "simpler/remote/remote.hpp"
#include "simpler/remote/wire.hpp"

namespace simpler::detail {

/// What the remote said it serves, and its limits (from its HELLO).
struct RemoteInfo {
  std::int32_t level = 3;
  std::uint32_t max_payload = 0;
  std::uint64_t max_buffer_bytes = 0;
  std::uint64_t buffer_pool_bytes = 0;
  std::vector<wire::ServedCallable> served;  ///< sorted by digest

  /// Takes a HELLO's fields (status already checked).
  void take(wire::Hello&& hello) {
    level = hello.level;
    max_payload = hello.max_payload;
    max_buffer_bytes = hello.max_buffer_bytes;
    buffer_pool_bytes = hello.buffer_pool_bytes;
    served = std::move(hello.served);
    std::sort(served.begin(), served.end(),
              [](const auto& a, const auto& b) { return a.digest < b.digest; });
  }
  [[nodiscard]] const wire::ServedCallable* find(std::uint64_t digest) const noexcept {
    auto it = std::lower_bound(
        served.begin(), served.end(), digest,
        [](const wire::ServedCallable& s, std::uint64_t d) { return s.digest < d; });
    return it != served.end() && it->digest == digest ? &*it : nullptr;
  }
  [[nodiscard]] bool serves(std::uint64_t digest) const noexcept { return find(digest) != nullptr; }
  /// The served name of `digest`, or the digest in hex.
  [[nodiscard]] std::string name_of(std::uint64_t digest) const {
    const auto* s = find(digest);
    return s != nullptr ? s->name : fmt::format("{:#018x}", digest);
  }
  [[nodiscard]] std::string served_names() const {
    std::string out;
    for (const auto& s : served) out += fmt::format("{}'{}'", out.empty() ? "" : ", ", s.name);
    return out.empty() ? "nothing" : out;
  }
};

/// Whether every tensor of `r` names a remote buffer (a TASK frame carries no pointers); else
/// sets `fault` (a usage error naming the tensor and `where`). Submit refuses such tensors for
/// remote lanes already; this keeps a frame from ever carrying one.
inline bool remote_tensors_only(const LeafRequest& r, const std::string& where, Fault& fault) {
  for (std::int32_t i = 0; i < r.args.tensor_count; ++i) {
    const ContinuousTensor& t = r.args.tensors[i];
    if (t.child_memory == 0 || wire::buffer_of(t.data) == 0) {
      fault.set(ErrorKind::Usage, 0,
                fmt::format("tensor {} is not in a remote buffer of {}; pointers never cross "
                            "hosts (use Worker::remote_alloc and RemoteBuffer::tensor)",
                            i, where));
      return false;
    }
  }
  return true;
}

/// A fresh remote buffer id. Unique in the process, so a tensor's address names its buffer
/// across every remote (the Orchestrator can tell a buffer of another worker).
inline std::uint64_t next_remote_buffer_id() {
  static std::atomic<std::uint64_t> next{1};
  const std::uint64_t id = next.fetch_add(1, std::memory_order_relaxed);
  if (id > wire::kMaxBufferId) {
    throw UsageError("Worker::remote_alloc: this process used up its 2^24 remote buffer ids");
  }
  return id;
}

/// The live buffers of one remote session, as the parent sees them (for submit-time checks).
class LiveBuffers {
 public:
  void add(std::uint64_t id, std::uint64_t bytes) {
    std::lock_guard lk(mu_);
    live_[id] = bytes;
  }
  void erase(std::uint64_t id) {
    std::lock_guard lk(mu_);
    live_.erase(id);
  }
  void clear() {
    std::lock_guard lk(mu_);
    live_.clear();
  }
  /// Whether [address, address + bytes) lies in a live buffer.
  [[nodiscard]] bool holds(std::uint64_t address, std::uint64_t bytes) const {
    std::lock_guard lk(mu_);
    const auto it = live_.find(wire::buffer_of(address));
    if (it == live_.end()) return false;
    const std::uint64_t off = wire::offset_of(address);
    return off <= it->second && bytes <= it->second - off;
  }
  /// Whether `b` is a live buffer of session `session`.
  [[nodiscard]] bool owns(const RemoteBuffer& b, std::uint64_t session) const {
    std::lock_guard lk(mu_);
    return b.session() == session && live_.count(b.id()) != 0;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::uint64_t, std::uint64_t> live_;  ///< buffer id -> bytes
};

}  // namespace simpler::detail
