// Shared anonymous mappings for the heap rings.
#include <sys/mman.h>

#include <fmt/format.h>

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

}  // namespace simpler::detail
