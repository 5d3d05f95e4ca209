// Tests for the remote wire codec (simpler/remote/wire.hpp) and the session proofs
// (simpler/remote/auth.hpp): byte layout of the header, round trips of every payload, and that
// every malformed frame is a ProtocolError naming its field.
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "simpler/call_config.hpp"
#include "simpler/error.hpp"
#include "simpler/remote/auth.hpp"
#include "simpler/remote/wire.hpp"
#include "simpler/task_args.hpp"
#include "simpler/types.hpp"
#include "support/matchers.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_remote_wire {

namespace wire = simpler::wire;
using simpler::CallConfig;
using simpler::ContinuousTensor;
using simpler::DataType;
using simpler::ErrorKind;
using simpler::ProtocolError;
using wire::ControlOp;
using wire::FrameType;
using wire::Status;

namespace {

using simpler::testing::WhatContains;
using Bytes = std::vector<std::byte>;

template <class M>
Bytes encoded(const M& m) {
  Bytes out;
  wire::encode(m, out);
  return out;
}

Bytes header_bytes(const wire::FrameHeader& h) {
  Bytes out(wire::kHeaderBytes);
  wire::encode_header(h, out.data());
  return out;
}

void put_le(Bytes& b, std::size_t at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.at(at + i) = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

Bytes with_tail(Bytes b, std::initializer_list<std::uint8_t> tail) {
  for (std::uint8_t v : tail) b.push_back(static_cast<std::byte>(v));
  return b;
}

Bytes concat(Bytes a, std::span<const std::byte> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Bytes wire_pattern(std::size_t n, std::uint8_t seed) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>(seed + 37 * i);
  return b;
}

template <std::size_t N>
std::array<std::byte, N> filled(std::uint8_t first) {
  std::array<std::byte, N> a{};
  for (std::size_t i = 0; i < N; ++i) a[i] = static_cast<std::byte>(first + i);
  return a;
}

wire::Proof proof_from_hex(std::string_view hex) {
  REQUIRE(hex.size() == 2 * wire::kProofBytes);
  wire::Proof p{};
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] = static_cast<std::byte>(std::stoi(std::string(hex.substr(2 * i, 2)), nullptr, 16));
  }
  return p;
}

// ---- TASK helpers.

ContinuousTensor remote_tensor(std::uint64_t id, std::uint64_t offset,
                               std::initializer_list<std::uint32_t> shape, DataType dtype) {
  ContinuousTensor t;
  t.data = wire::buffer_address(id) | offset;
  t.ndims = static_cast<std::uint32_t>(shape.size());
  std::uint32_t d = 0;
  for (std::uint32_t s : shape) t.shapes[d++] = s;
  t.dtype = dtype;
  t.child_memory = 1;
  return t;
}

struct TaskParts {
  std::uint64_t digest = 0xC0FFEE;
  CallConfig config{};
  std::vector<ContinuousTensor> tensors;
  std::vector<std::uint64_t> scalars;
  std::uint8_t trace_level = 0;
  std::uint32_t trace_limit = 0;
};

Bytes encode_parts(const TaskParts& p) {
  const simpler::TaskArgsView v{static_cast<std::int32_t>(p.tensors.size()),
                                static_cast<std::int32_t>(p.scalars.size()), p.tensors.data(),
                                p.scalars.data()};
  Bytes out;
  wire::encode_task(p.digest, p.config, v, out, p.trace_level, p.trace_limit);
  return out;
}

void set_prefix(CallConfig& c, std::string_view s) {
  REQUIRE(s.size() < c.output_prefix.size());
  c.output_prefix.fill('\0');
  std::memcpy(c.output_prefix.data(), s.data(), s.size());
}

CallConfig busy_config() {
  CallConfig c;
  c.block_dim = 24;
  c.aicpu_thread_num = 4;
  c.enable_l2_swimlane = 2;
  c.enable_dump_tensor = 1;
  c.enable_pmu = 3;
  c.enable_dep_gen = 1;
  set_prefix(c, "/var/tmp/simpler diag/run-7");
  c.runtime_env.ring_task_window = {4, 1024, 0, std::uint64_t{1} << 20};
  c.runtime_env.ring_heap = {1024, 0, std::uint64_t{1} << 30, 4096};
  c.runtime_env.ring_dep_pool = {0, 4, 65536, 7};
  c.timeout = std::chrono::milliseconds(1500);
  return c;
}

void check_same_config(const CallConfig& a, const CallConfig& b) {
  CHECK(a.block_dim == b.block_dim);
  CHECK(a.aicpu_thread_num == b.aicpu_thread_num);
  CHECK(a.enable_l2_swimlane == b.enable_l2_swimlane);
  CHECK(a.enable_dump_tensor == b.enable_dump_tensor);
  CHECK(a.enable_pmu == b.enable_pmu);
  CHECK(a.enable_dep_gen == b.enable_dep_gen);
  CHECK(a.output_prefix == b.output_prefix);
  CHECK(a.runtime_env.ring_task_window == b.runtime_env.ring_task_window);
  CHECK(a.runtime_env.ring_heap == b.runtime_env.ring_heap);
  CHECK(a.runtime_env.ring_dep_pool == b.runtime_env.ring_dep_pool);
  CHECK(a.timeout == b.timeout);
}

void check_same_tensor(const ContinuousTensor& a, const ContinuousTensor& b) {
  CHECK(a.data == b.data);
  CHECK(a.ndims == b.ndims);
  CHECK(a.shapes == b.shapes);
  CHECK(a.dtype == b.dtype);
  CHECK(a.child_memory == b.child_memory);
  CHECK(a.reserved_ == b.reserved_);
}

// A TASK with one tensor of `ndims` dimensions and no scalars; returns the payload and where the
// tensor starts in it (after it: 4 + 4 * ndims bytes of dtype..shapes, then the scalar count).
std::pair<Bytes, std::size_t> one_tensor_task(std::uint32_t ndims) {
  TaskParts p;
  ContinuousTensor t = remote_tensor(3, 0x40, {2}, DataType::Int32);
  t.ndims = ndims;
  for (std::uint32_t d = 0; d < ndims; ++d) t.shapes[d] = d + 2;
  p.tensors.push_back(t);
  Bytes b = encode_parts(p);
  // The tensor is followed by scalar_count (4 bytes) and trace_level (1).
  const std::size_t tensor_at = b.size() - 1 - 4 - (8 + 4 + 4 * std::size_t{ndims});
  return {std::move(b), tensor_at};
}

// ---- Truncation: the first prefix length of `full` that decodes, or kNone.
constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
std::size_t first_prefix_that_decodes(FrameType t, const Bytes& full) {
  for (std::size_t k = 0; k < full.size(); ++k) {
    try {
      wire::decode_payload(t, std::span<const std::byte>(full.data(), k));
      return k;
    } catch (const ProtocolError&) {
    }
  }
  return kNone;
}

}  // namespace

// =================================================================================================
// Header

TEST_CASE("a frame header encodes every field little-endian at its offset",
          "[remote][remote-wire]") {
  wire::FrameHeader h;
  h.type = FrameType::Completion;
  h.session = 0x0123456789ABCDEF;
  h.worker = 0xDEADBEEF;
  h.sequence = 0xFEDCBA9876543210;
  h.length = 0x01020304;
  const Bytes b = header_bytes(h);
  const std::array<std::uint8_t, wire::kHeaderBytes> expected = {
      'S',  'P',  'M',  'R',                           // magic
      0x02, 0x00,                                      // version
      0x06,                                            // type
      0x00,                                            // flags
      0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01,  // session
      0xEF, 0xBE, 0xAD, 0xDE,                          // worker
      0x00, 0x00, 0x00, 0x00,                          // reserved0
      0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE,  // sequence
      0x04, 0x03, 0x02, 0x01,                          // length
      0x00, 0x00, 0x00, 0x00,                          // reserved1
  };
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("byte " << i);
    CHECK(std::to_integer<std::uint8_t>(b[i]) == expected[i]);
  }
}

TEST_CASE("a frame header round-trips every field and every frame type", "[remote][remote-wire]") {
  for (std::uint8_t type = 1; type <= wire::kFrameTypeMax; ++type) {
    wire::FrameHeader h;
    h.type = static_cast<FrameType>(type);
    h.session = 0x8000'0000'0000'0001ULL * type;
    h.worker = 0xFFFF'FFF0U + type;
    h.sequence = std::numeric_limits<std::uint64_t>::max() - type;
    h.length = 0xFFFF'FF00U | type;
    const wire::FrameHeader d = wire::decode_header(header_bytes(h));
    INFO("type " << wire::to_string(h.type));
    CHECK(std::string_view(wire::to_string(h.type)) != "?");
    CHECK(d.magic == wire::kMagic);
    CHECK(d.version == wire::kVersion);
    CHECK(d.type == h.type);
    CHECK(d.flags == 0);
    CHECK(d.session == h.session);
    CHECK(d.worker == h.worker);
    CHECK(d.reserved0 == 0);
    CHECK(d.sequence == h.sequence);
    CHECK(d.length == h.length);
    CHECK(d.reserved1 == 0);
    CHECK(header_bytes(d) == header_bytes(h));
  }
}

