// Tests for the args blob codec: [int32 T][int32 S][T x ContinuousTensor][S x uint64].
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "simpler/args_blob.hpp"
#include "simpler/error.hpp"
#include "simpler/task_args.hpp"
#include "simpler/types.hpp"
#include "support/matchers.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_args_blob {

using simpler::ContinuousTensor;
using simpler::DataType;
using simpler::TaskArgs;
using simpler::TaskArgsView;
using simpler::TensorArgType;
using simpler::TransportError;
using simpler::UsageError;

namespace {

using simpler::testing::WhatContains;

constexpr std::size_t kBufBytes = 1024;
constexpr std::byte kSentinel{0xA5};

ContinuousTensor tensor_n(std::uint32_t n) {
  ContinuousTensor t;
  t.data = 0x7000'0000ULL + std::uint64_t{n} * 0x400;
  t.ndims = 1 + n % 5;
  for (std::uint32_t d = 0; d < t.ndims; ++d) t.shapes[d] = n + d + 1;
  t.dtype = static_cast<DataType>(n % simpler::kDataTypeCount);
  t.child_memory = static_cast<std::uint8_t>(n % 2);
  return t;
}

TaskArgs make_args(std::uint32_t tensors, std::uint32_t scalars) {
  TaskArgs a;
  for (std::uint32_t i = 0; i < tensors; ++i) a.add_tensor(tensor_n(i), TensorArgType::InOut);
  for (std::uint32_t i = 0; i < scalars; ++i) {
    a.add_scalar(0xFEED'0000'0000'0000ULL + i * 0x1'0000'0001ULL);
  }
  return a;
}

void put_i32(std::byte* p, std::int32_t v) {
  std::memcpy(p, &v, sizeof v);
}

// Encodes `a` into `buf` and checks the round trip: counts, values and that the decoded view
// points into `buf` where the layout says.
void check_round_trip(const TaskArgs& a, std::byte* buf) {
  const TaskArgsView src = a.view();
  const std::size_t expected = 8 + 40 * static_cast<std::size_t>(src.tensor_count) +
                               8 * static_cast<std::size_t>(src.scalar_count);
  REQUIRE(simpler::args_blob_size(src) == expected);
  REQUIRE(expected <= kBufBytes);

  const std::size_t written = simpler::encode_args_blob(src, std::span<std::byte>(buf, kBufBytes));
  REQUIRE(written == expected);

  std::int32_t t = -1;
  std::int32_t s = -1;
  std::memcpy(&t, buf, 4);
  std::memcpy(&s, buf + 4, 4);
  CHECK(t == src.tensor_count);
  CHECK(s == src.scalar_count);

  const TaskArgsView v = simpler::decode_args_blob(std::span<const std::byte>(buf, written));
  REQUIRE(v.tensor_count == src.tensor_count);
  REQUIRE(v.scalar_count == src.scalar_count);
  CHECK(static_cast<const void*>(v.tensors) == static_cast<const void*>(buf + 8));
  CHECK(static_cast<const void*>(v.scalars) ==
        static_cast<const void*>(buf + 8 + 40 * static_cast<std::size_t>(t)));
  for (std::int32_t i = 0; i < v.tensor_count; ++i) {
    CHECK(std::memcmp(&v.tensor(i), &src.tensor(i), sizeof(ContinuousTensor)) == 0);
  }
  for (std::int32_t i = 0; i < v.scalar_count; ++i) CHECK(v.scalar(i) == src.scalar(i));

  // Bytes after the blob are untouched.
  for (std::size_t i = written; i < kBufBytes; ++i) {
    if (buf[i] != kSentinel) FAIL("encode wrote past the blob at byte " << i);
  }
}

// Writes a valid blob of `a` into `buf` and returns its size.
std::size_t encode(const TaskArgs& a, std::byte* buf) {
  return simpler::encode_args_blob(a.view(), std::span<std::byte>(buf, kBufBytes));
}

}  // namespace

TEST_CASE("args_blob_size is 8 + 40 per tensor + 8 per scalar", "[args-blob]") {
  TaskArgsView v;
  CHECK(simpler::args_blob_size(v) == 8);
  v.tensor_count = 3;
  CHECK(simpler::args_blob_size(v) == 128);
  v.scalar_count = 5;
  CHECK(simpler::args_blob_size(v) == 168);
  v.tensor_count = 0;
  CHECK(simpler::args_blob_size(v) == 48);
  STATIC_REQUIRE(simpler::kArgsBlobHeaderBytes == 8);
}

TEST_CASE("an args blob with no tensors and no scalars round-trips", "[args-blob]") {
  alignas(8) std::byte buf[kBufBytes];
  std::fill(std::begin(buf), std::end(buf), kSentinel);
  check_round_trip(TaskArgs{}, buf);
}

TEST_CASE("an args blob with tensors only round-trips", "[args-blob]") {
  alignas(8) std::byte buf[kBufBytes];
  std::fill(std::begin(buf), std::end(buf), kSentinel);
  check_round_trip(make_args(6, 0), buf);
}

TEST_CASE("an args blob with scalars only round-trips", "[args-blob]") {
  alignas(8) std::byte buf[kBufBytes];
  std::fill(std::begin(buf), std::end(buf), kSentinel);
  check_round_trip(make_args(0, 7), buf);
}

TEST_CASE("an args blob with tensors and scalars round-trips", "[args-blob]") {
  for (std::uint32_t t : {1u, 4u, 9u}) {
    for (std::uint32_t s : {1u, 4u, 11u}) {
      INFO(t << " tensors, " << s << " scalars");
      alignas(8) std::byte buf[kBufBytes];
      std::fill(std::begin(buf), std::end(buf), kSentinel);
      check_round_trip(make_args(t, s), buf);
    }
  }
}

TEST_CASE("a decoded blob in a exactly-sized buffer is accepted", "[args-blob]") {
  const TaskArgs a = make_args(2, 3);
  alignas(8) std::byte buf[kBufBytes];
  const std::size_t n = encode(a, buf);
  const TaskArgsView v = simpler::decode_args_blob(std::span<const std::byte>(buf, n));
  CHECK(v.tensor_count == 2);
  CHECK(v.scalar_count == 3);
  // Trailing bytes beyond the blob are allowed (the wire may pad).
  const TaskArgsView w = simpler::decode_args_blob(std::span<const std::byte>(buf, n + 16));
  CHECK(w.tensor_count == 2);
  CHECK(w.scalar_count == 3);
}

TEST_CASE("encoding into a too-small buffer throws UsageError and writes nothing", "[args-blob]") {
  const TaskArgs a = make_args(3, 2);
  const std::size_t need = simpler::args_blob_size(a.view());
  REQUIRE(need == 8 + 120 + 16);
  for (std::size_t have : {std::size_t{0}, std::size_t{7}, std::size_t{8}, need - 1}) {
    INFO("buffer of " << have << " bytes");
    alignas(8) std::byte buf[kBufBytes];
    std::fill(std::begin(buf), std::end(buf), kSentinel);
    REQUIRE_THROWS_MATCHES(simpler::encode_args_blob(a.view(), std::span<std::byte>(buf, have)),
                           UsageError, WhatContains(std::to_string(need)));
    const bool untouched =
        std::all_of(std::begin(buf), std::end(buf), [](std::byte b) { return b == kSentinel; });
    CHECK(untouched);
  }
  alignas(8) std::byte exact[kBufBytes];
  CHECK(simpler::encode_args_blob(a.view(), std::span<std::byte>(exact, need)) == need);
}

TEST_CASE("a blob shorter than its 8-byte header is rejected", "[args-blob]") {
  alignas(8) std::byte buf[16]{};
  for (std::size_t n = 0; n < 8; ++n) {
    INFO(n << " bytes");
    REQUIRE_THROWS_MATCHES(simpler::decode_args_blob(std::span<const std::byte>(buf, n)),
                           TransportError, WhatContains("header"));
  }
  CHECK_NOTHROW(simpler::decode_args_blob(std::span<const std::byte>(buf, 8)));
}

TEST_CASE("a blob in a misaligned buffer is rejected", "[args-blob]") {
  alignas(8) std::byte buf[64]{};  // all zero: a valid empty blob wherever it starts
  REQUIRE_THROWS_MATCHES(simpler::decode_args_blob(std::span<const std::byte>(buf + 4, 16)),
                         TransportError, WhatContains("aligned"));
  REQUIRE_THROWS_MATCHES(simpler::decode_args_blob(std::span<const std::byte>(buf + 1, 16)),
                         TransportError, WhatContains("aligned"));
  CHECK_NOTHROW(simpler::decode_args_blob(std::span<const std::byte>(buf + 8, 16)));
}

TEST_CASE("a blob with a negative tensor count is rejected", "[args-blob]") {
  alignas(8) std::byte buf[kBufBytes]{};
  put_i32(buf, -1);
  put_i32(buf + 4, 0);
  REQUIRE_THROWS_MATCHES(simpler::decode_args_blob(std::span<const std::byte>(buf, kBufBytes)),
                         TransportError, WhatContains("negative"));
  put_i32(buf, std::numeric_limits<std::int32_t>::min());
  REQUIRE_THROWS_MATCHES(simpler::decode_args_blob(std::span<const std::byte>(buf, kBufBytes)),
                         TransportError, WhatContains("negative"));
}

TEST_CASE("a blob with a negative scalar count is rejected", "[args-blob]") {
  alignas(8) std::byte buf[kBufBytes]{};
  put_i32(buf, 0);
  put_i32(buf + 4, -3);
  REQUIRE_THROWS_MATCHES(simpler::decode_args_blob(std::span<const std::byte>(buf, kBufBytes)),
                         TransportError, WhatContains("negative"));
}

TEST_CASE("a blob whose counts run past the buffer is rejected without overflow", "[args-blob]") {
  alignas(8) std::byte buf[kBufBytes]{};
  const auto decode = [&buf] {
    return simpler::decode_args_blob(std::span<const std::byte>(buf, kBufBytes));
  };
  struct Case {
    std::int32_t t;
    std::int32_t s;
  };
  constexpr std::int32_t kMax = std::numeric_limits<std::int32_t>::max();
  for (const Case c : {Case{26, 0}, Case{0, 128}, Case{25, 3}, Case{kMax, 0}, Case{0, kMax},
                       Case{kMax, kMax}, Case{1, kMax}}) {
    INFO("T=" << c.t << " S=" << c.s);
    put_i32(buf, c.t);
    put_i32(buf + 4, c.s);
    REQUIRE_THROWS_MATCHES(decode(), TransportError, WhatContains("holds only"));
  }
  // 25 tensors of zeros would fit size-wise (8 + 1000 <= 1024), so the size check is exact:
  // with 2 scalars the blob is 1024 bytes and only the zero tensors are the defect.
  put_i32(buf, 25);
  put_i32(buf + 4, 2);
  REQUIRE_THROWS_MATCHES(decode(), TransportError, WhatContains("ndims"));
}

TEST_CASE("a truncated blob is rejected", "[args-blob]") {
  for (const auto& [t, s] : {std::pair{3u, 2u}, std::pair{2u, 0u}, std::pair{0u, 4u}}) {
    INFO(t << " tensors, " << s << " scalars");
    alignas(8) std::byte buf[kBufBytes];
    const std::size_t n = encode(make_args(t, s), buf);
    CHECK_NOTHROW(simpler::decode_args_blob(std::span<const std::byte>(buf, n)));
    REQUIRE_THROWS_MATCHES(simpler::decode_args_blob(std::span<const std::byte>(buf, n - 1)),
                           TransportError, WhatContains("holds only"));
  }
}

TEST_CASE("a blob holding a tensor with 0 or 6 dimensions is rejected", "[args-blob]") {
  for (std::uint32_t ndims : {0u, 6u}) {
    INFO("ndims " << ndims);
    alignas(8) std::byte buf[kBufBytes];
    const std::size_t n = encode(make_args(3, 1), buf);
    ContinuousTensor bad = tensor_n(1);
    bad.ndims = ndims;
    std::memcpy(buf + 8 + 40, &bad, sizeof bad);  // tensor 1
    REQUIRE_THROWS_MATCHES(simpler::decode_args_blob(std::span<const std::byte>(buf, n)),
                           TransportError, WhatContains("tensor 1"));
    REQUIRE_THROWS_MATCHES(simpler::decode_args_blob(std::span<const std::byte>(buf, n)),
                           TransportError, WhatContains("ndims"));
  }
}

TEST_CASE("a blob holding a tensor with dtype 200 is rejected", "[args-blob]") {
  alignas(8) std::byte buf[kBufBytes];
  const std::size_t n = encode(make_args(2, 0), buf);
  ContinuousTensor bad = tensor_n(1);
  bad.dtype = static_cast<DataType>(200);
  std::memcpy(buf + 8 + 40, &bad, sizeof bad);
  REQUIRE_THROWS_MATCHES(simpler::decode_args_blob(std::span<const std::byte>(buf, n)),
                         TransportError, WhatContains("dtype"));
  REQUIRE_THROWS_MATCHES(simpler::decode_args_blob(std::span<const std::byte>(buf, n)),
                         TransportError, WhatContains("200"));
}

TEST_CASE("a blob holding a tensor with a stray extent past ndims is rejected", "[args-blob]") {
  alignas(8) std::byte buf[kBufBytes];
  const std::size_t n = encode(make_args(1, 0), buf);  // tensor 0 has ndims 1
  ContinuousTensor bad = tensor_n(0);
  bad.shapes[3] = 9;
  std::memcpy(buf + 8, &bad, sizeof bad);
  REQUIRE_THROWS_MATCHES(simpler::decode_args_blob(std::span<const std::byte>(buf, n)),
                         TransportError, WhatContains("shapes[3]"));
}

TEST_CASE("encoding a hand-built view with a negative count is rejected", "[args-blob]") {
  alignas(8) std::byte buf[64] = {};
  simpler::TaskArgsView v;
  v.tensor_count = -1;
  v.scalar_count = 5;
  REQUIRE_THROWS_AS(simpler::encode_args_blob(v, buf), simpler::UsageError);
  v.tensor_count = 0;
  v.scalar_count = -3;
  REQUIRE_THROWS_AS(simpler::encode_args_blob(v, buf), simpler::UsageError);
}

}  // namespace simpler_test_args_blob
