// Shared anonymous mappings for the heap rings.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <string>

#include "simpler/detail/heap_ring.hpp"
#include "simpler/error.hpp"

namespace simpler::detail {

void* map_shared_region(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    throw_errno(fmt::format("mmap of a {}-byte heap ring", bytes).c_str());
  }
  return p;
}

void unmap_region(void* base, std::size_t bytes) noexcept {
  if (base != nullptr && bytes != 0) ::munmap(base, bytes);
}

std::vector<std::pair<std::uintptr_t, std::uintptr_t>> parse_shared_mappings(
    std::string_view maps) {
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> out;
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
  // Adjacent shared mappings hold a tensor that spans both: merge them.
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

const std::pair<std::uintptr_t, std::uintptr_t>* mapping_holding(
    const std::vector<std::pair<std::uintptr_t, std::uintptr_t>>& ranges,
    std::uintptr_t addr) noexcept {
  // The first range that ends after `addr` is the only one that can hold it.
  auto it = std::upper_bound(ranges.begin(), ranges.end(), addr,
                             [](std::uintptr_t a, const auto& r) { return a < r.second; });
  return it != ranges.end() && it->first <= addr ? &*it : nullptr;
}

std::vector<std::pair<std::uintptr_t, std::uintptr_t>> shared_mappings() {
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("open of /proc/self/maps (to find the shared mappings children see)");
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
      throw SystemError("read of /proc/self/maps", err);
    }
  }
  ::close(fd);
  return parse_shared_mappings(text);
}

}  // namespace simpler::detail