TEST_CASE("a frame header with a bad magic, version, type, flag or reserved field is refused",
          "[remote][remote-wire]") {
  wire::FrameHeader h;
  h.type = FrameType::Task;
  h.session = 42;
  h.length = 16;
  const Bytes good = header_bytes(h);
  REQUIRE_NOTHROW(wire::decode_header(good));

  auto patched = [&](std::size_t at, std::uint8_t v) {
    Bytes b = good;
    b.at(at) = static_cast<std::byte>(v);
    return b;
  };
  CHECK_THROWS_MATCHES(wire::decode_header(patched(0, 'X')), ProtocolError, WhatContains("magic"));
  CHECK_THROWS_MATCHES(wire::decode_header(patched(3, 0)), ProtocolError, WhatContains("magic"));
  CHECK_THROWS_MATCHES(wire::decode_header(patched(4, 1)), ProtocolError,
                       WhatContains("version is 1"));  // the version before traced frames
  CHECK_THROWS_MATCHES(wire::decode_header(patched(4, 3)), ProtocolError,
                       WhatContains("version is 3"));
  CHECK_THROWS_MATCHES(wire::decode_header(patched(5, 1)), ProtocolError, WhatContains("version"));
  CHECK_THROWS_MATCHES(wire::decode_header(patched(6, 0)), ProtocolError,
                       WhatContains("type is 0"));
  CHECK_THROWS_MATCHES(wire::decode_header(patched(6, wire::kFrameTypeMax + 1)), ProtocolError,
                       WhatContains("type is 11"));
  CHECK_THROWS_MATCHES(wire::decode_header(patched(6, 0xFF)), ProtocolError, WhatContains("type"));
  CHECK_THROWS_MATCHES(wire::decode_header(patched(7, 0x01)), ProtocolError, WhatContains("flags"));
  CHECK_THROWS_MATCHES(wire::decode_header(patched(7, 0x80)), ProtocolError, WhatContains("flags"));
  for (std::size_t at : {20, 21, 22, 23}) {
    INFO("reserved0 byte " << at);
    CHECK_THROWS_MATCHES(wire::decode_header(patched(at, 1)), ProtocolError,
                         WhatContains("reserved field at byte 20"));
  }
  for (std::size_t at : {36, 37, 38, 39}) {
    INFO("reserved1 byte " << at);
    CHECK_THROWS_MATCHES(wire::decode_header(patched(at, 0x80)), ProtocolError,
                         WhatContains("reserved field at byte 36"));
  }
}

TEST_CASE("a frame header is exactly 40 bytes", "[remote][remote-wire]") {
  const Bytes good = header_bytes(wire::FrameHeader{});
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, wire::kHeaderBytes - 1}) {
    CHECK_THROWS_MATCHES(wire::decode_header(std::span<const std::byte>(good.data(), n)),
                         ProtocolError, WhatContains("frame header"));
  }
  CHECK_THROWS_MATCHES(wire::decode_header(with_tail(good, {0})), ProtocolError,
                       WhatContains("41 bytes"));
}

TEST_CASE("a frame header is checked against its link's session, worker, sequence and limit",
          "[remote][remote-wire]") {
  const wire::Expect e{.session = 0xABCDEF, .worker = 7, .sequence = 100, .max_length = 4096};
  wire::FrameHeader h;
  h.type = FrameType::Control;
  h.session = e.session;
  h.worker = e.worker;
  h.sequence = e.sequence;
  h.length = e.max_length;
  CHECK_NOTHROW(wire::check_header(h, e));

  SECTION("another session") {
    h.session = e.session + 1;
    CHECK_THROWS_MATCHES(wire::check_header(h, e), ProtocolError, WhatContains("session"));
  }
  SECTION("another worker") {
    h.worker = 8;
    CHECK_THROWS_MATCHES(wire::check_header(h, e), ProtocolError, WhatContains("worker"));
  }
  SECTION("a sequence from the past or the future") {
    for (std::uint64_t s : {std::uint64_t{0}, std::uint64_t{99}, std::uint64_t{101}}) {
      h.sequence = s;
      CHECK_THROWS_MATCHES(wire::check_header(h, e), ProtocolError,
                           WhatContains("sequence is " + std::to_string(s) + ", expected 100"));
    }
  }
  SECTION("a payload over the limit") {
    h.length = e.max_length + 1;
    CHECK_THROWS_MATCHES(wire::check_header(h, e), ProtocolError,
                         WhatContains("payload length 4097 is over this link's limit of 4096"));
    h.length = std::numeric_limits<std::uint32_t>::max();
    CHECK_THROWS_MATCHES(wire::check_header(h, e), ProtocolError, WhatContains("length"));
  }
  SECTION("the message names the frame type") {
    h.worker = 9;
    CHECK_THROWS_MATCHES(wire::check_header(h, e), ProtocolError, WhatContains("CONTROL frame"));
  }
}

// =================================================================================================
// Payload round trips

TEST_CASE("the authentication payloads round-trip", "[remote][remote-wire]") {
  SECTION("AUTH_BEGIN") {
    wire::AuthBegin m;
    m.client_nonce = filled<wire::kNonceBytes>(0x10);
    m.heartbeat_ms = 250;
    m.heartbeat_timeout_ms = 2000;
    const Bytes b = encoded(m);
    CHECK(b.size() == 40);
    const wire::AuthBegin d = wire::decode_auth_begin(b);
    CHECK(d.client_nonce == m.client_nonce);
    CHECK(d.heartbeat_ms == 250);
    CHECK(d.heartbeat_timeout_ms == 2000);
    CHECK(encoded(d) == b);
  }
  SECTION("AUTH_CHALLENGE") {
    wire::AuthChallenge m;
    m.server_nonce = filled<wire::kNonceBytes>(0x40);
    m.server_proof = filled<wire::kProofBytes>(0xC0);
    const Bytes b = encoded(m);
    CHECK(b.size() == 64);
    const wire::AuthChallenge d = wire::decode_auth_challenge(b);
    CHECK(d.server_nonce == m.server_nonce);
    CHECK(d.server_proof == m.server_proof);
    CHECK(encoded(d) == b);
  }
  SECTION("AUTH_PROOF") {
    wire::AuthProof m;
    m.client_proof = filled<wire::kProofBytes>(0xE0);
    const Bytes b = encoded(m);
    CHECK(b.size() == 32);
    CHECK(wire::decode_auth_proof(b).client_proof == m.client_proof);
  }
}

TEST_CASE("a HELLO round-trips with the callables it serves", "[remote][remote-wire]") {
  wire::Hello m;
  m.level = 3;
  m.max_payload = 1U << 20;
  m.max_buffer_bytes = std::uint64_t{1} << 30;
  m.buffer_pool_bytes = std::uint64_t{1} << 34;
  m.served = {{0x1111, "vector_add"},
              {std::numeric_limits<std::uint64_t>::max(), ""},
              {0x2222, std::string(wire::kMaxName, 'n')},
              {0x3333, "orch/with spaces/and-\xC3\xA9"}};
  const Bytes b = encoded(m);
  const wire::Hello d = wire::decode_hello(b);
  CHECK(d.level == m.level);
  CHECK(d.max_payload == m.max_payload);
  CHECK(d.max_buffer_bytes == m.max_buffer_bytes);
  CHECK(d.buffer_pool_bytes == m.buffer_pool_bytes);
  REQUIRE(d.served.size() == m.served.size());
  for (std::size_t i = 0; i < m.served.size(); ++i) {
    CHECK(d.served[i].digest == m.served[i].digest);
    CHECK(d.served[i].name == m.served[i].name);
  }
  CHECK(encoded(d) == b);

  CHECK(d.status == Status::Ok);
  CHECK(d.kind == ErrorKind::Other);
  CHECK(d.code == 0);
  CHECK(d.message.empty());

  wire::Hello empty;
  empty.max_payload = 4096;
  CHECK(wire::decode_hello(encoded(empty)).served.empty());
}

