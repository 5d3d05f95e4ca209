// Fuzz target: the child's side of a mailbox frame. The input gives the header fields a parent
// writes (blob_bytes, digest, index_hint, config) and then the blob; a checking leaf verifies
// what serve_frame hands it and, by digest, returns, throws, throws a message longer than the
// mailbox, or throws a non-std exception.
//
// Input: [u32 blob_bytes][u64 digest][u32 index_hint][sizeof(CallConfig) bytes][blob ...]
// (short inputs are padded with zeros).
#include <simpler/args_blob.hpp>
#include <simpler/error.hpp>
#include <simpler/transport/fork_shm_transport.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "fuzz/fuzz_targets.hpp"

namespace {

using simpler::detail::kMailboxBlobCapacity;
using simpler::detail::kMailboxBlobOffset;
using simpler::detail::kMailboxBytes;
using simpler::detail::MailboxHeader;

[[noreturn]] void defect(const char* what) {
  std::fprintf(stderr, "fuzz_mailbox_frame: %s\n", what);
  std::abort();
}

enum class Then { Return, Throw, ThrowLong, ThrowOther };

/// A leaf that checks every request against the frame it came from.
struct CheckingLeaf {
  const MailboxHeader* box;
  const std::byte* blob;
  bool ran = false;

  void run(const simpler::LeafRequest& r) {
    ran = true;
    if (r.digest != box->digest || r.index_hint != box->index_hint)
      defect("the request's digest or index hint differs from the frame's");
    if (r.config != &box->config) defect("the request's config is not the frame's");
    const auto& a = r.args;
    if (a.tensor_count < 0 || a.scalar_count < 0) defect("a negative count reached the leaf");
    if (simpler::args_blob_size(a) > box->blob_bytes) defect("the args run past the blob");
    if (a.tensor_count > 0 &&
        reinterpret_cast<const std::byte*>(a.tensors) != blob + simpler::kArgsBlobHeaderBytes)
      defect("the tensors are not in the blob");
    std::uint64_t sum = 0;
    for (std::int32_t i = 0; i < a.tensor_count; ++i) {
      simpler::validate(a.tensors[i]);  // malformed tensors must not reach a leaf
      sum += a.tensors[i].data;
    }
    for (std::int32_t i = 0; i < a.scalar_count; ++i) sum += a.scalars[i];
    static_cast<void>(sum);
    switch (then(r.digest)) {
      case Then::Return:
        return;
      case Then::Throw:
        throw std::runtime_error("the leaf failed");
      case Then::ThrowLong:
        throw std::runtime_error(std::string(3 * sizeof(box->message), 'x'));
      case Then::ThrowOther:
        throw 42;
    }
  }
  static Then then(std::uint64_t digest) { return static_cast<Then>(digest % 4); }
};

template <class T>
T take(const std::uint8_t*& p, std::size_t& n) {
  T v{};
  const std::size_t k = n < sizeof(T) ? n : sizeof(T);
  std::memcpy(&v, p, k);
  p += k;
  n -= k;
  return v;
}

}  // namespace

int simpler_fuzz_mailbox_frame(const std::uint8_t* data, std::size_t size) {
  // One region the size of a real mailbox (a read past it is a sanitizer report), reused.
  static std::byte* const region = new (std::align_val_t{64}) std::byte[kMailboxBytes];
  std::memset(region, 0, kMailboxBytes);
  auto* box = new (region) MailboxHeader();
  box->blob_bytes = take<std::uint32_t>(data, size);
  box->digest = take<std::uint64_t>(data, size);
  box->index_hint = take<std::uint32_t>(data, size);
  box->config = take<simpler::CallConfig>(data, size);
  std::byte* blob = region + kMailboxBlobOffset;
  std::memcpy(blob, data, size < kMailboxBlobCapacity ? size : kMailboxBlobCapacity);

  // What must happen: a frame whose blob fits and decodes runs the leaf; any other fails.
  bool well_formed = box->blob_bytes <= kMailboxBlobCapacity;
  if (well_formed) {
    try {
      static_cast<void>(simpler::decode_args_blob({blob, box->blob_bytes}));
    } catch (const simpler::TransportError&) {
      well_formed = false;
    }
  }
  CheckingLeaf leaf{box, blob};
  simpler::detail::serve_frame(*box, blob, leaf);
  if (leaf.ran != well_formed) defect("the leaf ran for a malformed frame, or not for a good one");
  const bool ok = well_formed && CheckingLeaf::then(box->digest) == Then::Return;
  if (ok) {
    if (box->error != 0) defect("a task that succeeded reports an error");
  } else {
    if (box->error == 0) defect("a failed or malformed frame reports success");
    if (std::memchr(box->message, '\0', sizeof(box->message)) == nullptr)
      defect("the error message is not NUL-terminated");
    if (box->message[0] == '\0') defect("the error message is empty");
  }
  box->~MailboxHeader();
  return 0;
}
