// simpler::detail::CallableRegistry — the callables registered on one Worker, looked up by
// digest in every lane and child.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "simpler/call_config.hpp"
#include "simpler/callable.hpp"
#include "simpler/task_args.hpp"

namespace simpler {
class OrchestratorBase;
struct ChipCallable;
}  // namespace simpler

namespace simpler::detail {

/// A process-unique, non-zero token naming one Worker instance (for handle ownership checks).
std::uint64_t next_worker_token() noexcept;

using SubFn = std::function<void(TaskArgsView)>;
using OrchFn = std::function<void(OrchestratorBase&, TaskArgsView, const CallConfig&)>;

/// Callables registered on one Worker. Appended to only outside runs; read by lanes during runs
/// (the run's hand-offs order the two). Forked children inherit it.
class CallableRegistry {
 public:
  struct Entry {
    CallableKind kind;
    std::string name;
    std::uint64_t digest;
    SubFn sub;
    OrchFn orch;
    std::shared_ptr<const ChipCallable> chip;  ///< CallableKind::Chip: what the chips load
  };
  static constexpr std::uint32_t npos = ~std::uint32_t{0};

  explicit CallableRegistry(std::uint64_t owner) : owner_(owner) {}

  /// Adds an entry; the one of `sub`, `orch`, `chip` that matches `kind` must be set. Throws
  /// UsageError for an empty name or function, or a name (digest) already registered.
  CallableHandle add(CallableKind kind, std::string name, SubFn sub, OrchFn orch,
                     std::shared_ptr<const ChipCallable> chip = {});
  /// The entry `h` names; throws UsageError for a foreign, unknown or stale handle. Inline: it
  /// is part of every submit, and its messages are built out of line (check_failed).
  [[gnu::always_inline]] const Entry& check(const CallableHandle& h) const {
    if (h.valid() && h.owner == owner_ && h.index < entries_.size() &&
        entries_[h.index].digest == h.digest) [[likely]] {
      return entries_[h.index];
    }
    check_failed(h);
  }
  /// The entry with this digest (index_hint tried first), or nullptr.
  const Entry* find(std::uint64_t digest, std::uint32_t index_hint) const noexcept;
  /// The index of the entry with this digest (index_hint tried first), or npos.
  std::uint32_t index_of(std::uint64_t digest, std::uint32_t index_hint) const noexcept;
  /// Entry `index` (< size()).
  [[nodiscard]] const Entry& at(std::uint32_t index) const noexcept { return entries_[index]; }
  /// Name for messages; "<unknown callable 0x...>" when the digest is not registered.
  std::string name_of(std::uint64_t digest, std::uint32_t index_hint) const;
  [[nodiscard]] std::uint64_t owner() const noexcept { return owner_; }
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  /// Drops the entry added last (a registration that had to be rolled back).
  void remove_last() noexcept;

 private:
  /// Throws the UsageError that says what is wrong with handle `h`.
  [[noreturn, gnu::cold]] void check_failed(const CallableHandle& h) const;

  std::uint64_t owner_;
  std::vector<Entry> entries_;
  std::unordered_map<std::uint64_t, std::uint32_t> by_digest_;
};

}  // namespace simpler::detail

#include "simpler/detail/registry.ipp"