TEST_CASE("a HELLO that failed round-trips its status, kind, code and message after the list",
          "[remote][remote-wire]") {
  wire::Hello m;
  m.max_payload = 65536;
  m.status = Status::Failed;
  m.kind = ErrorKind::Device;
  m.code = -120;
  m.message = "setup or init() of the inner Worker failed: chip 3: no such device";
  const Bytes b = encoded(m);
  // level, max_payload, two u64 limits, an empty served list, then the status block as a
  // COMPLETION carries it: u8 status, u8 kind, i32 code, the message as u32 length + bytes.
  REQUIRE(b.size() == 4 + 4 + 8 + 8 + 4 + 1 + 1 + 4 + 4 + m.message.size());
  CHECK(std::to_integer<std::uint8_t>(b.at(28)) == 1);
  CHECK(std::to_integer<std::uint8_t>(b.at(29)) == static_cast<std::uint8_t>(ErrorKind::Device));
  const wire::Hello d = wire::decode_hello(b);
  CHECK(d.status == Status::Failed);
  CHECK(d.kind == ErrorKind::Device);
  CHECK(d.code == -120);
  CHECK(d.message == m.message);
  CHECK(d.served.empty());
  CHECK(encoded(d) == b);

  // Served callables come before the status block.
  m.served = {{0x77, "orch"}};
  const wire::Hello e = wire::decode_hello(encoded(m));
  REQUIRE(e.served.size() == 1);
  CHECK(e.served[0].name == "orch");
  CHECK(e.message == m.message);
}

TEST_CASE("a HELLO without its status block, or ok with an error, is refused naming the status",
          "[remote][remote-wire]") {
  wire::Hello m;
  m.max_payload = 4096;
  m.served = {{1, "a"}};
  const Bytes b = encoded(m);
  // The earlier format ended after the served list.
  const Bytes old(b.begin(), b.end() - 10);
  CHECK_THROWS_MATCHES(wire::decode_hello(old), ProtocolError,
                       WhatContains("HELLO payload: status: truncated"));
  wire::Hello ok_with_error = m;
  ok_with_error.message = "but it worked";
  CHECK_THROWS_MATCHES(wire::decode_hello(encoded(ok_with_error)), ProtocolError,
                       WhatContains("HELLO payload: status: an ok status carries"));
  Bytes bad_kind = b;
  bad_kind.at(b.size() - 9) = std::byte{0xEE};
  CHECK_THROWS_MATCHES(wire::decode_hello(bad_kind), ProtocolError,
                       WhatContains("error_kind: 238 is not an ErrorKind"));
}

