// simpler — the remote wire protocol: frames between an L4 (or higher) Worker and a remote L3
// session (SocketTransport, RemoteServer). docs/remote.md describes the format; this file is the
// one encoder and the one decoder of it.
//
// Every integer is little-endian and encoded field by field (never a struct memcpy). A frame is a
// 40-byte header and a payload of header.length bytes. Decoders take untrusted bytes: each bound
// is checked before it is used, trailing bytes are an error, and every error is a ProtocolError
// that names the field. A frame that fails to decode ends its session, never the server.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "simpler/call_config.hpp"
#include "simpler/error.hpp"
#include "simpler/task_args.hpp"
#include "simpler/types.hpp"

namespace simpler {

/// A frame that breaks the protocol: its text names the field and what was wrong with it.
class ProtocolError : public TransportError {
 public:
  using TransportError::TransportError;
};

namespace wire {

inline constexpr std::uint32_t kMagic = 0x524d5053;  ///< "SPMR" as bytes on the wire
inline constexpr std::uint16_t kVersion = 2;  ///< 2: TASK and COMPLETION carry a trace section
inline constexpr std::size_t kHeaderBytes = 40;

enum class FrameType : std::uint8_t {
  AuthBegin = 1,      ///< client -> server: session id (header), client nonce, heartbeat period
  AuthChallenge = 2,  ///< server -> client: server nonce, the server's proof
  AuthProof = 3,      ///< client -> server: the client's proof
  Hello = 4,          ///< server -> client: the session is ready; what it serves
  Task = 5,           ///< client -> server: run a served orchestration function
  Completion = 6,     ///< server -> client: how a TASK ended
  Control = 7,        ///< client -> server: buffers, copies, ping
  ControlReply = 8,   ///< server -> client: one per CONTROL
  Heartbeat = 9,      ///< both ways, empty
  Shutdown = 10,      ///< client -> server, empty: end the session
};
inline constexpr std::uint8_t kFrameTypeMax = 10;
/// No flag bit is defined in version 2: every bit must be zero.
inline constexpr std::uint8_t kKnownFlags = 0;

const char* to_string(FrameType t) noexcept;

struct FrameHeader {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  FrameType type = FrameType::Heartbeat;
  std::uint8_t flags = 0;
  std::uint64_t session = 0;
  std::uint32_t worker = 0;
  std::uint32_t reserved0 = 0;
  std::uint64_t sequence = 0;
  std::uint32_t length = 0;  ///< payload bytes that follow
  std::uint32_t reserved1 = 0;
};

/// What a receiver expects of the next header: the session and worker of its link, the next
/// sequence number of that direction, and the largest payload it accepts.
struct Expect {
  std::uint64_t session = 0;
  std::uint32_t worker = 0;
  std::uint64_t sequence = 0;
  std::uint32_t max_length = 0;
};

void encode_header(const FrameHeader& h, std::byte* out) noexcept;
/// Decodes a header and checks what can be checked without context: magic, version, type,
/// flags, reserved fields. Throws ProtocolError naming the field.
FrameHeader decode_header(std::span<const std::byte> bytes);
/// Checks a decoded header against its link: session, worker, sequence, payload length.
void check_header(const FrameHeader& h, const Expect& e);

// ---- Primitive writer/reader.

class Writer {
 public:
  explicit Writer(std::vector<std::byte>& out) : out_(out) {}
  void u8(std::uint8_t v) { out_.push_back(static_cast<std::byte>(v)); }
  void u16(std::uint16_t v) { put(v, 2); }
  void u32(std::uint32_t v) { put(v, 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void i32(std::int32_t v) { u32(static_cast<std::uint32_t>(v)); }
  void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
  // resize + memcpy rather than insert(end, first, last): GCC 12 at -O3 reports a false
  // stringop-overflow/array-bounds on the inlined range insert (release builds use -Werror).
  void bytes(std::span<const std::byte> b) {
    if (b.empty()) return;
    const std::size_t at = out_.size();
    out_.resize(at + b.size());
    std::memcpy(out_.data() + at, b.data(), b.size());
  }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    bytes(std::as_bytes(std::span(s.data(), s.size())));
  }

 private:
  void put(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
  }
  std::vector<std::byte>& out_;
};

class Reader {
 public:
  Reader(std::span<const std::byte> in, const char* frame) : in_(in), frame_(frame) {}
  std::uint8_t u8(const char* field) { return static_cast<std::uint8_t>(get(1, field)); }
  std::uint16_t u16(const char* field) { return static_cast<std::uint16_t>(get(2, field)); }
  std::uint32_t u32(const char* field) { return static_cast<std::uint32_t>(get(4, field)); }
  std::uint64_t u64(const char* field) { return get(8, field); }
  std::int32_t i32(const char* field) { return static_cast<std::int32_t>(u32(field)); }
  std::int64_t i64(const char* field) { return static_cast<std::int64_t>(u64(field)); }
  std::span<const std::byte> bytes(std::size_t n, const char* field) {
    need(n, field);
    auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  std::string str(std::size_t max, const char* field);
  /// A count that is at most `max` and whose items (each at least `item_bytes`) fit what is left.
  std::uint32_t count(std::size_t max, std::size_t item_bytes, const char* field);
  [[nodiscard]] std::size_t left() const noexcept { return in_.size() - pos_; }
  /// Throws if bytes are left over.
  void end();
  [[noreturn]] void fail(const char* field, const std::string& what) const;

 private:
  void need(std::size_t n, const char* field) const {
    if (in_.size() - pos_ < n) {
      fail(field, fmt::format("truncated: needs {} more bytes, {} left", n, in_.size() - pos_));
    }
  }
  std::uint64_t get(std::size_t n, const char* field) {
    need(n, field);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
  const char* frame_;
};

// ---- Bounds of one frame's content (version 1).
inline constexpr std::size_t kMaxName = 1024;      ///< callable names
inline constexpr std::size_t kMaxMessage = 16384;  ///< error text
inline constexpr std::size_t kMaxServed = 65536;   ///< callables in a HELLO
inline constexpr std::size_t kMaxTensors = 4096;   ///< per TASK
inline constexpr std::size_t kMaxScalars = 4096;   ///< per TASK
inline constexpr std::uint8_t kMaxTraceLevel = 4;  ///< a traced TASK's level: 1..4
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kProofBytes = 32;  ///< HMAC-SHA256

using Nonce = std::array<std::byte, kNonceBytes>;
using Proof = std::array<std::byte, kProofBytes>;

// ---- Payloads.

enum class Status : std::uint8_t { Ok = 0, Failed = 1 };

struct AuthBegin {
  Nonce client_nonce{};
  std::uint32_t heartbeat_ms = 0;          ///< the client's heartbeat period
  std::uint32_t heartbeat_timeout_ms = 0;  ///< silence after which either side gives up
};
struct AuthChallenge {
  Nonce server_nonce{};
  Proof server_proof{};
};
struct AuthProof {
  Proof client_proof{};
};
struct ServedCallable {
  std::uint64_t digest = 0;
  std::string name;
};
struct Hello {
  std::int32_t level = 3;               ///< the remote Worker's level
  std::uint32_t max_payload = 0;        ///< the largest frame payload the server accepts
  std::uint64_t max_buffer_bytes = 0;   ///< the largest buffer it allocates
  std::uint64_t buffer_pool_bytes = 0;  ///< all its buffers together
  std::vector<ServedCallable> served;
  /// Failed: the session could not start (setup or the inner init() threw); the message says why
  /// and the server closes the connection after this frame.
  Status status = Status::Ok;
  ErrorKind kind = ErrorKind::Other;
  std::int32_t code = 0;
  std::string message;
};
/// A TASK: the callable's digest, its config and its arguments. Tensor data are remote buffer
/// addresses (RemoteBuffer::tensor), never pointers.
struct Task {
  std::uint64_t digest = 0;
  CallConfig config{};
  std::vector<ContinuousTensor> tensors;
  std::vector<std::uint64_t> scalars;
  /// A task of a traced run of the parent: the level (1..4) its remote run is traced at, 0 =
  /// untraced; and the most bytes of nested trace the parent takes back in the COMPLETION.
  std::uint8_t trace_level = 0;
  std::uint32_t trace_limit = 0;
};
/// What a traced TASK's COMPLETION says of its remote run, in the remote's CLOCK_MONOTONIC ns:
/// when the TASK arrived, when its run began and ended, when the COMPLETION left; the remote
/// Worker's serialized trace records (detail::serialize_trace), and what was lost of them.
struct CompletionTrace {
  std::int64_t rx_ns = 0;
  std::int64_t begin_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t tx_ns = 0;
  std::uint64_t lost = 0;
  std::vector<std::byte> records;
};
struct Completion {
  std::uint64_t answers = 0;  ///< the TASK's sequence
  Status status = Status::Ok;
  ErrorKind kind = ErrorKind::Other;
  std::int32_t code = 0;
  std::string message;
  bool traced = false;  ///< `trace` is present (only in answer to a traced TASK)
  CompletionTrace trace;
};

enum class ControlOp : std::uint32_t {
  Alloc = 1,     ///< u64 bytes, u64 buffer id (the client's) -> u64 buffer id, u64 base, u64 bytes
  Free = 2,      ///< u64 buffer id -> (nothing)
  CopyTo = 3,    ///< u64 buffer id, u64 offset, u64 n, then n bytes -> (nothing)
  CopyFrom = 4,  ///< u64 buffer id, u64 offset, u64 n -> then n bytes
  Ping = 5,      ///< (nothing) -> (nothing)
};
inline constexpr std::uint32_t kControlOpMax = 5;
const char* to_string(ControlOp op) noexcept;

/// A CONTROL's fixed head (the bytes of a CopyTo follow it; they are not part of this struct).
struct Control {
  ControlOp op = ControlOp::Ping;
  std::uint64_t a = 0;  ///< Alloc: bytes; Free/CopyTo/CopyFrom: buffer id
  /// Alloc: the buffer id the client chose (unique in its process, so a tensor names its buffer
  /// across all its remotes); CopyTo/CopyFrom: offset.
  std::uint64_t b = 0;
  std::uint64_t n = 0;  ///< CopyTo/CopyFrom: byte count
};
inline constexpr std::size_t kControlHeadBytes = 4 + 4 + 8 + 8 + 8;

/// A CONTROL_REPLY's head; a CopyFrom's bytes follow it.
struct ControlReply {
  std::uint64_t answers = 0;
  ControlOp op = ControlOp::Ping;
  Status status = Status::Ok;
  ErrorKind kind = ErrorKind::Other;
  std::int32_t code = 0;
  std::string message;
  std::uint64_t r0 = 0, r1 = 0, r2 = 0;  ///< Alloc: id, base, bytes; CopyFrom: n
};

// Encoders append the payload to `out`; decoders take exactly one payload.
void encode(const AuthBegin& m, std::vector<std::byte>& out);
void encode(const AuthChallenge& m, std::vector<std::byte>& out);
void encode(const AuthProof& m, std::vector<std::byte>& out);
void encode(const Hello& m, std::vector<std::byte>& out);
void encode(const Completion& m, std::vector<std::byte>& out);
void encode(const ControlReply& m, std::vector<std::byte>& out);
/// A TASK from a leaf request's parts (no copy of the arguments into a Task first); a traced one
/// when trace_level > 0.
void encode_task(std::uint64_t digest, const CallConfig& config, TaskArgsView args,
                 std::vector<std::byte>& out, std::uint8_t trace_level = 0,
                 std::uint32_t trace_limit = 0);
/// The bytes of a COMPLETION's fixed part and trace section without records (what a traced
/// COMPLETION takes beyond its records and message).
inline constexpr std::size_t kCompletionTraceHeadBytes = 8 + 1 + 1 + 4 + 4 + 1 + 4 * 8 + 8 + 4;
void encode(const Control& m, std::vector<std::byte>& out);

AuthBegin decode_auth_begin(std::span<const std::byte> p);
AuthChallenge decode_auth_challenge(std::span<const std::byte> p);
AuthProof decode_auth_proof(std::span<const std::byte> p);
Hello decode_hello(std::span<const std::byte> p);
Task decode_task(std::span<const std::byte> p);
Completion decode_completion(std::span<const std::byte> p);
/// Decodes a whole CONTROL payload: its head, checked against the rest of `p`. A CopyTo's n
/// bytes follow the head (the caller takes them from kControlHeadBytes on); after any other
/// op's head nothing may follow.
Control decode_control(std::span<const std::byte> p);
/// The same from the first bytes (at least kControlHeadBytes) of a payload of `payload_length`
/// bytes: a CopyTo's data need not be there yet.
Control decode_control_head(std::span<const std::byte> prefix, std::uint64_t payload_length,
                            bool detached = false);
/// Decodes a whole CONTROL_REPLY payload and returns its head; sets `head_bytes` to the head's
/// length. An ok CopyFrom's data are the rest of `p` (exactly r0 bytes); after any other reply's
/// head nothing may follow.
ControlReply decode_control_reply(std::span<const std::byte> p, std::size_t& head_bytes);
/// The same from the first bytes of a payload of `payload_length` bytes (at least the head; a
/// CopyFrom's data need not be there): checks that the rest is exactly the data it announces.
ControlReply decode_control_reply_head(std::span<const std::byte> prefix,
                                       std::uint64_t payload_length, std::size_t& head_bytes,
                                       bool detached = false);
/// For carriers that move a copy's bytes outside the frame (MpiTransport sends them as messages
/// of their own): the payload is exactly the head; a CopyTo's n bytes, an ok CopyFrom reply's r0
/// bytes, travel separately.
Control decode_control_detached(std::span<const std::byte> p);
ControlReply decode_control_reply_detached(std::span<const std::byte> p);
/// The head of an ok CONTROL_REPLY (empty message).
inline constexpr std::size_t kOkReplyHeadBytes = 8 + 4 + 1 + 1 + 4 + 4 + 24;

/// Decodes the payload of a frame of type `t`, checking it as its receiver would (the fuzzer's
/// entry point; the links call the typed decoders).
void decode_payload(FrameType t, std::span<const std::byte> p);

// ---- Remote buffer addresses. A tensor's data on a remote worker is (buffer id << 40) | offset:
// an identity the server resolves in its own table, never a pointer.
inline constexpr unsigned kAddressShift = 40;
inline constexpr std::uint64_t kOffsetMask = (std::uint64_t{1} << kAddressShift) - 1;
inline constexpr std::uint64_t kMaxBufferId = (std::uint64_t{1} << (64 - kAddressShift)) - 1;
constexpr std::uint64_t buffer_address(std::uint64_t id) noexcept {
  return id << kAddressShift;
}
constexpr std::uint64_t buffer_of(std::uint64_t address) noexcept {
  return address >> kAddressShift;
}
constexpr std::uint64_t offset_of(std::uint64_t address) noexcept {
  return address & kOffsetMask;
}

}  // namespace wire
}  // namespace simpler

#include "simpler/detail/wire.ipp"
