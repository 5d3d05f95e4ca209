// Callable kind names and digests.
// Included once, at the end of its header; every function is inline (the library is header-only).
#pragma once

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <string>

#include "simpler/callable.hpp"

namespace simpler {

inline const char* to_string(CallableKind k) noexcept {
  switch (k) {
    case CallableKind::Sub:
      return "sub";
    case CallableKind::Orch:
      return "orch";
    case CallableKind::Chip:
      return "chip";
  }
  return "unknown";
}

inline std::uint64_t callable_digest(CallableKind kind, std::string_view name) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a offset basis
  auto mix = [&h](unsigned char c) {
    h ^= c;
    h *= 0x100000001b3ULL;
  };
  mix(static_cast<unsigned char>(kind));
  for (char c : name) mix(static_cast<unsigned char>(c));
  // splitmix64 finaliser: spreads FNV's weak low bits over the whole word.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h == 0 ? 1 : h;
}

}  // namespace simpler