TEST_CASE("a TASK round-trips tensors of every shape, scalars and a non-default config",
          "[remote][remote-wire]") {
  TaskParts p;
  p.digest = 0x0123'4567'89AB'CDEF;
  p.config = busy_config();
  p.tensors = {
      remote_tensor(1, 0, {16}, DataType::Float32),
      remote_tensor(2, 0x100, {3, 5}, DataType::Float16),
      remote_tensor(wire::kMaxBufferId, wire::kOffsetMask - 63, {2, 2, 2, 2}, DataType::UInt8),
      remote_tensor(4, 8, {1, 2, 3}, DataType::Int64),
      remote_tensor(5, 0, {7, 1, 1, 1, 9}, DataType::BFloat16),
      remote_tensor(6, 0, {0}, DataType::UInt64),
  };
  p.scalars = {0, 1, 0xDEAD'BEEF'0000'0001ULL, std::numeric_limits<std::uint64_t>::max()};
  const Bytes b = encode_parts(p);

  const wire::Task d = wire::decode_task(b);
  CHECK(d.digest == p.digest);
  check_same_config(d.config, p.config);
  REQUIRE(d.tensors.size() == p.tensors.size());
  for (std::size_t i = 0; i < p.tensors.size(); ++i) {
    INFO("tensor " << i);
    check_same_tensor(d.tensors[i], p.tensors[i]);
  }
  CHECK(d.scalars == p.scalars);

  // Decoded parts encode back to the same bytes.
  TaskParts again{d.digest, d.config, d.tensors, d.scalars};
  CHECK(encode_parts(again) == b);

  SECTION("a TASK without arguments and with the default config") {
    TaskParts bare;
    bare.digest = 1;
    const wire::Task e = wire::decode_task(encode_parts(bare));
    CHECK(e.tensors.empty());
    CHECK(e.scalars.empty());
    check_same_config(e.config, CallConfig{});
  }
  SECTION("an output_prefix of the largest length") {
    TaskParts q;
    set_prefix(q.config, std::string(q.config.output_prefix.size() - 1, 'p'));
    check_same_config(wire::decode_task(encode_parts(q)).config, q.config);
  }
}

TEST_CASE("a COMPLETION round-trips ok and failed", "[remote][remote-wire]") {
  wire::Completion ok;
  ok.answers = 17;
  const Bytes a = encoded(ok);
  const wire::Completion d = wire::decode_completion(a);
  CHECK(d.answers == 17);
  CHECK(d.status == Status::Ok);
  CHECK(d.kind == ErrorKind::Other);
  CHECK(d.code == 0);
  CHECK(d.message.empty());
  CHECK(encoded(d) == a);

  for (ErrorKind kind : {ErrorKind::Other, ErrorKind::Device, ErrorKind::Remote}) {
    wire::Completion failed;
    failed.answers = std::numeric_limits<std::uint64_t>::max();
    failed.status = Status::Failed;
    failed.kind = kind;
    failed.code = -120;
    failed.message = "chip 0: kernel 'fill' faulted";
    const Bytes b = encoded(failed);
    const wire::Completion f = wire::decode_completion(b);
    CHECK(f.answers == failed.answers);
    CHECK(f.status == Status::Failed);
    CHECK(f.kind == kind);
    CHECK(f.code == -120);
    CHECK(f.message == failed.message);
    CHECK(encoded(f) == b);
  }
}

TEST_CASE("a traced TASK carries its level and trace limit, an untraced one neither",
          "[remote][remote-wire][trace]") {
  TaskParts p;
  p.scalars = {3};
  const Bytes plain = encode_parts(p);
  const wire::Task a = wire::decode_task(plain);
  CHECK(a.trace_level == 0);
  CHECK(a.trace_limit == 0);
  for (std::uint8_t level = 1; level <= wire::kMaxTraceLevel; ++level) {
    INFO("level " << int{level});
    p.trace_level = level;
    p.trace_limit = 65536U * level;
    const Bytes traced = encode_parts(p);
    CHECK(traced.size() == plain.size() + 4);  // the limit follows the level byte
    const wire::Task t = wire::decode_task(traced);
    CHECK(t.trace_level == level);
    CHECK(t.trace_limit == 65536U * level);
    CHECK(t.scalars == p.scalars);
  }
  SECTION("a level over 4 is refused naming the field") {
    p.trace_level = wire::kMaxTraceLevel + 1;
    p.trace_limit = 1;
    CHECK_THROWS_MATCHES(wire::decode_task(encode_parts(p)), ProtocolError,
                         WhatContains("trace_level") && WhatContains("outside 0..4"));
  }
}

TEST_CASE("a traced COMPLETION round-trips its times, losses and records",
          "[remote][remote-wire][trace]") {
  wire::Completion m;
  m.answers = 9;
  m.traced = true;
  m.trace.rx_ns = -5'000;  // a remote clock may be anywhere
  m.trace.begin_ns = -4'000;
  m.trace.end_ns = 70'000;
  m.trace.tx_ns = 70'001;
  m.trace.lost = 12;
  m.trace.records = wire_pattern(300, 4);
  const Bytes b = encoded(m);
  CHECK(b.size() == wire::kCompletionTraceHeadBytes + 300);
  const wire::Completion d = wire::decode_completion(b);
  CHECK(d.traced);
  CHECK(d.trace.rx_ns == -5'000);
  CHECK(d.trace.begin_ns == -4'000);
  CHECK(d.trace.end_ns == 70'000);
  CHECK(d.trace.tx_ns == 70'001);
  CHECK(d.trace.lost == 12);
  CHECK(d.trace.records == m.trace.records);
  CHECK(encoded(d) == b);

  SECTION("times out of order are refused naming them") {
    for (int which = 0; which < 3; ++which) {
      INFO("pair " << which);
      wire::Completion bad = m;
      if (which == 0) bad.trace.begin_ns = bad.trace.rx_ns - 1;
      if (which == 1) bad.trace.end_ns = bad.trace.begin_ns - 1;
      if (which == 2) bad.trace.tx_ns = bad.trace.end_ns - 1;
      CHECK_THROWS_MATCHES(wire::decode_completion(encoded(bad)), ProtocolError,
                           WhatContains("COMPLETION") && WhatContains("out of order"));
    }
  }
  SECTION("a traced flag other than 0 or 1 is refused") {
    Bytes bad = encoded(wire::Completion{});
    bad.back() = std::byte{2};
    CHECK_THROWS_MATCHES(wire::decode_completion(bad), ProtocolError,
                         WhatContains("traced") && WhatContains("0 or 1"));
  }
  SECTION("records longer than what is left are refused as truncated") {
    Bytes bad = b;
    bad.resize(bad.size() - 1);
    CHECK_THROWS_MATCHES(wire::decode_completion(bad), ProtocolError,
                         WhatContains("trace.records") && WhatContains("truncated"));
  }
}

TEST_CASE("an error message longer than the limit is cut to it by the encoder",
          "[remote][remote-wire]") {
  wire::Completion m;
  m.status = Status::Failed;
  m.kind = ErrorKind::Usage;
  m.message = std::string(wire::kMaxMessage, 'a') + "the tail that does not fit";
  const wire::Completion d = wire::decode_completion(encoded(m));
  CHECK(d.message == std::string(wire::kMaxMessage, 'a'));
}

TEST_CASE("every CONTROL op round-trips, a CopyTo with its bytes", "[remote][remote-wire]") {
  const std::uint64_t id = 0x00AB'CDEF;
  struct Case {
    wire::Control m;
    std::size_t data;
  };
  const std::vector<Case> cases = {
      {{ControlOp::Alloc, std::uint64_t{1} << 32, 1, 0}, 0},
      {{ControlOp::Alloc, 64, wire::kMaxBufferId, 0}, 0},
      {{ControlOp::Free, id, 0, 0}, 0},
      {{ControlOp::CopyTo, id, 4096, 100}, 100},
      {{ControlOp::CopyTo, id, 0, 0}, 0},
      {{ControlOp::CopyFrom, id, wire::kOffsetMask - 8, 8}, 0},
      {{ControlOp::Ping, 0, 0, 0}, 0},
  };
  for (const Case& c : cases) {
    INFO("op " << wire::to_string(c.m.op));
    CHECK(std::string_view(wire::to_string(c.m.op)) != "?");
    const Bytes head = encoded(c.m);
    CHECK(head.size() == wire::kControlHeadBytes);
    const Bytes data = wire_pattern(c.data, 7);
    const Bytes b = concat(head, data);
    const wire::Control d = wire::decode_control(b);
    CHECK(d.op == c.m.op);
    CHECK(d.a == c.m.a);
    CHECK(d.b == c.m.b);
    CHECK(d.n == c.m.n);
    CHECK(encoded(d) == head);
    CHECK_NOTHROW(wire::decode_payload(FrameType::Control, b));
  }
}

TEST_CASE("a CONTROL_REPLY round-trips, a CopyFrom with its bytes", "[remote][remote-wire]") {
  const std::uint64_t id = 12;
  std::vector<std::pair<wire::ControlReply, Bytes>> cases;
  {
    wire::ControlReply m;
    m.answers = 5;
    m.op = ControlOp::Alloc;
    m.r0 = id;
    m.r1 = wire::buffer_address(id);
    m.r2 = 1 << 20;
    cases.emplace_back(m, Bytes{});
  }
  {
    wire::ControlReply m;
    m.answers = 6;
    m.op = ControlOp::CopyFrom;
    m.r0 = 300;
    cases.emplace_back(m, wire_pattern(300, 1));
  }
  {
    wire::ControlReply m;
    m.answers = 7;
    m.op = ControlOp::CopyFrom;
    m.status = Status::Failed;
    m.kind = ErrorKind::Remote;
    m.code = 0;
    m.message = "buffer 12: range [4096, +300) is past its end (1024 bytes)";
    cases.emplace_back(m, Bytes{});
  }
  for (ControlOp op : {ControlOp::Free, ControlOp::CopyTo, ControlOp::Ping}) {
    wire::ControlReply m;
    m.answers = 8;
    m.op = op;
    cases.emplace_back(m, Bytes{});
  }
  {
    wire::ControlReply m;
    m.answers = 9;
    m.op = ControlOp::Alloc;
    m.status = Status::Failed;
    m.kind = ErrorKind::System;
    m.code = 12;  // ENOMEM
    m.message = "buffer pool exhausted";
    cases.emplace_back(m, Bytes{});
  }
  for (const auto& [m, data] : cases) {
    INFO("op " << wire::to_string(m.op) << ", status " << static_cast<int>(m.status));
    const Bytes head = encoded(m);
    const Bytes b = concat(head, data);
    std::size_t head_bytes = 0;
    const wire::ControlReply d = wire::decode_control_reply(b, head_bytes);
    CHECK(head_bytes == head.size());
    CHECK(d.answers == m.answers);
    CHECK(d.op == m.op);
    CHECK(d.status == m.status);
    CHECK(d.kind == m.kind);
    CHECK(d.code == m.code);
    CHECK(d.message == m.message);
    CHECK(d.r0 == m.r0);
    CHECK(d.r1 == m.r1);
    CHECK(d.r2 == m.r2);
    CHECK(encoded(d) == head);
    CHECK(std::span<const std::byte>(b).subspan(head_bytes).size() == data.size());
    CHECK_NOTHROW(wire::decode_payload(FrameType::ControlReply, b));
  }
}

TEST_CASE("HEARTBEAT and SHUTDOWN are empty", "[remote][remote-wire]") {
  for (FrameType t : {FrameType::Heartbeat, FrameType::Shutdown}) {
    INFO(wire::to_string(t));
    CHECK_NOTHROW(wire::decode_payload(t, {}));
    const Bytes one{std::byte{0}};
    CHECK_THROWS_MATCHES(wire::decode_payload(t, one), ProtocolError,
                         WhatContains("must be empty"));
  }
}

// =================================================================================================
// Truncation and trailing bytes

TEST_CASE("every truncation of a valid payload is refused, and so is a trailing byte",
          "[remote][remote-wire]") {
  std::vector<std::pair<FrameType, Bytes>> frames;
  {
    wire::AuthBegin m;
    m.client_nonce = filled<wire::kNonceBytes>(1);
    m.heartbeat_ms = 100;
    m.heartbeat_timeout_ms = 1000;
    frames.emplace_back(FrameType::AuthBegin, encoded(m));
  }
  frames.emplace_back(FrameType::AuthChallenge, encoded(wire::AuthChallenge{}));
  frames.emplace_back(FrameType::AuthProof, encoded(wire::AuthProof{}));
  {
    wire::Hello m;
    m.max_payload = 65536;
    m.served = {{1, "a"}, {2, ""}, {3, "ccc"}};
    frames.emplace_back(FrameType::Hello, encoded(m));
    m.served.clear();
    m.status = Status::Failed;
    m.kind = ErrorKind::Device;
    m.code = -3;
    m.message = "no chip";
    frames.emplace_back(FrameType::Hello, encoded(m));
  }
  {
    TaskParts p;
    p.config = busy_config();
    p.tensors = {remote_tensor(1, 0, {4, 4}, DataType::Float32),
                 remote_tensor(2, 0, {8}, DataType::Int8)};
    p.scalars = {5, 6};
    frames.emplace_back(FrameType::Task, encode_parts(p));
    p.trace_level = 3;
    p.trace_limit = 1U << 20;
    frames.emplace_back(FrameType::Task, encode_parts(p));
  }
  {
    wire::Completion m;
    m.status = Status::Failed;
    m.kind = ErrorKind::Timeout;
    m.message = "late";
    frames.emplace_back(FrameType::Completion, encoded(m));
    frames.emplace_back(FrameType::Completion, encoded(wire::Completion{}));
    m.traced = true;
    m.trace = {1, 2, 3, 4, 5, wire_pattern(40, 1)};
    frames.emplace_back(FrameType::Completion, encoded(m));
  }
  frames.emplace_back(FrameType::Control, encoded(wire::Control{}));
  frames.emplace_back(FrameType::Control, encoded(wire::Control{ControlOp::Alloc, 64, 9, 0}));
  frames.emplace_back(FrameType::Control, concat(encoded(wire::Control{ControlOp::CopyTo, 1, 0, 5}),
                                                 wire_pattern(5, 9)));
  {
    wire::ControlReply m;
    m.op = ControlOp::CopyFrom;
    m.r0 = 6;
    frames.emplace_back(FrameType::ControlReply, concat(encoded(m), wire_pattern(6, 3)));
    m.status = Status::Failed;
    m.kind = ErrorKind::Remote;
    m.message = "no such buffer";
    m.r0 = 0;
    frames.emplace_back(FrameType::ControlReply, encoded(m));
  }

  for (const auto& [type, full] : frames) {
    INFO(wire::to_string(type) << " payload of " << full.size() << " bytes");
    REQUIRE_NOTHROW(wire::decode_payload(type, full));
    CHECK(first_prefix_that_decodes(type, full) == kNone);
    CHECK_THROWS_AS(wire::decode_payload(type, with_tail(full, {0})), ProtocolError);
    CHECK_THROWS_AS(wire::decode_payload(type, with_tail(full, {0xFF, 0xFF, 0xFF, 0xFF})),
                    ProtocolError);
  }
}

TEST_CASE("errors name the frame and the field that was cut short or left over",
          "[remote][remote-wire]") {
  wire::AuthBegin m;
  m.heartbeat_ms = 100;
  m.heartbeat_timeout_ms = 1000;
  const Bytes b = encoded(m);
  CHECK_THROWS_MATCHES(wire::decode_auth_begin(std::span<const std::byte>(b).first(10)),
                       ProtocolError, WhatContains("AUTH_BEGIN payload: client_nonce: truncated"));
  CHECK_THROWS_MATCHES(wire::decode_auth_begin(std::span<const std::byte>(b).first(35)),
                       ProtocolError, WhatContains("heartbeat_ms: truncated"));
  CHECK_THROWS_MATCHES(wire::decode_auth_begin(with_tail(b, {1, 2})), ProtocolError,
                       WhatContains("AUTH_BEGIN payload: end: 2 trailing bytes"));
  CHECK_THROWS_MATCHES(wire::decode_payload(FrameType::AuthProof, with_tail(b, {})), ProtocolError,
                       WhatContains("AUTH_PROOF payload: end: 8 trailing bytes"));

  const Bytes copy_to =
      concat(encoded(wire::Control{ControlOp::CopyTo, 1, 0, 5}), wire_pattern(5, 0));
  CHECK_THROWS_MATCHES(wire::decode_control(std::span<const std::byte>(copy_to).first(36)),
                       ProtocolError, WhatContains("n: says 5 bytes follow, the frame carries 4"));
  CHECK_THROWS_MATCHES(wire::decode_control(with_tail(copy_to, {0})), ProtocolError,
                       WhatContains("carries 6"));
  CHECK_THROWS_MATCHES(wire::decode_control(with_tail(encoded(wire::Control{}), {0})),
                       ProtocolError, WhatContains("CONTROL payload: end: 1 trailing bytes"));

  wire::ControlReply r;
  r.op = ControlOp::CopyFrom;
  r.r0 = 4;
  std::size_t head = 0;
  CHECK_THROWS_MATCHES(wire::decode_control_reply(concat(encoded(r), wire_pattern(3, 0)), head),
                       ProtocolError, WhatContains("r0: says 4 bytes follow, the frame carries 3"));
  r.op = ControlOp::Alloc;
  CHECK_THROWS_MATCHES(wire::decode_control_reply(with_tail(encoded(r), {0}), head), ProtocolError,
                       WhatContains("CONTROL_REPLY payload: end"));
}

// =================================================================================================
// Bounds

TEST_CASE("counts over their limit or whose items cannot fit are refused",
          "[remote][remote-wire]") {
  SECTION("TASK tensor_count") {
    const Bytes b = encode_parts(TaskParts{});
    const std::size_t at = b.size() - 9;  // tensor_count, then scalar_count and trace_level
    Bytes over = b;
    put_le(over, at, wire::kMaxTensors + 1, 4);
    CHECK_THROWS_MATCHES(wire::decode_task(over), ProtocolError,
                         WhatContains("tensor_count: count 4097 is over the limit of 4096"));
    put_le(over, at, 0xFFFF'FFFF, 4);
    CHECK_THROWS_MATCHES(wire::decode_task(over), ProtocolError, WhatContains("over the limit"));
    Bytes unfit = b;
    put_le(unfit, at, 1, 4);  // one tensor needs 16 bytes; only scalar_count and trace_level follow
    CHECK_THROWS_MATCHES(wire::decode_task(unfit), ProtocolError,
                         WhatContains("tensor_count: count 1 needs at least 16 bytes, 5 left"));
  }
  SECTION("TASK scalar_count") {
    const Bytes b = encode_parts(TaskParts{});
    Bytes over = b;
    put_le(over, b.size() - 5, wire::kMaxScalars + 1, 4);  // before trace_level
    CHECK_THROWS_MATCHES(wire::decode_task(over), ProtocolError,
                         WhatContains("scalar_count: count 4097 is over the limit"));
    Bytes unfit = with_tail(b, {1, 2, 3, 4, 5, 6, 7, 8});
    put_le(unfit, b.size() - 5, 2, 4);
    CHECK_THROWS_MATCHES(wire::decode_task(unfit), ProtocolError,
                         WhatContains("scalar_count: count 2 needs at least 16 bytes, 9 left"));
  }
  SECTION("TASK at the limits decodes") {
    TaskParts p;
    p.tensors.assign(wire::kMaxTensors, remote_tensor(1, 0, {1}, DataType::Int8));
    p.scalars.assign(wire::kMaxScalars, 3);
    const wire::Task d = wire::decode_task(encode_parts(p));
    CHECK(d.tensors.size() == wire::kMaxTensors);
    CHECK(d.scalars.size() == wire::kMaxScalars);
  }
  SECTION("HELLO served_count") {
    wire::Hello m;
    m.max_payload = 4096;
    const Bytes b = encoded(m);
    const std::size_t at = 4 + 4 + 8 + 8;  // level, max_payload, max_buffer_bytes, pool bytes
    Bytes over = b;
    put_le(over, at, wire::kMaxServed + 1, 4);
    CHECK_THROWS_MATCHES(wire::decode_hello(over), ProtocolError,
                         WhatContains("served_count: count 65537 is over the limit of 65536"));
    // An entry needs 12 bytes (digest + name length); only the 10-byte ok status block follows.
    Bytes unfit = b;
    put_le(unfit, at, 1, 4);
    CHECK_THROWS_MATCHES(wire::decode_hello(unfit), ProtocolError,
                         WhatContains("served_count: count 1 needs at least 12 bytes, 10 left"));
  }
}

TEST_CASE("strings over their limit are refused before they are read", "[remote][remote-wire]") {
  SECTION("a served name") {
    wire::Hello m;
    m.max_payload = 4096;
    m.served = {{1, std::string(wire::kMaxName + 1, 'x')}};
    CHECK_THROWS_MATCHES(wire::decode_hello(encoded(m)), ProtocolError,
                         WhatContains("served.name: string of 1025 bytes, over the limit of 1024"));
  }
  SECTION("an error message") {
    wire::Completion m;
    m.status = Status::Failed;
    m.message = "x";
    Bytes b = encoded(m);
    const std::size_t at = 8 + 1 + 1 + 4;  // answers, status, error_kind, code
    put_le(b, at, wire::kMaxMessage + 1, 4);
    CHECK_THROWS_MATCHES(wire::decode_completion(b), ProtocolError,
                         WhatContains("message: string of 16385 bytes, over the limit of 16384"));
    put_le(b, at, 0xFFFF'FFFF, 4);
    CHECK_THROWS_MATCHES(wire::decode_completion(b), ProtocolError, WhatContains("over the limit"));
    put_le(b, at, 3, 4);  // within the limit, but only two bytes follow ("x" and traced)
    CHECK_THROWS_MATCHES(wire::decode_completion(b), ProtocolError,
                         WhatContains("message: truncated"));
  }
  SECTION("an output_prefix") {
    Bytes b = encode_parts(TaskParts{});
    const std::size_t at = 8 + 6 * 4;  // digest, six i32 knobs
    put_le(b, at, 1024, 4);
    CHECK_THROWS_MATCHES(wire::decode_task(b), ProtocolError,
                         WhatContains("config.output_prefix: string of 1024 bytes, over the limit "
                                      "of 1023"));
  }
}

// =================================================================================================
// What else a receiver refuses

TEST_CASE("a TASK with a malformed tensor is refused naming the tensor field",
          "[remote][remote-wire]") {
  const auto [good, at] = one_tensor_task(2);
  REQUIRE_NOTHROW(wire::decode_task(good));
  auto patched = [&good = good, at = at](std::size_t field, std::uint8_t v) {
    Bytes b = good;
    b.at(at + field) = static_cast<std::byte>(v);
    return b;
  };
  // Tensor layout: u64 data, u8 dtype, u8 ndims, u8 child_memory, u8 reserved, ndims x u32.
  CHECK_THROWS_MATCHES(wire::decode_task(patched(8, simpler::kDataTypeCount)), ProtocolError,
                       WhatContains("tensor.dtype: 9 is not a DataType"));
  CHECK_THROWS_MATCHES(wire::decode_task(patched(8, 0xFF)), ProtocolError,
                       WhatContains("tensor.dtype"));
  CHECK_THROWS_MATCHES(wire::decode_task(patched(9, 0)), ProtocolError,
                       WhatContains("tensor.ndims: 0 is outside 1..5"));
  CHECK_THROWS_MATCHES(wire::decode_task(patched(9, 6)), ProtocolError,
                       WhatContains("tensor.ndims: 6 is outside 1..5"));
  CHECK_THROWS_MATCHES(wire::decode_task(patched(10, 0)), ProtocolError,
                       WhatContains("tensor.child_memory: is 0"));
  CHECK_THROWS_MATCHES(wire::decode_task(patched(10, 2)), ProtocolError,
                       WhatContains("tensor.child_memory"));
  CHECK_THROWS_MATCHES(wire::decode_task(patched(11, 1)), ProtocolError,
                       WhatContains("tensor.reserved: is 1"));
  // ndims 1 where 2 were encoded: the second extent is read as the scalar count.
  CHECK_THROWS_AS(wire::decode_task(patched(9, 1)), ProtocolError);

  SECTION("a byte size past 64 bits") {
    TaskParts p;
    p.tensors = {remote_tensor(1, 0, {65536, 65536, 65536, 65536, 65536}, DataType::UInt64)};
    CHECK_THROWS_MATCHES(wire::decode_task(encode_parts(p)), ProtocolError,
                         WhatContains("TASK payload: tensor: invalid tensor"));
  }
  SECTION("a tensor in local memory") {
    TaskParts p;
    p.tensors = {remote_tensor(1, 0, {4}, DataType::Float32)};
    p.tensors[0].child_memory = 0;
    CHECK_THROWS_MATCHES(wire::decode_task(encode_parts(p)), ProtocolError,
                         WhatContains("remote buffer"));
  }
}

TEST_CASE("a TASK with a zero digest or an unusable config is refused", "[remote][remote-wire]") {
  SECTION("digest 0") {
    TaskParts p;
    p.digest = 0;
    CHECK_THROWS_MATCHES(wire::decode_task(encode_parts(p)), ProtocolError,
                         WhatContains("TASK payload: digest: is 0"));
  }
  SECTION("an output_prefix with a NUL inside") {
    TaskParts p;
    set_prefix(p.config, "out/dir");
    Bytes b = encode_parts(p);
    b.at(8 + 6 * 4 + 4 + 3) = std::byte{0};  // "out\0dir"
    CHECK_THROWS_MATCHES(wire::decode_task(b), ProtocolError,
                         WhatContains("config.output_prefix: contains a NUL"));
  }
  SECTION("a negative block_dim") {
    TaskParts p;
    p.config.block_dim = -1;
    CHECK_THROWS_MATCHES(wire::decode_task(encode_parts(p)), ProtocolError,
                         WhatContains("config: CallConfig: block_dim is -1"));
  }
  SECTION("a negative thread count") {
    TaskParts p;
    p.config.aicpu_thread_num = std::numeric_limits<std::int32_t>::min();
    CHECK_THROWS_MATCHES(wire::decode_task(encode_parts(p)), ProtocolError,
                         WhatContains("aicpu_thread_num"));
  }
  SECTION("a negative timeout") {
    TaskParts p;
    p.config.timeout = std::chrono::milliseconds(-5);
    CHECK_THROWS_MATCHES(wire::decode_task(encode_parts(p)), ProtocolError,
                         WhatContains("timeout is -5 ms"));
  }
  SECTION("a swimlane level out of range") {
    TaskParts p;
    set_prefix(p.config, "d");
    p.config.enable_l2_swimlane = 5;
    CHECK_THROWS_MATCHES(wire::decode_task(encode_parts(p)), ProtocolError,
                         WhatContains("enable_l2_swimlane"));
  }
  SECTION("diagnostics without an output_prefix") {
    TaskParts p;
    p.config.enable_pmu = 1;
    CHECK_THROWS_MATCHES(wire::decode_task(encode_parts(p)), ProtocolError,
                         WhatContains("output_prefix is empty"));
  }
  SECTION("runtime_env sizes") {
    TaskParts p;
    p.config.runtime_env.ring_task_window[1] = 48;
    CHECK_THROWS_MATCHES(wire::decode_task(encode_parts(p)), ProtocolError,
                         WhatContains("ring_task_window[1] is 48"));
    p.config.runtime_env.ring_task_window[1] = 0;
    p.config.runtime_env.ring_heap[3] = 1023;
    CHECK_THROWS_MATCHES(wire::decode_task(encode_parts(p)), ProtocolError,
                         WhatContains("ring_heap[3]"));
    p.config.runtime_env.ring_heap[3] = 0;
    p.config.runtime_env.ring_dep_pool[0] = 3;
    CHECK_THROWS_MATCHES(wire::decode_task(encode_parts(p)), ProtocolError,
                         WhatContains("ring_dep_pool[0]"));
  }
}

TEST_CASE("authentication and HELLO payloads with impossible values are refused",
          "[remote][remote-wire]") {
  wire::AuthBegin a;
  a.heartbeat_ms = 0;
  a.heartbeat_timeout_ms = 1000;
  CHECK_THROWS_MATCHES(wire::decode_auth_begin(encoded(a)), ProtocolError,
                       WhatContains("heartbeat_ms: is 0"));
  a.heartbeat_ms = 1000;
  CHECK_THROWS_MATCHES(wire::decode_auth_begin(encoded(a)), ProtocolError,
                       WhatContains("heartbeat_timeout_ms: 1000 is not longer"));
  a.heartbeat_timeout_ms = 1001;
  CHECK_NOTHROW(wire::decode_auth_begin(encoded(a)));

  wire::Hello h;
  h.max_payload = 4095;
  CHECK_THROWS_MATCHES(wire::decode_hello(encoded(h)), ProtocolError,
                       WhatContains("max_payload: 4095 is under the minimum of 4096"));
  h.max_payload = 4096;
  h.served = {{7, "ok"}, {0, "no digest"}};
  CHECK_THROWS_MATCHES(wire::decode_hello(encoded(h)), ProtocolError,
                       WhatContains("served.digest: is 0"));
}

TEST_CASE("a status byte, error kind or ok-with-an-error that is not a status is refused",
          "[remote][remote-wire]") {
  wire::Completion m;
  m.status = Status::Failed;
  const Bytes good = encoded(m);
  Bytes b = good;
  b.at(8) = std::byte{2};
  CHECK_THROWS_MATCHES(wire::decode_completion(b), ProtocolError,
                       WhatContains("status: 2 is not 0 (ok) or 1 (failed)"));
  b = good;
  b.at(9) = static_cast<std::byte>(static_cast<std::uint8_t>(ErrorKind::Remote) + 1);
  CHECK_THROWS_MATCHES(wire::decode_completion(b), ProtocolError,
                       WhatContains("error_kind: 8 is not an ErrorKind"));

  for (auto mutate : {+[](wire::Completion& c) { c.kind = ErrorKind::Usage; },
                      +[](wire::Completion& c) { c.code = 1; },
                      +[](wire::Completion& c) { c.message = "but it worked"; }}) {
    wire::Completion ok;
    mutate(ok);
    CHECK_THROWS_MATCHES(wire::decode_completion(encoded(ok)), ProtocolError,
                         WhatContains("status: an ok status carries"));
  }

  wire::ControlReply r;
  r.status = Status::Ok;
  r.code = 5;
  std::size_t head = 0;
  CHECK_THROWS_MATCHES(wire::decode_control_reply(encoded(r), head), ProtocolError,
                       WhatContains("CONTROL_REPLY payload: status"));
}

TEST_CASE("a CONTROL with an unknown op, a reserved field or an impossible range is refused",
          "[remote][remote-wire]") {
  auto with_op = [](std::uint32_t op) {
    Bytes b = encoded(wire::Control{});
    put_le(b, 0, op, 4);
    return b;
  };
  CHECK_THROWS_MATCHES(wire::decode_control(with_op(0)), ProtocolError,
                       WhatContains("CONTROL payload: op: 0 is not a control op"));
  CHECK_THROWS_MATCHES(wire::decode_control(with_op(wire::kControlOpMax + 1)), ProtocolError,
                       WhatContains("op: 6 is not"));
  Bytes reserved = encoded(wire::Control{});
  put_le(reserved, 4, 1, 4);
  CHECK_THROWS_MATCHES(wire::decode_control(reserved), ProtocolError,
                       WhatContains("reserved: is 1"));

  // Fields an op does not use must be zero.
  CHECK_THROWS_MATCHES(wire::decode_control(encoded(wire::Control{ControlOp::Ping, 1, 0, 0})),
                       ProtocolError, WhatContains("a: unused fields"));
  CHECK_THROWS_MATCHES(wire::decode_control(encoded(wire::Control{ControlOp::Ping, 0, 0, 1})),
                       ProtocolError, WhatContains("unused fields"));
  CHECK_THROWS_MATCHES(wire::decode_control(encoded(wire::Control{ControlOp::Alloc, 64, 1, 8})),
                       ProtocolError, WhatContains("n: unused fields"));
  CHECK_THROWS_MATCHES(wire::decode_control(encoded(wire::Control{ControlOp::Ping, 0, 1, 0})),
                       ProtocolError, WhatContains("unused fields"));
  CHECK_THROWS_MATCHES(wire::decode_control(encoded(wire::Control{ControlOp::Free, 3, 1, 0})),
                       ProtocolError, WhatContains("b: unused fields"));
  CHECK_THROWS_MATCHES(wire::decode_control(encoded(wire::Control{ControlOp::Free, 3, 0, 8})),
                       ProtocolError, WhatContains("unused fields"));

  // A copy's range lies within the 40 offset bits of an address.
  CHECK_NOTHROW(
      wire::decode_control(encoded(wire::Control{ControlOp::CopyFrom, 1, 0, wire::kOffsetMask})));
  CHECK_NOTHROW(
      wire::decode_control(encoded(wire::Control{ControlOp::CopyFrom, 1, wire::kOffsetMask, 0})));
  CHECK_THROWS_MATCHES(
      wire::decode_control(encoded(wire::Control{ControlOp::CopyFrom, 1, 1, wire::kOffsetMask})),
      ProtocolError, WhatContains("offset: range"));
  CHECK_THROWS_MATCHES(wire::decode_control(encoded(wire::Control{
                           ControlOp::CopyFrom, 1, std::numeric_limits<std::uint64_t>::max(), 1})),
                       ProtocolError, WhatContains("outside any buffer"));
  CHECK_THROWS_MATCHES(wire::decode_control(encoded(wire::Control{
                           ControlOp::CopyFrom, 1, 8, std::numeric_limits<std::uint64_t>::max()})),
                       ProtocolError, WhatContains("outside any buffer"));
  // A CopyTo whose n is larger than the frame is refused on the count before the range.
  CHECK_THROWS_MATCHES(wire::decode_control(encoded(wire::Control{
                           ControlOp::CopyTo, 1, 0, std::numeric_limits<std::uint64_t>::max()})),
                       ProtocolError, WhatContains("n: says"));

  // The same ops in a CONTROL_REPLY.
  wire::ControlReply r;
  Bytes rb = encoded(r);
  put_le(rb, 8, 0, 4);
  std::size_t head = 0;
  CHECK_THROWS_MATCHES(wire::decode_control_reply(rb, head), ProtocolError,
                       WhatContains("CONTROL_REPLY payload: op: 0 is not a control op"));
  put_le(rb, 8, 99, 4);
  CHECK_THROWS_MATCHES(wire::decode_control_reply(rb, head), ProtocolError, WhatContains("op"));
}

TEST_CASE("an ALLOC names the client's buffer id, 1..kMaxBufferId, and nothing in n",
          "[remote][remote-wire]") {
  for (std::uint64_t id : {std::uint64_t{1}, std::uint64_t{4242}, wire::kMaxBufferId}) {
    const wire::Control d =
        wire::decode_control(encoded(wire::Control{ControlOp::Alloc, 64, id, 0}));
    CHECK(d.a == 64);
    CHECK(d.b == id);
  }
  CHECK_THROWS_MATCHES(wire::decode_control(encoded(wire::Control{ControlOp::Alloc, 64, 0, 0})),
                       ProtocolError,
                       WhatContains("CONTROL payload: b: buffer id 0 is outside 1..16777215"));
  CHECK_THROWS_MATCHES(
      wire::decode_control(encoded(wire::Control{ControlOp::Alloc, 64, wire::kMaxBufferId + 1, 0})),
      ProtocolError, WhatContains("buffer id 16777216 is outside"));
  CHECK_THROWS_MATCHES(wire::decode_control(encoded(wire::Control{
                           ControlOp::Alloc, 64, std::numeric_limits<std::uint64_t>::max(), 0})),
                       ProtocolError, WhatContains("b: buffer id"));
  CHECK_THROWS_MATCHES(wire::decode_control(encoded(wire::Control{ControlOp::Alloc, 64, 5, 1})),
                       ProtocolError, WhatContains("n: unused fields"));
}

TEST_CASE("a CONTROL decodes from its head and the payload's length, before its data arrive",
          "[remote][remote-wire]") {
  const Bytes head = encoded(wire::Control{ControlOp::CopyTo, 7, 4096, 100});
  REQUIRE(head.size() == wire::kControlHeadBytes);

  // The head alone, and the length the frame header announced.
  const wire::Control d = wire::decode_control_head(head, wire::kControlHeadBytes + 100);
  CHECK(d.op == ControlOp::CopyTo);
  CHECK(d.a == 7);
  CHECK(d.b == 4096);
  CHECK(d.n == 100);
  // Some of the data may be there already: only the head is read.
  const Bytes more = concat(head, wire_pattern(10, 3));
  CHECK(wire::decode_control_head(more, wire::kControlHeadBytes + 100).n == 100);

  // The announced length must be the head and exactly n bytes.
  CHECK_THROWS_MATCHES(wire::decode_control_head(head, wire::kControlHeadBytes + 99), ProtocolError,
                       WhatContains("n: says 100 bytes follow, the frame carries 99"));
  CHECK_THROWS_MATCHES(wire::decode_control_head(head, wire::kControlHeadBytes + 101),
                       ProtocolError, WhatContains("the frame carries 101"));
  // Any other op carries nothing after its head.
  const Bytes ping = encoded(wire::Control{});
  CHECK(wire::decode_control_head(ping, wire::kControlHeadBytes).op == ControlOp::Ping);
  CHECK_THROWS_MATCHES(wire::decode_control_head(ping, wire::kControlHeadBytes + 8), ProtocolError,
                       WhatContains("end: 8 trailing bytes"));
  // The head's own checks still hold.
  CHECK_THROWS_MATCHES(wire::decode_control_head(encoded(wire::Control{ControlOp::Alloc, 64, 0, 0}),
                                                 wire::kControlHeadBytes),
                       ProtocolError, WhatContains("b: buffer id 0"));
  CHECK_THROWS_MATCHES(
      wire::decode_control_head(encoded(wire::Control{ControlOp::CopyTo, 1, wire::kOffsetMask, 8}),
                                wire::kControlHeadBytes + 8),
      ProtocolError, WhatContains("offset: range"));
  // A prefix shorter than the head is refused, whatever the length says.
  CHECK_THROWS_MATCHES(wire::decode_control_head(std::span<const std::byte>(head).first(31),
                                                 wire::kControlHeadBytes + 100),
                       ProtocolError, WhatContains("CONTROL payload: n: truncated"));
}

TEST_CASE("a CONTROL_REPLY decodes from its head and the payload's length, before its data",
          "[remote][remote-wire]") {
  // The head of an ok reply has a fixed size: the link reads exactly that much first.
  CHECK(encoded(wire::ControlReply{}).size() == wire::kOkReplyHeadBytes);

  wire::ControlReply m;
  m.answers = 41;
  m.op = ControlOp::CopyFrom;
  m.r0 = 300;
  const Bytes head = encoded(m);
  std::size_t head_bytes = 0;
  const wire::ControlReply d = wire::decode_control_reply_head(head, head.size() + 300, head_bytes);
  CHECK(head_bytes == head.size());
  CHECK(d.answers == 41);
  CHECK(d.op == ControlOp::CopyFrom);
  CHECK(d.r0 == 300);
  // Part of the data in the prefix changes nothing.
  head_bytes = 0;
  CHECK(wire::decode_control_reply_head(concat(head, wire_pattern(20, 1)), head.size() + 300,
                                        head_bytes)
            .r0 == 300);
  CHECK(head_bytes == head.size());

  CHECK_THROWS_MATCHES(wire::decode_control_reply_head(head, head.size() + 299, head_bytes),
                       ProtocolError,
                       WhatContains("r0: says 300 bytes follow, the frame carries 299"));
  // A failed reply, or any other op, carries nothing after its head (its message included).
  wire::ControlReply refused;
  refused.answers = 42;
  refused.op = ControlOp::CopyFrom;
  refused.status = Status::Failed;
  refused.kind = ErrorKind::Usage;
  refused.message = "buffer 9 is not a live buffer of this session";
  const Bytes rh = encoded(refused);
  const wire::ControlReply r = wire::decode_control_reply_head(rh, rh.size(), head_bytes);
  CHECK(head_bytes == rh.size());
  CHECK(r.message == refused.message);
  CHECK_THROWS_MATCHES(wire::decode_control_reply_head(rh, rh.size() + 4, head_bytes),
                       ProtocolError, WhatContains("CONTROL_REPLY payload: end: 4 trailing bytes"));
  // A prefix that ends inside the head is refused naming the field it cut.
  CHECK_THROWS_MATCHES(wire::decode_control_reply_head(std::span<const std::byte>(rh).first(30),
                                                       rh.size(), head_bytes),
                       ProtocolError, WhatContains("message: truncated"));
}

TEST_CASE("detached CONTROL and CONTROL_REPLY heads carry no data (MpiTransport's copies)",
          "[remote][remote-wire]") {
  // A CopyTo head alone is whole: its n bytes travel as messages of their own.
  const Bytes to = encoded(wire::Control{ControlOp::CopyTo, 7, 4096, std::uint64_t{1} << 33});
  const wire::Control c = wire::decode_control_detached(to);
  CHECK(c.op == ControlOp::CopyTo);
  CHECK(c.n == std::uint64_t{1} << 33);
  // Data after the head is refused, for every op (the attached decoder would take it as data).
  CHECK_THROWS_MATCHES(wire::decode_control_detached(with_tail(to, {1, 2})), ProtocolError,
                       WhatContains("the frame carries 2"));
  CHECK_THROWS_MATCHES(wire::decode_control_detached(with_tail(encoded(wire::Control{}), {0})),
                       ProtocolError, WhatContains("end: 1 trailing bytes"));
  CHECK(wire::decode_control_detached(encoded(wire::Control{ControlOp::CopyFrom, 7, 0, 64})).n ==
        64);
  // The head's own checks still hold.
  CHECK_THROWS_MATCHES(wire::decode_control_detached(
                           encoded(wire::Control{ControlOp::CopyTo, 1, wire::kOffsetMask, 8})),
                       ProtocolError, WhatContains("offset: range"));

  // An ok CopyFrom reply announces r0 bytes that do not follow it.
  wire::ControlReply m;
  m.answers = 9;
  m.op = ControlOp::CopyFrom;
  m.r0 = 300;
  const wire::ControlReply d = wire::decode_control_reply_detached(encoded(m));
  CHECK(d.answers == 9);
  CHECK(d.r0 == 300);
  CHECK_THROWS_MATCHES(wire::decode_control_reply_detached(with_tail(encoded(m), {0, 0})),
                       ProtocolError, WhatContains("end: 2 trailing bytes"));
}

// =================================================================================================
// The seed corpus speaks today's codec

namespace {
/// Walks a fuzz_remote_frame input as a receiver would; returns how many frames decode before
/// the first that does not (or the stream ends).
std::size_t frames_that_decode(const std::string& seed) {
  const std::string path = std::string(SIMPLER_FUZZ_DIR) + "/corpus/fuzz_remote_frame/" + seed;
  std::ifstream is(path, std::ios::binary);
  REQUIRE(is.good());
  const std::vector<char> raw((std::istreambuf_iterator<char>(is)),
                              std::istreambuf_iterator<char>());
  const auto in = std::as_bytes(std::span(raw));
  std::size_t pos = 0;
  std::size_t n = 0;
  std::optional<wire::Expect> link;
  try {
    while (in.size() - pos >= wire::kHeaderBytes) {
      const wire::FrameHeader h = wire::decode_header(in.subspan(pos, wire::kHeaderBytes));
      if (!link) link = wire::Expect{h.session, h.worker, h.sequence, 1U << 16};
      wire::check_header(h, *link);
      pos += wire::kHeaderBytes;
      if (in.size() - pos < h.length) break;
      wire::decode_payload(h.type, in.subspan(pos, h.length));
      pos += h.length;
      ++link->sequence;
      ++n;
    }
  } catch (const ProtocolError& e) {
    UNSCOPED_INFO(seed << " stops at frame " << n << ": " << e.what());
  }
  return n;
}
}  // namespace

TEST_CASE("the fuzz_remote_frame seed sessions decode frame by frame with today's codec",
          "[remote][remote-wire][fuzz]") {
  // Regenerate with tests/fuzz/make_corpus.py when the format changes: a seed that stops early
  // seeds the fuzzer with refusals only.
  CHECK(frames_that_decode("client_session") == 10);
  CHECK(frames_that_decode("server_session") == 9);
  CHECK(frames_that_decode("task_busy") == 1);
  CHECK(frames_that_decode("hello_failed") == 2);
  CHECK(frames_that_decode("sequence_wraps") == 3);
  CHECK(frames_that_decode("task_traced") == 1);
  CHECK(frames_that_decode("completion_traced") == 1);
  CHECK(frames_that_decode("completion_trace_out_of_order") == 0);
  // The seeds meant to be refused are refused where they should be.
  CHECK(frames_that_decode("alloc_ids") == 1);
  CHECK(frames_that_decode("alloc_id_past_24_bits") == 0);
  CHECK(frames_that_decode("hello_ok_with_error") == 0);
  CHECK(frames_that_decode("hello_count_unfit") == 0);
}

// =================================================================================================
// Remote buffer addresses

TEST_CASE("a remote buffer address is the buffer id above 40 offset bits",
          "[remote][remote-wire]") {
  static_assert(wire::kOffsetMask == (std::uint64_t{1} << 40) - 1);
  static_assert(wire::kMaxBufferId == (std::uint64_t{1} << 24) - 1);
  static_assert(wire::buffer_address(1) == std::uint64_t{1} << 40);
  static_assert(wire::buffer_of(wire::buffer_address(77) | 0x1234) == 77);
  static_assert(wire::offset_of(wire::buffer_address(77) | 0x1234) == 0x1234);

  for (std::uint64_t id : {std::uint64_t{1}, std::uint64_t{0xABCDEF}, wire::kMaxBufferId}) {
    for (std::uint64_t off : {std::uint64_t{0}, std::uint64_t{4096}, wire::kOffsetMask}) {
      const std::uint64_t a = wire::buffer_address(id) | off;
      CHECK(wire::buffer_of(a) == id);
      CHECK(wire::offset_of(a) == off);
    }
  }
  CHECK(wire::buffer_of(std::numeric_limits<std::uint64_t>::max()) == wire::kMaxBufferId);
  CHECK(wire::offset_of(wire::buffer_address(3)) == 0);
}

// =================================================================================================
// Authentication

TEST_CASE("session proofs match HMAC-SHA256 computed independently", "[remote][remote-wire]") {
  // python3 -c "import hmac,hashlib,struct; print(hmac.new(b'simpler-test-token',
  //   b'simpler server' + struct.pack('<Q', 0x0123456789abcdef) + bytes(range(32)) +
  //   bytes(range(0x80, 0xa0)), hashlib.sha256).hexdigest())"   (and the same for the client,
  //   whose nonces come in the other order; and an empty key)
  const std::uint64_t session = 0x0123456789ABCDEF;
  const wire::Nonce client = filled<wire::kNonceBytes>(0x00);
  const wire::Nonce server = filled<wire::kNonceBytes>(0x80);
  const std::string_view token = "simpler-test-token";

  CHECK(wire::session_proof(token, wire::kServerRole, session, client, server) ==
        proof_from_hex("0d4f949ef53afa524862923162ce923b64f4fb081046e3672a678e02b4dfa0a9"));
  CHECK(wire::session_proof(token, wire::kClientRole, session, server, client) ==
        proof_from_hex("9d1140d5fd7ea716a54e07dc4f3549dd647b256c35797d73e766c674a56c383e"));
  CHECK(wire::session_proof("", wire::kServerRole, 1, wire::Nonce{}, wire::Nonce{}) ==
        proof_from_hex("a37586f52d37ce69b09b44290b3924958b7905b9e348055158b955609e05327d"));
}

TEST_CASE("session proofs change with role, session, nonces and token, and only with them",
          "[remote][remote-wire]") {
  const wire::Nonce n1 = filled<wire::kNonceBytes>(1);
  const wire::Nonce n2 = filled<wire::kNonceBytes>(2);
  wire::Nonce n1_flipped = n1;
  n1_flipped[31] ^= std::byte{1};
  const auto proof = [](std::string_view token, std::string_view role, std::uint64_t session,
                        const wire::Nonce& a, const wire::Nonce& b) {
    return wire::session_proof(token, role, session, a, b);
  };
  const wire::Proof base = proof("tok", wire::kServerRole, 9, n1, n2);

  CHECK(proof("tok", wire::kServerRole, 9, n1, n2) == base);
  CHECK(wire::proofs_equal(proof("tok", wire::kServerRole, 9, n1, n2), base));
  const std::vector<wire::Proof> others = {
      proof("tok", wire::kClientRole, 9, n1, n2),   // role
      proof("tok", wire::kServerRole, 10, n1, n2),  // session
      proof("tok", wire::kServerRole, std::uint64_t{9} << 56, n1, n2),
      proof("tok", wire::kServerRole, 9, n2, n1),          // nonce order
      proof("tok", wire::kServerRole, 9, n1_flipped, n2),  // one bit of a nonce
      proof("tok", wire::kServerRole, 9, n1, n1),
      proof("tok2", wire::kServerRole, 9, n1, n2),  // token
      proof("", wire::kServerRole, 9, n1, n2),
  };
  for (std::size_t i = 0; i < others.size(); ++i) {
    INFO("variant " << i);
    CHECK(others[i] != base);
    CHECK_FALSE(wire::proofs_equal(others[i], base));
  }
}

TEST_CASE("nonces and session ids are fresh", "[remote][remote-wire]") {
  const wire::Nonce a = wire::random_nonce();
  const wire::Nonce b = wire::random_nonce();
  CHECK(a != b);
  CHECK(a != wire::Nonce{});
  const std::uint64_t s = wire::random_session_id();
  const std::uint64_t t = wire::random_session_id();
  CHECK(s != 0);
  CHECK(t != 0);
  CHECK(s != t);
}

}  // namespace simpler_test_remote_wire
