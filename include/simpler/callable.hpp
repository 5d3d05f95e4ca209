// simpler — CallableHandle: what Worker::register_* returns and submit_* takes.
#pragma once

#include <cstdint>
#include <string_view>

namespace simpler {

/// What kind of callable a handle names; decides which submit call accepts it.
enum class CallableKind : std::uint8_t {
  Sub = 1,   ///< a host function run by a sub worker (submit_sub)
  Orch = 2,  ///< an orchestration function run by a nested Worker (submit_next_level)
  Chip = 3,  ///< a chip callable run by a ChipWorker (submit_next_level)
};

const char* to_string(CallableKind k) noexcept;

/// A set of CallableKinds is a mask of these bits (what a leaf can run: Leaf::kRuns).
constexpr std::uint8_t kind_bit(CallableKind k) noexcept {
  return static_cast<std::uint8_t>(1U << static_cast<unsigned>(k));
}
inline constexpr std::uint8_t kAllCallableKinds =
    kind_bit(CallableKind::Sub) | kind_bit(CallableKind::Orch) | kind_bit(CallableKind::Chip);

/// Identifies a registered callable. `digest` is the 64-bit identity that travels on every wire;
/// each child resolves it to its own local entry. `owner` names the Worker that issued the handle
/// (handles are rejected by other Workers); `index` is that Worker's local registry index.
/// Trivially copyable; a default-constructed handle is invalid.
struct CallableHandle {
  std::uint64_t digest = 0;
  std::uint64_t owner = 0;
  std::uint32_t index = 0;
  CallableKind kind = CallableKind::Sub;

  [[nodiscard]] bool valid() const noexcept { return owner != 0; }
  friend bool operator==(const CallableHandle&, const CallableHandle&) = default;
};

/// The digest of a callable: a 64-bit hash of its kind and name. Stable across processes and
/// builds (FNV-1a over the bytes, then a 64-bit avalanche finaliser).
std::uint64_t callable_digest(CallableKind kind, std::string_view name) noexcept;

}  // namespace simpler

#include "simpler/detail/callable.ipp"
