// simpler::detail — the shared memory forked children see: anonymous shared mappings made with
// Boost.Interprocess, and the list of this process's shared mappings (/proc/self/maps) that the
// Orchestrator checks tensors against.
//
// Every mapping here is MAP_SHARED | MAP_ANONYMOUS (boost::interprocess::anonymous_shared_memory):
// it has no name, so nothing is left in /dev/shm or anywhere else when the processes that map it
// end, however they end. A child forked while a mapping exists sees it at the same address, and
// /proc/self/maps lists it as a shared ("rw-s", "/dev/zero (deleted)") mapping.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <boost/interprocess/anonymous_shared_memory.hpp>
#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/mapped_region.hpp>

#include "simpler/error.hpp"

namespace simpler::detail {

/// One read-write, zero-filled anonymous shared mapping, owned: unmapped when the SharedRegion is
/// destroyed or reset. Movable, not copyable; one owner at a time (not thread-safe). Fork-safe by
/// construction: a forked child's copy of the object is never destroyed (children end with
/// _exit), so only the process that made the mapping unmaps it.
class SharedRegion {
 public:
  SharedRegion() noexcept = default;
  /// Maps `bytes`. Throws SystemError "<what>: <strerror> (errno N)" when the kernel refuses;
  /// `what` should name the mapping, its size and what to do about it.
  SharedRegion(std::size_t bytes, const std::string& what) {
    try {
      region_ = boost::interprocess::anonymous_shared_memory(bytes);
    } catch (const boost::interprocess::interprocess_exception& e) {
      const int err = e.get_native_error();
      throw SystemError(what, err != 0 ? err : ENOMEM);
    }
  }
  SharedRegion(SharedRegion&& o) noexcept { region_.swap(o.region_); }
  SharedRegion& operator=(SharedRegion&& o) noexcept {
    if (this != &o) {
      reset();
      region_.swap(o.region_);
    }
    return *this;
  }
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion() = default;

  [[nodiscard]] std::byte* data() const noexcept {
    return static_cast<std::byte*>(region_.get_address());
  }
  [[nodiscard]] std::size_t size() const noexcept { return region_.get_size(); }
  [[nodiscard]] explicit operator bool() const noexcept { return data() != nullptr; }
  /// Unmaps now (nothing when empty).
  void reset() noexcept {
    boost::interprocess::mapped_region none;
    region_.swap(none);  // `none` unmaps it on its way out
  }

 private:
  boost::interprocess::mapped_region region_;
};

/// The regions map_shared_region handed out as raw pointers, by base address. Never destroyed:
/// a lane abandoned at a deadline may still use its Worker's heap rings while the process exits,
/// and the kernel unmaps everything at exit anyway.
struct RawSharedRegions {
  std::mutex mu;
  std::map<const void*, SharedRegion> by_base;
};
inline RawSharedRegions& raw_shared_regions() {
  static auto* const regions = new RawSharedRegions;
  return *regions;
}

/// A SharedRegion of `bytes` for a caller that keeps only its address (a HeapRing); give it back
/// with unmap_region. Throws SystemError naming the size and what to do.
inline void* map_shared_region(std::size_t bytes) {
  SharedRegion r(bytes, fmt::format("mmap of a {}-byte heap ring (shared memory; lower "
                                    "WorkerOptions::heap_ring_size or free memory)",
                                    bytes));
  void* base = r.data();
  RawSharedRegions& all = raw_shared_regions();
  std::lock_guard lk(all.mu);
  all.by_base.emplace(base, std::move(r));
  return base;
}

/// Unmaps a region map_shared_region returned (nothing for nullptr or an unknown address).
inline void unmap_region(void* base, std::size_t /*bytes*/) noexcept {
  if (base == nullptr) return;
  SharedRegion gone;
  {
    RawSharedRegions& all = raw_shared_regions();
    std::lock_guard lk(all.mu);
    auto it = all.by_base.find(base);
    if (it == all.by_base.end()) return;
    gone = std::move(it->second);
    all.by_base.erase(it);
  }
  // `gone` unmaps here, outside the lock.
}

using AddressRanges = std::vector<std::pair<std::uintptr_t, std::uintptr_t>>;

/// The parser behind shared_mappings, over the text of a maps file: the shared ("rw-s", any
/// "s" in the fourth permission column) ranges, sorted, with adjacent ones merged (a tensor may
/// span two). Lines it cannot read are skipped.
inline AddressRanges parse_shared_mappings(std::string_view maps) {
  AddressRanges out;
  while (!maps.empty()) {
    const std::size_t eol = maps.find('\n');
    const std::string_view line = maps.substr(0, eol);
    maps = eol == std::string_view::npos ? std::string_view() : maps.substr(eol + 1);
    // "begin-end perms offset dev inode path": perms is "rw-s" for a shared mapping.
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;
    const char* p = line.data();
    const char* const stop = line.data() + line.size();
    auto r = std::from_chars(p, stop, begin, 16);
    if (r.ec != std::errc() || r.ptr == stop || *r.ptr != '-') continue;
    r = std::from_chars(r.ptr + 1, stop, end, 16);
    if (r.ec != std::errc() || stop - r.ptr < 5 || r.ptr[0] != ' ') continue;
    const char* perms = r.ptr + 1;
    if (perms[3] != 's' || end <= begin) continue;
    out.emplace_back(begin, end);
  }
  std::sort(out.begin(), out.end());
  std::size_t kept = 0;
  for (const auto& m : out) {
    if (kept != 0 && out[kept - 1].second >= m.first) {
      out[kept - 1].second = std::max(out[kept - 1].second, m.second);
    } else {
      out[kept++] = m;
    }
  }
  out.resize(kept);
  return out;
}

/// The range of `ranges` (sorted, disjoint) that holds `addr`, or nullptr.
inline const std::pair<std::uintptr_t, std::uintptr_t>* mapping_holding(
    const AddressRanges& ranges, std::uintptr_t addr) noexcept {
  // The first range that ends after `addr` is the only one that can hold it.
  auto it = std::upper_bound(ranges.begin(), ranges.end(), addr,
                             [](std::uintptr_t a, const auto& r) { return a < r.second; });
  return it != ranges.end() && it->first <= addr ? &*it : nullptr;
}

/// The text of /proc/<pid>/maps ("self" by default). Throws SystemError when it cannot be read.
inline std::string read_maps(const char* pid = "self") {
  const std::string path = fmt::format("/proc/{}/maps", pid);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw_errno(fmt::format("open of {} (to find the shared mappings children see)", path).c_str());
  }
  std::string text;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      text.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int err = errno;
      ::close(fd);
      throw SystemError(fmt::format("read of {}", path), err);
    }
  }
  ::close(fd);
  return text;
}

/// The MAP_SHARED mappings of this process, as sorted [begin, end) ranges with adjacent ones
/// merged (from /proc/self/maps). A child forked now sees exactly these at the same addresses.
/// Throws SystemError when /proc/self/maps cannot be read.
inline AddressRanges shared_mappings() {
  return parse_shared_mappings(read_maps());
}

}  // namespace simpler::detail
