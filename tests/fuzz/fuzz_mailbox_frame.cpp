// Fuzz target: both sides of a mailbox frame. The input gives the header fields a parent writes
// (blob_bytes, digest, index_hint, config), a stale or corrupt answer left in the frame (error
// kind, code, a message fill byte), whether the config is the frame's (config_in_frame), and
// then the blob. The parent's reader (read_frame_error)
// must reject the stale answer's unknown kinds and never read past the message field; the
// child's side (serve_frame) must clear it; a checking leaf verifies what serve_frame hands it
// and, by digest, returns, throws, throws a message longer than the mailbox, throws a non-std
// exception, or throws a DeviceError whose status must come back as the answer's kind and code.
//
// Input: [u32 blob_bytes][u64 digest][u32 index_hint][sizeof(CallConfig) bytes]
//        [u32 stale error kind][i32 stale error code][u8 stale message fill]
//        [u32 config_in_frame][blob ...]
// (short inputs are padded with zeros; a fill byte of 0 leaves the message empty, any other
// fills the whole field with no NUL).
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

enum class Then { Return, Throw, ThrowLong, ThrowOther, ThrowDevice };

/// A leaf that checks every request against the frame it came from.
struct CheckingLeaf {
  const MailboxHeader* box;
  const std::byte* blob;
  bool ran = false;

  void run(const simpler::LeafRequest& r) {
    ran = true;
    if (r.digest != box->digest || r.index_hint != box->index_hint)
      defect("the request's digest or index hint differs from the frame's");
    const simpler::CallConfig* want =
        box->config_in_frame != 0 ? &box->config : &simpler::default_call_config();
    if (r.config != want) defect("the request's config is not the one config_in_frame names");
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
      case Then::ThrowDevice:
        throw simpler::DeviceError("the device failed", device_status(r.digest));
    }
  }
  static Then then(std::uint64_t digest) { return static_cast<Then>(digest % 5); }
  static std::int32_t device_status(std::uint64_t digest) {
    return static_cast<std::int32_t>(digest >> 32);
  }
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
  const auto stale_kind = take<std::uint32_t>(data, size);
  const auto stale_code = take<std::int32_t>(data, size);
  const auto stale_fill = take<std::uint8_t>(data, size);
  box->config_in_frame = take<std::uint32_t>(data, size);
  std::byte* blob = region + kMailboxBlobOffset;

  // A stale or corrupt answer in the frame: what the parent makes of it.
  box->error = 1;
  box->error_kind = stale_kind;
  box->error_code = stale_code;
  std::memset(box->message, stale_fill, sizeof(box->message));
  simpler::Fault fault;
  const bool known = simpler::detail::read_frame_error(*box, fault);
  if (known != (stale_kind <= simpler::detail::kMaxFrameErrorKind))
    defect("read_frame_error accepted an unknown error kind, or rejected a known one");
  if (known && (static_cast<std::uint32_t>(fault.kind) != stale_kind || fault.code != stale_code))
    defect("read_frame_error changed a known kind or its code");
  if (!known && (fault.kind != simpler::ErrorKind::Transport || fault.message.empty()))
    defect("an unknown error kind did not become a TransportError with a message");
  if (known && fault.message.size() > sizeof(box->message))
    defect("read_frame_error read past the message field");
  std::memcpy(blob, data, size < kMailboxBlobCapacity ? size : kMailboxBlobCapacity);

  // What must happen: a frame whose blob fits and decodes runs the leaf; any other fails.
  bool well_formed = box->blob_bytes <= kMailboxBlobCapacity && box->config_in_frame <= 1;
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
    if (box->error != 0 || box->error_kind != 0 || box->error_code != 0)
      defect("a task that succeeded reports an error (or keeps a stale one)");
  } else {
    if (box->error == 0) defect("a failed or malformed frame reports success");
    if (std::memchr(box->message, '\0', sizeof(box->message)) == nullptr)
      defect("the error message is not NUL-terminated");
    if (box->message[0] == '\0') defect("the error message is empty");
    if (!simpler::detail::read_frame_error(*box, fault))
      defect("the child's own answer has an unknown error kind");
    const Then then = CheckingLeaf::then(box->digest);
    const auto want = !well_formed                ? simpler::ErrorKind::Transport
                      : then == Then::ThrowDevice ? simpler::ErrorKind::Device
                                                  : simpler::ErrorKind::Other;
    if (fault.kind != want) defect("the answer's error kind is not what was raised");
    const std::int32_t code =
        well_formed && then == Then::ThrowDevice ? CheckingLeaf::device_status(box->digest) : 0;
    if (fault.code != code) defect("the answer's error code is not what was raised");
  }
  box->~MailboxHeader();
  return 0;
}
