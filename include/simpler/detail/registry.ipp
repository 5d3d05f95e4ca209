// The callable registry and Worker identity tokens.
// Included once, at the end of its header; every function is inline (the library is header-only).
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>

#include "simpler/detail/registry.hpp"
#include "simpler/error.hpp"

namespace simpler::detail {

inline std::uint64_t next_worker_token() noexcept {
  static std::atomic<std::uint64_t> counter{0};
  // Mixed with the pid and the clock so tokens differ across processes (and forked children).
  const auto n = counter.fetch_add(1, std::memory_order_relaxed) + 1;
  const auto t =
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::uint64_t h = (static_cast<std::uint64_t>(::getpid()) << 40) ^ (t << 8) ^ n;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h == 0 ? 1 : h;
}

inline CallableHandle CallableRegistry::add(CallableKind kind, std::string name, SubFn sub,
                                            OrchFn orch, std::shared_ptr<const ChipCallable> chip) {
  if (name.empty()) throw UsageError("register: a callable needs a non-empty name");
  if (kind == CallableKind::Sub && !sub) {
    throw UsageError(fmt::format("register_sub('{}'): the function is empty", name));
  }
  if (kind == CallableKind::Orch && !orch) {
    throw UsageError(fmt::format("register_orch('{}'): the function is empty", name));
  }
  if (kind == CallableKind::Chip && !chip) {
    throw UsageError(fmt::format("register_chip('{}'): no chip callable was given", name));
  }
  const std::uint64_t digest = callable_digest(kind, name);
  if (auto it = by_digest_.find(digest); it != by_digest_.end()) {
    const Entry& e = entries_[it->second];
    if (e.name == name && e.kind == kind) {
      throw UsageError(fmt::format("register: a {} callable named '{}' is already registered",
                                   to_string(kind), name));
    }
    throw UsageError(
        fmt::format("register: '{}' has the same digest as '{}'; rename one", name, e.name));
  }
  const auto index = static_cast<std::uint32_t>(entries_.size());
  entries_.reserve(entries_.size() + 1);
  by_digest_.emplace(digest, index);
  entries_.push_back(
      Entry{kind, std::move(name), digest, std::move(sub), std::move(orch), std::move(chip)});
  return CallableHandle{digest, owner_, index, kind};
}

inline void CallableRegistry::remove_last() noexcept {
  if (entries_.empty()) return;
  by_digest_.erase(entries_.back().digest);
  entries_.pop_back();
}

inline void CallableRegistry::check_failed(const CallableHandle& h) const {
  if (!h.valid()) {
    throw UsageError(
        "invalid CallableHandle (default-constructed); use the handle a Worker::register_* call "
        "returned");
  }
  if (h.owner != owner_) {
    throw UsageError(fmt::format(
        "CallableHandle {:#018x} was registered on another Worker; register the callable on this "
        "one",
        h.digest));
  }
  throw UsageError(
      fmt::format("CallableHandle {:#018x} is not registered on this Worker", h.digest));
}

inline const CallableRegistry::Entry* CallableRegistry::find(
    std::uint64_t digest, std::uint32_t index_hint) const noexcept {
  const std::uint32_t i = index_of(digest, index_hint);
  return i == npos ? nullptr : &entries_[i];
}

inline std::uint32_t CallableRegistry::index_of(std::uint64_t digest,
                                                std::uint32_t index_hint) const noexcept {
  if (index_hint < entries_.size() && entries_[index_hint].digest == digest) return index_hint;
  auto it = by_digest_.find(digest);
  return it == by_digest_.end() ? npos : it->second;
}

inline std::string CallableRegistry::name_of(std::uint64_t digest, std::uint32_t index_hint) const {
  if (const Entry* e = find(digest, index_hint)) return e->name;
  return fmt::format("<unknown callable {:#018x}>", digest);
}

}  // namespace simpler::detail
